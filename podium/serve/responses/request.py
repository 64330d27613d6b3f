"""A Responses API request: text in, its conversation made chat messages, the options.

`input` is a string or a list of messages (`{"role", "content"}` with a string or
`input_text` / `output_text` parts, with or without `"type": "message"`), `instructions` a
system message before them; the conversation becomes one question exactly as for chat
completions (`podium.serve.conversation`). podium's per-request options are read the same
way, from the top level (`extra_body`) or `metadata` (`podium.serve.options`). Of the sampling
fields, `temperature`, `top_p` and `max_output_tokens` are honoured by the answer step.
Tools, `previous_response_id`, `store: true` (no Response is kept to fetch again; the trace
is) and non-text input are refused with a 400 naming the field.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictBool, StrictInt, ValidationError

from podium.llm.base import Sampling
from podium.serve.body import validated, validation_error
from podium.serve.conversation import Message, question_of
from podium.serve.errors import ApiError, bad_request
from podium.serve.options import SAMPLING_RULES, Options, SampledRequest, options_of, sampling

TEXT_TYPES = ("input_text", "output_text", "text")
RULES = {**SAMPLING_RULES, "max_output_tokens": "a positive integer"}


class ResponsesRequest(SampledRequest):
    model: str
    input: str | list[Any]
    instructions: str | None = None
    stream: StrictBool = False
    max_output_tokens: StrictInt | None = Field(None, gt=0)
    metadata: dict[str, Any] | None = None

    def sampling(self) -> Sampling | None:
        """temperature, top_p and max_output_tokens, for the answer step (see
        podium.serve.options)."""
        self.refuse_unhonoured()
        return sampling(self.temperature, self.top_p, None, (), self.max_output_tokens)


def parse_body(raw: bytes) -> tuple[ResponsesRequest, Options, list[Message]]:
    """The request, its podium options and its conversation as chat messages (or a 400)."""
    req, data = validated(raw, ResponsesRequest, RULES)
    for key in ("tools", "tool_choice", "previous_response_id", "conversation", "prompt"):
        if data.get(key) not in (None, [], "none", "auto"):
            raise bad_request(f"'{key}' is not supported by the podium model: it answers the "
                              "conversation it is sent with text. Leave it out.", param=key,
                              code="unsupported_parameter")
    if data.get("store") not in (None, False):
        raise bad_request("'store' can only be false for the podium model: it keeps no "
                          "Response objects to fetch again (GET /v1/responses/{id}). Its "
                          "trace is kept instead: pass return_trace_id and read GET "
                          "/v1/traces/{id}. Leave 'store' out or set it to false.",
                          param="store", code="unsupported_value")
    return req, options_of(data, req.metadata or {}), _messages(req)


def _messages(req: ResponsesRequest) -> list[Message]:
    messages = [Message(role="system", content=req.instructions)] if req.instructions \
        else []
    if isinstance(req.input, str):
        return [*messages, Message(role="user", content=req.input)]
    if not req.input:
        raise bad_request("input is empty. Send the question as a string, or a list of "
                          "messages ending with the user's.", param="input")
    for i, item in enumerate(req.input):
        where = f"input.{i}"
        if not isinstance(item, dict) or item.get("type", "message") != "message" \
                or "role" not in item:
            kind = item.get("type") if isinstance(item, dict) else type(item).__name__
            raise bad_request(f"{where} is a {kind!r} item; the podium model reads messages "
                              '({"role": "user", "content": "..."}) only.', param=where)
        content = item.get("content")
        if isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") not in TEXT_TYPES:
                    kind = part.get("type") if isinstance(part, dict) else part
                    raise bad_request(f"Content part of type {kind!r} is not supported: the "
                                      "team reads text only (input_text parts or a string).",
                                      param=f"{where}.content.{j}.type")
                parts.append({"type": "text", "text": str(part.get("text") or "")})
            content = parts
        try:
            messages.append(Message(role=item["role"], content=content))
        except ValidationError as exc:
            raise validation_error(exc, prefix=f"{where}.") from None
    return messages


def question(messages: list[Message]) -> str:
    """The question (`question_of`), its errors naming the Responses field (`input`)."""
    try:
        return question_of(messages)
    except ApiError as exc:  # name the Responses field, not the chat one
        exc.param = (exc.param or "").replace("messages", "input", 1) or None
        raise
