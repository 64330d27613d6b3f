"""`podium train` in every state its output folder can be in, with real TRL steps.

The policy is the tiny Llama and its sampling is replaced by fixed completions (one right
plan, one wrong: reward spread, so every step moves the weights), so a step takes a second or
two; everything else is `podium train` as a user runs it. One rule (podium.train.runfolder):
without `--resume` a folder that holds a run is refused with a message naming what `--resume`
does there, and `--resume` works in every state: from the newest complete checkpoint, or, with
none, from step 1 with what was there moved into attempt-K/.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("trl")

from distributed_step import RIGHT, WRONG, FixedRollout  # noqa: E402
from support import tiny_llama  # noqa: E402

import podium.train.trainer as trainer_module  # noqa: E402
from podium.cli.main import app  # noqa: E402
from podium.testing.recipe import sums_recipe  # noqa: E402

GRPO = """max_steps = 2
questions_per_step = 1
generations = 4
max_completion_tokens = 32
learning_rate = 1e-2
lr_scheduler = "constant"
warmup_ratio = 0.0
save_steps = 1
save_total_limit = 2"""


@pytest.fixture(scope="module", autouse=True)
def fixed_completions():
    build = trainer_module.build

    def fixed(*args, **kwargs):
        job = build(*args, **kwargs)
        job.trainer.rollout_func = FixedRollout([RIGHT, WRONG], job.trainer.processing_class)
        return job

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer_module, "build", fixed)
        mp.setenv("COLUMNS", "400")  # messages on one line
        yield


@pytest.fixture(scope="module")
def recipe(tmp_path_factory, tokenizer) -> Path:
    root = tmp_path_factory.mktemp("runfolder")
    tiny_llama(tokenizer).save_pretrained(root / "tiny")
    tokenizer.save_pretrained(root / "tiny")
    return sums_recipe(root, 6, model=root / "tiny", grpo=GRPO,
                       run='prompt = "compact"\nfewshots = "none"\nmax_steps = 1')


def podium_train(config: Path, out: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["train", "--config", str(config), "--set",
                                      f"output.dir={out}", *args], catch_exceptions=False)
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture(scope="module")
def finished(recipe) -> tuple[Path, str]:
    """A 2-step run trained with --resume into a folder that did not exist."""
    out = recipe.parent / "finished"
    code, printed = podium_train(recipe, out, "--resume")
    assert code == 0, printed
    return out, printed


@pytest.fixture
def copy(finished, tmp_path) -> Path:
    """A copy of the finished run's folder to change."""
    return Path(shutil.copytree(finished[0], tmp_path / "out"))


def reward_steps(out: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()
            if '"reward"' in x]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): digest(p) for p in sorted(out.rglob("*")) if p.is_file()}


def test_resume_in_an_empty_folder_starts_at_step_1(finished):
    out, printed = finished
    assert f"resume nothing to continue in {out}: starting at step 1" in printed
    assert reward_steps(out) == [1, 2]
    assert all((out / f"checkpoint-{n}" / "optimizer.pt").is_file() for n in (1, 2))
    # final/ holds the last checkpoint's weights: one file on disk, under two names
    assert os.path.samefile(out / "final" / "model.safetensors",
                            out / "checkpoint-2" / "model.safetensors")
    assert not (out / "final" / "optimizer.pt").exists()


def test_a_finished_run_is_refused_with_or_without_resume_and_left_as_it_was(recipe, copy):
    """Both name the one command that goes on from there (a higher grpo.max_steps with
    --resume; transformers would take a step past max_steps) or a new folder."""
    before = listing(copy)
    code, printed = podium_train(recipe, copy)
    assert code == 2, printed
    assert (f"{copy} holds a training run already (checkpoint-1, checkpoint-2, metrics.jsonl"
            in printed)
    further = ("pass --resume with a higher grpo.max_steps (--set grpo.max_steps=...) to train "
               "it further, or train into a new folder (--set output.dir=...).")
    assert f"it finished at step 2: {further}" in printed
    code, printed = podium_train(recipe, copy, "--resume")
    assert code == 2, printed
    assert (f"--resume: the run in {copy} finished at step 2 (checkpoint-2; grpo.max_steps = "
            f"2): {further}") in printed
    assert listing(copy) == before  # nothing touched


def test_a_finished_run_trains_further_and_never_writes_through_its_shared_weights(recipe,
                                                                                  copy):
    """final/ shared its file with checkpoint-2; writing the new final/ leaves checkpoint-2's
    weights as they were, and the new final/ shares checkpoint-3's."""
    step2 = digest(copy / "checkpoint-2" / "model.safetensors")
    code, printed = podium_train(recipe, copy, "--resume", "--set", "grpo.max_steps=3")
    assert code == 0, printed
    assert f"resume from {copy / 'checkpoint-2'}" in printed
    assert reward_steps(copy) == [1, 2, 3]
    assert sorted(p.name for p in copy.glob("checkpoint-*")) == ["checkpoint-2",
                                                                 "checkpoint-3"]  # limit 2
    assert digest(copy / "checkpoint-2" / "model.safetensors") == step2
    assert digest(copy / "final" / "model.safetensors") != step2  # step 3 moved the weights
    assert os.path.samefile(copy / "final" / "model.safetensors",
                            copy / "checkpoint-3" / "model.safetensors")


def test_a_run_killed_before_its_first_checkpoint_starts_again_and_keeps_its_files(recipe,
                                                                                   copy):
    for gone in ("checkpoint-1", "checkpoint-2", "final"):
        shutil.rmtree(copy / gone)
    before = listing(copy)
    code, printed = podium_train(recipe, copy)
    assert code == 2, printed
    assert (f"{copy} holds a training run already (metrics.jsonl, transcripts.jsonl): pass "
            "--resume to start it again at step 1 (it has no complete checkpoint; what it "
            f"holds is moved to {copy / 'attempt-1'} first)") in printed
    assert listing(copy) == before
    code, printed = podium_train(recipe, copy, "--resume", "--set", "grpo.max_steps=1")
    assert code == 0, printed
    assert (f"resume no complete checkpoint in {copy}: starting at step 1; what the earlier "
            f"attempt left is in {copy / 'attempt-1'}") in printed
    assert {f"attempt-1/{name}": h for name, h in before.items()} == {
        name: h for name, h in listing(copy).items() if name.startswith("attempt-1/")}
    assert reward_steps(copy) == [1]  # the new attempt's records alone
    assert (copy / "final" / "model.safetensors").is_file()


def test_a_run_killed_while_saving_resumes_from_the_last_whole_checkpoint(recipe, copy):
    """Killed while checkpoint-2 was being saved: it has no trainer_state.json (written last),
    so --resume continues from checkpoint-1 and trains step 2 again, logged once."""
    shutil.rmtree(copy / "final")
    (copy / "checkpoint-2" / "trainer_state.json").unlink()
    code, printed = podium_train(recipe, copy)
    assert code == 2, printed
    assert "pass --resume to continue it from checkpoint-1, or train into a new folder" in printed
    code, printed = podium_train(recipe, copy, "--resume")
    assert code == 0, printed
    assert (f"resume from {copy / 'checkpoint-1'}; what was logged after step 1 is dropped: "
            "those steps are trained again; checkpoint-2 passed over: its save was cut off "
            "(no trainer_state.json)") in printed
    assert reward_steps(copy) == [1, 2]
    assert (copy / "checkpoint-2" / "trainer_state.json").is_file()
    assert os.path.samefile(copy / "final" / "model.safetensors",
                            copy / "checkpoint-2" / "model.safetensors")
