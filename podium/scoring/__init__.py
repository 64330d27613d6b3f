"""Pure graders shared by evaluation and training rewards."""

from podium.scoring.base import Grade, extract_answer

__all__ = ["Grade", "extract_answer"]
