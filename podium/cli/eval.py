"""`podium eval` and `podium report`."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from podium.errors import ConfigError


def _check_meta(out: Path, meta: dict) -> None:
    path = out / "meta.json"
    if path.exists():
        old = json.loads(path.read_text("utf-8"))
        for key in ("task", "system", "split", "seed"):
            if old.get(key) != meta.get(key):
                raise ConfigError(
                    f"{out} already holds results for {key} = {old.get(key)!r}, not "
                    f"{meta.get(key)!r}. Use another --out folder, or the same settings to resume."
                )
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta, indent=2), "utf-8")


def summary_table(summary: dict, title: str) -> Table:
    table = Table(title=title, title_justify="left", show_header=False)
    acc = summary["accuracy"]
    se = summary["stderr"]
    rows = [
        ("accuracy", "-" if acc is None else f"{100 * acc:.2f}%"
         + ("" if se is None else f" ± {100 * se:.2f}")),
        ("items / records", f"{summary['items']} / {summary['records']} "
         f"({summary['repeats']} repeats)"),
        ("skipped / errors", f"{summary['skipped']} / {summary['errors'] or 0}"),
        ("calls per item", _f(summary["calls_per_item"], ".2f")),
        ("tokens per item", _f(summary["tokens_per_item"], ".0f")),
        ("cost per item", _f(summary["cost_per_item"], ".6f", "$")),
        ("latency per item", _f(summary["latency_per_item"], ".2f", suffix=" s")),
        ("cache hits", str(summary["cache_hits"])),
        ("parse failures", _f(summary["parse_failure_rate"], ".1%")
         + (f" {summary['parse_failures']}" if summary["parse_failures"] else "")),
        ("steps (count: items)", ", ".join(f"{k}: {v}" for k, v in summary["steps"].items())),
        ("worker selection", ", ".join(f"{k} {v:.0%}"
                                       for k, v in summary["worker_selection"].items())),
    ]
    for k, v in rows:
        table.add_row(k, v)
    return table


def _f(value, fmt: str, prefix: str = "", suffix: str = "") -> str:
    return "-" if value is None else f"{prefix}{value:{fmt}}{suffix}"


async def _run(args: dict, console: Console) -> dict:
    from podium.baselines import build_system
    from podium.config import load_pool
    from podium.eval.runner import EvalConfig, evaluate, read_results
    from podium.eval.summary import summarize
    from podium.pipeline import Pipeline
    from podium.tasks import get_task

    task = get_task(args["task"], **args["task_options"])
    items = task.load(split=args["split"], n=args["n"], seed=args["seed"])
    if not items:
        raise ConfigError(f"Task {args['task']} has no items for split {args['split']!r}.")
    pool = load_pool(args["pool"])
    # A Conductor output that does not parse is a format error in evaluation (scored wrong, its
    # reason counted), not a silent single-worker fallback, unless --fallback asks for one.
    update = {"fallback": args["fallback"]}
    if args["no_cache"]:
        update["cache"] = False
    settings = pool.run.model_copy(update=update)
    out = Path(args["out"])
    _check_meta(out, {"task": task.name, "system": args["system"], "split": args["split"],
                      "seed": args["seed"], "n": len(items), "repeats": args["repeats"],
                      "pool": pool.source, "started": time.strftime("%Y-%m-%d %H:%M:%S")})
    config = EvalConfig(args["repeats"], args["concurrency"], args["retry_errors"],
                        args["traces"])
    stats = {"done": 0, "correct": 0, "graded": 0, "cost": 0.0}
    total = len(items) * args["repeats"]
    try:
        async with Pipeline(pool, settings=settings) as pipe:
            system = build_system(args["system"], pipe)
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                          console=console) as progress:
                bar = progress.add_task(f"{task.name} · {args['system']}", total=total,
                                        status="")

                def on_record(rec: dict) -> None:
                    stats["done"] += 1
                    if rec["status"] != "skipped":
                        stats["graded"] += 1
                        stats["correct"] += bool(rec.get("correct"))
                    stats["cost"] += rec.get("cost") or 0.0
                    acc = stats["correct"] / stats["graded"] if stats["graded"] else 0.0
                    progress.update(bar, advance=1,
                                    status=f"acc {acc:.1%} · ${stats['cost']:.4f}")

                already = len([k for k in read_results(out / "results.jsonl")
                               if k[1] < args["repeats"]])
                progress.update(bar, completed=min(already, total))
                records = await evaluate(task, system, items, out, config, on_record=on_record)
    finally:
        close = getattr(task, "close", None)
        if close:
            close()
    summary = summarize(records)
    (out / "summary.json").write_text(json.dumps(summary, indent=2), "utf-8")
    return summary


def run_eval(**args) -> int:
    console = Console()
    summary = asyncio.run(_run(args, console))
    console.print(summary_table(summary, f"{args['task']} · {args['system']} · {args['out']}"))
    console.print(f"Results: {args['out']}/results.jsonl · summary: {args['out']}/summary.json")
    return 0


def run_report(folders: list[str], out: str) -> int:
    from podium.eval.report import report

    table, pngs = report([Path(f) for f in folders], Path(out))
    console = Console()
    console.print(table, markup=False)
    console.print(f"Wrote {out}/report.md and " + ", ".join(str(p) for p in pngs))
    return 0
