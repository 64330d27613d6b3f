"""The gym's questions and grading: generated task families with exact answers (`families`) and
the task "gym" over them (`task`), so `podium eval` and `podium report` run on it like on any
benchmark. Its workers, pool files and training recipe live with training (`podium.train.gym`).
"""

from podium.tasks.gym.families import CHAINED, FAMILIES, SINGLE, Problem, generate
from podium.tasks.gym.task import GymTask

__all__ = ["CHAINED", "FAMILIES", "SINGLE", "GymTask", "Problem", "generate"]
