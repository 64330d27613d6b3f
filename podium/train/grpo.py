"""podium's side of TRL's GRPOTrainer: every TRL internal podium touches, in one module.

A TRL upgrade must check each of these against the new `trl/trainer/grpo_trainer.py`
(podium pins `trl==1.16.0`).

`PodiumGRPOTrainer` overrides:

* `_compute_loss(model, inputs)`: the completions with no advantage are left out of the
  forward and backward passes (`podium.train.zero_advantage`), with the same row count on
  every process.
* `_calculate_rewards(inputs, prompts, completions, completion_ids_list)`: after TRL's own,
  the step log the reward kept in the job's `StepRecorder` (`podium.train.metrics`, handed to
  the trainer when it is built) is gathered from every process on the main thread and
  published: metrics counted over the whole step, transcripts written once.
* `_load_optimizer_and_scheduler(checkpoint)`: `--resume` of a multi-process CPU job, where
  transformers 5.10 maps the optimizer state to `args.device`, `cpu:0`, which `torch.load`
  cannot restore ("don't know how to restore data location ... cpu:0"): mapped to `cpu`.
* `create_model_card(...)`: TRL writes its card (README.md) into the run folder at every
  checkpoint, naming no base model for a local directory; podium writes one card of its own
  into each checkpoint, final/ and best/ (`podium.checkpoint.write_card`), so TRL's is not
  written.

`TrlTrainer` is what the rollouts and the held-out evaluation see of the trainer, read from
TRL's: `rollout_func` (experimental; `rollout_func` here wraps podium's rollouts in it),
`_generate_single_turn` (TRL's own generation), `model_wrapped`, `generation_config`,
`eos_token_ids`, `args.ds3_gather_for_generation` and `trl.models.unwrap_model_for_generation`
(generation under a grammar), `async_loop` (the loop TRL runs async reward functions on),
`_metrics` (a held-out figure logged with its step), `state`, `args`, `accelerator`, and, with
vLLM, `vllm_generation` (its `llm`, `vllm_client`, `mode`, sampling fields and sleep state) and
`trl.generation.vllm_generation.extract_logprobs`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from podium.train.metrics import StepRecorder
from podium.train.zero_advantage import active_rows, cuttable, take_rows

T = TypeVar("T")


def grpo_trainer_class() -> type:
    """TRL's GRPOTrainer with podium's overrides (see the module); TRL is imported here, so
    that importing podium.train needs no torch. The trainer takes one more argument,
    `step_log`: the job's `StepRecorder`."""
    import torch
    from accelerate.utils import gather_object
    from trl import GRPOTrainer

    class PodiumGRPOTrainer(GRPOTrainer):
        def __init__(self, *args: Any, step_log: StepRecorder, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.step_log = step_log

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
            if self.step_log.pending is not None:  # on the main thread: a collective
                self.step_log.publish(gather_object, self._log_metric)
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


def rollout_func(rollout: Callable[[list[str], TrlTrainer], Any]
                 ) -> Callable[[list[str], Any], dict[str, Any]]:
    """TRL's `rollout_func` for one of podium's rollouts: called with TRL's trainer, it hands
    the rollout a `TrlTrainer` and TRL the rollout's `Rollouts` as TRL's dictionary."""
    def call(prompts: list[str], trainer: Any) -> dict[str, Any]:
        return rollout(prompts, TrlTrainer(trainer)).to_trl()

    call.rollout = rollout  # type: ignore[attr-defined]  # (what it wraps, for a reader)
    return call


def vllm_sampling(gen: Any) -> dict[str, Any]:
    """The sampling settings TRL gave its vLLM generation, as vLLM's SamplingParams fields."""
    out = {
        "n": 1,
        "repetition_penalty": gen.repetition_penalty,
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        "top_k": gen.top_k,
        "min_p": 0.0 if gen.min_p is None else gen.min_p,
        "max_tokens": gen.max_completion_length,
        "logprobs": gen.logprobs,
    }
    out.update({k: v for k, v in (gen.generation_kwargs or {}).items()
                if k != "structured_outputs"})
    return out


def _padded(prompt_ids: list[list[int]], pad: int) -> tuple[Any, Any, int]:
    """(input ids, attention mask, width): the prompts left-padded to one width."""
    import torch

    width = max(len(ids) for ids in prompt_ids)
    inputs = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompt_ids])
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompt_ids])
    return inputs, mask, width


def _until_eos(rows: list[list[int]], eos: set[int]) -> list[list[int]]:
    """Each generated row up to and with its first end token."""
    out = []
    for row in rows:
        end = next((i for i, t in enumerate(row) if t in eos), None)
        out.append(row if end is None else row[:end + 1])
    return out


class TrlTrainer:
    """What podium's rollouts and held-out evaluation use of TRL's trainer (see the module)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    @property
    def step(self) -> int:
        """Optimizer steps taken so far."""
        return getattr(self.trainer.state, "global_step", 0)

    @property
    def max_completion_tokens(self) -> int:
        return self.trainer.args.max_completion_length

    @property
    def uses_vllm(self) -> bool:
        return bool(getattr(self.trainer, "use_vllm", False))

    @property
    def processes(self) -> int:
        return self.trainer.accelerator.num_processes

    @property
    def is_main(self) -> bool:
        return bool(self.trainer.accelerator.is_main_process)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the loop TRL runs async reward functions on (where the
        pipeline's clients live), or on a new one when the trainer has none."""
        loop = getattr(self.trainer, "async_loop", None)
        if loop is not None and loop.is_running():
            return asyncio.run_coroutine_threadsafe(coroutine, loop).result()
        return asyncio.run(coroutine)

    def sample(self, prompt_ids: list[list[int]], processor: Any = None) -> tuple[list, Any]:
        """Sampled completions: TRL's own generator (transformers or vLLM), or, with a
        logits `processor`, transformers' generate under it. (completion ids, logprobs)"""
        t = self.trainer
        if processor is None:
            return t._generate_single_turn(prompt_ids, None, {}, 1)
        import torch
        from transformers import LogitsProcessorList
        from trl.models import unwrap_model_for_generation

        inputs, mask, width = _padded(prompt_ids, t.processing_class.pad_token_id)
        device = t.accelerator.device
        with unwrap_model_for_generation(t.model_wrapped, t.accelerator,
                                         gather_deepspeed3_params=t.args
                                         .ds3_gather_for_generation) as model, torch.no_grad():
            out = model.generate(input_ids=inputs.to(device), attention_mask=mask.to(device),
                                 generation_config=t.generation_config,
                                 logits_processor=LogitsProcessorList([processor]))
        return _until_eos(out[:, width:].tolist(), set(t.eos_token_ids)), None

    def greedy(self, prompt_ids: list[list[int]], processor: Any = None) -> list[list[int]]:
        """The policy's greedy completions (under a logits `processor` when given), in eval
        mode, padded past their end (decode them without special tokens); every process of
        a job calls it together (under ZeRO-3 each forward needs them all)."""
        import torch
        from transformers import LogitsProcessorList

        t = self.trainer
        model = t.accelerator.unwrap_model(t.model)
        pad = t.processing_class.pad_token_id
        inputs, mask, width = _padded(prompt_ids, pad)
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                out = model.generate(
                    input_ids=inputs.to(device), attention_mask=mask.to(device),
                    do_sample=False, max_new_tokens=t.args.max_completion_length,
                    pad_token_id=pad,
                    logits_processor=(LogitsProcessorList([processor])
                                      if processor is not None else None),
                    synced_gpus=t.accelerator.num_processes > 1)
        finally:
            if was_training:
                model.train()
        return out[:, width:].tolist()

    def sample_vllm(self, prompt_ids: list[list[int]], grammars: list[str]) -> tuple[list, Any]:
        """Completions by the trainer's vLLM, the i-th under the GBNF grammar `grammars[i]`
        (`podium.train.rollout.vllm`): colocated, this process's engine; in server mode, the
        main process asks for every process's rows and each keeps its slice."""
        from trl.generation.vllm_generation import extract_logprobs

        from podium.train.rollout import vllm

        gen, accelerator = self.trainer.vllm_generation, self.trainer.accelerator
        base = vllm_sampling(gen)
        if gen.mode == "colocate":
            if gen.enable_sleep_mode:
                gen.llm.wake_up(tags=["kv_cache"])
            out = vllm.colocate(gen.llm, base, prompt_ids, grammars, extract_logprobs)
            if gen.enable_sleep_mode:
                gen.llm.sleep(level=2)
                gen._llm_weights_sleeping = True  # TRL re-pushes the weights before the next step
            return out
        from accelerate.utils import broadcast_object_list, gather_object

        all_ids, all_grammars = gather_object(prompt_ids), gather_object(grammars)
        payload: list[Any] = [None]
        if accelerator.is_main_process:
            payload = [vllm.request_all(gen.vllm_client, base, all_ids, all_grammars)]
        broadcast_object_list(payload, from_process=0)
        completions, logprobs = payload[0]
        mine = slice(accelerator.process_index * len(prompt_ids),
                     (accelerator.process_index + 1) * len(prompt_ids))
        return completions[mine], (logprobs[mine] if logprobs is not None else None)

    def shared(self, value: T | None) -> T:
        """The main process's `value`, on every process."""
        if self.processes > 1:
            from accelerate.utils import broadcast_object_list

            box = [value]
            broadcast_object_list(box, from_process=0)
            value = box[0]
        assert value is not None  # the main process made it
        return value

    def log_now(self, metrics: dict[str, float]) -> None:
        """Log `metrics` at the current step on their own, by transformers' `Trainer.log` (not
        GRPOTrainer's, which would add and clear the metrics gathered for the next step)."""
        from transformers import Trainer

        Trainer.log(self.trainer, dict(metrics))

    def log_with_step(self, metrics: dict[str, float]) -> None:
        """Log `metrics` with the training step's own, which TRL logs right after the
        callbacks' `on_step_end`."""
        for name, value in metrics.items():
            self.trainer._metrics["train"][name].append(value)
