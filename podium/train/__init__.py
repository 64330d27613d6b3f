"""Train a Conductor with GRPO (the `train` extra: torch, transformers, trl).

    podium train --config configs/train/gym-cpu.toml [--set grpo.max_steps=10] [--dry-run]

`config` (the TOML file), `data` (typed rows: task mix, sub-pools, budgets, the exact inference
prompt), `rollout/` (one step's rollouts: the process layout, generation under the grammar,
explored plans, the recursion round), `score` (a completion run by the pipeline and graded),
`reward` (the graded outcome becomes the reward), `model` (the policy, the bundled GGUF
converted once), `trainer` (the TrainingJob: TRL's GRPOTrainer, the plan, checkpoints),
`runfolder` (the output folder: what `--resume` continues from, the checkpoints kept), `grpo` (every TRL internal podium touches), `zero_advantage` (the loss without the
completions that have no advantage). Importing this package does not import torch.
"""

from podium.train.config import TrainConfig, load_train_config

__all__ = ["TrainConfig", "load_train_config"]
