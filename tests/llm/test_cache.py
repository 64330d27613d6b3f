"""The on-disk response cache: keys, hits and misses, persistence, concurrent writers."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from podium.config import ModelSpec
from podium.errors import ConfigError, WorkerError
from podium.llm.base import ChatResponse
from podium.llm.cache import (
    CachedClient,
    ResponseCache,
    cache_key,
    default_cache_path,
    what_to_do,
)

MSGS = [{"role": "user", "content": "What is 2+2?"}]
SECRET = "sk-test-SECRET-do-not-store-1234"
URL = "https://very-private-endpoint.example.com/v1"


def spec(**kw) -> ModelSpec:
    base = {"name": "w", "backend": "openai", "model": "m", "base_url": URL,
            "api_key_env": "PODIUM_TEST_CACHE_KEY", "temperature": 0.7}
    return ModelSpec(**{**base, **kw})


class FakeClient:
    """Counts calls; replies with text derived from the request, after a short await."""

    def __init__(self, text: str | None = None, exc: Exception | None = None) -> None:
        self.name = "fake"
        self.supports_grammar = True
        self.calls = 0
        self.text, self.exc = text, exc

    async def chat(self, messages, *, grammar=None, sample_id=0) -> ChatResponse:
        self.calls += 1
        await asyncio.sleep(0.01)
        if self.exc is not None:
            raise self.exc
        text = self.text if self.text is not None else f"{messages[-1]['content']}#{sample_id}"
        return ChatResponse(text=text, prompt_tokens=11, completion_tokens=7, latency_s=1.5,
                            model="m-2024", finish_reason="stop", request_id="req-1",
                            retries=({"kind": "rate_limit", "wait_s": 1.0},),
                            extra={"logprobs": [0.1, -2.0]})


@pytest.fixture
def cache(tmp_path):
    c = ResponseCache(tmp_path / "sub" / "responses.sqlite")
    yield c
    c.close()


def test_miss_then_hit(cache):
    inner = FakeClient()
    client = CachedClient(inner, spec(), cache)
    assert client.name == "fake" and client.supports_grammar
    first = asyncio.run(client.chat(MSGS))
    assert inner.calls == 1 and not first.cache_hit and first.latency_s == 1.5
    second = asyncio.run(client.chat(MSGS))
    assert inner.calls == 1
    assert second.cache_hit and second.latency_s == 0.0 and second.retries == ()
    assert (second.text, second.prompt_tokens, second.completion_tokens) == (
        first.text, first.prompt_tokens, first.completion_tokens)
    assert (second.model, second.finish_reason, second.request_id, second.extra) == (
        "m-2024", "stop", "req-1", {"logprobs": [0.1, -2.0]})
    assert len(cache) == 1


def test_sample_ids_are_separate_entries(cache):
    inner = FakeClient()
    client = CachedClient(inner, spec(), cache)
    a, b = (asyncio.run(client.chat(MSGS, sample_id=i)) for i in (0, 1))
    assert inner.calls == 2 and a.text != b.text
    again = [asyncio.run(client.chat(MSGS, sample_id=i)) for i in (0, 1)]
    assert inner.calls == 2 and all(r.cache_hit for r in again)
    assert [r.text for r in again] == [a.text, b.text]


def test_key_contents(monkeypatch, tmp_path):
    monkeypatch.setenv("PODIUM_TEST_CACHE_KEY", SECRET)
    k = cache_key(spec(), MSGS, grammar=None, sample_id=0)
    changed = [
        cache_key(spec(temperature=0.2), MSGS, grammar=None, sample_id=0),
        cache_key(spec(), [{"role": "user", "content": "other"}], grammar=None, sample_id=0),
        cache_key(spec(), MSGS, grammar='root ::= "a"', sample_id=0),
        cache_key(spec(), MSGS, grammar=None, sample_id=1),
        cache_key(spec(model="m2"), MSGS, grammar=None, sample_id=0),
        cache_key(spec(extra_body={"top_k": 5}), MSGS, grammar=None, sample_id=0),
    ]
    assert k not in changed and len(set(changed)) == len(changed)
    same = [
        spec(base_url="http://localhost:8000/v1"), spec(name="renamed"),
        spec(api_key_env="OTHER_KEY"), spec(price={"input": 1.0, "output": 2.0}),
        spec(timeout_s=5.0), spec(retries=0, max_concurrency=1, description="d"),
    ]
    assert all(cache_key(s, MSGS, grammar=None, sample_id=0) == k for s in same)

    cache = ResponseCache(tmp_path / "c.sqlite")
    inner = FakeClient()
    asyncio.run(CachedClient(inner, spec(), cache).chat(MSGS))
    cache.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("c.sqlite*"))
    assert raw and SECRET.encode() not in raw and URL.encode() not in raw
    assert b"PODIUM_TEST_CACHE_KEY" not in raw


def test_empty_and_errors_are_not_cached(cache):
    empty = FakeClient(text="")
    client = CachedClient(empty, spec(), cache)
    for _ in range(2):
        assert asyncio.run(client.chat(MSGS)).text == ""
    assert empty.calls == 2 and len(cache) == 0

    err = WorkerError("fake", "server", "boom")
    failing = FakeClient(exc=err)
    client = CachedClient(failing, spec(), cache)
    for _ in range(2):
        with pytest.raises(WorkerError) as info:
            asyncio.run(client.chat(MSGS))
        assert info.value is err
    assert failing.calls == 2 and len(cache) == 0


def test_inner_cache_hits_are_not_stored_again(cache):
    class HitClient(FakeClient):
        async def chat(self, messages, *, grammar=None, sample_id=0):
            self.calls += 1
            return ChatResponse(text="x", cache_hit=True)

    asyncio.run(CachedClient(HitClient(), spec(), cache).chat(MSGS))
    assert len(cache) == 0


def test_persistence(tmp_path):
    path = tmp_path / "p.sqlite"
    first = ResponseCache(path)
    first.put("k1", ChatResponse(text="hello", completion_tokens=3, reasoning_tokens=2,
                                 prefill="continued", cache_hit=True, retries=({"a": 1},)))
    first.close()
    again = ResponseCache(path)
    got = again.get("k1")
    assert got is not None and got.text == "hello" and got.completion_tokens == 3
    assert got.reasoning_tokens == 2 and got.prefill == "continued"
    assert got.cache_hit and got.retries == () and got.latency_s == 0.0
    assert again.get("missing") is None and len(again) == 1
    stored = json.loads(sqlite3.connect(path).execute("SELECT response FROM responses")
                        .fetchone()[0])
    assert "cache_hit" not in stored and "retries" not in stored
    again.close()


def test_first_writer_wins(cache):
    cache.put("k", ChatResponse(text="first"))
    cache.put("k", ChatResponse(text="second"))
    assert cache.get("k").text == "first" and len(cache) == 1


_WRITER = textwrap.dedent("""
    import sys
    from podium.llm.base import ChatResponse
    from podium.llm.cache import ResponseCache
    path, proc = sys.argv[1], int(sys.argv[2])
    c = ResponseCache(path)
    for i in range(200):
        c.put(f"p{proc}-{i}", ChatResponse(text=f"v{proc}-{i}", prompt_tokens=i))
        if i % 4 == 0:
            c.put(f"shared-{i // 4}", ChatResponse(text=f"s{i // 4}"))
    c.close()
""")


def test_concurrent_processes(tmp_path):
    path = tmp_path / "shared.sqlite"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(p)],
                              stderr=subprocess.PIPE) for p in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err.decode()
    cache = ResponseCache(path)
    assert len(cache) == 4 * 200 + 50
    for p in range(4):
        for i in range(200):
            got = cache.get(f"p{p}-{i}")
            assert got is not None and got.text == f"v{p}-{i}" and got.prompt_tokens == i
    assert all(cache.get(f"shared-{j}").text == f"s{j}" for j in range(50))
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    cache.close()


def test_concurrent_tasks_dedupe_in_flight(cache):
    inner = FakeClient()
    client = CachedClient(inner, spec(), cache)

    async def main():
        reqs = [[{"role": "user", "content": f"q{i % 20}"}] for i in range(100)]
        return await asyncio.gather(*(client.chat(m) for m in reqs))

    out = asyncio.run(main())
    assert inner.calls == 20 and len(cache) == 20
    assert [r.text for r in out] == [f"q{i % 20}#0" for i in range(100)]
    assert sum(not r.cache_hit for r in out) == 20


def test_waiters_call_inner_themselves_after_a_failed_leader(cache):
    class FailOnce(FakeClient):
        async def chat(self, messages, *, grammar=None, sample_id=0):
            self.calls += 1
            await asyncio.sleep(0.01)
            if self.calls == 1:
                raise WorkerError("fake", "server", "boom")
            return ChatResponse(text="ok")

    inner = FailOnce()
    client = CachedClient(inner, spec(), cache)

    async def main():
        return await asyncio.gather(*(client.chat(MSGS) for _ in range(3)),
                                    return_exceptions=True)

    out = asyncio.run(main())
    assert isinstance(out[0], WorkerError) and [r.text for r in out[1:]] == ["ok", "ok"]
    assert inner.calls == 3 and len(cache) == 1


def test_corrupt_file_is_a_config_error(tmp_path):
    path = tmp_path / "responses.sqlite"
    path.write_bytes(b"this is not a database\x00\xff" * 200)
    with pytest.raises(ConfigError, match="responses.sqlite") as info:
        ResponseCache(path)
    assert str(path) in str(info.value) and "--no-cache" in str(info.value)


def test_foreign_database_is_a_config_error(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE responses (id INTEGER, body BLOB)")
    with pytest.raises(ConfigError, match="not a podium response cache"):
        ResponseCache(path)


def test_default_cache_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PODIUM_CACHE_DIR", str(tmp_path))
    assert default_cache_path() == tmp_path / "responses.sqlite"
    monkeypatch.delenv("PODIUM_CACHE_DIR")
    assert default_cache_path().parts[-3:] == (".cache", "podium", "responses.sqlite")


def test_cancelled_leader_does_not_strand_waiters(cache):
    inner = FakeClient()
    client = CachedClient(inner, spec(), cache)

    async def main():
        leader = asyncio.create_task(client.chat(MSGS))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(client.chat(MSGS))
        await asyncio.sleep(0.001)
        leader.cancel()
        return await asyncio.wait_for(waiter, 5)

    assert asyncio.run(main()).text == "What is 2+2?#0"
    assert len(cache) == 1


def test_threads_share_one_cache(cache):
    from concurrent.futures import ThreadPoolExecutor

    def work(t: int) -> None:
        for i in range(50):
            cache.put(f"t{t}-{i}", ChatResponse(text=f"{t}:{i}"))
            assert cache.get(f"t{t}-{i}").text == f"{t}:{i}"

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert len(cache) == 400


def test_aclose_is_delegated(cache):
    class Closable(FakeClient):
        closed = False

        async def aclose(self):
            self.closed = True

    inner = Closable()
    asyncio.run(CachedClient(inner, spec(), cache).aclose())
    asyncio.run(CachedClient(FakeClient(), spec(), cache).aclose())  # no aclose: fine
    assert inner.closed


@pytest.mark.parametrize("where", ["root", "folder", "foreign", "corrupt"])
def test_deleting_is_never_suggested_for_what_podium_did_not_make(where, tmp_path):
    """A cache_path that is a folder (even /), another program's database or a damaged file:
    the fix is another cache_path, never "Delete" it."""
    path = {"root": Path("/"), "folder": tmp_path, "foreign": tmp_path / "other.sqlite",
            "corrupt": tmp_path / "responses.sqlite"}[where]
    if where == "foreign":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE responses (id INTEGER, body BLOB)")
    if where == "corrupt":
        path.write_bytes(b"this is not a database\x00\xff" * 200)
    with pytest.raises(ConfigError) as info:
        ResponseCache(path)
    assert "Delete" not in str(info.value) and "delete" not in str(info.value)
    assert "cache_path" in str(info.value) and "--no-cache" in str(info.value)


def test_deleting_is_suggested_only_for_a_podium_cache_file(tmp_path):
    path = tmp_path / "responses.sqlite"
    ResponseCache(path).close()
    assert what_to_do(path).startswith(f"Delete {path} (it only holds cached replies)")
    (tmp_path / "link.sqlite").symlink_to(path)  # what a link points at is not for deleting
    for other in (tmp_path / "link.sqlite", tmp_path, Path("/"), tmp_path / "missing"):
        assert "Delete" not in what_to_do(other) and "cache_path" in what_to_do(other)
