"""The reward is the pipeline's own run of each rollout.

For every completion the policy writes, `ConductorReward` does exactly what `podium ask` does
with a completion the Conductor generated (`Pipeline.run_completion`): parse it against the
row's `PoolView` (an id outside the view is a format error), run the workflow on the pool's
team with its limits, budget and response cache (keyed by a per-rollout sample id), take the
final answer; then it grades the answer with the task's own grader (`grade_outcome`) and maps
the outcome to a number (`reward_of`). All the rollouts of a step run concurrently, on the
event loop TRL runs async reward functions on.

Rewards (PAPER.md §5, D1, D9):

    outcome                                        paper   code
    not a valid workflow (or an id out of view)     0       0
    a workflow, wrong or no answer                  0.5     0.5
    a workflow, right answer                        1       1.5

A rollout touched by a worker or infrastructure failure anywhere (an endpoint down, a grader
crash; `podium.outcome`) is not the policy's doing: with `on_infra_failure = "drop"` its reward
is None, which TRL treats as unscorable (left out of its group's mean and std, advantage 0),
and it is counted; with `"zero"` it scores 0, as in the reference code. An optional cost term
subtracts `cost_weight x cost / cost_scale` (the rollout's list-price cost, the Conductor's own
tokens included); an optional call penalty takes `extra_call_penalty` off a right answer for
each worker call beyond the first, so that among right plans the shortest wins, while a wrong
longer plan costs no more than a wrong shorter one (exploring two steps stays free). With a
`[budget]`, a plan whose list price passes its row's budget scores as a wrong answer
(`over_budget = "wrong"`) or a format error (`"zero"`), whatever its answer.

Each step logs (`podium.train.metrics`, counted over every process of the job, then through
TRL's `log_metric`): the correct and format-error rates, parse failures
by reason, dropped (infra) rollouts, the mean step count and the share of each count, the
worker selection ratio overall and per position, and tokens and cost per rollout. A few
rollouts per step go to `transcripts.jsonl` with their prompt, completion, workflow, answer
and reward, under the number of the step they train (metrics.jsonl's): one of each reward value
first, best first and dropped last, the policy's own and the explored ones counted apart, so a
step whose own rollouts are all wrong still shows one. A rollout's response-cache sample id
is its place in the whole step, so the processes of a job never share a cached answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from podium.outcome import Outcome, grade_outcome
from podium.pipeline import Pipeline, RunResult
from podium.train.config import RecursionSection, RewardSection
from podium.train.data import TrainingData, budget_of
from podium.train.metrics import RolloutRecord, StepLog, pick_transcripts
from podium.train.metrics import publish as publish_step
from podium.train.recursion import blend, per_round
from podium.train.rollout_info import RolloutInfo

SCHEMES: dict[str, tuple[float, float, float]] = {  # (format error, wrong, right)
    "paper": (0.0, 0.5, 1.0),
    "code": (0.0, 0.5, 1.5),
}


def reward_of(outcome: Outcome, spec: RewardSection, round_: int = 0) -> float | None:
    """The reward of a graded outcome for the completion of round `round_` (None:
    unscorable, dropped from the loss). A round-1 completion is a format error when its own
    output does not parse, whatever round 0 did."""
    fmt, wrong, right = SCHEMES[spec.scheme]
    if any(f.cls != "model" for f in outcome.failures) or outcome.status == "error":
        return None if spec.on_infra_failure == "drop" else fmt
    if round_:
        bad = any(r.round == round_ and r.decision == "format_error" for r in outcome.rounds)
    else:
        bad = outcome.format_error
    reward = fmt if bad else (right if outcome.correct else wrong)
    if outcome.over_budget and not bad:
        reward = wrong if spec.over_budget == "wrong" else fmt
    if outcome.correct and not bad and not outcome.over_budget and spec.extra_call_penalty:
        reward -= spec.extra_call_penalty * max(outcome.worker_calls - 1, 0)
    if spec.cost_weight and outcome.used.cost is not None:
        reward -= spec.cost_weight * outcome.used.cost / spec.cost_scale
    return reward


def completion_text(completion: Any) -> str:
    """A TRL completion: a string, or a conversation whose messages' contents are joined."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion)


class ConductorReward:
    """An async TRL reward function over a pool's pipeline and the training data."""

    __name__ = "podium"  # TRL names the reward's metrics after it

    def __init__(self, pipeline: Pipeline, data: TrainingData, spec: RewardSection, *,
                 transcripts: Path | None = None, per_step: int = 2,
                 recursion: RecursionSection | None = None, group: int = 1,
                 explore_wrong: str = "keep") -> None:
        self.pipeline = pipeline
        self.data = data
        self.spec = spec
        self.transcripts = transcripts
        self.per_step = per_step
        self.recursion = recursion
        self.group = group
        self.explore_wrong = explore_wrong
        self.calls = 0
        self.rank = 0  # this process's rank in the training job, set by the trainer
        self.deferred = False  # True: keep each step's StepLog for the trainer to publish
        self.pending: StepLog | None = None

    async def run_round0(self, row: dict[str, Any], text: str, n_tokens: int,
                         sample_id: str) -> RunResult:
        """One rollout's round-0 run (the recursion rollout asks for it before round 1)."""
        return await self.pipeline.run_completion(
            row["question"], text, messages=row["messages"], workers=row["workers"] or None,
            sample_id=sample_id, completion_tokens=n_tokens,
            budget=budget_of(row.get("budget")))

    async def _one(self, place: int, step: int, completion: Any, ids: Sequence[int],
                   row: dict[str, Any]) -> tuple[RunResult, Outcome]:
        """One rollout run and graded; `place` is its index in the whole step (the same
        however many processes share the step), which keys its cached replies."""
        task, item = self.data.item(row["task"], row["item"])
        text, sample_id = completion_text(completion), f"train:{step}:{self.calls}:{place}"
        if row["round"] == 1:  # a recursion round after its round-0 rollout
            run = await self.pipeline.run_revision(row["prior"], text,
                                                   messages=row["round_messages"],
                                                   sample_id=sample_id,
                                                   completion_tokens=len(ids),
                                                   budget=budget_of(row.get("budget")))
        elif row["prior"] is not None:  # already run by the recursion rollout
            run = row["prior"]
        else:
            run = await self.run_round0(row, text, len(ids), sample_id)
        return run, await grade_outcome(run.outcome, task, item)

    async def __call__(self, prompts: list, completions: list, completion_ids: list,
                       messages: list, question: list, task: list, item: list, workers: list,
                       budget: list | None = None, trainer_state: Any = None, log_metric: Callable | None = None,
                       podium_rollout: list[RolloutInfo] | None = None,
                       **_: Any) -> list[float | None]:
        """TRL's call: the batch's completions with the dataset's columns (`messages` ...
        `workers`, one per completion), TRL's state and metric logger, and what podium's
        rollout function says of each completion (`podium.train.rollout_info`)."""
        # the update these rollouts feed: metrics.jsonl logs it under the same number
        step = getattr(trainer_state, "global_step", 0) + 1
        n = len(completions)
        infos = podium_rollout or [RolloutInfo()] * n
        rounds = [info.round for info in infos]
        budgets = budget or [""] * n
        rows = [{"messages": m, "question": q, "task": t, "item": it, "workers": w,
                 "budget": b, "round": info.round, "prior": info.prior,
                 "round_messages": info.round_messages}
                for m, q, t, it, w, b, info in zip(
                    messages, question, task, item, workers, budgets, infos, strict=True)]
        done = await asyncio.gather(*(
            self._one(self.rank * n + i, step, completions[i], completion_ids[i], rows[i]) for i in range(n)))
        self.calls += 1
        outcomes = [o for _, o in done]
        rewards = [reward_of(o, self.spec, r) for o, r in zip(outcomes, rounds, strict=True)]
        recursion = self.recursion if podium_rollout is not None else None
        if recursion is not None:
            second = {j: info.pair for j, info in enumerate(infos) if info.pair >= 0}
            rewards = blend(rewards, second, recursion.discount)
            if recursion.normalisation == "per_round":
                rewards = per_round(rewards, rounds, self.group)
        exploring = any(info.explored is not None for info in infos)
        explored = [bool(info.explored) for info in infos]
        if self.explore_wrong == "drop":  # unscorable: no baseline, no gradient
            rewards = [None if e and not o.correct else r
                       for r, o, e in zip(rewards, outcomes, explored, strict=True)]
        log = StepLog(step, [RolloutRecord.of(o, run, explored=e, round_=r)
                             for (run, o), e, r in zip(done, explored, rounds, strict=True)],
                      self._candidates(step, messages, completions, done, rewards, explored),
                      explored=exploring, recursion=recursion is not None)
        if self.deferred:  # the trainer gathers it from every process (PodiumGRPOTrainer)
            self.pending = log
        else:
            publish_step(log, log_metric=log_metric, transcripts=self.transcripts,
                         per_step=self.per_step)
        return rewards

    def publish(self, gather: Callable, log_metric: Callable) -> None:
        """Publish the pending step log gathered from every process (`gather`: an all-gather
        of a list, such as accelerate's `gather_object`); transcripts are written where
        `transcripts` is set (the main process)."""
        log, self.pending = self.pending, None
        if log is not None:
            publish_step(log, gather=gather, log_metric=log_metric,
                         transcripts=self.transcripts, per_step=self.per_step)

    def _candidates(self, step: int, prompts: list, completions: list,
                    done: list[tuple[RunResult, Outcome]], rewards: list[float | None],
                    explored: list[bool]) -> list[dict[str, Any]]:
        """This process's candidate transcripts: the `per_step` it would save alone (only
        those are rendered in full)."""
        picked = pick_transcripts([{"reward": r, "explored": e, "i": i} for i, (r, e) in
                                   enumerate(zip(rewards, explored, strict=True))],
                                  self.per_step) if self.per_step else []
        out = []
        for i in (p["i"] for p in picked):
            run, outcome = done[i]
            out.append({
                "step": step, "reward": rewards[i], "correct": outcome.correct,
                "prompt": prompts[i], "completion": completion_text(completions[i]),
                **{k: v for k, v in run.to_json().items() if k in (
                    "workflow", "answer", "rounds", "cause", "failures", "used", "notes")},
                "grade": outcome.to_json().get("grade"),
                **({"explored": True} if explored[i] else {})})
        return out
