"""The typed records of a step: a training row, one completion's place in it, a batch.

A `Row` is built once, with its budget typed (`podium.train.data.build_data`), and the job keeps
the list. TRL hands the dataset's columns to the reward function as keyword lists, so the
dataset holds two columns: the rendered `prompt` TRL generates from, and `row`, the row's index
in the job's list (`Row.columns`); the reward looks the row up by that index (no decoding).
A rollout function sees only the prompts, and finds each row by its prompt.

A rollout function returns a `Rollouts`; `to_trl` makes it the dictionary TRL's
`rollout_func` contract asks for. Every extra key of that dictionary reaches the reward function
as a keyword list: podium's one extra key, `podium_rollout`, carries a `RolloutInfo` per
completion. Without a rollout function (TRL's own generation) there is none, and every
completion is a round-0 rollout of the policy's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from podium.conductor.budget import RequestBudget

if TYPE_CHECKING:
    from podium.pipeline import RunResult

KEY = "podium_rollout"  # the rollout dictionary's key for the RolloutInfo list
LOGPROBS = "podium_logprobs"  # its key for the policy's log-probabilities at generation
DRAWN = "podium_drawn"  # its key for which tokens an explored plan's draw chose


@dataclass(frozen=True)
class Row:
    """One training question, as the Conductor is asked it.

    messages: the Conductor's prompt built exactly as at inference (ending in the prefill);
    question: the formatted question the workers see; task, item: what grades it;
    workers: the pool indices of its sub-pool (empty: the whole pool); budget: its drawn
    budget and prices (`[budget]`; None: none); prompt: the messages rendered by the policy's
    chat template (`podium.train.data.with_prompts`; "" until then)."""

    messages: list[dict[str, str]]
    question: str
    task: str
    item: str
    workers: tuple[int, ...] = ()
    budget: RequestBudget | None = None
    prompt: str = ""

    def columns(self, index: int) -> dict[str, Any]:
        """The row as the dataset TRL samples from holds it: its prompt and its index."""
        return {"prompt": self.prompt, "row": index}


@dataclass(frozen=True)
class RolloutInfo:
    """One completion's place in a step.

    round: 0, or 1 for a recursion round revising a round-0 rollout;
    prior: the round-0 run this completion revises (round 1), or its own run when the
        recursion rollout already ran it to build a round-1 prompt (round 0); None otherwise;
    round_messages: a round-1 completion's prompt (the round-0 conversation and the recursion
        template), for the pipeline's run of the revision;
    pair: for a round-0 rollout continued into round 1, the index of that round-1 completion
        in the batch (its reward blends both rounds); -1 otherwise;
    explored: with exploration on, whether the completion follows a drawn plan rather than the
        policy (None: exploration is off).
    """

    round: int = 0
    prior: RunResult | None = None
    round_messages: list[dict[str, str]] | None = None
    pair: int = -1
    explored: bool | None = None


@dataclass(frozen=True)
class Rollouts:
    """A batch of completions: token ids, sampled log-probabilities (vLLM's, for TRL's
    importance-sampling correction; None from transformers), what the reward needs of each
    (`info`), the loss weights of each token (`env_mask`, `podium.train.credit`; None: every
    token weighs 1), and the policy's own log-probability of each token as it generated them
    (`policy_logprobs`: log softmax of logits / temperature, before a grammar's mask, recorded
    by transformers' generation; None where not recorded, and None for a row that was written,
    not sampled), with which `[grpo] overlap` weighs the loss
    (`podium.train.overlap`), and, per explored rollout, which of its tokens the draw chose
    (`drawn`, `podium.train.rollout.explore.drawn_tokens`; None for the policy's own), which
    overlap weighs as the synchronous loss does."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[Any] | None = None
    info: list[RolloutInfo] | None = None
    env_mask: list[list[float]] | None = field(default=None)
    policy_logprobs: list[list[float] | None] | None = None
    drawn: list[list[bool] | None] | None = None

    def to_trl(self) -> dict[str, Any]:
        """TRL's rollout dictionary (`rollout_func`'s return value)."""
        out: dict[str, Any] = {"prompt_ids": self.prompt_ids,
                               "completion_ids": self.completion_ids, "logprobs": self.logprobs}
        if self.info is not None:
            out[KEY] = self.info
        if self.env_mask is not None:  # TRL leaves tokens with env_mask 0 out of the loss
            out["env_mask"] = self.env_mask
        if self.policy_logprobs is not None:
            out[LOGPROBS] = self.policy_logprobs
        if self.drawn is not None:
            out[DRAWN] = self.drawn
        return out
