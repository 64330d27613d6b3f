"""What both APIs' replies share: the `podium` field, and the stream of a run's events.

`podium_json` is the field OpenAI's formats have no place for: calls, cost (USD at the pool's
list prices: `cost_usd`, null when a called model has no price; `known_cost_usd`, the priced
calls' sum; `workers_cost_usd`, the workers' part, null when a worker called has no price;
`unpriced`, the calls of each model without a price, the Conductor's as `conductor`), the
plan against the request's budget (as the trace's `budget`), the outcome's notes (a
fallback, a kept answer) and the run's wall time.

A streamed reply reads `run_events` (the progress lines, `podium.serve.progress`, until the
answer begins; then the answer's text as the worker writing it produces it, where its
backend streams), then sends what is left of the answer (`rest_of`, in `answer_pieces`: the
whole answer when its worker could not stream, or its reply was cached), as an
`event_stream` response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse

from podium.serve.errors import ApiError
from podium.serve.inflight import InFlight
from podium.workflow.execute import AnswerText

KEEPALIVE_S = 15.0
KEEPALIVE = ": keep-alive\n\n"  # an SSE comment, sent when no event came for KEEPALIVE_S
ANSWER_PIECE = 256  # characters per answer delta, for an answer sent whole


def podium_json(result) -> dict[str, Any]:
    out = result.outcome
    used, workers = out.used.to_json(), out.workers_used.to_json()
    return {"calls": out.used.calls, "cost_usd": used["cost_usd"],
            "known_cost_usd": used["known_cost_usd"], "workers_cost_usd": workers["cost_usd"],
            "unpriced": used["unpriced"],
            **({"budget": out.budget.to_json(out.spent)} if out.budget is not None else {}),
            "notes": list(out.notes), "fallback": out.fallback,
            "wall_s": round(result.wall_s, 3)}


def event_stream(events: AsyncIterator[str], headers: dict) -> StreamingResponse:
    """The SSE response sending `events`, unbuffered by proxies."""
    return StreamingResponse(events, media_type="text/event-stream", headers={
        "Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers})


async def run_events(flight: InFlight) -> AsyncIterator[str | AnswerText | None]:
    """The run's progress lines and pieces of the answer's text, as they come; None when
    nothing came for KEEPALIVE_S (send a keep-alive comment). Ends when the run does. Once
    the answer's text has begun, the progress lines are left out (the trace has them)."""
    answering = False
    while True:
        try:
            item = await asyncio.wait_for(flight.events.get(), KEEPALIVE_S)
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


def answer_pieces(answer: str) -> list[str]:
    return [answer[i:i + ANSWER_PIECE] for i in range(0, len(answer), ANSWER_PIECE)] or [""]


def replaced_answer() -> ApiError:
    return ApiError(502, "The step writing the answer failed after part of its text was "
                    "streamed, and the answer is another round's; the trace has both. Retry, "
                    "or ask without streaming.", code="answer_replaced")
