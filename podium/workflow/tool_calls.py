"""Whether an acting step's reply uses its tools as the request allows: each call names a
declared tool (the one a named `tool_choice` names), its arguments are the JSON text of an
object valid for the tool's schema (`jsonschema`), and a reply under `tool_choice`
"required" or a named tool makes a call. `reply_problem` says what is wrong, in a sentence
that names the tool, or None; the executor asks such a reply again once, then fails the step.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import jsonschema.validators  # type: ignore[import-untyped]
from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

from podium.llm.base import ChatResponse
from podium.llm.tools import Named, Tool, ToolChoice


def reply_problem(reply: ChatResponse, tools: Sequence[Tool],
                  choice: ToolChoice | None) -> str | None:
    """What is wrong with `reply`'s tool calls (see the module docstring), or None."""
    if not reply.tool_calls:
        if choice == "required":
            return 'it answered in text under tool_choice "required" (a tool call is required)'
        if isinstance(choice, Named):
            return f"it answered in text, but tool_choice names the tool {choice.name!r}"
        return None
    declared = {t.name: t for t in tools}
    for call in reply.tool_calls:
        tool = declared.get(call.name)
        if tool is None:
            return (f"it called the tool {call.name!r}, which is not declared (declared: "
                    f"{', '.join(declared)})")
        if choice == "none":
            return f'it called the tool {call.name!r} under tool_choice "none"'
        if isinstance(choice, Named) and call.name != choice.name:
            return f"it called the tool {call.name!r}, but tool_choice names {choice.name!r}"
        if (wrong := _arguments_problem(call.arguments, tool)) is not None:
            return f"its call to the tool {call.name!r} has arguments that {wrong}"
    return None


def _arguments_problem(text: str, tool: Tool) -> str | None:
    try:
        arguments = json.loads(text)
    except (ValueError, RecursionError):
        return f"are not JSON ({text[:60]!r})"
    if not isinstance(arguments, dict):
        return f"are not a JSON object ({text[:60]!r})"
    validator = jsonschema.validators.validator_for(tool.parameters)(tool.parameters)
    error = best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    at = "/".join(str(p) for p in error.absolute_path)
    return f"do not follow its schema ({error.message[:160]}{f' at {at}' if at else ''})"
