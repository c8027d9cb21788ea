"""Kernel confinement without namespaces: Landlock for files, seccomp for sockets.

Used by the `subprocess` backend when bubblewrap is missing. This file is also the
launcher: its source runs as `python -I -c <this file> <spec json>` inside the child,
applies the restrictions to itself and then execs the real interpreter on the program,
so the program starts already confined (both survive execve). It imports only the
standard library, because the sandbox interpreter is a bare system Python.

What it enforces:
  Landlock   reads and executes only below the given read-only paths (system folders,
             the program file), writes only below the program's own temp dir; with ABI
             >= 4 TCP bind/connect denied, with ABI >= 6 no signals to processes outside
             the sandbox and no abstract UNIX sockets.
  seccomp    socket() denied for every address family, socketpair() allowed only as an
             unnamed AF_UNIX stream pair (asyncio needs it; it can reach nothing),
             io_uring_setup() denied (io_uring can open sockets without socket()),
             syscalls of a foreign ABI (i386 int 0x80, x32) kill the process.
"""
from __future__ import annotations

import ctypes
import json
import os
import platform
import struct
import sys

CONFINE_FAILED_EXIT = 120  # the launcher could not confine itself; the program never ran
FAILED_TAG = "pettingllms-confine-failed:"

# --- Landlock (include/uapi/linux/landlock.h) --------------------------------------------
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on all arches
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_TRUNCATE, FS_IOCTL_DEV = 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
_NET_ALL = (1 << 0) | (1 << 1)  # BIND_TCP, CONNECT_TCP (ABI 4)
_SCOPE_ALL = (1 << 0) | (1 << 1)  # ABSTRACT_UNIX_SOCKET, SIGNAL (ABI 6)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

# --- seccomp ------------------------------------------------------------------------------
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_RET_KILL_PROCESS, _RET_ALLOW, _RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
_EACCES, _AF_UNIX, _SOCK_STREAM = 13, 1, 1
# machine -> (AUDIT_ARCH, socket, socketpair, io_uring_setup, x32 bit or 0)
_ARCHES = {"x86_64": (0xC000003E, 41, 53, 425, 0x40000000),
           "aarch64": (0xC00000B7, 198, 199, 425, 0)}


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4  # a pointer must not shrink to int
    return libc


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is absent or disabled."""
    try:
        abi = _libc().syscall(ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                              ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(0, int(abi))


def seccomp_arch() -> str | None:
    """Why the seccomp filter cannot be built here, or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    if platform.machine() not in _ARCHES:
        return f"no socket filter for {platform.machine()}"
    return None


def _fs_rights(abi: int) -> int:
    return _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)]


def _add_path(libc, ruleset: int, path: str, rights: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(path):
            rights &= _FILE_ONLY
        attr = struct.pack("=Qi", rights, fd)  # landlock_path_beneath_attr is packed
        buf = ctypes.create_string_buffer(attr, len(attr))
        if libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset),
                        ctypes.c_int(_RULE_PATH_BENEATH), buf, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)


def apply_landlock(read_paths: list[str], write_paths: list[str]) -> int:
    """Restrict this process (and what it execs) to the given paths; returns the ABI used."""
    libc = _libc()
    abi = landlock_abi()
    if abi < 1:
        raise OSError("Landlock is not available")
    fs = _fs_rights(abi)
    fields = [fs] + ([_NET_ALL] if abi >= 4 else []) + ([_SCOPE_ALL] if abi >= 6 else [])
    attr = struct.pack(f"={len(fields)}Q", *fields)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), buf, ctypes.c_size_t(len(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        read = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
        for path in read_paths:
            if os.path.exists(path):
                _add_path(libc, ruleset, path, read)
        for path in DEVICES:
            if os.path.exists(path):
                _add_path(libc, ruleset, path, (FS_READ_FILE | FS_WRITE_FILE | FS_IOCTL_DEV) & fs)
        for path in write_paths:
            _add_path(libc, ruleset, path, fs)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        if libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset),
                        ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def socket_filter() -> bytes:
    """The classic-BPF seccomp program described in the module doc."""
    arch, nr_socket, nr_pair, nr_uring, x32 = _ARCHES[platform.machine()]
    ld_w, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    deny = _RET_ERRNO | _EACCES
    # seccomp_data: nr @0, arch @4, ip @8, args[i] @16 + 8 i (low 32 bits first: little endian)
    prog = [
        _bpf(ld_w, 0, 0, 4),
        _bpf(jeq, 1, 0, arch),                 # our ABI: go on; else kill
        _bpf(ret, 0, 0, _RET_KILL_PROCESS),
        _bpf(ld_w, 0, 0, 0),
    ]
    if x32:
        prog += [_bpf(jset, 0, 1, x32), _bpf(ret, 0, 0, _RET_KILL_PROCESS)]
    prog += [
        _bpf(jeq, 0, 1, nr_socket),
        _bpf(ret, 0, 0, deny),
        _bpf(jeq, 0, 1, nr_uring),
        _bpf(ret, 0, 0, deny),
        _bpf(jeq, 1, 0, nr_pair),
        _bpf(ret, 0, 0, _RET_ALLOW),
        _bpf(ld_w, 0, 0, 16),                  # socketpair(domain, type, ...)
        _bpf(jeq, 1, 0, _AF_UNIX),
        _bpf(ret, 0, 0, deny),
        _bpf(ld_w, 0, 0, 24),
        _bpf(0x54, 0, 0, 0xF),                 # type & SOCK_TYPE_MASK (drop NONBLOCK/CLOEXEC)
        _bpf(jeq, 1, 0, _SOCK_STREAM),
        _bpf(ret, 0, 0, deny),                 # datagram pairs could sendto() a host socket
        _bpf(ret, 0, 0, _RET_ALLOW),
    ]
    return b"".join(prog)


def apply_seccomp() -> None:
    why = seccomp_arch()
    if why:
        raise OSError(why)
    libc = _libc()
    code = socket_filter()
    filt = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("@HP", len(code) // 8, ctypes.addressof(filt))  # sock_fprog
    fbuf = ctypes.create_string_buffer(fprog, len(fprog))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fbuf), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def launcher_args(python: str, prog: str, read_paths: list[str], write_dir: str) -> list[str]:
    """Command line that confines itself, then runs `python -I prog`."""
    with open(__file__, encoding="utf-8") as f:
        source = f.read()
    spec = {"python": python, "prog": prog, "read": read_paths, "write": [write_dir]}
    return [python, "-I", "-c", source, json.dumps(spec)]


def _main(spec_json: str) -> None:
    try:
        spec = json.loads(spec_json)
        # our own pid dir (exec keeps the pid), so /proc/self works and /proc/<other> does not
        own_proc = f"/proc/{os.getpid()}"
        apply_landlock(spec["read"] + [spec["prog"], own_proc], spec["write"])
        apply_seccomp()
        os.execv(spec["python"], [spec["python"], "-I", spec["prog"]])
    except BaseException as e:  # noqa: BLE001 - never run the program unconfined
        sys.stderr.write(f"{FAILED_TAG} {type(e).__name__}: {e}\n")
        sys.stderr.flush()
        os._exit(CONFINE_FAILED_EXIT)


if __name__ == "__main__" and len(sys.argv) == 2 and sys.argv[0] == "-c":
    _main(sys.argv[1])
