"""A training run's folder (`[output] dir`): what it holds, where `--resume` continues, and
how little of it a finished run keeps twice.

One rule for every state of the folder:

* `podium train` (no `--resume`) starts a run only in a folder that holds none (`run_files`
  finds no records, checkpoint-N, final/ or best/); otherwise it stops and names what
  `--resume` does there (`check_folder`).
* `podium train --resume` continues from the newest *complete* checkpoint-N (transformers
  writes `trainer_state.json` last, so a checkpoint without it was cut off while saving and
  is passed over), first cutting what was logged after step N (those steps are trained and
  logged again). With no complete checkpoint it starts at step 1, and whatever an earlier
  attempt left is moved into `attempt-K/` first, so nothing is overwritten or lost
  (`resume_point`; transformers' own `resume_from_checkpoint=True` raises instead). A run
  that took its `grpo.max_steps` already is refused, naming a higher `grpo.max_steps`
  (transformers would train one more step past it).

A step checkpoint holds what `--resume` needs: the weights, the optimizer state (AdamW: two
fp32 tensors per parameter, twice the weights), scheduler, RNG and trainer state, plus the
tokenizer and card that make it usable as a Conductor; only the newest complete one is needed,
so `save_total_limit` defaults to 1. At the end of a run `final/` holds the same weights as the
last checkpoint: `share_weights` makes its `.safetensors` files hard links to the checkpoint's
(one copy on disk), and `unshare_weights` takes them apart before `final/` is written again.
"""

from __future__ import annotations

import filecmp
import os
import re
from dataclasses import dataclass
from pathlib import Path

from podium.errors import ConfigError
from podium.train.curve import CURVE
from podium.train.metrics import RUN_RECORDS, drop_records_after

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
STATE = "trainer_state.json"  # written last into a checkpoint: its presence marks it complete
OUTPUTS = ("final", "best")
ASIDE = ("runs", CURVE)  # TensorBoard's logs and the curve: moved aside with a run, never
                         # a reason to refuse a folder


def checkpoints(out: Path) -> list[Path]:
    """The checkpoint-N folders in `out`, by N."""
    found = [(int(m.group(1)), p) for p in (out.iterdir() if out.is_dir() else [])
             if (m := CHECKPOINT.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def step_of(checkpoint: Path) -> int:
    return int(checkpoint.name.rsplit("-", 1)[1])


def complete(checkpoint: Path) -> bool:
    """Whether `checkpoint` was saved to the end (its trainer state is written last)."""
    return (checkpoint / STATE).is_file()


def last_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint in `out`, or None."""
    return next((c for c in reversed(checkpoints(out)) if complete(c)), None)


def run_files(out: Path) -> list[str]:
    """The names of what a training run left in `out`: its records, checkpoints, final/ and
    best/ (empty for a folder that holds no run)."""
    names = [p.name for p in checkpoints(out)]
    return names + [n for n in (*RUN_RECORDS, *OUTPUTS) if (out / n).exists()]


def next_aside(out: Path) -> Path:
    """`out`/attempt-K for the first K not taken."""
    k = 1
    while (out / f"attempt-{k}").exists():
        k += 1
    return out / f"attempt-{k}"


def check_folder(out: Path, max_steps: int, *, resume: bool) -> None:
    """Before anything is built: stop `podium train` without `--resume` in a folder that holds
    a run, and `--resume` of a run that took its `max_steps` already (transformers would train
    one more step), each naming the command that works there."""
    last = last_checkpoint(out)
    finished = last is not None and step_of(last) >= max_steps
    further = ("pass --resume with a higher grpo.max_steps (--set grpo.max_steps=...) to train "
               "it further, or train into a new folder (--set output.dir=...).")
    if resume:
        if finished:
            assert last is not None
            raise ConfigError(f"--resume: the run in {out} finished at step {step_of(last)} "
                              f"({last.name}; grpo.max_steps = {max_steps}): {further}")
        return
    held = run_files(out)
    if not held:
        return
    shown = ", ".join(held[:6]) + (", ..." if len(held) > 6 else "")
    if last is None:
        does = (f"pass --resume to start it again at step 1 (it has no complete checkpoint; "
                f"what it holds is moved to {next_aside(out)} first), or train into a new "
                "folder (--set output.dir=...).")
    elif finished:
        does = f"it finished at step {step_of(last)}: {further}"
    else:
        does = (f"pass --resume to continue it from {last.name}, or train into a new folder "
                "(--set output.dir=...).")
    raise ConfigError(f"{out} holds a training run already ({shown}): {does}")


@dataclass(frozen=True)
class ResumePoint:
    """Where `--resume` continues: `checkpoint` (None: step 1) and the plan's line about it."""

    checkpoint: str | None
    note: str


def resume_point(out: Path, *, main: bool = True) -> ResumePoint:
    """Where `--resume` continues in `out` (see the module). The main process (the one that
    writes the folder) cuts the records back to the checkpoint's step, or, with no complete
    checkpoint, moves what an earlier attempt left into attempt-K/; every process gets the
    same checkpoint."""
    last = last_checkpoint(out)
    cut = [c.name for c in checkpoints(out)
           if not complete(c) and (last is None or step_of(c) > step_of(last))]
    passed = (f"; {', '.join(cut)} passed over: its save was cut off (no {STATE})"
              if cut else "")
    if last is None:
        left = [p for p in out.iterdir() if p.name in {*run_files(out), *ASIDE}] \
            if out.is_dir() else []
        if not left:
            return ResumePoint(None, f"nothing to continue in {out}: starting at step 1")
        aside = next_aside(out)
        if main:
            aside.mkdir()
            for path in left:
                path.rename(aside / path.name)
        return ResumePoint(None, f"no complete checkpoint in {out}: starting at step 1; "
                                 f"what the earlier attempt left is in {aside}{passed}")
    step = step_of(last)
    if main:
        drop_records_after(out, step)
    return ResumePoint(str(last), f"from {last}; what was logged after step {step} is "
                                  f"dropped: those steps are trained again{passed}")


def share_weights(final: Path, checkpoint: Path | None) -> int:
    """Make each `.safetensors` file in `final` that is byte for byte the same file in
    `checkpoint` a hard link to it (one copy on disk); return the bytes no longer held twice.
    Where the file system has no hard links both copies stay."""
    if checkpoint is None:
        return 0
    saved = 0
    for path in final.glob("*.safetensors"):
        twin = checkpoint / path.name
        if (not twin.is_file() or path.stat().st_size != twin.stat().st_size
                or os.path.samefile(path, twin) or not filecmp.cmp(path, twin, shallow=False)):
            continue
        link = path.with_name(f".{path.name}.link")
        try:
            link.unlink(missing_ok=True)
            os.link(twin, link)
            link.replace(path)
        except OSError:
            link.unlink(missing_ok=True)
            continue
        saved += twin.stat().st_size
    return saved


def unshare_weights(final: Path) -> None:
    """Remove the `.safetensors` files in `final` that are hard links, so that writing
    `final/` again never writes through them into a checkpoint's weights (safetensors 0.8
    renames a new file over the old; podium allows safetensors>=0.4, whose writers may not)."""
    for path in final.glob("*.safetensors"):
        if path.is_file() and not path.is_symlink() and path.stat().st_nlink > 1:
            path.unlink()

