"""GPQA-Diamond: 198 graduate-level science questions, four options each (OOD, §11).

Data (not available offline; pass `path=`): the official CSV (`Question`, `Correct Answer`,
`Incorrect Answer 1..3`, `Record ID`, `High-level domain`, `Subdomain`, ...). The file always
lists the correct answer first, so the options are shuffled per question with
random.Random(f"{choice_seed}:{record id}") (a hash of the question when there is no Record
ID): the same seed gives the same order on every run and machine. The gold is the letter where
the correct answer landed. The whole file is the test set.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from podium.errors import ConfigError
from podium.tasks.base import Item
from podium.tasks.common import LETTERS, ChoiceTask, read_records, stable_hash

ANSWER_COLUMNS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
                  "Incorrect Answer 3")


@dataclass(kw_only=True)
class GPQATask(ChoiceTask):
    name: str = "gpqa"
    choice_seed: int = 0

    def read_items(self, path: Path) -> list[Item]:
        items = []
        for i, row in enumerate(read_records(path)):
            missing = [c for c in ("Question", *ANSWER_COLUMNS) if c not in row]
            if missing:
                raise ConfigError(f"{path}: row {i} lacks the columns {missing}; expected the "
                                  "official GPQA CSV")
            question = str(row["Question"]).strip()
            key = str(row.get("Record ID") or "").strip() or stable_hash(question)
            answers = [str(row[c]).strip() for c in ANSWER_COLUMNS]
            order = list(range(4))
            random.Random(f"{self.choice_seed}:{key}").shuffle(order)
            choices = [answers[j] for j in order]
            gold = LETTERS[order.index(0)]
            items.append(Item(id=key, question=question, gold=gold,
                              meta={"choices": choices,
                                    "domain": str(row.get("High-level domain") or "").strip(),
                                    "subdomain": str(row.get("Subdomain") or "").strip()}))
        return items

    def header(self, item: Item) -> str:
        return "Answer the following multiple-choice science question."
