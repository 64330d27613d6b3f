"""A training run's learning curve: `learning_curve.png` in the run folder, drawn from its
metrics.jsonl at the end of `podium train`; `podium train plot RUN [RUN ...]` draws it again,
several runs on one figure (each a line, labelled by its folder).

Five panels over the optimizer steps: the mean reward, the share of rollouts answered right,
held-out accuracy (when the recipe has a [heldout] section), the share of valid workflows, and
the tokens a plan used (every call's, the Conductor's and the workers'). Every panel spans
the same whole steps, from 0 to the last step logged: a metric logged at step 0 (the policy
before training) is drawn there (the trainer logs from step 1).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podium.errors import ConfigError

log = logging.getLogger("podium.train")

CURVE = "learning_curve.png"
PANELS = (  # (metric, title, what is drawn of its value, y label)
    ("reward", "Reward (mean of the step's rollouts)", lambda v: v, "reward"),
    ("podium/correct", "Rollouts answered right", lambda v: 100 * v, "%"),
    ("heldout/accuracy", "Held-out accuracy (greedy)", lambda v: 100 * v, "%"),
    ("podium/format_error", "Valid workflows", lambda v: 100 - 100 * v, "%"),
    ("podium/tokens_per_rollout", "Tokens per plan", lambda v: v, "tokens"),
)


def read_metrics(run: Path) -> list[dict[str, Any]]:
    """The logged steps of a run folder's metrics.jsonl (a damaged line is skipped)."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        raise ConfigError(f"{run} has no metrics.jsonl: pass the output folder of a "
                          "`podium train` run ([output] dir).")
    rows = []
    for line in path.read_text("utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def series(rows: list[dict[str, Any]], key: str,
           drawn: Callable[[float], float]) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric; a step logged twice (a resume) keeps its last value."""
    by_step: dict[int, float] = {}
    for row in rows:
        if isinstance(row.get(key), (int, float)) and "step" in row:
            by_step[int(row["step"])] = drawn(row[key])
    steps = sorted(by_step)
    return steps, [by_step[s] for s in steps]


def plot_runs(runs: list[Path], out: Path) -> Path:
    """Draw the runs' learning curves into `out` (a PNG)."""
    import matplotlib.pyplot as plt

    fig = curve_figure(runs)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=110)
    finally:
        plt.close(fig)
    return out


def curve_figure(runs: list[Path]) -> Any:
    """The runs' learning curves as a matplotlib Figure: a panel per metric some run logged,
    each over the optimizer steps from 0 (the untrained policy, where a run logged it) to the
    last step logged, on whole steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    data = [(run, read_metrics(run)) for run in runs]
    panels = [p for p in PANELS if any(series(rows, p[0], p[2])[0] for _, rows in data)]
    if not panels:
        raise ConfigError(f"{', '.join(map(str, runs))}: no logged training step yet.")
    last = max(step for _, rows in data for p in panels for step in series(rows, p[0], p[2])[0])
    pad = max(0.4, 0.02 * last)  # room for the markers at the first and last step
    cols = min(len(panels), 3)
    rows_ = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows_, cols, figsize=(4.2 * cols + (1.8 if len(data) > 1 else 0),
                                                  3.2 * rows_), squeeze=False,
                             layout="constrained")
    for ax, (key, title, drawn, unit) in zip(axes.flat, panels, strict=False):
        for i, (run, rows) in enumerate(data):
            steps, values = series(rows, key, drawn)
            if steps:
                ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3,
                        color=plt.cm.tab10(i % 10), label=run.name)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(unit)
        ax.set_xlim(-pad, max(last, 1) + pad)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
        if unit == "%":
            ax.set_ylim(-3, 103)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if len(data) > 1:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper", fontsize=7, title="run",
                   title_fontsize=7)
    fig.suptitle("podium train: " + ", ".join(run.name for run, _ in data), fontsize=10)
    return fig


def draw_curve(run: Path) -> Path | None:
    """The run's own learning_curve.png, at the end of training; a failure to draw is logged,
    never the end of a trained run."""
    try:
        return plot_runs([run], run / CURVE)
    except Exception as exc:  # the run is trained; the picture is a convenience
        log.warning("could not draw %s: %s (podium train plot %s draws it again)",
                    run / CURVE, exc, run)
        return None
