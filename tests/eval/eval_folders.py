"""Real evaluation folders for the report tests: small runs of function workers (exact, no
network), in pools with prices, with every price 0, and with no prices."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from podium.eval.run import EvalSpec, run_eval

QUESTIONS = 8


def _pool(price: str | None) -> str:
    priced = f"price = {price}\n" if price else ""
    return (
        '[conductor]\nbackend = "function"\nfunction = "podium.testing.workers:one_step_counted"\n'
        + priced
        + '[[workers]]\nname = "adder"\nbackend = "function"\n'
        'function = "podium.testing.workers:adder"\n' + priced
        + '[[workers]]\nname = "zero"\nbackend = "function"\n'
        'function = "podium.testing.workers:zero"\n' + priced
        + '[run]\nfewshots = "none"\ncache = false\n')


POOLS = {"priced": "{ input = 1.0, output = 2.0, per_call = 0.001 }",
         "zero": "{ input = 0, output = 0 }", "free": None}


def pool_file(root: Path, prices: str) -> Path:
    """The pool file of `prices` (a key of POOLS) in `root`."""
    pool = root / f"{prices}.toml"
    pool.write_text(_pool(POOLS[prices]))
    return pool


def make_runs(root: Path, prices: str, runs: list[tuple[str, int | None, int]]) -> list[Path]:
    """Evaluate each (system, n, repeats) on sums under the `prices` pool (a key of POOLS);
    return the folders."""
    data = root / "sums.jsonl"
    if not data.exists():
        data.write_text("".join(json.dumps({"question": f"What is {i} + {i + 1}?",
                                            "answer": str(2 * i + 1)}) + "\n"
                                for i in range(QUESTIONS)))
    pool = pool_file(root, prices)
    folders = []
    for system, n, repeats in runs:
        out = root / f"{prices}-{system.replace(':', '_')}-{n}x{repeats}"
        asyncio.run(run_eval(EvalSpec(task=f"jsonl:{data}", out=out, pool=str(pool), n=n,
                                      system=system, repeats=repeats,
                                      task_options={"grader": "numeric"})))
        folders.append(out)
    return folders
