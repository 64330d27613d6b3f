"""`podium report` on real evaluation folders: the n and repeats of every run, a spread only
where there are repeats to spread, and runs that cannot be compared marked as such."""

from __future__ import annotations

import pytest
from eval_folders import QUESTIONS, make_runs, pool_file
from support import podium_in_process


def table_rows(markdown: str) -> list[dict[str, str]]:
    """The first Markdown table's rows, each keyed by its column's header."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(head):
            break  # the next table
        rows.append(dict(zip(head, cells, strict=True)))
    return rows


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Two runs of all 8 questions, 2 repeats each, and one of 4 questions, 1 repeat."""
    root = tmp_path_factory.mktemp("mixed")
    folders = make_runs(root, "priced", [("conductor", None, 2), ("single:adder", None, 2),
                                         ("single:zero", 4, 1)])
    proc = podium_in_process("report", *map(str, folders), "--out", str(root / "report"))
    assert proc.returncode == 0, proc.stderr
    return proc, (root / "report" / "report.md").read_text()


def test_every_row_says_its_n_and_repeats(mixed):
    _, markdown = mixed
    rows = {r["system"].rstrip(" †"): r for r in table_rows(markdown)}
    assert [(r["n"], r["repeats"]) for r in rows.values()] == [
        (str(QUESTIONS), "2"), (str(QUESTIONS), "2"), ("4", "1")]


def test_one_repeat_shows_no_spread_and_says_why(mixed):
    proc, markdown = mixed
    rows = {r["system"].rstrip(" †"): r for r in table_rows(markdown)}
    assert rows["single:zero"]["accuracy (%)"] == "0.00"  # not "0.00 ± 0.00"
    assert rows["conductor"]["accuracy (%)"] == "100.00 ± 0.00"  # two repeats agree: 0 spread
    assert "a spread needs 2 or more repeats" in markdown
    assert "a spread needs 2 or more repeats" in proc.stdout  # printed as written


def test_runs_of_other_n_or_repeats_are_marked_not_comparable(mixed):
    _, markdown = mixed
    marked = [r["system"] for r in table_rows(markdown) if r["system"].endswith("†")]
    assert marked == ["single:zero †"]  # the two 8 × 2 runs compare; the 4 × 1 one does not
    (note,) = [line for line in markdown.splitlines() if line.startswith("† sums")]
    assert "single:zero has n 4, repeats 1" in note and "(n 8, repeats 2)" in note
    assert "not directly comparable" in note


def test_runs_of_one_shape_are_not_marked(tmp_path):
    folders = make_runs(tmp_path, "free", [("conductor", None, 1), ("single:zero", None, 1)])
    proc = podium_in_process("report", *map(str, folders), "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "†" not in markdown
    rows = table_rows(markdown)
    assert [r["accuracy (%)"] for r in rows] == ["100.00", "0.00"]
    assert [r["cost/item ($)"] for r in rows] == ["-", "-"]  # no prices: no cost


def test_an_interrupted_run_is_called_incomplete(tmp_path):
    (folder,) = make_runs(tmp_path, "free", [("single:adder", None, 2)])
    results = folder / "results.jsonl"
    results.write_text("".join(results.read_text().splitlines(keepends=True)[:5]))
    proc = podium_in_process("report", str(folder), "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    assert f"incomplete: 5 of {2 * QUESTIONS} records" in proc.stdout


def test_eval_prints_no_spread_for_one_repeat(tmp_path):
    data = tmp_path / "sums.jsonl"
    data.write_text('{"question": "What is 1 + 2?", "answer": "3"}\n'
                    '{"question": "What is 2 + 2?", "answer": "4"}\n')
    pool = pool_file(tmp_path, "free")
    one = podium_in_process("eval", "--task", f"jsonl:{data}", "--system", "single:zero",
                            "--repeats", "1", "--pool", str(pool),
                            "--out", str(tmp_path / "one"), "--task-option", "grader=numeric")
    assert one.returncode == 0, one.stderr
    accuracy = next(line for line in one.stdout.splitlines() if "accuracy (graded" in line)
    assert "0.00%" in accuracy and "±" not in accuracy and "--repeats 2" in accuracy
    two = podium_in_process("eval", "--task", f"jsonl:{data}", "--system", "single:zero",
                            "--repeats", "2", "--pool", str(pool),
                            "--out", str(tmp_path / "two"), "--task-option", "grader=numeric")
    accuracy = next(line for line in two.stdout.splitlines() if "accuracy (graded" in line)
    assert "± 0.00 (s.e. over 2 repeats)" in accuracy
