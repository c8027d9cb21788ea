"""The quick start on the embedded model, one step end to end (slow; CI runs it)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms.records import read_episodes
from pettingllms.trainer import checkpoint as ckpt_io

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quickstart_one_step_on_the_embedded_model(tmp_path):
    out = tmp_path / "outputs"
    r = subprocess.run(
        # the quick start's own config, one step, on a smaller batch to keep CI short
        ["bash", "scripts/train/quickstart.sh", "trainer.total_steps=1", "rollout.batch_size=2",
         "rollout.sampling.max_new_tokens=48", f"trainer.output_dir={out}", "trainer.run_name=ci",
         "trainer.logging.progress_bar=false", "trainer.validation.val_freq=1", "eval.limit=2"],
        cwd=ROOT, env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=880)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    run = out / "quickstart" / "ci"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["step"] == 1
    m = rows[0]
    # team (0 or 1) + 0.5 * local (0 or 1) per candidate
    assert 0.0 <= m["reward/mean"] <= 1.5 and math.isfinite(m["train/loss"])
    assert m["samples/count"] > 0 and m["tokens/response"] > 0 and m["timing/generate_s"] > 0
    assert "step 1/1 | reward" in r.stdout  # the one-line console summary
    # the quick start validates before and after training and says both at the end
    assert "held-out math (untrained vs step 1): avg@2 " in r.stdout and " before -> " in r.stdout
    assert (run / "val_before.json").is_file() and "val/math/avg@2" in m
    episodes = read_episodes(run / "trajectories" / "step_1.jsonl")
    assert {e.env for e in episodes} == {"math"}
    assert {s.agent for e in episodes for s in e.samples} >= {"tool", "reasoner"}
    ckpt = ckpt_io.latest_checkpoint(run)
    assert ckpt is not None and (ckpt / "policies" / "shared" / "adapter").is_dir()
