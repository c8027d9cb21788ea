"""Hydra's command line on pettingllms.train / evaluate: sweeps, run dirs, launchers, --cfg,
completion, the user's config folders (--config-dir, hydra.searchpath), and the one-line errors
kept from before. Runs use the tiny model and 1 step."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pettingllms.cli.app import default_output_dirs, expand_jobs, hydra_overrides, run_main, split_argv
from pettingllms.cli.config_loading import load_config, to_yaml
from pettingllms.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """The offline easy-arithmetic math set (seconds to build), outside datasets/."""
    root = tmp_path_factory.mktemp("data")
    subprocess.run([sys.executable, "scripts/dataprocess/load_math.py", "--offline", "--preset", "math_easy",
                    "--out", str(root / "math_easy")], cwd=ROOT, env=ENV, check=True, capture_output=True)
    return root


def tiny_args(data_root: Path, out: Path) -> list[str]:
    return ["--config-name", "tiny_test", "model=tiny", "trainer.total_steps=1", "env.data=math_easy",
            f"env.data_root={data_root}", f"trainer.output_dir={out}", "eval.limit=1"]


def cli(*args: str, module: str = "pettingllms.train", env: dict | None = None, timeout: int = 300):
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env or ENV, capture_output=True,
                          text=True, timeout=timeout)


def job_config(run: Path) -> dict:
    return yaml.safe_load((run / "config.yaml").read_text())


# ---------------------------------------------------------------------- no training
def test_sweep_expansion_and_override_rewrite():
    jobs = expand_jobs(["seed=0,1", "algorithm=at_grpo,grpo", "rollout.k=2", "hydra.launcher.n_jobs=2"], True)
    assert len(jobs) == 4 and ["seed=1", "algorithm=grpo", "rollout.k=2"] in jobs
    assert expand_jobs(["seed=range(0,3)"], True) == [["seed=0"], ["seed=1"], ["seed=2"]]
    with pytest.raises(ConfigError, match="add -m"):
        expand_jobs(["seed=0,1"], False)
    assert hydra_overrides(["seed=0,1", "+env.options.x=1", "env=sudoku", "~trainer.optim.lr", "hydra.run.dir=/x"]) == \
        ["++seed=0,1", "++env.options.x=1", "env=sudoku", "~trainer.optim.lr", "hydra.run.dir=/x"]


def test_default_run_dir_is_outputs_experiment_run(tmp_path):
    cfg = load_config("tiny_test", [f"trainer.output_dir={tmp_path}", "trainer.run_name=r1"])
    assert default_output_dirs(split_argv([], "tiny_test"), [cfg], "train") == \
        [f"hydra.run.dir='{tmp_path}/tiny_test/r1'"]
    # a resumed run (fixed name + resume=auto) is placed in the same folder again
    cfg = load_config("tiny_test", [f"trainer.output_dir={tmp_path}", "trainer.run_name=r1", "trainer.checkpoint.resume=auto"])
    assert default_output_dirs(split_argv([], "tiny_test"), [cfg], "train") == \
        [f"hydra.run.dir='{tmp_path}/tiny_test/r1'"]
    sweep = default_output_dirs(split_argv(["-m", "seed=0,1"], "tiny_test"), [cfg], "train")
    assert sweep == [f"hydra.sweep.dir='{tmp_path}/tiny_test/r1'", "hydra.sweep.subdir=${hydra.job.num}"]
    # what the user sets wins
    assert default_output_dirs(split_argv(["hydra.run.dir=/elsewhere"], "tiny_test"), [cfg], "train") == []


def test_cfg_all_prints_job_and_hydra_config():
    r = cli("--config-name", "tiny_test", "trainer.total_steps=3", "--cfg", "all")
    assert r.returncode == 0, r.stderr
    printed = yaml.safe_load(r.stdout)
    assert printed["experiment"] == "tiny_test" and printed["trainer"]["total_steps"] == 3
    assert printed["hydra"]["job"]["name"] == "train"
    assert printed["hydra"]["run"]["dir"].startswith("outputs/tiny_test/")


def test_tab_completion_lists_env_options():
    env = {**ENV, "COMP_LINE": "pettingllms-train env=", "COMP_POINT": "22"}
    r = cli("--shell-completion", "query=bash", env=env)
    assert r.returncode == 0, r.stderr
    assert {"env=math", "env=sudoku", "env=plan_path"} <= set(r.stdout.split())
    r = cli("-sc", "install=bash")
    assert r.returncode == 0 and "hydra_bash_completion" in r.stdout


@pytest.mark.parametrize("args,message", [
    (["-m", "seed=0,1", "rollout.strategy=tre"], "error: invalid value 'tre' for 'rollout.strategy'"),
    (["-m", "seed=0,1", "trainer.lrr=1"], "error: unknown config key 'trainer.lrr' (did you mean 'trainer.optim.lr'?)"),
    (["seed=0,1"], "error: 'seed=0,1' is a sweep: add -m"),
    (["trainer.checkpoint.resume=auto"], "error: trainer.checkpoint.resume=auto needs a stable run folder"),
])
def test_sweep_errors_are_one_line(args, message):
    r = cli("--config-name", "tiny_test", *args)
    assert r.returncode == 2 and r.stderr.startswith(message) and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_dry_run_prints_every_sweep_job():
    r = cli("--config-name", "tiny_test", "-m", "seed=3,4", "--dry-run")
    assert r.returncode == 0, r.stderr
    docs = [yaml.safe_load(d) for d in r.stdout.split("\n---\n")]
    assert [d["seed"] for d in docs] == [3, 4]


# ---------------------------------------------------------------------- tiny runs
def test_multirun_makes_one_folder_per_job(tmp_path, data_root):
    r = cli(*tiny_args(data_root, tmp_path), "trainer.run_name=sweep", "-m", "seed=0,1")
    assert r.returncode == 0, r.stderr[-3000:]
    runs = sorted((tmp_path / "tiny_test" / "sweep").glob("[0-9]*"))
    assert [p.name for p in runs] == ["0", "1"]
    assert [job_config(p)["seed"] for p in runs] == [0, 1]
    for p in runs:
        assert job_config(p)["trainer"]["total_steps"] == 1 and job_config(p)["model"]["path"] == "tiny:test"
        assert len((p / "metrics.jsonl").read_text().splitlines()) == 1
        assert (p / ".hydra" / "overrides.yaml").exists()


@pytest.mark.slow  # two worker processes, each importing torch
def test_joblib_launcher_runs_jobs_in_parallel_processes(tmp_path, data_root):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    r = cli(*tiny_args(data_root, tmp_path), "-m", "seed=0,1", "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={tmp_path}/sw")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Joblib.Parallel(n_jobs=2" in r.stdout + r.stderr
    assert [job_config(tmp_path / "sw" / n)["seed"] for n in ("0", "1")] == [0, 1]
    for n in ("0", "1"):
        hydra_cfg = yaml.safe_load((tmp_path / "sw" / n / ".hydra" / "hydra.yaml").read_text())
        assert "Joblib" in hydra_cfg["hydra"]["launcher"]["_target_"]
        assert (tmp_path / "sw" / n / "metrics.jsonl").exists()


def test_evaluate_takes_hydra_run_dir(tmp_path, data_root):
    r = cli(*tiny_args(data_root, tmp_path), "eval.k=1", f"hydra.run.dir={tmp_path}/ev", module="pettingllms.evaluate")
    assert r.returncode == 0, r.stderr[-3000:]
    assert list((tmp_path / "ev").glob("eval_math_test_k1_*.json")) and (tmp_path / "ev" / "evaluate.log").exists()


# ---------------------------------------------------------------------- the user's config folders
MY_EXP = """defaults:
  - tiny_test
  - _self_
experiment: my_exp
rollout:
  k: 3
"""
MY_ALGO = "name: at_grpo\nadvantage: grpo\ngroup_by: [problem, agent]\nclip_low: 0.1\n"


@pytest.fixture
def user_dir(tmp_path) -> Path:
    """A config folder outside the repo: an experiment on top of tiny_test, and an algorithm option."""
    root = tmp_path / "my_configs"
    (root / "algorithm").mkdir(parents=True)
    (root / "my_exp.yaml").write_text(MY_EXP)
    (root / "algorithm" / "my_algo.yaml").write_text(MY_ALGO)
    return root


def dry_run(*args: str) -> dict:
    r = cli(*args, "--dry-run")
    assert r.returncode == 0, r.stderr
    return yaml.safe_load(r.stdout)


def test_config_dir_adds_an_experiment_built_on_ours(user_dir):
    cfg = dry_run("--config-dir", str(user_dir), "--config-name", "my_exp")
    assert cfg["experiment"] == "my_exp" and cfg["rollout"]["k"] == 3  # the user's values
    assert cfg["model"]["path"] == "tiny:test" and cfg["rollout"]["sampling"]["max_new_tokens"] == 8  # tiny_test's
    assert cfg["trainer"]["total_steps"] == 2 and cfg["algorithm"]["clip_low"] == 0.2


def test_config_dir_adds_a_group_option(user_dir):
    cfg = dry_run("--config-name", "tiny_test", "--config-dir", str(user_dir), "algorithm=my_algo")
    assert cfg["experiment"] == "tiny_test" and cfg["rollout"]["k"] == 2
    assert cfg["algorithm"]["clip_low"] == 0.1 and cfg["algorithm"]["group_by"] == ["problem", "agent"]
    r = cli("--config-dir", str(user_dir), "--help")  # and the usage lists both
    assert "my_exp" in r.stdout and "grpo, my_algo" in r.stdout


def test_hydra_searchpath_adds_folders(user_dir, tmp_path):
    cfg = dry_run("--config-name", "tiny_test", f"hydra.searchpath=[file://{user_dir}]", "algorithm=my_algo")
    assert cfg["algorithm"]["clip_low"] == 0.1 and cfg["algorithm"]["group_by"] == ["problem", "agent"]
    # ... and from the primary config's hydra: block
    (tmp_path / "more" / "algorithm").mkdir(parents=True)
    (tmp_path / "more" / "algorithm" / "far_algo.yaml").write_text("name: at_grpo\nclip_low: 0.05\n")
    (user_dir / "with_block.yaml").write_text(MY_EXP + f"hydra:\n  searchpath: [file://{tmp_path}/more]\n")
    cfg = dry_run("-cd", str(user_dir), "-cn", "with_block", "algorithm=far_algo")
    assert cfg["rollout"]["k"] == 3 and cfg["algorithm"]["clip_low"] == 0.05


def test_config_dir_is_searched_before_ours(user_dir):
    (user_dir / "algorithm" / "at_grpo.yaml").write_text(MY_ALGO.replace("0.1", "0.05"))
    cfg = dry_run("--config-dir", str(user_dir), "--config-name", "tiny_test")
    assert cfg["algorithm"]["clip_low"] == 0.05
    # the order hydra.main itself uses
    r = cli("--config-dir", str(user_dir), "--config-name", "tiny_test", "--info", "searchpath")
    assert r.returncode == 0, r.stderr
    paths = [line.split("|")[2].strip() for line in r.stdout.splitlines() if "file://" in line]
    assert paths == [f"file://{user_dir}", f"file://{ROOT / 'configs'}"]


@pytest.mark.parametrize("args,message", [
    (["-cn", "my_exp", "rollout.kk=1"], "error: unknown config key 'rollout.kk' (did you mean 'rollout.k'?)"),
    (["-cn", "bad_key"], "error: unknown config key 'rollout.kk' (did you mean 'rollout.k'?)"),
    (["-cn", "tiny_test", "algorithm=my_algoo"],
     "error: unknown algorithm config 'my_algoo' (did you mean 'my_algo'?)"),
    (["-cn", "my_exx"], "error: unknown config 'my_exx' in {user_dir}, "),
])
def test_bad_user_config_is_one_line(user_dir, args, message):
    (user_dir / "bad_key.yaml").write_text(MY_EXP + "  kk: 3\n")
    r = cli("--config-dir", str(user_dir), *args)
    assert r.returncode == 2 and r.stderr.startswith(message.format(user_dir=user_dir)), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stdout + r.stderr


@pytest.mark.parametrize("args,message", [
    (["-cn", "my_exp", "hydra.searchpath=[file://{user_dir}]"], "error: config 'my_exp' is only in hydra.searchpath"),
    (["-cn", "tiny_test", "hydra.searchpath=[file://{user_dir}/nope]"], "error: hydra.searchpath entry 'file://"),
    (["-cn", "tiny_test", "-cd", "{user_dir}/nope"], "error: --config-dir '"),
])
def test_bad_search_path_is_one_line(user_dir, args, message):
    r = cli(*[a.format(user_dir=user_dir) for a in args])
    assert r.returncode == 2 and r.stderr.startswith(message), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stdout + r.stderr


@pytest.fixture
def keep_root_logging():
    """hydra.main run in this process configures the root logger (INFO, its handlers): put it back
    so later tests see the logging they would see alone."""
    import logging

    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


@pytest.mark.parametrize("args", [
    ["--config-dir", "{user_dir}", "--config-name", "my_exp", "algorithm=my_algo"],
    ["--config-name", "tiny_test", "hydra.searchpath=[file://{user_dir}]", "algorithm=my_algo"],
])
def test_hydra_job_gets_the_dry_run_config(user_dir, tmp_path, args, keep_root_logging):
    """hydra.main composes from the same search path as the pre-flight."""
    args = [a.format(user_dir=user_dir) for a in args] + [f"trainer.output_dir={tmp_path}"]
    jobs: list[dict] = []
    rc = run_main([*args, f"hydra.run.dir={tmp_path}/run"], prog="pettingllms.train", default_config="quickstart",
                  what="", kind="train", body=lambda cfg, job: jobs.append(yaml.safe_load(to_yaml(cfg))))
    assert rc == 0 and len(jobs) == 1
    assert jobs[0]["algorithm"]["clip_low"] == 0.1 and jobs[0] == dry_run(*args)
