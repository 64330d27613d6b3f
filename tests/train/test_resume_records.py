"""`podium train --resume` and the run folder's per-step records: a run killed after it logged
steps 4 and 5 resumes from checkpoint-3, trains steps 4 and 5 again and logs them again, so the
records of the killed attempt's steps 4 and 5 must go first (once, a transcripts.jsonl held
step 4 twice). The resume point is found, and the records cut, by the function `podium train
--resume` calls, on a run folder written as a killed run leaves it: with a checkpoint, with
one cut off while saving, and with none."""

from __future__ import annotations

import json
import os
from pathlib import Path

from podium.train.runfolder import resume_point, share_weights, unshare_weights


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
    point = resume_point(out)
    assert Path(point.checkpoint).name == "checkpoint-3"
    assert "logged after step 3 is dropped" in point.note
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
    assert Path(resume_point(out, main=False).checkpoint).name == "checkpoint-3"
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


def test_a_checkpoint_cut_off_while_saving_is_passed_over(tmp_path):
    """A kill during the save of checkpoint-6 leaves it without trainer_state.json (written
    last): --resume continues from checkpoint-3, the last one saved whole."""
    out = killed_run(tmp_path / "out")
    (out / "checkpoint-6").mkdir()
    (out / "checkpoint-6" / "model.safetensors").write_bytes(b"cut off")
    point = resume_point(out)
    assert Path(point.checkpoint).name == "checkpoint-3"
    assert "checkpoint-6 passed over" in point.note
    assert steps(out / "metrics.jsonl") == [1, 2, 3]


def test_resume_without_a_checkpoint_starts_at_step_1_and_keeps_what_was_there(tmp_path):
    """A run killed before its first checkpoint: --resume starts it again at step 1, and the
    killed attempt's records and outputs are moved, unchanged, into attempt-1/ (a second such
    attempt into attempt-2/); a file of the user's own stays where it is."""
    out = killed_run(tmp_path / "out")
    (out / "checkpoint-3" / "trainer_state.json").unlink()  # cut off: not a resume point
    (out / "best").mkdir()
    (out / "best" / "model.safetensors").write_bytes(b"weights")
    (out / "notes.txt").write_text("mine")
    before = {name: (out / name).read_bytes() for name in ("metrics.jsonl", "transcripts.jsonl")}
    point = resume_point(out)
    assert point.checkpoint is None
    assert "starting at step 1" in point.note and str(out / "attempt-1") in point.note
    aside = out / "attempt-1"
    assert {name: (aside / name).read_bytes() for name in before} == before
    assert (aside / "best" / "model.safetensors").read_bytes() == b"weights"
    assert (aside / "checkpoint-3").is_dir()  # the cut-off checkpoint too
    assert sorted(p.name for p in out.iterdir()) == ["attempt-1", "notes.txt"]
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    assert Path(resume_point(out).note.rsplit(" ", 1)[1]) == out / "attempt-2"
    assert resume_point(out).note == f"nothing to continue in {out}: starting at step 1"


def test_only_the_main_process_sets_an_attempt_aside(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    assert resume_point(out, main=False).checkpoint is None
    assert steps(out / "metrics.jsonl") == [1, 2]


def test_final_shares_only_identical_weights_and_is_unshared_before_it_is_written(tmp_path):
    checkpoint, final = tmp_path / "checkpoint-2", tmp_path / "final"
    for folder, other in ((checkpoint, b"step 2"), (final, b"step 2 but not")):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"weights of step 2")
        (folder / "extra.safetensors").write_bytes(other)
    assert share_weights(final, checkpoint) == len(b"weights of step 2")
    assert (final / "model.safetensors").samefile(checkpoint / "model.safetensors")
    assert not (final / "extra.safetensors").samefile(checkpoint / "extra.safetensors")
    assert share_weights(final, checkpoint) == 0  # shared already
    unshare_weights(final)
    assert not (final / "model.safetensors").exists()
    assert (final / "extra.safetensors").read_bytes() == b"step 2 but not"
    assert (checkpoint / "model.safetensors").read_bytes() == b"weights of step 2"
    assert os.stat(checkpoint / "model.safetensors").st_nlink == 1
