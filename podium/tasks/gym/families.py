"""The gym's task families: questions generated from a seed, each with its exact answer.

Five single-step families, each one specialist's job:

    family      question                                                   specialist
    arithmetic  What is 37 + 58?                                           calculator
    reverse     Reverse the word 'tlimpa'.                                 reverser
    count       How many times does the letter 'a' appear in 'banana'?     counter
    dates       What date is 17 days after 2024-03-05?                     calendar
    units       Convert 3.5 km to m.                                       converter

and two chained families, which need two specialists in order, the second seeing the first's
output (access "all"):

    units>arithmetic   Convert 2 km to m, then add 150 to the result.     converter, calculator
    count>arithmetic   Count the letter 'a' in 'banana', then multiply the result by 3.
                                                                          counter, calculator

Each problem also carries the instruction each specialist needs (`Problem.parts`): in subtask
mode a specialist reads only its own subtask, so the Conductor must write it. The phrases in a
question are the ones the specialists read, so copying the question (or its half) into a subtask
is a good instruction; copying anything else is not.
"""

from __future__ import annotations

import datetime as dt
import operator
import random
from collections.abc import Callable
from dataclasses import dataclass

WORDS = ("planet", "garden", "silver", "orange", "window", "bridge", "forest", "pencil",
         "rocket", "candle", "marble", "tunnel", "violin", "jacket", "lemon", "castle",
         "harbor", "meadow", "copper", "falcon", "banana", "yellow", "letter", "button",
         "anchor", "basket", "butter", "carpet", "cherry", "circle", "cotton", "desert",
         "dinner", "doctor", "dragon", "engine", "farmer", "flower", "frozen", "guitar",
         "hammer", "island", "jungle", "kettle", "kitten", "ladder", "magnet", "mirror",
         "monkey", "needle", "number", "office", "orchid", "parrot", "pepper", "pillow",
         "pirate", "potato", "puzzle", "rabbit", "ribbon", "saddle", "salmon", "shadow",
         "spider", "spring", "stream", "sugar", "summer", "tablet", "teapot", "ticket",
         "tomato", "turtle", "valley", "velvet", "wallet", "winter", "wizard", "zipper")
UNITS = {  # (from, to): factor
    ("km", "m"): 1000, ("m", "cm"): 100, ("kg", "g"): 1000, ("g", "mg"): 1000,
    ("h", "min"): 60, ("min", "s"): 60,
}
SINGLE = ("arithmetic", "reverse", "count", "dates", "units")
CHAINED = ("units>arithmetic", "count>arithmetic")
FAMILIES = SINGLE + CHAINED


@dataclass(frozen=True)
class Problem:
    family: str
    question: str
    answer: str
    parts: tuple[tuple[str, str], ...]  # (specialist, its instruction), in order

    @property
    def chained(self) -> bool:
        return len(self.parts) > 1


def number(x: float) -> str:
    """A number as the specialists write it: an integer without a decimal point."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


OPS: dict[str, Callable[[float, float], float]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul}


def _arithmetic(rng: random.Random) -> Problem:
    a, b, op = rng.randint(10, 99), rng.randint(10, 99), rng.choice("+-*")
    q = f"What is {a} {op} {b}?"
    return Problem("arithmetic", q, number(OPS[op](a, b)), (("calculator", q),))


def _reverse(rng: random.Random) -> Problem:
    word = "".join(rng.choice("abcdefghiklmnoprstuvw") for _ in range(rng.randint(5, 7)))
    q = f"Reverse the word '{word}'."
    return Problem("reverse", q, word[::-1], (("reverser", q),))


def _letter_and_word(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(WORDS)
    return rng.choice(sorted(set(word))), word


def _count(rng: random.Random) -> Problem:
    letter, word = _letter_and_word(rng)
    q = f"How many times does the letter '{letter}' appear in '{word}'?"
    return Problem("count", q, str(word.count(letter)), (("counter", q),))


def _dates(rng: random.Random) -> Problem:
    start = dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 2000))
    days, way = rng.randint(2, 60), rng.choice(("after", "before"))
    end = start + dt.timedelta(days=days if way == "after" else -days)
    q = f"What date is {days} days {way} {start.isoformat()}?"
    return Problem("dates", q, end.isoformat(), (("calendar", q),))


def _conversion(rng: random.Random) -> tuple[str, float]:
    (src, dst), factor = rng.choice(sorted(UNITS.items()))
    value = rng.choice((rng.randint(2, 99), rng.randint(2, 20) + 0.5))
    return f"Convert {number(value)} {src} to {dst}", value * factor


def _units(rng: random.Random) -> Problem:
    text, value = _conversion(rng)
    return Problem("units", text + ".", number(value), (("converter", text + "."),))


def _then(rng: random.Random, value: float) -> tuple[str, float]:
    n = rng.randint(2, 9) if rng.random() < 0.4 else rng.randint(11, 150)
    op = rng.choice(("add", "subtract", "multiply")) if n < 10 else rng.choice(("add", "subtract"))
    if op == "add":
        return f"add {n} to the result", value + n
    if op == "subtract":
        return f"subtract {n} from the result", value - n
    return f"multiply the result by {n}", value * n


def _units_then_arithmetic(rng: random.Random) -> Problem:
    first, value = _conversion(rng)
    second, result = _then(rng, value)
    q = f"{first}, then {second}."
    return Problem("units>arithmetic", q, number(result),
                   (("converter", first + "."), ("calculator", second[0].upper() + second[1:]
                                                 + ".")))


def _count_then_arithmetic(rng: random.Random) -> Problem:
    letter, word = _letter_and_word(rng)
    first = f"Count the letter '{letter}' in '{word}'"
    second, result = _then(rng, word.count(letter))
    q = f"{first}, then {second}."
    return Problem("count>arithmetic", q, number(result),
                   (("counter", first + "."), ("calculator", second[0].upper() + second[1:]
                                               + ".")))


GENERATORS: dict[str, Callable[[random.Random], Problem]] = {
    "arithmetic": _arithmetic, "reverse": _reverse, "count": _count, "dates": _dates,
    "units": _units, "units>arithmetic": _units_then_arithmetic,
    "count>arithmetic": _count_then_arithmetic,
}


def generate(family: str, seed: int) -> Problem:
    """The problem of `family` drawn from `seed` (the same seed, the same problem)."""
    return GENERATORS[family](random.Random(f"{family}:{seed}"))
