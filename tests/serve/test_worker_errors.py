"""A failing worker's details stay with the operator: an API client of `podium serve` is told
which worker failed and how (its kind), with the trace id; never the pool's endpoints, their
credentials or their error text. Both APIs, streamed and not, against a real hostile endpoint
(a 500 naming an internal host) and one that nothing answers."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from serve_helpers import Records, ThreadServer, auth
from support import free_port

INTERNAL = "internal-gpu-box.corp.example"
PASSWORD = "pw-0f9e8d7c6b5a"
SERVE_KEY = "sk-podium-worker-errors-key"


class Failing(BaseHTTPRequestHandler):
    """An upstream whose every answer is a 500 that names the pool's internal host."""

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        data = json.dumps({"error": {"message": f"backend http://{INTERNAL}:9000/v1 is out of "
                                                "memory"}}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server whose pool has `failing` (a 500 naming an internal host), `unreachable`
    (nothing listens) and `with_password` (`failing` behind a base_url with credentials);
    and its log."""
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    folder = tmp_path_factory.mktemp("worker-errors")
    port = upstream.server_address[1]
    urls = {"failing": f"http://127.0.0.1:{port}/v1",
            "unreachable": f"http://127.0.0.1:{free_port()}/v1",
            "with_password": f"http://user:{PASSWORD}@127.0.0.1:{port}/v1"}
    workers = "".join(f"""
[[workers]]
name = "{name}"
backend = "openai"
base_url = "{url}"
model = "m"
{'' if "@" in url else 'api_key_env = "PODIUM_WORKER_ERRORS_KEY"'}
retries = 0
empty_retries = 0
timeout_s = 5
""" for name, url in urls.items())
    pool = folder / "pool.toml"
    pool.write_text('[conductor]\nbackend = "function"\n'
                    'function = "podium.testing.workers:one_step"\n'
                    f'{workers}\n[run]\ncache = false\n')
    records = Records()
    root = logging.getLogger()
    root.addHandler(records)
    mp = pytest.MonkeyPatch()
    mp.setenv("PODIUM_WORKER_ERRORS_KEY", "sk-upstream")
    try:
        with ThreadServer(pool, folder / "traces", keys=(SERVE_KEY,)) as server:
            server.records = records
            server.ports = [u.rsplit(":", 1)[1].split("/")[0] for u in urls.values()]
            yield server
    finally:
        root.removeHandler(records)
        mp.undo()
        upstream.shutdown()


def ask(server, route: str, worker: str, stream: bool) -> tuple[int, str]:
    body = ({"input": "What is 2 + 5?"} if route == "responses" else
            {"messages": [{"role": "user", "content": "What is 2 + 5?"}]})
    reply = httpx.post(f"{server.base}/v1/{route}", headers=auth(SERVE_KEY), timeout=30,
                       json={"model": "podium", "workers": [worker], "stream": stream, **body})
    return reply.status_code, reply.text


def error_of(text: str, stream: bool) -> dict:
    """The error object and trace id a client got (the body, or the stream's error event)."""
    if not stream:
        body = json.loads(text)
        return {**body["error"], "trace": body.get("podium_trace_id")}
    events = [json.loads(line[6:]) for line in text.splitlines()
              if line.startswith("data: {")]
    found = [e for e in events if "error" in e or e.get("type") == "error"]
    error = found[0].get("error", found[0])
    return {**error, "trace": found[0].get("podium_trace_id")}


@pytest.mark.parametrize("route", ["chat/completions", "responses"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("worker,kind", [("failing", "server"), ("unreachable", "transport")])
def test_a_client_is_told_which_worker_failed_and_not_where_it_is(served, route, stream,
                                                                  worker, kind):
    status, text = ask(served, route, worker, stream)
    assert status == (200 if stream else 502), text
    for secret in (INTERNAL, PASSWORD, "user:", *(f":{p}" for p in served.ports)):
        assert secret not in text, f"{secret!r} reached the client:\n{text}"
    error = error_of(text, stream)
    assert error["code"] == "worker_failed", error
    assert f"({worker})" in error["message"] and kind in error["message"], error
    tid = next(w.strip(".") for w in error["message"].split() if w.startswith("tr-"))
    assert not stream or route == "responses" or error["trace"] == tid
    # the operator keeps the details: the trace (for the key that asked) and the log
    trace = httpx.get(f"{served.base}/v1/traces/{tid}", headers=auth(SERVE_KEY), timeout=10)
    assert trace.status_code == 200, trace.text
    step = trace.json()["steps"][0]
    assert step["worker_name"] == worker and step["error_kind"] == kind
    assert step["error"] and (INTERNAL in step["error"] or kind == "transport")
    assert any(tid in line and "no answer" in line and kind in line
               for line in served.records.lines)


def test_the_log_has_the_endpoints_error(served):
    ask(served, "chat/completions", "failing", False)
    assert INTERNAL in served.records.text  # what the client was not told, the operator is


def test_a_streamed_progress_line_names_the_failure_kind_only(served):
    status, text = ask(served, "chat/completions", "failing", True)
    reasoning = "".join(json.loads(line[6:])["choices"][0]["delta"].get("reasoning_content")
                        or "" for line in text.splitlines()
                        if line.startswith("data: {") and '"choices": [{' in line)
    assert "Step 0 (worker 0 failing) failed: server" in reasoning, reasoning


@pytest.mark.parametrize("route", ["chat/completions", "responses"])
@pytest.mark.parametrize("stream", [False, True])
def test_credentials_in_a_base_url_never_reach_a_client(served, route, stream):
    status, text = ask(served, route, "with_password", stream)
    assert status == 200 if stream else status >= 500, text
    for secret in (INTERNAL, PASSWORD, "user:", *(f":{p}" for p in served.ports)):
        assert secret not in text, f"{secret!r} reached the client:\n{text}"
    assert "(with_password)" in error_of(text, stream)["message"]
