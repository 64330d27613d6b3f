r"""An endpoint that echoes the request's Authorization header back, in every shape a reply can
take, never gets the key into what podium prints, traces or raises (`podium.redact`).

The server is a real HTTP server on localhost; each model name picks a shape: a 200 that is
not a completion, a redirect to a URL holding the key, a 400, a 500, an event stream instead of
JSON, a completion whose content is the key; a completion with the key as its `model`, its
`id`, its `finish_reason` or its `X-Request-Id` header; a 500 whose (cut-off, so quoted raw)
body writes the key `\u`-escaped; and a completion whose text holds it `\u`-escaped. A leak
is the key, a piece of it, or a piece of it in escapes. `podium ask --trace --debug`, `podium pool
check` and `podium serve` (its replies, streams, log and traces) run against each, and every
sink is searched for the key; so are the files of a `podium eval` against each shape, and a
worker served as a model of its own (`--pass-through`).
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from serve_helpers import Records, ThreadServer, auth
from typer.testing import CliRunner

from podium.cli.main import app

KEY = "sk-echo-0123456789abcdefSECRET"
SERVE_KEY = "sk-podium-echo-test-serve-key"
LABELS = ("in_model", "in_id", "in_finish", "in_header")  # the key in a reply's label
FIELDS = (*LABELS, "escaped_content")  # 200s
SHAPES = ("not_a_completion", "redirect", "bad_request", "server_error", "event_stream",
          "content", "escaped_error", *FIELDS)
QUOTED = ("not_a_completion", "bad_request", "server_error", "content", "escaped_error",
          *FIELDS)


def escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def leaks(text: str) -> bool:
    """Whether `text` holds the key, a piece of it, or a piece of it `\\u`-escaped (in any
    hex case, its backslashes doubled or not)."""
    flat = text.lower().replace("\\", "")
    return KEY in text or KEY[8:20] in text or escaped(KEY[8:20]).replace("\\", "") in flat


def leaked_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if leaks(line))[:3000]


class Echo(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):  # noqa: N802 (a redirect followed with GET)
        self._send(404, {"error": {"message": f"no {self.path}"}})

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        auth = self.headers.get("Authorization", "")
        key = auth.split()[-1] if auth else ""
        shape = body.get("model", "")
        if shape == "not_a_completion":
            self._send(200, {"debug": {"headers": {"Authorization": auth}}})
        elif shape == "redirect":
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:1/v1?auth={auth.split()[-1]}")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif shape == "bad_request":
            self._send(400, {"error": {"message": f"bad request from {auth}"}})
        elif shape == "server_error":
            self._send(500, {"error": {"message": f"upstream failed for {auth}"}})
        elif shape == "escaped_error":  # cut off: not JSON, so quoted as it came
            data = f'{{"error": {{"message": "upstream failed for {escaped(key)}'.encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif shape in FIELDS:
            self._send(200, {
                "id": key if shape == "in_id" else "x", "object": "chat.completion",
                "model": key if shape == "in_model" else shape,
                "choices": [{"index": 0, "finish_reason": key if shape == "in_finish" else "stop",
                             "message": {"role": "assistant", "content": escaped(key)
                                         if shape == "escaped_content" else "5"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 3}},
                headers={"X-Request-Id": key} if shape == "in_header" else {})
        elif shape == "event_stream":
            data = f'data: {{"error": {{"message": "{auth}"}}}}\n\n'.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._send(200, {"id": "x", "object": "chat.completion", "model": shape,
                             "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                 "role": "assistant", "content": f"your header: {auth}"}}],
                             "usage": {"prompt_tokens": 3, "completion_tokens": 3}})

    def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def echo_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def pool(tmp_path: Path, url: str, shape: str) -> Path:
    path = tmp_path / f"{shape}.toml"
    path.write_text(f"""
[conductor]
backend = "function"
function = "podium.testing.workers:one_step"

[[workers]]
name = "echo"
backend = "openai"
base_url = "{url}"
model = "{shape}"
api_key_env = "PODIUM_ECHO_KEY"
retries = 0
empty_retries = 0
timeout_s = 5

[run]
cache = false
""")
    return path


@pytest.mark.parametrize("shape", SHAPES)
def test_an_echoed_key_reaches_no_output_and_no_trace(shape, echo_url, tmp_path, monkeypatch):
    monkeypatch.setenv("PODIUM_ECHO_KEY", KEY)
    trace = tmp_path / "trace.json"
    runner = CliRunner()
    asked = runner.invoke(app, ["ask", "What is 2 + 3?", "--pool", str(pool(tmp_path, echo_url,
                                                                                shape)),
                                "--trace", str(trace), "--debug", "--no-cache"])
    checked = runner.invoke(app, ["pool", "check", "--pool", str(tmp_path / f"{shape}.toml"),
                                  "--debug"])
    for result in (asked, checked):
        assert result.exception is None or isinstance(result.exception, SystemExit), \
            result.output
    sinks = {"ask": asked.output, "pool check": checked.output,
             "trace": trace.read_text() if trace.exists() else ""}
    assert sinks["trace"], asked.output  # the run was recorded
    for where, text in sinks.items():
        assert not leaks(text), f"{shape}: the key is in {where}:\n{text[-3000:]}"
    if shape in QUOTED:  # podium quotes what came back: the key was there, and masked
        assert "***" in sinks["trace"]
    if shape == "in_model":  # `pool check`'s table shows the model that answered: masked
        assert "***" in checked.output, checked.output


@pytest.mark.parametrize("shape", ("not_a_completion", "bad_request", "server_error",
                                   "content", "escaped_error", *FIELDS))
def test_a_served_team_answers_api_clients_without_the_echoed_key(shape, echo_url, tmp_path,
                                                                   monkeypatch):
    """Through `podium serve`: the error body (and the stream's error event) or the answer
    an API client gets, the server's log and its traces hold no key."""
    monkeypatch.setenv("PODIUM_ECHO_KEY", KEY)
    records = Records()
    logging.getLogger().addHandler(records)
    try:
        with ThreadServer(pool(tmp_path, echo_url, shape), tmp_path / "traces",
                          keys=(SERVE_KEY,), pass_through=True) as server:
            body = {"model": "podium", "messages": [{"role": "user", "content": "2 + 3?"}]}
            plain = httpx.post(f"{server.base}/v1/chat/completions", json=body,
                               headers=auth(SERVE_KEY), timeout=30)
            streamed = httpx.post(f"{server.base}/v1/chat/completions",
                                  json={**body, "stream": True}, headers=auth(SERVE_KEY),
                                  timeout=30)
            direct = httpx.post(f"{server.base}/v1/chat/completions",
                                json={**body, "model": "echo"}, headers=auth(SERVE_KEY),
                                timeout=30)
            metrics = httpx.get(f"{server.base}/metrics", headers=auth(SERVE_KEY)).text
            viewer = basic_auth(SERVE_KEY)
            pages = [httpx.get(f"{server.base}/traces", headers=viewer).text]
            pages += [httpx.get(f"{server.base}/traces/{tid}", headers=viewer).text
                      for tid in set(re.findall(r"tr-[0-9a-f]{32}", pages[0]))]
    finally:
        logging.getLogger().removeHandler(records)
    traces = "".join(p.read_text() for p in (tmp_path / "traces").glob("*.json"))
    assert plain.status_code == (200 if shape in ("content", *FIELDS) else 502), plain.text
    assert direct.status_code == plain.status_code, direct.text
    assert traces and "***" in traces
    if shape in ("content", "escaped_content"):  # the answer quotes it (an error's details
        assert "***" in plain.text + streamed.text and "***" in direct.text  # stay in traces)
    assert "podium_" in metrics and len(pages) > 1 and all("<html" in p for p in pages)
    for where, text in {"reply": plain.text, "stream": streamed.text, "log": records.text,
                        "pass-through reply": direct.text, "traces": traces,
                        "/metrics": metrics, "viewer": "".join(pages)}.items():
        assert not leaks(text), f"{shape}: the key is in {where}: {leaked_lines(text)}"


def basic_auth(key: str) -> dict:
    """The viewer's Basic auth header (a browser's), the key as its password."""
    return {"Authorization": "Basic " + base64.b64encode(f"me:{key}".encode()).decode()}


@pytest.mark.parametrize("shape", ("content", "escaped_content", *LABELS))
def test_the_response_cache_stores_no_echoed_key(shape, echo_url, tmp_path, monkeypatch):
    """A reply that quotes the key is cached (and answered again from the cache) with the key
    masked: the SQLite file's bytes hold no piece of it."""
    monkeypatch.setenv("PODIUM_ECHO_KEY", KEY)
    path = pool(tmp_path, echo_url, shape)
    cache = tmp_path / "cache.sqlite"
    path.write_text(path.read_text().replace("cache = false",
                                             f'cache = true\ncache_path = "{cache}"'))
    runner = CliRunner()
    asked = [runner.invoke(app, ["ask", "What is 2 + 3?", "--pool", str(path), "--json"])
             for _ in range(2)]
    for result in asked:
        assert result.exit_code == 0, result.output
        assert not leaks(result.output), leaked_lines(result.output)
    assert json.loads(asked[1].output)["steps"][0]["cache_hit"], asked[1].output
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("cache.sqlite*"))
    assert stored and not leaks(stored.decode("utf-8", "replace")), leaked_lines(
        stored.decode("utf-8", "replace"))


@pytest.mark.parametrize("shape", SHAPES)
def test_podium_eval_writes_no_echoed_key(shape, echo_url, tmp_path, monkeypatch):
    """Every file of an eval's results folder (results, summary, traces, meta) and what it
    prints."""
    monkeypatch.setenv("PODIUM_ECHO_KEY", KEY)
    data = tmp_path / "sums.jsonl"
    data.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "5"}) + "\n")
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, [
        "eval", "--task", f"jsonl:{data}", "--pool", str(pool(tmp_path, echo_url, shape)),
        "--repeats", "1", "--out", str(out), "--task-option", "grader=numeric", "--no-cache",
        "--traces", "--debug"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    files = {str(p.relative_to(out)): p.read_bytes().decode("utf-8", "replace")
             for p in out.rglob("*") if p.is_file()}
    assert "results.jsonl" in files, (result.output, list(files))
    for where, text in {**files, "output": result.output}.items():
        assert not leaks(text), f"{shape}: the key is in {where}: {leaked_lines(text)}"
    if shape in QUOTED and shape not in LABELS:  # results hold no labels; traces do
        assert "***" in files["results.jsonl"]
    if shape in QUOTED:
        assert any("***" in text for name, text in files.items() if "trace" in name), list(files)
