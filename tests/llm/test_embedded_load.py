"""`Pipeline.load` loads an embedded model before any call (a server does it at startup:
llama.cpp silences the process's stdout and stderr while it loads, which would swallow what
other threads log then)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from podium.config import pool_from_dict
from podium.pipeline import Pipeline

pytest.importorskip("llama_cpp")


def test_load_brings_the_embedded_model_in_before_any_call() -> None:
    from podium.llm import embedded

    try:
        path = embedded.bundled_gguf()
    except Exception:
        pytest.skip("the embedded model is not installed")
    n_ctx = 640  # a size no other test loads: this load is this test's own
    spec = {"name": "smol", "backend": "embedded", "model": "smollm2", "n_ctx": n_ctx,
            "max_tokens": 8}
    pool = pool_from_dict({"conductor": spec, "workers": [spec], "run": {"cache": False}})
    key = (str(Path(path).resolve()), n_ctx, embedded.threads(None))
    assert key not in embedded._MODELS

    async def go() -> None:
        async with Pipeline(pool) as pipe:
            await pipe.load()
            assert key in embedded._MODELS  # loaded, and no call was made

    asyncio.run(go())


def test_an_embedded_model_takes_its_threads_from_the_pool_else_omp_num_threads(monkeypatch):
    """`n_threads` in the pool, else $OMP_NUM_THREADS (the count torch takes), else llama.cpp's
    defaults; a model loaded with other threads is another model in the process's store."""
    from podium.llm import embedded

    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert embedded.threads(None) == 3 and embedded.threads(2) == 2
    for unset in ("", "0", "two"):
        monkeypatch.setenv("OMP_NUM_THREADS", unset)
        assert embedded.threads(None) is None
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert embedded.threads(None) is None
    path = embedded.bundled_gguf()
    one = embedded.ModelStore().get(path, 512, 1)
    assert (one.llm.n_threads, one.llm.n_threads_batch) == (1, 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert embedded.ModelStore().get(path, 512) is one  # the same threads: the same model
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    two = embedded.ModelStore().get(path, 512)
    assert two is not one and (two.llm.n_threads, two.llm.n_threads_batch) == (2, 2)
