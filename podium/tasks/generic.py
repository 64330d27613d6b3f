"""A task from any JSONL/JSON/CSV file of question/answer records.

    GenericTask("my.jsonl", question_field="question", answer_field="answer", grader="math")

`grader` picks the grading rule and the default answer rules shown in the question:
"math" (symbolic equivalence; `math_mode="legacy"` for the MATH normaliser), "choice" (a letter;
`choices_field` names a list of options to show as A, B, ...; the gold is a letter or a 0-based
index), "numeric" (within `rel_tol`/`abs_tol`), "rlpr" (the RLPR flexible match) or "exact"
(equal after collapsing whitespace). `instructions` replaces the default answer rules.
Ids come from `id_field` when the records have it, else `<name>/<row>`. The whole file is the
test set unless `holdout=True`, which applies the reference 60/20/20 splits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podium.errors import ConfigError
from podium.scoring.base import Grade, extract_answer
from podium.tasks.base import Item
from podium.tasks.common import (
    CHOICE_RULES,
    LETTERS,
    TaskBase,
    compose,
    format_choices,
    no_answer,
    read_records,
    split_indices,
)
from podium.tasks.math500 import MATH_RULES
from podium.tasks.rlpr import RLPR_RULES

GRADERS = ("math", "choice", "numeric", "rlpr", "exact")

DEFAULT_RULES = {
    "math": MATH_RULES,
    "choice": CHOICE_RULES,
    "numeric": ("Answer rules: the answer is a single number. Write only the number: no units, "
                "no thousands separators, no words."),
    "rlpr": RLPR_RULES,
    "exact": "Answer rules: write only the final answer in the answer tags, nothing else.",
}


def file_stem(path: str | Path) -> str:
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".parquet"):
        name = name.removesuffix(suffix)
    return name or "generic"


@dataclass(kw_only=True)
class GenericTask(TaskBase):
    question_field: str = "question"
    answer_field: str = "answer"
    grader: str = "exact"
    instructions: str | None = None
    id_field: str = "id"
    choices_field: str | None = None
    math_mode: str = "symbolic"
    rel_tol: float = 1e-6
    abs_tol: float = 1e-6
    holdout_splits: bool = False
    _verifier: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.path is None:
            raise ConfigError("generic task: pass path=FILE (a .jsonl, .json or .csv file)")
        if self.grader not in GRADERS:
            raise ConfigError(f"generic task: grader={self.grader!r}; use one of "
                              f"{', '.join(GRADERS)}")
        if self.math_mode not in ("symbolic", "legacy"):
            raise ConfigError(f"generic task: math_mode={self.math_mode!r}; use symbolic or "
                              "legacy")
        self.name = self.name or file_stem(self.path)

    def read_items(self, path: Path) -> list[Item]:
        items = []
        for i, row in enumerate(read_records(path)):
            for column in (self.question_field, self.answer_field):
                if column not in row:
                    raise ConfigError(f"{path}: row {i} has no field {column!r}; set "
                                      "question_field= / answer_field=")
            meta: dict[str, Any] = {k: v for k, v in row.items()
                                    if k not in (self.question_field, self.answer_field)}
            if self.choices_field is not None:
                choices = row.get(self.choices_field)
                if isinstance(choices, str):
                    choices = json.loads(choices)
                if not isinstance(choices, list) or not 2 <= len(choices) <= len(LETTERS):
                    raise ConfigError(f"{path}: row {i}: {self.choices_field!r} must be a list "
                                      f"of 2-{len(LETTERS)} options")
                meta["choices"] = [str(c) for c in choices]
            raw_id = row.get(self.id_field)
            item_id = str(raw_id) if raw_id not in (None, "") else f"{self.name}/{i}"
            items.append(Item(id=item_id, question=str(row[self.question_field]),
                              gold=row[self.answer_field], meta=meta))
        return items

    def split_items(self, split: str) -> list[Item]:
        if self.holdout_splits and split != "all":
            items = self.items()
            return [items[i] for i in split_indices(len(items), split)]
        return super().split_items(split)

    def format(self, item: Item) -> str:
        choices = item.meta.get("choices") if self.choices_field else None
        rules = self.instructions if self.instructions is not None else DEFAULT_RULES[self.grader]
        return compose(item.question, format_choices(choices) if choices else None, rules)

    def _choice_gold(self, gold: Any) -> str | int:
        if isinstance(gold, int):
            return gold
        text = str(gold).strip()
        return int(text) if text.isdigit() else text.upper()

    async def grade(self, item: Item, response: str | None) -> Grade:
        if self.grader == "math":
            from podium.scoring.math import MathVerifier, agrade_math

            if self.math_mode == "legacy":
                return await agrade_math(response, str(item.gold), mode="legacy")
            if self._verifier is None:
                self._verifier = MathVerifier()
            return await agrade_math(response, str(item.gold), mode="symbolic",
                                     verifier=self._verifier)
        if self.grader == "choice":
            from podium.scoring.choice import grade_choice

            n = len(item.meta.get("choices") or LETTERS)
            return grade_choice(response, self._choice_gold(item.gold), letters=LETTERS[:n],
                                require_tag=True)
        if self.grader == "numeric":
            from podium.scoring.numeric import grade_numeric

            return grade_numeric(response, item.gold, rel_tol=self.rel_tol, abs_tol=self.abs_tol)
        if self.grader == "rlpr":
            from podium.scoring.numeric import grade_rlpr

            return grade_rlpr(response, str(item.gold))
        answer = extract_answer(response)
        if answer is None:
            return no_answer()
        gold = " ".join(str(item.gold).split())
        return Grade.of(" ".join(answer.split()) == gold, answer)

    def close(self) -> None:
        verifier, self._verifier = self._verifier, None
        if verifier is not None:
            verifier.close()
