"""`autoevol_mixed` (math + code, the published co-training env): the mix by hand, per-problem
graders, and the published recipe composed on it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakes import make_cfg
from pettingllms.envs import make_env
from pettingllms.envs.autoevol.mixed import AutoEvolMixedEnv, mix_counts
from pettingllms.trainer.components import load_problems

ROOT = Path(__file__).resolve().parents[1]


def test_mix_counts_by_hand():
    assert mix_counts(10, 10, 0.5) == (10, 10)
    assert mix_counts(10, 4, 0.5) == (4, 4)  # the code rows limit it
    assert mix_counts(100, 10, 0.75) == (30, 10)  # 30 / 40 = 0.75
    assert mix_counts(5, 100, 0.25) == (5, 15)
    assert mix_counts(7, 9, 0.0) == (0, 9) and mix_counts(7, 9, 1.0) == (7, 0)
    with pytest.raises(ValueError, match="math_ratio must be in"):
        mix_counts(1, 1, 1.5)


def _fake_load(name, split):
    n = {("math", "train"): 12, ("math", "test"): 2, ("code", "train"): 3, ("code", "test"): 1}[(name, split)]
    return [{"id": str(i), "question": f"{name} {i}"} for i in range(n)]


def test_compose_problems_by_hand():
    rows = AutoEvolMixedEnv.compose_problems({"math_ratio": 0.75}, "train", None, _fake_load)
    assert [r["id"] for r in rows] == [f"math/{i}" for i in range(9)] + ["code/0", "code/1", "code/2"]
    assert [r["task"] for r in rows] == ["math"] * 9 + ["code"] * 3  # 9 / 12 = 0.75
    test = AutoEvolMixedEnv.compose_problems({"math_ratio": 0.75}, "test", None, _fake_load)
    assert [r["id"] for r in test] == ["math/0", "math/1", "code/0"]  # both test splits whole
    assert len(AutoEvolMixedEnv.compose_problems({}, "train", 4, _fake_load)) == 4


def test_apps_share_of_the_code_rows_by_hand(caplog):
    def load(name, split):
        if name == "math":
            return [{"id": str(i), "source": "polaris"} for i in range(20)]
        return ([{"id": f"a{i}", "source": "apps"} for i in range(14)] +
                [{"id": f"c{i}", "source": "code_contests"} for i in range(3)])
    rows = AutoEvolMixedEnv.compose_problems({"math_ratio": 0.5, "apps_ratio": 0.7}, "train", None, load)
    code = [r["id"] for r in rows if r["task"] == "code"]
    assert code == [f"code/a{i}" for i in range(7)] + ["code/c0", "code/c1", "code/c2"]  # 7 / 10 = 0.7, APPS first
    assert sum(r["task"] == "math" for r in rows) == 10
    test = AutoEvolMixedEnv.compose_problems({"apps_ratio": 0.7}, "test", None, load)
    assert sum(r["task"] == "code" for r in test) == 17  # the test split stays whole

    def offline(name, split):  # a code data set built without the hub: no APPS rows
        return [{"id": "0", "source": "humaneval"}, {"id": "1", "source": "codeio"}] if name == "code" else \
            [{"id": "m", "source": "easy_add1"}]
    with caplog.at_level("WARNING"):
        rows = AutoEvolMixedEnv.compose_problems({"math_ratio": 0.5, "apps_ratio": 0.7}, "train", None, offline)
    assert [r["id"] for r in rows] == ["math/m", "code/0"]
    assert "has no APPS rows" in caplog.text and "1 codeio, 1 humaneval" in caplog.text
    with pytest.raises(ValueError, match="must be in"):
        make_env("autoevol_mixed", apps_ratio=2.0)


def test_each_problem_is_graded_by_its_family():
    env = make_env("autoevol_mixed", math_ratio=0.5)
    env.reset({"id": "m", "task": "math", "question": "1+1?", "answer": "2"}, seed=0)
    assert env.opts.task == "math" and env.grade("\\boxed{2}") == 1.0 and env.grade("3") == 0.0
    env.reset({"id": "c", "task": "code", "question": "Print the double of n.", "kind": "io",
               "starter": "", "tests": [{"input": "2\n", "output": "4\n"}]}, seed=0)
    assert env.opts.task == "code"
    assert env.grade("```python\nprint(2 * int(input()))\n```") == 1.0
    assert env.grade("```python\nprint(0)\n```") == 0.0
    with pytest.raises(ValueError, match="needs task 'math' or 'code'"):
        env.reset({"id": "x", "question": "?"}, seed=0)
    with pytest.raises(ValueError, match="task is per problem"):
        make_env("autoevol_mixed", task="math")


def test_trainer_loads_the_mix_from_the_math_and_code_data(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    for name, n in (("math", 6), ("code", 2)):
        (tmp_path / name).mkdir()
        for split in ("train", "test"):
            rows = [{"id": str(i), "question": f"{name} {split} {i}"} for i in range(n)]
            pq.write_table(pa.Table.from_pylist(rows), tmp_path / name / f"{split}.parquet")
    cfg = make_cfg(env={"name": "autoevol_mixed", "data": "autoevol_mixed", "data_root": str(tmp_path),
                        "options": {"math_ratio": 0.6}}, rollout={"strategy": "autoevol"})
    train = load_problems(cfg, "train")
    assert [r["id"] for r in train] == ["math/0", "math/1", "math/2", "code/0", "code/1"]  # 3 / 5
    assert train[0]["question"] == "math train 0" and train[-1]["task"] == "code"
    assert len(load_problems(cfg, "test")) == 8


def test_published_recipe_composes_on_the_mixed_env():
    env = {**os.environ, "PYTHON": sys.executable}
    r = subprocess.run(["bash", "scripts/train/autoeval/example_cotrain_autoeval.sh", "--dry-run"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    for line in ("path: Qwen/Qwen3-1.7B", "name: autoevol_mixed", "math_ratio: 0.5", "apps_ratio: 0.7",
                 "math_data: polaris", "designs: 4",
                 "executions: 4", "executor_group: question", "max_prompt_tokens: 8192",
                 "max_new_tokens: 8192", "batch_size: 8", "total_steps: 400", "designer: 1.0e-09",
                 "executor: 5.0e-06", "swap_every: 10", "design_format: workflow", "reward: published",
                 "backend: verl", "engine: vllm", "n_gpus_per_node: 8", "enabled: false"):
        assert line in r.stdout, line
    cpu = subprocess.run(["bash", "scripts/train/autoeval/example_cotrain_autoeval_cpu.sh", "--dry-run"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert cpu.returncode == 0 and "path: embedded:smollm2-135m-instruct" in cpu.stdout
    assert "name: autoevol\n" in cpu.stdout and "design_format: pettingllms" in cpu.stdout
