"""Placement on a Ray with declared GPUs (`ray.init(num_gpus=8)` on a CPU box: real placement
groups over fake GPU ids): verl's pools for L1 / L2 / L3 on one node and two nodes' worth of
bundles, rollout workers with and without GPUs, and the bounded waits (issue 28, b)."""
from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("verl")

from pettingllms.cli.config_loading import load_config  # noqa: E402
from pettingllms.config.schema import VerlConfig  # noqa: E402
from pettingllms.errors import ConfigError  # noqa: E402
from pettingllms.policies.verl.setup import RayCluster, VerlSettings  # noqa: E402
from pettingllms.trainer.backends.ray import RayBackend  # noqa: E402
from pettingllms.utils.placement import VerlAsk, rollout_worker_gpus  # noqa: E402
from pettingllms.utils.private_ray import start_ray, stop_ray  # noqa: E402
from pettingllms.utils.ray_waits import place_verl_pool, wait_refs  # noqa: E402

GPUS = 8


@pytest.fixture(scope="module")
def declared():
    """A private Ray with 8 declared GPUs and the CPUs a run of 8 ranks x 2 policies asks for."""
    assert start_ray(num_cpus=VerlAsk(GPUS, 1, 2).local_cpus(), num_gpus=GPUS, log_to_driver=False)
    yield
    stop_ray()


@ray.remote
class Rank:
    """A stand-in for a verl rank: where Ray put it (verl's `_create_worker` options)."""

    def gpus(self) -> list[int]:
        return [int(g) for g in ray.get_gpu_ids()]


def _ranks(pgs, colocate: int) -> list[list[int]]:
    """Create every worker group's ranks as verl does (one per bundle, num_gpus 1/colocate) and
    return, per group, each rank's GPU ids."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    groups = []
    for _ in range(colocate):
        actors = [Rank.options(num_gpus=1 / colocate, scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=b)).remote()
            for pg in pgs for b in range(pg.bundle_count)]
        groups.append([g for a in actors for g in wait_refs([a.gpus.remote()], 60, "rank", "t")[0]])
        for a in actors:
            ray.kill(a)
    return groups


def _settings(n: int, nodes: int) -> VerlSettings:
    return VerlSettings(worker=None, verl=VerlConfig(place_timeout_s=30), n_gpus_per_node=n, nnodes=nodes)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("config, n, nodes", [
    ("math_L1_prompt", 8, 1), ("math_L2_lora", 8, 1), ("math_L3_model", 8, 1), ("math_L2_lora", 4, 2)],
    ids=["L1", "L2", "L3", "L2_two_nodes_worth"])
def test_verl_pool_is_placed_as_the_plan_says(declared, config, n, nodes):
    from ray.util import placement_group_table

    from pettingllms.plan import plan_for

    cfg = load_config(config, ["trainer=verl", f"trainer.n_gpus_per_node={n}", f"trainer.nnodes={nodes}"])
    ask = plan_for(cfg, gpus=GPUS, gpu_bytes=80 * 1024 ** 3, host_bytes=64 * 1024 ** 3).verl_ask
    assert ask.colocate == (1 if config == "math_L1_prompt" else 2)
    cluster = RayCluster.start(_settings(n, nodes), colocate=ask.colocate)
    try:
        assert cluster.device == "cuda"  # auto: the cluster has GPUs
        pool = cluster.resource_pool(ask.colocate)
        table = [placement_group_table(pg) for pg in pool.pgs]
        assert [len(t["bundles"]) for t in table] == [ask.n_per_node] * ask.nnodes
        assert all(b == ask.bundle for t in table for b in t["bundles"].values())
        assert all(t["strategy"] == "STRICT_PACK" and t["state"] == "CREATED" for t in table)
        groups = _ranks(pool.pgs, ask.colocate)
        assert sorted(groups[0]) == list(range(GPUS))  # each rank its own GPU
        assert all(g == groups[0] for g in groups)  # a policy's rank r shares rank r's GPU with the others
    finally:
        cluster.shutdown()


@pytest.mark.slow
def test_waits_are_bounded(declared):
    with pytest.raises(ConfigError, match="not placed within trainer.verl.place_timeout_s=1s"):
        place_verl_pool(VerlAsk(GPUS + 1, 1, 1, True), "toobig_", 1.0, "trainer.verl.place_timeout_s")
    stuck = Rank.options(num_gpus=GPUS + 1).remote()  # never scheduled
    with pytest.raises(ConfigError, match="1 of 1 not done within trainer.verl.start_timeout_s=1s"):
        wait_refs([stuck.__ray_ready__.remote()], 1.0, "ranks starting", "trainer.verl.start_timeout_s")
    ray.kill(stuck)

    @ray.remote
    def fails():
        raise ValueError("CUDA out of memory (a stand-in)")
    with pytest.raises(RuntimeError, match="^ranks building the model failed: ValueError: CUDA out of memory"):
        wait_refs([fails.remote()], 30, "ranks building the model", "trainer.verl.start_timeout_s")


def _ray_backend(*overrides) -> RayBackend:
    cfg = load_config("tiny_test", ["trainer.backend=ray", *overrides])
    return RayBackend(cfg, env_factory=lambda: None)


@pytest.mark.slow
def test_rollout_workers_get_gpus_on_a_cluster_with_gpus(declared):
    # auto: each of 4 hf workers one GPU of 8 (Ray used to hide every GPU from them: default 0)
    assert _ray_backend("ray.num_rollout_workers=4", "ray.cpus_per_worker=1").worker_resources() == (1.0, 1.0)
    assert _ray_backend("rollout.engine=vllm", "rollout.vllm.tensor_parallel_size=2",
                        "ray.num_rollout_workers=4").worker_resources() == (1.0, 2.0)
    assert _ray_backend("ray.gpus_per_worker=0").worker_resources() == (1.0, 0.0)  # as set
    assert _ray_backend("trainer.device=cpu").worker_resources() == (1.0, 0.0)  # hf set to the CPU: no GPU
    with pytest.raises(ConfigError, match="cannot place 3 rollout worker.*ray.num_rollout_workers"):
        _ray_backend("ray.num_rollout_workers=3", "ray.gpus_per_worker=3").worker_resources()
    actors = [Rank.options(num_cpus=1, num_gpus=1.0).remote() for _ in range(4)]
    ids = [g for a in actors for g in wait_refs([a.gpus.remote()], 60, "worker", "t")[0]]
    assert len(set(ids)) == 4
    for a in actors:
        ray.kill(a)


def test_rollout_worker_gpus_without_gpus():
    assert rollout_worker_gpus("auto", 0, 4, "hf") == 0.0  # a CPU cluster: none asked
    assert rollout_worker_gpus("auto", 8, 2, "openai") == 0.0
    assert rollout_worker_gpus("auto", 1, 4, "hf") == 0.25  # four workers share one GPU
    assert rollout_worker_gpus("auto", 8, 1, "vllm", 4) == 4.0
    assert rollout_worker_gpus(0.5, 8, 1, "hf") == 0.5
    assert rollout_worker_gpus("auto", 8, 1, "hf", 0) == 0.0  # an engine set to the CPU
