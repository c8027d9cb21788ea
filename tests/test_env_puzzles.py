"""The eight_queens and blocksworld envs (the reference's stateful puzzles): seeded data, gold
answers, rule checks, and one AT-GRPO step (tiny model; the embedded model in a slow test).
Hostile replies and the tree rollout runner: tests/test_env_plan_path.py, with the grid envs."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest

from pettingllms.envs import make_env
from pettingllms.envs.blocksworld import data as bw_data
from pettingllms.envs.blocksworld.game import canonical, move, plan, well_placed, why_invalid
from pettingllms.envs.eight_queens import data as q_data
from pettingllms.envs.eight_queens.game import attacker, complete, is_solution

PUZZLES = ["eight_queens", "blocksworld"]
DATA = {"eight_queens": q_data, "blocksworld": bw_data}


def gold(name: str, row: dict) -> str:
    """The dataset's stored answer as a plan reply."""
    if name == "eight_queens":
        cols = json.loads(row["solution"])
        return "Actions: " + ", ".join(f"({r + 1}, {c})" for r, c in enumerate(cols) if not json.loads(row["puzzle"])[r])
    return "Actions: " + ", ".join(f"({b}, {d})" for b, d in json.loads(row["solution"]))


def new_env(name: str, row: dict, **options):
    env = make_env(name, **options)
    env.reset(row, seed=0)
    return env


@pytest.mark.parametrize("name", PUZZLES)
@pytest.mark.parametrize("level", ["default", "easy"])
def test_gold_answers_solve_every_generated_row(name, level):
    tiers = DATA[name].PRESETS[level]
    for seed in range(25):
        row = DATA[name].make_row(seed, tiers)
        env = new_env(name, row)
        result = env.step("plan", gold(name, row))
        assert result.info["solved"] and result.info["invalid"] == 0, (seed, row)
        assert env.success and env.done and env.team_reward() == 1.0 and result.local_reward > 1.0
        if level == "easy":
            assert (row["blanks"] <= 2) if name == "eight_queens" else (row["optimal_moves"] == 1)


@pytest.mark.parametrize("name", PUZZLES)
def test_generation_is_seeded_leaves_global_random_alone_and_splits_are_disjoint(name, tmp_path):
    random.seed(3)
    before = random.getstate()
    assert DATA[name].make_row(11) == DATA[name].make_row(11) != DATA[name].make_row(12)
    assert random.getstate() == before
    report = DATA[name].build(tmp_path / name, n_train=30, n_test=10)
    train, test = (pd.read_parquet(tmp_path / name / f"{s}.parquet") for s in ("train", "test"))
    assert report["train"]["rows"] == 30 and len(test) == 10 and train.id.is_unique
    assert not set(train.seed) & set(test.seed)
    key = ["puzzle"] if name == "eight_queens" else ["start", "goal"]
    assert not set(map(tuple, train[key].values)) & set(map(tuple, test[key].values))
    assert DATA[name].build(tmp_path / f"{name}_easy", n_train=5, n_test=2)["preset"] == "easy"


def test_queens_rules_and_solver():
    assert is_solution([2, 4, 1, 3], [0, 0, 0, 0]) and not is_solution([2, 4, 1, 3], [3, 0, 0, 0])
    assert not is_solution([1, 3, 0, 2], [0] * 4) and not is_solution([1, 2, 3, 4], [0] * 4)
    assert attacker([1, 0, 0, 0], 2, 3) == 0 and attacker([1, 0, 0, 0], 1, 3) is None
    assert complete([1, 0, 0, 0]) is None  # no 4-queens board has a queen in a corner
    for n in (5, 6, 8):
        board = complete([0] * n, random.Random(n))
        assert board is not None and is_solution(board, [0] * n)


def test_queens_any_valid_board_counts_and_attacks_are_rejected():
    row = {"id": "q", "puzzle": "[0, 0, 0, 0, 0, 0]", "solution": "[2, 4, 6, 1, 3, 5]"}
    other = [5, 3, 1, 6, 4, 2]  # a different 6-queens solution (the mirror)
    env = new_env("eight_queens", row)
    assert env.step("plan", f"Actions: {other}").info["solved"] and env.success
    env = new_env("eight_queens", row)
    hit = env.step("plan", "Actions: (1, 1), (2, 2), (9, 1)")  # (2, 2) is on (1, 1)'s diagonal
    assert hit.info["applied"] == 1 and hit.info["invalid"] == 2 and "attacked" in " ".join(hit.info["notes"])
    given = new_env("eight_queens", {**row, "puzzle": "[2, 0, 0, 0, 0, 0]"})
    assert given.step("plan", "Actions: (1, 3)").info["invalid"] == 1  # a given row cannot move
    # progress: a placement that can still be completed counts; one that cannot is 0
    env = new_env("eight_queens", row, team_reward="progress")
    env.step("plan", "Actions: (1, 2)")
    assert 0 < env.team_reward() < 1
    env = new_env("eight_queens", {"id": "c", "puzzle": "[0, 0, 0, 0]", "solution": "[2, 4, 1, 3]"},
                  team_reward="progress")
    corner = env.step("plan", "Actions: (1, 1)")
    assert corner.info["applied"] == 1 and corner.info["progress"] == 0.0 and corner.local_reward < 0


def test_blocksworld_rules_planner_and_optimality_bonus():
    stacks = [["A", "B", "C"]]
    assert why_invalid(stacks, "A", "table") and why_invalid(stacks, "C", "C") and why_invalid(stacks, "D", "table")
    assert why_invalid([["A"], ["B"]], "A", "table") is not None  # already on the table: not a move
    assert canonical(move(stacks, "C", "table")) == (("A", "B"), ("C",))
    goal = [["C", "B", "A"]]
    assert len(plan(stacks, goal)) == 3 and well_placed(stacks, goal) == 0 and well_placed(goal, goal) == 3
    row = {"id": "b", "start": json.dumps(stacks), "goal": json.dumps(goal), "optimal_moves": 3}
    best = new_env("blocksworld", row).step("plan", "Actions: (C, table), (B, C), (A, B)")
    assert best.info["solved"] and best.local_reward == pytest.approx(2.0 - 0.01 * 3)
    detour = new_env("blocksworld", row)
    slow = detour.step("plan", "Actions: C on table, B -> table, B to C, A onto B")
    assert slow.info["solved"] and detour.success and slow.local_reward < best.local_reward
    env = new_env("blocksworld", row)
    bad = env.step("plan", "Actions: (A, table), (B, C), (Z, table)")  # none is clear / exists
    assert bad.info["invalid"] == 3 and bad.local_reward < 0 and env.state["stacks"] == stacks
    order = new_env("blocksworld", {**row, "goal": json.dumps([["C"], ["A", "B"]])})
    assert order.step("plan", 'Actions: [{"move": ["C", "table"]}]').info["solved"]  # stack order is free


def test_tool_programs_run_on_a_copy_and_the_plan_commits_them():
    queens = """```python
import sys, json
s = json.load(sys.stdin)
n, q = s["n"], s["queens"]
def ok(r, c):
    return all(not q[r2] or (q[r2] != c and abs(q[r2] - c) != abs(r2 - r)) for r2 in range(n) if r2 != r)
def solve(r):
    if r == n: return True
    if q[r]: return solve(r + 1)
    for c in range(1, n + 1):
        if ok(r, c):
            q[r] = c
            if solve(r + 1): return True
            q[r] = 0
    return False
solve(0)
print("Actions:", q)
```"""
    row = q_data.make_row(4)
    env = new_env("eight_queens", row)
    start = env.render()
    tool = env.step("tool", queens)
    assert tool.info["solved"] and env.render() == start
    proposal = env.observation("plan")[1]["content"].split("actions: ")[1].splitlines()[0]
    assert env.step("plan", f"Actions: {proposal}").info["solved"] and env.success

    row = bw_data.make_row(4)
    env = new_env("blocksworld", row)
    tool = env.step("tool", f"```python\nprint({gold('blocksworld', row)!r})\n```")
    assert tool.info["solved"] and not env.success
    proposal = env.observation("plan")[1]["content"].split("actions: ")[1].splitlines()[0]
    assert env.step("plan", f"Actions: {proposal}").info["solved"] and env.success


def test_the_format_example_is_never_the_blocksworld_answer():
    for seed in range(30):
        row = bw_data.make_row(seed, bw_data.EASY_TIERS)
        prompt = new_env("blocksworld", row).observation("plan")[1]["content"]
        example = next(ln for ln in prompt.splitlines() if ln.startswith("Actions: "))
        assert example != gold("blocksworld", row), (seed, row)


def one_step(name: str, tmp_path: Path, *extra: str) -> dict:
    from pettingllms.cli.config_loading import load_config
    from trainer_fixtures import fit

    base = name.removesuffix("_single")
    DATA[base].build(tmp_path / f"{base}_easy", n_train=4, n_test=2)
    cfg = load_config("tiny_test", [f"env.name={name}", f"env.data={base}_easy", f"env.data_root={tmp_path}",
                                    "~env.options", "env.max_turns=1", "trainer.total_steps=1",
                                    "reward.local_weight=0.5", f"trainer.output_dir={tmp_path / 'out'}",
                                    "trainer.run_name=r", "trainer.logging.progress_bar=false", *extra])
    last = fit(cfg)[-1]
    agents = make_env(name).agents
    assert last["step"] == 1 and last["samples/count"] == 2 * 2 * len(agents)  # batch 2, k 2
    assert all(f"reward/{a}/mean" in last for a in agents)
    return last


@pytest.mark.parametrize("name", ["eight_queens", "blocksworld_single"])
def test_one_at_grpo_step_on_the_tiny_model(name, tmp_path):
    assert one_step(name, tmp_path)["reward/mean"] <= 0  # random text


@pytest.mark.slow  # the embedded model (SmolLM2-135M, LoRA), one AT-GRPO step of the two-agent env
@pytest.mark.parametrize("name", PUZZLES)
def test_one_at_grpo_step_on_the_embedded_model(name, tmp_path):
    last = one_step(name, tmp_path, "model=embedded", "model.lora.enabled=true", "rollout.sampling.max_new_tokens=24",
                    "rollout.max_prompt_tokens=1024", "trainer.micro_batch_size=2", "trainer.deterministic=false")
    assert last["samples/count"] == 8 and any(k.startswith("loss") or k.startswith("policy") for k in last)
