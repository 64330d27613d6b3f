"""Numeric grading: GSM8K and AIME (`grade_numeric`) and the RLPR reference rules
(`grade_rlpr`, PAPER.md §7.3).

`parse_number` reads one number from an answer: it strips `$`, `\\$`, `%`, `\\%`, spaces and
thousands separators ("1,234" but not the list "1,2"), unwraps `\\boxed{}` / `\\text{}` / math
`$...$`, and accepts negatives (also U+2212), decimals, scientific notation ("1.5e3",
"1.5 \\times 10^{3}"), simple fractions ("3/4", "\\frac{3}{4}") and a leading number followed by
units ("72 dollars" -> 72). Anything else (an expression, two numbers) is None.
"""

from __future__ import annotations

import math
import re

from podium.scoring.base import Grade, extract_answer

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"  # unambiguous: no backtracking blow-up
_FULL = re.compile(rf"({_NUM})(?:/({_NUM}))?")
_SCI = re.compile(rf"({_NUM})(?:\\times|\\cdot|×|\*|x)10\^\{{?([-+]?\d+)\}}?")
_FRAC = re.compile(r"([-+]?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}")
_SPACED = re.compile(r"(?<![\d.])(\d{1,3})((?: \d{3})+)(?![\d.,/])")
_THOUSANDS = re.compile(r"(?<![\d.])(\d{1,3})((?:,\d{3})+)(?![\d,])")
_UNITS = re.compile(rf"({_NUM})(?:/({_NUM}))?\s*[a-zA-Z°][\w\s.°/^()-]*")
_SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6}
_SCALED = re.compile(rf"^\s*({_NUM})\s*(thousand|million|k)\b", re.IGNORECASE)


def _clean(text: str) -> str:
    s = text.strip().replace("\u2212", "-").replace("−", "-")
    s = re.sub(r"\\(?:boxed|text|textrm|mathrm|mbox)\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "%").replace("\\!", "")
    s = s.replace("{,}", ",")
    s = _THOUSANDS.sub(lambda m: m.group(1) + m.group(2).replace(",", ""), s)
    return s.strip().rstrip(".").strip()


def _to_float(num: str, den: str | None = None) -> float | None:
    try:
        value = float(num) / float(den) if den is not None else float(num)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def parse_number(text: str | None) -> float | None:
    """One number from `text` (see the module docstring), or None."""
    if text is None:
        return None
    s = _clean(str(text))
    s = _SPACED.sub(lambda m: m.group(1) + m.group(2).replace(" ", ""), s)  # "1 234"
    compact = re.sub(r"(?<!\d)\s+|\s+(?!\d)", "", s).replace("%", "")  # keeps "2 1/2"
    if not compact:
        return None
    if m := _FULL.fullmatch(compact):
        return _to_float(m.group(1), m.group(2))
    if m := _SCI.fullmatch(compact):
        return _to_float(f"{m.group(1)}e{m.group(2)}")
    if m := _FRAC.fullmatch(compact):
        value = _to_float(m.group(2), m.group(3))
        return None if value is None else (-value if m.group(1) == "-" else value)
    if "," in s:  # a list such as "1, 2" is not one number
        return None
    if m := _UNITS.fullmatch(s):  # "72 dollars", "3/4 cup", "5km"; not "2 1/2"
        return _to_float(m.group(1), m.group(2))
    return None


def _answer(response: str | None, extract: bool) -> str | None:
    text = extract_answer(response) if extract else response
    return text.strip() if text and text.strip() else None


def grade_numeric(response: str | None, gold: str | float | int, *, rel_tol: float = 1e-6,
                  abs_tol: float = 1e-9, extract: bool = True) -> Grade:
    """Numeric equality within `math.isclose(rel_tol, abs_tol)` (0, 0 = exact); AIME golds
    such as "025" read as 25. extract=True: the first `<answer>` tag (none -> no_answer)."""
    answer = _answer(response, extract)
    if answer is None:
        return Grade.of(False, None, "no_answer")
    want = parse_number(str(gold))
    if want is None:
        raise ValueError(f"grade_numeric: gold {gold!r} is not a number")
    got = parse_number(answer)
    if got is None:
        return Grade.of(False, answer, "unparseable", gold=want)
    return Grade.of(math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol), answer,
                    "mismatch", value=got, gold=want)


# ----------------------------------------------------------------------------- RLPR
def _rlpr_close(x: float, ref: float) -> bool:
    """The reference tolerance: relative 1e-3 when |ref| > 1, else absolute 1e-6."""
    return abs(x - ref) <= (1e-3 * abs(ref) if abs(ref) > 1 else 1e-6)


def _rlpr_float(s: str) -> float | None:
    """A float after stripping `,`, `$` and `%` (the reference's float rule)."""
    return _to_float(s.replace(",", "").replace("$", "").replace("%", "").strip() or "x")


def _leading(s: str) -> float | None:
    m = re.match(rf"\s*(?:\$\s*)?({_NUM})", s.replace(",", ""))
    return _to_float(m.group(1)) if m else None


def _scaled(s: str) -> float | None:
    m = _SCALED.match(s.replace(",", "").replace("$", ""))
    if not m:
        return None
    value = _to_float(m.group(1))
    return None if value is None else value * _SCALES[m.group(2).lower()]


def rlpr_rule(pred: str, gold: str) -> str | None:
    """The first RLPR rule that accepts `pred` for `gold` (both whitespace-normalised)."""
    if pred == gold:
        return "exact"
    if pred.lower() == gold.lower():
        return "case_insensitive"
    p_pct, g_pct = pred.endswith("%"), gold.endswith("%")
    if p_pct != g_pct:
        p, g = _rlpr_float(pred), _rlpr_float(gold)
        if p is not None and g is not None:
            p, g = (p / 100, g) if p_pct else (p, g / 100)
            if _rlpr_close(p, g):
                return "percent_decimal"
    p, g = _rlpr_float(pred), _rlpr_float(gold)
    if p is not None and g is not None and _rlpr_close(p, g):
        return "float"
    p, g = _leading(pred), _leading(gold)
    if p is not None and g is not None and _rlpr_close(p, g):
        return "leading_number"
    ps, gs = _scaled(pred), _scaled(gold)
    if (ps is not None or gs is not None):
        p = ps if ps is not None else _rlpr_float(pred)
        g = gs if gs is not None else _rlpr_float(gold)
        if p is not None and g is not None and _rlpr_close(p, g):
            return "scaled"
    return None


def grade_rlpr(response: str | None, gold: str, *, extract: bool = True) -> Grade:
    """The RLPR reference grader: whitespace-normalise both sides, then accept on the first
    matching rule (exact; case-insensitive; percent <-> decimal; floats within tolerance;
    leading numbers within tolerance; thousand/million/k scaling). `details["rule"]` names it."""
    answer = _answer(response, extract)
    if answer is None:
        return Grade.of(False, None, "no_answer")
    pred, ref = " ".join(answer.split()), " ".join(str(gold).split())
    rule = rlpr_rule(pred, ref)
    return Grade.of(rule is not None, answer, "mismatch", rule=rule)
