"""`podium serve` as a user runs it: a subprocess, graceful shutdown on SIGTERM (within the
grace and past it), the embedded SmolLM2 team end to end through the official openai client
(shapes, not text), and a client that goes away stopping the embedded models' work."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from pathlib import Path

import httpx
import openai
import pytest
from serve_helpers import CliServer, sigterm_with_a_request_in_flight

import podium

KEY = "sk-serve-command-test-4d1e88"


def test_sigterm_lets_the_request_in_flight_finish(pool_file, tmp_path):
    srv = CliServer(["--pool", str(pool_file), "--api-key-env", "PODIUM_SERVE_KEY",
                     "--trace-dir", str(tmp_path / "traces"), "--graceful-timeout", "20"],
                    tmp_path / "serve.log", env={"PODIUM_SERVE_KEY": KEY})
    try:
        srv.wait()
        reply = sigterm_with_a_request_in_flight(srv, KEY)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == "<answer>42</answer>"
        # uvicorn re-raises the signal once it has shut down: the process ends by SIGTERM
        assert srv.proc.wait(30) in (0, -signal.SIGTERM)
    finally:
        srv.stop()
    # the request finished during the shutdown, and its trace was written before the exit
    (trace,) = (tmp_path / "traces").glob("tr-*.json")
    assert json.loads(trace.read_text())["answer"] == "<answer>42</answer>"
    log = srv.log.read_text()
    assert "Shutting down" in log
    posts = [line for line in log.splitlines() if "POST /v1/chat/completions" in line]
    assert len(posts) == 1 and "answered, 2 calls" in posts[0], posts  # one line a request
    assert KEY not in log


def test_sigterm_past_the_grace_answers_what_it_cuts_short(pool_file, tmp_path):
    """A plain and a streamed request on the one-second `slow` worker, SIGTERM with a 0.2 s
    grace: each is answered (a JSON 503, an SSE error event) and its trace is written."""
    srv = CliServer(["--pool", str(pool_file), "--no-auth", "--trace-dir",
                     str(tmp_path / "traces"), "--graceful-timeout", "0.2"],
                    tmp_path / "serve.log")
    got: dict = {}
    body = {"model": "podium", "workers": ["slow"],
            "messages": [{"role": "user", "content": "What is 20 + 22?"}]}

    def plain() -> None:
        got["plain"] = httpx.post(f"{srv.base}/v1/chat/completions", json=body, timeout=30,
                                  trust_env=False)

    def streamed() -> None:
        with httpx.stream("POST", f"{srv.base}/v1/chat/completions", timeout=30,
                          json={**body, "stream": True}, trust_env=False) as reply:
            got["stream"] = (reply.status_code, list(reply.iter_lines()))

    try:
        srv.wait()
        threads = [threading.Thread(target=f) for f in (plain, streamed)]
        for t in threads:
            t.start()
        time.sleep(0.4)  # both runs are in flight (the worker takes 1 s)
        srv.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(30)
        assert srv.proc.wait(30) in (0, -signal.SIGTERM)
    finally:
        srv.stop()
    reply = got["plain"]
    assert reply.status_code == 503, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    assert reply.json()["error"]["code"] == "server_shutting_down"
    status, lines = got["stream"]
    events = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
    assert status == 200 and events[-1]["error"]["code"] == "server_shutting_down", lines
    traces = [json.loads(t.read_text()) for t in (tmp_path / "traces").glob("tr-*.json")]
    assert len(traces) == 2 and {t["stream"] for t in traces} == {False, True}
    for trace in traces:
        assert trace["answer"] is None and "shut down" in trace["stopped"]
        assert trace["question"] == "What is 20 + 22?"
    assert "Traceback" not in srv.log.read_text()


def small_default_pool() -> str:
    """The embedded default pool (podium/pools/default.toml) with shorter outputs: workers
    write at most 32 tokens, the Conductor sees the short few-shot set and plans at most 2
    steps. The same models, grammar and prefill; a run costs a third of the default's."""
    text = (Path(podium.__file__).parent / "pools" / "default.toml").read_text()
    text = text.replace("max_tokens = 128", "max_tokens = 32").replace("max_steps = 3",
                                                                      "max_steps = 2")
    assert text.count("max_tokens = 32") == 2 and "max_steps = 2" in text
    return text + 'fewshots = "short"\n'


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve-embedded")
    pool = folder / "pool.toml"
    pool.write_text(small_default_pool())
    srv = CliServer(["--no-auth", "--pool", str(pool), "--trace-dir", str(folder / "traces")],
                    folder / "serve.log")
    srv.traces = folder / "traces"
    try:
        yield srv.wait(180)
    finally:
        srv.stop()


def until(found, what: str, timeout: float = 60):
    """`found()` once it is truthy, asked every 0.1 s; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (got := found()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)
    return got


def runs_in_flight(base: str) -> float:
    page = httpx.get(f"{base}/metrics", trust_env=False, timeout=10).text
    (line,) = [x for x in page.splitlines() if x.startswith("podium_runs_in_flight ")]
    return float(line.split()[1])


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_goes_away_stops_the_embedded_models(embedded, stream):
    """The client gives up a second into a run of the embedded team (which takes several
    seconds): the server stops the run, as its own signals say, each awaited (never a fixed
    sleep): the trace is written with what was asked and why it has no answer, before any
    step's end; the access log line says the run stopped as the client went away (499 when
    no response had begun); the run slot is given back (/metrics). An embedded call stops at
    its next token once its run is cancelled (podium.llm.embedded)."""
    question = f"What is 17 + 25? ({uuid.uuid4().hex[:8]})"  # no response-cache hit
    body = {"model": "podium", "stream": stream,
            "messages": [{"role": "user", "content": question}]}
    client = httpx.Client(timeout=httpx.Timeout(30, read=1.0), trust_env=False)
    with pytest.raises(httpx.ReadTimeout), client, \
            client.stream("POST", f"{embedded.base}/v1/chat/completions", json=body) as reply:
        for _ in reply.iter_raw():
            pass

    def my_trace():
        traces = [json.loads(t.read_text()) for t in embedded.traces.glob("tr-*.json")]
        return [t for t in traces if t.get("question") == question]

    (trace,) = until(my_trace, "the stopped run's trace")
    assert trace["answer"] is None and "went away" in trace["stopped"], trace
    assert "steps" not in trace and "conductor" not in trace  # stopped, not run to its end
    note = f"{trace['id']}: stopped (the client went away"
    line = until(lambda: [x for x in embedded.log.read_text().splitlines() if note in x],
                 "the access log line of the stopped run")[0]
    assert f'HTTP/1.1" {200 if stream else 499} ' in line, line
    until(lambda: runs_in_flight(embedded.base) == 0, "the run slot given back")


def test_embedded_team_streams_and_answers(embedded):
    """One streamed request to the real embedded team (a 135M Conductor and workers): progress
    as reasoning, the answer as its worker writes it, usage, and the trace it names."""
    client = openai.OpenAI(base_url=f"{embedded.base}/v1", api_key="unused", max_retries=0,
                           timeout=300)
    raw = client.chat.completions.with_raw_response.create(
        model="podium", messages=[{"role": "user", "content": "What is 3 + 4?"}], stream=True,
        stream_options={"include_usage": True}, extra_body={"return_trace_id": True})
    chunks = list(raw.parse())
    with_choice = [c for c in chunks if c.choices]
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                        for c in with_choice)
    content = "".join(c.choices[0].delta.content or "" for c in with_choice)
    assert "Workflow" in reasoning or "Falling back" in reasoning
    assert "running" in reasoning
    assert content.strip()
    pieces = [c for c in with_choice if c.choices[0].delta.content]
    assert with_choice[-1].choices[0].finish_reason in ("stop", "length")
    usage = chunks[-1].usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0

    trace = httpx.get(f"{embedded.base}/v1/traces/{raw.headers['x-podium-trace-id']}",
                      trust_env=False).json()
    assert trace["question"] == "What is 3 + 4?"
    assert trace["answer"] == content
    # the answer came as the embedded worker wrote it: a piece a token or so, not whole
    assert len(pieces) > 1 or trace["steps"][-1]["completion_tokens"] <= 1
    assert trace["conductor"][0]["constrained"] is True
    assert {s["worker_name"] for s in trace["steps"]} <= {"smol-precise", "smol-creative"}
    assert len(trace["steps"]) >= 1 and trace["used"]["calls"] >= 2


def test_port_in_use_is_a_configuration_error(pool_file, tmp_path):
    import socket
    import subprocess

    from serve_helpers import podium_cli

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(podium_cli("serve", "--no-auth", "--port", str(port), "--pool",
                                         str(pool_file), "--trace-dir", str(tmp_path / "t")),
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--port" in proc.stderr and "Traceback" not in proc.stderr


def test_max_tokens_caps_the_answer_of_the_embedded_team(embedded):
    """`max_tokens` reaches the real embedded worker that writes the answer: its completion is
    at most that long, and the reply says "length" exactly when the cap cut it."""
    reply = httpx.post(f"{embedded.base}/v1/chat/completions", timeout=300, trust_env=False,
                       json={"model": "podium", "max_tokens": 3, "return_trace_id": True,
                             "messages": [{"role": "user", "content": "What is 6 + 7?"}]})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    trace = httpx.get(f"{embedded.base}/v1/traces/{body['podium_trace_id']}",
                      trust_env=False).json()
    last = trace["steps"][-1]
    assert last["completion_tokens"] <= 3
    assert body["choices"][0]["finish_reason"] == (
        "length" if last["finish_reason"] == "length" else "stop")
    assert trace["sampling"] == {"max_tokens": 3}
