"""A question becomes an answer: Conductor -> executor -> (recursion rounds) -> result + trace.

    async with Pipeline(load_pool()) as pipe:
        result = await pipe.ask("What is 17 * 3?")
    print(result.answer)

Round 0: the Conductor writes a workflow; if its output does not parse and `run.fallback` is
on, a single step on `run.fallback_worker` answers instead (`turn.fallback`, said plainly in every output).
If the Conductor call itself fails (unreachable, bad key), there is no fallback: the failure is
recorded on the turn and there is no answer. Then the executor runs the workflow. Each recursion
round shows the Conductor the answer that stands; it keeps it (no worker calls) or writes a new
workflow whose workers may also see the previous round's steps.

Every way in ends in the one rounds loop (`Pipeline._rounds`): `ask` (the Conductor writes
round 0), `run_completion` (a completion sampled elsewhere, a training rollout, is round 0),
`run_workflow` (a given workflow, a baseline's, is the only round) and `run_revision` (one
more recursion round after a finished run). `variant` makes the pipeline one request runs on:
its own settings (`podium.settings`) and answer sampling, the same clients.

The result's `outcome` (`podium.outcome`) is the one account of the run: which answer stands
and from which round, what was used and paid, and every failure with its class. It is built
once, from the rounds, when the run is over.

**Tools.** `ask(question, tools=...)` plans the question with the tools' names and
descriptions appended (`podium.conductor.prompt.with_tools`: the Conductor and every worker
see that task) and runs one round (no recursion). The workflow's last step acts: its worker
gets the tools, and only a worker whose pool entry says `tools = true` and whose client takes
tools can act. A constrained Conductor's grammar admits only such a worker for the last step
(`actors`: `podium.conductor.grammar`'s `last_ids`); a plan from an unconstrained one whose
last worker cannot act falls back (as `run.fallback` does) to the first capable worker
answering alone, said in the outcome's notes; a pool (or sub-pool) with
no capable worker is a ConfigError. When the acting step calls tools, the result's
`tool_calls` are the team's reply and its `acting` state is what `continue_acting` takes, with
the tool results, to call that worker once more: no Conductor, no other step.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from podium.acting import ActingState
from podium.conductor import Conductor, ConductorTurn
from podium.conductor.budget import BudgetCheck, RequestBudget, plan_price
from podium.conductor.prompt import with_tools
from podium.conductor.view import PoolView, settings_view
from podium.config import Pool, RunSettings
from podium.errors import ConfigError
from podium.llm.base import ChatClient, Message, Sampling, load_client
from podium.llm.cache import ResponseCache, default_cache_path
from podium.llm.registry import build_clients
from podium.llm.tools import ToolCall, ToolUse
from podium.outcome import Outcome, Round, build_outcome
from podium.workflow.execute import (
    Caps,
    Conversation,
    ExecOptions,
    Execution,
    StepRecord,
    Team,
    call_step,
    execute_workflow,
)
from podium.workflow.render import MessageOptions
from podium.workflow.types import Step, Workflow, access_json

FALLBACK_SUBTASK = "Answer the overall task directly, following its answer format."
CONTINUE_SUBTASK = "Continue with the results of the tool calls."

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
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The acting step's tool calls: the team's reply when there are any."""
        return self.outcome.tool_calls

    @property
    def acting(self) -> ActingState | None:
        """What `Pipeline.continue_acting` takes when the run ended in tool calls."""
        return self.outcome.acting

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


def exec_options(settings: RunSettings, answer_sampling: Sampling | None = None,
                 tools: ToolUse | None = None,
                 conversation: Conversation | None = None) -> ExecOptions:
    options = ExecOptions(
        answer_sampling=answer_sampling,
        conversation=conversation,
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
    if tools is None:
        return options
    return replace(options, tools=tuple(tools.tools), tool_choice=tools.choice,
                   parallel_tool_calls=tools.parallel_calls)


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

    async def load(self) -> None:
        """Load what the Conductor's and workers' first calls would (the embedded model's
        GGUF), before any question: `podium serve` does it before it takes requests."""
        for client in [self.conductor.client, *self.team.clients]:
            await load_client(client)

    async def aclose(self) -> None:
        for client in [self.conductor.client, *self.team.clients]:
            close = getattr(client, "aclose", None)
            if close is not None:
                await close()
        if self.cache is not None:
            self.cache.close()

    def variant(self, settings: RunSettings | None = None,
                answer_sampling: Sampling | None = None) -> Pipeline:
        """This pipeline for one request: its own run settings (`podium.settings` resolves
        them) and its answer step's sampling, sharing this pipeline's clients, cache, team
        and Conductor (whose prompt settings stay this pipeline's). Close the pipeline it
        came from, not the variant."""
        if settings is None and answer_sampling is None:
            return self
        other = copy.copy(self)
        other.settings = settings or self.settings
        other.answer_sampling = answer_sampling
        return other

    async def ask(self, question: str, *, sample_id: int | str = 0,
                  workers: Sequence[int] | None = None,
                  on_event: Event | None = None, stream_answer: bool = False,
                  budget: float | RequestBudget | None = None,
                  tools: ToolUse | None = None,
                  conversation: Conversation | None = None) -> RunResult:
        """Answer one question. `sample_id` tells repeated samples of it apart (the response
        cache keys on it), e.g. the G rollouts of one training question. `workers` restricts
        the Conductor to those pool indices (a sub-pool; ids shown as `run.subpool_ids`).
        `on_event` gets the Conductor's turns and every step's start and end; with
        `stream_answer`, also the answer's text as its worker writes it ("text" events,
        `podium.workflow.execute.AnswerText`), where the worker can stream. `budget` (USD,
        or a `RequestBudget` with its own price list) is what the workflow's worker calls may
        cost: the Conductor is shown it with `run.show_budget`, and the outcome says whether
        the plan kept to it (`podium.conductor.budget`). `tools` (e.g. a
        `podium.serve.tools.ToolUse`) are what the answer step may call: see the module
        docstring; the result's `tool_calls` and `acting` say what it called. `conversation`
        (a served conversation's earlier turns and last question; `question` is then the
        conversation flattened) goes to each workflow's answer step only: it gets the turns as
        chat turns and the last question as its task."""
        q = self._question(question, sample_id, workers, budget, on_event, stream_answer,
                           tools=tools if tools is not None and tools.tools else None,
                           conversation=conversation)
        q.caps.reserve()  # the Conductor's call
        actors = [shown for shown, k in q.view.to_pool if self._can_act(k)] if q.tools else None
        turn = await self.conductor.write(q.question, sample_id=sample_id, view=q.view,
                                          actors=actors)
        return await self._rounds(q, turn, [], 0 if q.tools else self.settings.recursion)

    async def continue_acting(self, state: ActingState, exchange: Sequence[Message],
                              tools: ToolUse, *, on_event: Event | None = None,
                              budget: float | RequestBudget | None = None) -> RunResult:
        """The run that ended in `state`'s tool calls, continued: the acting worker is called
        once more with its messages, then `exchange` (the assistant message with its tool
        calls and the `tool` messages with their results, in Chat Completions' shape), and
        `tools`. No Conductor call, no other step. The result's answer is the reply's text,
        or its `tool_calls` are new calls (and its `acting` state continues them). `budget`
        as for `ask`: the outcome says whether this call kept to it."""
        _check_exchange(exchange)
        if not 0 <= state.worker < len(self.team) or not self._can_act(state.worker):
            raise ConfigError(f"The acting state names worker {state.worker} "
                              f"({state.worker_name}), which cannot act in this pool: its pool "
                              "entry needs tools = true and a backend that takes tools.")
        q = replace(self._question(state.question, state.sample_id, None, budget, on_event),
                    tools=tools)  # (the task already holds the tools' block)
        step = Step(state.worker, CONTINUE_SUBTASK, ())
        rec = StepRecord(0, state.worker, self.team.clients[state.worker].name, step.subtask,
                         step.access, state.round,
                         messages=[*state.messages, *(dict(m) for m in exchange)])
        t0 = time.perf_counter()
        if why := q.caps.reserve():
            rec.status, rec.error = "skipped", why
        else:
            await call_step(rec, self.team, exec_options(self.settings, self.answer_sampling,
                                                         tools),
                            answer=True, sample_id=f"{state.sample_id}:continue", caps=q.caps,
                            emit=on_event, t0=t0)
            if on_event:
                on_event("finished", rec)
        answer = rec.response if rec.status == "ok" else None
        execution = Execution(Workflow((step,)), [rec], answer, why or None,
                              time.perf_counter() - t0)
        turn = ConductorTurn(state.round, [], workflow=execution.workflow,
                             extra={"system": "continuation"})
        result = self._result(q, [Round(turn, execution, answer)], why or None)
        acting = result.outcome.acting
        if acting is not None:  # the same run's trace goes on
            result = replace(result, outcome=replace(
                result.outcome, acting=replace(acting, trace_id=state.trace_id)))
        return result

    async def run_completion(self, question: str, completion: str, *, messages: list,
                             workers: Sequence[int] | None = None, sample_id: int | str = 0,
                             prompt_tokens: int = 0, completion_tokens: int = 0,
                             on_event: Event | None = None,
                             budget: float | RequestBudget | None = None) -> RunResult:
        """Run a Conductor completion sampled elsewhere (a trainer's rollout of the prompt
        `messages`) exactly as `ask` runs one the Conductor generated: the same parser, view,
        executor, caps, budget, cache, recursion rounds and outcome."""
        q = self._question(question, sample_id, workers, budget, on_event)
        q.caps.reserve()  # the Conductor's call, made elsewhere
        turn = self.conductor.read(completion, q.view, messages=messages,
                                   prompt_tokens=prompt_tokens,
                                   completion_tokens=completion_tokens)
        return await self._rounds(q, turn, [], self.settings.recursion)

    async def run_workflow(self, question: str, workflow: Workflow, *, sample_id: int | str = 0,
                           label: str = "fixed", answer: AnswerRule | None = None,
                           on_event: Event | None = None,
                           stream_answer: bool = False,
                           budget: float | RequestBudget | None = None,
                           conversation: Conversation | None = None) -> RunResult:
        """Run a given workflow (a baseline's) with this pool's executor, caps and budget, as
        one round: no Conductor call is made. `answer` picks the answer from the step records
        (default: `run.final_answer`). The result has the same shape as `ask`'s.
        `stream_answer`, `budget` and `conversation` as for `ask`."""
        q = self._question(question, sample_id, None, budget, on_event,
                           stream_answer and answer is None, answer,
                           conversation=conversation)
        turn = ConductorTurn(0, [], workflow=workflow, extra={"system": label})
        return await self._rounds(q, turn, [], 0)

    async def run_revision(self, previous: RunResult, completion: str, *, messages: list,
                           sample_id: int | str = 0, prompt_tokens: int = 0,
                           completion_tokens: int = 0,
                           budget: float | RequestBudget | None = None) -> RunResult:
        """`previous` continued by one recursion round whose Conductor completion was sampled
        elsewhere (the recursion fine-tune's round-1 rollout of the prompt `messages`), run as
        `ask` runs its own recursion rounds. The caps start from what `previous` used."""
        last = previous.rounds[-1]
        view = last.conductor.view or self.conductor.view
        q = self._question(previous.question, sample_id, None, budget, None, view=view,
                           used=previous)
        q.caps.reserve()  # the Conductor's revision call, made elsewhere
        turn = self.conductor.read(completion, view, index=last.conductor.round + 1,
                                   messages=messages, allow_empty=True,
                                   prompt_tokens=prompt_tokens,
                                   completion_tokens=completion_tokens)
        return await self._rounds(q, turn, list(previous.rounds), 0, previous.stopped)

    def _question(self, question: str, sample_id: int | str, workers: Sequence[int] | None,
                  budget: float | RequestBudget | None, on_event: Event | None,
                  stream: bool = False, answer: AnswerRule | None = None,
                  view: PoolView | None = None, used: RunResult | None = None,
                  tools: ToolUse | None = None,
                  conversation: Conversation | None = None) -> _Question:
        _check_question(question)
        request = _request_budget(budget)
        view = view or self._view(workers, request)
        if tools is not None:
            self._capable(view)
            question = with_tools(question, tools.tools)
            if conversation is not None:
                conversation = replace(conversation, last_question=with_tools(
                    conversation.last_question, tools.tools))
        s = self.settings
        caps = Caps(s.max_calls, s.max_tokens, s.max_cost)
        t0 = time.perf_counter()
        if used is not None:
            u = used.outcome.used
            caps = Caps(s.max_calls, s.max_tokens, s.max_cost, u.calls, u.total_tokens,
                        u.cost or 0.0)
            t0 -= used.wall_s
        return _Question(question, sample_id, view, caps, request, on_event, stream, answer,
                         t0, tools, conversation)

    async def _rounds(self, q: _Question, turn: ConductorTurn, rounds: list[Round],
                      revisions: int, stopped: str | None = None) -> RunResult:
        """The one rounds loop: `turn`'s round, then up to `revisions` recursion rounds.
        Each shows the Conductor the answer that stands; it keeps it (no worker calls) or
        writes a new workflow. The loop ends at a round that runs no workflow or gives no
        answer, or when a cap leaves no call for the Conductor."""
        while True:
            rnd = await self._round(q, turn, rounds[-1] if rounds else None,
                                    final=revisions == 0)
            rounds.append(rnd)
            stopped = (rnd.execution.stopped if rnd.execution else None) or stopped
            if revisions == 0 or rnd.execution is None or rnd.answer is None:
                break  # no new answer to show the Conductor: the one that stands is final
            if why := q.caps.reserve():
                stopped = why
                break
            revisions -= 1
            turn = await self.conductor.revise(rnd.conductor, rnd.answer,
                                               sample_id=q.sample_id)
        return self._result(q, rounds, stopped)

    async def _round(self, q: _Question, turn: ConductorTurn, last: Round | None,
                     final: bool) -> Round:
        """One round from the Conductor's `turn`: round 0 falls back to one step when the
        Conductor wrote nothing that parses (`run.fallback`); a recursion round's workflow
        runs with the previous round (`last`) visible. With streaming asked for, the last
        step's text is streamed when it will be the answer: in the `final` round there can
        be (no recursion round may follow to revise it)."""
        s = self.settings
        if not turn.cache_hit:
            q.caps.spend(turn.prompt_tokens + turn.completion_tokens, turn.cost)
        if last is None and turn.workflow is None and turn.error is None and s.fallback:
            turn = self._fallback(turn, q.view, acting=q.tools is not None)
        if q.tools is not None and turn.workflow is not None \
                and not self._can_act(k := turn.workflow.steps[-1].worker):
            turn = self._fallback(turn, q.view, acting=True)
            turn.extra["cannot_act"] = f"worker {k} ({self.team.clients[k].name})"
        if q.on_event:
            q.on_event("conductor", turn)
        if turn.workflow is None:
            return Round(turn, None, None)
        previous = last.execution if last else None
        execution = await execute_workflow(
            turn.workflow, q.question, self.team,
            options=exec_options(s, self.answer_sampling, q.tools, q.conversation),
            previous_round=previous.prior_steps() if previous else (),
            round_index=turn.round, sample_id=q.sample_id, caps=q.caps, on_event=q.on_event,
            stream_answer=q.stream and final,
        )
        answer = execution.answer if q.answer is None else q.answer(execution.steps)
        return Round(turn, execution, answer)

    def _fallback(self, turn: ConductorTurn, view: PoolView,
                  acting: bool = False) -> ConductorTurn:
        """`turn` with one step answering instead: on `run.fallback_worker` (when the view
        shows it), else the view's first worker; `acting`: on the first that can act."""
        allowed = view.pool_indices()
        s = self.settings
        worker = s.fallback_worker if s.fallback_worker in allowed else allowed[0]
        if acting:
            worker = self._capable(view)[0]
        return replace(turn, fallback=True, extra=dict(turn.extra),
                       workflow=Workflow((Step(worker, FALLBACK_SUBTASK, ()),)))

    def _can_act(self, worker: int) -> bool:
        """Whether `worker` may act with tools: `tools = true` in its pool entry and a client
        that takes them."""
        return bool(self.pool.workers[worker].tools
                    and getattr(self.team.clients[worker], "supports_tools", False))

    def _capable(self, view: PoolView) -> list[int]:
        """The workers of `view` that can act; ConfigError when there is none."""
        capable = [i for i in view.pool_indices() if self._can_act(i)]
        if not capable:
            raise ConfigError(
                "No worker here can act with tools: a request with tools needs a worker whose "
                "pool entry sets tools = true, with a backend that takes tools (openai, "
                "anthropic, gemini, or a function taking a `tools` keyword).")
        return capable

    def _view(self, workers: Sequence[int] | None,
              budget: RequestBudget | None = None) -> PoolView:
        if workers is None and (budget is None or not (self.settings.show_budget
                                                       or self.settings.hold_budget)):
            return self.conductor.view
        return settings_view(self.pool.workers, self.settings, workers, budget)

    def _result(self, q: _Question, rounds: list[Round], stopped: str | None) -> RunResult:
        outcome = build_outcome(rounds, stopped=stopped,
                                recursion_format_error=self.settings.recursion_format_error)
        if q.budget is not None:
            outcome = replace(outcome, budget=self._check(rounds, q.budget))
        if outcome.tool_calls and outcome.answer_round is not None:
            outcome = replace(outcome, acting=_acting(q, rounds[outcome.answer_round]))
        return RunResult(q.question, tuple(rounds), outcome, time.perf_counter() - q.t0)

    def _check(self, rounds: Sequence[Round], budget: RequestBudget) -> BudgetCheck:
        """Every round's plan priced at the request's call prices, against its budget."""
        prices = budget.call_prices(self.pool.workers)
        steps = [s for r in rounds if r.execution for s in r.execution.steps]
        costs = [s.cost for s in steps if s.status in ("ok", "error")]
        known = [c for c in costs if c is not None]
        charged = sum(known) if len(known) == len(costs) else None
        return BudgetCheck(budget.amount, plan_price([s.worker for s in steps], prices),
                           charged)


@dataclass(frozen=True)
class _Question:
    """One question as the rounds loop carries it: what was asked, the view the Conductor is
    shown, the caps spent across every round, and how the caller wants it answered."""

    question: str
    sample_id: int | str
    view: PoolView
    caps: Caps
    budget: RequestBudget | None
    on_event: Event | None
    stream: bool
    answer: AnswerRule | None
    t0: float
    tools: ToolUse | None = None  # what the answer step may call
    conversation: Conversation | None = None  # the earlier turns the answer step sees


def _acting(q: _Question, rnd: Round) -> ActingState | None:
    """The state that continues `rnd`, whose last step acted."""
    if rnd.execution is None or not rnd.execution.steps:
        return None
    rec = rnd.execution.steps[-1]
    return ActingState(q.question, rec.worker, rec.worker_name, tuple(rec.messages), rec.round,
                       q.sample_id, rec.request_id)


def _check_exchange(exchange: Sequence[Message]) -> None:
    """An exchange is an assistant message with tool calls, then the tool messages."""
    roles = [m.get("role") if isinstance(m, dict) else None for m in exchange]
    if not roles or roles[0] != "assistant" or not exchange[0].get("tool_calls") \
            or roles[-1] != "tool" or any(r not in ("assistant", "tool") for r in roles):
        raise ConfigError("The exchange to continue with is the assistant message with its "
                          "tool_calls, then a tool message (role tool, tool_call_id) for each "
                          f"call, in Chat Completions' shape; got the roles {roles}.")


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
