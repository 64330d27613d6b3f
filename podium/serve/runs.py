"""One pipeline run for one request: its slot, its task, its progress lines, and how it ends.

`start` runs the pipeline as a task. The task's slot is given back when it ends, whatever
becomes of the response. Its trace is written whether it finishes or is stopped (the client
went away, the server shut down), and its outcome goes into the access log line. A handler
then either waits for the result (`answered`) or streams `run_events` (progress lines and
the answer's text as its worker writes it) and reads the end with `finished`; both turn a
run without an answer into the error the client is told (`no_answer_error`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.types import Scope

from podium.errors import ConfigError
from podium.pipeline import RunResult
from podium.serve import progress
from podium.serve.access import RUN_NOTE
from podium.serve.errors import ApiError, bad_request
from podium.serve.metrics import USAGE
from podium.serve.protocol import Options
from podium.serve.shutdown import SHUT_DOWN, Drain
from podium.serve.traces import TraceStore
from podium.workflow.execute import AnswerText

log = logging.getLogger("podium.serve")

KEEPALIVE_S = 15.0
CLIENT_GONE = "the client went away before the answer"


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
class Run:
    """One pipeline run for one request: its task, the progress lines it emits, and why it
    was stopped when it was (the client went away, the server shut down)."""

    events: asyncio.Queue
    tid: str = ""
    task: asyncio.Task = None  # type: ignore[assignment]
    stopped: str | None = None
    shut_down: bool = False

    def stop(self, why: str) -> None:
        if not self.task.done():
            self.stopped = self.stopped or why
            self.task.cancel(why)


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


def _asked(req) -> dict:
    """What the request asked of the answer's sampling, and its `user`, for the trace."""
    fields = ("temperature", "top_p", "seed", "stop", "max_tokens", "max_completion_tokens",
              "max_output_tokens")
    asked = {k: getattr(req, k) for k in fields if getattr(req, k, None) is not None}
    user = getattr(req, "user", None)
    return {**({"sampling": asked} if asked else {}), **({"user": user} if user else {})}


def start(ask: Callable[[Any], Awaitable[RunResult]], names: list[str], traces: TraceStore,
           tid: str, req, opts: Options, slots: Slots,
           owner: str | None, scope: Scope, question: str, drain: Drain) -> Run:
    """Start the run as a task; its slot is given back when the task ends, whatever happens
    to the response. The run's outcome goes into the request's access log line (`scope`), and
    its trace is written whether it finishes or is stopped."""
    events: asyncio.Queue = asyncio.Queue()
    run = Run(events, tid)

    def on_event(kind: str, obj) -> None:
        if kind == "text":
            events.put_nowait(obj)
        elif line := progress.line(kind, obj, names):
            events.put_nowait(line)

    def about() -> dict:
        return {"id": tid, "created": int(time.time()), "model": req.model, "stream": req.stream,
                "options": opts.model_dump(exclude_none=True), **_asked(req),
                **({"owner": owner} if owner else {})}

    async def go():
        try:
            result = await ask(on_event if req.stream else None)
        except ConfigError as exc:  # the question itself (e.g. text that is not UTF-8)
            raise bad_request(str(exc), param="messages") from None
        except asyncio.CancelledError:
            if run.stopped:  # what was asked, and why it has no answer
                traces.put(tid, {**about(), "question": question, "answer": None,
                                 "stopped": run.stopped})
                scope[RUN_NOTE] = f"{tid}: stopped ({run.stopped})"
            raise
        data = {**about(), **result.to_json()}
        # readable from every process once written, when its id is shown (an error shows it)
        wait = traces.shared and (opts.return_trace_id or result.answer is None)
        written = traces.put(tid, data, wait=wait)  # written by the store's process, readable now
        if wait:
            await asyncio.wrap_future(written)
        used = result.outcome.used
        scope[USAGE] = (used.prompt_tokens, used.completion_tokens, used.calls)
        cause = result.outcome.cause
        outcome = ("answered" if result.answer is not None
                   else f"no answer ({cause.reason if cause else '?'})")
        if result.answer is None and cause is not None:  # the client is told less
            log.log(logging.INFO if cause.cls == "model" else logging.WARNING,
                    "run %s: no answer: %s", tid, cause.sentence())
        scope[RUN_NOTE] = f"{tid}: {outcome}, {result.outcome.used.calls} calls"
        return result

    run.task = task = asyncio.get_running_loop().create_task(go())
    drain.runs.add(run)

    def done(t: asyncio.Task) -> None:
        slots.give()
        drain.runs.discard(run)
        events.put_nowait(None)
        if not t.cancelled() and t.exception() is not None and \
                not isinstance(t.exception(), ApiError):
            log.error("run %s failed", tid, exc_info=t.exception())

    task.add_done_callback(done)
    return run


async def run_events(run: Run) -> AsyncIterator[str | AnswerText | None]:
    """The run's progress lines and pieces of the answer's text, as they come; None when
    nothing came for KEEPALIVE_S (send a keep-alive comment). Ends when the run does. Once
    the answer's text has begun, the progress lines are left out (the trace has them)."""
    answering = False
    while True:
        try:
            item = await asyncio.wait_for(run.events.get(), KEEPALIVE_S)
        except TimeoutError:
            yield None
            continue
        if item is None:
            return
        if isinstance(item, AnswerText):
            answering = True
            yield item
        elif not answering:
            yield item + "\n"


def rest_of(answer: str, sent: str) -> str | None:
    """What is left of `answer` to send after `sent` (its streamed start); None when what was
    sent is not the answer's start (the step that streamed it failed, and the answer is
    another round's): text already sent cannot be taken back."""
    if answer.startswith(sent):
        return answer[len(sent):]
    return answer if not sent.strip() else None


def replaced_answer() -> ApiError:
    return ApiError(502, "The step writing the answer failed after part of its text was "
                    "streamed, and the answer is another round's; the trace has both. Retry, "
                    "or ask without streaming.", code="answer_replaced")


async def disconnected(request: Request) -> None:
    """Returns once the client has gone away (the body is read: what the server receives now
    is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def finished(run: Run):
    """(result, error) of a finished run: the error is what the client is told when there is
    no answer (the run's own ApiError, a 500 for a crash, the cause of a missing answer, a
    503 for a run the shutdown stopped)."""
    if run.task.cancelled():
        return None, shutting_down()
    try:
        result = run.task.result()
    except ApiError as exc:
        return None, exc
    except Exception as exc:  # logged by the task's done callback
        return None, ApiError(500, f"podium failed unexpectedly ({type(exc).__name__}); the "
                              "server log has the traceback.", code="internal")
    return result, (no_answer_error(result, run.tid) if result.answer is None else None)


async def answered(run: Run, headers: dict, request: Request) -> RunResult:
    """The finished run's result; a run without an answer is the error it names. A client
    that goes away first stops the run."""
    gone = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait((run.task, gone), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # uvicorn gave up on the request: so does the run
        run.stop(SHUT_DOWN)
        raise
    finally:
        gone.cancel()
    if not run.task.done():
        run.stop(CLIENT_GONE)
        request.scope[RUN_NOTE] = f"{run.tid}: stopped ({CLIENT_GONE})"  # logged before the
        raise ClientDisconnect()  # run's own handler, which sets the same note, has run
    if run.task.cancelled() and run.shut_down:
        raise shutting_down()
    result = run.task.result()
    if result.answer is None:
        err = no_answer_error(result, run.tid)
        err.headers.update(headers)
        raise err
    return result
