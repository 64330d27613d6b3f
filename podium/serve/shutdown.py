"""A graceful shutdown that answers every request it cuts short.

On SIGTERM (or Ctrl-C) uvicorn stops accepting connections and waits for the requests in
flight. Left to itself, once its `timeout_graceful_shutdown` has passed it cancels them: a
request that was not answered yet gets a text/plain 500, a stream is cut without an event,
and the run's trace is never written. So podium keeps the deadline itself:

* `Server` (uvicorn's, for `podium serve` and each of its `--processes`) tells the app's
  `Drain` when the shutdown begins, and gives uvicorn a deadline `MARGIN_S` later than the
  app's own;
* at the app's deadline (`--graceful-timeout` seconds after the signal) `Drain` cancels the
  runs still in flight, marked as stopped by the shutdown: each request is answered with a
  503 `server_shutting_down` (JSON, or an SSE error event on a stream), and each run's trace
  is written with what was asked and why it has no answer. uvicorn then finds every request
  answered, and the app's shutdown flushes the traces to disk.

A run that finishes before the deadline is answered as always.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import uvicorn

MARGIN_S = 5.0  # uvicorn's own deadline is this much later than the app's
SHUT_DOWN = "the server shut down before the run finished (--graceful-timeout)"


class Drain:
    """The runs in flight, and the shutdown's deadline for them."""

    def __init__(self, grace_s: float | None = None) -> None:
        self.grace_s = grace_s  # None: uvicorn's own deadline only (an app run by hand)
        self.in_flight: set[Any] = set()  # podium.serve.inflight.InFlight, while it runs
        self.deadline: float | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def started(self) -> None:
        """Called by the app's lifespan in its event loop."""
        self.loop = asyncio.get_running_loop()

    def begin(self) -> None:
        """The shutdown has begun (from any thread or a signal handler): cancel what is still
        running `grace_s` seconds from now."""
        if self.loop is None or self.grace_s is None or self.deadline is not None:
            return
        self.deadline = time.monotonic() + self.grace_s
        self.loop.call_soon_threadsafe(self.loop.call_later, self.grace_s, self.expire)

    def expire(self) -> None:
        for flight in list(self.in_flight):
            if not flight.task.done():
                flight.shut_down = True
                flight.stop(SHUT_DOWN)


class Server(uvicorn.Server):
    """uvicorn's server, telling `drain` when a shutdown begins and keeping its own deadline
    `MARGIN_S` after the app's (so that every request in flight is answered first)."""

    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        if drain.grace_s is not None:
            # (uvicorn types it int; it goes to asyncio.timeout, which takes any float)
            config.timeout_graceful_shutdown = drain.grace_s + MARGIN_S  # type: ignore[assignment]
        super().__init__(config)
        self.drain = drain

    def handle_exit(self, sig: int, frame: Any) -> None:
        if sig in (signal.SIGTERM, signal.SIGINT):
            self.drain.begin()
        super().handle_exit(sig, frame)
