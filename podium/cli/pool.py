"""`podium pool show` and `podium pool check`: what a pool file says, and whether it works."""

from __future__ import annotations

import asyncio
import time

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from podium.config import ModelSpec, Pool, load_pool

PING = [{"role": "user", "content": "Reply with the single word OK."}]


def _price(spec: ModelSpec) -> str:
    return f"${spec.price.input:g} / ${spec.price.output:g}" if spec.price else "-"


def _sampling(spec: ModelSpec) -> str:
    parts = [f"{k}={getattr(spec, k)}" for k in ("temperature", "top_p", "max_tokens")
             if getattr(spec, k) is not None]
    for key in ("reasoning_effort", "thinking", "thinking_budget"):
        if getattr(spec, key) is not None:
            parts.append(f"{key}={getattr(spec, key)}")
    return " ".join(parts) or "-"


def _limits(spec: ModelSpec) -> str:
    parts = [f"conc {spec.max_concurrency}"]
    if spec.rpm:
        parts.append(f"{spec.rpm} rpm")
    if spec.tpm:
        parts.append(f"{spec.tpm} tpm")
    return ", ".join(parts)


def pool_table(pool: Pool) -> Table:
    table = Table(title=f"Pool {pool.source}", title_justify="left")
    for col in ("id", "name", "backend", "model", "endpoint", "key from", "sampling", "limits",
                "price in/out per 1M"):
        table.add_column(col, overflow="fold")
    rows = [("C", pool.conductor)] + [(str(i), w) for i, w in enumerate(pool.workers)]
    for ident, spec in rows:
        endpoint = spec.base_url or (spec.function if spec.backend == "function" else "-")
        key = f"${spec.api_key_env}" if spec.api_key_env else "-"  # never the key itself
        table.add_row(ident, spec.name, spec.backend, spec.model or "-", endpoint or "-", key,
                      _sampling(spec), _limits(spec), _price(spec))
    return table


def show(pool_path: str | None) -> int:
    pool = load_pool(pool_path)
    console = Console()
    console.print(pool_table(pool))
    r = pool.run
    console.print(f"run: prompt {r.prompt} · few-shots {r.fewshots} · display {r.pool_display} · "
                  f"max_steps {r.max_steps} · recursion {r.recursion} · final answer "
                  f"{r.final_answer} · cache {'on' if r.cache else 'off'}")
    return 0


async def _check_one(spec: ModelSpec) -> dict:
    from podium.llm.registry import build_client

    quick = spec.model_copy(update={"max_tokens": 8, "retries": 0, "empty_retries": 0,
                                    "timeout_s": min(spec.timeout_s, 60.0)})
    start = time.perf_counter()
    try:
        client = build_client(quick, cache=None)
        resp = await client.chat(PING)
        close = getattr(client, "aclose", None)
        if close:
            await close()
    except Exception as exc:  # every failure is a row of the report, with its reason
        return {"ok": False, "reason": str(exc), "latency": time.perf_counter() - start}
    return {"ok": True, "reason": "", "latency": resp.latency_s or time.perf_counter() - start,
            "model": resp.model, "reply": resp.text.strip()[:30]}


async def _check_all(pool: Pool) -> list[tuple[str, ModelSpec, dict]]:
    rows = [("C", pool.conductor)] + [(str(i), w) for i, w in enumerate(pool.workers)]
    results = await asyncio.gather(*(_check_one(spec) for _, spec in rows))
    return [(i, s, r) for (i, s), r in zip(rows, results, strict=True)]


def check(pool_path: str | None) -> int:
    pool = load_pool(pool_path)
    console = Console()
    table = Table(title=f"Checking {pool.source}", title_justify="left")
    for col in ("id", "name", "reachable", "latency", "model", "price in/out per 1M", "reason"):
        table.add_column(col, overflow="fold")
    failed = 0
    with console.status("Sending a tiny request to every model…"):
        results = asyncio.run(_check_all(pool))
    for ident, spec, r in results:
        failed += not r["ok"]
        table.add_row(ident, spec.name, "[green]yes[/]" if r["ok"] else "[red]no[/]",
                      f"{r['latency']:.2f}s", r.get("model") or "-", _price(spec),
                      escape(r["reason"]))
    console.print(table)
    if failed:
        console.print(f"[red]{failed} of {len(results)} models failed.[/] Fix the reasons above "
                      "(base_url, model name, api_key_env) and run `podium pool check` again.")
        return 1
    console.print(f"All {len(results)} models answered.")
    return 0

