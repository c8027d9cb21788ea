"""Hydra's command line on pettingllms.train / evaluate: sweeps, run dirs, launchers, --cfg,
completion, and the one-line errors kept from before. Runs use the tiny model and 1 step."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pettingllms.cli.app import default_output_dirs, expand_jobs, hydra_overrides, split_argv
from pettingllms.cli.config_loading import load_config
from pettingllms.config import ConfigError

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
    assert hydra_overrides(["seed=0,1", "+env.options.x=1", "env=sudoku", "~trainer.lr", "hydra.run.dir=/x"]) == \
        ["++seed=0,1", "++env.options.x=1", "env=sudoku", "~trainer.lr", "hydra.run.dir=/x"]


def test_default_run_dir_is_outputs_experiment_run(tmp_path):
    cfg = load_config("tiny_test", [f"trainer.output_dir={tmp_path}", "trainer.run_name=r1"])
    assert default_output_dirs(split_argv([], "tiny_test"), [cfg], "train") == \
        [f"hydra.run.dir='{tmp_path}/tiny_test/r1'"]
    # a resumed run (fixed name + resume=auto) is placed in the same folder again
    cfg = load_config("tiny_test", [f"trainer.output_dir={tmp_path}", "trainer.run_name=r1", "trainer.resume=auto"])
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
    (["-m", "seed=0,1", "trainer.lrr=1"], "error: unknown config key 'trainer.lrr' (did you mean 'trainer.lr'?)"),
    (["seed=0,1"], "error: 'seed=0,1' is a sweep: add -m"),
    (["trainer.resume=auto"], "error: trainer.resume=auto needs a stable run folder"),
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
