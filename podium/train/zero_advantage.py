"""Completions with no advantage left out of the loss's forward and backward passes.

Under GRPO's clipped loss with no KL term (`beta = 0`) and no entropy bonus, a completion whose
advantage is 0 adds exactly nothing to the gradient: its per-token loss is
`-min(r x 0, clip(r) x 0) = 0`. TRL still runs the policy forward and backward over it. On the
gym most completions are such: a wrong drawn plan is unscorable (advantage 0, `explore_wrong =
"drop"`), and a group whose rollouts all score the same has no spread; on a CPU the forward and
backward passes are most of a step once drawn plans are written rather than sampled.

`active_rows` takes one micro-batch as TRL hands it to its loss and returns the rows that carry
an advantage, with the completion columns that are padding in all of them cut off, and the
factor that makes the loss over those rows equal the loss over the whole micro-batch (the loss
types normalise by the micro-batch's completion tokens, by its rows, or by a count fixed for the
whole generation batch). The gradient is the one TRL computes, to float rounding; the logged
entropy and clip ratios are then over the rows that carry an advantage. `PodiumGRPOTrainer`
(`podium.train.grpo`) applies it, and falls back to TRL's own loss wherever the shortcut is not
exact: a KL term, an entropy bonus, an auxiliary loss, advantages per token, or inputs it does
not know (images).

Under data parallelism each process's loss runs TRL's collectives (a gather of one clip ratio
per row), which need the same shape on every process, while the processes' micro-batches hold
different numbers of rows with an advantage. So the processes agree on the largest such count
(one small all-gather per micro-batch) and each passes that many rows: its own rows with an
advantage, filled up with rows without one (which add nothing to the gradient, and are counted
in the factor). Every process then takes the same branch: all rows, the agreed count, or one
row times 0 when no process has anything to learn.
"""

from __future__ import annotations

from typing import Any

# with `[grpo] overlap_loss = "decoupled"`, the generating policy's log-probabilities
GENERATING = "podium_generating_logps"
# the keys of a text-only micro-batch (TRL's _generate_and_score_completions, and podium's)
KNOWN = frozenset({"prompt_ids", "prompt_mask", "completion_ids", "completion_mask",
                   "advantages", "num_items_in_batch", "old_per_token_logps",
                   "sampling_per_token_logps", "ref_per_token_logps",
                   "importance_sampling_ratio", "tool_mask", GENERATING})
PROMPT = frozenset({"prompt_ids", "prompt_mask"})


def cuttable(inputs: dict[str, Any]) -> bool:
    """Whether `inputs` is a micro-batch this module knows how to cut (text only, one
    advantage per row)."""
    advantages = inputs.get("advantages")
    return not set(inputs) - KNOWN and advantages is not None and advantages.dim() == 1


def active_rows(inputs: dict[str, Any], loss_type: str, rows: int | None = None
                ) -> tuple[dict[str, Any] | None, float] | None:
    """(the rows of `inputs` with a non-zero advantage, the loss factor), (None, 0.0) when no
    row has one, or None when `inputs` should go to the loss unchanged (every row has an
    advantage, or the micro-batch holds something this does not know how to cut).

    `rows` asks for that many rows (at least the ones with an advantage): the others are
    filled with rows without one, which add nothing to the gradient. Data-parallel processes
    pass the largest count of any of them, so that every process's loss hands TRL's
    collectives tensors of one shape."""
    if not cuttable(inputs):
        return None
    keep = inputs["advantages"] != 0
    rows = int(keep.sum()) if rows is None else rows
    if rows >= len(keep):
        return None
    if rows == 0:
        return None, 0.0
    for i in (~keep).nonzero().flatten().tolist()[:rows - int(keep.sum())]:
        keep[i] = True  # filler: no advantage, no gradient, one more row of the agreed shape
    mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
    if loss_type == "bnpo":  # token mean over the micro-batch: the kept rows' share of tokens
        scale = float(mask[keep].sum()) / max(float(mask.sum()), 1.0)
    elif loss_type in ("grpo", "dr_grpo"):  # a mean over the micro-batch's rows
        scale = float(keep.sum()) / len(keep)
    elif loss_type == "dapo":  # normalised by num_items_in_batch, fixed for the whole batch
        scale = 1.0
    else:
        return None
    return take_rows(inputs, keep), scale


def take_rows(inputs: dict[str, Any], keep: Any) -> dict[str, Any]:
    """The rows of a micro-batch where the boolean tensor `keep` is true, without the completion
    columns that are padding in all of them (cutting them changes no earlier position's
    logits; the prompts keep their left padding, so every token keeps its position)."""
    n, columns = inputs["completion_mask"].shape
    used = inputs["completion_mask"][keep].sum(0).nonzero()
    width = int(used.max()) + 1 if len(used) else 1
    out = {}
    for key, value in inputs.items():
        if _per_row(value, n):
            value = value[keep]
            if key not in PROMPT and value.dim() == 2 and value.size(1) == columns:
                value = value[:, :width]
        out[key] = value
    return out


def _per_row(value: Any, rows: int) -> bool:
    return hasattr(value, "dim") and value.dim() >= 1 and value.size(0) == rows
