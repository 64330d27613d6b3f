"""The code sandbox's isolation under abuse: model code that tries to make its own namespaces,
and a machine that cannot isolate code at all.

* Inside a run, `no_new_privs` and a seccomp filter refuse unshare/setns/clone with namespace
  flags (clone3 gets ENOSYS, so libc falls back to clone); ordinary code (threads, fork,
  subprocess, multiprocessing) keeps working. The filter program is also checked instruction by
  instruction, for x86_64 and aarch64, with a small classic-BPF interpreter.
* `podium eval` on a code task refuses to run with weaker isolation unless --allow-unisolated
  is given, and meta.json records the isolation level. Missing isolation is injected for real:
  a wrapper hides `unshare` from the sandbox's probe and runs the real CLI in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from podium.scoring import isolation, sandbox, seccomp
from podium.scoring.sandbox import (
    isolation_level,
    isolation_problems,
    require_isolation,
    run_python,
    uses_sandbox,
)

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
EPERM, ENOSYS = 1, 38

# --------------------------------------------------------------------------------------------
# seccomp: the code may not make or join namespaces
# --------------------------------------------------------------------------------------------

NAMESPACE_ATTEMPTS = r"""
import ctypes, json, os, platform, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"x86_64": {"clone": 56, "clone3": 435}, "aarch64": {"clone": 220, "clone3": 435}}
nr = NR[platform.machine()]
out = {}

def attempt(name, rc):
    out[name] = [rc, ctypes.get_errno() if rc == -1 else 0]

if hasattr(os, "unshare"):  # Python 3.12+
    try:
        os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNS)
        out["os.unshare"] = "succeeded"
    except OSError as exc:
        out["os.unshare"] = exc.errno
attempt("unshare(NEWUSER|NEWNS)", libc.unshare(0x10000000 | 0x00020000))
attempt("unshare(NEWNET)", libc.unshare(0x40000000))
fd = os.open("/proc/self/ns/net", os.O_RDONLY)
attempt("setns", libc.setns(fd, 0))
# a raw clone with namespace flags; if it ever succeeded the child must not run on
rc = libc.syscall(nr["clone"], ctypes.c_ulong(0x10000000 | 0x40000000 | 17), None, None, None,
                  None)
if rc == 0:
    os._exit(0)
attempt("clone(NEWUSER|NEWNET)", rc)
attempt("clone3", libc.syscall(nr["clone3"], None, ctypes.c_size_t(0)))
tool = subprocess.run(["unshare", "--user", "--map-root-user", "true"], capture_output=True,
                      text=True)
out["unshare tool"] = [tool.returncode, tool.stderr.strip()]
print(json.dumps(out))
"""


def test_sandboxed_code_cannot_make_or_join_namespaces():
    result = run_python(NAMESPACE_ATTEMPTS)
    assert result.ok, result.stderr
    got = json.loads(result.stdout)
    assert got["unshare(NEWUSER|NEWNS)"] == [-1, EPERM]
    assert got["unshare(NEWNET)"] == [-1, EPERM]
    assert got["setns"] == [-1, EPERM]
    assert got["clone(NEWUSER|NEWNET)"] == [-1, EPERM]
    assert got["clone3"] == [-1, ENOSYS]  # so that libc falls back to clone
    assert got["unshare tool"][0] != 0 and "Operation not permitted" in got["unshare tool"][1]
    if "os.unshare" in got:
        assert got["os.unshare"] == EPERM
    assert "seccomp" in result.isolation and "no_new_privs" in result.isolation


ORDINARY_CODE = r"""
import ctypes, json, multiprocessing, os, subprocess, threading
out = {}
seen = []
threads = [threading.Thread(target=seen.append, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
out["threads"] = sorted(seen)
pid = os.fork()
if pid == 0:
    os._exit(5)
out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
out["subprocess"] = subprocess.run(["echo", "hi"], capture_output=True, text=True).stdout
with multiprocessing.Pool(2) as pool:
    out["pool"] = pool.map(abs, [-1, -2, -3])
libc = ctypes.CDLL(None, use_errno=True)
out["unshare(CLONE_FILES)"] = libc.unshare(0x400)  # no namespace: allowed
print(json.dumps(out))
"""


def test_ordinary_code_still_runs_under_the_filter():
    result = run_python(ORDINARY_CODE)
    assert result.ok, result.stderr
    assert json.loads(result.stdout) == {"threads": [0, 1, 2, 3], "fork": 5,
                                         "subprocess": "hi\n", "pool": [1, 2, 3],
                                         "unshare(CLONE_FILES)": 0}
    assert "seccomp" in result.isolation


def run_bpf(program: list[tuple[int, int, int, int]], data: bytes) -> int:
    """Evaluate a classic-BPF seccomp program (the opcodes `seccomp_filter` uses) on a
    seccomp_data buffer; the action it returns."""
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:  # ld [k]
            acc = int.from_bytes(data[k:k + 4], "little")
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if hit else jf)
        elif code == 0x06:  # ret k
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x} at {pc}")


def seccomp_data(nr: int, arch: int, arg0: int = 0) -> bytes:
    return (nr.to_bytes(4, "little") + arch.to_bytes(4, "little") + bytes(8)
            + arg0.to_bytes(8, "little") + bytes(40))


ALLOW, DENY, NOSYS, KILL = 0x7FFF0000, 0x00050000 | EPERM, 0x00050000 | ENOSYS, 0x80000000
THREAD_FLAGS = 0x3D0F00  # CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT/CHILD_*TID


@pytest.mark.parametrize("machine, arch, nr", [
    ("x86_64", 0xC000003E, {"clone": 56, "unshare": 272, "setns": 308, "clone3": 435,
                            "read": 0}),
    ("aarch64", 0xC00000B7, {"clone": 220, "unshare": 97, "setns": 268, "clone3": 435,
                             "read": 63}),
])
def test_the_filter_program_for_each_architecture(machine, arch, nr):
    program = seccomp.seccomp_filter(machine)
    assert len(program) < 64

    def action(name: str, arg0: int = 0, arch_: int = arch) -> int:
        return run_bpf(program, seccomp_data(nr[name], arch_, arg0))

    assert action("read") == ALLOW
    assert action("clone", THREAD_FLAGS) == ALLOW  # pthread_create
    assert action("clone", 17) == ALLOW  # fork: SIGCHLD only
    for flag in (CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, 0x02000000, 0x04000000,
                 0x08000000, 0x20000000):
        assert action("clone", 17 | flag) == DENY, hex(flag)
        assert action("unshare", flag) == DENY, hex(flag)
    assert action("unshare", 0x80) == DENY  # CLONE_NEWTIME
    assert action("unshare", 1 << 32) == DENY  # high bits are not looked past
    assert action("unshare", 0x400 | 0x200) == ALLOW  # CLONE_FILES | CLONE_FS
    assert action("setns") == DENY
    assert action("clone3") == NOSYS
    assert action("read", arch_=0x40000003) == KILL  # i386 (int 0x80): another syscall table
    if machine == "x86_64":
        assert run_bpf(program, seccomp_data(0x40000000 | 272, arch)) == DENY  # x32 unshare


def test_a_machine_without_a_filter_says_so():
    with pytest.raises(OSError, match="no seccomp filter for this machine"):
        seccomp.seccomp_filter("riscv64")


def test_a_filter_that_cannot_be_installed_is_an_isolation_problem(monkeypatch):
    """Fault injection: the probe fails (as on a kernel without seccomp filters). The runs go
    on without the filter, but the weakness is reported, not silent."""
    monkeypatch.setattr(isolation, "_probe_seccomp",
                        lambda: "seccomp filter could not be installed: [Errno 22] test")
    monkeypatch.setattr(isolation, "_HOST", None)
    assert any("seccomp filter could not be installed" in p for p in isolation_problems())
    assert isinstance(isolation_level(), list)
    result = run_python("import ctypes; print(ctypes.CDLL(None).unshare(0x10000000))")
    assert result.ok, result.stderr
    assert "seccomp" not in result.isolation


def test_the_seccomp_probe_passes_here():
    assert isolation._probe_seccomp() is None
    assert sandbox.isolation_available()["seccomp"]


# --------------------------------------------------------------------------------------------
# IPC: each run has its own IPC namespace, and a machine without one is reported
# --------------------------------------------------------------------------------------------


def test_the_probe_finds_an_ipc_namespace_here():
    assert sandbox.isolation_available()["ipcns"]
    assert "--ipc" in isolation._host().unshare
    assert "ipcns" in run_python("pass").isolation


def fail_ipc(real):
    """unshare as on a kernel without IPC namespaces: any call with --ipc fails."""
    return lambda argv: ("unshare: unshare failed: Invalid argument" if "--ipc" in argv
                         else real(argv))


def test_a_machine_without_an_ipc_namespace_is_an_isolation_problem(monkeypatch):
    """Fault injection: `unshare --ipc` fails. Runs go on in the other namespaces, and the
    missing IPC namespace is reported, and refused for a code task, not silent."""
    from podium.errors import ConfigError
    from podium.tasks import get_task

    monkeypatch.setattr(isolation, "_probe_unshare", fail_ipc(isolation._probe_unshare))
    monkeypatch.setattr(isolation, "_HOST", None)
    assert any("no IPC namespace" in p for p in isolation_problems())
    assert not sandbox.isolation_available()["ipcns"]
    with pytest.raises(ConfigError, match="IPC namespace"):
        require_isolation(get_task("humaneval"))
    result = run_python("print(1)")
    assert result.ok, result.stderr
    assert "ipcns" not in result.isolation and "netns" in result.isolation


# --------------------------------------------------------------------------------------------
# podium eval: full isolation, or --allow-unisolated, and the level in meta.json
# --------------------------------------------------------------------------------------------


def test_isolation_is_full_on_this_machine():
    assert isolation_level() == "full", isolation_problems()


# A worker that answers every HumanEval question with its reference solution; it logs each call.
WORKERS = """
import os
from podium.tasks.humaneval import HumanEvalTask

_ITEMS = []

def oracle(messages):
    with open(os.environ["CALLS"], "a") as fh:
        fh.write("call\\n")
    if not _ITEMS:
        _ITEMS.extend(HumanEvalTask().items())
    text = "\\n".join(m["content"] for m in messages)
    for item in _ITEMS:
        if "def " + item.meta["problem"]["entry_point"] + "(" in text:
            return "<answer>" + item.gold + "</answer>"
    return "<answer>0</answer>"
"""

POOL = """
[conductor]
backend = "function"
function = "podium.testing.workers:zero"
[[workers]]
name = "oracle"
backend = "function"
function = "isolation_test_workers:oracle"
[run]
cache = false
"""

# The real CLI, on a machine where the sandbox finds no `unshare` (its probe is told so).
NO_UNSHARE = """
import sys
import podium.scoring.isolation as isolation
isolation._find_unshare = lambda: None
from podium.cli.main import app
app(prog_name="podium")
"""

# The real CLI, on a machine whose kernel has no IPC namespaces (`unshare --ipc` fails).
NO_IPC = """
import podium.scoring.isolation as isolation
real = isolation._probe_unshare
isolation._probe_unshare = lambda argv: "unshare failed" if "--ipc" in argv else real(argv)
from podium.cli.main import app
app(prog_name="podium")
"""


class Eval:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        (tmp / "isolation_test_workers.py").write_text(WORKERS)
        (tmp / "no_unshare.py").write_text(NO_UNSHARE)
        (tmp / "no_ipc.py").write_text(NO_IPC)
        self.pool = tmp / "pool.toml"
        self.pool.write_text(POOL)
        self.out = tmp / "run"
        self.calls = tmp / "calls.log"

    def run(self, *extra: str, task: str = "humaneval", no_unshare: bool = False,
            no_ipc: bool = False) -> subprocess.CompletedProcess:
        entry = ([str(self.tmp / "no_unshare.py")] if no_unshare
                 else [str(self.tmp / "no_ipc.py")] if no_ipc else ["-m", "podium.cli.main"])
        env = {**os.environ, "COLUMNS": "200", "CALLS": str(self.calls),
               "PYTHONPATH": os.pathsep.join([str(self.tmp), os.environ.get("PYTHONPATH", "")])}
        return subprocess.run([sys.executable, *entry, "eval", "--task", task, "--system",
                               "single:oracle", "--n", "2", "--repeats", "1", "--out",
                               str(self.out), "--pool", str(self.pool), *extra],
                              capture_output=True, text=True, timeout=300, env=env)

    def meta(self) -> dict:
        return json.loads((self.out / "meta.json").read_text())

    def records(self) -> list[dict]:
        return [json.loads(line) for line in
                (self.out / "results.jsonl").read_text().splitlines()]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture()
def ev(tmp_path) -> Eval:
    return Eval(tmp_path)


def test_a_code_task_is_refused_without_full_isolation(ev):
    proc = ev.run(no_unshare=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = flat(proc.stderr)
    assert "humaneval runs model-written code" in message
    assert "unshare not found" in message and "--allow-unisolated" in message
    assert not ev.calls.exists()  # refused before any worker was paid
    assert not ev.out.exists()  # and before its --out folder was made


def test_a_code_task_is_refused_without_an_ipc_namespace(ev):
    proc = ev.run(no_ipc=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = flat(proc.stderr)
    assert "humaneval runs model-written code" in message and "no IPC namespace" in message
    assert "--allow-unisolated" in message
    assert not ev.calls.exists() and not ev.out.exists()


def test_allow_unisolated_runs_and_records_what_was_missing(ev):
    proc = ev.run("--allow-unisolated", no_unshare=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    isolation = ev.meta()["isolation"]
    assert isinstance(isolation, list) and "unshare not found" in isolation
    records = ev.records()
    assert len(records) == 2 and all(r["status"] == "ok" and r["correct"] for r in records)


def test_full_isolation_is_recorded_with_every_grade(ev):
    proc = ev.run("--traces")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ev.meta()["isolation"] == "full"
    records = ev.records()
    assert len(records) == 2 and all(r["correct"] for r in records)
    for record in records:  # the grade's details reach the results file
        assert {"netns", "pidns", "seccomp"} <= set(record["grade_details"]["isolation"])
    # and the trace
    traces = sorted((ev.out / "traces").iterdir())
    assert len(traces) == 2
    for trace in traces:
        details = json.loads(trace.read_text())["grade"]["details"]
        assert details["sandbox_status"] == "ok"
        assert {"netns", "pidns", "seccomp"} <= set(details["isolation"])


def test_a_task_that_runs_no_code_needs_no_isolation(ev):
    data = ev.tmp / "sums.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)})
                            + "\n" for i in range(2)))
    proc = ev.run(task=f"jsonl:{data}", no_unshare=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ev.meta()["isolation"] is None


def test_which_tasks_use_the_sandbox():
    from podium.tasks import get_task

    assert uses_sandbox(get_task("humaneval"))
    assert uses_sandbox(get_task("bigcodebench"))
    assert not uses_sandbox(get_task("gsm8k"))

    class Declared:
        sandboxed = True

    assert uses_sandbox(Declared())
    assert require_isolation(get_task("gsm8k")) is None
