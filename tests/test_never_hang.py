"""trainer.backend=verl never hangs on a cluster that cannot hold it (issue 28, findings 1-2):
the ask (verl's bundles: one per rank, {CPU: policies sharing it, GPU: 1}) is checked against the
Ray cluster's nodes before anything is placed, and the run ends with exit 2 and one line."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pettingllms.errors import ConfigError
from pettingllms.utils.placement import VerlAsk, check_verl, engine_gpus, fits_on_nodes

ROOT = Path(__file__).resolve().parents[1]
NODE = {"CPU": 10.0, "GPU": 8.0}  # a node as `ray start --num-cpus=10 --num-gpus=8` declares it


def test_verl_ask_is_verls_bundles():
    ask = VerlAsk(n_per_node=8, nnodes=1, colocate=2, use_gpu=True)
    assert ask.bundle == {"CPU": 2.0, "GPU": 1.0}
    assert ask.total == {"CPU": 16.0, "GPU": 8.0}
    # A private Ray gets every bundle's CPUs; the old rule, max(4, n * nodes + 2) = 10, could not place it.
    assert ask.local_cpus() == 18 and max(4, 8 * 1 + 2) < ask.total["CPU"]
    assert VerlAsk(2, 2, 3).total == {"CPU": 12.0}  # CPU ranks ask no GPU


def test_check_names_the_ask_the_cluster_and_the_setting():
    with pytest.raises(ConfigError) as e:  # finding 1: 8 GPUs x 2 policies on 10 CPUs
        check_verl(VerlAsk(8, 1, 2, True), [NODE], "auto")
    msg = str(e.value)
    assert "\n" not in msg and "16 CPU asked, 10 there" in msg and "trainer.n_gpus_per_node" in msg
    with pytest.raises(ConfigError, match="16 GPU asked, 8 there"):  # finding 2: more GPUs than there are
        check_verl(VerlAsk(16, 1, 1, True), [{"CPU": 64.0, "GPU": 8.0}], "auto")
    with pytest.raises(ConfigError, match="trainer.device=cuda: the Ray cluster has no GPU"):
        check_verl(VerlAsk(1, 1, 1, True), [{"CPU": 4.0}], "cuda")
    # Enough in all but not on one node: each node's group is STRICT_PACK.
    assert not fits_on_nodes({"CPU": 4.0, "GPU": 4.0}, 1, [{"CPU": 4.0, "GPU": 2.0}] * 2)
    with pytest.raises(ConfigError, match="no node holds"):
        check_verl(VerlAsk(4, 1, 1, True), [{"CPU": 4.0, "GPU": 2.0}] * 2, "auto")
    check_verl(VerlAsk(4, 2, 2, True), [{"CPU": 8.0, "GPU": 4.0}] * 2, "auto")  # fits: no error
    check_verl(VerlAsk(4, 2, 1, True), [{"CPU": 16.0, "GPU": 8.0}], "auto")  # two nodes' groups on one node


def test_engines_spread_over_gpus_off_the_trainers():
    assert engine_gpus(0, 2) == [None, None]
    assert engine_gpus(1, 2, trainer_on=0) == [0, 0]  # one GPU: shared, nothing else there
    assert engine_gpus(8, 2, trainer_on=0) == [1, 2]
    assert engine_gpus(2, 3) == [0, 1, 0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def declared_cluster(tmp_path_factory):
    """A `ray start --head` cluster declaring 8 GPUs and 10 CPUs (no real GPU needed to place)."""
    port = _free_port()
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    temp = tmp_path_factory.mktemp("ray")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "ray"), "start", "--head", "--block",
                             f"--port={port}", "--num-cpus=10", "--num-gpus=8", "--include-dashboard=false",
                             "--disable-usage-stats", f"--temp-dir={temp}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        time.sleep(2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)  # --block: ray start stops what it started
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _train(tmp_path, *overrides) -> tuple[int, str, float]:
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "pettingllms.train", "--config-name", "tiny_test", "trainer=verl",
                        f"trainer.output_dir={tmp_path}", "trainer.verl.place_timeout_s=20", *overrides],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stderr, time.monotonic() - t0


@pytest.mark.slow
@pytest.mark.parametrize("overrides, line", [
    (("policies=per_agent_lora", "trainer.n_gpus_per_node=8"), "16 CPU asked, 10 there"),
    (("trainer.n_gpus_per_node=16",), "16 GPU asked, 8 there"),
], ids=["8gpus_x_2policies", "more_gpus_than_the_cluster"])
def test_verl_run_that_cannot_be_placed_exits_2_in_one_line(declared_cluster, tmp_path, overrides, line):
    rc, err, took = _train(tmp_path, f"trainer.verl.ray_address={declared_cluster}", *overrides)
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2 and took < 60, (rc, took, err[-2000:])
    assert len(errors) == 1 and line in errors[0] and "trainer.n_gpus_per_node" in errors[0], err[-2000:]


_LOGS = """
import sys, time
import ray
from pettingllms.config.schema import VerlConfig
from pettingllms.policies.verl.setup import RayCluster, VerlSettings
cluster = RayCluster.start(VerlSettings(worker=None, verl=VerlConfig(), device="cpu"))
@ray.remote
def rank_fails():
    print("rank-side traceback marker", file=sys.stderr, flush=True)
    return 1
ray.get(rank_fails.remote())
time.sleep(3)  # the log monitor forwards worker output about once a second
cluster.shutdown()
"""


@pytest.mark.slow
def test_worker_output_reaches_the_console():
    """finding 2: the verl backend's Ray forwards its workers' output (log_to_driver was off)."""
    p = subprocess.run([sys.executable, "-c", _LOGS], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "rank-side traceback marker" in p.stdout + p.stderr
