"""AIME 2024 / 2025: 30 problems a year, each answer an integer from 0 to 999 (OOD, §11).

Data: HuggingFaceH4/aime_2024 and math-ai/aime25 from the Hugging Face Hub, or aime/aime24.jsonl
and aime/aime25.jsonl under --data-dir / $PODIUM_DATA_DIR (`{question, answer}`; the adapters in
`podium.tasks.sources` give Hub rows that shape, in the offline files' order, so ids
`aime24/<k>` match). The 2024 answers are zero-padded strings ("025"), the 2025 ones are not
("70"); the gold is the integer and the text stays in `meta["answer_text"]`. The whole set is
the test set.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from podium.errors import ConfigError
from podium.scoring.base import Grade
from podium.tasks.base import Item
from podium.tasks.common import TaskBase, compose
from podium.tasks.hub import HubSource, Rows
from podium.tasks.sources import AIME

YEARS = (2024, 2025)


@dataclass(kw_only=True)
class AIMETask(TaskBase):
    year: int = 2025

    def __post_init__(self) -> None:
        if self.year not in YEARS:
            raise ConfigError(f"aime: year={self.year!r}; use 2024 or 2025")
        self.name = self.name or f"aime{self.year % 100}"

    @property
    def default_file(self) -> str:  # type: ignore[override]
        return f"aime/aime{self.year % 100}.jsonl"

    def hub_source(self) -> HubSource:
        return AIME[self.year]

    def rows_to_items(self, rows: Rows, where: str | Path) -> list[Item]:
        items = []
        for i, row in enumerate(rows):
            text = str(row["answer"]).strip()
            try:
                gold = int(text)
            except ValueError as exc:
                raise ConfigError(f"{where}: problem {i} has a non-integer answer "
                                  f"{text!r}") from exc
            items.append(Item(id=f"{self.name}/{i + 1}", question=row["question"], gold=gold,
                              meta={"answer_text": text, "year": self.year}))
        return items

    def format(self, item: Item) -> str:
        return compose(
            "Solve the following competition math problem.",
            item.question,
            "Answer rules: the answer is an integer from 0 to 999. Write only that integer "
            "in the answer tags, with no words, units or LaTeX.",
        )

    async def grade(self, item: Item, response: str | None) -> Grade:
        from podium.scoring.numeric import grade_numeric

        return grade_numeric(response, item.gold, rel_tol=0.0, abs_tol=0.0)
