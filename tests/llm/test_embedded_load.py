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
    key = (str(Path(path).resolve()), n_ctx)
    assert key not in embedded._MODELS

    async def go() -> None:
        async with Pipeline(pool) as pipe:
            await pipe.load()
            assert key in embedded._MODELS  # loaded, and no call was made

    asyncio.run(go())
