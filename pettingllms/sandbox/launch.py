"""How a sandboxed program is started isolated: the backend record, bwrap's command line,
rlimits and the uid it runs under. Which backend is used here is `isolation.py`'s choice.

When we run as root, every program also runs under its own unprivileged uid taken from
a small range and leased with a file lock, so RLIMIT_NPROC is really enforced (the kernel
does not enforce it for root, nor for a user namespace whose ids map back to root) and
leftover processes can be found by uid and killed.
"""
from __future__ import annotations

import fcntl
import os
import random
import resource
import signal
import time
from dataclasses import dataclass, field

UID_BASE = 61000  # sandbox uids: UID_BASE .. UID_BASE + UID_COUNT - 1 (no passwd entry needed)
UID_COUNT = 512
LEASE_DIR = "/tmp/pettingllms-sandbox-uids"
INNER_UID = 65534  # what the program sees as its uid inside bwrap ("nobody")
SANDBOX_DIR = "/sandbox"  # cwd inside bwrap
PROGRAM_PATH = "/prog/main.py"  # program file inside bwrap (read-only)
MIN_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass
class Backend:
    kind: str  # "bwrap" | "subprocess"
    python: str  # interpreter that runs the program
    separate_uid: bool  # programs run under a leased unprivileged uid
    weaker: list[str] = field(default_factory=list)  # what is weaker than the full sandbox
    prlimit: str | None = None  # path of util-linux prlimit, used to set rlimits without preexec_fn
    setpriv: str | None = None  # path of util-linux setpriv, used to switch to the leased uid
    confinement: str = ""  # subprocess backend: e.g. "Landlock ABI 7 + seccomp"; "" = none
    why_weak: str = ""  # subprocess backend: why neither bwrap nor confinement is in use
    pdeathsig: str | None = None  # a setpriv with --pdeathsig (util-linux >= 2.33): programs die with their worker

    @property
    def contained(self) -> bool:
        """Files and sockets are fenced in (bwrap, or Landlock + seccomp)."""
        return self.kind == "bwrap" or bool(self.confinement)


def _python_prefix(python: str) -> str:
    """Folder to bind so `python` and its stdlib are visible inside bwrap."""
    real = os.path.realpath(python)
    if real.startswith("/usr/"):
        return "/usr"
    return os.path.dirname(os.path.dirname(real))  # <prefix>/bin/python -> <prefix>


# --- uid leases ---------------------------------------------------------------------------

class UidLease:
    """An unprivileged uid held exclusively (flock) by this process while a program runs."""

    def __init__(self) -> None:
        os.makedirs(LEASE_DIR, mode=0o755, exist_ok=True)
        start = random.randrange(UID_COUNT)
        for i in range(UID_COUNT):
            uid = UID_BASE + (start + i) % UID_COUNT
            fd = os.open(os.path.join(LEASE_DIR, f"{uid}.lock"), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            if os.pread(fd, 1, 0) == b"1":  # the last holder died mid-run: sweep its leftovers
                kill_uid_processes(uid)
            os.pwrite(fd, b"1", 0)
            return
        raise RuntimeError(f"all {UID_COUNT} sandbox uids are busy")

    def release(self) -> None:
        if self._fd >= 0:
            os.pwrite(self._fd, b"0", 0)  # clean release (callers swept the uid already)
            os.close(self._fd)  # closing drops the flock
            self._fd = -1


def live_uid_processes(uid: int) -> list[int]:
    """Pids whose real uid is `uid`, zombies excluded (they hold nothing but a pid)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                state, real_uid = b"", -1
                for line in f:
                    if line.startswith(b"State:"):
                        state = line.split()[1]
                    elif line.startswith(b"Uid:"):
                        real_uid = int(line.split()[1])
                        break
        except (OSError, ValueError, IndexError):
            continue  # process went away
        if real_uid == uid and state not in (b"Z", b"X"):
            pids.append(int(name))
    return pids


def kill_uid_processes(uid: int, patience_s: float = 2.0) -> int:
    """SIGKILL every live process of `uid` (stragglers that left our group) until none is left."""
    killed, deadline = 0, time.monotonic() + patience_s
    while True:
        pids = live_uid_processes(uid)
        if not pids or time.monotonic() > deadline:
            return killed
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        time.sleep(0.005)  # let SIGKILL land before looking again


# --- limits and the command line ---------------------------------------------------------

def _limit_values(limits) -> tuple[int, int, int, int]:
    """(address-space bytes, CPU seconds rounded up, file-size bytes, processes)."""
    cpu = max(1, int(-(-float(limits.cpu_s) // 1)))
    return (int(limits.memory_mb) << 20, cpu, int(limits.file_size_mb) << 20,
            int(limits.max_processes))


def rlimit_args(prlimit: str, limits) -> list[str]:
    mem, cpu, fsize, nproc = _limit_values(limits)
    return [prlimit, f"--as={mem}", f"--cpu={cpu}:{cpu + 1}", f"--fsize={fsize}",
            f"--nproc={nproc}", "--core=0", "--nofile=256", "--"]


def set_rlimits(limits) -> None:
    """preexec_fn fallback when util-linux prlimit is missing (runs after the uid switch,
    so it must not import anything: `resource` is imported at module level)."""
    mem, cpu, fsize, nproc = _limit_values(limits)
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def wrap(backend: Backend, lease: UidLease | None, limits, cmd: list[str],
         death_signal: str | None = None) -> tuple[list[str], dict]:
    """The command line and Popen keyword arguments that run `cmd` under the lease's uid and
    the limits. setpriv and prlimit do both in the child's exec chain; Popen's own user= /
    preexec_fn make CPython fork() the caller instead of vfork(), which copies its page tables
    and costs several times the program's run when the caller holds a model (GBs resident).
    `death_signal` (e.g. KILL): what the child gets when the thread that started it dies, so a
    rollout worker killed with kill -9 leaves no program behind; set after the uid switch
    (a credential change clears it), where setpriv can."""
    kwargs: dict = {}
    if backend.prlimit:
        cmd = rlimit_args(backend.prlimit, limits) + cmd
    else:
        kwargs["preexec_fn"] = lambda: set_rlimits(limits)
    death = ["--pdeathsig", death_signal] if death_signal and backend.pdeathsig else []
    if lease is not None:  # outermost: the unprivileged uid is the one that sets the limits
        if backend.setpriv:
            cmd = [backend.setpriv, f"--reuid={lease.uid}", f"--regid={lease.uid}",
                   "--clear-groups", *death, "--"] + cmd
            death = []
        else:
            kwargs.update(user=lease.uid, group=lease.uid, extra_groups=[])
    if death:
        cmd = [backend.pdeathsig, *death, "--"] + cmd
    return cmd, kwargs


def bwrap_command(backend: Backend, host_prog: str, limits) -> list[str]:
    tmpfs_bytes = max(4, int(limits.file_size_mb) * 4) * 1024 * 1024
    cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session",
           "--uid", str(INNER_UID), "--gid", str(INNER_UID),
           "--ro-bind", "/usr", "/usr",
           "--dev", "/dev", "--proc", "/proc",
           "--size", str(tmpfs_bytes), "--tmpfs", SANDBOX_DIR,
           "--symlink", SANDBOX_DIR, "/tmp",
           "--ro-bind", host_prog, PROGRAM_PATH,
           "--chdir", SANDBOX_DIR,
           "--clearenv", "--setenv", "PATH", MIN_PATH, "--setenv", "LANG", "C.UTF-8",
           "--setenv", "HOME", SANDBOX_DIR, "--setenv", "TMPDIR", SANDBOX_DIR,
           "--setenv", "PYTHONIOENCODING", "utf-8"]
    for link in ("bin", "lib", "lib32", "lib64", "sbin"):
        path = "/" + link
        if os.path.islink(path):
            cmd += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            cmd += ["--ro-bind", path, path]
    prefix = _python_prefix(backend.python)
    if prefix != "/usr":
        cmd += ["--ro-bind", prefix, prefix]
    return cmd + [backend.python, "-I", PROGRAM_PATH]


def confined_read_paths(python: str) -> list[str]:
    """What a confined program may read and execute: the folders bwrap binds read-only."""
    paths = [p for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
             if os.path.exists(p)]
    prefix = _python_prefix(python)
    return paths + ([prefix] if prefix != "/usr" else [])

