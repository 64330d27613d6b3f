"""What does `podium serve` cost on top of the pipeline it serves?

The same questions answered two ways, side by side, both against one local worker endpoint
with a fixed latency (`podium.testing.ScriptedServer`, a real HTTP server in its own process):

* **direct**: `Pipeline.ask` in this process, at most C questions in flight;
* **served**: `podium serve` (the same pool: a `function` Conductor that sends every
  question to the one worker, the worker an OpenAI-compatible endpoint), once for each
  `--processes` count (default 1 and 2: one server of each, started side by side), asked over
  HTTP (`POST /v1/chat/completions`, keep-alive) by a minimal load generator, at most C
  requests in flight; and the one-process server asked with httpx, a full Python client.

The Conductor is a coroutine (`one_step_async`): a sync function Conductor runs in a thread
for each call, and handing the GIL to that thread and back adds latency that grows with the
event loop's load (the direct way at 32 in flight: 316–375 requests/s with `one_step`,
439–453 with `one_step_async`), which would make the figures the thread's, not the server's.

For each concurrency C (default 1, 8 and 32) every way runs `--repeats` times, the ways taking
turns, and the medians are reported (5 runs by default: on 2 cores one way's own runs at 32
in flight spread over up to 13%, e.g. 460–527 requests/s, wider than the throughput target's
margin, and medians of 3 made the verdict flap): requests per second, p50 / p95 latency, CPU
time per request (the direct way: this process; served: every process of that server, its trace
writers included), the machine's steal time meanwhile (the share of its CPU a hypervisor gave
to other guests), the server's overhead per request (served p50 − direct p50) and the
served / direct throughput ratio. A fixed pure-Python loop is timed before and after the runs:
the machine's speed then, so a run on a slowed machine can be told from slower code.
Both sides run on the event loop the server runs on (uvloop, which uvicorn picks up when the
`serve` extra installed it; asyncio otherwise). Targets: overhead under 5 ms p50, and no loss
of throughput at 32 (served ≥ 95% of direct). Where the direct way is itself CPU-bound (short
latencies on few cores), every millisecond of server CPU comes off the served throughput; a
longer `--latency` makes the worker endpoint the bound again.

    .venv/bin/python benchmarks/serve.py [--latency 0.05] [--requests 1000] [--repeats 5]
        [--concurrency 1 8 32] [--processes 1 2] [--transport aiohttp|openai-sdk]
        [--out benchmarks/results/serve.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from podium.config import load_pool
from podium.pipeline import Pipeline
from podium.testing import ScriptedServer
from podium.testing.ports import free_port

POOL = """
[conductor]
backend = "function"
function = "podium.testing.workers:one_step_async"

[[workers]]
name = "w0"
backend = "openai"
base_url = "{base}"
model = "w0"
max_concurrency = 256
retries = 0
transport = "{transport}"

[run]
cache = false
"""
OVERHEAD_MS, THROUGHPUT = 5.0, 0.95
STEAL_PCT = 5.0  # steal time (% of the machine's CPU) past which a run is flagged as contended


def event_loop() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


def run(coro):
    """`coro` on the event loop `podium serve` uses (uvicorn picks uvloop when installed)."""
    if event_loop() == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def machine_ticks() -> tuple[int, int]:
    """(steal, total) clock ticks of the whole machine so far, from /proc/stat ((0, 0) where
    there is none): the share a hypervisor gave to other guests while this one wanted to run."""
    try:
        with open("/proc/stat") as fh:
            ticks = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (ticks[7] if len(ticks) > 7 else 0), sum(ticks[:8])


def speed_probe(repeats: int = 5) -> float:
    """Milliseconds a fixed pure-Python loop takes (median): the machine's speed at the time,
    so runs on a slowed machine can be told from slower code."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for i in range(300_000):
            total += i * i % 7
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


async def load(call, n: int, concurrency: int, cpu=time.process_time) -> dict:
    """`n` calls, at most `concurrency` in flight; per-call latency, overall rate, the CPU ms
    per call `cpu()` (seconds) counted meanwhile, and the machine's steal time meanwhile."""
    gate = asyncio.Semaphore(concurrency)
    times: list[float] = []

    async def one(i: int) -> None:
        async with gate:
            t0 = time.perf_counter()
            await call(i)
            times.append(time.perf_counter() - t0)

    (steal0, ticks0), c0, t0 = machine_ticks(), cpu(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall = time.perf_counter() - t0
    steal1, ticks1 = machine_ticks()
    return {"rps": n / wall, "p50_ms": 1000 * statistics.median(times),
            "p95_ms": 1000 * pct(times, 0.95), "wall_s": wall,
            "cpu_ms": 1000 * (cpu() - c0) / n,
            "steal_pct": 100 * (steal1 - steal0) / max(1, ticks1 - ticks0)}


def question(i: int) -> str:
    return f"What is {i} + {i + 1}?"


async def direct(pool_file: Path, n: int, concurrency: int) -> dict:
    async with Pipeline(load_pool(pool_file)) as pipe:
        await pipe.ask(question(0))  # warm: clients, connections

        async def call(i: int) -> None:
            result = await pipe.ask(question(i))
            assert result.answer is not None, result.outcome.cause

        return await load(call, n, concurrency)


async def served_httpx(base: str, n: int, concurrency: int, pid: int) -> dict:
    """The served way asked with httpx (a full Python HTTP client: its own CPU counts too)."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits,
                                 trust_env=False) as http:
        async def call(i: int) -> None:
            resp = await http.post("/v1/chat/completions", json={
                "model": "podium", "messages": [{"role": "user", "content": question(i)}]})
            assert resp.status_code == 200, resp.text

        await call(0)
        return await load(call, n, concurrency, lambda: cpu_s(pid))


class Connection:
    """One keep-alive HTTP/1.1 connection that sends a ready-made POST and reads the reply: a
    load generator that costs next to nothing (like wrk), so the served figures are the
    server's, not a Python HTTP client's."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> bytes:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: "
                          f"application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                          .encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        reply = await self.reader.readexactly(length)
        assert status == 200, reply
        return reply

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def served(base: str, n: int, concurrency: int, pid: int) -> dict:
    """The served way asked over `concurrency` keep-alive connections (`Connection`)."""
    host, port = base.removeprefix("http://").split(":")
    free = [Connection(host, int(port)) for _ in range(concurrency)]

    async def call(i: int) -> None:
        conn = free.pop()
        try:
            reply = await conn.post("/v1/chat/completions", json.dumps({
                "model": "podium", "messages": [{"role": "user", "content": question(i)}]})
                .encode())
        finally:
            free.append(conn)
        assert b'"content":"<answer>1</answer>"' in reply.replace(b" ", b""), reply

    await call(0)
    try:
        return await load(call, n, concurrency, lambda: cpu_s(pid))
    finally:
        for conn in free:
            conn.close()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` and of every process under it (a server's
    --processes and each one's trace writer); 0 once it is gone."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, used = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / tick

    def under(p: int) -> bool:
        while p > 1:
            if p == pid:
                return True
            p = parent.get(p, 0)
        return False

    return sum(t for p, t in used.items() if under(p))


def start_server(pool_file: Path, port: int, traces: Path, log: Path,
                 processes: int = 1) -> subprocess.Popen:
    with open(log, "wb") as fh:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "podium.cli.main", "serve", "--pool", str(pool_file),
             "--port", str(port), "--no-auth", "--max-concurrency", str(256 * processes),
             "--trace-dir", str(traces), "--no-cache", "--processes", str(processes)],
            stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "NO_PROXY": "127.0.0.1"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"podium serve exited:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1,
                         trust_env=False).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("podium serve did not start within 60 s")


def medians(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]} | {"runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--transport", choices=["aiohttp", "openai-sdk"], default="aiohttp",
                        help="the worker's transport (podium's aiohttp path or the openai SDK)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/serve.json"))
    args = parser.parse_args()

    rows = []
    t_start, probe_start = time.perf_counter(), speed_probe()
    with ScriptedServer(latency=args.latency, reply_by_model={"w0": "<answer>1</answer>"}) as ws, \
            tempfile.TemporaryDirectory() as tmp:
        pool_file = Path(tmp) / "pool.toml"
        pool_file.write_text(POOL.format(base=ws.base_url, transport=args.transport))
        servers = {}
        try:
            for p in args.processes:
                port = free_port()
                servers[p] = (start_server(pool_file, port, Path(tmp) / f"traces-{p}",
                                           Path(tmp) / f"serve-{p}.log", p),
                              f"http://127.0.0.1:{port}")
                run(served(servers[p][1], 4 * max(args.concurrency), max(args.concurrency),
                           servers[p][0].pid))
            for c in args.concurrency:
                n = args.requests if c > 1 else max(50, args.requests // 8)
                runs: dict[str, list[dict]] = {}
                for _ in range(args.repeats):  # the ways take turns: the machine's drift is shared
                    runs.setdefault("direct", []).append(run(direct(pool_file, n, c)))
                    for p, (proc, base) in servers.items():
                        runs.setdefault(f"served-{p}", []).append(
                            run(served(base, n, c, proc.pid)))
                proc, base = servers[args.processes[0]]
                runs["httpx"] = [run(served_httpx(base, n, c, proc.pid))]
                row = {"concurrency": c, "requests": n} | {k: medians(v) for k, v in runs.items()}
                for p in args.processes:
                    s = row[f"served-{p}"]
                    s["overhead_p50_ms"] = s["p50_ms"] - row["direct"]["p50_ms"]
                    s["throughput_ratio"] = s["rps"] / row["direct"]["rps"]
                rows.append(row)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(30)

    probe_end = speed_probe()
    print(f"worker latency {1000 * args.latency:.0f} ms · {platform.machine()}, "
          f"{os.cpu_count()} cores · event loop {event_loop()} · worker transport "
          f"{args.transport} · medians of {args.repeats} "
          f"runs a way ({time.perf_counter() - t_start:.0f} s)")
    print(f"machine speed: a fixed Python loop took {probe_start:.1f} ms before the runs and "
          f"{probe_end:.1f} ms after (less is faster)\n")
    print(f"{'conc':>4}  {'way':<22} {'rps':>7} {'p50 ms':>7} {'p95 ms':>7} {'cpu ms/req':>10} "
          f"{'steal':>5}  {'overhead p50':>12} {'vs direct':>9}")
    for r in rows:
        ways = [("direct", "direct (Pipeline.ask)")] + [
            (f"served-{p}", f"served, {p} process{'es' if p > 1 else ''}")
            for p in args.processes] + [("httpx", f"served-{args.processes[0]}, httpx client")]
        for key, label in ways:
            w = r[key]
            more = (f"  {w['overhead_p50_ms']:>9.1f} ms {w['throughput_ratio']:>9.0%}"
                    if "overhead_p50_ms" in w else "")
            print(f"{r['concurrency']:>4}  {label:<22} {w['rps']:>7.1f} {w['p50_ms']:>7.1f} "
                  f"{w['p95_ms']:>7.1f} {w['cpu_ms']:>10.2f} {w['steal_pct']:>4.0f}%{more}")
    verdicts = {}
    top = max(rows, key=lambda r: r["concurrency"])
    for p in args.processes:
        overhead_ok = all(r[f"served-{p}"]["overhead_p50_ms"] < OVERHEAD_MS for r in rows)
        throughput_ok = top[f"served-{p}"]["throughput_ratio"] >= THROUGHPUT
        verdicts[p] = {"overhead_pass": overhead_ok, "throughput_pass": throughput_ok}
        print(f"\n{p} process{'es' if p > 1 else ''}: overhead < {OVERHEAD_MS:g} ms p50 at every "
              f"concurrency: {'PASS' if overhead_ok else 'MISS'}; served ≥ {THROUGHPUT:.0%} of "
              f"direct at {top['concurrency']}: {'PASS' if throughput_ok else 'MISS'}", end="")
    print()
    steal = max(w["steal_pct"] for w in (top["direct"], *(top[f"served-{p}"]
                                                         for p in args.processes)))
    if steal >= STEAL_PCT:
        print(f"Note: the hypervisor took up to {steal:.0f}% of this machine's CPU during the "
              f"runs at {top['concurrency']} (steal time): a served request needs more CPU than "
              "a direct one, so these figures are the contended machine's as much as the "
              "server's. Compare runs with little steal.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"latency_s": args.latency, "loop": event_loop(),
                                    "transport": args.transport,
                                    "repeats": args.repeats, "rows": rows,
                                    "speed_probe_ms": [probe_start, probe_end],
                                    "targets": verdicts}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
