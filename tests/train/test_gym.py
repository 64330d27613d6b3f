"""The gym: families, specialists, chains, subtask mode, splits, pools and the task registry.

Workflows run through the real pipeline (`Pipeline.run_completion`, the function backend) on
the gym's pool files, exactly as a training rollout's would."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from podium.config import load_pool
from podium.outcome import grade_outcome
from podium.pipeline import Pipeline
from podium.tasks import get_task
from podium.train.gym import (
    CHAINED,
    FAMILIES,
    SPECIALISTS,
    assignment,
    optimal_plan,
    pool_toml,
)
from podium.train.rollout.explore import question_subtask

ROOT = Path(__file__).resolve().parents[2]
TASK = get_task("gym", split_size=70)


def pool(tmp_path: Path, seed: int | None = None, mode: str = "question"):
    path = tmp_path / f"gym-{seed}-{mode}.toml"
    path.write_text(pool_toml(seed, mode))
    return load_pool(path)


def run_plans(gym_pool, items, plans: list[str]) -> list:
    """Each plan (three-list text) run on its item; the graded outcomes."""
    async def go():
        async with Pipeline(gym_pool, settings=gym_pool.run.model_copy(
                update={"fallback": False})) as pipe:
            out = []
            for item, plan in zip(items, plans, strict=True):
                run = await pipe.run_completion(TASK.format(item), plan, messages=[])
                out.append(await grade_outcome(run.outcome, TASK, item))
            return out

    return asyncio.run(go())


def plan(ids: list[int], subtasks: list[str], access: list[str]) -> str:
    return (f"model_id = {ids}\nsubtasks = {json.dumps(subtasks)}\n"
            f"access_list = [{', '.join(access)}]")


def test_splits_are_disjoint_balanced_and_deterministic():
    train, test = TASK.items("train"), TASK.items("test")
    assert len(train) == len(test) == 70
    assert not {i.question for i in train} & {i.question for i in test}
    assert [i.meta["family"] for i in test[:7]] == list(FAMILIES)  # families take turns
    assert [i.question for i in get_task("gym", split_size=70).items("test")] == \
        [i.question for i in test]
    assert sum(i.meta["chained"] for i in test) == 70 * len(CHAINED) // len(FAMILIES)


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_the_optimal_workflow_is_always_right(tmp_path, seed):
    gym_pool = pool(tmp_path, seed)
    names = [w.name for w in gym_pool.workers]
    assert sorted(names) == sorted(SPECIALISTS) and names == assignment(seed)
    items = TASK.items("test")[:21]
    outcomes = run_plans(gym_pool, items, [optimal_plan(i.meta["parts"], names) for i in items])
    assert all(o.correct for o in outcomes), [(o.answer, i.gold) for o, i in zip(
        outcomes, items, strict=True) if not o.correct]


def test_every_other_single_worker_answers_wrong_but_in_shape(tmp_path):
    gym_pool = pool(tmp_path)
    names = [w.name for w in gym_pool.workers]
    items = TASK.items("test")[:35]
    best = {}
    for worker in range(len(names)):
        plans = [plan([worker], ["Solve the question."], ["[]"]) for _ in items]
        outcomes = run_plans(gym_pool, items, plans)
        for item, o in zip(items, outcomes, strict=True):
            assert o.answer and "<answer>" in o.answer and o.grade.extracted  # never empty
            right = [name for name, _ in item.meta["parts"]] == [names[worker]]
            assert o.correct == right, (names[worker], item.question, o.answer)
        best[names[worker]] = sum(o.correct for o in outcomes) / len(items)
    assert max(best.values()) <= 0.2  # the best single worker: one family of five + two chains


def test_a_chain_needs_both_specialists_in_order_and_the_second_must_see_the_first(tmp_path):
    gym_pool = pool(tmp_path)
    names = [w.name for w in gym_pool.workers]
    items = [i for i in TASK.items("test") if i.meta["chained"]][:6]
    for item in items:
        (first, one), (second, two) = item.meta["parts"]
        a, b = names.index(first), names.index(second)
        q = item.question
        variants = {
            "right": plan([a, b], [q, q], ["[]", '"all"']),
            "blind": plan([a, b], [q, q], ["[]", "[]"]),  # the second does not see the first
            "swapped": plan([b, a], [q, q], ["[]", '"all"']),
            "second alone": plan([b], [q], ["[]"]),
            "first alone": plan([a], [q], ["[]"]),
        }
        outcomes = run_plans(gym_pool, [item] * len(variants), list(variants.values()))
        got = {k: o.correct for k, o in zip(variants, outcomes, strict=True)}
        assert got == {"right": True, "blind": False, "swapped": False, "second alone": False,
                       "first alone": False}, (item.question, got)


def test_in_subtask_mode_the_instruction_must_be_written(tmp_path):
    gym_pool = pool(tmp_path, mode="subtask")
    names = [w.name for w in gym_pool.workers]
    items = TASK.items("test")[:14]
    good = [optimal_plan(i.meta["parts"], names) for i in items]
    lazy = [plan([names.index(n) for n, _ in i.meta["parts"]],
                 ["Solve the question."] * len(i.meta["parts"]),
                 ["[]"] + ['"all"'] * (len(i.meta["parts"]) - 1)) for i in items]
    assert all(o.correct for o in run_plans(gym_pool, items, good))
    assert not any(o.correct for o in run_plans(gym_pool, items, lazy))


def test_the_gym_pool_files_and_an_eval_on_the_gym(tmp_path):
    for name, mode in (("gym.toml", "question"), ("gym-subtask.toml", "subtask")):
        assert (ROOT / "configs" / "pools" / name).read_text() == pool_toml(None, mode)
    assert assignment(1) != assignment(2) and sorted(assignment(1)) == sorted(SPECIALISTS)
    with pytest.raises(Exception, match="unknown families"):
        get_task("gym", families=["nope"])
    out = tmp_path / "eval"
    proc = subprocess.run(
        [sys.executable, "-m", "podium.cli.main", "eval", "--task", "gym", "--n", "7",
         "--repeats", "1", "--system", "single:calculator", "--pool",
         str(ROOT / "configs" / "pools" / "gym.toml"), "--out", str(out)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "120"})
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["graded"] == 7 and 0 < summary["accuracy"] < 1  # arithmetic only


def test_a_grammar_held_gym_run_and_its_conductor_under_the_same_grammar(tmp_path, monkeypatch,
                                                                         tokenizer):
    """One GRPO step on the gym with rollouts held to the workflow grammar, half of them on
    plans drawn at random (`rollout.explore`) with the question as their subtasks
    (`rollout.explore_subtasks`): every rollout is a valid workflow, the explored ones on distinct
    plans with the question (cut to the recipe's 12 characters) at every step; the
    checkpoint's card says so, and `--conductor` runs it under the grammar too, so its answer
    to a held-out question is a valid workflow as well. The policy is the tiny Llama: the
    grammar, not the policy, makes every workflow valid."""
    pytest.importorskip("trl")
    from support import tiny_llama
    from typer.testing import CliRunner

    import podium.train.model as model_module
    from podium.cli.main import app

    monkeypatch.setattr(model_module, "load_policy",
                        lambda *a, **k: (tiny_llama(tokenizer), tokenizer))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    args = ["train", "--config", str(ROOT / "configs" / "train" / "gym-cpu.toml"),
            "--set", "grpo.max_steps=1", "--set", "grpo.generations=4",
            "--set", "grpo.questions_per_step=1", "--set", f"output.dir={out}",
            "--set", "rollout.explore=0.5", "--set", "rollout.explore_subtasks=question",
            "--set", "output.transcripts_per_step=4", "--set", "heldout.n=3"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (logged,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()
                 if '"reward"' in x]
    assert logged["podium/format_error"] == 0  # the grammar holds every rollout
    assert logged["podium/explored"] == 0.5
    assert logged["heldout/valid"] == 1  # the greedy held-out workflows: under the grammar too
    assert 0 <= logged["heldout/accuracy"] <= 1 and (out / "best" / "README.md").is_file()
    rollouts = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    plans = [tuple((s["worker_id"], str(s["access"])) for s in r["workflow"])
             for r in rollouts if r.get("explored")]
    assert len(rollouts) == 4 and len(set(plans)) == len(plans) == 2
    for r in rollouts:
        if r.get("explored"):
            asked = r["prompt"][-2]["content"].split("Question: ", 1)[1]
            held = question_subtask(asked.split("\n\nModels:")[0], 12)
            assert [s["subtask"] for s in r["workflow"]] == [held] * len(r["workflow"])
    card = json.loads((out / "final" / "podium-conductor.json").read_text())
    assert card["constrained"] is True and card["run"]["max_subtask_chars"] == 12
    question = TASK.items("test")[1].question
    result = CliRunner().invoke(app, [
        "ask", question, "--json", "--no-cache", "--conductor", str(out / "final"),
        "--pool", str(ROOT / "configs" / "pools" / "gym-small.toml")], catch_exceptions=False)
    data = json.loads(result.stdout)
    turn = data["conductor"][0]
    assert turn["constrained"] is True and turn["parse_error"] is None and data["answer"]


def plain(instruction: str) -> str:
    """An instruction as a worker LLM would also read it: the operands without the phrase."""
    instruction = instruction.replace("What is ", "Compute ").replace("?", "")
    return instruction.replace("Reverse the word", "Reverse").replace("'", "")


def test_in_subtask_mode_a_plain_instruction_with_the_operands_works(tmp_path):
    gym_pool = pool(tmp_path, mode="subtask")
    names = [w.name for w in gym_pool.workers]
    items = [i for i in TASK.items("test")[:21] if i.meta["family"] in (
        "arithmetic", "reverse", "count", "count>arithmetic")]
    parts = [i.meta["parts"] for i in items]
    plans = [plan([names.index(n) for n, _ in p], [plain(t) for _, t in p],
                  ["[]"] + ['"all"'] * (len(p) - 1)) for p in parts]
    assert all(o.correct for o in run_plans(gym_pool, items, plans)), plans
    # the operands are what counts: the same subtasks with the first operand changed are wrong
    arithmetic = [k for k, i in enumerate(items) if i.meta["family"] == "arithmetic"]
    other = [re.sub(r"Compute (\d+)", lambda m: f"Compute {int(m[1]) + 1}", plans[k])
             for k in arithmetic]
    assert all("Compute" in p for p in other)
    got = run_plans(gym_pool, [items[k] for k in arithmetic], other)
    assert arithmetic and not any(o.correct for o in got)
