"""One error tree for podium. Every message says what to change to fix the problem.

    PodiumError
    ├── ConfigError            a pool file, setting or CLI argument is wrong
    ├── WorkflowParseError     the Conductor's text is not a valid workflow (has `.reason`)
    └── WorkerError            a call to a model failed (has `.worker` and `.kind`)

`WorkerError.kind` is one of `auth`, `rate_limit`, `context_length`, `server`, `transport`,
`bad_request`, `empty`, `other`; providers' exceptions are converted in `podium.llm` only.
"""

from __future__ import annotations

from typing import Literal

ParseReason = Literal[
    "unparseable", "empty", "length_mismatch", "bad_model_id", "bad_access", "too_many_steps"
]
PARSE_REASONS: tuple[str, ...] = (
    "unparseable",
    "empty",
    "length_mismatch",
    "bad_model_id",
    "bad_access",
    "too_many_steps",
)

WorkerErrorKind = Literal[
    "auth", "rate_limit", "context_length", "server", "transport", "bad_request", "empty", "other",
    "internal",
]
INTERNAL: WorkerErrorKind = "internal"  # a backend raised something other than WorkerError


class PodiumError(Exception):
    """Base of every error podium raises on purpose. Its message is scrubbed of every
    registered secret (`podium.redact`): an endpoint's text in it never carries a key on."""

    def __init__(self, *args: object) -> None:
        from podium.redact import scrub

        super().__init__(*(scrub(a) if isinstance(a, str) else a for a in args))


class ConfigError(PodiumError):
    """A pool file, a setting or a command-line argument is wrong; the message names the fix."""


class WorkflowParseError(PodiumError):
    """The Conductor's output is not a valid workflow.

    `reason` is one of PARSE_REASONS; `detail` says what exactly was wrong.
    """

    def __init__(self, reason: ParseReason, detail: str = "") -> None:
        if reason not in PARSE_REASONS:
            raise ValueError(f"unknown parse reason {reason!r}")
        self.reason: ParseReason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


RETRYABLE_KINDS: frozenset[str] = frozenset({"rate_limit", "server", "transport", "empty"})


class WorkerError(PodiumError):
    """A model call failed (after the retries its settings allow, once `retries` is filled).

    `status` is the HTTP status when there was one; `retry_after` the seconds a server asked
    to wait; `retries` the attempts made before giving up (dicts as in `ChatResponse.retries`).
    """

    def __init__(self, worker: str, kind: WorkerErrorKind, message: str, *,
                 status: int | None = None, retry_after: float | None = None) -> None:
        self.worker = worker
        self.kind: WorkerErrorKind = kind
        self.status = status
        self.retry_after = retry_after
        self.retries: list[dict] = []
        super().__init__(f"worker {worker!r} ({kind}): {message}")

    @property
    def retryable(self) -> bool:
        """Rate limits, server errors, transport failures and empty replies may succeed later;
        authentication, bad requests and context-length errors never will."""
        return self.kind in RETRYABLE_KINDS
