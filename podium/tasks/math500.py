"""MATH-500: competition math with free-form LaTeX answers (PAPER.md §7.1, §7.3, §11).

Data: HuggingFaceH4/MATH-500 from the Hugging Face Hub, or math500/test.jsonl under --data-dir /
$PODIUM_DATA_DIR (`{problem, solution, answer, subject, level, unique_id}`; the offline copy
also has `clean_answer`). The gold is `answer`; ids are `unique_id`.
Splits are the reference 60/20/20 over the 500 problems in file order: "test" is the
100-problem held-out split the paper evaluates on, "all" every problem. Caution: the offline copy
is not in HuggingFaceH4/MATH-500 order (its 371 rows without `raw_answer` come first, then the
129 with it, each group in HF order), so its "test" split is not the reference's 100 problems;
load from the Hub (or pass `path=` to a file in HF order) to reproduce those.

Grading (D19): `grading="symbolic"` (default) checks mathematical equivalence with a
`MathVerifier` process pool the task creates on first use and releases in `close()`;
`grading="legacy"` is the reference normaliser, for comparison with the paper's Table 7.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podium.errors import ConfigError
from podium.scoring.base import Grade
from podium.tasks.base import Item
from podium.tasks.common import TaskBase, compose
from podium.tasks.hub import HubSource, Rows
from podium.tasks.sources import MATH500

GRADINGS = ("symbolic", "legacy")

MATH_RULES = (
    "Answer rules: put only the final result in the answer tags, not the working. Give one "
    "value or expression, not an equation (write 5, not x = 5). If there are several "
    "solutions, list them all, separated by commas. Write fractions and roots in LaTeX "
    "(\\frac{3}{4}, \\sqrt{2}); write angles in degrees as 30^\\circ. Do not use \\boxed{}."
)


@dataclass(kw_only=True)
class Math500Task(TaskBase):
    name: str = "math500"
    grading: str = "symbolic"
    _verifier: Any = field(default=None, init=False, repr=False, compare=False)

    default_file = "math500/test.jsonl"
    holdout = True

    def __post_init__(self) -> None:
        if self.grading not in GRADINGS:
            raise ConfigError(f"math500: grading={self.grading!r}; use 'symbolic' or 'legacy'")

    def hub_source(self) -> HubSource:
        return MATH500

    def rows_to_items(self, rows: Rows, where: str | Path) -> list[Item]:
        items = []
        for i, row in enumerate(rows):
            meta: dict[str, Any] = {k: row[k] for k in ("subject", "level", "solution", "clean_answer")
                    if k in row}
            items.append(Item(id=str(row.get("unique_id") or f"math500/{i}"),
                              question=row["problem"], gold=str(row["answer"]), meta=meta))
        return items

    def format(self, item: Item) -> str:
        return compose("Solve the following math problem step by step.", item.question,
                       MATH_RULES)

    def verifier(self) -> Any:
        if self._verifier is None:
            from podium.scoring.math import MathVerifier

            self._verifier = MathVerifier()
        return self._verifier

    async def grade(self, item: Item, response: str | None) -> Grade:
        from podium.scoring.math import agrade_math

        if self.grading == "legacy":
            return await agrade_math(response, item.gold, mode="legacy")
        return await agrade_math(response, item.gold, mode="symbolic", verifier=self.verifier())

    def close(self) -> None:
        verifier, self._verifier = self._verifier, None
        if verifier is not None:
            verifier.close()
