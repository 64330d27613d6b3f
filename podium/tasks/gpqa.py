"""GPQA-Diamond: 198 graduate-level science questions, four options each (OOD, §11).

Data: Idavidrein/gpqa (config "gpqa_diamond"; a gated dataset: accept its terms on the Hub and
log in) from the Hugging Face Hub, or gpqa/gpqa_diamond.csv under --data-dir / $PODIUM_DATA_DIR,
or `path=`: the official CSV (`Question`, `Correct Answer`, `Incorrect Answer 1..3`, `Record
ID`, `High-level domain`, `Subdomain`, ...), the same columns on the Hub. The file always
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
from podium.tasks.common import LETTERS, ChoiceTask, stable_hash
from podium.tasks.hub import HubSource, Rows
from podium.tasks.sources import GPQA

ANSWER_COLUMNS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
                  "Incorrect Answer 3")


@dataclass(kw_only=True)
class GPQATask(ChoiceTask):
    name: str = "gpqa"
    choice_seed: int = 0

    default_file = "gpqa/gpqa_diamond.csv"

    def hub_source(self) -> HubSource:
        return GPQA

    def rows_to_items(self, rows: Rows, where: str | Path) -> list[Item]:
        items = []
        for i, row in enumerate(rows):
            missing = [c for c in ("Question", *ANSWER_COLUMNS) if c not in row]
            if missing:
                raise ConfigError(f"{where}: row {i} lacks the columns {missing}; expected the "
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
