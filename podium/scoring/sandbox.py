"""Run untrusted Python (model-written code and its tests) in a throw-away sandbox.

    result = run_python("print(input()[::-1])", stdin="abc\\n")     # or: await arun_python(...)
    result.status, result.stdout, result.isolation   # "ok", "cba\\n", ("netns", "pidns", ...)

No call ever raises: a sandbox that cannot be set up is `SandboxResult(status="sandbox_error")`.
Each run gets network, pid and mount namespaces, a private size-capped /tmp, a fresh
unprivileged uid (as root), `no_new_privs` and a seccomp filter against new namespaces,
rlimits, and an environment built from nothing; `SandboxResult.isolation` names what was
applied, and `require_isolation(task)` refuses a code task short of all of it unless
`--allow-unisolated`. docs/sandbox.md explains each layer, the launcher and how a run is
classified.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from podium.scoring import seccomp

# the launcher script, run by path with -I -S inside the namespaces (podium.scoring.launcher)
LAUNCHER = str(Path(__file__).with_name("launcher.py"))

Status = Literal["ok", "error", "timeout", "memory", "killed", "sandbox_error"]

SANDBOX_PATH = "/usr/bin:/bin"
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


@dataclass(frozen=True)
class _Host:
    """What isolation this host gives a run (probed once, `_host()`)."""

    root: bool
    unshare: tuple[str, ...] | None  # argv prefix without --net; None: no namespaces
    userns: bool  # the namespaces are inside a user namespace (non-root caller)
    drop_user: bool  # the code runs under a per-run uid
    hide: tuple[tuple[str, tuple[str, ...]], ...]  # (blocking dir, interpreter dirs bound back)
    problems: tuple[str, ...]  # why something is unavailable
    tmp_keep: tuple[str, ...] = ()  # interpreter dirs under /tmp, bound into the private /tmp
    seccomp: bool = False  # the code runs under the namespace filter (podium.scoring.seccomp)


def _base_env(workdir: str) -> dict[str, str]:
    return {"PATH": SANDBOX_PATH, "HOME": workdir, "LANG": "C.UTF-8", "TMPDIR": workdir,
            "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}


def _find_unshare() -> str | None:
    for path in ("/usr/bin/unshare", "/bin/unshare"):
        if os.access(path, os.X_OK):
            return path
    import shutil

    return shutil.which("unshare")


def _interpreter_paths(problems: list[str]) -> list[str]:
    """Every path the sandboxed interpreter needs: prefixes and its clean sys.path."""
    import subprocess

    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))]
    try:
        out = subprocess.run([sys.executable, "-s", "-c", "import sys, json; "
                              "print(json.dumps(sys.path))"], capture_output=True, text=True,
                             env=_base_env("/"), cwd="/", timeout=60, check=True).stdout
        paths += [p for p in json.loads(out) if isinstance(p, str) and os.path.isabs(p)]
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        problems.append(f"could not list the interpreter's sys.path: {exc}")
    return sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)})


def _blocking_dir(path: str) -> str | None:
    """The topmost proper ancestor of `path` that other users cannot enter, if any."""
    current = "/"
    for part in path.strip("/").split("/")[:-1]:
        current = os.path.join(current, part)
        try:
            if not os.stat(current).st_mode & stat.S_IXOTH:
                return current
        except OSError:
            return None
    return None


def _outermost(paths: list[str]) -> list[str]:
    """`paths` without those that lie inside another one of them."""
    kept: list[str] = []
    for target in sorted(paths):  # parents sort before their children
        if not any(target == k or target.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(target)
    return kept


def _hide_plan(paths: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    groups: dict[str, list[str]] = {}
    for path in paths:
        blocking = _blocking_dir(path)
        if blocking is not None:
            groups.setdefault(blocking, []).append(path)
    return tuple((blocking, tuple(_outermost(targets)))
                 for blocking, targets in sorted(groups.items()))


def _probe_unshare(argv: list[str]) -> str | None:
    import subprocess

    try:
        proc = subprocess.run([*argv, "--net", "--", "/bin/true"], capture_output=True,
                              text=True, timeout=30, env={"PATH": SANDBOX_PATH})
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"rc={proc.returncode}")


def _probe_seccomp() -> str | None:
    """None when the namespace filter installs and holds here (checked in a throw-away
    process: a filter cannot be removed), else why not."""
    import subprocess

    try:
        proc = subprocess.run([sys.executable, "-I", "-S", seccomp.__file__],
                              capture_output=True, text=True, timeout=60,
                              env={"PATH": SANDBOX_PATH}, cwd="/")
    except (OSError, subprocess.SubprocessError) as exc:
        return f"seccomp probe failed: {exc}"
    if proc.returncode == 0:
        return None
    return (proc.stdout.strip() or proc.stderr.strip()[-300:]
            or f"seccomp probe exited with {proc.returncode}")


def _probe_host() -> _Host:
    problems: list[str] = []
    root = os.geteuid() == 0
    unshare_bin = _find_unshare()
    ns_flags = ["--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]
    unshare: tuple[str, ...] | None = None
    userns = False
    if unshare_bin is None:
        problems.append("unshare not found")
    elif root:
        # as root never use --map-root-user: mapped root is the real root for files
        err = _probe_unshare([unshare_bin, *ns_flags])
        if err is None:
            unshare = (unshare_bin, *ns_flags)
        else:
            problems.append(f"unshare as root failed: {err}")
    else:
        argv = [unshare_bin, "--user", "--map-root-user", *ns_flags]
        err = _probe_unshare(argv)
        if err is None:
            unshare, userns = tuple(argv), True
        else:
            problems.append(f"unprivileged unshare failed: {err}")
    hide: tuple[tuple[str, tuple[str, ...]], ...] = ()
    drop_user = False
    paths = _interpreter_paths(problems)
    tmp_keep = _outermost([p for p in paths if p == "/tmp" or p.startswith("/tmp/")])
    if root:
        hide = _hide_plan(paths)
        if unshare is not None:
            drop_user = True
        elif not hide:
            drop_user = True  # the interpreter is reachable for any uid without a mount ns
        else:
            problems.append(f"the interpreter is under {hide[0][0]}, which other users cannot "
                            "enter, and there is no mount namespace to bind it: runs stay root")
            hide = ()
    seccomp_error = _probe_seccomp()
    if seccomp_error is not None:
        problems.append(f"{seccomp_error}: the code could make its own namespaces")
    return _Host(root, unshare, userns, drop_user, hide if unshare else (), tuple(problems),
                 tuple(tmp_keep), seccomp=seccomp_error is None)


_HOST: _Host | None = None


def _host() -> _Host:
    global _HOST
    if _HOST is None:
        _HOST = _probe_host()
    return _HOST


def isolation_available() -> dict[str, bool]:
    """What a run on this machine gets (probed once per process)."""
    host = _host()
    ns = host.unshare is not None
    return {"root": host.root, "netns": ns, "pidns": ns, "mountns": ns, "private_tmp": ns,
            "userns": host.userns, "drop_user": host.drop_user, "nproc": host.drop_user,
            "seccomp": host.seccomp, "rlimits": True, "env": True, "tmpdir": True}


def isolation_problems() -> tuple[str, ...]:
    """Why something in `isolation_available()` is False, or the namespace filter (seccomp) is
    missing (empty when nothing is missing)."""
    return _host().problems


def isolation_level() -> str | list[str]:
    """"full" when every layer in the module docstring is in place on this machine, else the
    list of what is missing (`isolation_problems()`): what `podium eval` records in meta.json."""
    problems = isolation_problems()
    return list(problems) if problems else "full"


def uses_sandbox(task) -> bool:
    """Whether a task's grader runs model-written code in this sandbox: a task says so with a
    `sandboxed` attribute, else a task that takes sandbox `limits` (humaneval, bigcodebench,
    livecodebench) is taken to run code."""
    flag = getattr(task, "sandboxed", None)
    return bool(flag) if flag is not None else hasattr(task, "limits")


def require_isolation(task, *, allow_unisolated: bool = False) -> str | list[str] | None:
    """The isolation level grading `task` runs under (`isolation_level()`; None for a task that
    runs no code). Raises ConfigError when the level is not "full", unless `allow_unisolated`:
    model-written code must not run with the host's network, processes or files by accident."""
    if not uses_sandbox(task):
        return None
    level = isolation_level()
    if level == "full" or allow_unisolated:
        return level
    from podium.errors import ConfigError

    name = getattr(task, "name", "") or type(task).__name__
    raise ConfigError(
        f"{name} runs model-written code, and this machine cannot isolate it fully: "
        + "; ".join(level) + ". Fix that (install util-linux for `unshare`; as a non-root user, "
        "allow unprivileged user namespaces, e.g. sysctl kernel.unprivileged_userns_clone=1 or "
        "kernel.apparmor_restrict_unprivileged_userns=0; a kernel with seccomp filters), or pass "
        "--allow-unisolated to run it with what is there (meta.json records what was missing).")


# --------------------------------------------------------------------------------------------
# Running
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
        host = _host() if _HOST is not None else await asyncio.to_thread(_host)
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
