"""How long is a subtask-mode gym step, with drawn plans written against sampled?

In the gym's subtask mode with `[grpo] explore_subtasks = "question"`, a drawn plan's grammar
admits one text (its ids, access values and the question as every subtask), so
`ConstrainedRollout` writes that completion instead of sampling it token by token. This script
trains the same steps twice from the same seed, once as podium does (**written**) and once with
every rollout sampled under its grammar (**sampled**, the behaviour before): the gym's
configs/train/gym-cpu.toml with run S5's subtask-mode settings (docs/gym.md) unless `--set`
says otherwise. It reports, as medians over the steps after the first (a warm-up), the whole
step, the rollout function (generation; the written completions included) and the rest
(reward, forward/backward, optimiser), and the mean completion length.

    .venv/bin/python benchmarks/gym_step.py [--steps 4] [--seed 1] [--set KEY=VALUE ...]
        [--out benchmarks/results/gym_step.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from gym_learning import DEFAULT_FAMILIES, config

S5 = ["run.prompt=compact-subtask", "run.max_subtask_chars=72",
      "grpo.max_completion_tokens=128", "grpo.temperature=0.6", "grpo.credit=live",
      "grpo.explore_subtasks=question"]


def run(mode: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from transformers import TrainerCallback

    from podium.train.constrained import ConstrainedRollout
    from podium.train.trainer import build

    ns = argparse.Namespace(families=list(DEFAULT_FAMILIES), specialists=None, mode="subtask",
                            set=[*S5, *(args.set or []), f"grpo.max_steps={args.steps}"])
    written = ConstrainedRollout.written
    if mode == "sampled":  # every rollout sampled under its grammar, as before
        ConstrainedRollout.written = lambda self, *a: None  # type: ignore[method-assign]
    try:
        plan = build(config(folder, args.seed, ns))
        rollout, times = plan.trainer.rollout_func, {"rollout": [], "step": []}

        def timed(prompts: list[str], trainer: Any) -> dict[str, Any]:
            start = time.perf_counter()
            out = rollout(prompts, trainer)
            times["rollout"].append(time.perf_counter() - start)
            return out

        plan.trainer.rollout_func = timed

        class Clock(TrainerCallback):
            def on_step_begin(self, a, state, control, **kw):
                self.t = time.perf_counter()

            def on_step_end(self, a, state, control, **kw):
                times["step"].append(time.perf_counter() - self.t)

        plan.trainer.add_callback(Clock())
        try:
            plan.trainer.train()
        finally:
            plan.close()
    finally:
        ConstrainedRollout.written = written  # type: ignore[method-assign]
    lengths = [json.loads(x).get("completions/mean_length") for x in
               (folder / "out" / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    rollouts = times["rollout"][1:] or times["rollout"]  # one call a step (no accumulation)
    steps = times["step"][1:] or times["step"]
    step, gen = statistics.median(steps), statistics.median(rollouts)
    return {"mode": mode, "steps": len(times["step"]), "step_s": step, "rollout_s": gen,
            "rest_s": step - gen, "mean_length": statistics.fmean(x for x in lengths if x),
            "step_times": times["step"], "rollout_times": times["rollout"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1, help="the id assignment")
    parser.add_argument("--set", action="append", help="a training config override")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gym_step.json"))
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("sampled", "written"):
            print(f"{mode}: {args.steps} steps", flush=True)
            results.append(run(mode, args, Path(tmp) / mode))
    print(f"\nsubtask mode, seed {args.seed}; medians over steps 2..{args.steps}")
    print(f"{'rollouts':9s} {'step s':>7s} {'generate s':>11s} {'rest s':>7s} "
          f"{'mean length':>12s}")
    for r in results:
        print(f"{r['mode']:9s} {r['step_s']:7.1f} {r['rollout_s']:11.1f} {r['rest_s']:7.1f} "
              f"{r['mean_length']:12.1f}")
    base, new = results
    print(f"written / sampled: step {new['step_s'] / base['step_s']:.2f}x, "
          f"generation {new['rollout_s'] / base['rollout_s']:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "out"},
                                    "results": results}, indent=2, default=str))


if __name__ == "__main__":
    main()
