"""Fixtures: a real podium server (uvicorn on a free localhost port, in a thread) serving a pool
of exact function workers (instant `adder`, `zero`, one-second `slow`, unreachable `down`),
and a capture of every log record it writes."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from serve_helpers import KEY, OTHER_KEY, POOL, Records, ThreadServer


@pytest.fixture(scope="session")
def pool_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("serve-pool") / "pool.toml"
    path.write_text(POOL)
    return path


@pytest.fixture(scope="session")
def logs():
    handler = Records()
    loggers = [logging.getLogger(n) for n in ("", "uvicorn", "uvicorn.error", "uvicorn.access",
                                                "podium", "podium.serve", "fastapi")]
    old = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    yield handler
    for lg, level in zip(loggers, old, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)


@pytest.fixture(scope="session")
def server(pool_file, tmp_path_factory, logs):
    traces = tmp_path_factory.mktemp("serve-traces") / "traces"
    with ThreadServer(pool_file, traces, keys=(KEY, OTHER_KEY), max_concurrency=8,
                      max_request_bytes=64_000) as srv:
        yield srv


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.base, timeout=30, trust_env=False) as client:
        yield client

