"""Does podium keep every worker of a pool busy with many workflows in flight?

Starts the scripted OpenAI-compatible server (`podium.testing.ScriptedServer`, a real HTTP
server in a subprocess whose every reply takes a fixed latency L) serving three models w0, w1,
w2, builds one worker client per model with `podium.llm.registry.build_client` (the
OpenAI-compatible client under `ReliableClient`, no retries, no cache) and a shared `Team` whose
per-worker concurrency limits are c0, c1, c2. Then it runs N workflows through
`execute_workflow`, at most F in flight at once, and reports:

* the steady throughput: workflows completed per second between the 10 % and the 90 %
  completion timestamps;
* the bound the limits allow: a worker completes at most c_w / L calls per second, so the pool
  completes at most min over w of (c_w / L) / calls_w workflows per second, where calls_w is
  that worker's calls per workflow averaged over the mix; achieved / bound against the target
  (>= 90 %);
* per worker, in the steady window: how many of the Team's slots were held on average (client
  side: a slot is held from a call's start to its end), how busy the server was (time-averaged
  requests in its handler / limit), the mean call time at the client and in the server's
  handler, and the most requests the server had in flight at once (must equal the limit and
  never exceed it);
* memory as workflows complete: process RSS (/proc/self/statm) at every 10 % of completions,
  and the Python heap (tracemalloc) in an optional second, shorter pass (`--tracemalloc`:
  tracing slows Python down, so it is kept out of the throughput pass), with what the pass
  leaves allocated once every workflow is done;
* the same workflows scheduled the way the paper's reference code does, as a baseline: chunks
  of 20 workflows, at most 8 workflows of a chunk at a time (its thread pool), the steps of each
  workflow awaited one after another, with the same clients and the same per-worker limits.

Conductor calls are not part of this benchmark: the workflows are given. The default mix
("balanced") repeats fan-out (w1, w2 -> w0), fan-out (w1, w2 -> w0), chain (w0 -> w0): w0 gets
twice the calls of w1 and of w2, as it has twice their slots, so every worker limits the bound
and reaching it needs all three busy at once.

    python benchmarks/pool_throughput.py [--latency 0.05] [--concurrency 8,4,4]
        [--workflows 3500] [--in-flight 1000] [--baseline-workflows 400]
        [--mix balanced|uneven] [--tracemalloc [--tracemalloc-workflows 1500]] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podium.config import ModelSpec
from podium.errors import WorkerError
from podium.llm.registry import build_client
from podium.testing import ScriptedServer
from podium.workflow.execute import ExecOptions, StepRecord, Team, execute_workflow
from podium.workflow.render import MessageOptions, worker_messages
from podium.workflow.types import Workflow

WORKERS = ("w0", "w1", "w2")
OPTIONS = ExecOptions(messages=MessageOptions())
TARGET = 0.90  # achieved / bound
REF_CHUNK, REF_THREADS = 20, 8  # the reference code: chunks of 20 questions, 8 threads each
FLAT_FRACTION, FLAT_MB = 0.10, 5.0  # memory is flat when growth < 10 % of the 20 % sample or < 5 MB
PAGE = os.sysconf("SC_PAGE_SIZE")

FANOUT = Workflow.of([(1, "solve the task one way", ()), (2, "solve the task another way", ()),
                      (0, "compare both solutions and give the final answer", "all")])
CHAIN_W0 = Workflow.of([(0, "draft a solution", ()), (0, "check and improve the draft", "all")])
CHAIN_W01 = Workflow.of([(0, "draft a solution", ()), (1, "check and improve the draft", "all")])

# name -> [(shape, workflow, weight)]; workflow i is the (i mod sum of weights)-th of the
# expanded list, so every window of workflows has the mix's proportions
MIXES: dict[str, list[tuple[str, Workflow, int]]] = {
    # w0 gets twice the calls of w1 and of w2, as it has twice their slots (with the default
    # limits 8,4,4): all three workers limit the bound equally, so reaching it needs all busy
    "balanced": [("fan-out (w1, w2 -> w0)", FANOUT, 2), ("chain (w0 -> w0)", CHAIN_W0, 1)],
    # with limits 8,4,4 w1 alone limits the bound; w0 and w2 can be at most half busy
    "uneven": [("fan-out (w1, w2 -> w0)", FANOUT, 1), ("chain (w0 -> w1)", CHAIN_W01, 1)],
}


def expand(mix: list[tuple[str, Workflow, int]]) -> list[Workflow]:
    return [wf for _, wf, weight in mix for _ in range(weight)]


def calls_per_workflow(mix: list[tuple[str, Workflow, int]], n_workers: int) -> list[float]:
    total = sum(weight for _, _, weight in mix)
    calls = [0.0] * n_workers
    for _, wf, weight in mix:
        for step in wf.steps:
            calls[step.worker] += weight / total
    return calls


def bound(limits: list[int], latency: float, calls: list[float]) -> tuple[float, list[float]]:
    """Workflows/s the limits allow, and each worker's own capacity in workflows/s."""
    capacity = [(c / latency) / k if k else float("inf") for c, k in zip(limits, calls,
                                                                          strict=True)]
    return min(capacity), capacity


def question(i: int) -> str:
    return f"Benchmark question {i}: what is 6 * 7?"


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


class Progress:
    """Completion timestamps (preallocated, so recording them does not grow memory), ok/failed
    counts, memory samples at every 10 % of completions, per-worker call times, and per worker
    the time integral of the Team's slots held (calls between their "started" and "finished"
    events), read at the 10 % and the 90 % completion."""

    def __init__(self, n: int, n_workers: int, sample_memory: bool):
        self.n = n
        self.times = array("d", bytes(8 * n))
        self.done = self.ok = self.failed = 0
        self.marks = {max(1, round(n * k / 10)): k * 10 for k in range(1, 11)}
        self.i10, self.i90 = max(0, round(n * 0.1) - 1), max(0, round(n * 0.9) - 1)
        self.sample_memory = sample_memory
        self.memory: list[dict[str, Any]] = []
        self.call_s = [0.0] * n_workers
        self.calls = [0] * n_workers
        self.held = [0] * n_workers  # slots held now
        self.held_s = [0.0] * n_workers  # integral of slots held over time
        self.held_at = [0.0] * n_workers  # when held_s was last brought up to date
        self.held_s_at: dict[int, list[float]] = {}  # completion index -> held_s then

    def _advance(self, w: int, now: float) -> None:
        self.held_s[w] += self.held[w] * (now - self.held_at[w])
        self.held_at[w] = now

    def slot(self, w: int, delta: int) -> None:
        self._advance(w, time.time())
        self.held[w] += delta

    def on_event(self, kind: str, rec: StepRecord) -> None:
        if kind == "started":
            self.slot(rec.worker, +1)
        elif rec.started_s is not None:  # a skipped step finishes without starting
            self.slot(rec.worker, -1)
            if rec.status == "ok":
                self.call_s[rec.worker] += rec.latency_s
                self.calls[rec.worker] += 1

    def finished(self, ok: bool) -> None:
        now = self.times[self.done] = time.time()
        if self.done in (self.i10, self.i90):
            for w in range(len(self.held)):
                self._advance(w, now)
            self.held_s_at[self.done] = list(self.held_s)
        self.done += 1
        if ok:
            self.ok += 1
        else:
            self.failed += 1
        if self.sample_memory and self.done in self.marks:
            sample: dict[str, Any] = {"percent": self.marks[self.done], "completed": self.done,
                                      "rss_mb": rss_mb()}
            if tracemalloc.is_tracing():
                sample["heap_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
            self.memory.append(sample)

    def steady(self) -> tuple[float, float, float]:
        """(t10, t90, workflows/s between the 10 % and the 90 % completion timestamps)."""
        t10, t90 = self.times[self.i10], self.times[self.i90]
        return t10, t90, (self.i90 - self.i10) / (t90 - t10) if t90 > t10 else float("nan")

    def slots_held(self, limits: list[int]) -> list[float]:
        """Per worker, the mean slots held / limit between the 10 % and 90 % completions."""
        window = self.times[self.i90] - self.times[self.i10]
        a, b = self.held_s_at.get(self.i10), self.held_s_at.get(self.i90)
        if not a or not b or window <= 0:
            return [float("nan")] * len(limits)
        return [(y - x) / (c * window) for x, y, c in zip(a, b, limits, strict=True)]


async def run_podium(workflows: list[Workflow], team: Team, n: int, in_flight: int,
                     progress: Progress) -> None:
    """N workflows through the DAG executor, at most `in_flight` at once; runs are dropped."""
    slots = asyncio.Semaphore(in_flight)
    live: set[asyncio.Task] = set()

    async def one(i: int) -> None:
        ok = False
        try:
            run = await execute_workflow(workflows[i % len(workflows)], question(i), team,
                                         options=OPTIONS, on_event=progress.on_event)
            ok = all(s.status == "ok" for s in run.steps)
            del run
        finally:
            slots.release()
            progress.finished(ok)

    for i in range(n):
        await slots.acquire()
        task = asyncio.create_task(one(i))
        live.add(task)  # the loop holds tasks only weakly
        task.add_done_callback(live.discard)
    for _ in range(in_flight):  # every slot back = all done (a final gather over `live`
        await slots.acquire()   # was seen to keep finished tasks alive until the loop ended)


async def run_reference(workflows: list[Workflow], team: Team, n: int,
                        progress: Progress) -> None:
    """The reference scheduling: chunks of 20, 8 at a time per chunk, steps one after another
    (with the same clients and the Team's per-worker limits)."""

    async def one(i: int, threads: asyncio.Semaphore) -> None:
        async with threads:
            wf, q = workflows[i % len(workflows)], question(i)
            responses: list[str | None] = [None] * len(wf)
            ok = True
            for j, step in enumerate(wf.steps):
                messages = worker_messages(q, wf, j, responses, options=OPTIONS.messages)
                try:
                    async with team.semaphores[step.worker]:
                        progress.slot(step.worker, +1)
                        start = time.perf_counter()
                        try:
                            resp = await team.clients[step.worker].chat(messages)
                        finally:
                            progress.slot(step.worker, -1)
                    progress.call_s[step.worker] += time.perf_counter() - start
                    progress.calls[step.worker] += 1
                    responses[j] = resp.text
                except WorkerError:
                    ok = False
            progress.finished(ok)

    for start in range(0, n, REF_CHUNK):
        threads = asyncio.Semaphore(REF_THREADS)
        await asyncio.gather(*(one(i, threads) for i in range(start, min(n, start + REF_CHUNK))))


def server_view(stats: dict[str, Any], t10: float, t90: float,
                limits: list[int]) -> list[dict[str, Any]]:
    """Per worker: the most requests in flight, and time-averaged in flight / limit over
    [t10, t90] from the server's request log."""
    busy = dict.fromkeys(WORKERS, 0.0)
    handled: dict[str, list[float]] = {w: [] for w in WORKERS}
    for entry in stats["log"]:
        if entry["model"] in busy and entry["end_time"] is not None:
            handled[entry["model"]].append(entry["end_time"] - entry["start_time"])
            overlap = min(entry["end_time"], t90) - max(entry["start_time"], t10)
            if overlap > 0:
                busy[entry["model"]] += overlap
    window = t90 - t10
    out = []
    for w, limit in zip(WORKERS, limits, strict=True):
        by_model = stats["by_model"].get(w, {"max_in_flight": 0, "requests": 0})
        out.append({"worker": w, "limit": limit, "max_in_flight": by_model["max_in_flight"],
                    "requests": by_model["requests"],
                    "server_ms": 1000 * statistics.mean(handled[w]) if handled[w] else float("nan"),
                    "busy": busy[w] / (limit * window) if window > 0 else float("nan")})
    return out


async def timed(server: ScriptedServer, limits: list[int], label: str,
                body: Callable[[Team], Any], progress: Progress) -> dict[str, Any]:
    """Run one pass with fresh clients (warmed up: one keep-alive connection per slot) and
    collect the throughput and the server's view of it."""
    clients = [
        build_client(ModelSpec(name=m, backend="openai", model=m, base_url=server.base_url,
                               max_concurrency=c, retries=0), cache=None)
        for m, c in zip(WORKERS, limits, strict=True)
    ]
    team = Team(clients, max_concurrency=limits)
    try:
        warm = [{"role": "user", "content": "warm up"}]
        await asyncio.gather(*(c.chat(warm) for c, k in zip(clients, limits, strict=True)
                               for _ in range(k)))
        server.reset()
        heap = {}
        if tracemalloc.is_tracing():
            gc.collect()
            heap["before_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
        print(f"  {label}: running {progress.n} workflows", file=sys.stderr, flush=True)
        t0 = time.time()
        cpu0 = time.process_time()
        await body(team)
        wall, cpu = time.time() - t0, time.process_time() - cpu0
        if heap:
            gc.collect()
            heap["after_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
            heap["retained_bytes_per_workflow"] = (
                (heap["after_mb"] - heap["before_mb"]) * 2**20 / progress.n)
    finally:
        for client in clients:
            await client.aclose()  # type: ignore[attr-defined]
    t10, t90, rate = progress.steady()
    stats = await asyncio.to_thread(server.stats)
    return {
        "workflows": progress.n, "ok": progress.ok, "failed": progress.failed,
        "wall_s": wall, "client_cpu_s": cpu, "heap_retained": heap or None,
        "steady_window_s": t90 - t10,
        "steady_workflows_per_s": rate, "overall_workflows_per_s": progress.n / wall,
        "workers": [
            {**w, "slots_held": h, "mean_call_ms": 1000 * s / k if k else float("nan")}
            for w, h, s, k in zip(server_view(stats, t10, t90, limits),
                                  progress.slots_held(limits), progress.call_s, progress.calls,
                                  strict=True)
        ],
    }


async def probe(server: ScriptedServer, calls: int = 30) -> dict[str, float]:
    """The time of one call on its own (sequential calls, nothing else in flight): the
    latency plus the HTTP round trip and the client's own work, with nothing else going on."""
    clients = [build_client(ModelSpec(name=m, backend="openai", model=m,
                                      base_url=server.base_url, retries=0), cache=None)
               for m in WORKERS]
    messages = worker_messages(question(0), FANOUT, 0, [None] * len(FANOUT),
                               options=OPTIONS.messages)
    times = []
    try:
        for client in clients:
            await client.chat(messages)
        server.reset()
        for i in range(calls):
            start = time.perf_counter()
            await clients[i % len(clients)].chat(messages)
            times.append(time.perf_counter() - start)
    finally:
        for client in clients:
            await client.aclose()  # type: ignore[attr-defined]
    log = (await asyncio.to_thread(server.stats))["log"]
    return {"calls": calls, "client_s": statistics.median(times),
            "server_s": statistics.median(e["end_time"] - e["start_time"] for e in log)}


def memory_verdict(samples: list[dict[str, Any]], key: str, last: int = 100
                   ) -> dict[str, Any] | None:
    """Growth from the 20 % sample to the `last` % one, and whether that is flat."""
    by_pct = {s["percent"]: s[key] for s in samples if key in s}
    if 20 not in by_pct or last not in by_pct:
        return None
    growth = by_pct[last] - by_pct[20]
    return {"from_percent": 20, "to_percent": last, "at_20_mb": by_pct[20],
            "at_last_mb": by_pct[last], "growth_mb": growth,
            "growth_percent": 100 * growth / by_pct[20],
            "flat": growth < FLAT_FRACTION * by_pct[20] or growth < FLAT_MB}


async def bench(args: argparse.Namespace, limits: list[int], workflows: list[Workflow]
                ) -> dict[str, Any]:
    with ScriptedServer(latency=args.latency, models=list(WORKERS)) as server:
        alone = await probe(server)
        progress = Progress(args.workflows, len(WORKERS), sample_memory=True)
        podium = await timed(server, limits, "podium", lambda team: run_podium(
            workflows, team, args.workflows, args.in_flight, progress), progress)
        podium["in_flight"] = args.in_flight
        podium["memory"] = progress.memory
        podium["rss"] = memory_verdict(progress.memory, "rss_mb")

        ref = Progress(args.baseline_workflows, len(WORKERS), sample_memory=False)
        reference = await timed(server, limits, "reference", lambda team: run_reference(
            workflows, team, args.baseline_workflows, ref), ref)
        reference["in_flight"] = REF_THREADS

        traced = None
        if args.tracemalloc:
            # a fifth of the pass in flight, so the samples from 20 % to 80 % are taken with
            # as many workflows in flight as each other (after 80 % the pass drains)
            tm_in_flight = max(1, min(args.in_flight, args.tracemalloc_workflows // 5))
            tm = Progress(args.tracemalloc_workflows, len(WORKERS), sample_memory=True)
            tracemalloc.start()
            try:
                traced = await timed(server, limits, "podium + tracemalloc", lambda team:
                                     run_podium(workflows, team, args.tracemalloc_workflows,
                                                tm_in_flight, tm), tm)
            finally:
                tracemalloc.stop()
            traced["in_flight"] = tm_in_flight
            traced["memory"] = tm.memory
            traced["rss"] = memory_verdict(tm.memory, "rss_mb")
            traced["heap"] = memory_verdict(tm.memory, "heap_mb")
            traced["heap_20_80"] = memory_verdict(tm.memory, "heap_mb", last=80)
    return {"podium": podium, "reference": reference, "podium_tracemalloc": traced,
            "call_alone": alone}


def render_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(header, widths, strict=True))),
             "  ".join("-" * w for w in widths)]
    for r in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def pass_row(name: str, p: dict[str, Any], best: float, judged: bool) -> list[str]:
    rate = p["steady_workflows_per_s"]
    verdict = ("PASS" if rate >= TARGET * best else "MISS") if judged else "-"
    return [name, str(p["workflows"]), str(p["in_flight"]), str(p["ok"]), str(p["failed"]),
            f"{p['wall_s']:.1f}", f"{rate:.1f}", f"{best:.1f}", f"{100 * rate / best:.1f} %",
            verdict, f"{100 * p['client_cpu_s'] / p['wall_s']:.0f} %"]


def memory_line(name: str, v: dict[str, Any] | None) -> str:
    if v is None:
        return f"{name}: too few samples"
    return (f"{name} growth 20% -> {v['to_percent']}%: {v['growth_mb']:+.2f} MB "
            f"({v['growth_percent']:+.1f} % of {v['at_20_mb']:.1f} MB) -> "
            f"{'flat' if v['flat'] else 'GROWING'}")


def per_worker_table(podium: dict[str, Any], reference: dict[str, Any], calls: list[float],
                     capacity: list[float]) -> str:
    rows = []
    for w, r, k, cap in zip(podium["workers"], reference["workers"], calls, capacity,
                            strict=True):
        peak = f"{w['max_in_flight']}" + ("" if w["max_in_flight"] == w["limit"] else " (!)")
        rows.append([w["worker"], str(w["limit"]), f"{k:.2f}", f"{cap:.1f}", peak,
                     f"{100 * w['slots_held']:.1f} %", f"{100 * w['busy']:.1f} %",
                     f"{w['mean_call_ms']:.1f}", f"{w['server_ms']:.1f}",
                     str(r["max_in_flight"]), f"{100 * r['slots_held']:.1f} %",
                     f"{100 * r['busy']:.1f} %", f"{r['mean_call_ms']:.1f}"])
    return render_table(["worker", "limit", "calls/wf", "cap wf/s", "max in flight",
                         "slots held", "busy", "call ms", "server ms", "ref max in flight",
                         "ref slots held", "ref busy", "ref call ms"], rows)


def memory_table(podium: dict[str, Any], traced: dict[str, Any] | None) -> str:
    samples = {s["percent"]: s for s in podium["memory"]}
    heap = {s["percent"]: s for s in traced["memory"]} if traced else {}
    header = ["done", "completed", "rss MB"] + (["tracemalloc pass: completed", "rss MB",
                                                 "heap MB"] if traced else [])
    rows = []
    for pct in range(10, 101, 10):
        s = samples.get(pct)
        row = [f"{pct} %", str(s["completed"]) if s else "-", f"{s['rss_mb']:.1f}" if s else "-"]
        if traced:
            h = heap.get(pct)
            row += [str(h["completed"]), f"{h['rss_mb']:.1f}", f"{h['heap_mb']:.2f}"] if h else [
                "-", "-", "-"]
        rows.append(row)
    return render_table(header, rows)


def report(args: argparse.Namespace, limits: list[int], result: dict[str, Any]) -> str:
    mix = MIXES[args.mix]
    calls, best, capacity = result["calls_per_workflow"], result["bound"], result["capacity"]
    alone = result["call_alone"]
    podium, reference, traced = result["podium"], result["reference"], result["podium_tracemalloc"]
    out = [
        f"pool: {', '.join(f'{w} limit {c}' for w, c in zip(WORKERS, limits, strict=True))}; "
        f"latency L = {args.latency * 1000:.0f} ms per call; no Conductor calls",
        f"mix '{args.mix}': " + ", ".join(f"{weight} x {name}" for name, _, weight in mix)
        + "; calls per workflow " + ", ".join(f"{w} {k:.2f}" for w, k in zip(WORKERS, calls,
                                                                              strict=True)),
        "bound = min_w (c_w / L) / calls_w = min(" + ", ".join(
            f"{w} {x:.1f}" for w, x in zip(WORKERS, capacity, strict=True))
        + f") = {best:.1f} workflows/s; target: achieved/bound >= {TARGET:.0%}",
        f"one call alone (median of {alone['calls']} sequential calls): "
        f"{alone['client_s'] * 1000:.1f} ms at the client, {alone['server_s'] * 1000:.1f} ms in "
        f"the server's handler",
        "",
        render_table(
            ["scheduler", "workflows", "in flight", "ok", "failed", "wall s", "steady wf/s",
             "bound wf/s", "achieved/bound", "target", "client cpu"],
            [pass_row("podium DAG + pool limits", podium, best, True),
             pass_row(f"reference ({REF_CHUNK}-chunks x {REF_THREADS})", reference, best,
                      False)]
            + ([pass_row("podium + tracemalloc", traced, best, False)]
               if traced else [])),
        f"podium / reference throughput: "
        f"{podium['steady_workflows_per_s'] / reference['steady_workflows_per_s']:.2f}x",
        "",
        "per worker, steady window: slots held = mean Team slots held / limit (client side);",
        "busy = mean requests in the server's handler / limit; call ms = mean call time at the",
        "client; server ms = mean time in the handler; max in flight: most requests at once at",
        "the server (ref = the reference scheduling):",
        per_worker_table(podium, reference, calls, capacity),
        "",
        f"memory, sampled at every 10 % of completions (flat: growth from the 20 % to the 100 % "
        f"sample < {FLAT_FRACTION:.0%} of the 20 % value or < {FLAT_MB:g} MB):",
        memory_table(podium, traced),
        memory_line("RSS", podium["rss"]),
    ]
    if traced:
        r = traced["heap_retained"]
        out += [memory_line("tracemalloc pass RSS", traced["rss"]),
                memory_line("tracemalloc pass Python heap", traced["heap"]),
                memory_line("tracemalloc pass Python heap (both samples with "
                            f"{traced['in_flight']} in flight)", traced["heap_20_80"]),
                f"tracemalloc pass Python heap allocated during the pass and still held after "
                f"it (all done, gc.collect()): {(r['after_mb'] - r['before_mb']) * 1024:.0f} KB "
                f"= {r['retained_bytes_per_workflow']:.0f} bytes per workflow"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.05,
                        help="seconds each scripted reply takes (default 0.05)")
    parser.add_argument("--concurrency", default="8,4,4",
                        help="per-worker concurrency limits of w0,w1,w2 (default 8,4,4)")
    parser.add_argument("--workflows", type=int, default=3500,
                        help="workflows run through podium (default 3500)")
    parser.add_argument("--in-flight", type=int, default=1000,
                        help="most podium workflows in flight at once (default 1000)")
    parser.add_argument("--baseline-workflows", type=int, default=400,
                        help="workflows run with the reference scheduling (default 400)")
    parser.add_argument("--mix", choices=sorted(MIXES), default="balanced",
                        help="workflow mix (default balanced)")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="add a pass with tracemalloc on, for the Python heap")
    parser.add_argument("--tracemalloc-workflows", type=int, default=1500,
                        help="workflows in the tracemalloc pass (default 1500; a fifth of them, "
                        "at most --in-flight, in flight)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results"
                        / "pool_throughput.json", help="JSON results file")
    args = parser.parse_args(argv)
    try:
        limits = [int(x) for x in args.concurrency.split(",")]
    except ValueError:
        parser.error("--concurrency takes three integers, e.g. 8,4,4")
    if len(limits) != len(WORKERS) or min(limits) < 1:
        parser.error("--concurrency takes three integers >= 1, e.g. 8,4,4")
    if (args.latency <= 0 or min(args.workflows, args.baseline_workflows, args.in_flight,
                                 args.tracemalloc_workflows) < 10):
        parser.error("--latency must be > 0, the workflow counts and --in-flight >= 10")

    mix = MIXES[args.mix]
    calls = calls_per_workflow(mix, len(WORKERS))
    best, capacity = bound(limits, args.latency, calls)
    load = os.getloadavg()
    t0 = time.perf_counter()
    result = asyncio.run(bench(args, limits, expand(mix)))
    total = time.perf_counter() - t0
    result.update({"calls_per_workflow": calls, "bound": best, "capacity": capacity})

    print(report(args, limits, result))
    print(f"benchmark took {total:.1f} s on {os.cpu_count()} CPUs (load average at the start "
          f"{load[0]:.2f})")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "pool_throughput",
        "latency_s": args.latency,
        "workers": list(WORKERS),
        "limits": limits,
        "mix": args.mix,
        "mix_workflows": [{"shape": name, "weight": weight, "workflow": wf.to_json()}
                          for name, wf, weight in mix],
        "calls_per_workflow": calls,
        "capacity_workflows_per_s": capacity,
        "bound_workflows_per_s": best,
        "call_alone": result["call_alone"],
        "target": TARGET,
        "target_met": result["podium"]["steady_workflows_per_s"] >= TARGET * best,
        "podium": result["podium"],
        "reference": {**result["reference"], "chunk": REF_CHUNK, "threads": REF_THREADS},
        "podium_tracemalloc": result["podium_tracemalloc"],
        "memory_rule": f"flat when growth from the 20 % to the 100 % sample < "
                       f"{FLAT_FRACTION:.0%} of the 20 % value or < {FLAT_MB:g} MB",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_start": load[0],
        "total_s": total,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
