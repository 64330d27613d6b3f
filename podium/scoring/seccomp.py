"""The seccomp filter of the code sandbox: code may not make or join namespaces.

A classic-BPF program built here with ctypes (no dependency) for x86_64 and aarch64
(`seccomp_filter`), installed after `no_new_privs` in the sandbox's launcher just before the
code is exec'd (`install`). See podium.scoring.sandbox for the whole sandbox; this module
imports nothing from podium, because the launcher (`python -I -S launcher.py`, where podium is
not importable) loads it by its path. Run as a script it is the probe: it installs the filter
in its own throw-away process and checks that it holds without breaking threads or fork
(`python -I -S seccomp.py`, exit 0 when it does, else it prints what failed).
"""

from __future__ import annotations

import os
import sys

# seccomp: the code may not make or join namespaces (see `seccomp_filter`)
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYSCALLS = {"x86_64": {"clone": 56, "unshare": 272, "setns": 308, "clone3": 435},
             "aarch64": {"clone": 220, "unshare": 97, "setns": 268, "clone3": 435}}
_X32_SYSCALL_BIT = 0x40000000  # x86_64's x32 ABI: same audit arch, numbers offset by this
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (CLONE_NEWTIME, 0x80, is
# CSIGNAL's bits in clone(2): it only exists for unshare(2) and clone3(2))
_CLONE_NAMESPACES = 0x7E020000
_UNSHARE_HARMLESS = 0x00040600  # CLONE_FS | CLONE_FILES | CLONE_SYSVSEM: no new namespace
_EPERM, _ENOSYS = 1, 38


def libc():
    """libc with the prototypes the sandbox calls (mount, prctl)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_char_p]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                           ctypes.c_ulong]
    return libc


def seccomp_filter(machine: str) -> list[tuple[int, int, int, int]]:
    """The classic-BPF seccomp program the code runs under, as (code, jt, jf, k) instructions.

    It checks the audit architecture first (a syscall of another ABI, such as 32-bit `int 0x80`
    on x86_64, kills the process: its numbers mean other calls), refuses x32 syscalls, then:

    * clone3 -> ENOSYS: its flags live in memory, where a filter cannot read them; libc then
      falls back to clone, whose flags are a register (threads and fork keep working);
    * clone with any CLONE_NEW* flag, setns, and unshare with anything but CLONE_FS,
      CLONE_FILES and CLONE_SYSVSEM -> EPERM;
    * everything else is allowed.
    """
    if machine not in _AUDIT_ARCH:
        raise OSError(f"no seccomp filter for this machine ({machine}): only for "
                      f"{', '.join(sorted(_AUDIT_ARCH))}")
    nr = _SYSCALLS[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, ...
    allow, errno, kill = 0x7FFF0000, 0x00050000, 0x80000000  # SECCOMP_RET_*; kill the process
    # seccomp_data: int nr at 0, u32 arch at 4, u64 args[6] from 16 (both arches little-endian)
    arch_at, nr_at, arg0_lo, arg0_hi = 4, 0, 16, 20
    # (code, k, jump-if-true label, jump-if-false label); None: the next instruction
    asm: list = [
        (ld, arch_at), (jeq, _AUDIT_ARCH[machine], None, "kill"),
        (ld, nr_at),
        *([(jge, _X32_SYSCALL_BIT, "eperm", None)] if machine == "x86_64" else []),
        (jeq, nr["clone3"], "enosys", None),
        (jeq, nr["setns"], "eperm", None),
        (jeq, nr["unshare"], "unshare", None),
        (jeq, nr["clone"], "clone", None),
        (ret, allow),
        "unshare", (ld, arg0_hi), (jeq, 0, None, "eperm"),
        (ld, arg0_lo), (jset, ~_UNSHARE_HARMLESS & 0xFFFFFFFF, "eperm", None), (ret, allow),
        "clone", (ld, arg0_lo), (jset, _CLONE_NAMESPACES, "eperm", None), (ret, allow),
        "eperm", (ret, errno | _EPERM),
        "enosys", (ret, errno | _ENOSYS),
        "kill", (ret, kill),
    ]
    labels: dict[str, int] = {}
    code: list[tuple] = []
    for entry in asm:
        if isinstance(entry, str):
            labels[entry] = len(code)
        else:
            code.append(entry)

    def offset(label: str | None, at: int) -> int:
        return 0 if label is None else labels[label] - at - 1

    out = []
    for at, (op, k, *jumps) in enumerate(code):
        jt, jf = (offset(j, at) for j in jumps) if jumps else (0, 0)
        out.append((op, jt, jf, k))
    return out


def install(libc, machine: str) -> None:
    """Load `seccomp_filter` for this process and every child (needs no_new_privs first)."""
    import ctypes

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    program = seccomp_filter(machine)
    filters = (SockFilter * len(program))(*[SockFilter(*ins) for ins in program])
    fprog = SockFprog(len(program), filters)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP) failed: {os.strerror(err)}")


def set_no_new_privs(libc) -> None:
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_NO_NEW_PRIVS) failed")


def probe() -> int:
    """Install the filter in this process and check that it holds (namespaces refused)
    without breaking threads or fork. Prints what failed."""
    import ctypes
    import threading

    lib = libc()
    try:
        set_no_new_privs(lib)
        install(lib, os.uname().machine)
    except OSError as exc:
        print(f"seccomp filter could not be installed: {exc}")
        return 1
    lib.unshare.argtypes = [ctypes.c_int]
    if lib.unshare(0x10000000 | 0x00020000) == 0 or ctypes.get_errno() != _EPERM:
        print("seccomp filter installed but unshare(CLONE_NEWUSER|CLONE_NEWNS) was not refused")
        return 1
    seen: list[int] = []
    thread = threading.Thread(target=seen.append, args=(1,))
    thread.start()
    thread.join()
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    if seen != [1] or os.waitstatus_to_exitcode(status) != 7:
        print("seccomp filter breaks threads or fork")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(probe())
