"""Tests for podium.llm.reliable: retries, backoff and rate limits.

Failures are injected by the scripted OpenAI-compatible server (a real HTTP server in a
subprocess) and go through the real `OpenAICompatClient`; what happened is read from the
response's recorded retries and from the server's own request log. Rate limits are checked on
a fake clock (never on elapsed wall time).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm.base import ChatResponse, Message, retry_after
from podium.llm.openai_compat import OpenAICompatClient, _env_proxy
from podium.llm.reliable import RateLimiter, ReliableClient, estimate_tokens
from podium.testing import ScriptedServer
from podium.workflow.execute import ExecOptions, Execution, Team, execute_workflow
from podium.workflow.types import Workflow

TIMEOUT = 20.0  # generous: reached only when the behaviour under test is broken
KEY_ENV = "PODIUM_RELIABLE_TEST_KEY"
SECRET = "sk-podium-test-SECRET"
HELLO: list[Message] = [{"role": "user", "content": "hello"}]

FAULTS = {
    "r429": "429x2",
    "r500": "500x1",
    "r503": "503x1",
    "reset1": "resetx1",
    "slow": "slow",
    "trunc1": "truncatedx1",
    "empty2": "emptyx2",
    "empty": "empty",
    "auth": "401",
    "dead": "500",
    "page": "html",
    "none1": "nochoicesx1",
}
RETRY_AFTER = {"r429": 0.3, "r503": 0.2}
# every fault through both transports (the pool's `transport`: podium's aiohttp path and the
# openai SDK): their errors must sort into the same kinds
TRANSPORTS = pytest.mark.parametrize("transport", ["aiohttp", "openai-sdk"])


def run(coro: Awaitable[Any]) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, TIMEOUT)

    return asyncio.run(guarded())


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(latency=0.01, faults_by_model=FAULTS,
                        retry_after_by_model=RETRY_AFTER) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def spec_for(server: ScriptedServer, model: str, **kwargs: Any) -> ModelSpec:
    settings: dict[str, Any] = {"base_url": server.base_url, "backoff_s": 0.01,
                                "backoff_max_s": 0.05, **kwargs}
    return ModelSpec(name=model, backend="openai", model=model, api_key_env=KEY_ENV, **settings)


def reliable(server: ScriptedServer, model: str, limiter: RateLimiter | None = None,
             **kwargs: Any) -> ReliableClient:
    spec = spec_for(server, model, **kwargs)
    return ReliableClient(OpenAICompatClient(spec), spec, limiter=limiter)


def chat(server: ScriptedServer, model: str, **kwargs: Any) -> ChatResponse:
    """One call through ReliableClient on a freshly reset server (raises its WorkerError)."""
    async def main() -> ChatResponse:
        client = reliable(server, model, **kwargs)
        try:
            return await client.chat(HELLO)
        finally:
            await client.aclose()

    server.reset()
    return run(main())


def statuses(server: ScriptedServer, model: str) -> list[int | None]:
    return [e["status"] for e in server.stats()["log"] if e["model"] == model]


# --------------------------------------------------------------------------------------------
# faults injected at the server


@TRANSPORTS
def test_429_waits_as_long_as_retry_after_asks(transport: str, server: ScriptedServer) -> None:
    resp = chat(server, "r429", transport=transport)
    assert resp.text == "[r429] hello"
    assert [(r["attempt"], r["kind"], r["status"]) for r in resp.retries] == [
        (1, "rate_limit", 429), (2, "rate_limit", 429)
    ]
    assert all(r["wait_s"] >= 0.3 for r in resp.retries)
    assert all("r429" in r["error"] and len(r["error"]) <= 200 for r in resp.retries)
    assert statuses(server, "r429") == [429, 429, 200]


@TRANSPORTS
@pytest.mark.parametrize(("model", "status"), [("r500", 500), ("r503", 503)])
def test_server_errors_are_retried(transport: str,
                                   server: ScriptedServer, model: str, status: int) -> None:
    resp = chat(server, model, transport=transport)
    assert resp.text == f"[{model}] hello"
    assert [(r["kind"], r["status"]) for r in resp.retries] == [("server", status)]
    if model == "r503":  # its Retry-After (0.2 s) wins over the 0.01 s backoff
        assert resp.retries[0]["wait_s"] >= 0.2
    assert statuses(server, model) == [status, 200]


@TRANSPORTS
def test_connection_reset_is_a_transport_error_and_retried(transport: str,
                                                           server: ScriptedServer) -> None:
    resp = chat(server, "reset1", transport=transport)
    assert resp.text == "[reset1] hello"
    assert [(r["kind"], r["status"]) for r in resp.retries] == [("transport", None)]
    assert statuses(server, "reset1") == [0, 200]  # 0: the server dropped the connection


@TRANSPORTS
def test_truncated_json_is_a_server_error_and_retried(transport: str,
                                                      server: ScriptedServer) -> None:
    resp = chat(server, "trunc1", transport=transport)
    assert resp.text == "[trunc1] hello"
    assert [r["kind"] for r in resp.retries] == ["server"]
    assert statuses(server, "trunc1") == [200, 200]


@TRANSPORTS
def test_a_reply_is_read_whole(transport: str, server: ScriptedServer) -> None:
    resp = chat(server, "plain", transport=transport)
    assert (resp.text, resp.model, resp.finish_reason) == ("[plain] hello", "plain", "stop")
    assert (resp.prompt_tokens, resp.completion_tokens, resp.reasoning_tokens) == (1, 2, 0)
    assert resp.request_id and resp.request_id.startswith("req-")  # the x-request-id header
    assert not resp.retries and resp.latency_s > 0


@TRANSPORTS
def test_a_web_page_for_a_reply_names_base_url(transport: str,
                                               server: ScriptedServer) -> None:
    with pytest.raises(WorkerError) as info:
        chat(server, "page", retries=0, transport=transport)
    assert info.value.kind == "server"
    assert "/chat/completions is not JSON (content-type 'text/html" in str(info.value)
    assert "check base_url" in str(info.value)


@TRANSPORTS
def test_a_reply_without_choices_is_an_empty_reply_and_asked_again(
        transport: str, server: ScriptedServer) -> None:
    resp = chat(server, "none1", transport=transport)
    assert resp.text == "[none1] hello"
    assert [(r["kind"], r["status"]) for r in resp.retries] == [("empty", None)]
    assert statuses(server, "none1") == [200, 200]


@TRANSPORTS
def test_a_base_url_without_its_v1_is_a_404_that_names_base_url(
        transport: str, server: ScriptedServer) -> None:
    assert server.base_url.endswith("/v1")
    with pytest.raises(WorkerError) as info:
        chat(server, "w0", transport=transport, base_url=server.base_url.removesuffix("/v1"))
    exc = info.value
    assert (exc.kind, exc.status, exc.retries) == ("bad_request", 404, [])  # not asked again
    assert "no such route or model (HTTP 404); check base_url" in str(exc)


@TRANSPORTS
def test_read_timeout_is_a_transport_error(transport: str, server: ScriptedServer) -> None:
    with pytest.raises(WorkerError) as info:
        chat(server, "slow", timeout_s=0.5, retries=1, transport=transport)
    exc = info.value
    assert exc.kind == "transport" and exc.worker == "slow"
    assert [(r["attempt"], r["kind"]) for r in exc.retries] == [(1, "transport")]
    assert server.stats()["by_model"]["slow"]["requests"] == 2


@TRANSPORTS
def test_empty_replies_are_asked_again(transport: str, server: ScriptedServer) -> None:
    resp = chat(server, "empty2", empty_retries=2, transport=transport)
    assert resp.text == "[empty2] hello"
    assert [(r["attempt"], r["kind"]) for r in resp.retries] == [(1, "empty"), (2, "empty")]
    assert len(statuses(server, "empty2")) == 3


@TRANSPORTS
def test_an_empty_reply_after_the_re_asks_is_returned(transport: str,
                                                      server: ScriptedServer) -> None:
    resp = chat(server, "empty", empty_retries=1, transport=transport)
    assert resp.text == ""
    assert [r["kind"] for r in resp.retries] == ["empty"]
    assert len(statuses(server, "empty")) == 2


@TRANSPORTS
def test_auth_errors_are_not_retried_and_hide_the_key(transport: str,
                                                      server: ScriptedServer) -> None:
    with pytest.raises(WorkerError) as info:
        chat(server, "auth", transport=transport)
    exc = info.value
    assert (exc.kind, exc.status, exc.retries) == ("auth", 401, [])
    assert SECRET not in str(exc) and SECRET not in repr(exc.args)
    assert statuses(server, "auth") == [401]


@TRANSPORTS
def test_a_permanent_server_error_gives_up_after_the_retries(transport: str,
                                                             server: ScriptedServer) -> None:
    with pytest.raises(WorkerError) as info:
        chat(server, "dead", retries=2, transport=transport)
    exc = info.value
    assert (exc.kind, exc.status) == ("server", 500)
    assert [(r["attempt"], r["kind"], r["status"]) for r in exc.retries] == [
        (1, "server", 500), (2, "server", 500)
    ]
    assert statuses(server, "dead") == [500, 500, 500]


@pytest.mark.parametrize("on_error", ["continue", "stop"])
def test_a_failing_worker_follows_the_failure_policy(server: ScriptedServer,
                                                      on_error: Any) -> None:
    async def main() -> Execution:
        clients = [reliable(server, "w0"), reliable(server, "dead", retries=1)]
        wf = Workflow.of([(1, "FAILS", ()), (0, "AFTER", "all")])
        try:
            return await execute_workflow(wf, "What is 6 * 7?", Team(clients),
                                          options=ExecOptions(on_error=on_error))
        finally:
            for client in clients:
                await client.aclose()

    server.reset()
    failed, after = run(main()).steps
    assert (failed.status, failed.error_kind) == ("error", "server")
    assert len(failed.retries) == 1 and failed.retries[0]["status"] == 500
    assert statuses(server, "dead") == [500, 500]
    if on_error == "continue":
        assert after.status == "ok" and statuses(server, "w0") == [200]
    else:
        assert after.status == "skipped" and statuses(server, "w0") == []


def test_the_proxy_is_the_one_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                 "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,.internal")
    assert _env_proxy("https://api.openai.com/v1") == "http://proxy.example:3128"
    assert _env_proxy("https://llm.internal/v1") is None  # NO_PROXY
    assert _env_proxy("http://127.0.0.1:8000/v1") is None  # no HTTP_PROXY
    monkeypatch.setenv("ALL_PROXY", "socks5://proxy.example:1080")
    assert _env_proxy("http://127.0.0.1:8000/v1") == "socks5://proxy.example:1080"

    with pytest.raises(ConfigError, match='HTTP proxies only. Set transport = "openai-sdk"'):
        OpenAICompatClient(ModelSpec(name="w", backend="openai", model="w",
                                     base_url="http://127.0.0.1:9/v1"))


# --------------------------------------------------------------------------------------------
# rate limits, on a fake clock


class FakeClock:
    """`clock()` returns fake seconds; `sleep(s)` advances them (and yields to the loop)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


class RecordingLimiter(RateLimiter):
    """Keeps the fake time at which each request was let through."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.starts: list[float] = []

    async def acquire(self, est_tokens: int) -> None:
        await super().acquire(est_tokens)
        self.starts.append(self._clock())


def acquire_times(limiter: RateLimiter, clock: FakeClock, tokens: list[int],
                  concurrent: bool = False) -> list[float]:
    async def one(n: int) -> float:
        await limiter.acquire(n)
        return clock.now

    async def main() -> list[float]:
        if concurrent:
            return sorted(await asyncio.gather(*(one(n) for n in tokens)))
        return [await one(n) for n in tokens]

    return run(main())


@pytest.mark.parametrize("concurrent", [False, True])
def test_rpm_window(concurrent: bool) -> None:
    clock = FakeClock()
    limiter = RateLimiter(3, None, clock=clock, sleep=clock.sleep)
    times = acquire_times(limiter, clock, [10] * 7, concurrent)
    assert times == [0, 0, 0, 60, 60, 60, 120]


def test_tpm_window_settle_and_oversized_requests() -> None:
    clock = FakeClock()
    limiter = RateLimiter(None, 1000, clock=clock, sleep=clock.sleep)
    assert acquire_times(limiter, clock, [400] * 5) == [0, 0, 60, 60, 120]

    clock = FakeClock()  # settle: a call that used less frees its tokens
    limiter = RateLimiter(None, 1000, clock=clock, sleep=clock.sleep)
    acquire_times(limiter, clock, [400])
    limiter.settle(400, 100)
    assert acquire_times(limiter, clock, [400, 400, 400]) == [0, 0, 60]

    clock = FakeClock()  # a request above tpm goes alone instead of never
    limiter = RateLimiter(None, 100, clock=clock, sleep=clock.sleep)
    assert acquire_times(limiter, clock, [50, 500, 10]) == [0, 60, 120]


def test_rpm_and_tpm_together_and_across_event_loops() -> None:
    clock = FakeClock()
    limiter = RateLimiter(2, 1000, clock=clock, sleep=clock.sleep)
    assert acquire_times(limiter, clock, [100, 100, 900]) == [0, 0, 60]
    # a second asyncio.run (a new loop) uses the same limiter and window
    assert acquire_times(limiter, clock, [100, 100], concurrent=True) == [60, 120]


def test_burst_against_the_server_respects_rpm(server: ScriptedServer) -> None:
    clock = FakeClock()
    limiter = RecordingLimiter(4, None, clock=clock, sleep=clock.sleep)

    async def main() -> list[ChatResponse]:
        client = reliable(server, "burst", limiter=limiter)
        try:
            return await asyncio.gather(
                *(client.chat([{"role": "user", "content": f"q{i}"}]) for i in range(12))
            )
        finally:
            await client.aclose()

    server.reset()
    replies = run(main())
    assert sorted(r.text for r in replies) == sorted(f"[burst] q{i}" for i in range(12))
    assert server.stats()["by_model"]["burst"]["requests"] == 12
    assert clock.now >= 120
    starts = sorted(limiter.starts)
    assert len(starts) == 12
    assert all(sum(1 for t in starts if s <= t < s + 60) <= 4 for s in starts)


# --------------------------------------------------------------------------------------------
# the retry loop with a scripted inner client (no server)


class Inner:
    """Raises or returns, in order, what it is given."""

    name = "inner"
    supports_grammar = True

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int = 0) -> ChatResponse:
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def run_inner(inner: Inner, **spec: Any) -> tuple[Any, list[float]]:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    client = ReliableClient(inner, ModelSpec(name="inner", backend="function", function="x:y",
                                             **spec), sleep=sleep, rng=random.Random(0))
    try:
        return run(client.chat(HELLO)), waits
    except WorkerError as exc:
        return exc, waits


def test_backoff_doubles_with_jitter_and_caps() -> None:
    inner = Inner(*[WorkerError("inner", "server", "boom")] * 5, ChatResponse(text="ok"))
    resp, waits = run_inner(inner, retries=5, backoff_s=1.0, backoff_max_s=6.0)
    assert resp.text == "ok" and inner.calls == 6
    for n, wait in enumerate(waits):
        base = min(6.0, 2.0**n)
        assert base / 2 <= wait <= base
    assert [r["wait_s"] for r in resp.retries] == [round(w, 3) for w in waits]


def test_retry_after_is_honoured_up_to_120_s() -> None:
    inner = Inner(WorkerError("inner", "rate_limit", "slow down", status=429, retry_after=500),
                  WorkerError("inner", "rate_limit", "slow down", status=429, retry_after=7),
                  ChatResponse(text="ok"))
    resp, waits = run_inner(inner, backoff_max_s=1.0)
    assert waits == [120.0, 7.0] and resp.text == "ok"


def test_timeouts_become_transport_errors_and_records_survive_a_final_error() -> None:
    inner = Inner(TimeoutError(), WorkerError("inner", "bad_request", "no such model"))
    exc, waits = run_inner(inner, retries=4)
    assert isinstance(exc, WorkerError) and exc.kind == "bad_request"
    assert [r["kind"] for r in exc.retries] == ["transport"] and len(waits) == 1
    assert inner.calls == 2


def test_delegation_and_estimate() -> None:
    inner = Inner()
    client = ReliableClient(inner, ModelSpec(name="x", backend="function", function="x:y"))
    assert client.name == "inner" and client.supports_grammar is True
    assert client.limiter is None
    run(client.aclose())  # the inner client has no aclose: nothing to do
    with_limits = ReliableClient(inner, ModelSpec(name="x", backend="function", function="x:y",
                                                  rpm=10))
    assert with_limits.limiter is not None and with_limits.limiter.rpm == 10
    assert estimate_tokens([{"role": "user", "content": "x" * 400}], 100) == 200
    assert estimate_tokens([], None) == 512


def test_retry_after_header_parsing() -> None:
    assert retry_after(None) is None
    assert retry_after({}) is None
    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"retry-after": "0.2"}) == 0.2
    assert retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after({"retry-after": "soon"}) is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 20 <= (retry_after({"retry-after": later}) or 0) <= 30
    earlier = format_datetime(datetime.now(UTC) - timedelta(seconds=30), usegmt=True)
    assert retry_after({"retry-after": earlier}) == 0.0
