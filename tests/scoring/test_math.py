"""MATH500 graders: the legacy normaliser and fallbacks, symbolic equivalence, the process pool."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from podium.scoring.math import (
    MathVerifier,
    Verdict,
    agrade_math,
    grade_math,
    legacy_equal,
    legacy_match,
    legacy_normalize,
    mv_check,
    verify_serial,
)


# Picklable checks the worker processes import from this module (fault injection).
def hang_check(pred: str, gold: str, timeout: float) -> Verdict:
    if pred == "hang":
        while True:  # ignores SIGALRM-style cooperation: only a kill stops it
            time.sleep(1)
    return mv_check(pred, gold, timeout)


def crash_check(pred: str, gold: str, timeout: float) -> Verdict:
    if pred == "crash":
        os._exit(3)
    return mv_check(pred, gold, timeout)


@pytest.fixture(scope="module")
def verifier():
    with MathVerifier(max_workers=2) as v:
        yield v


# (pred, gold, rule): equal under BOTH graders; `rule` is the legacy rule that accepts it.
BOTH = [
    ("\\dfrac{1}{2}", "\\frac{1}{2}", "exact"),
    ("\\frac12", "\\frac{1}{2}", "exact"),
    ("\\tfrac{3}{4}", "3/4", "paren_fraction"),
    ("-\\frac{35}{9}", "-\\dfrac{35}{9}", "exact"),
    ("x=5", "5", "exact"),
    ("5", "x = 5", "exact"),
    ("f(2)=5", "5", "after_equals"),
    ("y=2x+3", "y = 2x + 3", "exact"),
    ("2, 1", "1,2", "comma_list"),
    ("7,5,3", "3, 5, 7", "comma_list"),
    ("1, -2", "-2,1", "comma_list"),
    ("30^\\circ", "30", "no_degree"),
    ("30", "30^\\circ", "no_degree"),
    ("\\frac{270}{7}", "\\frac{270}7\\text{ degrees}", "no_degree"),
    ("Evelyn", "\\text{Evelyn}", "exact"),
    ("evelyn", "\\text{Evelyn}", "reference_unwrapped"),
    ("C", "\\text{(C)}", "reference_unwrapped"),
    ("1+\\sqrt{19}, 1-\\sqrt{19}", "1 \\pm \\sqrt{19}", "pm_expansion"),
    ("1000", "1,000", "thousands"),
    ("10080", "10,\\!080", "thousands"),
    ("32348", "\\$32,\\!348", "thousands"),
    ("\\$18.90", "18.90", "exact"),
    ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}", "reference_unwrapped"),
    ("-3/8", "-\\frac{3}{8}", "paren_fraction"),
    ("\\sqrt2", "\\sqrt{2}", "exact"),
    ("11\\sqrt{2}", "11\\sqrt2", "exact"),
    ("7\\pi", "7 \\pi", "exact"),
    ("\\pi/2", "\\frac{\\pi}{2}", "reference_unwrapped"),
    ("\\pi", "\\pi", "exact"),
    ("[-2,7]", "x \\in [-2,7]", "in_rhs"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", "exact"),
    ("\\left[ \\frac{\\pi^2}{8}, \\frac{5 \\pi^2}{4} \\right]",
     "[\\frac{\\pi^2}{8},\\frac{5\\pi^2}{4}]", "exact"),
    ("(3, 4]", "(3,4]", "exact"),
    ("(2, \\infty)", "(2,\\infty)", "exact"),
    ("\\boxed{\\frac{14}{3}}", "\\frac{14}{3}", "exact"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", "exact"),
    ("\\{1\\pm\\sqrt{5},-2\\}", "\\{1\\pm\\sqrt{5},-2\\}", "exact"),
]

# Equal only symbolically (math-verify); the legacy grader rejects them.
SYMBOLIC_ONLY = [
    ("0.5", "\\frac{1}{2}"),
    ("\\frac{2}{4}", "\\frac{1}{2}"),
    ("1.8", "\\frac{9}{5}"),
    ("2^{10}", "1024"),
    ("\\frac{1}{\\sqrt{3}}", "\\frac{\\sqrt{3}}{3}"),
    ("\\sqrt{8}", "2\\sqrt{2}"),
    ("(x+1)^2", "x^2+2x+1"),
    ("1,2", "\\{2, 1\\}"),
    ("5.4", "5.4 \\text{ cents}"),  # units: the legacy normaliser keeps "cents"
    ("\\frac{9}{5}", "1\\frac{4}{5}"),  # a mixed number
]

# Equal under neither grader. Decisions: intervals differ by endpoint openness ("(1,2)" is not
# "[1,2]"); ordered pairs keep their order; an approximation with few digits ("6.283") is not
# "2\pi" (math-verify compares after rounding to 6 decimals, so "6.283185307" would match).
NEITHER = [
    ("2", "\\frac{1}{2}"),
    ("1/2", "2"),
    ("x^3", "x^2"),
    ("(1,2)", "[1,2]"),
    ("(1,2)", "(2,1)"),
    ("5", "50"),
    ("50", "5"),
    ("-5", "5"),
    ("1000", "100"),
    ("\\sqrt{3}", "3"),
    ("1,2", "1,2,3"),
    ("500,58", "58,500"),
    ("6.283", "2\\pi"),
    ("3x-7y+11z+4=0", "5x-7y+11z+4=0"),
    ("east", "west"),
]


@pytest.mark.parametrize(("raw", "want"), [
    ("\\boxed{\\dfrac{1}{2}}", "(1/2)"),
    ("$x = 5$", "5"),
    ("\\[ \\sqrt{2} \\]", "\\sqrt2"),
    ("\\left( 1, 2 \\right)", "(1,2)"),
    ("10\\text{ cm}", "10cm"),
    ("x^{2}", "x^2"),
    ("\\frac{\\frac{1}{2}}{3}", "((1/2)/3)"),
    ("\\{1,2\\}", "\\{1,2\\}"),
    ("\\bigcup", "\\bigcup"),
    ("", ""),
    (None, ""),
])
def test_legacy_normalize(raw, want):
    assert legacy_normalize(raw) == want


@pytest.mark.parametrize(("pred", "gold", "rule"), BOTH)
def test_legacy_accepts(pred, gold, rule):
    assert legacy_match(pred, gold) == rule


@pytest.mark.parametrize(("pred", "gold"), SYMBOLIC_ONLY + NEITHER)
def test_legacy_rejects(pred, gold):
    assert not legacy_equal(pred, gold)


@pytest.mark.parametrize("pred", ["\\frac{" * 3000 + "1" + "}{2}" * 3000, "\\boxed{" * 2000,
                                  "\\sqrt{" * 140 + "9" + "}" * 140, "{" * 100_000, "9" * 100_000])
def test_legacy_pathological_inputs_are_fast_and_safe(pred):
    start = time.monotonic()
    assert not legacy_equal(pred, "9")
    assert not grade_math(pred, "9", mode="legacy", extract=False).correct
    assert time.monotonic() - start < 1.0


def test_legacy_quirk_reference_brackets_unwrapped():
    # The reference unwraps the gold's outer brackets, so a bare list matches a tuple gold.
    assert legacy_match("1,2", "(1,2)") == "reference_unwrapped"
    assert not legacy_equal("(1,2)", "1,2")


@pytest.mark.parametrize(("pred", "gold", "rule"), BOTH)
def test_symbolic_accepts_via_legacy(pred, gold, rule, verifier):
    grade = grade_math(pred, gold, verifier=verifier, extract=False)
    assert grade.correct and grade.details == {"mode": "symbolic", "path": "legacy", "rule": rule}


@pytest.mark.parametrize(("pred", "gold"), SYMBOLIC_ONLY)
def test_symbolic_only(pred, gold, verifier):
    assert not grade_math(pred, gold, mode="legacy", extract=False).correct
    grade = grade_math(pred, gold, verifier=verifier, extract=False)
    assert grade.correct, grade
    assert grade.details["path"] == "math_verify"


@pytest.mark.parametrize(("pred", "gold"), NEITHER)
def test_neither(pred, gold, verifier):
    assert not grade_math(pred, gold, mode="legacy", extract=False).correct
    grade = grade_math(pred, gold, verifier=verifier, extract=False)
    assert not grade.correct and grade.reason in ("mismatch", "unparsed"), grade


@pytest.mark.parametrize("response", [None, "", "The answer is 5.", "<answer> </answer>"])
@pytest.mark.parametrize("mode", ["legacy", "symbolic"])
def test_no_answer(response, mode, verifier):
    grade = grade_math(response, "5", mode=mode, verifier=verifier)
    assert not grade.correct and grade.reason == "no_answer" and grade.extracted is None


def test_extract_and_details(verifier):
    grade = grade_math("<idea>half</idea><answer>0.5</answer>", "\\frac12", verifier=verifier)
    assert grade.correct and grade.extracted == "0.5" and grade.score == 1.0
    assert grade_math("<answer>\\boxed{5}</answer>", "5", mode="legacy").correct
    # extract=False grades the text as given: a tag is then just noise.
    assert not grade_math("<answer>5</answer>", "5", mode="legacy", extract=False).correct
    with pytest.raises(ValueError):
        grade_math("<answer>5</answer>", "5")  # symbolic needs a verifier
    with pytest.raises(ValueError):
        grade_math("<answer>5</answer>", "5", mode="fuzzy")


def test_agrade_math(verifier):
    async def main():
        return await asyncio.gather(
            agrade_math("<answer>0.5</answer>", "\\frac{1}{2}", verifier=verifier),
            agrade_math("<answer>2</answer>", "\\frac{1}{2}", verifier=verifier),
            agrade_math("<answer>x=5</answer>", "5", mode="legacy"),
        )

    a, b, c = asyncio.run(main())
    assert a.correct and not b.correct and c.correct


def test_equal_many_and_serial_agree(verifier):
    cases = [(p, g, True) for p, g, _ in BOTH] + [(p, g, True) for p, g in SYMBOLIC_ONLY]
    cases += [(p, g, False) for p, g in NEITHER]
    cases = cases[:50]
    assert len(cases) == 50
    pairs = [(p, g) for p, g, _ in cases]
    got = verifier.equal_many(pairs)
    # math-verify alone (no legacy pre-check) must at least get the symbolic and the
    # non-matching cases right; the legacy-only rules (e.g. "x=5" vs "5") may differ.
    for (pred, gold, want), ok in zip(cases, got, strict=True):
        if (pred, gold) in SYMBOLIC_ONLY or not want:
            assert ok == want, (pred, gold)
    assert verify_serial(pairs[:10]) == got[:10]


def test_mv_check_in_process():
    assert mv_check("\\$32,\\!348", "32348").equal  # an escaped dollar is not a delimiter
    assert mv_check("$\\frac{1}{2}$", "0.5").equal
    assert mv_check("\\(\\sqrt{4}\\)", "2").equal
    assert mv_check("2", "3") == Verdict(False, "mismatch")


def test_threads_and_asyncio_share_one_verifier(verifier):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as threads:
        got = list(threads.map(lambda i: verifier.equal(f"{i}/2", f"{i / 2}"), range(16)))
    assert got == [True] * 16

    async def main():
        return await asyncio.gather(*(verifier.aequal(f"{i}", f"{i + i % 2}") for i in range(8)))

    assert asyncio.run(main()) == [i % 2 == 0 for i in range(8)]


def test_pathological_inputs_time_out_and_pool_survives(verifier):
    for pred in ("9" * 100_000, "(" * 3000 + "1" + ")" * 3000,
                 "\\frac{" * 300 + "1" + "}{2}" * 300, "9^{9^{9^{9}}}"):
        start = time.monotonic()
        verdict = verifier.check(pred, "9", timeout=3)
        assert verdict.reason in ("timeout", "unparsed", "mismatch"), verdict
        assert time.monotonic() - start < 3 + 4, verdict  # slack for a loaded machine
    assert verifier.equal("\\frac{1}{2}", "0.5")
    assert verifier.equal_many([("1", "1"), ("2", "3")]) == [True, False]


def test_hung_worker_is_killed_and_others_rerun():
    with MathVerifier(max_workers=2, check=hang_check) as v:
        assert v.equal("1", "1")  # warm pool
        start = time.monotonic()
        hung = v.submit("hang", "1", timeout=1.0)
        others = [v.submit(f"{i}", f"{i}", timeout=5.0) for i in range(6)]
        assert hung.result() == Verdict(False, "timeout")
        assert time.monotonic() - start < 1.0 + 4  # slack for a loaded machine
        assert all(f.result().equal for f in others)
        assert v.equal("0.5", "\\frac12")
        assert v.stats["timeouts"] == 1 and v.stats["restarts"] >= 1


def test_crashed_worker_is_reported_and_pool_restarts():
    with MathVerifier(max_workers=2, check=crash_check) as v:
        futures = [v.submit("crash", "1")] + [v.submit(f"{i}", f"{i}") for i in range(5)]
        results = [f.result() for f in futures]
        assert results[0] == Verdict(False, "worker_crash")
        assert all(r.equal for r in results[1:]), results
        assert v.equal("1/2", "0.5") and v.stats["crashes"] >= 2


def test_close_is_idempotent_and_final():
    v = MathVerifier(max_workers=1)
    assert v.check(None, "1") == Verdict(False, "no_answer")  # no pool needed
    v.close()
    v.close()
    with pytest.raises(RuntimeError):
        v.submit("1", "1")
