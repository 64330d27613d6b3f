"""A Responses API request: text in, its conversation made chat messages, the options.

`input` is a string or a list of messages (`{"role", "content"}` with a string or
`input_text` / `output_text` parts, with or without `"type": "message"`), `instructions` a
system message before them; the conversation becomes one question exactly as for chat
completions (`podium.serve.conversation`). podium's per-request options are read the same
way, from the top level (`extra_body`) or `metadata` (`podium.serve.options`). Of the sampling
fields, `temperature`, `top_p` and `max_output_tokens` are honoured by the answer step.
`previous_response_id`, `store: true` (no Response is kept to fetch again; the trace is) and
non-text input are refused with a 400 naming the field.

`function_call` items (`{"type", "call_id", "name", "arguments"}`) become an assistant
message's `tool_calls` (one message for calls in a row, with the assistant's text just before
them), and `function_call_output` items (`{"type", "call_id", "output"}`) `tool` messages:
Chat Completions' shape, which `podium.serve.tools` checks as for chat completions, with its
400s naming the Responses field (`input.3.call_id`). `tools`, `tool_choice` and
`parallel_tool_calls` are checked there too, and the kind of turn is read
(`podium.serve.acting` continues one that ends in tool results).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)

from podium.llm.base import Sampling
from podium.llm.tools import ToolUse
from podium.serve.body import validated, validation_error
from podium.serve.conversation import FunctionCall, Message, ToolCall, question_of
from podium.serve.errors import ApiError, bad_request
from podium.serve.options import SAMPLING_RULES, Options, SampledRequest, options_of, sampling
from podium.serve.tools import Turn, read_conversation, responses_tool_use

TEXT_TYPES = ("input_text", "output_text", "text")
RULES = {**SAMPLING_RULES, "max_output_tokens": "a positive integer",
         "parallel_tool_calls": "true or false"}


class ResponsesRequest(SampledRequest):
    model: str
    input: str | list[Any]
    instructions: str | None = None
    stream: StrictBool = False
    max_output_tokens: StrictInt | None = Field(None, gt=0)
    metadata: dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None

    def sampling(self) -> Sampling | None:
        """temperature, top_p and max_output_tokens, for the answer step (see
        podium.serve.options)."""
        self.refuse_unhonoured()
        return sampling(self.temperature, self.top_p, None, (), self.max_output_tokens)


@dataclass(frozen=True)
class Parsed:
    """A Responses request read: the request, its podium options, its conversation as chat
    messages (each field named as `input` names it: `naming`), its tools and kind of turn."""

    req: ResponsesRequest
    options: Options
    messages: list[Message]
    naming: InputNamer
    tools: ToolUse | None
    turn: Turn


def parse_body(raw: bytes) -> Parsed:
    """The request read (`Parsed`), or a 400 naming the bad field."""
    req, data = validated(raw, ResponsesRequest, RULES)
    for key in ("previous_response_id", "conversation", "prompt"):
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
    use = responses_tool_use(data)
    messages, naming = _messages(req)
    turn = read_conversation(messages, use, naming)
    return Parsed(req, options_of(data, req.metadata or {}), messages, naming, use, turn)


class _FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    call_id: StrictStr = Field(min_length=1)
    name: StrictStr
    arguments: StrictStr


class _FunctionCallOutput(BaseModel):
    model_config = ConfigDict(extra="allow")
    call_id: StrictStr = Field(min_length=1)
    output: StrictStr | list[Any]


class InputNamer:
    """Names a chat message's field as the Responses API does (`podium.serve.tools.Namer`),
    from the `input` item each message, and each of its tool calls, came from."""

    CALL_FIELDS = {"id": "call_id", "function.name": "name", "function.arguments": "arguments"}
    OUTPUT_FIELDS = {"tool_call_id": "call_id", "content": "output", "role": "type"}

    def __init__(self) -> None:
        self.items: list[int | None] = []  # message i's item (None: instructions)
        self.kinds: list[str] = []  # message i's item type: message, function_call, ...
        self.calls: list[list[int]] = []  # the item of each of message i's tool calls

    def add(self, item: int | None, kind: str = "message") -> None:
        self.items.append(item)
        self.kinds.append(kind)
        self.calls.append([])

    def __call__(self, i: int, field: str) -> str:
        item, kind = self.items[i], self.kinds[i]
        if item is None:
            return "instructions"
        if field.startswith("tool_calls."):
            _, k, rest = field.split(".", 2)
            return f"input.{self.calls[i][int(k)]}.{self.CALL_FIELDS[rest]}"
        if field == "tool_calls":
            return f"input.{self.calls[i][0]}"
        if kind == "function_call_output":
            field = self.OUTPUT_FIELDS.get(field, field)
        elif kind == "function_call" and field == "role":
            field = "type"
        return f"input.{item}.{field}" if field else f"input.{item}"


def _messages(req: ResponsesRequest) -> tuple[list[Message], InputNamer]:
    naming = InputNamer()
    messages = []
    if req.instructions:
        messages.append(Message(role="system", content=req.instructions))
        naming.add(None)
    if isinstance(req.input, str):
        naming.add(0)
        return [*messages, Message(role="user", content=req.input)], naming
    if not req.input:
        raise bad_request("input is empty. Send the question as a string, or a list of "
                          "messages ending with the user's.", param="input")
    after_message = False  # the item before was a message (calls join the assistant's)
    for i, item in enumerate(req.input):
        where = f"input.{i}"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "function_call":
            call = _item(_FunctionCall, item, where)
            last = messages[-1] if messages else None
            if last is None or last.role != "assistant" or not (
                    last.tool_calls or after_message):
                messages.append(Message(role="assistant", tool_calls=[]))
                naming.add(i, kind)
            messages[-1].tool_calls = [*(messages[-1].tool_calls or []), ToolCall(
                id=call.call_id, type="function",
                function=FunctionCall(name=call.name, arguments=call.arguments))]
            naming.calls[-1].append(i)
        elif kind == "function_call_output":
            result = _item(_FunctionCallOutput, item, where)
            messages.append(Message(role="tool", tool_call_id=result.call_id,
                                    content=_text_parts(result.output, f"{where}.output")))
            naming.add(i, kind)
        elif kind == "message" and isinstance(item, dict) and "role" in item:
            content = item.get("content")
            if isinstance(content, list):
                content = _text_parts(content, f"{where}.content")
            try:
                messages.append(Message(role=item["role"], content=content))
            except ValidationError as exc:
                raise validation_error(exc, prefix=f"{where}.") from None
            naming.add(i)
        else:
            kind = kind if isinstance(item, dict) else type(item).__name__
            raise bad_request(f"{where} is a {kind!r} item; the podium model reads messages "
                              '({"role": "user", "content": "..."}), function_call and '
                              "function_call_output items only.", param=where)
        after_message = kind == "message"
    return messages, naming


def _item(model: type[BaseModel], item: dict, where: str) -> Any:
    try:
        return model.model_validate(item)
    except ValidationError as exc:
        raise validation_error(exc, prefix=f"{where}.") from None


def _text_parts(content: Any, where: str) -> Any:
    """Text parts (input_text, output_text) as chat text parts; a string as it is."""
    if not isinstance(content, list):
        return content
    parts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in TEXT_TYPES:
            kind = part.get("type") if isinstance(part, dict) else part
            raise bad_request(f"Content part of type {kind!r} is not supported: the team "
                              "reads text only (input_text parts or a string).",
                              param=f"{where}.{j}.type")
        parts.append({"type": "text", "text": str(part.get("text") or "")})
    return parts


def question(messages: list[Message]) -> str:
    """The question (`question_of`), its errors naming the Responses field (`input`)."""
    try:
        return question_of(messages)
    except ApiError as exc:  # name the Responses field, not the chat one
        exc.param = (exc.param or "").replace("messages", "input", 1) or None
        raise
