"""The gym as a task: `get_task("gym", families=..., seed=...)`, so eval and report work on it.

Splits: "train" and "test" (held-out) are drawn from disjoint seed streams and never share a
question text (a held-out question that happens to equal a training one is skipped). Each split
holds `split_size` problems, the families taking turns, so every family (single or chained) is
equally common; `load(n=..., seed=...)` samples from it as any task does. The grade is exact:
the final answer's `<answer>` tag against the problem's answer (numbers compared as numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from podium.errors import ConfigError
from podium.scoring.base import Grade, extract_answer
from podium.tasks.base import Item
from podium.tasks.common import sample
from podium.tasks.gym.families import CHAINED, FAMILIES, Problem, generate

SPLIT_SEEDS = {"train": 0, "test": 1_000_000}
RULES = "Give the final answer inside <answer></answer>."


def _same(got: str, want: str) -> bool:
    try:
        return float(got) == float(want)
    except ValueError:
        return got.strip().lower() == want.strip().lower()


@dataclass(kw_only=True)
class GymTask:
    families: tuple[str, ...] = FAMILIES
    split_size: int = 700
    name: str = "gym"
    _splits: dict[str, list[Item]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.families) - set(FAMILIES))
        if unknown or not self.families:
            raise ConfigError(f"gym: unknown families {unknown}; choose from "
                              f"{', '.join(FAMILIES)}")
        self.families = tuple(self.families)

    def _problems(self, split: str, avoid: set[str]) -> list[Problem]:
        base, out, seen = SPLIT_SEEDS[split], [], set(avoid)
        counts = dict.fromkeys(self.families, 0)
        per_family = -(-self.split_size // len(self.families))
        for family in self.families:
            k = 0
            while counts[family] < per_family and k < 50 * per_family:
                problem = generate(family, base + k)
                k += 1
                if problem.question not in seen:
                    seen.add(problem.question)
                    counts[family] += 1
                    out.append(problem)
        # families take turns, so any prefix of the split is balanced
        by_family = [[p for p in out if p.family == f] for f in self.families]
        turns = [p for group in zip_longest(*by_family) for p in group if p is not None]
        return turns[:self.split_size]

    def items(self, split: str) -> list[Item]:
        split = "test" if split in ("held_out", "heldout", "valid") else split
        if split not in SPLIT_SEEDS:
            raise ConfigError(f"gym: split {split!r} does not exist; use train or test "
                              "(held-out)")
        if split not in self._splits:
            avoid = ({i.question for i in self.items("train")} if split == "test" else set())
            self._splits[split] = [
                Item(id=f"gym/{split}/{p.family}/{k}", question=p.question, gold=p.answer,
                     meta={"family": p.family, "chained": p.family in CHAINED,
                           "parts": [list(x) for x in p.parts]})
                for k, p in enumerate(self._problems(split, avoid))]
        return self._splits[split]

    def load(self, *, split: str = "test", n: int | None = None, seed: int = 0) -> list[Item]:
        return sample(self.items(split), n, seed)

    def format(self, item: Item) -> str:
        return f"{item.question}\n{RULES}"

    async def grade(self, item: Item, response: str | None) -> Grade:
        got = extract_answer(response)
        if got is None:
            return Grade.of(False, None, "no_answer")
        return Grade.of(_same(got, str(item.gold)), got)

    def options(self) -> dict[str, Any]:
        return {"families": list(self.families), "split_size": self.split_size}
