"""The seed README's commands (pettingllms-ai/PettingLLMs' README), run as written in dry-run form:
scripts with --dry-run (the composed config is printed, nothing loads), Python loaders with --help."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1"}

COMMANDS = [
    "bash scripts/evaluate/autoevol/serve_ui.sh",
    "START_VLLM=false HOST=127.0.0.1 PORT=8300 bash scripts/evaluate/autoevol/serve_ui.sh",
    "bash scripts/evaluate/autoevol/serve_demo.sh",
    "bash scripts/evaluate/autoevol/eval_first_open_model.sh",
    "bash scripts/train/autoeval/example_cotrain_autoeval.sh",
    "bash scripts/train/math/math_L1_prompt.sh",
    "bash scripts/train/code/code_single_policy.sh",
    "bash scripts/train/code/code_two_policy.sh",
    "bash scripts/train/plan_path/plan_path_single.sh",
    "bash scripts/train/plan_path/plan_path_two_policy.sh",
    "bash scripts/train/sokoban/sokoban_two_policy.sh",
    "bash scripts/train/sudoku/sokodu_single.sh",
    # "Edit scripts/evaluate/evaluate.sh to set MODEL_PATHS=(...) and CONFIG_NAME=..." (here: the environment)
    "MODEL_PATHS='embedded:smollm2-135m-instruct tiny:test' CONFIG_NAME=math_single_policy "
    "bash scripts/evaluate/evaluate.sh",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_seed_readme_command_dry_runs(command):
    r = subprocess.run(f"{command} --dry-run", shell=True, cwd=ROOT, env=ENV, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, f"{command}:\n{r.stderr[-2000:]}"
    assert "experiment:" in r.stdout, command


def test_evaluate_sh_reads_model_paths_and_the_seed_config_name():
    r = subprocess.run(COMMANDS[-1] + " --dry-run", shell=True, cwd=ROOT, env=ENV, capture_output=True,
                       text=True, timeout=180)
    assert "CONFIG_NAME=math_single_policy is math_L1_prompt here" in r.stderr
    assert r.stdout.count("experiment: math_L1_prompt") == 2
    assert "path: embedded:smollm2-135m-instruct" in r.stdout and "path: tiny:test" in r.stdout


@pytest.mark.parametrize("loader", ["load_code", "load_math", "load_sokoban"])
def test_seed_readme_data_loaders(loader):
    r = subprocess.run([sys.executable, f"scripts/dataprocess/{loader}.py", "--help"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "usage" in r.stdout.lower()
