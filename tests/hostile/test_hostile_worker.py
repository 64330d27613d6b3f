"""A hostile or broken worker is the worker's fault, and costs nothing it should not.

A real OpenAI-compatible endpoint on localhost, written here on raw sockets so that it can
send what no well-behaved server does: content that is a number, a list or an object; usage
that is NaN, Infinity, a string, negative or fractional; JSON nested 100k deep; the
non-standard constants; a gzip body that inflates far past any reply; a reply that drips in a
byte at a time; an event stream of garbage. Each model name picks a shape. Every one must end
as a worker failure (kind `server` or `transport`, class `worker`, retried as the docs say),
never a crash, an infra failure, usage that lowers what a run used, or a non-standard JSON
constant in `podium ask --json`; on both transports, whole and streamed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import socket
import socketserver
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from podium.cli.main import app
from podium.config import ModelSpec
from podium.errors import WorkerError
from podium.llm.openai_compat import OpenAICompatClient
from podium.llm.registry import build_client

TRANSPORTS = ("aiohttp", "openai-sdk")
BIG = 20_000_000  # what the bomb inflates to: twice the default max_reply_bytes


def completion(content: str = "fine", usage: str = '{"prompt_tokens": 3, '
               '"completion_tokens": 2}') -> bytes:
    """A chat completion's JSON, written by hand (so that it can hold what json.dumps won't)."""
    return (f'{{"id": "c1", "object": "chat.completion", "model": "m", "choices": [{{"index": 0, '
            f'"finish_reason": "stop", "message": {{"role": "assistant", "content": {content}}}}}'
            f'], "usage": {usage}}}').encode()


def usage(value: str) -> bytes:
    return completion('"fine"', f'{{"prompt_tokens": {value}, "completion_tokens": 2}}')


DEEP = b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
BROKEN = {
    "content_int": completion("5"),
    "content_list": completion('["a", "b"]'),
    "content_dict": completion('{"text": "a"}'),
    "usage_nan": usage("NaN"),
    "usage_infinity": usage("Infinity"),
    "usage_string": usage('"12"'),
    "usage_negative": usage("-1000000000"),
    "usage_float": usage("2.5"),
    "deep": DEEP,
    "constant": completion('"fine"', '{"prompt_tokens": 3, "completion_tokens": 2, '
                           '"cost": -Infinity}'),
}


NATIVE = {  # the vendors' own APIs: Anthropic's Messages, Gemini's generateContent
    "anthropic_nan_usage": b'{"id": "msg_1", "type": "message", "role": "assistant", "model": '
    b'"m", "content": [{"type": "text", "text": "fine"}], "stop_reason": "end_turn", '
    b'"usage": {"input_tokens": NaN, "output_tokens": 2}}',
    "anthropic_int_text": b'{"id": "msg_1", "type": "message", "role": "assistant", "model": '
    b'"m", "content": [{"type": "text", "text": 5}], "stop_reason": "end_turn", '
    b'"usage": {"input_tokens": 3, "output_tokens": 2}}',
    "anthropic_deep": DEEP,
    "gemini_negative_usage": b'{"candidates": [{"content": {"role": "model", "parts": [{"text": '
    b'"fine"}]}, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": -5, '
    b'"candidatesTokenCount": 2}, "modelVersion": "m", "responseId": "r"}',
    "gemini_nan_usage": b'{"candidates": [{"content": {"role": "model", "parts": [{"text": '
    b'"fine"}]}, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": NaN, '
    b'"candidatesTokenCount": 2}, "modelVersion": "m", "responseId": "r"}',
    "gemini_deep": DEEP,
}


def _bomb() -> bytes:
    return gzip.compress(completion('"' + "a" * BIG + '"'), compresslevel=1)


class Hostile(socketserver.BaseRequestHandler):
    """One request: read it, answer in the shape its `model` names."""

    def handle(self) -> None:
        conn: socket.socket = self.request
        data = b""
        while b"\r\n\r\n" not in data:
            piece = conn.recv(65536)
            if not piece:
                return
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        path = head.split(b" ")[1].decode()
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            body += conn.recv(65536)
        request = json.loads(body)
        shape = request.get("model") or path.rpartition("/models/")[2].partition(":")[0]
        self.server.counts[shape] += 1  # type: ignore[attr-defined]
        with contextlib.suppress(OSError):  # the client went away (a cap, a deadline)
            self.answer(conn, shape, request)

    def answer(self, conn: socket.socket, shape: str, request: dict) -> None:
        if shape in NATIVE:
            return send(conn, NATIVE[shape])
        if shape in BROKEN:
            return send(conn, BROKEN[shape])
        if shape == "bomb":
            return send(conn, self.server.bomb, ("Content-Encoding", "gzip"))  # type: ignore
        if shape == "drip":  # a byte every 0.3 s: never silent long enough for a read timeout
            body = completion()
            conn.sendall(head_of(len(body)))
            for byte in body:
                conn.sendall(bytes([byte]))
                time.sleep(0.3)
            return None
        if shape == "sse_garbage":
            events = b"data: {this is not json\n\ndata: [DONE]\n\n"
            return send(conn, events, content_type="text/event-stream")
        if shape == "sse_drip":  # valid events, one every 0.3 s, for ever (or 60 of them)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Connection: close\r\n\r\n")
            for _ in range(60):
                chunk = {"id": "c", "model": "m", "choices": [
                    {"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}
                conn.sendall(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                time.sleep(0.3)
            return None
        return send(conn, completion())


def head_of(length: int, *headers: tuple[str, str],
            content_type: str = "application/json") -> bytes:
    lines = ["HTTP/1.1 200 OK", f"Content-Type: {content_type}", f"Content-Length: {length}",
             "Connection: close", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def send(conn: socket.socket, body: bytes, *headers: tuple[str, str],
         content_type: str = "application/json") -> None:
    conn.sendall(head_of(len(body), *headers, content_type=content_type) + body)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture(scope="module")
def hostile():
    server = Server(("127.0.0.1", 0), Hostile)
    server.counts = Counter()  # type: ignore[attr-defined]
    server.bomb = _bomb()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def spec(server, shape: str, transport: str, **settings) -> ModelSpec:
    return ModelSpec(name="hostile", backend="openai", base_url=url(server), model=shape,
                     transport=transport, **settings)


def call(model: ModelSpec, on_text=None):
    async def main():
        client = OpenAICompatClient(model)
        try:
            kw = {} if on_text is None else {"on_text": on_text}
            return await client.chat([{"role": "user", "content": "hi"}], **kw)
        finally:
            await client.aclose()
    return asyncio.run(main())


def pool(tmp_path: Path, server, shape: str, transport: str) -> Path:
    path = tmp_path / f"{shape}-{transport}.toml"
    path.write_text(f"""
[conductor]
backend = "function"
function = "podium.testing.workers:one_step"

[[workers]]
name = "hostile"
backend = "openai"
base_url = "{url(server)}"
model = "{shape}"
transport = "{transport}"
retries = 1
backoff_s = 0
empty_retries = 0
timeout_s = 10
price = {{ input = 1.0, output = 1.0 }}

[run]
cache = false
max_tokens = 100000
""")
    return path


def _strict(text: str):
    def refuse(name):
        raise AssertionError(f"{name} in podium's JSON")
    return json.loads(text, parse_constant=refuse)


def _failures(data) -> list[dict]:
    """Every failure record anywhere in `ask --json`'s output."""
    found: list[dict] = []
    if isinstance(data, dict):
        if {"class", "reason", "detail"} <= data.keys():
            found.append(data)
        for value in data.values():
            found += _failures(value)
    elif isinstance(data, list):
        for value in data:
            found += _failures(value)
    return found


def _used(data) -> list[dict]:
    found: list[dict] = []
    if isinstance(data, dict):
        if "total_tokens" in data and "cost_usd" in data:
            found.append(data)
        for value in data.values():
            found += _used(value)
    elif isinstance(data, list):
        for value in data:
            found += _used(value)
    return found


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("shape", sorted(BROKEN))
def test_a_broken_reply_is_a_retried_worker_failure_in_ask_json(shape, transport, hostile,
                                                               tmp_path):
    before = hostile.counts[shape]
    result = CliRunner().invoke(app, ["ask", "What is 2 + 3?", "--json", "--no-cache",
                                      "--pool", str(pool(tmp_path, hostile, shape, transport))])
    assert isinstance(result.exception, SystemExit | None), result.output
    assert "Unexpected error" not in result.output and "Traceback" not in result.output
    data = _strict(result.stdout.strip().splitlines()[-1])
    failures = _failures(data)
    assert failures, result.output
    assert all(f["class"] == "worker" for f in failures), failures
    assert {f["reason"] for f in failures} == {"server"}, failures
    assert hostile.counts[shape] - before == 2  # asked again once (retries = 1), as documented
    for used in _used(data):  # a broken usage never lowers (or poisons) what the run used
        assert used["total_tokens"] >= 0 and (used["cost_usd"] or 0) >= 0, used


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_reply_that_inflates_past_the_cap_is_cut_off(transport, hostile):
    with pytest.raises(WorkerError) as caught:
        call(spec(hostile, "bomb", transport))
    assert caught.value.kind == "server" and "max_reply_bytes" in str(caught.value)


def test_the_cap_is_a_setting(hostile):
    """A reply under a raised cap is taken whole; the default cap is the documented one."""
    reply = call(spec(hostile, "bomb", "aiohttp", max_reply_bytes=BIG + 1000))
    assert len(reply.text) == BIG
    assert ModelSpec(name="x", backend="function").max_reply_bytes == 10_000_000


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_timeout_s_bounds_a_reply_that_drips_in(transport, hostile):
    start = time.monotonic()
    with pytest.raises(WorkerError) as caught:
        call(spec(hostile, "drip", transport, timeout_s=1.0))
    assert time.monotonic() - start < 5  # the whole reply would take about 50 s
    assert caught.value.kind == "transport" and "timeout_s = 1 s" in str(caught.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_timeout_s_bounds_a_stream_that_drips_in(transport, hostile):
    pieces: list[str] = []
    start = time.monotonic()
    with pytest.raises(WorkerError) as caught:
        call(spec(hostile, "sse_drip", transport, timeout_s=1.0), on_text=pieces.append)
    assert time.monotonic() - start < 5 and pieces  # it streamed, then was cut off
    assert caught.value.kind == "transport" and "timeout_s" in str(caught.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_stream_of_garbage_is_a_worker_failure(transport, hostile):
    with pytest.raises(WorkerError) as caught:
        call(spec(hostile, "sse_garbage", transport), on_text=lambda piece: None)
    assert caught.value.kind == "server" and "broken stream" in str(caught.value)


@pytest.mark.parametrize("shape", sorted(NATIVE))
def test_the_vendor_backends_take_a_broken_reply_as_the_workers_failure(shape, hostile,
                                                                        monkeypatch):
    backend = shape.partition("_")[0]
    pytest.importorskip("anthropic" if backend == "anthropic" else "google.genai")
    monkeypatch.setenv("PODIUM_HOSTILE_KEY", "sk-hostile-native-key")
    model = ModelSpec(name="hostile", backend=backend, model=shape, retries=0,
                      api_key_env="PODIUM_HOSTILE_KEY",
                      base_url=f"http://127.0.0.1:{hostile.server_address[1]}")

    async def main():
        client = build_client(model)
        try:
            return await client.chat([{"role": "user", "content": "hi"}])
        finally:
            await client.aclose()

    with pytest.raises(WorkerError) as caught:
        asyncio.run(main())
    assert caught.value.kind == "server", caught.value
