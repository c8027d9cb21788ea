"""The released MetaAgent-X model in the scripts: its design format, and the offline fallback said
plainly (dry runs: the composed config is printed, nothing loads)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dry(script, **env):
    r = subprocess.run(["bash", script, "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=180,
                       env={**os.environ, "PYTHON": sys.executable, **env})
    assert r.returncode == 0, r.stderr[-2000:]
    return r


def test_eval_first_open_model_says_when_it_falls_back_offline():
    r = _dry("scripts/evaluate/autoevol/eval_first_open_model.sh", HF_HUB_OFFLINE="1")
    assert "the hub does not answer: evaluating the embedded model embedded:smollm2-135m-instruct, " \
           "not Mercury7353/MetaAgent-X" in r.stderr
    assert "path: embedded:smollm2-135m-instruct" in r.stdout and "design_format: pettingllms" in r.stdout


@pytest.mark.parametrize("script", ["scripts/evaluate/autoevol/eval_first_open_model.sh",
                                    "scripts/evaluate/autoevol/serve_ui.sh",
                                    "scripts/evaluate/autoevol/serve_demo.sh"])
def test_the_released_model_runs_in_its_own_design_format(script):
    r = _dry(script, MODEL="Mercury7353/MetaAgent-X")
    assert "path: Mercury7353/MetaAgent-X" in r.stdout and "design_format: workflow" in r.stdout
    r = _dry(script, MODEL="embedded:smollm2-135m-instruct", DESIGN_FORMAT="workflow")
    assert "design_format: workflow" in r.stdout
