"""Tests for podium.workflow.execute (and the round logic of podium.pipeline).

Concurrency and ordering are proven with asyncio events and call logs, or with the scripted
server's own measurements (requests in flight, request start/end times); never with elapsed
time thresholds.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from podium.config import ModelSpec, RunSettings, pool_from_dict
from podium.errors import WorkerError
from podium.llm.base import ChatResponse, Message
from podium.llm.function import FunctionClient
from podium.llm.openai_compat import OpenAICompatClient
from podium.pipeline import FALLBACK_SUBTASK, Pipeline, RunResult
from podium.testing import ScriptedServer
from podium.workflow.execute import ExecOptions, Execution, Team, execute_workflow
from podium.workflow.render import PREVIOUS_ROUND, MessageOptions
from podium.workflow.types import Workflow

QUESTION = "What is 6 * 7? (QUESTION-MARK)"
TIMEOUT = 10.0  # generous: reached only when the behaviour under test is broken

Fn = Callable[[list[Message]], Awaitable[Any]]


def fn_client(name: str, fn: Fn) -> FunctionClient:
    return FunctionClient(ModelSpec(name=name, backend="function", function="x:y"), fn=fn)


def own_subtask(messages: list[Message]) -> str:
    """The subtask a worker was given (the line after "Your subtask:")."""
    return messages[0]["content"].rsplit("Your subtask:\n", 1)[1].split("\n", 1)[0]


def run(coro: Awaitable[Any]) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, TIMEOUT)

    return asyncio.run(guarded())


def execute(workflow: Workflow, team: Team, **kwargs: Any) -> Awaitable[Execution]:
    return execute_workflow(workflow, QUESTION, team, **kwargs)


class CallLog:
    """A function worker that records the order of call starts and ends, by subtask."""

    def __init__(self, behaviour: dict[str, Fn] | None = None) -> None:
        self.events: list[tuple[str, str]] = []
        self.seen: dict[str, list[Message]] = {}
        self.behaviour = behaviour or {}
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, messages: list[Message]) -> str:
        task = own_subtask(messages)
        self.seen[task] = copy.deepcopy(messages)
        self.events.append(("start", task))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            action = self.behaviour.get(task)
            if action is not None:
                out = await action(messages)
                if out is not None:
                    return out
            for _ in range(5):  # give any step that (wrongly) could run now the chance to
                await asyncio.sleep(0)
            return f"RESP-{task}"
        finally:
            self.in_flight -= 1
            self.events.append(("end", task))

    def at(self, kind: str, task: str) -> int:
        return self.events.index((kind, task))


# --------------------------------------------------------------------------------------------
# concurrency and dependencies (events)


def test_independent_steps_run_at_the_same_time_and_the_aggregator_waits() -> None:
    async def main() -> tuple[Execution, CallLog]:
        from_a, from_b = asyncio.Event(), asyncio.Event()

        async def a(_: list[Message]) -> None:
            from_a.set()
            await from_b.wait()  # set only by step 1: a barrier of two

        async def b(_: list[Message]) -> None:
            from_b.set()
            await from_a.wait()

        log = CallLog({"A": a, "B": b})
        team = Team([fn_client("w0", log), fn_client("w1", log), fn_client("w2", log)])
        wf = Workflow.of([(0, "A", ()), (1, "B", ()), (2, "AGG", "all")])
        return await execute(wf, team), log

    result, log = run(main())
    assert [s.status for s in result.steps] == ["ok", "ok", "ok"]
    assert log.max_in_flight == 2
    assert log.at("start", "AGG") > log.at("end", "A")
    assert log.at("start", "AGG") > log.at("end", "B")
    agg = result.steps[2]
    assert agg.started_s >= max(result.steps[0].finished_s, result.steps[1].finished_s)
    assert "RESP-A" in agg.messages[0]["content"] and "RESP-B" in agg.messages[0]["content"]
    assert result.answer == "RESP-AGG"


def test_a_chain_runs_in_order() -> None:
    async def main() -> tuple[Execution, CallLog]:
        log = CallLog()
        team = Team([fn_client(f"w{i}", log) for i in range(3)], max_concurrency=4)
        wf = Workflow.of([(0, "S0", ()), (1, "S1", "all"), (2, "S2", "all")])
        return await execute(wf, team), log

    result, log = run(main())
    assert log.events == [("start", "S0"), ("end", "S0"), ("start", "S1"), ("end", "S1"),
                          ("start", "S2"), ("end", "S2")]
    assert "RESP-S0" in log.seen["S1"][0]["content"]
    assert "RESP-S0" in log.seen["S2"][0]["content"] and "RESP-S1" in log.seen["S2"][0]["content"]
    assert result.answer == "RESP-S2"


def test_index_access_waits_only_for_the_named_steps() -> None:
    async def main() -> tuple[Execution, CallLog]:
        from_s2 = asyncio.Event()

        async def s1(_: list[Message]) -> None:
            await from_s2.wait()  # step 2 must run while step 1 is still running

        async def s2(_: list[Message]) -> None:
            from_s2.set()

        log = CallLog({"S1": s1, "S2": s2})
        team = Team([fn_client(f"w{i}", log) for i in range(3)])
        wf = Workflow.of([(0, "S0", ()), (1, "S1", ()), (2, "S2", (0,))])
        return await execute(wf, team), log

    result, log = run(main())
    assert log.at("start", "S2") > log.at("end", "S0")  # waited for step 0 ...
    assert log.at("start", "S2") < log.at("end", "S1")  # ... but not for step 1
    text = log.seen["S2"][0]["content"]
    assert "RESP-S0" in text and "RESP-S1" not in text
    assert [s.status for s in result.steps] == ["ok", "ok", "ok"]


def test_a_late_step_with_no_access_does_not_wait_for_earlier_steps() -> None:
    async def main() -> tuple[Execution, CallLog]:
        from_s2 = asyncio.Event()

        async def s0(_: list[Message]) -> None:
            await from_s2.wait()  # set only by step 2, which must not wait for steps 0/1

        async def s2(_: list[Message]) -> None:
            from_s2.set()

        log = CallLog({"S0": s0, "S2": s2})
        team = Team([fn_client(f"w{i}", log) for i in range(3)])
        wf = Workflow.of([(0, "S0", ()), (1, "S1", (0,)), (2, "S2", ())])
        return await execute(wf, team), log

    result, log = run(main())
    assert log.at("start", "S2") < log.at("end", "S0")
    assert log.at("start", "S1") > log.at("end", "S0")
    assert [s.status for s in result.steps] == ["ok", "ok", "ok"]
    assert "RESP-S0" not in log.seen["S2"][0]["content"]


# --------------------------------------------------------------------------------------------
# per-worker concurrency limits


@pytest.mark.parametrize("limit", [1, 2])
def test_per_worker_concurrency_limit(limit: int) -> None:
    async def main() -> CallLog:
        log = CallLog()
        team = Team([fn_client("w0", log)], max_concurrency=limit)
        wf = Workflow.of([(0, f"T{i}", ()) for i in range(4)])
        result = await execute(wf, team)
        assert [s.status for s in result.steps] == ["ok"] * 4
        return log

    assert run(main()).max_in_flight == limit


def test_the_limit_holds_across_workflows_sharing_a_team() -> None:
    async def main() -> CallLog:
        log = CallLog()
        team = Team([fn_client("w0", log), fn_client("w1", log)], max_concurrency=[1, 4])
        wf_a = Workflow.of([(0, f"A{i}", ()) for i in range(3)])
        wf_b = Workflow.of([(0, f"B{i}", ()) for i in range(3)])
        await asyncio.gather(execute(wf_a, team), execute(wf_b, team))
        return log

    log = run(main())
    assert log.max_in_flight == 1
    assert len(log.seen) == 6


def test_team_needs_one_limit_per_client() -> None:
    with pytest.raises(ValueError):
        Team([fn_client("w0", CallLog())], max_concurrency=[1, 2])


# --------------------------------------------------------------------------------------------
# failures


async def boom(_: list[Message]) -> str:
    raise ValueError("boom-XYZ")


def test_on_error_continue_records_the_error_and_runs_later_steps() -> None:
    async def main() -> tuple[Execution, CallLog]:
        log = CallLog()
        team = Team([fn_client("bad", boom), fn_client("good", log)])
        wf = Workflow.of([(0, "FAILS", ()), (1, "S1", ()), (1, "S2", "all")])
        return await execute(wf, team, options=ExecOptions(on_error="continue")), log

    result, log = run(main())
    failed = result.steps[0]
    assert failed.status == "error" and failed.error_kind == "other"
    assert "boom-XYZ" in failed.error and "ValueError" in failed.error
    assert failed.response is None and failed.finished_s is not None
    assert [s.status for s in result.steps[1:]] == ["ok", "ok"]
    text = log.seen["S2"][0]["content"]
    assert "RESP-S1" in text
    assert "FAILS" not in text  # the failed step is not shown at all
    assert result.stopped is None and result.answer == "RESP-S2"


def test_on_error_stop_skips_the_steps_not_yet_started() -> None:
    async def main() -> tuple[Execution, CallLog]:
        started_s1, failed = asyncio.Event(), asyncio.Event()

        async def fails(_: list[Message]) -> str:
            await started_s1.wait()
            failed.set()
            raise RuntimeError("broken")

        async def s1(_: list[Message]) -> None:
            started_s1.set()
            await failed.wait()  # still running when step 0 fails

        log = CallLog({"S1": s1})
        team = Team([fn_client("bad", fails), fn_client("good", log)])
        wf = Workflow.of([(0, "FAILS", ()), (1, "S1", ()), (1, "S2", (1,)), (1, "S3", "all")])
        return await execute(wf, team, options=ExecOptions(on_error="stop")), log

    result, log = run(main())
    assert [s.status for s in result.steps] == ["error", "ok", "skipped", "skipped"]
    assert result.stopped is not None and "step 0" in result.stopped
    assert result.answer is None
    assert set(log.seen) == {"S1"}  # the skipped steps never called their worker
    for skipped in result.steps[2:]:
        assert skipped.started_s is None and skipped.error == result.stopped


def test_a_client_raising_a_plain_exception_is_recorded_as_internal() -> None:
    class Broken:
        name = "broken"
        supports_grammar = False

        async def chat(self, messages: list[Message], *, grammar: str | None = None,
                       sample_id: int = 0) -> Any:
            raise KeyError("no-such-thing")

    async def main() -> Execution:
        return await execute(Workflow.of([(0, "x", ())]), Team([Broken()]))

    result = run(main())
    step = result.steps[0]
    assert (step.status, step.error_kind) == ("error", "internal")  # a podium bug: infra
    assert "KeyError" in step.error and "no-such-thing" in step.error
    assert result.answer is None


def test_function_workers_may_be_any_kind_of_async_callable() -> None:
    class AsyncCallable:
        async def __call__(self, messages: list[Message]) -> str:
            await asyncio.sleep(0)
            return "FROM-OBJECT"

    async def coro(messages: list[Message]) -> str:
        return "FROM-CORO"

    def returns_awaitable(messages: list[Message]) -> Awaitable[str]:
        return coro(messages)

    def plain(messages: list[Message]) -> str:
        return "FROM-SYNC"

    async def main() -> Execution:
        fns: list[Any] = [AsyncCallable(), coro, returns_awaitable, plain]
        team = Team([fn_client(f"w{i}", fn) for i, fn in enumerate(fns)])
        return await execute(Workflow.of([(i, f"T{i}", ()) for i in range(4)]), team)

    result = run(main())
    assert [s.response for s in result.steps] == ["FROM-OBJECT", "FROM-CORO", "FROM-CORO",
                                                  "FROM-SYNC"]


# --------------------------------------------------------------------------------------------
# the final answer


def fixed(responses: dict[str, str]) -> Fn:
    async def fn(messages: list[Message]) -> str:
        return responses[own_subtask(messages)]

    return fn


def answer_of(rule: str, responses: dict[str, str]) -> str | None:
    async def main() -> Execution:
        team = Team([fn_client("w0", fixed(responses))])
        wf = Workflow.of([(0, task, "all") for task in responses])
        return await execute(wf, team, options=ExecOptions(final_answer=rule))

    return run(main()).answer


def test_final_answer_last_returns_the_last_response_even_when_empty() -> None:
    assert answer_of("last", {"a": "FIRST", "b": ""}) == ""
    assert answer_of("last", {"a": "FIRST", "b": "SECOND"}) == "SECOND"


def test_final_answer_last_nonempty_returns_the_latest_nonempty_response() -> None:
    assert answer_of("last_nonempty", {"a": "FIRST", "b": "SECOND", "c": ""}) == "SECOND"
    assert answer_of("last_nonempty", {"a": "FIRST", "b": "  \n"}) == "FIRST"
    assert answer_of("last_nonempty", {"a": "", "b": ""}) is None


# --------------------------------------------------------------------------------------------
# step records


def test_records_hold_exactly_the_messages_the_worker_received() -> None:
    async def main() -> tuple[Execution, CallLog]:
        log = CallLog()
        team = Team([fn_client("w0", log), fn_client("w1", log)])
        wf = Workflow.of([(1, "S0", ()), (0, "S1", "all"), (1, "S2", (0,))])
        options = ExecOptions(messages=MessageOptions(share_agent_subtasks=True))
        return await execute(wf, team, options=options, round_index=3), log

    result, log = run(main())
    for rec, task, worker in zip(result.steps, ["S0", "S1", "S2"], [1, 0, 1], strict=True):
        assert rec.messages == log.seen[task]
        assert (rec.subtask, rec.worker, rec.worker_name) == (task, worker, f"w{worker}")
        assert rec.round == 3 and rec.status == "ok" and rec.response == f"RESP-{task}"
        assert 0 <= rec.started_s <= rec.finished_s <= result.wall_s
        assert rec.to_json()["access"] == ("all" if task == "S1" else list(rec.access))


def test_step_events_are_emitted_in_order() -> None:
    seen: list[tuple[str, int, str]] = []

    async def main() -> Execution:
        team = Team([fn_client("w0", CallLog())])
        wf = Workflow.of([(0, "S0", ()), (0, "S1", "all")])
        return await execute(wf, team, on_event=lambda k, r: seen.append((k, r.index, r.status)))

    run(main())
    assert seen == [("started", 0, "running"), ("finished", 0, "ok"),
                    ("started", 1, "running"), ("finished", 1, "ok")]


def test_an_invalid_workflow_for_the_team_is_refused() -> None:
    async def main() -> None:
        await execute(Workflow.of([(1, "x", ())]), Team([fn_client("w0", CallLog())]))

    with pytest.raises(ValueError, match="worker 1"):
        run(main())


# --------------------------------------------------------------------------------------------
# over HTTP, against the scripted OpenAI-compatible server

LATENCY = 0.1


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(latency=LATENCY, faults_by_model={"w500": "500", "w401": "401"}) as srv:
        yield srv


def http_client(server: ScriptedServer, model: str) -> OpenAICompatClient:
    return OpenAICompatClient(  # no retries of its own: a fault is recorded as it came
        ModelSpec(name=model, backend="openai", model=model, base_url=server.base_url)
    )


def run_http(server: ScriptedServer, models: list[str], workflow: Workflow,
             limit: int | list[int] = 4, **kwargs: Any) -> Execution:
    async def main() -> Execution:
        clients = [http_client(server, m) for m in models]
        try:
            return await execute(workflow, Team(clients, max_concurrency=limit), **kwargs)
        finally:
            for client in clients:
                await client.aclose()

    server.reset()
    return run(main())


@pytest.mark.parametrize("limit", [2, 4])
def test_server_sees_at_most_the_limit_in_flight(server: ScriptedServer, limit: int) -> None:
    wf = Workflow.of([(0, f"T{i}", ()) for i in range(4)])
    result = run_http(server, ["w0"], wf, limit=limit)
    assert [s.status for s in result.steps] == ["ok"] * 4
    stats = server.stats()
    assert stats["by_model"]["w0"]["requests"] == 4
    assert stats["by_model"]["w0"]["max_in_flight"] == limit


def test_server_log_shows_dependencies_respected(server: ScriptedServer) -> None:
    wf = Workflow.of([(0, "FAN-A", ()), (1, "FAN-B", ()), (0, "AGG", "all"), (1, "LAST", (2,))])
    result = run_http(server, ["w0", "w1"], wf)
    assert [s.status for s in result.steps] == ["ok"] * 4
    stats = server.stats()
    assert stats["overall"]["max_in_flight"] == 2  # the two fan-out steps, together
    log = {entry["last_user_message"].rsplit("Your subtask:\n", 1)[1]: entry
           for entry in stats["log"]}
    assert set(log) == {"FAN-A", "FAN-B", "AGG", "LAST"}
    assert log["AGG"]["start_time"] >= max(log["FAN-A"]["end_time"], log["FAN-B"]["end_time"])
    assert log["LAST"]["start_time"] >= log["AGG"]["end_time"]
    # the fan-out steps overlapped at the server
    assert log["FAN-A"]["start_time"] < log["FAN-B"]["end_time"]
    assert log["FAN-B"]["start_time"] < log["FAN-A"]["end_time"]


def test_http_step_records_are_populated(server: ScriptedServer) -> None:
    wf = Workflow.of([(0, "SOLVE", ()), (1, "CHECK", "all")])
    result = run_http(server, ["w0", "w1"], wf)
    for rec, model in zip(result.steps, ["w0", "w1"], strict=True):
        user = rec.messages[0]["content"]
        assert rec.status == "ok" and rec.model == model
        assert rec.response == f"[{model}] " + user[-60:]  # the server's deterministic echo
        words = sum(len(m["content"].split()) for m in rec.messages)
        assert rec.prompt_tokens == words
        assert rec.completion_tokens == len(rec.response.split())
        assert rec.latency_s > 0 and rec.request_id
        assert rec.finish_reason == "stop" and rec.prefill == "as_message"
        assert 0 <= rec.started_s < rec.finished_s
    assert result.steps[1].started_s >= result.steps[0].finished_s
    assert result.steps[0].response in result.steps[1].messages[0]["content"]
    logged = [entry["last_user_message"] for entry in server.stats()["log"]]
    assert logged == [rec.messages[0]["content"] for rec in result.steps]


@pytest.mark.parametrize(("model", "kind"), [("w500", "server"), ("w401", "auth")])
def test_http_errors_are_recorded_with_their_kind(server: ScriptedServer, model: str,
                                                   kind: str) -> None:
    wf = Workflow.of([(1, "FAILS", ()), (0, "AFTER", "all")])
    result = run_http(server, ["w0", model], wf)
    failed, after = result.steps
    assert (failed.status, failed.error_kind) == ("error", kind)
    assert model in failed.error and failed.response is None
    assert after.status == "ok" and "FAILS" not in after.messages[0]["content"]
    assert server.stats()["by_model"][model]["requests"] == 1  # no retries were made


def test_worker_error_kind_reaches_the_record_unchanged() -> None:
    class RateLimited:
        name = "rl"
        supports_grammar = False

        async def chat(self, messages: list[Message], *, grammar: str | None = None,
                       sample_id: int = 0) -> Any:
            raise WorkerError("rl", "rate_limit", "slow down")

    async def main() -> Execution:
        return await execute(Workflow.of([(0, "x", ())]), Team([RateLimited()]))

    step = run(main()).steps[0]
    assert (step.status, step.error_kind) == ("error", "rate_limit")
    assert "slow down" in step.error


# --------------------------------------------------------------------------------------------
# the pipeline: recursion rounds and the fallback


class Scripted:
    """A function model that answers its n-th call with `replies[n]` and keeps what it saw."""

    def __init__(self, replies: list[str] | Callable[[int], str]) -> None:
        self.replies = replies
        self.calls: list[list[Message]] = []

    async def __call__(self, messages: list[Message]) -> ChatResponse:
        n = len(self.calls)
        self.calls.append(copy.deepcopy(messages))
        text = self.replies(n) if callable(self.replies) else self.replies[n]
        return ChatResponse(text=text, prompt_tokens=10, completion_tokens=2, finish_reason="stop")


POOL = pool_from_dict({
    "conductor": {"backend": "function", "function": "x:y"},
    "workers": [{"name": "w0", "backend": "function", "function": "x:y"}],
})
ONE_STEP = 'model_id = [0]\nsubtasks = ["solve"]\naccess_list = [[]]'
KEEP = "model_id = []\nsubtasks = []\naccess_list = []"


def ask(conductor: Scripted, worker: Scripted, settings: RunSettings) -> RunResult:
    async def main() -> RunResult:
        clients = (fn_client("conductor", conductor), [fn_client("w0", worker)])
        async with Pipeline(POOL, settings=settings, clients=clients) as pipe:
            return await pipe.ask(QUESTION)

    return run(main())


def test_recursion_keeping_the_answer_calls_no_worker() -> None:
    conductor = Scripted([ONE_STEP, "I keep it.\n" + KEEP])
    worker = Scripted(lambda n: f"ANSWER-{n}")
    result = ask(conductor, worker, RunSettings(recursion=1))
    assert len(worker.calls) == 1
    assert result.answer == "ANSWER-0" == result.rounds[0].answer
    assert len(result.rounds) == 2
    kept = result.rounds[1]
    assert kept.conductor.kept and kept.execution is None and kept.answer is None
    assert result.outcome.answer_round == 0 and result.outcome.recursion == "kept"
    assert kept.conductor.parse_reason is None
    assert "ANSWER-0" in conductor.calls[1][-2]["content"]  # the Conductor saw the answer
    assert result.final_round is result.rounds[0]


def test_recursion_with_a_new_workflow_shows_the_previous_round() -> None:
    revise = 'model_id = [0, 0]\nsubtasks = ["redo", "verify"]\naccess_list = [[], "all"]'
    conductor = Scripted([ONE_STEP, revise])
    worker = Scripted(lambda n: f"ANSWER-{n}")
    result = ask(conductor, worker, RunSettings(recursion=1))
    assert len(worker.calls) == 3
    for call in worker.calls[1:]:  # any_all: every new step sees the previous round
        text = call[0]["content"]
        assert PREVIOUS_ROUND in text and "ANSWER-0" in text
    assert "ANSWER-1" in worker.calls[2][0]["content"]
    second = result.rounds[1].execution
    assert second is not None and [s.round for s in second.steps] == [1, 1]
    assert result.answer == "ANSWER-2" == result.rounds[1].answer
    assert result.outcome.used.calls == 2 + 3
    assert result.outcome.answer_round == 1


def test_recursion_one_step_all_sees_the_previous_round() -> None:
    verify = 'model_id = [0]\nsubtasks = ["verify"]\naccess_list = ["all"]'
    conductor = Scripted([ONE_STEP, verify])
    worker = Scripted(lambda n: f"ANSWER-{n}")
    ask(conductor, worker, RunSettings(recursion=1))
    assert "ANSWER-0" in worker.calls[1][0]["content"]


def test_unparseable_conductor_output_falls_back_to_one_step() -> None:
    conductor = Scripted(["I am not sure what to do."])
    worker = Scripted(["FALLBACK-ANSWER"])
    result = ask(conductor, worker, RunSettings())
    turn = result.rounds[0].conductor
    assert turn.fallback and turn.parse_reason == "unparseable"
    assert len(worker.calls) == 1
    run_ = result.rounds[0].execution
    assert run_ is not None and len(run_.steps) == 1
    assert (run_.steps[0].worker, run_.steps[0].subtask) == (0, FALLBACK_SUBTASK)
    assert result.answer == "FALLBACK-ANSWER"


def test_without_fallback_unparseable_output_calls_no_worker() -> None:
    conductor = Scripted(["I am not sure what to do."])
    worker = Scripted(["NEVER"])
    result = ask(conductor, worker, RunSettings(fallback=False))
    turn = result.rounds[0].conductor
    assert not turn.fallback and turn.parse_reason == "unparseable"
    assert worker.calls == []
    assert result.rounds[0].execution is None and result.answer is None


def test_a_team_can_be_reused_in_a_new_event_loop() -> None:
    """Semaphores belong to one loop; a Team makes new ones when run under another loop."""

    async def slow(messages):
        await asyncio.sleep(0.01)
        return "ok"

    client = FunctionClient(ModelSpec(name="w", backend="function", function="x:y"), fn=slow)
    team = Team([client], 1)  # limit 1, so the two steps contend for the semaphore
    wf = Workflow.of([(0, "a", ()), (0, "b", ())])
    for _ in range(2):
        run = asyncio.run(execute_workflow(wf, "q", team))
        assert [s.status for s in run.steps] == ["ok", "ok"]
