"""Train a Conductor with GRPO (the `train` extra: torch, transformers, trl).

    podium train --config configs/train/gym-cpu.toml [--set grpo.max_steps=10] [--dry-run]

`config` (the TOML file), `data` (rows: task mix, sub-pools, the exact inference prompt),
`reward` (each rollout run by the pipeline and graded by the task: the outcome becomes the
reward), `model` (the policy, the bundled GGUF converted once), `trainer` (TRL's GRPOTrainer,
the plan, checkpoints and resume), `zero_advantage` (the loss without the completions that have no
advantage). Importing this package does not import torch.
"""

from podium.train.config import TrainConfig, load_train_config

__all__ = ["TrainConfig", "load_train_config"]
