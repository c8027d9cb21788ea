"""The sokoban env: seeded reverse-play levels, BFS solver, scripted episodes, hostile replies."""
from __future__ import annotations

import copy
import json
import runpy
import sys
from pathlib import Path

import pandas as pd
import pytest

from pettingllms.envs import make_env
from pettingllms.envs.sokoban.data import build, make_row
from pettingllms.envs.sokoban.game import generate, parse_rows, solve, try_move

ROOT = Path(__file__).resolve().parents[1]
CORRIDOR = ["######",
            "#@_$.#",
            "######"]


def problem(seed: int = 7, size: int = 7, boxes: int = 2) -> dict:
    level, solution, _ = generate(seed, size, size, boxes)
    return {"id": f"k{seed}", "level": json.dumps(level.rows()), "solution": solution,
            "optimal_moves": len(solution)}


def new_env(name: str = "sokoban", prob: dict | None = None, **options):
    env = make_env(name, **options)
    env.reset(prob or problem(), seed=0)
    return env


def replay(rows: list[str], moves: str):
    level = parse_rows(rows)
    boxes, player = set(level.boxes), level.player
    for m in moves:
        player, why = try_move(level, boxes, player, m)
        assert why is None, why
    return level, boxes


def test_generation_is_deterministic_and_levels_are_solvable():
    assert make_row(5) == make_row(5) and make_row(5)["level"] != make_row(6)["level"]
    for seed, (size, boxes) in enumerate([(6, 1), (7, 2), (9, 2)]):
        level, solution, optimal = generate(seed, size, size, boxes)
        assert optimal and len(level.boxes) == boxes and not level.boxes & level.targets
        final_level, final_boxes = replay(level.rows(), solution)
        assert final_boxes == set(final_level.targets)
        assert len(solve(level)) == len(solution)  # BFS: shortest


def test_bfs_solver_on_hand_made_levels():
    assert solve(parse_rows(CORRIDOR)) == "RR"
    stuck = parse_rows(["#####", "#$_.#", "#@__#", "#####"])  # box in a corner
    assert solve(stuck) is None
    with pytest.raises(ValueError):
        parse_rows(["###", "#@#", "###"])  # no box


def test_train_and_test_splits_are_disjoint(tmp_path, monkeypatch, capsys):
    report = build(tmp_path, n_train=25, n_test=10)
    train, test = (pd.read_parquet(tmp_path / f"{s}.parquet") for s in ("train", "test"))
    assert report["test"]["rows"] == len(test) == 10
    assert not set(train.seed) & set(test.seed) and not set(train.level) & set(test.level)
    assert train.id.is_unique and set(train.tier) <= {"small", "medium", "large"}
    assert (train.optimal_moves == train.solution.str.len()).all()
    monkeypatch.setattr(sys, "argv", ["load_sokoban.py", "--out", str(tmp_path / "cli"), "--n-train", "2",
                                      "--n-test", "1"])
    runpy.run_path(str(ROOT / "scripts/dataprocess/load_sokoban.py"), run_name="__main__")
    assert len(pd.read_parquet(tmp_path / "cli/train.parquet")) == 2


def test_scripted_optimal_plan_succeeds_and_detours_earn_less():
    prob = problem()
    env = new_env(prob=prob)
    best = env.step("plan", "Let me push.\nActions: " + ", ".join(prob["solution"]))
    assert best.info["solved"] and env.success and env.done and env.team_reward() == 1.0
    corridor = {"id": "c", "level": json.dumps(CORRIDOR), "optimal_moves": 2}
    detour = new_env(prob=corridor)
    slow = detour.step("plan", "Actions: R, L, R, R")
    assert slow.info["solved"] and detour.success
    direct = new_env(prob=corridor).step("plan", "actions: right right")
    assert direct.local_reward > slow.local_reward > 1.0


def test_tool_moves_are_scored_on_a_copy_then_committed_by_plan():
    prob = problem(seed=3)
    env = new_env(prob=prob)
    start = env.render()
    program = ("```python\nimport sys, json\nstate = json.load(sys.stdin)\n"
               f"assert len(state['rows']) == 7\nprint('Actions: ' + ', '.join({prob['solution']!r}))\n```")
    tool = env.step("tool", program)
    assert tool.info["solved"] and tool.local_reward > 1.0 and env.render() == start
    prompt = env.observation("plan")[1]["content"]
    assert "SOLVES" in prompt
    proposal = prompt.split("actions: ")[1].splitlines()[0]
    assert env.step("plan", f"Actions: {proposal}").info["solved"] and env.success


def test_invalid_moves_are_penalised_and_leave_the_state():
    env = new_env(prob={"id": "c", "level": json.dumps(CORRIDOR), "optimal_moves": 2})
    before = env.render()
    wall = env.step("plan", "Actions: U, L, D")
    assert wall.local_reward < 0 and wall.info["invalid"] == 3 and env.render() == before
    env.end_turn()
    push = env.step("plan", "Actions: R, R, R")  # the second R solves it; the third is ignored
    assert push.info["solved"] and push.info["applied"] == 2 and "ignored" in push.info["notes"][0]
    two = new_env(prob={"id": "b", "level": json.dumps(["#######", "#@$$..#", "#######"]), "optimal_moves": 9})
    result = two.step("plan", "Actions: R")
    assert result.info["invalid"] == 1 and "box" in result.info["notes"][0]


def test_progress_is_shaped_and_episode_ends_at_max_turns():
    long_corridor = ["#######", "#@$__.#", "#######"]
    env = new_env(prob={"id": "c", "level": json.dumps(long_corridor), "optimal_moves": 3},
                  team_reward="progress", max_turns=2)
    first = env.step("plan", "Actions: R")  # box 3 -> 2 cells from the target: 0.5 * (1 - 2/3)
    assert first.info["progress"] == pytest.approx(1 / 6, abs=1e-3) and env.team_reward() == pytest.approx(1 / 6)
    assert first.local_reward == pytest.approx(1 / 6 - 0.01)
    env.end_turn()
    env.step("plan", "Actions: L")
    env.end_turn()
    assert env.done and not env.success
    assert copy.deepcopy(env).render() == env.render()
    with pytest.raises(TypeError):
        make_env("sokoban", boxes=3)
