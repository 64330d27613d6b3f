"""The Chat Completions wire format: what a request may hold, and the question it becomes.

A request is validated into a `ChatRequest` (unknown fields are accepted and ignored, as
OpenAI-compatible servers do; fields that would change the meaning of the answer and that the
team cannot honour, such as `n > 1` or `tools`, are refused with a 400 naming the field).
What is accepted can be traced: a body with `NaN` or `Infinity` (not JSON) is refused, and so
is a string anywhere in it, known field or not, that holds a lone surrogate (`"\\ud800"`: no
character, which no trace, log or model takes), with a 400 naming its field (`not_unicode`).

**The question.** The team answers one question. The last message must come from the user:
its text is the question. When the conversation has earlier turns (a system message, earlier
user and assistant turns), they are put before it as context, in one clearly delimited block:

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

**Per-request options** (podium's own; OpenAI clients send them with `extra_body`, which puts
them at the top level of the JSON body, or as strings in `metadata`; a top-level key wins):

    workers          list of worker names (or "a,b" in metadata): run with this sub-pool
    recursion        recursion rounds after the first, 0..MAX_RECURSION
    max_calls        cap on model calls for this request (never above the pool's own cap)
    max_total_tokens cap on tokens, prompt and completion of every call, for this request
                     (the pool's `run.max_tokens`; never above it)
    max_cost         cap on cost in USD for this request (never above the pool's own cap)
    budget           what the workers' calls may cost in USD (list price): shown to the
                     Conductor with the pool's run.show_budget; the trace says whether the
                     plan kept to it (podium.conductor.budget). A cap stops calls; a budget does not.
    return_trace_id  true: the response carries `podium_trace_id` and `X-Podium-Trace-Id`

**Sampling fields** are validated as the OpenAI API validates them (type and range; a 400
naming the field), and each is honoured or refused, none ignored:

    temperature, top_p, seed   honoured by the step that writes the answer (each workflow's
                               last step), over its worker's own setting; the Conductor and
                               the other steps sample as the pool file says
    stop                       a string or up to 4, none empty or over 1000 characters: added
                               to the answer step's stop sequences
    max_tokens,                cap the answer step's completion tokens (never above its
    max_completion_tokens      worker's own `max_tokens`); an answer cut there ends with
                               finish_reason "length"
    n                          1 only (400 otherwise)
    presence_penalty,          0 only: a team of different models has no one penalty to
    frequency_penalty          apply (400 otherwise)
    logit_bias                 empty only: token ids differ between the team's models
    logprobs, top_logprobs     false / 0 only: the answer's tokens are another model's
    user                       recorded in the request's trace

A backend honours what its API has: Anthropic's takes `stop` and `max_tokens` only (its API
refuses temperature and top_p), and a `function` worker is a tool, not a sampler.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from podium.files import strict_loads
from podium.llm.base import Sampling
from podium.serve.errors import ApiError, bad_request

M = TypeVar("M", bound=BaseModel)

MAX_RECURSION = 5
MAX_STOP = 4  # stop sequences, as OpenAI takes them
MAX_STOP_CHARS = 1000  # characters in one stop sequence
OPTION_KEYS = ("workers", "recursion", "max_calls", "max_total_tokens", "max_cost",
               "budget", "return_trace_id")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
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


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: StrictBool = False


class Options(BaseModel):
    """podium's per-request options, from the body's top level or from `metadata`."""

    model_config = ConfigDict(extra="forbid")
    workers: list[str] | None = Field(None, min_length=1)
    recursion: int | None = Field(None, ge=0, le=MAX_RECURSION)
    max_calls: int | None = Field(None, ge=1)
    max_total_tokens: int | None = Field(None, ge=1)
    max_cost: float | None = Field(None, ge=0)
    budget: float | None = Field(None, ge=0, allow_inf_nan=False)
    return_trace_id: bool = False


Number = StrictFloat | StrictInt  # as JSON has it: 1 and 1.0 alike, never "1" or true


class SampledRequest(BaseModel):
    """The sampling fields both APIs share (validated as OpenAI does)."""

    model_config = ConfigDict(extra="allow")
    temperature: Number | None = Field(None, ge=0, le=2)
    top_p: Number | None = Field(None, ge=0, le=1)
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)


class ChatRequest(SampledRequest):
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_tokens: StrictInt | None = Field(None, gt=0)
    max_completion_tokens: StrictInt | None = Field(None, gt=0)
    n: StrictInt | None = None
    seed: StrictInt | None = None
    stop: StrictStr | list[StrictStr] | None = Field(None)
    presence_penalty: Number | None = Field(None, ge=-2, le=2)
    frequency_penalty: Number | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, Number] | None = None
    logprobs: StrictBool | None = None
    user: StrictStr | None = None
    metadata: dict[str, Any] | None = None

    def sampling(self) -> Sampling | None:
        """What this request asks of the answer step (None: nothing), once the fields the
        team cannot honour are refused (a 400 naming the field)."""
        refuse_unhonoured(self)
        for key, none in (("presence_penalty", 0), ("frequency_penalty", 0),
                          ("logit_bias", {}), ("logprobs", False)):
            if getattr(self, key) not in (None, none):
                raise unhonoured(key, f"{none!r}")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stop) > MAX_STOP or not all(0 < len(s) <= MAX_STOP_CHARS for s in stop):
            got = (f"{len(stop)} strings" if len(stop) > MAX_STOP else "an empty string" if
                   not all(stop) else f"a string of {max(map(len, stop))} characters")
            raise bad_request(f"Invalid value for 'stop': it must be {FIELD_RULES['stop']} (got "
                              f"{got}).", param="stop")
        limit = self.max_completion_tokens or self.max_tokens
        return sampling(self.temperature, self.top_p, self.seed, tuple(stop), limit)


def refuse_unhonoured(req: SampledRequest) -> None:
    if req.top_logprobs:
        raise unhonoured("top_logprobs", "0")


def unhonoured(key: str, allowed: str) -> ApiError:
    return bad_request(f"'{key}' can only be {allowed} for the podium model: its answer is "
                       "written by one of a team of models, which cannot honour it. Leave it "
                       "out.", param=key, code="unsupported_value")


def sampling(temperature, top_p, seed, stop, max_tokens) -> Sampling | None:
    found = Sampling(temperature, top_p, seed, stop, max_tokens)
    return None if found == Sampling() else found


# what each top-level field must be, as a 400 says it (OpenAI's ranges)
FIELD_RULES = {
    "temperature": "a number from 0 to 2", "top_p": "a number from 0 to 1",
    "seed": "an integer",
    "stop": f"a string or a list of up to {MAX_STOP} strings, each of 1 to {MAX_STOP_CHARS} "
            "characters",
    "presence_penalty": "a number from -2 to 2", "frequency_penalty": "a number from -2 to 2",
    "logit_bias": "an object of token ids to numbers", "logprobs": "true or false",
    "top_logprobs": "an integer from 0 to 20", "user": "a string",
    "max_tokens": "a positive integer", "max_completion_tokens": "a positive integer",
    "max_output_tokens": "a positive integer", "n": "an integer", "stream": "true or false",
}


def _param(loc: tuple) -> str:
    return ".".join(str(p) for p in loc)


def validation_error(err: ValidationError, prefix: str = "") -> ApiError:
    first = err.errors()[0]
    param = prefix + _param(first["loc"])
    if first["type"] == "missing":
        return bad_request(f"Missing required parameter: '{param}'.", param=param,
                           code="missing_required_parameter")
    field = str(first["loc"][0]) if first["loc"] and not prefix else ""
    if field in FIELD_RULES:  # named as the API names it (not pydantic's union members)
        got = first.get("input")
        return bad_request(f"Invalid value for '{field}': it must be {FIELD_RULES[field]} (got "
                           f"{json.dumps(got) if _jsonable(got) else repr(got)}).",
                           param=field)
    return bad_request(f"Invalid value for '{param}': {first['msg']}.", param=param)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def validated(raw: bytes, model: type[M]) -> tuple[M, dict]:
    """The body as `model`, and as the JSON object it was; an ApiError (400) naming the bad
    field otherwise."""
    try:
        data = strict_loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise bad_request(f"The request body is not valid JSON ({exc}). Send a JSON object "
                          "with Content-Type: application/json.", code="invalid_json") from None
    except RecursionError:
        raise too_deep() from None
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object.", code="invalid_json")
    if not (raw.isascii() and b"\\u" not in raw) and (where := not_unicode(data)) is not None:
        raise bad_request(f"Invalid value for '{where}': it holds a lone surrogate (a \\ud800-"
                          "\\udfff escape without its pair), which is not a character. Send "
                          "the text as valid Unicode.", param=where)
    try:
        return model.model_validate(data), data
    except ValidationError as exc:
        raise validation_error(exc) from None
    except RecursionError:
        raise too_deep() from None


def not_unicode(data: Any) -> str | None:
    """The field (dotted, as `param` names it) of the first string in `data`, or key, that
    holds a lone surrogate: JSON's `\\ud800` escapes decode to one, and no trace, log or
    model can take it as text."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if not _encodable(value):
                return where
        elif isinstance(value, dict):
            for key in value:
                if not _encodable(key):
                    return where or "(a key)"
            stack.extend((f"{where}.{k}" if where else k, v)
                         for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{where}.{i}", v) for i, v in reversed(list(enumerate(value))))
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def too_deep() -> Exception:
    return bad_request("The request body is nested too deeply to read. Send the messages as "
                       "the API describes them (no deeper than a few levels).",
                       code="invalid_json")


def parse_body(raw: bytes) -> tuple[ChatRequest, Options]:
    """The request and its podium options, or an ApiError (400) naming the bad field."""
    req, data = validated(raw, ChatRequest)
    if req.n not in (None, 1):
        raise bad_request("n must be 1: the team writes one answer per request.", param="n",
                          code="unsupported_value")
    for key in ("tools", "functions", "tool_choice", "response_format"):
        if data.get(key) not in (None, [], "none", {"type": "text"}):
            raise bad_request(f"'{key}' is not supported by the podium model: it returns the "
                              "team's answer as text. Leave it out.", param=key,
                              code="unsupported_parameter")
    return req, options_of(data, req.metadata or {})


def options_of(data: dict, metadata: dict) -> Options:
    """podium's options from the body's top level or its `metadata` (a top-level key wins)."""
    merged: dict[str, Any] = {}
    for key in OPTION_KEYS:
        if key in metadata:
            value = metadata[key]
            if key == "workers" and isinstance(value, str):
                value = [n.strip() for n in value.split(",") if n.strip()]
            merged[key] = value
    merged.update({k: data[k] for k in OPTION_KEYS if k in data})
    try:
        return Options.model_validate(merged)
    except ValidationError as exc:
        raise validation_error(exc) from None


def question_of(messages: list[ChatMessage]) -> str:
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
