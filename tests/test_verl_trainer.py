"""AT-GRPO on trainer.backend=verl (CPU, tiny model, real HF engine): L2, one LoRA adapter per
agent, each on its own verl worker group (two groups, distinct name prefixes, one colocated
resource pool). Two steps, a checkpoint, and a resume whose next step matches an uninterrupted
run; each checkpoint holds verl's shards and a peft export."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("verl")
pytest.importorskip("ray")

from pettingllms.trainer import checkpoint as ckpt_io  # noqa: E402
from pettingllms.trainer.local import LocalTrainer  # noqa: E402
from trainer_fixtures import comparable, trainer_cfg  # noqa: E402
from verl_helpers import ray_local  # noqa: E402,F401

VERL = ("trainer=verl", "trainer.device=cpu", "trainer.n_gpus_per_node=1", "trainer.deterministic=true",
        "trainer.total_steps=3", "policies=per_agent_lora", "model.lora.rank=4", "model.lora.alpha=8")


def _run(tmp, name, *overrides, max_steps=None):
    trainer = LocalTrainer(trainer_cfg(tmp, f"trainer.run_name={name}", *VERL, *overrides))
    try:
        return trainer.fit(max_steps), trainer.run_dir
    finally:
        trainer.close()


@pytest.mark.slow
def test_verl_backend_trains_checkpoints_and_resumes(ray_local, tmp_path):
    full, _ = _run(tmp_path, "full")
    assert [m["step"] for m in full] == [1, 2, 3]
    assert all(m["train/grad_norm"] > 0 for m in full)

    first, run_dir = _run(tmp_path, "split", "trainer.checkpoint.save_freq=1", max_steps=2)
    for a, b in zip(first, full[:2]):  # the same run so far (CPU, deterministic)
        assert comparable(a) == pytest.approx(comparable(b), rel=1e-6, abs=1e-7)
    ckpt = ckpt_io.latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.name == "step_000002"
    policy_dirs = list((ckpt / "policies").iterdir())
    assert sorted(d.name for d in policy_dirs) == ["checker", "writer"]
    for d in policy_dirs:  # verl's shards plus an export that needs no verl
        meta = json.loads((d / "policy.json").read_text())
        assert meta["backend"] == "verl" and meta["world_size"] == 1 and meta["kind"] == "lora"
        assert (d / "verl").is_dir() and any((d / ("adapter" if meta["kind"] == "lora" else "model")).iterdir())

    resumed, run_dir2 = _run(tmp_path, "split", "trainer.checkpoint.save_freq=1", "trainer.checkpoint.resume=auto")
    assert run_dir2 == run_dir
    assert [m["step"] for m in resumed] == [1, 2, 3]
    assert comparable(resumed[2]) == pytest.approx(comparable(full[2]), rel=1e-6, abs=1e-7)
