"""What a training step logs about its rollouts, counted over every process of the job.

Each process scores its own share of a step's rollouts (`podium.train.reward`) and keeps, per
rollout, a small `RolloutRecord` (right or wrong, parse failures, tokens, cost, the plan's
workers by position, round and decision), and a few candidate transcripts. `StepLog` is that
share, kept by the job's `StepRecorder` (handed to both the reward and the trainer). The
trainer has the recorder gather every process's `StepLog` on its main thread (an all-gather,
so every process computes the same numbers) and `publish` turns the union into the step's
metrics (shares of all the step's rollouts, not a mean of per-process shares) and the
transcripts the main process writes. With one process the gather is the identity.

`drop_records_after` cuts a run folder's per-step records (`RUN_RECORDS`) back to the step of
the checkpoint `--resume` continues from, so that no step is counted twice.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podium.files import write_whole
from podium.outcome import Outcome
from podium.pipeline import RunResult


@dataclass(frozen=True)
class RolloutRecord:
    """The numbers one rollout adds to the step's metrics."""

    correct: bool
    format_error: bool
    infra: bool
    tokens: int
    cost: float | None
    parse_failures: tuple[str, ...]
    steps: int | None  # the round-0 plan's length (None: no plan)
    picks: tuple[tuple[int, str], ...]  # (position, worker name) of the round-0 plan's steps
    explored: bool = False
    round: int = 0
    decision: str | None = None  # the last round's decision (recursion)
    over_budget: bool | None = None  # the plan passed its row's budget (None: no budget)

    @classmethod
    def of(cls, outcome: Outcome, run: RunResult, *, explored: bool = False,
           round_: int = 0) -> RolloutRecord:
        first = run.rounds[0]
        workflow = first.conductor.workflow
        return cls(
            correct=outcome.correct, format_error=outcome.format_error,
            infra=any(f.cls != "model" for f in outcome.failures),
            tokens=outcome.used.total_tokens, cost=outcome.used.cost,
            parse_failures=tuple(reason for _, reason in outcome.parse_failures()),
            steps=len(workflow) if workflow is not None else None,
            picks=tuple((s.index, s.worker_name) for s in (first.execution.steps if first.execution else ())),
            explored=explored, round=round_,
            decision=outcome.rounds[-1].decision if outcome.rounds else None,
            over_budget=outcome.budget.over if outcome.budget else None)


@dataclass
class StepLog:
    """One process's share of a step: its rollouts' records and its candidate transcripts."""

    step: int
    records: list[RolloutRecord] = field(default_factory=list)
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    explored: bool = False  # the step has explored rollouts (logs their share)
    recursion: bool = False  # the step has round-1 rollouts (logs keep versus revise)


def rollout_metrics(records: list[RolloutRecord]) -> dict[str, float]:
    """Per-step numbers for the training log (each a share of the rollouts given unless the
    name says otherwise)."""
    n = len(records) or 1
    out: dict[str, float] = {
        "podium/correct": sum(r.correct for r in records) / n,
        "podium/format_error": sum(r.format_error for r in records) / n,
        "podium/infra_dropped": sum(r.infra for r in records) / n,
        "podium/tokens_per_rollout": sum(r.tokens for r in records) / n,
    }
    budgeted = [r.over_budget for r in records if r.over_budget is not None]
    if budgeted:
        out["podium/over_budget"] = sum(budgeted) / len(budgeted)
    if all(r.cost is not None for r in records):
        out["podium/cost_per_rollout"] = sum(r.cost for r in records) / n  # type: ignore[misc]
    for reason, count in Counter(p for r in records for p in r.parse_failures).items():
        out[f"podium/parse/{reason}"] = count / n
    steps = [r.steps for r in records if r.steps is not None]
    if steps:
        out["podium/steps_mean"] = sum(steps) / len(steps)
        for k, count in Counter(steps).items():
            out[f"podium/steps/{k}"] = count / len(steps)
    picks: Counter = Counter(name for r in records for _, name in r.picks)
    by_position: Counter = Counter(p for r in records for p in r.picks)
    total = sum(picks.values())
    for name, count in picks.items():
        out[f"podium/worker/{name}"] = count / total
    for (pos, name), count in by_position.items():
        at = sum(c for (p, _), c in by_position.items() if p == pos)
        out[f"podium/worker_at_{pos}/{name}"] = count / at
    return out


def recursion_metrics(records: list[RolloutRecord]) -> dict[str, float]:
    """Keep-versus-revise in the round-1 rollouts: each decision's share and accuracy."""
    decided: dict[str, list[bool]] = {}
    for r in records:
        if r.round == 1:
            decided.setdefault(r.decision or "", []).append(r.correct)
    total = sum(len(v) for v in decided.values()) or 1
    out: dict[str, float] = {}
    for decision, correct in decided.items():
        out[f"podium/recursion/{decision}"] = len(correct) / total
        out[f"podium/recursion/{decision}_correct"] = sum(correct) / len(correct)
    return out


def step_metrics(log: StepLog) -> dict[str, float]:
    """The step's metrics: the policy's own rollouts, the explored ones apart."""
    own = [r for r in log.records if not r.explored]
    out = rollout_metrics(own)
    if log.recursion:
        out.update(recursion_metrics(log.records))
    if log.explored:
        tried = [r for r in log.records if r.explored]
        out["podium/explored"] = len(tried) / (len(log.records) or 1)
        out["podium/explored_correct"] = sum(r.correct for r in tried) / (len(tried) or 1)
    return out


def pick_transcripts(candidates: list[dict[str, Any]], per_step: int) -> list[dict[str, Any]]:
    """`per_step` transcripts: one of each (reward, explored) first, best first and dropped
    (reward None) last, the policy's own before the explored; then the rest in order."""
    order = sorted(range(len(candidates)), key=lambda i: (
        float("inf") if candidates[i]["reward"] is None else -candidates[i]["reward"],
        bool(candidates[i].get("explored"))))
    first: dict[tuple[Any, bool], int] = {}
    for i in order:
        first.setdefault((candidates[i]["reward"], bool(candidates[i].get("explored"))), i)
    picked = list(first.values())
    picked += [i for i in range(len(candidates)) if i not in picked]
    return [candidates[i] for i in picked[:per_step]]


def merge(logs: list[StepLog]) -> StepLog:
    """Every process's share of one step as one."""
    out = StepLog(logs[0].step)
    for log in logs:
        out.records.extend(log.records)
        out.transcripts.extend(log.transcripts)
        out.explored |= log.explored
        out.recursion |= log.recursion
    return out


def publish(log: StepLog, *, gather: Callable[[list[StepLog]], list[StepLog]] = lambda x: x,
            log_metric: Callable[[str, float], None] | None = None,
            transcripts: Path | None = None, per_step: int = 0) -> dict[str, float]:
    """Gather `log` from every process (`gather`: an all-gather of a list, flattened), log the
    step's metrics through `log_metric` (on every process: they are the same numbers) and
    append its transcripts to `transcripts` (None on all but the main process)."""
    step = merge(gather([log]))
    metrics = step_metrics(step)
    if log_metric is not None:
        for name in sorted(metrics):
            log_metric(name, metrics[name])
    if transcripts is not None and per_step:
        with transcripts.open("a", encoding="utf-8") as fh:
            for t in pick_transcripts(step.transcripts, per_step):
                fh.write(json.dumps(t, ensure_ascii=False) + "\n")
    return metrics


class StepRecorder:
    """Holds this process's `StepLog` of each step being scored until the trainer publishes
    it: the reward keeps it (`keep`, on the reward's event loop), the trainer publishes it once
    TRL's rewards are in (`publish`, on the main thread, where the gather may run). With
    `[grpo] overlap` the next steps' logs may be kept before this one is published, so they
    are held by step. `transcripts`: the file the main process appends to (None elsewhere);
    `per_step`: transcripts a step."""

    def __init__(self, transcripts: Path | None = None, per_step: int = 0) -> None:
        self.transcripts, self.per_step = transcripts, per_step
        self.pending: dict[int, StepLog] = {}

    def keep(self, log: StepLog) -> None:
        self.pending[log.step] = log

    def publish(self, step: int | None = None,
                gather: Callable[[list[StepLog]], list[StepLog]] = lambda x: x,
                log_metric: Callable[[str, float], None] | None = None) -> dict[str, float]:
        """Publish the log kept for `step` (None: the earliest kept) gathered from every
        process (`gather`: an all-gather of a list, such as accelerate's `gather_object`);
        {} when none is kept."""
        if step is None:
            step = min(self.pending, default=0)
        log = self.pending.pop(step, None)
        if log is None:
            return {}
        return publish(log, gather=gather, log_metric=log_metric,
                       transcripts=self.transcripts, per_step=self.per_step)


RUN_RECORDS = ("metrics.jsonl", "transcripts.jsonl")  # a run folder's per-step records


def _logged_at_or_before(line: str, step: int) -> bool:
    """Whether a record line stays when a run resumes from `step`: a record of a later step
    goes (the resumed run logs that step again), and so does a line that does not read (cut
    off by the kill); a record with no step number stays."""
    try:
        record = json.loads(line)
    except ValueError:
        return False
    logged = record.get("step") if isinstance(record, dict) else None
    return not isinstance(logged, int) or logged <= step


def drop_records_after(folder: Path, step: int) -> None:
    """Cut the per-step records in run folder `folder` (`RUN_RECORDS`) back to `step`, the
    checkpoint a resumed run continues from: what an interrupted attempt logged after it would
    otherwise be in the files twice. Each file is replaced whole (written beside it, then
    renamed), so an interruption here loses nothing, and a symlink is replaced, not followed."""
    for name in RUN_RECORDS:
        path = folder / name
        if not path.is_file():
            continue
        with path.open(encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
        kept = [line for line in lines if _logged_at_or_before(line, step)]
        if len(kept) == len(lines):
            continue
        write_whole(path, "".join(line + "\n" for line in kept))
