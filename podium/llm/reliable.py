"""Retries, backoff and rate limits around any `ChatClient`.

Backends only translate one call into one `ChatResponse` or one `WorkerError`; what to do when
a call fails lives here, the same for every backend:

* `RateLimiter` keeps a model within its requests-per-minute and tokens-per-minute limits
  (a sliding 60-second window shared by every call to that model);
* `ReliableClient` waits for the limiter before each attempt, retries retryable failures
  (rate limits, server errors, transport failures, timeouts) with exponential backoff and
  jitter, or as long as a server's Retry-After asks, never retries auth, bad-request or
  context-length errors, and re-asks a bounded number of times when the reply is empty.

Every failed attempt is recorded (attempt, kind, status, error, wait_s) on the response's
`retries`, or on the `WorkerError` raised when the last attempt fails too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from podium.config import ModelSpec
from podium.errors import WorkerError
from podium.llm.base import (
    ChatClient,
    ChatResponse,
    ClientWrapper,
    Message,
    Sampling,
    TextSink,
    applied,
    sampling_kw,
    stream_kw,
)
from podium.llm.tools import Tool, ToolChoice, tools_kw

WINDOW_S = 60.0
MAX_RETRY_AFTER_S = 120.0  # a server's Retry-After is honoured up to this long
DEFAULT_COMPLETION_TOKENS = 512  # the token estimate's completion part without max_tokens

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[Any]]


class RateLimiter:
    """Requests-per-minute and tokens-per-minute limits for one model, shared by every call to it.

    A request is admitted when one more request, and its estimated tokens, fit in the trailing
    60 s window; a single request estimated above `tpm` is admitted alone (on an empty window)
    rather than never. Waiters are admitted in arrival order.
    """

    def __init__(self, rpm: int | None, tpm: int | None, *, clock: Clock = time.monotonic,
                 sleep: Sleep = asyncio.sleep) -> None:
        self.rpm, self.tpm = rpm, tpm
        self._clock, self._sleep = clock, sleep
        self._window: deque[list[float]] = deque()  # [start time, tokens], oldest first
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock_obj: asyncio.Lock | None = None

    @property
    def _lock(self) -> asyncio.Lock:
        """The lock of the running event loop (made anew for a new loop)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._lock_obj is None:
            self._loop, self._lock_obj = loop, asyncio.Lock()
        return self._lock_obj

    def _expire(self, now: float) -> None:
        while self._window and self._window[0][0] + WINDOW_S <= now:
            self._window.popleft()

    def _wait_for(self, now: float, est_tokens: int) -> float:
        """Seconds until the request fits (0: it fits now)."""
        until = now
        if self.rpm is not None and len(self._window) >= self.rpm:
            until = max(until, self._window[len(self._window) - self.rpm][0] + WINDOW_S)
        if self.tpm is not None:
            used = sum(tokens for _, tokens in self._window)
            for start, tokens in self._window:  # drop the oldest until the request fits
                if used <= 0 or used + est_tokens <= self.tpm:
                    break
                used -= tokens
                until = max(until, start + WINDOW_S)
        return until - now

    async def acquire(self, est_tokens: int) -> None:
        """Wait until one more request and `est_tokens` fit in the trailing 60 s window."""
        if self.rpm is None and self.tpm is None:
            return
        async with self._lock:  # held while waiting: first come, first served
            while True:
                now = self._clock()
                self._expire(now)
                wait = self._wait_for(now, est_tokens)
                if wait <= 0:
                    self._window.append([now, float(est_tokens)])
                    return
                await self._sleep(wait)

    def settle(self, est_tokens: int, actual_tokens: int) -> None:
        """Replace a call's token estimate by what it really used (if still in the window)."""
        for entry in reversed(self._window):
            if entry[1] == est_tokens:
                entry[1] = float(actual_tokens)
                return


def estimate_tokens(messages: list[Message], max_tokens: int | None) -> int:
    """A rough upper bound of a call's tokens: ~4 characters a token, plus the reply."""
    chars = sum(len(m.get("content") or "") for m in messages)
    return chars // 4 + (max_tokens or DEFAULT_COMPLETION_TOKENS)


class ReliableClient(ClientWrapper):
    """Wraps a backend client: RPM/TPM limits, timeouts, retries with exponential backoff +
    jitter honouring Retry-After, no retry on auth/bad_request/context_length, bounded re-asks
    on empty."""

    def __init__(self, inner: ChatClient, spec: ModelSpec, *, limiter: RateLimiter | None = None,
                 sleep: Sleep = asyncio.sleep, rng: random.Random | None = None) -> None:
        super().__init__(inner)
        self.spec = spec
        if limiter is None and (spec.rpm is not None or spec.tpm is not None):
            limiter = RateLimiter(spec.rpm, spec.tpm)
        self.limiter = limiter
        self._sleep = sleep
        self._rng = rng or random.Random()

    def backoff(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `retry` (0 = the first retry)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), MAX_RETRY_AFTER_S)
        s = self.spec
        return min(s.backoff_max_s, s.backoff_s * 2**retry) * (0.5 + self._rng.random() / 2)

    async def chat(self, messages: list[Message], *, grammar: str | None = None,
                   sample_id: int | str = 0, sampling: Sampling | None = None,
                   on_text: TextSink | None = None, tools: Sequence[Tool] | None = None,
                   tool_choice: ToolChoice | None = None,
                   parallel_tool_calls: bool | None = None) -> ChatResponse:
        """The reply, after as many retries as the model's settings allow. A streamed reply
        (`on_text`) is retried only while none of its text has been passed on: text already
        sent cannot be taken back, so a call that fails after it raises. A reply with tool
        calls and no text is not empty."""
        est = estimate_tokens(messages, applied(self.spec, sampling).max_tokens)
        records: list[dict[str, Any]] = []
        errors = empties = 0  # retries used on failures, re-asks used on empty replies
        sent: list[str] = []

        def passed_on(piece: str) -> None:  # the stream's sink when there is `on_text`
            sent.append(piece)
            if on_text is not None:
                on_text(piece)

        while True:
            attempt = len(records) + 1
            if self.limiter is not None:
                await self.limiter.acquire(est)
            try:
                resp = await self.inner.chat(
                    messages, grammar=grammar, sample_id=sample_id, **sampling_kw(sampling),
                    **stream_kw(self.inner, passed_on if on_text is not None else None),
                    **tools_kw(tools, tool_choice, parallel_tool_calls))
            except WorkerError as exc:
                error = exc
            except TimeoutError:
                error = WorkerError(self.name, "transport", "the call timed out; raise timeout_s "
                                    "for this model or retry later")
            else:
                if self.limiter is not None:
                    self.limiter.settle(est, resp.total_tokens)
                if resp.text.strip() or resp.tool_calls \
                        or empties >= self.spec.empty_retries:
                    return dataclasses.replace(resp, retries=tuple(records))
                empties += 1
                wait = self.backoff(len(records))
                records.append(_record(attempt, "empty", None, "the reply was empty", wait))
                await self._sleep(wait)
                continue
            if not error.retryable or errors >= self.spec.retries or "".join(sent).strip():
                error.retries = records  # (text already passed on: not retried)
                raise error
            errors += 1
            wait = self.backoff(len(records), error.retry_after)
            records.append(_record(attempt, error.kind, error.status, str(error), wait))
            await self._sleep(wait)


def _record(attempt: int, kind: str, status: int | None, error: str,
            wait_s: float) -> dict[str, Any]:
    return {"attempt": attempt, "kind": kind, "status": status, "error": error[:200],
            "wait_s": round(wait_s, 3)}
