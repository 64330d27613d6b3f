"""`podium serve` as a user runs it: a subprocess, graceful shutdown on SIGTERM, and the
embedded SmolLM2 team end to end through the official openai client (shapes, not text)."""

from __future__ import annotations

import json
import signal

import httpx
import openai
import pytest
from serve_helpers import CliServer, sigterm_with_a_request_in_flight

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


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve-embedded")
    srv = CliServer(["--no-auth", "--trace-dir", str(folder / "traces")], folder / "serve.log")
    try:
        yield srv.wait(180)
    finally:
        srv.stop()


def test_embedded_team_streams_and_answers(embedded):
    """One streamed request to the real embedded team (a 135M Conductor and workers): progress
    as reasoning, an answer, usage, and the trace it names."""
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
    assert "done:" in reasoning
    assert content.strip()
    assert with_choice[-1].choices[0].finish_reason in ("stop", "length")
    usage = chunks[-1].usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens > 0

    trace = httpx.get(f"{embedded.base}/v1/traces/{raw.headers['x-podium-trace-id']}",
                      trust_env=False).json()
    assert trace["question"] == "What is 3 + 4?"
    assert trace["answer"] == content
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
