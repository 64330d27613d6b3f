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
* `_generate(prompts)`, `_calculate_rewards(...)` and `training_step(...)` are timed: the step
  logs where its time went (`podium.train.overlap.StepTimes`).
* With `[grpo] overlap` (`podium.train.overlap` has the schedule; `train` cancels the
  workflows of batches started ahead when a run stops before their steps):
  `get_batch_samples(epoch_iterator, num_batches, device)` (transformers') reads the data
  loader `max_staleness` updates ahead; `_generate_and_score_completions(inputs)` generates
  and starts the batches ahead (TRL's `_generate`, then the reward function called as
  `_calculate_rewards` calls it, on `async_loop`, as a future) and runs TRL's own scoring
  for the step's batch with `_generate` answering the stored generation (and its logged
  `_metrics` entries), `_calculate_rewards` the stored future, and the first
  `_get_per_token_logps_and_entropies` call (TRL's "old" log-probabilities) the generating
  policy's; with `overlap_loss = "clipped"` the output's `old_per_token_logps` are those,
  with "decoupled" (the default) TRL's own stay and the generating policy's go into the
  output under `zero_advantage.GENERATING`, where `_compute_loss` (through `_trl_loss`) finds
  them: its call of `_get_per_token_logps_and_entropies` multiplies each token's advantage by
  min(pi_old / pi_generating, cap) before TRL's loss reads `advantages` (a (B, T) tensor,
  which TRL's loss accepts), and logs the weights. A token an explored plan's draw chose
  (`rollout.row.DRAWN`) is kept as NaN and weighs 1; with "clipped" its old log-probability
  is the current policy's, from a forward pass. TRL's `pad`,
  `trl.models.utils.disable_gradient_checkpointing`, `pad_to_multiple_of`, `_step`,
  `reward_funcs` and `state.max_steps` are read for it.
* `_get_per_token_logps_and_entropies(...)` runs TRL's under `completions_only_on_cpu`:
  TRL's fused LM head (`trl.trainer.utils._fused_forward`) projects every position of the
  sequence through the vocabulary on a device without Triton, prompt and padding included;
  `trl.trainer.utils._use_triton` answers True for CPU while it runs, so that only the
  completions' positions are projected, as on CUDA (`benchmarks/train_step.py` measures it).
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
import math
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from podium.train.metrics import StepRecorder
from podium.train.overlap import (
    Batch,
    InFlight,
    Lookahead,
    Started,
    StepTimes,
    new_entries,
    rows_of,
)
from podium.train.rollout.row import DRAWN, LOGPROBS
from podium.train.zero_advantage import GENERATING, active_rows, cuttable, take_rows

T = TypeVar("T")


@contextmanager
def completions_only_on_cpu() -> Iterator[None]:
    """While it is open, TRL's fused LM head projects only the positions it scores (the
    completions' tokens) on CPU too, as it does on CUDA: TRL decides with
    `trl.trainer.utils._use_triton(device)`, which is False off CUDA and XPU so that a device
    that compiles per shape (Neuron) sees the same shape every batch, and then scores every
    position, prompt and padding included. The log-probabilities and gradients are the
    same."""
    import trl.trainer.utils as trl_utils

    trls_own = trl_utils._use_triton
    trl_utils._use_triton = lambda device: device.type == "cpu" or trls_own(device)
    try:
        yield
    finally:
        trl_utils._use_triton = trls_own


def grpo_trainer_class() -> type:
    """TRL's GRPOTrainer with podium's overrides (see the module); TRL is imported here, so
    that importing podium.train needs no torch. The trainer takes one more argument,
    `step_log`: the job's `StepRecorder`, and one optional, `overlap`: the steps generated
    ahead of the one training (`[grpo] max_staleness` with `overlap`; 0: synchronous)."""
    import torch
    from accelerate.utils import gather, gather_object
    from trl import GRPOTrainer
    from trl.models.utils import disable_gradient_checkpointing
    from trl.trainer.utils import pad

    class PodiumGRPOTrainer(GRPOTrainer):
        def __init__(self, *args: Any, step_log: StepRecorder, overlap: int = 0,
                     decoupled_cap: float | None = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.step_log = step_log
            self.lookahead = Lookahead(overlap) if overlap else None
            self.decoupled_cap = decoupled_cap
            self._weighing: dict[str, Any] | None = None  # the loss's inputs, to weigh
            self._weights: Any = None  # this update's (sum, tokens, capped) of the weights
            self.in_flight = InFlight()
            self.times = StepTimes()
            self._replaying: Started | None = None  # the started batch being scored
            self._old_once: Any = None  # what TRL's next old-log-probability forward gives
            self._step_began: float | None = None  # when the step being taken began

        def train(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().train(*args, **kwargs)
            finally:  # a run stopped early: the batches started ahead are never trained
                self.in_flight.clear()

        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            begin = time.perf_counter()
            if self._step_began is None:
                self._step_began = begin
            out = super().training_step(model, inputs, num_items_in_batch)
            end = time.perf_counter()
            self.times.total += end - begin
            if self._step % self.current_gradient_accumulation_steps == 0:  # the update's last
                self.times.wall = end - self._step_began  # since the step before's last pass
                for name, value in self.times.metrics().items():
                    self._metrics["train"][name].append(value)
                if self.lookahead is not None and self.decoupled_cap is not None:
                    self._log_weights()
                self.times, self._step_began = StepTimes(), end
            return out

        def get_batch_samples(self, epoch_iterator: Any, num_batches: int,
                              device: Any) -> tuple[list, Any]:
            if self.lookahead is None:
                return super().get_batch_samples(epoch_iterator, num_batches, device)
            return self.lookahead.next(epoch_iterator, lambda: GRPOTrainer.get_batch_samples(
                self, epoch_iterator, num_batches, device))

        def _generate(self, prompts: list) -> Any:
            started = self._replaying
            if started is not None:  # generated when it was started: log what it logged then
                for name, values in started.logged.items():
                    self._metrics["train"][name].extend(values)
                return started.generated
            begin = time.perf_counter()
            out = super()._generate(prompts)
            self.times.generation += time.perf_counter() - begin
            return out

        def _generate_and_score_completions(self, inputs: Batch) -> dict[str, Any]:
            assert self.model is not None
            if self.lookahead is None or not self.model.training:
                return super()._generate_and_score_completions(inputs)
            step = self.state.global_step + 1
            started = self.in_flight.take(inputs, step) or self._start(inputs, step)
            for ahead, batch in enumerate(self.lookahead.upcoming(), start=1):
                if ahead <= len(self.in_flight):
                    continue  # started by an earlier step
                if step + ahead > self.state.max_steps:
                    break  # never a batch no step trains
                self.in_flight.add(self._start(batch, step + ahead))
            self.times.staleness = self.state.global_step - started.generated_at
            t: Any = self  # (TRL's attributes, loosely typed upstream)
            old = pad([torch.tensor(x, dtype=torch.float32) for x in started.old_logps],
                      padding_value=0, padding_side="right",
                      pad_to_multiple_of=t.pad_to_multiple_of).to(self.accelerator.device)
            vllm_weighs = self.use_vllm and self.vllm_importance_sampling_correction
            clipped = self.decoupled_cap is None
            every = t.args.steps_per_generation * self.num_iterations
            if clipped:  # a drawn token's ratio is taken around the policy the update starts from
                old = self._drawn_now(old, started)
            if clipped and (self.args.gradient_accumulation_steps % every != 0 or vllm_weighs):
                self._old_once = old  # TRL takes its old log-probabilities from a forward
            self._replaying = started
            try:
                output = super()._generate_and_score_completions(inputs)
            finally:
                self._replaying, self._old_once = None, None
            if clipped:
                output["old_per_token_logps"] = old
            elif not vllm_weighs:  # (TRL's own weight is then against vLLM's generating ones)
                output[GENERATING] = old
            return output

        def _start(self, batch: Batch, step: int) -> Started:
            """Generate `batch` now, keep the generating policy's log-probabilities, and start
            its workflows on the reward's loop, to train update `step`."""
            begin = time.perf_counter()
            prompts = [x["prompt"] for x in batch]
            before = {name: len(v) for name, v in self._metrics["train"].items()}
            generated = GRPOTrainer._generate(self, prompts)
            logged = new_entries(self._metrics["train"], before)
            prompt_ids, completion_ids, _, completions, _, extra, _, _ = generated
            old = self._generating_logps(prompt_ids, completion_ids, extra.pop(LOGPROBS, None),
                                         extra.pop(DRAWN, None))
            self.times.generation += time.perf_counter() - begin
            rows = [dict(x) for x in batch]  # the reward's columns, as _calculate_rewards makes
            for key, values in extra.items():
                for i, row in enumerate(rows):
                    row[key] = values[i] if isinstance(values, list) else values
            columns = {k: [row[k] for row in rows] for k in rows[0]
                       if k not in ("prompt", "completion", "completion_ids")}
            reward: Any = self.reward_funcs[0]  # podium's ConductorReward, async
            future = asyncio.run_coroutine_threadsafe(
                reward(prompts=prompts, completions=completions, completion_ids=completion_ids,
                       trainer_state=self.state, step=step, **columns), self.async_loop)
            return Started(rows_of(batch), step, self.state.global_step, generated, logged,
                           old, future)

        def _generating_logps(self, prompt_ids: list[list[int]],
                              completion_ids: list[list[int]],
                              recorded: list[list[float] | None] | None,
                              drawn: list[list[bool] | None] | None = None) -> list[list[float]]:
            """Each row's log-probabilities under the policy that generated the batch: those
            recorded while sampling, a forward pass now for the rows nothing recorded (vLLM's,
            TRL's own generation's), and NaN for each token an explored plan's draw chose (`drawn`): no policy
            chose it, so staleness does not change how likely it was. Every process of a job
            makes that forward, over all its rows, when any process needs it (under ZeRO-3 a
            forward takes every process)."""
            n = len(completion_ids)
            have = recorded if recorded is not None else [None] * n
            chose = drawn if drawn is not None else [None] * n
            missing = [i for i, r in enumerate(have)
                       if r is None and not (chose[i] is not None and all(chose[i] or ()))]
            if self.accelerator.num_processes > 1:
                count = torch.tensor([len(missing)], device=self.accelerator.device)
                if int(self.accelerator.gather(count).sum()):
                    missing = list(range(len(completion_ids)))
            now = {}
            if missing:
                now = dict(zip(missing, self._logps_now([prompt_ids[i] for i in missing],
                                                        [completion_ids[i] for i in missing]),
                               strict=True))
            logps = [r if r is not None else now.get(i, [math.nan] * len(completion_ids[i]))
                     for i, r in enumerate(have)]
            return [lp if d is None else [math.nan if x else v for v, x in zip(lp, d, strict=True)]
                    for lp, d in zip(logps, chose, strict=True)]

        def _drawn_now(self, old: Any, started: Started) -> Any:
            """`old` (the padded generating log-probabilities) with each drawn token's NaN
            replaced by the log-probability the policy gives it now, the policy the update
            starts from (a forward pass over the rows that have one; every process makes it
            when any does, as `_generating_logps`)."""
            drawn = old.isnan()
            rows = drawn.any(1)
            count = rows.sum().reshape(1)
            if self.accelerator.num_processes > 1:
                count = self.accelerator.gather(count)
            if not int(count.sum()):
                return old
            prompt_ids, completion_ids = started.generated[0], started.generated[1]
            pick = [i for i in range(len(completion_ids)) if rows[i]] or list(
                range(len(completion_ids)))  # (a forward all the same: the others need it)
            now = torch.zeros_like(old)
            for i, lp in zip(pick, self._logps_now([prompt_ids[i] for i in pick],
                                                   [completion_ids[i] for i in pick]),
                             strict=True):
                now[i, :len(lp)] = torch.tensor(lp, dtype=old.dtype)
            return torch.where(drawn, now, old)

        def _logps_now(self, prompt_ids: list[list[int]],
                       completion_ids: list[list[int]]) -> list[list[float]]:
            """The policy's log-probability of each completion token, by one forward pass
            (TRL's), as TRL's loss computes them."""
            t: Any = self  # (TRL's attributes, loosely typed upstream)
            device, multiple = self.accelerator.device, t.pad_to_multiple_of
            pad_id = t._tokenizer.pad_token_id

            def padded(rows: list[list[int]], value: int, side: str) -> Any:
                return pad([torch.tensor(r, dtype=torch.long) for r in rows], padding_value=value,
                           padding_side=side, pad_to_multiple_of=multiple).to(device)

            prompts = padded(prompt_ids, pad_id, "left")
            completions = padded(completion_ids, pad_id, "right")
            mask = torch.cat([padded([[1] * len(r) for r in prompt_ids], 0, "left"),
                              padded([[1] * len(r) for r in completion_ids], 0, "right")], 1)
            with torch.no_grad(), disable_gradient_checkpointing(
                    t.model, t.args.gradient_checkpointing_kwargs):
                logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, torch.cat([prompts, completions], 1), mask,
                    completions.size(1), batch_size=self.args.per_device_train_batch_size)
            return [row[:len(ids)].tolist() for row, ids in zip(logps, completion_ids,
                                                                 strict=True)]

        def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
            if self._old_once is not None:  # TRL's old log-probabilities: the generating policy's
                old, self._old_once = self._old_once, None
                return old, None, None
            with completions_only_on_cpu():
                out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            if self._weighing is not None:  # the loss's own forward: weigh its advantages
                inputs, self._weighing = self._weighing, None
                self._weigh(inputs, out[0].detach())
            return out

        def _weigh(self, inputs: dict[str, Any], current: Any) -> None:
            """The decoupled loss: each token's advantage times the truncated importance
            weight min(pi_old / pi_generating, cap), where pi_old is the policy the update
            starts from (TRL's old log-probabilities, or the current ones when TRL takes
            none), so that TRL's ratio and clip are taken around pi_old; 1 for a token an
            explored plan's draw chose (NaN), as in a synchronous step. The logged weights are
            those of the tokens the policy sampled."""
            cap = self.decoupled_cap
            assert cap is not None  # (set when the trainer hands on GENERATING)
            proximal = inputs.get("old_per_token_logps")
            proximal = current if proximal is None else proximal
            generating = inputs.pop(GENERATING)
            sampled = ~generating.isnan()
            weight = torch.where(sampled, torch.exp(proximal - generating).clamp(max=cap), 1.0)
            learning = inputs["advantages"] != 0  # (a filler row's weights count for nothing)
            inputs["advantages"] = inputs["advantages"].reshape(-1, 1) * weight
            kept = weight[inputs["completion_mask"].bool() & learning.reshape(-1, 1) & sampled]
            if self._weights is None:
                self._weights = torch.zeros(3, device=self.accelerator.device)
            self._weights += torch.stack([kept.sum(), kept.new_tensor(kept.numel()),
                                          (kept >= cap).sum().float()])

        def _log_weights(self) -> None:
            """Log the update's importance weights, over the tokens of every process's rows
            with an advantage (so the same for any layout): their mean and the share at the
            cap. Every process calls it at the end of each update (a collective)."""
            mine = (self._weights if self._weights is not None
                    else torch.zeros(3, device=self.accelerator.device))
            total, tokens, capped = self.accelerator.gather(mine.reshape(1, 3)).sum(0).tolist()
            self._weights = None
            if tokens:
                self._metrics["train"]["podium/stale_weight_mean"].append(total / tokens)
                self._metrics["train"]["podium/stale_weight_capped"].append(capped / tokens)

        def _trl_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            """TRL's loss of `inputs`, weighed first when they carry the generating policy's
            log-probabilities (`_weigh`)."""
            if GENERATING in inputs:
                self._weighing = inputs = dict(inputs)
            try:
                return super()._compute_loss(model, inputs)
            finally:
                self._weighing = None

        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            exact = (self.beta == 0.0 and not getattr(self, "_entropy_bonus_enabled", True)
                     and not self.aux_loss_enabled and cuttable(inputs))
            if not exact:
                return self._trl_loss(model, inputs)
            rows = int((inputs["advantages"] != 0).sum())
            if self.accelerator.num_processes > 1:  # every process cuts to the same count
                count = inputs["advantages"].new_tensor([rows], dtype=torch.long)
                rows = int(self.accelerator.gather(count).max())
            cut = active_rows(inputs, self.loss_type, rows)
            if cut is None:
                return self._trl_loss(model, inputs)
            kept, scale = cut
            if kept is not None:
                return self._trl_loss(model, kept) * scale
            # nothing to learn anywhere: one row's loss times 0 keeps backward (and any
            # data-parallel wrapper's hooks) as usual; the metrics it logs are taken back
            first = inputs["advantages"].new_zeros(len(inputs["advantages"]), dtype=bool)
            first[0] = True
            assert self.model is not None  # (a trainer that computes a loss has its model)
            mode = "train" if self.model.training else "eval"
            logged = {k: len(v) for k, v in self._metrics[mode].items()}
            loss = self._trl_loss(model, take_rows(inputs, first)) * 0.0
            for key in list(self._metrics[mode]):
                del self._metrics[mode][key][logged.get(key, 0):]
                if not self._metrics[mode][key]:
                    del self._metrics[mode][key]
            return loss

        def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any,
                               completion_ids_list: Any) -> Any:
            started, begin = self._replaying, time.perf_counter()
            if started is None:
                rewards = super()._calculate_rewards(inputs, prompts, completions,
                                                     completion_ids_list)
                self.times.workers += time.perf_counter() - begin
                step = self.state.global_step + 1
            else:  # its workflows were started with it; TRL's gather, as TRL's own path ends
                values = started.rewards.result()
                ended = started.finished or time.perf_counter()
                self.times.workers += ended - started.started
                rewards = gather(torch.tensor(
                    [[math.nan if r is None else r] for r in values], dtype=torch.float32,
                    device=self.accelerator.device))
                step = started.step
            self.times.waiting += time.perf_counter() - begin
            if step in self.step_log.pending:  # on the main thread: a collective
                self.step_log.publish(step, gather_object, self._log_metric)
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


class PolicyLogprobs:
    """A logits processor, first in transformers' list, that records the log-probability the
    policy gave each sampled token: log softmax of the raw logits over the temperature, as
    TRL's loss computes them, before any later processor (a grammar's mask) changes them. At
    each step it reads the token sampled at the step before; `finish` reads the last."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.last: Any = None
        self.steps: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self.last is not None:
            self.steps.append(self.last.gather(1, input_ids[:, -1:]).squeeze(1))
        self.last = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: Any) -> Any:
        """(rows, generated tokens): each generated token's log-probability."""
        import torch

        if self.last is not None:
            self.steps.append(self.last.gather(1, sequences[:, -1:]).squeeze(1))
            self.last = None
        return torch.stack(self.steps, dim=1)


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
        """Sampled completions: TRL's own generator (transformers or vLLM; its sampled
        log-probabilities, vLLM's or None), or, with a logits `processor`, transformers'
        generate under it, recording the policy's own log-probability of each token
        (`PolicyLogprobs`). (completion ids, log-probabilities)"""
        t = self.trainer
        if processor is None:
            return t._generate_single_turn(prompt_ids, None, {}, 1)
        import torch
        from transformers import LogitsProcessorList
        from trl.models import unwrap_model_for_generation

        inputs, mask, width = _padded(prompt_ids, t.processing_class.pad_token_id)
        device = t.accelerator.device
        recorder = PolicyLogprobs(t.generation_config.temperature or 1.0)
        with unwrap_model_for_generation(t.model_wrapped, t.accelerator,
                                         gather_deepspeed3_params=t.args
                                         .ds3_gather_for_generation) as model, torch.no_grad():
            out = model.generate(input_ids=inputs.to(device), attention_mask=mask.to(device),
                                 generation_config=t.generation_config,
                                 logits_processor=LogitsProcessorList([recorder, processor]))
        completions = _until_eos(out[:, width:].tolist(), set(t.eos_token_ids))
        logprobs = recorder.finish(out).tolist()
        return completions, [lp[:len(c)] for lp, c in zip(logprobs, completions, strict=True)]

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
