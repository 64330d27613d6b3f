"""The trace folder on disk: trace ids, owner-only files, the newest `keep` kept.

A trace holds the user's conversation, so its file is owner-only (0600, created so in one
`open`, or set so when a file is reused) in a 0700 folder podium creates.

Ids are `tr-` and 32 hex digits (`new_id`: a UUIDv7, whose first digits are the time it was
made); anything else is refused before a path is built, so an id can never name a file
outside the folder. The folder keeps the newest `keep` traces: once it is full, each new trace
is written into the oldest one's file, renamed (`_recycle`: far cheaper than a new file and a
deletion), and the order is rebuilt at start from the ids (`_scan`).

`shared=True` is for a folder that several server processes write (`podium serve
--processes N`): each re-reads the folder's order every `RESCAN` writes it makes and before it
lists traces (`ids`), so retention and the list page cover every process's traces (the folder
may hold up to `RESCAN` x (N - 1) traces over `keep` between re-reads).

Both the server's `TraceStore` and the writer process (`podium.serve.traces.writer`) write
through `TraceFiles`; it imports neither.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import select
import threading
import time
from collections import deque
from pathlib import Path

from podium.files import private_dir

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


class TraceFiles:
    """The folder's trace files, oldest first: `write` one (retiring the oldest past `keep`),
    `read` one, `ids` in order; `added` records one another process wrote."""

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

    def added(self, trace_id: str) -> None:
        """`trace_id` was written by another process (the writer process, which also
        deleted the oldest past `keep`): the order takes it, and forgets the oldest."""
        with self._lock:
            self._order.append(trace_id)
            while len(self._order) > self.keep:
                self._order.popleft()

    def ids(self) -> list[str]:
        """The ids of the traces on disk, oldest first (a shared folder read again)."""
        with self._lock:
            if self.shared:
                self._order = self._scan()
            return list(self._order)

    def read(self, trace_id: str) -> dict | None:
        """The trace on disk (None: no such trace, or not readable)."""
        path = self.path(trace_id)
        if path is None or not path.is_file():
            return None
        try:
            return json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return None

    def _prune(self) -> None:
        while len(self._order) > self.keep:
            old = self._order.popleft()
            try:
                (self.folder / f"{old}.json").unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not delete old trace %s: %s", old, exc.strerror)


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (a file, or a non-blocking pipe: waiting while it is full)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [])


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
