"""How a sandboxed program is isolated: backend choice, command line, user ids.

Two backends:
  bwrap       bubblewrap: new user/pid/net/ipc/uts namespaces, a root that holds only
              /usr (read-only), a fresh size-limited tmpfs as cwd and /tmp, /proc of its
              own pid namespace. No network interface but loopback.
  subprocess  fallback when bwrap is missing or broken: `python -I` in a new session with
              rlimits, cwd a fresh host temp dir, confined by Landlock (files) and seccomp
              (sockets) where the kernel has them (see `confine.py`). Without them it is
              not contained at all: untrusted code is then refused unless the user allows
              it (`sandbox.allow_weak=true`). What stays weaker is `Backend.weaker`.

When we run as root, every program also runs under its own unprivileged uid taken from
a small range and leased with a file lock, so RLIMIT_NPROC is really enforced (the kernel
does not enforce it for root, nor for a user namespace whose ids map back to root) and
leftover processes can be found by uid and killed.
"""
from __future__ import annotations

import fcntl
import logging
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

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

    @property
    def contained(self) -> bool:
        """Files and sockets are fenced in (bwrap, or Landlock + seccomp)."""
        return self.kind == "bwrap" or bool(self.confinement)


def _sandbox_python() -> str:
    """A system interpreter readable by an unprivileged uid (a venv under /root is not)."""
    forced = os.environ.get("PETTINGLLMS_SANDBOX_PYTHON")
    if forced:
        return forced
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(cand):
            return cand
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


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


# --- backend detection ----------------------------------------------------------------------

_backend: Backend | None = None
_backend_lock = threading.Lock()


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


def launch(backend: Backend, lease: "UidLease | None", limits, cmd: list[str]
           ) -> tuple[list[str], dict]:
    """The command line and Popen keyword arguments that run `cmd` under the lease's uid and
    the limits. setpriv and prlimit do both in the child's exec chain; Popen's own user= /
    preexec_fn make CPython fork() the caller instead of vfork(), which copies its page tables
    and costs several times the program's run when the caller holds a model (GBs resident)."""
    kwargs: dict = {}
    if backend.prlimit:
        cmd = rlimit_args(backend.prlimit, limits) + cmd
    else:
        kwargs["preexec_fn"] = lambda: set_rlimits(limits)
    if lease is not None:  # outermost: the limits are set by the unprivileged uid, as before
        if backend.setpriv:
            cmd = [backend.setpriv, f"--reuid={lease.uid}", f"--regid={lease.uid}",
                   "--clear-groups", "--"] + cmd
        else:
            kwargs.update(user=lease.uid, group=lease.uid, extra_groups=[])
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


def _probe_bwrap(python: str, prlimit: str | None, separate_uid: bool,
                 setpriv: str | None = None) -> str | None:
    """Run a tiny program through the real bwrap command line; None if it works."""
    import tempfile

    from pettingllms.sandbox.core import SandboxLimits
    probe = Backend("bwrap", python, separate_uid, prlimit=prlimit, setpriv=setpriv)
    lease = UidLease() if separate_uid else None
    tmp = tempfile.mkdtemp(prefix="pllm-probe-")
    try:
        prog = os.path.join(tmp, "main.py")
        with open(prog, "w") as f:
            f.write("import os, socket\nprint(os.getcwd(), len(socket.if_nameindex()))\n")
        os.chmod(tmp, 0o711)
        os.chmod(prog, 0o644)
        cmd, kwargs = launch(probe, lease, SandboxLimits(), bwrap_command(probe, prog, SandboxLimits()))
        r = subprocess.run(cmd, capture_output=True, timeout=20, env={"PATH": MIN_PATH},
                           start_new_session=True, **kwargs)
        want = f"{SANDBOX_DIR} 1"  # cwd is the tmpfs and loopback is the only interface
        if r.returncode != 0 or r.stdout.decode(errors="replace").strip() != want:
            return f"exit {r.returncode}: {r.stderr.decode(errors='replace').strip()[:300]}"
        return None
    except (OSError, subprocess.SubprocessError, RuntimeError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if lease is not None:
            lease.release()
        shutil.rmtree(tmp, ignore_errors=True)


def confined_read_paths(python: str) -> list[str]:
    """What a confined program may read and execute: the folders bwrap binds read-only."""
    paths = [p for p in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
             if os.path.exists(p)]
    prefix = _python_prefix(python)
    return paths + ([prefix] if prefix != "/usr" else [])


_PROBE = """
import os, socket
out = []
try:
    open({outside!r}, 'w').write('x')
    out.append('wrote outside')
except OSError:
    pass
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    out.append('opened a socket')
except OSError:
    pass
open('inside.txt', 'w').write('x')
print(' and '.join(out) or 'contained')
"""


def probe_confinement(python: str, prlimit: str | None, separate_uid: bool,
                      setpriv: str | None = None) -> tuple[str, str | None]:
    """(description, None) when Landlock + seccomp contain a test program here, else
    ("", why not). Tests replace this function to simulate a kernel without them."""
    from pettingllms.sandbox import confine
    from pettingllms.sandbox.core import SandboxLimits, run_with

    abi = confine.landlock_abi()
    if abi < 1:
        return "", "the kernel has no Landlock (or it is disabled)"
    why = confine.seccomp_arch()
    if why:
        return "", f"seccomp: {why}"
    desc = f"Landlock ABI {abi} + seccomp"
    trial = Backend("subprocess", python, separate_uid, prlimit=prlimit, setpriv=setpriv,
                    confinement=desc)
    import tempfile
    outside = tempfile.mkdtemp(prefix="pllm-probe-")
    try:
        os.chmod(outside, 0o777)  # writable for any uid: only Landlock can stop the write
        code = _PROBE.format(outside=os.path.join(outside, "escape.txt"))
        r = run_with(trial, code, "", SandboxLimits(wall_s=20.0, cpu_s=10.0))
    finally:
        shutil.rmtree(outside, ignore_errors=True)
    if r.stdout.strip() != "contained":
        return "", f"confinement probe failed: {(r.error or r.stdout or r.stderr).strip()[:300]}"
    return desc, None


def _weaker(is_root: bool, confinement: str, abi: int) -> list[str]:
    """Exactly what the subprocess backend leaves exposed compared with bwrap."""
    if confinement:
        out = ["no pid namespace: host pids can be probed", "file metadata (stat) is "
               "visible outside the readable folders", "no separate network namespace "
               "(sockets are denied by seccomp instead)"]
        if abi < 6:
            out.append("signals to host processes are not blocked by Landlock (ABI < 6)")
    else:
        out = ["network: any TCP, UDP or UNIX socket the host can reach",
               "files writable by the program's uid anywhere, /tmp and /var/tmp included",
               "the host file system is readable where permissions allow",
               "host processes are visible"]
    if not is_root:
        out += ["programs run as the calling user: the process limit is shared with it and "
                "processes that leave the process group survive the run"]
        if not confinement:
            out += ["they can signal the user's processes, read their /proc/<pid>/environ "
                    "and write the user's files"]
    return out


# --- the policy: refuse uncontained runs unless allowed ------------------------------------

_allow_weak: bool | None = None
_announced: set[str] = set()


def configure(allow_weak: bool | None) -> None:
    """Set `sandbox.allow_weak` for this process (None: the PETTINGLLMS_SANDBOX_ALLOW_WEAK
    env var decides, so standalone scripts can opt in too)."""
    global _allow_weak
    _allow_weak = allow_weak


def allow_weak() -> bool:
    if _allow_weak is not None:
        return bool(_allow_weak)
    return os.environ.get("PETTINGLLMS_SANDBOX_ALLOW_WEAK", "").strip().lower() in (
        "1", "true", "yes")


def refusal(backend: Backend) -> str | None:
    """Why untrusted code must not run on `backend` (None: it may). Says each reason once."""
    if backend.contained:
        return None
    if allow_weak():
        _say_once("allowed", logging.WARNING,
                  "pettingllms sandbox: running untrusted code UNCONTAINED (sandbox.allow_weak="
                  "true; %s); exposed: %s", backend.why_weak, "; ".join(backend.weaker))
        return None
    msg = (f"untrusted code refused: {backend.why_weak}; install bubblewrap, or set "
           f"sandbox.allow_weak=true (env PETTINGLLMS_SANDBOX_ALLOW_WEAK=1) to run it "
           f"exposing: {'; '.join(backend.weaker)}")
    _say_once("refused", logging.ERROR, "pettingllms sandbox: %s", msg)
    return msg


def _say_once(key: str, level: int, fmt: str, *args) -> None:
    with _backend_lock:
        if key in _announced:
            return
        _announced.add(key)
    log.log(level, fmt, *args)


def detect_backend() -> Backend:
    """Pick the strongest backend that works here (once per process).

    PETTINGLLMS_SANDBOX=subprocess forces the fallback (tests use it to check both paths).
    """
    global _backend
    with _backend_lock:
        if _backend is not None:
            return _backend
        python = _sandbox_python()
        prlimit = shutil.which("prlimit")
        is_root = os.geteuid() == 0
        setpriv = shutil.which("setpriv") if is_root else None
        forced = os.environ.get("PETTINGLLMS_SANDBOX", "").strip().lower()
        why_not_bwrap = "forced by PETTINGLLMS_SANDBOX=subprocess"
        if forced != "subprocess":
            if shutil.which("bwrap") is None:
                why_not_bwrap = "bwrap not installed"
            else:
                why_not_bwrap = _probe_bwrap(python, prlimit, separate_uid=is_root, setpriv=setpriv)
                if why_not_bwrap is None:
                    _backend = Backend("bwrap", python, is_root, prlimit=prlimit, setpriv=setpriv)
                elif is_root:
                    # bwrap may fail when started as an unprivileged uid yet work as root;
                    # then process limits are not enforced (the namespace maps to root).
                    err = _probe_bwrap(python, prlimit, separate_uid=False)
                    if err is None:
                        _backend = Backend("bwrap", python, False, prlimit=prlimit, weaker=[
                            "process limit not enforced (bwrap only works as root here)"])
        if _backend is None:
            from pettingllms.sandbox.confine import landlock_abi
            confinement, why_not = probe_confinement(python, prlimit, is_root, setpriv)
            weaker = _weaker(is_root, confinement, landlock_abi() if confinement else 0)
            why_weak = "" if confinement else f"no bubblewrap ({why_not_bwrap}) and no " \
                f"Landlock/seccomp ({why_not})"
            _backend = Backend("subprocess", python, is_root, prlimit=prlimit, setpriv=setpriv,
                               weaker=weaker, confinement=confinement, why_weak=why_weak)
            if confinement:
                log.warning("pettingllms sandbox: bubblewrap unavailable (%s); using the "
                            "subprocess backend confined by %s, weaker than bwrap in: %s",
                            why_not_bwrap, confinement, "; ".join(weaker))
        elif _backend.weaker:
            log.warning("pettingllms sandbox: bwrap backend is weaker here: %s",
                        "; ".join(_backend.weaker))
        return _backend


def reset_backend() -> None:
    """Forget the detected backend (tests switch backends with PETTINGLLMS_SANDBOX)."""
    global _backend
    with _backend_lock:
        _backend = None
        _announced.clear()
