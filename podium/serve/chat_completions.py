"""The Chat Completions replies: the completion body, and the stream of one run.

The body and the chunks are pure functions of a finished `RunResult`, so the wire format is in
one place and is tested without a server; `stream` sends them as the run goes.

**The answer** is the pipeline's final answer exactly as the last worker wrote it (so it may
hold the `<answer>…</answer>` tags the workers are prompted to use); podium does not rewrite
it. `finish_reason` is "length" when the step that gave the answer stopped at its model's
`max_tokens` (the answer is cut short), otherwise "stop".

**Usage** is `outcome.used`: every call the run made (the Conductor's and every worker's,
answers from the response cache included), summed. The `podium` field adds what OpenAI's
format has no place for: calls, cost (USD at the pool's list prices; null when a called model
has no price) and the outcome's notes (a fallback, a kept answer).

**Streaming** sends the progress as `reasoning_content` deltas, one line each
(`podium.serve.progress`), until the answer begins; the answer as `content` deltas as the
worker writing it produces them (where its backend streams: OpenAI-compatible endpoints and
the embedded model; otherwise, and for a cached reply, the whole answer once its step is
done, in pieces).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from podium.serve.runs import CLIENT_GONE, Run, finished, replaced_answer, rest_of, run_events
from podium.workflow.execute import AnswerText

ANSWER_PIECE = 256  # characters per content delta


def usage_json(result) -> dict[str, int]:
    used = result.outcome.used
    return {"prompt_tokens": used.prompt_tokens, "completion_tokens": used.completion_tokens,
            "total_tokens": used.total_tokens}


def podium_json(result) -> dict[str, Any]:
    out = result.outcome
    return {"calls": out.used.calls, "cost_usd": out.used.cost, "notes": list(out.notes),
            "fallback": out.fallback, "wall_s": round(result.wall_s, 3)}


def finish_reason(result) -> str:
    """"length" when the step whose response is the answer stopped at its token limit."""
    answer = result.answer
    run = result.final_round.execution
    if answer is None or run is None:
        return "stop"
    for step in reversed(run.steps):
        if step.status == "ok" and (step.response or "").strip() == answer.strip():
            return "length" if step.finish_reason == "length" else "stop"
    return "stop"


def completion_json(cid: str, created: int, model: str, result,
                    trace_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": cid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.answer},
                     "logprobs": None, "finish_reason": finish_reason(result)}],
        "usage": usage_json(result),
        "podium": podium_json(result),
    }
    if trace_id:
        body["podium_trace_id"] = trace_id
    return body


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


def answer_pieces(answer: str) -> list[str]:
    return [answer[i:i + ANSWER_PIECE] for i in range(0, len(answer), ANSWER_PIECE)] or [""]


async def stream(run: Run, cid: str, created: int, model: str, tid: str | None,
                 include_usage: bool) -> AsyncIterator[str]:
    """The Chat Completions stream of one run: the role, the progress lines as
    `reasoning_content` deltas, the answer as `content` deltas (as it is written, then what
    is left of it), the finish reason, the usage chunk when asked, `[DONE]`."""
    extra = {"usage": None} if include_usage else {}

    def piece(delta: dict | None, finish: str | None = None, **more) -> str:
        return chunk(cid, created, model, delta, finish, **{**extra, **more})

    try:
        yield piece({"role": "assistant", "content": ""})
        sent = ""
        async for item in run_events(run):
            if item is None:
                yield ": keep-alive\n\n"
            elif isinstance(item, AnswerText):
                sent += item.text
                yield piece({"content": item.text})
            else:
                yield piece({"reasoning_content": item})
        result, error = finished(run)
        rest = rest_of(result.answer, sent) if error is None else None
        if rest is None:  # the run failed, or its answer is not the text already sent
            yield sse((error if error is not None else replaced_answer()).body())
            return
        if rest or not sent:
            for text in answer_pieces(rest):
                yield piece({"content": text})
        ids = {"podium_trace_id": tid} if tid else {}
        yield piece({}, finish_reason(result), **ids)
        if include_usage:
            yield chunk(cid, created, model, None, usage=usage_json(result),
                        podium=podium_json(result), **ids)
        yield sse("[DONE]")
    finally:
        run.stop(CLIENT_GONE)  # when still running, the client went away: stop paying
