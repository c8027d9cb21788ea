"""The sandbox without bubblewrap: Landlock + seccomp contain the hostile cases; where the
kernel offers neither (simulated through `isolation.probe_confinement`), untrusted code is
refused unless `sandbox.allow_weak` is set, and then the exposure is stated in one line.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import uuid

import pytest

from pettingllms.sandbox import (SandboxLimits, configure_sandbox, error_kind, run_python,
                                 sandbox_backend, sandbox_counts)
from pettingllms.sandbox import confine, isolation

FAST = SandboxLimits(wall_s=5.0, cpu_s=5.0, memory_mb=512, max_processes=16)


def _use(monkeypatch, *, kernel_has_confinement: bool, allow_weak: bool | None = None):
    monkeypatch.setenv("PETTINGLLMS_SANDBOX", "subprocess")
    monkeypatch.delenv("PETTINGLLMS_SANDBOX_ALLOW_WEAK", raising=False)
    if not kernel_has_confinement:
        monkeypatch.setattr(isolation, "probe_confinement",
                            lambda *a, **k: ("", "Landlock unavailable (simulated)"))
    configure_sandbox(allow_weak)
    isolation.reset_backend()
    return sandbox_backend()


@pytest.fixture(autouse=True)
def _restore():
    yield
    configure_sandbox(None)
    isolation.reset_backend()


@pytest.fixture
def targets():
    """A TCP listener on 127.0.0.1, a world-writable UNIX socket, and host paths in /tmp and
    /var/tmp that a program must not be able to create."""
    tag = uuid.uuid4().hex[:12]
    files = [f"/tmp/pllm-hostile-{tag}.txt", f"/var/tmp/pllm-hostile-{tag}.txt"]
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(4)
    tcp.settimeout(0.3)
    folder = tempfile.mkdtemp(prefix="pllm-unix-", dir="/tmp")
    os.chmod(folder, 0o777)
    path = os.path.join(folder, "s.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(path)
    os.chmod(path, 0o777)
    unix.listen(4)
    unix.settimeout(0.3)
    yield {"files": files, "port": tcp.getsockname()[1], "unix": path, "tcp_srv": tcp,
           "unix_srv": unix}
    tcp.close()
    unix.close()
    shutil.rmtree(folder, ignore_errors=True)
    for f in files:
        if os.path.exists(f):
            os.remove(f)


def _hostile(t) -> str:
    return f"""
import socket
for path in {t['files']!r}:
    try:
        open(path, 'w').write('pwned')
        print('WROTE', path)
    except OSError as e:
        print('denied', path, type(e).__name__)
for family, addr in ((socket.AF_INET, ('127.0.0.1', {t['port']})), (socket.AF_UNIX, {t['unix']!r})):
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(addr)
        s.sendall(b'leak')
        print('CONNECTED', family)
    except OSError as e:
        print('denied', family, type(e).__name__)
"""


def _reached(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
        return True
    except socket.timeout:
        return False


def test_hostile_cases_are_contained_by_landlock_and_seccomp(monkeypatch, targets):
    backend = _use(monkeypatch, kernel_has_confinement=True)
    if not backend.confinement:
        pytest.skip(f"this kernel has no Landlock/seccomp: {backend.why_weak}")
    assert backend.contained and confine.landlock_abi() >= 1
    r = run_python(_hostile(targets), "", FAST)
    assert r.ok, r
    assert "WROTE" not in r.stdout and "CONNECTED" not in r.stdout, r.stdout
    assert r.stdout.count("denied") == 4
    assert not any(os.path.exists(f) for f in targets["files"])
    assert not _reached(targets["tcp_srv"]) and not _reached(targets["unix_srv"])


def test_uncontained_backend_refuses_and_the_program_never_runs(monkeypatch, targets, caplog):
    backend = _use(monkeypatch, kernel_has_confinement=False)
    assert not backend.contained and "simulated" in backend.why_weak
    before = sandbox_counts()
    with caplog.at_level(logging.ERROR, logger="pettingllms.sandbox.isolation"):
        results = [run_python(_hostile(targets), "", FAST) for _ in range(3)]
    for r in results:
        assert r.error.startswith("refused: ") and r.exit_code is None and r.stdout == ""
        assert "sandbox.allow_weak=true" in r.error and error_kind(r.error) == "refused"
    assert not any(os.path.exists(f) for f in targets["files"])
    assert not _reached(targets["tcp_srv"]) and not _reached(targets["unix_srv"])
    refusals = [rec for rec in caplog.records if "refused" in rec.getMessage()]
    assert len(refusals) == 1  # said once, not per program
    after = sandbox_counts()
    assert after.get("errors/refused", 0) - before.get("errors/refused", 0) == 3
    assert after["runs"] - before.get("runs", 0) == 3


def test_allow_weak_runs_uncontained_and_says_exactly_what_is_exposed(monkeypatch, targets,
                                                                      caplog):
    """The control case: the same program really leaks when nothing contains it, so the
    containment above is what stopped it."""
    backend = _use(monkeypatch, kernel_has_confinement=False, allow_weak=True)
    with caplog.at_level(logging.WARNING, logger="pettingllms.sandbox.isolation"):
        r = run_python(_hostile(targets), "", FAST)
        run_python("print(1)", "", FAST)
    assert r.ok and r.error is None, r
    assert "WROTE /tmp/" in r.stdout and "CONNECTED" in r.stdout
    assert _reached(targets["tcp_srv"]) and _reached(targets["unix_srv"])
    lines = [rec.getMessage() for rec in caplog.records if "UNCONTAINED" in rec.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    for exposed in ("network", "/tmp and /var/tmp", "readable", "host processes"):
        assert exposed in lines[0]
    assert lines[0].endswith("; ".join(backend.weaker))


def test_allow_weak_from_the_environment(monkeypatch):
    _use(monkeypatch, kernel_has_confinement=False)
    assert run_python("print(2)", "", FAST).error.startswith("refused")
    monkeypatch.setenv("PETTINGLLMS_SANDBOX_ALLOW_WEAK", "1")
    r = run_python("print(2)", "", FAST)
    assert r.ok and r.stdout == "2\n"
    configure_sandbox(False)  # the config, when given, wins over the environment
    assert run_python("print(2)", "", FAST).error.startswith("refused")


def test_a_failing_launcher_never_runs_the_program_unconfined(monkeypatch, tmp_path):
    backend = _use(monkeypatch, kernel_has_confinement=True)
    if not backend.confinement:
        pytest.skip(f"this kernel has no Landlock/seccomp: {backend.why_weak}")
    # a writable dir that cannot be opened makes the Landlock rule, and so the launcher, fail
    real = confine.launcher_args
    monkeypatch.setattr(confine, "launcher_args",
                        lambda python, prog, read, write: real(python, prog, read,
                                                               write + "/missing"))
    r = run_python("print('RAN')", "", FAST)
    assert "RAN" not in r.stdout and r.error.startswith("sandbox_error: confinement failed")
    assert error_kind(r.error) == "internal"


def test_error_counts_by_kind(monkeypatch):
    _use(monkeypatch, kernel_has_confinement=True)
    before = sandbox_counts()
    run_python("print('fine')", "", FAST)
    run_python("raise SystemExit(3)", "", FAST)  # the program's own failure: not a sandbox error
    run_python("x = bytearray(8 * 1024 ** 3)", "", FAST)
    run_python("import time; time.sleep(30)", "", SandboxLimits(wall_s=0.5))
    after = sandbox_counts()
    diff = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert diff == {"runs": 4, "errors/memory": 1, "errors/timeout": 1}
    assert [error_kind(e) for e in ("cpu_time", "signal:SIGSEGV", "sandbox_error: x", None)] \
        == ["timeout", "crash", "internal", None]


def test_step_metrics_and_the_domination_warning():
    from pettingllms.trainer.metrics import counter_delta, sandbox_warning

    before = {"runs": 10, "errors/timeout": 2}
    after = {"runs": 16, "errors/timeout": 4, "errors/refused": 2}
    m = counter_delta(before, after, "sandbox")
    assert m == {"sandbox/runs": 6.0, "sandbox/errors/timeout": 2.0,
                 "sandbox/errors/refused": 2.0, "sandbox/errors": 4.0}
    line = sandbox_warning(m)
    assert line.startswith("4 of 6 sandbox runs") and "refused 2" in line and "timeout 2" in line
    assert sandbox_warning(counter_delta(before, {"runs": 16, "errors/timeout": 5},
                                         "sandbox")) is None  # 3 of 6: not more than half
    assert sandbox_warning(counter_delta(before, before, "sandbox")) is None  # no runs
    assert counter_delta({}, {"errors/TypeError": 1}, "judge") == {
        "judge/errors/TypeError": 1.0, "judge/errors": 1.0}
