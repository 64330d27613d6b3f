"""The two routes that run the pipeline, served past Starlette's router and exception layers.

Every request that runs the team takes `POST /v1/chat/completions` or `POST /v1/responses`.
Through the app, such a request passes Starlette's and FastAPI's exception layers, the
router's match against every route and Starlette's route wrapper before it reaches its
handler, none of which these two routes use. `PipelineRoutes` is a pure ASGI middleware that
hands exactly those two (path, method) pairs to their handlers itself, which saves CPU on
every served request (benchmarks/README.md, serve.py, has the measured figures).
It does what those layers did with the outcome: the handler's response, an `ApiError`'s
OpenAI-style body, or a 500 for anything else, logged with its traceback. Every other request,
including any other method on those paths (a 405) or a path with a trailing slash, goes on to
the app, where the same handlers are also registered.

An exception that nothing handled, on any route, is answered here with that 500 and goes no
further. Starlette's outermost layer would send the same 500 and then raise the exception
again, and uvicorn closes the connection of a request that raised once its response has
started: a keep-alive client lost its connection with every 500. An exception raised after a
response has started still goes on up, since only closing the connection can tell the client
that the response is cut short.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from podium.serve.access import CLIENT_GONE
from podium.serve.errors import ApiError
from podium.serve.metrics import ERROR

log = logging.getLogger("podium.serve")

Handler = Callable[[Request], Awaitable[Response]]


def unexpected(request: Request, exc: BaseException) -> Response:
    """The 500 for an exception no route expected, logged with its traceback."""
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    request.scope[ERROR] = "internal"
    return ApiError(500, f"podium failed unexpectedly ({type(exc).__name__}); the server log "
                    "has the traceback.", code="internal").response()


class PipelineRoutes:
    """Pure ASGI middleware: `routes` (path -> handler) answered for POST, past the app;
    every other request through the app, its unhandled exceptions answered with a 500."""

    def __init__(self, app: Any, routes: Mapping[str, Handler]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        handler = self.routes.get(scope["path"]) if scope["method"] == "POST" else None
        started = False

        async def sending(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            if handler is None:
                await self.app(scope, receive, sending)
            else:
                await _answer(handler, scope, receive, sending)
        except ClientDisconnect:  # gone before its answer: no one to answer
            if started:
                raise
            scope[CLIENT_GONE] = True
        except Exception as exc:
            if started:  # only closing the connection can say the response is cut short
                raise
            await unexpected(Request(scope, receive, send), exc)(scope, receive, send)


async def _answer(handler: Handler, scope: dict, receive: Any, send: Any) -> None:
    """`handler`'s response, or the OpenAI-style body of the `ApiError` it raised."""
    try:
        response = await handler(Request(scope, receive, send))
    except ApiError as exc:
        scope[ERROR] = exc.code or "error"
        response = exc.response()
    await response(scope, receive, send)
