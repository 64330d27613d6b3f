"""Run untrusted Python (model-written code and its tests) in a throw-away sandbox.

    result = run_python("print(input()[::-1])", stdin="abc\\n")     # or: await arun_python(...)
    result.status, result.stdout, result.isolation   # "ok", "cba\\n", ("netns", "pidns", ...)

No call ever raises: a sandbox that cannot be set up is `SandboxResult(status="sandbox_error")`.
Each run gets network, pid, mount and IPC namespaces, a private size-capped /tmp (also bound
over /dev/shm), a fresh unprivileged uid (as root), `no_new_privs` and a seccomp filter against
new namespaces, rlimits, and an environment built from nothing; `SandboxResult.isolation`
names what was applied, and `require_isolation(task)` refuses a code task short of all of it
unless `--allow-unisolated`. docs/sandbox.md explains each layer, the launcher and how a run is
classified.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from podium.scoring import isolation
from podium.scoring.isolation import (  # what this host gives; the public ones re-exported
    SANDBOX_PATH,
    _base_env,
    _Host,
    _host,
    isolation_available,
    isolation_level,
    isolation_problems,
    require_isolation,
    uses_sandbox,
)

__all__ = ["Limits", "SandboxResult", "arun_python", "isolation_available", "isolation_level",
           "isolation_problems", "require_isolation", "run_python", "uses_sandbox"]

# the launcher script, run by path with -I -S inside the namespaces (podium.scoring.launcher)
LAUNCHER = str(Path(__file__).with_name("launcher.py"))

Status = Literal["ok", "error", "timeout", "memory", "killed", "sandbox_error"]

_UID_BASE = 0x70000000  # per-run uids: [_UID_BASE, _UID_BASE + _UID_SPAN)
_UID_SPAN = 0x0F000000
_WORLD_WRITABLE = ("/var/tmp", "/dev/shm", "/run/lock")  # bound to the private /tmp
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "bad_alloc", "out of memory")





@dataclass(frozen=True)
class Limits:
    """Per-run limits. `processes` is RLIMIT_NPROC for the run's own uid (threads count)."""

    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 1024  # RLIMIT_AS: address space, not resident memory
    file_mb: int = 16  # largest file the code may write
    processes: int = 64
    network: bool = False
    disk_mb: int = 128  # size of the private /tmp tmpfs (all files together), when available
    output_kb: int = 64  # stdout keeps its first, stderr its last output_kb KiB


@dataclass(frozen=True)
class SandboxResult:
    status: Status
    returncode: int | None  # exit status, or -signal; None after a wall-clock kill
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    isolation: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# --------------------------------------------------------------------------------------------
# What this machine offers (probed once)
# --------------------------------------------------------------------------------------------


_uid_lock = None
_uids_in_use: set[int] = set()


def _allocate_uid() -> int:
    import random
    import threading

    global _uid_lock
    if _uid_lock is None:
        _uid_lock = threading.Lock()
    with _uid_lock:
        while True:
            uid = _UID_BASE + random.SystemRandom().randrange(_UID_SPAN)
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid


def _release_uid(uid: int | None) -> None:
    if uid is not None and _uid_lock is not None:
        with _uid_lock:
            _uids_in_use.discard(uid)


def _check_name(name: str) -> str:
    norm = os.path.normpath(name)
    if (not name or os.path.isabs(name) or norm.startswith("..") or norm == "."
            or "\0" in name):
        raise ValueError(f"bad sandbox file name {name!r}")
    return norm


def _rlimits(limits: Limits, nproc: bool) -> list[tuple[str, int, int]]:
    cpu = max(1, int(-(-limits.cpu_s // 1)))
    out = [("RLIMIT_CPU", cpu, cpu + 1),
           ("RLIMIT_AS", limits.memory_mb << 20, limits.memory_mb << 20),
           ("RLIMIT_FSIZE", limits.file_mb << 20, limits.file_mb << 20),
           ("RLIMIT_CORE", 0, 0)]
    if nproc:
        out.append(("RLIMIT_NPROC", limits.processes, limits.processes))
    return out


def _decode(data: bytes, total: int, tail: bool) -> str:
    text = data.decode("utf-8", errors="replace")
    dropped = total - len(data)
    if dropped <= 0:
        return text
    return (f"[... {dropped} bytes truncated]\n" + text if tail
            else text + f"\n[... {dropped} bytes truncated]")


def _read_status(fd: int) -> dict:
    chunks = []
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    report: dict = {}
    for line in b"".join(chunks).decode("utf-8", errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key == "applied":
                    report.setdefault("applied", []).extend(value)
                else:
                    report.setdefault(key, value)
    return report


def _memory_failure(stderr: str) -> bool:
    lines = [line for line in stderr[-4096:].splitlines() if line.strip()][-3:]
    return any(marker in line for line in lines for marker in _MEMORY_MARKERS)


def _classify(report: dict, timed_out: bool, stderr: str,
              limits: Limits) -> tuple[Status, int | None]:
    if timed_out:
        return "timeout", None
    if "setup_error" in report:
        return "sandbox_error", None
    if "exit" in report:
        code = int(report["exit"])
        if code == 0:
            return "ok", 0
        return ("memory" if _memory_failure(stderr) else "error"), code
    if "signal" in report:
        sig = int(report["signal"])
        cpu = float(report.get("cpu_s", 0.0))
        rss_mb = float(report.get("maxrss_kb", 0)) / 1024
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= limits.cpu_s - 0.5):
            return "timeout", -sig
        if _memory_failure(stderr) or (sig == signal.SIGKILL
                                       and rss_mb >= 0.9 * limits.memory_mb):
            return "memory", -sig
        return "killed", -sig
    return "sandbox_error", None


def _isolation(host: _Host, limits: Limits, applied: list[str]) -> tuple[str, ...]:
    tags: list[str] = []
    if host.unshare is not None:
        if not limits.network:
            tags.append("netns")
        tags += ["pidns", "mountns"]
    if host.ipcns:
        tags.append("ipcns")
    if host.userns:
        tags.append("userns")
    tags += [t for t in applied if t not in tags]
    tags += ["tmpdir", "env"]
    return tuple(tags)


async def _drain(stream, cap: int, tail: bool) -> tuple[bytes, int]:
    buf = bytearray()
    total = 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return bytes(buf), total
        total += len(chunk)
        if tail:
            buf += chunk
            if len(buf) > cap:
                del buf[: len(buf) - cap]
        elif len(buf) < cap:
            buf += chunk[: cap - len(buf)]


async def _feed(stream, data: bytes) -> None:
    try:
        if data:
            stream.write(data)
            await stream.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, RuntimeError):
            stream.close()


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _kill_uid(uid: int) -> None:
    """SIGKILL every process of a per-run uid (kill(-1) from a process running as that uid)."""
    import asyncio

    if not _UID_BASE <= uid < _UID_BASE + _UID_SPAN:
        return
    cfg = json.dumps({"mode": "kill", "uid": uid})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", LAUNCHER, cfg,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, env={"PATH": SANDBOX_PATH})
    await proc.wait()


async def arun_python(code: str, *, stdin: str = "", limits: Limits = Limits(),
                      files: dict[str, str] | None = None) -> SandboxResult:
    """Run `code` as a Python script in a fresh sandbox; see the module docstring."""
    import asyncio
    import time

    start = time.monotonic()
    try:
        host = _host() if isolation._HOST is not None else await asyncio.to_thread(_host)
        return await _run(host, code, stdin, limits, files or {})
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # never raise: report
        return SandboxResult("sandbox_error", None, "", f"{type(exc).__name__}: {exc}",
                             time.monotonic() - start, ())


async def _run(host: _Host, code: str, stdin: str, limits: Limits,
               files: dict[str, str]) -> SandboxResult:
    import asyncio
    import shutil
    import tempfile
    import time

    names = {_check_name(n): text for n, text in files.items()}
    if "main.py" in names:
        raise ValueError("files may not contain main.py (the code itself)")
    uid: int | None = None
    host_dir: str | None = None
    read_fd = write_fd = -1
    proc = None
    try:
        uid = _allocate_uid() if host.drop_user else None
        host_dir = tempfile.mkdtemp(prefix="podium-sbx-")
        os.chmod(host_dir, 0o700)
        for name, text in [("main.py", code), *names.items()]:
            path = os.path.join(host_dir, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        private = host.unshare is not None
        workdir = "/tmp" if private else host_dir
        if not private and uid is not None:
            for dirpath, _dirnames, filenames in os.walk(host_dir):
                for entry in [dirpath] + [os.path.join(dirpath, f) for f in filenames]:
                    os.chown(entry, uid, uid)
        read_fd, write_fd = os.pipe()
        cfg = {
            "mode": "run", "stage": host_dir, "names": ["main.py", *names],
            "workdir": workdir, "uid": uid, "gid": uid, "status_fd": write_fd,
            "private_tmp": ({"size_mb": max(1, limits.disk_mb), "inodes": 32768,
                             "extra": list(_WORLD_WRITABLE), "keep": list(host.tmp_keep)}
                            if private else None),
            "hide": [[b, list(t)] for b, t in host.hide] if uid is not None else [],
            "rlimits": _rlimits(limits, nproc=uid is not None),
            "seccomp": host.seccomp,
            "argv": [sys.executable, "-s", "main.py"],
            "env": _base_env(workdir),
        }
        argv = [sys.executable, "-I", "-S", LAUNCHER, json.dumps(cfg)]
        if host.unshare is not None:
            net = [] if limits.network else ["--net"]
            argv = [*host.unshare, *net, "--", *argv]
        begin = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"},
            cwd="/", start_new_session=True, pass_fds=(write_fd,))
        os.close(write_fd)
        write_fd = -1
        cap = max(1, limits.output_kb) * 1024
        feeder = asyncio.ensure_future(_feed(proc.stdin, stdin.encode("utf-8")))
        out_task = asyncio.ensure_future(_drain(proc.stdout, cap, tail=False))
        err_task = asyncio.ensure_future(_drain(proc.stderr, cap, tail=True))
        timed_out = False
        try:
            await asyncio.wait_for(proc.wait(), timeout=max(0.01, limits.wall_s))
        except TimeoutError:
            timed_out = True
            _killpg(proc.pid)
            await proc.wait()
        elapsed = time.monotonic() - begin
        if host.unshare is None:  # no pid namespace: leftovers may survive the main process
            if uid is not None:
                await _kill_uid(uid)
            else:
                _killpg(proc.pid)
        done, pending = await asyncio.wait({feeder, out_task, err_task}, timeout=5)
        for task in pending:
            task.cancel()
        out, out_total = out_task.result() if out_task in done else (b"", 0)
        err, err_total = err_task.result() if err_task in done else (b"", 0)
        stdout = _decode(out, out_total, tail=False)
        stderr = _decode(err, err_total, tail=True)
        report = _read_status(read_fd)
        status, returncode = _classify(report, timed_out, stderr, limits)
        if status == "sandbox_error":
            reason = report.get("setup_error") or f"launcher exited with {proc.returncode}"
            stderr = f"sandbox setup failed: {reason}\n{stderr}"
        applied = list(report.get("applied", []))
        return SandboxResult(status, returncode, stdout, stderr, elapsed,
                             _isolation(host, limits, applied))
    finally:
        if proc is not None and proc.returncode is None:
            _killpg(proc.pid)
            with contextlib.suppress(BaseException):  # cleanup must go on
                await asyncio.shield(proc.wait())
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)
        if host_dir is not None:
            shutil.rmtree(host_dir, ignore_errors=True)
        _release_uid(uid)


def run_python(code: str, *, stdin: str = "", limits: Limits = Limits(),
               files: dict[str, str] | None = None) -> SandboxResult:
    """Blocking `arun_python`; usable with or without a running event loop."""
    import asyncio

    try:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(arun_python(code, stdin=stdin, limits=limits, files=files))
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, arun_python(code, stdin=stdin, limits=limits,
                                                        files=files)).result()
    except Exception as exc:
        return SandboxResult("sandbox_error", None, "", f"{type(exc).__name__}: {exc}", 0.0, ())
