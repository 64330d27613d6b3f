"""What every grader returns, and the answer-tag extraction all tasks share.

Graders are pure functions of (response, gold) -> Grade, shared by evaluation and by training
rewards. A grader never raises on bad model output: an unreadable answer is a Grade with
`correct=False` and a `reason`; a grader that itself crashes is reported by the caller as
`reason="grader_error: ..."`, never dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

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


def extract_answer(text: str | None) -> str | None:
    """The first `<answer>...</answer>` span (case-insensitive, across lines), stripped;
    None when there is no tag (PAPER.md §7.2: no tag scores 0)."""
    if not text:
        return None
    match = ANSWER_TAG.search(text)
    return match.group(1).strip() if match else None
