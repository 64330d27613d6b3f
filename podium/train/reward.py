"""The reward is the pipeline's own run of each rollout.

For every completion the policy writes, `ConductorReward` has the `podium.train.score.Scorer`
do exactly what `podium ask` does with a completion the Conductor generated
(`Pipeline.run_completion`: parse it against the row's `PoolView`, where an id outside the view
is a format error; run the workflow on the pool's team with its limits, budget and response
cache, keyed by a per-rollout sample id; take the final answer; grade it with the task's own
grader), and maps the outcome to a number (`reward_of`). All the rollouts of a step run
concurrently, on the event loop TRL runs async reward functions on. TRL hands the reward each
completion's dataset columns; the `row` column is the row's index in the job's rows
(`podium.train.rollout.row`).

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

Each step logs (`podium.train.metrics`: the reward keeps the step's log in the job's
`StepRecorder`, which the trainer publishes counted over every process of the job): the correct and format-error rates, parse failures
by reason, dropped (infra) rollouts, the mean step count and the share of each count, the
worker selection ratio overall and per position, and tokens and cost per rollout. A few
rollouts per step go to `transcripts.jsonl` with their prompt, completion, workflow, answer
and reward, under the number of the step they train (metrics.jsonl's): one of each reward value
first, best first and dropped last, the policy's own and the explored ones counted apart, so a
step whose own rollouts are all wrong still shows one. A rollout's response-cache sample id
is its step, the reward call's number within the step and its place in the whole step: the
processes of a job never share a cached answer, and it never depends on when a call ran.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

from podium.outcome import Outcome
from podium.train.config import RewardSection
from podium.train.data import TrainingData
from podium.train.metrics import RolloutRecord, StepLog, StepRecorder, pick_transcripts
from podium.train.rollout.recursion import blend, per_round
from podium.train.rollout.row import RolloutInfo, Row
from podium.train.rollout.settings import RolloutSettings
from podium.train.score import Scored, Scorer

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
    """An async TRL reward function over the job's rows, scorer and step recorder."""

    __name__ = "podium"  # TRL names the reward's metrics after it

    def __init__(self, scorer: Scorer, data: TrainingData, rows: Sequence[Row],
                 spec: RewardSection, settings: RolloutSettings,
                 recorder: StepRecorder) -> None:
        self.scorer, self.data, self.rows, self.spec = scorer, data, rows, spec
        self.settings, self.recorder = settings, recorder
        self.calls: Counter[int] = Counter()  # calls made for each step so far

    async def _one(self, place: int, step: int, call: int, completion: Any, ids: Sequence[int],
                   row: Row, info: RolloutInfo) -> Scored:
        """One rollout run and graded. Its sample id, which keys its cached replies, is
        the step, the call's number within the step and `place`, its index in the whole step
        (the same however many processes share the step): never when the call ran, so that a
        rerun, a `--resume` and an overlapped run ask the cache the same questions."""
        task, item = self.data.item(row.task, row.item)
        return await self.scorer.score(row, completion_text(completion), task, item,
                                       info=info, tokens=len(ids),
                                       sample_id=f"train:{step}:{call}:{place}")

    async def __call__(self, prompts: list, completions: list, completion_ids: list,
                       row: list[int], trainer_state: Any = None,
                       podium_rollout: list[RolloutInfo] | None = None,
                       step: int | None = None, **_: Any) -> list[float | None]:
        """TRL's call: the batch's completions with the dataset's columns (`row`: each
        completion's row index), TRL's state, and what podium's rollout function says of each
        completion (`podium.train.rollout.row.RolloutInfo`). `step` is the update these
        rollouts train, which metrics.jsonl logs them under (None: the one after TRL's state's;
        with `[grpo] overlap` the trainer names a later one)."""
        if step is None:
            step = getattr(trainer_state, "global_step", 0) + 1
        call = self.calls[step]  # taken before the first await: in the order the calls came
        self.calls[step] += 1
        n = len(completions)
        infos = podium_rollout or [RolloutInfo()] * n
        rows = [self.rows[i] for i in row]
        first = self.settings.first(n)
        done = await asyncio.gather(*(
            self._one(first + i, step, call, completions[i], completion_ids[i], rows[i],
                      infos[i])
            for i in range(n)))
        rounds = [info.round for info in infos]
        rewards = [reward_of(s.outcome, self.spec, r) for s, r in zip(done, rounds, strict=True)]
        recursion = self.settings.recursion if podium_rollout is not None else None
        if recursion is not None:
            second = {j: info.pair for j, info in enumerate(infos) if info.pair >= 0}
            rewards = blend(rewards, second, recursion.discount)
            if recursion.normalisation == "per_round":
                rewards = per_round(rewards, rounds, self.settings.group)
        exploring = any(info.explored is not None for info in infos)
        explored = [bool(info.explored) for info in infos]
        if self.settings.explore_wrong == "drop":  # unscorable: no baseline, no gradient
            rewards = [None if e and not s.outcome.correct else r
                       for r, s, e in zip(rewards, done, explored, strict=True)]
        self.recorder.keep(StepLog(
            step, [RolloutRecord.of(s.outcome, s.run, explored=e, round_=r)
                   for s, e, r in zip(done, explored, rounds, strict=True)],
            self._candidates(step, [r.messages for r in rows], completions, done, rewards,
                             explored),
            explored=exploring, recursion=recursion is not None))
        return rewards

    def _candidates(self, step: int, prompts: list, completions: list, done: list[Scored],
                    rewards: list[float | None], explored: list[bool]) -> list[dict[str, Any]]:
        """This process's candidate transcripts: the `per_step` it would save alone (only
        those are rendered in full)."""
        per_step = self.recorder.per_step
        picked = pick_transcripts([{"reward": r, "explored": e, "i": i} for i, (r, e) in
                                   enumerate(zip(rewards, explored, strict=True))],
                                  per_step) if per_step else []
        out = []
        for i in (p["i"] for p in picked):
            run, outcome = done[i].run, done[i].outcome
            out.append({
                "step": step, "reward": rewards[i], "correct": outcome.correct,
                "prompt": prompts[i], "completion": completion_text(completions[i]),
                **{k: v for k, v in run.to_json().items() if k in (
                    "workflow", "answer", "rounds", "cause", "failures", "used", "notes")},
                "grade": outcome.to_json().get("grade"),
                **({"explored": True} if explored[i] else {})})
        return out
