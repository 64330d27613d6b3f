"""RLPR: general-domain reasoning with short reference answers (PAPER.md §7.1, §7.3, §8.1).

Data: openbmb/RLPR-Train-Dataset (split "train") from the Hugging Face Hub, or
rlpr/rlpr_train.parquet under --data-dir / $PODIUM_DATA_DIR, or `path=`: JSONL/JSON/parquet rows
in that dataset's schema (`prompt`: chat messages whose user turn is the question;
`reward_model.ground_truth`; `ability`), or simple `{question, answer, ability}` rows. As in the
reference, items whose ground truth is longer than 30 characters are dropped before splitting.

Splits: the reference 60/20/20 over the kept items; "paper_test" is the test split capped at
its first 2,000 items (`eval_max_samples`, §11). Ids are `rlpr/<row>` with the row number in
the file, so they do not move when the length filter changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podium.errors import ConfigError
from podium.scoring.base import Grade
from podium.tasks.base import Item
from podium.tasks.common import SPLIT_ALIASES, TaskBase, compose
from podium.tasks.hub import HubSource, Rows
from podium.tasks.sources import RLPR

MAX_GOLD_CHARS = 30
PAPER_TEST_CAP = 2000

RLPR_RULES = (
    "Answer rules: give only the final answer in the answer tags. Include the unit when the "
    "quantity has one. Write percentages as decimals (0.35, not 35%). Write amounts of money as "
    "plain numbers (1250.50, not $1,250.50). Do not use scientific notation. Write formulas in "
    "plain text (a*b/c, x^2), not LaTeX. Round numbers to 2-4 significant figures."
)


def user_turn(prompt: Any) -> str | None:
    """The question of an RLPR row: the (last) user message of its chat prompt."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt
                 if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1], str):
            return users[-1]
    return None


def question_and_gold(row: dict[str, Any]) -> tuple[str | None, Any]:
    if "prompt" in row or "reward_model" in row:
        reward = row.get("reward_model")
        gold = reward.get("ground_truth") if isinstance(reward, dict) else None
        return user_turn(row.get("prompt")), gold
    return row.get("question"), row.get("answer")


@dataclass(kw_only=True)
class RLPRTask(TaskBase):
    name: str = "rlpr"
    max_gold_chars: int = MAX_GOLD_CHARS
    paper_test_cap: int = PAPER_TEST_CAP

    default_file = "rlpr/rlpr_train.parquet"
    holdout = True

    def hub_source(self) -> HubSource:
        return RLPR

    def rows_to_items(self, rows: Rows, where: str | Path) -> list[Item]:
        items = []
        for i, row in enumerate(rows):
            question, gold = question_and_gold(row)
            if question is None or gold is None:
                raise ConfigError(f"{where}: row {i} has no question/ground truth; expected the "
                                  "RLPR schema (prompt, reward_model.ground_truth) or "
                                  "{question, answer}")
            gold = str(gold)
            if len(gold) > self.max_gold_chars:
                continue
            items.append(Item(id=f"rlpr/{i}", question=question, gold=gold,
                              meta={"ability": str(row.get("ability") or "").strip(),
                                    "data_source": row.get("data_source", "")}))
        return items

    def split_items(self, split: str) -> list[Item]:
        split = SPLIT_ALIASES.get(split, split)
        if split == "paper_test":
            return super().split_items("test")[:self.paper_test_cap]
        return super().split_items(split)

    def format(self, item: Item) -> str:
        ability = item.meta.get("ability")
        return compose(f"Subject: {ability}" if ability else None, item.question, RLPR_RULES)

    async def grade(self, item: Item, response: str | None) -> Grade:
        from podium.scoring.numeric import grade_rlpr

        return grade_rlpr(response, item.gold)
