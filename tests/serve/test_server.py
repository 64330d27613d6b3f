"""`podium serve` over real HTTP: the official openai client (sync, async, streaming), raw
httpx for the error cases, a function-worker pool for exact answers; traces, limits, keys."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from serve_helpers import KEY, OTHER_KEY, POOL, ThreadServer, auth

from podium.serve.traces.files import new_id
from podium.serve.traces.store import TraceStore

Q = "What is 2 + 5?"


def msgs(text: str = Q) -> list[dict]:
    return [{"role": "user", "content": text}]


def body(**extra) -> dict:
    return {"model": "podium", "messages": msgs(), **extra}


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key=KEY, max_retries=0)


# --- the openai client ------------------------------------------------------------------------

def test_models_and_health(client, http):
    assert [m.id for m in client.models.list()] == ["podium"]
    assert client.models.retrieve("podium").id == "podium"
    assert http.get("/health").json() == {"status": "ok"}  # no key needed
    head = http.head("/health")
    assert head.status_code == 200 and head.content == b""  # a probe's HEAD, without a body


def test_sync_completion(client):
    reply = client.chat.completions.create(model="podium", messages=msgs())
    assert reply.object == "chat.completion" and reply.model == "podium"
    assert reply.id.startswith("chatcmpl-") and isinstance(reply.created, int)
    choice = reply.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "<answer>7</answer>"  # the pipeline's answer, as it is
    assert choice.finish_reason == "stop"
    usage = reply.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert reply.model_extra["podium"]["calls"] == 2  # the Conductor and one worker
    assert "podium_trace_id" not in reply.model_extra  # only when asked


def test_async_completions_run_concurrently(server):
    async def main():
        aclient = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key=OTHER_KEY,
                                     max_retries=0)
        t0 = time.perf_counter()
        replies = await asyncio.gather(*[
            aclient.chat.completions.create(model="podium", messages=msgs(f"What is {i} + 1?"),
                                            extra_body={"workers": ["slow"]})
            for i in range(3)])
        await aclient.close()
        return replies, time.perf_counter() - t0

    replies, wall = asyncio.run(main())
    assert [r.choices[0].message.content for r in replies] == [
        f"<answer>{i + 1}</answer>" for i in range(3)]
    assert wall < 2.5  # three one-second runs side by side, not one after another


def test_streaming(client):
    stream = client.chat.completions.create(model="podium", messages=msgs(), stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" and c.model == "podium" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    with_choice = [c for c in chunks if c.choices]
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                        for c in with_choice)
    content = "".join(c.choices[0].delta.content or "" for c in with_choice)
    assert "Workflow: 1 step" in reasoning and "Step 0 (worker 0 adder) done" in reasoning
    assert content == "<answer>7</answer>"  # a client that ignores reasoning gets the answer
    first_content = next(i for i, c in enumerate(with_choice) if c.choices[0].delta.content)
    last_reasoning = max(i for i, c in enumerate(with_choice)
                         if (c.choices[0].delta.model_extra or {}).get("reasoning_content"))
    assert last_reasoning < first_content  # progress first, then the answer
    assert with_choice[-1].choices[0].finish_reason == "stop"
    assert not chunks[-1].choices and chunks[-1].usage is not None  # the usage chunk, last
    assert chunks[-1].usage.total_tokens >= 0
    assert all(c.usage is None for c in chunks[:-1])


def test_streaming_without_usage_and_done_marker(http):
    with http.stream("POST", "/v1/chat/completions", headers=auth(),
                     json=body(stream=True)) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: "):] for line in resp.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


# --- per-request options --------------------------------------------------------------------

def test_workers_option_from_extra_body_and_metadata(client):
    # `zero` is pool worker 1; the Conductor writes worker 0, outside the sub-pool, so the
    # run falls back to the sub-pool's first worker, which answers 0.
    reply = client.chat.completions.create(model="podium", messages=msgs(),
                                           extra_body={"workers": ["zero"]})
    assert reply.choices[0].message.content == "<answer>0</answer>"
    reply = client.chat.completions.create(model="podium", messages=msgs(),
                                           metadata={"workers": "zero"})
    assert reply.choices[0].message.content == "<answer>0</answer>"


def test_recursion_option(client):
    reply = client.chat.completions.create(model="podium", messages=msgs(),
                                           extra_body={"recursion": 1})
    assert reply.model_extra["podium"]["calls"] == 4  # plan, step, revise, step
    assert reply.choices[0].message.content == "<answer>7</answer>"


def test_a_requests_budget_is_priced_in_its_trace_and_a_bad_one_is_a_400(client, http):
    reply = client.chat.completions.create(model="podium", messages=msgs(),
                                           extra_body={"budget": 0.001,
                                                       "return_trace_id": True})
    trace = http.get(f"/v1/traces/{reply.model_extra['podium_trace_id']}",
                     headers=auth()).json()
    budget = trace["budget"]
    assert {k: budget[k] for k in ("amount", "plan_price", "over", "workers_cost_usd",
                                   "spent_usd")} == {
        "amount": 0.001, "plan_price": 0.0, "over": False, "workers_cost_usd": None,
        "spent_usd": 0.0}  # the test pool has no prices
    assert budget["spent_unpriced"] and budget["verdict"].startswith("Within budget")
    assert trace["options"]["budget"] == 0.001
    for bad in ({"budget": -1}, {"metadata": {"budget": "cheap"}}):
        resp = http.post("/v1/chat/completions", headers=auth(), json=body(**bad))
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "budget"


def test_a_cap_cuts_the_run_short_with_a_400_the_sdk_does_not_retry(http, server):
    resp = http.post("/v1/chat/completions", headers=auth(), json=body(max_calls=1))
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == "cap_reached" and "max_calls = 1 reached" in err["message"]

    def traces() -> int:  # one a run
        time.sleep(0.5)  # the writer process's batch
        return len(list(Path(server.config.trace_dir).glob("*.json")))

    retrying = openai.OpenAI(base_url=f"{server.base}/v1", api_key=KEY, max_retries=2)
    before = traces()
    with pytest.raises(openai.BadRequestError, match="A cap was reached"):
        retrying.chat.completions.create(model="podium", messages=msgs(),
                                         extra_body={"max_calls": 1})
    assert traces() - before == 1  # run once: the SDK retries a 5xx twice (three runs paid)


def test_token_budget_option_cuts_the_run_short(tmp_path):
    pool = tmp_path / "pool.toml"  # a Conductor that reports its tokens, as models do
    pool.write_text(POOL.replace("workers:one_step", "workers:one_step_counted"))
    with ThreadServer(pool, tmp_path / "traces") as srv, \
            httpx.Client(base_url=srv.base, timeout=30, trust_env=False) as http:
        resp = http.post("/v1/chat/completions", json=body(max_total_tokens=1))
        assert resp.status_code == 400  # the Conductor's tokens used it up: no worker call
        assert "max_tokens = 1 reached" in resp.json()["error"]["message"]
        roomy = body()
        roomy["metadata"] = {"max_total_tokens": "100000"}
        ok = http.post("/v1/chat/completions", json=roomy)
        assert ok.status_code == 200, ok.text
        assert ok.json()["choices"][0]["message"]["content"] == "<answer>7</answer>"  # 2 + 5
        resp = http.post("/v1/chat/completions", json=body(max_total_tokens=0))
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "max_total_tokens"


def test_unknown_worker_is_400(http):
    resp = http.post("/v1/chat/completions", headers=auth(), json=body(workers=["nobody"]))
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["param"] == "workers" and "nobody" in err["message"] and "adder" in err["message"]


def written(path, timeout: float = 10.0):
    """`path` once the trace writer has written it (it writes after the answer)."""
    deadline = time.monotonic() + timeout
    while not path.is_file():
        assert time.monotonic() < deadline, f"{path} was not written within {timeout} s"
        time.sleep(0.02)
    return path


def test_trace_by_id(client, http, server):
    raw = client.chat.completions.with_raw_response.create(
        model="podium", messages=[{"role": "system", "content": "Be exact."},
                                  {"role": "user", "content": "What is 1 + 1?"},
                                  {"role": "assistant", "content": "<answer>2</answer>"},
                                  {"role": "user", "content": Q}],
        extra_body={"return_trace_id": True})
    reply = raw.parse()
    tid = reply.model_extra["podium_trace_id"]
    assert raw.headers["x-podium-trace-id"] == tid
    resp = http.get(f"/v1/traces/{tid}", headers=auth())
    assert resp.status_code == 200
    trace = resp.json()
    path = server.config.trace_dir / f"{tid}.json"
    stored = json.loads(written(path).read_text())
    assert stored.pop("owner").startswith("key-") and trace == stored  # the owner stays inside
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert trace["id"] == tid and trace["answer"] == reply.choices[0].message.content
    assert trace["options"] == {"return_trace_id": True}
    question = trace["question"]
    assert question.index("<conversation>") < question.index("[system]\nBe exact.") \
        < question.index("[assistant]\n<answer>2</answer>") < question.index("</conversation>") \
        < question.rindex(Q)
    assert [s["worker"] for s in trace["workflow"]] == ["adder"]
    assert trace["steps"][0]["status"] == "ok" and trace["used"]["calls"] == 2
    assert trace["conductor"][0]["completion"]


def test_a_key_reads_only_its_own_traces(client, http):
    """Traces hold the users' conversations: a key gets its own, and another key's trace is
    not found (its id is not even confirmed), in the API and in the viewer's pages."""
    reply = client.chat.completions.create(model="podium", messages=msgs(),
                                           extra_body={"return_trace_id": True})
    tid = reply.model_extra["podium_trace_id"]
    assert http.get(f"/v1/traces/{tid}", headers=auth()).status_code == 200
    other = http.get(f"/v1/traces/{tid}", headers=auth(OTHER_KEY))
    assert other.status_code == 404 and other.json()["error"]["code"] == "trace_not_found"
    basic = httpx.BasicAuth("me", OTHER_KEY)
    assert http.get(f"/traces/{tid}", auth=basic).status_code == 404
    assert tid not in http.get("/traces", auth=basic).text
    assert tid in http.get("/traces", auth=httpx.BasicAuth("me", KEY)).text
    assert "owner" not in http.get(f"/v1/traces/{tid}", headers=auth()).json()


def test_a_key_does_not_read_a_trace_without_an_owner(server, http):
    """A trace written by a server without keys (`--no-auth`, the same folder) holds someone's
    conversation too: a server with keys serves it to no key."""
    tid = new_id()
    (server.config.trace_dir / f"{tid}.json").write_text(json.dumps(
        {"id": tid, "question": "private", "answer": "x"}))
    store = server.app.state.server.traces
    assert store.read(tid)["question"] == "private"  # there, and readable without keys
    assert store.read_as(tid, None)["question"] == "private"
    for key in (KEY, OTHER_KEY):
        resp = http.get(f"/v1/traces/{tid}", headers=auth(key))
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "trace_not_found"
        assert http.get(f"/traces/{tid}", auth=httpx.BasicAuth("me", key)).status_code == 404


def test_trace_auth_and_unknown_ids(http):
    assert http.get(f"/v1/traces/{new_id()}").status_code == 401
    for bad in (new_id(), "tr-xyz", "..%2F..%2Fetc%2Fpasswd", "%2e%2e"):
        resp = http.get(f"/v1/traces/{bad}", headers=auth())
        assert resp.status_code == 404, bad
        assert resp.json()["error"]["type"] == "invalid_request_error"


# --- errors ---------------------------------------------------------------------------------

def test_auth_errors(http):
    resp = http.post("/v1/chat/completions", json=body())
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"
    assert resp.json()["error"]["code"] == "missing_api_key"
    wrong = "sk-wrong-key-abcdef123456"
    resp = http.post("/v1/chat/completions", json=body(), headers=auth(wrong))
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_api_key"
    assert wrong not in resp.text and KEY not in resp.text
    assert http.get("/v1/models", headers={"Authorization": KEY}).status_code == 401  # no scheme
    assert http.get("/v1/models", headers=auth(OTHER_KEY)).status_code == 200


def test_openai_client_raises_typed_errors(server):
    bad = openai.OpenAI(base_url=f"{server.base}/v1", api_key="sk-nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="podium", messages=msgs())
    good = openai.OpenAI(base_url=f"{server.base}/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError) as info:
        good.chat.completions.create(model="gpt-4o", messages=msgs())
    assert info.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        good.chat.completions.create(model="podium", messages=msgs(), max_tokens=0)


def error_of(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def test_unknown_route_and_method(http):
    err = error_of(http.get("/v1/nothing", headers=auth()), 404)
    assert "/v1/chat/completions" in err["message"]
    error_of(http.get("/v1/chat/completions", headers=auth()), 405)


def test_body_too_large(http):
    big = body(messages=msgs("x" * 100_000))
    err = error_of(http.post("/v1/chat/completions", headers=auth(), json=big), 413)
    assert "--max-request-bytes" in err["message"]

    def chunked():  # no Content-Length: counted while it is read
        data = json.dumps(big).encode()
        for i in range(0, len(data), 8192):
            yield data[i:i + 8192]

    error_of(http.post("/v1/chat/completions", headers=auth(), content=chunked()), 413)


@pytest.mark.parametrize("payload, param", [
    (b"{not json", None),
    (b"[1, 2]", None),
    (json.dumps(body(max_tokens=0)).encode(), "max_tokens"),
    (json.dumps(body(max_tokens=-3)).encode(), "max_tokens"),
    (json.dumps(body(max_tokens="5")).encode(), "max_tokens"),
    (json.dumps(body(max_tokens=2.5)).encode(), "max_tokens"),
    (json.dumps(body(max_tokens=True)).encode(), "max_tokens"),
    (json.dumps(body(max_completion_tokens=0)).encode(), "max_completion_tokens"),
    (json.dumps({"model": "podium"}).encode(), "messages"),
    (json.dumps(body(messages=[])).encode(), "messages"),
    (json.dumps(body(messages=[{"role": "user", "content": "  "}])).encode(),
     "messages.0.content"),
    (json.dumps(body(messages=[{"role": "assistant", "content": "hi"}])).encode(),
     "messages.0.role"),
    (json.dumps(body(messages=[{"role": "wizard", "content": "hi"}])).encode(),
     "messages.0.role"),
    (json.dumps(body(messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}])).encode(),
     "messages.0.content.0.type"),
    (json.dumps(body(n=2)).encode(), "n"),
    (json.dumps(body(tools=[{"type": "function", "function": {"name": "f"}}])).encode(),
     "tools"),
    (json.dumps(body(recursion=99)).encode(), "recursion"),
    (json.dumps(body(stream="yes")).encode(), "stream"),
])
def test_bad_requests_are_400(http, payload, param):
    err = error_of(http.post("/v1/chat/completions", headers={**auth(), "Content-Type":
                                                              "application/json"},
                             content=payload), 400)
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert err["message"]


def test_good_max_tokens_and_text_parts_are_accepted(http):
    resp = http.post("/v1/chat/completions", headers=auth(), json=body(
        max_tokens=5, max_completion_tokens=7, temperature=0.3,
        messages=[{"role": "user", "content": [{"type": "text", "text": Q}]}]))
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] == \
        "<answer>7</answer>"


def test_worker_outage_is_502(http, client):
    err = error_of(http.post("/v1/chat/completions", headers=auth(),
                             json=body(workers=["down"], return_trace_id=True)), 502)
    assert err["code"] == "worker_failed" and "down" in err["message"]
    with pytest.raises(openai.APIError) as info:  # streamed: an error event ends the stream
        list(client.chat.completions.create(model="podium", messages=msgs(), stream=True,
                                            extra_body={"workers": ["down"]}))
    assert "no answer" in str(info.value)


def test_too_many_requests(pool_file, tmp_path):
    with ThreadServer(pool_file, tmp_path / "traces", keys=(KEY,), max_concurrency=1) as srv, \
            httpx.Client(base_url=srv.base, timeout=30, trust_env=False) as http:
        slow = body(workers=["slow"])
        first: dict = {}
        thread = threading.Thread(target=lambda: first.update(
            r=http.post("/v1/chat/completions", headers=auth(), json=slow)))
        thread.start()
        deadline = time.monotonic() + 5
        while srv.app.state.server.slots.in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        resp = http.post("/v1/chat/completions", headers=auth(), json=body())
        err = error_of(resp, 429)
        assert resp.headers["retry-after"] == "1" and err["code"] == "too_many_requests"
        thread.join(10)
        assert first["r"].status_code == 200
        # the slot is given back, after plain and streamed runs alike
        assert http.post("/v1/chat/completions", headers=auth(), json=body()).status_code == 200
        with http.stream("POST", "/v1/chat/completions", headers=auth(),
                         json=body(stream=True)) as resp:
            assert resp.status_code == 200 and list(resp.iter_lines())
        assert http.post("/v1/chat/completions", headers=auth(), json=body()).status_code == 200


def test_keys_never_reach_logs_or_traces(server, http, logs, client):
    client.chat.completions.create(model="podium", messages=msgs())
    http.post("/v1/chat/completions", json=body(), headers=auth("sk-wrong-never-log-me"))
    http.post("/v1/chat/completions", json=body(workers=["down"]), headers=auth())
    assert logs.lines  # the capture works: uvicorn and podium did log
    assert any("podium.serve" in line for line in logs.lines)
    for secret in (KEY, OTHER_KEY, "sk-wrong-never-log-me"):
        assert secret not in logs.text
        for path in server.config.trace_dir.iterdir():
            assert secret not in path.read_text()


def test_one_access_line_per_request(http, logs):
    def lines_for(marker: str) -> list[str]:  # each record is caught on several loggers
        return sorted({line for line in logs.lines
                       if line.startswith("podium.serve ") and marker in line})

    resp = http.post("/v1/chat/completions?x=1", json=body(return_trace_id=True),
                     headers=auth())
    tid = resp.json()["podium_trace_id"]
    http.get("/v1/nowhere", headers=auth())
    http.post("/v1/chat/completions", json=body(workers=["down"]), headers=auth())
    line, = lines_for(tid)  # the access line carries the run
    assert line.startswith("podium.serve INFO 127.0.0.1:")
    assert '"POST /v1/chat/completions HTTP/1.1" 200 ' in line and "x=1" not in line
    assert line.endswith(f"{tid}: answered, 2 calls")
    assert any('"GET /v1/nowhere HTTP/1.1" 404 ' in x for x in logs.lines)
    assert any(x.endswith("no answer (transport), 2 calls")
               for x in lines_for('"POST /v1/chat/completions HTTP/1.1" 502 '))


def test_an_unexpected_error_is_a_500_logged_with_its_traceback(server, logs, monkeypatch):
    """An exception no route expects (a podium bug) answers an OpenAI-style 500, on the
    routes that run the pipeline and on the others, leaves its traceback and an access line
    in the log, and keeps the keep-alive connection open for the client's next request."""
    from podium.pipeline import Pipeline

    def crossed(*args, **kwargs):
        raise RuntimeError("wires crossed")

    async def crossed_async(*args, **kwargs):
        crossed()

    host, port = server.base.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)), timeout=30)
    replies = conn.makefile("rb")

    def ask(method: str, path: str, payload: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(payload).encode() if payload is not None else b""
        conn.sendall(f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer "
                     f"{KEY}\r\nContent-Type: application/json\r\nContent-Length: "
                     f"{len(data)}\r\n\r\n".encode() + data)
        status = int(replies.readline().split()[1])
        length = 0
        while (line := replies.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return status, json.loads(replies.read(length))

    monkeypatch.setattr(Pipeline, "ask", crossed_async)
    monkeypatch.setattr(TraceStore, "read_as", crossed)
    try:
        for method, path, payload in (
                ("POST", "/v1/chat/completions", body()),
                ("POST", "/v1/responses", {"model": "podium", "input": "hi"}),
                ("GET", f"/v1/traces/{new_id()}", None)):
            status, reply = ask(method, path, payload)  # the same connection every time
            assert status == 500, path
            error = reply["error"]
            assert error["code"] == "internal" and "RuntimeError" in error["message"]
            assert "wires crossed" not in error["message"]  # the details stay in the log
            assert any(f'"{method} {path} HTTP/1.1" 500 ' in x for x in logs.lines)
            unexpected = [x for x in logs.lines if x.startswith(
                f"podium.serve ERROR unexpected error on {method} {path}")]
            assert unexpected and "RuntimeError: wires crossed" in unexpected[-1]
        monkeypatch.undo()
        status, reply = ask("POST", "/v1/chat/completions", body())
        assert status == 200 and reply["choices"][0]["message"]["content"]
    finally:
        replies.close()
        conn.close()


# --- the command ----------------------------------------------------------------------------

@pytest.mark.parametrize("args, env, expected", [
    ([], {}, ["--api-key-env", "--api-key-file", "--no-auth"]),
    (["--no-auth", "--host", "0.0.0.0"], {}, ["--no-auth", "loopback", "--host 127.0.0.1"]),
    (["--api-key-env", "PODIUM_SERVE_TEST_UNSET"], {"PODIUM_SERVE_TEST_UNSET": ""},
     ["PODIUM_SERVE_TEST_UNSET"]),
    (["--api-key-file", "/nonexistent/keys.txt"], {}, ["--api-key-file"]),
    (["--no-auth", "--api-key-env", "K"], {"K": "x"}, ["not both"]),
])
def test_serve_refuses_unsafe_or_broken_setups(args, env, expected):

    from serve_helpers import podium_cli

    proc = subprocess.run(podium_cli("serve", *args), capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200", **env})
    assert proc.returncode == 2, proc.stderr
    for part in expected:
        assert part in proc.stderr
    assert "Traceback" not in proc.stderr


def test_question_that_is_not_text_is_400(http):
    payload = b'{"model": "podium", "messages": [{"role": "user", "content": "\\ud800 hi"}]}'
    err = error_of(http.post("/v1/chat/completions", headers=auth(), content=payload), 400)
    assert "surrogate" in err["message"] and err["param"] == "messages.0.content"


def test_key_file_and_loopback_rules(tmp_path, monkeypatch):
    from podium.errors import ConfigError
    from podium.serve.auth import check_auth_setup, is_loopback, load_keys

    keys = tmp_path / "keys.txt"
    keys.write_text("# team keys\nsk-one\n\n  sk-two  \n")
    monkeypatch.setenv("PODIUM_SERVE_TEST_KEY", "sk-env")
    assert load_keys("PODIUM_SERVE_TEST_KEY", str(keys)) == ("sk-env", "sk-one", "sk-two")
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(host)
        check_auth_setup((), True, host)
    for host in ("0.0.0.0", "::", "192.168.1.4", "example.com"):
        assert not is_loopback(host)
        with pytest.raises(ConfigError, match="--no-auth"):
            check_auth_setup((), True, host)
    check_auth_setup(("k",), False, "0.0.0.0")  # keys: any address


def test_a_client_that_leaves_a_stream_cancels_its_run(pool_file, tmp_path):
    with ThreadServer(pool_file, tmp_path / "traces", keys=(KEY,), max_concurrency=1) as srv, \
            httpx.Client(base_url=srv.base, timeout=30, trust_env=False) as http:
        with http.stream("POST", "/v1/chat/completions", headers=auth(),
                         json=body(stream=True, workers=["slow"])) as resp:
            lines = resp.iter_lines()
            assert next(lines).startswith("data: ")  # the run has started; now hang up
        deadline = time.monotonic() + 5
        while srv.app.state.server.slots.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        assert srv.app.state.server.slots.in_flight == 0
        assert not list((tmp_path / "traces").iterdir())  # cancelled before it finished
        assert http.post("/v1/chat/completions", headers=auth(), json=body()).status_code == 200


# --- another real client: curl ------------------------------------------------------------------

def test_curl_speaks_to_the_server(server):
    """A client that is not the openai SDK: curl, plain and streamed (-N)."""
    import subprocess

    if shutil.which("curl") is None:
        pytest.skip("curl is not installed (apt-get install curl)")
    base = ["curl", "-sS", "--noproxy", "*", "-H", f"Authorization: Bearer {KEY}",
            "-H", "Content-Type: application/json"]
    plain = subprocess.run([*base, "-d", json.dumps(body()), f"{server.base}/v1/chat/completions"],
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["choices"][0]["message"]["content"] == "<answer>7</answer>"
    streamed = subprocess.run([*base, "-N", "-d", json.dumps(body(stream=True)),
                               f"{server.base}/v1/chat/completions"],
                              capture_output=True, text=True, timeout=60)
    events = [line[len("data: "):] for line in streamed.stdout.splitlines()
              if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                   if c["choices"]) == "<answer>7</answer>"


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/responses"])
def test_a_body_nested_too_deeply_is_400_not_500(http, route):
    deep = b'{"model": "podium", "messages": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    err = error_of(http.post(route, headers={**auth(), "Content-Type": "application/json"},
                             content=deep), 400)
    assert err["code"] == "invalid_json" and "nested too deeply" in err["message"]
    assert http.get("/health").status_code == 200  # the server goes on


def test_a_trailing_slash_redirects_relatively_whatever_the_host_header(http):
    resp = http.get("/v1/models/?x=1", headers={**auth(), "Host": "evil.example"})
    assert resp.status_code == 307 and resp.headers["location"] == "/v1/models?x=1"
    moved = http.post("/v1/chat/completions/", headers={**auth(), "Host": "evil.example"},
                      json=body())
    assert moved.status_code == 307 and moved.headers["location"] == "/v1/chat/completions"
    assert http.get("/nowhere/", headers=auth()).status_code == 404  # no route there either
