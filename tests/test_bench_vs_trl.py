"""scripts/bench/vs_trl.py: the plan it prints without training, and how it summarizes runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from script_helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench" / "vs_trl.py"


def _module():
    return load_script("scripts/bench/vs_trl.py")


def test_dry_run_prints_plan_and_versions(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--full", "--busy", "1", "--steps", "3",
                        "--threads", "1", "--trl-venv", str(tmp_path / "venv")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "8 prompts x k=4, 64 new tokens, T=0.7, top_p=0.95, full fine-tuning" in out
    assert "runs: ours trl ours trl (3 steps each, the first untimed)" in out
    assert "busy loops during every run: 1" in out and "1 torch threads" in out
    assert '"torch": "2.' in out  # our versions
    assert "TRL:" in out
    assert not (tmp_path / "venv").exists()  # a dry run builds nothing


def test_bad_shape_fails_clearly():
    r = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--batch", "3", "--k", "3"], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "must be a multiple of --micro-batch (8)" in r.stderr


def _run(step_times, gen_s=1.0, upd_s=2.0, rss=1024.0):
    steps = [{"step_s": t, "generate_s": gen_s, "env_s": 0.1, "update_s": upd_s, "logprob_s": 0.0,
              "gen_tokens": 100, "update_tokens": 400, "reward": 0.5} for t in step_times]
    return {"steps": steps, "peak_rss_mb": rss, "params": 1000, "versions": {"torch": "x"}, "threads": 2}


def test_summary_skips_each_runs_first_step_and_takes_medians(capsys):
    mod = _module()
    ours = mod.summarize([_run([99.0, 3.0, 4.0]), _run([99.0, 5.0, 6.0], rss=2048.0)], gflops=10.0, lora=True)
    assert ours["step_s"] == 4.5 and ours["timed_steps"] == 4
    assert ours["gen_tok_s"] == 100.0 and ours["update_tok_s"] == 200.0
    assert ours["other_s"] == 1.5 and ours["peak_rss_gb"] == 2.0
    assert abs(ours["update_gflops"] - 200.0 * 4 * 1000 / 1e9) < 1e-12  # 4N FLOPs per token with LoRA
    trl = mod.summarize([_run([99.0, 9.0, 9.0], gen_s=4.0, upd_s=4.0, rss=4096.0)], gflops=10.0, lora=True)
    mod.print_ratios(ours, trl)
    out = capsys.readouterr().out
    assert "step time ratio (ours/TRL): 0.50" in out
    assert "generation useful tok/s ratio (ours/TRL): 4.00" in out
    assert "update tok/s ratio (ours/TRL): 2.00" in out
    assert "peak RSS ratio (ours/TRL): 0.50" in out


def test_multi_agent_split_and_physical_limit(capsys):
    mod = _module()
    runs = [_run([99.0, 4.0, 4.0])]
    s = mod.summarize(runs, gflops=1e-6, lora=True)
    mod.print_multi(s, runs, gflops=1e-6)
    out = capsys.readouterr().out
    # 2N per generated token + 4N per trained token (LoRA), at 1e-6 GFLOP/s = 1000 FLOP/s
    assert "step 4.00 s = generate 1.00 + env 0.10 + update 2.00 + other 0.90" in out
    assert "physical limit 1800.00 s" in out
