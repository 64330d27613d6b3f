"""`podium eval` and `podium report`.

`podium eval` locks its --out folder for the whole run, refuses to resume it with other
settings, and repairs a damaged results file before it appends (podium.eval.folder,
podium.eval.runner); `podium report` only reads, and reports lines that are not records.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from podium.errors import ConfigError


def _acc(acc: float | None, se: float | None) -> str:
    if acc is None:
        return "-"
    return f"{100 * acc:.2f}%" + ("" if se is None else f" ± {100 * se:.2f}")


def _counts(counts: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def summary_table(summary: dict, title: str) -> Table:
    table = Table(title=title, title_justify="left", show_header=False)
    s = summary
    errors = s["error_classes"]
    parse = "; ".join(f"round {k}: {_counts(v)}" for k, v in s["parse_failures"].items())
    rows = [
        ("accuracy (graded items)", _acc(s["accuracy"], s["stderr"])),
        ("accuracy (all items)", _acc(s["accuracy_all"], s["stderr_all"])
         + (" (errors count as wrong)" if s["errors"] else "")),
        ("items / records", f"{s['items']} / {s['records']} ({s['repeats']} repeats)"),
        ("graded / errors / skipped", f"{s['graded']} / {s['errors']} / {s['skipped']}"),
        *([("errors by class", _counts(errors["by_reason"]))] if s["errors"] else []),
        ("format errors", str(s["format_errors"])),
        ("calls per item", _f(s["calls_per_item"], ".2f")),
        ("tokens per item", _f(s["tokens_per_item"], ".0f")),
        ("cost per item", _f(s["cost_per_item"], ".6f", "$", " (list price)")),
        ("paid by this run", f"{s['paid_calls']} calls · {s['paid_tokens']} tokens · "
         + _f(s["paid_cost"], ".6f", "$") + f" · {s['cache_hits']} cache hits"),
        ("latency per item", _f(s["latency_per_item"], ".2f", suffix=" s")),
        ("parse failures", _f(s["parse_failure_rate"], ".1%") + (f" ({parse})" if parse else "")),
        *([("fallbacks", str(s["fallbacks"]))] if s["fallbacks"] else []),
        *([("recursion (last round)", ", ".join(
            f"{d} {v['count']} (acc {v['accuracy']:.0%})" for d, v in s["recursion"].items()))]
          if s["recursion"] else []),
        ("steps (count: items)", ", ".join(f"{k}: {v}" for k, v in s["steps"].items())),
        ("worker selection", ", ".join(f"{k} {v:.0%}" for k, v in s["worker_selection"].items())),
    ]
    for k, v in rows:
        table.add_row(k, v)
    return table


def _f(value, fmt: str, prefix: str = "", suffix: str = "") -> str:
    return "-" if value is None else f"{prefix}{value:{fmt}}{suffix}"


async def _run(args: dict, console: Console) -> dict:
    from podium.config import load_pool
    from podium.eval.folder import FolderLock, prepare_folder
    from podium.tasks import get_task, preset_for

    preset_split, preset_options = preset_for(args["preset"], args["task"])
    split = args["split"] or preset_split or "test"
    task = get_task(args["task"], **{**preset_options, **args["task_options"]})
    items = task.load(split=split, n=args["n"], seed=args["seed"])
    if not items:
        raise ConfigError(f"Task {args['task']} has no items for split {split!r}.")
    pool = load_pool(args["pool"])
    if args.get("conductor"):
        from podium.checkpoint import with_conductor

        pool = with_conductor(pool, args["conductor"],
                              allow_mismatch=args.get("allow_pool_mismatch", False))
    # A Conductor output that does not parse is a format error in evaluation (scored wrong, its
    # reason counted), not a silent single-worker fallback, unless --fallback asks for one.
    update = {"fallback": args["fallback"]}
    if args["no_cache"]:
        update["cache"] = False
    from podium.baselines import blackbox_pool, parse_blackbox

    if parse_blackbox(args["system"]):  # openai:URL — the endpoint is the only worker
        pool, _ = blackbox_pool(args["system"], pool)
    settings = pool.run.model_copy(update=update)
    from podium.scoring.sandbox import require_isolation

    # model-written code runs only fully isolated, or with --allow-unisolated (then recorded);
    # checked before the --out folder is created, so a refused run leaves nothing behind
    args = {**args, "isolation": require_isolation(
        task, allow_unisolated=args.get("allow_unisolated", False))}
    try:
        out = prepare_folder(Path(args["out"]))
        with FolderLock(out):  # held until the summary is written: a second run is refused
            return await _run_locked(args, console, task, items, pool, settings, split, out,
                                     {**preset_options, **args["task_options"]})
    finally:
        close = getattr(task, "close", None)
        if close:
            close()


async def _run_locked(args: dict, console: Console, task, items: list, pool, settings,
                      split: str, out: Path, task_options: dict) -> dict:
    from podium.baselines import build_system
    from podium.eval.folder import check_meta, fingerprint, local_files
    from podium.eval.runner import (
        RECORD_FORMAT,
        RESULTS,
        EvalConfig,
        evaluate,
        load_results,
        read_results,
        repair_results,
    )
    from podium.eval.summary import summarize
    from podium.pipeline import Pipeline

    err = Console(stderr=True)

    def warn(text: str) -> None:
        err.print(f"[yellow]warning:[/] {escape(text)}", soft_wrap=True)

    path = out / RESULTS
    isolation = args["isolation"]
    meta = {"task": task.name, "system": args["system"], "split": split, "seed": args["seed"],
            "preset": args["preset"], "n": len(items), "conductor": args.get("conductor"),
            "repeats": args["repeats"], "pool": pool.source,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "fingerprint": fingerprint(pool, settings, task_options,
                                       conductor=args.get("conductor"), preset=args["preset"]),
            "isolation": isolation,
            "local_files": local_files([
                args.get("conductor"), pool.conductor.model, *(w.model for w in pool.workers),
                *(args["task"].split(":", 1)[1:] if ":" in args["task"] else [])])}
    # settings are checked before the results file is touched: a refused resume changes nothing
    check_meta(out, meta, records=list(load_results(path).records.values()),
               retry_errors=args["retry_errors"], record_format=RECORD_FORMAT, warn=warn)
    found, kept = repair_results(path)
    for line in found.warnings(path, "it will be rerun"):
        warn(line)
    if kept is not None:
        warn(f"the file as it was is kept at {kept}; {path} now holds its good lines only.")
    config = EvalConfig(args["repeats"], args["concurrency"], args["retry_errors"],
                        args["traces"])
    stats = {"done": 0, "correct": 0, "graded": 0, "errors": 0, "cost": 0.0}
    total = len(items) * args["repeats"]
    async with Pipeline(pool, settings=settings) as pipe:
        system = build_system(args["system"], pipe)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                      console=console) as progress:
            bar = progress.add_task(f"{task.name} · {args['system']}", total=total,
                                    status="")

            def on_record(rec: dict) -> None:
                stats["done"] += 1
                stats["graded"] += rec["status"] == "ok"
                stats["errors"] += rec["status"] == "error"
                stats["correct"] += bool(rec.get("correct"))
                stats["cost"] += (rec.get("paid") or {}).get("cost_usd") or 0.0
                acc = (f"{stats['correct'] / stats['graded']:.1%}" if stats["graded"]
                       else "-")
                errors = f" · {stats['errors']} errors" if stats["errors"] else ""
                progress.update(bar, advance=1, status=f"acc {acc}{errors} · "
                                f"${stats['cost']:.4f} paid")

            already = len([k for k in read_results(out / "results.jsonl")
                           if k[1] < args["repeats"]])
            progress.update(bar, completed=min(already, total))
            records = await evaluate(task, system, items, out, config, on_record=on_record)
    summary = summarize(records)
    (out / "summary.json").write_text(json.dumps(summary, indent=2), "utf-8")
    return summary


def run_eval(**args) -> int:
    console = Console()
    summary = asyncio.run(_run(args, console))
    console.print(summary_table(summary, f"{args['task']} · {args['system']} · {args['out']}"))
    console.print(f"Results: {args['out']}/results.jsonl · summary: {args['out']}/summary.json")
    return _report_errors(Console(stderr=True), summary)


def _report_errors(console: Console, summary: dict) -> int:
    """Say what failed and how to rerun it; 1 when every attempted item failed."""
    if not summary["errors"]:
        return 0
    classes = summary["error_classes"]
    example = classes["example"]
    console.print(
        f"[bold yellow]{summary['errors']} item(s) were not scored[/] "
        f"({_counts(classes['by_reason'])})" + (f", e.g. {escape(example)}" if example else "")
        + ". Fix the cause (an unreachable endpoint, a key, the grader's environment) and rerun "
        "the same command with --retry-errors.", soft_wrap=True)
    return 1 if summary["graded"] == 0 else 0


def run_report(folders: list[str], out: str) -> int:
    from podium.eval.report import report

    table, pngs, warnings = report([Path(f) for f in folders], Path(out))
    err = Console(stderr=True)
    for line in warnings:
        err.print(f"[yellow]warning:[/] {escape(line)}", soft_wrap=True)
    console = Console()
    console.print(table, markup=False)
    console.print(f"Wrote {out}/report.md and " + ", ".join(str(p) for p in pngs))
    return 0
