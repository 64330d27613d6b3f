"""Helpers for the server tests: the function-worker pool, a uvicorn server in a thread, a
`podium serve` subprocess, the test keys, `podium eval` of a served model."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from support import ADDER_POOL, InThreadServer, free_port

from podium.config import load_pool
from podium.pipeline import Pipeline
from podium.serve import ServeConfig, create_app

KEY = "sk-podium-test-key-7f3a9c2e51"
OTHER_KEY = "sk-podium-test-key-second-0b8d"
POOL = ADDER_POOL + """
[[workers]]
name = "zero"
backend = "function"
function = "podium.testing.workers:zero"

[[workers]]
name = "slow"
backend = "function"
function = "podium.testing.workers:slow"

[[workers]]
name = "down"
backend = "function"
function = "podium.testing.workers:down"

[run]
cache = false
"""


class Records(logging.Handler):
    """Every log record of the server, formatted with its traceback (for key-leak checks)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


class ThreadServer:
    """`create_app` under a real uvicorn server in a daemon thread."""

    def __init__(self, pool_file: Path, trace_dir: Path, **config) -> None:
        self.config = ServeConfig(trace_dir=trace_dir, **config)
        self.app = create_app(self.config, Pipeline(load_pool(pool_file)))
        self.running = InThreadServer(self.app, name="podium test server", log_config=None,
                                      log_level="debug", timeout_graceful_shutdown=5)
        self.port, self.base, self.server = (self.running.port, self.running.base,
                                             self.running.server)

    def __enter__(self) -> ThreadServer:
        self.running.started()
        return self

    def __exit__(self, *exc) -> None:
        self.running.stop()


def crashing_app():
    """An app factory that fails in a way a restart does not know to be hopeless."""
    raise RuntimeError("this app cannot be built")


def auth(key: str = KEY) -> dict:
    return {"Authorization": f"Bearer {key}"}


def podium_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "podium.cli.main", *args]


class CliServer:
    """`podium serve` in a subprocess on a free port; its output goes to a log file."""

    def __init__(self, args: list[str], log: Path, env: dict | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._fh = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            podium_cli("serve", "--port", str(self.port), *args), stdout=self._fh,
            stderr=subprocess.STDOUT, env={**os.environ, "NO_PROXY": "127.0.0.1", **(env or {})})

    def wait(self, timeout: float = 120) -> CliServer:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"podium serve exited early:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.base}/health", timeout=2, trust_env=False).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"podium serve did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._fh.close()


def sigterm_with_a_request_in_flight(srv: CliServer, key: str) -> httpx.Response:
    """Ask the one-second `slow` worker, send the server SIGTERM while the request runs, and
    return the answer the client got."""
    got: dict = {}

    def ask() -> None:
        got["r"] = httpx.post(f"{srv.base}/v1/chat/completions", timeout=30, trust_env=False,
                              headers={"Authorization": f"Bearer {key}"},
                              json={"model": "podium", "workers": ["slow"],
                                    "messages": [{"role": "user",
                                                  "content": "What is 20 + 22?"}]})

    thread = threading.Thread(target=ask)
    thread.start()
    time.sleep(0.4)  # the slow worker takes 1 s: the request is in flight
    srv.proc.send_signal(signal.SIGTERM)
    thread.join(30)
    return got["r"]


def eval_blackbox(spec: str, data, out, env: dict | None = None):
    """`podium eval --system SPEC` on a JSONL of sums, in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "podium.cli.main", "eval", "--task", f"jsonl:{data}",
         "--system", spec, "--repeats", "1", "--out", str(out), "--task-option",
         "grader=numeric", "--no-cache"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "COLUMNS": "200", "NO_PROXY": "127.0.0.1", **(env or {})})
