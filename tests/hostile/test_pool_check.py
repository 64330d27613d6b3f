"""`podium pool check` under the conditions that broke it, and the messages a failed check shows.

The check sends one tiny request to every pool entry at once, so it is where concurrency
between backends shows first: the embedded entries of the default pool used to load the same
GGUF in parallel, each through its own store, and llama.cpp's stdout/stderr suppression raced
until the process printed nothing (and exited 0). The cases here run the real command on the
real embedded model, a real dead port and a real silent server; fakes only inject faults (a
client whose call fails, to see that it is closed all the same).
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest
import support
from support import PROXY_VARS, free_port

from podium.cli import pool as pool_cli
from podium.config import ModelSpec, load_pool
from podium.errors import WorkerError


def podium(*args: str, columns: int = 200, timeout: int = 300) -> subprocess.CompletedProcess:
    return support.podium(*args, columns=columns, timeout=timeout)


closed_port = free_port  # bound once and released: nothing listens there


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A localhost TCP server that accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:  # the accept timeout; look at `stop` again
                continue
            held.append(conn)  # kept open, unanswered

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    server.close()


# --- 1. the default pool: every embedded entry loads one shared model, and output survives ---

def test_check_of_the_default_pool_prints_its_table(gguf_path) -> None:
    proc = podium("pool", "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [load_pool(None).conductor.name] + [w.name for w in load_pool(None).workers]
    assert len(names) >= 3  # two or more embedded entries load at once: the race's condition
    for name in names:
        assert name in proc.stdout, proc.stdout
    assert f"All {len(names)} models answered." in proc.stdout
    assert "Traceback" not in proc.stderr


def test_embedded_entries_of_one_file_share_one_loaded_model(gguf_path) -> None:
    """Two entries, two `build_client` calls (two stores), the file named two ways, called at
    once: one llama.cpp model is loaded and both clients use it."""
    from podium.llm.registry import build_client

    a = build_client(ModelSpec(name="a", backend="embedded", model="smollm2", max_tokens=4,
                               temperature=0.1))
    b = build_client(ModelSpec(name="b", backend="embedded", model=str(gguf_path),
                               max_tokens=4, temperature=0.9))

    async def both() -> None:
        await asyncio.gather(a.chat(pool_cli.PING), b.chat(pool_cli.PING))

    asyncio.run(both())
    loaded_a = a._store.get(a._path, a.spec.n_ctx)
    loaded_b = b._store.get(b._path, b.spec.n_ctx)
    assert loaded_a is loaded_b
    assert loaded_a.llm is loaded_b.llm


# --- 2. the ping leaves room for a thinking budget ---

def _anthropic(**fields) -> ModelSpec:
    return ModelSpec(**{"name": "claude", "backend": "anthropic", "model": "claude-test",
                        "api_key_env": "PODIUM_TEST_ANTHROPIC_KEY", **fields})


def test_the_ping_of_a_thinking_entry_has_room_for_its_budget(monkeypatch) -> None:
    from podium.llm.anthropic_native import AnthropicClient

    monkeypatch.setenv("PODIUM_TEST_ANTHROPIC_KEY", "sk-test")
    for spec in (_anthropic(thinking_budget=2048, max_tokens=4096),
                 _anthropic(thinking=True, max_tokens=3000),  # the backend's 1024 default
                 _anthropic(thinking_budget=2048, max_tokens=2049)):
        quick = pool_cli.ping_spec(spec)
        budget = spec.thinking_budget or 1024
        assert budget < quick.max_tokens <= spec.max_tokens
        AnthropicClient(quick)  # raised ConfigError (budget >= max_tokens) with max_tokens 8
    gemini = ModelSpec(name="g", backend="gemini", model="gemini-test", thinking_budget=512)
    assert pool_cli.ping_spec(gemini).max_tokens > 512
    # no thinking, or thinking turned off: the tiny ping as before
    for spec in (_anthropic(), _anthropic(thinking=False, thinking_budget=2048),
                 ModelSpec(name="o", backend="openai", model="m", base_url="http://x/v1")):
        assert pool_cli.ping_spec(spec).max_tokens == pool_cli.PING_MAX_TOKENS
    quick = pool_cli.ping_spec(_anthropic(timeout_s=600))
    assert (quick.retries, quick.empty_retries, quick.timeout_s) == (0, 0, 60.0)


# --- 3. a client whose check fails is closed all the same ---

class _Failing:
    """Fault injection: a client whose call fails, recording whether it was closed."""

    def __init__(self) -> None:
        self.closed = False

    async def chat(self, messages, **kwargs):
        raise WorkerError("broken", "server", "the injected failure")

    async def aclose(self) -> None:
        self.closed = True


def test_a_failed_check_closes_its_client(monkeypatch) -> None:
    import podium.llm.registry as registry

    made: list[_Failing] = []

    def build(spec, store=None, *, cache=None):
        made.append(_Failing())
        return made[-1]

    monkeypatch.setattr(registry, "build_client", build)
    spec = ModelSpec(name="broken", backend="function",
                     function="podium.testing.workers:adder")
    result = asyncio.run(pool_cli._check_one(spec))
    assert len(made) == 1 and made[0].closed
    assert not result["ok"] and "the injected failure" in result["reason"]
    assert result.get("kind") == "server"


# --- 4. a failing model: rc 1 and its reason, readable on an 80-column terminal ---

def one_worker_pool(tmp_path, name: str, url: str):
    """A pool file: a function Conductor and one `openai` worker at `url`."""
    path = tmp_path / "pool.toml"
    path.write_text(f"""
[conductor]
backend = "function"
function = "podium.testing.workers:one_step"

[[workers]]
name = "{name}"
backend = "openai"
model = "m"
base_url = "{url}"
""")
    return path


def test_a_dead_endpoint_fails_the_check_with_its_reason(tmp_path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    path = one_worker_pool(tmp_path, "dead", url)
    proc = podium("pool", "check", "--pool", str(path), columns=80)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "dead" in proc.stdout and "transport" in proc.stdout
    # the whole reason on one line, not folded into a narrow table column
    assert f"could not reach {url}; check base_url" in proc.stdout, proc.stdout
    assert "1 of 2 models failed" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_a_base_url_without_v1_fails_the_check_naming_base_url(tmp_path) -> None:
    from podium.testing import ScriptedServer

    with ScriptedServer() as server:
        url = server.base_url.removesuffix("/v1")
        proc = podium("pool", "check", "--pool", str(one_worker_pool(tmp_path, "nov1", url)))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"the endpoint at {url} has no such route or model (HTTP 404); check base_url" \
        in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr


# --- 5. a read timeout is not "could not reach" ---

@pytest.mark.parametrize("transport", ["aiohttp", "openai-sdk"])
def test_a_silent_server_is_a_read_timeout_not_unreachable(silent_server, monkeypatch,
                                                            transport) -> None:
    from podium.llm.openai_compat import OpenAICompatClient

    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    spec = ModelSpec(name="slow", backend="openai", model="m", base_url=silent_server,
                     timeout_s=0.5, transport=transport)
    client = OpenAICompatClient(spec)

    async def call() -> None:
        try:
            await client.chat(pool_cli.PING)
        finally:
            await client.aclose()

    with pytest.raises(WorkerError) as info:
        asyncio.run(call())
    message = str(info.value)
    assert info.value.kind == "transport" and info.value.retryable
    assert "could not reach" not in message
    # the server's silence outlasts timeout_s: a read timeout, or the whole call's deadline
    assert f"the endpoint at {silent_server}" in message
    assert "did not answer within timeout_s = 0.5 s" in message
    assert "raise timeout_s in the pool file" in message and "server's load" in message


@pytest.mark.parametrize("transport", ["aiohttp", "openai-sdk"])
def test_a_closed_port_still_says_could_not_reach(monkeypatch, transport) -> None:
    from podium.llm.openai_compat import OpenAICompatClient

    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    client = OpenAICompatClient(ModelSpec(name="dead", backend="openai", model="m",
                                          base_url=url, timeout_s=0.5, transport=transport))

    async def call() -> None:
        try:
            await client.chat(pool_cli.PING)
        finally:
            await client.aclose()

    with pytest.raises(WorkerError) as info:
        asyncio.run(call())
    assert f"could not reach {url}" in str(info.value)
    assert "accepted the connection" not in str(info.value)
    # what the HTTP stack said (refused), not only the SDK's "Connection error." or, from the
    # aiohttp transport, "Request timed out."
    assert "Connect" in str(info.value)
