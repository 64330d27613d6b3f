"""`podium train --resume` and the run folder's per-step records: a run killed after it logged
steps 4 and 5 resumes from checkpoint-3, trains steps 4 and 5 again and logs them again, so the
records of the killed attempt's steps 4 and 5 must go first (once, a transcripts.jsonl held
step 4 twice). The resume point is found, and the records cut, by the function `podium train
--resume` calls, on a run folder written as a killed run leaves it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from podium.errors import ConfigError  # noqa: E402
from podium.train.trainer import resume_point  # noqa: E402


def killed_run(out: Path) -> Path:
    """A run folder as a run that checkpoints every 3 steps leaves it when killed during step
    6: checkpoint-3, metrics and transcripts of steps 1-5, and a metrics line cut off by the
    kill."""
    (out / "checkpoint-3").mkdir(parents=True)
    (out / "checkpoint-3" / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    metrics = [{"step": s, "reward": s / 10} for s in range(1, 6)]
    (out / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics)
                                       + '{"step": 6, "rew')
    transcripts = [{"step": s, "reward": r, "completion": f"step {s}"}
                   for s in range(1, 6) for r in (0.0, 1.0)]
    (out / "transcripts.jsonl").write_text(
        "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in transcripts))
    return out


def steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_resume_drops_what_was_logged_after_its_checkpoint(tmp_path):
    out = killed_run(tmp_path / "out")
    checkpoint = resume_point(out)
    assert Path(checkpoint).name == "checkpoint-3"
    assert steps(out / "metrics.jsonl") == [1, 2, 3]  # the cut-off line went too
    assert steps(out / "transcripts.jsonl") == [1, 1, 2, 2, 3, 3]
    kept = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    assert kept[0] == {"step": 1, "reward": 0.0, "completion": "step 1"}  # records as written
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoint-3", "metrics.jsonl", "transcripts.jsonl"]  # nothing left beside them
    resume_point(out)  # a second resume from the same checkpoint changes nothing
    assert steps(out / "metrics.jsonl") == [1, 2, 3]


def test_only_the_main_process_cuts_the_records(tmp_path):
    out = killed_run(tmp_path / "out")
    before = {name: (out / name).read_bytes() for name in ("metrics.jsonl", "transcripts.jsonl")}
    assert Path(resume_point(out, main=False)).name == "checkpoint-3"
    assert {name: (out / name).read_bytes() for name in before} == before


def test_a_record_file_that_is_a_symlink_is_replaced_not_written_through(tmp_path):
    out = killed_run(tmp_path / "out")
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes((out / "metrics.jsonl").read_bytes())
    (out / "metrics.jsonl").unlink()
    (out / "metrics.jsonl").symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    resume_point(out)
    assert elsewhere.read_bytes() == before
    assert steps(out / "metrics.jsonl") == [1, 2, 3]


def test_resume_without_a_checkpoint_is_refused_and_touches_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    with pytest.raises(ConfigError, match="holds no checkpoint-N folder yet"):
        resume_point(out)
    assert steps(out / "metrics.jsonl") == [1, 2]
