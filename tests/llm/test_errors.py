"""The one place provider exceptions become `WorkerError` (podium.llm.errors): the key never
reaches a message, status and wait are carried, and the two Stainless SDKs sort alike. The
backends' own paths through it run against fake vendor servers in test_vendors.py and
test_reliable.py."""

from __future__ import annotations

import asyncio
import importlib
import json

import pytest

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm.errors import HINTS, provider_error, sdk_error_kind
from podium.llm.function import FunctionClient

KEY = "sk-test-0123456789abcdef"


def test_the_key_is_scrubbed_and_status_and_wait_are_carried() -> None:
    exc = ValueError(f"invalid model for key {KEY}: try again")
    err = provider_error("w", "bad_request", exc, vendor="Anthropic", url="http://x",
                         secret=KEY, status=400, retry_after=2.5)
    assert KEY not in str(err) and "***" in str(err)
    assert (err.worker, err.kind, err.status, err.retry_after) == ("w", "bad_request", 400, 2.5)
    assert "Anthropic rejected the request" in str(err) and "(ValueError 400: invalid" in str(err)


def test_auth_errors_never_show_the_provider_text() -> None:
    exc = ValueError(f"Incorrect API key provided: {KEY[:6]}...{KEY[-4:]}")
    err = provider_error("w", "auth", exc, vendor="the endpoint", url="http://x", secret=KEY,
                         status=401)
    assert "Incorrect API key" not in str(err) and KEY[-4:] not in str(err)
    assert "(HTTP 401)" in str(err) and "api_key_env" in str(err)
    assert err.status == 401 and not err.retryable


def test_raw_text_is_scrubbed_then_cut_and_the_hint_names_the_url() -> None:
    raw = "x" * 298 + KEY  # scrubbed first: no half key survives the cut
    err = provider_error("w", "transport", ConnectionError("ignored"), vendor="Gemini",
                         url="http://127.0.0.1:9", secret=KEY, raw=raw)
    assert "could not reach http://127.0.0.1:9" in str(err)
    assert "x" * 298 + "**)" in str(err) and KEY[:4] not in str(err)
    assert "ignored" not in str(err) and err.status is None and err.retry_after is None


def test_unknown_kinds_get_the_general_hint() -> None:
    err = provider_error("w", "other", RuntimeError("boom"), vendor="Gemini", url=None,
                         secret=None)
    assert HINTS["other"].format(vendor="Gemini") in str(err) and "RuntimeError: boom" in str(err)


@pytest.mark.parametrize("sdk_name", ["openai", "anthropic"])
def test_the_stainless_sdks_sort_their_exceptions_alike(sdk_name: str) -> None:
    sdk = pytest.importorskip(sdk_name)
    exceptions = importlib.import_module(f"{sdk_name}._exceptions")
    httpx = getattr(exceptions, "httpx2", None) or exceptions.httpx  # the SDK's HTTP stack
    request = httpx.Request("POST", "http://127.0.0.1:9/v1")

    def status(cls: type, code: int, message: str = "failed") -> Exception:
        return cls(message, response=httpx.Response(code, request=request), body=None)

    def too_long(text: str) -> bool:
        return "context" in text

    cases = [
        (json.JSONDecodeError("cut", "{", 1), "server"),
        (status(sdk.AuthenticationError, 401), "auth"),
        (status(sdk.PermissionDeniedError, 403), "auth"),
        (status(sdk.RateLimitError, 429), "rate_limit"),
        (sdk.APIConnectionError(request=request), "transport"),
        (sdk.APITimeoutError(request=request), "transport"),
        (status(sdk.BadRequestError, 400, "prompt exceeds the context window"),
         "context_length"),
        (status(sdk.BadRequestError, 400, "unknown field"), "bad_request"),
        (status(sdk.InternalServerError, 503), "server"),
        (status(sdk.APIStatusError, 408), "server"),
        (status(sdk.APIStatusError, 418), "bad_request"),
        (RuntimeError("not from the SDK"), "other"),
    ]
    assert [sdk_error_kind(sdk, exc, too_long) for exc, _ in cases] == [k for _, k in cases]


def test_backends_without_grammar_say_what_to_do() -> None:
    client = FunctionClient(ModelSpec(name="tool", backend="function", function="x:y"),
                            fn=lambda messages: "ok")
    assert client.supports_grammar is False
    with pytest.raises(ConfigError, match="'tool' \\(backend 'function'\\) cannot take a "
                                          "grammar. Set constrained = false"):
        client.refuse_grammar('root ::= "a"')
    client.refuse_grammar(None)


@pytest.mark.parametrize("returned", [None, 5, ["a"], {"text": "a"}])
def test_a_function_that_returns_no_reply_fails_as_the_function(returned) -> None:
    """Not text made up from it ("None", "5"): the tool's failure, recorded on the step."""
    client = FunctionClient(ModelSpec(name="tool", backend="function", function="x:y"),
                            fn=lambda messages: returned)
    with pytest.raises(WorkerError) as caught:
        asyncio.run(client.chat([{"role": "user", "content": "hi"}]))
    assert caught.value.kind == "other" and type(returned).__name__ in str(caught.value)
