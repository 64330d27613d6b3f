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

Endpoints:

    POST /v1/chat/completions   a non-streaming `chat.completion` (unknown body fields ignored)
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
               "auth_fingerprint": str | null}, ...]
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
                   "models": ["a", "b"]}'
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the server side needs starlette/uvicorn; the client side only the stdlib
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

HOST = "127.0.0.1"
FAULTS: tuple[str, ...] = (
    "500",
    "503",
    "429",
    "401",
    "empty",
    "truncated",
    "html",
    "nochoices",
    "reset",
    "slow",
    "hang",
)
HANG_SECONDS = 3600.0
SLOW_SECONDS = 30.0
RETRY_AFTER_SECONDS = 1.0  # the default Retry-After of the "429" and "503" faults
ECHO_CHARS = 60
CLIENT_GONE = 499  # the status logged for a request whose client disconnected before the reply
CONNECTION_RESET = 0  # the status logged for a request answered with the "reset" fault
_COUNTED = re.compile(r"^(?P<fault>[a-z0-9]+)x(?P<count>\d+)$")

_ERRORS: dict[str, tuple[int, str, str, str]] = {
    # fault: (status, message, type, code)
    "500": (500, "scripted fault: internal server error", "server_error", "internal_error"),
    "503": (503, "scripted fault: service unavailable", "server_error", "overloaded"),
    "429": (429, "scripted fault: rate limit reached", "rate_limit_error", "rate_limit_exceeded"),
    "401": (
        401,
        "scripted fault: incorrect API key provided",
        "invalid_request_error",
        "invalid_api_key",
    ),
}
_CONFIG_KEYS = (
    "latency_by_model",
    "faults_by_model",
    "retry_after_by_model",
    "reply_by_model",
    "models",
)


def parse_fault(spec: str) -> tuple[str, int | None]:
    """`"429"` -> ("429", None) (always); `"429x2"` -> ("429", 2) (the first 2 requests).
    ValueError for an unknown fault."""
    match = _COUNTED.match(spec)
    fault, count = (match["fault"], int(match["count"])) if match else (spec, None)
    if fault not in FAULTS:
        raise ValueError(
            f"{spec!r} is not a fault; use one of {', '.join(FAULTS)}, optionally followed by "
            "x<N> (e.g. 429x2) to fail only the first N requests"
        )
    return fault, count


# --------------------------------------------------------------------------------------------
# configuration


@dataclass
class ServerConfig:
    """How the server answers. Per-model settings override the global `latency`."""

    latency: float = 0.05
    latency_by_model: dict[str, float] = field(default_factory=dict)
    faults_by_model: dict[str, str] = field(default_factory=dict)
    retry_after_by_model: dict[str, float] = field(default_factory=dict)
    reply_by_model: dict[str, str] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.latency = float(self.latency)
        if self.latency < 0:
            raise ValueError(f"latency must be >= 0, got {self.latency}")
        self.latency_by_model = {str(k): float(v) for k, v in self.latency_by_model.items()}
        for model, value in self.latency_by_model.items():
            if value < 0:
                raise ValueError(f"latency_by_model[{model!r}] must be >= 0, got {value}")
        self.faults_by_model = {str(k): str(v) for k, v in self.faults_by_model.items()}
        for model, fault in self.faults_by_model.items():
            try:
                parse_fault(fault)
            except ValueError as exc:
                raise ValueError(f"faults_by_model[{model!r}]: {exc}") from None
        self.retry_after_by_model = {str(k): float(v) for k, v in self.retry_after_by_model.items()}
        for model, value in self.retry_after_by_model.items():
            if value < 0:
                raise ValueError(f"retry_after_by_model[{model!r}] must be >= 0, got {value}")
        self.reply_by_model = {str(k): str(v) for k, v in self.reply_by_model.items()}
        self.models = [str(m) for m in self.models]

    @classmethod
    def from_json(cls, text: str, latency: float = 0.05) -> ServerConfig:
        """Build from the `--config` JSON object (keys: latency_by_model, faults_by_model,
        retry_after_by_model, reply_by_model, models); unknown keys are an error."""
        data = json.loads(text or "{}")
        if not isinstance(data, dict):
            raise ValueError("--config must be a JSON object")
        unknown = sorted(set(data) - set(_CONFIG_KEYS))
        if unknown:
            raise ValueError(f"unknown --config keys {unknown}; use {', '.join(_CONFIG_KEYS)}")
        return cls(latency=latency, **data)

    def to_json(self) -> str:
        return json.dumps(
            {
                "latency_by_model": self.latency_by_model,
                "faults_by_model": self.faults_by_model,
                "retry_after_by_model": self.retry_after_by_model,
                "reply_by_model": self.reply_by_model,
                "models": self.models,
            }
        )

    def latency_for(self, model: str) -> float:
        return self.latency_by_model.get(model, self.latency)

    def retry_after_for(self, model: str) -> float:
        return self.retry_after_by_model.get(model, RETRY_AFTER_SECONDS)

    def model_names(self) -> list[str]:
        if self.models:
            return list(self.models)
        names = sorted({*self.latency_by_model, *self.faults_by_model, *self.reply_by_model})
        return names or ["scripted"]


# --------------------------------------------------------------------------------------------
# statistics (touched only from the event loop thread, so no locks)


@dataclass
class _Counter:
    in_flight: int = 0
    max_in_flight: int = 0
    requests: int = 0

    def start(self) -> None:
        self.in_flight += 1
        self.requests += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def as_dict(self) -> dict[str, int]:
        return {
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "requests": self.requests,
        }


class Stats:
    """In-flight counts (current and maximum), request counts and a request log; also how
    many requests each model has had since the last reset (for the counted faults)."""

    def __init__(self) -> None:
        self.overall = _Counter()
        self.by_model: dict[str, _Counter] = {}
        self.log: list[dict[str, Any]] = []
        self.seen: dict[str, int] = {}

    def arrival(self, model: str) -> int:
        """Count one more request to `model`; return how many came before it."""
        before = self.seen.get(model, 0)
        self.seen[model] = before + 1
        return before

    def start(self, model: str, last_user_message: str, params: dict[str, Any] | None = None,
              auth_fingerprint: str | None = None) -> dict[str, Any]:
        self.overall.start()
        self.by_model.setdefault(model, _Counter()).start()
        entry: dict[str, Any] = {
            "model": model,
            "start_time": time.time(),
            "end_time": None,
            "last_user_message": last_user_message,
            "status": None,
            "params": params or {},
            "auth_fingerprint": auth_fingerprint,
        }
        self.log.append(entry)
        return entry

    def end(self, entry: dict[str, Any], status: int) -> None:
        entry["end_time"] = time.time()
        entry["status"] = status
        self.overall.in_flight -= 1
        counter = self.by_model.get(entry["model"])
        if counter is not None:
            counter.in_flight -= 1

    def reset(self) -> None:
        """Forget everything except the requests still in flight (they are still counted as
        in flight, and they end normally, but they are no longer in the log). Counted faults
        start counting again."""
        self.seen = {}
        self.overall = _Counter(self.overall.in_flight, self.overall.in_flight, 0)
        self.by_model = {
            model: _Counter(c.in_flight, c.in_flight, 0)
            for model, c in self.by_model.items()
            if c.in_flight > 0
        }
        self.log = []

    def as_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall.as_dict(),
            "by_model": {model: c.as_dict() for model, c in sorted(self.by_model.items())},
            "log": [dict(entry) for entry in self.log],
        }


# --------------------------------------------------------------------------------------------
# request helpers


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return ""


def fingerprint(headers: Any) -> str | None:
    """A short one-way hash of the Authorization header (None when absent): lets a test check
    which key reached which endpoint without the server ever storing a key."""
    value = headers.get("authorization")
    if not value:
        return None
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def _last_user_message(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


def _count_words(text: str) -> int:
    return len(text.split())


def _error_body(message: str, type_: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


async def _wait_for_disconnect(request: Request) -> None:
    # After the body has been read, the next ASGI message is `http.disconnect`, which uvicorn
    # sends only when the client goes away.
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


# The open connections of the server started by `serve()`, by client address, so that the
# "reset" fault can drop the connection a request came on (ASGI gives the app no socket).
_TRANSPORTS: dict[tuple[Any, ...], asyncio.BaseTransport] = {}


def _tracking_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, remembering each connection's transport in `_TRANSPORTS`."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class TrackingProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._podium_peer = transport.get_extra_info("peername")
            if self._podium_peer is not None:
                _TRANSPORTS[tuple(self._podium_peer)] = transport

        def connection_lost(self, exc: Exception | None) -> None:
            if getattr(self, "_podium_peer", None) is not None:
                _TRANSPORTS.pop(tuple(self._podium_peer), None)
            super().connection_lost(exc)

    return TrackingProtocol


async def _reset_connection(request: Request) -> None:
    """Drop the request's connection with a TCP reset, without sending a response."""
    client = request.scope.get("client")
    transport = _TRANSPORTS.get(tuple(client)) if client else None
    if transport is None:
        raise RuntimeError("the 'reset' fault works only in the server started by serve()")
    sock = transport.get_extra_info("socket")
    if sock is not None:  # linger 0: close() sends RST instead of FIN
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()  # type: ignore[attr-defined]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_wait_for_disconnect(request), 5.0)


def _fault_for(config: ServerConfig, stats: Stats, model: str) -> str | None:
    """The fault this request gets: the model's fault, unless it is counted and used up."""
    spec = config.faults_by_model.get(model)
    if spec is None:
        return None
    fault, count = parse_fault(spec)
    if count is None:
        return fault
    return fault if stats.arrival(model) < count else None


async def _sleep_unless_disconnected(request: Request, seconds: float) -> bool:
    """Sleep `seconds`; return False as soon as the client disconnects, True otherwise."""
    sleeper = asyncio.ensure_future(asyncio.sleep(seconds))
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        done, _ = await asyncio.wait({sleeper, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if sleeper in done:
            return True
        if watcher.exception() is not None:  # cannot watch: just sleep
            await sleeper
            return True
        return False
    finally:
        sleeper.cancel()
        watcher.cancel()


# --------------------------------------------------------------------------------------------
# the app


def build_app(config: ServerConfig, stats: Stats | None = None) -> Starlette:
    """The Starlette app. `stats` may be passed in to inspect it in-process."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    stats = stats if stats is not None else Stats()

    def error(
        status: int,
        message: str,
        type_: str,
        code: str | None,
        headers: dict[str, str] | None = None,
    ) -> JSONResponse:
        return JSONResponse(_error_body(message, type_, code), status_code=status, headers=headers)

    async def chat_completions(request: Request) -> Response:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return error(400, "request body is not valid JSON", "invalid_request_error", None)
        if not isinstance(body, dict):
            return error(400, "request body must be a JSON object", "invalid_request_error", None)
        model = body.get("model")
        messages = body.get("messages")
        if not isinstance(model, str) or not model:
            return error(
                400, "`model` must be a non-empty string", "invalid_request_error", "missing_model"
            )
        if not isinstance(messages, list):
            return error(
                400, "`messages` must be a list", "invalid_request_error", "invalid_messages"
            )
        if body.get("stream"):
            return error(
                400,
                "the scripted server does not support stream=true",
                "invalid_request_error",
                "stream_not_supported",
            )

        last_user = _last_user_message(messages)
        fault = _fault_for(config, stats, model)
        delay = {"hang": HANG_SECONDS, "slow": SLOW_SECONDS}.get(
            fault or "", config.latency_for(model)
        )
        params = {k: v for k, v in body.items() if k != "messages"}
        entry = stats.start(model, last_user, params, fingerprint(request.headers))
        status = CLIENT_GONE
        try:
            if not await _sleep_unless_disconnected(request, delay):
                return error(CLIENT_GONE, "client disconnected", "client_closed", None)
            if fault in _ERRORS:
                status, message, type_, code = _ERRORS[fault]
                headers = None
                if fault in ("429", "503"):
                    headers = {"Retry-After": f"{config.retry_after_for(model):g}"}
                return error(status, message, type_, code, headers)
            if fault == "reset":
                status = CONNECTION_RESET
                await _reset_connection(request)
                return error(CLIENT_GONE, "connection reset", "connection_reset", None)
            if fault == "empty":
                text = ""
            elif model in config.reply_by_model:
                text = config.reply_by_model[model]
            else:
                text = f"[{model}] " + last_user[-ECHO_CHARS:]
            prompt_tokens = sum(
                _count_words(_text_of(m.get("content"))) for m in messages if isinstance(m, dict)
            )
            completion_tokens = _count_words(text)
            status = 200
            reply = JSONResponse(
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens,
                        "completion_tokens_details": {"reasoning_tokens": 0},
                    },
                },
                headers={"x-request-id": f"req-{uuid.uuid4().hex[:16]}"},
            )
            if fault == "truncated":
                half = bytes(reply.body[: len(reply.body) // 2])
                return Response(half, status_code=200, media_type="application/json")
            if fault == "html":
                return Response("<!doctype html><title>Welcome</title>", status_code=200,
                                media_type="text/html")
            if fault == "nochoices":
                data = json.loads(reply.body)
                return JSONResponse({**data, "choices": []})
            return reply
        finally:
            stats.end(entry, status)

    async def models(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": name, "object": "model", "created": 0, "owned_by": "podium-scripted"}
                    for name in config.model_names()
                ],
            }
        )

    async def get_stats(request: Request) -> JSONResponse:
        return JSONResponse(stats.as_dict())

    async def reset(request: Request) -> JSONResponse:
        stats.reset()
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/stats", get_stats, methods=["GET"]),
            Route("/reset", reset, methods=["POST"]),
        ]
    )


def serve(port: int, config: ServerConfig) -> None:
    """Run the server in the foreground on 127.0.0.1:`port` until interrupted."""
    import uvicorn

    uvicorn.run(
        build_app(config),
        host=HOST,
        port=port,
        workers=1,
        log_level="warning",
        access_log=False,
        http=_tracking_protocol(),  # for the "reset" fault
        limit_concurrency=None,  # never let the server cap the concurrency being measured
        backlog=4096,
        timeout_graceful_shutdown=1,  # do not wait for "hang" requests on shutdown
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m podium.testing.scripted_server",
        description="A latency-controlled OpenAI-compatible test server on 127.0.0.1.",
    )
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument(
        "--latency", type=float, default=0.05, help="seconds each reply takes (default 0.05)"
    )
    parser.add_argument(
        "--config",
        default="{}",
        help="JSON object with latency_by_model, faults_by_model (model -> "
        f"{'|'.join(FAULTS)}, or <fault>x<N> for the first N requests only), "
        "retry_after_by_model, reply_by_model and models",
    )
    args = parser.parse_args(argv)
    try:
        config = ServerConfig.from_json(args.config, latency=args.latency)
    except (ValueError, TypeError) as exc:
        parser.error(f"--config: {exc}")
    serve(args.port, config)
    return 0


# --------------------------------------------------------------------------------------------
# the client-side handle (standard library only)

_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _request_json(method: str, url: str, body: Any = None, timeout: float = 10.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with _NO_PROXY_OPENER.open(request, timeout=timeout) as response:
        return json.loads(response.read().decode())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class ScriptedServer:
    """Runs the scripted server in a subprocess on a free 127.0.0.1 port.

    Use as a context manager (or call `start()` / `stop()`); `base_url` is the OpenAI base
    URL (`http://127.0.0.1:PORT/v1`), `stats()` returns the `/stats` JSON and `reset()` clears
    it. On exit the process is terminated, and killed if it has not stopped within 5 s.
    """

    def __init__(
        self,
        latency: float = 0.05,
        *,
        latency_by_model: dict[str, float] | None = None,
        faults_by_model: dict[str, str] | None = None,
        retry_after_by_model: dict[str, float] | None = None,
        reply_by_model: dict[str, str] | None = None,
        models: list[str] | None = None,
        startup_timeout: float = 20.0,
    ) -> None:
        self.config = ServerConfig(
            latency=latency,
            latency_by_model=dict(latency_by_model or {}),
            faults_by_model=dict(faults_by_model or {}),
            retry_after_by_model=dict(retry_after_by_model or {}),
            reply_by_model=dict(reply_by_model or {}),
            models=list(models or []),
        )
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None

    # -- urls ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The server root, e.g. `http://127.0.0.1:PORT`."""
        if self.port is None:
            raise RuntimeError("ScriptedServer is not started; use `with ScriptedServer(...)`")
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, e.g. `http://127.0.0.1:PORT/v1`."""
        return f"{self.url}/v1"

    # -- statistics ---------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The `/stats` JSON: `overall`, `by_model` and `log` (see the module docstring)."""
        return _request_json("GET", f"{self.url}/stats")

    def reset(self) -> None:
        """Clear the statistics and restart the counted faults."""
        _request_json("POST", f"{self.url}/reset", body={})

    # -- lifetime -----------------------------------------------------------------------------

    def start(self) -> ScriptedServer:
        if self._process is not None:
            return self
        deadline = time.monotonic() + self.startup_timeout
        last_error = ""
        for _attempt in range(3):  # another process may take the free port before we bind it
            self._spawn(_free_port())
            ready, last_error = self._wait_ready(deadline)
            if ready:
                return self
            self.stop()
            if time.monotonic() >= deadline or "address already in use" not in last_error.lower():
                break
        raise RuntimeError(f"the scripted server did not start: {last_error}")

    def _spawn(self, port: int) -> None:
        self.port = port
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # so `-m podium...` works uninstalled
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        command = [
            sys.executable,
            "-m",
            "podium.testing.scripted_server",
            "--port",
            str(port),
            "--latency",
            repr(self.config.latency),
            "--config",
            self.config.to_json(),
        ]
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=env,
        )

    def _stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace").strip()[-2000:]

    def _wait_ready(self, deadline: float) -> tuple[bool, str]:
        assert self._process is not None
        while True:
            if self._process.poll() is not None:
                return False, (
                    f"exited with code {self._process.returncode}: {self._stderr_text()}"
                )
            try:
                _request_json("GET", f"{self.base_url}/models", timeout=1.0)
                return True, ""
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() >= deadline:
                return False, (
                    f"{self.base_url}/models did not answer within {self.startup_timeout:g} s; "
                    f"stderr: {self._stderr_text()}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
