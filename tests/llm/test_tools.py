"""Tool calls through the backends, over real HTTP: the OpenAI-compatible client against the
scripted server (both transports, whole and streamed), the Anthropic and Gemini clients
against local servers that check their vendors' wire formats (`vendor_servers.py`), a function
worker, and the layers every call goes through (retries, the response cache)."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vendor_servers import AnthropicServer, GeminiServer

from podium.config import ModelSpec, pool_from_dict
from podium.errors import ConfigError
from podium.llm.base import ChatResponse, Message
from podium.llm.cache import CachedClient, ResponseCache
from podium.llm.function import FunctionClient
from podium.llm.registry import build_client
from podium.llm.tools import Named, Tool, ToolCall
from podium.redact import register
from podium.testing import ScriptedServer

WEATHER = Tool(name="get_weather", description="The weather in a city now.",
               parameters={"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]})
CLOCK = Tool(name="get_time", parameters={"type": "object", "properties": {}})
ASK: list[Message] = [{"role": "user", "content": "What is the weather in Oslo?"}]
KEY = f"sk-podium-tools-{secrets.token_hex(8)}"
KEY_ENV = "PODIUM_TEST_TOOLS_KEY"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy", "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL",
                 "GOOGLE_GENAI_API_VERSION", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    calls = {"agent": [{"name": "get_weather", "arguments": {"city": "Oslo"}},
                       {"name": "get_time", "arguments": "{}"}],
             "leaky": [{"name": "get_weather", "arguments": {"city": KEY}}]}
    with ScriptedServer(latency=0.0, tool_calls_by_model=calls) as srv:
        yield srv


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def openai_client(server: ScriptedServer, model: str, transport: str = "aiohttp",
                  cache: ResponseCache | None = None) -> Any:
    spec = ModelSpec(name=model, backend="openai", model=model, base_url=server.base_url,
                     transport=transport, backoff_s=0.01, tools=True)
    return build_client(spec, cache=cache)


async def chat(client: Any, messages: list[Message], **kwargs: Any) -> ChatResponse:
    try:
        return await client.chat(messages, **kwargs)
    finally:
        await client.aclose()


def answered(calls: tuple[ToolCall, ...], results: list[str]) -> list[Message]:
    """ASK, the assistant's calls and one tool message per call."""
    return [*ASK, {"role": "assistant", "content": None,
                   "tool_calls": [call.openai() for call in calls]},
            *({"role": "tool", "tool_call_id": call.id, "content": result}
              for call, result in zip(calls, results, strict=True))]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("transport", ["aiohttp", "openai-sdk"])
def test_openai_tools_go_out_and_calls_come_back(server: ScriptedServer, transport: str,
                                                 streamed: bool) -> None:
    server.reset()
    pieces: list[str] = []
    stream = {"on_text": pieces.append} if streamed else {}
    reply = run(chat(openai_client(server, "agent", transport), ASK, tools=[WEATHER, CLOCK],
                     tool_choice="auto", parallel_tool_calls=True, **stream))
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("get_weather", {"city": "Oslo"}), ("get_time", {})]
    assert all(c.id.startswith("call_") for c in reply.tool_calls)
    assert reply.text == "" and reply.finish_reason == "tool_calls" and pieces == []
    params = server.stats()["log"][-1]["params"]
    assert params["tools"] == [WEATHER.openai(), CLOCK.openai()]
    assert params["tools"][0]["function"]["parameters"]["required"] == ["city"]
    assert params["tool_choice"] == "auto" and params["parallel_tool_calls"] is True
    assert params.get("stream", False) is streamed

    # the results go back verbatim, and the model answers in text
    conversation = answered(reply.tool_calls, ["12 degrees", "09:30"])
    final = run(chat(openai_client(server, "agent", transport), conversation,
                     tools=[WEATHER, CLOCK], **stream))
    assert final.tool_calls == () and final.finish_reason == "stop"
    assert final.text == "[agent] tool results: 12 degrees | 09:30"
    assert server.stats()["log"][-1]["tool_messages"] == conversation[1:]
    if streamed:
        assert "".join(pieces) == final.text and len(pieces) > 1


def test_openai_tool_choice_named_none_and_one_call(server: ScriptedServer) -> None:
    named = run(chat(openai_client(server, "agent"), ASK, tools=[WEATHER, CLOCK],
                     tool_choice=Named("get_time")))
    assert [c.name for c in named.tool_calls] == ["get_time"]
    assert server.stats()["log"][-1]["params"]["tool_choice"] == {
        "type": "function", "function": {"name": "get_time"}}
    none = run(chat(openai_client(server, "agent"), ASK, tools=[WEATHER], tool_choice="none"))
    assert none.tool_calls == () and none.text.startswith("[agent]")
    one = run(chat(openai_client(server, "agent"), ASK, tools=[WEATHER, CLOCK],
                   parallel_tool_calls=False))
    assert [c.name for c in one.tool_calls] == ["get_weather"]


def test_a_call_without_tools_sends_no_tool_fields(server: ScriptedServer) -> None:
    reply = run(chat(openai_client(server, "agent"), ASK))
    assert reply.tool_calls == () and reply.text.startswith("[agent]")
    params = server.stats()["log"][-1]["params"]
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(params)


def test_the_cache_keys_on_tools_and_keeps_the_calls(server: ScriptedServer,
                                                     tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache.sqlite")
    try:
        first = run(chat(openai_client(server, "agent", cache=cache), ASK, tools=[WEATHER]))
        again = run(chat(openai_client(server, "agent", cache=cache), ASK, tools=[WEATHER]))
        assert again.cache_hit and again.tool_calls == first.tool_calls != ()
        for other in ({"tools": [WEATHER, CLOCK]}, {"tools": [WEATHER], "tool_choice": "none"},
                      {"tools": [WEATHER], "parallel_tool_calls": False}, {}):
            reply = run(chat(openai_client(server, "agent", cache=cache), ASK, **other))
            assert not reply.cache_hit, other
        assert len(cache) == 5
    finally:
        cache.close()


def test_a_secret_in_a_tool_call_is_scrubbed() -> None:
    register(KEY)
    reply = ChatResponse(text="", tool_calls=(
        ToolCall(id=f"call_{KEY}", name=f"fn_{KEY}", arguments=json.dumps({"key": KEY})),))
    call = reply.tool_calls[0]
    assert KEY not in call.id + call.name + call.arguments
    assert json.loads(call.arguments) == {"key": "***"}


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_secret_an_endpoint_writes_in_a_call_never_leaves(server: ScriptedServer,
                                                            streamed: bool) -> None:
    register(KEY)
    stream = {"on_text": lambda piece: None} if streamed else {}
    reply = run(chat(openai_client(server, "leaky"), ASK, tools=[WEATHER], **stream))
    assert json.loads(reply.tool_calls[0].arguments) == {"city": "***"}


def test_broken_tool_calls_from_an_endpoint_are_a_worker_error() -> None:
    from podium.errors import WorkerError
    from podium.llm.openai_compat import _tool_calls

    with pytest.raises(WorkerError, match="broken tool calls"):
        _tool_calls("w", [{"id": "x"}])
    with pytest.raises(ValueError, match="tool call's name"):
        ChatResponse(text="", tool_calls=(ToolCall(id="x", name=3, arguments="{}"),))  # type: ignore[arg-type]


# ------------------------------------------------------------------------ Anthropic, Gemini


@pytest.fixture(scope="module")
def claude() -> Iterator[AnthropicServer]:
    with AnthropicServer(KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def gemini() -> Iterator[GeminiServer]:
    with GeminiServer(KEY) as srv:
        yield srv


def vendor_client(backend: str, url: str) -> Any:
    return build_client(ModelSpec(name=backend, backend=backend,
                                  model=f"{backend}-test", base_url=url, api_key_env=KEY_ENV,
                                  retries=0, tools=True))


def test_anthropic_maps_tools_calls_and_results_both_ways(claude: AnthropicServer) -> None:
    claude.clear()
    reply = run(chat(vendor_client("anthropic", claude.url),
                     [{"role": "system", "content": "Be brief."}, *ASK],
                     tools=[WEATHER, CLOCK], tool_choice=Named("get_weather"),
                     parallel_tool_calls=False))
    body = claude.last["body"]
    assert body["tools"] == [
        {"name": "get_weather", "description": "The weather in a city now.",
         "input_schema": WEATHER.parameters},
        {"name": "get_time", "input_schema": CLOCK.parameters}]
    assert body["tool_choice"] == {"type": "tool", "name": "get_weather",
                                   "disable_parallel_tool_use": True}
    (call,) = reply.tool_calls
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    assert json.loads(call.arguments) == claude.tool_input
    assert reply.text == "Let me check." and reply.finish_reason == "tool_use"

    conversation = answered(reply.tool_calls, ["12 degrees"])
    conversation[1]["content"] = reply.text
    final = run(chat(vendor_client("anthropic", claude.url), conversation,
                     tools=[WEATHER, CLOCK]))
    assert final.text == "Tool said: 12 degrees" and final.tool_calls == ()
    assert claude.last["body"]["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": call.id, "name": "get_weather",
             "input": claude.tool_input}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": "12 degrees"}]}]


def test_anthropic_tool_choice_mapping() -> None:
    from podium.llm.anthropic_native import tool_fields

    assert tool_fields(None, "required", None) == {"tool_choice": {"type": "any"}}
    assert tool_fields(None, "none", False) == {"tool_choice": {"type": "none"}}
    assert tool_fields(None, None, False) == {
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}
    assert tool_fields([Tool("t", strict=True)], None, None)["tools"][0]["strict"] is True


def test_anthropic_sends_several_results_as_one_user_turn(claude: AnthropicServer) -> None:
    calls = (ToolCall("toolu_1", "get_weather", '{"city": "Oslo"}'),
             ToolCall("toolu_2", "get_time", "{}"))
    final = run(chat(vendor_client("anthropic", claude.url),
                     answered(calls, ["12 degrees", "09:30"]), tools=[WEATHER, CLOCK]))
    assert final.text == "Tool said: 12 degrees | 09:30"
    last = claude.last["body"]["messages"][-1]
    assert [b["tool_use_id"] for b in last["content"]] == ["toolu_1", "toolu_2"]


def test_gemini_maps_tools_calls_and_results_both_ways(gemini: GeminiServer) -> None:
    gemini.clear()
    gemini.thought_signature = "c2lnbmF0dXJlLW9mLXRoZS1jYWxs"
    try:
        reply = run(chat(vendor_client("gemini", gemini.url), ASK, tools=[WEATHER, CLOCK],
                         tool_choice="required"))
        body = gemini.last["body"]
        (declarations,) = [t["functionDeclarations"] for t in body["tools"]]
        assert [(d["name"], d.get("parametersJsonSchema")) for d in declarations] == [
            ("get_weather", WEATHER.parameters), ("get_time", CLOCK.parameters)]
        assert body["toolConfig"]["functionCallingConfig"]["mode"] == "ANY"
        (call,) = reply.tool_calls
        assert call.name == "get_weather" and reply.text == ""
        assert json.loads(call.arguments) == gemini.tool_input

        final = run(chat(vendor_client("gemini", gemini.url),
                         answered(reply.tool_calls, ["12 degrees"]), tools=[WEATHER, CLOCK]))
        assert final.text == 'Tool said: {"output": "12 degrees"}'
        contents = gemini.last["body"]["contents"]
        assert contents[1]["role"] == "model"
        assert contents[1]["parts"][0]["functionCall"]["name"] == "get_weather"
        assert contents[1]["parts"][0]["functionCall"]["args"] == gemini.tool_input
        assert contents[1]["parts"][0]["thoughtSignature"] == gemini.thought_signature
        assert contents[2] == {"role": "user", "parts": [{"functionResponse": {
            "id": call.id.split("~sig~")[0], "name": "get_weather",
            "response": {"output": "12 degrees"}}}]}
    finally:
        gemini.thought_signature = None


def test_gemini_tool_choice_mapping(gemini: GeminiServer) -> None:
    run(chat(vendor_client("gemini", gemini.url), ASK, tools=[WEATHER, CLOCK],
             tool_choice=Named("get_time")))
    calling = gemini.last["body"]["toolConfig"]["functionCallingConfig"]
    assert calling == {"mode": "ANY", "allowedFunctionNames": ["get_time"]}
    reply = run(chat(vendor_client("gemini", gemini.url), ASK, tools=[WEATHER],
                     tool_choice="none"))
    assert reply.tool_calls == () and reply.text
    assert gemini.last["body"]["toolConfig"]["functionCallingConfig"] == {"mode": "NONE"}


# ------------------------------------------------------------------ function, pools, refusals


def weather_agent(messages: list[Message], tools: list[Tool] | None = None,
                  **choice: Any) -> Any:
    """A function worker that calls its first tool, then reports the result."""
    if messages[-1]["role"] == "tool":
        return f"It is {messages[-1]['content']}."
    assert tools and choice == {"tool_choice": "required"}
    return {"content": None, "tool_calls": [
        {"id": "call_w1", "type": "function",
         "function": {"name": tools[0].name, "arguments": '{"city": "Oslo"}'}}]}


def test_a_function_worker_returns_tool_calls() -> None:
    spec = ModelSpec(name="fn", backend="function", function="test_tools:weather_agent",
                     tools=True)
    client = FunctionClient(spec, weather_agent)
    assert client.supports_tools
    reply = run(chat(client, ASK, tools=[WEATHER], tool_choice="required"))
    assert reply.tool_calls == (ToolCall("call_w1", "get_weather", '{"city": "Oslo"}'),)
    assert reply.finish_reason == "tool_calls"
    final = run(chat(client, answered(reply.tool_calls, ["12 degrees"]),
                     tool_choice="required"))
    assert final.text == "It is 12 degrees." and final.tool_calls == ()


def test_a_function_without_a_tools_keyword_refuses_tools() -> None:
    client = FunctionClient(ModelSpec(name="fn", backend="function", function="x:y"),
                            lambda messages: "hi")
    assert not client.supports_tools
    with pytest.raises(ConfigError, match="takes no `tools` keyword"):
        run(chat(client, ASK, tools=[WEATHER]))
    assert run(chat(client, ASK)).text == "hi"


def test_a_function_returning_a_broken_dict_fails() -> None:
    from podium.errors import WorkerError

    client = FunctionClient(ModelSpec(name="fn", backend="function", function="x:y"),
                            lambda messages: {"tool_calls": [{"id": 1}]})
    with pytest.raises(WorkerError, match="not a reply"):
        run(chat(client, ASK))


@pytest.mark.parametrize("backend", ["embedded", "transformers"])
def test_a_pool_refuses_tools_on_a_backend_that_cannot_call_them(backend: str) -> None:
    worker = {"name": "small", "backend": backend, "model": "smollm2", "tools": True}
    with pytest.raises(ConfigError) as info:
        pool_from_dict({"conductor": {"backend": "embedded"}, "workers": [worker]},
                       "team.toml")
    message = str(info.value)
    assert "'small'" in message and "tools = true" in message and "Remove tools" in message


def test_a_pool_takes_tools_on_a_capable_worker() -> None:
    pool = pool_from_dict({"conductor": {"backend": "embedded"}, "workers": [
        {"name": "api", "backend": "openai", "model": "m", "base_url": "http://h/v1",
         "tools": True}, {"name": "local", "backend": "embedded"}]}, "team.toml")
    assert [w.tools for w in pool.workers] == [True, False]


def test_the_embedded_backend_refuses_tools() -> None:
    from podium.llm.embedded import EmbeddedClient, ModelStore

    client = EmbeddedClient(ModelSpec(name="small", backend="embedded", model="smollm2"),
                            ModelStore())
    assert client.supports_tools is False
    with pytest.raises(ConfigError, match="cannot take tools"):
        run(client.chat(ASK, tools=[WEATHER]))


def test_the_layers_pass_tools_on(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def agent(messages: list[Message], **kw: Any) -> ChatResponse:
        seen.append(kw)
        return ChatResponse(text="", tool_calls=(ToolCall("c1", "get_time", "{}"),))

    spec = ModelSpec(name="fn", backend="function", function="x:y", tools=True)
    cache = ResponseCache(tmp_path / "c.sqlite")
    try:
        client = CachedClient(FunctionClient(spec, agent), spec, cache)
        assert client.supports_tools
        for _ in range(2):
            reply = run(client.chat(ASK, tools=[CLOCK], tool_choice=Named("get_time"),
                                    parallel_tool_calls=False))
            assert reply.tool_calls == (ToolCall("c1", "get_time", "{}"),)
        assert reply.cache_hit and seen == [{"tools": [CLOCK], "tool_choice": Named("get_time"),
                                             "parallel_tool_calls": False}]
    finally:
        cache.close()
