"""Requests no client should send, against the real server: what is accepted is traced, and
what cannot be is refused with a 400 naming the field (lone surrogates, `NaN`, bad `stop`
values); nothing from a request reaches the log raw; a head of huge headers is refused
before it is held."""

from __future__ import annotations

import socket
import time

import pytest
from serve_helpers import CliServer, auth

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
Q = '"What is 2 + 5?"'
LONE = '"x\\ud800"'  # a JSON escape that decodes to a lone surrogate


def raw_post(http, path: str, body: str):
    return http.post(path, content=body.encode(), timeout=30,
                     headers={**auth(), "Content-Type": "application/json"})


@pytest.mark.parametrize("path,body,param", [
    (CHAT, f'{{"model": "podium", "messages": [{{"role": "user", "content": {LONE}}}]}}',
     "messages.0.content"),
    (CHAT, f'{{"model": "podium", "messages": [{{"role": "system", "content": {LONE}}}, '
           f'{{"role": "user", "content": {Q}}}]}}', "messages.0.content"),
    (CHAT, f'{{"model": "podium", "messages": [{{"role": "user", "content": [{{"type": '
           f'"text", "text": {Q}}}, {{"type": "text", "text": {LONE}}}]}}]}}',
     "messages.0.content.1.text"),
    (CHAT, f'{{"model": "podium", "messages": [{{"role": "user", "content": {Q}}}], '
           f'"user": {LONE}}}', "user"),
    (CHAT, f'{{"model": "podium", "messages": [{{"role": "user", "content": {Q}}}], '
           f'"stop": {LONE}}}', "stop"),
    (CHAT, f'{{"model": "podium", "messages": [{{"role": "user", "content": {Q}}}], '
           f'"stop": ["END", {LONE}]}}', "stop.1"),
    (CHAT, f'{{"model": "podium", "messages": [{{"role": "user", "content": {Q}}}], '
           f'"metadata": {{"note": {LONE}}}}}', "metadata.note"),
    (RESPONSES, f'{{"model": "podium", "input": {LONE}}}', "input"),
    (RESPONSES, f'{{"model": "podium", "input": {Q}, "instructions": {LONE}}}',
     "instructions"),
    (RESPONSES, f'{{"model": "podium", "input": [{{"role": "user", "content": [{{"type": '
                f'"input_text", "text": {LONE}}}]}}]}}', "input.0.content.0.text"),
    (RESPONSES, f'{{"model": "podium", "input": {Q}, "metadata": {{"x": {LONE}}}}}',
     "metadata.x"),
])
def test_a_lone_surrogate_is_refused_naming_its_field(http, path, body, param):
    reply = raw_post(http, path, body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    assert param in error["message"]


def test_a_surrogate_pair_is_a_character_answered_and_traced(http):
    body = ('{"model": "podium", "return_trace_id": true, "user": "\\ud83d\\ude00", '
            '"messages": [{"role": "user", "content": "\\ud83d\\ude00 What is 2 + 5?"}]}')
    reply = raw_post(http, CHAT, body)
    assert reply.status_code == 200, reply.text
    trace = http.get(f"/v1/traces/{reply.json()['podium_trace_id']}", headers=auth())
    assert trace.status_code == 200 and trace.json()["user"] == "\N{GRINNING FACE}"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_non_json_number_is_refused(http, constant):
    reply = raw_post(http, CHAT, f'{{"model": "podium", "messages": [{{"role": "user", '
                                 f'"content": {Q}}}], "metadata": {{"x": {constant}}}}}')
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize("stop", ["", [""], ["END", ""], "x" * 1001, ["END", "x" * 1001],
                                  ["a", "b", "c", "d", "e"]])
def test_a_bad_stop_is_a_400_naming_stop(http, stop):
    reply = http.post(CHAT, headers=auth(), timeout=30, json={
        "model": "podium", "stop": stop, "messages": [{"role": "user", "content": "2 + 5?"}]})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "stop" and error["type"] == "invalid_request_error", error


def test_four_stop_sequences_up_to_the_limit_are_taken(http):
    reply = http.post(CHAT, headers=auth(), timeout=30, json={
        "model": "podium", "stop": ["a" * 1000, "\n", " ", "END"],
        "messages": [{"role": "user", "content": "What is 2 + 5?"}]})
    assert reply.status_code == 200, reply.text


def raw_request(port: int, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        return sock.recv(65536)


def test_a_path_cannot_forge_a_log_line(server, logs):
    """CR/LF and an escape sequence, percent-encoded in the path of a request without a key:
    the access log writes them escaped, on the request's one line."""
    path = "/v1/x%0d%0aINFO%20podium:%20forged%20200%1b%5b2J%e2%80%a8"
    reply = raw_request(server.port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 ")
    for _ in range(50):
        lines = {line for line in logs.lines  # the handler is on each logger up the tree
                 if line.startswith("podium.serve ") and "forged" in line}
        if lines:
            break
        time.sleep(0.1)
    (line,) = lines
    assert all(c not in line for c in "\r\n\x1b\u2028"), repr(line)
    assert "\\r\\nINFO podium: forged 200\\x1b[2J\\u2028" in line, line


def test_huge_headers_are_refused_before_they_are_held(pool_file, tmp_path):
    """`podium serve` refuses a head of headers past its bound (a 431, or the connection
    closed while the client still sends), and goes on serving."""
    srv = CliServer(["--pool", str(pool_file), "--no-auth", "--trace-dir",
                     str(tmp_path / "traces")], tmp_path / "serve.log").wait()
    try:
        filler = b"x" * (16 << 20)
        got = b""
        with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as sock:
            try:
                sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                             + filler + b"\r\n\r\n")
                got = sock.recv(65536)
            except (BrokenPipeError, ConnectionResetError):
                got = b"closed"
        assert got.startswith((b"HTTP/1.1 431", b"closed")) or got == b"", got[:200]
        small = raw_request(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Ok: "
                            + b"y" * 8000 + b"\r\n\r\n")
        assert small.startswith(b"HTTP/1.1 200"), small[:200]
    finally:
        srv.stop()
    assert "Traceback" not in srv.log.read_text()

