"""`podium train`: real TRL GRPO steps on CPU with the bundled SmolLM2, against function workers.

The policy is prompted with a router prompt registered here: the subtask and access list are
prefilled and the model writes only the worker id, so that rollouts parse often and a step has
reward spread (id 1, the adder, is right; id 0 answers 0; any other id is a format error). The
runs are seeded, so they are the same on every run on the same machine.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("trl")

from support import podium, tiny_llama  # noqa: E402

from podium.cli.main import app  # noqa: E402
from podium.conductor.prompt import PROMPTS, ConductorPrompt  # noqa: E402
from podium.testing.recipe import sums_pool, sums_recipe  # noqa: E402

ROUTER = ConductorPrompt(
    name="router-test",
    system="You pick which model answers the question.",
    template="Question: {question}\n\nModels:\n{models}\n{examples}\nPick one model id.",
    prefill='subtasks = ["Answer the question."]\naccess_list = [[]]\nmodel_id = [',
    recursion=PROMPTS["v1"].recursion,
    recursion_prefill=PROMPTS["v1"].recursion_prefill,
)

@pytest.fixture(scope="module", autouse=True)
def router_prompt():
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(PROMPTS, ROUTER.name, ROUTER)
        yield


# The pool's Conductor: as trained (4 completion tokens), asked for a few more, not the
# 256 a Conductor without max_tokens may write
CONDUCTOR = 'backend = "embedded"\nmax_tokens = 12'


def setup(tmp_path: Path, zero: str = "zero", adder: str = "adder") -> Path:
    """The sums recipe (podium.testing.recipe): 12 questions, the router prompt, 2 steps of
    one question x 4 rollouts, a checkpoint each step."""
    return sums_recipe(
        tmp_path, 12, zero=zero, adder=adder, conductor=CONDUCTOR,
        run='prompt = "router-test"\nfewshots = "none"\nmax_steps = 1',
        grpo="""max_steps = 2
questions_per_step = 1
generations = 4
max_completion_tokens = 4
learning_rate = 1e-4
save_steps = 1
temperature = 1.2""", output="transcripts_per_step = 4")


def podium_train(*args: str) -> str:
    result = CliRunner().invoke(app, ["train", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_dry_run_prints_the_plan_and_trains_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    output = podium_train("--config", str(setup(tmp_path)), "--dry-run",
                          "--set", "grpo.generations=8")
    for part in ("policy", "134.5M parameters", "0 zero, 1 adder", "12 rows",
                 "1 questions x 8 rollouts", "reward      paper"):
        assert part in output, output
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_dry_run_refuses_sizes_past_their_limits_at_once(tmp_path):
    """A step of 1e9 x 1e9 rollouts, and every other size, count, seed or timeout past what a
    run can be built with, is refused by the real CLI at once with the key and its limit
    named: not built (a step that size grew a dry run past 1.7 GB and never ended)."""
    config = (str(setup(tmp_path)), "--set", "run.prompt=v1")  # router-test is this process's
    huge = podium("train", "--config", *config, "--dry-run",
                  "--set", "grpo.generations=1e9", "--set", "grpo.questions_per_step=1e9",
                  timeout=60)
    assert huge.returncode == 2, huge.stdout + huge.stderr
    message = flat(huge.stderr)
    assert "'grpo.generations': Input should be less than or equal to 1024" in message
    assert "'grpo.questions_per_step': Input should be less than or equal to 1024" in message
    assert "Traceback" not in huge.stderr + huge.stdout
    step = podium("train", "--config", *config, "--dry-run",
                  "--set", "grpo.generations=512", "--set", "grpo.questions_per_step=512",
                  timeout=60)
    assert step.returncode == 2, step.stdout + step.stderr
    assert "more than the 65,536 a step may have" in flat(step.stderr)
    limits = {"grpo.max_steps": ("1e12", "1000000"), "grpo.warmup_steps": ("1e12", "1000000"),
              "grpo.max_completion_tokens": ("1e9", "131072"),
              "grpo.per_device_batch": ("1e9", "65536"), "grpo.processes": ("1e9", "65536"),
              "grpo.learning_rate": ("1e300", "1"), "grpo.adam_epsilon": ("2.0", "1"),
              "grpo.seed": ("-1", "0"), "grpo.collective_timeout_s": ("1e15", "604800")}
    sets = [arg for key, (value, _) in limits.items() for arg in ("--set", f"{key}={value}")]
    each = podium("train", "--config", *config, "--dry-run", *sets, timeout=60)
    assert each.returncode == 2, each.stdout + each.stderr
    message = flat(each.stderr)
    for key, (_, limit) in limits.items():
        assert re.search(rf"'{re.escape(key)}': Input should be [a-z ]+ {limit}\b", message), key
    assert not (tmp_path / "out").exists()


HELDOUT = """
[heldout]
task = "jsonl:{data}"
split = "all"
n = 3
every = 1
options = {{ grader = "numeric" }}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """Two GRPO steps, checkpointed every step, with a held-out evaluation after each; the
    folder holds pool.toml, out/ and what `podium train` printed (output.txt)."""
    tmp_path = tmp_path_factory.mktemp("trained")
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps({"question": f"What is {i} + {i + 5}?",
                                        "answer": str(2 * i + 5)}) + "\n" for i in range(3)))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        config = setup(tmp_path)
        config.write_text(config.read_text() + HELDOUT.format(data=held))
        (tmp_path / "output.txt").write_text(podium_train("--config", str(config)))
    return tmp_path


def test_grpo_steps_train_the_policy_and_checkpoint_it(trained):
    from podium.train.model import resolve_model

    out = trained / "out"
    logged = [m for m in metrics(out) if "reward" in m]
    assert [m["step"] for m in logged] == [1, 2]
    assert any(m["reward_std"] > 0 for m in logged), logged  # the workers made a difference
    for m in logged:
        assert 0 <= m["podium/correct"] <= 1 and "podium/format_error" in m
        assert m["podium/infra_dropped"] == 0
    base, final = weights(Path(resolve_model("smollm2"))), weights(out / "final")
    assert [k for k in base if not (base[k] == final[k]).all()], "no parameter moved"
    transcripts = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    assert {t["step"] for t in transcripts} == {1, 2}  # the steps of metrics.jsonl
    assert all("completion" in t and "reward" in t for t in transcripts)
    # save_total_limit 1 (the default): the newest checkpoint alone, its weights final/'s file
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    assert (out / "final" / "model.safetensors").samefile(out / "checkpoint-2" /
                                                          "model.safetensors")
    for folder in ("checkpoint-2", "final"):
        card = json.loads((out / folder / "podium-conductor.json").read_text())
        assert [w["name"] for w in card["pool"]] == ["zero", "adder"]
        assert card["run"]["prompt"] == "router-test"
        assert (out / folder / "README.md").is_file()


def test_a_run_prints_a_line_a_step_and_leaves_its_curve_best_and_one_card(trained):
    out, printed = trained / "out", (trained / "output.txt").read_text()
    lines = re.findall(r"step \d+/\d+ · .*", printed)
    assert [line.split(" · ")[0] for line in lines] == ["step 1/2", "step 2/2"], printed
    for line in lines:
        assert "reward" in line and "valid" in line and "s/step" in line and "held-out" in line
    assert "{'loss'" not in printed and "'reward'" not in printed  # TRL's dicts are off
    held = [m for m in metrics(out) if "heldout/accuracy" in m]
    # the untrained point first (step 0, on its own line), then the trained steps
    assert [m["step"] for m in held] == [0, 1, 2] and all(0 <= m["heldout/accuracy"] <= 1
                                                         for m in held)
    assert "reward" not in held[0] and re.search(r"untrained: held-out [\d.]+%", printed)
    # 3 held-out questions: 1 to 3 different plans among those that parsed
    assert all(m["heldout/distinct_plans"] in (1, 2, 3) or m["heldout/valid"] == 0
               for m in held)
    best = max(m["heldout/accuracy"] for m in held[1:])  # best/ keeps a trained step
    card = json.loads((out / "best" / "podium-conductor.json").read_text())
    assert card["heldout"]["best"] == best and card["heldout"]["n"] == 3
    newest = json.loads((out / "final" / "podium-conductor.json").read_text())["heldout"]
    assert (newest["step"], newest["accuracy"]) == (2, held[-1]["heldout/accuracy"])
    assert weights(out / "best")  # the model alone: no optimizer state
    assert not (out / "best" / "optimizer.pt").exists()
    assert not (out / "final" / "training_args.bin").exists()
    readme = (out / "final" / "README.md").read_text()
    assert "Held-out accuracy" in readme and "podium serve --conductor" in readme
    assert "smollm2" in readme and "adder" in readme
    assert not (out / "README.md").exists()  # TRL's card (naming no base model) is not written
    png = (out / "learning_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert list((out / "runs").glob("*/events.out.tfevents.*"))  # TensorBoard by default
    again = CliRunner().invoke(app, ["train", "plot", str(out), str(out), "--out",
                                     str(trained / "two.png")], catch_exceptions=False)
    assert again.exit_code == 0 and (trained / "two.png").stat().st_size > 10_000


def ask(*args: str) -> tuple[int, str]:
    """(exit code, stdout), or the whole output when the command failed."""
    result = CliRunner().invoke(app, ["ask", "What is 2 + 3?", "--json", "--no-cache", *args],
                                catch_exceptions=False)
    return result.exit_code, result.stdout if result.exit_code in (0, 1) else result.output


def test_the_trained_conductor_answers_with_its_pool_only(trained, monkeypatch):
    monkeypatch.chdir(trained)
    final = str(trained / "out" / "final")
    code, output = ask("--conductor", final, "--pool", "pool.toml")
    data = json.loads(output)
    turn = data["conductor"][0]
    assert turn["messages"][1]["content"].startswith("Question:")  # the card's prompt
    assert turn["completion"] and turn["prefill"] == "continued"
    assert code == (0 if data["answer"] is not None else 1)
    assert data["used"]["calls"] >= 1
    swapped = trained / "swapped.toml"
    swapped.write_text(sums_pool(CONDUCTOR, zero="adder", adder="zero")
                       .replace('name = "zero"', 'name = "tmp"')
                       .replace('name = "adder"', 'name = "zero"')
                       .replace('name = "tmp"', 'name = "adder"'))
    code, output = ask("--conductor", final, "--pool", str(swapped))
    assert code == 2 and "trained on another pool" in output and "id 0" in output
    code, output = ask("--conductor", final, "--pool", str(swapped), "--allow-pool-mismatch")
    assert code in (0, 1) and json.loads(output)["conductor"][0]["completion"]


def test_export_to_gguf_matches_the_checkpoint_and_runs_embedded(trained, monkeypatch):
    import numpy as np
    import torch
    from llama_cpp import Llama
    from transformers import AutoModelForCausalLM

    monkeypatch.chdir(trained)
    final, gguf = trained / "out" / "final", trained / "conductor.gguf"
    result = CliRunner().invoke(app, ["export", str(final), "--gguf", str(gguf), "--type",
                                      "f32"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(gguf.with_suffix(".podium-conductor.json").read_text())["pool"]
    prompt = "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\nmodel_id = ["
    llm = Llama(model_path=str(gguf), logits_all=True, verbose=False, n_ctx=256)
    tokens = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    llm.eval(tokens)
    ours = np.array(llm.scores[:len(tokens)])
    model = AutoModelForCausalLM.from_pretrained(str(final), dtype=torch.float32)
    with torch.no_grad():
        theirs = model(torch.tensor([tokens])).logits[0].numpy()
    assert np.abs(ours - theirs).max() < 0.1  # logits span about +-40
    assert (ours.argmax(-1) == theirs.argmax(-1)).mean() == 1.0
    # the GGUF runs as the Conductor on the embedded backend, with its card's prompt
    code, output = ask("--conductor", str(gguf), "--pool", "pool.toml")
    turn = json.loads(output)["conductor"][0]
    assert turn["messages"][1]["content"].startswith("Question:") and turn["completion"]

    # a card that cannot be written (a folder in its place): nothing is exported, and nothing
    # half-written is left for --conductor to find
    blocked = trained / "blocked.gguf"
    blocked.with_suffix(".podium-conductor.json").mkdir()
    result = CliRunner().invoke(app, ["export", str(final), "--gguf", str(blocked)])
    assert result.exit_code == 2 and "nothing was exported" in result.output, result.output
    assert not blocked.exists() and not list(trained.glob(".*.partial"))


@pytest.mark.slow  # a further GRPO run; `make test-all`
def test_the_recursion_fine_tune_continues_half_of_each_group(tmp_path, monkeypatch):
    """Of 4 rollouts per question, 2 are round 0 and 2 continue them into a recursion round
    whose prompt shows the round-0 answer; both kinds are run and rewarded."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    podium_train("--config", str(setup(tmp_path)), "--set", "grpo.max_steps=1",
                 "--set", "recursion.fraction=0.5", "--set", "grpo.max_completion_tokens=24",
                 "--set", "output.transcripts_per_step=4")
    (logged,) = [m for m in metrics(out) if "reward" in m]
    decisions = {k.split("/")[-1] for k in logged if k.startswith("podium/recursion/")}
    assert decisions and decisions <= {"kept", "revised", "format_error", "failed",
                                       "kept_correct", "revised_correct",
                                       "format_error_correct", "failed_correct"}
    shares = [v for k, v in logged.items()
              if k.startswith("podium/recursion/") and not k.endswith("_correct")]
    assert sum(shares) == pytest.approx(1)
    transcripts = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    assert any(len(t["rounds"]) == 2 for t in transcripts)


@pytest.mark.slow  # a further GRPO run; `make test-all`
def test_training_resumes_from_the_last_checkpoint(trained, monkeypatch):
    """Resumed from checkpoint-2 after an attempt killed once it had logged step 3: step 3 is
    trained again, and only the resumed attempt's records of it are kept."""
    monkeypatch.chdir(trained)
    out = trained / "out"
    killed = {"step": 3, "reward": -1.0, "completion": "the killed attempt's"}
    for name in ("metrics.jsonl", "transcripts.jsonl"):
        with (out / name).open("a") as fh:
            fh.write(json.dumps(killed) + "\n")
    podium_train("--config", str(trained / "train.toml"), "--resume",
                 "--set", "grpo.max_steps=3")
    steps = [m["step"] for m in metrics(out) if "reward" in m]
    assert steps == [1, 2, 3]  # steps 1-2 were not run again, step 3 logged once
    assert killed not in metrics(out)
    transcripts = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    assert killed not in transcripts
    assert 0 < sum(t["step"] == 3 for t in transcripts) <= 4  # transcripts_per_step


@pytest.mark.slow  # a further GRPO run; `make test-all`
def test_rollouts_hit_by_an_outage_are_dropped(tmp_path, monkeypatch):
    """Every worker is down: a rollout that parses is touched by the outage and scores None
    (dropped); the others are format errors."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    podium_train("--config", str(setup(tmp_path, zero="down", adder="down")),
                 "--set", "grpo.max_steps=1", "--set", "grpo.generations=8",
                 "--set", "grpo.temperature=0.7")
    (logged,) = [m for m in metrics(out) if "reward" in m]
    assert logged["podium/infra_dropped"] > 0
    assert logged["podium/infra_dropped"] + logged["podium/format_error"] == pytest.approx(1)
    assert logged["podium/correct"] == 0


@pytest.mark.parametrize(("failed", "moves"), [(None, False), (0.0, True)])
def test_an_unscorable_reward_does_not_reach_the_gradient(tmp_path, caplog, tokenizer, failed,
                                                          moves):
    """TRL with the rewards podium hands it: half of each group right (1.0), half touched by an
    outage. Dropped (None), the outage leaves no reward spread, so no parameter moves; scored
    0 instead (on_infra_failure = "zero"), the same rollouts move the policy. TRL's warning
    that dumps the prompt of an unscored rollout is left out (podium counts them)."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from podium.train.trainer import UNSCORABLE, quiet_unscorable_warning

    quiet_unscorable_warning()

    model = tiny_llama(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def reward(prompts, completions, **kwargs):
        return [1.0 if i % 2 == 0 else failed for i in range(len(completions))]

    args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=4, learning_rate=1e-3,
                      beta=0.0, use_cpu=True, report_to="none", seed=0, save_strategy="no",
                      logging_steps=1)
    prompt = [{"role": "user", "content": "Say a number."}]
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args,
                          train_dataset=Dataset.from_list([{"prompt": prompt}] * 4),
                          processing_class=tokenizer)
    with caplog.at_level("WARNING"):
        trainer.train()
        # as accelerate words it when it knows the process rank
        logging.getLogger("trl.trainer.grpo_trainer").warning(f"[RANK 0] {UNSCORABLE} ...")
    moved = any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert moved is moves
    assert not [r for r in caplog.records if UNSCORABLE in r.getMessage()]
