"""A Chat Completions request: its fields, validated, and what the team can honour of them.

A body is validated into a `ChatRequest` (`podium.serve.body`: unknown fields are accepted
and ignored; fields that would change the meaning of the answer and that the team cannot
honour, such as `n > 1`, are refused with a 400 naming the field). podium's own options come
beside them (`podium.serve.options`), and `messages` become the question
(`podium.serve.conversation`).

`tools`, `tool_choice`, `parallel_tool_calls` and the conversation's tool calls and results
are checked (`podium.serve.tools`: a malformed one is a 400 naming its field), and the kind of
turn the conversation is read (`podium.serve.acting` continues one that ends in tool results).

The sampling fields, beyond those both APIs share (`podium.serve.options`):

    seed                       honoured by the answer step
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
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from podium.llm.base import Sampling
from podium.llm.tools import ToolUse
from podium.serve.body import validated
from podium.serve.conversation import Message
from podium.serve.errors import bad_request
from podium.serve.options import (
    SAMPLING_RULES,
    Number,
    Options,
    SampledRequest,
    options_of,
    sampling,
    unhonoured,
)
from podium.serve.tools import Turn, chat_namer, chat_tool_use, read_conversation

MAX_STOP = 4  # stop sequences, as OpenAI takes them
MAX_STOP_CHARS = 1000  # characters in one stop sequence

# what each top-level field must be, as a 400 says it (OpenAI's ranges)
RULES = {
    **SAMPLING_RULES,
    "seed": "an integer",
    "stop": f"a string or a list of up to {MAX_STOP} strings, each of 1 to {MAX_STOP_CHARS} "
            "characters",
    "presence_penalty": "a number from -2 to 2", "frequency_penalty": "a number from -2 to 2",
    "logit_bias": "an object of token ids to numbers", "logprobs": "true or false",
    "user": "a string", "max_tokens": "a positive integer",
    "max_completion_tokens": "a positive integer", "n": "an integer",
    "parallel_tool_calls": "true or false",
}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: StrictBool = False


class ChatRequest(SampledRequest):
    model: str
    messages: list[Message] = Field(min_length=1)
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
    parallel_tool_calls: StrictBool | None = None

    def sampling(self) -> Sampling | None:
        """What this request asks of the answer step (None: nothing), once the fields the
        team cannot honour are refused (a 400 naming the field)."""
        self.refuse_unhonoured()
        for key, none in (("presence_penalty", 0), ("frequency_penalty", 0),
                          ("logit_bias", {}), ("logprobs", False)):
            if getattr(self, key) not in (None, none):
                raise unhonoured(key, f"{none!r}")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if len(stop) > MAX_STOP or not all(0 < len(s) <= MAX_STOP_CHARS for s in stop):
            got = (f"{len(stop)} strings" if len(stop) > MAX_STOP else "an empty string" if
                   not all(stop) else f"a string of {max(map(len, stop))} characters")
            raise bad_request(f"Invalid value for 'stop': it must be {RULES['stop']} (got "
                              f"{got}).", param="stop")
        limit = self.max_completion_tokens or self.max_tokens
        return sampling(self.temperature, self.top_p, self.seed, tuple(stop), limit)


def parse_body(raw: bytes) -> tuple[ChatRequest, Options, ToolUse | None, Turn]:
    """The request, its podium options, its tools and its kind of turn, or an ApiError (400)
    naming the bad field."""
    req, data = validated(raw, ChatRequest, RULES)
    if req.n not in (None, 1):
        raise bad_request("n must be 1: the team writes one answer per request.", param="n",
                          code="unsupported_value")
    for key in ("functions", "response_format"):
        if data.get(key) not in (None, [], {"type": "text"}):
            raise bad_request(f"'{key}' is not supported by the podium model: it returns the "
                              "team's answer as text. Leave it out.", param=key,
                              code="unsupported_parameter")
    use = chat_tool_use(data)
    turn = read_conversation(req.messages, use, chat_namer)
    return req, options_of(data, req.metadata or {}), use, turn
