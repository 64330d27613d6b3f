"""The Chat Completions body of a finished run (`chat.completion`), and its parts.

Pure functions of a `RunResult`, so the wire format is tested without a server.

**The answer** is the pipeline's final answer exactly as the last worker wrote it (so it may
hold the `<answer>…</answer>` tags the workers are prompted to use); podium does not rewrite
it. `finish_reason` is "length" when the step that gave the answer stopped at its model's
`max_tokens` (the answer is cut short), otherwise "stop". A run whose answer step called
tools answers with them (`tool_calls`, finish_reason "tool_calls"; `podium.serve.acting`).

**Usage** is `outcome.used`: every call the run made (the Conductor's and every worker's,
answers from the response cache included), summed. The `podium` field adds what OpenAI's
format has no place for (`podium.serve.reply.podium_json`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from podium.llm.tools import ToolCall
from podium.serve.reply import podium_json


def usage_json(result) -> dict[str, int]:
    used = result.outcome.used
    return {"prompt_tokens": used.prompt_tokens, "completion_tokens": used.completion_tokens,
            "total_tokens": used.total_tokens}


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


def completion_json(cid: str, created: int, model: str, result, trace_id: str | None,
                    calls: Sequence[ToolCall] = ()) -> dict[str, Any]:
    """The body; with `calls` (the run's tool calls, their ids sealed), the message carries
    them (its content the acting step's text, or null) and finish_reason is "tool_calls"."""
    message: dict[str, Any] = {"role": "assistant", "content": result.answer}
    if calls:
        message = {"role": "assistant", "content": result.answer or None,
                   "tool_calls": [c.openai() for c in calls]}
    body: dict[str, Any] = {
        "id": cid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if calls else finish_reason(result)}],
        "usage": usage_json(result),
        "podium": podium_json(result),
    }
    if trace_id:
        body["podium_trace_id"] = trace_id
    return body
