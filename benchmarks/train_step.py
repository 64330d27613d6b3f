"""What does podium add to a GRPO step? A podium training step against a bare TRL step.

Both runs train the bundled SmolLM2-135M-Instruct on CPU with the same prompts, the same shape
(2 questions x 8 rollouts, completions of up to 8 tokens) and the same seeds. The prompt is a
short router prompt (registered here) whose prefill holds the subtask and access list, so the
policy writes only the worker id and most rollouts parse and run their workflow; the share
that did is reported (a rollout that does not parse costs the reward nothing):

* **podium**: `podium.train.trainer.build` — every rollout parsed, its workflow run on a pool
  of two exact function workers (`podium.testing.workers`: adder, zero), graded by the task,
  rewarded by the paper scheme, with metrics and transcripts written;
* **bare**: TRL's `GRPOTrainer` on the same model and prompts with a constant reward function.

Each step is split into generation (TRL's generator), reward (podium's reward function: workflow
execution and grading, plus bookkeeping) and the rest (the forward/backward pass and the
optimizer), timed with wall clocks around those calls; the first step is a warm-up and is not
counted. Targets: podium's overhead (reward + bookkeeping) under 10% of its step, and podium's
step no slower than the bare step + podium's reward time (beyond noise).

    .venv/bin/python benchmarks/train_step.py [--steps 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

STEPS_DEFAULT = 4


class Timer:
    """Wraps a callable; keeps the wall time of each call."""

    def __init__(self, fn: Any, is_async: bool = False) -> None:
        self.fn, self.times = fn, []
        self.__name__ = getattr(fn, "__name__", "timed")
        if is_async:
            async def call(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    self.times.append(time.perf_counter() - start)
            self.call = call
        else:
            def call(*args: Any, **kwargs: Any) -> Any:  # noqa: E306
                start = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.times.append(time.perf_counter() - start)
            self.call = call


def register_prompt() -> None:
    from podium.conductor.prompt import PROMPTS, ConductorPrompt

    PROMPTS["bench-router"] = ConductorPrompt(
        name="bench-router", system="You pick which model answers the question.",
        template="Question: {question}\n\nModels:\n{models}\n{examples}\nPick one model id.",
        prefill='subtasks = ["Answer the question."]\naccess_list = [[]]\nmodel_id = [')


def config(folder: Path, steps: int) -> Any:
    from podium.testing.recipe import sums_recipe
    from podium.train.config import load_train_config

    return load_train_config(sums_recipe(folder, 40, run="""
        prompt = "bench-router"
        fewshots = "none"
        max_steps = 1
        """, grpo=f"""
        max_steps = {steps}
        questions_per_step = 2
        generations = 8
        max_completion_tokens = 8
        learning_rate = 1e-5
        warmup_ratio = 0.0
        save_steps = 10_000
        """))


def timed_run(trainer: Any, reward_holder: Any | None) -> dict[str, list[float]]:
    """Train, timing each step, each generation call and (podium) each reward call."""
    from transformers import TrainerCallback

    generate = Timer(trainer._generate_single_turn)
    trainer._generate_single_turn = generate.call
    reward = None
    if reward_holder is not None:
        reward = Timer(reward_holder.__call__, is_async=True)
        trainer.reward_funcs[0] = reward.call
    steps: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            steps.append(time.perf_counter() - self.t)

    trainer.add_callback(StepClock())
    trainer.train()
    return {"step": steps, "generation": generate.times,
            "reward": reward.times if reward else [0.0] * len(steps)}


def podium_run(steps: int, folder: Path) -> dict[str, list[float]]:
    from podium.train.trainer import build

    plan = build(config(folder, steps))
    try:
        times = timed_run(plan.trainer, plan.trainer.reward_funcs[0])
    finally:
        plan.close()
    logged = [json.loads(x) for x in (folder / "out" / "metrics.jsonl").read_text().splitlines()]
    ran = [1 - m["podium/format_error"] for m in logged if "podium/format_error" in m]
    times["ran_workflow"] = [statistics.fmean(ran)] if ran else [0.0]
    return times


def bare_run(steps: int, folder: Path) -> dict[str, list[float]]:
    from datasets import Dataset
    from trl import GRPOTrainer

    from podium.train.data import build_data, with_prompts
    from podium.train.model import load_policy
    from podium.train.trainer import grpo_args, run_settings

    cfg = config(folder, steps)
    from podium.config import load_pool

    pool = load_pool(cfg.pool.file)
    data = build_data(cfg.data, cfg.subpool, pool, run_settings(cfg, pool))
    model, tokenizer = load_policy("smollm2")
    rows = [{"prompt": r.prompt} for r in with_prompts(data.rows, tokenizer)]

    def constant(prompts: list, completions: list, **kwargs: Any) -> list[float]:
        return [0.5] * len(completions)

    trainer = GRPOTrainer(model=model, reward_funcs=[constant], args=grpo_args(cfg),
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    return timed_run(trainer, None)


def summarise(times: dict[str, list[float]]) -> dict[str, float]:
    """Medians over the steps after the warm-up one."""
    def med(xs: list[float]) -> float:
        return statistics.median(xs[1:] or xs)

    step, gen, rew = med(times["step"]), med(times["generation"]), med(times["reward"])
    out = {"step_s": step, "generation_s": gen, "reward_s": rew,
           "rest_s": step - gen - rew, "reward_share": rew / step if step else 0.0}
    if "ran_workflow" in times:
        out["ran_workflow"] = times["ran_workflow"][0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS_DEFAULT)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/train_step.json"))
    args = parser.parse_args()
    register_prompt()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {"bare": summarise(bare_run(args.steps, Path(tmp) / "bare")),
                "podium": summarise(podium_run(args.steps, Path(tmp) / "podium"))}
    bare, ours = runs["bare"], runs["podium"]
    overhead = ours["reward_share"]
    bound = bare["step_s"] + ours["reward_s"]
    checks = {
        "overhead_under_10pct": overhead < 0.10,
        "step_no_worse_than_bare_plus_reward": ours["step_s"] <= bound * 1.05,  # 5% noise
    }
    print(f"{'run':<8} {'step s':>8} {'generate s':>11} {'reward s':>9} {'rest s':>8} "
          f"{'reward %':>9}")
    for name, r in runs.items():
        print(f"{name:<8} {r['step_s']:>8.2f} {r['generation_s']:>11.2f} {r['reward_s']:>9.3f} "
              f"{r['rest_s']:>8.2f} {100 * r['reward_share']:>8.1f}%")
    print(f"podium rollouts that parsed and ran their workflow: "
          f"{100 * ours.get('ran_workflow', 0):.0f}%")
    print(f"podium overhead (reward + bookkeeping): {100 * overhead:.1f}% of the step "
          f"(target < 10%): {'PASS' if checks['overhead_under_10pct'] else 'MISS'}")
    print(f"podium step {ours['step_s']:.2f}s vs bare + reward {bound:.2f}s: "
          f"{'PASS' if checks['step_no_worse_than_bare_plus_reward'] else 'MISS'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": runs, "checks": checks, "steps": args.steps,
                                    "machine": platform.platform(),
                                    "cpus": os.cpu_count()}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
