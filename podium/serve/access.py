"""The server's access log: one line per HTTP request, written when its response is done.

    INFO      podium: 127.0.0.1:40312 "POST /v1/chat/completions HTTP/1.1" 200 0.061s tr-…: answered, 1 calls

The line has the client's address, the method, the path (never the query string), the
status, the time to the end of the response and, for a request that ran the team, its trace
id and outcome, which the route leaves in the request's ASGI scope under `RUN_NOTE`. A
response that never started (an exception on its way to the 500 handler) is logged as 500.

It replaces uvicorn's access log, which would write a second line for every run: at high
request rates the log lines are a measurable part of the server's CPU (benchmarks/README.md).
Headers are never logged, so neither is a key.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("podium.serve")

RUN_NOTE = "podium.run"  # the scope key the routes put a run's outcome under


class AccessLog:
    """Pure ASGI middleware: `app` with one log line per HTTP request, each also counted in
    `metrics` (`podium.serve.metrics.ServeMetrics`) when given."""

    def __init__(self, app: Any, metrics: Any = None) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 0

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client")
            note = scope.get(RUN_NOTE)
            took = time.perf_counter() - t0
            log.info('%s "%s %s HTTP/%s" %d %.3fs%s',
                     f"{client[0]}:{client[1]}" if client else "-", scope["method"],
                     scope["path"], scope.get("http_version", "1.1"), status or 500,
                     took, f" {note}" if note else "")
            if self.metrics is not None:
                self.metrics.answered(scope, status or 500, took)
