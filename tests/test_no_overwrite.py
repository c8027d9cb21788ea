"""Nothing the user made is overwritten or replaced: datasets, run folders, checkpoints, evals."""
from __future__ import annotations

import json
import logging
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from pettingllms.errors import ConfigError
from pettingllms.envs.dataset import ensure_dataset, load_split
from pettingllms.trainer import checkpoint as ckpt_io
from pettingllms.trainer.assemble import resolve_run_folder
from pettingllms.trainer.local import LocalTrainer
from trainer_fixtures import ENV_NAME, RandomTokenEngine, trainer_cfg


# ---------------------------------------------------------------- datasets

def _user_file(path: Path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"id": "mine", "puzzle": "my own"}]).to_parquet(path)
    return path.read_bytes()


def test_partial_dataset_folder_is_an_error_naming_the_missing_split(tmp_path):
    mine = _user_file(tmp_path / "sudoku" / "train.parquet")
    with pytest.raises(ConfigError, match=r"dataset folder .*sudoku has no test\.parquet; add it"):
        load_split("sudoku", "train", tmp_path, builder="pettingllms.envs.sudoku.data")
    assert (tmp_path / "sudoku" / "train.parquet").read_bytes() == mine
    assert sorted(p.name for p in (tmp_path / "sudoku").iterdir()) == ["train.parquet"]


@pytest.mark.parametrize("module", ["pettingllms.envs.sudoku.data", "pettingllms.envs.math.data",
                                    "pettingllms.envs.code.data"])
def test_builders_never_replace_a_split(tmp_path, module):
    import importlib

    mine = _user_file(tmp_path / "out" / "test.parquet")
    with pytest.raises(ConfigError, match="already has test.parquet; a build never replaces files"):
        importlib.import_module(module).build(tmp_path / "out", offline=True)
    assert (tmp_path / "out" / "test.parquet").read_bytes() == mine
    assert not (tmp_path / "out" / "train.parquet").exists()


def test_unknown_data_name_lists_the_presets_and_builds_nothing(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_split("math_eazy", "train", tmp_path, builder="pettingllms.envs.math.data")
    assert str(e.value).startswith("env.data=math_eazy: no dataset folder")
    assert "(did you mean 'math_easy'?); presets: math, math_easy" in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_missing_data_root_is_refused_not_created(tmp_path):
    root = tmp_path / "nonexistent" / "dir"
    with pytest.raises(ConfigError, match="env.data_root=.*does not exist"):
        load_split("sudoku", "train", root, builder="pettingllms.envs.sudoku.data")
    assert not (tmp_path / "nonexistent").exists()


def _fake_builder(monkeypatch, calls):
    module = types.ModuleType("fake_data_builder")
    module.DATA_NAMES = ("toy",)

    def build(out, seed=0, offline=None):
        calls.append(Path(out))
        Path(out).mkdir(parents=True)
        for split in ("train", "test"):
            pd.DataFrame([{"id": f"{split}-0"}]).to_parquet(Path(out) / f"{split}.parquet")
        return {"rows": 1}
    module.build = build
    monkeypatch.setitem(sys.modules, "fake_data_builder", module)
    return module


def test_missing_dataset_is_built_elsewhere_and_moved_into_place(tmp_path, monkeypatch):
    calls: list[Path] = []
    _fake_builder(monkeypatch, calls)
    (tmp_path / "toy").mkdir()  # an empty folder may be filled
    out = ensure_dataset("toy", tmp_path, builder="fake_data_builder")
    assert out == tmp_path / "toy" and calls[0] != out  # written in a temporary folder first
    assert sorted(p.name for p in out.iterdir()) == ["build.json", "test.parquet", "train.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy"]  # no temporary folder left
    ensure_dataset("toy", tmp_path, builder="fake_data_builder")
    assert len(calls) == 1  # complete: never rebuilt


def test_a_dataset_another_process_finished_first_is_used_not_an_error(tmp_path, monkeypatch):
    """Two runs (or two test workers) build the same missing dataset at once: the one whose move
    comes second finds the folder complete and uses it; its own copy goes."""
    calls: list[Path] = []
    module = _fake_builder(monkeypatch, calls)
    build = module.build

    def build_while_another_finishes(out, seed=0, offline=None):
        report = build(out, seed)
        build(tmp_path / "toy", seed)  # the other process's build lands first
        (tmp_path / "toy" / "build.json").write_text("{}")
        return report
    module.build = build_while_another_finishes
    out = ensure_dataset("toy", tmp_path, builder="fake_data_builder")
    assert out == tmp_path / "toy" and len(calls) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy"]  # no temporary folder left
    assert (out / "build.json").read_text() == "{}"  # theirs, not replaced


def test_a_folder_built_by_an_older_data_version_is_kept_and_named(tmp_path, monkeypatch, caplog):
    calls: list[Path] = []
    module = _fake_builder(monkeypatch, calls)
    out = ensure_dataset("toy", tmp_path, builder="fake_data_builder")
    assert json.loads((out / "build.json").read_text())["version"] == 1
    caplog.clear()  # the build's own info line
    with caplog.at_level(logging.WARNING, logger="pettingllms.envs.dataset"):
        ensure_dataset("toy", tmp_path, builder="fake_data_builder")
        assert not caplog.records  # same version: silent
        module.DATA_VERSIONS = {"toy": 2}  # the generator changed after the folder was built
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        assert ensure_dataset("toy", tmp_path, builder="fake_data_builder") == out
    assert len(calls) == 1 and {p.name: p.read_bytes() for p in out.iterdir()} == before  # never rebuilt
    assert "built by data version 1 of toy, this version makes 2" in caplog.text
    assert "move the folder away" in caplog.text


def test_folder_with_other_user_files_is_not_built_into(tmp_path, monkeypatch):
    calls: list[Path] = []
    _fake_builder(monkeypatch, calls)
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="has no train.parquet or test.parquet"):
        ensure_dataset("toy", tmp_path, builder="fake_data_builder")
    assert calls == [] and (tmp_path / "toy" / "notes.txt").read_text() == "mine"


# ---------------------------------------------------------------- run folders

def _fake_run(run_dir: Path, cfg, steps=(1, 2), metrics=False) -> None:
    """A run folder as a run leaves it: config.yaml and complete checkpoints (no model needed)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    for step in steps:
        d = ckpt_io.checkpoint_dir(run_dir, step)
        (d / "policies").mkdir(parents=True)
        torch.save({"step": step}, d / ckpt_io.STATE_FILE)
        (d / ckpt_io.MARKER).write_text(f"{step}\n")
    if metrics:
        (run_dir / "metrics.jsonl").write_text("")


def test_run_folder_with_checkpoints_but_no_metrics_is_refused(tmp_path):
    cfg = trainer_cfg(tmp_path, "trainer.run_name=r")
    run_dir = tmp_path / "outputs" / "tiny_test" / "r"
    _fake_run(run_dir, cfg)
    before = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
    with pytest.raises(ConfigError, match="is not empty .*use trainer.checkpoint.resume=auto to continue it"):
        resolve_run_folder(cfg)
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")) == before


def test_resume_refuses_a_changed_config(tmp_path):
    run_dir = tmp_path / "outputs" / "tiny_test" / "r"
    _fake_run(run_dir, trainer_cfg(tmp_path, "trainer.run_name=r"))
    changed = trainer_cfg(tmp_path, "trainer.run_name=r", "trainer.checkpoint.resume=auto", "rollout.k=4", "trainer.optim.lr=0.01")
    with pytest.raises(ConfigError) as e:
        resolve_run_folder(changed)
    msg = str(e.value)
    assert "differs from its config.yaml: rollout.k: 2 -> 4; trainer.optim.lr: 0.001 -> 0.01" in msg
    assert "trainer.checkpoint.resume_allow_changes=true" in msg and "\n" not in msg
    assert not (run_dir / "config_changes.jsonl").exists()
    # the same config (and where/how it is started) resumes
    same = trainer_cfg(tmp_path, "trainer.run_name=r", "trainer.checkpoint.resume=auto", "trainer.checkpoint.save_freq=1")
    assert resolve_run_folder(same) == (run_dir, ckpt_io.checkpoint_dir(run_dir, 2))


def test_resume_allow_changes_records_the_diff(tmp_path, caplog):
    run_dir = tmp_path / "outputs" / "tiny_test" / "r"
    _fake_run(run_dir, trainer_cfg(tmp_path, "trainer.run_name=r"))
    cfg = trainer_cfg(tmp_path, "trainer.run_name=r", "trainer.checkpoint.resume=auto", "rollout.k=4",
                      "trainer.checkpoint.resume_allow_changes=true")
    with caplog.at_level(logging.WARNING):
        assert resolve_run_folder(cfg)[1] == ckpt_io.checkpoint_dir(run_dir, 2)
    record = json.loads((run_dir / "config_changes.jsonl").read_text())
    assert record["changes"] == {"rollout.k": [2, 4]} and record["checkpoint"] == "step_000002"
    assert "changed settings" in caplog.text


def test_resume_auto_without_checkpoint_starts_fresh_apart_from_stale_outputs(tmp_path, caplog):
    cfg = trainer_cfg(tmp_path, "trainer.run_name=r", "trainer.checkpoint.resume=auto")
    run_dir = tmp_path / "outputs" / "tiny_test" / "r"
    (run_dir / "trajectories").mkdir(parents=True)  # killed during step 3, before any checkpoint
    (run_dir / "trajectories" / "step_3.jsonl").write_text("{}\n")
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    with caplog.at_level(logging.WARNING):
        assert resolve_run_folder(cfg) == (run_dir, None)
    assert "no complete checkpoint" in caplog.text and "starting fresh" in caplog.text
    stale = [p for p in run_dir.iterdir() if p.name.startswith("stale-")]
    assert len(stale) == 1 and (stale[0] / "trajectories" / "step_3.jsonl").exists()
    assert not (run_dir / "trajectories").exists() and not (run_dir / "metrics.jsonl").exists()
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # an empty / new folder: still says it starts fresh
        resolve_run_folder(trainer_cfg(tmp_path, "trainer.run_name=new", "trainer.checkpoint.resume=auto"))
    assert "starting fresh" in caplog.text


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """Two real checkpoints (full fine-tuning, tiny model, random-token engine)."""
    tmp = tmp_path_factory.mktemp("ckpt")
    cfg = trainer_cfg(tmp, "trainer.run_name=r", "trainer.total_steps=2", "trainer.checkpoint.save_freq=1")
    trainer = LocalTrainer(cfg, engine=RandomTokenEngine())
    try:
        trainer.fit()
    finally:
        trainer.close()
    return tmp, trainer.run_dir


def _copy_run(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("damaged", ["model.safetensors", "optimizer.pt"])
def test_unreadable_latest_checkpoint_falls_back_naming_the_file(saved_run, tmp_path, caplog, damaged):
    tmp, run_dir = saved_run
    run = _copy_run(run_dir, tmp_path / "outputs" / "tiny_test" / "r")
    bad = next(ckpt_io.checkpoint_dir(run, 2).rglob(damaged))
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])  # truncated, as by a full disk
    cfg = trainer_cfg(tmp_path, "trainer.run_name=r", "trainer.total_steps=2", "trainer.checkpoint.save_freq=1",
                      "trainer.checkpoint.resume=auto", f"env.data_root={tmp / 'datasets'}")
    with caplog.at_level(logging.WARNING):
        trainer = LocalTrainer(cfg, engine=RandomTokenEngine())
    trainer.close()
    assert trainer.step == 1  # resumed from step_000001
    assert f"{bad}" in caplog.text and "trying the previous complete checkpoint" in caplog.text


def test_checkpoint_of_other_policies_is_one_line(saved_run, tmp_path):
    tmp, run_dir = saved_run
    from pettingllms.trainer.assemble import build_policy_set

    cfg = trainer_cfg(tmp, "policies=per_agent_lora")
    workers = build_policy_set(cfg, ["writer", "checker"]).workers
    with pytest.raises(ConfigError) as e:
        ckpt_io.load_checkpoint(ckpt_io.checkpoint_dir(run_dir, 2), workers)
    assert str(e.value).startswith(f"checkpoint {ckpt_io.checkpoint_dir(run_dir, 2)} holds policies ['shared'] "
                                   f"but this config has ['checker', 'writer']")
    # and resume=auto refuses it before loading anything, as a changed config
    run = _copy_run(run_dir, tmp_path / "outputs" / "tiny_test" / "r")
    with pytest.raises(ConfigError, match="differs from its config.yaml: agents_mode"):
        resolve_run_folder(trainer_cfg(tmp_path, "trainer.run_name=r", "trainer.checkpoint.resume=auto", "policies=per_agent_lora",
                                "trainer.total_steps=2", "trainer.checkpoint.save_freq=1", f"env.data_root={tmp / 'datasets'}"))
    assert run.exists()


# ---------------------------------------------------------------- evaluation results

def test_eval_results_are_keyed_by_their_settings(tmp_path):
    from pettingllms.evaluate import output_path, refuse_other_settings, settings_hash

    cfg_a = trainer_cfg(tmp_path, "eval.k=2")
    cfg_b = trainer_cfg(tmp_path, "eval.k=2", "eval.temperature=0.2")
    ckpt = str(tmp_path / "run" / "checkpoints" / "step_000001")
    a, b = settings_hash(cfg_a, ckpt), settings_hash(cfg_b, ckpt)
    assert a != b and a == settings_hash(trainer_cfg(tmp_path, "eval.k=2", "trainer.logging.progress_bar=true"), ckpt)
    assert output_path(cfg_a, ckpt, a) != output_path(cfg_b, ckpt, b)
    assert output_path(cfg_a, ckpt, a).name == f"eval_{ENV_NAME}_test_k2_{a}.json"
    # an explicit eval.output made with other settings is refused before evaluating
    out = tmp_path / "mine.json"
    out.write_text(json.dumps({"settings_hash": a, "overall": {}}))
    refuse_other_settings(out, a)
    with pytest.raises(ConfigError, match="holds an evaluation made with other settings"):
        refuse_other_settings(out, b)
    assert json.loads(out.read_text())["settings_hash"] == a
