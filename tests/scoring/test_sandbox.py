"""Adversarial tests of podium.scoring.sandbox: one hostile program per property.

Tests that need a protection this machine does not offer (say, no network namespace) are skipped
with the reason; `isolation_available()` says what is there.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

import podium
from podium.scoring import isolation, sandbox
from podium.scoring.sandbox import (
    Limits,
    SandboxResult,
    arun_python,
    isolation_available,
    run_python,
)

AVAILABLE = isolation_available()
REPO = Path(podium.__file__).resolve().parent.parent
needs_netns = pytest.mark.skipif(not AVAILABLE["netns"], reason="no network namespace here")
needs_user = pytest.mark.skipif(not AVAILABLE["drop_user"], reason="runs cannot get their own uid")
needs_nproc = pytest.mark.skipif(not AVAILABLE["nproc"],
                                 reason="no RLIMIT_NPROC here: a fork bomb would hurt")


def sandbox_uid(result: SandboxResult) -> int | None:
    for tag in result.isolation:
        if tag.startswith("user:"):
            return int(tag.split(":", 1)[1])
    return None


def processes_of(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except OSError:
            continue
    return pids


def assert_no_processes_left(uid: int) -> None:
    deadline = time.monotonic() + 5
    while processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_of(uid) == [], f"processes of sandbox uid {uid} survived the run"


# ----------------------------------------------------------------------------- normal code


def test_normal_code_gets_stdin_and_returns_stdout():
    result = run_python("import sys\nname = input()\nprint('hello', name[::-1])\n"
                        "print('to stderr', file=sys.stderr)\n", stdin="dlrow\n")
    assert result.status == "ok", result
    assert result.returncode == 0
    assert result.stdout == "hello world\n"
    assert result.stderr == "to stderr\n"
    assert {"tmpdir", "env", "rlimits"} <= set(result.isolation)
    assert result.wall_s > 0


def test_error_exit_status_and_traceback():
    result = run_python("raise ValueError('boom')")
    assert (result.status, result.returncode) == ("error", 1)
    assert "ValueError: boom" in result.stderr
    assert run_python("import sys; sys.exit(3)").returncode == 3


def test_files_are_importable_and_the_virtualenv_is_usable():
    code = "import helper, json\nprint(helper.X + 1, json.dumps([1]))\nimport numpy\n"
    result = run_python(code, files={"helper.py": "X = 41\n", "data/in.txt": "x"})
    assert result.status == "ok", result.stderr
    assert result.stdout == "42 [1]\n"


def test_hash_seed_is_fixed():
    code = "print(hash('podium'), list({'a', 'b', 'c', 'd'}))"
    assert run_python(code).stdout == run_python(code).stdout


def test_runs_in_parallel_get_their_own_directories():
    code = ("import os, sys, time\nmine = sys.stdin.read()\nopen('marker', 'w').write(mine)\n"
            "time.sleep(0.3)\nprint(open('marker').read(), sorted(os.listdir('.')))\n")

    async def main():
        return await asyncio.gather(*(arun_python(code, stdin=f"run{i}") for i in range(8)))

    results = asyncio.run(main())
    for i, result in enumerate(results):
        assert result.status == "ok", result.stderr
        assert result.stdout.startswith(f"run{i} "), result.stdout
        assert result.stdout.count("marker") == 1
    uids = [sandbox_uid(r) for r in results]
    if AVAILABLE["drop_user"]:
        assert len(set(uids)) == len(uids)  # every run its own uid


def test_output_is_truncated():
    result = run_python("import sys\nprint('x' * 1_000_000)\nsys.stderr.write('e' * 500_000"
                        " + 'END')\n")
    assert result.status == "ok"
    assert len(result.stdout) < 70_000 and result.stdout.startswith("xxx")
    assert "truncated" in result.stdout
    assert len(result.stderr) < 70_000 and result.stderr.endswith("END")  # stderr keeps its tail


def test_sync_api_works_inside_a_running_event_loop():
    async def main():
        return run_python("print(6 * 7)")

    assert asyncio.run(main()).stdout == "42\n"


def test_never_raises():
    bad_name = run_python("print(1)", files={"../escape.py": "x"})
    assert bad_name.status == "sandbox_error" and "escape" in bad_name.stderr
    clash = run_python("print(1)", files={"main.py": "x"})
    assert clash.status == "sandbox_error"


def test_setup_failure_is_a_sandbox_error(monkeypatch):
    async def broken(*args, **kwargs):
        raise OSError("no processes for you")

    monkeypatch.setattr(asyncio, "create_subprocess_exec", broken)
    result = run_python("print(1)")
    assert result.status == "sandbox_error"
    assert "no processes for you" in result.stderr


def test_launcher_failure_is_a_sandbox_error(monkeypatch):
    host = sandbox._Host(root=os.geteuid() == 0, unshare=("/usr/bin/unshare", "--no-such-flag"),
                         userns=False, drop_user=False, hide=(), problems=())
    monkeypatch.setattr(isolation, "_HOST", host)
    result = run_python("print(1)")
    assert result.status == "sandbox_error" and result.returncode is None
    assert "sandbox setup failed" in result.stderr


def test_isolation_available_reports_booleans():
    assert set(AVAILABLE) >= {"root", "netns", "pidns", "mountns", "drop_user", "nproc",
                              "rlimits", "env", "tmpdir"}
    assert all(isinstance(v, bool) for v in AVAILABLE.values())
    assert AVAILABLE["root"] == (os.geteuid() == 0)


# ----------------------------------------------------------------------------- time


def test_infinite_loop_times_out():
    limits = Limits(wall_s=2, cpu_s=60)
    start = time.monotonic()
    result = run_python("while True:\n    pass\n", limits=limits)
    assert result.status == "timeout"
    assert result.returncode is None
    assert time.monotonic() - start < limits.wall_s + 10


def test_sleeping_code_times_out():
    result = run_python("import time\ntime.sleep(60)\n", limits=Limits(wall_s=1))
    assert result.status == "timeout"


def test_cpu_limit_is_a_timeout():
    result = run_python("while True:\n    pass\n", limits=Limits(wall_s=60, cpu_s=1))
    assert result.status == "timeout"
    assert result.returncode in (-signal.SIGXCPU, -signal.SIGKILL)


# ----------------------------------------------------------------------------- processes


@needs_nproc
def test_fork_bomb_is_contained_and_leaves_nothing_behind():
    bomb = ("import os\nwhile True:\n    try:\n        os.fork()\n"
            "    except OSError:\n        pass\n")
    result = run_python(bomb, limits=Limits(wall_s=3, cpu_s=30))
    assert result.status != "ok"
    uid = sandbox_uid(result)
    assert uid is not None
    assert_no_processes_left(uid)
    after = run_python("print('still usable')")
    assert after.status == "ok" and after.stdout == "still usable\n"


@needs_user
def test_escaped_daemon_is_killed_when_the_run_ends():
    # double fork + setsid: the daemon leaves the process group and outlives its parent
    code = """
import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        time.sleep(120)
    os._exit(0)
os.close(w)
daemon = int(os.read(r, 20))
os.kill(daemon, 0)  # it is alive
print('daemon up')
"""
    result = run_python(code, limits=Limits(wall_s=10))
    assert result.status == "ok" and result.stdout == "daemon up\n", result
    assert_no_processes_left(sandbox_uid(result))


# ----------------------------------------------------------------------------- memory and disk


def test_memory_hog_is_memory():
    result = run_python("x = bytearray(4 * 1024 ** 3)\nprint('allocated')\n")
    assert result.status == "memory", result
    assert "allocated" not in result.stdout


def test_growing_memory_is_memory():
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 ** 2))\n"
    result = run_python(code, limits=Limits(memory_mb=512, wall_s=20))
    assert result.status == "memory", result


def test_file_size_limit():
    code = ("data = b'x' * (1024 ** 2)\nwith open('big.bin', 'wb') as fh:\n"
            "    for _ in range(100):\n        fh.write(data)\nprint('wrote 100 MB')\n")
    result = run_python(code)
    assert result.status == "error"
    assert "wrote 100 MB" not in result.stdout
    assert "File too large" in result.stderr


# ----------------------------------------------------------------------------- filesystem


@needs_user
def test_writes_outside_its_directory_fail(tmp_path):
    os.chmod(tmp_path, 0o755)  # enterable by others: only write permission is left to refuse
    tag = secrets.token_hex(6)
    targets = {
        "tmp_path": tmp_path / f"escape-{tag}",
        "repo": REPO / f"podium-escape-test-{tag}",
        "package": REPO / "podium" / f"escape-{tag}.py",
    }
    host_tmp = [Path(f"/tmp/podium-escape-test-{tag}"), Path(f"/var/tmp/podium-escape-{tag}"),
                Path(f"/dev/shm/podium-escape-{tag}")]
    lines = [f"{name}={str(path)!r}" for name, path in targets.items()]
    code = "\n".join([
        "import os",
        f"targets = dict({', '.join(lines)})",
        f"host_tmp = {[str(p) for p in host_tmp]!r}",
        "for name, path in targets.items():",
        "    try:",
        "        open(path, 'w').write('escaped')",
        "        print(name, 'WROTE')",
        "    except OSError as exc:",
        "        print(name, 'refused', type(exc).__name__)",
        "for path in host_tmp:",
        "    try:",
        "        open(path, 'w').write('escaped')",
        "    except OSError:",
        "        pass",
        "try:",
        "    os.chmod(os.path.dirname(targets['repo']), 0o777)",
        "    print('chmod WORKED')",
        "except OSError:",
        "    print('chmod refused')",
    ])
    try:
        result = run_python(code)
        assert result.status == "ok", result.stderr
        assert "WROTE" not in result.stdout and "WORKED" not in result.stdout, result.stdout
        assert result.stdout.count("refused") == len(targets) + 1
        for path in targets.values():
            assert not path.exists()
        if "private-tmp" in result.isolation:  # the code's /tmp was its own tmpfs
            for path in host_tmp:
                assert not path.exists(), f"{path} reached the host"
    finally:
        for path in [*targets.values(), *host_tmp]:
            path.unlink(missing_ok=True)


def test_temporary_directory_is_removed(monkeypatch, tmp_path):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    result = run_python("open('left-behind.txt', 'w').write('x')\nprint('ok')")
    assert result.status == "ok"
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- IPC

# System V objects (two 64 MB shared-memory segments, one keyed, a message queue, a semaphore
# set) and a POSIX shared-memory file, none of them removed: in the run's own IPC namespace and
# private /dev/shm they die with the run.
IPC_LEFTOVERS = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT, IPC_PRIVATE = 0o1000, 0
key = int(input())
made = {{"shm": [libc.shmget(key, 64 << 20, IPC_CREAT | 0o600),
                libc.shmget(IPC_PRIVATE, 64 << 20, IPC_CREAT | 0o600)],
        "msg": [libc.msgget(key + 1, IPC_CREAT | 0o600)],
        "sem": [libc.semget(key + 2, 1, IPC_CREAT | 0o600)]}}
with open("/dev/shm/{name}", "wb") as fh:
    fh.write(b"x" * 4096)
made["seen"] = {{kind: open("/proc/sysvipc/" + kind).read().count("\\n") - 1
                for kind in ("shm", "msg", "sem")}}
print(json.dumps(made))
"""


def sysv_objects(kind: str) -> list[dict[str, int]]:
    """The System V IPC objects of one kind (shm, msg, sem) that `ipcs` lists on this host:
    key, id and owner of each, from /proc/sysvipc."""
    header, *rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
    names = header.split()
    out = []
    for row in rows:
        fields = dict(zip(names, map(int, row.split()[: len(names)]), strict=False))
        out.append({"key": fields["key"], "id": fields[names[1]], "uid": fields["uid"]})
    return out


def remove_sysv(kind: str, ids: list[int]) -> None:
    import subprocess

    flag = {"shm": "-m", "msg": "-q", "sem": "-s"}[kind]
    for ident in ids:
        subprocess.run(["ipcrm", flag, str(ident)], capture_output=True)


@needs_netns
def test_ipc_objects_and_dev_shm_files_do_not_outlive_the_run():
    key = secrets.randbelow(1 << 30) + 1
    name = f"podium-leftover-{key}"
    before = {kind: sysv_objects(kind) for kind in ("shm", "msg", "sem")}
    result = run_python(IPC_LEFTOVERS.format(name=name), stdin=f"{key}\n")
    uid = sandbox_uid(result)
    left = {}
    try:
        for kind in before:
            old = {(o["key"], o["id"]) for o in before[kind]}
            left[kind] = [o for o in sysv_objects(kind) if (o["key"], o["id"]) not in old
                          and (o["key"] in (key, key + 1, key + 2) or o["uid"] == uid)]
        assert result.ok, result.stderr
        made = json.loads(result.stdout)
        assert all(ident >= 0 for kind in ("shm", "msg", "sem") for ident in made[kind]), made
        assert made["seen"] == {"shm": 2, "msg": 1, "sem": 1}  # the run saw only its own
        assert left == {"shm": [], "msg": [], "sem": []}
        assert not Path("/dev/shm", name).exists()
        assert "ipcns" in result.isolation
    finally:
        for kind, objects in left.items():
            remove_sysv(kind, [o["id"] for o in objects])
        Path("/dev/shm", name).unlink(missing_ok=True)


# ----------------------------------------------------------------------------- network


def _serve_once(accepted: list) -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(15)

    def accept():
        try:
            conn, _ = server.accept()
            accepted.append(True)
            conn.sendall(b"hello from the host\n")
            conn.close()
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1]


CONNECT = """
import socket
try:
    s = socket.create_connection(("127.0.0.1", {port}), timeout=3)
    print("CONNECTED", s.recv(100))
except OSError as exc:
    print("local refused", type(exc).__name__)
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3)
    print("INTERNET")
except OSError as exc:
    print("internet refused", type(exc).__name__)
try:
    socket.getaddrinfo("example.com", 443)
    print("DNS")
except OSError as exc:
    print("dns refused", type(exc).__name__)
"""


@needs_netns
def test_no_network_not_even_the_hosts_localhost():
    accepted: list = []
    server, port = _serve_once(accepted)
    try:
        result = run_python(CONNECT.format(port=port), limits=Limits(wall_s=20))
    finally:
        server.close()
    assert result.status == "ok", result.stderr
    assert "netns" in result.isolation
    assert "local refused" in result.stdout and "CONNECTED" not in result.stdout
    assert "internet refused" in result.stdout and "INTERNET" not in result.stdout
    assert "DNS" not in result.stdout
    assert accepted == []


def test_network_true_shares_the_host_network():
    """Control for the test above: the same server is reachable when networking is allowed."""
    accepted: list = []
    server, port = _serve_once(accepted)
    try:
        code = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
                "print(s.recv(100).decode().strip())\n")
        result = run_python(code, limits=Limits(network=True))
    finally:
        server.close()
    assert result.status == "ok", result.stderr
    assert result.stdout == "hello from the host\n"
    assert "netns" not in result.isolation


# ----------------------------------------------------------------------------- secrets


def test_parent_environment_is_not_readable(monkeypatch):
    secret = "s3cret-" + secrets.token_hex(8)
    monkeypatch.setenv("PODIUM_SANDBOX_SECRET", secret)
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    code = f"""
import os
print(dict(os.environ))
pids = [p for p in os.listdir('/proc') if p.isdigit()]
for pid in sorted({{os.getppid(), 1, {os.getpid()}}}) + pids:
    try:
        print(pid, open(f'/proc/{{pid}}/environ', 'rb').read())
    except OSError as exc:
        print(pid, 'unreadable', type(exc).__name__)
    try:
        print(pid, open(f'/proc/{{pid}}/cmdline', 'rb').read())
    except OSError:
        pass
"""
    result = run_python(code)
    assert result.status == "ok", result.stderr
    assert "PATH" in result.stdout  # it did print its environment
    assert secret not in result.stdout and secret not in result.stderr
    assert "PODIUM_SANDBOX_SECRET" not in result.stdout
    env = eval(result.stdout.splitlines()[0])  # noqa: S307 - our own repr'd dict
    assert set(env) <= {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONHASHSEED", "OMP_NUM_THREADS",
                        "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "LC_CTYPE"}


@needs_user
def test_hidden_interpreter_home_is_not_browsable():
    """Where the interpreter lives under a private directory (/root here), the sandbox sees
    only the interpreter's own directories there."""
    hidden = [t.split(":", 1)[1] for t in run_python("pass").isolation if t.startswith("hide:")]
    if not hidden:
        pytest.skip("the interpreter is not under a private directory here")
    code = f"import os\nprint(sorted(os.listdir({hidden[0]!r})))\n"
    result = run_python(code)
    assert result.status == "ok", result.stderr
    real = set(os.listdir(hidden[0]))
    shown = set(eval(result.stdout))  # noqa: S307 - our own repr'd list
    assert shown <= real and len(shown) <= 1


# ----------------------------------------------------------------------------- fallback


def test_fallback_without_namespaces(monkeypatch):
    """With no namespaces and no uid to drop to, runs still get a private directory, a
    scrubbed environment, rlimits and the wall-clock kill, and say so."""
    host = sandbox._Host(root=os.geteuid() == 0, unshare=None, userns=False, drop_user=False,
                         hide=(), problems=("test",))
    monkeypatch.setattr(isolation, "_HOST", host)
    monkeypatch.setenv("PODIUM_SANDBOX_SECRET", "s3cret-fallback")
    result = run_python("import os\nprint(os.environ.get('PODIUM_SANDBOX_SECRET'), "
                        "os.getcwd() == os.environ['HOME'])")
    assert result.status == "ok", result.stderr
    assert result.stdout == "None True\n"
    assert "netns" not in result.isolation and "rlimits" in result.isolation
    assert run_python("while True: pass", limits=Limits(wall_s=1)).status == "timeout"
    assert run_python("x = bytearray(4 * 1024 ** 3)").status == "memory"


def sandbox_uids_below(root_pid: int) -> set[int]:
    """The per-run sandbox uids of live processes descending from `root_pid` (other graders
    may be running on this machine at the same time: only our own runs count)."""
    uids = range(sandbox._UID_BASE, sandbox._UID_BASE + sandbox._UID_SPAN)
    parent, owner = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as fh:
                    fields = dict(line.split(":", 1) for line in fh if ":" in line)
                parent[int(entry)] = int(fields["PPid"])
                owner[int(entry)] = int(fields["Uid"].split()[0])
            except (OSError, KeyError, ValueError):
                continue
    found = set()
    for pid, uid in owner.items():
        if uid not in uids:
            continue
        up, hops = pid, 0
        while up > 1 and hops < 64:
            up, hops = parent.get(up, 0), hops + 1
            if up == root_pid:
                found.add(uid)
                break
    return found


@needs_user
def test_run_dies_with_its_grader(tmp_path):
    """A sleeping program does not outlive a grader that is SIGKILLed mid-run."""
    import subprocess
    import sys

    script = ("from podium.scoring.sandbox import Limits, run_python\n"
              "print(run_python('import time\\ntime.sleep(300)', limits=Limits(wall_s=300)))\n")
    grader = subprocess.Popen([sys.executable, "-c", script],
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 30
        while not sandbox_uids_below(grader.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        uids = sandbox_uids_below(grader.pid)
        assert len(uids) == 1, "the sandboxed program never started"
    finally:
        grader.kill()
        grader.wait()
    for uid in uids:
        assert_no_processes_left(uid)
    if AVAILABLE["private_tmp"]:  # the launcher removed the staging directory itself
        assert list(tmp_path.iterdir()) == []


def test_cancelling_a_run_kills_it(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))

    async def main():
        task = asyncio.ensure_future(arun_python("import time\ntime.sleep(60)"))
        deadline = time.monotonic() + 30
        while not sandbox_uids_below(os.getpid()) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        uids = sandbox_uids_below(os.getpid())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return uids

    uids = asyncio.run(main())
    assert len(uids) == 1, "the sandboxed program never started"
    assert list(tmp_path.iterdir()) == []
    for uid in uids:
        assert_no_processes_left(uid)
