"""How close does the DAG executor get to a workflow's critical path?

Runs chain, fan-out/aggregate and mixed workflows of 2-5 steps against the scripted
OpenAI-compatible server (`podium.testing.ScriptedServer`, a real HTTP server in a subprocess
whose every reply takes a fixed latency), with `OpenAICompatClient` workers and a generous
per-worker concurrency limit, and compares per shape:

* the executor's median wall time over `--repeats` runs;
* the critical path: the longest dependency chain x the latency (the best any executor can do);
* the nominal sequential time: steps x latency (what the paper's one-step-at-a-time executor
  takes), and the *measured* sequential time: the same steps awaited one after another with
  the same clients and the same rendered messages;
* wall / critical path, the speed-up over the measured sequential run, and the executor's
  overhead per step, (wall - critical path) / steps ("ovh"; it includes each call's HTTP round
  trip), and the same against the measured per-call time of the sequential run instead of the
  nominal latency ("exec": the executor's own cost, HTTP excluded);
* the target "wall <= 1.05 x critical path + 5 ms x steps" as PASS or MISS;
* the peak number of requests the server saw in flight (the width the executor achieved).

    python benchmarks/executor.py [--latency 0.2] [--repeats 5] [--seq-repeats 3]
                                  [--shapes chain-3 fanout-5 ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from podium.config import ModelSpec
from podium.llm.openai_compat import OpenAICompatClient
from podium.testing import ScriptedServer
from podium.workflow.execute import ExecOptions, Team, execute_workflow
from podium.workflow.render import MessageOptions, worker_messages
from podium.workflow.types import Access, Workflow

QUESTION = "Benchmark question: what is 6 * 7?"
WORKERS = ("w0", "w1")
CONCURRENCY = 16  # per worker: generous, so only the dependencies limit the parallelism
OPTIONS = ExecOptions(messages=MessageOptions())


def shape(*access: Access) -> Workflow:
    """A workflow with the given access entries; steps alternate between the two workers."""
    return Workflow.of(
        [(i % len(WORKERS), f"step {i}: do part {i} of the task", a) for i, a in enumerate(access)]
    )


SHAPES: dict[str, Workflow] = {
    **{f"chain-{n}": shape((), *["all"] * (n - 1)) for n in range(2, 6)},
    **{f"fanout-{n}": shape(*[()] * (n - 1), "all") for n in range(3, 6)},
    "mixed-5": shape((), (), "all", (), "all"),
    "mixed-4": shape((), (0,), (0,), "all"),
}


def depth(workflow: Workflow) -> int:
    """The longest dependency chain, in steps."""
    d: list[int] = []
    for deps in workflow.dependencies():
        d.append(1 + max((d[j] for j in deps), default=0))
    return max(d)


def access_text(workflow: Workflow) -> str:
    return "[" + ", ".join(
        '"all"' if s.access == "all" else str(list(s.access)) for s in workflow.steps
    ) + "]"


async def run_sequential(workflow: Workflow, team: Team) -> float:
    """Every step after the previous one, with the same clients and messages as the executor."""
    t0 = time.perf_counter()
    responses: list[str | None] = [None] * len(workflow)
    for i, step in enumerate(workflow.steps):
        messages = worker_messages(QUESTION, workflow, i, responses, options=OPTIONS.messages)
        responses[i] = (await team.clients[step.worker].chat(messages)).text
    return time.perf_counter() - t0


async def bench(server: ScriptedServer, latency: float, repeats: int, seq_repeats: int,
                shapes: dict[str, Workflow]) -> list[dict[str, Any]]:
    clients = [
        OpenAICompatClient(ModelSpec(name=m, backend="openai", model=m, base_url=server.base_url))
        for m in WORKERS
    ]
    team = Team(clients, max_concurrency=CONCURRENCY)
    try:
        # warm up: open as many keep-alive connections per client as the widest shape needs
        warm = [{"role": "user", "content": "warm up"}]
        await asyncio.gather(*(c.chat(warm) for c in clients for _ in range(4)))
        rows = []
        for name, workflow in shapes.items():
            server.reset()
            walls = []
            for _ in range(repeats):
                run = await execute_workflow(workflow, QUESTION, team, options=OPTIONS)
                if any(s.status != "ok" for s in run.steps):
                    bad = [s.error for s in run.steps if s.status != "ok"]
                    raise RuntimeError(f"{name}: a step failed: {bad}")
                walls.append(run.wall_s)
            peak = server.stats()["overall"]["max_in_flight"]
            sequential = [await run_sequential(workflow, team) for _ in range(seq_repeats)]
            rows.append(row(name, workflow, latency, walls, sequential, peak))
            print(f"  {name:<9} done", file=sys.stderr, flush=True)
        return rows
    finally:
        for client in clients:
            await client.aclose()


def row(name: str, workflow: Workflow, latency: float, walls: list[float],
        sequential: list[float], peak: int) -> dict[str, Any]:
    n = len(workflow)
    critical = depth(workflow) * latency
    wall = statistics.median(walls)
    seq = statistics.median(sequential)
    target = 1.05 * critical + 0.005 * n
    call = seq / n  # one measured call: the latency plus the HTTP round trip
    return {
        "shape": name,
        "access": access_text(workflow),
        "steps": n,
        "depth": depth(workflow),
        "wall_s": wall,
        "wall_runs_s": walls,
        "critical_path_s": critical,
        "sequential_nominal_s": n * latency,
        "sequential_measured_s": seq,
        "sequential_runs_s": sequential,
        "wall_over_critical": wall / critical,
        "speedup_vs_sequential": seq / wall,
        "overhead_ms_per_step": (wall - critical) / n * 1000,
        "measured_call_s": call,
        "executor_ms_per_step": (wall - depth(workflow) * call) / n * 1000,
        "target_s": target,
        "target_met": wall <= target,
        "server_peak_in_flight": peak,
    }


COLUMNS = [
    ("shape", "shape", "{}"),
    ("steps", "n", "{}"),
    ("depth", "depth", "{}"),
    ("critical_path_s", "crit s", "{:.3f}"),
    ("wall_s", "wall s", "{:.3f}"),
    ("sequential_nominal_s", "seq s", "{:.3f}"),
    ("sequential_measured_s", "seq meas s", "{:.3f}"),
    ("wall_over_critical", "wall/crit", "{:.3f}"),
    ("speedup_vs_sequential", "speed-up", "{:.2f}x"),
    ("overhead_ms_per_step", "ovh ms/step", "{:.2f}"),
    ("executor_ms_per_step", "exec ms/step", "{:.2f}"),
    ("server_peak_in_flight", "peak", "{}"),
    ("target_met", "target", "{}"),
]


def table(rows: list[dict[str, Any]]) -> str:
    cells = [[head for _, head, _ in COLUMNS]]
    for r in rows:
        cells.append([
            ("PASS" if r[key] else "MISS") if key == "target_met" else fmt.format(r[key])
            for key, _, fmt in COLUMNS
        ])
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = []
    for k, line in enumerate(cells):
        padded = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        lines.append("  ".join(padded))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.2,
                        help="seconds each scripted reply takes (default 0.2)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="DAG executor runs per shape (default 5)")
    parser.add_argument("--seq-repeats", type=int, default=3,
                        help="sequential baseline runs per shape (default 3; it varies little "
                        "and costs steps x latency per run)")
    parser.add_argument("--shapes", nargs="*", choices=sorted(SHAPES), default=None,
                        help="only these shapes (default: all)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results"
                        / "executor.json", help="JSON results file")
    args = parser.parse_args(argv)
    if args.latency <= 0 or args.repeats < 1 or args.seq_repeats < 1:
        parser.error("--latency must be > 0, --repeats and --seq-repeats >= 1")
    shapes = {k: SHAPES[k] for k in (args.shapes or SHAPES)}

    t0 = time.perf_counter()
    with ScriptedServer(latency=args.latency) as server:
        rows = asyncio.run(bench(server, args.latency, args.repeats, args.seq_repeats, shapes))
    total = time.perf_counter() - t0

    print(f"latency {args.latency * 1000:.0f} ms per call; medians of {args.repeats} DAG runs "
          f"and {args.seq_repeats} sequential runs per shape; "
          "target: wall <= 1.05 x critical path + 5 ms x steps")
    print(table(rows))
    met = sum(r["target_met"] for r in rows)
    print(f"{met}/{len(rows)} shapes meet the target; benchmark took {total:.1f} s")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "executor",
        "latency_s": args.latency,
        "repeats": args.repeats,
        "seq_repeats": args.seq_repeats,
        "concurrency_per_worker": CONCURRENCY,
        "workers": list(WORKERS),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "total_s": total,
        "shapes": rows,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
