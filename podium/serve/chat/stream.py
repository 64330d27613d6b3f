"""The Chat Completions stream of one run: Server-Sent Events of `chat.completion.chunk`s.

The role; the progress as `reasoning_content` deltas, one line each
(`podium.serve.progress`), until the answer begins; the answer as `content` deltas as the
worker writing it produces them (where its backend streams: OpenAI-compatible endpoints and
the embedded model; otherwise, and for a cached reply, the whole answer once its step is
done, in pieces); a run that called tools, its calls as `tool_calls` deltas (each call's
id, type and name, then its whole arguments); the finish reason ("tool_calls" after calls);
the usage chunk when `stream_options.include_usage` asks for it; `data: [DONE]`. A run without an answer ends with one `data: {"error": ...}`
event instead.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from podium.llm.tools import ToolCall
from podium.serve.chat.reply import finish_reason, usage_json
from podium.serve.inflight import CLIENT_GONE, InFlight, finished
from podium.serve.reply import (
    KEEPALIVE,
    answer_pieces,
    podium_json,
    replaced_answer,
    rest_of,
    run_events,
)
from podium.workflow.execute import AnswerText


def chunk(cid: str, created: int, model: str, delta: dict | None,
          finish: str | None = None, **extra: Any) -> str:
    """One SSE event holding a `chat.completion.chunk` (`delta=None`: no choices, the usage
    chunk)."""
    body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created,
                            "model": model,
                            "choices": [] if delta is None else
                            [{"index": 0, "delta": delta, "logprobs": None,
                              "finish_reason": finish}]}
    body.update(extra)
    return sse(body)


def sse(body: dict | str) -> str:
    data = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    return f"data: {data}\n\n"


async def stream(flight: InFlight, cid: str, created: int, model: str, tid: str | None,
                 include_usage: bool,
                 seal: Callable[[Any], Sequence[ToolCall]] = lambda result: ()
                 ) -> AsyncIterator[str]:
    """The Chat Completions stream of one run (this module's docstring lists its events);
    `seal` gives a finished run's tool calls, their ids sealed."""
    extra = {"usage": None} if include_usage else {}

    def piece(delta: dict | None, finish: str | None = None, **more) -> str:
        return chunk(cid, created, model, delta, finish, **{**extra, **more})

    try:
        yield piece({"role": "assistant", "content": ""})
        sent = ""
        async for item in run_events(flight):
            if item is None:
                yield KEEPALIVE
            elif isinstance(item, AnswerText):
                sent += item.text
                yield piece({"content": item.text})
            else:
                yield piece({"reasoning_content": item})
        result, error = finished(flight)
        rest = rest_of(result.answer, sent) if error is None else None
        if rest is None:  # the run failed, or its answer is not the text already sent
            yield sse((error if error is not None else replaced_answer()).body())
            return
        calls = seal(result)
        if rest or not (sent or calls):
            for text in answer_pieces(rest):
                yield piece({"content": text})
        for k, call in enumerate(calls):  # OpenAI's shape: the name first, then arguments
            yield piece({"tool_calls": [{"index": k, "id": call.id, "type": "function",
                                         "function": {"name": call.name, "arguments": ""}}]})
            yield piece({"tool_calls": [{"index": k,
                                         "function": {"arguments": call.arguments}}]})
        ids = {"podium_trace_id": tid} if tid else {}
        yield piece({}, "tool_calls" if calls else finish_reason(result), **ids)
        if include_usage:
            yield chunk(cid, created, model, None, usage=usage_json(result),
                        podium=podium_json(result), **ids)
        yield sse("[DONE]")
    finally:
        flight.stop(CLIENT_GONE)  # when still running, the client went away: stop paying
