"""The step line a person watching `podium train` reads."""

from podium.train.progress import step_line


def test_a_step_line_reads_the_logged_metrics_and_leaves_out_absent_ones():
    line = step_line(3, 30, {"reward": 0.78, "reward_std": 0.17, "podium/correct": 0.875,
                             "podium/format_error": 0.0}, seconds=10.0)
    assert line.startswith("step  3/30 · reward 0.78 ± 0.17 · correct 87.5% · valid 100%")
    assert "ETA 4:30" in line and "held-out" not in line and "tokens" not in line


def test_a_held_out_collapse_onto_one_plan_is_named():
    logs = {"reward": 0.5, "heldout/accuracy": 2 / 3, "heldout/distinct_plans": 1.0}
    line = step_line(20, 30, logs, seconds=None, best=0.7)
    assert "held-out 66.7% (best 70.0%)" in line and "collapsed" in line
    spread = step_line(20, 30, {**logs, "heldout/distinct_plans": 3.0}, seconds=None)
    assert "collapsed" not in spread


def test_a_budgeted_run_shows_its_plans_over_budget():
    line = step_line(5, 60, {"podium/correct": 0.5, "podium/over_budget": 0.25,
                             "heldout/accuracy": 0.6, "heldout/over_budget": 0.1},
                     seconds=None)
    assert "correct 50.0% · over budget 25%" in line and "held-out over budget 10%" in line
    assert "over budget" not in step_line(5, 60, {"podium/correct": 0.5}, seconds=None)
