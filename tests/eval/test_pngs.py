"""Every PNG podium writes, drawn from real data and measured as a reader sees it: the
report's three plots (from real evaluation folders, in pools with prices, with every price 0
and with none) and a training run's learning curve."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pytest
from eval_folders import make_runs
from plot_checks import layout_problems

from podium.eval.report import figures, label_runs, load_run
from podium.train.curve import curve_figure

RUNS = [("conductor", None, 2), ("single:adder", None, 2), ("single:zero", 4, 1),
        ("vote:adder:3", None, 2), ("moa", None, 1)]


def drawn(tmp_path, prices: str) -> dict[str, object]:
    runs = [load_run(f) for f in make_runs(tmp_path, prices, RUNS)]
    label_runs(runs)
    return dict(figures(runs))


@pytest.mark.parametrize("prices", ["priced", "zero", "free"])
def test_the_report_plots_keep_their_text_inside_and_off_the_data(tmp_path, prices):
    for name, fig in drawn(tmp_path, prices).items():
        try:
            assert layout_problems(fig) == [], name
        finally:
            plt.close(fig)


def test_the_trade_off_plot_says_what_is_true_of_the_costs(tmp_path):
    titles = {}
    for prices in ("priced", "zero", "free"):
        (tmp_path / prices).mkdir()
        figs = drawn(tmp_path / prices, prices)
        (name,) = [n for n in figs if n.startswith("accuracy_vs_")]
        titles[prices] = (name, figs[name].axes[0].get_title())
        for fig in figs.values():
            plt.close(fig)
    assert titles["priced"] == ("accuracy_vs_cost.png", "Accuracy against cost per item")
    name, zero = titles["zero"]
    assert name == "accuracy_vs_tokens.png" and "every price in the pools is 0" in zero
    assert "no price" not in zero  # the table shows a cost of 0.00000: the pools have prices
    name, free = titles["free"]
    assert name == "accuracy_vs_tokens.png" and "the pools have no prices" in free


def test_one_repeat_draws_no_error_bar(tmp_path):
    fig = drawn(tmp_path, "priced")["accuracy_vs_cost.png"]
    handles, labels = fig.axes[0].get_legend_handles_labels()
    bars = {label.split(" · ")[0]: bool(handle.lines[2]) for handle, label in
            zip(handles, labels, strict=True)}
    assert bars == {"conductor": True, "single:adder": True, "single:zero": False,
                    "vote:adder:3": True, "moa": False}
    plt.close(fig)


def metrics(run, steps, step0: bool = False) -> None:
    run.mkdir()
    rows = [{"step": 0, "heldout/accuracy": 0.25, "heldout/valid": 0.5}] if step0 else []
    rows += [{"step": s, "reward": 0.1 * s, "podium/correct": 0.1 * s,
              "podium/format_error": 0.0, "podium/tokens_per_rollout": 40.0 + s,
              **({"heldout/accuracy": 0.5} if s % 10 == 0 else {})} for s in steps]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_learning_curve_is_on_whole_steps_from_zero_with_the_untrained_point(tmp_path):
    metrics(tmp_path / "one", [3])  # one logged step: no 2.85 .. 3.15 ticks
    metrics(tmp_path / "long", range(1, 41), step0=True)
    for runs in ([tmp_path / "one"], [tmp_path / "one", tmp_path / "long"]):
        fig = curve_figure(runs)
        try:
            assert layout_problems(fig) == []
            for ax in (a for a in fig.axes if a.axison):
                low, high = ax.get_xlim()
                ticks = [t for t in ax.get_xticks() if low <= t <= high]
                assert low <= 0 and all(float(t).is_integer() for t in ticks), ax.get_title()
        finally:
            plt.close(fig)
    fig = curve_figure([tmp_path / "long"])
    held = next(ax for ax in fig.axes if ax.get_title().startswith("Held-out"))
    assert list(held.lines[0].get_xdata()) == [0, 10, 20, 30, 40]  # step 0: before training
    plt.close(fig)
