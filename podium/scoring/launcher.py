"""The sandbox's launcher: run as `python -I -S launcher.py <json>` by podium.scoring.sandbox,
as root (or mapped root) inside the new namespaces, it mounts the private /tmp, hides what must
be hidden, reports what it applied on a status pipe, forks the code's process (limits, its own
uid, no_new_privs and the seccomp filter, then exec) and waits for it.

It is a script, not a module podium imports: under `-I -S` podium is not importable, so it
imports nothing from podium and loads its one helper, seccomp.py beside it, by its path.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import resource
import signal
import stat
import sys

# mount(2) flags
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC = 2, 4, 4096, 16384


def _load_seccomp():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seccomp.py")
    spec = importlib.util.spec_from_file_location("podium_sandbox_seccomp", path)
    assert spec is not None and spec.loader is not None  # a .py file's path: always found
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_seccomp = _load_seccomp()


def _mount(libc, source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None) -> None:
    import ctypes

    enc = (lambda s: s.encode() if s is not None else None)  # noqa: E731
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _launcher_setup(cfg: dict, applied: list[str]) -> None:
    """Mount the private /tmp and hide what must be hidden (only in a mount namespace)."""
    uid, gid = cfg["uid"], cfg["gid"]
    contents = {}
    for name in cfg["names"]:
        with open(os.path.join(cfg["stage"], name), "rb") as fh:
            contents[name] = fh.read()
    # the staging directory is no longer needed: remove it now, so that not even a grader
    # killed mid-run leaves it behind (the grader removes it too, ignoring errors)
    for dirpath, dirnames, filenames in os.walk(cfg["stage"], topdown=False):
        for entry in filenames:
            os.unlink(os.path.join(dirpath, entry))
        for entry in dirnames:
            os.rmdir(os.path.join(dirpath, entry))
    os.rmdir(cfg["stage"])
    libc = _seccomp.libc()
    hide = [(b, [(t, os.open(t, os.O_PATH)) for t in targets]) for b, targets in cfg["hide"]]
    pt = cfg["private_tmp"]
    # an interpreter (a virtual environment) that lives under /tmp is bound back into the
    # private /tmp, read-only for the sandbox user as before
    keep = [(t, os.open(t, os.O_PATH)) for t in pt.get("keep", []) if os.path.exists(t)]
    opts = f"size={pt['size_mb']}m,nr_inodes={pt['inodes']},mode=0700"
    if uid is not None:
        opts += f",uid={uid},gid={gid}"
    _mount(libc, "tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, opts)
    for name, data in contents.items():
        path = os.path.join("/tmp", name)
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o755)
            if uid is not None:
                os.chown(parent, uid, gid)
        with open(path, "wb") as fh:
            fh.write(data)
        if uid is not None:
            os.chown(path, uid, gid)
    for target, fd in keep:
        os.makedirs(target, mode=0o755, exist_ok=True)
        _mount(libc, f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC, None)
        os.close(fd)
    for extra in pt["extra"]:
        if os.path.isdir(extra) and not os.path.islink(extra):
            _mount(libc, "/tmp", extra, None, _MS_BIND | _MS_REC, None)
    applied.append("private-tmp")
    for blocking, targets in hide:
        _mount(libc, "tmpfs", blocking, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=64k,mode=0755")
        for target, fd in targets:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(target, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                open(target, "ab").close()
            _mount(libc, f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC, None)
            os.close(fd)
        applied.append(f"hide:{blocking}")


def _launcher_child(cfg: dict) -> None:
    """In the forked child: limits, identity, then exec the code (never returns)."""
    os.set_inheritable(cfg["status_fd"], False)  # closed by exec
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    os.chdir(cfg["workdir"])
    for name, soft, hard in cfg["rlimits"]:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    libc = _seccomp.libc()
    _seccomp.set_no_new_privs(libc)
    if cfg.get("seccomp"):
        _seccomp.install(libc, os.uname().machine)
    os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])


def _write_status(fd: int, obj: dict) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, (json.dumps(obj) + "\n").encode())


def _record_exit(report: dict, status: int, usage) -> None:
    if os.WIFEXITED(status):
        report["exit"] = os.WEXITSTATUS(status)
    else:
        report["signal"] = os.WTERMSIG(status)
    report["cpu_s"] = usage.ru_utime + usage.ru_stime
    report["maxrss_kb"] = usage.ru_maxrss


def _launcher_wait(pid: int, fd: int, report: dict) -> None:
    """Wait for the code, reaping every other child on the way (as init of the pid namespace,
    orphans come here, and unreaped zombies would count against RLIMIT_NPROC). Also watch the
    status pipe: if the host process dies, its read end closes and the run is killed, so a
    sleeping program cannot outlive a crashed grader."""
    import select

    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # old kernel / Python: plain blocking wait
        while True:
            try:
                wpid, status, usage = os.wait4(-1, 0)
            except ChildProcessError:
                report["setup_error"] = "the child disappeared"
                return
            if wpid == pid:
                _record_exit(report, status, usage)
                return
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(fd, 0)  # POLLERR / POLLHUP: the host closed the read end
    while True:
        events = poller.poll(1000)
        while True:
            try:
                wpid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                report.setdefault("setup_error", "the child disappeared")
                return
            if wpid == 0:
                break
            if wpid == pid:
                _record_exit(report, status, usage)
                return
        if any(efd == fd for efd, _ in events):  # nobody is listening any more
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.killpg(0, signal.SIGKILL)  # our process group, this launcher included


def _launcher_main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    if cfg.get("mode") == "kill":
        uid = int(cfg["uid"])
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        for _ in range(3):
            try:
                os.kill(-1, signal.SIGKILL)  # every process this uid may signal: its own
            except ProcessLookupError:
                break
        return 0
    fd = cfg["status_fd"]
    os.umask(0o022)
    applied: list[str] = []
    report: dict = {"applied": applied}
    try:
        if cfg["private_tmp"]:
            _launcher_setup(cfg, applied)
        if cfg["uid"] is not None:
            applied += [f"user:{cfg['uid']}"]
        applied.append("no_new_privs")  # set for every run (it must precede seccomp)
        if cfg.get("seccomp"):
            applied.append("seccomp")
        applied.append("rlimits")
        if any(name == "RLIMIT_NPROC" for name, _, _ in cfg["rlimits"]):
            applied.append("nproc")
        _write_status(fd, {"applied": applied})  # known even if the run is killed later
        report = {}
        pid = os.fork()
        if pid == 0:
            try:
                _launcher_child(cfg)
            except BaseException as exc:
                _write_status(fd, {"setup_error": f"{type(exc).__name__}: {exc}"})
            finally:
                os._exit(127)
    except Exception as exc:
        report["setup_error"] = f"{type(exc).__name__}: {exc}"
        _write_status(fd, report)
        return 0
    _launcher_wait(pid, fd, report)
    _write_status(fd, report)
    return 0


if __name__ == "__main__":
    sys.exit(_launcher_main(sys.argv[1:]))
