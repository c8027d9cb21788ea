"""The sudoku env: seeded generation, rule checking, scripted episodes, hostile replies."""
from __future__ import annotations

import copy
import json
import random
import runpy
import sys
from pathlib import Path

import pandas as pd
import pytest

from pettingllms.envs import make_env
from pettingllms.envs.grid.splits import SPLIT_SPAN, split_seed
from pettingllms.envs.sudoku.data import build, make_row
from pettingllms.envs.sudoku.game import generate, is_solution, search

ROOT = Path(__file__).resolve().parents[1]


def problem(seed: int = 7, box: int = 2, blanks: int = 10) -> dict:
    puzzle, solution = generate(seed, box, box, blanks)
    return {"id": f"s{seed}", "puzzle": json.dumps(puzzle), "solution": json.dumps(solution),
            "box_h": box, "box_w": box}


def new_env(name: str = "sudoku", prob: dict | None = None, **options):
    env = make_env(name, **options)
    env.reset(prob or problem(), seed=0)
    return env


def fills(prob: dict, grid=None) -> str:
    puzzle, grid = json.loads(prob["puzzle"]), grid or json.loads(prob["solution"])
    n = len(puzzle)
    return ", ".join(f"({r + 1}, {c + 1}, {grid[r][c]})" for r in range(n) for c in range(n) if not puzzle[r][c])


def test_generation_is_deterministic_unique_and_does_not_touch_global_random():
    random.seed(5)
    before = random.getstate()
    assert make_row(11) == make_row(11)
    assert random.getstate() == before
    assert make_row(11)["puzzle"] != make_row(12)["puzzle"]
    for box, blanks in ((2, 10), (3, 45)):
        puzzle, solution = generate(3, box, box, blanks)
        assert sum(v == 0 for row in puzzle for v in row) == blanks
        assert search(puzzle, box, box, limit=2)[0] == 1  # a unique solution
        assert is_solution(solution, puzzle, box, box)


def test_train_and_test_seed_ranges_are_disjoint(tmp_path):
    for seed in range(3):
        assert split_seed("train", SPLIT_SPAN - 1, seed) < split_seed("test", 0, seed)
        assert split_seed("test", SPLIT_SPAN - 1, seed) < split_seed("train", 0, seed + 1)
    with pytest.raises(ValueError):
        split_seed("train", SPLIT_SPAN)
    report = build(tmp_path, n_train=30, n_test=10)
    train, test = (pd.read_parquet(tmp_path / f"{s}.parquet") for s in ("train", "test"))
    assert report["train"]["rows"] == 30 and len(test) == 10
    assert not set(train.seed) & set(test.seed) and not set(train.puzzle) & set(test.puzzle)
    assert train.id.is_unique and set(train.tier) <= {"4x4", "9x9"}
    row = train.iloc[3].to_dict()
    assert {k: row[k] for k in make_row(int(row["seed"]))} == make_row(int(row["seed"]))


def test_load_script_writes_both_splits(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["load_sudoku.py", "--out", str(tmp_path), "--n-train", "3", "--n-test", "2"])
    runpy.run_path(str(ROOT / "scripts/dataprocess/load_sudoku.py"), run_name="__main__")
    assert len(pd.read_parquet(tmp_path / "test.parquet")) == 2 and '"rows": 3' in capsys.readouterr().out


def test_scripted_plan_solves_4x4_and_9x9():
    for prob in (problem(), problem(seed=3, box=3, blanks=40)):
        env = new_env(prob=prob)
        result = env.step("plan", "The solution:\nActions: " + fills(prob))
        assert result.info["solved"] and result.info["invalid"] == 0
        assert result.local_reward > 1.0 and env.done and env.success and env.team_reward() == 1.0


def test_tool_program_solves_on_a_copy_and_plan_commits_its_grid():
    prob = problem()
    env = new_env(prob=prob)
    program = """```python
import sys, json
s = json.load(sys.stdin)
g, n, bh, bw = s["grid"], s["size"], s["box_height"], s["box_width"]
def ok(r, c, v):
    if v in g[r] or any(g[i][c] == v for i in range(n)): return False
    r0, c0 = r - r % bh, c - c % bw
    return all(g[i][j] != v for i in range(r0, r0 + bh) for j in range(c0, c0 + bw))
def solve():
    for r in range(n):
        for c in range(n):
            if g[r][c] == 0:
                for v in range(1, n + 1):
                    if ok(r, c, v):
                        g[r][c] = v
                        if solve(): return True
                        g[r][c] = 0
                return False
    return True
solve()
print("\\n".join("".join(map(str, row)) for row in g))
```"""
    tool = env.step("tool", program)
    assert tool.info["solved"] and tool.local_reward > 1.0
    assert not env.success and env.render().count(".") == 10  # nothing committed
    plan_prompt = env.observation("plan")[1]["content"]
    assert "SOLVES" in plan_prompt and "grid " in plan_prompt
    proposal = plan_prompt.split("actions: grid ")[1].splitlines()[0]
    assert env.step("plan", f"Actions: {proposal}").info["solved"] and env.success


def test_any_valid_solution_counts_not_only_the_stored_one():
    puzzle = [[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    solutions = {json.dumps(search(puzzle, 2, 2, rng=random.Random(s))[1]) for s in range(20)}
    assert len(solutions) > 1
    stored, other = [json.loads(s) for s in sorted(solutions)[:2]]
    prob = {"id": "multi", "puzzle": json.dumps(puzzle), "solution": json.dumps(stored), "box_h": 2, "box_w": 2}
    env = new_env(prob=prob)
    assert env.step("plan", "Actions:\n" + "\n".join("".join(map(str, r)) for r in other)).info["solved"]
    assert env.team_reward() == 1.0
    bad = [row[:] for row in other]
    bad[0][0] = other[0][1]  # breaks the given and the row
    assert not is_solution(bad, puzzle, 2, 2)
    _, moved_given = search([[2] + [0] * 3] + [[0] * 4] * 3, 2, 2)  # valid grid, but (1,1) is 2
    assert is_solution(moved_given, [[0] * 4] * 4, 2, 2) and not is_solution(moved_given, puzzle, 2, 2)


def test_invalid_and_dead_end_moves_are_penalised_and_not_applied():
    prob = problem()
    puzzle, solution = json.loads(prob["puzzle"]), json.loads(prob["solution"])
    env = new_env(prob=prob)
    r, c = next((r, c) for r in range(4) for c in range(4) if puzzle[r][c])
    before = env.render()
    result = env.step("plan", f"Actions: ({r + 1}, {c + 1}, {puzzle[r][c] % 4 + 1}), (9, 9, 1), (1, 1, 7)")
    assert result.local_reward < 0 and result.info["invalid"] == 3 and result.info["applied"] == 0
    assert env.render() == before and "given" in " ".join(result.info["notes"])
    env.end_turn()
    # a fill that fits the rules locally but makes the grid unsolvable loses progress
    blanks = [(r, c) for r in range(4) for c in range(4) if not puzzle[r][c]]
    for r, c in blanks:
        wrong = [v for v in range(1, 5) if v != solution[r][c]]
        for v in wrong:
            probe = copy.deepcopy(env)
            out = probe.step("plan", f"Actions: ({r + 1}, {c + 1}, {v})")
            if out.info["applied"] == 1:
                assert out.info["progress"] == 0.0 and out.local_reward < 0
                return
    pytest.fail("no locally legal wrong fill found")


def test_tool_program_failures_are_penalised():
    env = new_env()
    crash = env.step("tool", "```python\nraise SystemExit(3)\n```")
    flood = env.step("tool", "```python\nprint('9' * 2_000_000)\n```")
    assert crash.local_reward < 0 and "program failed" in crash.info["error"]
    assert flood.local_reward < 0
    assert "error" in env.observation("plan")[1]["content"]


def test_episode_runs_to_max_turns_deepcopies_and_rejects_unknown_options():
    env = new_env(max_turns=2)
    for _ in range(2):
        assert not env.done
        env.step("plan", "Actions: (1, 1, 1)")
        env.end_turn()
    assert env.done and env.step("plan", "Actions: (2, 2, 2)").info == {"ignored": "episode is over"}
    clone = copy.deepcopy(env)
    assert clone.render() == env.render()
    with pytest.raises(TypeError):
        make_env("sudoku", colour="red")
    with pytest.raises(ValueError):
        make_env("sudoku", team_reward="vibes")


def test_progress_team_reward_is_shaped():
    prob = problem()
    env = new_env(prob=prob, team_reward="progress")
    first = fills(prob).split("), ")[0] + ")"
    env.step("plan", f"Actions: {first}")
    assert 0.0 < env.team_reward() < 1.0 and not env.success


# ---- env.map_size: sides 4, 6, 9, 12, 16 ------------------------------------------------------

@pytest.mark.parametrize("size", [4, 6, 9, 12, 16])
def test_every_size_has_unique_puzzles_and_the_gold_answer_solves_them(size):
    from pettingllms.envs.sudoku.data import PRESETS, SIZES

    box_h, box_w, lo, hi = SIZES[size]
    # 16x16 at full difficulty: proving a puzzle unique takes ~7 min here, so only its easy preset
    presets = ((str(size), (lo, hi)),) if size != 16 else ()
    for preset, (low, high) in (*presets, (f"{size}_easy", (1, 2))):
        row = make_row(5, PRESETS[preset])
        puzzle, solution = json.loads(row["puzzle"]), json.loads(row["solution"])
        assert (row["size"], row["box_h"], row["box_w"]) == (size, box_h, box_w) and low <= row["blanks"] <= high
        assert search(puzzle, box_h, box_w, limit=2)[0] == 1 and is_solution(solution, puzzle, box_h, box_w)
        # the gold answer as (row, col, value) triples, and as the whole grid (numbers apart past 9x9)
        triples = new_env(prob=row).step("plan", "Actions: " + fills(row))
        assert triples.info["solved"] and triples.info["invalid"] == 0 and triples.local_reward > 1.0
        whole = new_env(prob=row)
        assert whole.step("plan", "Actions:\n" + "\n".join(" ".join(map(str, r)) for r in solution)).info["solved"]
        assert whole.success and whole.team_reward() == 1.0
    # one wrong value in the gold grid is not a solution
    bad = [r[:] for r in solution]
    bad[0][0], bad[0][1] = bad[0][1], bad[0][0]
    assert not is_solution(bad, puzzle, box_h, box_w)


def test_wide_cells_render_aligned_and_a_12x12_grid_parses_only_with_numbers_apart():
    from pettingllms.envs.sudoku.data import PRESETS

    row = make_row(2, PRESETS["12_easy"])
    env = new_env(prob=row)
    lines = env.render().splitlines()
    assert lines[0].split("|")[0].split() == ["1", "2", "3", "4"] and "12" in lines[0]
    assert len({len(ln) for ln in lines if "|" in ln}) == 1  # every row as wide as the labels
    glued = "Actions: " + "".join(str(v) for r in json.loads(row["solution"]) for v in r)
    assert not env.step("plan", glued).info.get("solved")  # 10-12 glued to their neighbours: not a grid


def test_map_size_picks_that_sides_data_and_bad_sizes_are_one_line(tmp_path):
    from pettingllms.cli.config_loading import load_config
    from pettingllms.errors import ConfigError
    from pettingllms.trainer.components import data_name, load_problems

    base = ["env.name=sudoku", "~env.options", f"env.data_root={tmp_path}", "env.data=sudoku_easy"]
    cfg = load_config("tiny_test", base + ["env.map_size=6"])
    assert data_name(cfg) == "sudoku_6_easy"
    rows = load_problems(cfg, "test", limit=5)
    assert {r["size"] for r in rows} == {6} and all(1 <= r["blanks"] <= 2 for r in rows)
    assert (tmp_path / "sudoku_6_easy" / "train.parquet").exists()
    assert data_name(load_config("tiny_test", base[:2] + ["env.data=sudoku", "env.map_size=16"])) == "sudoku_16"
    assert data_name(load_config("tiny_test", base)) == "sudoku_easy"  # unset: the data's own mix
    for overrides, words in ((["env.map_size=7"], "has sides 4, 6, 9, 12, 16"),
                             (["env.name=math", "env.map_size=4"], "no puzzle sizes")):
        with pytest.raises(ConfigError, match=words):
            load_config("tiny_test", base + overrides)
    with pytest.raises(ConfigError, match="not one"):
        data_name(load_config("tiny_test", base[:2] + ["env.data=my_puzzles", "env.map_size=6"]))
