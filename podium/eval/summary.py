"""Summaries of evaluation records: accuracy ± standard error, errors apart, usage, workflows.

Every number is read from the records' outcomes (`podium.outcome`); nothing is recomputed.

* **Accuracy** is shown twice: over the graded items (`status == "ok"`; a format error is
  graded and scores 0) and over every attempted item (errors count as wrong). Errors — a worker
  or infrastructure failure decided the item — are counted apart, by class and reason. Skipped
  items are in neither. Each accuracy is computed per repeat, then averaged; the standard error
  is the standard deviation of the per-repeat accuracies over sqrt(repeats) (the paper's
  mean ± s.e.); with one repeat it is the binomial sqrt(p(1-p)/n) over items.
* **Usage** per item is what the workflow used — every call, cache hits included, at list
  price — averaged over graded items: systems are compared on it whatever the cache held
  (the paper's Tables 5-6). What this run paid (cache hits free) is summed over every record.
  A cost is None when a called model has no price in the pool file; the known parts still add
  up (`known_cost_per_item`, `paid_known_cost`: lower bounds then), the workers' part has its
  own figure (`workers_cost_per_item`), and `unpriced` counts the calls of each model without
  a price (the Conductor's as `conductor`).
* **Recursion**: the last round's decision (kept, revised, format_error, failed) with the
  accuracy of each; parse failures are counted for every round.

`summarize(records)` returns a `Summary`; `Summary.to_json()` is what `summary.json` holds.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ErrorClasses:
    """The errors (items a failure decided) by class and by "class: reason", with one detail
    as an example."""

    by_class: dict[str, int]
    by_reason: dict[str, int]
    example: str | None


@dataclass(frozen=True)
class Decision:
    """How many items' last recursion round made one decision, and their accuracy."""

    count: int
    accuracy: float


@dataclass(frozen=True)
class BudgetSummary:
    """A budgeted run (`--budget`): the share of graded plans over it, the accuracy counting
    those as wrong, and the mean list price of a plan (USD)."""

    amount: float
    over_budget: float
    accuracy_within_budget: float
    plan_price: float


@dataclass(frozen=True)
class Summary:
    """One evaluation's figures (the module docstring says how each is computed). A figure
    with nothing to average over is None."""

    items: int
    records: int
    repeats: int
    graded: int  # status "ok": a format error is graded (and wrong)
    skipped: int
    errors: int  # a worker or infrastructure failure decided the item
    error_classes: ErrorClasses
    accuracy: float | None  # over graded items, mean of the repeats
    stderr: float | None
    accuracy_all: float | None  # over graded items and errors (errors count as wrong)
    stderr_all: float | None
    per_repeat_accuracy: list[float]
    format_errors: int
    calls_per_item: float | None  # what the workflow used, cache hits included
    tokens_per_item: float | None
    cost_per_item: float | None  # USD at list price; None when a called model has no price
    paid_calls: int  # what this run paid: cache hits free
    paid_tokens: int
    paid_cost: float | None
    cache_hits: int
    latency_per_item: float | None
    parse_failures: dict[int, dict[str, int]]  # round -> parse reason -> count
    parse_failure_rate: float | None
    fallbacks: int
    recursion: dict[str, Decision]  # the last round's decision -> count, accuracy
    worker_selection: dict[str, float]  # worker -> share of all steps
    worker_by_position: dict[int, dict[str, int]]  # step position -> worker -> steps
    steps: dict[int, int]  # workflow length -> items
    budget: BudgetSummary | None = None  # with --budget
    known_cost_per_item: float | None = None  # the priced calls only: cost_per_item or less
    workers_cost_per_item: float | None = None  # the workers' calls (None: one has no price)
    paid_known_cost: float | None = None  # the priced calls this run paid for
    unpriced: dict[str, int] = dataclasses.field(default_factory=dict)  # model -> calls

    def to_json(self) -> dict[str, Any]:
        """The summary as `summary.json` holds it."""
        return dataclasses.asdict(self)


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def accuracy(records: list[dict]) -> tuple[float | None, float | None, list[float]]:
    """(mean accuracy over repeats, its standard error, the per-repeat accuracies)."""
    by_repeat: dict[int, list[bool]] = defaultdict(list)
    for r in records:
        by_repeat[r["repeat"]].append(bool(r.get("correct")))
    accs = [sum(v) / len(v) for _, v in sorted(by_repeat.items()) if v]
    acc = _mean(accs)
    if len(accs) > 1:
        se = statistics.stdev(accs) / math.sqrt(len(accs))
    elif acc is not None:
        se = math.sqrt(acc * (1 - acc) / len(records))
    else:
        se = None
    return acc, se, accs


def _usd(value: Any) -> float | None:
    """A cost read from a record: a number, or None (unknown, or not a number)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def _usage(records: list[dict], key: str) -> dict[str, Any]:
    usages = [r[key] for r in records if key in r]
    costs = [u["cost_usd"] for u in usages]
    # a record written before `known_cost_usd` has only `cost_usd`
    known = [_usd(u.get("known_cost_usd", u["cost_usd"])) for u in usages]
    unpriced: Counter = Counter()
    for u in usages:
        calls = u.get("unpriced")
        if isinstance(calls, dict):
            unpriced.update({k: n for k, n in calls.items() if isinstance(n, int)})
    return {
        "calls": [u["calls"] for u in usages],
        "tokens": [u["total_tokens"] for u in usages],
        "cost": None if not costs or any(c is None for c in costs) else costs,
        "known": None if not known or any(c is None for c in known) else known,
        "unpriced": dict(unpriced),
    }


def _workers_costs(records: list[dict]) -> list[float] | None:
    """The workers' cost of each record (`used_by`); None when one is unknown."""
    costs = [_usd(((r.get("used_by") or {}).get("workers") or {}).get("cost_usd"))
             for r in records]
    known = [c for c in costs if c is not None]
    return known if costs and len(known) == len(costs) else None


def _errors(errors: list[dict]) -> ErrorClasses:
    causes = [r.get("cause") or {"class": "infra", "reason": r.get("reason", "")}
              for r in errors]
    return ErrorClasses(
        by_class=dict(Counter(c["class"] for c in causes)),
        by_reason=dict(Counter(f"{c['class']}: {c['reason']}" for c in causes)),
        example=next((c.get("detail") for c in causes if c.get("detail")), None),
    )


def _recursion(records: list[dict]) -> dict[str, Decision]:
    decided = defaultdict(list)
    for r in records:
        rounds = r.get("rounds") or []
        if len(rounds) > 1:
            decided[rounds[-1]["decision"]].append(bool(r.get("correct")))
    return {d: Decision(len(v), sum(v) / len(v)) for d, v in sorted(decided.items())}


def _parse_failures(records: list[dict]) -> tuple[dict[int, dict[str, int]], float | None]:
    by_round: dict[int, Counter] = defaultdict(Counter)
    failed = 0
    with_rounds = [r for r in records if r.get("rounds")]
    for r in with_rounds:
        reasons = [(rnd["round"], rnd["parse_reason"]) for rnd in r["rounds"]
                   if rnd.get("parse_reason")]
        failed += bool(reasons)
        for k, reason in reasons:
            by_round[k][reason] += 1
    rate = failed / len(with_rounds) if with_rounds else None
    return {k: dict(c) for k, c in sorted(by_round.items())}, rate


def summarize(records: list[dict]) -> Summary:
    graded = [r for r in records if r["status"] == "ok"]
    errors = [r for r in records if r["status"] == "error"]
    acc, se, accs = accuracy(graded)
    acc_all, se_all, _ = accuracy(graded + errors)
    used = _usage(graded, "used")
    paid = _usage(records, "paid")
    parse_by_round, parse_rate = _parse_failures(graded + errors)
    position_usage: dict[int, Counter] = defaultdict(Counter)
    for r in graded:
        for i, step in enumerate(r.get("workflow") or []):
            position_usage[i][step["name"]] += 1
    selection = Counter(step["name"] for r in graded for step in r.get("workflow") or [])
    total_steps = sum(selection.values())
    return Summary(
        items=len({r["item"] for r in records}),
        records=len(records),
        repeats=len({r["repeat"] for r in records}),
        graded=len(graded),
        skipped=sum(r["status"] == "skipped" for r in records),
        errors=len(errors),
        error_classes=_errors(errors),
        accuracy=acc,
        stderr=se,
        accuracy_all=acc_all,
        stderr_all=se_all,
        per_repeat_accuracy=accs,
        format_errors=sum(str(r.get("reason", "")).startswith("parse:") for r in graded),
        calls_per_item=_mean(used["calls"]),
        tokens_per_item=_mean(used["tokens"]),
        cost_per_item=_mean(used["cost"]) if used["cost"] is not None else None,
        paid_calls=sum(paid["calls"]),
        paid_tokens=sum(paid["tokens"]),
        paid_cost=sum(paid["cost"]) if paid["cost"] is not None else None,
        cache_hits=sum(r.get("cache_hits", 0) for r in records),
        latency_per_item=_mean([r["latency_s"] for r in graded if "latency_s" in r]),
        parse_failures=parse_by_round,
        parse_failure_rate=parse_rate,
        fallbacks=sum(bool(r.get("fallback")) for r in graded),
        recursion=_recursion(graded),
        worker_selection={k: v / total_steps for k, v in selection.most_common()},
        worker_by_position={i: dict(c) for i, c in sorted(position_usage.items())},
        steps=dict(sorted(Counter(len(r.get("workflow") or []) for r in graded).items())),
        budget=_budget(graded),
        known_cost_per_item=_mean(used["known"]) if used["known"] is not None else None,
        workers_cost_per_item=_mean(workers) if (workers := _workers_costs(graded)) else None,
        paid_known_cost=sum(paid["known"]) if paid["known"] is not None else None,
        unpriced=used["unpriced"],
    )


def _budget(graded: list[dict]) -> BudgetSummary | None:
    checks = [(r, r["budget"]) for r in graded if r.get("budget")]
    if not checks:
        return None
    return BudgetSummary(
        amount=checks[0][1]["amount"],
        over_budget=statistics.fmean(c["over"] for _, c in checks),
        accuracy_within_budget=statistics.fmean(bool(r.get("correct")) and not c["over"]
                                                for r, c in checks),
        plan_price=statistics.fmean(c["plan_price"] for _, c in checks))
