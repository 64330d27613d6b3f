"""The HTTP app: the team as one OpenAI-compatible model, `podium`.

    POST /v1/chat/completions   run the pipeline on the conversation (JSON, or SSE when
                                `stream` is true)
    POST /v1/responses          the same through the Responses API (podium.serve.responses)
    GET  /v1/models             the one model, `podium`  (also /v1/models/podium)
    GET  /v1/traces/{id}        a request's trace (ids from `return_trace_id`), for the key
                                that made the request only
    GET  /traces, /traces/{id}  the trace viewer: the key's recent traces, one trace drawn
                                (podium.viewer; a browser may send the key as the Basic-auth
                                password)
    GET  /metrics               the server's figures in Prometheus' format (podium.serve.metrics)
    GET  /health                {"status": "ok"} (HEAD too); the only route without a key

With `pass_through` (`podium serve --pass-through`) every worker is also a model of its own,
named as in the pool: a request for it is one call to that worker with the bare question
(`run.worker_messages = "question"`, the same as `podium eval --system openai:...` asks; a
conversation's earlier turns come before it as chat turns, as the client sent them), with
its usage and trace like any other, so a single worker can be evaluated served the same way
as the team.

Each API's package answers its route (`podium.serve.chat.route`,
`podium.serve.responses.route`), through the `TeamServer` (podium.serve.team_server) that
runs the team; this module only routes. Every error is an OpenAI-style body (`podium.serve.errors`). A client that
goes away before its answer (streamed or not) cancels its run: an embedded model stops
generating at its next token. A shutdown answers the runs it cuts short with a 503 (`podium.serve.shutdown`). Either
way the run's trace is written, with what was asked and why it has no answer (`stopped`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from podium.pipeline import Pipeline
from podium.serve.access import AccessLog
from podium.serve.chat.route import chat_completions
from podium.serve.errors import ApiError
from podium.serve.metrics import ERROR
from podium.serve.pipeline_routes import PipelineRoutes, unexpected
from podium.serve.responses.route import responses
from podium.serve.team_server import MODEL, ServeConfig, TeamServer, no_model
from podium.viewer import index_page, trace_page

__all__ = ["MODEL", "ServeConfig", "TeamServer", "create_app"]


def create_app(config: ServeConfig, pipeline: Pipeline) -> FastAPI:
    """The FastAPI app: `TeamServer`'s routes, the model list, the traces (JSON and the viewer
    pages), health, and OpenAI-style errors for everything else."""
    server = TeamServer(config, pipeline)
    traces = server.traces

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(traces.start)
        await pipeline.load()  # before the first request: see EmbeddedClient.load
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
        request.scope[ERROR] = exc.code or "error"
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404 and (moved := _without_slash(app, request)) is not None:
            return RedirectResponse(moved, status_code=307)
        if exc.status_code == 404:
            msg = (f"No route {request.method} {request.url.path}. The routes are POST "
                   "/v1/chat/completions, POST /v1/responses, GET /v1/models, "
                   "GET /v1/traces/{id}, GET /traces, GET /traces/{id}, GET /metrics, GET /health.")
            request.scope[ERROR] = "not_found"
            return ApiError(404, msg, code="not_found").response()
        if exc.status_code == 405:
            request.scope[ERROR] = "method_not_allowed"
            return ApiError(405, f"{request.method} is not allowed on {request.url.path}.",
                            code="method_not_allowed").response()
        request.scope[ERROR] = str(exc.status_code)
        return ApiError(exc.status_code, str(exc.detail)).response()

    @app.exception_handler(Exception)  # what PipelineRoutes, inside it, did not answer
    async def _unexpected(request: Request, exc: Exception) -> Response:
        return unexpected(request, exc)

    @app.api_route("/health", methods=["GET", "HEAD"])  # HEAD: load balancers' probes
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/metrics", dependencies=[Depends(server.auth)])
    async def metrics() -> Response:
        body, kind = server.metrics.page()
        return Response(body, media_type=kind)

    @app.get("/v1/models", dependencies=[Depends(server.auth)])
    async def models() -> dict:
        return {"object": "list", "data": [server.model_card(m) for m in server.served]}

    @app.get("/v1/models/{model}", dependencies=[Depends(server.auth)])
    async def model(model: str) -> dict:
        if model not in server.served:
            raise no_model(model, server.served)
        return server.model_card(model)

    @app.get("/v1/traces/{trace_id}")
    async def trace(trace_id: str, owner: str | None = Depends(server.auth)) -> dict:
        data = await asyncio.to_thread(traces.read_as, trace_id, owner)
        if data is None:  # another key's trace is not found either: ids are not confirmed
            raise no_trace(owner, "ids look like tr- and 32 hex digits; ")
        return data

    @app.get("/traces", response_class=HTMLResponse)
    async def trace_list(owner: str | None = Depends(server.page_auth)) -> HTMLResponse:
        return HTMLResponse(index_page(await asyncio.to_thread(traces.recent, 100, owner)))

    @app.get("/traces/{trace_id}", response_class=HTMLResponse)
    async def trace_view(trace_id: str,
                         owner: str | None = Depends(server.page_auth)) -> HTMLResponse:
        data = await asyncio.to_thread(traces.read_as, trace_id, owner)
        if data is None:
            raise no_trace(owner)
        return HTMLResponse(trace_page(data))

    # The two routes that run the pipeline: answered by PipelineRoutes, past the router and
    # the exception layers; also plain Starlette routes (no dependency solving, no response
    # model) for what PipelineRoutes passes on.
    routes = {"/v1/chat/completions": functools.partial(chat_completions, server),
              "/v1/responses": functools.partial(responses, server)}
    for path, handler in routes.items():
        app.add_route(path, handler, methods=["POST"])
    app.add_middleware(PipelineRoutes, routes=routes)
    # added last: the outermost, so it sees (and counts) every request
    app.add_middleware(AccessLog, metrics=server.metrics)
    return app


def no_trace(owner: str | None, hint: str = "") -> ApiError:
    """The 404 for a trace id that is not there for `owner`: on a server with keys, the key
    that asked (None: a server without keys, where every trace is everyone's)."""
    whose = "No trace has" if owner is None else "No trace of this API key has"
    return ApiError(404, f"{whose} that id ({hint}the server keeps the newest traces only).",
                    code="trace_not_found", param="trace_id")


def _without_slash(app: Any, request: Request) -> str | None:
    """The relative URL of `request` without its trailing slash, when a route answers there."""
    path = request.url.path
    if len(path) < 2 or not path.endswith("/"):
        return None
    scope = {**request.scope, "path": path.rstrip("/")}
    if not any(route.matches(scope)[0] != Match.NONE for route in app.router.routes):
        return None
    return scope["path"] + (f"?{request.url.query}" if request.url.query else "")
