"""The scripted server itself: the Starlette app that answers, fails and counts (`build_app`),
run by `serve`, with the command line `python -m podium.testing.scripted_server` calls (`main`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import socket
import struct
import time
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the server side needs starlette/uvicorn; the client side only the stdlib
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

from podium.testing.scripted.settings import (
    _ERRORS,
    CLIENT_GONE,
    CONNECTION_RESET,
    ECHO_CHARS,
    FAULTS,
    HANG_SECONDS,
    HOST,
    SLOW_SECONDS,
    ServerConfig,
    parse_fault,
)
from podium.testing.scripted.stats import Stats

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


def _tool_messages(messages: list[Any]) -> list[Any]:
    """The messages of a tool exchange, as received: assistant messages with `tool_calls` and
    `tool` messages."""
    return [m for m in messages if isinstance(m, dict) and (
        m.get("role") == "tool" or (m.get("role") == "assistant" and "tool_calls" in m))]


def _tool_results(messages: list[Any]) -> list[str] | None:
    """The contents of the `tool` messages that end the conversation; None when it does not
    end with one."""
    results: list[str] = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        results.insert(0, _text_of(message.get("content")))
    return results or None


def _calls_to_make(config: ServerConfig, model: str, body: dict[str, Any]
                   ) -> list[dict[str, Any]]:
    """The scripted calls of `model` that this request lets it make: of the tools it
    declares, as its `tool_choice` allows, unless the conversation ends with tool results."""
    scripted = config.tool_calls_by_model.get(model)
    choice = body.get("tool_choice")
    if not scripted or choice == "none" or _tool_results(body["messages"]) is not None:
        return []
    declared = {(tool.get("function") or {}).get("name") for tool in body.get("tools") or []
                if isinstance(tool, dict)}
    if isinstance(choice, dict):
        declared &= {(choice.get("function") or {}).get("name")}
    calls = [call for call in scripted if call["name"] in declared]
    if body.get("parallel_tool_calls") is False:
        calls = calls[:1]
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": call["name"], "arguments": call["arguments"]}}
            for call in calls]


STREAM_PIECE = 4  # characters per streamed content delta
STREAM_GAP_S = 0.01  # between deltas: a client sees the reply arrive in pieces


def _streamed(reply: dict, body: dict, truncated: bool, headers: dict) -> Any:
    """`reply` (a chat.completion) as OpenAI streams it: a role chunk, the content in pieces,
    each tool call (its id and name, then its arguments in pieces), the finish chunk, the
    usage chunk when `stream_options.include_usage` asks, [DONE]. A `truncated` stream stops
    halfway, as a dropped connection does."""
    from starlette.responses import StreamingResponse

    message = reply["choices"][0]["message"]
    text = message["content"] or ""
    finish = reply["choices"][0]["finish_reason"]
    head = {k: reply[k] for k in ("id", "created", "model")}
    deltas: list[dict[str, Any]] = [{"content": text[i:i + STREAM_PIECE]}
                                    for i in range(0, len(text), STREAM_PIECE)]
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        deltas.append({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                       "function": {"name": call["function"]["name"],
                                                    "arguments": ""}}]})
        deltas += [{"tool_calls": [{"index": index, "function": {
            "arguments": arguments[i:i + STREAM_PIECE]}}]}
            for i in range(0, len(arguments), STREAM_PIECE)]

    def chunk(delta: dict | None, finish: str | None = None, **more: Any) -> bytes:
        choices = [] if delta is None else [{"index": 0, "delta": delta,
                                             "finish_reason": finish}]
        data = {**head, "object": "chat.completion.chunk", "choices": choices, **more}
        return f"data: {json.dumps(data)}\n\n".encode()

    async def events():
        yield chunk({"role": "assistant", "content": ""})
        for n, delta in enumerate(deltas):
            if truncated and n >= len(deltas) // 2:
                return
            await asyncio.sleep(STREAM_GAP_S)
            yield chunk(delta)
        yield chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            yield chunk(None, usage=reply["usage"])
        yield b"data: [DONE]\n\n"

    keep = {k: v for k, v in headers.items() if k.lower() == "x-request-id"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=keep)


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

    # (AutoHTTPProtocol is a variable: the class uvicorn picks when it is imported)
    class TrackingProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
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

        last_user = _last_user_message(messages)
        fault = _fault_for(config, stats, model)
        delay = {"hang": HANG_SECONDS, "slow": SLOW_SECONDS}.get(
            fault or "", config.latency_for(model)
        )
        params = {k: v for k, v in body.items() if k != "messages"}
        entry = stats.start(model, last_user, params, fingerprint(request.headers),
                            _tool_messages(messages))
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
            calls = [] if fault == "empty" else _calls_to_make(config, model, body)
            results = _tool_results(messages)
            if fault == "empty" or calls:
                text = ""
            elif results is not None and model in config.tool_calls_by_model:
                text = f"[{model}] tool results: " + " | ".join(results)
            elif model in config.reply_by_model:
                text = config.reply_by_model[model]
            else:
                text = f"[{model}] " + last_user[-ECHO_CHARS:]
            prompt_tokens = sum(
                _count_words(_text_of(m.get("content"))) for m in messages if isinstance(m, dict)
            )
            completion_tokens = _count_words(text) + sum(
                _count_words(call["function"]["arguments"]) for call in calls)
            answer: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                answer.update(content=None, tool_calls=calls)
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
                            "message": answer,
                            "finish_reason": "tool_calls" if calls else "stop",
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
            if body.get("stream"):
                return _streamed(json.loads(bytes(reply.body)), body, fault == "truncated",
                                 dict(reply.headers))
            if fault == "truncated":
                half = bytes(reply.body[: len(reply.body) // 2])
                return Response(half, status_code=200, media_type="application/json")
            if fault == "html":
                return Response("<!doctype html><title>Welcome</title>", status_code=200,
                                media_type="text/html")
            if fault == "nochoices":
                data = json.loads(bytes(reply.body))
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
        "retry_after_by_model, reply_by_model, tool_calls_by_model (model -> [{name, "
        "arguments}]) and models",
    )
    args = parser.parse_args(argv)
    try:
        config = ServerConfig.from_json(args.config, latency=args.latency)
    except (ValueError, TypeError) as exc:
        parser.error(f"--config: {exc}")
    serve(args.port, config)
    return 0
