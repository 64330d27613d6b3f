"""`podium train`: build the GRPO job from a config, print its plan, train, checkpoint, resume.

One function reads top to bottom (`build`): the pool and run settings, the training rows, the
policy, the reward (the pipeline's own run of each rollout), TRL's `GRPOConfig` from the
config's `[grpo]` section, and the `GRPOTrainer` (`podium.train.zero_advantage`'s, which skips the
completions with no advantage in the loss). `train` runs it; `--resume` continues from the
newest complete checkpoint in the output folder with the same data order (the rows are a
seeded shuffle and TRL's sampler is not reshuffled), its records of the steps after that
checkpoint dropped (they are trained and logged again), or starts at step 1 where there is
none (`podium.train.runfolder` has the folder's rules).

One step, as TRL's GRPOTrainer runs it, and where podium plugs in (`grpo.py` holds every
TRL internal podium touches):

    rows     = questions_per_step rows, each repeated `generations` times   (podium.train.data)
    rollouts = rollout_func(rows)           # podium.train.rollout: ConstrainedRollout or
               or TRL's own generation      #   RecursionRollout, every row under its grammar
                                            #   (transformers or vLLM)
    rewards  = ConductorReward(rollouts)    # each rollout run by the pipeline as `podium ask`
                                            #   would and graded (score.Scorer, reward.py);
                                            #   None = unscorable; the step's log kept in the
                                            #   StepRecorder, published by the trainer
    adv      = (rewards - group mean) / group std       # TRL; an unscorable rollout gets 0
    loss     = GRPO clipped loss over the rows with adv != 0      # zero_advantage.py, TRL's
               with env_mask leaving dead steps out                #   loss (credit.py's mask)
    optimizer step once the step's micro-batches are accumulated; callbacks write the card

Batch shape: a step is `questions_per_step` questions x `generations` rollouts; TRL sees
`per_device_batch` completions per pass, and gradient accumulation fills the rest of the step,
so one generation batch makes exactly one optimizer update (the reference code's setting).

Outputs in `[output] dir`: `checkpoint-N/` every `save_steps` and at the last step (a Hugging
Face directory with the Conductor card, `podium.checkpoint`, and what `--resume` needs; the
newest `save_total_limit` kept), `final/` at the end (its weights hard links to the last
checkpoint's), `metrics.jsonl` (every logged step: TRL's reward, reward_std,
frac_reward_zero_std, completion lengths, and podium's rollout metrics) and
`transcripts.jsonl` (sample rollouts).
"""

from __future__ import annotations

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
from podium.train import runfolder
from podium.train.config import TrainConfig
from podium.train.curve import draw_curve
from podium.train.data import TrainingData, build_data, with_prompts
from podium.train.metrics import StepRecorder
from podium.train.rollout.explore import explored_count
from podium.train.rollout.layout import CPU_LAUNCH, Launch, Layout, check, layout_of
from podium.train.rollout.row import Row
from podium.train.rollout.settings import RolloutSettings
from podium.train.score import Scorer


@dataclass
class TrainingJob:
    """Everything a training job is built from, and the lines `--dry-run` prints."""

    config: TrainConfig
    pool: Pool
    settings: RunSettings
    data: TrainingData
    layout: Layout
    rollout: RolloutSettings
    trainer: Any = None
    pipeline: Pipeline | None = None
    scorer: Scorer | None = None
    grammars: Any = None  # podium.train.rollout.grammars.Grammars, with rollout.constrained
    rows: list[Row] = field(default_factory=list)  # the dataset's rows, prompts rendered
    lines: list[str] = field(default_factory=list)
    card: dict[str, Any] = field(default_factory=dict)  # the checkpoints' Conductor card
    heldout: Any = None  # podium.train.heldout.HeldOutEvaluation, when [heldout] names a task

    def close(self) -> None:
        if self.pipeline is not None:
            from podium.train.grpo import TrlTrainer

            TrlTrainer(self.trainer).run(self.pipeline.aclose())
            self.pipeline = None
        self.data.close()


def run_settings(config: TrainConfig, pool: Pool) -> RunSettings:
    """The pool's run settings with the config's [run] over them. A rollout is one round with
    no fallback: an invalid workflow must score as a format error (recursion is trained by its
    own fine-tune)."""
    return resolve_settings(pool.run, training=config.run.model_dump(exclude_unset=True),
                            required={"fallback": False, "recursion": 0})


def grpo_args(config: TrainConfig, layout: Layout | None = None) -> Any:
    """TRL's GRPOConfig for the config's [grpo] and [vllm] sections, laid out for `layout` (default: the
    running launch). Under `accelerate launch` with DeepSpeed, building it hooks DeepSpeed into
    transformers, so it comes before the policy is loaded: ZeRO-3 then partitions the weights
    as they load instead of every process holding the whole model first."""
    import torch
    from trl import GRPOConfig

    layout = layout or layout_of(config)
    g, v = config.grpo, config.vllm
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
        use_vllm=v.enabled,
        vllm_mode=v.mode,
        vllm_server_base_url=v.server_base_url,
        vllm_gpu_memory_utilization=v.gpu_memory_utilization,
        vllm_importance_sampling_correction=v.importance_sampling_correction,
        remove_unused_columns=False,
    )


def _callbacks(job: TrainingJob) -> list[Any]:
    from transformers import TrainerCallback

    out = Path(job.config.output.dir)
    job.card = card = card_of(job.pool, job.settings, base_model=job.config.model.path,
                              recipe=job.config.source, data=job.data.counts(),
                              constrained=job.config.rollout.constrained)
    last: dict[str, Any] = {}

    class PodiumCallback(TrainerCallback):  # the main process writes; the others train
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                last.update(logs)
                with (out / "metrics.jsonl").open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"step": state.global_step, **logs}) + "\n")

        def on_save(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                held = job.heldout.card_fields() if job.heldout is not None else {}
                write_card(out / f"checkpoint-{state.global_step}",
                           {**card, "steps": state.global_step, "metrics": dict(last), **held})

    return [PodiumCallback()]


def build(config: TrainConfig, *, make_trainer: bool = True,
          dry_run: bool = False) -> TrainingJob:
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
    job = TrainingJob(config, pool, settings, data, layout,
                      RolloutSettings.of(config, launch.rank))
    job.lines = describe(job) + [f"limits      {note}" for note in limits]
    if note := Launch.note():
        job.lines.append(f"launch      {note}")
    if not make_trainer:
        return job
    needs_vllm(config)
    from datasets import Dataset

    from podium.train.grpo import TrlTrainer, grpo_trainer_class, rollout_func
    from podium.train.heldout import HeldOutEvaluation, build_heldout
    from podium.train.model import load_policy
    from podium.train.progress import StepLines, quiet_trl
    from podium.train.reward import ConductorReward
    from podium.train.rollout.constrained import ConstrainedRollout
    from podium.train.rollout.grammars import Grammars
    from podium.train.rollout.recursion import RecursionRollout

    # before the policy (see grpo_args); a dry run of N processes builds this one process's
    args = grpo_args(config, layout_of(config, launch) if dry_run else layout)
    model, tokenizer = load_policy(config.model.path, config.model.dtype)
    out = Path(config.output.dir)
    out.mkdir(parents=True, exist_ok=True)
    job.pipeline = Pipeline(pool, settings=settings)
    job.scorer = Scorer(job.pipeline)
    job.rows = with_prompts(data.rows or [_placeholder(pool, settings)], tokenizer)
    recorder = StepRecorder(out / "transcripts.jsonl" if launch.rank == 0 else None,
                            config.output.transcripts_per_step)
    reward = ConductorReward(job.scorer, data, job.rows, config.reward, job.rollout, recorder)
    if config.rollout.constrained:
        job.grammars = Grammars(tokenizer, model.config.vocab_size, pool, settings)
    rollout: Any = None
    if job.rollout.recursion is not None:
        rollout = RecursionRollout(job.scorer, job.rollout, settings, tokenizer, job.rows,
                                   job.grammars)
    elif job.grammars is not None:
        rollout = ConstrainedRollout(job.grammars, tokenizer, job.rows, job.rollout)
    if rollout is not None:  # TRL's rollout_func is marked experimental; podium pins its TRL
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    quiet_unscorable_warning()
    if config.vllm.enabled and config.vllm.mode == "colocate":
        from podium.train.rollout.vllm import keep_cpu_weights_live

        keep_cpu_weights_live()  # before TRL builds the engine: vLLM's CPU build packs weights
    trainer = grpo_trainer_class()  # TRL's, skipping completions with no advantage
    job.trainer = trainer(model=model, reward_funcs=[reward], args=args,
                          train_dataset=Dataset.from_list(
                              [row.columns(i) for i, row in enumerate(job.rows)]),
                          rollout_func=rollout_func(rollout) if rollout is not None else None,
                          processing_class=tokenizer, callbacks=_callbacks(job),
                          step_log=recorder,
                          overlap=config.grpo.max_staleness if config.grpo.overlap else 0,
                          decoupled_cap=(config.grpo.overlap_weight_cap
                                         if config.grpo.overlap_loss == "decoupled" else None))
    started = TrlTrainer(job.trainer).processes
    if started != layout.processes and not dry_run:
        raise ConfigError(f"The launcher's variables say {layout.processes} process(es) and "
                          f"the training job has {started}: launch with torchrun or "
                          f"`accelerate launch` ({CPU_LAUNCH}).")
    quiet_trl(job.trainer, StepLines())  # one readable line a step, not TRL's dicts
    if (held := build_heldout(job)) is not None:
        job.heldout = HeldOutEvaluation(job, held, config.heldout.every)
        job.trainer.add_callback(job.heldout)
    # under ZeRO-3 a parameter holds its shard (often nothing) and `ds_numel` its full size
    params = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    job.lines.insert(1, f"policy      {config.model.path} ({params / 1e6:.1f}M parameters, "
                        f"{next(model.parameters()).dtype})")
    return job


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


def _placeholder(pool: Pool, settings: RunSettings) -> Row:
    from podium.train.data import view_of

    question = "(placeholder: no training data on this machine)"
    return Row(workflow_messages(question, view_of(pool, settings, []), settings), question,
               "", "")


def needs_vllm(config: TrainConfig) -> None:
    """Refuse `vllm.enabled` where vLLM is not installed, before the policy loads (TRL would raise
    a bare ImportError while building its trainer)."""
    import importlib.util

    if config.vllm.enabled and importlib.util.find_spec("vllm") is None:
        raise ConfigError("vllm.enabled = true generates the rollouts with vLLM, which is not "
                          "installed in this environment: pip install 'podium[gpu]' on a GPU "
                          "machine (vLLM and DeepSpeed at versions that agree with the train "
                          "pins), or `make vllm-venv` for vLLM's CPU build; or set "
                          "vllm.enabled = false")


def describe(job: TrainingJob) -> list[str]:
    c, g, r, v = job.config, job.config.grpo, job.config.rollout, job.config.vllm
    completions = g.questions_per_step * g.generations
    sub = c.subpool
    epochs = g.max_steps * g.questions_per_step / max(len(job.data.rows), 1)
    return [
        f"config      {c.source}",
        f"pool        {job.pool.source}: " + ", ".join(
            f"{i} {w.name}" for i, w in enumerate(job.pool.workers)),
        "data        " + ", ".join(f"{k} {v}" for k, v in job.data.counts().items())
        + f" = {len(job.data.rows)} rows ({epochs:.2f} epochs)",
        *(f"missing     {name}: {why}" for name, why in job.data.missing.items()),
        f"prompt      {job.settings.prompt}, few-shots {job.settings.fewshots}, at most "
        f"{job.settings.max_steps} steps, {job.settings.access_mode} access",
        "sub-pools   " + (f"{sub.fraction:.0%} of rows, k {sub.k_min}..{sub.k_max or 'n'}, "
                          f"ids {job.settings.subpool_ids}" if sub.fraction else "none"),
        "budgets     " + (_budget_line(c.budget, job.settings, c.reward.over_budget)
                          if c.budget.on else "none"),
        f"reward      {c.reward.scheme}, infra failures {c.reward.on_infra_failure}"
        + (f", cost weight {c.reward.cost_weight}" if c.reward.cost_weight else "")
        + (f", {c.reward.extra_call_penalty} off a right answer per extra call"
           if c.reward.extra_call_penalty else ""),
        "recursion   " + (f"{int(g.generations * c.recursion.fraction)} of {g.generations} "
                          f"rollouts continue into round 1 ({job.settings.recursion_template} "
                          f"prompt), discount {c.recursion.discount}, "
                          f"{c.recursion.normalisation} normalisation"
                          if c.recursion.fraction else "none"),
        f"steps       {g.max_steps} x {g.questions_per_step} questions x {g.generations} "
        f"rollouts = {completions} completions/step",
        f"layout      {job.layout.line()}",
        "overlap     " + (f"the workflows of the next {g.max_staleness} step(s) run while a "
                          f"step trains (rollouts up to {g.max_staleness} update(s) old, "
                          + (f"decoupled loss, weights capped at {g.overlap_weight_cap})"
                             if g.overlap_loss == "decoupled"
                             else "the ratio against the policy that generated them)")
                          if g.overlap else "none (each step waits for its workflows)"),
        f"optimiser   lr {g.learning_rate} {g.lr_scheduler}, warm-up "
        f"{g.warmup_ratio if g.warmup_steps is None else f'{g.warmup_steps} steps'}, "
        f"beta {g.beta}, clip {g.epsilon}, loss {g.loss_type}, T {g.temperature}, "
        f"completions <= {g.max_completion_tokens} tokens",
        f"generation  {'vLLM ' + v.mode if v.enabled else 'transformers'}"
        + ((", each rollout under its own row's grammar (one SamplingParams per prompt)"
            if v.mode == "colocate" else
            ", each rollout under its own row's grammar (one request per distinct grammar)")
           if r.constrained and v.enabled else
           ", under the Conductor's grammar" if r.constrained else "")
        + (", dead steps left out of the loss" if r.credit == "live" else "")
        + (", dead steps and subtasks left out of the loss" if r.credit == "plan" else "")
        + (f", {explored_count(r.explore, g.generations)} of {g.generations} rollouts a group on "
           f"random {'live ' if r.explore_plans == 'live' else ''}plans "
           f"{'with the question as subtasks ' if r.explore_subtasks == 'question' else ''}"
           f"({'wrong ones dropped' if r.explore_wrong == 'drop' else 'all scored'})"
           if r.explore else ""),
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
    lines (its layout, and with `resume` where it continues, among them) to `echo` before the
    first step. The output folder's rules (a run there needs `resume`; where that continues)
    are podium.train.runfolder's."""
    out = Path(config.output.dir)
    runfolder.check_folder(out, config.grpo.max_steps, resume=resume)
    from podium.train.grpo import TrlTrainer

    job = build(config)
    main = TrlTrainer(job.trainer).is_main
    try:
        point = runfolder.resume_point(out, main=main) if resume else None
        if point is not None:
            job.lines.append(f"resume      {point.note}")
        if echo is not None and main:
            echo(job.lines)
        job.trainer.train(resume_from_checkpoint=point.checkpoint if point else None)
        final = out / "final"
        if main:
            runfolder.unshare_weights(final)  # never written through into a checkpoint's weights
        job.trainer.save_model(str(final))
        state = job.trainer.state
        if not state.is_world_process_zero:
            return final
        job.trainer.processing_class.save_pretrained(str(final))
        (final / "training_args.bin").unlink(missing_ok=True)  # the model alone
        last: dict[str, Any] = next((h for h in reversed(state.log_history) if "reward" in h), {})
        held = job.heldout.card_fields() if job.heldout is not None else {}
        write_card(final, {**job.card, "steps": state.global_step, "metrics": last, **held})
        runfolder.share_weights(final, runfolder.last_checkpoint(out))
        draw_curve(out)
        return final
    finally:
        job.close()


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
