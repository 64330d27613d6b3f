"""Terminal output for `podium ask`: the workflow table, live step progress, answer, totals.

Text a model, a worker or an endpoint wrote (a reply, a subtask, an error, a model name) is
printed through `safe` (inside Rich markup) or `visible` (plain): a control character other
than a newline or a tab is shown escaped (`\\x1b`), never sent to the terminal, and Rich markup
in it (`[bold]`, `[link=…]`) is printed as it is. Consoles come from `console()` (no emoji
codes: `:smile:` in a reply stays text). `json_line` is the `--json` output: strict JSON.
"""

from __future__ import annotations

import re
import sys
import traceback as tb
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.status import Status
from rich.table import Table

from podium.conductor.budget import format_usd
from podium.errors import ConfigError, WorkerError
from podium.files import strict_json
from podium.outcome import CONDUCTOR
from podium.printable import printable

TRUNCATE = 300
# the C1 controls, DEL and the bidirectional overrides and isolates, which json.dumps leaves raw
_RAW_IN_JSON = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: object) -> str:
    """`text` safe to print as it is (`podium.printable`): every control character but
    newline and tab (and a line ending's carriage return) shown escaped, e.g. ESC as `\\x1b`."""
    return printable(str(text).replace("\r\n", "\n"), keep="\n\t")


def safe(text: object) -> str:
    """`text` to put inside Rich markup: `visible`, and its own markup printed literally."""
    return escape(visible(text))


def console(*, stderr: bool = False) -> Console:
    """A console for the CLI's output: emoji codes off (`:x:` in a reply stays text)."""
    return Console(stderr=stderr, emoji=False)


def json_line(data: Any) -> str:
    """`data` as one line of strict JSON (no NaN or Infinity: `podium.files.strict_json`),
    with the C1 controls JSON leaves raw escaped as `\\u0080`: the same value, and nothing a
    terminal acts on."""
    text = strict_json(data, ensure_ascii=False)
    return _RAW_IN_JSON.sub(lambda m: f"\\u{ord(m[0]):04x}", text) + "\n"


def print_traceback() -> None:
    """The exception being handled, for --debug, with its text made `visible`."""
    sys.stderr.write(visible(tb.format_exc()))


def _short(text: str | None, verbose: bool, limit: int = TRUNCATE) -> str:
    text = (text or "").strip()
    if verbose or len(text) <= limit:
        return text
    return text[:limit].rstrip() + f" … [{len(text) - limit} more characters; --verbose shows all]"


def _access(access) -> str:
    if access == "all":
        return "all"
    return "none" if not access else ", ".join(str(i) for i in access)


def workflow_table(turn, worker_names: list[str]) -> Table:
    table = Table(title=f"Workflow (round {turn.round})", title_justify="left", expand=True)
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("worker", no_wrap=True)
    table.add_column("subtask", ratio=1)
    table.add_column("sees steps", no_wrap=True)
    for i, step in enumerate(turn.workflow.steps):
        table.add_row(str(i), f"{step.worker} {safe(worker_names[step.worker])}",
                      safe(step.subtask), _access(step.access))
    return table


class LiveView:
    """Prints a run as it happens. `event` is the pipeline's on_event callback."""

    def __init__(self, console: Console, *, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self.worker_names: list[str] = []
        self.conductor_label = "the Conductor"
        self._status: Status | None = None

    def header(self, pool, chosen: list[int] | None = None) -> None:
        self.worker_names = [w.name for w in pool.workers]
        workers = ", ".join(f"{i} {safe(w.name)}" for i, w in enumerate(pool.workers)
                            if chosen is None or i in chosen)
        conductor = pool.conductor
        what = conductor.model or conductor.function or ""
        self.conductor_label = f"the Conductor ({conductor.backend} {what})".replace(" )", ")")
        self.console.print(f"[bold]Conductor[/] {safe(conductor.name)} ({conductor.backend}) "
                           f"· [bold]workers[/] {workers} · pool {safe(pool.source)}")

    def thinking(self) -> None:
        self._status = self.console.status("The Conductor is writing a workflow…")
        self._status.start()

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def event(self, kind: str, obj) -> None:
        if kind == "conductor":
            self.stop()
            self._conductor(obj)
        elif kind == "started":
            self.console.print(f"  [cyan]▸[/] step {obj.index} · {safe(obj.worker_name)} "
                               "running…")
        elif kind == "finished":
            self._finished(obj)

    def _conductor(self, turn) -> None:
        c = self.console
        label = "Conductor" if turn.round == 0 else f"Conductor, recursion round {turn.round}"
        c.print(f"[bold]{label}[/] ({turn.completion_tokens} tokens, {turn.latency_s:.1f}s"
                f"{', grammar-constrained' if turn.constrained else ''})")
        if self.verbose and turn.completion:
            c.print(Panel(safe(turn.completion.strip()), title="Conductor output",
                          title_align="left"))
        if turn.error:
            c.print(f"[red]The Conductor call failed:[/] {safe(turn.error)}")
            return
        if turn.kept:
            c.print("The Conductor kept the previous answer (three empty lists): no new steps.")
            return
        if turn.parse_reason:
            what = (f"The Conductor's output is not a valid workflow ({turn.parse_reason}: "
                    f"{safe(turn.parse_detail)}).")
            if turn.fallback:
                name = self.worker_names[turn.workflow.steps[0].worker]
                c.print(f"[yellow]{what} Falling back to a single step on worker "
                        f"{turn.workflow.steps[0].worker} ({safe(name)}).[/]")
            else:
                c.print(f"[yellow]{what}[/]")
        if turn.workflow is not None:
            c.print(workflow_table(turn, self.worker_names))

    def _finished(self, rec) -> None:
        if rec.status == "ok":
            self.console.print(f"  [green]✓[/] step {rec.index} · {safe(rec.worker_name)} "
                               f"{rec.latency_s:.1f}s · {rec.completion_tokens} tokens")
        elif rec.status == "error":
            self.console.print(f"  [red]✗[/] step {rec.index} · {safe(rec.worker_name)} failed: "
                               f"{safe(rec.error or '')}")
        else:
            self.console.print(f"  [dim]- step {rec.index} · {safe(rec.worker_name)} skipped "
                               f"({safe(rec.error or '')})[/]")

    def summary(self, result, trace: str | None) -> None:
        c = self.console
        for rnd in result.rounds:
            for rec in rnd.execution.steps if rnd.execution else []:
                body = (safe(_short(rec.response, self.verbose)) if rec.status == "ok"
                        else f"[red]{rec.status}: {safe(rec.error or '')}[/]")
                c.print(Panel(body or "[dim](empty response)[/]",
                              title=f"round {rec.round} · step {rec.index} · "
                                    f"{safe(rec.worker_name)}",
                              title_align="left"))
        if result.answer is not None:
            c.print(Panel(safe(result.answer.strip()) or "[dim](empty)[/]",
                          title="[bold]Answer[/]", title_align="left", border_style="green"))
        out = result.outcome
        for note in out.notes:
            c.print(f"[yellow]{safe(note)}[/]", soft_wrap=True)
        used, paid = out.used, out.paid
        hits = (f" · {out.cache_hits} from the cache (paid {calls(paid.calls)}, "
                f"{short_cost(paid)})" if out.cache_hits else "")
        c.print(f"[bold]Totals[/] {calls(used.calls)} · {used.prompt_tokens} prompt + "
                f"{used.completion_tokens} completion tokens · {result.wall_s:.1f}s wall · "
                f"cost {safe(total_cost(used, self.conductor_label))}{hits}")
        c.print(f"  {safe(usage_split(out))}")
        if out.budget_verdict is not None:
            colour = "yellow" if out.over_budget else "green"
            c.print(f"[{colour}]{safe(out.budget_verdict)}[/]", soft_wrap=True)
        if result.stopped:
            c.print(f"[yellow]Stopped early: {safe(result.stopped)}[/]")
        if trace:
            c.print(f"Trace written to {safe(trace)}")


def calls(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"


def short_cost(usage: Any) -> str:
    """A part's cost: "$0.004", "at least $0.001" (a call without a price), "no price"."""
    if not usage.unpriced:
        return format_usd(usage.known_cost)
    priced = usage.calls - sum(n for _, n in usage.unpriced)
    return f"at least {format_usd(usage.known_cost)}" if priced else "no price"


def total_cost(usage: Any, conductor: str = "the Conductor") -> str:
    """The run's cost, the known parts summed and each model without a price named, e.g.
    "at least $0.004: the Conductor (embedded smollm2) has no price in the pool file"."""
    if not usage.unpriced:
        return format_usd(usage.known_cost)
    names = [conductor if name == CONDUCTOR else f"{name} ({calls(n)})"
             for name, n in usage.unpriced]
    have = "has" if len(names) == 1 else "have"
    missing = f"{' and '.join(names)} {have} no price in the pool file"
    if usage.calls == sum(n for _, n in usage.unpriced):
        return f"unknown: {missing}"
    return f"at least {format_usd(usage.known_cost)}: {missing}"


def usage_split(outcome: Any) -> str:
    """Where the tokens and the cost went: the Conductor's own calls and the workers' (the
    trace viewer shows the same split, from the trace's `used_by`)."""
    c, w = outcome.conductor, outcome.workers_used
    return (f"Conductor {calls(c.calls)} · {c.total_tokens} tokens · {short_cost(c)}; "
            f"workers {calls(w.calls)} · {w.total_tokens} tokens · {short_cost(w)}")


def error(console: Console, exc: BaseException, *, unexpected: bool = False) -> None:
    if isinstance(exc, ConfigError):
        head = "Configuration error"
    elif isinstance(exc, WorkerError):
        head = "Model call failed"
    elif unexpected:
        head = f"Unexpected error ({type(exc).__name__}); rerun with --debug for the traceback"
    else:
        head = "Error"
    console.print(f"[bold red]{head}:[/] {safe(str(exc))}", soft_wrap=True)


def no_answer(console: Console, result) -> None:
    cause = result.outcome.cause
    why = cause.sentence() if cause else "the workflow produced no answer"
    fix = {
        "worker": "Check that every endpoint in the pool file is reachable and its key is set "
                  "(podium pool check).",
        "infra": "This is a podium or environment failure; rerun with --debug and report it.",
    }.get(cause.cls if cause else "", "Try again, or look at the workflow with --verbose.")
    console.print(f"[bold red]No answer:[/] {safe(why)}. {fix}", soft_wrap=True)


def tasks_table() -> Table:
    """Every task `podium eval --task` takes, with its options and their defaults."""
    import inspect

    from podium.tasks import TASKS, task_options
    from podium.tasks.generic import GenericTask

    def shown(options: dict) -> str:
        parts = []
        for key, default in options.items():
            if default is inspect.Parameter.empty:
                parts.append(f"{key} (required)")
            else:
                parts.append(f"{key}={default!r}")
        return ", ".join(parts) or "-"

    table = Table(title="Tasks (set an option with --task-option KEY=VALUE)",
                  title_justify="left")
    table.add_column("task")
    table.add_column("options (default)", overflow="fold")
    for name in TASKS:
        table.add_row(name, safe(shown(task_options(name))))
    generic = {p.name: p.default for p in inspect.signature(GenericTask).parameters.values()
               if p.name != "path"}
    table.add_row("jsonl:FILE, json:FILE, csv:FILE", safe(shown(generic)))
    return table
