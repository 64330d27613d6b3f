"""benchmarks/train_overlap.py's learning verdict: runs that stopped before the bar make each
median a range, and PASS or MISS is printed only when the whole ranges agree."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "train_overlap.py"


@pytest.fixture(scope="module")
def bench() -> Any:
    spec = importlib.util.spec_from_file_location("train_overlap_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


def run(reached: int | None, last: int, *, overlap: bool, seed: int = 42,
        training_seed: int = 42) -> dict[str, Any]:
    """A saved learning run: evaluated every 3 steps to `last`, first at the bar at `reached`."""
    steps = range(0, last + 1, 3)
    curve = [{"step": s, "accuracy": 1.0 if reached is not None and s >= reached else 0.5}
             for s in steps]
    return {"seed": seed, "training_seed": training_seed, "overlap": overlap,
            "assignment": ["a", "b", "c"], "steps_to_bar": reached, "curve": curve}


def test_a_run_short_of_the_bar_counts_from_its_next_step_to_never(bench: Any) -> None:
    median, each = bench.steps_to_bar([run(15, 24, overlap=False), run(None, 24, overlap=False),
                                       run(39, 39, overlap=False)])
    assert each == "15 >24 39"
    assert median == (25, 39)
    median, _ = bench.steps_to_bar([run(None, 24, overlap=False), run(None, 27, overlap=False),
                                    run(24, 24, overlap=False)])
    assert median == (25, math.inf)
    assert bench.span(median) == ">=25"
    assert bench.span((27, 27)) == "27"
    assert bench.span((25, 39)) == "25-39"
    assert bench.steps_to_bar([]) == (None, "-")


@pytest.mark.parametrize(("synchronous", "overlapped", "expected"), [
    ((25, 39), (22, 30), "PASS"),          # 30 <= 1.25 x 25 whatever the short runs do
    ((20, 20), (25, 25), "PASS"),          # exactly 1.25x
    ((20, 20), (26, 26), "MISS"),
    ((20, 24), (31, math.inf), "MISS"),    # even the soonest overlapped > 1.25 x the latest
    ((25, math.inf), (27, math.inf), "undecided"),
    ((15, 39), (30, 30), "undecided"),     # PASS against 39, MISS against 15
])
def test_the_verdict_needs_the_whole_ranges_to_agree(bench: Any, synchronous: tuple[float, float],
                                                     overlapped: tuple[float, float],
                                                     expected: str) -> None:
    assert bench.verdict(synchronous, overlapped).startswith(expected)


def test_a_mode_without_runs_gets_no_verdict(bench: Any) -> None:
    assert bench.verdict(None, (20, 20)) == "no synchronous run"
    assert bench.verdict((20, 20), None) == "no overlapped run"


def test_the_report_judges_each_assignment_on_its_own_runs(
        bench: Any, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [run(r, n, overlap=o, seed=seed, training_seed=t)
            for seed, rows in {1: [(False, 42, 15, 24), (False, 43, None, 24),
                                   (False, 44, 39, 39), (True, 42, None, 21),
                                   (True, 43, 18, 24), (True, 44, 30, 39)],
                               7: [(False, 42, 12, 24), (False, 43, 12, 24),
                                   (True, 42, None, 30), (True, 43, None, 30)]}.items()
            for o, t, r, n in rows]
    bench.learning_report(runs)
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("a, b, c")]
    assert len(rows) == 2
    assert "15 >24 39" in rows[0] and ">21 18 30" in rows[0] and rows[0].endswith("PASS")
    assert ">30 >30" in rows[1] and rows[1].endswith("MISS")
    assert "training seeds 42 43 44" in out
    # mean held-out over the evaluations every run made (steps 3-21), per mode
    assert "held-out mean over steps 3-21 of 5 runs" in out


def test_overlapped_runs_of_an_earlier_podium_are_judged_apart(
        bench: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs with a `code` note are a recipe of their own, against the same synchronous runs;
    a synchronous run's note changes nothing."""
    old = "before abc1234"
    runs = [run(15, 24, overlap=False, training_seed=42), run(21, 24, overlap=False,
                                                             training_seed=43),
            run(18, 24, overlap=True, training_seed=42), run(None, 40, overlap=True,
                                                             training_seed=43),
            {**run(None, 40, overlap=True, training_seed=42), "code": old},
            {**run(12, 24, overlap=True, training_seed=43), "code": old}]
    runs[1]["code"] = old
    bench.learning_report(runs)
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("a, b, c")]
    assert len(rows) == 2
    assert "15 21" in rows[0] and "18 >39" in rows[0]
    assert "15 21" in rows[1] and ">39 12" in rows[1]
    assert out.count("overlapped runs made before abc1234") == 1
    assert out.index("the recipe:") < out.index("overlapped runs made before abc1234")


def test_the_target_is_judged_only_on_the_same_training_seeds(
        bench: Any, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [run(15, 24, overlap=False, training_seed=42), run(21, 24, overlap=False,
                                                             training_seed=43),
            run(15, 24, overlap=True, training_seed=42)]
    bench.learning_report(runs)
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("a, b, c"))
    assert row.endswith("not judged: training seeds 42 43 synchronous, 42 overlapped")
