"""What a person watching `podium train` sees: one readable line per logged step, under a
progress bar that knows the run's true total (a resumed run starts at its checkpoint's step).

    step  3/30 · reward 0.78 ± 0.17 · correct 87.5% · valid 100% · 1.19 calls · 31 tokens
      · 13.6 s/step · generate 3.1 s, wait 0.2 s, train 9.8 s · ETA 6:07
      · held-out 66.7% (best 70.0%)

"correct" and "valid" are over the step's rollouts (valid: the Conductor's output parsed into a
workflow); calls and tokens are per plan (its worker calls; every call's tokens, the
Conductor's and the workers'). The step's time is split into generating rollouts, waiting on
their workflows, and training; with `[grpo] overlap` the line also says how much of the trained
batch's workflow time was hidden behind generation and training. A budget-conditioned run
(`[budget]`) also shows the share of plans over their budget.
TRL's own output (a tqdm bar and a metrics dict per step) is taken off the trainer in favour of
this; every metric still goes to metrics.jsonl and to `report_to` (TensorBoard by default).
Only the main process of a job prints.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from transformers import TrainerCallback


def step_line(step: int, total: int, logs: dict[str, Any], seconds: float | None,
              best: float | None = None) -> str:
    """One step's line from TRL's and podium's logged metrics (absent ones are left out)."""
    width = len(str(total))
    parts = [f"step {step:{width}d}/{total}"]
    if "reward" in logs:
        spread = f" ± {logs['reward_std']:.2f}" if "reward_std" in logs else ""
        parts.append(f"reward {logs['reward']:.2f}{spread}")
    if "podium/correct" in logs:
        parts.append(f"correct {100 * logs['podium/correct']:.1f}%")
    if "podium/format_error" in logs:
        parts.append(f"valid {100 * (1 - logs['podium/format_error']):.0f}%")
    if "podium/over_budget" in logs:
        parts.append(f"over budget {100 * logs['podium/over_budget']:.0f}%")
    if "podium/steps_mean" in logs:
        parts.append(f"{logs['podium/steps_mean']:.2f} calls")
    if "podium/tokens_per_rollout" in logs:
        parts.append(f"{logs['podium/tokens_per_rollout']:.0f} tokens")
    if seconds is not None:
        parts.append(f"{seconds:.1f} s/step")
        if "time/training_s" in logs:  # podium.train.overlap.StepTimes
            parts.append(f"generate {logs['time/generation_s']:.1f} s, wait "
                         f"{logs['time/workers_wait_s']:.1f} s, train "
                         f"{logs['time/training_s']:.1f} s")
        if logs.get("podium/staleness"):
            parts.append(f"workers {100 * logs.get('time/workers_hidden', 0):.0f}% hidden")
        left = max(total - step, 0) * seconds
        parts.append(f"ETA {int(left // 60)}:{int(left % 60):02d}")
    if "heldout/accuracy" in logs:
        best = logs["heldout/accuracy"] if best is None else best
        parts.append(f"held-out {100 * logs['heldout/accuracy']:.1f}% (best {100 * best:.1f}%)")
        if "heldout/over_budget" in logs:
            parts.append(f"held-out over budget {100 * logs['heldout/over_budget']:.0f}%")
        if logs.get("heldout/distinct_plans") == 1:
            parts.append("one plan for every held-out question (collapsed)")
    return " · ".join(parts)


class StepLines(TrainerCallback):
    """Prints `step_line` for every logged training step (with the held-out accuracy on the
    steps that have one, `podium.train.heldout`), under a rich progress bar."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self.progress: Progress | None = None
        self.task: Any = None
        self.best: float | None = None
        self._times: list[float] = []
        self._started: float | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self.progress = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, transient=True)
        self.task = self.progress.add_task("steps", total=state.max_steps,
                                           completed=state.global_step)
        self.progress.start()

    def on_step_begin(self, args, state, control, **kwargs):
        self._started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self._started is not None:
            self._times.append(time.perf_counter() - self._started)
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if state.global_step == 0 and "heldout/accuracy" in logs:  # before the first step
            self.console.print(f"untrained: held-out {100 * logs['heldout/accuracy']:.1f}% "
                               f"({100 * logs.get('heldout/valid', 0):.0f}% of workflows "
                               "valid)", markup=False, highlight=False)
            return
        if "reward" not in logs:
            return
        recent = self._times[-5:]
        seconds = sum(recent) / len(recent) if recent else logs.get("step_time")
        if "heldout/accuracy" in logs:
            self.best = max(self.best or 0.0, logs["heldout/accuracy"])
        line = step_line(state.global_step, state.max_steps, logs, seconds, self.best)
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def quiet_trl(trainer: Any, lines: StepLines) -> None:
    """Take TRL's tqdm bar and per-step dict printing off `trainer`, and transformers' bars
    (a "Writing model shards" bar at every checkpoint); put `lines` on."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from transformers.utils import logging as hf_logging

    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    hf_logging.disable_progress_bar()
    trainer.add_callback(lines)
