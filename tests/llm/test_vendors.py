"""The native Anthropic and Gemini adapters, end to end over real HTTP.

Each adapter talks, through its vendor's own SDK, to a local server (`vendor_servers.py`) that
speaks and checks that vendor's documented wire format: the request shape is asserted at the
server (system prompt placement, max_tokens, thinking budget, stop sequences, prefill), the
response must come back as the right `ChatResponse`, and every error mode must become a
`WorkerError` of the right kind, with its HTTP status and Retry-After, that never contains the
API key. The key must reach the server in the authentication header and nowhere else.

The adapters make non-streaming calls only, so streaming is not exercised here.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from support import free_port
from vendor_servers import AnthropicServer, GeminiServer

from podium.config import ModelSpec, pool_from_dict
from podium.errors import ConfigError, WorkerError
from podium.llm.anthropic_native import AnthropicClient
from podium.llm.base import ChatResponse
from podium.llm.gemini_native import GeminiClient
from podium.llm.registry import build_client

KEY = f"sk-podium-test-{secrets.token_hex(12)}"
KEY_ENV = "PODIUM_TEST_VENDOR_KEY"
REPLY = "The answer is 42. END of the reply."

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "system", "content": "Answer in English."},
    {"role": "user", "content": "What is six times seven?"},
    {"role": "assistant", "content": "Forty-two."},
    {"role": "user", "content": "Show your work."},
    {"role": "assistant", "content": "Let me work through this step by step. "},
]

_ENV_TO_CLEAR = (
    "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_PROFILE", "GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_GENAI_API_VERSION", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
)


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENV_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture(scope="module")
def anthropic_server() -> Iterator[AnthropicServer]:
    with AnthropicServer(KEY, reply=REPLY) as server:
        yield server


@pytest.fixture(scope="module")
def gemini_server() -> Iterator[GeminiServer]:
    with GeminiServer(KEY, reply=REPLY) as server:
        yield server


@pytest.fixture
def claude(anthropic_server: AnthropicServer) -> AnthropicServer:
    anthropic_server.clear()
    return anthropic_server


@pytest.fixture
def gemini(gemini_server: GeminiServer) -> Iterator[GeminiServer]:
    gemini_server.clear()
    yield gemini_server
    gemini_server.thought_parts = False


def _spec(backend: str, base_url: str, **fields: Any) -> ModelSpec:
    model = "claude-test" if backend == "anthropic" else "gemini-test"
    return ModelSpec(**{"name": f"{backend}-worker", "backend": backend, "model": model,
                        "base_url": base_url, "api_key_env": KEY_ENV, **fields})


def _chat(client: Any, messages: list[dict[str, str]], **kwargs: Any) -> ChatResponse:
    async def go() -> ChatResponse:
        try:
            return await asyncio.wait_for(client.chat(messages, **kwargs), 20)
        finally:
            await client.aclose()

    return asyncio.run(go())


def _fail(client: Any, messages: list[dict[str, str]]) -> WorkerError:
    with pytest.raises(WorkerError) as info:
        _chat(client, messages)
    return info.value


def _closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def _assert_key_only_in_auth(server: Any, headers: set[str]) -> None:
    assert server.requests
    for rec in server.requests:
        assert rec["auth"] in headers, rec
        assert not rec["key_elsewhere"], rec


# ------------------------------------------------------------------------------- Anthropic


def test_anthropic_request_shape_and_response(claude: AnthropicServer) -> None:
    spec = _spec("anthropic", claude.url, stop=["END"], temperature=0.2, top_p=0.9,
                 extra_body={"metadata": {"user_id": "podium-test"}})
    resp = _chat(AnthropicClient(spec), MESSAGES)

    rec = claude.last
    assert rec["path"] == "/v1/messages" and rec["query"] == []
    assert rec["anthropic_version"]
    body = rec["body"]
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 4096  # required by the API: the default when unset
    assert body["system"] == "You are terse.\n\nAnswer in English."
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant"]
    # the prefill is sent last, without the trailing whitespace the API rejects
    assert body["messages"][-1] == {"role": "assistant",
                                    "content": "Let me work through this step by step."}
    assert body["stop_sequences"] == ["END"]
    assert body["metadata"] == {"user_id": "podium-test"}  # extra_body, verbatim
    # API version 2026-10-21 answers 400 to sampling parameters: they are not sent
    assert not {"temperature", "top_p", "top_k"} & body.keys()
    assert "thinking" not in body

    assert resp.text == "The answer is 42. "  # the continuation only, cut at the stop sequence
    assert resp.prefill == "continued"
    assert resp.finish_reason == "stop_sequence"
    assert resp.model == "claude-test"
    assert resp.prompt_tokens > 0 and resp.completion_tokens == 4
    assert resp.reasoning_tokens is None
    assert resp.request_id and resp.request_id.startswith("req_")
    assert resp.extra["message_id"].startswith("msg_")
    _assert_key_only_in_auth(claude, {"x-api-key", "authorization"})


def test_anthropic_without_prefill_or_system(claude: AnthropicServer) -> None:
    resp = _chat(AnthropicClient(_spec("anthropic", claude.url, max_tokens=300)),
                 [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " "}])
    body = claude.last["body"]
    assert "system" not in body and "stop_sequences" not in body
    assert body["max_tokens"] == 300
    assert body["messages"] == [{"role": "user", "content": "Hi"}]  # a blank prefill is none
    assert resp.text == REPLY and resp.prefill == "none" and resp.finish_reason == "end_turn"
    assert "prefill_dropped" not in resp.extra


def test_anthropic_thinking_drops_the_prefill(claude: AnthropicServer) -> None:
    spec = _spec("anthropic", claude.url, thinking=True, thinking_budget=2048, max_tokens=8192,
                 temperature=0.5)
    resp = _chat(AnthropicClient(spec), MESSAGES)
    body = claude.last["body"]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 8192
    assert "temperature" not in body
    assert body["messages"][-1]["role"] == "user"  # the API rejects a prefill with thinking
    assert resp.prefill == "none" and resp.extra["prefill_dropped"] is True
    assert resp.text == REPLY  # the thinking block is not part of the text
    assert resp.reasoning_tokens and resp.reasoning_tokens > 0
    assert resp.completion_tokens == len(REPLY.split()) + resp.reasoning_tokens


def test_anthropic_thinking_defaults(claude: AnthropicServer) -> None:
    _chat(AnthropicClient(_spec("anthropic", claude.url, thinking=True)),
          [{"role": "user", "content": "Hi"}])
    assert claude.last["body"]["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    _chat(AnthropicClient(_spec("anthropic", claude.url, thinking_budget=1500)),
          [{"role": "user", "content": "Hi"}])
    assert claude.last["body"]["thinking"] == {"type": "enabled", "budget_tokens": 1500}
    _chat(AnthropicClient(_spec("anthropic", claude.url, thinking=False, thinking_budget=1500)),
          [{"role": "user", "content": "Hi"}])
    assert "thinking" not in claude.last["body"]
    with pytest.raises(ConfigError, match="thinking_budget .* must be below max_tokens"):
        AnthropicClient(_spec("anthropic", claude.url, thinking_budget=4096, max_tokens=4096))


ANTHROPIC_ERRORS = [
    ("claude-401", "auth", 401, None),
    ("claude-403", "auth", 403, None),
    ("claude-429", "rate_limit", 429, 7.0),
    ("claude-529", "server", 529, None),
    ("claude-500", "server", 500, None),
    ("claude-long", "context_length", 400, None),
    ("claude-echo", "bad_request", 400, None),
    ("claude-trunc", "server", None, None),
]


@pytest.mark.parametrize(("model", "kind", "status", "retry_after"), ANTHROPIC_ERRORS)
def test_anthropic_errors(claude: AnthropicServer, model: str, kind: str, status: int | None,
                          retry_after: float | None) -> None:
    err = _fail(AnthropicClient(_spec("anthropic", claude.url, model=model)),
                [{"role": "user", "content": "Hi"}])
    assert err.kind == kind and err.status == status and err.worker == "anthropic-worker"
    assert err.retry_after == retry_after
    assert KEY not in str(err) and KEY[-12:] not in str(err)
    if model == "claude-echo":
        assert "***" in str(err)
    assert len(claude.requests) == 1  # the SDK does not retry: podium does
    _assert_key_only_in_auth(claude, {"x-api-key", "authorization"})


def test_anthropic_wrong_key_and_bad_request(claude: AnthropicServer,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-wrong-key")
    err = _fail(AnthropicClient(_spec("anthropic", claude.url)),
                [{"role": "user", "content": "Hi"}])
    assert (err.kind, err.status) == ("auth", 401) and "sk-wrong-key" not in str(err)
    monkeypatch.setenv(KEY_ENV, KEY)
    err = _fail(AnthropicClient(_spec("anthropic", claude.url)),  # the API wants a user first
                [{"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Hi"}])
    assert (err.kind, err.status) == ("bad_request", 400)
    assert "first message must use the user role" in str(err)


def test_anthropic_transport_errors(claude: AnthropicServer) -> None:
    err = _fail(AnthropicClient(_spec("anthropic", _closed_port_url())),
                [{"role": "user", "content": "Hi"}])
    assert err.kind == "transport" and err.status is None
    err = _fail(AnthropicClient(_spec("anthropic", claude.url, model="claude-slow",
                                      timeout_s=0.5)),
                [{"role": "user", "content": "Hi"}])
    assert err.kind == "transport" and err.retryable
    assert KEY not in str(err)


def test_anthropic_configuration_errors(claude: AnthropicServer,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ConfigError, match=KEY_ENV):
        AnthropicClient(_spec("anthropic", claude.url))
    with pytest.raises(ConfigError, match='api_key_env = "ANTHROPIC_API_KEY"'):
        AnthropicClient(_spec("anthropic", claude.url, api_key_env=None))
    monkeypatch.setenv(KEY_ENV, KEY)
    client = AnthropicClient(_spec("anthropic", claude.url))
    assert client.supports_grammar is False
    with pytest.raises(ConfigError, match="cannot take a grammar"):
        _chat(client, [{"role": "user", "content": "Hi"}], grammar='root ::= "a"')
    assert claude.requests == []


# ------------------------------------------------------------------------------- Gemini


def test_gemini_request_shape_and_response(gemini: GeminiServer) -> None:
    spec = _spec("gemini", gemini.url, temperature=0.2, top_p=0.9, max_tokens=64, stop=["END"],
                 seed=7, thinking_budget=256,
                 extra_body={"generationConfig": {"topK": 40}})
    resp = _chat(GeminiClient(spec), MESSAGES)

    rec = gemini.last
    assert rec["path"] == f"/{rec['version']}/models/gemini-test:generateContent"
    assert rec["version"] in ("v1", "v1beta") and rec["query"] == []
    body = rec["body"]
    assert body["systemInstruction"]["parts"] == [
        {"text": "You are terse.\n\nAnswer in English."}]
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["contents"][1]["parts"] == [{"text": "Forty-two."}]
    # the prefill joins the last user turn: the conversation must end on a user turn
    assert body["contents"][-1]["parts"] == [
        {"text": "Show your work.\n\nLet me work through this step by step. "}]
    config = body["generationConfig"]
    assert config["temperature"] == 0.2 and config["topP"] == 0.9
    assert config["maxOutputTokens"] == 64 and config["stopSequences"] == ["END"]
    assert config["seed"] == 7 and config["topK"] == 40  # topK from extra_body
    assert config["thinkingConfig"] == {"thinkingBudget": 256, "includeThoughts": False}

    assert resp.text == "The answer is 42. "
    assert resp.prefill == "as_message"
    assert resp.finish_reason == "STOP"
    assert resp.model == "gemini-test"
    assert resp.prompt_tokens > 0
    assert resp.reasoning_tokens == 12
    assert resp.completion_tokens == 4 + 12  # thoughts are billed as output
    assert resp.request_id and resp.request_id.startswith("resp-")
    _assert_key_only_in_auth(gemini, {"x-goog-api-key"})


def test_gemini_thinking_settings(gemini: GeminiServer) -> None:
    hi = [{"role": "user", "content": "Hi"}]
    resp = _chat(GeminiClient(_spec("gemini", gemini.url)), hi)
    assert "thinkingConfig" not in gemini.last["body"].get("generationConfig", {})
    assert "systemInstruction" not in gemini.last["body"]
    assert resp.prefill == "none" and resp.reasoning_tokens is None
    assert resp.completion_tokens == len(REPLY.split())

    resp = _chat(GeminiClient(_spec("gemini", gemini.url, thinking=False,
                                    thinking_budget=512)), hi)
    assert gemini.last["body"]["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 0
    assert resp.reasoning_tokens is None

    _chat(GeminiClient(_spec("gemini", gemini.url, thinking=True)), hi)
    assert gemini.last["body"]["generationConfig"]["thinkingConfig"]["thinkingBudget"] == -1


def test_gemini_skips_thought_parts_and_reports_max_tokens(gemini: GeminiServer) -> None:
    gemini.thought_parts = True
    resp = _chat(GeminiClient(_spec("gemini", gemini.url, thinking_budget=128, max_tokens=3)),
                 [{"role": "user", "content": "Hi"}])
    assert resp.text == "The answer is"
    assert resp.finish_reason == "MAX_TOKENS"
    assert resp.reasoning_tokens == 12


def test_gemini_prefill_without_a_user_turn(gemini: GeminiServer) -> None:
    resp = _chat(GeminiClient(_spec("gemini", gemini.url)),
                 [{"role": "system", "content": "Be brief."},
                  {"role": "assistant", "content": "Sure:"}])
    assert gemini.last["body"]["contents"] == [{"role": "user", "parts": [{"text": "Sure:"}]}]
    assert resp.prefill == "as_message"


GEMINI_ERRORS = [
    ("gemini-401", "auth", 401, None),
    ("gemini-403", "auth", 403, None),
    ("gemini-429", "rate_limit", 429, 7.0),
    ("gemini-429h", "rate_limit", 429, 3.0),
    ("gemini-500", "server", 500, None),
    ("gemini-long", "context_length", 400, None),
    ("gemini-echo", "bad_request", 400, None),
    ("gemini-trunc", "server", None, None),
]


@pytest.mark.parametrize(("model", "kind", "status", "retry_after"), GEMINI_ERRORS)
def test_gemini_errors(gemini: GeminiServer, model: str, kind: str, status: int | None,
                       retry_after: float | None) -> None:
    err = _fail(GeminiClient(_spec("gemini", gemini.url, model=model)),
                [{"role": "user", "content": "Hi"}])
    assert err.kind == kind and err.status == status and err.worker == "gemini-worker"
    assert err.retry_after == retry_after
    assert KEY not in str(err) and KEY[-12:] not in str(err)
    if model == "gemini-echo":
        assert "***" in str(err)
    assert len(gemini.requests) == 1  # the SDK does not retry: podium does
    _assert_key_only_in_auth(gemini, {"x-goog-api-key"})


def test_gemini_wrong_key_and_unknown_field(gemini: GeminiServer,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "wrong-gemini-key")
    err = _fail(GeminiClient(_spec("gemini", gemini.url)), [{"role": "user", "content": "Hi"}])
    assert (err.kind, err.status) == ("auth", 401) and "wrong-gemini-key" not in str(err)
    monkeypatch.setenv(KEY_ENV, KEY)
    err = _fail(GeminiClient(_spec("gemini", gemini.url,
                                   extra_body={"generationConfig": {"bogusField": 1}})),
                [{"role": "user", "content": "Hi"}])
    assert (err.kind, err.status) == ("bad_request", 400) and "bogusField" in str(err)


def test_gemini_transport_errors(gemini: GeminiServer) -> None:
    err = _fail(GeminiClient(_spec("gemini", _closed_port_url())),
                [{"role": "user", "content": "Hi"}])
    assert err.kind == "transport" and err.status is None
    err = _fail(GeminiClient(_spec("gemini", gemini.url, model="gemini-slow", timeout_s=0.5)),
                [{"role": "user", "content": "Hi"}])
    assert err.kind == "transport" and err.retryable
    assert KEY not in str(err)


def test_gemini_configuration_errors(gemini: GeminiServer,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ConfigError, match=KEY_ENV):
        GeminiClient(_spec("gemini", gemini.url))
    with pytest.raises(ConfigError, match='api_key_env = "GEMINI_API_KEY"'):
        GeminiClient(_spec("gemini", gemini.url, api_key_env=None))
    monkeypatch.setenv(KEY_ENV, KEY)
    client = GeminiClient(_spec("gemini", gemini.url))
    assert client.supports_grammar is False
    with pytest.raises(ConfigError, match="cannot take a grammar"):
        _chat(client, [{"role": "user", "content": "Hi"}], grammar='root ::= "a"')
    assert gemini.requests == []


# ------------------------------------------------------------------------------- wiring


def test_registry_and_pool_validation(claude: AnthropicServer, gemini: GeminiServer) -> None:
    for spec, cls in ((_spec("anthropic", claude.url), AnthropicClient),
                      (_spec("gemini", gemini.url), GeminiClient)):
        client = getattr(build_client(spec), "inner", None)  # under the retry layer
        assert isinstance(client, cls)
        asyncio.run(client.aclose())
    for backend in ("anthropic", "gemini"):
        with pytest.raises(ConfigError, match=f"backend '{backend}' but has no model"):
            pool_from_dict({"conductor": {"backend": "function", "function": "m:f"},
                            "workers": [{"name": "w", "backend": backend,
                                         "api_key_env": KEY_ENV}]})
