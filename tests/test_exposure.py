"""No listener of the project accepts an unauthenticated client from outside the machine.

A short real `trainer.backend=ray` run (its own private Ray) and the MetaAgent-X demo served on
a non-loopback HOST: every TCP socket their process trees listen on is listed (psutil); each one
not bound to loopback must refuse a client without the token, reached over 127.0.0.1 (a Ray
request without a token for Ray's gRPC ports, a bare HTTP request for the others). The private
Ray's own GCS must refuse a tokenless driver even on loopback (other users of a shared node can
reach loopback), its token file is 0600 and gone after the run. Only loopback is ever a target.
"""
from __future__ import annotations

import http.client
import ipaddress
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from net_helpers import free_port
from pettingllms.ui.app import create_app
from trainer_fixtures import trainer_cfg

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# One cheap read-only method of each Ray gRPC service a node runs: GCS, raylet, core worker,
# dashboard agent. A port that answers any of them without a token is open.
RAY_METHODS = ("/ray.rpc.NodeInfoGcsService/GetClusterId", "/ray.rpc.NodeManagerService/GetAgentPIDs",
               "/ray.rpc.CoreWorkerService/GetCoreWorkerStats", "/ray.rpc.ReporterService/HealthCheck",
               "/ray.rpc.LogService/ListLogs")


def listeners(root_pid: int) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every TCP socket the process tree listens on."""
    root = psutil.Process(root_pid)
    pids = {p.pid: p for p in [root, *root.children(recursive=True)]}
    found = []
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids:
            try:
                name = pids[c.pid].name()
            except psutil.NoSuchProcess:
                continue
            found.append((name, c.laddr.ip, c.laddr.port))
    return found


def is_loopback(ip: str) -> bool:
    return ipaddress.ip_address(ip.removeprefix("::ffff:")).is_loopback


def grpc_answers_without_token(port: int) -> str | None:
    """The Ray method this port answered with no token, or None."""
    import grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        for method in RAY_METHODS:
            call = channel.unary_unary(method, request_serializer=lambda _: b"", response_deserializer=bytes)
            try:
                call(None, timeout=5)
                return method
            except grpc.RpcError:
                continue
        return None
    finally:
        channel.close()


def http_status(port: int, path: str = "/", headers: dict | None = None) -> int | None:
    """The status of a bare GET over 127.0.0.1, or None if the port speaks no HTTP/1."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers=headers or {})
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def open_ports(root_pid: int) -> list[str]:
    """Every non-loopback listener of the tree that serves a client without a token."""
    problems = []
    for name, ip, port in listeners(root_pid):
        if is_loopback(ip):
            continue
        method = grpc_answers_without_token(port)
        status = None if method else http_status(port)
        if method or (status is not None and status < 400):
            problems.append(f"{name} on {ip}:{port} served {method or f'GET / ({status})'} without a token")
    return problems


def tokenless_driver(gcs_address: str) -> subprocess.CompletedProcess:
    """A second process, without the run's token, tries to join the Ray at gcs_address."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    code = ("import ray, sys\n"
            f"ray.init(address={gcs_address!r}, logging_level='ERROR', log_to_driver=False)\n"
            "print('JOINED', ray.get(ray.remote(lambda: 1).remote()))\n")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_a_ray_run_listens_on_loopback_with_token_auth(tmp_path, monkeypatch):
    import ray

    from pettingllms.trainer.local import LocalTrainer
    from pettingllms.utils.private_ray import accepts_without_token, token_path

    assert not ray.is_initialized()
    monkeypatch.setenv("PYTHONPATH", str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cfg = trainer_cfg(tmp_path, "trainer.backend=ray", "ray.worker_imports=[trainer_fixtures]",
                      "ray.num_cpus=2", "ray.cpus_per_worker=0.5", "ray.num_rollout_workers=1",
                      "ray.step_timeout_s=120")
    trainer = LocalTrainer(cfg)
    try:
        assert len(trainer.fit(max_steps=1)) == 1  # the rollout worker (a Ray actor) played a step
        path = token_path()
        assert path and stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        sockets = listeners(os.getpid())
        names = {name for name, _, _ in sockets}
        assert "gcs_server" in names and "raylet" in names, sockets  # the whole tree was seen
        assert open_ports(os.getpid()) == []
        gcs = ray.get_runtime_context().gcs_address
        assert gcs.startswith("127.0.0.1:"), gcs
        assert not accepts_without_token(gcs)  # what the join warning asks of a cluster
        joined = tokenless_driver(gcs)
        assert joined.returncode != 0 and "JOINED" not in joined.stdout, joined.stdout + joined.stderr[-2000:]
        assert "Authentication" in joined.stderr or "token" in joined.stderr, joined.stderr[-2000:]
    finally:
        trainer.close()
    assert not ray.is_initialized()
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
    assert "RAY_AUTH_TOKEN_PATH" not in os.environ or os.environ["RAY_AUTH_TOKEN_PATH"] != path


def test_demo_token_refuses_requests_without_it(tmp_path):
    client = create_app(lambda *a: None, tmp_path / "runs", token="s3cret").test_client()
    for path in ("/", "/api/health", "/runs/x/index.html"):
        assert client.get(path).status_code == 401
    assert client.post("/api/run", json={"question": "1+1"}).status_code == 401
    assert client.get("/api/health", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/api/health", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    page = client.get("/?token=s3cret")  # the printed address: sets the cookie the page then sends
    assert page.status_code == 200 and "HttpOnly" in page.headers["Set-Cookie"]
    assert client.get("/api/health").status_code == 200
    assert create_app(lambda *a: None, tmp_path / "r2").test_client().get("/api/health").status_code == 200


def test_demo_needs_a_token_off_loopback(monkeypatch):
    from pettingllms.ui.serve import demo_token

    monkeypatch.delenv("DEMO_TOKEN", raising=False)
    assert demo_token("127.0.0.1") == (None, False) and demo_token("localhost") == (None, False)
    for host in ("0.0.0.0", "::", "", "192.0.2.7", "myhost"):
        token, told = demo_token(host)
        assert token and len(token) >= 24 and told
    monkeypatch.setenv("DEMO_TOKEN", "given")
    assert demo_token("0.0.0.0") == ("given", False) and demo_token("127.0.0.1") == ("given", False)


def _serve(tmp_path: Path, host: str, port: int) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, "HOST": host, "PORT": str(port), "RUNS_DIR": str(tmp_path / "runs"),
           "PYTHON": sys.executable, "ENGINE": "hf", "MODEL": "tiny:expo", "CHECKPOINT": "none", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("DEMO_TOKEN", None)
    log = tmp_path / f"serve-{port}.log"
    proc = subprocess.Popen(["bash", "scripts/evaluate/autoevol/serve_ui.sh", "model=tiny", "model.path=tiny:expo",
                             f"trainer.output_dir={tmp_path / 'outputs'}"],
                            cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        if http_status(port, "/api/health") is not None:
            return proc, log
        time.sleep(0.5)
    raise AssertionError(log.read_text()[-3000:])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
    proc.wait(timeout=30)


@pytest.mark.slow
def test_the_demo_binds_loopback_and_off_loopback_refuses_without_its_token(tmp_path):
    port = free_port()
    proc, _ = _serve(tmp_path, "127.0.0.1", port)  # the default
    try:
        sockets = listeners(proc.pid)
        assert sockets and all(is_loopback(ip) for _, ip, _ in sockets), sockets
        assert http_status(port, "/api/health") == 200
    finally:
        _stop(proc)

    port = free_port()
    proc, log = _serve(tmp_path, "0.0.0.0", port)  # the explicit opt-in
    try:
        exposed = [(ip, p) for _, ip, p in listeners(proc.pid) if not is_loopback(ip)]
        assert ("0.0.0.0", port) in exposed, exposed
        assert open_ports(proc.pid) == []
        assert http_status(port, "/api/health") == 401
        printed = [line for line in log.read_text().splitlines() if "?token=" in line]
        assert printed, log.read_text()[-2000:]
        token = printed[-1].split("?token=")[1].split()[0]
        assert http_status(port, "/api/health", {"Authorization": f"Bearer {token}"}) == 200
    finally:
        _stop(proc)


@pytest.mark.slow
def test_joining_a_cluster_without_authentication_says_so_once(monkeypatch, caplog):
    """A Ray started the old way (RAY_AUTH_MODE=disabled), on loopback only, by another process."""
    import ray

    from pettingllms.utils.private_ray import accepts_without_token, start_ray, stop_ray

    assert not ray.is_initialized()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")},
           "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    code = ("import ray, sys\n"
            "ray.init(address='local', num_cpus=1, include_dashboard=False, logging_level='ERROR')\n"
            "print(ray.get_runtime_context().gcs_address, flush=True)\n"
            "sys.stdin.read()\n")
    head = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        address = head.stdout.readline().strip()
        assert address.startswith("127.0.0.1:"), address
        assert accepts_without_token(address)
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the driver has no token either
        with caplog.at_level("WARNING", logger="pettingllms.utils.private_ray"):
            assert start_ray(address, setting="ray.address")
        stop_ray()
        warned = [r.getMessage() for r in caplog.records if r.name == "pettingllms.utils.private_ray"]
        assert len(warned) == 1 and "without authentication" in warned[0] and "security.md" in warned[0], warned
    finally:
        stop_ray()
        tree = psutil.Process(head.pid).children(recursive=True)
        head.stdin.close()  # the head driver shuts its Ray down and exits
        head.wait(timeout=60)
        for proc in tree:  # anything of its Ray still there after it
            if proc.is_running():
                proc.kill()


@pytest.mark.slow
def test_the_token_goes_when_a_run_exits_without_stopping_its_ray():
    code = ("from pettingllms.utils.private_ray import start_ray, token_path\n"
            "start_ray(num_cpus=1, logging_level=40)\n"
            "print('TOKEN', token_path(), flush=True)\n")  # and exit, Ray still running
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    path = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("TOKEN ")][0]
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


@pytest.mark.slow
def test_the_verl_workers_rendezvous_store_listens_on_loopback(monkeypatch):
    """torch's TCPStore would listen on every interface; under the private Ray (MASTER_ADDR
    127.0.0.1) rank 0 gives it a loopback socket."""
    import torch.distributed as dist

    from pettingllms.policies.verl.remote import _loopback_store

    port = free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    before = {p for _, _, p in listeners(os.getpid())}
    store = _loopback_store(0, 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        new = [(ip, p) for _, ip, p in listeners(os.getpid()) if p not in before]
        assert ("127.0.0.1", port) in new and all(is_loopback(ip) for ip, _ in new), new
    finally:
        dist.destroy_process_group()
    monkeypatch.setenv("MASTER_ADDR", "192.0.2.1")  # a cluster's address: torch's own rendezvous
    assert _loopback_store(0, 2) is None
