"""Multiple-choice grading (MMLU, GPQA): read one option letter and compare letters
(PAPER.md §7.3, D10, D12).

The fixed reader (`read_choice`) is a cascade; the first step that finds something decides:

1. an explicit statement: "Answer: B", "the answer is (C)", "final answer: **D**",
   "answer is option B". The LAST such statement wins (a response that reconsiders ends with
   its conclusion). Lower-case letters count here only when nothing word-like follows them
   ("answer: b", "answer is c." but not "the answer is a tricky one").
2. `\\boxed{X}` (also `\\boxed{\\text{X}}`); the last one wins.
3. the whole text is one letter, possibly decorated: "B", "(b)", "**C**", "D." (lower case is
   accepted: a bare letter in the answer tag is unambiguous).
4. parenthesised upper-case letters "(A)"; then "X)" / "X." at a line start; then standalone
   upper-case letter tokens (not part of a word: the A of "ANSWER" never counts; a letter
   followed by a lower-case word, like the article in "A cat", is skipped). In step 4 several
   *different* letters are ambiguous -> None.

The reference's reader (`legacy=True`, D12) upper-cases the text, takes the first character
among the letters anywhere (so "The answer is B" reads "A" from "ANSWER"), else the first digit
0..n-1 mapped to a letter; it needs an answer tag. Gold may be a letter or an integer index;
both are normalised to a letter (the D10 fix).
"""

from __future__ import annotations

import re

from podium.scoring.base import Grade, extract_answer

# Every quantifier is bounded: no catastrophic backtracking on long runs of spaces.
_EXPLICIT = (r"answer(?:\s{1,3}is)?[\s:=*_-]{0,6}(?:(?:option|choice|letter)\s{0,3})?"
             r"[(\[{*]{0,3}\s{0,2}([{L}])(?![A-Za-z0-9])")


# After "A" or "I": a lower-case word makes it the article or pronoun ("A cat", "I think"), not
# an option; "A or B", "A is right" still count.
_WORD_AFTER = re.compile(r"\s{1,3}(?!(?:or|and|is|was|nor)\b)[a-z]")


def _cls(letters: str) -> str:
    return re.escape(letters.upper() + letters.lower())


def _one(found: list[str]) -> str | None:
    distinct = set(found)
    return found[0] if len(distinct) == 1 else None


def read_choice(text: str | None, letters: str = "ABCD") -> str | None:
    """The option letter (upper case) the text commits to, or None (nothing or ambiguous)."""
    if not text or not text.strip():
        return None
    letters = letters.upper()
    up = re.escape(letters)
    explicit = re.compile(_EXPLICIT.replace("{L}", _cls(letters)), re.IGNORECASE)
    hits = []
    for m in explicit.finditer(text):
        letter = m.group(1)
        if letter.islower() and re.match(r"\s{1,3}[A-Za-z0-9]", text[m.end():m.end() + 4]):
            continue  # "the answer is a tricky one": an article, not an option
        hits.append(letter.upper())
    if hits:
        return hits[-1]
    boxed = re.findall(r"\\boxed\{\s{0,3}(?:\\text(?:bf)?\{)?\s{0,3}\(?([" + up + r"])\)?\s{0,3}\}", text)
    if boxed:
        return boxed[-1]
    bare = re.fullmatch(r"[\s*_(\[{\"'`]*([" + _cls(letters) + r"])[\s*_)\]}.:\"'`]*", text)
    if bare:
        return bare.group(1).upper()
    for pattern in (r"\(([" + up + r"])\)",
                    r"(?m)^[ \t]*\**([" + up + r"])[.)]",
                    r"(?<![A-Za-z0-9_\\])([" + up + r"])(?![A-Za-z0-9_])"):
        found = [m.group(1) for m in re.finditer(pattern, text)
                 if not (m.group(1) in "AI" and _WORD_AFTER.match(text, m.end()))]
        if found:
            return _one(found)
    return None


def legacy_read_choice(text: str | None, letters: str = "ABCD") -> str | None:
    """The reference reader: first character among `letters` in the upper-cased text, else the
    first digit 0..len(letters)-1 mapped to a letter (single digits only)."""
    if not text:
        return None
    letters = letters.upper()
    for ch in text.upper():
        if ch in letters:
            return ch
    for ch in text:
        if ch.isdigit() and int(ch) < len(letters):
            return letters[int(ch)]
    return None


def normalize_gold(gold: int | str, letters: str = "ABCD") -> str:
    """A gold letter ("b", "(B)") or index (1, "1") -> "B"; ValueError when it is neither."""
    letters = letters.upper()
    if isinstance(gold, bool):
        raise ValueError(f"gold answer {gold!r} is not a letter or an index")
    if isinstance(gold, int):
        if 0 <= gold < len(letters):
            return letters[gold]
        raise ValueError(f"gold index {gold} is out of range for {letters!r}")
    s = str(gold).strip().strip("()[]. ").upper()
    if len(s) == 1 and s in letters:
        return s
    if s.isdigit() and int(s) < len(letters):
        return letters[int(s)]
    raise ValueError(f"gold answer {gold!r} is not one of {letters!r} or an index")


def grade_choice(response: str | None, gold_letter: int | str, *, letters: str = "ABCD",
                 legacy: bool = False, extract: bool = True, require_tag: bool = False) -> Grade:
    """Grade a multiple-choice answer by comparing letters.

    extract=True: read the first `<answer>` tag when there is one, otherwise the whole response
    (details["source"] says which); `require_tag=True` makes a missing tag `no_answer`, as in
    PAPER.md §7.2. extract=False: read the text as given. legacy=True: the reference's
    first-letter scan, which always needs the tag when extract=True."""
    gold = normalize_gold(gold_letter, letters)
    text, source = response, "text"
    if extract:
        tagged = extract_answer(response)
        if tagged is not None:
            text, source = tagged, "tag"
        elif legacy or require_tag:
            return Grade.of(False, None, "no_answer", source="none", legacy=legacy)
        else:
            source = "response"
    reader = legacy_read_choice if legacy else read_choice
    letter = reader(text, letters)
    if letter is None:
        return Grade.of(False, None, "no_answer", source=source, legacy=legacy)
    return Grade.of(letter == gold, letter, "mismatch", source=source, legacy=legacy, gold=gold)
