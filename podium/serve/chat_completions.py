"""What the server sends back: completion bodies, stream chunks, progress lines, no-answer errors.

Pure functions of a finished `RunResult` (or of one pipeline event), so the wire format is in
one place and is tested without a server.

**The answer** is the pipeline's final answer exactly as the last worker wrote it (so it may
hold the `<answer>…</answer>` tags the workers are prompted to use); podium does not rewrite
it. `finish_reason` is "length" when the step that gave the answer stopped at its model's
`max_tokens` (the answer is cut short), otherwise "stop".

**Usage** is `outcome.used`: every call the run made (the Conductor's and every worker's,
answers from the response cache included), summed. The `podium` field adds what OpenAI's
format has no place for: calls, cost (USD at the pool's list prices; null when a called model
has no price) and the outcome's notes (a fallback, a kept answer).

**Progress** (streaming) is sent as `reasoning_content` deltas, one line each, e.g.

    Workflow: 2 steps
      step 0 → worker 1 (smol-creative): Draft an answer. [sees: none]
      step 1 → worker 0 (smol-precise): Check the draft. [sees: all]
    Step 0 (worker 1 smol-creative) running…
    Step 0 (worker 1 smol-creative) done: 0.8s, 41 tokens
"""

from __future__ import annotations

import json
from typing import Any

from podium.serve.errors import ApiError

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
    run = result.final_round.run
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


def no_answer_error(result) -> ApiError:
    """502 when a model call failed (an upstream endpoint); 400 when the request's budget ran
    out first (a 5xx would be retried by the OpenAI SDKs, paying for the run again, and would
    run out again); 500 otherwise. The message names the cause and what to do."""
    cause = result.outcome.cause
    why = cause.sentence() if cause else "the workflow produced no answer"
    if cause is not None and cause.reason == "budget":
        return ApiError(400, f"The team produced no answer: {why}. The budget ran out before "
                        "an answer: raise the request's max_calls, max_total_tokens or "
                        "max_cost (or leave them to the pool's).", code="budget_exhausted")
    if cause is not None and cause.cls == "worker":
        return ApiError(502, f"The team produced no answer: {why}. A model endpoint of the "
                        "pool failed; check it (podium pool check) and retry.",
                        code="worker_failed")
    if cause is not None and cause.cls == "infra":
        return ApiError(500, f"The team produced no answer: {why}. This is a podium failure; "
                        "the server log and the trace have the details.", code="internal")
    return ApiError(500, f"The team produced no answer: {why}. Retry: the Conductor samples "
                    "its workflow anew.", code="no_answer")


# --- progress lines -------------------------------------------------------------------------

def _access(access) -> str:
    if access == "all":
        return "all"
    return "none" if not access else ", ".join(str(i) for i in access)


def progress(kind: str, obj, names: list[str]) -> str | None:
    """One line of progress for a pipeline event (None: nothing to say)."""
    if kind == "conductor":
        return _turn(obj, names)
    if kind in ("started", "finished"):
        who = f"Step {obj.index} (worker {obj.worker} {obj.worker_name})"
        if kind == "started":
            return f"{who} running…"
        if obj.status == "ok":
            return f"{who} done: {obj.latency_s:.1f}s, {obj.completion_tokens} tokens"
        if obj.status == "error":
            return f"{who} failed: {obj.error or obj.error_kind}"
        return f"{who} skipped: {obj.error or ''}".rstrip(": ")
    return None


def _turn(turn, names: list[str]) -> str:
    where = f" (recursion round {turn.round})" if turn.round else ""
    if turn.error:
        return f"The Conductor call failed{where}: {turn.error}"
    if turn.kept:
        return f"The Conductor kept the answer{where}: no new steps."
    lines = []
    if turn.parse_reason:
        lines.append(f"The Conductor's output is not a valid workflow{where} "
                     f"({turn.parse_reason}: {turn.parse_detail}).")
        if turn.fallback and turn.workflow is not None:
            w = turn.workflow.steps[0].worker
            lines.append(f"Falling back to one step on worker {w} ({names[w]}).")
    if turn.workflow is not None and not turn.fallback:
        n = len(turn.workflow.steps)
        lines.append(f"Workflow{where}: {n} step{'s' if n != 1 else ''}")
        for i, step in enumerate(turn.workflow.steps):
            lines.append(f"  step {i} → worker {step.worker} ({names[step.worker]}): "
                         f"{step.subtask} [sees: {_access(step.access)}]")
    return "\n".join(lines)
