"""The scripted OpenAI-compatible test server, exercised over real HTTP in a subprocess."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPException
from typing import Any

import pytest

from podium.testing import ScriptedServer, ServerConfig

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

FAULTS = {
    "m500": "500",
    "m503": "503",
    "m429": "429",
    "m401": "401",
    "mempty": "empty",
    "mhang": "hang",
    "mslow": "slow",
    "mtrunc": "truncated",
    "mreset": "reset",
    "c429": "429x2",
    "c500": "500x1",
    "cempty": "emptyx2",
    "creset": "resetx1",
    "fast503": "503",
}
RETRY_AFTER = {"fast503": 0.2}


def _lower(headers: Any) -> dict[str, str]:
    return {key.lower(): value for key, value in headers.items()}


def http(
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, dict[str, str], Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return response.status, _lower(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _lower(exc.headers), json.loads(exc.read())


def chat(
    server: ScriptedServer, model: str, text: str = "hello", **kwargs: Any
) -> tuple[int, dict[str, str], Any]:
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    return http("POST", f"{server.base_url}/chat/completions", body, **kwargs)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(
        latency=0.05,
        latency_by_model={"slow": 0.5, "instant": 0.0},
        faults_by_model=FAULTS,
        retry_after_by_model=RETRY_AFTER,
        reply_by_model={"fixed": "a fixed reply"},
    ) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _fresh_stats(request: pytest.FixtureRequest) -> None:
    if "server" in request.fixturenames:
        request.getfixturevalue("server").reset()


def test_echo_content_and_usage(server: ScriptedServer) -> None:
    last = "the quick brown fox jumps over the lazy dog " * 3
    body = {
        "model": "echo-model",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first question here"},
            {"role": "assistant", "content": "an answer"},
            {"role": "user", "content": last},
        ],
        "max_tokens": 32,
        "temperature": 0.0,
        "some_unknown_field": {"x": 1},
    }
    status, _, reply = http("POST", f"{server.base_url}/chat/completions", body)
    assert status == 200
    text = "[echo-model] " + last[-60:]
    assert reply["object"] == "chat.completion"
    assert reply["model"] == "echo-model"
    assert reply["id"].startswith("chatcmpl-")
    assert isinstance(reply["created"], int)
    assert reply["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    ]
    prompt_words = 2 + 3 + 2 + len(last.split())
    assert reply["usage"] == {
        "prompt_tokens": prompt_words,
        "completion_tokens": len(text.split()),
        "total_tokens": prompt_words + len(text.split()),
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    log = server.stats()["log"]
    assert [(e["model"], e["last_user_message"], e["status"]) for e in log] == [
        ("echo-model", last, 200)
    ]


def test_content_parts_and_fixed_reply(server: ScriptedServer) -> None:
    parts = [{"type": "text", "text": "part one "}, {"type": "text", "text": "part two"}]
    body = {"model": "instant", "messages": [{"role": "user", "content": parts}]}
    _, _, reply = http("POST", f"{server.base_url}/chat/completions", body)
    assert reply["choices"][0]["message"]["content"] == "[instant] part one part two"

    status, _, reply = chat(server, "fixed", "whatever")
    assert status == 200
    assert reply["choices"][0]["message"]["content"] == "a fixed reply"
    assert reply["usage"]["completion_tokens"] == 3


def test_max_in_flight_counts_concurrent_requests(server: ScriptedServer) -> None:
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(chat(server, "slow", f"q{i}")[0]))
        for i in range(5)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert results == [200] * 5
    stats = server.stats()
    assert stats["overall"] == {"in_flight": 0, "max_in_flight": 5, "requests": 5}
    assert stats["by_model"] == {"slow": {"in_flight": 0, "max_in_flight": 5, "requests": 5}}
    assert sorted(e["last_user_message"] for e in stats["log"]) == [f"q{i}" for i in range(5)]


def test_sequential_requests_never_overlap(server: ScriptedServer) -> None:
    for model in ("a", "b", "a"):
        chat(server, model)
    stats = server.stats()
    assert stats["overall"] == {"in_flight": 0, "max_in_flight": 1, "requests": 3}
    assert stats["by_model"]["a"]["requests"] == 2
    assert stats["by_model"]["b"]["requests"] == 1


def test_per_model_latency(server: ScriptedServer) -> None:
    chat(server, "slow")
    chat(server, "instant")
    durations = {e["model"]: e["end_time"] - e["start_time"] for e in server.stats()["log"]}
    assert durations["slow"] >= 0.45
    assert durations["instant"] < durations["slow"]


@pytest.mark.parametrize(
    ("model", "status", "type_", "code"),
    [
        ("m500", 500, "server_error", "internal_error"),
        ("m503", 503, "server_error", "overloaded"),
        ("m429", 429, "rate_limit_error", "rate_limit_exceeded"),
        ("m401", 401, "invalid_request_error", "invalid_api_key"),
    ],
)
def test_error_faults(
    server: ScriptedServer, model: str, status: int, type_: str, code: str
) -> None:
    got, headers, body = chat(server, model)
    assert got == status
    assert body["error"]["type"] == type_
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    assert (headers.get("retry-after") == "1") == (status in (429, 503))
    assert server.stats()["log"][0]["status"] == status


def test_empty_fault(server: ScriptedServer) -> None:
    status, _, reply = chat(server, "mempty")
    assert status == 200
    assert reply["choices"][0]["message"]["content"] == ""
    assert reply["usage"]["completion_tokens"] == 0


def test_hang_fault_and_client_disconnect(server: ScriptedServer) -> None:
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        chat(server, "mhang", timeout=0.5)
    # The server notices the client went away: the request ends with status 499.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stats = server.stats()
        if stats["overall"]["in_flight"] == 0:
            break
        time.sleep(0.05)
    assert stats["overall"] == {"in_flight": 0, "max_in_flight": 1, "requests": 1}
    assert stats["log"][0]["status"] == 499


def test_bad_requests(server: ScriptedServer) -> None:
    url = f"{server.base_url}/chat/completions"
    status, _, body = http("POST", url, {"messages": []})
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    status, _, body = http("POST", url, {"model": "x", "messages": "hi"})
    assert status == 400
    assert server.stats()["overall"]["requests"] == 0


def test_a_streamed_reply_is_the_same_reply_in_pieces(server: ScriptedServer) -> None:
    body = {"model": "fixed", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "stream_options": {"include_usage": True}}
    request = urllib.request.Request(f"{server.base_url}/chat/completions",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with _OPENER.open(request, timeout=10) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in response.read().decode().splitlines()
                  if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert "".join(p for p in pieces if p) == "a fixed reply" and len(pieces) > 3
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3


def test_reset(server: ScriptedServer) -> None:
    chat(server, "instant")
    assert server.stats()["overall"]["requests"] == 1
    server.reset()
    assert server.stats() == {
        "overall": {"in_flight": 0, "max_in_flight": 0, "requests": 0},
        "by_model": {},
        "log": [],
    }


def test_authorization_header_is_never_stored(server: ScriptedServer) -> None:
    secret = "sk-secret-123"
    status, _, _ = chat(server, "instant", headers={"Authorization": f"Bearer {secret}"})
    assert status == 200
    with _OPENER.open(f"{server.url}/stats", timeout=5) as response:
        raw = response.read().decode()
    assert secret not in raw
    assert "Bearer" not in raw and "authorization" not in raw.lower()


def test_models_endpoint(server: ScriptedServer) -> None:
    status, _, body = http("GET", f"{server.base_url}/models")
    assert status == 200 and body["object"] == "list"
    assert [m["id"] for m in body["data"]] == sorted({"slow", "instant", "fixed", *FAULTS})


def test_default_models_and_explicit_models() -> None:
    assert ServerConfig().model_names() == ["scripted"]
    assert ServerConfig(models=["b", "a"]).model_names() == ["b", "a"]


def test_config_validation() -> None:
    for bad in ("504", "429x", "x2", "429x-1", "bogusx2", "429X2"):
        with pytest.raises(ValueError, match="faults_by_model"):
            ServerConfig(faults_by_model={"m": bad})
    with pytest.raises(ValueError, match="retry_after_by_model"):
        ServerConfig(retry_after_by_model={"m": -1})
    config = ServerConfig.from_json(
        '{"faults_by_model": {"m": "500x3"}, "retry_after_by_model": {"m": 0.5}}'
    )
    assert config.retry_after_for("m") == 0.5 and config.retry_after_for("other") == 1.0
    assert ServerConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="unknown --config keys"):
        ServerConfig.from_json('{"latency": 1}')
    config = ServerConfig.from_json('{"latency_by_model": {"s": 2}}', latency=0.1)
    assert config.latency_for("s") == 2.0 and config.latency_for("other") == 0.1


def test_openai_client(server: ScriptedServer, monkeypatch: pytest.MonkeyPatch) -> None:
    openai = pytest.importorskip("openai")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
    completion = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "ping pong"}], max_tokens=5
    )
    assert completion.choices[0].message.content == "[gpt-test] ping pong"
    assert completion.usage is not None and completion.usage.total_tokens == 5
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="m429", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="m401", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m500", messages=[{"role": "user", "content": "x"}])


# --------------------------------------------------------------------------------------------
# the faults added for retry tests: 503, counted faults, truncated, reset, slow


def test_parse_fault() -> None:
    from podium.testing.scripted_server import parse_fault

    assert parse_fault("429") == ("429", None)
    assert parse_fault("429x2") == ("429", 2)
    assert parse_fault("emptyx10") == ("empty", 10)
    assert parse_fault("truncatedx1") == ("truncated", 1)
    with pytest.raises(ValueError, match="not a fault"):
        parse_fault("418")


def test_retry_after_override(server: ScriptedServer) -> None:
    status, headers, _ = chat(server, "fast503")
    assert status == 503 and headers["retry-after"] == "0.2"


def test_counted_fault_fails_the_first_n_requests_per_model(server: ScriptedServer) -> None:
    assert [chat(server, "c429")[0] for _ in range(4)] == [429, 429, 200, 200]
    assert [chat(server, "c500")[0] for _ in range(2)] == [500, 200]  # its own count
    replies = [chat(server, "cempty")[2]["choices"][0]["message"]["content"] for _ in range(3)]
    assert replies == ["", "", "[cempty] hello"]
    statuses = [e["status"] for e in server.stats()["log"]]
    assert statuses == [429, 429, 200, 200, 500, 200, 200, 200, 200]
    server.reset()  # restarts the counts
    assert [chat(server, "c429")[0] for _ in range(3)] == [429, 429, 200]


def raw_chat(server: ScriptedServer, model: str, timeout: float = 10.0) -> tuple[int, str, bytes]:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=body.encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with _OPENER.open(request, timeout=timeout) as response:
        return response.status, response.headers["content-type"], response.read()


def test_truncated_fault(server: ScriptedServer) -> None:
    status, content_type, raw = raw_chat(server, "mtrunc")
    _, _, full = raw_chat(server, "instant")
    assert status == 200 and content_type == "application/json"
    with pytest.raises(ValueError):
        json.loads(raw)
    assert raw.startswith(b'{"id":"chatcmpl-') and b"[mtrunc]" not in raw
    assert abs(len(raw) - len(full) // 2) <= 2  # half of a reply of (almost) the same size
    assert server.stats()["log"][0]["status"] == 200


def test_reset_fault_drops_the_connection(server: ScriptedServer) -> None:
    for model in ("mreset", "creset"):
        with pytest.raises((ConnectionError, urllib.error.URLError, HTTPException)):
            raw_chat(server, model)
    assert raw_chat(server, "creset")[0] == 200  # "resetx1": only the first request
    stats = server.stats()
    assert [(e["model"], e["status"]) for e in stats["log"]] == [
        ("mreset", 0),
        ("creset", 0),
        ("creset", 200),
    ]
    assert stats["overall"]["in_flight"] == 0


def test_slow_fault_times_out_a_client(server: ScriptedServer) -> None:
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        chat(server, "mslow", timeout=0.3)
    deadline = time.monotonic() + 5
    while server.stats()["overall"]["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.stats()["log"][0]["status"] == 499


def test_openai_client_sees_the_new_faults(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai = pytest.importorskip("openai")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    client = openai.OpenAI(
        base_url=server.base_url,
        api_key="x",
        max_retries=0,
        timeout=openai.Timeout(0.5, connect=5.0),
    )

    def create(model: str) -> Any:
        return client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "x"}]
        )

    with pytest.raises(openai.InternalServerError) as info:
        create("m503")
    assert info.value.status_code == 503
    assert info.value.response.headers["retry-after"] == "1"
    with pytest.raises(openai.APIConnectionError) as reset:
        create("creset")
    assert not isinstance(reset.value, openai.APITimeoutError)
    assert create("creset").choices[0].message.content == "[creset] x"  # x1: only the first
    with pytest.raises(openai.APITimeoutError):
        create("mslow")
    with pytest.raises(json.JSONDecodeError):  # the SDK does not wrap a cut-off JSON body
        create("mtrunc")
