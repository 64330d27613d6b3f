"""Helpers the tests share: a free localhost port, the `podium` CLI in a subprocess or in
this process, an in-thread server (and `podium serve`'s app in one, over a pipeline whose
Conductor is a Python planner), a tiny policy."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from podium.testing.ports import free_port  # noqa: F401  (tests import it from here)

PODIUM = [sys.executable, "-m", "podium.cli.main"]
# A team of Python functions: a Conductor that sends the question to worker 0, the adder
ADDER_POOL = """\
[conductor]
backend = "function"
function = "podium.testing.workers:one_step"

[[workers]]
name = "adder"
backend = "function"
function = "podium.testing.workers:adder"
"""
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
              "all_proxy")  # the tests talk to localhost servers only: no proxy in between


def registered_alone(monkeypatch: pytest.MonkeyPatch, secret: str) -> None:
    """`secret`, registered as the only one for the rest of a test: the registry is the
    process's, and keys other tests registered would hold back other ends of a stream."""
    from podium import redact

    monkeypatch.setattr(redact, "_secrets", ())
    monkeypatch.setattr(redact, "_patterns", ())
    redact.register(secret)


def podium(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
           columns: int = 160, **kw: Any) -> subprocess.CompletedProcess:
    """`podium ARGS...` as a user runs it, in its own process: output captured (text unless
    `text=False`), the terminal `columns` wide, `env` over this process's environment."""
    base = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    kw.setdefault("text", True)
    return subprocess.run([*PODIUM, *args], capture_output=True, timeout=timeout,
                          env={**base, "COLUMNS": str(columns), **(env or {})}, **kw)


def podium_in_process(*args: str, env: dict[str, str] | None = None,
                      columns: int = 160) -> subprocess.CompletedProcess:
    """`podium ARGS...` run in this process by typer's CliRunner, answered as `podium()`
    answers (exit code, stdout, stderr apart), without a new process's seconds of imports: for
    what the command does, not for what a separate process adds (signals, its own environment,
    output written by C code). `env` is over this process's environment while it runs; an
    exception podium does not turn into an exit code is raised here, as a traceback would be."""
    from typer.testing import CliRunner

    from podium.cli.main import app

    over: dict[str, str | None] = {**dict.fromkeys(PROXY_VARS), "COLUMNS": str(columns),
                                   **(env or {})}
    result = CliRunner().invoke(app, list(args), env=over, catch_exceptions=False)
    return subprocess.CompletedProcess(["podium", *args], result.exit_code, result.stdout,
                                       result.stderr)


class InThreadServer:
    """An ASGI app under a real uvicorn server in a daemon thread, on a port of its own (a
    socket bound here, so the port is held from the start). `started()` waits until it serves;
    `stop()` asks it to exit and joins the thread."""

    def __init__(self, app: Any, *, name: str = "test server", **config: Any) -> None:
        import threading

        import uvicorn

        self.name = name
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, **config))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)

    def started(self, timeout: float = 20) -> InThreadServer:
        import time

        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"the {self.name} did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 15) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()


def planned(pool: Any, planner: Callable[[list[dict]], str]) -> Any:
    """A `Pipeline` over `pool` whose Conductor is `planner` (messages in, a plan out), its
    workers the pool's own clients."""
    from podium.config import ModelSpec
    from podium.llm.function import FunctionClient
    from podium.llm.registry import build_client
    from podium.pipeline import Pipeline

    conductor = FunctionClient(ModelSpec(name="conductor", backend="function",
                                         function="podium.testing.workers:one_step"), planner)
    return Pipeline(pool, clients=(conductor, [build_client(w) for w in pool.workers]))


@contextmanager
def serving(pipe: Any, traces: Path, key: str, name: str) -> Iterator[str]:
    """`podium serve`'s app over `pipe` (key `key`, traces in `traces`) in a thread: its base
    URL."""
    from podium.serve import ServeConfig, create_app

    running = InThreadServer(create_app(ServeConfig(keys=(key,), trace_dir=traces), pipe),
                             name=name, log_config=None).started()
    try:
        yield running.base
    finally:
        running.stop()


def _benchmark_data() -> Any:
    from podium.errors import ConfigError
    from podium.tasks.base import data_dir

    try:
        return data_dir()
    except ConfigError:
        return None


DATA = _benchmark_data()  # the offline benchmark files ($PODIUM_DATA_DIR, conftest.py), or None
needs_data = pytest.mark.skipif(
    DATA is None, reason="no offline benchmark folder ($PODIUM_DATA_DIR)")


def tiny_llama(tokenizer, seed: int = 0):
    """A tiny Llama (2 layers, hidden 32) with the bundled tokenizer's vocabulary, built from a
    config: a real policy for tests that measure what training does with it, not how well it
    writes (a GRPO step in a second or two, where the bundled 135M model takes tens)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True))
