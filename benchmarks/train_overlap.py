"""Training that overlaps its workers (`[grpo] overlap`) against training that waits for them.

**Speed** (`--speed`, the default): configs/train/gym-cpu.toml (the gym's recipe: 3 questions
x 8 rollouts a step, grammar-held, half the group on drawn plans) with every worker call made
`L` seconds slow (`slow_specialists.py`, as an API worker is, 64 calls at once), trained for
`--steps` steps synchronously and overlapped, at three latencies: L = 0; L1, chosen from the
synchronous L = 0 run so that a batch's workflows take about as long as the policy's own step
(a plan is at most 2 calls one after the other, so L1 = (generation + training) / 2); and
3 x L1. For each it reports, as means over steps 3 to N-1 (so that steps an hour is 3600 over
the mean; an overlapped run's steps alternate long and short), the whole step's wall time
(`time/step_s`: generation, waiting on workers, training, optimiser and callbacks), its parts,
the share spent waiting, and the share of the workflows' time hidden. Steps 1 and 2 are left
out: the overlapped run's first step generates two batches and starts both, so its second
step's workflows have run for a whole step (a head start no later step has); the last step
has no step after it to start. Targets: at L1 the overlapped run takes >= 1.6x as many steps
an hour; at L = 0 it is at most 5% slower.

**Learning** (`--learning`): experiments/gym_learning.py's run of each id assignment, to 90%
held-out (evaluated every `--eval-every` steps, stopping after two evaluations at the bar),
synchronous and overlapped, once for each training seed of `--seeds` (`grpo.seed`: the
sampling, the drawn plans and the batch order). Target: the overlapped runs reach the bar within
1.25x the steps the synchronous runs need, on each assignment, compared on the medians over the
seeds (one run of each is not enough: two seeds of the same synchronous recipe differ by more
than 1.25x). Curves in a PNG beside the JSON.

**The paper's regime, on paper** (always printed): a step of the paper recipe (4 questions x
64 rollouts, Qwen2.5-7B on 2 GPUs) costs G + W + T synchronous and about max(G + T, W / d)
overlapped with `max_staleness = d`; G, T and W there are stated assumptions (no GPU figure of
a 7B run was measured here), and the overlap's own cost (`--speed` at L = 0) is measured.

    .venv/bin/python benchmarks/train_overlap.py [--speed] [--learning] [--steps 6]
        [--latencies 1 3] [--assignments 1 5 7] [--seeds 42 43 44]
        [--modes both|synchronous|overlapped] [--set grpo.overlap_loss=clipped ...]
        [--out benchmarks/results/train_overlap.json]
    .venv/bin/python benchmarks/train_overlap.py --report benchmarks/results/train_overlap*.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # slow_specialists
sys.path.insert(0, str(HERE.parent / "experiments"))
import gym_learning  # noqa: E402

LATENCY = "PODIUM_BENCH_LATENCY_S"
PARTS = ("time/step_s", "time/generation_s", "time/workers_wait_s", "time/training_s",
         "time/workers_s", "time/workers_hidden")


def namespace(args: argparse.Namespace, overlap: bool, steps: int) -> argparse.Namespace:
    return argparse.Namespace(families=list(gym_learning.DEFAULT_FAMILIES), specialists=None,
                              mode="question", steps=steps, held_out=args.held_out,
                              minutes=1e9, stop_when_held=2, eval_every=args.eval_every,
                              bar=0.9, set=[f"grpo.overlap={str(overlap).lower()}",
                                            f"grpo.max_staleness={args.staleness}",
                                            *args.set])


def slow_pool(folder: Path) -> None:
    """The pool gym_learning.config wrote in `folder`, its workers the slow specialists, each
    taking 64 calls at once (as an API does; the default 4 would queue a step's calls)."""
    pool = folder / "pool.toml"
    text = pool.read_text().replace("podium.train.gym.specialists:", "slow_specialists:")
    pool.write_text(text.replace('backend = "function"\n',
                                 'backend = "function"\nmax_concurrency = 64\n'))


def speed_run(overlap: bool, latency: float, args: argparse.Namespace,
              folder: Path) -> dict[str, Any]:
    from podium.train.gym import assignment, specialists_for
    from podium.train.trainer import build

    os.environ[LATENCY] = str(latency)
    ns = namespace(args, overlap, args.steps)
    order = tuple(assignment(1, specialists_for(ns.families)))
    config = gym_learning.config(folder, order, ns)
    slow_pool(folder)
    job = build(config)
    try:
        job.trainer.train()
        history = [h for h in job.trainer.state.log_history if "time/step_s" in h]
    finally:
        job.close()
    return {"overlap": overlap, "latency_s": latency, "steps": len(history),
            "per_step": [{k: h[k] for k in (*PARTS, "podium/staleness")} for h in history]}


def summary(run: dict[str, Any]) -> dict[str, float]:
    """A run's means over steps 3 to N-1 (see the module docstring)."""
    steady = run["per_step"][2:-1] or run["per_step"]
    out = {key.split("/")[1]: statistics.fmean(h[key] for h in steady) for key in PARTS}
    out["wait_share"] = out["workers_wait_s"] / out["step_s"]
    return out


def line(overlap: bool, r: dict[str, float]) -> str:
    return (f"  {'overlapped' if overlap else 'synchronous':<12} {r['step_s']:7.1f} "
            f"{r['generation_s']:9.1f} {r['workers_wait_s']:7.1f} {r['training_s']:8.1f} "
            f"{r['workers_s']:8.1f} {100 * r['wait_share']:7.0f}% "
            f"{100 * r['workers_hidden']:7.0f}%")


def own_step(runs: list[dict[str, Any]]) -> float:
    """The policy's own step (generation and training) of the synchronous L = 0 run."""
    r = summary(next(r for r in runs if r["latency_s"] == 0 and not r["overlap"]))
    return r["generation_s"] + r["training_s"]


def speed(args: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []

    def pair(latency: float) -> None:
        for overlap in (False, True):
            print(f"L = {latency:.2f} s, {'overlapped' if overlap else 'synchronous'} ...",
                  flush=True)
            runs.append(speed_run(overlap, latency, args, folder / f"{latency}-{overlap}"))

    pair(0.0)
    l1 = round(own_step(runs) / 2, 2)  # a plan: at most 2 calls one after the other
    for times in args.latencies:
        pair(round(times * l1, 2))
    return runs


def report(runs: list[dict[str, Any]]) -> dict[float, float]:
    """Print the runs side by side and the targets; each latency's gain."""
    latencies = sorted({r["latency_s"] for r in runs})
    steps = max(r["steps"] for r in runs)
    print(f"\nseconds a step (mean of steps 3-{steps - 1}); the policy's own step at L = 0: "
          f"{own_step(runs):.1f} s; L1 = {latencies[1]:.2f} s a call")
    print(f"  {'':<12} {'step':>7} {'generate':>9} {'wait':>7} {'train':>8} {'workers':>8} "
          f"{'waiting':>8} {'hidden':>8}")
    gains = {}
    for latency in latencies:
        s, o = (summary(next(r for r in runs if r["latency_s"] == latency and r["overlap"] is v))
                for v in (False, True))
        gains[latency] = s["step_s"] / o["step_s"]
        print(f"L = {latency:.2f} s a call: overlapped {gains[latency]:.2f}x the steps an hour")
        print(line(False, s))
        print(line(True, o))
    at_l1, at_0 = gains[latencies[1]], gains[0.0]
    print(f"target at L1 (workers about the policy's step): >= 1.60x: {at_l1:.2f}x "
          f"{'PASS' if at_l1 >= 1.6 else 'MISS'}")
    print(f"target at L = 0: at most 5% slower: {100 * (1 / at_0 - 1):+.1f}% "
          f"{'PASS' if at_0 >= 1 / 1.05 else 'MISS'}")
    return gains


def learning(args: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    from podium.train.gym import assignment, specialists_for

    os.environ[LATENCY] = "0"
    results = []
    for seed in args.assignments:
        for overlap in {"both": (False, True), "synchronous": (False,),
                        "overlapped": (True,)}[args.modes]:
            for train_seed in args.seeds:
                ns = namespace(args, overlap, args.max_steps)
                ns.set.append(f"grpo.seed={train_seed}")
                order = tuple(assignment(seed, specialists_for(ns.families)))
                print(f"ids {', '.join(order)} (seed {seed}), "
                      f"{'overlapped' if overlap else 'synchronous'}, training seed "
                      f"{train_seed}", flush=True)
                r = gym_learning.run_assignment(
                    order, seed, ns, folder / f"learn-{seed}-{overlap}-{train_seed}")
                r["overlap"], r["training_seed"], r["set"] = overlap, train_seed, list(args.set)
                results.append(r)
                write(args, {"learning": results})
    learning_report(results)
    gym_learning.plot(results, args.out.with_suffix(".png"), label=lambda r: (
        f"seed {r['seed']}, {'overlapped' if r['overlap'] else 'synchronous'}, "
        f"training seed {r['training_seed']}"))
    return results


def learning_report(results: list[dict[str, Any]]) -> None:
    """For each recipe (the runs' `--set`) and assignment: every training seed's steps to the
    bar, the medians and the target; then each mode's mean held-out accuracy over the
    evaluations that every run of the recipe made (steps after 0). The target is judged only
    where both modes ran the same training seeds. Overlapped runs that carry
    a `code` note (made by an earlier podium, which the note names) are a recipe of their
    own, judged against the same synchronous runs."""
    recipes: dict[tuple[tuple[str, ...], str | None], list[dict[str, Any]]] = {}
    for r in results:
        code = r.get("code") if r["overlap"] else None
        recipes.setdefault((tuple(r.get("set", [])), code), []).append(r)
    for (recipe, code), runs in recipes.items():
        if code is not None:
            runs += [r for r in recipes.get((recipe, None), []) if not r["overlap"]]
    for (recipe, code), runs in recipes.items():
        seeds = " ".join(map(str, sorted({r.get("training_seed", 42) for r in runs})))
        made = f", overlapped runs made {code}" if code is not None else ""
        print(f"\n{' '.join(recipe) or 'the recipe'}{made}: the step each run first reached the bar "
              f"('>N': not by its last step N), training seeds {seeds}; the medians (a range "
              f"where a run that stopped short could move them)")
        print(f"{'ids 0, 1, 2':<30} {'synchronous':>14} {'overlapped':>14}")
        for seed in sorted({r["seed"] for r in runs}):
            mine = sorted((r for r in runs if r["seed"] == seed),
                          key=lambda r: r.get("training_seed", 42))
            (a, each_a), (b, each_b) = (steps_to_bar([r for r in mine if r["overlap"] is v])
                                        for v in (False, True))
            seeds_of = [" ".join(str(r.get("training_seed", 42)) for r in mine
                                 if r["overlap"] is v) for v in (False, True)]
            judged = (verdict(a, b) if a is None or b is None or seeds_of[0] == seeds_of[1]
                      else f"not judged: training seeds {seeds_of[0]} synchronous, "
                           f"{seeds_of[1]} overlapped")
            print(f"{', '.join(mine[0]['assignment']):<30} {each_a:>14} {each_b:>14}   "
                  f"medians {span(a)} and {span(b)}: {judged}")
        curves = {(r["seed"], r.get("training_seed", 42), r["overlap"]):
                  {c["step"]: c["accuracy"] for c in r["curve"]} for r in runs}
        common = sorted(set.intersection(*(set(c) for c in curves.values())) - {0})
        if not common:
            continue
        for overlap in (False, True):
            mine = [c for (_, _, o), c in curves.items() if o is overlap]
            if mine:
                print(f"  {'overlapped' if overlap else 'synchronous':<12} held-out mean over "
                      f"steps {common[0]}-{common[-1]} of {len(mine)} runs: "
                      f"{100 * statistics.fmean(c[s] for c in mine for s in common):.1f}%; "
                      f"at step {common[-1]}: "
                      f"{100 * statistics.fmean(c[common[-1]] for c in mine):.1f}%")


Median = tuple[float, float] | None  # (lowest, highest) the median of the runs can be; None: no runs


def steps_to_bar(runs: list[dict[str, Any]]) -> tuple[Median, str]:
    """The median of the runs' steps to the bar as the range it can take, and each run's step
    ('>N' where it had not reached the bar by its last evaluated step N: it would have at
    step N + 1 at the soonest, or never)."""
    if not runs:
        return None, "-"
    last = [max(c["step"] for c in r["curve"]) for r in runs]
    reached = [r["steps_to_bar"] for r in runs]
    soonest = [s if s is not None else n + 1 for s, n in zip(reached, last, strict=True)]
    latest = [s if s is not None else math.inf for s in reached]
    each = " ".join(str(s) if s is not None else f">{n}" for s, n in zip(reached, last, strict=True))
    return (statistics.median(soonest), statistics.median(latest)), each


def span(median: Median) -> str:
    if median is None:
        return "-"
    low, high = median
    return (f"{low:g}" if low == high else f"{low:g}-{high:g}" if high < math.inf
            else f">={low:g}")


def verdict(synchronous: Median, overlapped: Median) -> str:
    """The target, overlapped within 1.25x the synchronous steps, on the medians' ranges:
    PASS or MISS where every value in the ranges agrees, else undecided."""
    if synchronous is None or overlapped is None:
        return "no synchronous run" if synchronous is None else "no overlapped run"
    if overlapped[1] <= 1.25 * synchronous[0]:
        return "PASS"
    if overlapped[0] > 1.25 * synchronous[1]:
        return "MISS"
    return "undecided: runs stopped before the bar decide it"


# The paper recipe's step (PAPER.md §8: 4 questions x 64 rollouts, completions <= 1,024
# tokens, Qwen2.5-7B on 2 GPUs). Assumed, not measured here: ~300 completion and ~1,500 prompt
# tokens a rollout; vLLM decoding 256 sequences at ~25 ms a token on each GPU (so G ~ 300 x
# 25 ms); training at 40% of 2 H100s' bf16 peak (6 x 7e9 FLOP a token over 256 x 1,800 tokens);
# a workflow of 3 worker calls one after the other, the slowest of a step's 256 calls taking
# the stated latency.
PAPER = {"rollouts": 256, "tokens": 1800, "completion": 300, "decode_s": 0.025,
         "flops": 6 * 7e9, "peak": 2 * 989e12, "mfu": 0.4, "calls": 3}


def paper(overhead: float | None) -> dict[str, Any]:
    p = PAPER
    g = p["completion"] * p["decode_s"]
    t = p["rollouts"] * p["tokens"] * p["flops"] / (p["peak"] * p["mfu"])
    rows = []
    print("\nthe paper's step on 2 GPUs, on paper (G, T and W assumed; see PAPER in the script):")
    print(f"  G (generation) {g:.0f} s, T (training) {t:.0f} s"
          + (f"; overlap's own cost measured here at L = 0: {100 * overhead:+.1f}%"
             if overhead is not None else ""))
    print(f"  {'worker call':>11} {'W':>6} {'synchronous':>12} {'overlap d=1':>12} "
          f"{'d=2':>6} {'d=4':>6}")
    for latency in (10, 30, 60, 120):
        w = p["calls"] * latency
        sync = g + w + t
        over = {d: max(g + t, w / d) for d in (1, 2, 4)}
        rows.append({"latency_s": latency, "W_s": w, "sync_s": sync,
                     **{f"overlap_d{d}_s": v for d, v in over.items()}})
        print(f"  {latency:>9} s {w:>5.0f}s {sync:>11.0f}s {over[1]:>11.0f}s "
              f"{over[2]:>5.0f}s {over[4]:>5.0f}s   ({sync / over[1]:.2f}x, "
              f"{sync / over[4]:.2f}x)")
    return {"assumptions": p, "G_s": g, "T_s": t, "rows": rows}


def write(args: argparse.Namespace, part: dict[str, Any]) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    args.out.write_text(json.dumps({**old, **part}, indent=2, default=str))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--learning", action="store_true")
    parser.add_argument("--steps", type=int, default=6, help="steps of each speed run")
    parser.add_argument("--staleness", type=int, default=1, help="grpo.max_staleness")
    parser.add_argument("--latencies", type=float, nargs="+", default=[1, 3], metavar="X",
                        help="latencies after L = 0, as multiples of L1")
    parser.add_argument("--assignments", type=int, nargs="+", default=[1, 5, 7])
    parser.add_argument("--max-steps", type=int, default=40, help="steps of a learning run")
    parser.add_argument("--eval-every", type=int, default=3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42], metavar="SEED",
                        help="training seeds (grpo.seed) of each assignment and mode; the "
                             "target is judged on the median steps to the bar")
    parser.add_argument("--held-out", type=int, default=30)
    parser.add_argument("--modes", choices=("both", "synchronous", "overlapped"),
                        default="both", help="which learning runs to make")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a training setting of every run (podium train's --set)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/train_overlap.json"))
    parser.add_argument("--report", type=Path, nargs="+", metavar="JSON",
                        help="report the runs this script saved in these JSONs; run nothing")
    args = parser.parse_args()
    if args.learning and any(item.split("=", 1)[0].strip() == "grpo.seed" for item in args.set):
        parser.error("--set grpo.seed: the training seeds are --seeds (e.g. --seeds 43)")
    if args.report:
        saved = [json.loads(path.read_text()) for path in args.report]
        for part in saved:
            if "speed" in part:
                gains = report(part["speed"]["runs"])
                paper(1 / gains[0.0] - 1)
        if any("learning" in part for part in saved):
            learning_report([r for part in saved for r in part.get("learning", [])])
        return
    if not args.learning:
        args.speed = True
    overhead = None
    with tempfile.TemporaryDirectory() as scratch:
        if args.speed:
            runs = speed(args, Path(scratch))
            write(args, {"speed": {"runs": runs}})
            overhead = 1 / report(runs)[0.0] - 1
        if args.learning:
            learning(args, Path(scratch))
    write(args, {"paper": paper(overhead)})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
