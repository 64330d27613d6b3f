"""Outages and infrastructure failures are errors, not wrong answers.

`podium eval` against an unreachable Conductor, a rejected key or a hanging worker (real
OpenAI-compatible servers on localhost, the real CLI); a grader that crashes, a sandbox that
cannot start, a crashed math-verify pool and a missing grader package (the real graders, with
the fault injected underneath them). Each becomes an `error` record with its class and reason,
counted apart, rerun by `--retry-errors`.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from support import free_port, podium_in_process

from podium.baselines import build_system
from podium.config import ModelSpec, RunSettings, pool_from_dict
from podium.eval.runner import EvalConfig, evaluate, read_results
from podium.eval.summary import summarize
from podium.llm.base import ChatResponse
from podium.llm.function import FunctionClient
from podium.pipeline import Pipeline
from podium.scoring.base import Grade
from podium.scoring.math import MathVerifier, Verdict
from podium.tasks.base import Item
from podium.testing import ScriptedServer

N = 4
PLAN = 'model_id = [0]\nsubtasks = ["Solve it"]\naccess_list = [[]]'




@pytest.fixture()
def dataset(tmp_path) -> Path:
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)})
                            + "\n" for i in range(N)))
    return path


def pool_text(conductor_url: str, worker_url: str, worker_model: str) -> str:
    return (
        f'[conductor]\nbackend = "openai"\nmodel = "conductor"\nbase_url = "{conductor_url}"\n'
        'retries = 0\nconnect_timeout_s = 2\n'
        f'[[workers]]\nname = "w0"\nbackend = "openai"\nmodel = "{worker_model}"\n'
        f'base_url = "{worker_url}"\napi_key_env = "PODIUM_TEST_KEY"\nretries = 0\n'
        'timeout_s = 0.5\nprice = { input = 1.0, output = 2.0 }\n'
        '[run]\ncache = false\n'
    )


@pytest.mark.parametrize(("outage", "system", "reason"), [
    ("conductor unreachable", "conductor", "transport"),
    ("key rejected", "single:w0", "auth"),
    ("worker hangs", "single:w0", "transport"),
])
def test_outages_are_errors_and_retry_errors_reruns_them(tmp_path, dataset, outage, system,
                                                         reason):
    faults = {"m0-broken": "401" if outage == "key rejected" else "slow"}
    replies = {"conductor": PLAN, "m0": "<answer>0</answer>"}
    with ScriptedServer(latency=0.0, faults_by_model=faults, reply_by_model=replies) as server:
        dead = f"http://127.0.0.1:{free_port()}/v1"
        broken = pool_text(dead if outage == "conductor unreachable" else server.base_url,
                           server.base_url, "m0" if outage == "conductor unreachable"
                           else "m0-broken")
        pool, out = tmp_path / "pool.toml", tmp_path / "run"
        pool.write_text(broken)
        args = ("eval", "--task", f"jsonl:{dataset}", "--system", system, "--repeats", "1",
                "--out", str(out), "--pool", str(pool))
        env = {"PODIUM_TEST_KEY": "sk-test-0123456789"}
        failed = podium_in_process(*args, env=env)
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "--retry-errors" in failed.stderr
        records = list(read_results(out / "results.jsonl").values())
        assert len(records) == N and {r["status"] for r in records} == {"error"}
        assert {(r["cause"]["class"], r["cause"]["reason"]) for r in records} == {
            ("worker", reason)}
        summary = json.loads((out / "summary.json").read_text())
        assert (summary["graded"], summary["errors"], summary["accuracy"]) == (0, N, None)
        assert summary["accuracy_all"] == 0.0
        assert summary["error_classes"]["by_class"] == {"worker": N}

        pool.write_text(pool_text(server.base_url, server.base_url, "m0"))  # the fix
        fixed = podium_in_process(*args, "--retry-errors", env=env)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    records = list(read_results(out / "results.jsonl").values())
    assert len(records) == N and {r["status"] for r in records} == {"ok"}
    assert sum(r["correct"] for r in records) == 1  # "0" is right only for 0 + 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["graded"], summary["errors"]) == (N, 0)
    assert summary["accuracy"] == summary["accuracy_all"] == pytest.approx(1 / N)


# ------------------------------------------------------------------------------ infra failures


def crash(pred: str, gold: str, timeout: float) -> Verdict:
    os._exit(3)  # a math-verify worker process dies


def missing_package(pred: str, gold: str, timeout: float) -> Verdict:
    raise ModuleNotFoundError("No module named 'math_verify'")


class RaisingTask:
    """A task whose grader itself raises."""

    name = "raising"

    def format(self, item: Item) -> str:
        return item.question

    async def grade(self, item: Item, response: str | None) -> Grade:
        raise RuntimeError("the grader fell over")


def run_eval(task, items: list[Item], reply: str, out: Path) -> list[dict]:
    pool = pool_from_dict({"conductor": {"backend": "function", "function": "x:y"},
                           "workers": [{"name": "w0", "backend": "function",
                                        "function": "x:y"}]})

    async def worker(messages):
        return ChatResponse(text=reply, prompt_tokens=3, completion_tokens=3)

    spec = ModelSpec(name="w0", backend="function", function="x:y")
    clients = (FunctionClient(spec, fn=worker), [FunctionClient(spec, fn=worker)])

    async def go():
        async with Pipeline(pool, settings=RunSettings(cache=False), clients=clients) as pipe:
            return await evaluate(task, build_system("single:w0", pipe), items, out,
                                  EvalConfig(repeats=1, concurrency=2))

    return asyncio.run(go())


def assert_infra_errors(records: list[dict], detail: str) -> None:
    assert records and {r["status"] for r in records} == {"error"}
    for r in records:
        assert (r["cause"]["class"], r["cause"]["reason"]) == ("infra", "grader")
        assert detail in r["cause"]["detail"] and r["correct"] is False
    summary = summarize(records)
    assert summary.error_classes.by_class == {"infra": len(records)}
    assert summary.graded == 0 and summary.accuracy is None


def test_a_grader_that_raises_is_an_infra_error(tmp_path):
    items = [Item(id=f"q{i}", question=f"Q{i}?", gold="1") for i in range(2)]
    records = run_eval(RaisingTask(), items, "<answer>1</answer>", tmp_path)
    assert_infra_errors(records, "the grader fell over")


def test_a_sandbox_that_cannot_start_is_an_infra_error(tmp_path, monkeypatch):
    from podium.tasks import get_task

    task = get_task("humaneval")
    items = task.load(n=2)
    solution = "<answer>\n" + items[0].gold + "\n</answer>"

    async def no_processes(*args, **kwargs):
        raise OSError("fork: resource temporarily unavailable")

    monkeypatch.setattr(asyncio, "create_subprocess_exec", no_processes)
    records = run_eval(task, items[:1], solution, tmp_path)
    assert_infra_errors(records, "sandbox")


@pytest.mark.parametrize(("check", "detail"), [
    (crash, "worker_crash"),
    (missing_package, "ModuleNotFoundError"),
])
def test_a_broken_math_verify_pool_is_an_infra_error(tmp_path, check, detail):
    from podium.tasks.math500 import Math500Task

    task = Math500Task(path=str(tmp_path / "unused.jsonl"))
    task._verifier = MathVerifier(max_workers=1, check=check)
    items = [Item(id="m0", question="Compute 1/2.", gold="\\frac{1}{2}")]
    try:  # 1/3 is not 1/2 by the legacy rules, so the answer goes to math-verify
        records = run_eval(task, items, "<answer>\\frac{1}{3}</answer>", tmp_path)
    finally:
        task.close()
    assert_infra_errors(records, detail)
