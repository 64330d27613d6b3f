"""Numeric graders: GSM8K/AIME (`grade_numeric`) and the RLPR reference rules (`grade_rlpr`)."""

from __future__ import annotations

import pytest

from podium.scoring.numeric import grade_numeric, grade_rlpr, parse_number, rlpr_rule


@pytest.mark.parametrize(("text", "want"), [
    ("72", 72.0),
    ("-3", -3.0),
    ("\u22123", -3.0),
    ("+4", 4.0),
    ("3.14", 3.14),
    (".5", 0.5),
    ("72.", 72.0),
    ("$1,234.50", 1234.5),
    ("\\$1,234.50", 1234.5),
    ("1 234", 1234.0),
    ("12,345,678", 12345678.0),
    ("45%", 45.0),
    ("45\\%", 45.0),
    ("1.5e3", 1500.0),
    ("2E-2", 0.02),
    ("1.5 \\times 10^{3}", 1500.0),
    ("3/4", 0.75),
    ("-3/4", -0.75),
    ("\\frac{3}{4}", 0.75),
    ("-\\dfrac{1}{8}", -0.125),
    ("72 dollars", 72.0),
    ("5km", 5.0),
    ("3/4 cup", 0.75),
    ("\\boxed{18}", 18.0),
    ("$18$", 18.0),
    ("025", 25.0),
    ("1,2", None),  # a list, not a thousands separator
    ("1, 2", None),
    ("2 1/2", None),  # mixed number: ambiguous
    ("x = 5", None),
    ("five", None),
    ("1/0", None),
    ("", None),
    (None, None),
    ("3 4", None),
])
def test_parse_number(text, want):
    assert parse_number(text) == (pytest.approx(want) if want is not None else None)


@pytest.mark.parametrize(("response", "gold", "kwargs", "correct"), [
    ("<answer>72</answer>", "72", {}, True),
    ("<answer>72 dollars</answer>", "72", {}, True),
    ("<answer>$1,234.50</answer>", "1234.5", {}, True),
    ("<answer>-3</answer>", "-3", {}, True),
    ("<answer>3/4</answer>", "0.75", {}, True),
    ("<answer>25</answer>", "025", {"rel_tol": 0.0, "abs_tol": 0.0}, True),  # AIME gold
    ("<answer>025</answer>", "25", {"rel_tol": 0.0, "abs_tol": 0.0}, True),
    ("<answer>72.0000001</answer>", "72", {}, True),  # within rel 1e-6
    ("<answer>72.001</answer>", "72", {}, False),
    ("<answer>72.001</answer>", "72", {"rel_tol": 1e-3}, True),
    ("<answer>1e-10</answer>", "0", {}, True),  # abs_tol 1e-9
    ("<answer>1e-8</answer>", "0", {}, False),
    ("<answer>26</answer>", "025", {"rel_tol": 0.0, "abs_tol": 0.0}, False),
    ("<answer>-72</answer>", "72", {}, False),
    ("<answer>7.2</answer>", 72, {}, False),
    ("<answer>720</answer>", 72.0, {}, False),
])
def test_grade_numeric(response, gold, kwargs, correct):
    assert grade_numeric(response, gold, **kwargs).correct is correct


def test_grade_numeric_reasons():
    assert grade_numeric("72", "72").reason == "no_answer"  # no tag
    assert grade_numeric("72", "72", extract=False).correct
    assert grade_numeric("<answer></answer>", "72").reason == "no_answer"
    bad = grade_numeric("<answer>seventy-two</answer>", "72")
    assert not bad.correct and bad.reason == "unparseable" and bad.extracted == "seventy-two"
    wrong = grade_numeric("<answer>71</answer>", "72")
    assert wrong.reason == "mismatch" and wrong.details == {"value": 71.0, "gold": 72.0}
    with pytest.raises(ValueError):
        grade_numeric("<answer>1</answer>", "not a number")


@pytest.mark.parametrize(("pred", "gold", "rule"), [
    ("Paris", "Paris", "exact"),
    ("paris", "Paris", "case_insensitive"),
    ("H2O", "h2o", "case_insensitive"),
    ("45%", "0.45", "percent_decimal"),
    ("0.45", "45%", "percent_decimal"),
    ("12.5%", "0.125", "percent_decimal"),
    ("45%", "45", "float"),  # the float rule strips "%"
    ("$1,200", "1200", "float"),
    ("3.1416", "3.14159", "float"),  # |ref| > 1: relative 1e-3
    ("100.09", "100", "float"),
    ("0.1234561", "0.123456", "float"),  # |ref| <= 1: absolute 1e-6
    ("72 dollars", "72", "leading_number"),
    ("9.805 m/s^2", "9.8 m/s^2", "leading_number"),
    ("2.5 million", "2500000", "scaled"),
    ("2500000", "2.5 million", "scaled"),
    ("1.2k", "1200", "scaled"),
    ("3 thousand", "3,000", "scaled"),
    ("$4.5 million", "4500000", "scaled"),
])
def test_rlpr_accepts(pred, gold, rule):
    assert rlpr_rule(pred, gold) == rule
    grade = grade_rlpr(f"<answer>{pred}</answer>", gold)
    assert grade.correct and grade.details == {"rule": rule}


@pytest.mark.parametrize(("pred", "gold"), [
    ("Lyon", "Paris"),
    ("0.46", "45%"),
    ("100.2", "100"),  # 2e-3 relative
    ("0.123458", "0.123456"),  # 2e-6 absolute
    ("1.2k", "1300"),
    ("5 km", "5000"),  # "k" of "km" is not a scale
    ("2.5 billion", "2500000"),
    ("-72", "72"),
    ("", "72"),
])
def test_rlpr_rejects(pred, gold):
    assert not grade_rlpr(f"<answer>{pred}</answer>", gold).correct


def test_rlpr_whitespace_and_tags():
    assert grade_rlpr("<answer>  New \n York </answer>", "New York").details["rule"] == "exact"
    assert grade_rlpr("New York", "New York").reason == "no_answer"
    assert grade_rlpr("New York", "new york", extract=False).correct


@pytest.mark.parametrize("text", ["1" * 100_000 + "x", " " * 100_000 + "x", "1," * 50_000,
                                  "1." * 50_000, "1" + " " * 100_000 + "x!", "$ " * 50_000])
def test_long_inputs_stay_fast(text):
    import time

    start = time.monotonic()
    grade_numeric(text, "5", extract=False)
    grade_rlpr(text, "5", extract=False)
    assert time.monotonic() - start < 1.0
