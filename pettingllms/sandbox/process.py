"""Run one program on a given backend with stdin, limits and captured output.

The program text goes into a fresh temp dir; the process starts in a new session
(its own process group) under the backend's command line (`launch.py`).
We stream stdout/stderr with a byte cap and a wall-clock deadline, and on any stop
(timeout, output cap, normal exit) SIGKILL the whole process group and then any
process still running under the program's leased uid.
"""
from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time

from pettingllms.sandbox import confine, launch
from pettingllms.sandbox.limits import SandboxLimits, SandboxResult

_CHUNK = 65536


def _pump(proc: subprocess.Popen, stdin: bytes, cap: int, deadline: float
          ) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin and read both pipes until EOF, the deadline or the output cap."""
    sel = selectors.DefaultSelector()
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    for stream in (proc.stdout, proc.stderr):
        sel.register(stream.fileno(), selectors.EVENT_READ)
    in_fd, sent = proc.stdin.fileno(), 0
    if stdin:
        os.set_blocking(in_fd, False)
        sel.register(in_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    total, timed_out, over = 0, False, False
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            events = sel.select(min(left, 0.05))
            if not events and _exited(proc.pid):
                # The program is done; a descendant may hold the pipes open. Take what is
                # buffered and stop (the group and uid sweep kill such descendants).
                for fd in list(bufs):
                    if fd in sel.get_map():
                        os.set_blocking(fd, False)
                        try:
                            while total <= cap and (data := os.read(fd, _CHUNK)):
                                bufs[fd] += data[:max(cap - total, 0)]
                                total += len(data)
                        except BlockingIOError:
                            pass
                over = total > cap
                break
            for key, _ in events:
                fd = key.fd
                if fd == in_fd:
                    try:
                        sent += os.write(fd, stdin[sent:sent + _CHUNK])
                    except (BrokenPipeError, BlockingIOError, OSError) as e:
                        if isinstance(e, BlockingIOError):
                            continue
                        sent = len(stdin)  # program closed stdin; stop feeding
                    if sent >= len(stdin):
                        sel.unregister(fd)
                        proc.stdin.close()
                    continue
                data = os.read(fd, _CHUNK)
                if not data:
                    sel.unregister(fd)
                    continue
                room = cap - total
                bufs[fd] += data[:max(room, 0)]
                total += len(data)
                if total > cap:
                    over = True
                    break
            if over:
                break
    finally:
        sel.close()
    return (bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]),
            timed_out, over)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: pgid == pid
    except (ProcessLookupError, PermissionError):
        pass


def _classify(exit_code: int | None, stderr: str, timed_out: bool, over: bool) -> str | None:
    if timed_out:
        return "timeout"
    if over:
        return "output_limit"
    if exit_code is None or exit_code == 0:
        return None
    tail = stderr[-2000:]
    if exit_code == -signal.SIGXCPU:
        return "cpu_time"
    if exit_code == -signal.SIGXFSZ or "File too large" in tail:
        return "file_size"
    if "MemoryError" in tail or "Cannot allocate memory" in tail:
        return "memory"
    if "Resource temporarily unavailable" in tail and ("fork" in tail or "BlockingIOError" in tail
                                                      or "spawn" in tail):
        return "process_limit"
    if exit_code < 0:
        try:
            return f"signal:{signal.Signals(-exit_code).name}"
        except ValueError:
            return f"signal:{-exit_code}"
    return None  # ordinary failure (exception, sys.exit(n)): exit_code says it


def run_with(backend: launch.Backend, code: str, stdin: str = "",
             limits: SandboxLimits | None = None) -> SandboxResult:
    """Run on the given backend; never raises for bad programs (`run_python` picks the backend,
    the confinement probe passes the one it tries)."""
    limits = limits or SandboxLimits()
    start = time.monotonic()
    try:
        code_bytes = code.encode("utf-8", errors="replace")
        stdin_bytes = (stdin or "").encode("utf-8", errors="replace")
    except Exception as e:  # noqa: BLE001 - a sandbox problem must not crash the caller
        return SandboxResult("", "", None, False, f"sandbox_error: {e}", 0.0)
    lease = launch.UidLease() if backend.separate_uid else None
    tmp = tempfile.mkdtemp(prefix="pllm-sbx-")
    proc = None
    try:
        # tmp/main.py is read-only for the program; tmp/work is its writable cwd (fallback)
        os.chmod(tmp, 0o711)
        prog, work = os.path.join(tmp, "main.py"), os.path.join(tmp, "work")
        with open(prog, "wb") as f:
            f.write(code_bytes)
        os.chmod(prog, 0o644)
        os.mkdir(work, 0o700)
        if lease is not None:
            os.chown(work, lease.uid, lease.uid)
        death = None  # bwrap dies with us by itself (--die-with-parent) and takes the program along
        if backend.kind == "bwrap":
            cmd, cwd = launch.bwrap_command(backend, prog, limits), tmp
            env = {"PATH": launch.MIN_PATH}
        else:
            cmd, cwd = [backend.python, "-I", prog], work
            if backend.confinement:  # Landlock + seccomp, applied by a launcher before exec
                cmd = confine.launcher_args(backend.python, prog,
                                            launch.confined_read_paths(backend.python), work)
            if not backend.separate_uid and shutil.which("timeout"):
                # same uid as us: put a process between us and the program, so
                # os.kill(os.getppid(), ...) hits `timeout`, not the caller
                cmd = ["timeout", "-k", "1", "-s", "KILL", f"{int(limits.wall_s) + 2}s"] + cmd
            # if this worker dies: the program's launcher is told. `timeout` passes TERM on to the
            # program's whole process group and sends KILL 1 s later (-k 1); without it, KILL
            death = "TERM" if cmd[0] == "timeout" else "KILL"
            env = {"PATH": launch.MIN_PATH, "LANG": "C.UTF-8", "HOME": work, "TMPDIR": work,
                   "PYTHONIOENCODING": "utf-8"}
        cmd, kwargs = launch.wrap(backend, lease, limits, cmd, death)
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=cwd, env=env, close_fds=True,
                                start_new_session=True, **kwargs)
        out, err, timed_out, over = _pump(proc, stdin_bytes, int(limits.max_output_bytes),
                                          start + float(limits.wall_s))
        if not (timed_out or over):
            timed_out = not _wait_unreaped(proc.pid, start + float(limits.wall_s))
        _kill_group(proc)  # before reaping, so the group id cannot have been reused
        exit_code = proc.wait()
        if backend.kind == "bwrap" and exit_code > 128:
            exit_code = -(exit_code - 128)  # bwrap reports death by signal N as 128 + N
        stderr = err.decode("utf-8", errors="replace")
        if exit_code == -signal.SIGKILL and not (timed_out or over):
            timed_out = _cpu_exhausted(limits, start)  # hard CPU limit sends SIGKILL
        error = _classify(exit_code, stderr, timed_out, over)
        if exit_code == confine.CONFINE_FAILED_EXIT and confine.FAILED_TAG in stderr:
            error = "sandbox_error: confinement failed: " + stderr.split(
                confine.FAILED_TAG, 1)[1].strip()[:300]
        if exit_code in (-signal.SIGXCPU,) or error == "cpu_time":
            timed_out, error = True, "cpu_time"
        if timed_out or over:
            exit_code = None if exit_code == -signal.SIGKILL else exit_code
        return SandboxResult(out.decode("utf-8", errors="replace"), stderr, exit_code,
                             timed_out, error, time.monotonic() - start)
    except Exception as e:  # noqa: BLE001
        if proc is not None:
            _kill_group(proc)
            proc.wait()
        return SandboxResult("", "", None, False, f"sandbox_error: {type(e).__name__}: {e}",
                             time.monotonic() - start)
    finally:
        if proc is not None:
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    stream.close()
                except OSError:
                    pass
        if lease is not None:
            launch.kill_uid_processes(lease.uid)
            lease.release()
        shutil.rmtree(tmp, ignore_errors=True)


def _exited(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:
        return True


def _wait_unreaped(pid: int, deadline: float) -> bool:
    """Wait for `pid` to exit without reaping it; False if the deadline passed first."""
    delay = 0.001
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.02)


def _cpu_exhausted(limits: SandboxLimits, start: float) -> bool:
    """SIGKILL without our own kill: the RLIMIT_CPU hard limit (soft + 1 s) fired."""
    return time.monotonic() - start >= float(limits.cpu_s)
