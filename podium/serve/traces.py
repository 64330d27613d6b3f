"""Every request's trace, kept as an owner-only JSON file and served back by id.

A trace is `RunResult.to_json()` (the question, every Conductor turn and step with its prompt
and response, usage, failures) plus the request's id, time and podium options. It holds the
user's conversation, so it is written owner-only (0600 files, created so in one `open`, or
set so when a file is reused; 0700 folders podium creates).

Each trace written for a request made with an API key holds its owner (`podium.serve.auth.
owner_of`, a salted hash, never the key): `read_as` and `recent` give a key its own traces
only (never a trace without an owner, which a server without keys wrote), and leave the owner
field out of what they return.

Ids are `tr-` and 32 hex digits; anything else is refused before a path is built, so an id can
never name a file outside the folder. The folder keeps the newest `keep` traces: once it is
full, each new trace is written into the oldest one's file, renamed (`_recycle`: far cheaper
than a new file and a deletion), and the order is rebuilt at start from the ids, which begin
with the time they were made (`new_id`).

The server hands traces over with `put`, which returns at once, and `read` serves a trace that
is still waiting from memory, so an id returned with an answer can be fetched straight away.
The files are written by a writer process of its own (`podium.serve.trace_writer`, started by
`start` or at the first `put`); `close` lets it finish and writes here what it did not.

`shared=True` is for a folder that several server processes write (`podium serve
--processes N`): each process re-reads the folder's order every `RESCAN` writes it makes and
before it lists traces, so retention and the list page cover every process's traces (the
folder may hold up to `RESCAN` x (N - 1) traces over `keep` between re-reads). A trace that
another process has not written yet is not found; the server therefore waits for a trace to
be written (`put`'s future) before it returns that trace's id.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path

from podium.files import private_dir
from podium.serve.trace_writer import UNPICKLABLE, Writer, frame, write_all

log = logging.getLogger("podium.serve")

ID = re.compile(r"^tr-[0-9a-f]{32}$")
RESCAN = 16


_last_id = [0, 0]  # the millisecond and counter of this process's last id
_id_lock = threading.Lock()


def new_id() -> str:
    """A new trace id: `tr-` and a UUIDv7 (RFC 9562) in 32 hex digits. Its first 12 digits
    are the time in milliseconds, so the folder's order is in its file names (`_scan` lists
    the folder without a `stat` per file); a counter keeps one process's ids in order within
    a millisecond, and 62 random bits keep them unguessable."""
    ms = time.time_ns() // 1_000_000
    with _id_lock:
        last_ms, last_seq = _last_id
        seq = 0
        if ms <= last_ms:  # the same millisecond (or the clock went back): count on
            ms, seq = last_ms, last_seq + 1
            if seq > 0xFFF:
                ms, seq = ms + 1, 0
        _last_id[:] = [ms, seq]
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    return f"tr-{ms:012x}7{seq:03x}{2 << 62 | rand:016x}"


class TraceStore:
    """The trace folder: `put` hands a trace over (readable at once), `read`/`read_as`/`recent`
    serve traces back, `write` writes one in this thread; `writer` is the process that writes
    what is handed over, and `unacknowledged`/`acknowledge` are its seam with the store."""

    def __init__(self, folder: str | Path, keep: int = 1000, *, shared: bool = False) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.folder = private_dir(folder)
        self.keep = keep
        self.shared = shared
        self._lock = threading.Lock()
        self._order: deque[str] = self._scan()
        self._prune()
        for part in self.folder.glob("*.json.part"):  # left by a writer that was killed
            part.unlink(missing_ok=True)
        self._writes = 0
        self._pending: dict[str, tuple[dict, Future]] = {}
        self.writer = Writer(self)

    def _scan(self) -> deque[str]:
        """The ids of the traces in the folder, oldest first: ids from an older podium
        (UUIDv4s) by their files' mtimes, then UUIDv7 ids, whose names sort by time."""
        try:
            names = os.listdir(self.folder)
        except (FileNotFoundError, NotADirectoryError):  # a write says what is wrong
            names = []
        timed, older = [], []
        for name in names:
            trace_id = name[:-5]
            if len(name) != 40 or not name.endswith(".json") or not ID.match(trace_id):
                continue
            if trace_id[15] == "7":  # the version digit, after `tr-` and 12 time digits
                timed.append(trace_id)
                continue
            try:
                older.append(((self.folder / name).stat().st_mtime, trace_id))
            except FileNotFoundError:  # deleted by another process meanwhile
                continue
        return deque([trace_id for _, trace_id in sorted(older)] + sorted(timed))

    def path(self, trace_id: str) -> Path | None:
        """The file of `trace_id`, or None for an id that is not one of ours."""
        if not ID.match(trace_id):
            return None
        return self.folder / f"{trace_id}.json"

    def write(self, trace_id: str, data: dict) -> None:
        """Write one trace now, in this thread (FileExistsError when it is already there;
        TypeError or ValueError when it is not JSON), then delete the oldest past `keep`. In
        a full folder the oldest trace's file becomes the new one (`_recycle`)."""
        path = self.path(trace_id)
        if path is None:
            raise ValueError(f"not a trace id: {trace_id!r}")
        text = json.dumps(data, ensure_ascii=False).encode()
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "the trace is already written", str(path))
        with self._lock:
            expired = self._order.popleft() if len(self._order) >= self.keep else None
        if expired is None or not _recycle(self.folder / f"{expired}.json", path, text):
            try:
                _create(path, text)
            except FileNotFoundError:  # the folder was removed while the server ran
                private_dir(self.folder)
                _create(path, text)
        with self._lock:
            self._order.append(trace_id)
            self._writes += 1
            if self.shared and self._writes % RESCAN == 0:
                self._order = self._scan()
            self._prune()

    def put(self, trace_id: str, data: dict, *, wait: bool = False) -> Future:
        """Hand a trace to the writer process; it is readable at once from this process. The
        future is done (True, or False when it could not be written) once the file is. On an
        event loop the trace goes with the others handed over in the next `trace_writer.BATCH_S`; `wait`
        (the caller will wait for the future) sends it now."""
        if self.path(trace_id) is None:
            raise ValueError(f"not a trace id: {trace_id!r}")
        written: Future = Future()
        with self._lock:
            self._pending[trace_id] = (data, written)
        try:
            framed = frame(trace_id, data)
        except UNPICKLABLE as exc:
            self.acknowledge(trace_id, str(exc))
        else:
            self.writer.offer(framed, wait=wait)
        return written

    def start(self) -> None:
        """Start the writer process now (the server does, at startup), so that the first trace
        is not kept waiting for a Python process to start (~0.2 s: felt by a request that
        waits for its trace, `--processes` with `return_trace_id`). Without it, the first
        `put` starts the writer."""
        self.writer.start()

    def close(self) -> None:
        """Write every trace handed over, then stop the writer process."""
        self.writer.stop()

    def unacknowledged(self) -> list[tuple[str, dict]]:
        """The traces handed over (`put`) that the writer has not yet said are on disk, in
        the order they were put: what a new writer process, or `close`, must still write."""
        with self._lock:
            return [(tid, data) for tid, (data, _) in self._pending.items()]

    def acknowledge(self, trace_id: str, error: str | None) -> None:
        """The writer's word on one trace: on disk (error None), or not, and why."""
        with self._lock:
            data, written = self._pending.pop(trace_id, (None, None))
            if error is None and not self.writer.prunes_here:
                self._order.append(trace_id)  # the writer process deleted the oldest
                while len(self._order) > self.keep:
                    self._order.popleft()
        if error is not None:
            log.warning("trace %s could not be written: %s", trace_id, error)
        if written is not None:
            written.set_result(error is None)

    def read(self, trace_id: str) -> dict | None:
        with self._lock:
            waiting = self._pending.get(trace_id)
        if waiting is not None:
            return waiting[0]
        path = self.path(trace_id)
        if path is None or not path.is_file():
            return None
        try:
            return json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return None

    def read_as(self, trace_id: str, owner: str | None) -> dict | None:
        """The trace as `owner` may see it (None: not theirs, or no such trace), without its
        owner field. `owner` None (a server without keys) reads every trace; a key reads the
        traces it made only, so not one without an owner, which a server without keys (or a
        podium from before owners) wrote into the same folder: those hold someone's
        conversation too."""
        data = self.read(trace_id)
        if data is None or not _readable(data, owner):
            return None
        return {k: v for k, v in data.items() if k != "owner"}

    def recent(self, n: int = 100, owner: str | None = None) -> list[dict]:
        """The newest `n` traces `owner` may read, newest first: id, created, question,
        answer. Traces still on their way to the writer are listed too (the newest), as `read`
        finds them."""
        with self._lock:
            if self.shared:
                self._order = self._scan()
            listed = set(self._order)
            waiting = sorted(t for t in self._pending if t not in listed)  # by time: UUIDv7
            ids = [*self._order, *waiting][::-1]
        rows = []
        for trace_id in ids:
            data = self.read(trace_id)
            if data is not None and _readable(data, owner):
                rows.append({"id": trace_id, "created": data.get("created"),
                             "question": data.get("question"), "answer": data.get("answer")})
                if len(rows) == n:
                    break
        return rows

    def _prune(self) -> None:
        while len(self._order) > self.keep:
            old = self._order.popleft()
            try:
                (self.folder / f"{old}.json").unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not delete old trace %s: %s", old, exc.strerror)


def _create(path: Path, text: bytes) -> None:
    """A new owner-only file holding `text`. Ids are unique, so the file never exists: created
    with mode 0600 (the umask can only narrow it), in three system calls."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        write_all(fd, text)
    finally:
        os.close(fd)


def _recycle(old: Path, path: Path, text: bytes) -> bool:
    """Make the file of `old`, an expired trace, the file of `path` holding `text`: renamed
    aside (`old` is gone at once), overwritten, renamed into place (`path` appears whole).
    On ext4, making a new file and deleting an old one costs about 15 times the system time
    of reusing one (benchmarks/README.md). False, with `old` gone, when it cannot be reused
    (another process took it first): then the caller creates the file."""
    part = path.with_name(f"{path.name}.part")
    try:
        os.rename(old, part)
    except FileNotFoundError:
        return False
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(old)
        return False
    try:
        fd = os.open(part, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, 0o600)
            write_all(fd, text)
            os.ftruncate(fd, len(text))
        finally:
            os.close(fd)
        os.rename(part, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(part)
        return False
    return True


def _readable(data: dict, owner: str | None) -> bool:
    return owner is None or data.get("owner") == owner
