"""`podium eval` and `podium report`: what they print.

`podium eval` is `podium.eval.run.run_eval` (which locks the --out folder, refuses to resume
it with other settings and repairs a damaged results file) with its progress on stderr — a
live bar on a terminal, a plain line at each tenth of the run and at least every
`LINE_EVERY_S` seconds elsewhere (a log file, a pipe, CI) — and a summary table on stdout.
`podium report` only reads, and reports lines that are not records.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from podium.cli.output import console as make_console
from podium.cli.output import safe
from podium.eval.run import EvalSpec, run_eval
from podium.eval.summary import Summary
from podium.outcome import CONDUCTOR

CONDUCTOR_NAME = "the Conductor"  # how `unpriced`'s "conductor" reads in the summary


def _acc(acc: float | None, se: float | None, repeats: int) -> str:
    """The accuracy, ± its standard error over the repeats where there are two or more."""
    if acc is None:
        return "-"
    if repeats < 2 or se is None:
        return f"{100 * acc:.2f}%"
    return f"{100 * acc:.2f}% ± {100 * se:.2f} (s.e. over {repeats} repeats)"


def _counts(counts: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def summary_table(summary: Summary, title: str) -> Table:
    table = Table(title=safe(title), title_justify="left", show_header=False)
    s = summary
    errors = s.error_classes
    parse = "; ".join(f"round {k}: {_counts(v)}" for k, v in s.parse_failures.items())
    rows = [
        ("accuracy (graded items)", _acc(s.accuracy, s.stderr, s.repeats)
         + (" (one repeat: a spread needs --repeats 2 or more)" if s.repeats == 1 else "")),
        ("accuracy (all items)", _acc(s.accuracy_all, s.stderr_all, s.repeats)
         + (" (errors count as wrong)" if s.errors else "")),
        *([("budget", f"${s.budget.amount:g} a question · "
            f"{s.budget.over_budget:.0%} of plans over it · accuracy within it "
            f"{s.budget.accuracy_within_budget:.1%} · a plan's list price "
            f"${s.budget.plan_price:.6f}" + ("" if s.workers_cost_per_item is None else
                                              " · the workers' calls then cost "
                                              f"${s.workers_cost_per_item:.6f}"))]
          if s.budget else []),
        ("items / records", f"{s.items} / {s.records} ({s.repeats} repeat"
         f"{'s' if s.repeats != 1 else ''})"),
        ("graded / errors / skipped", f"{s.graded} / {s.errors} / {s.skipped}"),
        *([("errors by class", _counts(errors.by_reason))] if s.errors else []),
        ("format errors", str(s.format_errors)),
        ("calls per item", _f(s.calls_per_item, ".2f")),
        ("tokens per item", _f(s.tokens_per_item, ".0f")),
        ("cost per item", _cost(s.cost_per_item, s.known_cost_per_item, s.unpriced,
                                "list price")),
        ("paid by this run", f"{s.paid_calls} calls · {s.paid_tokens} tokens · "
         + _cost(s.paid_cost, s.paid_known_cost) + f" · {s.cache_hits} cache hits"),
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


def _cost(total: float | None, known: float | None, unpriced: dict[str, int] | None = None,
          note: str = "") -> str:
    """A cost in USD; where a called model has no price, the priced calls' sum as a lower
    bound, naming the models without one where `unpriced` is given: "at least $0.004000
    (list price; the Conductor has no price in the pool file)"."""
    if total is not None:
        return f"${total:.6f}" + (f" ({note})" if note else "")
    if known is None:  # records written before the known sum was kept
        return "-"
    missing = ""
    if unpriced is not None:
        names = [CONDUCTOR_NAME if name == CONDUCTOR else name for name in unpriced]
        missing = (f"{' and '.join(names) or 'a model'} {'have' if len(names) > 1 else 'has'} "
                   "no price in the pool file")
    said = "; ".join(filter(None, [note, missing]))
    return (f"at least ${known:.6f}" if known else "unknown") + (f" ({said})" if said else "")


LINE_EVERY_S = 20.0  # without a terminal: a progress line at least this often


@dataclass
class Tally:
    """What the records of this run say so far."""

    done: int = 0
    graded: int = 0
    correct: int = 0
    errors: int = 0
    paid: float = 0.0  # the priced calls' sum
    unpriced: bool = False  # a call had no price: `paid` is a lower bound

    def add(self, rec: dict) -> None:
        self.done += 1
        self.graded += rec["status"] == "ok"
        self.errors += rec["status"] == "error"
        self.correct += bool(rec.get("correct"))
        paid = rec.get("paid") or {}
        self.paid += paid.get("known_cost_usd") or 0.0
        self.unpriced = self.unpriced or bool(paid.get("unpriced"))

    def status(self) -> str:
        acc = f"{self.correct / self.graded:.1%}" if self.graded else "-"
        errors = f" · {self.errors} errors" if self.errors else ""
        least = "at least " if self.unpriced else ""
        return f"acc {acc}{errors} · {least}${self.paid:.4f} paid"


class ProgressBar:
    """A terminal's live bar (Rich): items done, accuracy, errors and paid cost so far."""

    def __init__(self, console: Console, label: str, total: int, already: int,
                 tally: Tally) -> None:
        self.tally = tally
        self.progress = Progress(
            TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console)
        self.progress.start()
        self.bar = self.progress.add_task(label, total=total, status="", completed=already)

    def advance(self) -> None:
        self.progress.update(self.bar, advance=1, status=self.tally.status())

    def close(self) -> None:
        self.progress.stop()


class ProgressLines:
    """Progress as plain lines where there is no terminal to redraw a bar (a log file, a pipe,
    CI): one at the start, one at each tenth of the run, one at least every `LINE_EVERY_S`
    seconds while it runs (whether or not an item finished) and one at the end; each with the
    items done of the total, the accuracy so far, the time elapsed and the time left."""

    def __init__(self, console: Console, label: str, total: int, already: int,
                 tally: Tally) -> None:
        self.console, self.label, self.total, self.already = console, label, total, already
        self.tally = tally
        self.started = self.last = time.monotonic()
        self.tenth = self._tenth(already)
        self.print()
        self.ticker = asyncio.get_running_loop().create_task(self._tick())

    def _tenth(self, done: int) -> int:
        return 10 * done // max(self.total, 1)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(max(self.last + LINE_EVERY_S - time.monotonic(), 0.05))
            if time.monotonic() - self.last >= LINE_EVERY_S:
                self.print()

    def advance(self) -> None:
        done = self.already + self.tally.done
        if self._tenth(done) > self.tenth or done == self.total:
            self.tenth = self._tenth(done)
            self.print()

    def close(self) -> None:
        self.ticker.cancel()
        if self.already + self.tally.done < self.total:  # stopped early: say where
            self.print()

    def print(self) -> None:
        self.last = now = time.monotonic()
        done, ran = self.already + self.tally.done, self.tally.done
        elapsed = now - self.started
        if done >= self.total:
            left = "finished"
        elif ran:
            left = f"{_clock(elapsed / ran * (self.total - done))} left"
        else:
            left = "time left unknown until an item finishes"
        line = (f"{self.label}: {done}/{self.total} done ({done / max(self.total, 1):.0%}) · "
                f"{self.tally.status()} · {_clock(elapsed)} elapsed · {left}")
        self.console.print(safe(line), soft_wrap=True, highlight=False)


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds)))


async def _run(spec: EvalSpec, err: Console, labels: list[str]) -> Summary:
    """`run_eval` with its progress on `err`: a live bar on a terminal, plain lines elsewhere.
    The run's label (task, system, and the sample --n drew) goes into `labels`."""

    def warn(text: str) -> None:
        err.print(f"[yellow]warning:[/] {safe(text)}", soft_wrap=True)

    tally = Tally()
    shown: list[ProgressBar | ProgressLines] = []  # from the run's start (after any warning)

    def on_start(label: str, total: int, already: int) -> None:
        labels.append(label)
        view = ProgressBar if err.is_terminal else ProgressLines
        shown.append(view(err, label, total, already, tally))

    def on_record(rec: dict) -> None:
        tally.add(rec)
        for view in shown:
            view.advance()

    try:
        return await run_eval(spec, on_start=on_start, on_record=on_record, warn=warn)
    finally:
        for view in shown:
            view.close()


def eval_command(spec: EvalSpec) -> int:
    """`podium eval`: run `spec`, print its summary table, say what failed."""
    console = make_console()
    labels: list[str] = []
    summary = asyncio.run(_run(spec, make_console(stderr=True), labels))
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
    console.print(safe(table), soft_wrap=True)
    console.print(safe(f"Wrote {out}/report.md and " + ", ".join(str(p) for p in pngs)),
                  soft_wrap=True)
    return 0
