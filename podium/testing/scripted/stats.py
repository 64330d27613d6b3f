"""What the scripted server counts: requests in flight, overall and per model, and a log of
every request."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

# --------------------------------------------------------------------------------------------
# statistics (touched only from the event loop thread, so no locks)


@dataclass
class _Counter:
    in_flight: int = 0
    max_in_flight: int = 0
    requests: int = 0

    def start(self) -> None:
        self.in_flight += 1
        self.requests += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def as_dict(self) -> dict[str, int]:
        return {
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "requests": self.requests,
        }


class Stats:
    """In-flight counts (current and maximum), request counts and a request log; also how
    many requests each model has had since the last reset (for the counted faults)."""

    def __init__(self) -> None:
        self.overall = _Counter()
        self.by_model: dict[str, _Counter] = {}
        self.log: list[dict[str, Any]] = []
        self.seen: dict[str, int] = {}

    def arrival(self, model: str) -> int:
        """Count one more request to `model`; return how many came before it."""
        before = self.seen.get(model, 0)
        self.seen[model] = before + 1
        return before

    def start(self, model: str, last_user_message: str, params: dict[str, Any] | None = None,
              auth_fingerprint: str | None = None,
              tool_messages: list[Any] | None = None) -> dict[str, Any]:
        self.overall.start()
        self.by_model.setdefault(model, _Counter()).start()
        entry: dict[str, Any] = {
            "model": model,
            "start_time": time.time(),
            "end_time": None,
            "last_user_message": last_user_message,
            "status": None,
            "params": params or {},
            "auth_fingerprint": auth_fingerprint,
            "tool_messages": tool_messages or [],
        }
        self.log.append(entry)
        return entry

    def end(self, entry: dict[str, Any], status: int) -> None:
        entry["end_time"] = time.time()
        entry["status"] = status
        self.overall.in_flight -= 1
        counter = self.by_model.get(entry["model"])
        if counter is not None:
            counter.in_flight -= 1

    def reset(self) -> None:
        """Forget everything except the requests still in flight (they are still counted as
        in flight, and they end normally, but they are no longer in the log). Counted faults
        start counting again."""
        self.seen = {}
        self.overall = _Counter(self.overall.in_flight, self.overall.in_flight, 0)
        self.by_model = {
            model: _Counter(c.in_flight, c.in_flight, 0)
            for model, c in self.by_model.items()
            if c.in_flight > 0
        }
        self.log = []

    def as_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall.as_dict(),
            "by_model": {model: c.as_dict() for model, c in sorted(self.by_model.items())},
            "log": [dict(entry) for entry in self.log],
        }
