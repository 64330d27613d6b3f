"""One Conductor for every budget? A budget-conditioned SmolLM2-135M Conductor on the priced gym.

For each id assignment (`--seeds`: seeded shuffles of the priced gym's four workers), train
configs/train/gym-budget.toml's recipe for `--minutes` of training wall time (held-out
evaluation not counted) and score the trained Conductor on the first `--held-out` questions
of the gym's held-out split (arithmetic and reverse taking turns), greedy under the workflow
grammar as it runs, at three budgets on two price lists:

* `train`: the pool's prices (calculator and reverser $0.001 a call, generalist $0.002,
  expert $0.004) at budgets $0.001, $0.002 and $0.004;
* `unseen`: every price x3 and the generalist's and expert's prices swapped (expert $0.006,
  generalist $0.012) at budgets $0.003, $0.006 and $0.012. Training scales prices by 0.5..2
  only and never puts the expert below the generalist (`budget.keep_order`), so this list's
  order was never seen.

A plan whose list price passes its budget counts as wrong. At each budget it reports accuracy,
the mean list price of a question's plan and the share of plans over budget, next to:

* every fixed single worker (the same one-step plan for every question);
* the best fixed policy for that budget: a plan per family (every plan of at most two steps,
  both access values), the best one that keeps to the budget, computed exactly on the same
  questions (the workers are deterministic);
* the untrained Conductor (under the same settings as the arm).

`--arms` chooses what the Conductor is trained and scored with (the same budget-aware reward
in each):

* `held` (the recipe): the budget shown (`run.show_budget`) and every plan held to it by the
  grammar (`run.hold_budget`), so that no plan can pass it and the policy learns the choice
  among those that fit;
* `shown`: the budget shown, plans not held (an over-budget plan scores as wrong);
* `blind`: the budget neither shown nor held.

Targets: at every budget of the training list, <= 5% of plans over budget and accuracy within 5
points of the best fixed policy; on the unseen list <= 10% and 10 points; the trained policy
beats every fixed policy (a plan per family, one rule for all budgets) on at least two budgets
of the training list; on >= 2 assignments.

    .venv/bin/python experiments/gym_budget.py [--seeds 1 2] [--minutes 40] [--held-out 100]
        [--arms held,shown,blind] [--set grpo.learning_rate=1e-4 ...]
        [--out experiments/results/gym_budget.json] [--with EARLIER.json]

Writes JSON and an accuracy-vs-cost PNG next to it (one point per budget, the frontier of the
fixed policies drawn); `--with` an earlier JSON reports its runs and runs the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from itertools import product
from pathlib import Path
from typing import Any

RECIPE = Path(__file__).resolve().parents[1] / "configs" / "train" / "gym-budget.toml"
TRAIN_BUDGETS = (0.001, 0.002, 0.004)
ARMS = {"held": ["run.show_budget=true", "run.hold_budget=true"],
        "shown": ["run.show_budget=true", "run.hold_budget=false"],
        "blind": ["run.show_budget=false", "run.hold_budget=false"]}
UNSEEN_SCALE = 3.0
UNSEEN_SWAP = ("generalist", "expert")


def price_lists(names: list[str]) -> dict[str, dict[str, Any]]:
    """The two price lists (per pool index) and their budgets."""
    from podium.train.gym.priced import PRICES

    base = [PRICES[n] for n in names]
    swapped = dict(PRICES)
    a, b = UNSEEN_SWAP
    swapped[a], swapped[b] = PRICES[b], PRICES[a]
    return {"train": {"prices": base, "budgets": list(TRAIN_BUDGETS)},
            "unseen": {"prices": [UNSEEN_SCALE * swapped[n] for n in names],
                       "budgets": [UNSEEN_SCALE * x for x in TRAIN_BUDGETS]}}


def config(folder: Path, seed: int, arm: str, args: argparse.Namespace) -> Any:
    """The recipe on the priced pool under assignment `seed`; no [heldout] (this script
    scores), the clock ending the run, with the arm's settings (`ARMS`)."""
    import tomllib

    from podium.train.config import apply_overrides, train_config_from_dict
    from podium.train.gym import priced_pool_toml

    folder.mkdir(parents=True, exist_ok=True)
    pool = folder / "pool.toml"
    pool.write_text(priced_pool_toml(seed))
    data = tomllib.loads(RECIPE.read_text())
    data.pop("heldout", None)
    data = apply_overrides(data, [
        f"pool.file={pool}", f"grpo.max_steps={args.steps}", "grpo.save_steps=100000",
        f"output.dir={folder / 'out'}", "output.transcripts_per_step=2",
        *ARMS[arm], *(args.set or [])])
    return train_config_from_dict(data, f"{RECIPE.name}, seed {seed}, {arm}")


def fixed_plans(pipeline: Any, task: Any, items: list[Any], workers: int,
                steps: int) -> dict[str, dict[str, Any]]:
    """Every plan of at most `steps` steps (ids, access), run on every item: which items it
    gets right, and its workers (to price at any list)."""
    from podium.outcome import grade_outcome
    from podium.workflow.types import Step, Workflow

    plans = [((w,), ("[]",)) for w in range(workers)]
    for k in range(2, steps + 1):
        plans += [(ids, ("[]", *acc)) for ids in product(range(workers), repeat=k)
                  for acc in product(('"all"', "[]"), repeat=k - 1)]

    async def run_all() -> dict[str, dict[str, Any]]:
        out = {}
        for ids, access in plans:
            right = []
            for item in items:
                wf = Workflow(tuple(Step(w, item.question, "all" if a == '"all"' else ())
                                    for w, a in zip(ids, access, strict=True)))
                run = await pipeline.run_workflow(task.format(item), wf)
                right.append(bool((await grade_outcome(run.outcome, task, item)).correct))
            out[f"{list(ids)} {list(access)}"] = {"workers": list(ids), "right": right}
        return out

    return asyncio.run(run_all())


def fixed_tables(plans: dict[str, dict[str, Any]], items: list[Any], names: list[str],
                 prices: list[float], budget: float) -> dict[str, Any]:
    """At one price list and budget: each single worker's accuracy, each plan's accuracy per
    family (over budget: 0), and the best fixed policy (the best plan of each family)."""
    from podium.conductor.budget import plan_price

    families = sorted({i.meta["family"] for i in items})
    fam_of = [i.meta["family"] for i in items]
    table: dict[str, dict[str, float]] = {}
    cost: dict[str, float] = {}
    for key, p in plans.items():
        price = plan_price(p["workers"], prices)
        within = price <= budget * (1 + 1e-9)
        cost[key] = price
        table[key] = {f: statistics.fmean(r and within for r, g in zip(p["right"], fam_of,
                                                                        strict=True) if g == f)
                      for f in families}
    best = {f: max(table, key=lambda k: (table[k][f], -cost[k])) for f in families}
    share = {f: fam_of.count(f) / len(items) for f in families}
    return {
        "single": {names[p["workers"][0]]: sum(share[f] * table[k][f] for f in families)
                   for k, p in plans.items() if len(p["workers"]) == 1},
        "best_fixed": sum(share[f] * table[best[f]][f] for f in families),
        "best_fixed_policy": {f: best[f] for f in families},
        "best_fixed_cost": sum(share[f] * cost[best[f]] for f in families),
        "by_family": table, "cost": cost, "share": share}


def score_policy(plan: Any, task: Any, items: list[Any], lists: dict[str, dict[str, Any]],
                 ) -> dict[str, list[dict[str, Any]]]:
    """The live policy's greedy plans at every budget of every list (podium.train.heldout)."""
    from podium.conductor.budget import RequestBudget
    from podium.train.heldout import HeldOut

    out: dict[str, list[dict[str, Any]]] = {}
    for name, spec in lists.items():
        rows = []
        for b in spec["budgets"]:
            held = HeldOut(plan, task, items, "test", [RequestBudget(b, tuple(spec["prices"]))])
            r = held.score(held.completions(), plan.trainer.state.global_step)
            plans: dict[str, int] = {}
            for p in r.plans:
                key = " > ".join(p) if p is not None else "(no workflow)"
                plans[key] = plans.get(key, 0) + 1
            rows.append({"budget": b, "accuracy": r.accuracy, "over_budget": r.over_budget,
                         "cost": r.cost, "valid": r.valid, "by_family": r.by_group,
                         "plans": plans})
        out[name] = rows
    return out


def run_arm(seed: int, arm: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from transformers import TrainerCallback

    from podium.train.trainer import build

    plan = build(config(folder, seed, arm, args))
    task = plan.data.tasks["gym"]
    items = task.items("test")[:args.held_out]
    names = [w.name for w in plan.pool.workers]
    lists = price_lists(names)
    clock = {"train_s": 0.0}

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            clock["train_s"] += time.perf_counter() - self.t
            if clock["train_s"] >= 60 * args.minutes:
                control.should_training_stop = True

    try:
        fixed = fixed_plans(plan.pipeline, task, items, len(names), plan.settings.max_steps)
        tables = {name: [fixed_tables(fixed, items, names, spec["prices"], b)
                         for b in spec["budgets"]] for name, spec in lists.items()}
        print(f"  seed {seed} {arm}: scoring the untrained Conductor", flush=True)
        untrained = score_policy(plan, task, items, lists)
        plan.trainer.add_callback(Clock())
        plan.trainer.train()
        steps = plan.trainer.state.global_step
        print(f"  seed {seed} {arm}: {steps} steps in {clock['train_s'] / 60:.1f} min; "
              "scoring the trained Conductor", flush=True)
        trained = score_policy(plan, task, items, lists)
    finally:
        plan.close()
    return {"seed": seed, "arm": arm, "ids": names, "lists": lists, "steps": steps,
            "train_min": clock["train_s"] / 60, "s_per_step": clock["train_s"] / max(steps, 1),
            "trained": trained, "untrained": untrained,
            "fixed": {k: [{x: t[x] for x in ("single", "best_fixed", "best_fixed_policy",
                                              "best_fixed_cost")} for t in v]
                      for k, v in tables.items()},
            "beats": beats_fixed(trained["train"], tables["train"])}


def beats_fixed(trained: list[dict[str, Any]], tables: list[dict[str, Any]]) -> dict[str, Any]:
    """Over every fixed policy (a plan per family, the same at every budget): at how many
    budgets the trained policy is more accurate; the fixed policy it beats at the fewest."""
    families = sorted(tables[0]["share"])
    keys = list(tables[0]["by_family"])
    worst: tuple[int, tuple[str, ...]] | None = None
    for policy in product(keys, repeat=len(families)):
        wins = 0
        for t, r in zip(tables, trained, strict=True):
            acc = sum(t["share"][f] * t["by_family"][k][f]
                      for f, k in zip(families, policy, strict=True))
            wins += r["accuracy"] > acc + 1e-9
        if worst is None or wins < worst[0]:
            worst = (wins, policy)
    assert worst is not None
    return {"fewest_budgets_beaten": worst[0],
            "that_policy": dict(zip(families, worst[1], strict=True)),
            "policies": len(keys) ** len(families)}


def verdicts(r: dict[str, Any]) -> dict[str, bool]:
    def within(name: str, over: float, points: float) -> bool:
        return all((t["over_budget"] or 0) <= over
                   and t["accuracy"] >= f["best_fixed"] - points / 100
                   for t, f in zip(r["trained"][name], r["fixed"][name], strict=True))

    return {"train list: <=5% over, within 5 points": within("train", 0.05, 5),
            "unseen list: <=10% over, within 10 points": within("unseen", 0.10, 10),
            "beats every fixed policy on >= 2 budgets": r["beats"]["fewest_budgets_beaten"] >= 2}


def report(results: list[dict[str, Any]]) -> None:
    for r in results:
        print(f"\nseed {r['seed']} ({r['arm']}), ids 0..3 = {', '.join(r['ids'])}: "
              f"{r['steps']} steps, {r['train_min']:.1f} min ({r['s_per_step']:.0f} s/step)")
        for name in ("train", "unseen"):
            print(f"  {name} prices {r['lists'][name]['prices']}")
            print(f"  {'budget':>8} {'trained':>8} {'over':>5} {'cost':>8} {'untrained':>9} "
                  f"{'best fixed':>10} {'its cost':>8}  single workers")
            for t, u, f in zip(r["trained"][name], r["untrained"][name], r["fixed"][name],
                               strict=True):
                singles = ", ".join(f"{k} {100 * v:.0f}" for k, v in f["single"].items())
                print(f"  {t['budget']:>8.4g} {100 * t['accuracy']:>7.1f}% "
                      f"{100 * (t['over_budget'] or 0):>4.0f}% {t['cost']:>8.4f} "
                      f"{100 * u['accuracy']:>8.1f}% {100 * f['best_fixed']:>9.1f}% "
                      f"{f['best_fixed_cost']:>8.4f}  {singles}")
        b = r["beats"]
        print(f"  fewest budgets at which it beats a fixed policy: {b['fewest_budgets_beaten']} "
              f"of 3 (over {b['policies']} policies; that one: {b['that_policy']})")
        for what, ok in verdicts(r).items():
            print(f"  {what}: {'PASS' if ok else 'MISS'}")


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for ax, name in zip(axes, ("train", "unseen"), strict=True):
        for r in results:
            label = f"seed {r['seed']} {r['arm']}"
            pts = r["trained"][name]
            ax.plot([p["cost"] for p in pts], [100 * p["accuracy"] for p in pts], marker="o",
                    label=f"trained ({label})")
            for p in pts:
                ax.annotate(f"${p['budget']:g}", (p["cost"], 100 * p["accuracy"]), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        f = results[0]["fixed"][name]
        ax.plot([x["best_fixed_cost"] for x in f], [100 * x["best_fixed"] for x in f],
                ls="--", c="grey", marker="s", ms=4, label="best fixed policy per budget")
        u = results[0]["untrained"][name]
        ax.scatter([p["cost"] for p in u], [100 * p["accuracy"] for p in u], c="black",
                   marker="x", label="untrained")
        ax.set_title(f"{name} prices (budgets {', '.join(f'${b:g}' for b in results[0]['lists'][name]['budgets'])})",
                     fontsize=9)
        ax.set_xlabel("mean list price of a question's plan (USD)")
        ax.set_ylim(-2, 102)
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel("held-out accuracy within budget (%)")
    fig.suptitle("SmolLM2-135M Conductor on the priced gym: one policy, three budgets")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--arms", default="held",
                        help="comma-separated, of: " + ", ".join(ARMS))
    parser.add_argument("--minutes", type=float, default=40)
    parser.add_argument("--steps", type=int, default=100000)
    parser.add_argument("--held-out", type=int, default=100)
    parser.add_argument("--set", action="append", help="a training config override")
    parser.add_argument("--out", type=Path, default=Path("experiments/results/gym_budget.json"))
    parser.add_argument("--with", dest="earlier", type=Path)
    args = parser.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or set(arms) - set(ARMS):
        raise SystemExit(f"--arms: comma-separated, of: {', '.join(ARMS)}")
    results = json.loads(args.earlier.read_text())["results"] if args.earlier else []
    done = {(r["seed"], r["arm"]) for r in results}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for arm in arms:
                if (seed, arm) in done:
                    continue
                print(f"seed {seed}, {arm}", flush=True)
                results.append(run_arm(seed, arm, args, Path(tmp) / f"{seed}-{arm}"))
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(
                    {"args": {k: v for k, v in vars(args).items() if k != "out"},
                     "results": results}, indent=2, default=str))
    report(results)
    png = args.out.with_suffix(".png")
    plot(results, png)
    print(f"wrote {args.out} and {png}")


if __name__ == "__main__":
    main()
