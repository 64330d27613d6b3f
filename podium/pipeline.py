"""A question becomes an answer: Conductor -> executor -> (recursion rounds) -> result + trace.

    async with Pipeline(load_pool()) as pipe:
        result = await pipe.ask("What is 17 * 3?")
    print(result.answer)

Round 0: the Conductor writes a workflow; if its output does not parse and `run.fallback` is on, a single
step on `run.fallback_worker` answers instead (`turn.fallback`, said plainly in every output).
If the Conductor call itself fails (unreachable, bad key), there is no fallback: the failure is
recorded on the turn and there is no answer. Then the executor runs the workflow. Each recursion
round shows the Conductor the answer that stands; it keeps it (no worker calls) or writes a new
workflow whose workers may also see the previous round's steps.

The result's `outcome` (`podium.outcome`) is the one account of the run: which answer stands
and from which round, what was used and paid, and every failure with its class. It is built
once, from the rounds, when the run is over.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from podium.conductor import Conductor, ConductorTurn
from podium.conductor.budget import BudgetCheck, RequestBudget, plan_price
from podium.conductor.view import PoolView, settings_view
from podium.config import Pool, RunSettings
from podium.errors import ConfigError
from podium.llm.base import ChatClient, Sampling
from podium.llm.cache import ResponseCache, default_cache_path
from podium.llm.registry import build_clients
from podium.outcome import Outcome, Round, build_outcome
from podium.workflow.execute import (
    Caps,
    ExecOptions,
    Execution,
    StepRecord,
    Team,
    execute_workflow,
)
from podium.workflow.render import MessageOptions
from podium.workflow.types import Step, Workflow, access_json

FALLBACK_SUBTASK = "Answer the overall task directly, following its answer format."

Event = Callable[[str, Any], None]  # ("conductor", ConductorTurn) | ("started"/"finished", Step)
AnswerRule = Callable[[Sequence[StepRecord]], "str | None"]

__all__ = ["FALLBACK_SUBTASK", "Pipeline", "Round", "RunResult", "exec_options"]


@dataclass(frozen=True)
class RunResult:
    """Everything a run did (`rounds`: every Conductor turn and step record) and what it came
    to (`outcome`)."""

    question: str
    rounds: tuple[Round, ...]
    outcome: Outcome
    wall_s: float

    @property
    def answer(self) -> str | None:
        return self.outcome.answer

    @property
    def stopped(self) -> str | None:
        return self.outcome.stopped

    @property
    def final_round(self) -> Round:
        """The round whose workflow produced the answer; without an answer, the last round
        that ran a workflow (a kept round runs none)."""
        if self.outcome.answer_round is not None:
            return self.rounds[self.outcome.answer_round]
        for rnd in reversed(self.rounds):
            if rnd.execution is not None:
                return rnd
        return self.rounds[-1]

    def to_json(self) -> dict:
        final = self.final_round
        return {
            "question": self.question,
            **self.outcome.to_json(),
            "workflow": [
                {"worker": s.worker_name, "worker_id": s.worker, "subtask": s.subtask,
                 "access": access_json(s.access)}
                for s in (final.execution.steps if final.execution else [])
            ],
            "steps": [s.to_json() for r in self.rounds if r.execution for s in r.execution.steps],
            "conductor": [
                {**r.conductor.to_json(), "answer": r.answer,
                 "stopped": r.execution.stopped if r.execution else None}
                for r in self.rounds
            ],
            "wall_s": round(self.wall_s, 3),
        }


def exec_options(settings: RunSettings, answer_sampling: Sampling | None = None) -> ExecOptions:
    return ExecOptions(
        answer_sampling=answer_sampling,
        final_answer=settings.final_answer,
        on_error=settings.on_step_error,
        messages=MessageOptions(
            prefill=settings.worker_prefill,
            share_agent_subtasks=settings.share_agent_subtasks,
            final_agent_knowledge=settings.final_agent_knowledge,
            previous_round_visibility=settings.previous_round_visibility,
            question_only=settings.worker_messages == "question",
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
        # the sampling of each workflow's last step (the answer), over its worker's own:
        # what a request to `podium serve` asks for (temperature, top_p, seed, stop,
        # max_tokens); None: every step samples as its model is configured
        self.answer_sampling: Sampling | None = None
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
        self.conductor = Conductor(conductor_client, settings_view(pool.workers, self.settings),
                                   self.settings,
                                   constrained=constrained, price=pool.conductor.price)

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

    def _spend(self, turn: ConductorTurn, caps: Caps) -> None:
        if not turn.cache_hit:
            caps.spend(turn.prompt_tokens + turn.completion_tokens, turn.cost)

    def _result(self, question: str, rounds: list[Round], stopped: str | None,
                t0: float, budget: RequestBudget | None = None) -> RunResult:
        outcome = build_outcome(rounds, stopped=stopped,
                                recursion_format_error=self.settings.recursion_format_error)
        if budget is not None:
            outcome = replace(outcome, budget=self._check(rounds, budget))
        return RunResult(question, tuple(rounds), outcome, time.perf_counter() - t0)

    def _check(self, rounds: Sequence[Round], budget: RequestBudget) -> BudgetCheck:
        """Every round's plan priced at the request's call prices, against its budget."""
        prices = budget.call_prices(self.pool.workers)
        steps = [s for r in rounds if r.execution for s in r.execution.steps]
        costs = [s.cost for s in steps if s.status in ("ok", "error")]
        known = [c for c in costs if c is not None]
        charged = sum(known) if len(known) == len(costs) else None
        return BudgetCheck(budget.amount, plan_price([s.worker for s in steps], prices),
                           charged)

    async def _execute(self, workflow: Workflow, question: str, round_index: int,
                       previous: Execution | None, caps: Caps, sample_id: int | str,
                       on_event: Event | None, stream: bool = False) -> Execution:
        """The round's workflow run. With `stream`, its last step's text is streamed to
        `on_event` as the worker writes it when that text will be the answer: in the last
        round there can be (no recursion round may follow to revise it)."""
        return await execute_workflow(
            workflow, question, self.team,
            options=exec_options(self.settings, self.answer_sampling),
            previous_round=previous.prior_steps() if previous else (),
            round_index=round_index, sample_id=sample_id, caps=caps, on_event=on_event,
            stream_answer=stream and round_index == self.settings.recursion,
        )

    async def run_workflow(self, question: str, workflow: Workflow, *, sample_id: int | str = 0,
                           label: str = "fixed", answer: AnswerRule | None = None,
                           on_event: Event | None = None,
                           stream_answer: bool = False,
                           budget: float | RequestBudget | None = None) -> RunResult:
        """Run a given workflow (a baseline's) with this pool's executor, limits and budget;
        no Conductor call is made. `answer` picks the answer from the step records (default:
        `run.final_answer`). The result has the same shape as `ask`'s. `stream_answer` and
        `budget` as for `ask`."""
        t0 = time.perf_counter()
        s = self.settings
        request = _request_budget(budget)
        caps = Caps(s.max_calls, s.max_tokens, s.max_cost)
        turn = ConductorTurn(0, [], workflow=workflow, extra={"system": label})
        run = await self._execute(workflow, question, 0, None, caps, sample_id, on_event,
                                  stream=stream_answer and answer is None)
        chosen = run.answer if answer is None else answer(run.steps)
        return self._result(question, [Round(turn, run, chosen)], run.stopped, t0, request)

    def _fallback(self, turn: ConductorTurn, view: PoolView) -> ConductorTurn:
        allowed = view.pool_indices()
        s = self.settings
        worker = s.fallback_worker if s.fallback_worker in allowed else allowed[0]
        return replace(turn, fallback=True,
                       workflow=Workflow((Step(worker, FALLBACK_SUBTASK, ()),)))

    def _view(self, workers: Sequence[int] | None,
              budget: RequestBudget | None = None) -> PoolView:
        if workers is None and (budget is None or not (self.settings.show_budget
                                                       or self.settings.hold_budget)):
            return self.conductor.view
        return settings_view(self.pool.workers, self.settings, workers, budget)

    async def ask(self, question: str, *, sample_id: int | str = 0,
                  workers: Sequence[int] | None = None,
                  on_event: Event | None = None, stream_answer: bool = False,
                  budget: float | RequestBudget | None = None) -> RunResult:
        """Answer one question. `sample_id` tells repeated samples of it apart (the response
        cache keys on it), e.g. the G rollouts of one training question. `workers` restricts
        the Conductor to those pool indices (a sub-pool; ids shown as `run.subpool_ids`).
        `on_event` gets the Conductor's turns and every step's start and end; with
        `stream_answer`, also the answer's text as its worker writes it ("text" events,
        `podium.workflow.execute.AnswerText`), where the worker can stream. `budget` (USD,
        or a `RequestBudget` with its own price list) is what the workflow's worker calls may
        cost: the Conductor is shown it with `run.show_budget`, and the outcome says whether
        the plan kept to it (`podium.conductor.budget`)."""
        _check_question(question)
        t0 = time.perf_counter()
        request = _request_budget(budget)
        view = self._view(workers, request)
        turn = await self.conductor.write(question, sample_id=sample_id, view=view)
        return await self._run(question, turn, view, sample_id, on_event, t0, stream_answer,
                               request)

    async def run_completion(self, question: str, completion: str, *, messages: list,
                             workers: Sequence[int] | None = None, sample_id: int | str = 0,
                             prompt_tokens: int = 0, completion_tokens: int = 0,
                             on_event: Event | None = None,
                             budget: float | RequestBudget | None = None) -> RunResult:
        """Run a Conductor completion sampled elsewhere (a trainer's rollout of the prompt
        `messages`) exactly as `ask` runs one the Conductor generated: the same parser, view,
        executor, limits, budget, cache and outcome."""
        _check_question(question)
        t0 = time.perf_counter()
        request = _request_budget(budget)
        view = self._view(workers, request)
        turn = self.conductor.read(completion, view, messages=messages,
                                   prompt_tokens=prompt_tokens,
                                   completion_tokens=completion_tokens)
        return await self._run(question, turn, view, sample_id, on_event, t0,
                               request=request)

    async def _run(self, question: str, turn: ConductorTurn, view: PoolView,
                   sample_id: int | str, on_event: Event | None, t0: float,
                   stream: bool = False, request: RequestBudget | None = None) -> RunResult:
        """Round 0 from the Conductor's turn, then the recursion rounds."""
        s = self.settings
        caps = Caps(s.max_calls, s.max_tokens, s.max_cost)
        caps.reserve()  # the Conductor's first call
        self._spend(turn, caps)
        if turn.workflow is None and turn.error is None and s.fallback:
            turn = self._fallback(turn, view)
        if on_event:
            on_event("conductor", turn)
        run = None
        if turn.workflow is not None:
            run = await self._execute(turn.workflow, question, 0, None, caps, sample_id,
                                      on_event, stream)
        rounds = [Round(turn, run, run.answer if run else None)]
        stopped = run.stopped if run else None
        for _ in range(s.recursion):
            last = rounds[-1]
            if last.execution is None or last.answer is None:
                break  # no new answer to show the Conductor: the one that stands is final
            if why := caps.reserve():
                stopped = why
                break
            turn = await self.conductor.revise(last.conductor, last.answer, sample_id=sample_id)
            rounds.append(await self._round(question, turn, last, caps, sample_id, on_event,
                                            stream))
            stopped = (rounds[-1].execution.stopped if rounds[-1].execution else None) or stopped
            if rounds[-1].execution is None:
                break  # kept, a format error or a failed call: the Conductor is done
        return self._result(question, rounds, stopped, t0, request)


    async def _round(self, question: str, turn: ConductorTurn, last: Round, caps: Caps,
                     sample_id: int | str, on_event: Event | None,
                     stream: bool = False) -> Round:
        """A recursion round from the Conductor's `turn`: its workflow, if it wrote one, runs
        with the previous round (`last`) visible."""
        self._spend(turn, caps)
        if on_event:
            on_event("conductor", turn)
        if turn.workflow is None:
            return Round(turn, None, None)
        run = await self._execute(turn.workflow, question, turn.round, last.execution, caps,
                                  sample_id, on_event, stream)
        return Round(turn, run, run.answer)

    async def run_revision(self, previous: RunResult, completion: str, *, messages: list,
                           sample_id: int | str = 0, prompt_tokens: int = 0,
                           completion_tokens: int = 0,
                           budget: float | RequestBudget | None = None) -> RunResult:
        """`previous` continued by one recursion round whose Conductor completion was sampled
        elsewhere (the recursion fine-tune's round-1 rollout of the prompt `messages`), run as
        `ask` runs its own recursion rounds. The budget starts from what `previous` used."""
        t0 = time.perf_counter() - previous.wall_s
        s = self.settings
        request = _request_budget(budget)
        used = previous.outcome.used
        caps = Caps(s.max_calls, s.max_tokens, s.max_cost, used.calls, used.total_tokens,
                      used.cost or 0.0)
        last = previous.rounds[-1]
        turn = self.conductor.read(completion, last.conductor.view or self.conductor.view,
                                   index=last.conductor.round + 1, messages=messages,
                                   allow_empty=True, prompt_tokens=prompt_tokens,
                                   completion_tokens=completion_tokens)
        caps.reserve()
        rnd = await self._round(previous.question, turn, last, caps, sample_id, None)
        stopped = (rnd.execution.stopped if rnd.execution else None) or previous.stopped
        return self._result(previous.question, [*previous.rounds, rnd], stopped, t0, request)


def _request_budget(budget: float | RequestBudget | None) -> RequestBudget | None:
    if budget is None or isinstance(budget, RequestBudget):
        return budget
    return RequestBudget(float(budget))


def _check_question(question: str) -> None:
    if not question or not question.strip():
        raise ConfigError("The question is empty. Pass the question as text, e.g. "
                          "podium ask \"What is 17 * 3?\".")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError as exc:  # undecodable bytes from argv or a file (surrogates)
        raise ConfigError(f"The question holds bytes that are not UTF-8 text (character "
                          f"{exc.start}). Pass UTF-8 text: check the file's encoding, or the "
                          "terminal's locale (e.g. LANG=C.UTF-8).") from None
