"""The plan_path env: seeded grids, BFS, scripted episodes, optimality reward.

The last section checks the grid envs and puzzles (sudoku, sokoban, plan_path, eight_queens,
blocksworld; MAS and single):
hostile replies, configs, the real tree rollout runner and a one-step tiny-model training run.
"""
from __future__ import annotations

import copy
import importlib
import json
import runpy
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from pettingllms.config.validate import validate
from pettingllms.envs import make_env
from pettingllms.envs.grid.actions import action_payload, parse_moves
from pettingllms.envs.plan_path.data import build, make_row
from pettingllms.envs.plan_path.game import distances, generate, shortest_path

ROOT = Path(__file__).resolve().parents[1]
# start (0, 0), goal (0, 4); the wall forces a detour through row 2: 8 moves
WALLED = {"id": "w", "grid": json.dumps([".#...", ".#.#.", "...#."]), "start": "[0, 0]", "goal": "[0, 4]"}

BFS_PROGRAM = """```python
import sys, json
from collections import deque
s = json.load(sys.stdin)
rows, start, goal = s["rows"], tuple(s["position"]), tuple(s["goal"])
steps = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
prev, queue = {start: None}, deque([start])
while queue:
    p = queue.popleft()
    for m, (dr, dc) in steps.items():
        q = (p[0] + dr, p[1] + dc)
        if 0 <= q[0] < len(rows) and 0 <= q[1] < len(rows[0]) and rows[q[0]][q[1]] != "#" and q not in prev:
            prev[q] = (p, m)
            queue.append(q)
path, p = [], goal
while prev[p]:
    p, m = prev[p]
    path.append(m)
print("Actions: " + ", ".join(reversed(path)))
```"""


def new_env(name: str = "plan_path", prob: dict | None = None, **options):
    env = make_env(name, **options)
    env.reset(prob or make_row(7), seed=0)
    return env


def test_generation_is_deterministic_and_the_goal_is_reachable():
    assert make_row(4) == make_row(4) and make_row(4)["grid"] != make_row(5)["grid"]
    for seed in range(5):
        rows, start, goal, path = generate(seed, 7, 7, 0.3, 5)
        assert distances(rows, start)[goal[0]][goal[1]] == len(path) >= 5
    assert shortest_path([".#.", "##.", "..."], (0, 0), (2, 2)) is None
    assert shortest_path(json.loads(WALLED["grid"]), (0, 0), (0, 4)) == "DDRRUURR"


def test_train_and_test_splits_are_disjoint(tmp_path, monkeypatch):
    build(tmp_path, n_train=40, n_test=15)
    train, test = (pd.read_parquet(tmp_path / f"{s}.parquet") for s in ("train", "test"))
    assert len(train) == 40 and len(test) == 15 and train.id.is_unique
    assert not set(train.seed) & set(test.seed) and train.seed.max() < test.seed.min()
    key = lambda df: set(zip(df.grid, df.start, df.goal))  # noqa: E731
    assert not key(train) & key(test)
    monkeypatch.setattr(sys, "argv", ["load_plan_path.py", "--out", str(tmp_path / "cli"), "--n-train", "2",
                                      "--n-test", "1", "--seed", "1"])
    runpy.run_path(str(ROOT / "scripts/dataprocess/load_plan_path.py"), run_name="__main__")
    assert pd.read_parquet(tmp_path / "cli/test.parquet").seed.tolist() == [3 * 5_000_000]


def test_optimal_path_succeeds_with_full_bonus_and_detours_earn_less():
    row = make_row(7)
    env = new_env(prob=row)
    best = env.step("plan", "Path found.\nActions: " + ", ".join(row["solution"]))
    assert best.info["solved"] and env.success and env.done and best.local_reward == pytest.approx(
        2.0 - 0.01 * row["optimal_moves"])
    walled = new_env(prob=WALLED)
    path = shortest_path(json.loads(WALLED["grid"]), (0, 0), (0, 4))
    slow = walled.step("plan", "Actions: " + " ".join(["D", "U"] + list(path)))
    assert slow.info["solved"] and walled.success
    fast = new_env(prob=WALLED).step("plan", "ACTIONS: " + path.lower())
    assert fast.local_reward > slow.local_reward > 1.0


def test_tool_bfs_program_reads_stdin_and_plan_commits_its_moves():
    row = make_row(11)
    env = new_env(prob=row)
    start = env.render()
    tool = env.step("tool", BFS_PROGRAM)
    assert tool.info["solved"] and tool.info["applied"] == row["optimal_moves"] and env.render() == start
    prompt = env.observation("plan")[1]["content"]
    proposal = prompt.split("actions: ")[1].splitlines()[0]
    assert env.step("plan", f"Actions: {proposal}").info["solved"] and env.team_reward() == 1.0


def test_invalid_moves_are_penalised_and_do_not_move():
    env = new_env(prob=WALLED)
    before = env.render()
    result = env.step("plan", "Actions: U, L, R")  # off the grid, off the grid, into '#'
    assert result.info["invalid"] == 3 and result.local_reward == pytest.approx(-0.3) and env.render() == before
    env.end_turn()
    assert "3 invalid" in env.observation("plan")[1]["content"]
    assert "plan agent's last committed actions:\nactions: U, L, R" in env.observation("tool")[1]["content"]
    moved = env.step("plan", "Actions: D")  # distance to the goal 8 -> 7
    assert moved.info["progress"] == pytest.approx(0.125) and moved.local_reward == pytest.approx(0.115)
    env.end_turn()
    back = env.step("plan", "Actions: U")
    assert back.info["progress"] == 0.0 and back.local_reward == pytest.approx(-0.135)


def test_action_parsing_is_forgiving_but_not_credulous():
    assert parse_moves(action_payload("**Actions:** up, Right, d, L."), 10).actions == ["U", "R", "D", "L"]
    assert parse_moves(action_payload('moves = ["U", "R"]'), 10).actions == ["U", "R"]
    assert parse_moves(action_payload("Actions: UURDL\n\nThis reaches G."), 10).actions == list("UURDL")
    assert parse_moves(action_payload("Actions:\n\n R, D\n L"), 10).actions == ["R", "D", "L"]
    # a reply cut off (max_new_tokens) right after a last marker: the last marker with moves counts
    assert parse_moves(action_payload("Actions: U, L\nThe rules say\nActions:"), 10).actions == ["U", "L"]
    assert parse_moves(action_payload("Actions: U, L\nActions: D"), 10).actions == ["D"]
    assert parse_moves(action_payload("I go right then\nR R D"), 10, strict=True).actions == ["R", "R", "D"]
    assert parse_moves(action_payload("Let me think about it"), 10, strict=True).actions == []
    loose = parse_moves(action_payload("Actions: U, then R"), 10)
    assert loose.actions == ["U", "R"] and loose.unknown == 1
    capped = parse_moves("R" * 50, 10)
    assert len(capped.actions) == 10 and capped.truncated == 40


def test_episode_limits_copies_and_options():
    env = new_env(prob=WALLED, max_turns=1)
    env.step("tool", "no code here")
    env.step("plan", "Actions: D")
    env.end_turn()
    assert env.done and not env.success and env.team_reward() == 0.0
    assert copy.deepcopy(env).render() == env.render()
    with pytest.raises(TypeError):
        make_env("plan_path", density=0.5)



# ---- all three grid envs through the real rollout runner and trainer ------------------------

def grid_row(name: str) -> tuple[dict, str]:
    """A dataset row of a grid env and a reply that solves it."""
    row = importlib.import_module(f"pettingllms.envs.{name}.data").make_row(7)
    if name == "sudoku":
        return row, "Actions:\n" + "\n".join("".join(map(str, r)) for r in json.loads(row["solution"]))
    if name == "eight_queens":
        return row, f"Actions: {row['solution']}"
    if name == "blocksworld":
        return row, "Actions: " + ", ".join(f"({b}, {d})" for b, d in json.loads(row["solution"]))
    return row, "Actions: " + ", ".join(row["solution"])


@pytest.mark.parametrize("name", ["sudoku", "sokoban", "plan_path", "eight_queens", "blocksworld"])
def test_tree_rollout_with_a_scripted_engine_commits_the_solving_plan(name):
    sys.path.insert(0, str(ROOT / "tests"))
    from fakes import ScriptedEngine, make_cfg
    from pettingllms.trainer.assemble import rollout_settings

    from pettingllms.rollout.runner import Rollout

    row, solving = grid_row(name)

    def script(request):
        if "tool agent" in request.messages[0]["content"]:
            return ["no code", f"```python\nprint({solving!r})\n```"]
        return ["Actions: (9, 9, 9), U", f"Following the tool.\n{solving}"]

    cfg = make_cfg(rollout={"k": 2, "strategy": "tree"}, reward={"local_weight": 0.5},
                   env={"name": name, "max_turns": 2})
    rollout = Rollout(ScriptedEngine(script), lambda: make_env(name, max_turns=2),
                      {"tool": "shared", "plan": "shared"}, rollout_settings(cfg))
    episode = rollout.run([row], seed=0).episodes[0]
    assert episode.trajectory.success and episode.trajectory.num_turns == 1
    committed = [s for s in episode.samples if s.committed]
    assert [s.agent for s in committed] == ["tool", "plan"] and all(s.local_reward > 1 for s in committed)
    assert episode.trajectory.steps[-1].info["solved"]


@pytest.mark.parametrize("name", ["sudoku_single", "sokoban", "plan_path"])
def test_one_step_tiny_model_training_run_completes(name, tmp_path):
    from pettingllms.cli.config_loading import load_config
    from pettingllms.trainer.local import LocalTrainer

    data = name.removesuffix("_single")
    importlib.import_module(f"pettingllms.envs.{data}.data").build(tmp_path / data, n_train=4, n_test=2)
    cfg = load_config("tiny_test", [f"env.name={name}", f"env.data={data}", f"env.data_root={tmp_path}",
                                    "~env.options", "env.max_turns=1", "trainer.total_steps=1",
                                    "reward.local_weight=0.5", f"trainer.output_dir={tmp_path / 'out'}",
                                    "trainer.run_name=r", "trainer.logging.progress_bar=false"])
    trainer = LocalTrainer(cfg)
    try:
        history = trainer.fit()
    finally:
        trainer.close()
    last = history[-1]
    agents = make_env(name).agents
    assert last["step"] == 1 and last["samples/count"] == 2 * 2 * len(agents)  # batch 2, k 2
    assert all(f"reward/{a}/mean" in last for a in agents) and last["reward/mean"] <= 0  # random text


GRID_ENVS = ["sudoku", "sudoku_single", "sokoban", "sokoban_single", "plan_path", "plan_path_single",
             "eight_queens", "eight_queens_single", "blocksworld", "blocksworld_single"]


@pytest.mark.parametrize("name", GRID_ENVS)
def test_garbage_empty_and_huge_replies_give_no_reward(name):
    env = make_env(name)
    env.reset(grid_row(name.removesuffix("_single"))[0], seed=0)
    replies = ["", "  \n", "go to the goal", "\x00\xff" * 1000, "Actions: " + "Q" * 1_000_000,
               "Actions: " + "R " * 500_000, "(1, 1, 1) " * 100_000, "```python\n" + "#" * 1_000_000 + "\n```",
               "```python\nimport os\nos.kill(os.getppid(), 9)\n```", None]
    for agent in env.agents:
        for reply in replies:
            assert env.step(agent, reply).local_reward <= 0, (agent, str(reply)[:40])
    assert env.team_reward() == 0.0 and not env.success


@pytest.mark.parametrize("name", GRID_ENVS)
def test_config_composes_and_builds_the_env(name):
    data = name.removesuffix("_single")
    cfg = validate({"env": OmegaConf.load(ROOT / f"configs/env/{name}.yaml")})
    assert cfg.env.name == name and cfg.env.data == data
    env = make_env(cfg.env.name, max_turns=cfg.env.max_turns, **cfg.env.options)
    env.reset(grid_row(data)[0], seed=0)
    assert env.agents == (("plan",) if name.endswith("_single") else ("tool", "plan"))
    for agent in env.agents:
        system, user = env.observation(agent)
        assert system["role"] == "system" and env.render() in user["content"]
        assert ("```python" in user["content"]) == (agent == "tool")
    assert "Actions:" in env.observation("plan")[1]["content"]
