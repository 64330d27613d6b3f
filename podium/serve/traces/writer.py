"""The trace writer: a process of its own that writes the traces a `TraceStore` hands over.

Why a process: every system call of a file write releases the GIL, and a thread must then
take it back from a busy event loop; those hand-overs cost the server a large share of a
request's CPU (benchmarks/README.md, serve.py). So `TraceStore.put` pickles the trace (`frame`)
and offers it to the `Writer`, and the process (`writer_main`) makes the JSON and the file
(`TraceFiles.write`).

The writer knows the store only as a `Ledger`: the trace files (`files`: their folder, `keep`
and `shared`, and `write`, the same file write in this process for what a stopped writer
left), the traces handed over and not yet written (`unacknowledged()`, what a new writer
process, or `stop`, must still write), and `acknowledge(id, error)`, each trace's fate.

How a trace travels: on the server's event loop the traces offered within `BATCH_S` are written
into the pipe together, by a timer of the loop (one non-blocking system call and one wake-up of
the writer for them all, no thread woken), elsewhere at once; only when the pipe is full does a
sender thread take over. The process writes the files and acknowledges them on its stdout, a
batch at most every `ACK_EVERY_S` (a thread here reads them). A writer process that dies is
replaced and sent every trace still unacknowledged; `stop` lets it finish, and writes in this
process any trace it did not acknowledge. Only a server process killed outright (SIGKILL, a
crash) loses traces: those of its last `BATCH_S`, not yet sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Protocol

from podium.serve.traces.files import TraceFiles, write_all

log = logging.getLogger("podium.serve")

ACK_EVERY_S = 0.01
BATCH_S = 0.01  # on an event loop, traces go to the writer process this often at most
UNPICKLABLE = (pickle.PicklingError, TypeError, AttributeError, ValueError)  # from `frame`

# The writer process's program: this podium (wherever it is imported from), `writer_main`.
WRITER = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r}); "
          "from podium.serve.traces.writer import writer_main; writer_main(sys.argv[1:])")


class Ledger(Protocol):
    """What the writer asks of the store it writes for (`TraceStore`)."""

    files: TraceFiles

    def unacknowledged(self) -> list[tuple[str, dict]]: ...

    def acknowledge(self, trace_id: str, error: str | None) -> None: ...


class Writer:
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

    def __init__(self, store: Ledger) -> None:
        self.store = store
        self.prunes_here = False  # True once traces had to be written in this process
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
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
                done = os.write(_stdin(self._proc).fileno(), frame)
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
                    proc = self._proc
                    if proc is None or proc.poll() is not None:
                        if proc is not None:
                            log.warning("the trace writer process stopped (code %s); "
                                        "starting another", proc.returncode)
                        proc = self._start()
                        self._backlog = [self._pending_frames()]
                    chunks, self._backlog = self._backlog, []
                    if not chunks:
                        self._draining = False
                        break
                    fd = _stdin(proc).fileno()
                try:
                    write_all(fd, b"".join(chunks))
                except OSError:
                    continue  # it died: the next round starts another
            if not running:
                return

    def _start(self) -> subprocess.Popen[bytes]:
        files = self.store.files
        proc = self._proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(files.folder), str(files.keep),
             "shared" if files.shared else "alone"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
            start_new_session=True)  # a terminal's Ctrl-C goes to the server, not to it
        fd = _stdin(proc).fileno()
        os.set_blocking(fd, False)
        with contextlib.suppress(ImportError, AttributeError, OSError):
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)  # Linux: room for ~1 MB of traces
        self._acks = threading.Thread(target=self._read_acks, args=(proc,),
                                      name="podium-trace-acks", daemon=True)
        self._acks.start()
        return proc

    def _pending_frames(self) -> bytes:
        pending = self.store.unacknowledged()
        frames = []
        for tid, data in pending:
            with contextlib.suppress(*UNPICKLABLE):
                frames.append(frame(tid, data))
        return b"".join(frames)

    def _read_acks(self, proc: subprocess.Popen[bytes]) -> None:
        # Buffered: the pipe is unbuffered (bufsize=0, for stdin), and a raw file reads a line
        # one byte, one system call and one GIL hand-off at a time (14 µs a line, against 0.7).
        assert isinstance(proc.stdout, io.RawIOBase)  # stdout=PIPE, bufsize=0: a raw pipe
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
        if proc is not None and acks is not None:  # (`_start` sets both)
            with contextlib.suppress(OSError):
                _stdin(proc).close()
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
                self.store.files.write(tid, data)
                self.store.acknowledge(tid, None)
            except FileExistsError:
                self.store.acknowledge(tid, None)
            except (OSError, TypeError, ValueError) as exc:
                self.store.acknowledge(tid, getattr(exc, "strerror", None) or str(exc))


def _stdin(proc: subprocess.Popen[bytes]) -> IO[bytes]:
    """The writer process's input (`_start` opens it with stdin=PIPE)."""
    assert proc.stdin is not None
    return proc.stdin


def frame(trace_id: str, data: dict) -> bytes:
    """One trace for the writer process: its id and the trace pickled (a few µs where
    `json.dumps` takes tens: the writer process writes the JSON, off the event loop)."""
    tid, body = trace_id.encode(), pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)
    return struct.pack("!II", len(tid), len(body)) + tid + body


def writer_main(argv: list[str]) -> None:
    """The writer process: frames from stdin (`frame`) written as JSON files
    (`TraceFiles.write`, which also retires the oldest), their acknowledgements on stdout at
    most every `ACK_EVERY_S` (so that the server's reader wakes for batches, not for each
    trace). It runs in a
    session of its own and ignores SIGINT, so a terminal's Ctrl-C, which goes to the
    server's whole process group, stops the server, not it: it stops when its input ends,
    having written everything it was sent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _background()
    folder, keep, mode = argv
    files = TraceFiles(folder, int(keep), shared=mode == "shared")
    source, out = sys.stdin.buffer.fileno(), sys.stdout.buffer
    acks: list[str] = []  # "ID ok" / "ID <why not>" lines not sent yet
    buf, sent = bytearray(), time.monotonic()

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
                files.write(trace_id, pickle.loads(body))
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
