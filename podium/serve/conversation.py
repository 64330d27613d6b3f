"""The conversation a request sends, and the one question the team answers from it.

The team answers one question. The last message must come from the user: its text is the
question. When the conversation has earlier turns (a system message, earlier user and
assistant turns), they are put before it as context, in one clearly delimited block:

    The conversation so far, for context:
    <conversation>
    [system]
    You are terse.
    [user]
    What is 2 + 2?
    [assistant]
    4
    </conversation>

    Now answer this:
    And times 3?

That block is what the Conductor and every step but the last see; an earlier turn's tool
calls are written in it as `(called NAME with ARGUMENTS)` under the assistant's text, and their
results under `[tool]`. The step that writes the answer gets the earlier turns as chat turns
instead (`conversation_of`: system and developer messages as `system`, user and assistant
turns, in order), then its own message, whose task is the last question alone. When the
request has tools, the earlier turns' tool calls and results are chat turns too (an assistant
message with its `tool_calls`, a `tool` message with its result; the ids renumbered `call_1`,
`call_2`, ... in order: the client's may be long sealed ones); without tools, a worker is sent
no tool messages, so each call and its result are written into the assistant's turn as text.

A one-message conversation is sent as it is, so a question asked through the server and with
`podium ask` is the same question (and hits the same response cache entries).

Chat Completions' `messages` are `Message`s as they come; the Responses API's `input` and
`instructions` are made into them (`podium.serve.responses.request`). The errors name the
field as Chat Completions does (`messages.N...`).

A `Message` also carries tool calls and their results, in Chat Completions' shape (the one
podium uses inside): an assistant message's `tool_calls` (`[{"id", "type": "function",
"function": {"name", "arguments"}}]`, `arguments` the JSON text of the call's arguments) and
a `tool` message's `tool_call_id`, its content the result. `podium.serve.tools` checks them
and says what kind of turn a conversation is.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from podium.serve.errors import bad_request
from podium.workflow.execute import Conversation


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: StrictStr
    arguments: StrictStr  # JSON text, as the model wrote it


class ToolCall(BaseModel):
    """One call an assistant message made: `{"id", "type": "function", "function": {...}}`."""

    model_config = ConfigDict(extra="allow")
    id: StrictStr = Field(min_length=1)
    type: Literal["function"]
    function: FunctionCall


class Message(BaseModel):
    """One message of the conversation: its role and its text (a string or text parts); an
    assistant message's tool calls, a tool message's `tool_call_id`."""

    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: StrictStr | None = None

    def text(self, where: str) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        parts = []
        for i, part in enumerate(self.content):
            if part.type != "text" or part.text is None:
                raise bad_request(f"Content part of type {part.type!r} is not supported: the "
                                  "team reads text only. Send text parts "
                                  '({"type": "text", "text": "..."}) or a string.',
                                  param=f"{where}.content.{i}.type")
            parts.append(part.text)
        return "\n".join(parts)


def question_of(messages: list[Message]) -> str:
    """The question the team answers (see the module docstring)."""
    last = messages[-1]
    if last.role != "user":
        raise bad_request(f"The last message must come from the user (it is {last.role!r}): "
                          "the team answers the last user message.",
                          param=f"messages.{len(messages) - 1}.role")
    text = last.text(f"messages.{len(messages) - 1}")
    if not text.strip():
        raise bad_request("The last user message is empty. Send the question as its content.",
                          param=f"messages.{len(messages) - 1}.content")
    if len(messages) == 1:
        return text
    turns = []
    for i, msg in enumerate(messages[:-1]):
        body = "\n".join([msg.text(f"messages.{i}").strip(), *map(called, msg.tool_calls or [])])
        if body.strip():
            turns.append(f"[{msg.role}]\n{body.strip()}")
    if not turns:
        return text
    context = "\n".join(turns)
    return (f"The conversation so far, for context:\n<conversation>\n{context}\n"
            f"</conversation>\n\nNow answer this:\n{text}")


def called(call: ToolCall) -> str:
    """A tool call written as text."""
    return f"(called {call.function.name} with {call.function.arguments})"


def conversation_of(messages: list[Message], tools: bool = False) -> Conversation | None:
    """The earlier turns, as the answer step sees them, and the last question; None when
    there are none (the question is then asked as it is). `tools`: the request has tools, so
    the turns' tool calls and results are chat turns; otherwise they are written into the
    assistant's turns (see the module docstring). Call it after `question_of`."""
    turns: list[dict] = []
    ids: dict[str, str] = {}  # the client's call ids, renumbered
    for i, msg in enumerate(messages[:-1]):
        body = msg.text(f"messages.{i}").strip()
        if msg.role == "tool":
            if tools:
                turns.append({"role": "tool", "content": body, "tool_call_id": ids.setdefault(
                    msg.tool_call_id or "", f"call_{len(ids) + 1}")})
            elif turns and turns[-1]["role"] == "assistant":
                turns[-1]["content"] += f"\n(result: {body})"
            continue
        if msg.role == "assistant" and msg.tool_calls:
            if tools:
                turns.append({"role": "assistant", "content": body or None, "tool_calls": [
                    {"id": ids.setdefault(c.id, f"call_{len(ids) + 1}"), "type": "function",
                     "function": {"name": c.function.name, "arguments": c.function.arguments}}
                    for c in msg.tool_calls]})
            else:
                turns.append({"role": "assistant", "content": "\n".join(
                    [body, *map(called, msg.tool_calls)]).strip()})
            continue
        if body and msg.role in ("system", "developer", "user", "assistant"):
            role = "system" if msg.role == "developer" else msg.role
            turns.append({"role": role, "content": body})
    if not turns:
        return None
    return Conversation(tuple(turns), messages[-1].text(f"messages.{len(messages) - 1}"))
