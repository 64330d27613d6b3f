"""A run with tools, through the Python API: the answer step acts with the request's tools,
the outcome carries its calls and the state that continues it, `continue_acting` calls that
worker once more with the tool results, a plan whose last worker cannot act falls back, and
calls with arguments the schema refuses are asked again once, then fail. The workers are
models of a real scripted OpenAI-compatible server; the Conductor is a Python function that
writes a fixed plan (and keeps the prompts it was shown)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from podium.acting import ActingState
from podium.config import ModelSpec, Pool, pool_from_dict
from podium.errors import ConfigError
from podium.llm.function import FunctionClient
from podium.llm.registry import build_client
from podium.llm.tools import Named, Tool, ToolUse
from podium.pipeline import Pipeline, RunResult
from podium.testing import ScriptedServer

WEATHER = Tool(name="get_weather", description="The weather in a city now.",
               parameters={"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"], "additionalProperties": False})
TOOLS = ToolUse((WEATHER,))
QUESTION = "Should I take an umbrella in Oslo today?"
CALLS = {"agent": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
         "broken": [{"name": "get_weather", "arguments": {"town": 7}}]}
# pool indices: 0 plain (no tools), 1 agent (acts), 2 broken (acts, with bad arguments)
WORKERS = [("plain", False), ("agent", True), ("broken", True)]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(latency=0.0, tool_calls_by_model=CALLS) as srv:
        yield srv


class Planner:
    """A Conductor that writes one fixed plan (`ids`, each step seeing every earlier one) and
    keeps every prompt it is shown."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.prompts: list[list[dict]] = []

    def __call__(self, messages: list[dict]) -> str:
        self.prompts.append(messages)
        subtasks = ", ".join(f'"Step {k}."' for k in range(len(self.ids)))
        access = ", ".join(["[]"] + ['"all"'] * (len(self.ids) - 1))
        return f"model_id = {self.ids}\nsubtasks = [{subtasks}]\naccess_list = [{access}]"


def pool(server: ScriptedServer, workers: list[tuple[str, bool]] = WORKERS,
         **run: Any) -> Pool:
    return pool_from_dict({
        "conductor": {"backend": "function", "function": "podium.testing.workers:one_step"},
        "workers": [{"name": name, "backend": "openai", "model": name,
                     "base_url": server.base_url, "backoff_s": 0.01, "tools": tools}
                    for name, tools in workers],
        "run": {"cache": False, **run}}, "acting.toml")


def pipeline(server: ScriptedServer, planner: Planner, **run: Any) -> Pipeline:
    p = pool(server, **run)
    conductor = FunctionClient(ModelSpec(name="conductor", backend="function",
                                         function="podium.testing.workers:one_step"), planner)
    return Pipeline(p, clients=(conductor, [build_client(w) for w in p.workers]))


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


async def ask(pipe: Pipeline, question: str = QUESTION, **kw: Any) -> RunResult:
    async with pipe:
        return await pipe.ask(question, **kw)


def log(server: ScriptedServer) -> list[dict]:
    return server.stats()["log"]


def test_the_last_step_acts_and_the_outcome_carries_its_calls(server: ScriptedServer) -> None:
    server.reset()
    planner = Planner([0, 1])
    result = run(ask(pipeline(server, planner, recursion=1), tools=TOOLS))

    # the Conductor planned the question with the tools' names and descriptions, no schema
    prompt = planner.prompts[0][1]["content"]
    assert "<tools>" in prompt and "- get_weather: The weather in a city now." in prompt
    assert '"required"' not in prompt and QUESTION in prompt
    assert len(planner.prompts) == 1  # one round: no recursion with tools

    # only the last step was given the tools; the earlier one saw them named in the task
    requests = log(server)
    assert [r["model"] for r in requests] == ["plain", "agent"]
    assert "tools" not in requests[0]["params"]
    assert requests[1]["params"]["tools"] == [WEATHER.openai()]
    assert requests[1]["params"]["tool_choice"] == "auto"
    shown = json.dumps(result.rounds[0].execution.steps[0].messages)
    assert "- get_weather: The weather in a city now." in shown and '"required"' not in shown

    # the team's reply is the call; the answer is its (empty) text
    assert [(c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("get_weather", {"city": "Oslo"})]
    assert result.answer == "" and result.outcome.status == "ok"
    last = result.rounds[0].execution.steps[-1]
    assert last.tool_calls == list(result.tool_calls)
    assert last.to_json()["tool_calls"] == [c.openai() for c in result.tool_calls]

    # the acting state: the worker, its messages exactly as sent, the ids
    acting = result.acting
    assert acting is not None and (acting.worker, acting.worker_name) == (1, "agent")
    assert list(acting.messages) == last.messages
    assert acting.request_id == last.request_id and acting.request_id
    assert acting.question == result.question and "<tools>" in acting.question
    data = result.to_json()
    assert data["tool_calls"] == [c.openai() for c in result.tool_calls]
    assert ActingState.from_json(json.loads(json.dumps(data["acting"]))) == acting


def test_continue_acting_sends_the_exchange_and_returns_the_text(
        server: ScriptedServer) -> None:
    server.reset()
    planner = Planner([0, 1])
    pipe = pipeline(server, planner)

    async def both() -> tuple[RunResult, RunResult, list[dict]]:
        async with pipe:
            first = await pipe.ask(QUESTION, tools=TOOLS)
            assert first.acting is not None
            call = first.tool_calls[0]
            exchange = [{"role": "assistant", "content": None, "tool_calls": [call.openai()]},
                        {"role": "tool", "tool_call_id": call.id, "content": "rain, 9 C"}]
            state = ActingState.from_json(
                {**first.acting.to_json(), "trace_id": "tr-first"})  # as a server seals it
            return first, await pipe.continue_acting(state, exchange, TOOLS), exchange

    first, second, exchange = run(both())
    assert len(planner.prompts) == 1  # the Conductor was not asked again
    requests = log(server)
    assert [r["model"] for r in requests] == ["plain", "agent", "agent"]  # no earlier step
    assert requests[2]["params"]["tools"] == [WEATHER.openai()]
    assert requests[2]["tool_messages"] == exchange

    step = second.rounds[0].execution.steps[0]
    assert first.acting is not None
    assert step.messages == [*first.acting.messages, *exchange]  # appended, unchanged
    assert second.answer == "[agent] tool results: rain, 9 C"
    assert second.tool_calls == () and second.acting is None
    assert second.outcome.used.calls == 1 and second.outcome.worker_calls == 1


def test_a_bad_exchange_or_a_worker_that_cannot_act_is_refused(
        server: ScriptedServer) -> None:
    server.reset()
    pipe = pipeline(server, Planner([1]))
    state = ActingState(QUESTION, 1, "agent", ({"role": "user", "content": "What now?"},))
    asked = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}
    answered = {"role": "tool", "tool_call_id": "c1", "content": "rain"}

    async def go() -> None:
        async with pipe:
            with pytest.raises(ConfigError, match="tool_calls"):
                await pipe.continue_acting(state, [asked, {"role": "user", "content": "hi"}],
                                           TOOLS)
            plain = ActingState(QUESTION, 0, "plain", state.messages)
            with pytest.raises(ConfigError, match="tools = true"):
                await pipe.continue_acting(plain, [asked, answered], TOOLS)

    run(go())
    assert log(server) == []  # refused before any call


def test_a_continuation_that_calls_again_keeps_the_trace_id() -> None:
    def always_calls(messages: list[dict], tools: Any = None, **kw: Any) -> dict:
        n = sum(m["role"] == "tool" for m in messages)
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{n}", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Bergen"}'}}]}

    p = pool_from_dict({
        "conductor": {"backend": "function", "function": "podium.testing.workers:one_step"},
        "workers": [{"name": "fn", "backend": "function", "tools": True,
                     "function": "podium.testing.workers:adder"}],
        "run": {"cache": False}}, "acting.toml")
    spec = p.workers[0]
    pipe = Pipeline(p, clients=(FunctionClient(spec), [FunctionClient(spec, always_calls)]))
    state = ActingState(QUESTION, 0, "fn", ({"role": "user", "content": "Weather?"},),
                        trace_id="tr-first")
    exchange = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "rain"}]

    async def go() -> RunResult:
        async with pipe:
            return await pipe.continue_acting(state, exchange, TOOLS)

    result = run(go())
    assert [c.id for c in result.tool_calls] == ["c1"]
    assert result.acting is not None and result.acting.trace_id == "tr-first"
    assert list(result.acting.messages) == [*state.messages, *exchange]


def test_a_last_worker_that_cannot_act_falls_back_to_one_that_can(
        server: ScriptedServer) -> None:
    server.reset()
    result = run(ask(pipeline(server, Planner([1, 0])), tools=TOOLS))
    assert [r["model"] for r in log(server)] == ["agent"]  # one step, on the capable worker
    assert result.outcome.fallback and result.acting is not None
    assert result.acting.worker == 1 and result.tool_calls[0].name == "get_weather"
    note = " ".join(result.outcome.notes)
    assert "worker 0 (plain)" in note and "cannot act" in note and "worker 1 (agent)" in note


def test_a_pool_with_no_capable_worker_refuses_tools(server: ScriptedServer) -> None:
    p = pool(server, workers=[("plain", False), ("agent", False)])
    conductor = FunctionClient(ModelSpec(name="conductor", backend="function",
                                         function="podium.testing.workers:one_step"))
    pipe = Pipeline(p, clients=(conductor, [build_client(w) for w in p.workers]))
    with pytest.raises(ConfigError, match="tools = true"):
        run(ask(pipe, tools=TOOLS))


def test_invalid_arguments_are_asked_again_then_fail_naming_the_tool(
        server: ScriptedServer) -> None:
    server.reset()
    result = run(ask(pipeline(server, Planner([2])), tools=TOOLS))
    assert [r["model"] for r in log(server)] == ["broken", "broken"]  # asked again once
    step = result.rounds[0].execution.steps[0]
    assert step.status == "error" and step.tool_calls == []
    assert "'get_weather'" in (step.error or "") and "schema" in (step.error or "")
    assert [r["kind"] for r in step.retries] == ["tool_call"]
    assert result.answer is None and result.tool_calls == () and result.acting is None
    assert result.outcome.status == "error" and result.outcome.cause is not None
    assert result.outcome.cause.cls == "worker"
    assert step.completion_tokens > 0  # both replies count


def test_text_under_a_named_choice_is_asked_again_then_fails(server: ScriptedServer) -> None:
    server.reset()
    other = Tool(name="get_time", description="The time now.")
    use = ToolUse((WEATHER, other), Named("get_time"))
    result = run(ask(pipeline(server, Planner([1])), tools=use))
    requests = log(server)
    assert len(requests) == 2  # the agent answers only get_weather's calls: none, i.e. text
    assert all(r["params"]["tool_choice"] == {"type": "function",
                                              "function": {"name": "get_time"}}
               for r in requests)
    step = result.rounds[0].execution.steps[0]
    assert step.status == "error" and "'get_time'" in (step.error or "")


def test_without_tools_nothing_changes(server: ScriptedServer) -> None:
    server.reset()
    planner = Planner([0, 1])
    result = run(ask(pipeline(server, planner)))
    assert all("tools" not in r["params"] for r in log(server))
    assert "<tools>" not in json.dumps(planner.prompts)
    assert result.answer is not None and result.answer.startswith("[agent]")
    assert result.tool_calls == () and result.acting is None
    assert result.to_json()["tool_calls"] == [] and result.to_json()["acting"] is None


def test_a_constrained_conductor_is_held_to_a_capable_last_worker(
        server: ScriptedServer) -> None:
    """With tools, the grammar a constrained Conductor is sent admits only a capable worker's
    shown id for the last step (here a reindexed sub-pool: pool 0 and 2 shown as 0 and 1);
    without tools it admits any. The scripted Conductor's reply does not parse, so the run
    falls back to the capable worker."""
    xgr = pytest.importorskip("xgrammar")
    p = pool_from_dict({
        "conductor": {"name": "conductor", "backend": "openai", "model": "conductor",
                      "base_url": server.base_url, "grammar_style": "llama_cpp",
                      "backoff_s": 0.01},
        "workers": [{"name": name, "backend": "openai", "model": name,
                     "base_url": server.base_url, "backoff_s": 0.01, "tools": tools}
                    for name, tools in WORKERS],
        "run": {"cache": False, "subpool_ids": "reindexed", "max_steps": 2}}, "acting.toml")

    def grammar(**kw: Any) -> Any:
        server.reset()
        result = run(ask(Pipeline(p), workers=[0, 2], **kw))
        sent = [r["params"]["grammar"] for r in log(server) if r["model"] == "conductor"]
        assert len(sent) == 1 and result.rounds[0].conductor.constrained
        info = xgr.TokenizerInfo([chr(c) for c in range(32, 127)] + ["\n"])
        return result, xgr.GrammarCompiler(info).compile_grammar(sent[0])

    def accepts(compiled: Any, ids: list[int]) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        subtasks = ", ".join(f'"Step number {k}."' for k in range(len(ids)))
        access = ", ".join(["[]"] + ['"all"'] * (len(ids) - 1))
        text = f"Plan.\nmodel_id = {ids}\nsubtasks = [{subtasks}]\naccess_list = [{access}]"
        return matcher.accept_string(text) and matcher.is_completed()

    result, held = grammar(tools=TOOLS)
    assert [accepts(held, ids) for ids in ([1], [0, 1], [1, 1], [0], [1, 0])] == [
        True, True, True, False, False]
    turn = result.rounds[0].conductor  # the fallback, on the capable worker (pool index 2)
    assert turn.fallback and turn.workflow is not None
    assert [s.worker for s in turn.workflow.steps] == [2]
    _, free = grammar()
    assert all(accepts(free, ids) for ids in ([1], [0], [1, 0]))
