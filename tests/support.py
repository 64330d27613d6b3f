"""Helpers the tests share: a free localhost port and the `podium` CLI in a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

PODIUM = [sys.executable, "-m", "podium.cli.main"]
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
              "all_proxy")  # the tests talk to localhost servers only: no proxy in between


def free_port() -> int:
    """A localhost port nothing listens on (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def podium(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
           columns: int = 160, **kw: Any) -> subprocess.CompletedProcess:
    """`podium ARGS...` as a user runs it, in its own process: output captured (text unless
    `text=False`), the terminal `columns` wide, `env` over this process's environment."""
    base = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    kw.setdefault("text", True)
    return subprocess.run([*PODIUM, *args], capture_output=True, timeout=timeout,
                          env={**base, "COLUMNS": str(columns), **(env or {})}, **kw)
