"""Training rows: the task mix, the sub-pool each question is shown, and the exact prompt.

Each task of the mix loads its training split (`split = "train"` by default: the reference
60/20/20 splits, so a training item is never one of the test items `podium eval` scores), takes
`n` items with its own seed, and the concatenation is shuffled with `data.shuffle_seed` (the
paper: 240 items per task with seeds 42, 44, 45, 46, shuffled with 47; PAPER.md §8.1). With
`data.balance` the shuffled rows are interleaved round-robin by task and gym family, so each
step can see one question of each kind (balanced batches).

A row holds the Conductor's prompt built exactly as at inference (`workflow_messages`: the run
settings' template, ending with the assistant prefill), the formatted question the workers
see, the task and item it grades against, and the pool indices of its sub-pool (empty: the
whole pool). `with_prompts` renders each row's messages with the policy's chat template into
the text prompt TRL generates from: the template is applied here, continuing the prefill,
because TRL 1.16's GRPO trainer renders a conversational prompt with a generation prompt,
which would close the prefill and start a new turn. The sub-pool is drawn once per row and stored with it, so the prompt the
policy saw and the workflow the reward runs agree.

Budgets (`[budget]`, beyond the paper): each row draws a budget and a price list
(`draw_budget`); the prompt shows them with `run.show_budget`, and the row carries them, typed,
to the reward, which prices the plan against them. A row is a `podium.train.rollout.row.Row`.

Sub-pools (PAPER.md §9 leaves them open; podium's choices): a share `subpool.fraction` of the
rows gets one; its size is uniform in `k_min..k_max` (default 1..n), or, with probability
`group_prob`, it is one of the named groups (closed-only, open-only); the chosen workers are
shown under their original ids unless `run.subpool_ids = "reindexed"`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import zip_longest
from typing import Any

from podium.conductor import workflow_messages
from podium.conductor.budget import RequestBudget, call_prices
from podium.conductor.view import PoolView, sample_subpool, settings_view
from podium.config import Pool, RunSettings
from podium.errors import ConfigError
from podium.tasks import get_task
from podium.tasks.base import Item, Task
from podium.train.config import BudgetSection, DataSection, SubpoolSection
from podium.train.rollout.row import Row


@dataclass(frozen=True)
class TrainingData:
    rows: list[Row]
    tasks: dict[str, Task]  # by task name
    items: dict[tuple[str, str], Item]  # (task name, item id) -> item
    missing: dict[str, str] = field(default_factory=dict)  # task -> why it could not load

    def item(self, task: str, item_id: str) -> tuple[Task, Item]:
        return self.tasks[task], self.items[(task, item_id)]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows:
            out[row.task] = out.get(row.task, 0) + 1
        return out

    def close(self) -> None:
        for task in self.tasks.values():
            close = getattr(task, "close", None)
            if close:
                close()


def _subpool(pool: Pool, spec: SubpoolSection, rng: random.Random) -> list[int]:
    if spec.fraction <= 0 or rng.random() >= spec.fraction:
        return []
    n = len(pool.workers)
    k_max = min(spec.k_max or n, n)
    k = rng.randint(min(spec.k_min, k_max), k_max)
    groups = {name: list(ids) for name, ids in spec.groups.items()}
    return sample_subpool(n, rng, k=k, groups=groups, group_prob=spec.group_prob)


def draw_budget(spec: BudgetSection, pool: Pool, rng: random.Random) -> RequestBudget | None:
    """A row's budget (`[budget]`): an amount from the list or the range, and the pool's call
    prices scaled by a drawn factor and, with chance `price_shuffle`, permuted among the
    workers (None: no [budget])."""
    if not spec.on:
        return None
    if spec.amounts:
        amount = rng.choice(spec.amounts)
    else:
        lo, hi = spec.range  # type: ignore[misc]
        amount = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    lo, hi = spec.price_scale
    scale = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    prices = [p * scale for p in call_prices(pool.workers)]
    names = [w.name for w in pool.workers]
    unknown = sorted({n for pair in spec.keep_order for n in pair} - set(names))
    if unknown:
        raise ConfigError(f"budget.keep_order names {unknown}, which the pool does not "
                          f"have; its workers are: {', '.join(names)}.")
    if rng.random() < spec.price_shuffle:
        pairs = [(names.index(a), names.index(b)) for a, b in spec.keep_order]
        for _ in range(100):
            shuffled = rng.sample(prices, len(prices))
            if all(shuffled[a] <= shuffled[b] for a, b in pairs):
                prices = shuffled
                break
    return RequestBudget(amount, tuple(prices))


def _interleave(drawn: list[tuple[str, Item]]) -> list[tuple[str, Item]]:
    """Round-robin over (task, family): each block of consecutive rows has one of each kind
    while they last (balanced batches)."""
    kinds: dict[tuple[str, str], list[tuple[str, Item]]] = {}
    for name, item in drawn:
        kinds.setdefault((name, str(item.meta.get("family", ""))), []).append((name, item))
    return [row for block in zip_longest(*kinds.values()) for row in block if row is not None]


def view_of(pool: Pool, settings: RunSettings, workers: Sequence[int],
            budget: RequestBudget | None = None) -> PoolView:
    """The view a row's Conductor prompt shows (empty `workers`: the whole pool; `budget`:
    the row's, shown with `run.show_budget`)."""
    return settings_view(pool.workers, settings, list(workers) or None, budget)


def build_data(spec: DataSection, subpool: SubpoolSection, pool: Pool,
               settings: RunSettings, *, strict: bool = True,
               budget: BudgetSection | None = None) -> TrainingData:
    """The shuffled rows of the mix. A task whose data cannot load raises its ConfigError, or,
    with `strict=False` (a dry run), is left out and named in `missing`. With `budget`, each
    row draws its budget and price list (`draw_budget`)."""
    tasks: dict[str, Task] = {}
    items: dict[tuple[str, str], Item] = {}
    drawn: list[tuple[str, Item]] = []
    missing: dict[str, str] = {}
    for t in spec.tasks:
        try:
            task = tasks.get(t.name) or get_task(t.name, **t.options)
            loaded = task.load(split=t.split, n=t.n, seed=t.seed)
        except ConfigError as exc:
            if strict:
                raise
            missing[t.name] = str(exc)
            continue
        tasks[t.name] = task
        for item in loaded:
            items[(t.name, item.id)] = item
            drawn.append((t.name, item))
    random.Random(spec.shuffle_seed).shuffle(drawn)
    if spec.balance:
        drawn = _interleave(drawn)
    rng = random.Random(subpool.seed)
    budget_rng = random.Random(budget.seed if budget else 0)
    rows = []
    for name, item in drawn:
        workers = _subpool(pool, subpool, rng)
        request = draw_budget(budget, pool, budget_rng) if budget else None
        question = tasks[name].format(item)
        view = view_of(pool, settings, workers, request)
        rows.append(Row(workflow_messages(question, view, settings), question, name, item.id,
                        tuple(workers), request))
    return TrainingData(rows, tasks, items, missing)


def with_prompts(rows: list[Row], tokenizer: Any) -> list[Row]:
    """`rows` with `prompt`: the messages rendered by the policy's chat template, the final
    assistant message (the prefill) left open for the policy to continue."""
    return [replace(row, prompt=tokenizer.apply_chat_template(
        row.messages, tokenize=False, continue_final_message=True,
        add_generation_prompt=False)) for row in rows]
