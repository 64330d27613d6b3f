"""Rewards, sub-pools and the training config, on small hand-checked cases (no torch)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from podium.config import pool_from_dict
from podium.errors import ConfigError
from podium.outcome import Failure, Outcome, Usage
from podium.pipeline import Pipeline
from podium.scoring.base import Grade
from podium.train.config import (
    RewardSection,
    RolloutSection,
    SubpoolSection,
    VllmSection,
    apply_overrides,
    load_train_config,
    train_config_from_dict,
)
from podium.train.data import build_data, view_of
from podium.train.metrics import StepRecorder
from podium.train.reward import ConductorReward, reward_of
from podium.train.rollout.row import RolloutInfo, Row
from podium.train.rollout.settings import RolloutSettings
from podium.train.score import Scorer

POOL = pool_from_dict({  # the Conductor is never called: the policy writes the completions
    "conductor": {"backend": "function", "function": "podium.testing.workers:zero"},
    "workers": [{"name": n, "backend": "function", "function": f"podium.testing.workers:{f}"}
                for n, f in (("zero", "zero"), ("adder", "adder"), ("zero2", "zero"))],
    "run": {"cache": False, "fewshots": "none"},
})


def outcome(*, correct: bool = False, fmt: bool = False, failures: tuple = (),
            cause: Failure | None = None, cost: float | None = 0.0) -> Outcome:
    if fmt:
        cause = Failure("model", "parse:unparseable")
    grade = None if cause else Grade.of(correct, "x")
    usage = Usage(2, 10, 5, cost or 0.0, () if cost is not None else (("w", 2),))
    return Outcome(None if cause else "<answer>x</answer>", None if cause else 0, (),
                   (*failures, *([cause] if cause else [])), cause, usage, usage, grade=grade)


@pytest.mark.parametrize(("scheme", "expect"), [("paper", (0.0, 0.5, 1.0)),
                                                 ("code", (0.0, 0.5, 1.5))])
def test_reward_schemes(scheme, expect):
    spec = RewardSection(scheme=scheme)
    got = (reward_of(outcome(fmt=True), spec), reward_of(outcome(), spec),
           reward_of(outcome(correct=True), spec))
    assert got == expect


def test_infra_failures_are_dropped_or_zero():
    outage = Failure("worker", "transport", "down", "step 0")
    crashed = Failure("infra", "grader", "grader_error: sandbox", "grader")
    for o in (outcome(cause=outage), outcome(cause=crashed),
              outcome(correct=True, failures=(outage,))):  # an outage mid-workflow taints it
        assert reward_of(o, RewardSection()) is None
        assert reward_of(o, RewardSection(on_infra_failure="zero")) == 0.0
    empty = Failure("model", "empty", "the worker answered nothing", "step 0")
    assert reward_of(outcome(failures=(empty,)), RewardSection()) == 0.5  # the policy's doing


def test_the_cost_term():
    spec = RewardSection(cost_weight=0.1, cost_scale=0.01)
    assert reward_of(outcome(correct=True, cost=0.02), spec) == pytest.approx(1.0 - 0.2)
    assert reward_of(outcome(correct=True, cost=None), spec) == 1.0  # unknown cost: no term
    assert reward_of(outcome(correct=True, cost=0.02), RewardSection()) == 1.0  # off


def data_with(tmp_path: Path, subpool: SubpoolSection, settings=None):
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)})
                            + "\n" for i in range(30)))
    spec = train_config_from_dict({"data": {"tasks": [{"name": f"jsonl:{path}", "split": "all",
                                                       "options": {"grader": "numeric"}}]}})
    return build_data(spec.data, subpool, POOL, settings or POOL.run)


def shown_ids(row) -> list[int]:
    return [int(i) for i in re.findall(r"Model id (\d+)", row.messages[1]["content"])]


def test_sub_pools_are_sampled_stored_and_shown(tmp_path):
    spec = SubpoolSection(fraction=0.5, k_min=1, k_max=2, seed=3)
    data = data_with(tmp_path, spec)
    with_sub = [r for r in data.rows if r.workers]
    assert 5 < len(with_sub) < 25  # about half
    for row in data.rows:
        assert shown_ids(row) == list(row.workers or (0, 1, 2))  # original ids by default
        assert 1 <= len(row.workers or (0,)) <= 2 or not row.workers
    again = data_with(tmp_path, spec)
    assert [r.workers for r in again.rows] == [r.workers for r in data.rows]  # seeded
    groups = SubpoolSection(fraction=1.0, groups={"closed": (0, 2)}, group_prob=1.0)
    assert {r.workers for r in data_with(tmp_path, groups).rows} == {(0, 2)}


def test_reindexed_sub_pools_are_shown_as_0_to_k_minus_1(tmp_path):
    settings = POOL.run.model_copy(update={"subpool_ids": "reindexed"})
    data = data_with(tmp_path, SubpoolSection(fraction=1.0, k_min=2, k_max=2, seed=1), settings)
    for row in data.rows:
        assert shown_ids(row) == [0, 1]
        view = view_of(POOL, settings, row.workers)
        assert view.pool_indices() == list(row.workers)


def reward_for(tmp_path: Path, completions: list[str], workers: list[int],
               spec: RewardSection | None = None, *, explore_wrong: str = "keep",
               transcripts: Path | None = None, per_step: int = 2,
               log_metric=None, **kwargs) -> tuple[list, Row]:
    """The rewards of `completions` of the data's first row, shown `workers`, as TRL's call
    hands them over (the `row` column, the rollout's `podium_rollout`); the step's log is
    then published as the trainer publishes it."""
    data = data_with(tmp_path, SubpoolSection())
    row = replace(data.rows[0], workers=tuple(workers))
    recorder = StepRecorder(transcripts, per_step)

    async def go():
        async with Pipeline(POOL, settings=POOL.run.model_copy(update={"fallback": False})
                            ) as pipe:
            reward = ConductorReward(Scorer(pipe), data, [row], spec or RewardSection(),
                                     RolloutSettings(group=len(completions),
                                                     explore_wrong=explore_wrong), recorder)
            n = len(completions)
            return await reward(prompts=[""] * n, completions=completions,
                                completion_ids=[[1, 2]] * n, row=[0] * n, **kwargs)

    rewards = asyncio.run(go())
    recorder.publish(log_metric=log_metric)
    return rewards, row


def test_the_reward_runs_each_rollout_and_an_out_of_view_id_is_a_format_error(tmp_path):
    plans = ['1]\nsubtasks = ["Add"]\naccess_list = [[]]',  # the adder: right
             '0]\nsubtasks = ["Add"]\naccess_list = [[]]',  # answers 0: wrong
             "model_id = [1]\nsubtasks = [\"Add\"]\naccess_list = [[]]",  # the prefill, again
             "no lists at all"]
    # the messages end with the v1 prefill (prose), so the plans must spell the label out
    rewards, row = reward_for(tmp_path, ["model_id = [" + p for p in plans[:2]]
                              + plans[2:], [])
    assert rewards == [1.0, 0.5, 1.0, 0.0]
    # shown only worker 2 (original ids), a plan naming worker 1 is out of view: 0
    rewards, _ = reward_for(tmp_path, ['model_id = [1]\nsubtasks = ["Add"]\naccess_list = [[]]',
                                       'model_id = [2]\nsubtasks = ["Add"]\naccess_list = [[]]'],
                            [2])
    assert rewards == [0.0, 0.5]


def test_the_extra_call_penalty_prefers_the_shortest_right_plan(tmp_path):
    plans = ['model_id = [1]\nsubtasks = ["Add"]\naccess_list = [[]]',  # right in one call
             'model_id = [0, 1]\nsubtasks = ["Zero", "Add"]\naccess_list = [[], []]',  # two
             'model_id = [1, 0]\nsubtasks = ["Add", "Zero"]\naccess_list = [[], []]',  # wrong
             'model_id = [0]\nsubtasks = ["Zero"]\naccess_list = [[]]']  # wrong in one
    spec = RewardSection(extra_call_penalty=0.1)
    rewards, _ = reward_for(tmp_path, plans, [], spec)
    assert rewards == pytest.approx([1.0, 0.9, 0.5, 0.5])  # only right answers pay for calls
    assert reward_for(tmp_path, plans, [])[0] == [1.0, 1.0, 0.5, 0.5]  # off by default


def explored(*flags: bool) -> list[RolloutInfo]:
    """What the constrained rollout says of each completion with exploration on."""
    return [RolloutInfo(explored=f) for f in flags]


def test_wrong_explored_rollouts_are_unscorable_or_kept(tmp_path):
    """`rollout.explore_wrong = "drop"`: a drawn plan teaches only by succeeding; the policy's
    own rollouts are scored as ever. The metrics count the policy's rollouts and the explored
    ones apart."""
    right, wrong = ('model_id = [1]\nsubtasks = ["Add"]\naccess_list = [[]]',
                    'model_id = [0]\nsubtasks = ["Zero"]\naccess_list = [[]]')
    logged = {}
    rewards, _ = reward_for(tmp_path, [right, wrong, right, wrong], [], explore_wrong="drop",
                            podium_rollout=explored(False, False, True, True),
                            log_metric=logged.__setitem__)
    assert rewards == [1.0, 0.5, 1.0, None]
    assert logged["podium/correct"] == 0.5 and logged["podium/explored"] == 0.5
    assert logged["podium/explored_correct"] == 0.5
    kept, _ = reward_for(tmp_path, [right, wrong, right, wrong], [], explore_wrong="keep",
                         podium_rollout=explored(False, False, True, True))
    assert kept == [1.0, 0.5, 1.0, 0.5]


def test_transcripts_show_each_reward_value_of_own_and_explored_rollouts(tmp_path):
    """A step whose explored rollouts are right and whose own are all wrong still saves an own
    wrong one; the best comes first and a dropped rollout last."""
    right, wrong = ('model_id = [1]\nsubtasks = ["Add"]\naccess_list = [[]]',
                    'model_id = [0]\nsubtasks = ["Zero"]\naccess_list = [[]]')
    path = tmp_path / "transcripts.jsonl"
    rewards, _ = reward_for(tmp_path, [right, wrong, wrong, wrong, wrong, right], [],
                            explore_wrong="drop", transcripts=path, per_step=3,
                            podium_rollout=explored(True, True, True, False, False, True))
    assert rewards == [1.0, None, None, 0.5, 0.5, 1.0]
    saved = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(t["reward"], t.get("explored", False)) for t in saved] == [
        (1.0, True), (0.5, False), (None, True)]


def test_config_rejects_unknown_keys_and_takes_overrides(tmp_path):
    with pytest.raises(ConfigError, match="unknown key 'grpo.learning_rat'"):
        train_config_from_dict({"data": {"tasks": [{"name": "gsm8k"}]},
                                "grpo": {"learning_rat": 1}})
    with pytest.raises(ConfigError, match=r"run\.max_steps.*greater than or equal to 1"):
        train_config_from_dict({"data": {"tasks": [{"name": "gsm8k"}]},
                                "run": {"max_steps": 0}})
    data = apply_overrides({"grpo": {"max_steps": 5}}, ["grpo.max_steps=7", "model.path=x",
                                                         "reward.scheme=code"])
    assert data == {"grpo": {"max_steps": 7}, "model": {"path": "x"},
                    "reward": {"scheme": "code"}}
    with pytest.raises(ConfigError, match="section.key=value"):
        apply_overrides({}, ["grpo.max_steps"])
    config = tmp_path / "t.toml"
    config.write_text('[[data.tasks]]\nname = "gsm8k"\n[grpo]\nmax_steps = 3\n')
    loaded = load_train_config(config, ["grpo.learning_rate=2e-6"])
    assert (loaded.grpo.max_steps, loaded.grpo.learning_rate) == (3, 2e-6)
    assert loaded.grpo.loss_type == "bnpo" and loaded.grpo.beta == 0.0  # the paper's recipe


def test_recursion_layout_blend_and_per_round_normalisation():
    from podium.train.rollout.layout import pieces_of
    from podium.train.rollout.recursion import blend, layout, per_round

    prompts = ["a"] * 4 + ["b"] * 4
    first, second = layout(pieces_of(prompts, 4), 0.5)  # two groups of 4: 2 + 2 each
    assert first == [0, 1, 4, 5] and second == {2: 0, 3: 1, 6: 4, 7: 5}
    first, second = layout(pieces_of(["a"] * 6, 6), 1 / 6)
    assert first == [0, 1, 2, 3, 4] and second == {5: 0}
    # process 1 of 2 with 6 rollouts each, groups of 4: rollouts 6..11 of the step are the
    # last 2 of group "b" and all of group "c"; each piece pairs within itself
    pieces = pieces_of(["b", "b", "c", "c", "c", "c"], 4, offset=6)
    assert pieces == [(0, 2), (2, 4)]
    assert layout(pieces, 0.5) == ([0, 2, 3], {1: 0, 4: 2, 5: 3})
    assert pieces_of(["a"] * 8, 4) == [(0, 4), (4, 4)]  # one question twice: two groups
    rewards = [1.0, 0.5, 0.0, 1.0, 0.5, 0.0, None, 1.0]
    blended = blend(rewards, {2: 0, 3: 1, 6: 4, 7: 5}, 0.25)
    assert blended == [0.75, 0.625, 0.0, 1.0, 0.5, 0.25, None, 1.0]  # r1 None: r0 alone
    rounds = [0, 0, 1, 1, 0, 0, 1, 1]
    std = per_round([1.0, 0.0, 0.5, 0.5, 1.0, 0.5, 0.0, 1.0], rounds, 4)
    assert std == [1.0, -1.0, 0.0, 0.0, 1.0, -1.0, -1.0, 1.0]  # a round with no spread: 0


def test_warmup_steps_replace_the_ratio(tmp_path):
    """A run stopped by the clock sets max_steps out of reach, so a ratio of it means nothing:
    warmup_steps gives the warm-up directly."""
    pytest.importorskip("trl")
    from podium.train.config import train_config_from_dict
    from podium.train.trainer import grpo_args

    def args(**grpo):
        return grpo_args(train_config_from_dict({
            "data": {"tasks": [{"name": "gsm8k"}]}, "output": {"dir": str(tmp_path)},
            "grpo": {"max_steps": 100, "warmup_ratio": 0.1, **grpo}}))

    assert args().warmup_steps == 10
    assert args(warmup_steps=3).warmup_steps == 3
    assert args(warmup_steps=0).warmup_steps == 0


@pytest.mark.parametrize(("section", "value", "says"), [
    ({"grpo": {"learning_rate": float("inf")}}, "grpo.learning_rate", "finite number"),
    ({"grpo": {"learning_rate": float("nan")}}, "grpo.learning_rate", "finite number"),
    ({"grpo": {"learning_rate": -1e-6}}, "grpo.learning_rate", "greater than 0"),
    ({"reward": {"cost_scale": float("inf")}}, "reward.cost_scale", "finite number"),
    ({"output": {"dir": ""}}, "output.dir", "at least 1 character"),
])
def test_a_bad_number_or_folder_names_its_key(section, value, says):
    with pytest.raises(ConfigError, match=rf"'{value}': .*{says}"):
        train_config_from_dict({"data": {"tasks": [{"name": "gsm8k"}]}, **section})


def test_an_output_folder_under_a_file_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"output.dir '.*file/out': .*file is a file, not a "
                                          r"folder; set output.dir to a folder"):
        train_config_from_dict({"data": {"tasks": [{"name": "gsm8k"}]},
                                "output": {"dir": str(tmp_path / "file" / "out")}})


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_grammar_held_rollouts_with_vllm_generation_say_how_each_row_keeps_its_grammar(
        tmp_path, mode):
    """`constrained` with `use_vllm` is a valid pair: the plan says how each rollout is held to
    its own row's grammar in each vLLM mode (benchmarks/vllm_check.py trains it for real)."""
    from podium.train.trainer import build

    config = load_train_config("configs/train/gym-cpu.toml", [
        "vllm.enabled=true", f"vllm.mode={mode}", f"output.dir={tmp_path / 'out'}"])
    said = " ".join(build(config, make_trainer=False, dry_run=True).lines)
    how = "one SamplingParams per prompt" if mode == "colocate" else "one request per distinct"
    assert f"vLLM {mode}, each rollout under its own row's grammar ({how}" in said, said


def test_the_importance_sampling_correction_is_refused_for_grammar_held_vllm_rollouts():
    """Under the grammar vLLM reports the masked distribution's log-probabilities, and TRL's
    correction then leaves every rollout out of the loss: the config says so and how out."""
    with pytest.raises(ConfigError, match=r"masked distribution.*importance_sampling_correction "
                                          r"= false.*constrained = false"):
        load_train_config("configs/train/gym-cpu.toml", [
            "vllm.enabled=true", "vllm.importance_sampling_correction=true"])
    load_train_config("configs/train/gym-cpu.toml", [  # unconstrained: TRL's correction holds
        "vllm.enabled=true", "vllm.importance_sampling_correction=true",
        "rollout.constrained=false", "rollout.explore=0", "rollout.credit=all"])


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_vllm_generation_without_vllm_is_refused_naming_the_install_line(tmp_path):
    """Without vLLM in the environment, `use_vllm` is refused before the policy loads, naming
    the `gpu` extra (not TRL's bare ImportError from inside its trainer)."""
    from typer.testing import CliRunner

    from podium.cli.main import app

    result = CliRunner().invoke(app, [
        "train", "--config", "configs/train/gym-cpu.toml", "--dry-run",
        "--set", "vllm.enabled=true", "--set", f"output.dir={tmp_path / 'out'}"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "pip install 'podium[gpu]'" in said and "vllm.enabled = false" in said, said


@pytest.mark.parametrize("key", ["constrained", "credit", "subtask_weight", "explore",
                                 "explore_plans", "explore_subtasks", "explore_wrong",
                                 "use_vllm", "vllm_mode", "vllm_server_base_url",
                                 "vllm_gpu_memory_utilization",
                                 "importance_sampling_correction"])
def test_a_rollout_or_vllm_key_under_grpo_is_refused_naming_its_place(key):
    """[grpo] holds TRL's keys; podium's rollout keys are [rollout]'s and vLLM's [vllm]'s."""
    from podium.train.config import MOVED

    section, name = MOVED[key].split(".")
    with pytest.raises(ConfigError, match=rf"grpo\.{key} is not a \[grpo\] key: write it as "
                                          rf"{section}\.{name} \(in the \[{section}\] section\)"):
        train_config_from_dict({"data": {"tasks": [{"name": "gsm8k"}]}, "grpo": {key: 1}})
    assert name in {"rollout": RolloutSection, "vllm": VllmSection}[section].model_fields


class GatedScorer(Scorer):
    """A scorer that records each rollout's sample id and holds the rollouts of the steps in
    `held` until `release` is set."""

    def __init__(self, pipeline: Pipeline, held: set[int]) -> None:
        super().__init__(pipeline)
        self.ids: list[str] = []
        self.held, self.release = held, asyncio.Event()

    async def score(self, row, text, task, item, *, sample_id="", **kwargs):
        self.ids.append(str(sample_id))
        if int(str(sample_id).split(":")[1]) in self.held:
            await self.release.wait()
        return await super().score(row, text, task, item, sample_id=sample_id, **kwargs)


def test_sample_ids_name_the_step_and_call_not_when_the_call_ran(tmp_path):
    """An overlapped run starts step 2's workflows while step 1's still run; the ids that key
    the cached replies must be those of a synchronous run, and of a run resumed at step 2."""
    data = data_with(tmp_path, SubpoolSection())
    plan = 'model_id = [1]\nsubtasks = ["Add"]\naccess_list = [[]]'

    async def ids(schedule: str) -> list[str]:
        async with Pipeline(POOL, settings=POOL.run.model_copy(update={"fallback": False})
                            ) as pipe:
            scorer = GatedScorer(pipe, {1} if schedule == "overlapped" else set())
            reward = ConductorReward(scorer, data, [data.rows[0]], RewardSection(),
                                     RolloutSettings(group=2), StepRecorder(None, 0))

            def call(step: int):
                return reward(prompts=["", ""], completions=[plan, plan],
                              completion_ids=[[1], [1]], row=[0, 0], step=step)

            if schedule == "synchronous":
                for step in (1, 2, 2):
                    assert await call(step) == [1.0, 1.0]
            elif schedule == "resumed at 2":
                for step in (2, 2):
                    await call(step)
            else:  # step 1 still running while both of step 2's calls run and finish
                first = asyncio.ensure_future(call(1))
                await asyncio.sleep(0)
                assert await call(2) == [1.0, 1.0] and await call(2) == [1.0, 1.0]
                scorer.release.set()
                assert await first == [1.0, 1.0]
            return sorted(scorer.ids)

    synchronous = asyncio.run(ids("synchronous"))
    assert synchronous == ["train:1:0:0", "train:1:0:1", "train:2:0:0", "train:2:0:1",
                           "train:2:1:0", "train:2:1:1"]
    assert asyncio.run(ids("overlapped")) == synchronous
    assert asyncio.run(ids("resumed at 2")) == synchronous[2:]
