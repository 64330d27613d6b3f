"""Exploration rollouts: plans drawn at random, so that a group always compares plans.

GRPO learns only from reward differences inside a group of rollouts of one question. A small
Conductor samples the plans its prior favours, and on a hard id assignment that prior is far
from the right plan: on the gym the policy sends every question to one id within a few updates,
the groups stop differing and nothing more is learned (docs/gym.md). A chained question needs
three choices at once (the right first id, the right second id, the second step seeing the
first), which the untrained policy rarely samples together (none of 48 rollouts on the gym's
seed 5).

With `[rollout] explore = f`, a share f of each group's rollouts is sampled under a grammar that
holds the plan's *skeleton* (its worker ids and access values) to one drawn uniformly from
every skeleton the pool admits, distinct within the group; the subtasks are still the policy's
own. Every id then appears in every group whatever the policy prefers, so a group keeps reward
spread until the policy has learned which plan each question needs, and the right plan of a
chained question is tried about once in every 21 / (f x G) groups on the gym (21 skeletons of
one or two steps over three ids; 12 with `explore_plans = "live"`, below). The loss is TRL's,
on the tokens sampled: a drawn plan that pays is pushed up under the policy's own
probabilities. One that does not is left out of the loss (`[rollout] explore_wrong = "drop"`, the
default; the reward makes it unscorable), or pushed down like any other rollout (`"keep"`).

With `[rollout] explore_plans = "live"` (the default) only plans in which every step reaches the
answer are drawn: a step the last step does not see (a last step with access []) cannot change
the answer, so a plan with one is a shorter plan with a wasted call. On the gym that leaves 12
skeletons (3 one-step plans, 9 id pairs whose second step sees the first), and the chained
question's plan is drawn about once in 12 / (f x G) groups; `"all"` draws from all 21.

With `[rollout] explore_subtasks = "question"` the drawn plans' subtasks are held too: every step
gets the question itself (`question_subtask`: its first lines, as much as fits in
`max_subtask_chars`), the instruction that makes a worker who sees only its subtask behave as
one who sees the question. That is for workers that read only their subtask (the gym's subtask
mode): there a drawn plan pays only if its subtasks also carry the operands, which the untrained
policy rarely writes (the reverse family of docs/gym.md, runs S1-S2); a right drawn plan then
teaches the plan and the copying together. The policy's own rollouts still write their own.
Such a drawn rollout is fixed token for token by its grammar, so it is written, not sampled
(`ConstrainedRollout.written`).

Skeletons are uniform over plans, not over lengths: with many ids and steps most drawn plans
are long. The draw is seeded (`[grpo] seed`), so a run repeats.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from podium.conductor.grammar import OPENING
from podium.train.credit import token_ends

Skeleton = tuple[tuple[int, ...], tuple[str, ...]]


def count_skeletons(n_ids: int, max_steps: int, live: bool = False) -> list[int]:
    """How many skeletons there are of each length 1..max_steps: n^k ids, and [] or "all" for
    every step after the first (step 0 sees nothing in a root round); `live`, only those whose
    every step reaches the answer (a plan of two steps or more ends with "all")."""
    return [n_ids ** k * 2 ** max(k - 1 - live, 0) for k in range(1, max_steps + 1)]


def draw_skeletons(rng: random.Random, ids: Sequence[int], max_steps: int,
                   k: int, live: bool = False,
                   fits: Callable[[tuple[int, ...]], bool] | None = None) -> list[Skeleton]:
    """`k` skeletons drawn uniformly from all of `ids` up to `max_steps` (`live`: only those
    whose every step reaches the answer), distinct while there are enough of them (beyond
    that, repeats). With `fits` (a plan's ids within a budget, `run.hold_budget`), only plans
    that fit are kept; when too few fit to find them by drawing, the rest are one step of a
    worker that fits alone (or of the first id, when none does)."""
    ids = sorted(set(ids))
    counts = count_skeletons(len(ids), max_steps, live)
    total = sum(counts)
    out: list[Skeleton] = []
    seen: set[Skeleton] = set()
    tries = 0
    while len(out) < k:
        length = rng.choices(range(1, max_steps + 1), weights=counts)[0]
        access = ("[]",) + tuple(rng.choice(("[]", "all")) for _ in range(length - 1))
        if live and length > 1:
            access = access[:-1] + ("all",)
        skeleton = (tuple(rng.choice(ids) for _ in range(length)), access)
        tries += 1
        if fits is not None and not fits(skeleton[0]):
            if tries < 50 * k:
                continue
            alone = [i for i in ids if fits((i,))] or ids[:1]
            skeleton = ((rng.choice(alone),), ("[]",))
        elif skeleton in seen and len(seen) < total and tries < 50 * k:
            continue
        seen.add(skeleton)
        out.append(skeleton)
    return out


def explored_count(share: float, group: int) -> int:
    """How many of a group's `group` rollouts explore: share x group, halves rounded up."""
    return int(share * group + 0.5)


def explored_indices(pieces: Sequence[tuple[int, int]], share: float) -> list[list[int]]:
    """Which rollouts of each piece of a group (`podium.train.rollout.layout.pieces_of`: the group, or
    the part of it one process holds) explore: the first `explored_count` of the piece."""
    return [list(range(start, start + explored_count(share, length)))
            for start, length in pieces]


_SUBTASK = re.compile(r'"[^"\n]*"?')  # a subtask string, or its start where a cut ends it
_SUBTASKS, _ACCESS_LIST = "subtasks = [", "]\naccess_list"


def drawn_tokens(tokenizer: Any, completion_ids: Sequence[int], subtasks_held: bool) -> list[bool]:
    """Which tokens of an explored rollout's completion its draw chose, not the policy: every
    token of the plan (from the lists' opening, or the completion's start when the prefill
    opened them) that overlaps none of the subtask strings, which the policy writes, and the
    end token; with `subtasks_held` (`explore_subtasks = "question"`) the subtasks too, so
    every token of the plan. A cut completion is read as far as it goes."""
    ids = list(completion_ids)
    text = tokenizer.decode(ids, skip_special_tokens=True)
    opening = text.find(OPENING)
    plan = 0 if opening < 0 else opening + len(OPENING)
    spans: list[tuple[int, int]] = []
    begin = -1 if subtasks_held else text.find(_SUBTASKS, plan)
    if begin >= 0:
        begin += len(_SUBTASKS)
        end = text.find(_ACCESS_LIST, begin)
        end = len(text) if end < 0 else end
        spans = [(m.start() + begin, m.end() + begin) for m in _SUBTASK.finditer(text[begin:end])]
    out, start = [], 0
    for end in token_ends(tokenizer, ids):
        out.append(start >= plan and not any(a < end and start < b for a, b in spans))
        start = end
    return out


_NOT_IN_A_SUBTASK = re.compile(r'["\\:=“”‘’`]')  # what the grammar's subtask string excludes


def question_subtask(question: str, max_chars: int) -> str:
    """`question` as a subtask the workflow grammar admits: its lines joined while they fit in
    `max_chars` (the first one cut at a word if even it does not), the characters a subtask
    may not hold dropped, a capital first, padded to the grammar's 10 characters."""
    lines = [_NOT_IN_A_SUBTASK.sub("", x).strip() for x in question.splitlines()]
    lines = [x for x in lines if x]
    text = lines[0] if lines else "Answer it"
    for line in lines[1:]:
        if len(text) + 1 + len(line) > max_chars:
            break
        text += " " + line
    if len(text) > max_chars:  # cut at the last whole word that fits
        cut = text[:max_chars]
        text = cut.rsplit(" ", 1)[0] if " " in cut and text[max_chars] != " " else cut
    text = text[:1].upper() + text[1:]
    if not re.match("[A-Z]", text):
        text = ("Q " + text)[:max_chars]
    return text.rstrip().ljust(10, ".")
