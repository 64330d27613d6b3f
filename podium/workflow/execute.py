"""Run a workflow: steps as a DAG over the clients of a team.

A step depends on the steps it may see (`"all"` = every earlier step, `()` = none, indices =
those). Each step waits for its dependencies, then for a free slot on its worker (a per-worker
semaphore that the caller may share across many workflows), renders its messages and calls the
worker. Steps whose dependencies are done run concurrently; what any worker is shown is the same
as in the paper's sequential execution.

Failures are data: a failed call is recorded on its step (error kind and message; a client
that raises anything but `WorkerError` is recorded as kind `internal`, a podium bug) and, by
`on_error`, the workflow either continues (later steps see the failed step as an empty response)
or stops (steps not yet started are marked `skipped`). Every step record holds the exact
messages sent, the response, tokens, cost, retries, latency and timing relative to the start.
A step's cost is its list price (a cached answer included: what the step needs); a failed call
costs what its usage says, usually 0. Cost is None only for a worker without a price.

With `stream_answer`, the last step (its reply is the answer) is called streaming where its
client can stream: each piece of its text is emitted as an `AnswerText` event as the worker
writes it, scrubbed of secrets (`podium.redact.ScrubbedStream`); what was emitted is a prefix
of the step's response. A client that cannot stream, or a cached reply, emits nothing.

With tools (`ExecOptions.tools`), the last step *acts*: its worker is called with them
(`podium.llm.tools.tools_kw`), unstreamed, and its calls are kept on its record
(`tool_calls`); its text, possibly empty, is the answer. A reply that misuses the tools
(`podium.workflow.tool_calls.reply_problem`: arguments not valid for the tool's schema, text
under `tool_choice` "required") is asked again once; a second such reply fails the step
(kind `other`, naming the tool). Both calls count in the step's tokens and cost. Earlier
steps never get the tools. `call_step` makes one step's call: `execute_workflow` uses it for
every step, and `podium.pipeline` for an acting step continued with its tool results.

With a `Conversation` (`ExecOptions.conversation`: a served conversation's earlier turns), the
last step gets those turns as chat turns before its own message, whose task is the last
question alone; every other step gets the question as given (the conversation flattened).

`Caps` hold one question's calls, tokens and cost across the Conductor and every round:
a step that would go past a cap is not called; it and the steps after it are `skipped` with the
cap as the recorded reason. Calls are reserved before they start, so parallel steps never
exceed `max_calls`; tokens and cost are known only afterwards, so those caps stop the next call
once what has been spent reaches them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from podium.config import Price
from podium.errors import INTERNAL, WorkerError
from podium.llm.base import ChatClient, ChatResponse, Message, Sampling, sampling_kw, stream_kw
from podium.llm.tools import Tool, ToolCall, ToolChoice, tools_kw
from podium.redact import ScrubbedStream
from podium.workflow.render import MessageOptions, PriorStep, worker_messages
from podium.workflow.tool_calls import reply_problem
from podium.workflow.types import Access, Workflow, access_json

StepStatus = Literal["pending", "running", "ok", "error", "skipped"]


@dataclass
class StepRecord:
    """What one step did: the exact messages sent, the response or the error (its kind),
    tokens, cost at list price, latency, timing relative to the workflow's start, whether
    the response cache answered, and the failed attempts before the last one."""

    index: int
    worker: int
    worker_name: str
    subtask: str
    access: Access
    round: int = 0
    status: StepStatus = "pending"
    messages: list[Message] = field(default_factory=list)
    response: str | None = None
    error_kind: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int | None = None
    finish_reason: str | None = None
    latency_s: float = 0.0
    started_s: float | None = None
    finished_s: float | None = None
    model: str = ""
    request_id: str | None = None
    prefill: str = "none"
    cost: float | None = None
    cache_hit: bool = False
    retries: list[dict] = field(default_factory=list)  # failed attempts before the last one
    tool_calls: list[ToolCall] = field(default_factory=list)  # an acting step's calls

    def to_json(self) -> dict:
        # field by field, copying the lists: `asdict`'s deep copy took most of a trace's CPU
        data = dict(self.__dict__)
        data["access"] = access_json(self.access)
        data["messages"] = [dict(m) for m in self.messages]
        data["retries"] = [dict(r) for r in self.retries]
        data["tool_calls"] = [c.openai() for c in self.tool_calls]
        return data


@dataclass
class Execution:
    """One workflow run: a record per step, the answer (`run.final_answer` over the steps;
    None when there is none), and why it stopped early (a cap, a failed step) if it did."""

    workflow: Workflow
    steps: list[StepRecord]
    answer: str | None
    stopped: str | None = None  # why the workflow stopped early, if it did
    wall_s: float = 0.0

    def prior_steps(self) -> list[PriorStep]:
        """This run as the previous round of a recursion round."""
        return [PriorStep(s.worker, s.subtask, s.response) for s in self.steps]


@dataclass(frozen=True)
class Conversation:
    """A conversation's earlier turns (`system`, `user` and `assistant` text messages, in
    order) and its last question, the task the answer step's own message holds."""

    turns: tuple[Message, ...]
    last_question: str


@dataclass(frozen=True)
class ExecOptions:
    final_answer: Literal["last", "last_nonempty"] = "last"
    on_error: Literal["continue", "stop"] = "continue"
    messages: MessageOptions = MessageOptions()
    # the last step's sampling (it writes the answer): a served request's temperature,
    # top_p, seed, stop and max_tokens; the other steps keep their models' own
    answer_sampling: Sampling | None = None
    # the last step's tools (it acts with them), and how it may use them; () for none
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # the earlier turns the last step sees as chat turns; None: it sees the question only
    conversation: Conversation | None = None


@dataclass
class Caps:
    """A question's caps (`max_calls`, `max_tokens`, `max_cost`; None = no cap) and what has
    been spent so far. A cap stops calls; a budget (`podium.conductor.budget`) does not."""

    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    calls: int = 0
    tokens: int = 0
    cost: float = 0.0

    def reserve(self) -> str | None:
        """Take one call, or return why not (a cap is reached)."""
        if self.max_calls is not None and self.calls >= self.max_calls:
            return f"cap: max_calls = {self.max_calls} reached"
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            return f"cap: max_tokens = {self.max_tokens} reached ({self.tokens} spent)"
        if self.max_cost is not None and self.cost >= self.max_cost:
            return f"cap: max_cost = ${self.max_cost} reached (${self.cost:.6f} spent)"
        self.calls += 1
        return None

    def spend(self, tokens: int, cost: float | None) -> None:
        self.tokens += tokens
        self.cost += cost or 0.0


class Team:
    """The workers a workflow may call, by pool index, each with a concurrency limit and an
    optional price (USD per 1M tokens) used for step costs and the cost cap.

    Share one Team across concurrent workflows so the limits hold across all of them.
    """

    def __init__(self, clients: Sequence[ChatClient], max_concurrency: Sequence[int] | int = 4,
                 prices: Sequence[Price | None] | None = None):
        self.clients = list(clients)
        self.prices = list(prices) if prices is not None else [None] * len(self.clients)
        limits = ([max_concurrency] * len(self.clients) if isinstance(max_concurrency, int)
                  else list(max_concurrency))
        if len(limits) != len(self.clients):
            raise ValueError("one concurrency limit per client is needed")
        self.limits = limits
        self._loop: asyncio.AbstractEventLoop | None = None
        self._semaphores: list[asyncio.Semaphore] = []

    @property
    def semaphores(self) -> list[asyncio.Semaphore]:
        """Per-worker semaphores of the running event loop (made anew for a new loop)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._semaphores = loop, [asyncio.Semaphore(n) for n in self.limits]
        return self._semaphores

    def __len__(self) -> int:
        return len(self.clients)


@dataclass(frozen=True)
class AnswerText:
    """A piece of the answer's text as its worker writes it (`stream_answer`)."""

    step: StepRecord
    text: str


# ("started" | "finished", StepRecord) or ("text", AnswerText)
StepEvent = Callable[[str, "StepRecord | AnswerText"], None]


def final_answer(steps: Sequence[StepRecord], rule: str) -> str | None:
    if not steps:
        return None
    if rule == "last":
        last = steps[-1]
        return last.response if last.status == "ok" else None
    for step in reversed(steps):
        if step.status == "ok" and step.response and step.response.strip():
            return step.response
    return None


async def execute_workflow(
    workflow: Workflow,
    question: str,
    team: Team,
    *,
    options: ExecOptions = ExecOptions(),
    previous_round: Sequence[PriorStep] = (),
    round_index: int = 0,
    sample_id: int | str = 0,
    caps: Caps | None = None,
    on_event: StepEvent | None = None,
    stream_answer: bool = False,
) -> Execution:
    """Run every step of `workflow` (already validated against the team's size)."""
    workflow.validate(len(team))
    t0 = time.perf_counter()
    records = [
        StepRecord(i, s.worker, team.clients[s.worker].name, s.subtask, s.access, round_index)
        for i, s in enumerate(workflow.steps)
    ]
    done = [asyncio.Event() for _ in records]
    deps = workflow.dependencies()
    stop: list[str] = []  # the stop reason, once a step fails under on_error="stop"

    def emit(kind: str, rec: StepRecord | AnswerText) -> None:
        if on_event is not None:
            on_event(kind, rec)

    def skip(rec: StepRecord) -> None:
        rec.status = "skipped"
        rec.error = stop[0]
        emit("finished", rec)

    async def run_step(i: int) -> None:
        rec = records[i]
        try:
            for j in deps[i]:
                await done[j].wait()
            if stop:
                return skip(rec)
            responses = [r.response if r.status == "ok" else None for r in records]
            talk = options.conversation if i == len(records) - 1 else None
            rec.messages = [*(dict(m) for m in (talk.turns if talk else ())), *worker_messages(
                talk.last_question if talk else question, workflow, i, responses,
                previous_round=previous_round, options=options.messages)]
            async with team.semaphores[rec.worker]:
                if not stop and caps is not None and (why := caps.reserve()):
                    stop.append(why)
                if stop:
                    return skip(rec)
                await call(rec)
        finally:
            done[i].set()

    async def call(rec: StepRecord) -> None:
        last = rec.index == len(records) - 1
        acting = last and bool(options.tools)
        text = (ScrubbedStream(lambda piece: emit("text", AnswerText(rec, piece)))
                if last and not acting and stream_answer and on_event is not None else None)
        await call_step(rec, team, options, answer=last, sample_id=f"{sample_id}:{rec.index}",
                        caps=caps, on_text=text.add if text is not None else None,
                        emit=emit, t0=t0)
        if text is not None and rec.status == "ok":
            text.close()
        if rec.status == "error" and options.on_error == "stop" and not stop:
            stop.append(f"stopped: step {rec.index} ({rec.worker_name}) failed")
        emit("finished", rec)

    await asyncio.gather(*(run_step(i) for i in range(len(records))))
    answer = None if stop else final_answer(records, options.final_answer)
    if not stop and records and records[-1].tool_calls and records[-1].status == "ok":
        answer = records[-1].response  # the step acted: its text (maybe "") beside its calls
    return Execution(workflow, records, answer, stop[0] if stop else None,
                       time.perf_counter() - t0)


async def call_step(rec: StepRecord, team: Team, options: ExecOptions, *, answer: bool,
                    sample_id: str, caps: Caps | None = None,
                    on_text: Callable[[str], None] | None = None,
                    emit: StepEvent | None = None, t0: float | None = None) -> None:
    """Call `rec`'s worker with `rec.messages` (its call already reserved on `caps`) and
    record the reply or the failure, its tokens, cost and timing on `rec`. `answer`: the step
    writes the answer, so it is sampled by `options.answer_sampling` and, given
    `options.tools`, acts with them (see the module docstring)."""
    t0 = time.perf_counter() if t0 is None else t0
    rec.status = "running"
    rec.started_s = time.perf_counter() - t0
    if emit is not None:
        emit("started", rec)
    client = team.clients[rec.worker]
    acting = answer and bool(options.tools)
    kw = {**sampling_kw(options.answer_sampling if answer else None),
          **stream_kw(client, on_text)}
    if acting:
        kw.update(tools_kw(options.tools, options.tool_choice, options.parallel_tool_calls))
    refused: list[ChatResponse] = []  # a reply that misused the tools, asked again
    try:
        resp = await client.chat(rec.messages, sample_id=sample_id, **kw)
        problem = reply_problem(resp, options.tools, options.tool_choice) if acting else None
        if problem is not None:
            refused.append(resp)
            rec.retries.append({"attempt": len(resp.retries) + 1, "kind": "tool_call",
                                "status": None, "error": problem[:200], "wait_s": 0.0})
            resp = await client.chat(rec.messages, sample_id=f"{sample_id}:again", **kw)
            if (problem := reply_problem(resp, options.tools, options.tool_choice)) is not None:
                refused.append(resp)
                raise WorkerError(client.name, "other", f"{problem}; asked again once, it "
                                  "replied no better")
    except WorkerError as exc:
        rec.status, rec.error_kind, rec.error = "error", exc.kind, str(exc)
        rec.retries += list(exc.retries)
    except Exception as exc:  # a broken client must not take the run down
        rec.status, rec.error_kind = "error", INTERNAL
        rec.error = f"{type(exc).__name__}: {exc}"
    else:
        rec.status, rec.response = "ok", resp.text
        rec.prompt_tokens, rec.completion_tokens = resp.prompt_tokens, resp.completion_tokens
        rec.reasoning_tokens, rec.finish_reason = resp.reasoning_tokens, resp.finish_reason
        rec.latency_s, rec.model = resp.latency_s, resp.model
        rec.request_id, rec.prefill = resp.request_id, resp.prefill
        rec.cache_hit, rec.retries = resp.cache_hit, rec.retries + list(resp.retries)
        rec.tool_calls = list(resp.tool_calls)
    for r in refused:  # the refused replies were made and paid for: they count
        if r is not resp or rec.status == "error":
            rec.prompt_tokens += r.prompt_tokens
            rec.completion_tokens += r.completion_tokens
            rec.cache_hit = False
    price = team.prices[rec.worker]
    rec.cost = price.cost(rec.prompt_tokens, rec.completion_tokens) if price else None
    if caps is not None and not rec.cache_hit:
        caps.spend(rec.prompt_tokens + rec.completion_tokens, rec.cost)
    rec.finished_s = time.perf_counter() - t0
