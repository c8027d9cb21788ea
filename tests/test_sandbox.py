"""Hostile programs are contained and reported, and the host is unharmed.

Every hostile test runs on the detected backend (bubblewrap where it works) and on the
forced fallback (PETTINGLLMS_SANDBOX=subprocess), which Landlock + seccomp confine where
the kernel has them; tests/test_sandbox_weak.py covers the fallback's own promises:
containment there, refusal where the kernel offers nothing.
"""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

import pytest

from pettingllms.sandbox import SandboxLimits, SandboxPool, run_python, sandbox_backend
from pettingllms.sandbox import isolation, launch

FAST = SandboxLimits(wall_s=2.0, cpu_s=2.0, memory_mb=512, max_processes=16)


@pytest.fixture(params=["auto", "subprocess"])
def backend(request, monkeypatch):
    if request.param == "subprocess":
        monkeypatch.setenv("PETTINGLLMS_SANDBOX", "subprocess")
    else:
        monkeypatch.delenv("PETTINGLLMS_SANDBOX", raising=False)
    isolation.reset_backend()
    yield sandbox_backend()
    isolation.reset_backend()


@pytest.fixture
def swept_uids(monkeypatch):
    """Record the uid each run used, so a test can check nothing of it is left running."""
    seen: list[int] = []
    real = launch.kill_uid_processes

    def recording(uid):
        seen.append(uid)
        return real(uid)
    monkeypatch.setattr(launch, "kill_uid_processes", recording)
    return seen


def _processes_of(uid: int) -> list[int]:
    return launch.live_uid_processes(uid)


def _host_is_fine() -> None:
    r = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, timeout=30)
    assert r.stdout.strip() == b"42"


def test_runs_code_with_stdin_and_reports(backend):
    r = run_python("import sys\ns = sys.stdin.read()\nprint(s[::-1])\nprint('err', file=sys.stderr)",
                   "abc", FAST)
    assert r.ok and r.stdout == "cba\n" and r.stderr == "err\n" and r.exit_code == 0
    bad = run_python("raise ValueError('boom')", "", FAST)
    assert not bad.ok and bad.exit_code == 1 and "ValueError: boom" in bad.stderr
    assert bad.error is None and not bad.timed_out


def test_cwd_is_a_fresh_writable_dir_and_nothing_else_is(backend, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    prog = f"""
import os
open('mine.txt', 'w').write('ok')
print('cwd-write', open('mine.txt').read(), os.listdir('.'))
for path in [{str(victim)!r}, '/usr/pwned.txt', '/etc/pwned.txt', {str(tmp_path / 'new.txt')!r}]:
    try:
        open(path, 'w').write('pwned')
        print('WROTE', path)
    except OSError as e:
        print('denied', path, type(e).__name__)
"""
    r = run_python(prog, "", FAST)
    assert r.ok, r
    assert "cwd-write ok ['mine.txt']" in r.stdout  # fresh: nothing from earlier runs
    assert "WROTE" not in r.stdout
    assert victim.read_text() == "original"
    assert not (tmp_path / "new.txt").exists()
    assert not os.path.exists("/usr/pwned.txt") and not os.path.exists("/etc/pwned.txt")
    again = run_python("import os; print(os.listdir('.'))", "", FAST)
    assert again.stdout.strip() == "[]"


def test_environment_is_scrubbed_of_secrets(backend, monkeypatch):
    secret = "sk-test-0f1e2d3c4b5a-not-a-real-key"
    monkeypatch.setenv("PETTINGLLMS_FAKE_API_KEY", secret)
    prog = """
import os, sys
print(dict(os.environ))
host = sys.stdin.read().strip()
for path in ['/proc/self/environ', '/proc/1/environ'] + ([f'/proc/{host}/environ'] if host else []):
    try:
        print(path, open(path, 'rb').read())
    except OSError as e:
        print(path, 'denied', type(e).__name__)
"""
    # same-uid fallback (non-root, no bwrap) can read our /proc environ: documented as weaker
    host = str(os.getpid()) if backend.kind == "bwrap" or backend.separate_uid else ""
    r = run_python(prog, host, FAST)
    assert r.ok, r
    assert secret not in r.stdout and "PETTINGLLMS_FAKE_API_KEY" not in r.stdout
    env_line = r.stdout.splitlines()[0]
    assert "PATH" in env_line and "HOME" in env_line and "VIRTUAL_ENV" not in env_line


def test_network_connection_is_blocked(backend):
    if not backend.contained:
        pytest.skip(f"this kernel offers no containment without bwrap: {backend.why_weak}")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    prog = f"""
import socket
try:
    s = socket.create_connection(('127.0.0.1', {port}), timeout=1)
    s.sendall(b'leak')
    print('CONNECTED')
except OSError as e:
    print('blocked', type(e).__name__)
try:
    print('interfaces', [n for _, n in socket.if_nameindex()])
except OSError as e:  # seccomp denies the netlink socket it needs
    print('interfaces denied', type(e).__name__)
"""
    try:
        r = run_python(prog, "", FAST)
        with pytest.raises(socket.timeout):
            server.accept()  # nobody reached our listener
    finally:
        server.close()
    assert "CONNECTED" not in r.stdout and "blocked" in r.stdout, r
    if backend.kind == "bwrap":
        assert "interfaces ['lo']" in r.stdout
    else:
        assert "interfaces denied PermissionError" in r.stdout


def test_infinite_loop_is_stopped(backend):
    r = run_python("while True:\n    pass", "", SandboxLimits(wall_s=1.0, cpu_s=1.0))
    assert r.timed_out and not r.ok and r.error in ("timeout", "cpu_time")
    assert r.wall_s < 4.0
    _host_is_fine()


def test_sleep_past_the_wall_limit(backend, swept_uids):
    t0 = time.monotonic()
    r = run_python("import time\nprint('start', flush=True)\ntime.sleep(60)", "",
                   SandboxLimits(wall_s=1.0))
    assert r.timed_out and r.error == "timeout" and r.stdout == "start\n"
    assert time.monotonic() - t0 < 4.0
    for uid in set(swept_uids):
        assert _processes_of(uid) == []


def test_allocating_8gb_fails_inside(backend):
    r = run_python("x = bytearray(8 * 1024 ** 3)\nprint('allocated')", "", FAST)
    assert not r.ok and r.error == "memory" and "allocated" not in r.stdout
    _host_is_fine()


def test_printing_1gb_is_cut_at_the_output_cap(backend):
    prog = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)"
    limits = SandboxLimits(wall_s=10.0, cpu_s=10.0, max_output_bytes=100_000)
    r = run_python(prog, "", limits)
    assert r.error == "output_limit" and not r.ok
    assert len(r.stdout) <= 100_000 and r.wall_s < 8.0


def test_huge_file_is_limited(backend):
    prog = "f = open('big.bin', 'wb')\nfor _ in range(64):\n    f.write(b'x' * (1 << 20))\nf.close()"
    r = run_python(prog, "", SandboxLimits(file_size_mb=2))
    assert not r.ok and r.error == "file_size", r


def test_fork_bomb_is_capped_and_cleaned_up(backend, swept_uids):
    counting = """
import os, time
n = 0
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print(n, flush=True)
"""
    limits = SandboxLimits(wall_s=2.0, cpu_s=2.0, max_processes=16)
    r = run_python(counting, "", limits)
    if backend.separate_uid:  # RLIMIT_NPROC is only enforced for a non-root uid
        assert int(r.stdout.split()[0]) < 16, r
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    t0 = time.monotonic()
    r = run_python(bomb, "", limits)
    assert not r.ok and r.timed_out and time.monotonic() - t0 < 8.0
    assert swept_uids or not backend.separate_uid, "a separate uid was leased and swept"
    for uid in set(swept_uids):
        assert _processes_of(uid) == [], f"processes of sandbox uid {uid} survived"
    _host_is_fine()


def test_daemonised_children_do_not_survive(backend, swept_uids):
    prog = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(60)
    os._exit(0)
print('parent done')
"""
    r = run_python(prog, "", FAST)
    assert r.ok and r.stdout == "parent done\n"
    for uid in set(swept_uids):
        assert _processes_of(uid) == []


def test_killing_its_parent_leaves_the_host_alive(backend):
    prog = """
import os, signal, sys
host = sys.stdin.read().strip()
for pid in [os.getppid(), 1] + ([int(host)] if host else []):
    try:
        os.kill(pid, signal.SIGKILL)
        print('killed', pid)
    except OSError as e:
        print('denied', pid, type(e).__name__)
"""
    # a same-uid fallback could kill us by pid (documented as weaker): only aim at us when
    # the sandbox claims to prevent it
    host = str(os.getpid()) if backend.kind == "bwrap" or backend.separate_uid else ""
    r = run_python(prog, host, FAST)
    assert f"killed {os.getpid()}" not in r.stdout  # we are still here to assert it
    assert r.error is None or r.error.startswith("signal") or r.exit_code is not None
    _host_is_fine()


def test_garbage_inputs_never_raise(backend):
    for code in ["", "\x00\x00", "def (", "\udcff", "x" * 200_000]:
        r = run_python(code, "\udcff" * 3, FAST)
        assert isinstance(r.stdout, str) and r.wall_s >= 0
    r = run_python("print('ignores stdin')", "y" * 5_000_000, FAST)  # no pipe deadlock
    assert r.ok and r.stdout == "ignores stdin\n"


def test_pool_keeps_order_and_does_not_block_the_event_loop():
    pool = SandboxPool(2)
    try:
        jobs = [(f"print({i} * int(input()))", "3") for i in range(6)]
        results = pool.run_many(jobs, FAST)
        assert [r.stdout.strip() for r in results] == [str(3 * i) for i in range(6)]

        async def main():
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.05)
                    ticks += 1
            t = asyncio.create_task(ticker())
            rs = await asyncio.gather(*[pool.arun("import time; time.sleep(0.6); print('z')", "",
                                                  FAST) for _ in range(2)])
            t.cancel()
            return rs, ticks
        rs, ticks = asyncio.run(main())
        assert all(r.ok and r.stdout == "z\n" for r in rs)
        assert ticks >= 5  # the loop kept running while programs slept
    finally:
        pool.close()
    with pytest.raises(ValueError):
        SandboxPool(0)


def test_limits_hold_without_util_linux_prlimit(backend, monkeypatch):
    monkeypatch.setattr(backend, "prlimit", None)  # rlimits then come from a preexec_fn
    r = run_python("x = bytearray(8 * 1024 ** 3)", "", FAST)
    assert r.error == "memory"
    r = run_python("while True:\n    pass", "", SandboxLimits(wall_s=5.0, cpu_s=1.0))
    assert r.timed_out and r.error == "cpu_time" and r.wall_s < 4.0


@pytest.mark.parametrize("with_setpriv", [True, False])
def test_program_runs_as_a_leased_uid_with_no_groups(monkeypatch, with_setpriv):
    """As root, the program's real and effective uid/gid are a leased sandbox uid and it holds no
    supplementary groups, whether setpriv switches (no fork of this process) or Popen does."""
    if os.geteuid() != 0:
        pytest.skip("uid separation needs root")
    monkeypatch.setenv("PETTINGLLMS_SANDBOX", "subprocess")
    isolation.reset_backend()
    try:
        backend = sandbox_backend()
        assert backend.separate_uid
        if not with_setpriv:
            monkeypatch.setattr(backend, "setpriv", None)
        elif backend.setpriv is None:
            pytest.skip("util-linux setpriv is not installed")
        r = run_python("import os\nprint(os.getresuid(), os.getresgid(), os.getgroups())", "", FAST)
        assert r.ok, r
        uid = int(r.stdout.split(",")[0].strip("( "))  # the real uid
        assert launch.UID_BASE <= uid < launch.UID_BASE + launch.UID_COUNT
        assert r.stdout.strip() == f"({uid}, {uid}, {uid}) ({uid}, {uid}, {uid}) []"
    finally:
        isolation.reset_backend()


def test_launch_switches_uid_in_the_exec_chain_when_setpriv_is_there():
    """With setpriv, Popen gets no user=/group=/preexec_fn (CPython then vforks instead of
    copying a large caller), and the limits are applied after the uid switch."""
    class Lease:
        uid = launch.UID_BASE + 3

    backend = launch.Backend("subprocess", "/usr/bin/python3", True, prlimit="/p/prlimit",
                             setpriv="/p/setpriv")
    cmd, kwargs = launch.wrap(backend, Lease(), FAST, ["prog"])
    assert kwargs == {}
    assert cmd[:5] == ["/p/setpriv", f"--reuid={Lease.uid}", f"--regid={Lease.uid}", "--clear-groups", "--"]
    assert cmd[5] == "/p/prlimit" and cmd[-1] == "prog"
    backend.setpriv = None
    cmd, kwargs = launch.wrap(backend, Lease(), FAST, ["prog"])
    assert kwargs == {"user": Lease.uid, "group": Lease.uid, "extra_groups": []} and cmd[0] == "/p/prlimit"


def test_the_program_gets_a_parent_death_signal_after_the_uid_switch():
    """A rollout worker killed with kill -9 takes its sandboxed programs along: setpriv sets the
    parent-death signal after the uid switch (a credential change clears it). The behaviour with a
    real Ray worker: test_backend_ray.py::test_sandboxed_programs_die_with_a_rollout_worker_killed_by_pid."""
    lease = type("Lease", (), {"uid": 61000})()
    root = launch.Backend("subprocess", "/usr/bin/python3", True, prlimit="/usr/bin/prlimit",
                          setpriv="/usr/bin/setpriv", pdeathsig="/usr/bin/setpriv")
    cmd, kwargs = launch.wrap(root, lease, SandboxLimits(), ["python3", "prog"], "KILL")
    assert cmd[:7] == ["/usr/bin/setpriv", "--reuid=61000", "--regid=61000", "--clear-groups", "--pdeathsig",
                       "KILL", "--"] and cmd.count("--pdeathsig") == 1 and not kwargs
    same_uid = launch.Backend("subprocess", "/usr/bin/python3", False, prlimit="/usr/bin/prlimit",
                              pdeathsig="/usr/bin/setpriv")
    cmd, _ = launch.wrap(same_uid, None, SandboxLimits(), ["timeout", "prog"], "TERM")
    assert cmd[:4] == ["/usr/bin/setpriv", "--pdeathsig", "TERM", "--"] and cmd[-2:] == ["timeout", "prog"]
    old_setpriv = launch.Backend("subprocess", "/usr/bin/python3", False, prlimit="/usr/bin/prlimit")
    assert "--pdeathsig" not in launch.wrap(old_setpriv, None, SandboxLimits(), ["prog"], "KILL")[0]
    assert "--pdeathsig" not in launch.wrap(root, lease, SandboxLimits(), ["bwrap"], None)[0]  # bwrap: its own
