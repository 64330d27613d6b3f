"""The two routes that run the pipeline, served past Starlette's router and exception layers.

Every request that runs the team takes `POST /v1/chat/completions` or `POST /v1/responses`.
Through the app, such a request passes Starlette's and FastAPI's exception layers, the
router's match against every route and Starlette's route wrapper before it reaches its
handler, none of which these two routes use. `PipelineRoutes` is a pure ASGI middleware that
hands exactly those two (path, method) pairs to their handlers itself: a served request's CPU
went from 1.63 to 1.47 ms at 32 in flight, and from 2.00 to 1.84 ms at 8 (benchmarks/README.md).
It does what those layers did with the outcome: the handler's response, an `ApiError`'s
OpenAI-style body, or a 500 for anything else, logged with its traceback. Unlike Starlette's
outermost layer, it does not raise the exception again once the 500 is sent, so uvicorn keeps
the connection open instead of closing it under a keep-alive client. Every other request,
including any other method on those paths (a 405) or a path with a trailing slash, goes on to
the app unchanged, where the same handlers are also registered.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from podium.serve.errors import ApiError

log = logging.getLogger("podium.serve")

Handler = Callable[[Request], Awaitable[Response]]


def unexpected(request: Request, exc: BaseException) -> Response:
    """The 500 for an exception no route expected, logged with its traceback."""
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return ApiError(500, f"podium failed unexpectedly ({type(exc).__name__}); the server log "
                    "has the traceback.", code="internal").response()


class PipelineRoutes:
    """Pure ASGI middleware: `routes` (path -> handler) answered for POST, past the app."""

    def __init__(self, app: Any, routes: dict[str, Handler]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        handler = (self.routes.get(scope["path"])
                   if scope["type"] == "http" and scope["method"] == "POST" else None)
        if handler is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            response = await handler(request)
        except ApiError as exc:
            response = exc.response()
        except ClientDisconnect:  # gone while its body was read: no one to answer
            return
        except Exception as exc:
            response = unexpected(request, exc)
        await response(scope, receive, send)
