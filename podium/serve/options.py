"""What both APIs take the same way: podium's per-request options, and the sampling fields.

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
naming the field), and each is honoured or refused, none ignored. What a caller means by
them is the answer, so they apply to the step that writes it (each workflow's last step),
over its worker's own setting; the Conductor and the other steps sample as the pool file
says. `SampledRequest` holds those both APIs have (`temperature`, `top_p`, `top_logprobs`);
each API's request adds its own (`podium.serve.chat.request`,
`podium.serve.responses.request`). A backend honours what its API has: Anthropic's takes
`stop` and `max_tokens` only (its API refuses temperature and top_p), and a `function` worker
is a tool, not a sampler.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from podium.llm.base import Sampling
from podium.serve.body import validation_error
from podium.serve.errors import ApiError, bad_request

MAX_RECURSION = 5
OPTION_KEYS = ("workers", "recursion", "max_calls", "max_total_tokens", "max_cost",
               "budget", "return_trace_id")
TRACED = ("temperature", "top_p", "seed", "stop", "max_tokens", "max_completion_tokens",
          "max_output_tokens")  # a request's sampling fields the trace records


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


Number = StrictFloat | StrictInt  # as JSON has it: 1 and 1.0 alike, never "1" or true

# what each sampling field both APIs have must be, as a 400 says it (OpenAI's ranges)
SAMPLING_RULES = {"temperature": "a number from 0 to 2", "top_p": "a number from 0 to 1",
                  "top_logprobs": "an integer from 0 to 20", "stream": "true or false"}


class SampledRequest(BaseModel):
    """The sampling fields both APIs share (validated as OpenAI does)."""

    model_config = ConfigDict(extra="allow")
    temperature: Number | None = Field(None, ge=0, le=2)
    top_p: Number | None = Field(None, ge=0, le=1)
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)

    def refuse_unhonoured(self) -> None:
        if self.top_logprobs:
            raise unhonoured("top_logprobs", "0")

    def traced(self) -> dict:
        """What the request asked of the answer's sampling, and its `user`, for the trace."""
        asked = {k: getattr(self, k) for k in TRACED if getattr(self, k, None) is not None}
        user = getattr(self, "user", None)
        return {**({"sampling": asked} if asked else {}), **({"user": user} if user else {})}


def unhonoured(key: str, allowed: str) -> ApiError:
    return bad_request(f"'{key}' can only be {allowed} for the podium model: its answer is "
                       "written by one of a team of models, which cannot honour it. Leave it "
                       "out.", param=key, code="unsupported_value")


def sampling(temperature, top_p, seed, stop, max_tokens) -> Sampling | None:
    """The answer step's `Sampling` (None: the request asks nothing of it)."""
    found = Sampling(temperature, top_p, seed, stop, max_tokens)
    return None if found == Sampling() else found
