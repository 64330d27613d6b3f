"""What a benchmark task is: items, the question format, and a grader.

A task loads `Item`s from a data path (deterministic splits with seeds, PAPER.md §8.1), formats
each as the question the Conductor and workers see (answer tags and per-task instructions,
PAPER.md §7.1), and grades a final answer with a pure grader from `podium.scoring`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from podium.errors import ConfigError
from podium.scoring.base import Grade


@dataclass(frozen=True)
class Item:
    id: str  # stable across runs: results are keyed on it
    question: str  # the raw question (formatted by Task.format)
    gold: Any  # the reference answer, in the task's own form
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Task(Protocol):
    name: str

    def load(self, *, split: str = "test", n: int | None = None, seed: int = 0) -> list[Item]:
        """Items of `split` (the first `n` after a seeded shuffle when n is given)."""
        ...

    def format(self, item: Item) -> str:
        """The question as the Conductor and every worker see it."""
        ...

    async def grade(self, item: Item, response: str | None) -> Grade:
        """Grade a final answer; never raises for bad model output."""
        ...


def data_dir(explicit: str | Path | None = None) -> Path:
    """Where benchmark files live: the explicit path, else $PODIUM_DATA_DIR, else
    ../shared/data from the working directory or from the podium checkout. A path given
    explicitly (argument or environment) must exist: scoring other data than was asked for
    would be a silent wrong result."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_dir():
            raise ConfigError(f"--data-dir {explicit}: no such folder. Give the folder that holds "
                              "the benchmark files (see ../shared/data/README.md), or leave "
                              "--data-dir out to use $PODIUM_DATA_DIR or ../shared/data.")
        return path
    env = os.environ.get("PODIUM_DATA_DIR")
    if env:
        if not Path(env).expanduser().is_dir():
            raise ConfigError(f"PODIUM_DATA_DIR={env}: no such folder. Point it at the folder "
                              "that holds the benchmark files, or unset it to use "
                              "../shared/data.")
        return Path(env).expanduser()
    candidates: Sequence[Path] = (
        Path.cwd().parent / "shared" / "data",
        Path(__file__).resolve().parents[2].parent / "shared" / "data",
    )
    for path in candidates:
        if path.is_dir():
            return path
    raise ConfigError("No benchmark data directory found. Pass --data-dir DIR, set "
                      "PODIUM_DATA_DIR, or put the data in ../shared/data.")
