"""How often does the Conductor write a valid workflow, with and without a grammar?

Runs the Conductor of a pool (default: the embedded SmolLM2) on a set of varied questions twice,
unconstrained and grammar-constrained, with the same prompt and sampling, and reports the parse
rate, the parse-failure reasons, step counts, tokens and latency side by side.

    python benchmarks/conductor_format.py [--pool FILE] [--n 24] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from podium.conductor import Conductor
from podium.conductor.view import make_view
from podium.config import load_pool
from podium.llm.registry import build_client

QUESTIONS = [
    "What is 17 * 23?",
    "Name the capital of Australia.",
    "Write a Python function that reverses a string.",
    "Is 221 a prime number? Explain.",
    "Summarise the causes of the French Revolution in two sentences.",
    "A train travels 120 km in 1.5 hours. What is its average speed?",
    "Translate 'good morning, friends' into Spanish.",
    "What is the derivative of x^3 * sin(x)?",
    "Give three tips for writing clear emails.",
    "Which is heavier, a kilogram of feathers or a kilogram of iron?",
    "Explain what a hash table is to a ten-year-old.",
    "Solve for x: 3x + 7 = 22.",
    "Write a haiku about autumn rain.",
    "What are the main differences between TCP and UDP?",
    "If a shirt costs $40 after a 20% discount, what was the original price?",
    "List the planets of the solar system in order from the sun.",
    "Find the bug: def add(a, b): return a - b",
    "What year did the first person walk on the moon?",
    "How many ways can 4 books be arranged on a shelf?",
    "Suggest a name for a bakery that sells only bread.",
    "What is the boiling point of water in Fahrenheit?",
    "Convert the binary number 101101 to decimal.",
    "Why is the sky blue?",
    "Plan a three-day workout schedule for a beginner.",
]


async def run_mode(pool, questions, constrained: bool) -> dict:
    client = build_client(pool.conductor)
    conductor = Conductor(client, make_view(pool.workers), pool.run, constrained=constrained)
    rows = []
    for i, q in enumerate(questions):
        t0 = time.perf_counter()
        turn = await conductor.write(q)
        rows.append({
            "question": q,
            "valid": turn.workflow is not None,
            "reason": turn.parse_reason or turn.error and "call_failed",
            "steps": len(turn.workflow) if turn.workflow else 0,
            "completion_tokens": turn.completion_tokens,
            "seconds": time.perf_counter() - t0,
            "completion": turn.completion,
        })
        mark = "ok " if turn.workflow else f"bad ({rows[-1]['reason']})"
        print(f"  [{'constrained' if constrained else 'free'} {i + 1}/{len(questions)}] {mark}",
              file=sys.stderr)
    valid = [r for r in rows if r["valid"]]
    return {
        "constrained": constrained,
        "n": len(rows),
        "valid": len(valid),
        "parse_rate": len(valid) / len(rows),
        "reasons": dict(Counter(r["reason"] for r in rows if not r["valid"])),
        "steps": dict(sorted(Counter(r["steps"] for r in valid).items())),
        "mean_completion_tokens": statistics.mean(r["completion_tokens"] for r in rows),
        "mean_seconds": statistics.mean(r["seconds"] for r in rows),
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", help="pool file whose Conductor to test (default: embedded)")
    ap.add_argument("--n", type=int, default=len(QUESTIONS), help="number of questions")
    ap.add_argument("--out", default="benchmarks/results/conductor_format.json")
    args = ap.parse_args()
    pool = load_pool(args.pool)
    questions = (QUESTIONS * (args.n // len(QUESTIONS) + 1))[: args.n]
    results = [asyncio.run(run_mode(pool, questions, c)) for c in (False, True)]
    print(f"\nConductor: {pool.conductor.name} ({pool.conductor.backend} "
          f"{pool.conductor.model}), T={pool.conductor.temperature}, "
          f"max_tokens={pool.conductor.max_tokens}, {len(pool.workers)} workers, "
          f"{len(questions)} questions\n")
    print(f"{'mode':<14}{'valid':>8}{'rate':>8}{'tokens':>9}{'s/call':>8}  "
          f"{'failures':<34}steps")
    for r in results:
        mode = "constrained" if r["constrained"] else "unconstrained"
        reasons = ", ".join(f"{k} {v}" for k, v in r["reasons"].items()) or "-"
        steps = ", ".join(f"{k}:{v}" for k, v in r["steps"].items()) or "-"
        print(f"{mode:<14}{r['valid']:>5}/{r['n']:<2}{r['parse_rate']:>8.0%}"
              f"{r['mean_completion_tokens']:>9.0f}{r['mean_seconds']:>8.1f}  "
              f"{reasons:<34}{steps}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"conductor": pool.conductor.model_dump(), "results": results},
                              indent=2))
    print(f"\nJSON written to {out}")


if __name__ == "__main__":
    main()
