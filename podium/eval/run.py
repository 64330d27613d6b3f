"""One evaluation run as a library call: `run_eval(EvalSpec(...))` does what `podium eval` does.

It builds the task and its items, the pool (with `conductor` swapped in, and a black-box
`openai:URL` system as the only worker), checks that model-written code can be isolated, then
locks the results folder, refuses to resume it with other settings (`podium.eval.folder`),
repairs a damaged results file, runs every item `repeats` times on the system
(`podium.eval.runner`), and writes `summary.json`. The CLI only parses flags into an
`EvalSpec`, draws the progress bar from `on_start`/`on_record`, and prints the summary.

    import asyncio
    from podium.eval.run import EvalSpec, run_eval
    summary = asyncio.run(run_eval(EvalSpec(task="gsm8k", out="runs/eval/gsm8k", n=20)))
    print(summary.accuracy, summary.stderr)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podium.errors import ConfigError
from podium.eval.summary import Summary, summarize
from podium.files import strict_json


@dataclass(frozen=True)
class EvalSpec:
    """What to evaluate, where, and how (the flags of `podium eval`)."""

    task: str  # a task name (`podium.tasks.TASKS`) or jsonl:/csv:/json:FILE
    out: str | Path  # the results folder; the same folder again resumes
    system: str = "conductor"  # podium.baselines: conductor, single:W, moa, openai:URL, ...
    pool: str | None = None  # pool file; None: the embedded default
    n: int | None = None  # a seeded sample of n items; None: all
    repeats: int = 3
    concurrency: int = 4
    split: str | None = None  # None: the preset's split, else "test"
    seed: int = 0
    preset: str | None = None  # "paper": the reference code's subsets and graders
    task_options: dict[str, Any] = field(default_factory=dict)
    conductor: str | None = None  # a checkpoint, .gguf or URL in place of the pool's
    allow_pool_mismatch: bool = False
    no_cache: bool = False
    fallback: bool = False  # answer with one worker when the Conductor's output does not parse
    retry_errors: bool = False
    traces: bool = False  # also save each item's full trace
    allow_unisolated: bool = False  # grade code where the sandbox cannot isolate it fully
    budget: float | None = None  # USD per question for the workers' calls (podium.conductor.budget)


OnStart = Callable[[str, int, int], None]  # (label, total attempts, already done)
OnRecord = Callable[[dict[str, Any]], None]


async def run_eval(spec: EvalSpec, *, on_start: OnStart | None = None,
                   on_record: OnRecord | None = None,
                   warn: Callable[[str], None] | None = None) -> Summary:
    """Run `spec` and return its `Summary` (also written to OUT/summary.json). `on_start` hears the run's label, its total attempts and how many a
    resume already has; `on_record` each new record; `warn` what a person should know (a
    repaired results file, an unisolated code task)."""
    from podium.baselines import BARE_QUESTION, blackbox_pool, parse_blackbox
    from podium.checkpoint import with_conductor
    from podium.conductor.budget import parse_budget
    from podium.config import load_pool
    from podium.eval.folder import FolderLock, prepare_folder
    from podium.scoring.sandbox import require_isolation
    from podium.settings import resolve_settings
    from podium.tasks import get_task, preset_for

    parse_budget(spec.budget, "--budget")  # a bad budget is refused before anything runs
    preset_split, preset_options = preset_for(spec.preset, spec.task)
    split = spec.split or preset_split or "test"
    options = {**preset_options, **spec.task_options}
    task = get_task(spec.task, **options)
    items = task.load(split=split, n=spec.n, seed=spec.seed)
    # --n draws a seeded sample: the same seed draws the same items; the label says so
    drawn = (f" · a sample of {len(items)} of {len(task.load(split=split))} items "
             f"(seed {spec.seed})" if spec.n else "")
    if spec.budget is not None:
        drawn += f" · budget ${spec.budget:g} a question"
    if not items:
        raise ConfigError(f"Task {spec.task} has no items for split {split!r}.")
    pool = load_pool(spec.pool)
    if spec.conductor:
        pool = with_conductor(pool, spec.conductor, allow_mismatch=spec.allow_pool_mismatch)
    # A Conductor output that does not parse is a format error in evaluation (scored wrong, its
    # reason counted), not a silent single-worker fallback, unless `fallback` asks for one.
    flags: dict[str, Any] = {"fallback": spec.fallback}
    if spec.no_cache:
        flags["cache"] = False
    required = None
    if parse_blackbox(spec.system):  # openai:URL — the endpoint is the only worker
        pool, _ = blackbox_pool(spec.system, pool)
        required = BARE_QUESTION
    settings = resolve_settings(pool.run, flags=flags, required=required)
    # model-written code runs only fully isolated, or with allow_unisolated (then recorded);
    # checked before the folder is created, so a refused run leaves nothing behind
    isolation = require_isolation(task, allow_unisolated=spec.allow_unisolated)
    try:
        out = prepare_folder(Path(spec.out))
        with FolderLock(out):  # held until the summary is written: a second run is refused
            return await _run_locked(spec, task, items, pool, settings, split, out, options,
                                     isolation, on_start, on_record, warn or (lambda _: None),
                                     drawn)
    finally:
        close = getattr(task, "close", None)
        if close:
            close()


async def _run_locked(spec: EvalSpec, task: Any, items: list, pool: Any, settings: Any,
                      split: str, out: Path, task_options: dict[str, Any], isolation: Any,
                      on_start: OnStart | None, on_record: OnRecord | None,
                      warn: Callable[[str], None], drawn: str = "") -> Summary:
    from podium.baselines import build_system
    from podium.eval.folder import WriteFailed, check_meta, fingerprint, local_files, write_whole
    from podium.eval.runner import (
        RECORD_FORMAT,
        RESULTS,
        EvalConfig,
        evaluate,
        load_results,
        read_results,
        repair_results,
    )
    from podium.pipeline import Pipeline

    path = out / RESULTS
    meta = {"task": task.name, "system": spec.system, "split": split, "seed": spec.seed,
            "preset": spec.preset, "n": len(items), "conductor": spec.conductor,
            "repeats": spec.repeats, "pool": pool.source,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "fingerprint": fingerprint(pool, settings, task_options,
                                       conductor=spec.conductor, preset=spec.preset,
                                       budget=spec.budget),
            "isolation": isolation,
            "local_files": local_files([
                spec.conductor, pool.conductor.model, *(w.model for w in pool.workers),
                *(spec.task.split(":", 1)[1:] if ":" in spec.task else [])])}
    # settings are checked before the results file is touched: a refused resume changes nothing
    check_meta(out, meta, records=list(load_results(path).records.values()),
               retry_errors=spec.retry_errors, record_format=RECORD_FORMAT, warn=warn)
    try:
        found, kept = repair_results(path)
    except OSError as exc:
        raise WriteFailed(path, exc) from None
    for line in found.warnings(path, "it will be rerun"):
        warn(line)
    if kept is not None:
        warn(f"the file as it was is kept at {kept}; {path} now holds its good lines only.")
    config = EvalConfig(spec.repeats, spec.concurrency, spec.retry_errors, spec.traces,
                        spec.budget)
    total = len(items) * spec.repeats
    async with Pipeline(pool, settings=settings) as pipe:
        system = build_system(spec.system, pipe)
        if on_start is not None:
            already = len([k for k in read_results(path) if k[1] < spec.repeats])
            on_start(f"{task.name} · {spec.system}{drawn}", total, min(already, total))
        records = await evaluate(task, system, items, out, config, on_record=on_record)
    summary = summarize(records)
    write_whole(out / "summary.json", strict_json(summary.to_json(), indent=2))
    return summary
