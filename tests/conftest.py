"""Shared fixtures: the bundled SmolLM2 GGUF and a real llama.cpp OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
from support import free_port

from podium.llm.embedded import bundled_gguf


def pytest_configure(config):
    """Keep the response cache of every test (and of subprocesses) out of the user's home; the
    bundled GGUF's trainable conversion is the one podium keeps there (its `models/` folder,
    made once per machine, each conversion named by the GGUF's hash and complete or absent)."""
    from podium.train.model import models_dir

    shared = models_dir()
    os.environ["PODIUM_CACHE_DIR"] = cache = tempfile.mkdtemp(prefix="podium-test-cache-")
    try:
        shared.mkdir(parents=True, exist_ok=True)
    except OSError:  # a home that cannot be written: this session converts its own
        return
    os.symlink(shared, os.path.join(cache, "models"))


@pytest.fixture(scope="session")
def gguf_path():
    return bundled_gguf()


@pytest.fixture(scope="session")
def llama_server(gguf_path, tmp_path_factory):
    """`python -m llama_cpp.server` serving SmolLM2 on a free localhost port; yields base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path),
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
             "--model_alias", "smollm2"],
            stdout=fh, stderr=subprocess.STDOUT,
            env={**os.environ, "NO_PROXY": "127.0.0.1,localhost"},
        )
    base = f"http://127.0.0.1:{port}/v1"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 90
    while True:
        if proc.poll() is not None:
            pytest.fail(f"llama_cpp.server exited early:\n{log.read_text()[-3000:]}")
        try:
            with opener.open(f"{base}/models", timeout=2) as resp:
                json.load(resp)
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"llama_cpp.server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
    yield base
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
