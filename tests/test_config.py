"""Every YAML in configs/ composes and validates; bad keys fail with one clear message."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms.cli.app import split_argv
from pettingllms.cli.config_loading import (CONFIG_GROUPS, config_dir, experiment_names, group_options,
                                            load_config)
from pettingllms.errors import ConfigError

CONFIGS = config_dir()
BASE = "tiny_test"  # group files are composed onto this experiment


def test_config_dir_is_the_repo_configs():
    assert (CONFIGS / "quickstart.yaml").exists()
    assert set(CONFIG_GROUPS) <= {p.name for p in CONFIGS.iterdir() if p.is_dir()}


@pytest.mark.parametrize("name", experiment_names(CONFIGS))
def test_experiment_config_composes(name):
    cfg = load_config(name)
    assert cfg.experiment, f"{name}.yaml must set `experiment`"
    assert cfg.experiment == name or name in ("single_grpo", "at_grpo_shared", "at_grpo_per_role")
    # Every experiment picks every group explicitly, so `group=option` works on all of them.
    text = (CONFIGS / f"{name}.yaml").read_text()
    for group in CONFIG_GROUPS:
        assert f"- {group}:" in text, f"{name}.yaml does not choose a '{group}' config"


@pytest.mark.parametrize("group,option", [(g, o) for g in CONFIG_GROUPS for o in group_options(g, CONFIGS)])
def test_group_option_composes(group, option):
    # MetaAgent-X's env and runner only make sense together, and graph's (validate refuses one without the other)
    partner = {("rollout", "autoevol"): ["env=autoevol"], ("env", "autoevol"): ["rollout=autoevol"],
               ("env", "autoevol_code"): ["rollout=autoevol"],
               ("env", "autoevol_mixed"): ["rollout=autoevol"],
               ("rollout", "graph"): ["env=graph"], ("env", "graph"): ["rollout=graph"],
               ("env", "graph_langgraph_code"): ["rollout=graph"]}.get((group, option), [])
    cfg = load_config(BASE, [f"{group}={option}", *partner])
    if group == "env":
        assert cfg.env.name  # the env file names its env
    if group == "policies":
        assert cfg.agents_mode == {"shared": "explicit", "per_agent_lora": "per_agent_lora",
                                   "per_agent_model": "per_agent_model"}[option]


def test_quickstart_is_small_math_at_grpo_on_embedded_model():
    cfg = load_config("quickstart")
    assert cfg.model.path == "embedded:smollm2-135m-instruct"
    assert cfg.env.name == "math" and cfg.env.data == "math_easy"
    assert cfg.rollout.strategy == "tree" and cfg.algorithm.group_by == ["problem", "turn", "agent"]
    assert cfg.model.lora.enabled
    assert cfg.rollout.batch_size * cfg.rollout.k <= 32 and cfg.rollout.sampling.max_new_tokens <= 128


def test_overrides_set_any_schema_field():
    cfg = load_config(BASE, ["trainer.deterministic=false", "rollout.sampling.top_k=5", "trainer.optim.betas=[0.8,0.9]",
                             "policies=per_agent_lora", "policies.tool.lr=0.001", "env.options.timeout_s=2.0",
                             "seed=7"])
    assert cfg.trainer.deterministic is False and cfg.rollout.sampling.top_k == 5
    assert list(cfg.trainer.optim.betas) == [0.8, 0.9] and cfg.seed == 7
    assert cfg.policies.tool.lr == 0.001 and cfg.env.options.timeout_s == 2.0


@pytest.mark.parametrize("override,message", [
    ("trainer.lrr=1", "unknown config key 'trainer.lrr' (did you mean 'trainer.optim.lr'?)"),
    ("rollout.sampling.temprature=1", "unknown config key 'rollout.sampling.temprature' "
                                      "(did you mean 'rollout.sampling.temperature'?)"),
    ("sed=1", "unknown config key 'sed' (did you mean 'seed'?)"),
    ("model=tinny", "unknown model config 'tinny' (did you mean 'tiny'?)"),
    ("rollout.strategy=tre", "invalid value 'tre' for 'rollout.strategy' (did you mean 'tree'?)"),
    ("trainer.total_steps=many", "invalid config at 'trainer.total_steps'"),
])
def test_bad_override_names_the_problem(override, message):
    with pytest.raises(ConfigError) as e:
        load_config(BASE, [override])
    assert message in str(e.value)


@pytest.mark.parametrize("old,new,value", [
    ("trainer.verl.device", "trainer.device", "cpu"),
    ("trainer.lr", "trainer.optim.lr", 0.25),
    ("trainer.save_freq", "trainer.checkpoint.save_freq", 3),
    ("trainer.resume", "trainer.checkpoint.resume", "auto"),
    ("trainer.val_before", "trainer.validation.val_before", True),
    ("trainer.progress_bar", "trainer.logging.progress_bar", False),
])
def test_moved_key_still_works_and_says_where_it_lives_now(old, new, value, caplog):
    """A YAML or an override with an old name sets the new key, with one deprecation line."""
    import logging

    from omegaconf import OmegaConf

    from pettingllms.config import validate as validate_module

    validate_module._warned.discard(old)
    nested: dict = {}
    node = nested
    *parents, leaf = old.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    with caplog.at_level(logging.WARNING, logger="pettingllms.config.validate"):
        cfg = validate_module.validate(OmegaConf.create(nested))
        validate_module.validate(OmegaConf.create(nested))  # said once per process, not per config
    assert OmegaConf.select(cfg, new) == value
    lines = [r.getMessage() for r in caplog.records if old in r.getMessage()]
    assert lines == [f"config key '{old}' is deprecated: it is now '{new}' (the old name still works)"]
    text = str(value).lower() if isinstance(value, bool) else str(value)
    assert OmegaConf.select(load_config(BASE, [f"{old}={text}"]), new) == value  # an override too


def test_unknown_key_inside_a_yaml_file(tmp_path):
    cdir = tmp_path / "configs"
    shutil.copytree(CONFIGS, cdir)
    trainer = cdir / "trainer" / "local.yaml"
    good = trainer.read_text()
    trainer.write_text(good + "grad_clipp: 2.0\n")
    with pytest.raises(ConfigError) as e:
        load_config(BASE, cdir=cdir)
    assert str(e.value) == "unknown config key 'trainer.grad_clipp' (did you mean 'trainer.optim.grad_clip'?)"
    trainer.write_text(good)
    # and at the top of an experiment file
    exp = cdir / "quickstart.yaml"
    exp.write_text(exp.read_text() + "experimnet: x\n")
    with pytest.raises(ConfigError, match="unknown config key 'experimnet' \\(did you mean 'experiment'\\?\\)"):
        load_config("quickstart", cdir=cdir)


def test_unknown_experiment_name():
    with pytest.raises(ConfigError, match="unknown config 'quickstrat'.*did you mean 'quickstart'"):
        load_config("quickstrat")


def _cli(*args: str, module: str = "pettingllms.train") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("module", ["pettingllms.train", "pettingllms.evaluate"])
def test_cli_misspelt_key_exits_2_with_one_line(module):
    r = _cli("--config-name", "quickstart", "trainer.lrr=0.1", module=module)
    assert r.returncode == 2
    assert r.stderr.strip() == "error: unknown config key 'trainer.lrr' (did you mean 'trainer.optim.lr'?)"
    assert "Traceback" not in r.stderr + r.stdout


def test_cli_misspelt_key_in_yaml_exits_2(tmp_path):
    cdir = tmp_path / "configs"
    shutil.copytree(CONFIGS, cdir)
    (cdir / "model" / "tiny.yaml").write_text("path: tiny:test\ndtyp: float32\n")
    r = _cli("--config-dir", str(cdir), "--config-name", BASE)
    assert r.returncode == 2
    assert r.stderr.strip() == "error: unknown config key 'model.dtyp' (did you mean 'model.dtype'?)"


def test_cli_dry_run_prints_the_composed_config():
    r = _cli("--config-name", "quickstart", "trainer.total_steps=3", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "experiment: quickstart" in r.stdout and "total_steps: 3" in r.stdout
    # Hydra's own --cfg job prints the composed YAML layers (the schema fills in the rest)
    r2 = _cli("--config-name", "quickstart", "trainer.total_steps=3", "--cfg", "job")
    assert r2.returncode == 0, r2.stderr
    assert "experiment: quickstart" in r2.stdout and "total_steps: 3" in r2.stdout


def test_cli_help_lists_experiments_and_groups():
    r = _cli("--help")
    assert r.returncode == 0
    assert "quickstart" in r.stdout and "policies:" in r.stdout and "per_agent_lora" in r.stdout


def test_cli_unknown_backend_is_a_clear_error(tmp_path):
    r = _cli("--config-name", BASE, "trainer.backend=slurm", f"trainer.output_dir={tmp_path}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "trainer.backend" in r.stderr and "local" in r.stderr and "ray" in r.stderr and "verl" in r.stderr
    assert not any(tmp_path.iterdir())  # refused before anything was made


def test_split_argv_keeps_our_flags_and_hands_the_rest_to_hydra():
    a = split_argv(["-cn", "x.yaml", "a.b=1", "--dry-run", "-m", "seed=0,1", "--cfg", "all"], "quickstart")
    assert (a.config_name, a.overrides, a.dry_run) == ("x", ["a.b=1", "seed=0,1"], True)
    assert a.hydra_flags == ["-m", "--cfg", "all"] and a.multirun
    with pytest.raises(ConfigError, match="unknown option '--bogus'"):
        split_argv(["--bogus"], "quickstart")


def test_console_scripts_are_declared():
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert 'pettingllms-train = "pettingllms.train:main"' in text
    assert 'pettingllms-evaluate = "pettingllms.evaluate:main"' in text
