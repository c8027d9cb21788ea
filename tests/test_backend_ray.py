"""trainer.backend=ray on the tiny model: rollout workers as Ray actors (HF engine here; the vLLM
engine in a worker is covered in test_engine_vllm.py)."""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest
import ray

from pettingllms.trainer.backends.ray import init_ray
from pettingllms.trainer.local import LocalTrainer
from trainer_fixtures import trainer_cfg

TESTS = str(Path(__file__).resolve().parent)
# The workers import the toy env's module (trainer_fixtures) from the tests folder.
RAY = ["trainer.backend=ray", "ray.worker_imports=[trainer_fixtures]", "ray.num_cpus=2", "ray.cpus_per_worker=0.5",
       "ray.step_timeout_s=120"]


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for the module (the backends join it and leave it running)."""
    old = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = TESTS + (os.pathsep + old if old else "")
    from pettingllms.config import RayConfig
    assert init_ray(RayConfig(num_cpus=2))
    yield
    ray.shutdown()
    os.environ["PYTHONPATH"] = old


def _run(cfg, steps: int = 2):
    trainer = LocalTrainer(cfg)
    try:
        return trainer.fit(max_steps=steps), trainer
    finally:
        trainer.close()


def _comparable(row: dict) -> dict:
    """Every metric except wall-clock ones."""
    return {k: v for k, v in row.items()
            if not (k.startswith(("timing/", "time/")) or k.endswith(("_s", "per_s")))}


def test_one_ray_worker_equals_local_metric_for_metric(tmp_path, ray_session):
    local, _ = _run(trainer_cfg(tmp_path / "local", "trainer.run_name=a"))
    remote, _ = _run(trainer_cfg(tmp_path / "ray", "trainer.run_name=a", *RAY, "ray.num_rollout_workers=1"))
    assert len(local) == len(remote) == 2
    for a, b in zip(local, remote):
        assert _comparable(a) == _comparable(b)
        assert b["timing/generate_s"] > 0 and b["tokens/generated_per_s"] > 0


def test_two_workers_give_the_same_batch_shape_and_a_valid_step(tmp_path, ray_session):
    over = ["trainer.run_name=b", "rollout.batch_size=3"]
    local, _ = _run(trainer_cfg(tmp_path / "local", *over), steps=1)
    remote, trainer = _run(trainer_cfg(tmp_path / "ray", *over, *RAY, "ray.num_rollout_workers=2"), steps=1)
    for key in ("samples/count", "groups/count", "episode/count"):
        assert remote[0].get(key) == local[0].get(key), key
    assert all(math.isfinite(v) for v in remote[0].values() if isinstance(v, float))
    from pettingllms.records import read_episodes
    episodes = read_episodes(trainer.run_dir / "trajectories" / "step_1.jsonl")
    assert len(episodes) == 3 and len({e.problem_id for e in episodes}) == 3
    keys = {s.group_key for e in episodes for s in e.samples}
    assert all(k[0] in {e.problem_id for e in episodes} for k in keys)  # groups stay per problem


def test_killed_worker_fails_the_step_with_a_clear_message(tmp_path, ray_session):
    cfg = trainer_cfg(tmp_path, "trainer.run_name=c", *RAY, "ray.num_rollout_workers=2")
    trainer = LocalTrainer(cfg)
    try:
        ray.kill(trainer.backend.workers[1])
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=r"rollout worker 1 died during rollout"):
            trainer.train_step(1)
        assert time.monotonic() - t0 < 60
    finally:
        trainer.close()
