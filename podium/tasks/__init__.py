"""Benchmarks: one module per task (load items, format the question, grade the answer).

`get_task("math500", grading="legacy")` builds a task by name (`TASKS` lists them); a name
"jsonl:FILE" (or "csv:FILE", "json:FILE") builds a `GenericTask` over that file. Task modules
are imported on first use, so importing this package stays cheap.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from podium.errors import ConfigError
from podium.tasks.base import Item, Task, data_dir

_SPECS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gsm8k": ("gsm8k", "GSM8KTask", {}),
    "math500": ("math500", "Math500Task", {}),
    "mmlu": ("mmlu", "MMLUTask", {}),
    "aime24": ("aime", "AIMETask", {"year": 2024}),
    "aime25": ("aime", "AIMETask", {"year": 2025}),
    "humaneval": ("humaneval", "HumanEvalTask", {}),
    "bigcodebench": ("bigcodebench", "BigCodeBenchTask", {"mode": "complete"}),
    "bigcodebench-instruct": ("bigcodebench", "BigCodeBenchTask", {"mode": "instruct"}),
    "livecodebench": ("livecodebench", "LiveCodeBenchTask", {}),
    "gpqa": ("gpqa", "GPQATask", {}),
    "rlpr": ("rlpr", "RLPRTask", {}),
    "gym": ("gym.task", "GymTask", {}),
}

FILE_PREFIXES = ("jsonl:", "json:", "csv:")


def _task_class(module: str, cls: str) -> type:
    return getattr(importlib.import_module(f"podium.tasks.{module}"), cls)


def _build(name: str, cls: type, options: dict[str, Any]) -> Task:
    accepted = {f.name for f in fields(cls) if f.init}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ConfigError(f"task {name!r} has no option(s) {', '.join(unknown)}; it accepts "
                          f"{', '.join(sorted(accepted))}")
    return cls(**options)


def _factory(name: str, module: str, cls: str, preset: dict[str, Any]) -> Callable[..., Task]:
    def make(**options: Any) -> Task:
        return _build(name, _task_class(module, cls), {**preset, **options})

    make.__name__ = f"make_{module}"
    make.__doc__ = f"Build the {name!r} task (podium.tasks.{module}.{cls})."
    return make


TASKS: dict[str, Callable[..., Task]] = {
    name: _factory(name, module, cls, preset) for name, (module, cls, preset) in _SPECS.items()
}


def get_task(name: str, **options: Any) -> Task:
    """The task called `name`, built with `options` (ConfigError names the valid choices)."""
    for prefix in FILE_PREFIXES:
        if name.startswith(prefix):
            path = name[len(prefix):]
            if not path:
                raise ConfigError(f"task {name!r}: give a file after {prefix!r}")
            from podium.tasks.generic import GenericTask

            return _build(name, GenericTask, {"path": path, **options})
    factory = TASKS.get(name)
    if factory is None:
        raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}, or "
                          "jsonl:FILE / csv:FILE for a generic question/answer file")
    return factory(**options)


# Evaluation presets: per task, the split and options that make a run comparable with a
# published table. "paper" = the reference code's test subsets and graders (PAPER.md §11, D19):
# MMLU's 1,531-question subset, RLPR's test split capped at 2,000, the whole LiveCodeBench
# shard, the legacy MATH normaliser, and the reference's letter scan and LCB substring screen.
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "paper": {
        "mmlu": {"split": "paper_test", "legacy": True},
        "math500": {"split": "test", "grading": "legacy"},
        "rlpr": {"split": "paper_test"},
        "livecodebench": {"split": "all", "legacy_blacklist": True},
    },
}


def preset_for(preset: str | None, task: str) -> tuple[str | None, dict[str, Any]]:
    """(split, task options) that `preset` sets for `task`; (None, {}) when it sets none."""
    if preset is None:
        return None, {}
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    options = dict(PRESETS[preset].get(task, {}))
    return options.pop("split", None), options


def task_options(name: str) -> dict[str, Any]:
    """The options a named task accepts, with their defaults (for help texts)."""
    if name not in _SPECS:
        raise ConfigError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}")
    module, cls, preset = _SPECS[name]
    signature = inspect.signature(_task_class(module, cls))
    return {p.name: p.default for p in signature.parameters.values() if p.name not in preset}


__all__ = ["PRESETS", "TASKS", "Item", "Task", "data_dir", "get_task", "preset_for",
           "task_options"]
