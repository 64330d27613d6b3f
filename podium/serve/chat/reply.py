"""The Chat Completions body of a finished run (`chat.completion`), and its parts.

Pure functions of a `RunResult`, so the wire format is tested without a server.

**The answer** is the pipeline's final answer exactly as the last worker wrote it (so it may
hold the `<answer>…</answer>` tags the workers are prompted to use); podium does not rewrite
it. `finish_reason` is "length" when the step that gave the answer stopped at its model's
`max_tokens` (the answer is cut short), otherwise "stop".

**Usage** is `outcome.used`: every call the run made (the Conductor's and every worker's,
answers from the response cache included), summed. The `podium` field adds what OpenAI's
format has no place for (`podium.serve.reply.podium_json`).
"""

from __future__ import annotations

from typing import Any

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
