"""Every request's trace, kept as an owner-only JSON file and served back by id.

A trace is `RunResult.to_json()` (the question, every Conductor turn and step with its prompt
and response, usage, failures) plus the request's id, time and podium options. It holds the
user's conversation, so it is written owner-only (0600 files, created so in one `open`; 0700
folders podium creates).

Each trace written for a request made with an API key holds its owner (`podium.serve.auth.
owner_of`, a salted hash, never the key): `read_as` and `recent` give a key its own traces
only, and leave the owner field out of what they return.

Ids are `tr-` and 32 hex digits; anything else is refused before a path is built, so an id can
never name a file outside the folder. The folder keeps the newest `keep` traces: older ones
are deleted as new ones are written (the order is rebuilt from the files' mtimes at start).

The server hands traces over with `put`, which returns at once: one writer thread serialises
and writes them in order, off the answer's path, and `read` serves a trace that is still
waiting from memory, so an id returned with an answer can be fetched straight away. `close`
writes whatever is still waiting (the server calls it at shutdown).

`shared=True` is for a folder that several server processes write (`podium serve
--processes N`): each process re-reads the folder's order every `RESCAN` writes it makes and
before it lists traces, so retention and the list page cover every process's traces (the
folder may hold up to `RESCAN` x (N - 1) traces over `keep` between re-reads). A trace that
another process has not written yet is not found; the server therefore waits for a trace to
be written (`put`'s future) before it returns that trace's id.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import threading
import uuid
from collections import deque
from concurrent.futures import Future
from pathlib import Path

from podium.files import private_dir

log = logging.getLogger("podium.serve")

ID = re.compile(r"^tr-[0-9a-f]{32}$")
RESCAN = 16


def new_id() -> str:
    return f"tr-{uuid.uuid4().hex}"


class TraceStore:
    def __init__(self, folder: str | Path, keep: int = 1000, *, shared: bool = False) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.folder = private_dir(folder)
        self.keep = keep
        self.shared = shared
        self._lock = threading.Lock()
        self._order: deque[str] = self._scan()
        self._prune()
        self._writes = 0
        self._pending: dict[str, dict] = {}
        self._queue: queue.SimpleQueue[tuple[str, Future] | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None

    def _scan(self) -> deque[str]:
        """The ids of the traces in the folder, oldest first (by mtime)."""
        found = []
        for p in self.folder.glob("tr-*.json"):
            try:
                if ID.match(p.stem):
                    found.append((p.stat().st_mtime, p.stem))
            except FileNotFoundError:  # deleted by another process meanwhile
                continue
        return deque(stem for _, stem in sorted(found))

    def path(self, trace_id: str) -> Path | None:
        """The file of `trace_id`, or None for an id that is not one of ours."""
        if not ID.match(trace_id):
            return None
        return self.folder / f"{trace_id}.json"

    def write(self, trace_id: str, data: dict) -> None:
        path = self.path(trace_id)
        if path is None:
            raise ValueError(f"not a trace id: {trace_id!r}")
        text = json.dumps(data, ensure_ascii=False).encode()
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

    def put(self, trace_id: str, data: dict) -> Future:
        """Queue a trace for the writer thread; it is readable at once from this process. The
        future is done (True, or False when it could not be written) once the file is."""
        if self.path(trace_id) is None:
            raise ValueError(f"not a trace id: {trace_id!r}")
        written: Future = Future()
        with self._lock:
            self._pending[trace_id] = data
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_queued,
                                                name="podium-traces", daemon=True)
                self._writer.start()
        self._queue.put((trace_id, written))
        return written

    def close(self) -> None:
        """Write every queued trace, then stop the writer thread."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            self._queue.put(None)
            writer.join()

    def _write_queued(self) -> None:
        while (item := self._queue.get()) is not None:
            trace_id, written = item
            data = self._pending.get(trace_id)
            ok = False
            try:
                self.write(trace_id, data)
                ok = True
            except (OSError, TypeError, ValueError) as exc:
                log.warning("trace %s could not be written: %s", trace_id,
                            getattr(exc, "strerror", None) or exc)
            finally:
                with self._lock:
                    self._pending.pop(trace_id, None)
                written.set_result(ok)

    def read(self, trace_id: str) -> dict | None:
        with self._lock:
            waiting = self._pending.get(trace_id)
        if waiting is not None:
            return waiting
        path = self.path(trace_id)
        if path is None or not path.is_file():
            return None
        try:
            return json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            return None

    def read_as(self, trace_id: str, owner: str | None) -> dict | None:
        """The trace as `owner` may see it (None: not theirs, or no such trace), without its
        owner field. A trace without an owner (a server without keys wrote it) is anyone's;
        `owner` None (a server without keys) reads every trace."""
        data = self.read(trace_id)
        if data is None or not _readable(data, owner):
            return None
        return {k: v for k, v in data.items() if k != "owner"}

    def recent(self, n: int = 100, owner: str | None = None) -> list[dict]:
        """The newest `n` traces `owner` may read, newest first: id, created, question,
        answer."""
        with self._lock:
            if self.shared:
                self._order = self._scan()
            ids = list(self._order)[::-1]
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
        view = memoryview(text)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _readable(data: dict, owner: str | None) -> bool:
    return owner is None or data.get("owner") in (None, owner)
