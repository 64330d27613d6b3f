"""One rollout's workflow run and graded: what the reward, the recursion rollout and the
held-out evaluation each do with a completion the policy wrote.

`Scorer.run` does what `podium ask` does with a completion the Conductor generated: a round-0
completion goes through `Pipeline.run_completion` (parsed against its row's view: an id the row
does not show is a format error; the workflow run on the pool's team with its limits, budget
and response cache, keyed by the rollout's sample id), a recursion round's through
`Pipeline.run_revision` after the round-0 run it revises. `Scorer.score` then grades the
outcome with the task's own grader (`grade_outcome`).
"""

from __future__ import annotations

from dataclasses import dataclass

from podium.outcome import Outcome, grade_outcome
from podium.pipeline import Pipeline, RunResult
from podium.tasks.base import Item, Task
from podium.train.rollout.row import RolloutInfo, Row

OWN = RolloutInfo()  # a round-0 rollout of the policy's own


@dataclass(frozen=True)
class Scored:
    """A completion's run and its graded outcome."""

    run: RunResult
    outcome: Outcome


class Scorer:
    """Runs completions on a pool's pipeline and grades them."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    async def run(self, row: Row, text: str, *, info: RolloutInfo = OWN, tokens: int = 0,
                  sample_id: int | str = 0) -> RunResult:
        """The run of completion `text` of `row` (`info`: its round; a round-0 rollout the
        recursion rollout already ran carries its run); `tokens` is the completion's length,
        `sample_id` keys its cached replies."""
        if info.round == 1:  # a recursion round after its round-0 rollout
            assert info.prior is not None and info.round_messages is not None
            return await self.pipeline.run_revision(
                info.prior, text, messages=info.round_messages, sample_id=sample_id,
                completion_tokens=tokens, budget=row.budget)
        if info.prior is not None:  # already run by the recursion rollout
            return info.prior
        return await self.pipeline.run_completion(
            row.question, text, messages=row.messages, workers=list(row.workers) or None,
            sample_id=sample_id, completion_tokens=tokens, budget=row.budget)

    async def score(self, row: Row, text: str, task: Task, item: Item, *,
                    info: RolloutInfo = OWN, tokens: int = 0,
                    sample_id: int | str = 0) -> Scored:
        """`run`, then the outcome graded against `item` of `task`."""
        run = await self.run(row, text, info=info, tokens=tokens, sample_id=sample_id)
        return Scored(run, await grade_outcome(run.outcome, task, item))
