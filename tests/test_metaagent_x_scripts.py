"""The released MetaAgent-X model in the scripts: its design format, and the offline fallback said
plainly (dry runs: the composed config is printed, nothing loads)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms.mas.design_format import detect, main

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


def _folder(tmp_path, name, **files):
    folder = tmp_path / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "_name_or_path": "Qwen/Qwen3-1.7B"}))
    for fname, text in files.items():
        (folder / fname.replace("__", ".")).write_text(text)
    return folder


def test_design_format_read_from_a_local_model_folder(tmp_path, capsys):
    plain = _folder(tmp_path, "plain")
    assert detect(str(plain))[0] == "pettingllms"
    card = _folder(tmp_path, "card", README__md="Designs look like:\n```python\nfrom workflow import AgentNode\n```")
    assert detect(str(card)) == ("workflow", f"the README.md of {card} quotes the released workflow API")
    base = _folder(tmp_path, "base", README__md="---\nbase_model: Mercury7353/MetaAgent-X\n---\n")
    assert detect(str(base))[0] == "workflow"
    tmpl = _folder(tmp_path, "tmpl", tokenizer_config__json=json.dumps(
        {"chat_template": "{{ 'write ensemble = EnsembleNode(members, strategy=...)' }}"}))
    assert detect(str(tmpl))[0] == "workflow"
    ours = _folder(tmp_path, "MetaAgent-X-finetune", README__md="from pettingllms.mas.dsl import *")
    assert detect(str(ours))[0] == "pettingllms"  # the folder's contents beat its name
    explicit = _folder(tmp_path, "explicit", generation_config__json=json.dumps({"design_format": "workflow"}))
    assert detect(str(explicit))[0] == "workflow"
    run = tmp_path / "run"
    (run / "checkpoints" / "step_10").mkdir(parents=True)
    (run / "config.yaml").write_text("model:\n  path: x\nmas:\n  reward: published\n  design_format: workflow\n")
    ckpt = _folder(run / "checkpoints" / "step_10", "shared")
    assert detect(str(ckpt)) == ("workflow", f"the run's config.yaml above {ckpt} has mas.design_format=workflow")
    assert detect("Mercury7353/MetaAgent-X")[0] == "workflow" and detect("Qwen/Qwen3-1.7B")[0] == "pettingllms"
    assert main([str(card)]) == 0 and capsys.readouterr().out == "workflow\n"


def test_scripts_detect_the_format_of_a_local_folder(tmp_path):
    card = _folder(tmp_path, "released-copy", README__md="from workflow import AgentNode, Workflow")
    r = _dry("scripts/evaluate/autoevol/serve_ui.sh", MODEL=str(card))
    assert "design_format: workflow" in r.stdout and "quotes the released workflow API" in r.stderr
