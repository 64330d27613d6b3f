"""The HTTP app: the team as one OpenAI-compatible model, `podium`.

    POST /v1/chat/completions   run the pipeline on the conversation (JSON, or SSE when
                                `stream` is true)
    POST /v1/responses          the same through the Responses API (podium.serve.responses_api)
    GET  /v1/models             the one model, `podium`  (also /v1/models/podium)
    GET  /v1/traces/{id}        a request's trace (ids from `return_trace_id`), for the key
                                that made the request only
    GET  /traces, /traces/{id}  the trace viewer: the key's recent traces, one trace drawn
                                (podium.viewer; a browser may send the key as the Basic-auth
                                password)
    GET  /health                {"status": "ok"} (HEAD too); the only route without a key

With `pass_through` (`podium serve --pass-through`) every worker is also a model of its own,
named as in the pool: a request for it is one call to that worker with the bare question
(`run.worker_messages = "question"`, the same as `podium eval --system openai:...` asks), with
its usage and trace like any other, so a single worker can be evaluated served the same way
as the team.

One request, top to bottom (`chat`; it and `responses` are answered by `podium.serve.
pipeline_routes`, past Starlette's router and exception layers): check the key, read the
body (refused past `max_request_bytes` while it is read, not after), validate it
(`protocol`), name the sub-pool, take a run slot (429 when `max_concurrency` runs are in
flight: the server never queues work it cannot start), run the pipeline as a task whose
progress events feed the stream (a request that does not stream gets none made), hand the
trace to the store's writer process, answer.

One `Pipeline` serves every request, so each worker's concurrency limit holds across all of
them (with `podium serve --processes N`, across the requests of one process: the command
gives each process its share of the limits). A request that changes run settings
(recursion, budgets) gets a shallow copy of it with those settings: the same clients, cache,
Team (its semaphores) and Conductor.

Every error is an OpenAI-style body (`podium.serve.errors`). A client that goes away before
its answer (streamed or not) cancels its run: an embedded model stops generating at its next
token. A shutdown answers the runs it cuts short with a 503 (`podium.serve.shutdown`). Either
way the run's trace is written, with what was asked and why it has no answer (`stopped`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from podium.baselines import SOLVE, bare_question
from podium.errors import ConfigError
from podium.llm.base import Sampling
from podium.pipeline import Pipeline, RunResult
from podium.serve import chat_completions, responses_api
from podium.serve.access import RUN_NOTE, AccessLog
from podium.serve.auth import KeyCheck
from podium.serve.errors import ApiError, bad_request
from podium.serve.pipeline_routes import PipelineRoutes, unexpected
from podium.serve.protocol import ChatRequest, Options, parse_body, question_of
from podium.serve.shutdown import SHUT_DOWN, Drain
from podium.serve.traces import TraceStore, new_id
from podium.viewer import index_page, trace_page
from podium.workflow import Workflow

log = logging.getLogger("podium.serve")

MODEL = "podium"
KEEPALIVE_S = 15.0


@dataclass(frozen=True)
class ServeConfig:
    keys: tuple[str, ...] = ()
    max_concurrency: int = 4
    max_request_bytes: int = 1_000_000
    trace_dir: str | Path = "runs/serve-traces"
    trace_keep: int = 1000
    retry_after_s: int = 1
    pass_through: bool = False  # each worker also served as a model of its own
    shared_traces: bool = False  # other processes write the trace folder too (--processes)
    graceful_timeout_s: float | None = None  # the runs a shutdown may wait for (shutdown.py)


class Slots:
    """At most `limit` runs in flight; `take` says no instead of waiting."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0

    def take(self) -> bool:
        if self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        return True

    def give(self) -> None:
        self.in_flight -= 1


@dataclass(eq=False)  # hashed by identity: the drain keeps a set of them
class Run:
    """One pipeline run for one request: its task, the progress lines it emits, and why it
    was stopped when it was (the client went away, the server shut down)."""

    events: asyncio.Queue
    task: asyncio.Task = None  # type: ignore[assignment]
    stopped: str | None = None
    shut_down: bool = False

    def stop(self, why: str) -> None:
        if not self.task.done():
            self.stopped = self.stopped or why
            self.task.cancel(why)


CLIENT_GONE = "the client went away before the answer"


def shutting_down() -> ApiError:
    return ApiError(503, "The server shut down before this request's answer was ready "
                    "(podium serve --graceful-timeout). Send it again.",
                    code="server_shutting_down")


class TeamServer:
    """What serves the team: the pipeline (and its one-worker variant for pass-through models),
    the run slots, the trace store, the key check and the shutdown drain, with the handlers of
    the two routes that run the pipeline (`chat`: Chat Completions, `responses`: the Responses
    API). `create_app` routes requests to it."""

    def __init__(self, config: ServeConfig, pipeline: Pipeline) -> None:
        self.config, self.pipeline = config, pipeline
        self.check = KeyCheck(config.keys)
        self.traces = TraceStore(config.trace_dir, config.trace_keep,
                                 shared=config.shared_traces)
        self.slots = Slots(config.max_concurrency)
        self.drain = Drain(config.graceful_timeout_s)
        self.names = [w.name for w in pipeline.pool.workers]
        self.started = int(time.time())
        self.served = [MODEL, *(self.names if config.pass_through else ())]
        if config.pass_through and MODEL in self.names:
            raise ConfigError(f"A worker is named {MODEL!r}, the team's own model name: rename "
                              "it in the pool to serve workers as models (--pass-through).")
        self.single = copy.copy(pipeline)  # a pass-through model's runs: the bare question
        self.single.settings = bare_question(pipeline.settings)

    async def auth(self, request: Request) -> str | None:  # async: FastAPI runs a sync one
        return self.check(request.headers.get("authorization"))  # in a thread

    async def page_auth(self, request: Request) -> str | None:
        return self.check(request.headers.get("authorization"), basic=True)

    def model_card(self, model: str) -> dict:
        return {"id": model, "object": "model", "created": self.started, "owned_by": "podium"}

    def runner(self, req, opts: Options, question: str) -> Callable[[Any], Awaitable[RunResult]]:
        """How the model asked for answers: the team (the Conductor, on the sub-pool named),
        or, for a pass-through model, one call to that worker."""
        answer = req.sampling()
        if req.model == MODEL:
            workers = _workers(self.pipeline, opts)
            pipe = _variant(self.pipeline, opts, answer)
            return lambda on_event: pipe.ask(question, workers=workers, on_event=on_event)
        if req.model not in self.served:
            raise _no_model(req.model, self.served)
        if opts.workers or opts.recursion is not None:
            raise bad_request(f"workers and recursion are options of the {MODEL!r} model; "
                              f"{req.model!r} is one worker, asked directly.",
                              param="workers" if opts.workers else "recursion")
        pipe = _variant(self.single, opts, answer)
        flow = Workflow.of([(self.names.index(req.model), SOLVE, ())])
        return lambda on_event: pipe.run_workflow(question, flow, label=f"worker:{req.model}",
                                                  on_event=on_event)

    def begin(self, req, opts: Options, question: str, tid: str, owner: str | None,
              scope: dict) -> tuple[Run, dict, str | None]:
        """Check the model and its options, take a run slot (429 when none is free), start
        the run; the trace-id headers and the id shown in the body (only when asked)."""
        ask = self.runner(req, opts, question)
        if not self.slots.take():
            raise ApiError(429, f"The server is running {self.slots.limit} requests, its limit "
                           "(--max-concurrency). Retry after the Retry-After seconds.",
                           code="too_many_requests",
                           headers={"Retry-After": str(self.config.retry_after_s)})
        run = _start(ask, self.names, self.traces, tid, req, opts, self.slots, owner, scope,
                     question, self.drain)
        if opts.return_trace_id:
            return run, {"X-Podium-Trace-Id": tid}, tid
        return run, {}, None

    @staticmethod
    async def answered(run: Run, headers: dict, request: Request) -> RunResult:
        """The finished run's result; a run without an answer is the error it names. A client
        that goes away first stops the run."""
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait((run.task, gone), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # uvicorn gave up on the request: so does the run
            run.stop(SHUT_DOWN)
            raise
        finally:
            gone.cancel()
        if not run.task.done():
            run.stop(CLIENT_GONE)
            raise ClientDisconnect()
        if run.task.cancelled() and run.shut_down:
            raise shutting_down()
        result = run.task.result()
        if result.answer is None:
            err = chat_completions.no_answer_error(result)
            err.headers.update(headers)
            raise err
        return result

    @staticmethod
    def streaming(events: AsyncIterator[str], headers: dict) -> StreamingResponse:
        return StreamingResponse(events, media_type="text/event-stream", headers={
            "Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers})

    async def chat(self, request: Request) -> Response:
        """POST /v1/chat/completions."""
        owner = await self.auth(request)
        req, opts = parse_body(await _read_body(request, self.config.max_request_bytes))
        cid, tid, created = f"chatcmpl-{uuid.uuid4().hex}", new_id(), int(time.time())
        run, headers, shown_tid = self.begin(req, opts, question_of(req.messages), tid, owner,
                                             request.scope)
        if req.stream:
            include = bool(req.stream_options and req.stream_options.include_usage)
            return self.streaming(_stream(run, cid, created, req.model, shown_tid, include),
                                  headers)
        result = await self.answered(run, headers, request)
        return JSONResponse(chat_completions.completion_json(cid, created, req.model, result,
                                                             shown_tid), headers=headers)

    async def responses(self, request: Request) -> Response:
        """POST /v1/responses."""
        owner = await self.auth(request)
        req, opts, messages = responses_api.parse_responses_body(
            await _read_body(request, self.config.max_request_bytes))
        ids, tid, created = responses_api.new_ids(), new_id(), int(time.time())
        run, headers, shown_tid = self.begin(req, opts, responses_api.question(messages), tid,
                                             owner, request.scope)
        if req.stream:
            return self.streaming(_stream_response(run, req, ids, created, shown_tid), headers)
        result = await self.answered(run, headers, request)
        return JSONResponse(responses_api.response_json(
            ids[0], created, req.model, req,
            output=[responses_api.message_item(ids[2], result.answer)],
            result=result, trace_id=shown_tid), headers=headers)


def create_app(config: ServeConfig, pipeline: Pipeline) -> FastAPI:
    """The FastAPI app: `TeamServer`'s routes, the model list, the traces (JSON and the viewer
    pages), health, and OpenAI-style errors for everything else."""
    server = TeamServer(config, pipeline)
    traces = server.traces

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(traces.start)
        server.drain.started()
        yield
        await pipeline.aclose()
        await asyncio.to_thread(traces.close)

    app = FastAPI(title="podium", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.server = server  # its slots, traces and drain, for the server and the tests
    # Starlette's own slash redirect writes an absolute Location from the client's Host
    # header; podium answers a path with a trailing slash with a relative one (see 404)
    app.router.redirect_slashes = False

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404 and (moved := _without_slash(app, request)) is not None:
            return RedirectResponse(moved, status_code=307)
        if exc.status_code == 404:
            msg = (f"No route {request.method} {request.url.path}. The routes are POST "
                   "/v1/chat/completions, POST /v1/responses, GET /v1/models, "
                   "GET /v1/traces/{id}, GET /traces, GET /traces/{id}, GET /health.")
            return ApiError(404, msg, code="not_found").response()
        if exc.status_code == 405:
            return ApiError(405, f"{request.method} is not allowed on {request.url.path}.",
                            code="method_not_allowed").response()
        return ApiError(exc.status_code, str(exc.detail)).response()

    @app.exception_handler(Exception)  # what PipelineRoutes, inside it, did not answer
    async def _unexpected(request: Request, exc: Exception) -> Response:
        return unexpected(request, exc)

    @app.api_route("/health", methods=["GET", "HEAD"])  # HEAD: load balancers' probes
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models", dependencies=[Depends(server.auth)])
    async def models() -> dict:
        return {"object": "list", "data": [server.model_card(m) for m in server.served]}

    @app.get("/v1/models/{model}", dependencies=[Depends(server.auth)])
    async def model(model: str) -> dict:
        if model not in server.served:
            raise _no_model(model, server.served)
        return server.model_card(model)

    @app.get("/v1/traces/{trace_id}")
    async def trace(trace_id: str, owner: str | None = Depends(server.auth)) -> dict:
        data = await asyncio.to_thread(traces.read_as, trace_id, owner)
        if data is None:  # another key's trace is not found either: ids are not confirmed
            raise ApiError(404, "No trace of this API key has that id (ids look like tr- and "
                           "32 hex digits; the server keeps the newest traces only).",
                           code="trace_not_found", param="trace_id")
        return data

    @app.get("/traces", response_class=HTMLResponse)
    async def trace_list(owner: str | None = Depends(server.page_auth)) -> HTMLResponse:
        return HTMLResponse(index_page(await asyncio.to_thread(traces.recent, 100, owner)))

    @app.get("/traces/{trace_id}", response_class=HTMLResponse)
    async def trace_view(trace_id: str,
                         owner: str | None = Depends(server.page_auth)) -> HTMLResponse:
        data = await asyncio.to_thread(traces.read_as, trace_id, owner)
        if data is None:
            raise ApiError(404, "No trace of this API key has that id (the server keeps the "
                           "newest traces only).", code="trace_not_found", param="trace_id")
        return HTMLResponse(trace_page(data))

    # The two routes that run the pipeline: answered by PipelineRoutes, past the router and
    # the exception layers; also plain Starlette routes (no dependency solving, no response
    # model) for what PipelineRoutes passes on.
    routes = {"/v1/chat/completions": server.chat, "/v1/responses": server.responses}
    for path, handler in routes.items():
        app.add_route(path, handler, methods=["POST"])
    app.add_middleware(PipelineRoutes, routes=routes)
    app.add_middleware(AccessLog)  # added last: the outermost, so it sees every request
    return app


async def _progress(run: Run) -> AsyncIterator[str | None]:
    """The run's progress lines as they come; None when nothing came for KEEPALIVE_S (send a
    keep-alive comment). Ends when the run does."""
    while True:
        try:
            line = await asyncio.wait_for(run.events.get(), KEEPALIVE_S)
        except TimeoutError:
            yield None
            continue
        if line is None:
            return
        yield line + "\n"


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone away (the body is read: what the server receives now
    is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _finished(run: Run):
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
    return result, (chat_completions.no_answer_error(result) if result.answer is None else None)


async def _stream_response(run: Run, req, ids: tuple[str, str, str], created: int,
                           tid: str | None) -> AsyncIterator[str]:
    """The Responses API's events for one run (see podium.serve.responses_api)."""
    rid, rsid, mid = ids
    ev = responses_api.EventStream()

    def whole(status: str, **more) -> dict:
        return responses_api.response_json(rid, created, req.model, req, status=status, trace_id=tid,
                                **more)

    try:
        yield ev.event("response.created", response=whole("in_progress"))
        yield ev.event("response.in_progress", response=whole("in_progress"))
        yield ev.event("response.output_item.added", output_index=0,
                       item={"type": "reasoning", "id": rsid, "summary": [], "content": [],
                             "status": "in_progress"})
        lines: list[str] = []
        async for line in _progress(run):
            if line is None:
                yield ": keep-alive\n\n"
                continue
            lines.append(line)
            yield ev.event("response.reasoning_text.delta", item_id=rsid, output_index=0,
                           content_index=0, delta=line)
        thought = "".join(lines)
        reasoning = {"type": "reasoning", "id": rsid, "summary": [], "status": "completed",
                     "content": [{"type": "reasoning_text", "text": thought}]}
        yield ev.event("response.reasoning_text.done", item_id=rsid, output_index=0,
                       content_index=0, text=thought)
        yield ev.event("response.output_item.done", output_index=0, item=reasoning)
        result, error = _finished(run)
        if error is not None:
            body = error.body()["error"]
            yield ev.event("error", code=body["code"], message=body["message"],
                           param=body["param"])
            yield ev.event("response.failed", response=whole(
                "failed", output=[reasoning], result=result,
                error={"code": body["code"] or "server_error", "message": body["message"]}))
            return
        for event in ev.answer(mid, result.answer):
            yield event
        yield ev.event("response.completed", response=whole(
            "completed", output=[reasoning, responses_api.message_item(mid, result.answer)],
            result=result))
    finally:
        run.stop(CLIENT_GONE)  # when still running, the client went away: stop paying


def _no_model(model: str, served: list[str]) -> ApiError:
    if len(served) == 1:
        known = f"this server serves one model, {MODEL!r}. Pass model=\"{MODEL}\"."
    else:
        known = (f"this server serves {', '.join(map(repr, served))} ({MODEL!r} is the team; "
                 "the others are its workers, asked directly).")
    return ApiError(404, f"The model {model!r} does not exist: {known}", code="model_not_found",
                    param="model")


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is longer than `limit` bytes."""
    too_big = ApiError(413, f"The request body is larger than this server's limit of {limit} "
                       "bytes (--max-request-bytes). Send a shorter conversation.",
                       code="request_too_large")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_big
    size, chunks = 0, []
    async for piece in request.stream():
        size += len(piece)
        if size > limit:
            raise too_big
        chunks.append(piece)
    return b"".join(chunks)


def _workers(pipeline: Pipeline, opts: Options) -> list[int] | None:
    if not opts.workers:
        return None
    index = {w.name: i for i, w in enumerate(pipeline.pool.workers)}
    unknown = [n for n in opts.workers if n not in index]
    if unknown:
        raise bad_request(f"workers names {unknown}, which this server's pool does not have; "
                          f"its workers are: {', '.join(index)}.", param="workers",
                          code="unknown_worker")
    return [index[n] for n in opts.workers]


def _cap(pool_cap, asked):
    """A request may lower a budget the pool sets, never raise it."""
    return asked if pool_cap is None else min(pool_cap, asked)


def _variant(pipeline: Pipeline, opts: Options, answer: Sampling | None) -> Pipeline:
    """`pipeline` with this request's run settings and its answer step's sampling: a shallow
    copy sharing its clients, cache, Team and Conductor (only `settings` and
    `answer_sampling` differ; the Conductor's prompt settings are kept)."""
    s = pipeline.settings
    update: dict = {}
    if opts.recursion is not None:
        update["recursion"] = opts.recursion
    if opts.max_calls is not None:
        update["max_calls"] = _cap(s.max_calls, opts.max_calls)
    if opts.max_total_tokens is not None:
        update["max_tokens"] = _cap(s.max_tokens, opts.max_total_tokens)
    if opts.max_cost is not None:
        update["max_cost"] = _cap(s.max_cost, opts.max_cost)
    if not update and answer is None:
        return pipeline
    pipe = copy.copy(pipeline)
    pipe.settings = s.model_copy(update=update)
    pipe.answer_sampling = answer
    return pipe


def _asked(req) -> dict:
    """What the request asked of the answer's sampling, and its `user`, for the trace."""
    fields = ("temperature", "top_p", "seed", "stop", "max_tokens", "max_completion_tokens",
              "max_output_tokens")
    asked = {k: getattr(req, k) for k in fields if getattr(req, k, None) is not None}
    user = getattr(req, "user", None)
    return {**({"sampling": asked} if asked else {}), **({"user": user} if user else {})}


def _start(ask: Callable[[Any], Awaitable[RunResult]], names: list[str], traces: TraceStore,
           tid: str, req: ChatRequest, opts: Options, slots: Slots,
           owner: str | None, scope: dict, question: str, drain: Drain) -> Run:
    """Start the run as a task; its slot is given back when the task ends, whatever happens
    to the response. The run's outcome goes into the request's access log line (`scope`), and
    its trace is written whether it finishes or is stopped."""
    events: asyncio.Queue = asyncio.Queue()
    run = Run(events)

    def on_event(kind: str, obj) -> None:
        line = chat_completions.progress(kind, obj, names)
        if line:
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
        wait = traces.shared and opts.return_trace_id  # readable from every process once written
        written = traces.put(tid, data, wait=wait)  # written by the store's process, readable now
        if wait:
            await asyncio.wrap_future(written)
        cause = result.outcome.cause
        outcome = ("answered" if result.answer is not None
                   else f"no answer ({cause.reason if cause else '?'})")
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


async def _stream(run: Run, cid: str, created: int, model: str, tid: str | None,
                  include_usage: bool) -> AsyncIterator[str]:
    extra = {"usage": None} if include_usage else {}

    def piece(delta: dict | None, finish: str | None = None, **more) -> str:
        return chat_completions.chunk(cid, created, model, delta, finish, **{**extra, **more})

    try:
        yield piece({"role": "assistant", "content": ""})
        async for line in _progress(run):
            yield ": keep-alive\n\n" if line is None else piece({"reasoning_content": line})
        result, error = _finished(run)
        if error is not None:
            yield chat_completions.sse(error.body())
            return
        for text in chat_completions.answer_pieces(result.answer):
            yield piece({"content": text})
        ids = {"podium_trace_id": tid} if tid else {}
        yield piece({}, chat_completions.finish_reason(result), **ids)
        if include_usage:
            yield chat_completions.chunk(cid, created, model, None, usage=chat_completions.usage_json(result),
                          podium=chat_completions.podium_json(result), **ids)
        yield chat_completions.sse("[DONE]")
    finally:
        run.stop(CLIENT_GONE)  # when still running, the client went away: stop paying


def _without_slash(app: Any, request: Request) -> str | None:
    """The relative URL of `request` without its trailing slash, when a route answers there."""
    path = request.url.path
    if len(path) < 2 or not path.endswith("/"):
        return None
    scope = {**request.scope, "path": path.rstrip("/")}
    if not any(route.matches(scope)[0] != Match.NONE for route in app.router.routes):
        return None
    return scope["path"] + (f"?{request.url.query}" if request.url.query else "")
