"""GSM8K: grade-school word problems with an integer answer after "#### " in the solution.

Data: openai/gsm8k (config "main") from the Hugging Face Hub, or gsm8k/{train,test}.jsonl under
--data-dir / $PODIUM_DATA_DIR (`{question, answer}`, the same rows). Split "test" is the test
set, "train" the train set, "all" both. `path=` may name a folder holding the two files, or one
JSONL file that then serves as the test split.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from podium.errors import ConfigError
from podium.scoring.base import Grade
from podium.tasks.base import Item
from podium.tasks.common import SPLIT_ALIASES, TaskBase, compose, read_records
from podium.tasks.hub import HubSource
from podium.tasks.sources import GSM8K


def gsm8k_gold(solution: str) -> int | float:
    """The number after the last "#### ", without thousands separators."""
    _, sep, tail = (solution or "").rpartition("####")
    text = tail.replace(",", "").replace("$", "").strip()
    try:
        value = float(text) if sep else None
    except ValueError:
        value = None
    if value is None:
        raise ConfigError(f"GSM8K solution has no '#### number' line: {solution[-80:]!r}")
    return int(value) if value.is_integer() else value


@dataclass(kw_only=True)
class GSM8KTask(TaskBase):
    name: str = "gsm8k"
    rel_tol: float = 0.0
    abs_tol: float = 1e-6

    default_file = "gsm8k"

    def hub_source(self) -> HubSource:
        return GSM8K

    def offline_fix(self) -> str:
        return ("pass --data-dir DIR (or set PODIUM_DATA_DIR) to a folder holding "
                "gsm8k/test.jsonl and gsm8k/train.jsonl (docs/evaluation.md, \"Data\")")

    def _file(self, split: str) -> Path | None:
        root = self.local_path()
        if root is None:
            return None
        if root.is_file():
            if split != "test":
                raise ConfigError(f"gsm8k: path={root} is a single file, used as the test "
                                  "split; pass a folder with train.jsonl and test.jsonl for "
                                  f"split={split!r}")
            return root
        return root / f"{split}.jsonl"

    def _read(self, split: str) -> list[Item]:
        file = self._file(split)
        rows = read_records(file) if file is not None else self.hub_rows(split)
        return [Item(id=f"gsm8k/{split}/{i}", question=row["question"],
                     gold=gsm8k_gold(row["answer"]),
                     meta={"solution": row["answer"], "split": split})
                for i, row in enumerate(rows)]

    def items(self) -> list[Item]:
        if self._items is None:
            self._items = self._read("test")
        return self._items

    def split_items(self, split: str) -> list[Item]:
        split = SPLIT_ALIASES.get(split, split)
        if split == "test":
            return list(self.items())
        if split == "train":
            return self._read("train")
        if split == "all":
            return list(self.items()) + self._read("train")
        raise ConfigError(f"gsm8k: split {split!r} does not exist; use test, train or all")

    def format(self, item: Item) -> str:
        return compose(
            "Solve the following math word problem.",
            item.question,
            "Answer rules: the final answer is a single number. Write only the number: no "
            "units, no currency signs, no thousands separators, no words.",
        )

    async def grade(self, item: Item, response: str | None) -> Grade:
        from podium.scoring.numeric import grade_numeric

        return grade_numeric(response, item.gold, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
