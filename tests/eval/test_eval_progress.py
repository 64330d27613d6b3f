"""`podium eval`'s progress as a background run, a pipe or CI sees it (output captured, not a
terminal): plain lines with the items done of the total, the accuracy so far, the time elapsed
and the time left, at each tenth of the run and while nothing finishes; a terminal keeps the
live bar."""

from __future__ import annotations

import re

from eval_folders import pool_file
from support import podium_in_process

import podium.cli.eval as cli_eval

LINE = re.compile(r": (\d+)/(\d+) done \((\d+)%\) · acc (\S+) · .* · (\d+:\d\d:\d\d) elapsed · "
                  r"(.*)$")


def progress(stderr: str) -> list[tuple[int, int, str, str]]:
    """(done, total, accuracy, time left) of each progress line."""
    found = [LINE.search(line) for line in stderr.splitlines()]
    return [(int(m[1]), int(m[2]), m[4], m[6]) for m in found if m]


def sums(tmp_path, n: int):
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(f'{{"question": "What is {i} + 1?", "answer": "{i + 1}"}}\n'
                            for i in range(n)))
    return data


def evaluate(tmp_path, data, pool, *extra, env=None):
    return podium_in_process("eval", "--task", f"jsonl:{data}", "--system", "single:adder",
                             "--pool", str(pool), "--out", str(tmp_path / "run"),
                             "--task-option", "grader=numeric", *extra, env=env)


def test_without_a_terminal_a_line_at_each_tenth_with_accuracy_and_time_left(tmp_path):
    data, pool = sums(tmp_path, 15), pool_file(tmp_path, "free")
    run = evaluate(tmp_path, data, pool, "--repeats", "2")
    assert run.returncode == 0, run.stderr
    lines = progress(run.stderr)
    done = [d for d, *_ in lines]
    assert lines[0][:3] == (0, 30, "-") and "unknown" in lines[0][3]  # the start
    assert {3, 6, 9, 12, 15, 18, 21, 24, 27, 30} <= set(done)  # each tenth of 30
    assert done == sorted(done) and len(lines) <= 13  # not a line an item
    assert all(acc == "100.0%" and re.fullmatch(r"\d+:\d\d:\d\d left", left)
               for _, _, acc, left in lines[1:-1])
    assert lines[-1] == (30, 30, "100.0%", "finished")
    assert "━" not in run.stderr + run.stdout  # no bar drawn once, at the end
    assert "accuracy (graded items)" in run.stdout  # the summary stays on stdout
    again = evaluate(tmp_path, data, pool, "--repeats", "2")  # a resume: nothing left to run
    assert progress(again.stderr) == [(30, 30, "-", "finished")]


def test_without_a_terminal_a_line_comes_while_no_item_finishes(tmp_path, monkeypatch):
    """Items that take longer than the interval still give a line each interval."""
    monkeypatch.setattr(cli_eval, "LINE_EVERY_S", 0.25)
    data = sums(tmp_path, 2)
    pool = tmp_path / "slow.toml"
    pool.write_text(pool_file(tmp_path, "free").read_text()
                    .replace("podium.testing.workers:adder", "podium.testing.workers:slow"))
    run = evaluate(tmp_path, data, pool, "--repeats", "1", "--concurrency", "2")
    assert run.returncode == 0, run.stderr
    lines = progress(run.stderr)
    waiting = [line for line in lines if line[0] == 0]
    assert len(waiting) >= 3, run.stderr  # the start, then a line every 0.25 s of the 1 s call
    assert lines[-1] == (2, 2, "100.0%", "finished")


def test_a_terminal_gets_the_live_bar_and_no_lines(tmp_path):
    data, pool = sums(tmp_path, 4), pool_file(tmp_path, "free")
    run = evaluate(tmp_path, data, pool, "--repeats", "1", env={"TTY_COMPATIBLE": "1"})
    assert run.returncode == 0, run.stderr
    assert "━" in run.stderr and "4/4" in run.stderr
    assert progress(run.stderr) == []
