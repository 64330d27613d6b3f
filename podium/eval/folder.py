"""The `podium eval --out` folder: one run at a time, resumed only by the run that wrote it.

An evaluation folder holds `meta.json` (what was run), `results.jsonl` (one record per
(item, repeat), see `podium.eval.runner`), `summary.json` and a `lock` file. Three guards keep
the records in it from being paid twice or mixed:

* **The lock.** `podium eval` holds an exclusive `flock` on `OUT/lock` for the whole run and
  writes its pid, host, start time and command into it. A second run into the same folder is
  refused at once (ConfigError, exit 2) naming that process: two runs would each run, and pay
  for, every item. The kernel drops the lock when the holder exits, even after `kill -9`, so a
  stale `lock` file never blocks anyone; it is left in place (deleting it would race).

* **The fingerprint.** `meta.json` stores everything that changes the results beside task,
  system, split and seed: the resolved pool (Conductor and workers as the run used them, after
  `--conductor`; API keys only as the names of their variables, never values), the effective
  run settings (with `--fallback` and `--no-cache` applied), the task options (the preset's and
  `--option`s), `--conductor` and `--preset`. It is kept both as a SHA-256 and as the readable
  parts. A resume whose fingerprint differs is refused, naming each difference (e.g.
  `run settings: max_steps 5 → 3`). Knobs that only decide *how* calls are made (concurrency,
  rate limits, retries, back-off, timeouts) are left out, so a run slowed by rate limits can
  be resumed with gentler limits; so are `--n` and `--repeats`, so a run can be extended.
  A `meta.json` written before fingerprints existed is adopted with a warning.

* **The files behind the names.** The fingerprint names a `--conductor` checkpoint, a local
  model or a `jsonl:` task file by path; `meta.json` also stores what is at each such path
  (`local_files`: every file's size and modification time, for a folder all of its files), so
  a Conductor retrained into the same folder, or a question file edited under the same name,
  is refused on resume like any other change. A `meta.json` without them is resumed with a
  warning that the files could not be checked.

* **Damaged files.** A `meta.json` that does not parse, or holds a key podium reads with another
  type (`task: Input should be a valid string`), is a ConfigError naming the file: it
  says which settings wrote the records, so they cannot be resumed safely without it (when
  there are no records yet it is simply rewritten). Bad lines in `results.jsonl` are handled
  by `podium.eval.runner.repair_results`. A file of the folder that cannot be written (a full
  disk) stops the run with `WriteFailed`, which says how to resume it; `meta.json` and
  `summary.json` are written whole or not at all (`write_whole`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from podium import files
from podium.errors import ConfigError, PodiumError
from podium.files import strict_json

META = "meta.json"
LOCK = "lock"

# ModelSpec fields that decide how calls are made, not what they return
_RELIABILITY = frozenset({"max_concurrency", "rpm", "tpm", "retries", "backoff_s",
                          "backoff_max_s", "connect_timeout_s", "timeout_s",
                          "transport"})
# where a run-settings key comes from, named in a refusal
_RUN_HINTS = {"fallback": "--fallback", "cache": "--no-cache or the pool's run.cache"}


class WriteFailed(PodiumError):
    """A file of the results folder could not be written (a full disk, a lost device): the
    run stops, every record written so far is kept, and the same command resumes it."""

    def __init__(self, path: Path, exc: OSError) -> None:
        self.error = exc
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            head = f"No space left on the disk of {path}"
            fix = "free space and rerun with the same command to resume"
        else:
            head = f"Writing {path} failed ({exc.strerror or exc})"
            fix = "fix the cause and rerun with the same command to resume"
        super().__init__(f"{head}: the evaluation stopped; {fix} (every record written so "
                         "far is kept, and only the items without one run again).")


def prepare_folder(out: Path) -> Path:
    """Make `out` a folder (ConfigError when it names a file or cannot be created)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder (a new or an earlier "
                          "`podium eval` results folder).")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"--out {out}: a part of that path is a file; give a folder.") from None
    except OSError as exc:
        raise ConfigError(f"--out {out} cannot be created ({exc.strerror}); give a folder you "
                          "can write to.") from None
    return out


class FolderLock:
    """An exclusive, non-blocking lock on `out/lock`, held until `release()` (or exit)."""

    def __init__(self, out: Path) -> None:
        self.path = out / LOCK
        self._fd: int | None = None

    def acquire(self) -> FolderLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"Cannot open the lock file {self.path} ({exc.strerror}); give "
                              "--out a folder you can write to.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise ConfigError(
                f"{self.path.parent} is in use by another podium eval ({holder}). Two runs into "
                "one folder would each run, and pay for, every item. Wait for that run to "
                "finish (then rerun this command to resume), or give this run another --out."
            ) from None
        except OSError as exc:
            os.close(fd)
            raise ConfigError(f"Cannot lock {self.path} ({exc.strerror}); its file system may "
                              "not support locks: give --out a folder on a local disk.") from None
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                "command": " ".join(["podium", *sys.argv[1:]])}
        with contextlib.suppress(OSError):  # a full disk: the lock holds without its note
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        return (f"pid {info['pid']} on {info.get('host', '?')}, started {info.get('started', '?')}"
                f": {info.get('command', '?')}")
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not yet written its pid"


# --- the fingerprint --------------------------------------------------------------------


def fingerprint(pool: Any, settings: Any, task_options: dict, *, conductor: str | None,
                preset: str | None, budget: float | None = None) -> dict[str, Any]:
    """What decides the results beyond task, system, split and seed: a hash and its parts."""

    def spec(model: Any) -> dict:
        return model.model_dump(mode="json", exclude=set(_RELIABILITY))

    parts = {
        "conductor": spec(pool.conductor),
        "workers": [spec(w) for w in pool.workers],
        "run settings": settings.model_dump(mode="json"),
        "task options": {k: _plain(v) for k, v in sorted(task_options.items())},
        "--conductor": conductor,
        "--preset": preset,
        **({"--budget": budget} if budget is not None else {}),
    }
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False)
    return {"hash": hashlib.sha256(text.encode()).hexdigest(), "parts": parts}


def local_files(paths: Any) -> dict[str, str]:
    """What is at each of `paths` that exists locally now: a digest of every file's relative
    name, size and modification time (cheap for multi-GB weights; an edit or a retrain
    changes it). Paths that do not exist (model names, URLs) are left out."""
    out = {}
    for raw in dict.fromkeys(p for p in paths if p):
        path = Path(str(raw)).expanduser()
        try:
            files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else (
                [path] if path.is_file() else [])
            if not files:
                continue
            entries = [(str(f.relative_to(path)) if f != path else f.name, f.stat().st_size,
                        f.stat().st_mtime_ns) for f in files]
        except OSError:
            continue
        out[str(raw)] = hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:16]
    return out


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        out = {}
        for i, v in enumerate(value):
            name = v.get("name", i)
            out.update(_flat(v, f"{prefix}.{name}" if prefix else str(name)))
        return out
    return {prefix: value}


_MISSING = object()


def differences(old: dict, new: dict) -> list[str]:
    """Readable differences between two fingerprints' parts, e.g. `run settings: max_steps 5 → 3`."""
    lines = []
    for part in dict.fromkeys([*old, *new]):
        a, b = old.get(part, _MISSING), new.get(part, _MISSING)
        if a == b:
            continue
        if not isinstance(a, dict | list) or not isinstance(b, dict | list):
            lines.append(f"{part}: {_show(a)} → {_show(b)}")
            continue
        fa, fb = _flat(a), _flat(b)
        for key in dict.fromkeys([*fa, *fb]):
            va, vb = fa.get(key, _MISSING), fb.get(key, _MISSING)
            if va != vb:
                hint = _RUN_HINTS.get(key) if part == "run settings" else None
                lines.append(f"{part}: {key} {_show(va)} → {_show(vb)}"
                             + (f" ({hint})" if hint else ""))
    return lines


def _show(value: Any) -> str:
    return "(none)" if value is _MISSING else json.dumps(value, ensure_ascii=False)


# --- meta.json --------------------------------------------------------------------------


def read_meta(folder: Path, *, purpose: str) -> dict | None:
    """`folder/meta.json` as a dict, None when absent; ConfigError naming the file when damaged.

    `purpose` ends the message with the fix, e.g. "Rerun podium eval into a new --out folder"."""
    path = folder / META
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, OSError) as exc:
        raise ConfigError(f"{path} is damaged ({_why(exc)}). {purpose}") from None
    except RecursionError:
        raise ConfigError(f"{path} is damaged (JSON nested too deeply to read). {purpose}") \
            from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{path} is damaged (it holds no JSON object). {purpose}")
    try:
        _Meta.model_validate(meta)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"{path} is damaged ({where}: {first['msg']}). {purpose}") from None
    return meta


class _Fingerprint(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    hash: str
    parts: dict[str, Any] = {}


class _Meta(BaseModel):
    """The keys of meta.json podium reads back, with their types."""

    model_config = ConfigDict(extra="allow", strict=True)
    task: str
    system: str
    split: str | None = None
    seed: int | None = None
    preset: str | None = None
    format: int | None = None
    fingerprint: _Fingerprint | None = None
    local_files: dict[str, str] = {}
    isolation_earlier: list[Any] = []


def _why(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text at byte {exc.start}"
    return str(exc)


def check_meta(out: Path, meta: dict, *, records: list[dict], retry_errors: bool,
               record_format: int, warn: Any = None) -> None:
    """Refuse to resume `out` with other settings; then write `meta` (atomically).

    `meta` holds task, system, split, seed, preset and `fingerprint` (from `fingerprint()`).
    `records`: what `out/results.jsonl` holds (a folder without any is simply reused). Other
    settings are accepted only when no record would be kept: every one is an error and
    `retry_errors` reruns them all (the documented fix of an outage: mend the pool file, rerun
    with --retry-errors). `warn(text)` is told about an older meta.json adopted as it is, and
    about settings replaced that way."""
    resume_fix = (f"Restore it, use another --out folder, or move {out} aside to start over "
                  "(its records cannot be resumed without knowing the settings that wrote "
                  "them).")
    if records:  # a folder without records is simply reused, whatever its meta.json says
        old = read_meta(out, purpose=resume_fix)
        if old is None:
            raise ConfigError(f"{out} holds results.jsonl but no {META}, so podium cannot tell "
                              f"which settings wrote them. {resume_fix}")
        keeps = any(not (retry_errors and r.get("status") == "error") for r in records)
        _check_resume(out, old, meta, record_format, warn, keeps)
        earlier = list(old.get("isolation_earlier") or []) if keeps else []
        changed = keeps and "isolation" in old and old["isolation"] != meta.get("isolation")
        if changed:
            earlier.append(old["isolation"])
        if earlier:  # the records kept were graded under these levels too
            meta = {**meta, "isolation_earlier": earlier}
        if changed and warn is not None:
            warn(f"The records in {out} so far were graded under sandbox isolation "
                 f"{old['isolation']!r}; this run grades under {meta.get('isolation')!r}. "
                 f"{META} keeps both (isolation_earlier).")
    write_whole(out / META, strict_json({**meta, "format": record_format}, indent=2,
                                        ensure_ascii=False))


def write_whole(path: Path, text: str) -> None:
    """`podium.files.write_whole`: a kill or a full disk never leaves a torn file
    (WriteFailed when it cannot be written)."""
    try:
        files.write_whole(path, text)
    except OSError as exc:
        raise WriteFailed(path, exc) from None


def _check_resume(out: Path, old: dict, meta: dict, record_format: int, warn: Any,
                  keeps: bool) -> None:
    if old.get("format") != record_format:
        raise ConfigError(f"{out} holds results written by an older podium, which cannot be "
                          "resumed. Use another --out folder.")
    for key in ("task", "system", "split", "seed", "preset"):
        if old.get(key) != meta.get(key):
            raise ConfigError(
                f"{out} already holds results for {key} = {old.get(key)!r}, not "
                f"{meta.get(key)!r}. Use another --out folder, or the same settings to resume.")
    _check_files(out, old, meta, warn, keeps)
    before = old.get("fingerprint")
    if not isinstance(before, dict) or "hash" not in before:
        if warn is not None:
            warn(f"{out / META} predates settings fingerprints, so podium cannot check that "
                 "its results came from the settings of this run; resuming, and recording "
                 "this run's settings from now on.")
        return
    if before["hash"] != meta["fingerprint"]["hash"]:
        diff = differences(before.get("parts") or {}, meta["fingerprint"]["parts"])
        shown = "; ".join(diff[:8]) + (f"; and {len(diff) - 8} more" if len(diff) > 8 else "")
        if not keeps:  # every record is an error that --retry-errors reruns: nothing mixes
            if warn is not None:
                warn(f"Settings changed since {out} was started ({shown}); every record there "
                     "is an error that --retry-errors reruns, so the new settings replace them.")
            return
        raise ConfigError(
            f"{out} holds results from other settings, and resuming would mix them: "
            f"{shown or 'the settings fingerprint differs'}. Rerun with the settings it was "
            f"started with (they are in {out / META}), or give this run another --out.")


def _check_files(out: Path, old: dict, meta: dict, warn: Any, keeps: bool) -> None:
    """Refuse a resume when a file behind a path in the settings changed since `out` began."""
    now = meta.get("local_files") or {}
    if "local_files" not in old:
        if now and warn is not None:
            warn(f"{out / META} predates file checks, so podium cannot tell whether "
                 f"{', '.join(now)} changed since its results were written; resuming.")
        return
    before = old["local_files"]
    # the same path with other contents; a path that changed is the fingerprint's to name
    changed = [p for p in now if p in before and before[p] != now[p]]
    if not changed or not keeps:
        return
    raise ConfigError(
        f"{out} holds results made with other files at the same path: {', '.join(changed)} "
        "changed since it was started (a Conductor retrained into the same folder, a question "
        "file edited), and resuming would mix results from both. Give this run another --out, "
        "or move the old files back.")
