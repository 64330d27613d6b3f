"""What a benchmark task is: items, the question format, and a grader.

A task loads `Item`s (from a file, or from the Hugging Face Hub: `podium.tasks.hub`;
deterministic splits with seeds, PAPER.md §8.1), formats each as the question the Conductor and
workers see (answer tags and per-task instructions, PAPER.md §7.1), and grades a final answer
with a pure grader from `podium.scoring`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from podium.errors import ConfigError
from podium.scoring.base import Grade


@dataclass(frozen=True)
class Item:
    """One question of a task, with its reference answer (`gold`) and whatever else its
    grader needs (`meta`)."""

    id: str  # stable across runs: results are keyed on it
    question: str  # the raw question (formatted by Task.format)
    gold: Any  # the reference answer, in the task's own form
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Task(Protocol):
    """A benchmark: it loads items, formats a question and grades a final answer
    (`podium.tasks.get_task` builds one by name)."""

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


LAYOUT = ("one folder per benchmark, as docs/evaluation.md (\"Data\") lays out: "
          "gsm8k/test.jsonl, math500/test.jsonl, mmlu/test.jsonl, aime/aime24.jsonl, ...")


def data_dir(explicit: str | Path | None = None) -> Path | None:
    """The folder of offline benchmark files: the explicit path (`--data-dir`), else
    $PODIUM_DATA_DIR, else None (tasks then load from the Hugging Face Hub). A folder that is
    given must exist: scoring other data than was asked for would be a silent wrong result."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_dir():
            raise ConfigError(f"--data-dir {explicit}: no such folder. Give the folder that holds "
                              f"the benchmark files ({LAYOUT}).")
        return path
    env = os.environ.get("PODIUM_DATA_DIR")
    if env:
        if not Path(env).expanduser().is_dir():
            raise ConfigError(f"PODIUM_DATA_DIR={env}: no such folder. Point it at the folder "
                              f"that holds the benchmark files ({LAYOUT}).")
        return Path(env).expanduser()
    return None
