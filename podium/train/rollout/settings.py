"""What a rollout reads of the config, taken from it once: `RolloutSettings`.

The rollout functions and the reward are built with one of these
(`RolloutSettings.of(config, rank)`: the `[rollout]` keys, the group size and seed of `[grpo]`,
`[recursion]`, and the process rank), so the rank and the rollout keys travel one way.
"""

from __future__ import annotations

from dataclasses import dataclass

from podium.train.config import RecursionSection, TrainConfig


@dataclass(frozen=True)
class RolloutSettings:
    """group: rollouts a question (`grpo.generations`); rank: this process's rank in the job;
    credit, subtask_weight: the loss mask (`podium.train.credit`); explore, explore_plans,
    explore_subtasks, explore_wrong: drawn plans (`podium.train.rollout.explore`); seed: the
    draws' seed (`grpo.seed`) (each process draws from seed + rank); recursion: the recursion fine-tune's
    section (None: single-round training)."""

    group: int
    rank: int = 0
    credit: str = "all"
    subtask_weight: float = 1.0
    explore: float = 0.0
    explore_plans: str = "live"
    explore_subtasks: str = "policy"
    explore_wrong: str = "drop"
    seed: int = 0
    recursion: RecursionSection | None = None

    @classmethod
    def of(cls, config: TrainConfig, rank: int = 0) -> RolloutSettings:
        r = config.rollout
        return cls(group=config.grpo.generations, rank=rank, credit=r.credit,
                   subtask_weight=r.subtask_weight, explore=r.explore,
                   explore_plans=r.explore_plans, explore_subtasks=r.explore_subtasks,
                   explore_wrong=r.explore_wrong, seed=config.grpo.seed,
                   recursion=config.recursion if config.recursion.fraction else None)

    def first(self, count: int) -> int:
        """The place in the whole step of this process's first rollout, when each process
        holds `count` (TRL deals the step out in contiguous slices, rank by rank)."""
        return self.rank * count
