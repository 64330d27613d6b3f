"""A request's tools, the tool calls and results in its conversation, and its kind of turn.

Both APIs' tool fields are checked here and made one shape, `ToolUse`:

    Chat Completions                                 Responses
    tools: [{"type": "function", "function":         tools: [{"type": "function", "name",
             {"name", "description", "parameters",            "description", "parameters",
              "strict"}}]                                     "strict"}]
    tool_choice: "auto" | "none" | "required" |      tool_choice: "auto" | "none" | "required" |
      {"type": "function", "function": {"name"}}       {"type": "function", "name"}
    parallel_tool_calls: true | false                parallel_tool_calls: true | false

A tool's name matches `^[a-zA-Z0-9_-]{1,64}$` and is declared once; its `parameters`, when
given, is a JSON Schema (checked against its metaschema with `jsonschema`) of an object; a
named `tool_choice` names a declared tool. Only function tools are taken.

The conversation's tool calls and results are in Chat Completions' shape
(`podium.serve.conversation`; the Responses API's `function_call` and
`function_call_output` items are made into it by `podium.serve.responses.request`).
`read_conversation` checks them as OpenAI does: a call's `arguments` is the JSON text of an
object, a call names a declared tool (when the request declares tools), call ids are unique,
and the calls of an assistant message are answered, each by one `tool` message, right after
it. It then says what kind of turn the request is:

    new_turn       the last message is the user's: the Conductor plans a new answer
    continuation   after the last user message come only assistant tool calls and their
                   results, ending in results: the step that made the calls continues

Anything else (an assistant's text last, a system message after the user's) is a 400 naming
the message. Every 400 names its field as the request's API does, through a `Namer`: Chat
Completions' `messages.3.tool_call_id`, the Responses API's `input.3.call_id`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema.validators  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, ValidationError

from podium.llm.tools import Named, Tool, ToolUse
from podium.serve.body import validation_error
from podium.serve.conversation import Message
from podium.serve.errors import bad_request

NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MODES = ("auto", "none", "required")

# A message's field, as the API names it: (message index, field) -> param, where field is
# "" (the message itself), "role", "content", "tool_call_id", "tool_calls" or
# "tool_calls.K.id" / "tool_calls.K.function.name" / "tool_calls.K.function.arguments".
Namer = Callable[[int, str], str]


def chat_namer(i: int, field: str) -> str:
    return f"messages.{i}.{field}" if field else f"messages.{i}"


@dataclass(frozen=True)
class Turn:
    """What kind of turn a conversation is, and where its last user message is."""

    kind: Literal["new_turn", "continuation"]
    last_user: int
    results: tuple[int, ...] = ()  # continuation: the tool messages after the last user's


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: StrictStr
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class _ChatTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: StrictStr
    function: _Function


class _ResponsesTool(_Function):
    type: StrictStr


def chat_tool_use(data: dict) -> ToolUse | None:
    """Chat Completions' `tools`, `tool_choice` and `parallel_tool_calls` (None: no tools)."""
    specs = []
    for i, item in enumerate(_tool_list(data)):
        _function_type(item, i)
        tool = _model(_ChatTool, item, f"tools.{i}.")
        specs.append(_spec(tool.function, f"tools.{i}.function."))
    choice = data.get("tool_choice")
    if isinstance(choice, dict):
        _function_type(choice, None)
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        choice = _named(name, specs, "tool_choice.function.name")
    return _use(specs, choice, data, "function.name",
                '{"type": "function", "function": {"name": "..."}}')


def responses_tool_use(data: dict) -> ToolUse | None:
    """The Responses API's `tools`, `tool_choice` and `parallel_tool_calls` (None: no tools)."""
    specs = []
    for i, item in enumerate(_tool_list(data)):
        _function_type(item, i)
        specs.append(_spec(_model(_ResponsesTool, item, f"tools.{i}."), f"tools.{i}."))
    choice = data.get("tool_choice")
    if isinstance(choice, dict):
        _function_type(choice, None)
        choice = _named(choice.get("name"), specs, "tool_choice.name")
    return _use(specs, choice, data, "name", '{"type": "function", "name": "..."}')


def _tool_list(data: dict) -> list:
    tools = data.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise bad_request("Invalid value for 'tools': it must be a list of function tools.",
                          param="tools")
    return tools


def _function_type(item: Any, i: int | None) -> None:
    where = "tool_choice" if i is None else f"tools.{i}"
    if not isinstance(item, dict):
        raise bad_request(f"Invalid value for '{where}': it must be an object.", param=where)
    if item.get("type") != "function":
        raise bad_request(f"Invalid value for '{where}.type': {item.get('type')!r}. The podium "
                          "model takes function tools only (\"type\": \"function\"), not "
                          "built-in ones.", param=f"{where}.type")


def _model(model: type[BaseModel], item: dict, prefix: str) -> Any:
    try:
        return model.model_validate(item)
    except ValidationError as exc:
        raise validation_error(exc, prefix=prefix) from None


def _spec(function: _Function, prefix: str) -> Tool:
    if not NAME.fullmatch(function.name):
        raise bad_request(f"Invalid value for '{prefix}name': {function.name!r}. A tool's name "
                          "is 1 to 64 letters, digits, underscores or dashes "
                          "(^[a-zA-Z0-9_-]{1,64}$).", param=f"{prefix}name")
    if function.parameters:
        _check_schema(function.parameters, f"{prefix}parameters")
        return Tool(function.name, function.description or "", function.parameters,
                    function.strict)
    return Tool(function.name, function.description or "", strict=function.strict)


def _check_schema(schema: dict, where: str) -> None:
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        at = "/".join(str(p) for p in exc.path)
        raise bad_request(f"Invalid value for '{where}': it is not a valid JSON Schema "
                          f"({exc.message}{f' at {at}' if at else ''}).", param=where) from None
    except RecursionError:
        raise bad_request(f"Invalid value for '{where}': the schema is nested too deeply.",
                          param=where) from None
    if schema.get("type") != "object":
        raise bad_request(f"Invalid value for '{where}': it must be the JSON Schema of an "
                          f'object ("type": "object"), a tool\'s arguments being one (got type '
                          f"{json.dumps(schema.get('type'))}).", param=where)


def _named(name: Any, specs: list[Tool], where: str) -> Named:
    if not isinstance(name, str):
        raise bad_request(f"Missing required parameter: '{where}'.", param=where,
                          code="missing_required_parameter")
    if name not in {s.name for s in specs}:
        declared = ", ".join(s.name for s in specs) or "none"
        raise bad_request(f"Invalid value for '{where}': {name!r} is not a declared tool "
                          f"(declared: {declared}).", param=where)
    return Named(name)


def _use(specs: list[Tool], choice: Any, data: dict, name_field: str,
         named_shape: str) -> ToolUse | None:
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec.name in seen:
            where = f"tools.{i}.{name_field}"
            raise bad_request(f"Invalid value for '{where}': {spec.name!r} is also the name of "
                              f"tools.{seen[spec.name]}. Each tool needs a name of its own.",
                              param=where)
        seen[spec.name] = i
    if choice is not None and not isinstance(choice, Named) and choice not in MODES:
        raise bad_request("Invalid value for 'tool_choice': it must be \"auto\", \"none\", "
                          f"\"required\" or {named_shape} (got {json.dumps(choice)}).",
                          param="tool_choice")
    parallel = data.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad_request("Invalid value for 'parallel_tool_calls': it must be true or false "
                          f"(got {json.dumps(parallel)}).", param="parallel_tool_calls")
    if not specs:
        if choice is not None and choice not in ("auto", "none"):
            raise bad_request("Invalid value for 'tool_choice': it needs tools to choose from. "
                              "Declare them in 'tools', or leave tool_choice out.",
                              param="tool_choice")
        return None
    return ToolUse(tuple(specs), choice or "auto", parallel)


def read_conversation(messages: list[Message], use: ToolUse | None,
                      name: Namer = chat_namer) -> Turn:
    """Check the conversation's tool calls and results (see the module docstring) and say
    what kind of turn it is; a 400 naming the field otherwise."""
    declared = {t.name for t in use.tools} if use else None
    made: dict[str, int] = {}  # every call id: the message that made it
    answered: dict[str, int] = {}  # every answered call id: its tool message
    pending: dict[str, int] = {}  # the last assistant message's calls not yet answered
    caller = -1
    for i, msg in enumerate(messages):
        if msg.role == "tool":
            _read_result(msg, i, name, answered, pending)
            continue
        if pending:
            _unanswered(caller, pending, name)
        if msg.tool_call_id is not None:
            raise bad_request(f"{name(i, '')} is a {msg.role} message: only tool messages "
                              "carry a tool_call_id.", param=name(i, "tool_call_id"))
        if msg.tool_calls:  # (an empty list, as some clients send, is no calls)
            _read_calls(msg, i, name, declared, made)
            pending, caller = {c.id: k for k, c in enumerate(msg.tool_calls)}, i
    if pending:
        _unanswered(caller, pending, name)
    return _turn(messages, name)


def _read_result(msg: Message, i: int, name: Namer, answered: dict[str, int],
                 pending: dict[str, int]) -> None:
    call_id = msg.tool_call_id
    if call_id is None:
        where = name(i, "tool_call_id")
        raise bad_request(f"Missing required parameter: '{where}'.", param=where,
                          code="missing_required_parameter")
    if msg.tool_calls:
        raise bad_request(f"{name(i, '')} is a tool message: only assistant messages make "
                          "tool calls.", param=name(i, "tool_calls"))
    if call_id in pending:
        del pending[call_id]
        answered[call_id] = i
        return
    where = name(i, "tool_call_id")
    why = (f"that call was already answered by {name(answered[call_id], '')}"
           if call_id in answered else "it matches no earlier tool call")
    raise bad_request(f"Invalid value for '{where}': {_short(call_id)!r}: {why}.", param=where)


def _read_calls(msg: Message, i: int, name: Namer, declared: set[str] | None,
                made: dict[str, int]) -> None:
    calls = msg.tool_calls or []
    if msg.role != "assistant":
        raise bad_request(f"{name(i, '')} is a {msg.role} message: only assistant messages "
                          "make tool calls.", param=name(i, "tool_calls"))
    for k, call in enumerate(calls):
        if call.id in made:
            where = name(i, f"tool_calls.{k}.id")
            raise bad_request(f"Invalid value for '{where}': {_short(call.id)!r} is also the id "
                              f"of a call in {name(made[call.id], '')}. Each call has an id of "
                              "its own.", param=where)
        made[call.id] = i
        fn = call.function
        if declared is not None and fn.name not in declared:
            where = name(i, f"tool_calls.{k}.function.name")
            raise bad_request(f"Invalid value for '{where}': {fn.name!r} is not a declared "
                              f"tool (declared: {', '.join(sorted(declared))}).", param=where)
        try:
            arguments = json.loads(fn.arguments)
        except (ValueError, RecursionError):
            arguments = None
        if not isinstance(arguments, dict):
            where = name(i, f"tool_calls.{k}.function.arguments")
            raise bad_request(f"Invalid value for '{where}': a call's arguments are the JSON "
                              "text of an object (e.g. '{\"city\": \"Paris\"}').", param=where)


def _unanswered(caller: int, pending: dict[str, int], name: Namer) -> None:
    ids = ", ".join(repr(_short(c)) for c in pending)
    raise bad_request(f"{name(caller, '')} makes tool calls without results: {ids}. Each call "
                      "needs its result, sent with the call's id, right after the calls (a "
                      "tool message with tool_call_id, or a function_call_output item with "
                      "call_id).", param=name(caller, "tool_calls"))


def _turn(messages: list[Message], name: Namer) -> Turn:
    last = len(messages) - 1
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if messages[last].role == "user":
        return Turn("new_turn", last)
    if messages[last].role != "tool":
        kind = ("an assistant message with text" if messages[last].role == "assistant"
                else f"a {messages[last].role} message")
        raise bad_request(f"{name(last, '')} is {kind}: the last message must be the user's "
                          "(a new question) or the results of the assistant's tool calls (the "
                          "team goes on with them).", param=name(last, "role"))
    if not users:
        raise bad_request("The conversation has tool results but no user message: it starts "
                          "with the user's question.", param=name(0, "role"))
    for i in range(users[-1] + 1, last):
        msg = messages[i]
        if not (msg.role == "tool" or (msg.role == "assistant" and msg.tool_calls)):
            raise bad_request(f"{name(i, '')} is a {msg.role} message after the last user "
                              f"message ({name(users[-1], '')}): when the conversation ends "
                              "in tool results, only the assistant's tool calls and their "
                              "results come after the user's question.", param=name(i, "role"))
    results = tuple(i for i in range(users[-1] + 1, last + 1) if messages[i].role == "tool")
    return Turn("continuation", users[-1], results)


def _short(text: str, most: int = 48) -> str:
    return text if len(text) <= most else text[:most] + "..."

