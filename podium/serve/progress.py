"""The progress lines a streamed run sends while it runs, one per pipeline event, e.g.

    Workflow: 2 steps
      step 0 → worker 1 (smol-creative): Draft an answer. [sees: none]
      step 1 → worker 0 (smol-precise): Check the draft. [sees: all]
    Step 0 (worker 1 smol-creative) running…
    Step 0 (worker 1 smol-creative) done: 0.8s, 41 tokens

Chat Completions sends them as `reasoning_content` deltas, the Responses API as
`response.reasoning_text.delta` events. A failed call is named by its kind ("transport",
"server"...) only: its error text may hold the endpoint's address, which is the operator's
(the trace has it).
"""

from __future__ import annotations


def _access(access) -> str:
    if access == "all":
        return "all"
    return "none" if not access else ", ".join(str(i) for i in access)


def line(kind: str, obj, names: list[str]) -> str | None:
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
            return f"{who} failed: {obj.error_kind or 'other'}"
        return f"{who} skipped: {obj.error or ''}".rstrip(": ")
    return None


def _turn(turn, names: list[str]) -> str:
    where = f" (recursion round {turn.round})" if turn.round else ""
    if turn.error:
        return f"The Conductor call failed{where}: {turn.error_kind or 'other'}"
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
