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
The files are written by a writer process of their own (`writer_main`, started by `start` or at
the first `put`), not by a thread of the server's: every system call of a file write releases
the GIL, and a thread must then take it back from a busy event loop; those hand-overs cost the
server a large share of a request's CPU (benchmarks/README.md, serve.py, has the figures). `put` pickles the trace (the writer process makes the JSON);
on the server's event loop the traces handed over within `BATCH_S` are then written into the
pipe to the writer process together, by a timer of the loop (one non-blocking system call and
one wake-up of the writer for them all, no thread woken), elsewhere at once; only when the pipe
is full does a sender thread take over (`_Writer`). The writer process writes the files,
deletes the oldest, and acknowledges the traces on its stdout, a batch at most every
`ACK_EVERY_S` (a thread here reads them and completes `put`'s futures). A writer process that
dies is replaced and sent every trace still unacknowledged; `close` lets it finish, and writes
in this process any trace it did not acknowledge (the server calls it at shutdown). Only a
server process killed outright (SIGKILL, a crash) loses traces: those of its last `BATCH_S`,
not yet sent.

`shared=True` is for a folder that several server processes write (`podium serve
--processes N`): each process re-reads the folder's order every `RESCAN` writes it makes and
before it lists traces, so retention and the list page cover every process's traces (the
folder may hold up to `RESCAN` x (N - 1) traces over `keep` between re-reads). A trace that
another process has not written yet is not found; the server therefore waits for a trace to
be written (`put`'s future) before it returns that trace's id.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import json
import logging
import os
import pickle
import queue
import re
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path

from podium.files import private_dir

log = logging.getLogger("podium.serve")

ID = re.compile(r"^tr-[0-9a-f]{32}$")
RESCAN = 16
ACK_EVERY_S = 0.01
BATCH_S = 0.01  # on an event loop, traces go to the writer process this often at most
UNPICKLABLE = (pickle.PicklingError, TypeError, AttributeError, ValueError)  # from `_frame`


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
        self._writer = _Writer(self)

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
        event loop the trace goes with the others handed over in the next `BATCH_S`; `wait`
        (the caller will wait for the future) sends it now."""
        if self.path(trace_id) is None:
            raise ValueError(f"not a trace id: {trace_id!r}")
        written: Future = Future()
        with self._lock:
            self._pending[trace_id] = (data, written)
        try:
            frame = _frame(trace_id, data)
        except UNPICKLABLE as exc:
            self.acknowledge(trace_id, str(exc))
        else:
            self._writer.offer(frame, wait=wait)
        return written

    def start(self) -> None:
        """Start the writer process now (the server does, at startup), so that the first trace
        is not kept waiting for a Python process to start (~0.2 s: felt by a request that
        waits for its trace, `--processes` with `return_trace_id`). Without it, the first
        `put` starts the writer."""
        self._writer.start()

    def close(self) -> None:
        """Write every trace handed over, then stop the writer process."""
        self._writer.stop()

    def unacknowledged(self) -> list[tuple[str, dict]]:
        """The traces handed over (`put`) that the writer has not yet said are on disk, in
        the order they were put: what a new writer process, or `close`, must still write."""
        with self._lock:
            return [(tid, data) for tid, (data, _) in self._pending.items()]

    def acknowledge(self, trace_id: str, error: str | None) -> None:
        """The writer's word on one trace: on disk (error None), or not, and why."""
        with self._lock:
            data, written = self._pending.pop(trace_id, (None, None))
            if error is None and not self._writer.prunes_here:
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


# The writer process's program: this podium (wherever it is imported from), `writer_main`.
WRITER = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); "
          "from podium.serve.traces import writer_main; writer_main(sys.argv[1:])")


class _Writer:
    """The writer process (`writer_main` with FOLDER KEEP shared|alone), the pipe to it and
    the thread that reads its acknowledgements.

    `offer` writes frames straight into the pipe (non-blocking, from the caller's thread:
    one system call, no thread woken), on an event loop those of `BATCH_S` together. When
    the pipe is full, or there is no live writer process yet, the frame goes to a backlog
    that the sender thread writes, blocking; until the backlog is empty every frame joins
    it, so frames never interleave. For each trace a line `ID ok` or `ID <why not>` comes
    back, in batches. A writer process that dies is started again and sent every trace still
    pending (one already on disk is acknowledged, not written twice); at `stop` a trace it
    never acknowledged is written in this process."""

    def __init__(self, store: TraceStore) -> None:
        self.store = store
        self.prunes_here = False  # True once traces had to be written in this process
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._acks: threading.Thread | None = None
        self._backlog: list[bytes] = []
        self._batch: list[bytes] = []
        self._flush_on: asyncio.AbstractEventLoop | None = None  # its timer sends the batch
        self._draining = False  # the sender thread owns the pipe until the backlog is empty
        self._wake: queue.SimpleQueue[bool] = queue.SimpleQueue()  # False: stop
        self._sender: threading.Thread | None = None
        self._stopping = False

    def start(self) -> None:
        with self._lock:
            if self._proc is None and not self._stopping:
                self._start()

    def offer(self, frame: bytes, *, wait: bool = False) -> None:
        """Send `frame` to the writer process. Offered on a running event loop, it goes with
        every frame offered in the next `BATCH_S`: one write here, one wake-up of the writer
        for them all. Offered elsewhere, or with `wait` (someone waits for the file), the
        batch goes now."""
        with self._lock:
            self._batch.append(frame)
            if not wait:
                if self._flush_on is not None and not self._flush_on.is_closed():
                    return  # the timer set for the batch's first frame sends this one too
                try:
                    self._flush_on = asyncio.get_running_loop()
                except RuntimeError:
                    pass
                else:
                    self._flush_on.call_later(BATCH_S, self.flush)
                    return
            self._flush()

    def flush(self) -> None:
        """Send the frames offered so far."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        """(under the lock) Send the batch: straight into the pipe when it has room (one
        non-blocking system call), else through the sender thread's backlog."""
        self._flush_on = None
        if not self._batch:
            return
        frame = b"".join(self._batch)
        self._batch.clear()
        if not self._draining and self._proc is not None and \
                self._proc.returncode is None:  # (the ack thread reaps a writer that died)
            try:
                done = os.write(self._proc.stdin.fileno(), frame)
            except BlockingIOError:
                done = 0
            except OSError:
                done = None  # the writer died: the sender restarts it
            if done == len(frame):
                return
            if done:
                frame = frame[done:]
        self._backlog.append(frame)
        self._drain()

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _drain(self) -> None:
        """(under the lock) Let the sender thread write the backlog."""
        self._draining = True
        if self._sender is None:
            self._sender = threading.Thread(target=self._send, name="podium-traces",
                                            daemon=True)
            self._sender.start()
        self._wake.put(True)

    def _send(self) -> None:
        """The sender thread: writes the backlog, blocking, until it is empty; starts a
        writer process when there is none, or a new one (sent every pending trace) when it
        died."""
        running = True
        while running:
            running = self._wake.get()
            while True:
                with self._lock:
                    if not self._alive():
                        if self._proc is not None:
                            log.warning("the trace writer process stopped (code %s); "
                                        "starting another", self._proc.returncode)
                        self._start()
                        self._backlog = [self._pending_frames()]
                    chunks, self._backlog = self._backlog, []
                    if not chunks:
                        self._draining = False
                        break
                    fd = self._proc.stdin.fileno()
                try:
                    _write_all(fd, b"".join(chunks))
                except OSError:
                    continue  # it died: the next round starts another
            if not running:
                return

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(self.store.folder), str(self.store.keep),
             "shared" if self.store.shared else "alone"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
            start_new_session=True)  # a terminal's Ctrl-C goes to the server, not to it
        fd = self._proc.stdin.fileno()
        os.set_blocking(fd, False)
        with contextlib.suppress(ImportError, AttributeError, OSError):
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)  # Linux: room for ~1 MB of traces
        self._acks = threading.Thread(target=self._read_acks, args=(self._proc,),
                                      name="podium-trace-acks", daemon=True)
        self._acks.start()

    def _pending_frames(self) -> bytes:
        pending = self.store.unacknowledged()
        frames = []
        for tid, data in pending:
            with contextlib.suppress(*UNPICKLABLE):
                frames.append(_frame(tid, data))
        return b"".join(frames)

    def _read_acks(self, proc: subprocess.Popen) -> None:
        # Buffered: the pipe is unbuffered (bufsize=0, for stdin), and a raw file reads a line
        # one byte, one system call and one GIL hand-off at a time (14 µs a line, against 0.7).
        for line in io.BufferedReader(proc.stdout, 1 << 16):
            trace_id, _, status = line.decode("utf-8", "replace").rstrip("\n").partition(" ")
            self.store.acknowledge(trace_id, None if status == "ok" else status)
        proc.wait()
        with self._lock:
            if not self._stopping and proc is self._proc:  # died: a new one, every trace
                self._drain()                              # pending sent to it

    def stop(self) -> None:
        """Let the sender thread write the backlog, close the writer's input, wait for it to
        write what it has; write in this process whatever it did not acknowledge."""
        with self._lock:
            self._flush()
            sender = self._sender
            if sender is not None:
                self._wake.put(False)
        if sender is not None:
            sender.join()
        with self._lock:
            self._stopping = True
            proc, acks = self._proc, self._acks
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            acks.join(10)
        left = self.store.unacknowledged()
        if left:
            self.prunes_here = True
        for tid, data in left:
            try:
                self.store.write(tid, data)
                self.store.acknowledge(tid, None)
            except FileExistsError:
                self.store.acknowledge(tid, None)
            except (OSError, TypeError, ValueError) as exc:
                self.store.acknowledge(tid, getattr(exc, "strerror", None) or str(exc))


def _frame(trace_id: str, data: dict) -> bytes:
    """One trace for the writer process: its id and the trace pickled (a few µs where
    `json.dumps` takes tens: the writer process writes the JSON, off the event loop)."""
    tid, body = trace_id.encode(), pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
    return struct.pack("!II", len(tid), len(body)) + tid + body


def _write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (a file, or the non-blocking pipe: waiting while it is full)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [])


def writer_main(argv: list[str]) -> None:
    """The writer process: frames from stdin (`_frame`) written as JSON files
    (`TraceStore.write`, which also retires the oldest), their acknowledgements on stdout at
    most every `ACK_EVERY_S` (so that the server's reader wakes for batches, not for each
    trace). It runs in a
    session of its own and ignores SIGINT, so a terminal's Ctrl-C, which goes to the
    server's whole process group, stops the server, not it: it stops when its input ends,
    having written everything it was sent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _background()
    folder, keep, mode = argv
    store = TraceStore(folder, int(keep), shared=mode == "shared")
    source, out = sys.stdin.buffer.fileno(), sys.stdout.buffer
    buf, acks, sent = bytearray(), [], time.monotonic()

    def flush() -> None:
        nonlocal sent, out
        if acks and out is not None:
            try:
                out.write("".join(acks).encode())
                out.flush()
            except OSError:  # the server is gone: keep writing what it sent, unacknowledged
                out = None
        acks.clear()
        sent = time.monotonic()

    while True:
        wait = None if not acks else max(0.0, ACK_EVERY_S - (time.monotonic() - sent))
        if not select.select([source], [], [], wait)[0]:
            flush()
            continue
        chunk = os.read(source, 1 << 20)
        if not chunk:
            break
        buf += chunk
        at = 0
        while len(buf) - at >= 8:
            n_id, n_body = struct.unpack_from("!II", buf, at)
            if len(buf) - at < 8 + n_id + n_body:
                break
            trace_id = buf[at + 8:at + 8 + n_id].decode()
            body = bytes(buf[at + 8 + n_id:at + 8 + n_id + n_body])
            at += 8 + n_id + n_body
            try:  # the server's own pickle, from its pipe
                store.write(trace_id, pickle.loads(body))
                acks.append(f"{trace_id} ok\n")
            except FileExistsError:  # sent again after a restart: it is there
                acks.append(f"{trace_id} ok\n")
            except (OSError, ValueError, TypeError, pickle.UnpicklingError) as exc:
                why = str(getattr(exc, "strerror", None) or exc).replace("\n", " ")
                acks.append(f"{trace_id} {why}\n")
        del buf[:at]
        if time.monotonic() - sent >= ACK_EVERY_S:
            flush()
    flush()


def _background() -> None:
    """Run this process as batch work (Linux's SCHED_BATCH): woken for each trace, it does
    not preempt the server it writes for in the middle of a request; it still gets its fair
    share of the CPU, so it keeps up. Elsewhere nothing changes."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


def _create(path: Path, text: bytes) -> None:
    """A new owner-only file holding `text`. Ids are unique, so the file never exists: created
    with mode 0600 (the umask can only narrow it), in three system calls."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, text)
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
            _write_all(fd, text)
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
