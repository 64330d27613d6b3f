"""The Responses API's `response` object of a run, and its output items.

The response holds one `message` output item with one `output_text` part (the team's answer,
as the pipeline gives it; `response.output_text` in the openai client), or, when the answer
step called tools, a `function_call` item per call (after the message item when the step also
wrote text), `usage` as
`input_tokens` / `output_tokens` / `total_tokens` over every call the run made, the same
`podium` field as chat completions (`podium.serve.reply.podium_json`), and the request's
`temperature`, `top_p`, `max_output_tokens`, `tools`, `tool_choice` and `parallel_tool_calls`
echoed (the tools as function tools, `{"type": "function", "name", "description",
"parameters", "strict"}`; OpenAI's defaults, `"auto"` and `true`, where the request left a
field out).
"""

from __future__ import annotations

import uuid
from typing import Any

from podium.llm.tools import Named, ToolCall, ToolUse
from podium.serve.reply import podium_json
from podium.serve.responses.request import ResponsesRequest
from podium.serve.tools import responses_tool_use


def usage_json(result) -> dict[str, Any]:
    used = result.outcome.used
    return {"input_tokens": used.prompt_tokens, "output_tokens": used.completion_tokens,
            "total_tokens": used.total_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0}}


def new_ids() -> tuple[str, str, str]:
    """(response id, reasoning item id, message item id)."""
    hexa = uuid.uuid4().hex
    return f"resp_{hexa}", f"rs_{hexa}", f"msg_{hexa}"


def message_item(mid: str, text: str | None, status: str = "completed") -> dict[str, Any]:
    content = [] if text is None else [{"type": "output_text", "text": text,
                                        "annotations": []}]
    return {"type": "message", "id": mid, "status": status, "role": "assistant",
            "content": content}


def call_item(call: ToolCall, status: str = "completed") -> dict[str, Any]:
    """A tool call as a `function_call` output item (`call_id` the sealed id the
    `function_call_output` answers)."""
    return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "call_id": call.id,
            "name": call.name, "arguments": call.arguments, "status": status}


def tools_json(req: ResponsesRequest) -> dict[str, Any]:
    """The request's `tools`, `tool_choice` and `parallel_tool_calls`, as a response echoes
    them (the request was checked when it was read)."""
    declared = req.model_extra or {}
    use = responses_tool_use(declared) or ToolUse((), declared.get("tool_choice") or "auto")
    choice = use.choice
    return {"tools": [{"type": "function", "name": t.name, "description": t.description or None,
                       "parameters": t.parameters, "strict": t.strict} for t in use.tools],
            "tool_choice": ({"type": "function", "name": choice.name}
                            if isinstance(choice, Named) else choice),
            "parallel_tool_calls": req.parallel_tool_calls is not False}


def response_json(rid: str, created: int, model: str, req: ResponsesRequest, *,
                  status: str = "completed", output: list | None = None, result=None,
                  trace_id: str | None = None, error: dict | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": rid, "object": "response", "created_at": created, "status": status,
        "model": model, "output": output or [], "error": error, "incomplete_details": None,
        "instructions": req.instructions, "metadata": req.metadata or {},
        "max_output_tokens": req.max_output_tokens, **tools_json(req),
        "temperature": req.temperature, "top_p": req.top_p,
        "usage": usage_json(result) if result is not None else None,
    }
    if result is not None:
        body["podium"] = podium_json(result)
    if trace_id:
        body["podium_trace_id"] = trace_id
    return body
