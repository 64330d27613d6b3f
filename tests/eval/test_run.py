"""`podium.eval.run.run_eval`: an evaluation from Python, the same run `podium eval` makes."""

from __future__ import annotations

import asyncio
import json

import pytest
from support import ADDER_POOL

from podium.errors import ConfigError
from podium.eval.run import EvalSpec, run_eval

POOL = ADDER_POOL + """
[run]
fewshots = "none"
cache = false
"""


@pytest.fixture()
def spec(tmp_path) -> EvalSpec:
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + {i + 1}?",
                                        "answer": str(2 * i + 1)}) + "\n" for i in range(4)))
    pool = tmp_path / "pool.toml"
    pool.write_text(POOL)
    return EvalSpec(task=f"jsonl:{data}", out=tmp_path / "run", pool=str(pool), repeats=2,
                    task_options={"grader": "numeric"})


def test_a_run_from_python_reports_progress_and_writes_what_the_cli_writes(spec):
    started, records = [], []
    summary = asyncio.run(run_eval(spec, on_start=lambda *a: started.append(a),
                                   on_record=records.append))
    assert len(started) == 1 and started[0][0].endswith("· conductor")
    assert started[0][1:] == (8, 0)  # 4 items x 2 repeats, none done before
    assert len(records) == 8 and summary.records == 8 and summary.accuracy == 1.0
    out = spec.out
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary.to_json()))
    assert len((out / "results.jsonl").read_text().splitlines()) == 8
    again = []  # the same folder again resumes: nothing left to run
    asyncio.run(run_eval(spec, on_start=lambda *a: again.append(a), on_record=records.append))
    assert again[0][1:] == (8, 8) and len(records) == 8


def test_a_resume_with_other_settings_is_refused_and_changes_nothing(spec):
    asyncio.run(run_eval(spec))
    before = (spec.out / "results.jsonl").read_text()
    other = EvalSpec(**{**spec.__dict__, "seed": 5})
    with pytest.raises(ConfigError):
        asyncio.run(run_eval(other))
    assert (spec.out / "results.jsonl").read_text() == before
