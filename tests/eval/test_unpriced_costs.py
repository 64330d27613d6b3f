"""A run whose Conductor has no price in the pool file, as the people reading it see it: the
eval summary and progress say "at least" the priced calls' sum and name what has no price,
`podium report` marks that sum as a lower bound, the trace viewer shows it; and a results
file whose new cost fields are damaged is read as damaged, while records written before them
still load."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess

import matplotlib.pyplot as plt
import pytest
from plot_checks import layout_problems
from support import podium_in_process

from podium.config import pool_from_dict
from podium.eval.report import figures, label_runs, load_run, markdown_table, trade_axis
from podium.eval.runner import load_results
from podium.pipeline import Pipeline
from podium.viewer import trace_page

QUESTIONS = 3
POOL = """[conductor]
backend = "function"
function = "podium.testing.workers:one_step_counted"

[[workers]]
name = "adder"
backend = "function"
function = "podium.testing.workers:adder"
price = { per_call = 0.004 }

[run]
fewshots = "none"
cache = false
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """`podium eval` of three sums with a $0.01 budget: the Conductor (no price) sends each
    to the adder ($0.004 a call)."""
    root = tmp_path_factory.mktemp("unpriced")
    (root / "pool.toml").write_text(POOL)
    data = root / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)})
                            + "\n" for i in range(QUESTIONS)))
    out = root / "out"
    proc = podium_in_process("eval", "--task", f"jsonl:{data}", "--pool", str(root / "pool.toml"),
                             "--task-option", "grader=numeric", "--budget", "0.01",
                             "--repeats", "1", "--out", str(out), columns=400)
    assert proc.returncode == 0, proc.stderr
    return proc, out


def row(text: str, name: str) -> str:
    (line,) = [line for line in text.splitlines() if name in line]
    return line


def test_the_summary_says_at_least_and_names_the_conductor(run):
    proc, _ = run
    cost = row(proc.stdout, "cost per item")
    assert "at least $0.004000" in cost and "the Conductor has no price in the pool file" in cost
    budget = row(proc.stdout, "of plans over it")
    assert "a plan's list price $0.004000" in budget
    assert "the workers' calls then cost $0.004000" in budget
    paid = row(proc.stdout, "paid by this run")
    assert "at least $0.012000" in paid


def test_the_progress_adds_up_the_priced_calls(run):
    proc, _ = run
    last = [line for line in proc.stderr.splitlines() if " done (" in line][-1]
    assert f"{QUESTIONS}/{QUESTIONS} done" in last and "at least $0.0120 paid" in last


def test_the_report_marks_the_known_cost_as_a_lower_bound(run):
    _, out = run
    runs = [load_run(out)]
    label_runs(runs)
    table = markdown_table(runs)
    head, _, cells = (line.strip("|").split("|") for line in table.splitlines()[:3])
    cell = dict(zip((h.strip() for h in head), (c.strip() for c in cells), strict=True))
    assert cell["cost/item ($)"] == "≥ 0.00400" and cell["paid ($)"] == "≥ 0.0120"
    note = row(table, "marks a lower bound")
    assert "conductor (the Conductor has no price in the pool file)" in note
    use_cost, title = trade_axis(runs)
    assert use_cost and "a lower bound" in title
    for name, fig in figures(runs):
        try:
            assert layout_problems(fig) == [], name
        finally:
            plt.close(fig)


def rewrite_first(path, edit) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[0] = json.dumps(edit(json.loads(lines[0]))) + "\n"
    path.write_text("".join(lines))


DAMAGED = {
    "used.known_cost_usd": lambda r: {**r, "used": {**r["used"], "known_cost_usd": "0.004"}},
    "used.unpriced.conductor": lambda r: {**r, "used": {**r["used"], "unpriced": {
        "conductor": "1"}}},
    "paid.unpriced": lambda r: {**r, "paid": {**r["paid"], "unpriced": [["conductor", 1]]}},
    "used_by.workers.cost_usd": lambda r: {**r, "used_by": {**r["used_by"], "workers": {
        **r["used_by"]["workers"], "cost_usd": "free"}}},
    "budget.spent_usd": lambda r: {**r, "budget": {**r["budget"], "spent_usd": True}},
    "budget.spent_unpriced.adder": lambda r: {**r, "budget": {**r["budget"],
                                                              "spent_unpriced": {"adder": -1}}},
}


@pytest.mark.parametrize("field", sorted(DAMAGED))
def test_a_damaged_cost_field_is_not_a_record(run, tmp_path, field):
    _, out = run
    results = tmp_path / "results.jsonl"
    shutil.copy(out / "results.jsonl", results)
    assert load_results(results).bad == []
    rewrite_first(results, DAMAGED[field])
    found = load_results(results)
    assert len(found.records) == QUESTIONS - 1
    ((line, why),) = found.bad
    assert line == 1 and why.startswith(f"JSON, but {field}")


def test_records_written_before_the_known_cost_still_load(run, tmp_path):
    _, out = run
    results = tmp_path / "results.jsonl"
    shutil.copy(out / "results.jsonl", results)
    old_budget = ("amount", "over", "plan_price", "workers_cost_usd")

    def older(r: dict) -> dict:
        r = {k: v for k, v in r.items() if k != "used_by"}
        for key in ("used", "paid"):
            r[key] = {k: v for k, v in r[key].items() if k not in ("known_cost_usd", "unpriced")}
        r["budget"] = {k: r["budget"][k] for k in old_budget}
        return r

    rewrite_first(results, older)
    found = load_results(results)
    assert found.bad == [] and len(found.records) == QUESTIONS


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="the Debian `chromium` package is not installed "
                    "(apt-get install chromium)")
def test_the_viewer_shows_the_known_cost_and_the_verdict(tmp_path):
    pool = pool_from_dict({
        "conductor": {"backend": "function", "function": "podium.testing.workers:one_step"},
        "workers": [{"name": "adder", "backend": "function",
                     "function": "podium.testing.workers:adder", "price": {"per_call": 0.004}}],
        "run": {"cache": False, "fewshots": "none"}})

    async def ask():
        async with Pipeline(pool) as pipe:
            return await pipe.ask("What is 2 + 5?", budget=0.01)

    trace = asyncio.run(ask()).to_json()
    assert trace["used"]["cost_usd"] is None  # the Conductor has no price
    page = tmp_path / "trace.html"
    page.write_text(trace_page(trace), "utf-8")
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          "--disable-background-networking", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert 'data-drawn="1"' in dom  # the script ran to the end
    summary = dom.split('id="summary"')[1].split("<h2>")[0]
    assert re.search(r"2 calls · \d+ tokens · at least \$0\.004000 \(no price in the pool "
                     r"file: the Conductor \(1 call\)\)", summary)
    assert "Within budget: the plan's list price, $0.004, fits the budget of $0.01" in summary
    assert "$-" not in summary
