"""`podium ask`: one question through the Conductor and its team, shown as it runs."""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from pathlib import Path

from rich.console import Console

from podium.cli import output
from podium.errors import ConfigError, PodiumError


def _settings(pool, recursion: int | None):
    if recursion is None:
        return pool.run
    return pool.run.model_copy(update={"recursion": recursion})


async def _ask(question: str, pool_path: str | None, recursion: int | None,
               show: output.LiveView | None):
    from podium.config import load_pool
    from podium.pipeline import Pipeline

    pool = load_pool(pool_path)
    if show:
        show.header(pool)
    async with Pipeline(pool, settings=_settings(pool, recursion)) as pipe:
        if show:
            show.thinking()
        return pool, await pipe.ask(question, on_event=show.event if show else None)


def run_ask(question: str, *, pool: str | None, recursion: int | None, trace: str | None,
            json_out: bool, verbose: bool, debug: bool) -> int:
    err = Console(stderr=True)
    out = Console()
    show = None if json_out else output.LiveView(out, verbose=verbose)
    try:
        if not question.strip():
            raise ConfigError("The question is empty. Pass the question as text, e.g. "
                              "podium ask \"What is 17 * 3?\".")
        pool_obj, result = asyncio.run(_ask(question, pool, recursion, show))
    except PodiumError as exc:
        if show:
            show.stop()
        if debug:
            traceback.print_exc()
        output.error(err, exc)
        return 2 if isinstance(exc, ConfigError) else 1
    except Exception as exc:  # an unexpected failure: one paragraph, traceback only on --debug
        if show:
            show.stop()
        if debug:
            traceback.print_exc()
        output.error(err, exc, unexpected=True)
        return 1
    data = result.to_json()
    if trace:
        Path(trace).parent.mkdir(parents=True, exist_ok=True)
        Path(trace).write_text(json.dumps(data, indent=2, ensure_ascii=False), "utf-8")
    if json_out:
        sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    else:
        show.summary(result, trace)
    if result.answer is None:
        if not json_out:
            output.no_answer(err, result)
        return 1
    return 0
