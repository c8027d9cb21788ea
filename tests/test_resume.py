"""Resume: a run stopped after step 2 and resumed gives the same step-3 metrics as a run
that never stopped (deterministic mode, tiny model, real HF engine)."""
from __future__ import annotations

import json

from pettingllms.trainer import checkpoint as ckpt_io
from pettingllms.trainer.local import LocalTrainer
from trainer_fixtures import comparable, trainer_cfg


def _run(tmp, name, *overrides, max_steps=None):
    cfg = trainer_cfg(tmp, f"trainer.run_name={name}", "trainer.total_steps=3", "trainer.deterministic=true",
                      "trainer.optim.warmup_steps=1", *overrides)
    trainer = LocalTrainer(cfg)
    try:
        return trainer.fit(max_steps), trainer.run_dir
    finally:
        trainer.close()


def test_resume_continues_exactly(tmp_path):
    full, _ = _run(tmp_path, "full")
    first, run_dir = _run(tmp_path, "split", "trainer.checkpoint.save_freq=1", max_steps=2)
    assert [m["step"] for m in first] == [1, 2]
    assert [p.name for _, p in ckpt_io.list_checkpoints(run_dir)] == ["step_000001", "step_000002"]

    # trainer.checkpoint.resume=auto: the latest complete checkpoint of the named run
    resumed, run_dir2 = _run(tmp_path, "split", "trainer.checkpoint.save_freq=1", "trainer.checkpoint.resume=auto")
    assert run_dir2 == run_dir
    assert [m["step"] for m in resumed] == [1, 2, 3]
    assert comparable(resumed[2]) == comparable(full[2])
    assert resumed[2]["train/grad_norm"] > 0  # step 3 trained: weights and optimizer state mattered

    # trainer.checkpoint.resume=PATH to an older checkpoint: steps 2 and 3 run again, identically,
    # and metrics.jsonl keeps each step once
    again, run_dir3 = _run(tmp_path, "ignored", f"trainer.checkpoint.resume={ckpt_io.checkpoint_dir(run_dir, 1)}")
    assert run_dir3 == run_dir
    assert [comparable(m) for m in again] == [comparable(m) for m in full]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
