"""`podium train`: build the GRPO run from a config, print its plan, train, checkpoint, resume.

One function reads top to bottom (`build`): the pool and run settings, the training rows, the
policy, the reward (the pipeline's own run of each rollout), TRL's `GRPOConfig` from the
config's `[grpo]` section, and the `GRPOTrainer` (`podium.train.zero_advantage`'s, which skips the
completions with no advantage in the loss). `train` runs it; `--resume` continues from the
last checkpoint in the output folder with the same data order (the rows are a seeded shuffle
and TRL's sampler is not reshuffled), its records of the steps after that checkpoint dropped
(`resume_point`: they are trained and logged again).

One step, as TRL's GRPOTrainer runs it, and where podium plugs in (`grpo.py` lists the TRL
internals each hook relies on):

    rows     = questions_per_step rows, each repeated `generations` times   (podium.train.data)
    rollouts = rollout_func(rows)           # ConstrainedRollout / RecursionRollout: every row
               or TRL's own generation      #   under its grammar (transformers or vLLM,
                                            #   constrained.py, vllm_rollout.py, recursion.py)
    rewards  = ConductorReward(rollouts)    # each rollout run by the pipeline as `podium ask`
                                            #   would, graded by its task (reward.py); None =
                                            #   unscorable; the step's metrics published
    adv      = (rewards - group mean) / group std       # TRL; an unscorable rollout gets 0
    loss     = GRPO clipped loss over the rows with adv != 0      # zero_advantage.py, TRL's
               with env_mask leaving dead steps out                #   loss (credit.py's mask)
    optimizer step once the step's micro-batches are accumulated; callbacks write the card

Batch shape: a step is `questions_per_step` questions x `generations` rollouts; TRL sees
`per_device_batch` completions per pass, and gradient accumulation fills the rest of the step,
so one generation batch makes exactly one optimizer update (the reference code's setting).

Outputs in `[output] dir`: `checkpoint-N/` every `save_steps` (a Hugging Face directory with the
Conductor card, `podium.checkpoint`), `final/` at the end, `metrics.jsonl` (every logged step:
TRL's reward, reward_std, frac_reward_zero_std, completion lengths, and podium's rollout
metrics) and `transcripts.jsonl` (sample rollouts).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podium.checkpoint import card_of, write_card
from podium.conductor import workflow_messages
from podium.config import Pool, RunSettings, load_pool, split_limits
from podium.errors import ConfigError
from podium.pipeline import Pipeline
from podium.settings import resolve_settings
from podium.train.config import TrainConfig
from podium.train.constrained import ConstrainedRollout, Grammars
from podium.train.curve import draw_curve
from podium.train.data import TrainingData, build_data, with_prompts
from podium.train.explore import explored_count
from podium.train.layout import CPU_LAUNCH, Launch, Layout, check, layout_of
from podium.train.metrics import drop_records_after
from podium.train.recursion import RecursionRollout
from podium.train.reward import ConductorReward


@dataclass
class TrainingRun:
    """Everything a run is built from, and the lines `--dry-run` prints."""

    config: TrainConfig
    pool: Pool
    settings: RunSettings
    data: TrainingData
    layout: Layout
    trainer: Any = None
    pipeline: Pipeline | None = None
    lines: list[str] = field(default_factory=list)
    card: dict[str, Any] = field(default_factory=dict)  # the checkpoints' Conductor card
    heldout: Any = None  # podium.train.heldout.HeldOutEvaluation, when [heldout] names a task

    def close(self) -> None:
        if self.pipeline is not None:
            loop = getattr(self.trainer, "async_loop", None)
            if loop is not None and loop.is_running():
                asyncio.run_coroutine_threadsafe(self.pipeline.aclose(), loop).result()
            else:
                asyncio.run(self.pipeline.aclose())
            self.pipeline = None
        self.data.close()


def run_settings(config: TrainConfig, pool: Pool) -> RunSettings:
    """The pool's run settings with the config's [run] over them. A rollout is one round with
    no fallback: an invalid workflow must score as a format error (recursion is trained by its
    own fine-tune)."""
    return resolve_settings(pool.run, training=config.run.model_dump(exclude_unset=True),
                            required={"fallback": False, "recursion": 0})


def grpo_args(config: TrainConfig, layout: Layout | None = None) -> Any:
    """TRL's GRPOConfig for the config's [grpo] section, laid out for `layout` (default: the
    running launch). Under `accelerate launch` with DeepSpeed, building it hooks DeepSpeed into
    transformers, so it comes before the policy is loaded: ZeRO-3 then partitions the weights
    as they load instead of every process holding the whole model first."""
    import torch
    from trl import GRPOConfig

    layout = layout or layout_of(config)
    g = config.grpo
    gpu = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=config.output.dir,
        max_steps=g.max_steps,
        per_device_train_batch_size=layout.per_device,
        gradient_accumulation_steps=layout.accumulation,
        num_generations=g.generations,
        learning_rate=g.learning_rate,
        lr_scheduler_type=g.lr_scheduler,
        warmup_steps=(g.warmup_steps if g.warmup_steps is not None
                      else math.ceil(g.warmup_ratio * g.max_steps)),
        weight_decay=g.weight_decay,
        max_grad_norm=g.max_grad_norm,
        adam_epsilon=g.adam_epsilon,
        beta=g.beta,
        epsilon=g.epsilon,
        loss_type=g.loss_type,
        scale_rewards=g.scale_rewards,
        temperature=g.temperature,
        top_p=g.top_p,
        max_completion_length=g.max_completion_tokens,
        mask_truncated_completions=g.mask_truncated_completions,
        entropy_coef=g.entropy_coef,
        seed=g.seed,
        data_seed=g.seed,
        shuffle_dataset=False,  # the rows are already a seeded shuffle: resume keeps the order
        save_steps=g.save_steps,
        save_total_limit=g.save_total_limit,
        ddp_timeout=g.collective_timeout_s,
        logging_steps=g.logging_steps,
        bf16=gpu if g.bf16 is None else g.bf16,
        gradient_checkpointing=(gpu if g.gradient_checkpointing is None
                                else g.gradient_checkpointing),
        use_cpu=not gpu,
        dataloader_num_workers=0,
        report_to=list(g.report_to) or "none",
        use_vllm=g.use_vllm,
        vllm_mode=g.vllm_mode,
        vllm_server_base_url=g.vllm_server_base_url,
        vllm_gpu_memory_utilization=g.vllm_gpu_memory_utilization,
        vllm_importance_sampling_correction=g.importance_sampling_correction,
        remove_unused_columns=False,
    )


def _callbacks(plan: TrainingRun) -> list[Any]:
    from transformers import TrainerCallback

    out = Path(plan.config.output.dir)
    plan.card = card = card_of(plan.pool, plan.settings, base_model=plan.config.model.path,
                               recipe=plan.config.source, data=plan.data.counts(),
                               constrained=plan.config.grpo.constrained)
    last: dict[str, Any] = {}

    class PodiumCallback(TrainerCallback):  # the main process writes; the others train
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                last.update(logs)
                with (out / "metrics.jsonl").open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"step": state.global_step, **logs}) + "\n")

        def on_save(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                held = plan.heldout.card_fields() if plan.heldout is not None else {}
                write_card(out / f"checkpoint-{state.global_step}",
                           {**card, "steps": state.global_step, "metrics": dict(last), **held})

    return [PodiumCallback()]


def build(config: TrainConfig, *, make_trainer: bool = True,
          dry_run: bool = False) -> TrainingRun:
    """Read the pool, build the rows and (unless `make_trainer` is false) the policy, the
    reward and TRL's trainer. A dry run tolerates training data that is not on this machine:
    the plan names it, and the trainer is built on the rows there are (or on one placeholder
    row), so that everything else in the recipe is still checked."""
    launch = Launch.from_env()
    layout = layout_of(config, launch, dry_run=dry_run)
    check(config, layout, dry_run=dry_run)
    # every process calls the same endpoints: each gets its share of the pool's limits
    pool, limits = split_limits(load_pool(config.pool.file), layout.processes,
                                "the training processes")
    settings = run_settings(config, pool)
    data = build_data(config.data, config.subpool, pool, settings, strict=not dry_run,
                      budget=config.budget)
    if not data.rows and not dry_run:
        raise ConfigError(f"{config.source}: the training mix has no items; check [[data.tasks]].")
    plan = TrainingRun(config, pool, settings, data, layout)
    plan.lines = describe(plan) + [f"limits      {note}" for note in limits]
    if note := Launch.note():
        plan.lines.append(f"launch      {note}")
    if not make_trainer:
        return plan
    needs_vllm(config)
    from datasets import Dataset

    from podium.train.grpo import grpo_trainer_class
    from podium.train.heldout import HeldOutEvaluation, build_heldout
    from podium.train.model import load_policy
    from podium.train.progress import StepLines, quiet_trl

    # before the policy (see grpo_args); a dry run of N processes builds this one process's
    args = grpo_args(config, layout_of(config, launch) if dry_run else layout)
    model, tokenizer = load_policy(config.model.path, config.model.dtype)
    out = Path(config.output.dir)
    out.mkdir(parents=True, exist_ok=True)
    plan.pipeline = Pipeline(pool, settings=settings)
    recursion = config.recursion if config.recursion.fraction else None
    reward = ConductorReward(plan.pipeline, data, config.reward,
                             transcripts=out / "transcripts.jsonl" if launch.rank == 0 else None,
                             per_step=config.output.transcripts_per_step,
                             recursion=recursion, group=config.grpo.generations,
                             explore_wrong=config.grpo.explore_wrong)
    reward.rank, reward.deferred = launch.rank, True  # published by the trainer, every rank's
    rows = with_prompts(data.rows or [_placeholder(pool, settings)], tokenizer)
    grammars = (Grammars(tokenizer, model.config.vocab_size, pool, settings)
                if config.grpo.constrained else None)
    rollout: Any = None
    if recursion:
        rollout = RecursionRollout(reward, recursion, settings, tokenizer, rows, grammars)
    elif grammars is not None:
        rollout = ConstrainedRollout(grammars, tokenizer, rows, config.grpo.credit,
                                     config.grpo.explore, config.grpo.seed,
                                     config.grpo.explore_plans, config.grpo.subtask_weight,
                                     config.grpo.explore_subtasks, config.grpo.generations,
                                     launch.rank)
    if rollout is not None:  # TRL's rollout_func is marked experimental; podium pins its TRL
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    quiet_unscorable_warning()
    trainer = grpo_trainer_class()  # TRL's, skipping completions with no advantage
    plan.trainer = trainer(model=model, reward_funcs=[reward], args=args,
                           train_dataset=Dataset.from_list(rows), rollout_func=rollout,
                           processing_class=tokenizer, callbacks=_callbacks(plan))
    started = plan.trainer.accelerator.num_processes
    if started != layout.processes and not dry_run:
        raise ConfigError(f"The launcher's variables say {layout.processes} process(es) and "
                          f"the training job has {started}: launch with torchrun or "
                          f"`accelerate launch` ({CPU_LAUNCH}).")
    quiet_trl(plan.trainer, StepLines())  # one readable line a step, not TRL's dicts
    if (held := build_heldout(plan)) is not None:
        plan.heldout = HeldOutEvaluation(plan, held, config.heldout.every)
        plan.trainer.add_callback(plan.heldout)
    # under ZeRO-3 a parameter holds its shard (often nothing) and `ds_numel` its full size
    params = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    plan.lines.insert(1, f"policy      {config.model.path} ({params / 1e6:.1f}M parameters, "
                         f"{next(model.parameters()).dtype})")
    return plan


UNSCORABLE = "All reward functions returned None"


def _counted_elsewhere(record: logging.LogRecord) -> bool:
    return UNSCORABLE not in record.getMessage()  # accelerate may prefix "[RANK 0] "


def quiet_unscorable_warning() -> None:
    """Leave out TRL's warning for a rollout every reward function scored None: it prints the
    whole prompt once a step, and podium's Nones are deliberate and counted in metrics.jsonl
    (`podium/infra_dropped` for infrastructure failures, `podium/explored_correct` for the drawn
    plans `explore_wrong = "drop"` leaves unscored)."""
    logger = logging.getLogger("trl.trainer.grpo_trainer")
    if _counted_elsewhere not in logger.filters:
        logger.addFilter(_counted_elsewhere)


def _placeholder(pool: Pool, settings: RunSettings) -> dict[str, Any]:
    from podium.train.data import view_of

    question = "(placeholder: no training data on this machine)"
    return {"messages": workflow_messages(question, view_of(pool, settings, []), settings),
            "question": question, "task": "", "item": "", "workers": []}


def needs_vllm(config: TrainConfig) -> None:
    """Refuse `use_vllm` where vLLM is not installed, before the policy loads (TRL would raise
    a bare ImportError while building its trainer)."""
    import importlib.util

    if config.grpo.use_vllm and importlib.util.find_spec("vllm") is None:
        raise ConfigError("grpo.use_vllm = true generates the rollouts with vLLM, which is not "
                          "installed in this environment: pip install 'podium[gpu]' on a GPU "
                          "machine (vLLM and DeepSpeed at versions that agree with the train "
                          "pins), or `make vllm-venv` for vLLM's CPU build; or set "
                          "grpo.use_vllm = false")


def describe(plan: TrainingRun) -> list[str]:
    c, g = plan.config, plan.config.grpo
    completions = g.questions_per_step * g.generations
    sub = c.subpool
    epochs = g.max_steps * g.questions_per_step / max(len(plan.data.rows), 1)
    return [
        f"config      {c.source}",
        f"pool        {plan.pool.source}: " + ", ".join(
            f"{i} {w.name}" for i, w in enumerate(plan.pool.workers)),
        "data        " + ", ".join(f"{k} {v}" for k, v in plan.data.counts().items())
        + f" = {len(plan.data.rows)} rows ({epochs:.2f} epochs)",
        *(f"missing     {name}: {why}" for name, why in plan.data.missing.items()),
        f"prompt      {plan.settings.prompt}, few-shots {plan.settings.fewshots}, at most "
        f"{plan.settings.max_steps} steps, {plan.settings.access_mode} access",
        "sub-pools   " + (f"{sub.fraction:.0%} of rows, k {sub.k_min}..{sub.k_max or 'n'}, "
                          f"ids {plan.settings.subpool_ids}" if sub.fraction else "none"),
        "budgets     " + (_budget_line(c.budget, plan.settings, c.reward.over_budget)
                          if c.budget.on else "none"),
        f"reward      {c.reward.scheme}, infra failures {c.reward.on_infra_failure}"
        + (f", cost weight {c.reward.cost_weight}" if c.reward.cost_weight else "")
        + (f", {c.reward.extra_call_penalty} off a right answer per extra call"
           if c.reward.extra_call_penalty else ""),
        "recursion   " + (f"{int(g.generations * c.recursion.fraction)} of {g.generations} "
                          f"rollouts continue into round 1 ({plan.settings.recursion_template} "
                          f"prompt), discount {c.recursion.discount}, "
                          f"{c.recursion.normalisation} normalisation"
                          if c.recursion.fraction else "none"),
        f"steps       {g.max_steps} x {g.questions_per_step} questions x {g.generations} "
        f"rollouts = {completions} completions/step",
        f"layout      {plan.layout.line()}",
        f"optimiser   lr {g.learning_rate} {g.lr_scheduler}, warm-up "
        f"{g.warmup_ratio if g.warmup_steps is None else f'{g.warmup_steps} steps'}, "
        f"beta {g.beta}, clip {g.epsilon}, loss {g.loss_type}, T {g.temperature}, "
        f"completions <= {g.max_completion_tokens} tokens",
        f"generation  {'vLLM ' + g.vllm_mode if g.use_vllm else 'transformers'}"
        + ((", each rollout under its own row's grammar (one SamplingParams per prompt)"
            if g.vllm_mode == "colocate" else
            ", each rollout under its own row's grammar (one request per distinct grammar)")
           if g.constrained and g.use_vllm else
           ", under the Conductor's grammar" if g.constrained else "")
        + (", dead steps left out of the loss" if g.credit == "live" else "")
        + (", dead steps and subtasks left out of the loss" if g.credit == "plan" else "")
        + (f", {explored_count(g.explore, g.generations)} of {g.generations} rollouts a group on "
           f"random {'live ' if g.explore_plans == 'live' else ''}plans "
           f"{'with the question as subtasks ' if g.explore_subtasks == 'question' else ''}"
           f"({'wrong ones dropped' if g.explore_wrong == 'drop' else 'all scored'})"
           if g.explore else ""),
        "held-out    " + (f"{c.heldout.n or 'all'} {c.heldout.task} questions "
                          f"({c.heldout.split} split) every {c.heldout.every} steps, the best "
                          "step kept as best/" if c.heldout.task else "none"),
        f"output      {c.output.dir} (checkpoints every {g.save_steps} steps"
        + (f", the newest {g.save_total_limit} kept" if g.save_total_limit else "")
        + (f"; metrics to {', '.join(g.report_to)}" if g.report_to else "") + ")",
    ]


def train(config: TrainConfig, *, resume: bool = False,
          echo: Callable[[list[str]], None] | None = None) -> Path:
    """Train; return the folder of the final Conductor. The main process hands the plan's
    lines (its layout among them) to `echo` before the first step."""
    out = Path(config.output.dir)
    if not resume and ((out / "metrics.jsonl").exists() or any(out.glob("checkpoint-*"))):
        raise ConfigError(f"{out} holds a training run already (metrics.jsonl, checkpoint-N): "
                          "pass --resume to continue it, or train into a new folder "
                          "(--set output.dir=...), or delete it first.")
    plan = build(config)
    try:
        if echo is not None and plan.trainer.accelerator.is_main_process:
            echo(plan.lines)
        checkpoint = (resume_point(out, main=plan.trainer.accelerator.is_main_process)
                      if resume else None)
        plan.trainer.train(resume_from_checkpoint=checkpoint)
        final = out / "final"
        plan.trainer.save_model(str(final))
        state = plan.trainer.state
        if not state.is_world_process_zero:
            return final
        plan.trainer.processing_class.save_pretrained(str(final))
        (final / "training_args.bin").unlink(missing_ok=True)  # the model alone
        last: dict[str, Any] = next((h for h in reversed(state.log_history) if "reward" in h), {})
        held = plan.heldout.card_fields() if plan.heldout is not None else {}
        write_card(final, {**plan.card, "steps": state.global_step, "metrics": last, **held})
        draw_curve(out)
        return final
    finally:
        plan.close()


def resume_point(out: Path, *, main: bool = True) -> str:
    """The checkpoint `--resume` continues from: the last in `out`. The main process (the one
    that writes them) cuts the folder's per-step records back to its step first: the steps
    after it are trained, and logged, again."""
    from transformers.trainer_utils import get_last_checkpoint

    checkpoint = get_last_checkpoint(str(out))
    if checkpoint is None:
        raise ConfigError(f"--resume: {out} holds no checkpoint-N folder yet; run "
                          "without --resume to start.")
    if main:
        drop_records_after(out, int(Path(checkpoint).name.rsplit("-", 1)[1]))
    return checkpoint


def _budget_line(b: Any, settings: RunSettings, over: str) -> str:
    amounts = (", ".join(f"${a:g}" for a in b.amounts) if b.amounts
               else f"${b.range[0]:g}..${b.range[1]:g} (log-uniform)")
    scale = (f", prices x {b.price_scale[0]:g}..{b.price_scale[1]:g}"
             if b.price_scale != (1.0, 1.0) else "")
    shuffle = f", {b.price_shuffle:.0%} of price lists shuffled" if b.price_shuffle else ""
    held = "; rollouts held to it (run.hold_budget)" if settings.hold_budget else ""
    return (f"{amounts}{scale}{shuffle}; {'shown to' if settings.show_budget else 'hidden from'}"
            f" the Conductor (run.show_budget){held}; a plan over budget scores as "
            f"{'a wrong answer' if over == 'wrong' else 'a format error'}")
