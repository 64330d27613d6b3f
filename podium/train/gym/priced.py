"""The priced gym: workers whose best choice depends on what a question may cost.

Two families (arithmetic, reverse) and four workers, each billed by the call:

    worker       price a call   right on
    calculator   $0.001         half of the arithmetic questions; wrong elsewhere
    reverser     $0.001         half of the reverse questions; wrong elsewhere
    generalist   $0.002         80% of the questions of both families
    expert       $0.004         every question of both families

Which questions a worker gets right is fixed by a hash of the worker's name and the question,
so a worker's accuracy on a set of questions is exact and the same on every run; a wrong answer
has the right shape (a number off by a little, the word with two letters swapped), never an
error. The best plan for a question therefore depends on its budget: at $0.001 its family's
cheap specialist (50%), at $0.002 the generalist (80%), at $0.004 the expert (100%); no single
routing rule is best at two of these budgets (`experiments/gym_budget.py` computes every fixed
policy's accuracy exactly). The workers read the question (`question` mode).

    python -m podium.train.gym pool --priced [--seed 3] > gym-priced.toml
"""

from __future__ import annotations

import hashlib

from podium.tasks.gym.families import number
from podium.train.gym.specialists import _RULES, _calculate, _reverse, _sections

PRICED = ("calculator", "reverser", "generalist", "expert")
PRICES = {"calculator": 0.001, "reverser": 0.001, "generalist": 0.002, "expert": 0.004}
# (worker, family) -> the share of the family's questions the worker answers right
ACCURACY = {("calculator", "arithmetic"): 0.5, ("reverser", "reverse"): 0.5,
            ("generalist", "arithmetic"): 0.8, ("generalist", "reverse"): 0.8,
            ("expert", "arithmetic"): 1.0, ("expert", "reverse"): 1.0}
FAMILIES = ("arithmetic", "reverse")


def _share(name: str, question: str) -> float:
    """Where `question` falls in [0, 1) for worker `name` (fixed, uniform over questions)."""
    digest = hashlib.sha256(f"{name}:{question}".encode()).hexdigest()
    return int(digest[:8], 16) / 16 ** 8


def _family(task: str) -> str | None:
    if task.startswith("What is "):
        return "arithmetic"
    if task.startswith("Reverse the word"):
        return "reverse"
    return None


def _wrong(right: str, family: str, question: str) -> str:
    """A wrong answer of the right shape."""
    if family == "arithmetic":
        offset = 1 + int(_share("offset", question) * 9)
        return number(float(right) + (offset if _share("sign", question) < 0.5 else -offset))
    word = right
    for i in range(len(word) - 1):
        if word[i] != word[i + 1]:  # swap the first two letters that differ
            return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return word + "a"


class Priced:
    """A priced gym worker: right on its share of each family's questions (`ACCURACY`)."""

    def __init__(self, name: str) -> None:
        self.name = self.__name__ = name

    def __call__(self, messages: list[dict]) -> str:
        task, seen, _ = _sections(messages)
        family = _family(task)
        if family is None or (self.name, family) not in ACCURACY:
            # not its family: a specialist answers as the exact one would (almost always
            # wrong); a generalist asked something else answers with a number
            rule = _RULES.get(self.name, _calculate)
            return f"<answer>{rule(task, seen)}</answer>"
        right = (_calculate if family == "arithmetic" else _reverse)(task, seen)
        if _share(self.name, task) < ACCURACY[(self.name, family)]:
            return f"<answer>{right}</answer>"
        return f"<answer>{_wrong(right, family, task)}</answer>"


calculator = Priced("calculator")
reverser = Priced("reverser")
generalist = Priced("generalist")
expert = Priced("expert")

__all__ = ["ACCURACY", "FAMILIES", "PRICED", "PRICES", "Priced"]
