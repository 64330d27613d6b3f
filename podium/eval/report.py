"""`podium report DIR...`: systems side by side, as a Markdown table and PNG plots.

Each DIR is an `podium eval --out` folder (meta.json + results.jsonl). The table has one row
per system (two runs of one task under the same system name are two rows, labelled by folder,
and a warning says so) and one column per task (accuracy ± s.e. over graded items, in %, with the number of
errors — items a worker or infrastructure failure kept from being scored — when there are
any), then calls, tokens and cost per item averaged over the tasks, like the paper's Tables 6-8.
Calls, tokens and cost are what each workflow used at list price, cache hits included, so
systems compare alike whatever the cache held; the last column is what the runs paid. Plots:
accuracy against cost (or tokens, when prices are unknown or all zero) per item; the workflow
step-count histogram; worker usage by step position, one panel per run.

Reading never changes a folder (a run may be writing it). A results line that is not a record
(garbage, a bad edit, a field of the wrong type) is left out and reported with its line
number; the rest is reported. A damaged meta.json (or one whose keys have the wrong types) is a
ConfigError naming the file, as is an --out that cannot be written.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from podium.errors import ConfigError
from podium.eval.folder import read_meta
from podium.eval.runner import RECORD_FORMAT, RESULTS, load_results
from podium.eval.summary import Summary, summarize


def load_run(folder: Path) -> dict[str, Any]:
    meta_path, results = folder / "meta.json", folder / RESULTS
    if not meta_path.is_file() or not results.is_file():
        raise ConfigError(f"{folder} is not an evaluation folder (it needs meta.json and "
                          f"{RESULTS}); pass folders written by `podium eval --out`.")
    meta = read_meta(folder, purpose="It names the task and system of the run; restore it, or "
                     "rerun `podium eval` with the run's settings into a new --out folder.")
    if meta is None or meta.get("format") != RECORD_FORMAT:
        raise ConfigError(f"{folder} was written by an older podium; rerun `podium eval` into "
                          "a new --out folder to report it.")
    found = load_results(results)
    then = ("skipped here; rerun `podium eval` with the same settings into this folder to run "
            "that item again")
    return {"folder": str(folder), **meta, "summary": summarize(list(found.records.values())),
            "warnings": found.warnings(results, then)}


def _fmt_acc(s: Summary) -> str:
    errors = f" ({s.errors} errors)" if s.errors else ""
    if s.accuracy is None:
        return "-" + errors
    se = f" ± {100 * s.stderr:.2f}" if s.stderr is not None else ""
    return f"{100 * s.accuracy:.2f}{se}{errors}"


def _avg(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals and len(vals) == len(values) else None


def markdown_table(runs: list[dict]) -> str:
    tasks = sorted({r["task"] for r in runs})
    systems = list(dict.fromkeys(r["label"] for r in runs))
    cell = {(r["label"], r["task"]): r["summary"] for r in runs}
    head = ["system", *tasks, "avg", "calls/item", "tokens/item", "cost/item ($)", "paid ($)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for system in systems:
        sums = [cell.get((system, t)) for t in tasks]
        accs = [s.accuracy for s in sums if s and s.accuracy is not None]
        avg = f"{100 * sum(accs) / len(accs):.2f}" if accs else "-"
        present = [s for s in sums if s]
        calls = _avg([s.calls_per_item for s in present])
        tokens = _avg([s.tokens_per_item for s in present])
        cost = _avg([s.cost_per_item for s in present])
        paid = [s.paid_cost for s in present]
        row = [system, *[_fmt_acc(s) if s else "-" for s in sums], avg,
               f"{calls:.1f}" if calls is not None else "-",
               f"{tokens:.0f}" if tokens is not None else "-",
               f"{cost:.5f}" if cost is not None else "-",
               f"{sum(paid):.4f}" if None not in paid else "-"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def plots(runs: list[dict], out: Path) -> list[Path]:
    """Three plots, each answering one question: how accuracy trades against cost (or tokens,
    when the pool has no prices), how long the workflows are, and which worker each system
    puts at each step position."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out.mkdir(parents=True, exist_ok=True)
    written = []
    costs = [r["summary"].cost_per_item for r in runs]
    use_cost = all(c is not None for c in costs) and any(c > 0 for c in costs)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in runs:
        s = r["summary"]
        x = s.cost_per_item if use_cost else s.tokens_per_item
        if s.accuracy is None or x is None:
            continue
        ax.errorbar(x, 100 * s.accuracy, yerr=100 * (s.stderr or 0), fmt="o", capsize=3)
        ax.annotate(f"{r['label']} ({r['task']}, n={s.graded})", (x, 100 * s.accuracy),
                    fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("cost per item (USD, list price)" if use_cost
                  else "tokens per item (every call's)")
    ax.set_ylabel("accuracy over graded items (%)")
    ax.set_ylim(-2, 102)
    ax.set_xlim(left=0)
    ax.set_title("Accuracy against " + ("cost" if use_cost else "tokens (the pool has no "
                                                                "prices)"), fontsize=10)
    ax.text(0.99, 0.01, "bars: ± 1 standard error over the repeats; n = graded records",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout()
    written.append(out / ("accuracy_vs_cost.png" if use_cost else "accuracy_vs_tokens.png"))
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    width = 0.8 / max(len(runs), 1)
    for i, r in enumerate(runs):
        steps = {int(k): v for k, v in r["summary"].steps.items()}
        total = sum(steps.values()) or 1
        ax.bar([k + i * width for k in steps], [100 * v / total for v in steps.values()],
               width=width, label=f"{r['label']} ({r['task']})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("steps in the workflow")
    ax.set_ylabel("% of graded items")
    ax.set_title("How long are the workflows?", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    written.append(out / "step_counts.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)

    shown = [r for r in runs if r["summary"].worker_by_position][:6]
    fig, axes = plt.subplots(1, max(len(shown), 1), figsize=(3.4 * max(len(shown), 1), 4.2),
                             squeeze=False)
    workers = sorted({w for r in shown for c in r["summary"].worker_by_position.values()
                      for w in c})
    colours = {w: plt.cm.tab10(i % 10) for i, w in enumerate(workers)}
    for ax, r in zip(axes[0], shown, strict=False):
        usage = {int(p): c for p, c in r["summary"].worker_by_position.items()}
        positions = sorted(usage)
        bottom = [0.0] * len(positions)
        for w in workers:
            share = [100 * usage[p].get(w, 0) / (sum(usage[p].values()) or 1)
                     for p in positions]
            ax.bar([str(p) for p in positions], share, bottom=bottom, label=w,
                   color=colours[w])
            bottom = [b + s for b, s in zip(bottom, share, strict=True)]
        ax.set_title(f"{r['label']} ({r['task']})", fontsize=8)
        ax.set_xlabel("step position")
    axes[0][0].set_ylabel("% of steps at that position")
    if workers:
        axes[0][-1].legend(fontsize=7)
    fig.suptitle("Which worker runs each step?", fontsize=10)
    fig.tight_layout()
    written.append(out / "worker_usage.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written


def label_runs(runs: list[dict]) -> list[str]:
    """Give each run its row label: its system, or, where two runs of one task share a
    system name, the system and its folder. The warnings say which names collided."""
    seen = Counter((r["system"], r["task"]) for r in runs)
    warnings = []
    for (system, task), n in seen.items():
        if n > 1:
            warnings.append(f"{n} runs of {task} are named {system!r}: their rows are labelled "
                            "by folder, not merged")
    for r in runs:
        clash = seen[(r["system"], r["task"])] > 1
        r["label"] = f"{r['system']} [{r['folder']}]" if clash else r["system"]
    return warnings


def report(folders: list[Path], out: Path) -> tuple[str, list[Path], list[str]]:
    """Write report.md and the plots; return the table, the plots and warnings (lines of a
    results file that are not records: left out, the rest is reported)."""
    runs = [load_run(f) for f in folders]
    collided = label_runs(runs)
    table = markdown_table(runs)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.md").write_text("# podium report\n\n" + table, "utf-8")
        pngs = plots(runs, out)
    except OSError as exc:  # --out is a file, under one, or on a full disk
        raise ConfigError(f"--out {out} cannot be written ({exc.strerror or exc}); pass --out "
                          "a folder you can write. The evaluation folders are unchanged.") \
            from None
    return table, pngs, [*collided, *(w for r in runs for w in r["warnings"])]
