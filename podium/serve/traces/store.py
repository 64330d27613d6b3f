"""Every request's trace: handed to the writer process, served back by id to its owner.

A trace is `RunResult.to_json()` (the question, every Conductor turn and step with its prompt
and response, usage, failures) plus the request's id, time and podium options, kept as an
owner-only JSON file (`podium.serve.traces.files`).

Each trace written for a request made with an API key holds its owner (`podium.serve.auth.
owner_of`, a salted hash, never the key): `read_as` and `recent` give a key its own traces
only (never a trace without an owner, which a server without keys wrote), and leave the owner
field out of what they return.

The server hands traces over with `put`, which returns at once, and `read` serves a trace that
is still waiting from memory, so an id returned with an answer can be fetched straight away.
The files are written by a writer process of its own (`podium.serve.traces.writer`, started by
`start` or at the first `put`); `close` lets it finish and writes here what it did not.

With a folder that several server processes write (`shared`), a trace that another process
has not written yet is not found there; the server therefore waits for a trace to be written
(`put`'s future) before it returns that trace's id.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from pathlib import Path

from podium.serve.traces.files import TraceFiles
from podium.serve.traces.writer import UNPICKLABLE, Writer, frame

log = logging.getLogger("podium.serve")


class TraceStore:
    """The traces of one server: `put` hands a trace over (readable at once), `read`/
    `read_as`/`recent` serve traces back; `files` is the folder, `writer` the process that
    writes what is handed over, and `unacknowledged`/`acknowledge` are its seam with the
    store."""

    def __init__(self, folder: str | Path, keep: int = 1000, *, shared: bool = False) -> None:
        self.files = TraceFiles(folder, keep, shared=shared)
        self.shared = shared
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[dict, Future]] = {}
        self.writer = Writer(self)

    def put(self, trace_id: str, data: dict, *, wait: bool = False) -> Future:
        """Hand a trace to the writer process; it is readable at once from this process. The
        future is done (True, or False when it could not be written) once the file is. On an
        event loop the trace goes with the others handed over in the next
        `podium.serve.traces.writer.BATCH_S`; `wait` (the caller will wait for the future)
        sends it now."""
        if self.files.path(trace_id) is None:
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
        if error is None and not self.writer.prunes_here:
            # the writer process deleted the oldest; in the order before it leaves the
            # pending traces, so that `recent` finds it in one or the other
            self.files.added(trace_id)
        with self._lock:
            _, written = self._pending.pop(trace_id, (None, None))
        if error is not None:
            log.warning("trace %s could not be written: %s", trace_id, error)
        if written is not None:
            written.set_result(error is None)

    def read(self, trace_id: str) -> dict | None:
        with self._lock:
            waiting = self._pending.get(trace_id)
        if waiting is not None:
            return waiting[0]
        return self.files.read(trace_id)

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
            waiting = list(self._pending)
        on_disk = self.files.ids()
        listed = set(on_disk)
        ids = [*on_disk, *sorted(t for t in waiting if t not in listed)][::-1]  # by time: UUIDv7
        rows = []
        for trace_id in ids:
            data = self.read(trace_id)
            if data is not None and _readable(data, owner):
                rows.append({"id": trace_id, "created": data.get("created"),
                             "question": data.get("question"), "answer": data.get("answer")})
                if len(rows) == n:
                    break
        return rows


def _readable(data: dict, owner: str | None) -> bool:
    return owner is None or data.get("owner") == owner
