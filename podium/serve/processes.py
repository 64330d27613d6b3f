"""Several server processes on one port (`podium serve --processes N`).

One server process runs its event loop, and so every request's pipeline, on one core. With N
processes each listens on a socket of its own, bound to the same address with SO_REUSEPORT,
so that on Linux the kernel spreads new connections evenly over them. (One listening socket
shared by every process, uvicorn's `--workers`, hands each connection to whichever process
wakes first, and that process accepts every connection waiting: a burst of keep-alive
connections, as an OpenAI client's pool opens them, can all land on one process.)

`supervise` runs in the parent: it starts the processes (`spawn`), each of which builds its
app from a factory (an import string) and serves its socket with podium's uvicorn server
(`podium.serve.shutdown.Server`); it replaces a process that dies (at most `RESTARTS_PER_MINUTE` times a
minute for one socket), stops everything when a process exits with `STARTUP_FAILURE` (it could
not build its app: a restart would fail the same way), and on SIGTERM or SIGINT sends each
process SIGTERM, whose graceful shutdown lets the requests in flight finish, and waits.

Every process seals tool-call ids with one session key (`podium.serve.session`), so any of
them can open an id another wrote: `supervise` hands each process the secret it is given
(`--session-key-env`'s) or one it draws, in `SESSION_KEY_VAR`, set in that process only
(through the pipe `spawn` starts it with, never on a command line), and the app factory
takes it from there.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time

from podium.errors import ConfigError
from podium.serve.session import SESSION_KEY_VAR, new_secret

log = logging.getLogger("podium.serve")

STARTUP_FAILURE = 3  # a process's exit code when it cannot build its app
RESTARTS_PER_MINUTE = 5


def listeners(host: str, port: int, n: int) -> list[socket.socket]:
    """`n` listening sockets on `host:port`, each with SO_REUSEPORT. OSError when the address
    cannot be bound (e.g. the port is in use)."""
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError("--processes needs SO_REUSEPORT, which this system lacks. Run one "
                          "process (leave --processes out).")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:  # without SO_REUSEPORT: a port
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # another server holds,
        probe.bind((host, port))  # even with SO_REUSEPORT too, is refused, not shared
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            sock = socket.socket(family, socket.SOCK_STREAM)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(2048)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


def _serve(sock: socket.socket, app: str, options: dict, session_key: str) -> None:
    """One server process: build the app from its factory (with the shared session key in
    `SESSION_KEY_VAR`), serve `sock` until SIGTERM (with the app's own graceful shutdown,
    `podium.serve.shutdown`)."""
    import uvicorn
    from uvicorn.importer import import_from_string

    from podium.serve.shutdown import Server

    os.environ[SESSION_KEY_VAR] = session_key
    built = import_from_string(app)()
    Server(uvicorn.Config(built, **options), built.state.server.drain).run(sockets=[sock])


def _forget(pid: int) -> None:
    """Drop a dead process's live gauges from the shared metrics (multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


def supervise(app: str, socks: list[socket.socket], options: dict,
              session_key: str | None = None) -> int:
    """Serve the app factory `app` (an import string) in one process per socket until SIGTERM
    or SIGINT; `options` are uvicorn.Config's; every process gets `session_key` (None: one
    drawn here). 0, or 2 when a process could not start."""
    ctx = multiprocessing.get_context("spawn")
    session_key = session_key or new_secret()
    stop = threading.Event()
    failed = False

    def start(sock: socket.socket):
        proc = ctx.Process(target=_serve, args=(sock, app, options, session_key),
                           name="podium-serve")
        proc.start()
        return proc

    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    procs = [start(sock) for sock in socks]
    restarts: list[collections.deque[float]] = [collections.deque() for _ in socks]
    try:
        while not stop.wait(0.5):
            for i, proc in enumerate(procs):
                if proc.exitcode is None:
                    continue
                now = time.monotonic()
                restarts[i].append(now)
                while now - restarts[i][0] > 60:
                    restarts[i].popleft()
                if proc.exitcode == STARTUP_FAILURE or len(restarts[i]) > RESTARTS_PER_MINUTE:
                    log.error("server process %d exited (code %s)%s; stopping the others",
                              proc.pid, proc.exitcode, "" if proc.exitcode == STARTUP_FAILURE
                              else f", its {len(restarts[i])}th exit within a minute")
                    failed = True
                    stop.set()
                    break
                log.warning("server process %d exited (code %s); starting another", proc.pid,
                            proc.exitcode)
                _forget(proc.pid)
                procs[i] = start(socks[i])
    finally:
        for proc in procs:
            if proc.exitcode is None:
                os.kill(proc.pid, signal.SIGTERM)  # uvicorn's graceful shutdown
        for proc in procs:
            proc.join()
        for sock in socks:
            sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    log.info("stopped %d server processes", len(procs))
    return 2 if failed else 0
