"""`podium eval` and `podium report`: what they print.

`podium eval` is `podium.eval.run.run_eval` (which locks the --out folder, refuses to resume
it with other settings and repairs a damaged results file) with a progress bar and a summary
table; `podium report` only reads, and reports lines that are not records.
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from podium.cli.output import console as make_console
from podium.cli.output import safe
from podium.eval.run import EvalSpec, run_eval
from podium.eval.summary import Summary


def _acc(acc: float | None, se: float | None) -> str:
    if acc is None:
        return "-"
    return f"{100 * acc:.2f}%" + ("" if se is None else f" ± {100 * se:.2f}")


def _counts(counts: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def summary_table(summary: Summary, title: str) -> Table:
    table = Table(title=safe(title), title_justify="left", show_header=False)
    s = summary
    errors = s.error_classes
    parse = "; ".join(f"round {k}: {_counts(v)}" for k, v in s.parse_failures.items())
    rows = [
        ("accuracy (graded items)", _acc(s.accuracy, s.stderr)),
        ("accuracy (all items)", _acc(s.accuracy_all, s.stderr_all)
         + (" (errors count as wrong)" if s.errors else "")),
        *([("budget", f"${s.budget.amount:g} a question · "
            f"{s.budget.over_budget:.0%} of plans over it · accuracy within it "
            f"{s.budget.accuracy_within_budget:.1%} · a plan's list price "
            f"${s.budget.plan_price:.6f}")] if s.budget else []),
        ("items / records", f"{s.items} / {s.records} ({s.repeats} repeats)"),
        ("graded / errors / skipped", f"{s.graded} / {s.errors} / {s.skipped}"),
        *([("errors by class", _counts(errors.by_reason))] if s.errors else []),
        ("format errors", str(s.format_errors)),
        ("calls per item", _f(s.calls_per_item, ".2f")),
        ("tokens per item", _f(s.tokens_per_item, ".0f")),
        ("cost per item", _f(s.cost_per_item, ".6f", "$", " (list price)")),
        ("paid by this run", f"{s.paid_calls} calls · {s.paid_tokens} tokens · "
         + _f(s.paid_cost, ".6f", "$") + f" · {s.cache_hits} cache hits"),
        ("latency per item", _f(s.latency_per_item, ".2f", suffix=" s")),
        ("parse failures", _f(s.parse_failure_rate, ".1%") + (f" ({parse})" if parse else "")),
        *([("fallbacks", str(s.fallbacks))] if s.fallbacks else []),
        *([("recursion (last round)", ", ".join(
            f"{d} {v.count} (acc {v.accuracy:.0%})" for d, v in s.recursion.items()))]
          if s.recursion else []),
        ("steps (count: items)", ", ".join(f"{k}: {v}" for k, v in s.steps.items())),
        ("worker selection", ", ".join(f"{k} {v:.0%}" for k, v in s.worker_selection.items())),
    ]
    for k, v in rows:
        table.add_row(k, safe(v))  # names and reasons come from the pool and the records
    return table


def _f(value, fmt: str, prefix: str = "", suffix: str = "") -> str:
    return "-" if value is None else f"{prefix}{value:{fmt}}{suffix}"


async def _run(spec: EvalSpec, console: Console, labels: list[str]) -> Summary:
    """`run_eval` with a progress bar: accuracy, errors and paid cost so far. The run's label
    (task, system, and the sample --n drew) goes into `labels`."""
    err = make_console(stderr=True)

    def warn(text: str) -> None:
        err.print(f"[yellow]warning:[/] {safe(text)}", soft_wrap=True)

    stats = {"done": 0, "correct": 0, "graded": 0, "errors": 0, "cost": 0.0}
    with ExitStack() as stack:  # the bar starts once the run does (after any warning)
        shown: list = []

        def on_start(label: str, total: int, already: int) -> None:
            labels.append(label)
            progress = stack.enter_context(Progress(
                TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console))
            shown[:] = [progress, progress.add_task(label, total=total, status="",
                                                    completed=already)]

        def on_record(rec: dict) -> None:
            stats["done"] += 1
            stats["graded"] += rec["status"] == "ok"
            stats["errors"] += rec["status"] == "error"
            stats["correct"] += bool(rec.get("correct"))
            stats["cost"] += (rec.get("paid") or {}).get("cost_usd") or 0.0
            acc = f"{stats['correct'] / stats['graded']:.1%}" if stats["graded"] else "-"
            errors = f" · {stats['errors']} errors" if stats["errors"] else ""
            if shown:
                shown[0].update(shown[1], advance=1,
                                status=f"acc {acc}{errors} · ${stats['cost']:.4f} paid")

        return await run_eval(spec, on_start=on_start, on_record=on_record, warn=warn)


def eval_command(spec: EvalSpec) -> int:
    """`podium eval`: run `spec`, print its summary table, say what failed."""
    console = make_console()
    labels: list[str] = []
    summary = asyncio.run(_run(spec, console, labels))
    title = labels[0] if labels else f"{spec.task} · {spec.system}"
    console.print(summary_table(summary, f"{title} · {spec.out}"))
    console.print(safe(f"Results: {spec.out}/results.jsonl · summary: {spec.out}/summary.json"))
    return _report_errors(make_console(stderr=True), summary)


def _report_errors(console: Console, summary: Summary) -> int:
    """Say what failed and how to rerun it; 1 when every attempted item failed."""
    if not summary.errors:
        return 0
    classes = summary.error_classes
    example = classes.example
    console.print(
        f"[bold yellow]{summary.errors} item(s) were not scored[/] "
        f"({safe(_counts(classes.by_reason))})" + (f", e.g. {safe(example)}" if example else "")
        + ". Fix the cause (an unreachable endpoint, a key, the grader's environment) and rerun "
        "the same command with --retry-errors.", soft_wrap=True)
    return 1 if summary.graded == 0 else 0


def run_report(folders: list[str], out: str) -> int:
    from podium.eval.report import report

    table, pngs, warnings = report([Path(f) for f in folders], Path(out))
    err = make_console(stderr=True)
    for line in warnings:
        err.print(f"[yellow]warning:[/] {safe(line)}", soft_wrap=True)
    console = make_console()
    console.print(safe(table))
    console.print(safe(f"Wrote {out}/report.md and " + ", ".join(str(p) for p in pngs)))
    return 0
