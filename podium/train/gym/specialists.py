"""The gym's workers: five deterministic specialists, each exact on its own family.

A specialist reads the text it is given — the overall question (`question` mode) or only its
own subtask (`subtask` mode) — finds its own kind of instruction in it, and answers in
`<answer>` tags. It reads the question's own phrase ("What is 37 + 58?", "Reverse the word
'tlimpa'.") and the plain forms a worker LLM would also understand ("37 + 58", "Reverse
tlimpa", "Count the letter g in bridge"); the plain forms never occur in another family's
question, so in question mode they change nothing, and in subtask mode the Conductor must still
put the question's operands into the subtask. The calculator also continues a chain: "add 150
to the result" takes the result from the latest earlier step it was shown (a `<response>`
block, visible only with access "all"). Anywhere else a specialist answers with something of
the right shape that is almost always wrong (a number, a word, a date derived from the text),
never an error or an empty reply, so the reward, not a failure, says a worker was the wrong
choice.

The pool files (`pool_toml`) name them as `podium.train.gym.specialists:<name>` (question mode)
or `:<name>_subtask` (subtask mode).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Callable

from podium.tasks.gym.families import OPS, UNITS, WORDS, number

SPECIALISTS = ("calculator", "reverser", "counter", "calendar", "converter")

_WHAT_IS = re.compile(r"What is (-?\d+) ([-+*]) (-?\d+)\?")
_THEN = re.compile(r"(add|subtract|multiply the result by) (-?\d+)(?: (?:to|from) the result)?",
                   re.IGNORECASE)
_EXPRESSION = re.compile(r"(?<![\d.-])(\d+) ?([-+*]) ?(\d+)(?![\d.-])")  # not in a date
_REVERSE = re.compile(r"Reverse (?:the word )?'?([a-z]+)'?", re.IGNORECASE)
_COUNT = re.compile(r"(?:How many times does the letter|Count the letter|letter) '?([a-z])'? "
                    r"(?:appear )?in (?:the word )?'?([a-z]+)'?", re.IGNORECASE)
_DATE = re.compile(r"What date is (\d+) days (after|before) (\d{4}-\d{2}-\d{2})\?")
_CONVERT = re.compile(r"Convert ([\d.]+) ([a-z]+) to ([a-z]+)", re.IGNORECASE)
_RESPONSE = re.compile(r'<response model_id="\d+">\s*(.*?)\s*</response>', re.DOTALL)
_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _hash(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _reply(value: str) -> str:
    return f"<answer>{value}</answer>"


def _sections(messages: list[dict]) -> tuple[str, str, str]:
    """(overall task, the visible work of earlier steps, own subtask) of a worker message."""
    text = messages[0]["content"] if messages else ""
    task = re.search(r"<overall_task>\n(.*?)\n</overall_task>", text, re.DOTALL)
    own = text.rsplit("Your subtask:\n", 1)[1] if "Your subtask:\n" in text else ""
    history = text.split("Work of other team members so far:", 1)
    seen = history[1].split("Your subtask:\n", 1)[0] if len(history) > 1 else ""
    return (task.group(1) if task else text), seen, own


def _previous_number(seen: str) -> float | None:
    """The number answered by the latest earlier step shown (None: no step was shown)."""
    responses = _RESPONSE.findall(seen)
    if not responses:
        return None
    answer = _ANSWER.search(responses[-1])
    found = _NUMBER.findall(answer.group(1) if answer else responses[-1])
    return float(found[-1]) if found else None


def _calculate(text: str, seen: str) -> str:
    if m := _WHAT_IS.search(text):
        return number(OPS[m[2]](int(m[1]), int(m[3])))
    if m := _THEN.search(text):
        n, before = int(m[2]), _previous_number(seen)
        if before is None:  # a chain step that was not shown the first result
            return str(n)
        op = m[1].lower()
        return number(before + n if op == "add" else before - n if op == "subtract"
                      else before * n)
    if m := _EXPRESSION.search(text):
        return number(OPS[m[2]](int(m[1]), int(m[3])))
    return str(_hash(text) % 900 + 10)


def _reverse(text: str, seen: str) -> str:
    if m := _REVERSE.search(text):
        return m[1].lower()[::-1]
    words = re.findall(r"[a-z]{4,}", text.lower()) or list(WORDS)
    return words[_hash(text) % len(words)][::-1]


def _count(text: str, seen: str) -> str:
    if m := _COUNT.search(text):
        return str(m[2].count(m[1]))
    return str(_hash(text) % 4 + 1)


def _date(text: str, seen: str) -> str:
    if m := _DATE.search(text):
        days = int(m[1]) if m[2] == "after" else -int(m[1])
        return (dt.date.fromisoformat(m[3]) + dt.timedelta(days=days)).isoformat()
    return (dt.date(2021, 1, 1) + dt.timedelta(days=_hash(text) % 1500)).isoformat()


def _convert(text: str, seen: str) -> str:
    if (m := _CONVERT.search(text)) and (m[2], m[3]) in UNITS:
        return number(float(m[1]) * UNITS[(m[2], m[3])])
    return str(_hash(text) % 5000 + 1)


_RULES: dict[str, Callable[[str, str], str]] = {
    "calculator": _calculate, "reverser": _reverse, "counter": _count,
    "calendar": _date, "converter": _convert,
}


class Specialist:
    """A function worker: `mode` says whether it reads the question or only its subtask."""

    def __init__(self, name: str, mode: str) -> None:
        self.name, self.mode, self._rule = name, mode, _RULES[name]
        self.__name__ = name if mode == "question" else f"{name}_subtask"

    def __call__(self, messages: list[dict]) -> str:
        task, seen, own = _sections(messages)
        return _reply(self._rule(task if self.mode == "question" else own, seen))


calculator = Specialist("calculator", "question")
reverser = Specialist("reverser", "question")
counter = Specialist("counter", "question")
calendar = Specialist("calendar", "question")
converter = Specialist("converter", "question")
calculator_subtask = Specialist("calculator", "subtask")
reverser_subtask = Specialist("reverser", "subtask")
counter_subtask = Specialist("counter", "subtask")
calendar_subtask = Specialist("calendar", "subtask")
converter_subtask = Specialist("converter", "subtask")
