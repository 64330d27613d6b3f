"""The server's access log: one line per HTTP request, written when its response is done.

    INFO      podium: 127.0.0.1:40312 "POST /v1/chat/completions HTTP/1.1" 200 0.061s tr-…: answered, 1 calls

The line has the client's address, the method, the path (never the query string), the
status, the time to the end of the response and, for a request that ran the team, its trace
id and outcome, which the route leaves in the request's ASGI scope under `RUN_NOTE`. A
response that never started is logged as 499 (nginx's "client closed request") when the
client went away first (`CLIENT_GONE` in the scope), else as 500 (an exception on its way to
the 500 handler).

It replaces uvicorn's access log, which would write a second line for every run: at high
request rates the log lines are a measurable part of the server's CPU (benchmarks/README.md).
Headers are never logged, so neither is a key.

**Nothing a client sends reaches the log raw.** A request's path is decoded (`%0d%0a` is a
line break, `%1b` an escape): written as it came it would forge a log line or drive the
operator's terminal. `Printable`, a filter on the `podium.serve` logger, so on every line the
server logs, writes each argument's control and other non-printable characters as Python
escapes (`\r`, `\n`, `\x1b`); podium's own format strings are left as they are.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from podium.printable import printable

log = logging.getLogger("podium.serve")


class Printable(logging.Filter):
    """Writes every argument of a log record (and a message without arguments) printable: a
    value a client sent cannot break a log line or reach a terminal as an escape sequence.
    Numbers stay numbers (for `%d`); anything else is its `str`, escaped."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(a if isinstance(a, int | float) else printable(str(a))
                                for a in record.args)
        elif isinstance(record.args, dict) and record.args:
            record.args = {k: v if isinstance(v, int | float) else printable(str(v))
                           for k, v in record.args.items()}
        elif isinstance(record.msg, str):
            record.msg = printable(record.msg)
        return True


log.addFilter(Printable())

RUN_NOTE = "podium.run"  # the scope key the routes put a run's outcome under
CLIENT_GONE = "podium.client_gone"  # the scope key set when the client left before a response


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
            status = status or (499 if scope.get(CLIENT_GONE) else 500)
            log.info('%s "%s %s HTTP/%s" %d %.3fs%s',
                     f"{client[0]}:{client[1]}" if client else "-", scope["method"],
                     scope["path"], scope.get("http_version", "1.1"), status,
                     took, f" {note}" if note else "")
            if self.metrics is not None:
                self.metrics.answered(scope, status, took)
