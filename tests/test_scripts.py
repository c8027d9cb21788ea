"""Every recipe in scripts/ dry-runs (prints its composed config) and every Python script has --help."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHELL_SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "scripts").rglob("*.sh"))
# Not a training recipe: scripts/gpu/smoke.sh's --dry-run lists and runs its cases (tests/test_gpu_smoke.py).
RECIPES = [s for s in SHELL_SCRIPTS if not s.startswith("scripts/gpu/")]
PY_SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "scripts").rglob("*.py"))
ENV = {**os.environ, "PYTHON": sys.executable}


def test_the_recipes_named_in_the_issues_exist():
    for path in ("scripts/train/quickstart.sh", "scripts/train/math/math_L1_prompt.sh",
                 "scripts/evaluate/evaluate.sh", "scripts/bench/profile_step.py"):
        assert path in SHELL_SCRIPTS + PY_SCRIPTS, path


@pytest.mark.parametrize("script", RECIPES)
def test_shell_recipe_dry_runs(script):
    """Each recipe composes, and accepts the scale-out overrides (Ray workers, vLLM engines)."""
    r = subprocess.run(["bash", script, "trainer.backend=ray", "rollout.engine=vllm", "--dry-run"], cwd=ROOT,
                       env=ENV, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"{script} --dry-run failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    assert "experiment:" in r.stdout and "trainer:" in r.stdout, f"{script} printed no config"
    assert "backend: ray" in r.stdout and "engine: vllm" in r.stdout, f"{script} dropped the overrides"


@pytest.mark.parametrize("script", PY_SCRIPTS)
def test_python_script_help(script):
    r = subprocess.run([sys.executable, script, "--help"], cwd=ROOT, env=ENV, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"{script} --help failed:\n{r.stderr[-2000:]}"
    assert "usage" in r.stdout.lower()


def test_recipe_passes_extra_arguments_through():
    r = subprocess.run(["bash", "scripts/train/quickstart.sh", "trainer.total_steps=3", "rollout.k=2", "--dry-run"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "total_steps: 3" in r.stdout and "  k: 2" in r.stdout


def test_recipe_bad_key_fails_clearly():
    r = subprocess.run(["bash", "scripts/train/quickstart.sh", "rollout.kk=2"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown config key 'rollout.kk' (did you mean 'rollout.k'?)" in r.stderr


@pytest.mark.parametrize("script", ["scripts/train/math/math_L1_prompt.sh", "scripts/train/code/code_two_policy.sh"])
def test_gpu_recipe_on_verl_composes(script):
    """The multi-GPU form: backend, engine and GPU counts are typed config values."""
    r = subprocess.run(["bash", script, "trainer.backend=verl", "rollout.engine=vllm", "trainer.n_gpus_per_node=8",
                        "trainer.nnodes=1", "trainer.verl.attn_implementation=flash_attention_2",
                        "trainer.verl.use_remove_padding=true", "--dry-run"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for line in ("backend: verl", "engine: vllm", "n_gpus_per_node: 8", "nnodes: 1", "use_remove_padding: true"):
        assert line in r.stdout, line
