"""Shared fixtures: the bundled SmolLM2 GGUF and a real llama.cpp OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

# The offline benchmark files of this machine: podium itself takes them only from --data-dir or
# $PODIUM_DATA_DIR (set before `support` reads them, and inherited by every subprocess)
_OFFLINE_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if "PODIUM_DATA_DIR" not in os.environ and _OFFLINE_DATA.is_dir():
    os.environ["PODIUM_DATA_DIR"] = str(_OFFLINE_DATA)
# No test waits on the Hugging Face Hub: it is out of reach here, and a test that needs its
# loading builds a cache of its own (tests/tasks/test_hub.py).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from support import free_port  # noqa: E402

from podium.llm.embedded import bundled_gguf  # noqa: E402

# Under `pytest -n N` (pytest-xdist, as `make test` runs), the files that hold the slowest tests
# go out first, each file to one worker (`--dist loadfile`), so no worker is left with one of
# them at the end while the other waits.
SLOWEST_FIRST = (
    "tests/cli/test_ask.py", "tests/train/test_distributed.py", "tests/train/test_train.py",
    "tests/train/test_overlap.py", "tests/eval/test_eval.py", "tests/integration/test_llama_server.py",
    "tests/serve/test_serve_command.py", "tests/scoring/test_code.py",
    "tests/integration/test_prefill_continuation.py", "tests/hostile/test_checkpoints.py",
    "tests/conductor/test_grammar.py", "tests/serve/test_processes.py",
    "tests/conductor/test_budget.py", "tests/train/test_gym.py", "tests/scoring/test_math.py",
    "tests/train/test_run_folder.py",
)


def pytest_configure(config):
    """Keep the response cache of every test (and of subprocesses) out of the user's home; the
    bundled GGUF's trainable conversion is the one podium keeps there (its `models/` folder,
    made once per machine, each conversion named by the GGUF's hash and complete or absent).
    A pytest-xdist worker gets its own cache and its share of the cores for torch's threads."""
    from podium.train.model import models_dir

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:  # N workers with a thread per core each would fight over the cores
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    shared = Path(os.path.realpath(models_dir()))  # a worker's: the controller's link, resolved
    os.environ["PODIUM_CACHE_DIR"] = cache = tempfile.mkdtemp(prefix="podium-test-cache-")
    try:
        shared.mkdir(parents=True, exist_ok=True)
    except OSError:  # a home that cannot be written: this session converts its own
        return
    os.symlink(shared, os.path.join(cache, "models"))


def pytest_collection_modifyitems(config, items):
    if "PYTEST_XDIST_WORKER" in os.environ:
        rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session")
def gguf_path():
    return bundled_gguf()


@pytest.fixture(scope="session")
def llama_server(gguf_path, tmp_path_factory):
    """`python -m llama_cpp.server` serving SmolLM2 on a free localhost port; yields base URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    # the worker's share of the cores, as the embedded backend takes it: the server's defaults
    # (half the cores for a token, all of them for a prompt) spin against the other worker
    n = os.environ.get("OMP_NUM_THREADS")
    threads = ["--n_threads", n, "--n_threads_batch", n] if n else []
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path),
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096",
             "--model_alias", "smollm2", *threads],
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
