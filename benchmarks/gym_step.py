"""How long is a subtask-mode gym step: drawn plans written or sampled, idle rows skipped or not?

In the gym's subtask mode with `[rollout] explore_subtasks = "question"`, a drawn plan's grammar
admits one text (its ids, access values and the question as every subtask), so
`ConstrainedRollout` writes that completion instead of sampling it token by token; and the loss
leaves out the completions with no advantage (`podium.train.zero_advantage`: wrong drawn plans, groups
without spread), whose gradient is zero. This script trains the same steps from the same seed
once for each mode:

* **sampled**: every rollout sampled under its grammar, and TRL's loss over every completion
  (podium before both changes);
* **written**: drawn plans written, TRL's loss over every completion;
* **podium**: drawn plans written and idle completions skipped (what podium does).

The gym's configs/train/gym-cpu.toml with run S5's subtask-mode settings (docs/gym.md) unless
`--set` says otherwise. It reports, as medians over the steps after the first (a warm-up), the
whole step, the rollout function (generation; the written completions included) and the rest
(reward, forward/backward, optimiser), the mean completion length, and the share of completions
the loss ran over.

    .venv/bin/python benchmarks/gym_step.py [--steps 4] [--seed 1] [--modes sampled written podium]
        [--set KEY=VALUE ...] [--out benchmarks/results/gym_step.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# the gym recipe as experiments/gym_learning.py trains it
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from gym_learning import DEFAULT_FAMILIES, config, team  # noqa: E402

S5 = ["run.prompt=compact-subtask", "run.max_subtask_chars=72",
      "grpo.max_completion_tokens=128", "grpo.temperature=0.6", "rollout.credit=live",
      "rollout.explore_subtasks=question"]
MODES = ("sampled", "written", "podium")


def run(mode: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from transformers import TrainerCallback

    from podium.train import zero_advantage
    from podium.train.gym import assignment
    from podium.train.rollout.constrained import ConstrainedRollout
    from podium.train.trainer import build

    ns = argparse.Namespace(families=list(DEFAULT_FAMILIES), specialists=None, mode="subtask",
                            steps=args.steps, set=[*S5, *(args.set or [])])
    written, active_rows = ConstrainedRollout.written, zero_advantage.active_rows
    if mode == "sampled":  # every rollout sampled under its grammar, as before
        ConstrainedRollout.written = lambda self, *a: None  # type: ignore[method-assign]
    rows = {"all": 0, "run": 0}

    def counted(inputs: dict[str, Any], loss_type: str) -> Any:
        cut = active_rows(inputs, loss_type) if mode == "podium" else None
        n = len(inputs["advantages"])
        rows["all"] += n
        rows["run"] += n if cut is None else 1 if cut[0] is None else len(cut[0]["advantages"])
        return cut

    zero_advantage.active_rows = counted  # the sampled and written modes: TRL's loss over every row
    try:
        plan = build(config(folder, tuple(assignment(args.seed, team(ns))), ns))
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
        zero_advantage.active_rows = active_rows
    lengths = [json.loads(x).get("completions/mean_length") for x in
               (folder / "out" / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    rollouts = times["rollout"][1:] or times["rollout"]  # one call a step (no accumulation)
    steps = times["step"][1:] or times["step"]
    step, gen = statistics.median(steps), statistics.median(rollouts)
    return {"mode": mode, "steps": len(times["step"]), "step_s": step, "rollout_s": gen,
            "rest_s": step - gen, "mean_length": statistics.fmean(x for x in lengths if x),
            "loss_rows": rows["run"] / (rows["all"] or 1),
            "step_times": times["step"], "rollout_times": times["rollout"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1, help="the id assignment")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--set", action="append", help="a training config override")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/gym_step.json"))
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes:
            print(f"{mode}: {args.steps} steps", flush=True)
            results.append(run(mode, args, Path(tmp) / mode))
    print(f"\nsubtask mode, seed {args.seed}; medians over steps 2..{args.steps}")
    print(f"{'mode':8s} {'step s':>7s} {'generate s':>11s} {'rest s':>7s} "
          f"{'mean length':>12s} {'loss rows':>10s}")
    for r in results:
        print(f"{r['mode']:8s} {r['step_s']:7.1f} {r['rollout_s']:11.1f} {r['rest_s']:7.1f} "
              f"{r['mean_length']:12.1f} {r['loss_rows']:10.0%}")
    base = results[0]
    for r in results[1:]:
        print(f"{r['mode']} / {base['mode']}: step {r['step_s'] / base['step_s']:.2f}x, "
              f"generation {r['rollout_s'] / base['rollout_s']:.2f}x, "
              f"rest {r['rest_s'] / base['rest_s']:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "out"},
                                    "results": results}, indent=2, default=str))


if __name__ == "__main__":
    main()
