"""Plumbing every task shares: the reference splits, seeded samples, file readers, the
answer-format line, `TaskBase` (the data source: a file or the Hub; cached items; split/n/seed
loading) and `ChoiceTask` (the four-option question format and grader of MMLU and GPQA).

Splits follow the reference code (PAPER.md §8.1): shuffle `range(n)` with `random.Random(42)`;
test is the first 20%, valid the next 20%, train the rest. Files that are a benchmark's whole
test set (AIME, GPQA, HumanEval, BigCodeBench) have no held-out split: "test" is every item.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from podium.errors import ConfigError
from podium.scoring.base import Grade
from podium.tasks.base import LAYOUT, Item, data_dir
from podium.tasks.hub import HubSource, Rows, hub_rows

T = TypeVar("T")

ANSWER_FORMAT = ("Think it through inside <idea></idea>, then give only the final answer "
                 "inside <answer></answer>.")

LETTERS = "ABCD"
CHOICE_RULES = ("Answer rules: exactly one option is correct. In the answer tags, write only its "
                "letter (A, B, C or D): no option text, no punctuation.")

HOLDOUT_SPLITS = ("train", "valid", "test")
SPLIT_ALIASES = {"validation": "valid", "val": "valid", "dev": "valid"}


def split_indices(n: int, split: str, seed: int = 42) -> list[int]:
    """Indices of `split` among `n` items, in shuffled order: shuffle range(n) with
    random.Random(seed); test = the first n//5, valid = the next n//5, train = the rest;
    "all" = range(n) in file order."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    split = SPLIT_ALIASES.get(split, split)
    if split == "all":
        return list(range(n))
    if split not in HOLDOUT_SPLITS:
        raise ConfigError(f"unknown split {split!r}: use one of train, valid, test, all")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    fifth = n // 5  # == int(0.2 * n) for every n: 500 -> 100/100/300, 400 -> 80/80/240
    if split == "test":
        return order[:fifth]
    if split == "valid":
        return order[fifth:2 * fifth]
    return order[2 * fifth:]


def sample(items: Sequence[T], n: int | None, seed: int) -> list[T]:
    """The first `n` of `items` after a random.Random(seed) shuffle; all items, in their
    order, when n is None."""
    if n is None:
        return list(items)
    if n < 0:
        raise ConfigError(f"n must be >= 0, got {n}")
    shuffled = list(items)
    random.Random(seed).shuffle(shuffled)
    return shuffled[:n]


def stable_hash(text: str, length: int = 12) -> str:
    """A short, run-independent digest (for ids of records that carry none)."""
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:length]


def _open_text(path: Path) -> io.TextIOBase:
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")  # noqa: SIM115


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl / .jsonl.gz / .json (a list, or {"data": [...]}) / .csv / .csv.gz file
    (or .parquet when pyarrow is installed), as dicts in file order."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"data file {path} does not exist: pass an existing file with path=")
    name = path.name.lower()
    stem = name[:-3] if name.endswith(".gz") else name
    try:
        if stem.endswith((".jsonl", ".ndjson")):
            rows = []
            with _open_text(path) as fh:
                for number, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise ConfigError(f"{path} line {number}: not valid JSON ({exc.msg}, "
                                          f"column {exc.colno}). Fix or delete that line.") \
                            from None
                    except RecursionError:
                        raise ConfigError(f"{path} line {number}: JSON nested too deeply to "
                                          "read. Fix or delete that line.") from None
        elif stem.endswith(".json"):
            with _open_text(path) as fh:
                data = json.load(fh)
            if isinstance(data, dict) and isinstance(data.get("data"), list):
                data = data["data"]
            if not isinstance(data, list):
                raise ConfigError(f"{path}: a .json data file must hold a list of records")
            rows = data
        elif stem.endswith((".csv", ".tsv")):
            with _open_text(path) as fh:
                rows = list(csv.DictReader(fh, delimiter="\t" if stem.endswith(".tsv") else ","))
        elif stem.endswith(".parquet"):
            try:
                import pyarrow.parquet as pq
            except ImportError as exc:
                raise ConfigError(f"{path}: reading parquet needs pyarrow (`pip install "
                                  "pyarrow`), or convert the file to JSONL") from exc
            rows = pq.read_table(path).to_pylist()
        else:
            raise ConfigError(f"{path}: unknown data format; use .jsonl, .jsonl.gz, .json, "
                              ".csv or .parquet")
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
    except RecursionError:
        raise ConfigError(f"{path}: JSON nested too deeply to read") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}). Save it "
                          "as UTF-8, e.g. `iconv -f latin1 -t utf-8`.") from None
    bad = next((i for i, row in enumerate(rows) if not isinstance(row, dict)), None)
    if bad is not None:
        raise ConfigError(f"{path}: record {bad} is not an object")
    return rows


def check_unique_ids(items: Iterable[Item], where: str) -> None:
    seen: set[str] = set()
    for item in items:
        if item.id in seen:
            raise ConfigError(f"{where}: item id {item.id!r} occurs more than once")
        seen.add(item.id)


def default_limits(limits: Any = None) -> Any:
    """`limits` as sandbox `Limits`: given ones, a dict of their fields, or the default."""
    from podium.scoring.sandbox import Limits

    if limits is None:
        return Limits()
    if isinstance(limits, dict):
        try:
            return Limits(**limits)
        except TypeError as exc:
            raise ConfigError(f"bad sandbox limits {limits!r}: {exc}") from exc
    return limits


def no_answer() -> Grade:
    return Grade.of(False, None, "no_answer")


@dataclass
class TaskBase:
    """Protocol plumbing: subclasses set `name` and `default_file`, and implement
    `rows_to_items(rows, where)`, `format(item)` and `grade(item, response)`.

    Where the items come from, first match wins: `path` (the only positional argument; every
    option is keyword-only); the task's `default_file` under `data_dir` (itself defaulting to
    $PODIUM_DATA_DIR); the task's Hugging Face Hub dataset (`hub_source()`, at its pinned
    commit; `podium.tasks.hub`). The offline file and the Hub rows give the same items.
    `holdout = True` gives the 60/20/20 reference splits; otherwise the whole file is the test
    set ("test" and "all" both return every item).
    """

    path: str | Path | None = None
    data_dir: str | Path | None = field(default=None, kw_only=True)
    name: str = field(default="", kw_only=True)
    _items: list[Item] | None = field(default=None, init=False, repr=False, compare=False)

    default_file: ClassVar[str] = ""
    holdout: ClassVar[bool] = False

    # -- data --------------------------------------------------------------------------
    def hub_source(self) -> HubSource | None:
        """The task's dataset on the Hugging Face Hub; None when it has none."""
        return None

    def local_path(self) -> Path | None:
        """`path`, else `default_file` under the data folder; None when neither is given."""
        if self.path is not None:
            path = Path(self.path).expanduser()
            if not path.exists():
                raise ConfigError(f"{self.name}: data path {path} does not exist")
            return path
        root = data_dir(self.data_dir)
        if root is None:
            return None
        if not self.default_file:
            raise ConfigError(f"{self.name}: no data file is available offline; pass "
                              "path=FILE")
        path = root / self.default_file
        if not path.exists():
            raise ConfigError(f"{self.name}: {path} does not exist; pass path=FILE or a data "
                              "directory that holds it")
        return path

    def hub_rows(self, split: str | None = None) -> Rows:
        """Rows of the task's Hub dataset (of `split`, default the source's own), shaped as
        the offline file's rows."""
        source = self.hub_source()
        if source is None:
            raise ConfigError(f"{self.name}: no data given. Pass path=FILE, or --data-dir DIR "
                              f"(or set PODIUM_DATA_DIR) to a folder with {LAYOUT}")
        return hub_rows(source, task=self.name, split=split, offline_fix=self.offline_fix())

    def offline_fix(self) -> str:
        """How to give the data without the Hub (the end of a Hub error)."""
        return (f"pass --data-dir DIR (or set PODIUM_DATA_DIR) to a folder holding "
                f"{self.default_file} (docs/evaluation.md, \"Data\")")

    def rows_to_items(self, rows: Rows, where: str | Path) -> list[Item]:
        """Items from the offline file's rows (`where` names their source in errors)."""
        raise NotImplementedError(f"{type(self).__name__} must define rows_to_items or items")

    def read_items(self, path: Path) -> list[Item]:
        """Every item of the file at `path`."""
        return self.rows_to_items(read_records(path), path)

    def items(self) -> list[Item]:
        """Every item, in canonical order (read once, then cached)."""
        if self._items is None:
            path = self.local_path()
            if path is not None:
                items = self.read_items(path)
            else:
                source = self.hub_source()
                items = self.rows_to_items(self.hub_rows(),
                                           source.describe() if source else self.name)
            check_unique_ids(items, self.name)
            self._items = items
        return self._items

    def split_items(self, split: str) -> list[Item]:
        items = self.items()
        split = SPLIT_ALIASES.get(split, split)
        if split == "all":
            return list(items)
        if self.holdout:
            return [items[i] for i in split_indices(len(items), split)]
        if split == "test":
            return list(items)
        raise ConfigError(f"{self.name}: split {split!r} does not exist; the whole file is the "
                          "test set (use split='test' or 'all')")

    def load(self, *, split: str = "test", n: int | None = None, seed: int = 0) -> list[Item]:
        return sample(self.split_items(split), n, seed)

    # -- protocol ----------------------------------------------------------------------
    def format(self, item: Item) -> str:  # every task module defines these two
        raise NotImplementedError(f"{type(self).__name__} must define format")

    async def grade(self, item: Item, response: str | None) -> Grade:
        raise NotImplementedError(f"{type(self).__name__} must define grade")

    def skip_reason(self, item: Item) -> str | None:
        """Why `item` cannot be graded here (reported as skipped, not failed); None if it can."""
        return None

    def close(self) -> None:
        """Release resources a task holds (process pools); safe to call more than once."""


@dataclass(kw_only=True)
class ChoiceTask(TaskBase):
    """A four-option multiple-choice task (MMLU, GPQA): each item has `meta["choices"]` and a
    gold letter. Subclasses give the line that introduces the question (`header`); the options
    follow as "A. text" lines, then the choice rules. Grading wants the letter in the answer
    tags; `legacy=True` reproduces the reference's first-letter scan (D12)."""

    legacy: bool = False

    def header(self, item: Item) -> str:
        raise NotImplementedError(f"{type(self).__name__} must define header")

    def format(self, item: Item) -> str:
        return compose(self.header(item), item.question, format_choices(item.meta["choices"]),
                       CHOICE_RULES)

    async def grade(self, item: Item, response: str | None) -> Grade:
        from podium.scoring.choice import grade_choice

        return grade_choice(response, item.gold, letters=LETTERS, legacy=self.legacy,
                            require_tag=True)


def format_choices(choices: Sequence[str], letters: str = LETTERS) -> str:
    """Options as "A. text" lines."""
    return "\n".join(f"{letter}. {text}" for letter, text in zip(letters, choices, strict=False))


def compose(*parts: str | None) -> str:
    """Join non-empty blocks with blank lines; the answer-format line always comes last."""
    return "\n\n".join(p.strip("\n") for p in (*parts, ANSWER_FORMAT) if p and p.strip())
