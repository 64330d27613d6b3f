"""What isolation this host gives a sandboxed run, probed once: namespaces (`unshare`, the IPC
namespace checked apart), a per-run uid, the seccomp filter, and the interpreter's directories a
dropped uid can reach.
`podium.scoring.sandbox` runs each program with what `_host()` found; `isolation_level()` and
`require_isolation(task)` say what is missing (docs/sandbox.md)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass

from podium.errors import ConfigError
from podium.scoring import seccomp

SANDBOX_PATH = "/usr/bin:/bin"


def _base_env(workdir: str) -> dict[str, str]:
    return {"PATH": SANDBOX_PATH, "HOME": workdir, "LANG": "C.UTF-8", "TMPDIR": workdir,
            "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}


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
    ipcns: bool = False  # the namespaces include an IPC one (`unshare --ipc`)


def _find_unshare() -> str | None:
    for path in ("/usr/bin/unshare", "/bin/unshare"):
        if os.access(path, os.X_OK):
            return path

    return shutil.which("unshare")


def _interpreter_paths(problems: list[str]) -> list[str]:
    """Every path the sandboxed interpreter needs: prefixes and its clean sys.path."""

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

    try:
        proc = subprocess.run([*argv, "--net", "--", "/bin/true"], capture_output=True,
                              text=True, timeout=30, env={"PATH": SANDBOX_PATH})
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"rc={proc.returncode}")


def _probe_seccomp() -> str | None:
    """None when the namespace filter installs and holds here (checked in a throw-away
    process: a filter cannot be removed), else why not."""

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


def _probe_namespaces(argv: list[str], problems: list[str],
                      failed: str) -> tuple[tuple[str, ...] | None, bool]:
    """The unshare argv prefix that works here (None: none does) and whether it makes an IPC
    namespace: `argv --ipc` where that works, else `argv` with the missing IPC namespace a
    problem."""
    err = _probe_unshare(argv)
    if err is not None:
        problems.append(f"{failed}: {err}")
        return None, False
    err = _probe_unshare([*argv, "--ipc"])
    if err is None:
        return (*argv, "--ipc"), True
    problems.append(f"no IPC namespace (unshare --ipc failed: {err}): the code's System V "
                    "shared memory, message queues and semaphores would stay on the host")
    return tuple(argv), False


def _probe_host() -> _Host:
    problems: list[str] = []
    root = os.geteuid() == 0
    unshare_bin = _find_unshare()
    ns_flags = ["--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]
    unshare: tuple[str, ...] | None = None
    userns = ipcns = False
    if unshare_bin is None:
        problems.append("unshare not found")
    elif root:
        # as root never use --map-root-user: mapped root is the real root for files
        unshare, ipcns = _probe_namespaces([unshare_bin, *ns_flags], problems,
                                           "unshare as root failed")
    else:
        unshare, ipcns = _probe_namespaces([unshare_bin, "--user", "--map-root-user", *ns_flags],
                                           problems, "unprivileged unshare failed")
        userns = unshare is not None
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
                 tuple(tmp_keep), seccomp=seccomp_error is None, ipcns=ipcns)


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
    return {"root": host.root, "netns": ns, "pidns": ns, "mountns": ns, "ipcns": host.ipcns,
            "private_tmp": ns,
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
    name = getattr(task, "name", "") or type(task).__name__
    raise ConfigError(
        f"{name} runs model-written code, and this machine cannot isolate it fully: "
        + "; ".join(level) + ". Fix that (install util-linux for `unshare`; as a non-root user, "
        "allow unprivileged user namespaces, e.g. sysctl kernel.unprivileged_userns_clone=1 or "
        "kernel.apparmor_restrict_unprivileged_userns=0; a kernel with seccomp filters and IPC "
        "namespaces), or pass "
        "--allow-unisolated to run it with what is there (meta.json records what was missing).")


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------
