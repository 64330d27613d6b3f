"""`podium serve` answers with tool calls, driven by the real `openai` SDK: Chat Completions
and the Responses API, whole and streamed; the client runs the tool and comes back with the
result, and the acting worker goes on (no new plan); several calls at once; a result for a
call the server never made is a 400 that spends nothing; the traces record the calls, the
results and the trace a continuation continues; a Responses reply echoes the request's tools.
Two agent frameworks run their tool loops to a final output against it: the OpenAI Agents SDK
and pydantic-ai (its Chat Completions and Responses models).

The server is `create_app` under uvicorn in a thread; its workers are models of a real
scripted OpenAI-compatible server (`tool_calls_by_model`), its Conductor a Python function
writing a fixed plan."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from support import planned, serving

from podium.config import pool_from_dict
from podium.testing import ScriptedServer

KEY = "sk-podium-tool-calls-test-51e0"
QUESTION = "Should I take an umbrella in Oslo today?"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CALLS = {"agent": [{"name": "get_weather", "arguments": {"city": "Oslo"}}],
         "pair": [{"name": "get_weather", "arguments": {"city": "Oslo"}},
                  {"name": "get_time", "arguments": {"city": "Oslo"}}]}
# pool indices: 0 plain (no tools), 1 agent (one call), 2 pair (two calls at once)
WORKERS = [("plain", False), ("agent", True), ("pair", True)]


class Planner:
    """A Conductor writing one fixed plan (`ids`, each step seeing every earlier one),
    counting the plans it wrote."""

    def __init__(self) -> None:
        self.ids = [0, 1]
        self.plans = 0

    def __call__(self, messages: list[dict]) -> str:
        self.plans += 1
        subtasks = ", ".join(f'"Step {k}."' for k in range(len(self.ids)))
        access = ", ".join(["[]"] + ['"all"'] * (len(self.ids) - 1))
        return f"model_id = {self.ids}\nsubtasks = [{subtasks}]\naccess_list = [{access}]"


class Served:
    def __init__(self, scripted: ScriptedServer, planner: Planner, base: str) -> None:
        self.scripted, self.planner, self.base = scripted, planner, base
        self.http = httpx.Client(base_url=base, timeout=30, trust_env=False,
                                 headers={"Authorization": f"Bearer {KEY}"})
        self.client = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0,
                                    http_client=httpx.Client(trust_env=False, timeout=30))

    def log(self) -> list[dict]:
        return self.scripted.stats()["log"]

    def trace(self, tid: str) -> dict:
        resp = self.http.get(f"/v1/traces/{tid}")
        assert resp.status_code == 200, resp.text
        return resp.json()


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    planner = Planner()
    with ScriptedServer(latency=0.0, tool_calls_by_model=CALLS) as scripted:
        pool = pool_from_dict({
            "conductor": {"backend": "function",
                          "function": "podium.testing.workers:one_step"},
            "workers": [{"name": name, "backend": "openai", "model": name,
                         "base_url": scripted.base_url, "backoff_s": 0.01, "tools": tools}
                        for name, tools in WORKERS],
            "run": {"cache": False}}, "tools.toml")
        with serving(planned(pool, planner), tmp_path_factory.mktemp("tool-traces"), KEY,
                     "podium tool-call server") as base:
            yield Served(scripted, planner, base)


@pytest.fixture(autouse=True)
def _fresh(served: Served) -> None:
    served.scripted.reset()
    served.planner.ids = [0, 1]


def _arguments(call: Any) -> dict:
    return json.loads(call.function.arguments)


def test_chat_tool_calls_then_the_results_give_the_final_text(served: Served) -> None:
    client = served.client
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(model="podium", messages=messages, tools=[WEATHER],
                                           extra_body={"return_trace_id": True})
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert (call.type, call.function.name, _arguments(call)) == (
        "function", "get_weather", {"city": "Oslo"})
    assert call.id.startswith("call_")
    acting = served.log()[-1]  # the acting worker was given the tools; its id is not shown
    assert acting["model"] == "agent" and acting["params"]["tools"] == [WEATHER]
    trace = served.trace(first.podium_trace_id)  # type: ignore[attr-defined]
    step = trace["steps"][-1]
    worker_id = step["tool_calls"][0]["id"]
    assert step["tool_calls"][0]["function"] == {"name": "get_weather",
                                                 "arguments": call.function.arguments}
    assert worker_id != call.id and worker_id not in call.id

    # the client runs the tool and sends the result back: no new plan, the same worker
    plans, requests = served.planner.plans, len(served.log())
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "Rain, 9 C"}]
    final = client.chat.completions.create(model="podium", messages=messages, tools=[WEATHER],
                                           extra_body={"return_trace_id": True})
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content == "[agent] tool results: Rain, 9 C"
    assert served.planner.plans == plans
    log = served.log()[requests:]
    assert [r["model"] for r in log] == ["agent"]
    # the worker got its own call id back, with the result
    exchange = log[0]["tool_messages"]
    assert exchange[0]["tool_calls"][0]["id"] == worker_id
    assert exchange[-1] == {"role": "tool", "tool_call_id": worker_id, "content": "Rain, 9 C"}
    again = served.trace(final.podium_trace_id)  # type: ignore[attr-defined]
    assert again["continues"] == first.podium_trace_id  # type: ignore[attr-defined]
    assert again["tool_results"] == [{"tool_call_id": worker_id, "content": "Rain, 9 C"}]


def test_a_continuation_keeps_the_requests_budget(served: Served) -> None:
    client = served.client
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(model="podium", messages=messages, tools=[WEATHER],
                                           extra_body={"budget": 0.5})
    [call] = first.choices[0].message.tool_calls or []
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "Rain, 9 C"}]
    final = client.chat.completions.create(model="podium", messages=messages, tools=[WEATHER],
                                           extra_body={"budget": 0.5})
    assert final.choices[0].finish_reason == "stop"
    budget = final.model_extra["podium"]["budget"]  # the continuation's one call, judged
    assert budget["amount"] == 0.5 and budget["plan_price"] == 0 and budget["over"] is False


def test_a_new_turn_after_tool_calls_gives_the_acting_step_them_as_chat_turns(
        served: Served) -> None:
    """An agent's next question, after a turn that called a tool: the step that writes the
    answer gets the earlier call and its result as chat turns (its ids renumbered, not the
    long sealed ones); asked without tools, as text in the assistant's turn."""
    client = served.client
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(model="podium", messages=messages, tools=[WEATHER])
    [call] = first.choices[0].message.tool_calls or []
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "Rain, 9 C"}]
    final = client.chat.completions.create(model="podium", messages=messages, tools=[WEATHER])
    messages += [final.choices[0].message.model_dump(exclude_none=True),
                 {"role": "user", "content": "And in Bergen?"}]
    plans = served.planner.plans
    again = client.chat.completions.create(model="podium", messages=messages, tools=[WEATHER],
                                           extra_body={"return_trace_id": True})
    assert served.planner.plans == plans + 1  # a new turn: a new plan
    steps = served.trace(again.podium_trace_id)["steps"]  # type: ignore[attr-defined]
    sent = steps[-1]["messages"]
    assert sent[:4] == [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {
                "name": "get_weather", "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Rain, 9 C"},
        {"role": "assistant", "content": "[agent] tool results: Rain, 9 C"}]
    own = sent[4]["content"]
    assert "<overall_task>\nAnd in Bergen?" in own and "<conversation>" not in own
    flat = steps[0]["messages"][0]["content"]  # the other steps: the conversation as text
    assert "(called get_weather with" in flat and "[tool]\nRain, 9 C" in flat
    assert call.id not in flat

    plain = client.chat.completions.create(model="podium", messages=messages,
                                           extra_body={"return_trace_id": True})
    sent = served.trace(plain.podium_trace_id)["steps"][-1]["messages"]  # type: ignore[attr-defined]
    assert all(m["role"] in ("user", "assistant") and "tool_calls" not in m for m in sent)
    assert sent[1]["content"] == (f"(called get_weather with {call.function.arguments})\n"
                                  "(result: Rain, 9 C)")


def test_parallel_calls_each_carry_a_sealed_id_and_their_results_go_back_together(
        served: Served) -> None:
    served.planner.ids = [2]
    tools = [WEATHER, CLOCK]
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    first = served.client.chat.completions.create(model="podium", messages=messages,
                                                  tools=tools)
    calls = first.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert len({c.id for c in calls}) == 2
    results = {"get_weather": "Rain", "get_time": "08:15"}
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 *({"role": "tool", "tool_call_id": c.id,
                    "content": results[c.function.name]} for c in reversed(calls))]
    final = served.client.chat.completions.create(model="podium", messages=messages,
                                                  tools=tools)
    assert final.choices[0].message.content == "[pair] tool results: 08:15 | Rain"


def test_chat_streamed_tool_calls_accumulate_in_the_sdk(served: Served) -> None:
    calls: dict[int, dict] = {}
    finish = None
    with served.client.chat.completions.stream(
            model="podium", tools=[WEATHER],
            messages=[{"role": "user", "content": QUESTION}]) as stream:
        for event in stream:
            if event.type == "chunk" and event.chunk.choices:
                finish = event.chunk.choices[0].finish_reason or finish
        done = stream.get_final_completion()
    assert finish == "tool_calls"
    [call] = done.choices[0].message.tool_calls or []
    assert (call.function.name, _arguments(call)) == ("get_weather", {"city": "Oslo"})
    calls[0] = call.model_dump()
    # the streamed id continues the run as the whole reply's does
    final = served.client.chat.completions.create(model="podium", tools=[WEATHER], messages=[
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [calls[0]]},
        {"role": "tool", "tool_call_id": call.id, "content": "Dry"}])
    assert final.choices[0].message.content == "[agent] tool results: Dry"


RT_WEATHER = {"type": "function", **WEATHER["function"]}


def test_responses_function_calls_then_the_output_gives_the_final_text(
        served: Served) -> None:
    first = served.client.responses.create(model="podium", input=QUESTION, tools=[RT_WEATHER])
    [item] = first.output
    assert item.type == "function_call"
    assert (item.name, json.loads(item.arguments), item.status) == (
        "get_weather", {"city": "Oslo"}, "completed")
    plans = served.planner.plans
    final = served.client.responses.create(model="podium", tools=[RT_WEATHER], input=[
        {"role": "user", "content": QUESTION},
        {"type": "function_call", "call_id": item.call_id, "name": item.name,
         "arguments": item.arguments},
        {"type": "function_call_output", "call_id": item.call_id, "output": "Sunny"}])
    assert final.output_text == "[agent] tool results: Sunny"
    assert served.planner.plans == plans


def test_responses_streamed_function_call_events(served: Served) -> None:
    kinds = []
    with served.client.responses.stream(model="podium", input=QUESTION,
                                        tools=[RT_WEATHER]) as stream:
        for event in stream:
            kinds.append(event.type)
        done = stream.get_final_response()
    calls = [k for k in kinds if "function_call" in k or k.startswith("response.output_item")]
    assert calls[-4:] == ["response.output_item.added",
                          "response.function_call_arguments.delta",
                          "response.function_call_arguments.done",
                          "response.output_item.done"]
    assert kinds[-1] == "response.completed"
    [item] = [o for o in done.output if o.type == "function_call"]
    assert json.loads(item.arguments) == {"city": "Oslo"}


def test_a_response_echoes_the_tools_and_tool_choice_it_was_sent(served: Served) -> None:
    clock = {"type": "function", "name": "get_time",
             "parameters": CLOCK["function"]["parameters"], "strict": False}
    sent = {"tools": [RT_WEATHER, clock], "tool_choice": {"type": "function",
                                                          "name": "get_weather"},
            "parallel_tool_calls": False}
    reply = served.client.responses.create(model="podium", input=QUESTION, **sent)
    expected = [RT_WEATHER, clock]
    assert [t.model_dump(exclude_none=True) for t in reply.tools] == expected
    assert reply.tool_choice.model_dump() == sent["tool_choice"]  # type: ignore[union-attr]
    assert reply.parallel_tool_calls is False
    assert served.log()[-1]["params"]["tool_choice"] == {"type": "function",
                                                        "function": {"name": "get_weather"}}
    with served.client.responses.stream(model="podium", input=QUESTION, **sent) as stream:
        events = [e for e in stream if e.type in ("response.created", "response.completed")]
    assert len(events) == 2
    for event in events:
        assert [t.model_dump(exclude_none=True) for t in event.response.tools] == expected
        assert event.response.tool_choice.model_dump() == sent["tool_choice"]
    plain = served.http.post("/v1/responses", json={"model": "podium", "input": QUESTION})
    assert plain.status_code == 200, plain.text
    body = plain.json()
    assert (body["tools"], body["tool_choice"], body["parallel_tool_calls"]) == (
        [], "auto", True)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_a_result_for_a_call_never_made_is_a_400_and_spends_nothing(
        served: Served, path: str) -> None:
    forged = "call_" + "A" * 120
    if path == "/v1/responses":
        body: dict = {"model": "podium", "tools": [RT_WEATHER], "input": [
            {"role": "user", "content": QUESTION},
            {"type": "function_call", "call_id": forged, "name": "get_weather",
             "arguments": '{"city": "Oslo"}'},
            {"type": "function_call_output", "call_id": forged, "output": "Rain"}]}
        param = "input.2.call_id"
    else:
        body = {"model": "podium", "tools": [WEATHER], "messages": [
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": forged, "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
            {"role": "tool", "tool_call_id": forged, "content": "Rain"}]}
        param = "messages.2.tool_call_id"
    plans = served.planner.plans
    resp = served.http.post(path, json=body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and "not a call this server made" in error["message"]
    assert served.log() == [] and served.planner.plans == plans


def test_a_continuation_without_its_tools_is_a_400_naming_them(served: Served) -> None:
    first = served.client.chat.completions.create(
        model="podium", tools=[WEATHER], messages=[{"role": "user", "content": QUESTION}])
    message = first.choices[0].message
    requests = len(served.log())
    with pytest.raises(openai.BadRequestError) as refused:
        served.client.chat.completions.create(model="podium", messages=[
            {"role": "user", "content": QUESTION}, message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": (message.tool_calls or [])[0].id,
             "content": "Rain"}])
    assert refused.value.body["param"] == "tools"  # type: ignore[index]
    assert len(served.log()) == requests


def test_a_request_without_tools_is_answered_in_text(served: Served) -> None:
    reply = served.client.chat.completions.create(
        model="podium", messages=[{"role": "user", "content": QUESTION}])
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.tool_calls is None
    assert (reply.choices[0].message.content or "").startswith("[agent] ")
    assert "tools" not in served.log()[-1]["params"]


def test_an_agents_sdk_agent_runs_its_two_tools_to_its_final_output(served: Served) -> None:
    agents = pytest.importorskip("agents")
    served.planner.ids = [2]
    ran: list[tuple[str, str]] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        ran.append(("get_weather", city))
        return "Rain"

    @agents.function_tool
    def get_time(city: str) -> str:
        """The local time in a city."""
        ran.append(("get_time", city))
        return "08:15"

    agents.set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=f"{served.base}/v1", api_key=KEY, max_retries=0,
                                http_client=httpx.AsyncClient(trust_env=False, timeout=30))
    agent = agents.Agent(name="assistant", instructions="Answer with the tools.",
                         tools=[get_weather, get_time],
                         model=agents.OpenAIChatCompletionsModel("podium", client))
    result = asyncio.run(asyncio.wait_for(agents.Runner.run(agent, QUESTION), 60))
    assert sorted(ran) == [("get_time", "Oslo"), ("get_weather", "Oslo")]
    assert result.final_output == "[pair] tool results: Rain | 08:15"
    assert served.planner.plans >= 1 and [r["model"] for r in served.log()] == ["pair", "pair"]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_pydantic_ai_agent_runs_its_two_tools_to_its_final_output(
        served: Served, api: str) -> None:
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    served.planner.ids = [2]
    ran: list[tuple[str, str]] = []

    def get_weather(city: str) -> str:
        """The weather in a city now."""
        ran.append(("get_weather", city))
        return "Rain"

    def get_time(city: str) -> str:
        """The local time in a city."""
        ran.append(("get_time", city))
        return "08:15"

    client = openai.AsyncOpenAI(base_url=f"{served.base}/v1", api_key=KEY, max_retries=0,
                                http_client=httpx.AsyncClient(trust_env=False, timeout=30))
    kind = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    model = kind("podium", provider=OpenAIProvider(openai_client=client))
    agent = pydantic_ai.Agent(model, instructions="Answer with the tools.",
                              tools=[get_weather, get_time])
    result = asyncio.run(asyncio.wait_for(agent.run(QUESTION), 60))
    assert sorted(ran) == [("get_time", "Oslo"), ("get_weather", "Oslo")]
    assert result.output == "[pair] tool results: Rain | 08:15"
    assert [r["model"] for r in served.log()] == ["pair", "pair"]
