"""A question becomes an answer: Conductor -> executor -> (recursion rounds) -> result + trace.

    async with Pipeline(load_pool()) as pipe:
        result = await pipe.ask("What is 17 * 3?")
    print(result.answer)

Round 0: the Conductor plans; if its output does not parse and `run.fallback` is on, a single
step on `run.fallback_worker` answers instead (`turn.fallback`, said plainly by the CLI). If the
Conductor call itself fails (unreachable, bad key), there is no fallback: the error is recorded
on the turn and the answer is None. Then
the executor runs the workflow. Each recursion round shows the Conductor its final answer; it
keeps it (no worker calls) or writes a new workflow whose workers may also see the previous
round's steps. A format error in a recursion round keeps the previous answer and is recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from podium.conductor import Conductor, ConductorTurn
from podium.config import Pool, RunSettings
from podium.errors import ConfigError
from podium.llm.base import ChatClient
from podium.llm.cache import ResponseCache, default_cache_path
from podium.llm.registry import build_clients
from podium.subpool import make_view
from podium.workflow.execute import Budget, ExecOptions, Team, WorkflowRun, execute_workflow
from podium.workflow.render import MessageOptions
from podium.workflow.types import Step, Workflow

FALLBACK_SUBTASK = "Answer the overall task directly, following its answer format."

Event = Callable[[str, Any], None]  # ("conductor", ConductorTurn) | ("started"/"finished", Step)


@dataclass
class Round:
    conductor: ConductorTurn
    run: WorkflowRun | None
    answer: str | None


@dataclass
class Usage:
    """What a run spent. Answers from the response cache cost nothing and count only as hits."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = 0.0  # None when some call's price is unknown
    cache_hits: int = 0

    def add(self, prompt: int, completion: int, cost: float | None, cache_hit: bool = False
            ) -> None:
        if cache_hit:
            self.cache_hits += 1
            return
        self.calls += 1
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cost = None if cost is None or self.cost is None else self.cost + cost

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class RunResult:
    question: str
    answer: str | None
    rounds: list[Round]
    wall_s: float
    stopped: str | None = None  # a budget or failure that cut the run short

    @property
    def final_round(self) -> Round:
        """The last round that ran a workflow (a kept round runs none)."""
        for rnd in reversed(self.rounds):
            if rnd.run is not None:
                return rnd
        return self.rounds[-1]

    def usage(self) -> Usage:
        u = Usage()
        for rnd in self.rounds:
            c = rnd.conductor
            if c.messages:  # a fixed workflow (a baseline) makes no Conductor call
                u.add(c.prompt_tokens, c.completion_tokens, c.cost, c.cache_hit)
            for step in rnd.run.steps if rnd.run else []:
                if step.status in ("ok", "error"):
                    u.add(step.prompt_tokens, step.completion_tokens, step.cost, step.cache_hit)
        return u

    def to_json(self) -> dict:
        u = self.usage()
        final = self.final_round
        return {
            "question": self.question,
            "answer": self.answer,
            "workflow": [
                {"worker": s.worker_name, "worker_id": s.worker, "subtask": s.subtask,
                 "access": "all" if s.access == "all" else list(s.access)}
                for s in (final.run.steps if final.run else [])
            ],
            "fallback": any(r.conductor.fallback for r in self.rounds),
            "stopped": self.stopped,
            "steps": [s.to_json() for r in self.rounds if r.run for s in r.run.steps],
            "rounds": [
                {"conductor": r.conductor.to_json(), "answer": r.answer,
                 "stopped": r.run.stopped if r.run else None}
                for r in self.rounds
            ],
            "usage": {
                "calls": u.calls,
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "total_tokens": u.total_tokens,
                "cost_usd": u.cost,
                "cache_hits": u.cache_hits,
                "wall_s": round(self.wall_s, 3),
            },
        }


def exec_options(settings: RunSettings) -> ExecOptions:
    return ExecOptions(
        final_answer=settings.final_answer,
        on_error=settings.on_step_error,
        messages=MessageOptions(
            prefill=settings.worker_prefill,
            share_agent_subtasks=settings.share_agent_subtasks,
            final_agent_knowledge=settings.final_agent_knowledge,
            previous_round_visibility=settings.previous_round_visibility,
        ),
    )


class Pipeline:
    """The Conductor and its team for one pool. Reuse it for many questions."""

    def __init__(
        self,
        pool: Pool,
        *,
        settings: RunSettings | None = None,
        clients: tuple[ChatClient, Sequence[ChatClient]] | None = None,
    ) -> None:
        self.pool = pool
        self.settings = settings or pool.run
        self.cache = None
        if clients is None and self.settings.cache:
            path = self.settings.cache_path or default_cache_path()
            self.cache = ResponseCache(path)
        conductor_client, workers = clients or build_clients(pool, cache=self.cache)
        self.team = Team(workers, [w.max_concurrency for w in pool.workers],
                         [w.price for w in pool.workers])
        constrained = pool.conductor.constrained
        if constrained is None:
            constrained = conductor_client.supports_grammar
        elif constrained and not conductor_client.supports_grammar:
            raise ConfigError(
                f"The Conductor ({pool.conductor.name}) cannot constrain its output: its backend "
                "takes no grammar. Set grammar_style for it (llama_cpp or vllm) or set "
                "constrained = false in [conductor]."
            )
        self.conductor = Conductor(conductor_client, make_view(pool.workers), self.settings,
                                   constrained=constrained)

    async def __aenter__(self) -> Pipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for client in [self.conductor.client, *self.team.clients]:
            close = getattr(client, "aclose", None)
            if close is not None:
                await close()
        if self.cache is not None:
            self.cache.close()

    def _charge(self, turn: ConductorTurn, budget: Budget) -> None:
        if turn.cache_hit:
            turn.cost = 0.0
            return
        turn.cost = self.pool.conductor.cost(turn.prompt_tokens, turn.completion_tokens)
        budget.spend(turn.prompt_tokens + turn.completion_tokens, turn.cost)

    async def _execute(self, workflow: Workflow, question: str, round_index: int,
                       previous: WorkflowRun | None, budget: Budget, sample_id: int,
                       on_event: Event | None) -> WorkflowRun:
        return await execute_workflow(
            workflow, question, self.team, options=exec_options(self.settings),
            previous_round=previous.prior_steps() if previous else (),
            round_index=round_index, sample_id=sample_id, budget=budget, on_event=on_event,
        )

    async def run_workflow(self, question: str, workflow: Workflow, *, sample_id: int = 0,
                           label: str = "fixed", on_event: Event | None = None) -> RunResult:
        """Run a given workflow (a baseline's) with this pool's executor, limits and budget;
        no Conductor call is made. The result has the same shape as `ask`'s."""
        t0 = time.perf_counter()
        s = self.settings
        budget = Budget(s.max_calls, s.max_tokens, s.max_cost)
        turn = ConductorTurn(0, [], workflow=workflow, extra={"system": label})
        run = await self._execute(workflow, question, 0, None, budget, sample_id, on_event)
        return RunResult(question, run.answer, [Round(turn, run, run.answer)],
                         time.perf_counter() - t0, run.stopped)

    async def ask(self, question: str, *, sample_id: int = 0,
                  workers: Sequence[int] | None = None,
                  on_event: Event | None = None) -> RunResult:
        """Answer one question. `sample_id` tells repeated samples of it apart (the response
        cache keys on it), e.g. the G rollouts of one training question. `workers` restricts
        the Conductor to those pool indices (a sub-pool; ids shown as `run.subpool_ids`)."""
        if not question or not question.strip():
            raise ConfigError("The question is empty. Pass the question as text, e.g. "
                              "podium ask \"What is 17 * 3?\".")
        t0 = time.perf_counter()
        s = self.settings
        budget = Budget(s.max_calls, s.max_tokens, s.max_cost)
        budget.reserve()  # the Conductor's first call is always made
        view = None if workers is None else make_view(self.pool.workers, workers, s.subpool_ids)
        turn = await self.conductor.plan(question, sample_id=sample_id, view=view)
        self._charge(turn, budget)
        if turn.workflow is None and turn.error is None and s.fallback:
            allowed = (view or self.conductor.view).pool_indices()
            worker = s.fallback_worker if s.fallback_worker in allowed else allowed[0]
            turn.fallback = True
            turn.workflow = Workflow((Step(worker, FALLBACK_SUBTASK, ()),))
        if on_event:
            on_event("conductor", turn)
        rounds: list[Round] = []
        run = None
        if turn.workflow is not None:
            run = await self._execute(turn.workflow, question, 0, None, budget, sample_id,
                                      on_event)
        rounds.append(Round(turn, run, run.answer if run else None))
        stopped = run.stopped if run else None
        for _ in range(self.settings.recursion):
            previous = rounds[-1]
            if previous.run is None or previous.answer is None:
                break  # nothing to show the Conductor
            if why := budget.reserve():
                stopped = why
                break
            turn = await self.conductor.revise(previous.conductor, previous.answer,
                                               sample_id=sample_id)
            self._charge(turn, budget)
            if on_event:
                on_event("conductor", turn)
            if turn.workflow is None:  # kept, or a format error: the previous answer stands
                rounds.append(Round(turn, None, previous.answer))
                continue
            run = await self._execute(turn.workflow, question, turn.round, previous.run, budget,
                                      sample_id, on_event)
            rounds.append(Round(turn, run, run.answer))
            stopped = run.stopped or stopped
        return RunResult(question, rounds[-1].answer, rounds, time.perf_counter() - t0,
                         stopped)
