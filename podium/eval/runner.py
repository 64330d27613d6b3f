"""Run a system over a task: concurrent, resumable, every item recorded exactly once.

Results go to `OUT/results.jsonl`, one line per (item, repeat), appended and flushed as each
finishes, whole or not at all (a full disk cuts the line back and stops the run with
`WriteFailed`). A rerun after a crash or `kill -9` reads the file, drops a torn last line, and
skips every (item, repeat) already recorded; so no item is run twice or lost. `--retry-errors`
reruns the ones recorded as errors (the newer line wins when the summary reads the file). A line
that is not a record (garbage from a disk error or a bad hand edit: not JSON, or a field the
summary reads with another type) is skipped and reported by line number; before a run
appends, the damaged file is kept aside (`results.jsonl.damaged-<time>`)
and the good lines are rewritten, so those items are rerun and nothing is lost
(`repair_results`). Readers (`podium report`) never change the file. One run at a time writes
a folder: `podium.eval.folder` holds its lock and checks that a resume has the same settings.

Every (item, repeat) is a record, with the item's question and target beside the answer (a
target longer than `TARGET_CHARS` cut), built from the run's outcome (`podium.outcome`): `ok`
(graded; a format error or another model failure scores 0), `error` (a worker or infrastructure
failure decided it: an unreachable endpoint, a rejected key, a crashed grader, a sandbox that
cannot start; its `cause` names the class and the reason, and `--retry-errors` reruns it), or
`skipped` (the task cannot run the item here, e.g. missing libraries).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from podium.baselines import System
from podium.errors import INTERNAL
from podium.eval.folder import WriteFailed
from podium.files import private_dir, strict_json, write_private
from podium.outcome import Failure, grade_outcome
from podium.pipeline import RunResult
from podium.tasks.base import Item, Task
from podium.workflow.types import access_json

RESULTS = "results.jsonl"
RECORD_FORMAT = 2  # results written before run outcomes had failure classes: not resumable


@dataclass(frozen=True)
class EvalConfig:
    repeats: int = 1
    concurrency: int = 4
    retry_errors: bool = False
    save_traces: bool = False
    budget: float | None = None  # USD per question for the workers (podium.conductor.budget)


@dataclass
class Results:
    """What `results.jsonl` holds: the latest record per (item, repeat), the lines that are not
    records (`bad`: line number and why) and whether the last line is torn (no newline)."""

    records: dict[tuple[str, int], dict]
    bad: list[tuple[int, str]]
    torn: bool = False

    def warnings(self, path: Path, then: str) -> list[str]:
        """One line per bad line, e.g. "results.jsonl line 3 is not a record (…); <then>"."""
        return [f"{path} line {n} is not a record ({why}); {then}" for n, why in self.bad]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


_Calls = dict[str, Annotated[int, Field(ge=0)]]  # model -> calls without a price


class _Usage(_Strict):
    calls: int
    total_tokens: int
    cost_usd: float | None = None
    # absent from records written before costs added up over the priced calls
    known_cost_usd: float | None = None
    unpriced: _Calls | None = None


class _UsedBy(_Strict):
    conductor: _Usage = None  # type: ignore[assignment]
    workers: _Usage = None  # type: ignore[assignment]


class _Cause(_Strict):
    cls: str = Field(alias="class")
    reason: str
    detail: str | None = None


class _Round(_Strict):
    round: int
    decision: str
    parse_reason: str | None = None


class _Step(_Strict):
    name: str


class _Budget(_Strict):
    amount: float
    over: bool
    plan_price: float
    workers_cost_usd: float | None = None
    spent_usd: float | None = None
    spent_unpriced: _Calls | None = None
    steps_not_called: int | None = Field(default=None, ge=0)
    verdict: str | None = None


class _Record(_Strict):
    """The fields of a record that the summary reads, with their types: a line whose fields
    have other types is not a record (a bad hand edit, a damaged disk)."""

    # a key the summary reads with a default may be absent; where the default is None,
    # only a present null is refused (the summary reads such a key as it is)
    item: str
    repeat: int = Field(ge=0)
    status: str
    correct: bool | None = None
    reason: str | None = None
    cause: _Cause | None = None
    used: _Usage = None  # type: ignore[assignment]
    paid: _Usage = None  # type: ignore[assignment]
    used_by: _UsedBy | None = None
    rounds: list[_Round] | None = None
    workflow: list[_Step] | None = None
    latency_s: float = 0.0
    cache_hits: int = 0
    budget: _Budget | None = None


def _parse_line(line: bytes) -> tuple[dict | None, str]:
    try:
        rec = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text at byte {exc.start}"
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} at column {exc.colno}"
    except RecursionError:
        return None, "JSON nested too deeply to read"
    if not isinstance(rec, dict):
        return None, f"a JSON {type(rec).__name__}, not an object"
    try:
        _Record.model_validate(rec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the record"
        return None, f"JSON, but {where}: {first['msg']}"
    return rec, ""


def load_results(path: Path) -> Results:
    """Read `path` without changing it. A torn last line (a kill mid-write) is left out, as is
    every line that is not a record; the newer of two records of one (item, repeat) wins."""
    if not path.exists():
        return Results({}, [])
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    torn = lines[-1] != b""  # the process died mid-write: the last line has no newline
    records: dict[tuple[str, int], dict] = {}
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(lines[:-1], 1):
        if not line.strip():
            continue
        rec, why = _parse_line(line)
        if rec is None:
            bad.append((number, why))
        else:
            records[(rec["item"], rec["repeat"])] = rec
    return Results(records, bad, torn)


def read_results(path: Path) -> dict[tuple[str, int], dict]:
    """The latest record per (item, repeat); bad and torn lines left out (see load_results)."""
    return load_results(path).records


def repair_results(path: Path) -> tuple[Results, Path | None]:
    """Make `path` safe to append to, before a run resumes it; return what it held, and where
    the damaged file was kept (None when it was not damaged).

    A torn last line is cut off, as a kill mid-write leaves it (that record was never reported
    done). Lines that are not records (binary garbage, a hand edit gone wrong, a disk error) are
    never thrown away: the file as it was is copied to `results.jsonl.damaged-<timestamp>`,
    then `path` is rewritten, atomically, with its good lines only, byte for byte. The items
    whose lines were bad have no record, so the run does them again."""
    results = load_results(path)
    if not results.bad and not results.torn:
        return results, None
    raw = path.read_bytes()
    if not results.bad:  # only a torn tail: cut it
        with open(path, "r+b") as fh:
            fh.truncate(raw.rfind(b"\n") + 1)
        return results, None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while kept.exists():
        n += 1
        kept = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    shutil.copy2(path, kept)
    bad = {number for number, _ in results.bad}
    good = [line + b"\n" for number, line in enumerate(raw.split(b"\n")[:-1], 1)
            if number not in bad and line.strip()]
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.writelines(good)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return results, kept


class ResultWriter:
    """Appends one JSON line per finished item, whole or not at all: the line goes out in
    one write and is fsynced, so a kill loses nothing that was reported done; a write that
    fails (a full disk) is cut back to the end of the last whole line and raised as
    `WriteFailed`, so the file never holds half a record."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise WriteFailed(path, exc) from None

    def write(self, record: dict) -> None:
        data = (strict_json(record, ensure_ascii=False) + "\n").encode("utf-8")
        end = os.fstat(self._fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, end)  # the part of the line that was written
            raise WriteFailed(self.path, exc) from None

    def close(self) -> None:
        os.close(self._fd)


def run_record(result: RunResult) -> dict[str, Any]:
    """The record of one graded run: its outcome as the pipeline built it, the final workflow
    and the grade's fields at the top level (status, correct, score, extracted, reason, and
    the grader's details where it gives any, e.g. the sandbox's isolation)."""
    out = result.outcome
    data = out.to_json()
    grade = data.pop("grade", None) or {}
    final = result.final_round
    reason = out.cause.reason if out.cause is not None else grade.get("reason", "")
    return {
        "status": out.status,
        "correct": out.correct,
        "score": grade.get("score", 0.0) if out.status == "ok" else 0.0,
        "extracted": grade.get("extracted"),
        "reason": reason,
        **({"grade_details": grade["details"]} if grade.get("details") else {}),
        **data,
        "workflow": [{"worker": s.worker, "name": s.worker_name, "access": access_json(s.access)}
                     for s in (final.execution.steps if final.execution else [])],
        "latency_s": round(result.wall_s, 3),
    }


async def _one(task: Task, system: System, item: Item, repeat: int,
               traces: Path | None, budget: float | None = None) -> dict:
    base = {"item": item.id, "repeat": repeat, "task": task.name, "system": system.spec,
            "question": item.question, "target": _shown(item.gold)}
    skip = getattr(task, "skip_reason", lambda _item: None)(item)
    if skip:
        return {**base, "status": "skipped", "reason": skip, "correct": False}
    try:
        result = await system.run(task.format(item), sample_id=repeat, budget=budget)
    except Exception as exc:  # a crashed system is a recorded error, never a silent drop
        cause = Failure("infra", INTERNAL, f"{type(exc).__name__}: {exc}", "system")
        return {**base, "status": "error", "correct": False, "reason": INTERNAL,
                "cause": cause.to_json(), "failures": [cause.to_json()],
                "trace": traceback.format_exc(limit=5)}
    result = replace(result, outcome=await grade_outcome(result.outcome, task, item))
    if traces is None:
        return {**base, **run_record(result)}
    path = traces / trace_name(item.id, repeat)
    try:
        write_private(path, strict_json(result.to_json(), ensure_ascii=False))
    except OSError as exc:
        raise WriteFailed(path, exc) from None
    return {**base, **run_record(result), "trace_file": path.name}


def trace_name(item: str, repeat: int) -> str:
    """The file name of an (item, repeat)'s trace under OUT/traces: the id's letters, digits,
    `.`, `-` and `_` (others as `_`, cut to 80 characters) for a person to read, then 12 hex
    digits of the SHA-256 of the exact id, so two ids never share a file, and the repeat."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", item)[:80].lstrip(".") or "item"
    digest = hashlib.sha256(item.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{readable}-{digest}-{repeat}.json"


TARGET_CHARS = 2000  # a code task's target (its tests) can be long: the record keeps its start


def _shown(gold: Any) -> Any:
    """The item's target as a record shows it beside the answer (JSON; long text cut)."""
    if gold is None or isinstance(gold, (bool, int, float)):
        return gold
    text = gold if isinstance(gold, str) else json.dumps(gold, ensure_ascii=False, default=str)
    return text if len(text) <= TARGET_CHARS else text[:TARGET_CHARS] + "…"


async def evaluate(
    task: Task,
    system: System,
    items: list[Item],
    out: Path,
    config: EvalConfig = EvalConfig(),
    *,
    on_record: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Run every (item, repeat) not yet in `out/results.jsonl`; return all current records."""
    path = out / RESULTS
    done = dict(repair_results(path)[0].records)
    todo = [(item, r) for r in range(config.repeats) for item in items
            if (item.id, r) not in done
            or (config.retry_errors and done[(item.id, r)]["status"] == "error")]
    traces = out / "traces" if config.save_traces else None
    if traces is not None:
        try:
            private_dir(traces)
        except OSError as exc:
            raise WriteFailed(traces, exc) from None
    writer = ResultWriter(path)
    gate = asyncio.Semaphore(config.concurrency)

    async def run(item: Item, repeat: int) -> None:
        async with gate:
            start = time.perf_counter()
            record = await _one(task, system, item, repeat, traces, config.budget)
            record.setdefault("latency_s", round(time.perf_counter() - start, 3))
            writer.write(record)
            done[(item.id, repeat)] = record
            if on_record is not None:
                on_record(record)

    runs = [asyncio.ensure_future(run(item, r)) for item, r in todo]
    try:
        await asyncio.gather(*runs)
    except BaseException:  # a write failed (or Ctrl-C): stop the items still in flight
        for task_ in runs:
            task_.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
        raise
    finally:
        writer.close()
    wanted = {(item.id, r) for r in range(config.repeats) for item in items}
    return [rec for key, rec in done.items() if key in wanted]
