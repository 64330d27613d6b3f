"""LiveCodeBench: contest problems graded by hidden tests (PAPER.md §7.1, §7.3, §8.1, §11).

Data: one release shard of livecodebench/code_generation_lite (`release="v6"`, the default, is
test6.jsonl; "v1" is test.jsonl, the paper's `release_v1`; "v2".."v5" are test2..test5.jsonl)
from the Hugging Face Hub (the file is read as JSON lines: `datasets` no longer runs the repo's
loading script), or livecodebench/<that file> under --data-dir / $PODIUM_DATA_DIR, or `path=`
(`question_title, question_content, platform, question_id, contest_date, starter_code,
difficulty, public_test_cases, private_test_cases, metadata`). Test lists are JSON strings;
`private_test_cases` may instead be compressed (base64 -> zlib -> pickle -> JSON string). Both
forms are decoded at grading time, so loading a large shard stays cheap.

Splits: the reference 60/20/20 over the shard (training used `release="v1"`: 240/80/80); the
paper's in-domain test is the whole v6 shard (split="all").

A problem is solved when every public and private test passes: "stdin" tests run the answer as
a program (`grade_program_io`), "functional" tests call the method `metadata.func_name` of its
`Solution` class with one JSON value per input line (`grade_function_call`). Both run the
answer after the harness's import header (`podium.scoring.code.LCB_PRELUDE`).
`legacy_blacklist=True` adds the reference's substring screen (D11).
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from podium.errors import ConfigError
from podium.scoring.base import Grade, extract_answer
from podium.tasks.base import Item
from podium.tasks.common import TaskBase, compose, default_limits, no_answer
from podium.tasks.hub import HubSource, Rows
from podium.tasks.sources import livecodebench


class _StringsOnly(pickle.Unpickler):
    """The compressed test strings pickle a plain str: refuse anything that needs a class."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name} in test cases")


def decode_tests(value: Any) -> list[dict[str, Any]]:
    """A test list from its JSON string, its compressed string, or an already-parsed list."""
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return value
    if not isinstance(value, str):
        raise ValueError(f"test cases of type {type(value).__name__}")
    try:
        decoded: Any = json.loads(value)
    except json.JSONDecodeError:
        raw = zlib.decompress(base64.b64decode(value.encode("ascii")))
        decoded = _StringsOnly(io.BytesIO(raw)).load()
        if isinstance(decoded, bytes | str):
            decoded = json.loads(decoded)
    if not isinstance(decoded, list):
        raise ValueError("test cases do not decode to a list")
    return decoded


def encode_tests(tests: list[dict[str, Any]]) -> str:
    """The compressed form of a test list (as the LCB lite files store private tests)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def parse_metadata(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip():
        data = json.loads(value)
        return data if isinstance(data, dict) else {}
    return {}


STDIN_RULES = """\
Answer rules: write a complete Python 3 program that reads the input from standard input and \
prints the answer to standard output, exactly in the format the statement asks for. Inside the \
answer tags put only the code: no markdown fences (```), no explanations, no example runs.

Good:
<answer>
import sys
a, b = map(int, sys.stdin.readline().split())
print(a + b)
</answer>

Bad (a markdown fence and prose inside the tags):
<answer>Here is my program:
```python
print(sum(map(int, input().split())))
```
</answer>"""

FUNCTIONAL_RULES = """\
Answer rules: write a class named `Solution` with a method named `{func_name}` that has exactly \
the signature of the starter code; it is called on a `Solution()` instance and must return the \
result (not print it). Inside the answer tags put only the code: no markdown fences (```), no \
explanations, no example calls.

Good:
<answer>
class Solution:
    def {func_name}(self, nums: List[int]) -> int:
        return max(nums)
</answer>

Bad (a markdown fence, and a method with another name):
<answer>
```python
class Solution:
    def solve(self, nums):
        return max(nums)
```
</answer>"""


LCB_LIMITS = {"wall_s": 6.0, "cpu_s": 6.0}  # the reference harness: 6 s per test
RELEASES = {f"v{n}": f"test{n if n > 1 else ''}.jsonl" for n in range(1, 7)}  # shard -> file


@dataclass(kw_only=True)
class LiveCodeBenchTask(TaskBase):
    name: str = "livecodebench"
    legacy_blacklist: bool = False
    limits: Any = None  # podium.scoring.sandbox.Limits, or a dict of its fields
    release: str = "v6"

    holdout = True

    def __post_init__(self) -> None:
        if self.release not in RELEASES:
            raise ConfigError(f"livecodebench: release={self.release!r}; use one of "
                              f"{', '.join(RELEASES)}")

    @property
    def default_file(self) -> str:  # type: ignore[override]
        return f"livecodebench/{RELEASES[self.release]}"

    def hub_source(self) -> HubSource:
        return livecodebench(RELEASES[self.release])

    def rows_to_items(self, rows: Rows, where: str | Path) -> list[Item]:
        items = []
        for i, row in enumerate(rows):
            metadata = parse_metadata(row.get("metadata"))
            qid = str(row.get("question_id") or f"livecodebench/{i}")
            items.append(Item(
                id=qid, question=row["question_content"], gold=None,
                meta={"title": row.get("question_title", ""),
                      "platform": row.get("platform", ""),
                      "contest_id": row.get("contest_id", ""),
                      "contest_date": row.get("contest_date", ""),
                      "difficulty": row.get("difficulty", ""),
                      "starter_code": row.get("starter_code") or "",
                      "func_name": metadata.get("func_name"),
                      "public_test_cases": row.get("public_test_cases"),
                      "private_test_cases": row.get("private_test_cases")},
            ))
        return items

    def tests(self, item: Item) -> list[dict[str, Any]]:
        """Every test of `item`, public first (decoded on each call)."""
        return (decode_tests(item.meta.get("public_test_cases"))
                + decode_tests(item.meta.get("private_test_cases")))

    def format(self, item: Item) -> str:
        starter = item.meta.get("starter_code") or ""
        func_name = item.meta.get("func_name")
        parts = ["Solve the following programming problem in Python 3.", item.question]
        if starter.strip():
            parts.append(f"Starter code:\n{starter.rstrip()}")
        parts.append(FUNCTIONAL_RULES.format(func_name=func_name) if func_name else STDIN_RULES)
        return compose(*parts)

    async def grade(self, item: Item, response: str | None) -> Grade:
        from podium.scoring.code import (
            extract_code,
            grade_function_call,
            grade_program_io,
            legacy_blacklist_match,
        )

        if extract_answer(response) is None:
            return no_answer()
        code = extract_code(response)
        if not code.strip():
            return Grade.of(False, code, "no_code")
        hit = legacy_blacklist_match(code) if self.legacy_blacklist else None
        if hit is not None:  # the reference screens the model's code, not the harness header
            return Grade.of(False, code, "legacy_blacklist", pattern=hit)
        tests = self.tests(item)
        if not tests:
            raise ValueError(f"livecodebench {item.id}: the item has no tests")
        stdin = [(str(t["input"]), str(t["output"])) for t in tests
                 if t.get("testtype", "stdin") == "stdin"]
        functional = [t for t in tests if t.get("testtype") == "functional"]
        if len(stdin) + len(functional) != len(tests):
            kinds = sorted({str(t.get("testtype")) for t in tests})
            raise ValueError(f"livecodebench {item.id}: unknown test types {kinds}")
        limits = default_limits(self.limits if self.limits is not None else LCB_LIMITS)
        grade: Grade | None = None
        if stdin:
            grade = await grade_program_io(code, stdin, limits=limits)
            if not grade.correct:
                return replace(grade, extracted=code)
        if functional:
            func_name = item.meta.get("func_name")
            if not func_name:
                raise ConfigError(f"livecodebench {item.id}: functional tests but no "
                                  "metadata.func_name")
            calls = [([json.loads(line) for line in str(t["input"]).split("\n") if line.strip()],
                      json.loads(t["output"])) for t in functional]
            grade = await grade_function_call(code, func_name, calls, limits=limits)
        assert grade is not None  # the tests are stdin or functional, and there are some
        return replace(grade, extracted=code)
