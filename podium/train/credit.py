"""Live-step credit: leave out of the loss the tokens the reward cannot depend on.

GRPO gives every token of a rollout the rollout's advantage. In a workflow, a step that is not
the last and that the last step does not see (directly, or through a step it sees) cannot
change the final answer: its worker, subtask and access entry are free riders. For a one-step
question answered by the second step of a two-step plan, the first step's worker is reinforced
whenever the plan is right, whatever it is, so it drifts towards one worker for every question;
on the gym that drift is what keeps the chained family out of reach (docs/gym.md).

With `[rollout] credit = "live"`, the tokens that write a dead step's id, subtask and access entry
are masked out of the loss (TRL's `env_mask` from the rollout function); everything else,
including the tokens that decide how many steps there are, keeps the rollout's advantage. The
mask is read from the completion's text, which the Conductor's grammar holds to

    [reasoning "\\n"] model_id = [i, ...]\\nsubtasks = ["...", ...]\\naccess_list = [a, ...]

with each access entry [] or "all", so it needs `[rollout] constrained = true`. A completion that
does not read as that (never, under the grammar) is left whole.

With `[rollout] subtask_weight = w` (live credit) a live step's subtask tokens count w times
as much as the plan's tokens (TRL averages the loss over the weights, so a fractional
`env_mask` is a weight): for workers that read only their subtask, where a plan is a few
tokens among some thirty of subtask text that the reward also depends on. Measured once on the
gym's subtask mode (docs/gym.md, run S3), w = 0.25 did worse than w = 1.

With `[rollout] credit = "plan"`, the subtask texts of every step are left out too, so the loss
is on the plan's decisions alone (ids, access values, the number of steps). It is for pools
whose workers read the original question, not the subtask (the gym's question mode): there a
subtask cannot change the reward, yet its tokens, sampled at temperature 1 and mostly
improbable, have large log-probability gradients, and under gradient clipping they crowd out
the few tokens that decide the plan (docs/gym.md, runs X and Y: the reverse family learned in
25 steps instead of 40).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from typing import Any

from podium.conductor.grammar import OPENING

_STRING = re.compile(r'"[^"]*"')
_ACCESS = re.compile(r'\[\]|"all"')
_ID = re.compile(r"[0-9]+")


def step_spans(text: str) -> tuple[list[list[tuple[int, int]]], list[tuple[int, ...]]] | None:
    """For a grammar-held completion (the prefill's OPENING optional): each step's character
    spans (id, subtask, access entry) and the earlier steps it sees (as
    `Workflow.dependencies()` gives them); None when the text is not in the grammar's
    shape."""
    start = text.find(OPENING)
    start = 0 if start < 0 else start + len(OPENING)
    ids_end = text.find("]", start)
    sub_start = text.find("subtasks = [", ids_end)
    acc_start = text.find("access_list = [", sub_start)
    if min(ids_end, sub_start, acc_start) < 0:
        return None
    ids = [(m.start() + start, m.end() + start) for m in _ID.finditer(text[start:ids_end])]
    subs = [(m.start() + sub_start, m.end() + sub_start)
            for m in _STRING.finditer(text[sub_start:acc_start])]
    accs = list(_ACCESS.finditer(text, acc_start))
    if not ids or not len(ids) == len(subs) == len(accs):
        return None
    spans = [[ids[i], subs[i], accs[i].span()] for i in range(len(ids))]
    return spans, [tuple(range(i)) if a.group(0) == '"all"' else () for i, a in enumerate(accs)]


def dead_steps(dependencies: Sequence[Sequence[int]]) -> set[int]:
    """Steps the last step does not depend on: not the last, and not seen by a live step
    (`dependencies[i]`: the earlier steps step i sees, as `Workflow.dependencies()`)."""
    live = {len(dependencies) - 1}
    for i in range(len(dependencies) - 1, -1, -1):
        if i in live:
            live.update(dependencies[i])
    return set(range(len(dependencies))) - live


def live_mask(tokenizer: Any, completion_ids: Sequence[int],
              subtask_weight: float = 1.0) -> list[float]:
    """Each token's weight in the loss: 0 for a token that overlaps a dead step's id, subtask
    or access entry, `subtask_weight` for one in a live step's subtask (0: plan credit), 1
    otherwise."""
    ids = list(completion_ids)
    found = step_spans(tokenizer.decode(ids, skip_special_tokens=True))
    if found is None:
        return [1] * len(ids)
    spans, dependencies = found
    gone = dead_steps(dependencies)
    weighted: list[tuple[int, int, float]] = [(a, b, 0) for i in gone for a, b in spans[i]]
    if subtask_weight != 1:
        weighted += [(*spans[i][1], subtask_weight) for i in range(len(spans)) if i not in gone]
    if not weighted:  # every step live, subtasks at full weight
        return [1] * len(ids)
    weighted.sort()  # the spans do not overlap: sorted by start, they are sorted by end too
    span_ends = [b for _, b, _ in weighted]
    mask: list[float] = []
    begin = 0
    for end in token_ends(tokenizer, ids):
        weight: float = 1
        i = bisect.bisect_right(span_ends, begin)  # the first span ending past begin
        while i < len(weighted) and weighted[i][0] < end:
            weight = min(weight, weighted[i][2])
            i += 1
        mask.append(weight)
        begin = end
    return mask


def token_ends(tokenizer: Any, ids: list[int]) -> list[int]:
    """`len(decode(ids[:k + 1]))` for every k (special tokens skipped): where each token's
    text ends in the completion's text.

    Decoded a piece at a time from the last clean boundary (a piece that does not end in a
    partial character, U+FFFD), so in time linear in the completion's length; decoding every
    prefix took 26 ms for 350 tokens and grows with the square. A tokenizer whose pieces do
    not join into the whole text (one that drops a piece's leading space, say) gets every
    prefix decoded instead."""
    def text(part: list[int]) -> str:
        return tokenizer.decode(part, skip_special_tokens=True)

    ends, pieces, anchor, base, piece = [], [], 0, 0, ""
    for k in range(len(ids)):
        piece = text(ids[anchor:k + 1])
        ends.append(base + len(piece))
        if not piece.endswith("\ufffd"):
            pieces.append(piece)
            anchor, base, piece = k + 1, ends[-1], ""
    if "".join(pieces) + piece != text(ids):
        return prefix_ends(tokenizer, ids)
    return ends


def prefix_ends(tokenizer: Any, ids: list[int]) -> list[int]:
    """What `token_ends` gives, by decoding every prefix: time that grows with the square of
    the length."""
    return [len(tokenizer.decode(ids[:k + 1], skip_special_tokens=True))
            for k in range(len(ids))]
