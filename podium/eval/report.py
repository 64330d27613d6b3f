"""`podium report DIR...`: systems side by side, as a Markdown table and PNG plots.

Each DIR is an `podium eval --out` folder (meta.json + results.jsonl). The table has one row
per run: its system, task, n (the questions it recorded) and repeats, the accuracy over graded
items (in %, ± one standard error over the repeats where there are two or more: one repeat
has no spread to show), the errors (items a worker or infrastructure failure kept from being
scored), then calls, tokens and cost per item and what the run paid. Calls, tokens and cost
are what each workflow used at list price, cache hits included, so systems compare alike
whatever the cache held; the last column is what the run paid. Where a called model has no
price in the pool file, a cost is the sum of the priced calls, marked `≥` (a lower bound),
and a note names the models without one. Notes under the table say
which runs of one task are not directly comparable (a different n, number of repeats or
split) and which are incomplete; with several tasks a second table puts each system's
accuracy per task side by side, like the paper's Tables 6-8. Two runs of one task under the
same system name are two rows, labelled by folder, and a warning says so.

Plots: accuracy against cost per item (a lower bound marked `≥` where a model has no price;
against tokens when a run has no priced call or every price is 0, and the title says which); how many steps the workflows have; which worker runs each
step position, one panel per run. Each run keeps its colour across plots; legends sit
outside the axes.

Reading never changes a folder (a run may be writing it). A results line that is not a record
(garbage, a bad edit, a field of the wrong type) is left out and reported with its line
number; the rest is reported. A damaged meta.json (or one whose keys have the wrong types) is a
ConfigError naming the file, as is an --out that cannot be written.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from podium.errors import ConfigError
from podium.eval.folder import read_meta
from podium.eval.runner import RECORD_FORMAT, RESULTS, load_results
from podium.eval.summary import Summary, summarize
from podium.outcome import CONDUCTOR

NOT_COMPARABLE = "†"  # marks the runs of a task that differ in n, repeats or split
MAX_PANELS = 12  # worker_usage.png draws at most this many runs


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


def accuracy_cell(s: Summary) -> str:
    """The accuracy in %, ± its standard error over the repeats when there are two or more."""
    if s.accuracy is None:
        return "-"
    if s.repeats < 2 or s.stderr is None:
        return f"{100 * s.accuracy:.2f}"
    return f"{100 * s.accuracy:.2f} ± {100 * s.stderr:.2f}"


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


LOWER_BOUND = "≥"  # marks a cost that sums the priced calls only (a model has no price)


def _cost_cell(total: float | None, known: float | None, fmt: str) -> str:
    """A cost; where a called model has no price, the priced calls' sum marked as a lower
    bound ("≥ 0.00400"), or "-" when nothing priced was called."""
    if total is not None:
        return format(total, fmt)
    return f"{LOWER_BOUND} {known:{fmt}}" if known else "-"


def run_cost(s: Summary) -> tuple[float | None, bool]:
    """The run's cost per item and whether it is a lower bound: the priced calls' sum where a
    called model has no price (None when no priced call cost anything)."""
    if s.cost_per_item is not None:
        return s.cost_per_item, False
    return (s.known_cost_per_item, True) if s.known_cost_per_item else (None, False)


def _unpriced_note(runs: list[dict]) -> list[str]:
    said = []
    for r in runs:
        s: Summary = r["summary"]
        if run_cost(s)[1] or (s.paid_cost is None and s.paid_known_cost):
            names = ["the Conductor" if name == CONDUCTOR else name for name in s.unpriced]
            said.append(f"{r['label']} ({' and '.join(names) or 'a model'} "
                        f"{'have' if len(names) > 1 else 'has'} no price in the pool file)")
    if not said:
        return []
    return [f"{LOWER_BOUND} marks a lower bound, the sum of the calls that have a price: "
            + "; ".join(said) + ". Give every model a price to compare whole costs."]


def _shape(r: dict) -> dict[str, Any]:
    s = r["summary"]
    return {"n": s.items, "repeats": s.repeats, "split": r.get("split")}


def comparability(runs: list[dict]) -> list[str]:
    """Mark (`r["marks"]`) the runs of a task whose n, repeats or split differ from the
    task's other runs (from the shape most of them share; from each other when none is), and
    say how, one note per task."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        r["marks"] = ""
        by_task[r["task"]].append(r)
    notes = []
    for task, group in by_task.items():
        shapes = [_shape(r) for r in group]
        keys = [k for k in shapes[0] if len({str(s[k]) for s in shapes}) > 1]
        if not keys:
            continue

        def said(shape: dict[str, Any], keys: list[str] = keys) -> str:
            return ", ".join(f"{k} {shape[k]}" for k in keys)

        (common, most), *rest = Counter(said(s) for s in shapes).most_common()
        usual = common if most > 1 and most > rest[0][1] else None
        odd = [(r, said(s)) for r, s in zip(group, shapes, strict=True) if said(s) != usual]
        for r, _ in odd:
            r["marks"] = f" {NOT_COMPARABLE}"
        against = f"the other runs of {task} ({usual})" if usual else "one another"
        notes.append(f"{NOT_COMPARABLE} {task}: " + "; ".join(f"{r['label']} has {how}"
                                                              for r, how in odd)
                     + f". These differ from {against}, so their accuracies are not directly "
                     "comparable (other questions, or a mean over another number of "
                     "repeats); rerun with the same --n, --seed, --split and --repeats to "
                     "compare them.")
    return notes


def _incomplete(runs: list[dict]) -> list[str]:
    notes = []
    for r in runs:
        expected = int(r.get("n") or 0) * int(r.get("repeats") or 0)
        if r["summary"].records < expected:
            notes.append(f"{r['label']} ({r['task']}) is incomplete: {r['summary'].records} of "
                         f"{expected} records ({r['n']} questions × {r['repeats']} repeats); "
                         "rerun its `podium eval` command to finish it.")
    return notes


def markdown_table(runs: list[dict]) -> str:
    """One row per run, then the notes that say how to read it; with several tasks, a second
    table of each system's accuracy per task."""
    head = ["system", "task", "n", "repeats", "accuracy (%)", "errors", "calls/item",
            "tokens/item", "cost/item ($)", "paid ($)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = comparability(runs)
    for r in runs:
        s: Summary = r["summary"]
        row = [f"{r['label']}{r['marks']}", r["task"], str(s.items), str(s.repeats),
               accuracy_cell(s), str(s.errors), _f(s.calls_per_item, ".1f"),
               _f(s.tokens_per_item, ".0f"),
               _cost_cell(s.cost_per_item, s.known_cost_per_item, ".5f"),
               _cost_cell(s.paid_cost, s.paid_known_cost, ".4f")]
        lines.append("| " + " | ".join(row) + " |")
    spread = "± is one standard error over a run's repeats"
    if any(r["summary"].repeats == 1 for r in runs):
        spread += "; a run with one repeat shows none (a spread needs 2 or more repeats)"
    lines += ["", f"n: questions recorded; {spread}. Errors are not scored: accuracy is over "
              "the graded items."]
    lines += [f"\n{note}" for note in [*notes, *_unpriced_note(runs), *_incomplete(runs)]]
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    if len(tasks) > 1:
        lines += ["", by_task_table(runs, tasks)]
    return "\n".join(lines) + "\n"


def by_task_table(runs: list[dict], tasks: list[str]) -> str:
    """Each system's accuracy per task and their mean (over the tasks it ran)."""
    cell = {(r["label"], r["task"]): r["summary"] for r in runs}
    lines = ["| system | " + " | ".join(tasks) + " | mean |", "|" + "---|" * (len(tasks) + 2)]
    for system in dict.fromkeys(r["label"] for r in runs):
        sums = [cell.get((system, t)) for t in tasks]
        accs = [s.accuracy for s in sums if s is not None and s.accuracy is not None]
        mean = f"{100 * sum(accs) / len(accs):.2f}" if accs else "-"
        cells = [accuracy_cell(s) if s is not None else "-" for s in sums]
        lines.append(f"| {system} | " + " | ".join(cells) + f" | {mean} |")
    return "\n".join(lines)


def trade_axis(runs: list[dict]) -> tuple[bool, str]:
    """Whether accuracy is drawn against cost (every run has one, a lower bound where a model
    it calls has no price, and some price is not 0), and the plot's title, which says why
    when it is drawn against tokens and which costs are lower bounds."""
    drawn = [r for r in runs if r["summary"].tokens_per_item is not None]
    costs = [run_cost(r["summary"]) for r in drawn]
    unpriced = [r["label"] for r, (cost, _) in zip(drawn, costs, strict=True) if cost is None]
    if drawn and not unpriced and any(cost for cost, _ in costs):
        lower = any(bound for _, bound in costs)
        return True, "Accuracy against cost per item" + (
            f"\n({LOWER_BOUND}: a lower bound, a model the run calls has no price)"
            if lower else "")
    if not drawn:
        why = "no run has a graded item to draw"
    elif not unpriced:
        why = "every price in the pools is 0, so every cost is 0"
    elif len(unpriced) == len(drawn):
        why = "the pools have no prices, so no run has a cost"
    elif len(unpriced) == 1:
        why = f"{unpriced[0]} calls a model with no price, so it has no cost"
    else:
        why = (f"{len(unpriced)} of {len(drawn)} runs call a model with no price, so they "
               "have no cost")
    return False, f"Accuracy against tokens per item\n({why})"


def _plain(text: str, width: int = 44) -> str:
    """A label for a plot: wrapped, with `$` kept from starting mathtext."""
    return textwrap.fill(text, width).replace("$", r"\$")


def _legend_label(r: dict, cost_mark: str = "") -> str:
    s = r["summary"]
    return _plain(f"{r['short']} · {r['task']} · n={s.items} × {s.repeats} "
                  f"repeat{'s' if s.repeats != 1 else ''}{r['marks']}{cost_mark}")


def figures(runs: list[dict]) -> list[tuple[str, Any]]:
    """The three plots as (file name, matplotlib Figure), each answering one question: how
    accuracy trades against cost (or tokens), how long the workflows are, and which worker
    each system puts at each step position. Each run keeps one colour in all three."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    comparability(runs)
    markers = "osD^vP*Xhp"
    for i, r in enumerate(runs):
        r["style"] = {"color": plt.cm.tab10(i % 10), "marker": markers[(i // 10) % 10]}
    return [_trade_plot(plt, runs), _steps_plot(plt, runs), _usage_plot(plt, runs)]


def plots(runs: list[dict], out: Path) -> list[Path]:
    """Write the plots (`figures`) into `out` as PNGs; return their paths."""
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    drawn = figures(runs)
    try:
        for name, fig in drawn:
            fig.savefig(out / name, dpi=120)
    finally:
        for _, fig in drawn:
            plt.close(fig)
    return [out / name for name, _ in drawn]


def _trade_plot(plt: Any, runs: list[dict]) -> tuple[str, Any]:
    use_cost, title = trade_axis(runs)
    fig, ax = plt.subplots(figsize=(8.4, 4.6), layout="constrained")
    for r in runs:
        s = r["summary"]
        cost, lower = run_cost(s)
        x = cost if use_cost else s.tokens_per_item
        if s.accuracy is None or x is None:
            continue
        spread = 100 * s.stderr if s.repeats >= 2 and s.stderr is not None else None
        mark = f" · cost {LOWER_BOUND}" if use_cost and lower else ""
        ax.errorbar(x, 100 * s.accuracy, yerr=spread, fmt=r["style"]["marker"], capsize=3,
                    color=r["style"]["color"], label=_legend_label(r, mark))
    ax.set_xlabel("cost per item (USD, list price)" if use_cost
                  else "tokens per item (every call's)")
    ax.set_ylabel("accuracy over graded items (%)")
    ax.set_ylim(-2, 102)
    ax.margins(x=0.1)
    ax.set_xlim(left=0)
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    ax.grid(alpha=0.3)
    ax.set_title(title.replace("$", r"\$"), fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        fig.legend(loc="outside right upper", fontsize=7, title="run (n = questions)",
                   title_fontsize=7)
    fig.supxlabel("bars: ± 1 standard error over the repeats (none for a run with one repeat)",
                  fontsize=7, color="0.4", x=0.01, ha="left")
    return ("accuracy_vs_cost.png" if use_cost else "accuracy_vs_tokens.png"), fig


def _steps_plot(plt: Any, runs: list[dict]) -> tuple[str, Any]:
    fig, ax = plt.subplots(figsize=(8.4, 4.2), layout="constrained")
    width = min(0.8 / max(len(runs), 1), 0.4)
    lengths: set[int] = set()
    for i, r in enumerate(runs):
        steps = {int(k): v for k, v in r["summary"].steps.items()}
        lengths |= steps.keys()
        total = sum(steps.values()) or 1
        offset = (i - (len(runs) - 1) / 2) * width  # each length's bars centred on its tick
        ax.bar([k + offset for k in steps], [100 * v / total for v in steps.values()],
               width=width, color=r["style"]["color"], label=_legend_label(r))
    ax.set_xticks(sorted(lengths))
    if lengths:
        ax.set_xlim(min(lengths) - 0.6, max(lengths) + 0.6)
    ax.set_xlabel("steps in the workflow")
    ax.set_ylabel("% of the run's graded items")
    ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title("How many steps do the workflows have?", fontsize=10)
    if lengths:
        fig.legend(loc="outside right upper", fontsize=7, title="run", title_fontsize=7)
    return "step_counts.png", fig


def _usage_plot(plt: Any, runs: list[dict]) -> tuple[str, Any]:
    drawn = [r for r in runs if r["summary"].worker_by_position]
    shown = drawn[:MAX_PANELS]
    cols = min(math.ceil(math.sqrt(max(len(shown), 1))), 4)
    rows = math.ceil(max(len(shown), 1) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.8 * cols + 1.6, 2.9 * rows + 0.6),
                             squeeze=False, layout="constrained")
    workers = sorted({w for r in shown for c in r["summary"].worker_by_position.values()
                      for w in c})
    colours = {w: plt.cm.tab10(i % 10) for i, w in enumerate(workers)}
    last = max((int(p) for r in shown for p in r["summary"].worker_by_position), default=0)
    for ax, r in zip(axes.flat, shown, strict=False):
        usage = {int(p): c for p, c in r["summary"].worker_by_position.items()}
        positions = sorted(usage)
        bottom = [0.0] * len(positions)
        for w in workers:
            share = [100 * usage[p].get(w, 0) / (sum(usage[p].values()) or 1)
                     for p in positions]
            ax.bar(positions, share, bottom=bottom, color=colours[w], width=0.7,
                   label=_plain(w) if ax is axes.flat[0] else None)
            bottom = [b + s for b, s in zip(bottom, share, strict=True)]
        ax.set_title(_plain(f"{r['short']} · {r['task']} ({r['summary'].graded} workflows)",
                            34), fontsize=8)
        ax.set_xlim(-0.6, max(last, 2) + 0.6)  # one scale in every panel
        ax.set_xticks(range(last + 1))
        ax.set_xlabel("step position")
        ax.set_ylim(0, 100)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    for row in axes:
        row[0].set_ylabel("% of steps at that position")
    if not shown:
        axes[0][0].text(0.5, 0.5, "no graded workflow to show", ha="center", va="center",
                        transform=axes[0][0].transAxes)
    if workers:
        fig.legend(loc="outside right upper", fontsize=7, title="worker", title_fontsize=7)
    more = f" (the first {len(shown)} of {len(drawn)} runs)" if len(drawn) > len(shown) else ""
    fig.suptitle(f"Which worker runs each step?{more}", fontsize=10)
    return "worker_usage.png", fig


def label_runs(runs: list[dict]) -> list[str]:
    """Give each run its row label: its system, or, where two runs of one task share a
    system name, the system and its folder (`short`, for plots: the folder's name). The
    warnings say which names collided."""
    seen = Counter((r["system"], r["task"]) for r in runs)
    warnings = []
    for (system, task), n in seen.items():
        if n > 1:
            warnings.append(f"{n} runs of {task} are named {system!r}: their rows are labelled "
                            "by folder, not merged")
    for r in runs:
        clash = seen[(r["system"], r["task"])] > 1
        r["label"] = f"{r['system']} [{r['folder']}]" if clash else r["system"]
        r["short"] = f"{r['system']} [{Path(r['folder']).name}]" if clash else r["system"]
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
