"""Grading code against tests, every run in `podium.scoring.sandbox` (PAPER.md §7.3, D11).

    code = extract_code(response)                        # answer tag, then markdown fences
    await grade_humaneval(completion, problem)          # HumanEval: prompt + completion + check
    await grade_program_io(code, [(stdin, stdout), ...])           # LiveCodeBench stdin tests
    await grade_function_call(code, "twoSum", [([args...], expected), ...])  # LCB functional
    await grade_unittest(code, test_code)                # BigCodeBench: unittest.TestCase classes

Every grader returns a `Grade` and never raises on bad code; `Grade.details` carries the
sandbox status, the stderr tail (at most 1 KiB), which test failed and how. A sandbox that cannot
be set up is `reason="grader_error: sandbox: ..."` (an infrastructure failure, not the model's).

**Harness and completion token.** Code that ends its own process early must not pass: a
HumanEval completion that calls `sys.exit(0)` (or `os._exit(0)`) inside the function would
otherwise end the test script with status 0. So HumanEval, function-call and unittest programs
run under a small harness (`main.py`) that reads a random per-run token from a file, deletes the
file, runs the program (`solution.py`) and only after the program finished writes the token and
its report as the last line of stderr. A run passes only if that line is there. The token and the
expected outputs of LCB tests never enter the sandbox in a place the code can find by accident
(expected outputs stay in the grader: results are compared outside). Code that deliberately
digs through the interpreter for the token (or monkey-patches unittest) can still fake a pass:
the sandbox protects the machine, not the grade, against adversarial code.

**Legacy blacklist (D11).** The reference LiveCodeBench grader screened code with lower-cased
substrings and failed any match; it has false positives (`re.compile(`, `sys.exit()`,
`ast.literal_eval(`, `os.listdir(`, any `...dir(` / `vars(`). It is off by default; pass
`legacy_blacklist=True` to reproduce the paper's LCB numbers. The list is reconstructed from the
description in PAPER.md §7.3 (the reference source is not available here).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any

from podium.scoring.base import ANSWER_TAG, Grade
from podium.scoring.sandbox import Limits, SandboxResult, arun_python

DEFAULT_LIMITS = Limits()
STDERR_TAIL = 1024  # bytes of stderr kept in Grade.details
_SHOW = 300  # characters of inputs / outputs shown in Grade.details

# ----------------------------------------------------------------------------- extraction

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n"  # opening fence, language
                    r"(.*?)(?:^[ \t]*```|```\s*\Z|\Z)",  # closing: own line, text end, none
                    re.DOTALL | re.MULTILINE)
_PYTHON_LANGS = {"", "python", "py", "python3", "py3"}


def extract_code(text: str | None) -> str:
    """The code in a model response: the `<answer>` tag's content when there is one, else the
    whole text; then, if it has markdown fences, the largest fenced block (Python-tagged or
    untagged blocks are preferred over e.g. ```text ones). An unclosed fence runs to the end.
    Indentation is kept (a HumanEval body stays indented); leading blank lines and trailing
    whitespace are dropped."""
    if not text:
        return ""
    match = ANSWER_TAG.search(text)
    if match:
        text = match.group(1)
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]
    if blocks:
        python = [body for lang, body in blocks if lang in _PYTHON_LANGS]
        text = max(python or [body for _, body in blocks], key=len)
    else:
        stripped = text.strip()
        if stripped.startswith("```") and stripped.endswith("```") and len(stripped) > 6:
            text = stripped[3:-3]  # a one-line fence: ```print(1)```
    lines = text.rstrip().split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)


def _unfence(code: str) -> str:
    """Graders take code, not responses; but a fence at the start of a line is never valid
    Python, so code that still has one is passed through `extract_code`."""
    return extract_code(code) if re.search(r"^[ \t]*```", code, re.MULTILINE) else code


# ----------------------------------------------------------------------------- legacy blacklist

_LEGACY_MODULES = ("os", "subprocess", "shutil", "resource", "psutil", "tkinter", "joblib",
                   "ipdb")
LEGACY_BLACKLIST: tuple[str, ...] = (
    *(f"import {m}" for m in _LEGACY_MODULES),
    *(f"from {m} " for m in _LEGACY_MODULES),
    *(f"from {m}." for m in _LEGACY_MODULES),
    # selected os / shutil / subprocess calls
    "os.system(", "os.popen(", "os.remove(", "os.unlink(", "os.rmdir(", "os.removedirs(",
    "os.rename(", "os.kill(", "os.fork(", "os.putenv(", "os.chdir(", "os.chmod(", "os.chown(",
    "os.listdir(", "os.walk(", "os.exec", "os.spawn", "os.environ",
    "shutil.rmtree(", "shutil.move(", "shutil.copy",
    "subprocess.popen(", "subprocess.run(", "subprocess.call(", "subprocess.check_output(",
    "subprocess.check_call(",
    # ending or re-entering the interpreter
    "quit()", "exit()", "eval(", "exec(", "compile(",
    # network
    "socket.", "urllib.", "requests.", "http.", "ftplib.", "smtplib.",
    # introspection
    "__import__", "globals(", "locals(", "vars(", "dir(",
)
_READ_MODE = re.compile(r"""['"]r[bt]?['"]""")


def legacy_blacklist_match(code: str) -> str | None:
    """The first legacy pattern found in `code` (lower-cased substring match), else None.
    `open(` counts on a line that neither mentions `sys.stdin` nor opens in a read mode."""
    lowered = code.lower()
    for pattern in LEGACY_BLACKLIST:
        if pattern in lowered:
            return pattern
    for line in lowered.splitlines():
        if "open(" in line and "sys.stdin" not in line and not _READ_MODE.search(line):
            return "open("
    return None


def legacy_blacklisted(code: str) -> bool:
    """Whether the reference LCB grader's substring screen rejects `code` (false positives
    included: `re.compile(`, `sys.exit()`, `ast.literal_eval(`, `os.listdir(`, ...)."""
    return legacy_blacklist_match(code) is not None


def _blacklisted_grade(code: str, legacy_blacklist: bool) -> Grade | None:
    if legacy_blacklist:
        hit = legacy_blacklist_match(code)
        if hit is not None:
            return Grade.of(False, code, "legacy_blacklist", pattern=hit)
    if not code.strip():
        return Grade.of(False, code, "no_code")
    return None


# ----------------------------------------------------------------------------- harnesses

_TOKEN_FILE = ".podium_token"

_HARNESS_HEAD = f'''\
import json as _json
import os as _os
import sys as _sys


def _podium_token():
    with open({_TOKEN_FILE!r}, encoding="utf-8") as fh:
        token = fh.read()
    _os.remove({_TOKEN_FILE!r})
    return token


def _podium_report(token, report):
    try:
        _sys.stdout.flush()
        _sys.stderr.flush()
    except Exception:
        pass
    _os.write(2, ("\\n" + token + " " + _json.dumps(report) + "\\n").encode())


_podium_t = _podium_token()
'''

# runs solution.py (as module "solution", like the reference's exec: `if __name__ == "__main__"`
# blocks do not run); reports only if it finished (HumanEval)
_HARNESS_SCRIPT = _HARNESS_HEAD + '''
import runpy as _runpy

_runpy.run_path("solution.py", run_name="solution")
_podium_report(_podium_t, {"finished": True})
'''

# calls Solution().<func>(*args) for each call in .podium_calls.json (LiveCodeBench functional)
_HARNESS_CALLS = _HARNESS_HEAD + '''
import runpy as _runpy
import signal as _signal

with open(".podium_calls.json", encoding="utf-8") as _fh:
    _spec = _json.load(_fh)


class _PodiumTimeout(BaseException):
    pass


def _podium_alarm(signum, frame):
    raise _PodiumTimeout()


def _podium_run():
    namespace = _runpy.run_path("solution.py", run_name="solution")
    name = _spec["func_name"]
    cls = namespace.get("Solution")
    if isinstance(cls, type) and hasattr(cls, name):
        fn = getattr(cls(), name)
    elif callable(namespace.get(name)):
        fn = namespace[name]
    else:
        return {"setup": f"no Solution.{name} (nor a function {name}) defined"}
    results = []
    _signal.signal(_signal.SIGALRM, _podium_alarm)
    for args in _spec["calls"]:
        _signal.setitimer(_signal.ITIMER_REAL, _spec["timeout"])
        try:
            out = fn(*args)
            _signal.setitimer(_signal.ITIMER_REAL, 0)
        except _PodiumTimeout:
            results.append({"error": "timeout"})
            break
        except BaseException as exc:  # SystemExit included: the call did not return
            _signal.setitimer(_signal.ITIMER_REAL, 0)
            results.append({"error": f"{type(exc).__name__}: {exc}"[:1000]})
            break
        try:
            results.append({"value": _json.loads(_json.dumps(out))})
        except (TypeError, ValueError):
            results.append({"repr": repr(out)[:1000]})
    return {"results": results}


_podium_report(_podium_t, _podium_run())
'''

# executes solution.py as module __test__ and runs its unittest.TestCase classes (BigCodeBench)
_HARNESS_UNITTEST = _HARNESS_HEAD + '''
import types as _types
import unittest as _unittest

_PodiumResult = _unittest.TestResult
_podium_loader = _unittest.TestLoader()


def _podium_run():
    module = _types.ModuleType("__test__")
    module.__file__ = _os.path.abspath("solution.py")
    _sys.modules["__test__"] = module
    with open("solution.py", encoding="utf-8") as fh:
        source = fh.read()
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    cases = [v for v in list(vars(module).values()) if isinstance(v, type)
             and issubclass(v, _unittest.TestCase) and v.__module__ == "__test__"]
    suite = _unittest.TestSuite([_podium_loader.loadTestsFromTestCase(c) for c in cases])
    result = _PodiumResult()
    suite.run(result)
    return {"run": result.testsRun,
            "failures": [[str(t), tb[-800:]] for t, tb in result.failures],
            "errors": [[str(t), tb[-800:]] for t, tb in result.errors],
            "unexpected_successes": len(result.unexpectedSuccesses),
            "skipped": len(result.skipped)}


_podium_report(_podium_t, _podium_run())
'''


async def _run_harness(harness: str, program: str, limits: Limits,
                       extra: dict[str, str] | None = None,
                       ) -> tuple[SandboxResult, dict | None, str]:
    """Run `program` under `harness`; (sandbox result, the harness report or None, stderr
    without the report line)."""
    token = secrets.token_hex(16)
    files = {"solution.py": program, _TOKEN_FILE: token, **(extra or {})}
    result = await arun_python(harness, limits=limits, files=files)
    stderr = result.stderr
    at = stderr.rfind(token)
    report = None
    if at >= 0:
        line = stderr[at + len(token):].split("\n", 1)[0]
        try:
            report = json.loads(line)
        except ValueError:
            report = None
        stderr = stderr[:at].rstrip("\n")
    return result, report, stderr


def _tail(text: str, n: int = STDERR_TAIL) -> str:
    data = text.encode("utf-8", errors="replace")
    return text if len(data) <= n else data[-n:].decode("utf-8", errors="ignore")


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= _SHOW else text[:_SHOW] + "..."


def _run_details(result: SandboxResult, stderr: str | None = None) -> dict[str, Any]:
    return {"sandbox_status": result.status, "returncode": result.returncode,
            "stderr": _tail(result.stderr if stderr is None else stderr),
            "wall_s": round(result.wall_s, 3), "isolation": list(result.isolation)}


def _failure_reason(result: SandboxResult, stderr: str | None = None) -> str:
    if result.status == "sandbox_error":
        return f"grader_error: sandbox: {_tail(result.stderr, 300).strip()}"
    lines = [line for line in (result.stderr if stderr is None else stderr).splitlines()
             if line.strip()]
    if result.status == "error" and lines and lines[-1].startswith("AssertionError"):
        return "test_failed"
    return {"timeout": "timeout", "memory": "memory", "killed": "killed",
            "error": "runtime_error"}.get(result.status, "wrong_answer")


# ----------------------------------------------------------------------------- HumanEval


def humaneval_program(completion: str, problem: dict) -> str:
    """The test script for a HumanEval completion: prompt + completion + test + check call.

    A completion that defines the whole function itself (a line `def <entry_point>(` at column 0)
    is appended after the prompt instead of continuing it: the prompt's docstring-only function is
    then simply redefined, and the prompt's imports and helper functions stay available."""
    entry = problem["entry_point"]
    prompt = problem["prompt"]
    if re.search(rf"^(async\s+)?def\s+{re.escape(entry)}\s*\(", completion, re.MULTILINE):
        head = prompt.rstrip("\n") + "\n\n" + completion
    else:
        head = prompt + completion
    return f"{head}\n\n{problem['test']}\n\ncheck({entry})\n"


async def grade_humaneval(completion: str, problem: dict, *, limits: Limits = DEFAULT_LIMITS,
                          legacy_blacklist: bool = False) -> Grade:
    """Pass iff the check script runs to its end (every assert holds) in the sandbox."""
    completion = _unfence(completion)
    early = _blacklisted_grade(completion, legacy_blacklist)
    if early is not None:
        return early
    result, report, stderr = await _run_harness(_HARNESS_SCRIPT,
                                                humaneval_program(completion, problem), limits)
    details = _run_details(result, stderr)
    if result.status == "ok" and report and report.get("finished"):
        return Grade.of(True, completion, **details)
    if result.status == "ok":  # exited 0 without finishing: sys.exit() / os._exit() mid-check
        return Grade.of(False, completion, "exited_early", **details)
    return Grade.of(False, completion, _failure_reason(result, stderr), **details)


# ----------------------------------------------------------------------------- LCB prelude

_LCB_STAR = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math",
             "random", "statistics", "itertools", "functools", "operator", "io", "sys", "json",
             "builtins", "typing")
LCB_PRELUDE = "\n".join([*(f"from {m} import *" for m in _LCB_STAR),
                         *(f"import {m}" for m in _LCB_STAR if m not in ("builtins", "typing")),
                         "sys.setrecursionlimit(50000)"]) + "\n"
"""The imports the LiveCodeBench harness puts before every program (its `import_string`):
LeetCode starter code uses `List[int]` without importing typing, and solutions use `heapq`,
`defaultdict`, ... unimported; under the reference harness they work, so they must here."""

_FUTURE = re.compile(r"^from\s+__future__\s+import[^\n]*\n?", re.MULTILINE)


def with_lcb_prelude(code: str) -> str:
    """`code` after `LCB_PRELUDE` (its `from __future__` imports hoisted above the prelude)."""
    future = "".join(line if line.endswith("\n") else line + "\n"
                     for line in _FUTURE.findall(code))
    return future + LCB_PRELUDE + _FUTURE.sub("", code)


# ----------------------------------------------------------------------------- stdin / stdout


def outputs_match(got: str, expected: str) -> bool:
    """LiveCodeBench's comparison: stripped lines equal; failing that, per line, the
    whitespace-separated tokens equal as strings or as decimal numbers ("1.0" == "1")."""
    got_lines = [line.strip() for line in got.strip().splitlines()]
    exp_lines = [line.strip() for line in expected.strip().splitlines()]
    if got_lines == exp_lines:
        return True
    if len(got_lines) != len(exp_lines):
        return False
    for g, e in zip(got_lines, exp_lines, strict=True):
        if g == e:
            continue
        g_tokens, e_tokens = g.split(), e.split()
        if len(g_tokens) != len(e_tokens):
            return False
        for a, b in zip(g_tokens, e_tokens, strict=True):
            if a == b:
                continue
            try:
                if Decimal(a) != Decimal(b):
                    return False
            except InvalidOperation:
                return False
    return True


def _prechecked(code: str, legacy_blacklist: bool, tests: list) -> tuple[str, Grade | None]:
    """The unfenced code, and a grade already decided before running it (blacklist, no tests)."""
    code = _unfence(code)
    early = _blacklisted_grade(code, legacy_blacklist)
    if early is None and not tests:
        early = Grade.of(False, code, "no_tests")
    return code, early


async def grade_program_io(code: str, tests: list[tuple[str, str]], *,
                           limits: Limits = DEFAULT_LIMITS, legacy_blacklist: bool = False,
                           prelude: bool = True) -> Grade:
    """Run `code` once per (stdin, expected stdout) test, in order, each in a fresh sandbox
    with `limits` (wall_s is per test); pass iff every output matches (`outputs_match`).
    Stops at the first failing test. `prelude`: run it after `LCB_PRELUDE`, as LCB does."""
    code, early = _prechecked(code, legacy_blacklist, tests)
    if early is not None:
        return early
    program = with_lcb_prelude(code) if prelude else code
    details: dict[str, Any] = {}
    for i, (stdin, expected) in enumerate(tests):
        need_kb = 2 * len(expected.encode("utf-8")) // 1024 + 64
        run_limits = replace(limits, output_kb=max(limits.output_kb, need_kb))
        result = await arun_python(program, stdin=stdin, limits=run_limits)
        details = {**_run_details(result), "tests_total": len(tests), "tests_passed": i}
        if result.status != "ok":
            return Grade.of(False, code, _failure_reason(result), failed_test=i,
                            input=_show(stdin), **details)
        if not outputs_match(result.stdout, expected):
            return Grade.of(False, code, "wrong_answer", failed_test=i, input=_show(stdin),
                            expected=_show(expected), got=_show(result.stdout), **details)
    details["tests_passed"] = len(tests)
    return Grade.of(True, code, **details)


# ----------------------------------------------------------------------------- function calls


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


async def grade_function_call(code: str, func_name: str, tests: list[tuple[list, Any]], *,
                              limits: Limits = DEFAULT_LIMITS, legacy_blacklist: bool = False,
                              prelude: bool = True) -> Grade:
    """LeetCode style: `Solution().<func_name>(*args)` (one instance for all tests, as in the
    LCB harness; a top-level function of that name is accepted too) must return each test's
    expected value, compared as JSON (tuples become lists; 1 == 1.0). All calls run in one
    sandboxed process; `limits.wall_s` is the per-call timeout and the whole run gets
    (wall_s + 1) * n + 5 s (LCB's global alarm), CPU likewise. Stops at the first error.
    `prelude`: the code runs after `LCB_PRELUDE`, as in LCB."""
    code, early = _prechecked(code, legacy_blacklist, tests)
    if early is not None:
        return early
    n = len(tests)
    expected = [_jsonable(exp) for _, exp in tests]
    spec = {"func_name": func_name, "timeout": float(limits.wall_s),
            "calls": [_jsonable(list(args)) for args, _ in tests]}
    need_kb = 2 * len(json.dumps(expected)) // 1024 + 64
    run_limits = replace(limits, wall_s=(limits.wall_s + 1) * n + 5,
                         cpu_s=(limits.cpu_s + 1) * n + 5,
                         output_kb=max(limits.output_kb, need_kb))
    program = with_lcb_prelude(code) if prelude else code
    result, report, stderr = await _run_harness(
        _HARNESS_CALLS, program, run_limits, {".podium_calls.json": json.dumps(spec)})
    details: dict[str, Any] = {**_run_details(result, stderr), "tests_total": n}
    if report is None or result.status != "ok":
        reason = "exited_early" if result.status == "ok" else _failure_reason(result)
        return Grade.of(False, code, reason, **details)
    if "setup" in report:
        return Grade.of(False, code, "no_function", error=report["setup"], **details)
    results = report.get("results", [])
    for i, want in enumerate(expected):
        case = {"failed_test": i, "input": _show(tests[i][0]), "tests_passed": i}
        if i >= len(results):
            return Grade.of(False, code, "runtime_error", **case, **details)
        got = results[i]
        if "error" in got:
            reason = "timeout" if got["error"] == "timeout" else "runtime_error"
            return Grade.of(False, code, reason, error=_show(got["error"]), **case, **details)
        if "value" not in got or got["value"] != want:
            shown = got.get("value", got.get("repr"))
            return Grade.of(False, code, "wrong_answer", expected=_show(want), got=_show(shown),
                            **case, **details)
    details["tests_passed"] = n
    return Grade.of(True, code, **details)


# ----------------------------------------------------------------------------- unittest


async def grade_unittest(code: str, test_code: str, *, limits: Limits = DEFAULT_LIMITS,
                         legacy_blacklist: bool = False) -> Grade:
    """BigCodeBench style: `code + test_code` is executed as module `__test__`, then every
    `unittest.TestCase` class it defines is run; pass iff at least one test ran and none failed
    or errored (skips are allowed)."""
    code = _unfence(code)
    early = _blacklisted_grade(code, legacy_blacklist)
    if early is not None:
        return early
    program = f"{code}\n\n{test_code}\n"
    result, report, stderr = await _run_harness(_HARNESS_UNITTEST, program, limits)
    details = _run_details(result, stderr)
    if report is None or result.status != "ok":
        reason = "exited_early" if result.status == "ok" else _failure_reason(result)
        return Grade.of(False, code, reason, **details)
    details["tests_run"] = report.get("run", 0)
    bad = report.get("failures", []) + report.get("errors", [])
    if bad:
        name, trace = bad[0]
        return Grade.of(False, code, "test_failed", failed_test=name, traceback=_tail(trace),
                        tests_failed=len(bad), **details)
    if report.get("unexpected_successes"):
        return Grade.of(False, code, "test_failed", failed_test="unexpected success", **details)
    if not details["tests_run"]:
        return Grade.of(False, code, "no_tests", **details)
    return Grade.of(True, code, **details)
