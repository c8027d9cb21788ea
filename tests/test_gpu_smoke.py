"""scripts/gpu/smoke.sh (issue 28, e): --dry-run lists its cases and runs them; on a machine without
CUDA every CUDA case reports SKIP (no GPU), then the summary line. The script needs nothing the
lent GPU image lacks beyond this package and omegaconf/hydra (carried as wheels)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "scripts" / "gpu" / "smoke.py"
CUDA_CASES = ("device_auto", "local_lora_bf16", "local_full_bf16", "plan_memory", "vllm_sleep_lora_reload", "verl_l2")
# On the lent GPU image: torch, transformers, peft, numpy, pyarrow, flask, tqdm (+ the standard library)
IMAGE = {"torch", "transformers", "peft", "numpy", "pyarrow", "flask", "tqdm", "pettingllms"}


def test_smoke_dry_run_skips_every_cuda_case_without_a_gpu():
    r = subprocess.run(["bash", "scripts/gpu/smoke.sh", "--dry-run"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHON": sys.executable})
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert lines[0].startswith("cases: ") and all(c in lines[0] for c in CUDA_CASES)
    status = {ln.split()[1]: ln.split()[0] for ln in lines[1:-1]}
    assert set(status) == set(lines[0][len("cases: "):].split(", "))
    if not torch.cuda.is_available():
        for case in CUDA_CASES:
            assert any(ln.startswith(f"SKIP {case} (no GPU)") for ln in lines), case
    n = {s: list(status.values()).count(s) for s in ("PASS", "FAIL", "SKIP")}
    assert lines[-1] == f"SUMMARY: {n['PASS']} pass, {n['FAIL']} fail, {n['SKIP']} skip" and n["FAIL"] == 0


def test_smoke_script_imports_only_what_the_gpu_image_has():
    tree = ast.parse(SMOKE.read_text())
    top = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top.add(node.module.split(".")[0])
    assert top - IMAGE - set(sys.stdlib_module_names) == set()
