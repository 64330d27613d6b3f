"""MMLU: four-option multiple choice over 57 subjects (PAPER.md §7.1, §7.3, §11).

Data: cais/mmlu (config "all", split "test") from the Hugging Face Hub, or mmlu/test.jsonl under
--data-dir / $PODIUM_DATA_DIR (`{question, answer_a..answer_d, correct_answer, topic}`, 14,042
rows; `podium.tasks.sources.mmlu_rows` turns Hub rows into these). The file groups subjects in
no particular order; items are put back in the order of cais/mmlu "all" (subjects
alphabetically, file order within a subject), so ids (`mmlu/<subject>/<k>`) and the seeded
subset do not depend on the copy's row order.

Splits: "test" (and "all") = all 14,042 questions; "paper_test" = the reference code's
1,531-question subset: the first 1,531 after shuffling the test indices with random.Random(42)
(D19). Grading compares letters with a standalone-letter parse; `legacy=True` reproduces the
reference's first-letter scan (D12).
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from podium.errors import ConfigError
from podium.tasks.base import Item
from podium.tasks.common import LETTERS, SPLIT_ALIASES, ChoiceTask
from podium.tasks.hub import HubSource, Rows
from podium.tasks.sources import MMLU

PAPER_TEST_SIZE = 1531
PAPER_SEED = 42


def subject_key(topic: str) -> str:
    """The cais/mmlu config name of a subject ("high school biology" -> high_school_biology)."""
    return "_".join(topic.strip().lower().split())


@dataclass(kw_only=True)
class MMLUTask(ChoiceTask):
    name: str = "mmlu"
    paper_test_size: int = PAPER_TEST_SIZE

    default_file = "mmlu/test.jsonl"

    def hub_source(self) -> HubSource:
        return MMLU

    def rows_to_items(self, rows: Rows, where: str | Path) -> list[Item]:
        by_subject: dict[str, list[dict]] = defaultdict(list)
        for row in rows:
            by_subject[subject_key(row["topic"])].append(row)
        items = []
        for subject in sorted(by_subject):
            for k, row in enumerate(by_subject[subject]):
                gold = str(row["correct_answer"]).strip().upper()
                if gold not in LETTERS:
                    raise ConfigError(f"{where}: {subject} #{k} has correct_answer={gold!r}")
                choices = [str(row[f"answer_{c}"]) for c in "abcd"]
                items.append(Item(id=f"mmlu/{subject}/{k}", question=row["question"],
                                  gold=gold,
                                  meta={"subject": row["topic"].strip(), "choices": choices}))
        return items

    def split_items(self, split: str) -> list[Item]:
        split = SPLIT_ALIASES.get(split, split)
        if split == "paper_test":
            items = self.items()
            order = list(range(len(items)))
            random.Random(PAPER_SEED).shuffle(order)
            return [items[i] for i in order[:self.paper_test_size]]
        if split in ("train", "valid"):
            raise ConfigError("mmlu: only the test set is loaded (use split='test' or "
                              "'paper_test'); MMLU's auxiliary_train and validation are not "
                              "evaluation sets")
        return super().split_items(split)

    def header(self, item: Item) -> str:
        return f"The following is a multiple-choice question about {item.meta['subject']}."
