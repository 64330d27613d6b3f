"""What every grader returns, and the answer-tag extraction all tasks share.

Graders are pure functions of (response, gold) -> Grade, shared by evaluation and by training
rewards. A grader never raises on bad model output: an unreadable answer is a Grade with
`correct=False` and a `reason`. A grader that cannot do its job (the sandbox cannot start, the
math-verify pool broke, a package is missing) says so with `Grade.grader_error(...)`, whose
reason starts with ``grader_error:``; `Grade.failed` tells the two apart, and the run's outcome
counts such a grade as an infrastructure failure, not as a wrong answer (`podium.outcome`). A
grader that raises is reported the same way by its caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

GRADER_ERROR = "grader_error"
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class Grade:
    correct: bool
    score: float = 0.0  # in [0, 1]; 1.0 when correct for binary graders
    extracted: str | None = None  # the answer the grader read from the response
    reason: str = ""  # why it is not correct: no_answer, mismatch, grader_error: ..., ...
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, correct: bool, extracted: str | None, reason: str = "", **details: Any) -> Grade:
        return cls(correct, 1.0 if correct else 0.0, extracted,
                   "" if correct else (reason or "mismatch"), details)

    @classmethod
    def grader_error(cls, detail: str, extracted: str | None = None, **details: Any) -> Grade:
        """The grader itself failed: the answer is ungraded (not wrong)."""
        return cls(False, 0.0, extracted, f"{GRADER_ERROR}: {detail}", details)

    @property
    def failed(self) -> bool:
        """True when the grader failed rather than the answer."""
        return self.reason.startswith(GRADER_ERROR)


def extract_answer(text: str | None) -> str | None:
    """The first `<answer>...</answer>` span (case-insensitive, across lines), stripped;
    None when there is no tag (PAPER.md §7.2: no tag scores 0)."""
    if not text:
        return None
    match = ANSWER_TAG.search(text)
    return match.group(1).strip() if match else None
