"""Held-out evaluation during training: the live policy's greedy workflows on questions it
does not train on, run by the pipeline and graded: before the first step (the untrained point,
logged at step 0) and every `[heldout] every` steps.

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
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from podium.checkpoint import CARD, write_card
from podium.conductor import workflow_messages
from podium.conductor.budget import RequestBudget, format_budget
from podium.train.data import view_of, with_prompts
from podium.train.grpo import TrlTrainer
from podium.train.rollout.generate import greedy
from podium.train.rollout.grammars import GrammarSpec
from podium.train.rollout.row import Row
from podium.train.score import Scored


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
    """The held-out questions of a training job, and how to score the live policy on them."""

    def __init__(self, job: Any, task: Any, items: list[Any], split: str,
                 budgets: list[RequestBudget | None] | None = None) -> None:
        """`items` asked once at each of `budgets` (None: once, with no budget); `job` is
        the `podium.train.trainer.TrainingJob`."""
        budgets = budgets or [None]
        self.job, self.task, self.split = job, task, split
        self.items = [i for _ in budgets for i in items]
        self.budgets = [b for b in budgets for _ in items]
        self.rows = with_prompts([
            Row(workflow_messages(task.format(i), view_of(job.pool, job.settings, [], b),
                                  job.settings), task.format(i), task.name, i.id, budget=b)
            for i, b in zip(self.items, self.budgets, strict=True)],
            job.trainer.processing_class)

    def completions(self) -> list[str]:
        """The policy's greedy completion of each held-out prompt (every process calls it)."""
        tok = self.job.trainer.processing_class
        held = self.job.settings.hold_budget
        ids = [tok(r.prompt, add_special_tokens=False)["input_ids"] for r in self.rows]
        specs = [GrammarSpec((), budget=b if held else None) for b in self.budgets]
        out = greedy(TrlTrainer(self.job.trainer), ids, self.job.grammars, specs)
        return tok.batch_decode(out, skip_special_tokens=True)

    def score(self, completions: list[str], step: int) -> HeldOutResult:
        """Run and grade each completion's workflow (on the trainer's event loop)."""
        async def every() -> list[Scored]:
            return await asyncio.gather(*(
                self.job.scorer.score(row, text, self.task, item)
                for item, row, text in zip(self.items, self.rows, completions, strict=True)))

        graded = TrlTrainer(self.job.trainer).run(every())
        groups: dict[str, list[bool]] = {}
        several = len(set(self.budgets)) > 1
        right = [bool(s.outcome.correct) and not s.outcome.over_budget for s in graded]
        for item, ok, b in zip(self.items, right, self.budgets, strict=True):
            key = (item.meta or {}).get("family") or self.task.name
            groups.setdefault(key, []).append(ok)
            if several and b is not None:
                groups.setdefault(f"budget {format_budget(b.amount)}", []).append(ok)
        executions = [g.run.rounds[0].execution for g in graded]
        plans = [tuple(s.worker_name for s in e.steps) if e is not None else None
                 for e in executions]
        budgeted = [g.outcome.budget for g in graded if g.outcome.budget is not None]
        return HeldOutResult(
            step, statistics.fmean(right), statistics.fmean(p is not None for p in plans),
            {k: statistics.fmean(v) for k, v in sorted(groups.items())}, plans,
            statistics.fmean(c.over for c in budgeted) if budgeted else None,
            statistics.fmean(c.plan_price for c in budgeted) if budgeted else None)


class HeldOutEvaluation(TrainerCallback):
    """Scores the policy on the held-out questions before the first step (the untrained
    point, logged at step 0), every `every` steps and at the end; logs `heldout/accuracy` and
    `heldout/valid`, and keeps the best trained step's policy in best/ (a resumed run starts
    from the best that best/ records)."""

    def __init__(self, job: Any, heldout: HeldOut, every: int) -> None:
        self.job, self.heldout, self.every = job, heldout, every
        self.best: HeldOutResult | None = None
        self.last: HeldOutResult | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            self.evaluate(state)
        else:
            self.best = recorded_best(Path(args.output_dir) / "best")

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            self.evaluate(state)

    def evaluate(self, state: Any) -> HeldOutResult | None:
        if self.last is not None and self.last.step == state.global_step:
            return None
        trl = TrlTrainer(self.job.trainer)
        texts = self.heldout.completions()
        result = None
        if state.is_world_process_zero:
            result = self.heldout.score(texts, state.global_step)
        result = self.last = trl.shared(result)
        untrained = state.global_step == 0  # the starting point: not a step to keep in best/
        if not untrained and (self.best is None or result.accuracy > self.best.accuracy):
            self.best = result
            self._save_best(state)
        logs = {"heldout/accuracy": result.accuracy, "heldout/valid": result.valid,
                "heldout/distinct_plans": result.distinct_plans,
                **({"heldout/over_budget": result.over_budget}
                   if result.over_budget is not None else {}),
                **{f"heldout/{k}": v for k, v in result.by_group.items()
                   if len(result.by_group) > 1}}
        if untrained:
            trl.log_now(logs)
        else:
            trl.log_with_step(logs)
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
        trainer = self.job.trainer
        best = Path(trainer.args.output_dir) / "best"
        trainer.save_model(str(best))  # every process: ZeRO-3 gathers the weights
        if state.is_world_process_zero:
            trainer.processing_class.save_pretrained(str(best))
            (best / "training_args.bin").unlink(missing_ok=True)
            write_card(best, {**self.job.card, "steps": state.global_step,
                              "metrics": _last_metrics(state), **self.card_fields()})


def recorded_best(best: Path) -> HeldOutResult | None:
    """The best held-out result best/'s card records (None when there is none to read)."""
    try:
        held = json.loads((best / CARD).read_text(encoding="utf-8"))["heldout"]
        return HeldOutResult(int(held["best_step"]), float(held["best"]), valid=0.0,
                             by_group={}, plans=[])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _last_metrics(state: Any) -> dict[str, Any]:
    return next((h for h in reversed(state.log_history) if "reward" in h), {})


def build_heldout(job: Any) -> HeldOut | None:
    """The job's held-out questions from its config's [heldout] section (None when off). A
    task of the training mix is the same task (its options kept, e.g. the gym's families)."""
    from podium.tasks import get_task

    spec = job.config.heldout
    if spec.task is None:
        return None
    task = job.data.tasks.get(spec.task) if not spec.options else None
    task = task or get_task(spec.task, **spec.options)
    return HeldOut(job, task, task.load(split=spec.split, n=spec.n, seed=spec.seed), spec.split,
                   heldout_budgets(job.config.budget))


def heldout_budgets(spec: Any) -> list[RequestBudget | None] | None:
    """The budgets a budget-conditioned run is evaluated at, at the pool's prices: its
    amounts, or its range's ends and geometric middle (None: no [budget])."""
    if not spec.on:
        return None
    if spec.amounts:
        return [RequestBudget(a) for a in sorted(set(spec.amounts))]
    lo, hi = spec.range
    return [RequestBudget(a) for a in (lo, (lo * hi) ** 0.5, hi)]
