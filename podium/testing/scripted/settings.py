"""The scripted server's settings: its faults, per-model latencies and replies (`ServerConfig`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

HOST = "127.0.0.1"
FAULTS: tuple[str, ...] = (
    "500",
    "503",
    "429",
    "401",
    "empty",
    "truncated",
    "html",
    "nochoices",
    "reset",
    "slow",
    "hang",
)
HANG_SECONDS = 3600.0
SLOW_SECONDS = 30.0
RETRY_AFTER_SECONDS = 1.0  # the default Retry-After of the "429" and "503" faults
ECHO_CHARS = 60
CLIENT_GONE = 499  # the status logged for a request whose client disconnected before the reply
CONNECTION_RESET = 0  # the status logged for a request answered with the "reset" fault
_COUNTED = re.compile(r"^(?P<fault>[a-z0-9]+)x(?P<count>\d+)$")

_ERRORS: dict[str, tuple[int, str, str, str]] = {
    # fault: (status, message, type, code)
    "500": (500, "scripted fault: internal server error", "server_error", "internal_error"),
    "503": (503, "scripted fault: service unavailable", "server_error", "overloaded"),
    "429": (429, "scripted fault: rate limit reached", "rate_limit_error", "rate_limit_exceeded"),
    "401": (
        401,
        "scripted fault: incorrect API key provided",
        "invalid_request_error",
        "invalid_api_key",
    ),
}
_CONFIG_KEYS = (
    "latency_by_model",
    "faults_by_model",
    "retry_after_by_model",
    "reply_by_model",
    "tool_calls_by_model",
    "models",
)


def parse_fault(spec: str) -> tuple[str, int | None]:
    """`"429"` -> ("429", None) (always); `"429x2"` -> ("429", 2) (the first 2 requests).
    ValueError for an unknown fault."""
    match = _COUNTED.match(spec)
    fault, count = (match["fault"], int(match["count"])) if match else (spec, None)
    if fault not in FAULTS:
        raise ValueError(
            f"{spec!r} is not a fault; use one of {', '.join(FAULTS)}, optionally followed by "
            "x<N> (e.g. 429x2) to fail only the first N requests"
        )
    return fault, count


def _calls(model: str, calls: Any) -> list[dict[str, Any]]:
    """`tool_calls_by_model[model]`, checked, each call's arguments as JSON text."""
    if not isinstance(calls, list) or not calls:
        raise ValueError(f"tool_calls_by_model[{model!r}] must be a non-empty list of calls")
    checked = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) \
                or not isinstance(call.get("arguments", "{}"), str | dict):
            raise ValueError(f"tool_calls_by_model[{model!r}]: {call!r} is not a call "
                             '({"name": str, "arguments": JSON text or an object})')
        arguments = call.get("arguments", "{}")
        checked.append({"name": call["name"], "arguments": arguments if isinstance(
            arguments, str) else json.dumps(arguments)})
    return checked


# --------------------------------------------------------------------------------------------
# configuration


@dataclass
class ServerConfig:
    """How the server answers. Per-model settings override the global `latency`."""

    latency: float = 0.05
    latency_by_model: dict[str, float] = field(default_factory=dict)
    faults_by_model: dict[str, str] = field(default_factory=dict)
    retry_after_by_model: dict[str, float] = field(default_factory=dict)
    reply_by_model: dict[str, str] = field(default_factory=dict)
    # model -> the calls it makes: [{"name": str, "arguments": JSON text or an object}, ...]
    tool_calls_by_model: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    models: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.latency = float(self.latency)
        if self.latency < 0:
            raise ValueError(f"latency must be >= 0, got {self.latency}")
        self.latency_by_model = {str(k): float(v) for k, v in self.latency_by_model.items()}
        for model, value in self.latency_by_model.items():
            if value < 0:
                raise ValueError(f"latency_by_model[{model!r}] must be >= 0, got {value}")
        self.faults_by_model = {str(k): str(v) for k, v in self.faults_by_model.items()}
        for model, fault in self.faults_by_model.items():
            try:
                parse_fault(fault)
            except ValueError as exc:
                raise ValueError(f"faults_by_model[{model!r}]: {exc}") from None
        self.retry_after_by_model = {str(k): float(v) for k, v in self.retry_after_by_model.items()}
        for model, value in self.retry_after_by_model.items():
            if value < 0:
                raise ValueError(f"retry_after_by_model[{model!r}] must be >= 0, got {value}")
        self.reply_by_model = {str(k): str(v) for k, v in self.reply_by_model.items()}
        self.tool_calls_by_model = {str(k): _calls(str(k), v)
                                    for k, v in self.tool_calls_by_model.items()}
        self.models = [str(m) for m in self.models]

    @classmethod
    def from_json(cls, text: str, latency: float = 0.05) -> ServerConfig:
        """Build from the `--config` JSON object (keys: latency_by_model, faults_by_model,
        retry_after_by_model, reply_by_model, tool_calls_by_model, models); unknown keys are
        an error."""
        data = json.loads(text or "{}")
        if not isinstance(data, dict):
            raise ValueError("--config must be a JSON object")
        unknown = sorted(set(data) - set(_CONFIG_KEYS))
        if unknown:
            raise ValueError(f"unknown --config keys {unknown}; use {', '.join(_CONFIG_KEYS)}")
        return cls(latency=latency, **data)

    def to_json(self) -> str:
        return json.dumps(
            {
                "latency_by_model": self.latency_by_model,
                "faults_by_model": self.faults_by_model,
                "retry_after_by_model": self.retry_after_by_model,
                "reply_by_model": self.reply_by_model,
                "tool_calls_by_model": self.tool_calls_by_model,
                "models": self.models,
            }
        )

    def latency_for(self, model: str) -> float:
        return self.latency_by_model.get(model, self.latency)

    def retry_after_for(self, model: str) -> float:
        return self.retry_after_by_model.get(model, RETRY_AFTER_SECONDS)

    def model_names(self) -> list[str]:
        if self.models:
            return list(self.models)
        names = sorted({*self.latency_by_model, *self.faults_by_model, *self.reply_by_model,
                        *self.tool_calls_by_model})
        return names or ["scripted"]
