"""The gym's specialists, each call made `PODIUM_BENCH_LATENCY_S` seconds slow (default 0), as
an API worker is: benchmarks/train_overlap.py names them in its pool file
(`slow_specialists:<name>`, with benchmarks/ on the import path)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

from podium.train.gym import specialists


def _slow(name: str) -> Callable[[list[dict]], Awaitable[str]]:
    fast = getattr(specialists, name)

    async def call(messages: list[dict]) -> str:
        await asyncio.sleep(float(os.environ.get("PODIUM_BENCH_LATENCY_S", "0")))
        return fast(messages)

    call.__name__ = name
    return call


calculator = _slow("calculator")
reverser = _slow("reverser")
counter = _slow("counter")
calendar = _slow("calendar")
converter = _slow("converter")
