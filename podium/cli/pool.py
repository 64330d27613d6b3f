"""`podium pool show` and `podium pool check`: what a pool file says, and whether it works."""

from __future__ import annotations

import asyncio
import contextlib
import time

from rich.table import Table

from podium.cli.output import console as make_console
from podium.cli.output import safe
from podium.config import ModelSpec, Pool, load_pool
from podium.redact import safe_url

PING = [{"role": "user", "content": "Reply with the single word OK."}]


def _price(spec: ModelSpec) -> str:
    if not spec.price:
        return "-"
    p = spec.price
    tokens = f"${p.input:g} / ${p.output:g}" if p.input or p.output or not p.per_call else ""
    call = f"${p.per_call:g} a call" if p.per_call else ""
    return " + ".join(x for x in (tokens, call) if x)


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
    table = Table(title=f"Pool {safe(pool.source)}", title_justify="left")
    for col in ("id", "name", "backend", "model", "endpoint", "key from", "sampling", "limits",
                "price in/out per 1M"):
        table.add_column(col, overflow="fold")
    rows = [("C", pool.conductor)] + [(str(i), w) for i, w in enumerate(pool.workers)]
    for ident, spec in rows:
        endpoint = safe_url(spec.base_url) or (spec.function if spec.backend == "function"
                                               else "-")
        key = f"${spec.api_key_env}" if spec.api_key_env else "-"  # never the key itself
        table.add_row(ident, safe(spec.name), spec.backend, safe(spec.model or "-"),
                      safe(endpoint or "-"), key, _sampling(spec), _limits(spec), _price(spec))
    return table


def show(pool_path: str | None) -> int:
    pool = load_pool(pool_path)
    console = make_console()
    console.print(pool_table(pool))
    r = pool.run
    console.print(f"run: prompt {r.prompt} · few-shots {r.fewshots} · display {r.pool_display} · "
                  f"max_steps {r.max_steps} · recursion {r.recursion} · final answer "
                  f"{r.final_answer} · cache {'on' if r.cache else 'off'}")
    return 0


PING_MAX_TOKENS = 8
THINKING_MARGIN = 16  # answer tokens on top of a thinking budget
DEFAULT_THINKING_BUDGET = 1024  # Anthropic's budget when `thinking = true` names none


def _thinks(spec: ModelSpec) -> bool:
    """Whether the entry asks for a thinking budget the ping's max_tokens must leave room for:
    `thinking = true`, or a `thinking_budget` with `thinking` unset (as the Anthropic backend
    reads it). Gemini's `thinking = true` alone is a dynamic budget; it needs no room here."""
    if spec.backend == "anthropic":
        return bool(spec.thinking) or (spec.thinking is None and spec.thinking_budget is not None)
    return spec.thinking is not False and spec.thinking_budget is not None


def ping_spec(spec: ModelSpec) -> ModelSpec:
    """The entry as the check sends it: no retries, at most 60 s, and a few output tokens.

    Thinking stays as configured (the check should fail where the real calls would), so an
    entry with a thinking budget gets that budget plus a small margin, since Anthropic rejects
    a max_tokens at or below the budget, and a reply cut off inside the thinking has no text.
    """
    max_tokens = PING_MAX_TOKENS
    if _thinks(spec):
        budget = spec.thinking_budget or DEFAULT_THINKING_BUDGET
        max_tokens = budget + THINKING_MARGIN
        if spec.max_tokens is not None and spec.max_tokens > budget:
            max_tokens = min(max_tokens, spec.max_tokens)
    return spec.model_copy(update={"max_tokens": max_tokens, "retries": 0, "empty_retries": 0,
                                   "timeout_s": min(spec.timeout_s, 60.0)})


def _kind(exc: Exception) -> str:
    """A failure's one-word kind for the table (the full reason is printed below it)."""
    from podium.errors import ConfigError, WorkerError

    if isinstance(exc, WorkerError):
        return exc.kind
    return "configuration" if isinstance(exc, ConfigError) else type(exc).__name__


async def _check_one(spec: ModelSpec) -> dict:
    from podium.llm.registry import build_client

    start = time.perf_counter()
    client = None
    try:
        client = build_client(ping_spec(spec), cache=None)
        resp = await client.chat(PING)
    except Exception as exc:  # every failure is a row of the report, with its reason
        return {"ok": False, "reason": str(exc) or type(exc).__name__, "kind": _kind(exc),
                "latency": time.perf_counter() - start}
    finally:  # a failed check closes its client too (its connections, its HTTP pool)
        close = getattr(client, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):  # closing must not hide the check's result
                await close()
    return {"ok": True, "reason": "", "latency": resp.latency_s or time.perf_counter() - start,
            "model": resp.model, "reply": resp.text.strip()[:30]}


async def _check_all(pool: Pool) -> list[tuple[str, ModelSpec, dict]]:
    rows = [("C", pool.conductor)] + [(str(i), w) for i, w in enumerate(pool.workers)]
    results = await asyncio.gather(*(_check_one(spec) for _, spec in rows))
    return [(i, s, r) for (i, s), r in zip(rows, results, strict=True)]


def check(pool_path: str | None) -> int:
    pool = load_pool(pool_path)
    console = make_console()
    table = Table(title=f"Checking {safe(pool.source)}", title_justify="left")
    for col in ("id", "name", "reachable", "latency", "model", "price in/out per 1M", "failure"):
        table.add_column(col, overflow="fold")
    with console.status("Sending a tiny request to every model…"):
        results = asyncio.run(_check_all(pool))
    for ident, spec, r in results:
        table.add_row(ident, safe(spec.name), "[green]yes[/]" if r["ok"] else "[red]no[/]",
                      f"{r['latency']:.2f}s", safe(r.get("model") or "-"), _price(spec),
                      safe(r.get("kind", "")))
    console.print(table)
    failures = [(ident, spec, r) for ident, spec, r in results if not r["ok"]]
    # each reason in full, one unwrapped line per model: a table column would fold it into
    # a narrow strip of broken words (and URLs) on an 80-column terminal
    for ident, spec, r in failures:
        console.print(f"[red]{safe(ident)} {safe(spec.name)}:[/] {safe(r['reason'])}",
                      soft_wrap=True)
    if failures:
        console.print(f"[red]{len(failures)} of {len(results)} models failed.[/] Fix the "
                      "reasons above (base_url, model name, api_key_env, timeout_s) and run "
                      "`podium pool check` again.")
        return 1
    console.print(f"All {len(results)} models answered.")
    return 0

