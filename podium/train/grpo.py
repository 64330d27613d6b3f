"""podium's GRPOTrainer: TRL's, with the private methods podium overrides in one place.

A TRL upgrade must check each of these against the new `trl/trainer/grpo_trainer.py`
(podium pins `trl==1.16.0`):

* `_compute_loss(model, inputs)`: the completions with no advantage are left out of the
  forward and backward passes (`podium.train.zero_advantage`), with the same row count on
  every process.
* `_calculate_rewards(inputs, prompts, completions, completion_ids_list)`: after TRL's own,
  the reward's step log (`podium.train.metrics`) is gathered from every process on the main
  thread and published: metrics counted over the whole step, transcripts written once.
* `_load_optimizer_and_scheduler(checkpoint)`: `--resume` of a multi-process CPU job, where
  transformers 5.10 maps the optimizer state to `args.device`, `cpu:0`, which `torch.load`
  cannot restore ("don't know how to restore data location ... cpu:0"): mapped to `cpu`.
* `create_model_card(...)`: TRL writes its card (README.md) into the run folder at every
  checkpoint, naming no base model for a local directory; podium writes one card of its own
  into each checkpoint, final/ and best/ (`podium.checkpoint.write_card`), so TRL's is not
  written.

podium also relies on, without overriding: `rollout_func` (experimental; the grammar-held and
recursion rollouts), `_generate_single_turn` (plain generation inside the recursion rollout),
`generation_config`, `eos_token_ids`, `async_loop` (async reward functions), `_metrics` and
`_log_metric` (metrics), `unwrap_model_for_generation` (`podium.train.constrained`), and, with
vLLM, `vllm_generation` (its `llm`, `vllm_client`, `mode`, sampling fields and sleep state) and
`trl.generation.vllm_generation.extract_logprobs` (`podium.train.vllm_rollout`).
"""

from __future__ import annotations

from typing import Any

from podium.train.zero_advantage import active_rows, cuttable, take_rows


def grpo_trainer_class() -> type:
    """TRL's GRPOTrainer with podium's overrides (see the module); TRL is imported here, so
    that importing podium.train needs no torch."""
    import torch
    from accelerate.utils import gather_object
    from trl import GRPOTrainer

    from podium.train.reward import ConductorReward

    class PodiumGRPOTrainer(GRPOTrainer):
        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            exact = (self.beta == 0.0 and not getattr(self, "_entropy_bonus_enabled", True)
                     and not self.aux_loss_enabled and cuttable(inputs))
            if not exact:
                return super()._compute_loss(model, inputs)
            rows = int((inputs["advantages"] != 0).sum())
            if self.accelerator.num_processes > 1:  # every process cuts to the same count
                count = inputs["advantages"].new_tensor([rows], dtype=torch.long)
                rows = int(self.accelerator.gather(count).max())
            cut = active_rows(inputs, self.loss_type, rows)
            if cut is None:
                return super()._compute_loss(model, inputs)
            kept, scale = cut
            if kept is not None:
                return super()._compute_loss(model, kept) * scale
            # nothing to learn anywhere: one row's loss times 0 keeps backward (and any
            # data-parallel wrapper's hooks) as usual; the metrics it logs are taken back
            first = inputs["advantages"].new_zeros(len(inputs["advantages"]), dtype=bool)
            first[0] = True
            assert self.model is not None  # (a trainer that computes a loss has its model)
            mode = "train" if self.model.training else "eval"
            logged = {k: len(v) for k, v in self._metrics[mode].items()}
            loss = super()._compute_loss(model, take_rows(inputs, first)) * 0.0
            for key in list(self._metrics[mode]):
                del self._metrics[mode][key][logged.get(key, 0):]
                if not self._metrics[mode][key]:
                    del self._metrics[mode][key]
            return loss

        def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any,
                               completion_ids_list: Any) -> Any:
            rewards = super()._calculate_rewards(inputs, prompts, completions,
                                                 completion_ids_list)
            for func in self.reward_funcs:  # on the main thread: the gather is a collective
                if isinstance(func, ConductorReward) and func.deferred \
                        and func.pending is not None:
                    func.publish(gather_object, self._log_metric)
            return rewards

        def create_model_card(self, *args: Any, **kwargs: Any) -> None:
            return None  # podium's card is written by the trainer's callback (the module)

        def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
            if checkpoint is None or self.args.world_size == 1 or self.args.device.type != "cpu":
                return super()._load_optimizer_and_scheduler(checkpoint)
            load = torch.load  # transformers maps the state to args.device, "cpu:0" here

            def on_cpu(*args: Any, **kwargs: Any) -> Any:
                if str(kwargs.get("map_location")) == "cpu:0":
                    kwargs["map_location"] = "cpu"
                return load(*args, **kwargs)

            torch.load = on_cpu
            try:
                return super()._load_optimizer_and_scheduler(checkpoint)
            finally:
                torch.load = load

    return PodiumGRPOTrainer
