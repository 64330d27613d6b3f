"""A latency-controlled, OpenAI-compatible test endpoint for podium's tests and benchmarks.

This is a tiny *real* HTTP server (asyncio + uvicorn + starlette, bound to 127.0.0.1 only)
that speaks the OpenAI Chat Completions wire format, so the client code under test is
exercised end to end rather than through a mock object:

* every reply takes a set latency (`asyncio.sleep`), globally or per model;
* the server measures how many requests were in flight at once, overall and per model, and
  keeps a log of every request (model, start and end time, last user message);
* it can be told to fail, per model (`faults_by_model`), in one of these ways:

      "500"        HTTP 500
      "503"        HTTP 503 with a `Retry-After` header
      "429"        HTTP 429 with a `Retry-After` header
      "401"        HTTP 401 (a bad API key)
      "empty"      HTTP 200 whose reply text is ""
      "truncated"  HTTP 200, `application/json`, but only the first half of the JSON body
      "html"       HTTP 200, `text/html`: a web page, as from a base_url that names a website
      "nochoices"  HTTP 200, a chat completion whose `choices` is []
      "reset"      the connection is dropped (TCP reset) without any response
      "slow"       the reply takes 30 s (for client read-timeout tests)
      "hang"       the reply takes 3600 s

  `"<fault>x<N>"` (e.g. "429x2", "500x1", "emptyx2") fails that way for the first N requests
  to that model and then answers normally; the count is per model and `/reset` restarts it.
  `Retry-After` is 1 s unless `retry_after_by_model` gives a model another value (e.g. 0.2).

Replies are deterministic. By default a reply echoes what the model was shown:
`f"[{model}] " + <the last 60 characters of the last user message>`; a model listed in
`reply_by_model` answers a fixed string instead. Token counts are whitespace-separated words.

Tool calls: a model listed in `tool_calls_by_model` (model -> `[{"name": ..., "arguments":
JSON text or an object}, ...]`) answers a request that declares those tools (`tools`) with
calls to them, content null and `finish_reason: "tool_calls"` (only the named one under a
named `tool_choice`, none under `"none"`, the first only with `parallel_tool_calls: false`;
each call gets a new id), until the conversation ends with `tool` messages: then it answers in
text, `f"[{model}] tool results: " + <their contents joined by " | ">`.

Endpoints:

    POST /v1/chat/completions   a `chat.completion` (unknown body fields ignored); with
                                `stream: true`, its SSE chunks (text and tool calls in pieces)
    GET  /v1/models             the configured model names, or ["scripted"]
    GET  /stats                 the statistics below, as JSON
    POST /reset                 clears the statistics and restarts the counted faults

`GET /stats` returns:

    {
      "overall":  {"in_flight": int, "max_in_flight": int, "requests": int},
      "by_model": {MODEL: {"in_flight": int, "max_in_flight": int, "requests": int}, ...},
      "log": [{"model": str, "start_time": float, "end_time": float | null,
               "last_user_message": str, "status": int | null,
               "params": {every body field but messages},
               "auth_fingerprint": str | null,
               "tool_messages": [the assistant messages with tool_calls and the tool
                                 messages, as received]}, ...]
    }

Times are `time.time()` seconds; `end_time` and `status` are null while a request is still in
flight; `status` is 499 when the client went away before the reply and 0 when the server
dropped the connection (the "reset" fault). Request headers are never
stored (an Authorization header may carry a secret): only the body fields above are kept, and
`auth_fingerprint`, the first 16 hex digits of the header's SHA-256, so tests can tell which
key reached which server.

From tests and benchmarks, run it in a separate process with `ScriptedServer`:

    with ScriptedServer(latency=0.2, faults_by_model={"bad": "500"}) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x")
        ...
        assert server.stats()["overall"]["max_in_flight"] == 5

or in the foreground:

    python -m podium.testing.scripted_server --port 8099 --latency 0.05 \\
        --config '{"latency_by_model": {"slow": 1.0}, "faults_by_model": {"bad": "429x2"},
                   "retry_after_by_model": {"bad": 0.2}, "reply_by_model": {"fixed": "hello"},
                   "tool_calls_by_model": {"agent": [{"name": "get_weather",
                                                      "arguments": {"city": "Oslo"}}]},
                   "models": ["a", "b"]}'
"""


from __future__ import annotations

import sys

from podium.testing.scripted.app import build_app, main, serve
from podium.testing.scripted.handle import ScriptedServer
from podium.testing.scripted.settings import (
    CLIENT_GONE,
    CONNECTION_RESET,
    ECHO_CHARS,
    FAULTS,
    HANG_SECONDS,
    HOST,
    RETRY_AFTER_SECONDS,
    SLOW_SECONDS,
    ServerConfig,
    parse_fault,
)
from podium.testing.scripted.stats import Stats

__all__ = ["CLIENT_GONE", "CONNECTION_RESET", "ECHO_CHARS", "FAULTS", "HANG_SECONDS", "HOST",
           "RETRY_AFTER_SECONDS", "SLOW_SECONDS", "ScriptedServer", "ServerConfig", "Stats",
           "build_app", "main", "parse_fault", "serve"]

if __name__ == "__main__":
    sys.exit(main())
