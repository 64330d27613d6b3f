"""One `podium train` run whose completions are fixed, for the data-parallel equivalence test.

Run as `python distributed_step.py CONFIG COMPLETIONS GRADS [train options]`, alone or under
torchrun: everything is podium's own training run (the CLI, the layout, the reward through the
pipeline, the zero-advantage cut, TRL's loss, DDP, the optimizer, checkpoints), except that the
policy's sampling is replaced by a rollout that returns, for rollout j of the step (counted
over every process: process r's i-th is r x per-process + i), the j-th completion of the JSON
list COMPLETIONS, so that one process and several see the same batch. The main process saves
every parameter's gradient just before the first optimizer step to GRADS (torch.save).
`RIGHT` and `WRONG` are the completions the tests fix: a plan that sends the question to the
sums pool's adder (worker 1), and one that sends it to the worker that answers 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import TrainerCallback

import podium.train.trainer as trainer_module
from podium.cli.main import app

RIGHT = '1]\nsubtasks = ["Add the numbers"]\naccess_list = [[]]'
WRONG = '0]\nsubtasks = ["Answer zero"]\naccess_list = [[]]'


class FixedRollout:
    """The fixed completions; with `drawn`, each RIGHT one is an explored plan: its plan's
    tokens (`drawn_tokens`) are marked as its draw's choice."""

    def __init__(self, completions: list[str], tokenizer, drawn: bool = False) -> None:
        self.completions, self.tokenizer, self.drawn = completions, tokenizer, drawn

    def __call__(self, prompts: list[str], trainer) -> dict:
        offset = trainer.accelerator.process_index * len(prompts)
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        done = [self.tokenizer(self.completions[(offset + i) % len(self.completions)],
                               add_special_tokens=False)["input_ids"]
                + [self.tokenizer.eos_token_id] for i in range(len(prompts))]
        out = {"prompt_ids": ids, "completion_ids": done, "logprobs": None}
        if self.drawn:
            from podium.train.rollout.explore import drawn_tokens
            from podium.train.rollout.row import DRAWN

            out[DRAWN] = [drawn_tokens(self.tokenizer, c, False)
                          if self.tokenizer.decode(c, skip_special_tokens=True) == RIGHT
                          else None for c in done]
        return out


class SaveGradients(TrainerCallback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if state.global_step == 0 and state.is_world_process_zero:
            torch.save({n: p.grad.detach().clone() for n, p in model.named_parameters()
                        if p.grad is not None}, self.path)


def main() -> None:
    config, completions, grads, *options = sys.argv[1:]
    texts = json.loads(Path(completions).read_text("utf-8"))
    build = trainer_module.build

    def fixed(*args, **kwargs):
        plan = build(*args, **kwargs)
        if plan.trainer is not None:
            plan.trainer.rollout_func = FixedRollout(texts, plan.trainer.processing_class)
            plan.trainer.add_callback(SaveGradients(grads))
        return plan

    trainer_module.build = fixed
    sys.exit(app(["train", "--config", config, "--debug", *options], standalone_mode=False))


if __name__ == "__main__":
    main()
