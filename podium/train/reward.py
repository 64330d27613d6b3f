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
longer plan costs no more than a wrong shorter one (exploring two steps stays free).

Each step logs, through TRL's `log_metric`: the correct and format-error rates, parse failures
by reason, dropped (infra) rollouts, the mean step count and the share of each count, the
worker selection ratio overall and per position, and tokens and cost per rollout. A few
rollouts per step go to `transcripts.jsonl` with their prompt, completion, workflow, answer
and reward, under the number of the step they train (metrics.jsonl's): one of each reward value
first, best first and dropped last, the policy's own and the explored ones counted apart, so a
step whose own rollouts are all wrong still shows one.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from podium.outcome import Outcome, grade_outcome
from podium.pipeline import Pipeline, RunResult
from podium.train.config import RecursionSection, RewardSection
from podium.train.data import TrainingData
from podium.train.recursion import blend, per_round

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
    if outcome.correct and not bad and spec.extra_call_penalty:
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

    async def run_round0(self, row: dict[str, Any], text: str, n_tokens: int,
                         sample_id: str) -> RunResult:
        """One rollout's round-0 run (the recursion rollout asks for it before round 1)."""
        return await self.pipeline.run_completion(
            row["question"], text, messages=row["messages"], workers=row["workers"] or None,
            sample_id=sample_id, completion_tokens=n_tokens)

    async def _one(self, i: int, step: int, completion: Any, ids: Sequence[int],
                   row: dict[str, Any]) -> tuple[RunResult, Outcome]:
        task, item = self.data.item(row["task"], row["item"])
        text, sample_id = completion_text(completion), f"train:{step}:{self.calls}:{i}"
        if row["round"] == 1:  # a recursion round after its round-0 rollout
            run = await self.pipeline.run_revision(row["prior"], text,
                                                   messages=row["round_messages"],
                                                   sample_id=sample_id,
                                                   completion_tokens=len(ids))
        elif row["prior"] is not None:  # already run by the recursion rollout
            run = row["prior"]
        else:
            run = await self.run_round0(row, text, len(ids), sample_id)
        return run, await grade_outcome(run.outcome, task, item)

    async def __call__(self, prompts: list, completions: list, completion_ids: list,
                       messages: list, question: list, task: list, item: list, workers: list,
                       trainer_state: Any = None, log_metric: Callable | None = None,
                       podium_round: list | None = None, podium_prior: list | None = None,
                       podium_round_messages: list | None = None,
                       podium_pair: list | None = None, podium_explored: list | None = None,
                       **_: Any) -> list[float | None]:
        # the update these rollouts feed: metrics.jsonl logs it under the same number
        step = getattr(trainer_state, "global_step", 0) + 1
        n = len(completions)
        rounds = podium_round or [0] * n
        rows = [{"messages": m, "question": q, "task": t, "item": it, "workers": w,
                 "round": r, "prior": p, "round_messages": rm}
                for m, q, t, it, w, r, p, rm in zip(
                    messages, question, task, item, workers, rounds, podium_prior or [None] * n,
                    podium_round_messages or [None] * n, strict=True)]
        done = await asyncio.gather(*(
            self._one(i, step, completions[i], completion_ids[i], rows[i]) for i in range(n)))
        self.calls += 1
        outcomes = [o for _, o in done]
        rewards = [reward_of(o, self.spec, r) for o, r in zip(outcomes, rounds, strict=True)]
        if podium_pair and self.recursion is not None:
            second = {j: i for j, i in enumerate(podium_pair) if i >= 0}
            rewards = blend(rewards, second, self.recursion.discount)
            if log_metric is not None:
                for name, value in recursion_metrics(outcomes, rounds).items():
                    log_metric(name, value)
            if self.recursion.normalisation == "per_round":
                rewards = per_round(rewards, rounds, self.group)
        explored = podium_explored or [False] * n
        if self.explore_wrong == "drop":  # unscorable: no baseline, no gradient
            rewards = [None if e and not o.correct else r
                       for r, o, e in zip(rewards, outcomes, explored, strict=True)]
        if log_metric is not None:  # the policy's own rollouts; the explored ones apart
            own = [i for i in range(n) if not explored[i]]
            for name, value in rollout_metrics([outcomes[i] for i in own],
                                               [done[i][0] for i in own]).items():
                log_metric(name, value)
            if podium_explored:
                tried = [outcomes[i] for i in range(n) if explored[i]]
                log_metric("podium/explored", len(tried) / n)
                log_metric("podium/explored_correct",
                           sum(o.correct for o in tried) / (len(tried) or 1))
        if self.transcripts is not None and self.per_step:
            self._save(step, messages, completions, done, rewards, explored)
        return rewards

    def _save(self, step: int, prompts: list, completions: list,
              done: list[tuple[RunResult, Outcome]], rewards: list[float | None],
              explored: list[bool]) -> None:
        first = {}  # one rollout of each reward value, own and explored apart; best first
        for i in sorted(range(len(done)), key=lambda i: (
                float("inf") if rewards[i] is None else -rewards[i], explored[i])):
            first.setdefault((rewards[i], explored[i]), i)
        picked = list(first.values())
        picked = (picked + [i for i in range(len(done)) if i not in picked])[:self.per_step]
        with self.transcripts.open("a", encoding="utf-8") as fh:  # type: ignore[union-attr]
            for i in picked:
                run, outcome = done[i]
                fh.write(json.dumps({
                    "step": step, "reward": rewards[i], "correct": outcome.correct,
                    "prompt": prompts[i], "completion": completion_text(completions[i]),
                    **{k: v for k, v in run.to_json().items() if k in (
                        "workflow", "answer", "rounds", "cause", "failures", "used",
                        "notes")},
                    "grade": outcome.to_json().get("grade"),
                    **({"explored": True} if explored[i] else {}),
                }, ensure_ascii=False) + "\n")


def rollout_metrics(outcomes: list[Outcome], runs: list[RunResult]) -> dict[str, float]:
    """Per-step numbers for the training log (each a share of the step's rollouts unless the
    name says otherwise)."""
    n = len(outcomes) or 1
    out: dict[str, float] = {
        "podium/correct": sum(o.correct for o in outcomes) / n,
        "podium/format_error": sum(o.format_error for o in outcomes) / n,
        "podium/infra_dropped": sum(any(f.cls != "model" for f in o.failures)
                                    for o in outcomes) / n,
        "podium/tokens_per_rollout": sum(o.used.total_tokens for o in outcomes) / n,
    }
    costs = [o.used.cost for o in outcomes]
    if all(c is not None for c in costs):
        out["podium/cost_per_rollout"] = sum(costs) / n  # type: ignore[arg-type]
    for (_, reason), count in Counter(
            p for o in outcomes for p in o.parse_failures()).items():
        out[f"podium/parse/{reason}"] = count / n
    workflows = [r.rounds[0].conductor.workflow for r in runs]
    steps = [len(w) for w in workflows if w is not None]
    if steps:
        out["podium/steps_mean"] = sum(steps) / len(steps)
        for k, count in Counter(steps).items():
            out[f"podium/steps/{k}"] = count / len(steps)
    picks: Counter = Counter()
    by_position: Counter = Counter()
    for r in runs:
        for s in r.rounds[0].run.steps if r.rounds[0].run else ():
            picks[s.worker_name] += 1
            by_position[(s.index, s.worker_name)] += 1
    total = sum(picks.values())
    for name, count in picks.items():
        out[f"podium/worker/{name}"] = count / total
    for (pos, name), count in by_position.items():
        at = sum(c for (p, _), c in by_position.items() if p == pos)
        out[f"podium/worker_at_{pos}/{name}"] = count / at
    return out


def recursion_metrics(outcomes: list[Outcome], rounds: list[int]) -> dict[str, float]:
    """Keep-versus-revise in the round-1 rollouts: each decision's share and accuracy."""
    decided: dict[str, list[bool]] = {}
    for o, r in zip(outcomes, rounds, strict=True):
        if r == 1:
            decided.setdefault(o.rounds[-1].decision, []).append(o.correct)
    total = sum(len(v) for v in decided.values()) or 1
    out: dict[str, float] = {}
    for decision, correct in decided.items():
        out[f"podium/recursion/{decision}"] = len(correct) / total
        out[f"podium/recursion/{decision}_correct"] = sum(correct) / len(correct)
    return out
