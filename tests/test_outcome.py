"""A run's outcome: the answer across rounds, usage and cost, and failures by class.

The pipeline runs with function workers (exact, scripted) so that each defect is reproduced
exactly; the embedded backend's error conversion runs the real llama.cpp model.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tomllib
from pathlib import Path

import pytest

from podium.config import ModelSpec, RunSettings, load_pool, pool_from_dict
from podium.errors import WorkerError
from podium.llm.base import ChatResponse, Message
from podium.llm.function import FunctionClient
from podium.outcome import Failure, call_failure, grade_failure
from podium.pipeline import Pipeline, RunResult
from podium.scoring.base import Grade

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What is 6 * 7?"
ONE_STEP = 'model_id = [0]\nsubtasks = ["Solve it"]\naccess_list = [[]]'
TWO_STEPS = 'model_id = [0, 0]\nsubtasks = ["Redo it", "Verify it"]\naccess_list = [[], "all"]'
PRICE = {"input": 1.0, "output": 2.0}  # USD per 1M tokens
POOL = pool_from_dict({
    "conductor": {"backend": "function", "function": "x:y", "price": PRICE},
    "workers": [{"name": "w0", "backend": "function", "function": "x:y", "price": PRICE}],
})


class Model:
    """A scripted function model: its n-th call returns `script(n)`, or raises it if it is an
    exception. Every reply costs 100 prompt + 10 completion tokens."""

    def __init__(self, script) -> None:
        self.script = script
        self.calls: list[list[Message]] = []

    async def __call__(self, messages: list[Message]) -> ChatResponse:
        n = len(self.calls)
        self.calls.append(messages)
        out = self.script(n) if callable(self.script) else self.script[n]
        if isinstance(out, BaseException):
            raise out
        return ChatResponse(text=out, prompt_tokens=100, completion_tokens=10)

    def client(self, name: str) -> FunctionClient:
        return FunctionClient(ModelSpec(name=name, backend="function", function="x:y"), fn=self)


class Raw:
    """A client that raises what a backend should have converted (a llama.cpp exception)."""

    name = "raw"
    supports_grammar = False

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def chat(self, messages, *, grammar=None, sample_id=0):
        raise self.exc


def ask(conductor, worker: Model, settings: RunSettings) -> RunResult:
    async def main() -> RunResult:
        c = conductor.client("conductor") if isinstance(conductor, Model) else conductor
        async with Pipeline(POOL, settings=settings, clients=(c, [worker.client("w0")])) as pipe:
            return await pipe.ask(QUESTION)

    return asyncio.run(asyncio.wait_for(main(), 10))


def answers(n: int) -> str:
    return f"<answer>ANSWER-{n}</answer>"


# ------------------------------------------------------------------------- the answer across rounds


def test_a_recursion_round_cut_short_by_the_budget_keeps_the_previous_answer():
    # calls: Conductor, step (round 0); Conductor, step 0 of round 1 = 4; step 1 is skipped
    worker = Model(answers)
    result = ask(Model([ONE_STEP, TWO_STEPS]), worker, RunSettings(recursion=1, max_calls=4))
    assert len(worker.calls) == 2
    assert result.rounds[1].execution is not None and result.rounds[1].answer is None
    out = result.outcome
    assert out.answer == answers(0) and out.answer_round == 0
    assert out.stopped and out.stopped.startswith("cap")
    assert any(f.reason == "cap" and f.cls == "model" for f in out.failures)
    assert any("round 1 produced no answer" in n.lower() and "round 0 stands" in n for n in out.notes)
    assert out.status == "ok" and out.cause is None
    assert result.final_round is result.rounds[0]


def test_a_recursion_round_whose_final_step_fails_keeps_the_previous_answer():
    down = WorkerError("w0", "transport", "could not reach the endpoint")
    worker = Model(lambda n: answers(0) if n == 0 else down)
    result = ask(Model([ONE_STEP, ONE_STEP]), worker, RunSettings(recursion=1))
    out = result.outcome
    assert out.answer == answers(0) and out.answer_round == 0
    failed = [f for f in out.failures if f.cls == "worker"]
    assert failed and failed[0].reason == "transport" and "round 1" in failed[0].where
    assert out.status == "ok"  # the answer of round 0 is graded; the outage is on record
    assert result.to_json()["notes"]  # the trace says why round 1 changed nothing


def test_a_revised_answer_replaces_the_previous_one():
    result = ask(Model([ONE_STEP, TWO_STEPS]), Model(answers), RunSettings(recursion=1))
    assert result.answer == answers(2) and result.outcome.answer_round == 1
    assert [r.decision for r in result.outcome.rounds] == ["planned", "revised"]


@pytest.mark.parametrize("mode", ["zero", "keep"])
def test_a_format_error_in_a_recursion_round_is_zero_or_keeps(mode):
    settings = RunSettings(recursion=1, recursion_format_error=mode)
    result = ask(Model([ONE_STEP, "Let me think, no lists here."]), Model(answers), settings)
    out = result.outcome
    assert out.rounds[1].decision == "format_error"
    assert out.parse_failures() == [(1, "unparseable")]
    if mode == "zero":  # the paper's scoring: a format error, no answer
        assert out.answer is None and out.format_error and out.status == "ok"
        assert out.cause is not None and out.cause.reason == "parse:unparseable"
    else:
        assert out.answer == answers(0) and not out.format_error
    assert any(f"recursion_format_error = {mode}" in n for n in out.notes)


# ------------------------------------------------------------------------------- usage and cost


def test_a_failed_call_has_a_known_cost():
    parallel = 'model_id = [0, 0]\nsubtasks = ["Try A", "Try B"]\naccess_list = [[], []]'
    worker = Model(lambda n: WorkerError("w0", "server", "boom") if n == 0 else answers(n))
    result = ask(Model([parallel]), worker, RunSettings(final_answer="last_nonempty"))
    steps = result.rounds[0].execution.steps
    assert sorted(s.status for s in steps) == ["error", "ok"]
    assert all(s.cost is not None for s in steps)
    one_call = (100 * 1.0 + 10 * 2.0) / 1e6
    assert result.outcome.used.cost == pytest.approx(2 * one_call)  # Conductor + the ok step
    assert result.outcome.used.calls == 3 and result.outcome.paid == result.outcome.used


@pytest.mark.parametrize("name", ["paper-constrained.toml", "paper-unconstrained.toml"])
def test_the_paper_pools_price_the_conductor(name):
    pool = load_pool(ROOT / "configs" / "pools" / name)
    assert pool.conductor.price is not None and pool.conductor.price.output > 0
    assert all(w.price is not None for w in pool.workers)
    assert tomllib.loads((ROOT / "configs" / "pools" / name).read_text())["conductor"]["price"]


# ---------------------------------------------------------------------------- failure classes


@pytest.mark.parametrize(("kind", "cls"), [
    ("auth", "worker"), ("transport", "worker"), ("rate_limit", "worker"),
    ("server", "worker"), ("bad_request", "worker"), ("other", "worker"),
    ("empty", "model"), ("context_length", "model"), ("internal", "infra"),
])
def test_call_failures_are_classed_by_kind(kind, cls):
    assert call_failure(kind, "x", "step 0").cls == cls


def test_a_grader_that_fails_is_infra_and_a_wrong_answer_is_not():
    assert grade_failure(Grade.of(False, "5", "mismatch")) is None
    failed = grade_failure(Grade.grader_error("sandbox: cannot unshare"))
    assert failed == Failure("infra", "grader", "grader_error: sandbox: cannot unshare", "grader")


@pytest.mark.parametrize(("exc", "kind", "cls"), [
    (RuntimeError("llama_decode returned -1"), "internal", "infra"),
    (WorkerError("conductor", "auth", "the endpoint rejected the API key"), "auth", "worker"),
])
def test_a_conductor_failure_is_recorded_not_raised(exc, kind, cls):
    worker = Model(answers)
    result = ask(Raw(exc), worker, RunSettings())
    turn = result.rounds[0].conductor
    assert turn.error and turn.error_kind == kind and turn.workflow is None
    assert worker.calls == []  # no fallback when the Conductor call itself failed
    out = result.outcome
    assert out.answer is None and out.cause is not None and out.cause.cls == cls
    assert out.status == "error" and out.used.calls == 1 and out.used.cost == 0.0


def test_the_embedded_backend_converts_llama_cpp_errors():
    from podium.llm.embedded import EmbeddedClient, ModelStore

    # a sampling setting of the wrong type (a pool-file slip): llama.cpp's ctypes call raises
    spec = ModelSpec(name="smol", backend="embedded", max_tokens=4,
                     extra_body={"top_k": "forty"})
    client = EmbeddedClient(spec, ModelStore())
    with pytest.raises(WorkerError) as info:
        asyncio.run(client.chat([{"role": "user", "content": "hi"}]))
    assert info.value.kind == "other" and "embedded generation failed" in str(info.value)
    assert "TypeError" in str(info.value)  # llama.cpp's own reason is kept


# --------------------------------------------------------------------------- records built whole


def test_results_are_frozen_and_fallback_is_said_in_the_json():
    result = ask(Model(["I am not sure."]), Model(answers), RunSettings(fallback=True))
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.outcome = result.outcome  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.rounds[0].conductor.fallback = False  # type: ignore[misc]
    data = result.to_json()
    assert data["fallback"] is True and data["answer"] == answers(0)
    assert any("run.fallback" in n for n in data["notes"])
    assert data["failures"][0]["reason"] == "parse:unparseable"  # the format error is on record
