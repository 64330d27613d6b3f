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

Sub-pools (PAPER.md §9 leaves them open; podium's choices): a share `subpool.fraction` of the
rows gets one; its size is uniform in `k_min..k_max` (default 1..n), or, with probability
`group_prob`, it is one of the named groups (closed-only, open-only); the chosen workers are
shown under their original ids unless `run.subpool_ids = "reindexed"`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from podium.conductor import workflow_messages
from podium.config import Pool, RunSettings
from podium.errors import ConfigError
from podium.subpool import PoolView, make_view, sample_subpool
from podium.tasks import get_task
from podium.tasks.base import Item, Task
from podium.train.config import DataSection, SubpoolSection


@dataclass(frozen=True)
class TrainingData:
    rows: list[dict[str, Any]]
    tasks: dict[str, Task]  # by task name
    items: dict[tuple[str, str], Item]  # (task name, item id) -> item
    missing: dict[str, str] = field(default_factory=dict)  # task -> why it could not load

    def item(self, task: str, item_id: str) -> tuple[Task, Item]:
        return self.tasks[task], self.items[(task, item_id)]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows:
            out[row["task"]] = out.get(row["task"], 0) + 1
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


def _interleave(drawn: list[tuple[str, Item]]) -> list[tuple[str, Item]]:
    """Round-robin over (task, family): each block of consecutive rows has one of each kind
    while they last (balanced batches)."""
    kinds: dict[tuple[str, str], list[tuple[str, Item]]] = {}
    for name, item in drawn:
        kinds.setdefault((name, str(item.meta.get("family", ""))), []).append((name, item))
    return [row for block in zip_longest(*kinds.values()) for row in block if row is not None]


def view_of(pool: Pool, settings: RunSettings, workers: list[int]) -> PoolView:
    """The view a row's Conductor prompt shows (empty `workers`: the whole pool)."""
    return make_view(pool.workers, workers or None, settings.subpool_ids)


def build_data(spec: DataSection, subpool: SubpoolSection, pool: Pool,
               settings: RunSettings, *, strict: bool = True) -> TrainingData:
    """The shuffled rows of the mix. A task whose data cannot load raises its ConfigError, or,
    with `strict=False` (a dry run), is left out and named in `missing`."""
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
    rows = []
    for name, item in drawn:
        workers = _subpool(pool, subpool, rng)
        question = tasks[name].format(item)
        rows.append({"messages": workflow_messages(question, view_of(pool, settings, workers),
                                               settings),
                     "question": question, "task": name, "item": item.id, "workers": workers})
    return TrainingData(rows, tasks, items, missing)


def with_prompts(rows: list[dict[str, Any]], tokenizer: Any) -> list[dict[str, Any]]:
    """`rows` with `prompt`: the messages rendered by the policy's chat template, the final
    assistant message (the prefill) left open for the policy to continue."""
    return [{**row, "prompt": tokenizer.apply_chat_template(
        row["messages"], tokenize=False, continue_final_message=True,
        add_generation_prompt=False)} for row in rows]
