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

A one-message conversation is sent as it is, so a question asked through the server and with
`podium ask` is the same question (and hits the same response cache entries).

Chat Completions' `messages` are `Message`s as they come; the Responses API's `input` and
`instructions` are made into them (`podium.serve.responses.request`). The errors name the
field as Chat Completions does (`messages.N...`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from podium.serve.errors import bad_request


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class Message(BaseModel):
    """One message of the conversation: its role and its text (a string or text parts)."""

    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None

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
        body = msg.text(f"messages.{i}").strip()
        if body:
            turns.append(f"[{msg.role}]\n{body}")
    if not turns:
        return text
    context = "\n".join(turns)
    return (f"The conversation so far, for context:\n<conversation>\n{context}\n"
            f"</conversation>\n\nNow answer this:\n{text}")
