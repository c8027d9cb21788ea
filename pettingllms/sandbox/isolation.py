"""Which backend isolates sandboxed programs here, and whether an uncontained one may run them.

Two backends (how each starts a program: `launch.py`):
  bwrap       bubblewrap: new user/pid/net/ipc/uts namespaces, a root that holds only
              /usr (read-only), a fresh size-limited tmpfs as cwd and /tmp, /proc of its
              own pid namespace. No network interface but loopback.
  subprocess  fallback when bwrap is missing or broken: `python -I` in a new session with
              rlimits, cwd a fresh host temp dir, confined by Landlock (files) and seccomp
              (sockets) where the kernel has them (see `confine.py`). Without them it is
              not contained at all: untrusted code is then refused unless the user allows
              it (`sandbox.allow_weak=true`). What stays weaker is `Backend.weaker`.
Each candidate is probed by running a small program on it before it is chosen.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading

from pettingllms.sandbox import confine
from pettingllms.sandbox.launch import MIN_PATH, SANDBOX_DIR, Backend, UidLease, bwrap_command, wrap
from pettingllms.sandbox.limits import SandboxLimits
from pettingllms.sandbox.process import run_with

log = logging.getLogger(__name__)


def _sandbox_python() -> str:
    """A system interpreter readable by an unprivileged uid (a venv under /root is not)."""
    forced = os.environ.get("PETTINGLLMS_SANDBOX_PYTHON")
    if forced:
        return forced
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(cand):
            return cand
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


# --- backend detection ----------------------------------------------------------------------

_backend: Backend | None = None
_backend_lock = threading.Lock()


def _probe_bwrap(python: str, prlimit: str | None, separate_uid: bool,
                 setpriv: str | None = None) -> str | None:
    """Run a tiny program through the real bwrap command line; None if it works."""
    probe = Backend("bwrap", python, separate_uid, prlimit=prlimit, setpriv=setpriv)
    lease = UidLease() if separate_uid else None
    tmp = tempfile.mkdtemp(prefix="pllm-probe-")
    try:
        prog = os.path.join(tmp, "main.py")
        with open(prog, "w") as f:
            f.write("import os, socket\nprint(os.getcwd(), len(socket.if_nameindex()))\n")
        os.chmod(tmp, 0o711)
        os.chmod(prog, 0o644)
        cmd, kwargs = wrap(probe, lease, SandboxLimits(), bwrap_command(probe, prog, SandboxLimits()))
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
    abi = confine.landlock_abi()
    if abi < 1:
        return "", "the kernel has no Landlock (or it is disabled)"
    why = confine.seccomp_arch()
    if why:
        return "", f"seccomp: {why}"
    desc = f"Landlock ABI {abi} + seccomp"
    trial = Backend("subprocess", python, separate_uid, prlimit=prlimit, setpriv=setpriv,
                    confinement=desc)
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
            confinement, why_not = probe_confinement(python, prlimit, is_root, setpriv)
            weaker = _weaker(is_root, confinement, confine.landlock_abi() if confinement else 0)
            pdeathsig = _pdeathsig_setpriv()
            if pdeathsig is None:
                weaker.append("a program outlives a worker killed with kill -9 (no setpriv --pdeathsig)")
            why_weak = "" if confinement else f"no bubblewrap ({why_not_bwrap}) and no " \
                f"Landlock/seccomp ({why_not})"
            _backend = Backend("subprocess", python, is_root, prlimit=prlimit, setpriv=setpriv,
                               weaker=weaker, confinement=confinement, why_weak=why_weak,
                               pdeathsig=pdeathsig)
            if confinement:
                log.warning("pettingllms sandbox: bubblewrap unavailable (%s); using the "
                            "subprocess backend confined by %s, weaker than bwrap in: %s",
                            why_not_bwrap, confinement, "; ".join(weaker))
        elif _backend.weaker:
            log.warning("pettingllms sandbox: bwrap backend is weaker here: %s",
                        "; ".join(_backend.weaker))
        return _backend


def _pdeathsig_setpriv() -> str | None:
    """util-linux setpriv where it can set a parent-death signal (2.33 and later), else None."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        ok = subprocess.run([path, "--pdeathsig", "KILL", "--", "true"], capture_output=True, timeout=10,
                            env={"PATH": MIN_PATH}).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return path if ok else None


def reset_backend() -> None:
    """Forget the detected backend (tests switch backends with PETTINGLLMS_SANDBOX)."""
    global _backend
    with _backend_lock:
        _backend = None
        _announced.clear()
