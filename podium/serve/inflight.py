"""One request's run while it is in flight: its slot, its task, its progress, how it ends.

Both APIs hand the run over as a `ServedRequest` (what was asked, by whom, the options).
`Flights.start` runs the pipeline as a task (an `InFlight`). The task's slot is given back
when it ends, whatever becomes of the response. Its trace is written whether it finishes or is
stopped (the client went away, the server shut down), and its outcome goes into the access
log line. A handler then either waits for the result (`answered`) or streams its events
(`podium.serve.reply.run_events`: progress lines and the answer's text as its worker writes
it) and reads the end with `finished`; both turn a run without an answer into the error the
client is told (`no_answer_error`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.types import Scope

from podium.errors import ConfigError
from podium.llm.base import Sampling
from podium.llm.tools import ToolUse
from podium.pipeline import RunResult
from podium.serve import progress
from podium.serve.access import RUN_NOTE
from podium.serve.acting import Continuation
from podium.serve.errors import ApiError, bad_request
from podium.serve.metrics import USAGE
from podium.serve.options import Options
from podium.serve.shutdown import SHUT_DOWN, Drain
from podium.serve.traces.store import TraceStore
from podium.workflow.execute import Conversation

log = logging.getLogger("podium.serve")

CLIENT_GONE = "the client went away before the answer"

# How the model asked for answers: given the pipeline's event callback (None: nothing is
# streamed), the run's result
Answerer = Callable[[Callable[[str, Any], None] | None], Awaitable[RunResult]]


@dataclass(frozen=True)
class ServedRequest:
    """One request to run, whichever API it came through: what was asked (the model, the
    question, what it asks of the answer step's sampling, its tools, the tool results it
    continues with), by whom, with which options."""

    trace_id: str
    model: str
    question: str
    options: Options
    sampling: Sampling | None = None  # for the step that writes the answer
    stream: bool = False
    owner: str | None = None  # who asked (`podium.serve.auth.owner_of`); None without keys
    traced: dict = field(default_factory=dict)  # its sampling fields and `user`, for the trace
    tools: ToolUse | None = None  # what the answer step may call (`podium.serve.tools`)
    continuing: Continuation | None = None  # tool results the acting step goes on with
    conversation: Conversation | None = None  # earlier turns, for the answer step


class Slots:
    """At most `limit` runs in flight; `take` says no instead of waiting. `gauge` (a
    prometheus-client Gauge) follows the count."""

    def __init__(self, limit: int, gauge: Any = None) -> None:
        self.limit = limit
        self.in_flight = 0
        self.gauge = gauge

    def take(self) -> bool:
        if self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        if self.gauge is not None:
            self.gauge.inc()
        return True

    def give(self) -> None:
        self.in_flight -= 1
        if self.gauge is not None:
            self.gauge.dec()


@dataclass(eq=False)  # hashed by identity: the drain keeps a set of them
class InFlight:
    """One request's pipeline run: its task, the progress lines it emits, and why it was
    stopped when it was (the client went away, the server shut down)."""

    events: asyncio.Queue
    tid: str = ""
    task: asyncio.Task = None  # type: ignore[assignment]
    stopped: str | None = None
    shut_down: bool = False

    def stop(self, why: str) -> None:
        if not self.task.done():
            self.stopped = self.stopped or why
            self.task.cancel(why)


class Flights:
    """Starts the runs of one server: each holds one of its `slots` (taken by the caller),
    is watched by its shutdown `drain` and traced into `traces`; `names` are the pool's
    workers, as the progress lines name them."""

    def __init__(self, slots: Slots, traces: TraceStore, drain: Drain,
                 names: list[str]) -> None:
        self.slots, self.traces, self.drain, self.names = slots, traces, drain, names

    def start(self, request: ServedRequest, answer: Answerer, scope: Scope) -> InFlight:
        """Start the run as a task; its slot is given back when the task ends, whatever
        happens to the response. The run's outcome goes into the request's access log line
        (`scope`), and its trace is written whether it finishes or is stopped."""
        events: asyncio.Queue = asyncio.Queue()
        tid, traces, names = request.trace_id, self.traces, self.names
        flight = InFlight(events, tid)

        def on_event(kind: str, obj) -> None:
            if kind == "text":
                events.put_nowait(obj)
            elif line := progress.line(kind, obj, names):
                events.put_nowait(line)

        async def go():
            try:
                result = await answer(on_event if request.stream else None)
            except ConfigError as exc:  # the question itself (e.g. text that is not UTF-8)
                raise bad_request(str(exc), param="messages") from None
            except asyncio.CancelledError:
                if flight.stopped:  # what was asked, and why it has no answer
                    traces.put(tid, {**_about(request), "question": request.question,
                                     "answer": None, "stopped": flight.stopped})
                    scope[RUN_NOTE] = f"{tid}: stopped ({flight.stopped})"
                raise
            data = {**_about(request), **result.to_json()}
            # readable from every process once written, when its id is shown (an error
            # shows it)
            wait = traces.shared and (request.options.return_trace_id or result.answer is None)
            written = traces.put(tid, data, wait=wait)  # readable from this process now
            if wait:
                await asyncio.wrap_future(written)
            _account(result, tid, scope)
            return result

        flight.task = task = asyncio.get_running_loop().create_task(go())
        self.drain.in_flight.add(flight)

        def done(t: asyncio.Task) -> None:
            self.slots.give()
            self.drain.in_flight.discard(flight)
            events.put_nowait(None)
            if not t.cancelled() and t.exception() is not None and \
                    not isinstance(t.exception(), ApiError):
                log.error("run %s failed", tid, exc_info=t.exception())

        task.add_done_callback(done)
        return flight


def _about(request: ServedRequest) -> dict:
    """What the trace records of the request, before the run's own record."""
    return {"id": request.trace_id, "created": int(time.time()), "model": request.model,
            "stream": request.stream, "options": request.options.model_dump(exclude_none=True),
            **request.traced, **({"owner": request.owner} if request.owner else {}),
            **(request.continuing.traced() if request.continuing else {})}


def _account(result: RunResult, tid: str, scope: Scope) -> None:
    """The finished run's usage (for the metrics) and outcome (for the access line) in the
    request's `scope`; a run without an answer logged with its cause."""
    used = result.outcome.used
    scope[USAGE] = (used.prompt_tokens, used.completion_tokens, used.calls)
    cause = result.outcome.cause
    outcome = ("answered" if result.answer is not None
               else f"no answer ({cause.reason if cause else '?'})")
    if result.answer is None and cause is not None:  # the client is told less
        log.log(logging.INFO if cause.cls == "model" else logging.WARNING,
                "run %s: no answer: %s", tid, cause.sentence())
    scope[RUN_NOTE] = f"{tid}: {outcome}, {used.calls} calls"


def shutting_down() -> ApiError:
    return ApiError(503, "The server shut down before this request's answer was ready "
                    "(podium serve --graceful-timeout). Send it again.",
                    code="server_shutting_down")


def no_answer_error(result, tid: str) -> ApiError:
    """502 when a model call failed (an upstream endpoint); 400 when the request's budget ran
    out first (a 5xx would be retried by the OpenAI SDKs, paying for the run again, and would
    run out again); 500 otherwise. The message names what failed (`public_cause`) and the
    run's trace `tid`, never a failure's details (an endpoint's address, its error text):
    those are for the operator, in the trace and the server log."""
    cause = result.outcome.cause
    why = public_cause(cause) if cause else "the workflow produced no answer"
    where = f"The trace {tid} has the details."
    if cause is not None and cause.reason == "cap":
        return ApiError(400, f"The team produced no answer: {why}. A cap was reached before "
                        "an answer: raise the request's max_calls, max_total_tokens or "
                        "max_cost (or leave them to the pool's).", code="cap_reached",
                        trace_id=tid)
    if cause is not None and cause.cls == "worker":
        return ApiError(502, f"The team produced no answer: {why}. A model endpoint of the "
                        f"pool failed; retry, or ask the server's operator. {where}",
                        code="worker_failed", trace_id=tid)
    if cause is not None and cause.cls == "infra":
        return ApiError(500, f"The team produced no answer: {why}. This is a podium failure; "
                        f"the server log has the details. {where}", code="internal",
                        trace_id=tid)
    return ApiError(500, f"The team produced no answer: {why}. Retry: the Conductor samples "
                    f"its workflow anew. {where}", code="no_answer", trace_id=tid)


def public_cause(cause) -> str:
    """What a client is told of the failure that decided a run: where it happened (the step
    and its worker's pool name, or the Conductor) and its kind, e.g. "step 0 (w1), round 0
    failed: transport (a worker failure)". A cap's own sentence is podium's and says which
    cap; any other detail may hold an endpoint's address or its error text, and is left out."""
    if cause.reason == "cap":
        return cause.sentence()
    where = f"{cause.where} failed" if cause.where else "the run failed"
    article = "an" if cause.cls[0] in "aeiou" else "a"
    return f"{where}: {cause.reason} ({article} {cause.cls} failure)"


async def disconnected(request: Request) -> None:
    """Returns once the client has gone away (the body is read: what the server receives now
    is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def finished(flight: InFlight):
    """(result, error) of a finished run: the error is what the client is told when there is
    no answer (the run's own ApiError, a 500 for a crash, the cause of a missing answer, a
    503 for a run the shutdown stopped)."""
    if flight.task.cancelled():
        return None, shutting_down()
    try:
        result = flight.task.result()
    except ApiError as exc:
        return None, exc
    except Exception as exc:  # logged by the task's done callback
        return None, ApiError(500, f"podium failed unexpectedly ({type(exc).__name__}); the "
                              "server log has the traceback.", code="internal")
    return result, (no_answer_error(result, flight.tid) if result.answer is None else None)


async def answered(flight: InFlight, headers: dict, request: Request) -> RunResult:
    """The finished run's result; a run without an answer is the error it names. A client
    that goes away first stops the run."""
    gone = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait((flight.task, gone), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # uvicorn gave up on the request: so does the run
        flight.stop(SHUT_DOWN)
        raise
    finally:
        gone.cancel()
    if not flight.task.done():
        flight.stop(CLIENT_GONE)
        request.scope[RUN_NOTE] = f"{flight.tid}: stopped ({CLIENT_GONE})"  # logged before
        raise ClientDisconnect()  # the run's own handler, which sets the same note, has run
    if flight.task.cancelled() and flight.shut_down:
        raise shutting_down()
    result = flight.task.result()
    if result.answer is None:
        err = no_answer_error(result, flight.tid)
        err.headers.update(headers)
        raise err
    return result
