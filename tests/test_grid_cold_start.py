"""The grid envs' plan-agent cold start: reference solutions, SFT rows as the plan agent sees them,
the builder script on a real (tiny) model, and an SFT step on its rows."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms.envs import make_env
from pettingllms.envs.dataset import load_split
from pettingllms.envs.grid_cold_start import cold_start_rows, plan_row, reset_envs
from pettingllms.records import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
GRID_ENVS = ("sudoku", "sokoban", "plan_path")
PRINTS_A_MOVE = {"sudoku": "print('Actions: (1, 1, 1)')", "sokoban": "print('Actions: U')",
                 "plan_path": "print('Actions: U')"}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("cold_start_data")


def _problems(data_root, env, split="train", limit=12):
    return load_split(f"{env}_easy", split, data_root, limit=limit, builder=f"pettingllms.envs.{env}.data")


@pytest.mark.parametrize("env_name", GRID_ENVS)
def test_reference_actions_solve_every_easy_problem_in_few_moves(data_root, env_name):
    for problem in _problems(data_root, env_name, limit=40):
        env = make_env(env_name, max_turns=2)
        env.reset(problem, 0)
        actions = env.reference_actions(env.state)
        assert actions, problem["id"]
        state = copy.deepcopy(env.state)
        out = env.apply(state, actions)
        assert env.solved(state) and out.invalid == 0, (problem["id"], actions)
        if env_name != "sudoku":  # a shortest path: the level's optimum
            assert len(actions) == env.optimal_moves, (problem["id"], actions)


def test_sudoku_reference_fills_only_the_blanks_left_and_none_for_a_dead_end(data_root):
    problem = next(p for p in _problems(data_root, "sudoku", limit=50) if p["blanks"] == 2)
    env = make_env("sudoku", max_turns=2)
    env.reset(problem, 0)
    (_, r, c, v), second = env.reference_actions(env.state)
    env.apply(env.state, [("fill", r, c, v)])
    assert env.reference_actions(env.state) == [second]
    env.state["grid"][second[1] - 1][second[2] - 1] = 0
    wrong = next(x for x in range(1, 5) if x != v)
    env.state["grid"][r - 1][c - 1] = wrong  # a wrong fill: the grid cannot be completed
    assert env.reference_actions(env.state) == []


@pytest.mark.parametrize("env_name", GRID_ENVS)
def test_rows_are_the_plan_agents_real_prompt_after_the_tool_turn(data_root, env_name):
    problems = _problems(data_root, env_name, limit=3)
    replies = ["no program here", f"```python\n{PRINTS_A_MOVE[env_name]}\n```", ""]
    seen: list[list] = []

    def tool_reply(prompts):
        seen.extend(prompts)
        return replies

    rows, counts = cold_start_rows(lambda: make_env(env_name, max_turns=2), problems, tool_reply, seed=3)
    assert counts == {"problems": 3, "rows": 3, "unsolvable": 0, "tool_replies_solving": counts["tool_replies_solving"]}
    for problem, reply, row, tool_prompt in zip(problems, replies, rows, seen):
        twin = make_env(env_name, max_turns=2)  # the same episode played by hand
        twin.reset(problem, 0)
        assert tool_prompt == twin.observation("tool")
        twin.step("tool", reply)
        assert row["agent"] == "plan" and row["problem_id"] == problem["id"]
        assert row["messages"] == twin.observation("plan")
        assert "tool agent's program output" in row["messages"][1]["content"]
        assert row["reply"].startswith("Actions: ") and row["synthetic"] is True
        result = twin.step("plan", row["reply"])  # the taught answer, through the env's own parser
        assert twin.solved(twin.state) and result.info["invalid"] == 0
    assert "error: no ```python block" in rows[0]["messages"][1]["content"]
    assert "actions: " in rows[1]["messages"][1]["content"]  # the program ran and its move is shown


def test_cold_start_refuses_an_env_without_tool_and_plan(data_root):
    with pytest.raises(ValueError, match="tool \\+ plan grid env"):
        reset_envs(lambda: make_env("sudoku_single", max_turns=2), _problems(data_root, "sudoku", limit=1), 0)
    with pytest.raises(ValueError, match="2 replies for 1 prompts"):
        cold_start_rows(lambda: make_env("sudoku", max_turns=2), _problems(data_root, "sudoku", limit=1),
                        lambda prompts: ["a", "b"])


def test_a_solved_state_gives_no_row(data_root):
    problem = _problems(data_root, "plan_path", limit=1)[0]
    env = make_env("plan_path", max_turns=2)
    env.reset(problem, 0)
    env.apply(env.state, env.reference_actions(env.state))
    assert plan_row(env, "") is None


@pytest.mark.slow
def test_builder_on_a_tiny_model_then_sft_on_its_rows(tmp_path):
    """The builder's tool turns come from a real model's generate; one SFT epoch on its rows
    (two steps of two rows) writes a checkpoint."""
    out = tmp_path / "rows"
    (tmp_path / "data").mkdir()
    common = ["model=tiny", f"env.data_root={tmp_path / 'data'}", "rollout.sampling.max_new_tokens=8"]
    r = subprocess.run([sys.executable, "scripts/dataprocess/build_grid_sft.py", "--problems", "4", "--out", str(out),
                        *common], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["rows"] == 4 and report["data"] == "sudoku_easy" and report["model"] == "tiny:test"
    rows = list(read_jsonl(out / "train.jsonl"))
    assert [row["problem_id"] for row in rows] == [f"sudoku-train-{i}" for i in range(4)]

    from pettingllms.cli.config_loading import load_config
    from pettingllms.trainer.sft import run_sft

    cfg = load_config("grid_cold_start", [*common, f"sft.data={out / 'train.jsonl'}", "sft.batch_size=2",
                                          "rollout.max_prompt_tokens=512", f"trainer.output_dir={tmp_path / 'runs'}",
                                          "trainer.logging.log_tensorboard=false"])
    run = run_sft(cfg)
    summary = json.loads((run / "sft_summary.json").read_text())
    assert summary["rows"] == 4 and summary["steps"] == 2
    assert Path(summary["checkpoint"]).exists()


def test_builder_bad_config_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "scripts/dataprocess/build_grid_sft.py", "--out", str(tmp_path), "env=math",
                        "model=tiny", f"env.data_root={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2 and "build_grid_sft:" in r.stderr
