"""Which workers the Conductor sees: the whole pool, a chosen subset, or a random one.

A `PoolView` is what one Conductor call is shown and how its ids map back to pool indices:

* `original` ids (default): the chosen workers keep their pool ids, e.g. `Model id 0, 2, 5`.
  Names are masked, so a trained Conductor knows each worker only by its id; renumbering
  would erase that. A workflow naming an id outside the view is a `bad_model_id` error.
* `reindexed` ids: the chosen workers are shown as `Model id 0..k-1` and the workflow's ids
  are mapped back to pool indices before it runs.

With a request's budget (`podium.conductor.budget`), a view's entries also carry how many of each
worker's calls the budget pays for, and `budget_line` says the budget, for a Conductor shown
them (`run.show_budget`); its `prices` (one call's list price per shown worker) let a
constrained Conductor's grammar hold the plan to the budget (`run.hold_budget`).

`sample_subpool` draws the random sub-pools of the paper's adaptive-worker fine-tune (§9):
k uniform in 1..n, or, with some probability, one of the named groups (e.g. closed-only).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from podium.conductor.budget import RequestBudget, calls_within, format_budget
from podium.conductor.prompt import PoolEntry
from podium.config import ModelSpec, RunSettings
from podium.errors import ConfigError
from podium.workflow.types import Workflow


@dataclass(frozen=True)
class PoolView:
    """The workers one Conductor call is shown, as it is shown them (ids, and with a budget
    each worker's affordable calls), and how those ids map back to pool indices."""

    entries: tuple[PoolEntry, ...]  # as shown to the Conductor
    to_pool: tuple[tuple[int, int], ...]  # (shown id, pool index)
    id_space: int  # parse ids against 0..id_space-1
    budget: float | None = None  # the request's budget (USD), when one is shown or held to
    prices: tuple[float, ...] | None = None  # one call's list price, per entry (with a budget)

    @property
    def budget_line(self) -> str | None:
        """The line above the models in a budget-showing prompt."""
        if not any(e.calls is not None for e in self.entries):
            return None
        return "Budget: " + ("none" if self.budget is None else format_budget(self.budget))

    @property
    def held_prices(self) -> dict[int, float] | None:
        """Each shown id's call price, when the view has a budget to hold a plan to."""
        if self.budget is None or self.prices is None:
            return None
        return dict(zip(self.shown_ids, self.prices, strict=True))

    @property
    def shown_ids(self) -> list[int]:
        return [e.id for e in self.entries]

    def to_pool_workflow(self, workflow: Workflow) -> Workflow:
        mapping = dict(self.to_pool)
        if all(k == v for k, v in mapping.items()):
            return workflow
        return Workflow(tuple(replace(s, worker=mapping[s.worker]) for s in workflow.steps))

    def pool_indices(self) -> list[int]:
        return [v for _, v in self.to_pool]


def make_view(workers: Sequence[ModelSpec], indices: Sequence[int] | None = None,
              ids: Literal["original", "reindexed"] = "original", *,
              budget: RequestBudget | None = None, calls_cap: int | None = None,
              held: bool = False) -> PoolView:
    """The view of `workers` restricted to pool `indices` (all of them when None). With
    `calls_cap` (the step limit; `run.show_budget`), each entry counts the calls `budget` pays
    for (no budget: the cap). With `held` (`run.hold_budget`) or `calls_cap`, the view keeps the
    budget and the shown workers' call prices."""
    chosen = list(range(len(workers))) if indices is None else list(dict.fromkeys(indices))
    if not chosen:
        raise ConfigError("A sub-pool needs at least one worker.")
    for i in chosen:
        if not 0 <= i < len(workers):
            raise ConfigError(f"Worker index {i} is not in the pool (0..{len(workers) - 1}).")
    shown = chosen if ids == "original" else list(range(len(chosen)))
    calls: list[int | None] = [None] * len(workers)
    prices = budget.call_prices(workers) if budget else (0.0,) * len(workers)
    if calls_cap is not None:
        amount = budget.amount if budget else None
        calls = [calls_within(amount, p, calls_cap) for p in prices]
    entries = tuple(PoolEntry(s, workers[i].name, workers[i].description, calls[i])
                    for s, i in zip(shown, chosen, strict=True))
    space = len(workers) if ids == "original" else len(chosen)
    kept = budget if calls_cap is not None or held else None
    return PoolView(entries, tuple(zip(shown, chosen, strict=True)), space,
                    kept.amount if kept is not None else None,
                    tuple(prices[i] for i in chosen) if kept is not None else None)


def settings_view(workers: Sequence[ModelSpec], settings: RunSettings,
                  indices: Sequence[int] | None = None,
                  budget: RequestBudget | None = None) -> PoolView:
    """The view a Conductor run under `settings` is shown: the sub-pool `indices` (None: the
    whole pool) with `settings.subpool_ids`, each worker's affordable calls when
    `settings.show_budget` is on, and the budget to hold the plan to with
    `settings.hold_budget`."""
    return make_view(workers, indices, settings.subpool_ids, budget=budget,
                     calls_cap=settings.max_steps if settings.show_budget else None,
                     held=settings.hold_budget)


def choose_workers(workers: Sequence[ModelSpec], names: Sequence[str]) -> list[int]:
    """Pool indices of the workers called `names` (as given to `--workers a,b,c`)."""
    index = {w.name: i for i, w in enumerate(workers)}
    unknown = [n for n in names if n not in index]
    if unknown:
        raise ConfigError(f"--workers names {unknown}, which the pool does not have; its "
                          f"workers are: {', '.join(index)}.")
    return [index[n] for n in names]


def sample_subpool(num_workers: int, rng: random.Random, *, k: int | None = None,
                   groups: Mapping[str, Sequence[int]] | None = None,
                   group_prob: float = 0.0) -> list[int]:
    """A random sub-pool (sorted pool indices): with probability `group_prob` one of `groups`,
    otherwise `k` workers (k uniform in 1..num_workers when not given)."""
    if num_workers < 1:
        raise ValueError("num_workers must be at least 1")
    if groups and rng.random() < group_prob:
        return sorted(rng.choice(list(groups.values())))
    size = k if k is not None else rng.randint(1, num_workers)
    if not 1 <= size <= num_workers:
        raise ValueError(f"k must be in 1..{num_workers}")
    return sorted(rng.sample(range(num_workers), size))
