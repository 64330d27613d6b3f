"""What a rollout function tells the reward about each completion, beyond its text.

TRL hands every extra key a `rollout_func` returns to the reward function, one value per
completion. podium's rollout functions return one key, `podium_rollout`: a `RolloutInfo` per
completion (`podium.train.constrained` for explored plans, `podium.train.recursion` for the two
rounds), read by `podium.train.reward.ConductorReward`. Without a rollout function (TRL's own
generation) there is none, and every completion is a round-0 rollout of the policy's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KEY = "podium_rollout"


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
    prior: Any = None  # podium.pipeline.RunResult
    round_messages: list[dict[str, str]] | None = None
    pair: int = -1
    explored: bool | None = None
