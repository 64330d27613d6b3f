"""`podium ask`: one question through the Conductor and its team, shown as it runs."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from podium.cli import output
from podium.conductor.budget import parse_budget
from podium.errors import ConfigError, PodiumError
from podium.files import private_dir, strict_json, write_private


def _settings(pool, recursion: int | None, no_cache: bool):
    from podium.settings import resolve_settings

    flags: dict = {"cache": False} if no_cache else {}
    if recursion is not None:
        flags["recursion"] = recursion
    return resolve_settings(pool.run, flags=flags)


async def _ask(question: str, pool_path: str | None, recursion: int | None,
               workers: list[str] | None, no_cache: bool, show: output.LiveView | None,
               conductor: str | None = None, allow_pool_mismatch: bool = False,
               budget: float | None = None):
    from podium.checkpoint import with_conductor
    from podium.conductor.view import choose_workers
    from podium.config import load_pool
    from podium.pipeline import Pipeline

    pool = load_pool(pool_path)
    if conductor:
        pool = with_conductor(pool, conductor, allow_mismatch=allow_pool_mismatch)
    chosen = choose_workers(pool.workers, workers) if workers else None
    if show:
        show.header(pool, chosen)
    async with Pipeline(pool, settings=_settings(pool, recursion, no_cache)) as pipe:
        await pipe.load()  # before the live view: an embedded model's load silences stdout
        if show:
            show.thinking()
        return pool, await pipe.ask(question, workers=chosen, budget=budget,
                                    on_event=show.event if show else None)


ASK_HOW = ("pass it as text, podium ask \"What is 17 * 3?\", or on standard input, "
           "echo \"What is 17 * 3?\" | podium ask")


def read_question(question: str | None) -> str:
    """The question: the argument when given, else standard input when it is not a terminal
    (as `llm` reads a prompt); neither, or only blank text, is a ConfigError naming both."""
    if question is None:
        if sys.stdin is None or sys.stdin.isatty():
            raise ConfigError(f"No question was given: {ASK_HOW}.")
        try:
            question = sys.stdin.buffer.read().decode("utf-8").strip()
        except UnicodeDecodeError:
            raise ConfigError("The question on standard input is not UTF-8 text: "
                              f"{ASK_HOW}.") from None
    if not question.strip():
        raise ConfigError(f"The question is empty: {ASK_HOW}.")
    return question


def run_ask(question: str | None, *, pool: str | None, recursion: int | None,
            workers: list[str] | None = None, no_cache: bool = False, trace: str | None,
            json_out: bool, verbose: bool, debug: bool, conductor: str | None = None,
            allow_pool_mismatch: bool = False, budget: float | None = None) -> int:
    err = output.console(stderr=True)
    out = output.console()
    show = None if json_out else output.LiveView(out, verbose=verbose)
    try:
        question = read_question(question)
        if trace:
            check_trace_path(trace)
        budget = parse_budget(budget, "--budget")
        _, result = asyncio.run(_ask(question, pool, recursion, workers, no_cache, show,
                                     conductor, allow_pool_mismatch, budget))
    except PodiumError as exc:
        if show:
            show.stop()
        if debug:
            output.print_traceback()
        output.error(err, exc)
        return 2 if isinstance(exc, ConfigError) else 1
    except Exception as exc:  # an unexpected failure: one paragraph, traceback only on --debug
        if show:
            show.stop()
        if debug:
            output.print_traceback()
        output.error(err, exc, unexpected=True)
        return 1
    data = result.to_json()
    trace_failed = None
    if trace:
        try:
            write_private(trace, strict_json(data, indent=2, ensure_ascii=False))
        except OSError as exc:  # a full disk, a path changed under the run: keep the answer
            trace_failed, trace = f"{exc.strerror or exc} ({trace})", None
    if show is None:  # --json
        sys.stdout.write(output.json_line(data))
    else:
        show.summary(result, trace)
    if trace_failed:
        err.print(f"[bold red]The trace could not be written:[/] {output.safe(trace_failed)}. The "
                  "answer above stands; free space or pick another --trace path and ask again "
                  "(the response cache makes the rerun free).", soft_wrap=True)
    if result.answer is None:
        if not json_out:
            output.no_answer(err, result)
        return 1
    return 1 if trace_failed else 0


def check_trace_path(trace: str) -> None:
    """Refuse a --trace path that cannot be written before any model call is paid."""
    path = Path(trace)
    fix = "Pass a file path in a folder you can write, e.g. --trace runs/trace.json."
    if path.is_symlink():
        raise ConfigError(f"--trace {trace} is a symbolic link: podium never writes through "
                          f"one (it would overwrite the file it points to). {fix}")
    if path.is_dir():
        raise ConfigError(f"--trace {trace} is a folder. {fix}")
    try:
        private_dir(path.parent)
    except OSError as exc:
        raise ConfigError(f"--trace {trace}: its folder cannot be created "
                          f"({exc.strerror or exc}). {fix}") from None
    if not path.parent.is_dir():
        raise ConfigError(f"--trace {trace}: {path.parent} is not a folder. {fix}")
    # a file is written beside its path and renamed over it: its folder must be writable
    target = path if path.exists() and not path.is_file() else path.parent
    if not os.access(target, os.W_OK):
        raise ConfigError(f"--trace {trace}: {target} is not writable. {fix}")
