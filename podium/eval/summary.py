"""Summaries of evaluation records: accuracy ± standard error, usage, workflow statistics.

Accuracy is computed per repeat over the graded items (skipped items are left out and
counted), then averaged; the standard error is the standard deviation of the per-repeat
accuracies over sqrt(repeats) (the paper's mean ± s.e.). With one repeat it is the binomial
standard error sqrt(p(1-p)/n) over items.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Any


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize(records: list[dict]) -> dict[str, Any]:
    graded = [r for r in records if r["status"] in ("ok", "error")]
    by_repeat: dict[int, list[bool]] = defaultdict(list)
    for r in graded:
        by_repeat[r["repeat"]].append(bool(r.get("correct")))
    accs = [sum(v) / len(v) for v in by_repeat.values() if v]
    acc = _mean(accs)
    if len(accs) > 1:
        se = statistics.stdev(accs) / math.sqrt(len(accs))
    elif acc is not None and graded:
        se = math.sqrt(acc * (1 - acc) / len(graded))
    else:
        se = None
    ran = [r for r in records if "calls" in r]
    costs = [r["cost"] for r in ran]
    position_usage: dict[int, Counter] = defaultdict(Counter)
    for r in ran:
        for i, step in enumerate(r.get("workflow") or []):
            position_usage[i][step["name"]] += 1
    selection = Counter(step["name"] for r in ran for step in r.get("workflow") or [])
    total_steps = sum(selection.values())
    return {
        "items": len({r["item"] for r in records}),
        "records": len(records),
        "repeats": len(by_repeat),
        "graded": len(graded),
        "skipped": sum(r["status"] == "skipped" for r in records),
        "errors": dict(Counter(r["reason"].split(":")[0] for r in records
                               if r["status"] == "error")),
        "accuracy": acc,
        "stderr": se,
        "per_repeat_accuracy": accs,
        "calls_per_item": _mean([r["calls"] for r in ran]),
        "tokens_per_item": _mean([r["prompt_tokens"] + r["completion_tokens"] for r in ran]),
        "cost_per_item": (_mean(costs) if costs and all(c is not None for c in costs)
                          else None),
        "latency_per_item": _mean([r["latency_s"] for r in ran]),
        "cache_hits": sum(r.get("cache_hits", 0) for r in ran),
        "parse_failures": dict(Counter(r["parse_reason"] for r in ran if r.get("parse_reason"))),
        "parse_failure_rate": (sum(bool(r.get("parse_reason")) for r in ran) / len(ran)
                               if ran else None),
        "worker_selection": {k: v / total_steps for k, v in selection.most_common()},
        "worker_by_position": {i: dict(c) for i, c in sorted(position_usage.items())},
        "steps": dict(sorted(Counter(len(r.get("workflow") or []) for r in ran).items())),
    }
