"""Held-out evaluation during training: the live policy's greedy workflows on questions it
does not train on, run by the pipeline and graded, every `[heldout] every` steps.

The policy writes each held-out question's workflow greedily (under the workflow grammar when
the rollouts are held to it), from the exact prompt `podium ask` would give it; the pipeline
runs each workflow as a rollout's (on the trainer's event loop, so the pool's clients are
shared) and the task grades the answer. The accuracy is logged as `heldout/accuracy` (and how
many different plans the questions got as `heldout/distinct_plans`: 1 is a collapse onto one
plan) beside the training metrics (metrics.jsonl, TensorBoard), printed, and the best step's policy is
saved as `best/` (the model alone, with its card) next to the checkpoints.

A budget-conditioned run (`[budget]`) asks every held-out question once at each of its budgets
(the listed amounts, or the ends and middle of its range, at the pool's prices): a plan over its
budget counts as wrong, and the share of such plans is logged as `heldout/over_budget`.

Every process of a job generates (under ZeRO-3 each forward needs them all); the main process
runs and grades the workflows and tells the others whether this step is the best so far, so
that all of them take part in saving `best/`.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from podium.checkpoint import write_card
from podium.conductor import workflow_messages
from podium.conductor.budget import RequestBudget, format_budget
from podium.outcome import grade_outcome

BATCH = 16  # held-out prompts generated together


@dataclass
class HeldOutResult:
    step: int
    accuracy: float
    valid: float  # share of workflows that parsed
    by_group: dict[str, float]  # accuracy by the items' family (gym) or task
    # each question's plan: its steps' workers in order (None where the workflow did not parse)
    plans: list[tuple[str, ...] | None]
    over_budget: float | None = None  # share of plans over their budget (None: no budgets)
    cost: float | None = None  # mean list price of a question's workers (USD)

    @property
    def distinct_plans(self) -> int:
        """How many different plans the questions got: 1 means the policy collapsed onto one
        plan for every question (on the gym, the optimum is one plan a family)."""
        return len({p for p in self.plans if p is not None})


class HeldOut:
    """The held-out questions of a training run, and how to score the live policy on them."""

    def __init__(self, run: Any, task: Any, items: list[Any], split: str,
                 budgets: list[RequestBudget | None] | None = None) -> None:
        """`items` asked once at each of `budgets` (None: once, with no budget)."""
        from podium.train.data import view_of, with_prompts

        budgets = budgets or [None]
        self.run, self.task, self.split = run, task, split
        self.items = [i for _ in budgets for i in items]
        self.budgets = [b for b in budgets for _ in items]
        self.rows = with_prompts([
            {"messages": workflow_messages(task.format(i), view_of(run.pool, run.settings, [],
                                                                   b), run.settings)}
            for i, b in zip(self.items, self.budgets, strict=True)],
            run.trainer.processing_class)

    def completions(self) -> list[str]:
        """The policy's greedy completion of each held-out prompt (every process calls it)."""
        import torch
        from transformers import LogitsProcessorList

        trainer = self.run.trainer
        tok = trainer.processing_class
        grammars = getattr(trainer.rollout_func, "grammars", None)
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        model.eval()
        out: list[str] = []
        try:
            for start in range(0, len(self.rows), BATCH):
                rows = self.rows[start:start + BATCH]
                ids = [tok(r["prompt"], add_special_tokens=False)["input_ids"] for r in rows]
                width, pad = max(map(len, ids)), tok.pad_token_id
                processors = None
                if grammars is not None:
                    from podium.train.constrained import GrammarSpec

                    held = self.run.settings.hold_budget
                    processors = LogitsProcessorList([grammars.processor(
                        [GrammarSpec((), budget=b if held else None)
                         for b in self.budgets[start:start + BATCH]])])
                device = next(model.parameters()).device
                with torch.no_grad():
                    generated = model.generate(
                        input_ids=torch.tensor([[pad] * (width - len(i)) + i for i in ids],
                                               device=device),
                        attention_mask=torch.tensor([[0] * (width - len(i)) + [1] * len(i)
                                                     for i in ids], device=device),
                        do_sample=False, max_new_tokens=trainer.args.max_completion_length,
                        pad_token_id=pad, logits_processor=processors,
                        synced_gpus=trainer.accelerator.num_processes > 1)
                out += tok.batch_decode(generated[:, width:], skip_special_tokens=True)
        finally:
            if was_training:
                model.train()
        return out

    def score(self, completions: list[str], step: int) -> HeldOutResult:
        """Run and grade each completion's workflow (on the trainer's event loop)."""
        async def one(item: Any, row: dict, text: str,
                      budget: RequestBudget | None) -> tuple[Any, Any, Any]:
            run = await self.run.pipeline.run_completion(self.task.format(item), text,
                                                         messages=row["messages"], budget=budget)
            return item, run, await grade_outcome(run.outcome, self.task, item)

        async def every() -> list[tuple[Any, Any, Any]]:
            return await asyncio.gather(*(one(i, r, t, b) for i, r, t, b in zip(
                self.items, self.rows, completions, self.budgets, strict=True)))

        loop = getattr(self.run.trainer, "async_loop", None)
        graded = (asyncio.run_coroutine_threadsafe(every(), loop).result() if loop is not None
                  else asyncio.run(every()))
        groups: dict[str, list[bool]] = {}
        several = len(set(self.budgets)) > 1
        right = [bool(o.correct) and not o.over_budget for _, _, o in graded]
        for (item, _, _), ok, b in zip(graded, right, self.budgets, strict=True):
            key = (item.meta or {}).get("family") or self.task.name
            groups.setdefault(key, []).append(ok)
            if several and b is not None:
                groups.setdefault(f"budget {format_budget(b.amount)}", []).append(ok)
        plans = [tuple(s.worker_name for s in r.rounds[0].execution.steps)
                 if r.rounds[0].execution is not None else None for _, r, _ in graded]
        budgeted = [o.budget for _, _, o in graded if o.budget is not None]
        return HeldOutResult(
            step, statistics.fmean(right), statistics.fmean(p is not None for p in plans),
            {k: statistics.fmean(v) for k, v in sorted(groups.items())}, plans,
            statistics.fmean(c.over for c in budgeted) if budgeted else None,
            statistics.fmean(c.plan_price for c in budgeted) if budgeted else None)


class HeldOutEvaluation(TrainerCallback):
    """Scores the policy on the held-out questions every `every` steps and at the end,
    logs `heldout/accuracy` and `heldout/valid`, and keeps the best step's policy in best/."""

    def __init__(self, run: Any, heldout: HeldOut, every: int) -> None:
        self.run, self.heldout, self.every = run, heldout, every
        self.best: HeldOutResult | None = None
        self.last: HeldOutResult | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            self.evaluate(state)

    def evaluate(self, state: Any) -> HeldOutResult | None:
        if self.last is not None and self.last.step == state.global_step:
            return None
        trainer = self.run.trainer
        texts = self.heldout.completions()
        result = None
        if state.is_world_process_zero:
            result = self.heldout.score(texts, state.global_step)
        result = self.last = _shared(trainer, result)
        better = self.best is None or result.accuracy > self.best.accuracy
        if better:
            self.best = result
            self._save_best(state)
        logs = {"heldout/accuracy": result.accuracy, "heldout/valid": result.valid,
                "heldout/distinct_plans": result.distinct_plans,
                **({"heldout/over_budget": result.over_budget}
                   if result.over_budget is not None else {}),
                **{f"heldout/{k}": v for k, v in result.by_group.items()
                   if len(result.by_group) > 1}}
        # logged with this step's own metrics, which TRL logs right after on_step_end
        for name, value in logs.items():
            trainer._metrics["train"][name].append(value)
        return result

    def card_fields(self) -> dict[str, Any]:
        """The held-out figures for a model card (the newest and the best)."""
        if self.last is None or self.best is None:
            return {}
        return {"heldout": {"task": self.heldout.task.name, "split": self.heldout.split,
                            "n": len(self.heldout.items), "step": self.last.step,
                            "accuracy": self.last.accuracy, "best": self.best.accuracy,
                            "best_step": self.best.step}}

    def _save_best(self, state: Any) -> None:
        trainer = self.run.trainer
        best = Path(trainer.args.output_dir) / "best"
        trainer.save_model(str(best))  # every process: ZeRO-3 gathers the weights
        if state.is_world_process_zero:
            trainer.processing_class.save_pretrained(str(best))
            (best / "training_args.bin").unlink(missing_ok=True)
            write_card(best, {**self.run.card, "steps": state.global_step,
                              "metrics": _last_metrics(state), **self.card_fields()})


def _last_metrics(state: Any) -> dict[str, Any]:
    return next((h for h in reversed(state.log_history) if "reward" in h), {})


def _shared(trainer: Any, result: HeldOutResult | None) -> HeldOutResult:
    """The main process's result, on every process."""
    if trainer.accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        box = [result]
        broadcast_object_list(box, from_process=0)
        result = box[0]
    assert result is not None  # the main process scored it
    return result


def build_heldout(run: Any) -> HeldOut | None:
    """The run's held-out questions from its config's [heldout] section (None when off). A
    task of the training mix is the same task (its options kept, e.g. the gym's families)."""
    from podium.tasks import get_task

    spec = run.config.heldout
    if spec.task is None:
        return None
    task = run.data.tasks.get(spec.task) if not spec.options else None
    task = task or get_task(spec.task, **spec.options)
    return HeldOut(run, task, task.load(split=spec.split, n=spec.n, seed=spec.seed), spec.split,
                   heldout_budgets(run.config.budget))


def heldout_budgets(spec: Any) -> list[RequestBudget | None] | None:
    """The budgets a budget-conditioned run is evaluated at, at the pool's prices: its
    amounts, or its range's ends and geometric middle (None: no [budget])."""
    if not spec.on:
        return None
    if spec.amounts:
        return [RequestBudget(a) for a in sorted(set(spec.amounts))]
    lo, hi = spec.range
    return [RequestBudget(a) for a in (lo, (lo * hi) ** 0.5, hi)]
