"""Does training learn? The SmolLM2-135M Conductor trained on the gym, on a 2-core CPU.

For each id assignment (which Model id is which specialist: a seeded shuffle, a named order,
or with `--orders all` every order of the specialists), train with `podium train`'s own trainer
and measure held-out accuracy before training and every `--eval-every` steps with
`podium.train.heldout` (greedy generation under the workflow grammar, as the trained Conductor
runs, each workflow run and graded by the gym). Training stops at `--minutes` of training wall
time (held-out evaluation is not counted in it), at `--steps`, or once `--stop-when-held K`
evaluations in a row reach the bar. Each order's report gives steps to the bar, seconds per
step and minutes (minutes alone do not travel between machines; steps do), and the steps at
which the greedy policy collapsed onto one plan (every held-out question sent to the same
workers). Next to the curves, on the same held-out items: the best single worker, a
random-routing Conductor (a uniformly random valid workflow: length, workers and access; its
exact expected accuracy where there are few such workflows), both with the question as every
step's subtask (so that in subtask mode too they route without having to write an
instruction), and the untrained Conductor (step 0). The held-out items are the first
`--held-out` of the gym's held-out split, where the families take turns: each family equally
often.

The training settings are configs/train/gym-cpu.toml's (`--set` overrides them); the gym here:
the families `--families` (default arithmetic, reverse and count>arithmetic: three specialists,
a third of the questions chained), question mode or `--mode subtask`.

    .venv/bin/python experiments/gym_learning.py [--assignments 1 5 7 | --orders all]
        [--minutes 25] [--steps 40] [--stop-when-held 2] [--eval-every 5] [--held-out 30]
        [--mode question] [--set grpo.learning_rate=2e-5 ...]
        [--out experiments/results/gym_learning.json] [--with EARLIER.json] [--keep DIR]

Writes JSON and a PNG learning curve over training steps (one line per order, the baselines as
horizontal lines) next to it; `--with` an earlier JSON reports its orders and runs the rest.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from itertools import product
from pathlib import Path
from typing import Any

import podium.train.heldout as podium_heldout

DEFAULT_FAMILIES = ("arithmetic", "reverse", "count>arithmetic")
RECIPE = Path(__file__).resolve().parents[1] / "configs" / "train" / "gym-cpu.toml"


def config(folder: Path, order: tuple[str, ...], args: argparse.Namespace) -> Any:
    """configs/train/gym-cpu.toml with the specialists under ids `order`, the families, no step
    limit but --steps (the clock may stop training first, so the learning rate is constant; warm up with
    grpo.warmup_steps), no [heldout] section (held-out evaluation is this script's) and the
    --set overrides."""
    import tomllib

    from podium.train.config import apply_overrides, train_config_from_dict
    from podium.train.gym import pool_toml

    folder.mkdir(parents=True, exist_ok=True)
    pool = folder / "pool.toml"
    pool.write_text(pool_toml(None, args.mode, order))
    data = tomllib.loads(RECIPE.read_text())
    data.pop("heldout", None)
    data["data"]["tasks"] = [{"name": "gym", "options": {"families": list(args.families)}}]
    data = apply_overrides(data, [
        f"pool.file={pool}", f"grpo.max_steps={args.steps}", "grpo.save_steps=100000",
        "grpo.lr_scheduler=constant",  # the clock, not max_steps, ends the run
        f"output.dir={folder / 'out'}", "output.transcripts_per_step=2", *(args.set or [])])
    return train_config_from_dict(data, f"{RECIPE.name}, ids {', '.join(order)}")


def team(args: argparse.Namespace) -> tuple[str, ...]:
    """The pool's specialists, in the gym's order (so a seed means the same assignment):
    --specialists, or those the families need."""
    from podium.train.gym import SPECIALISTS, specialists_for

    if not args.specialists:
        return specialists_for(args.families)
    unknown = set(args.specialists) - set(SPECIALISTS)
    if unknown:
        raise SystemExit(f"unknown specialists {sorted(unknown)}; choose from {SPECIALISTS}")
    return tuple(s for s in SPECIALISTS if s in args.specialists)


class HeldOut(podium_heldout.HeldOut):
    """podium's held-out evaluation (greedy, grammar-held generation by the live policy, each
    workflow run by the pipeline and graded by the gym) on the first n items of the held-out
    split, with the baselines scored on the same items."""

    def __init__(self, plan: Any, n: int) -> None:
        task = plan.data.tasks["gym"]
        # the first n of the held-out split, where the families take turns: as many questions
        # of each family (a third chained with three families), not a random draw's mix
        super().__init__(plan, task, task.items("test")[:n], "test")

    def accuracy(self, completions: list[str]) -> float:
        return self.score(completions, 0).accuracy

    def _plan(self, ids: list[int], access: list[str], item: Any) -> str:
        """A completion of the prompt's prefill that writes this workflow for `item`, its
        question as every step's subtask (what a worker that sees only its subtask needs;
        in question mode the specialists read the question anyway)."""
        from podium.conductor.grammar import OPENING
        from podium.conductor.prompt import get_prompt
        from podium.train.rollout.explore import question_subtask

        settings = self.job.settings
        opened = get_prompt(settings.prompt).prefill.rstrip().endswith(OPENING)
        subtask = question_subtask(self.task.format(item), settings.max_subtask_chars)
        lists = (f"{', '.join(map(str, ids))}]\nsubtasks = {json.dumps([subtask] * len(ids))}"
                 f"\naccess_list = [{', '.join(access)}]")
        return lists if opened else "\n" + OPENING + lists

    def _plans(self, ids: list[int], access: list[str]) -> list[str]:
        return [self._plan(ids, access, item) for item in self.items]

    def baselines(self) -> dict[str, float]:
        names = [w.name for w in self.job.pool.workers]
        single = {name: self.accuracy(self._plans([i], ["[]"]))
                  for i, name in enumerate(names)}
        return {"best_single": max(single.values()), "single": single,
                "random_routing": self.random_routing(len(names))}

    def random_routing(self, workers: int, most: int = 64) -> float:
        """The accuracy of a uniformly random valid workflow (a length, then each step's worker
        and, after the first, its access): exact, the mean over every workflow of each length,
        when there are at most `most` of them; otherwise the mean of three random draws."""
        from podium.train.rollout.explore import count_skeletons

        steps = self.job.settings.max_steps
        if sum(count_skeletons(workers, steps)) <= most:
            return statistics.fmean(
                statistics.fmean(self.accuracy(self._plans(list(ids), ["[]", *access]))
                                 for ids in product(range(workers), repeat=k)
                                 for access in product(['"all"', "[]"], repeat=k - 1))
                for k in range(1, steps + 1))
        rng = random.Random(0)

        def random_plan(item: Any) -> str:
            k = rng.randint(1, steps)
            ids = [rng.randrange(workers) for _ in range(k)]
            return self._plan(ids, ["[]"] + [rng.choice(['"all"', "[]"]) for _ in range(k - 1)],
                              item)

        return statistics.fmean(self.accuracy([random_plan(i) for i in self.items])
                                for _ in range(3))


def collapses(curve: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The spans of consecutive evaluations (first step, last step) at which every held-out
    question got the same plan: the greedy policy collapsed onto one plan."""
    spans: list[tuple[int, int]] = []
    previous = False
    for c in curve:
        one = c["distinct_plans"] == 1
        if one and previous:
            spans[-1] = (spans[-1][0], c["step"])
        elif one:
            spans.append((c["step"], c["step"]))
        previous = one
    return spans


def run_assignment(order: tuple[str, ...], seed: int | None, args: argparse.Namespace,
                   folder: Path) -> dict[str, Any]:
    from transformers import TrainerCallback

    from podium.train.trainer import build

    plan = build(config(folder, order, args))
    held = HeldOut(plan, args.held_out)
    curve: list[dict[str, Any]] = []
    clock = {"train_s": 0.0, "started": time.perf_counter()}
    name = f"seed {seed}" if seed is not None else ", ".join(order)

    def evaluate(step: int) -> None:
        t = time.perf_counter()
        r = held.score(held.completions(), step)
        plans: dict[str, int] = {}
        for p in r.plans:
            key = " > ".join(p) if p is not None else "(no workflow)"
            plans[key] = plans.get(key, 0) + 1
        curve.append({"step": step, "train_min": clock["train_s"] / 60, "accuracy": r.accuracy,
                      "by_family": r.by_group, "distinct_plans": r.distinct_plans,
                      "plans": plans})
        one = " · one plan for every question" if r.distinct_plans == 1 else ""
        print(f"  {name} step {step:3d} · {clock['train_s'] / 60:5.1f} min · held-out "
              f"{100 * r.accuracy:5.1f}% {r.by_group}{one}", flush=True)
        clock["eval_s"] = clock.get("eval_s", 0.0) + time.perf_counter() - t

    def held_long_enough() -> bool:
        k = args.stop_when_held
        return bool(k) and len(curve) >= k and all(c["accuracy"] >= args.bar
                                                   for c in curve[-k:])

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            clock["train_s"] += time.perf_counter() - self.t
            if state.global_step % args.eval_every == 0:
                evaluate(state.global_step)
            if clock["train_s"] >= 60 * args.minutes or held_long_enough():
                control.should_training_stop = True

    try:
        baselines = held.baselines()
        evaluate(0)
        plan.trainer.add_callback(Clock())
        plan.trainer.train()
        steps = plan.trainer.state.global_step
        if curve[-1]["step"] != steps:
            evaluate(steps)
    finally:
        plan.close()
    at = next((c for c in curve if c["accuracy"] >= args.bar), None)
    return {"seed": seed, "assignment": list(order),
            "curve": curve, "baselines": baselines,
            "untrained": curve[0]["accuracy"], "final": curve[-1]["accuracy"],
            "best": max(c["accuracy"] for c in curve), "bar": args.bar,
            "steps_to_bar": at["step"] if at else None,
            "minutes_to_bar": at["train_min"] if at else None,
            "collapsed": collapses(curve), "steps": steps,
            "s_per_step": clock["train_s"] / max(steps, 1),
            "train_min": clock["train_s"] / 60, "eval_min": clock.get("eval_s", 0.0) / 60}


def plot(results: list[dict[str, Any]], path: Path, bar: float = 0.9,
         label: Callable[[dict[str, Any]], str] | None = None) -> None:
    """Each result's curve (named by `label`, default its assignment), with the baselines of
    the first and the bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in results:
        ax.plot([c["step"] for c in r["curve"]], [100 * c["accuracy"] for c in r["curve"]],
                marker="o", ms=3, label=label(r) if label else
                "ids 0, 1, 2: " + ", ".join(r["assignment"]))
    b = results[0]["baselines"]
    ax.axhline(100 * b["best_single"], ls="--", c="grey", label="best single worker")
    ax.axhline(100 * b["random_routing"], ls=":", c="grey", label="random routing")
    ax.axhline(100 * bar, ls="-", c="green", lw=0.6, label=f"target {100 * bar:.0f}%")
    ax.set_xlabel("training step (3 questions × 8 rollouts a step)")
    ax.set_ylabel("held-out accuracy (%)")
    ax.set_ylim(-2, 102)
    ax.set_title("SmolLM2-135M Conductor on the gym")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def orders(args: argparse.Namespace) -> list[tuple[tuple[str, ...], int | None]]:
    """The id orders to train on, each with its assignment seed (None for a named order):
    every permutation of the specialists (--orders all), the named orders, or the seeds'."""
    from itertools import permutations

    from podium.train.gym import assignment

    names = team(args)
    if args.orders == ["all"]:
        return [(o, None) for o in permutations(names)]
    if args.orders:
        out = []
        for text in args.orders:
            order = tuple(x.strip() for x in text.split(","))
            if sorted(order) != sorted(names):
                raise SystemExit(f"--orders {text!r}: name each of {', '.join(names)} once, "
                                 "comma-separated, in id order (or --orders all)")
            out.append((order, None))
        return out
    return [(tuple(assignment(seed, names)), seed) for seed in args.assignments]


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    bar = args.bar
    print(f"\n{'ids 0, 1, 2':<34} {'untrained':>9} {'best':>6} {'final':>6} "
          f"{f'steps to {100 * bar:.0f}%':>12} {'min to':>6} {'s/step':>6} {'steps':>5}  "
          "collapsed onto one plan")
    for r in results:
        steps = r.get("steps_to_bar")
        to_min = r.get("minutes_to_bar")
        spans = ", ".join(f"steps {a}–{b}" if a != b else f"step {a}"
                          for a, b in r.get("collapsed", [])) or "never"
        print(f"{', '.join(r['assignment']):<34} {100 * r['untrained']:>8.1f}% "
              f"{100 * r['best']:>5.1f}% {100 * r['final']:>5.1f}% "
              f"{steps if steps is not None else '-':>12} "
              f"{f'{to_min:.1f}' if to_min is not None else '-':>6} "
              f"{r.get('s_per_step', 0):>6.1f} {r.get('steps', '-'):>5}  {spans}")
    b = results[0]["baselines"]
    print(f"best single worker {100 * b['best_single']:.1f}% · random routing "
          f"{100 * b['random_routing']:.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # seeds 1, 2 and 3 all shuffle the three specialists the same way; 1, 5 and 7 give three
    # different assignments (an assignment already measured is skipped)
    parser.add_argument("--assignments", type=int, nargs="+", default=[1, 5, 7],
                        metavar="SEED", help="id assignments as seeded shuffles")
    parser.add_argument("--orders", nargs="+", metavar="ORDER",
                        help="id orders instead of seeds: 'all' (every permutation of the "
                             "specialists: six for three) or each order as names, e.g. "
                             "counter,reverser,calculator")
    parser.add_argument("--with", dest="earlier", type=Path, help="a JSON this script wrote: "
                        "its assignments are reported, not run again (a stopped run continues)")
    parser.add_argument("--families", nargs="+", default=list(DEFAULT_FAMILIES))
    parser.add_argument("--specialists", nargs="+", help="the pool's specialists (default: "
                        "those the families need; more are distractors)")
    parser.add_argument("--mode", choices=("question", "subtask"), default="question")
    parser.add_argument("--minutes", type=float, default=25, help="training minutes per order")
    parser.add_argument("--steps", type=int, default=100000, help="training steps per order")
    parser.add_argument("--bar", type=float, help="the held-out target (default 0.9 in "
                        "question mode, 0.8 in subtask mode)")
    parser.add_argument("--stop-when-held", type=int, default=0, metavar="K",
                        help="stop an order once K evaluations in a row reach the bar")
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--held-out", type=int, default=30)
    parser.add_argument("--set", action="append", help="a training config override")
    parser.add_argument("--out", type=Path, default=Path("experiments/results/gym_learning.json"))
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="train in DIR/<ids> and keep its metrics.jsonl and "
                             "transcripts.jsonl, instead of a temporary folder")
    args = parser.parse_args()
    # the targets: question mode, >= 90% on every assignment; subtask mode, >= 80% on one
    every = args.mode == "question"
    if args.bar is None:
        args.bar = 0.9 if every else 0.8

    results = json.loads(args.earlier.read_text())["results"] if args.earlier else []
    seen = {tuple(r["assignment"]) for r in results}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        for order, seed in orders(args):
            if order in seen:
                print(f"ids {', '.join(order)}: already measured; skipped", flush=True)
                continue
            seen.add(order)
            print(f"ids 0, 1, 2: {', '.join(order)}"
                  + (f" (assignment seed {seed})" if seed is not None else ""), flush=True)
            results.append(run_assignment(order, seed, args, Path(tmp) / "-".join(order)))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"args": {k: v for k, v in vars(args).items()
                                                     if k != "out"}, "results": results},
                                           indent=2, default=str))
    png = args.out.with_suffix(".png")
    plot(results, png, args.bar)
    report(results, args)
    reached = [r.get("minutes_to_bar") for r in results]
    hits = [at is not None and at <= args.minutes for at in reached]
    ok = all(hits) if every else any(hits)
    print(f"target: >= {100 * args.bar:.0f}% held-out on {'every' if every else 'at least one'} "
          f"assignment within {args.minutes:g} min: {'PASS' if ok else 'MISS'}")
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
