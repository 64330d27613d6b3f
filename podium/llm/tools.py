"""Tool calling's types: the tools a call may use (`Tool`), the calls a model makes
(`ToolCall`), what it is told about using them (`ToolChoice`), and the message shapes that
carry them.

Inside podium a conversation is in OpenAI Chat Completions' shape (`podium.llm.base.Message`):

    {"role": "assistant", "content": "..." | None,
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}
    {"role": "tool", "tool_call_id": "call_1", "content": "12 degrees"}

`arguments` is the JSON text the model wrote, passed on as written. The OpenAI-compatible
backend sends these messages as they are; the Anthropic and Gemini backends map them to their
own blocks and parts, and back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from podium.errors import ConfigError

if TYPE_CHECKING:
    from podium.llm.base import Message


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, what it does, and its arguments' JSON
    Schema (`parameters`); `strict` asks a backend that can for arguments that always follow
    the schema (None: the backend's default)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object",
                                                                "properties": {}})
    strict: bool | None = None

    def openai(self) -> dict[str, Any]:
        """The Chat Completions `tools` entry."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        if self.strict is not None:
            function["strict"] = self.strict
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolCall:
    """One call a model made: its id (what the tool's result message answers), the tool's
    name, and the arguments as the JSON text the model wrote (never re-encoded)."""

    id: str
    name: str
    arguments: str

    def openai(self) -> dict[str, Any]:
        """The Chat Completions `tool_calls` entry."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}

    @classmethod
    def from_openai(cls, entry: Any) -> ToolCall:
        """The call of a Chat Completions `tool_calls` entry; ValueError when it is not one
        (an id, a function's name and arguments, each a string)."""
        function = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(function, dict):
            raise ValueError(f"a tool call is not an object with a function: {entry!r:.80}")
        fields = {"id": entry.get("id"), "name": function.get("name"),
                  "arguments": function.get("arguments")}
        for key, value in fields.items():
            if not isinstance(value, str):
                raise ValueError(f"a tool call's {key} is {type(value).__name__}, not a string")
        return cls(**fields)


@dataclass(frozen=True)
class Named:
    """A `ToolChoice` that names the one tool the model must call."""

    name: str


# auto: the model decides; none: it answers in text; required: it calls at least one tool;
# Named(x): it calls x
ToolChoice = Literal["auto", "none", "required"] | Named


@dataclass(frozen=True)
class ToolUse:
    """The tools a request declares and how they may be used: what the step that writes the
    answer is given (`podium.pipeline.Pipeline.ask(tools=...)`)."""

    tools: tuple[Tool, ...]
    choice: ToolChoice = "auto"
    parallel_calls: bool | None = None  # None: the model's own default


def tool_choice_openai(choice: ToolChoice) -> str | dict[str, Any]:
    """The Chat Completions `tool_choice` field."""
    if isinstance(choice, Named):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


def tools_openai(tools: Sequence[Tool] | None, tool_choice: ToolChoice | None,
                 parallel_tool_calls: bool | None) -> dict[str, Any]:
    """The Chat Completions request fields for tools, each only when set (what an
    OpenAI-compatible body carries, and what the response cache keys on)."""
    fields: dict[str, Any] = {}
    if tools is not None:
        fields["tools"] = [tool.openai() for tool in tools]
    if tool_choice is not None:
        fields["tool_choice"] = tool_choice_openai(tool_choice)
    if parallel_tool_calls is not None:
        fields["parallel_tool_calls"] = parallel_tool_calls
    return fields


def tools_kw(tools: Sequence[Tool] | None, tool_choice: ToolChoice | None,
             parallel_tool_calls: bool | None) -> dict[str, Any]:
    """`chat`'s keywords for tools: each given only when set, so that a ChatClient written
    without them is still called as it expects."""
    given = {"tools": tools, "tool_choice": tool_choice,
             "parallel_tool_calls": parallel_tool_calls}
    return {k: v for k, v in given.items() if v is not None}


def refuse_tools(name: str, backend: str,
                 why: str = "its chat format has no tool calls") -> NoReturn:
    """The error of a client that cannot take tools, given some."""
    raise ConfigError(
        f"Model {name!r} (backend {backend!r}) cannot take tools: {why}. Give the tools to a "
        "worker that can (an openai, anthropic or gemini backend, or a function that takes a "
        "`tools` keyword), with tools = true in its pool entry.")


def arguments_object(call: dict[str, Any]) -> dict[str, Any]:
    """The arguments of a Chat Completions `tool_calls` entry as a JSON object (what the
    Anthropic and Gemini APIs take); ConfigError naming the call when they are not one."""
    function = call.get("function") or {}
    text = function.get("arguments") or "{}"
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ConfigError(f"Tool call {call.get('id')!r} ({function.get('name')!r}): its "
                          "arguments are not a JSON object, which this backend needs. Send "
                          "the arguments the model wrote, unchanged.")
    return value


def call_names(messages: Sequence[Message]) -> dict[str, str]:
    """Each tool call's name by its id, over the assistant messages of a conversation."""
    return {call["id"]: call["function"]["name"] for m in messages
            for call in m.get("tool_calls") or [] if isinstance(call, dict)}
