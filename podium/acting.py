"""The state of a run whose answer is tool calls: what continues it once the tool results
come back (`podium.pipeline.Pipeline.continue_acting`), and what a server seals into the
tool-call ids it writes (`podium.serve.session`).

    ActingState(question, worker=2, worker_name="agent", messages=[...], round=0,
                sample_id=0, request_id="chatcmpl-...", trace_id=None)

`messages` are the acting step's messages exactly as the executor sent them (after a
continuation: with the exchange appended); `question` is the task the team was given (with
its tools' block); `request_id` is the provider's id of the acting call; `trace_id` is the
trace of the run that made the calls, set by whoever keeps traces (None: none). `to_json` and
`from_json` make it JSON and back (`from_json` raises ValueError on anything else).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from podium.llm.base import Message


@dataclass(frozen=True)
class ActingState:
    """The acting step of a run whose answer is tool calls (see the module docstring)."""

    question: str
    worker: int
    worker_name: str
    messages: tuple[Message, ...]
    round: int = 0
    sample_id: int | str = 0
    request_id: str | None = None
    trace_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"question": self.question, "worker": self.worker,
                "worker_name": self.worker_name, "messages": [dict(m) for m in self.messages],
                "round": self.round, "sample_id": self.sample_id,
                "request_id": self.request_id, "trace_id": self.trace_id}

    @classmethod
    def from_json(cls, data: Any) -> ActingState:
        """The state `to_json` wrote; ValueError naming the field when `data` is not one."""
        if not isinstance(data, dict):
            raise ValueError(f"an acting state is a JSON object, not {type(data).__name__}")
        checks: dict[str, tuple[type, ...]] = {
            "question": (str,), "worker": (int,), "worker_name": (str,), "messages": (list,),
            "round": (int,), "sample_id": (int, str), "request_id": (str, type(None)),
            "trace_id": (str, type(None))}
        for key, types in checks.items():
            value = data.get(key)
            if not isinstance(value, types) or isinstance(value, bool):
                raise ValueError(f"an acting state's {key} is {type(value).__name__}")
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                   for m in data["messages"]):
            raise ValueError("an acting state's messages are not chat messages")
        return cls(data["question"], data["worker"], data["worker_name"],
                   tuple(data["messages"]), data["round"], data["sample_id"],
                   data["request_id"], data["trace_id"])
