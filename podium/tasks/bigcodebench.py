"""BigCodeBench: 1,140 practical Python tasks checked by unittest classes (OOD, §11).

Data: bigcode/bigcodebench (split "v0.1.0_hf") from the Hugging Face Hub, or
bigcodebench/BigCodeBench.jsonl.gz under --data-dir / $PODIUM_DATA_DIR (v0.1.0, the same
columns; `libs` is a Python-literal list in a string). Modes: "complete" shows
`complete_prompt` (signature + docstring), "instruct" shows `instruct_prompt` (a prose
description). Either way the model returns the complete, self-contained code;
`grade_unittest` runs the item's `TestCases` in the sandbox.

Many tasks need third-party libraries. A task whose `libs` (or the modules its prompt and tests
import: `libs` is incomplete) are not all importable here stays in `load()` with
`meta["missing_libs"]` set, and `skip_reason(item)` says so: the harness reports it as skipped,
not failed. Tasks that need the network fail: the sandbox has none.

`subset=` restricts the items to the task ids listed in a file (one per line, or JSON/JSONL
rows with `task_id`), e.g. the 148-task "hard" subset the paper evaluates (not shipped here).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podium.errors import ConfigError
from podium.scoring.base import Grade, extract_answer
from podium.tasks.base import Item
from podium.tasks.common import TaskBase, compose, default_limits, no_answer, read_records
from podium.tasks.hub import HubSource, Rows
from podium.tasks.humaneval import program_from_answer
from podium.tasks.sources import BIGCODEBENCH

MODES = ("complete", "instruct")

# import name -> distribution name, for messages only
PIP_NAMES = {
    "sklearn": "scikit-learn", "cv2": "opencv-python", "PIL": "Pillow",
    "bs4": "beautifulsoup4", "dateutil": "python-dateutil", "yaml": "PyYAML",
    "Crypto": "pycryptodome", "docx": "python-docx", "skimage": "scikit-image",
    "Levenshtein": "python-Levenshtein", "flask_mail": "Flask-Mail",
    "flask_restful": "Flask-RESTful", "flask_login": "Flask-Login", "flask_wtf": "Flask-WTF",
    "mpl_toolkits": "matplotlib", "python_http_client": "python-http-client",
    "faker": "Faker", "requests_mock": "requests-mock",
}

# Slower tasks than the sandbox default allows (BigCodeBench/0 takes ~35 s, /195 ~45 s);
# 1 GiB of address space was enough for the numpy/matplotlib tasks tried, pandas/sklearn get more.
BCB_LIMITS = {"wall_s": 120.0, "cpu_s": 120.0, "memory_mb": 4096}

_AVAILABLE: dict[str, bool] = {}


def lib_available(lib: str) -> bool:
    """Whether the top-level module of `lib` can be imported here (without importing it)."""
    top = lib.strip().split(".")[0]
    if top not in _AVAILABLE:
        try:
            _AVAILABLE[top] = importlib.util.find_spec(top) is not None
        except (ImportError, ValueError):
            _AVAILABLE[top] = False
    return _AVAILABLE[top]


_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+"
                     r"(?:[ \t]+as[ \t]+\w+)?)*)", re.MULTILINE)
_FROM = re.compile(r"^[ \t]*from[ \t]+(\w[\w.]*)[ \t]+import\b", re.MULTILINE)


def imported_modules(code: str) -> list[str]:
    """Top-level modules that `code` imports (absolute `import x` / `from x import y` lines), in
    order of appearance. A line scan, not a parse: ~100x faster over 2,280 snippets, and an
    import line inside a string can only add a module to check."""
    found: dict[str, None] = {}
    for match in sorted([*_IMPORT.finditer(code), *_FROM.finditer(code)], key=lambda m: m.start()):
        for part in match.group(1).split(","):
            found.setdefault(part.split()[0].split(".")[0], None)
    return list(found)


def missing_modules(libs: list[str], *code: str) -> list[str]:
    """`libs` and the modules `code` imports that cannot be imported here (the `libs` field
    misses some that the tests import: BigCodeBench/90 lists numpy, its tests import pandas)."""
    wanted = [lib.split(".")[0] for lib in libs]
    for text in code:
        wanted += imported_modules(text)
    return [m for m in dict.fromkeys(wanted) if not lib_available(m)]


def parse_libs(value: Any) -> list[str]:
    if isinstance(value, str):
        value = ast.literal_eval(value) if value.strip() else []
    return [str(lib) for lib in value or []]


def read_subset(path: str | Path) -> set[str]:
    path = Path(path)
    if path.suffix in (".json", ".jsonl", ".gz"):
        return {str(row["task_id"]) for row in read_records(path)}
    if not path.is_file():
        raise ConfigError(f"bigcodebench: subset file {path} does not exist")
    return {line.strip() for line in path.read_text().splitlines() if line.strip()}


@dataclass(kw_only=True)
class BigCodeBenchTask(TaskBase):
    name: str = ""
    mode: str = "complete"
    subset: str | Path | None = None
    limits: Any = None  # sandbox Limits or a dict of their fields; None = BCB_LIMITS
    legacy_blacklist: bool = False

    default_file = "bigcodebench/BigCodeBench.jsonl.gz"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"bigcodebench: mode={self.mode!r}; use 'complete' or 'instruct'")
        self.name = self.name or ("bigcodebench" if self.mode == "complete"
                                  else "bigcodebench-instruct")

    def hub_source(self) -> HubSource:
        return BIGCODEBENCH

    def rows_to_items(self, rows: Rows, where: str | Path) -> list[Item]:
        wanted = read_subset(self.subset) if self.subset is not None else None
        items = []
        for row in rows:
            if wanted is not None and row["task_id"] not in wanted:
                continue
            libs = parse_libs(row.get("libs"))
            question = row["complete_prompt"] if self.mode == "complete" else row["instruct_prompt"]
            items.append(Item(
                id=row["task_id"], question=question,
                gold=row["complete_prompt"] + row["canonical_solution"],
                meta={"test": row["test"], "entry_point": row.get("entry_point") or "task_func",
                      "code_prompt": row.get("code_prompt", ""),
                      "complete_prompt": row["complete_prompt"], "libs": libs,
                      "missing_libs": missing_modules(libs, row["complete_prompt"],
                                                      row["test"])},
            ))
        if wanted is not None and len(items) != len(wanted):
            missing = sorted(wanted - {item.id for item in items})
            raise ConfigError(f"bigcodebench: subset ids not in {where}: {missing[:5]}")
        return items

    def skip_reason(self, item: Item) -> str | None:
        missing = item.meta.get("missing_libs") or []
        if not missing:
            return None
        pips = sorted({PIP_NAMES.get(lib, lib) for lib in missing})
        return f"missing libraries: {', '.join(missing)} (pip install {' '.join(pips)})"

    def format(self, item: Item) -> str:
        entry_point = item.meta["entry_point"]
        if self.mode == "complete":
            intro = (f"Complete the following Python function `{entry_point}`. It must behave "
                     "as its docstring describes.")
        else:
            intro = "Write a Python function that does the following."
        return compose(
            intro,
            item.question,
            "Answer rules: inside the answer tags put only Python code, with no markdown "
            "fences (```) and no explanations: complete, self-contained code with every import "
            f"it needs and the whole function `{entry_point}`. Do not include tests or example "
            "calls.",
        )

    async def grade(self, item: Item, response: str | None) -> Grade:
        from podium.scoring.code import grade_unittest

        if extract_answer(response) is None:
            return no_answer()
        code = program_from_answer(response, item.meta["complete_prompt"],
                                   item.meta["entry_point"])
        limits = default_limits(self.limits if self.limits is not None else BCB_LIMITS)
        return await grade_unittest(code, item.meta["test"], limits=limits,
                                    legacy_blacklist=self.legacy_blacklist)

