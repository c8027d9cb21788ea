"""The easy data levels (env.data=<env>_easy): what each promises, and that they build by name."""
from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path

import pandas as pd
import pytest
from ci_budget import all_paths_only
from script_helpers import load_script

from pettingllms.envs import make_env
from pettingllms.envs.dataset import load_split

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("easy_data")


def _rows(data_root, env, split="test"):
    return load_split(f"{env}_easy", split, data_root, builder=f"pettingllms.envs.{env}.data")


def test_sudoku_easy_is_4x4_with_1_or_2_blanks(data_root):
    rows = _rows(data_root, "sudoku")
    assert len(rows) == 200 and {r["blanks"] for r in rows} == {1, 2}
    for r in rows:
        assert r["size"] == 4 and 1 <= r["blanks"] <= 2
        assert sum(v == 0 for row in json.loads(r["puzzle"]) for v in row) == r["blanks"]


def test_sokoban_easy_is_one_push_after_at_most_one_step(data_root):
    train, test = _rows(data_root, "sokoban", "train"), _rows(data_root, "sokoban")
    assert (len(train), len(test)) == (200, 170)
    assert not {r["level"] for r in train} & {r["level"] for r in test}
    for r in test:
        assert r["n_boxes"] == 1 and 1 <= r["optimal_moves"] <= 2 and r["solution_optimal"]
        rows = json.loads(r["level"])
        box = [(i, j) for i, line in enumerate(rows) for j, ch in enumerate(line) if ch == "$"]
        target = [(i, j) for i, line in enumerate(rows) for j, ch in enumerate(line) if ch == "."]
        assert len(box) == len(target) == 1
        assert abs(box[0][0] - target[0][0]) + abs(box[0][1] - target[0][1]) == 1
        # the last move pushes the box from its cell onto the target
        assert {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}[r["solution"][-1]] == \
            (target[0][0] - box[0][0], target[0][1] - box[0][1])
        env = make_env("sokoban", max_turns=1)  # the stored solution solves it
        env.reset(r, seed=0)
        env.step("plan", "Actions: " + ", ".join(r["solution"]))
        assert env.success


def _digest(rows, columns):
    return hashlib.sha256(json.dumps([[str(r[c]) for c in columns] for r in rows]).encode()).hexdigest()[:16]


# each column of scripts/results/cpu_table.py: its data builder and the columns that make a problem
TABLE_DATA = {"math_easy": ("math", ("question",)), "plan_path_easy": ("plan_path", ("grid", "start", "goal")),
              "sokoban_easy": ("sokoban", ("level",)), "sudoku_easy": ("sudoku", ("puzzle",))}


@pytest.mark.parametrize("column", sorted(TABLE_DATA))
def test_each_cpu_table_column_has_its_held_out_problems(data_root, column):
    ct = load_script("scripts/results/cpu_table.py")
    assert set(TABLE_DATA) == set(ct.COLUMNS)
    env, key = TABLE_DATA[column]
    train, test = (load_split(column, split, data_root, builder=f"pettingllms.envs.{env}.data")
                   for split in ("train", "test"))
    # 192 held-out problems, except sokoban_easy: all 170 of its easy levels that train does not hold
    assert ct.EVAL_LIMITS[column] == (170 if column == "sokoban_easy" else 192) <= len(test)
    problems = lambda rows: [tuple(r[k] for k in key) for r in rows]
    assert len(set(problems(test))) == len(test) and not set(problems(train)) & set(problems(test))


def test_sokoban_easy_grew_its_test_split_after_the_version_1_rows(data_root, tmp_path):
    from pettingllms.envs.sokoban import data

    assert data.DATA_VERSIONS["sokoban_easy"] == 2
    data.build(tmp_path / "sokoban_easy", seed=0)
    train, test = (pd.read_parquet(tmp_path / "sokoban_easy" / f"{s}.parquet").to_dict("records")
                   for s in ("train", "test"))
    assert [train, test] == [_rows(data_root, "sokoban", s) for s in ("train", "test")]  # seed 0 both times
    # version 1 (code of a606f57): the same 200 train rows and, first, its 60 test rows
    assert _digest(train, ("id", "seed", "level")) == "0875013312609095"
    assert _digest(test[:60], ("id", "seed", "level")) == "5ba0076c05407314"


@all_paths_only("~5 s: 17,000 draws")
def test_sokoban_easy_test_split_holds_every_level_train_does_not(tmp_path):
    from pettingllms.envs.sokoban import data

    with pytest.raises(RuntimeError, match="too many duplicate test rows"):  # no 171st test level
        data.build(tmp_path / "sokoban_easy", seed=0, n_test=171)


def test_plan_path_easy_is_tiny_with_the_goal_one_or_two_moves_away(data_root):
    rows = _rows(data_root, "plan_path")
    assert all(r["height"] <= 4 and r["width"] <= 4 and 1 <= r["optimal_moves"] <= 2 for r in rows)
    assert {r["optimal_moves"] for r in rows} == {1, 2}


def test_code_easy_tasks_are_short_and_their_tests_hold():
    from pettingllms.envs.code.easy import easy_rows
    from pettingllms.envs.code.rows import verify_function_rows

    train, test = easy_rows(0)
    assert len(train) > 60 and len(test) > 20
    assert not {r["entry_point"] for r in train} & {r["entry_point"] for r in test}
    assert easy_rows(0) == (train, test)  # seeded
    for r in train + test:
        body = r["reference"][len(r["starter"]):]
        assert body.count("\n") == 1 and len(r["tests"]) == 4  # a one-line solution
    sample = [dict(r, tests=list(r["tests"])) for r in test[:6]]
    stats = verify_function_rows(sample)  # the reference passes every test, a no-op body none
    assert stats["ref_failed_tests"] == 0 and stats["noop_passed_tests"] == 0 and not stats["dropped_rows"]
    assert [len(r["tests"]) for r in sample] == [4] * len(sample)


def test_code_easy_builds_by_folder_name(tmp_path, monkeypatch):
    import pettingllms.envs.code.data as code_data
    import pettingllms.envs.code.easy as code_easy

    calls = []  # the sandbox check of every test is covered above; here only the wiring
    monkeypatch.setattr(code_easy, "verify_function_rows", lambda rows: calls.append(len(rows)) or {})
    report = code_data.build(tmp_path / "code_easy")
    assert report["preset"] == "code_easy" and calls == [report["train"], report["test"]]
    frame = pd.read_parquet(tmp_path / "code_easy" / "test.parquet")
    assert set(frame["source"]) == {"easy"} and len(frame) == report["test"]


@pytest.mark.parametrize("env", ["code", "sudoku", "sokoban", "plan_path", "eight_queens", "blocksworld", "search"])
def test_every_easy_level_has_a_training_recipe(env):
    text = (ROOT / "scripts" / "train" / env / f"{env}_easy.sh").read_text()
    assert f"env.data={env}_easy" in text and "recipe train" in text


@pytest.mark.parametrize("env", ["sudoku", "sokoban", "plan_path", "eight_queens", "blocksworld"])
def test_easy_data_builds_through_the_config(env, tmp_path):
    # the path a recipe takes: env=<env> env.data=<env>_easy, built on first use by the env's package
    from pettingllms.cli.config_loading import load_config
    from pettingllms.trainer import components as comp

    cfg = load_config("at_grpo_shared", [f"env={env}", f"env.data={env}_easy", f"env.data_root={tmp_path}"])
    rows = comp.load_problems(cfg, "test", 3)
    easy_tiers = importlib.import_module(f"pettingllms.envs.{env}.data").EASY_TIERS
    assert len(rows) == 3 and all(r["tier"] in easy_tiers for r in rows)


def test_grid_observations_say_where_things_are():
    # positions in words under the drawn grid, 1-based like the grid's labels, updated after moves
    env = make_env("plan_path", max_turns=2)
    env.reset({"id": "p", "grid": json.dumps(["...", "...", "..#"]), "start": "[2, 0]", "goal": "[1, 1]"}, seed=0)
    assert ("You (A) are at row 3, column 1; the goal (G) is at row 2, column 2, 1 row up and 1 column right "
            "from you.") in env.observation("plan")[1]["content"]
    env.step("plan", "Actions: U")
    assert "row 2, column 1; the goal (G) is at row 2, column 2, 1 column right from you" in \
        env.observation("tool")[1]["content"]

    env = make_env("sokoban", max_turns=2)
    env.reset({"id": "s", "level": json.dumps(["#####", "#__@#", "#_$_#", "#_._#", "#####"])}, seed=0)
    text = env.observation("plan")[1]["content"]
    assert "You (@) are at row 2, column 4." in text
    assert ("A box ($) is at row 3, column 3, 1 row down and 1 column left from you; the nearest free target (.) "
            "is at row 4, column 3, 1 row down from that box.") in text

    env = make_env("sudoku", max_turns=2)
    env.reset({"id": "u", "box_h": 2, "box_w": 2,
               "puzzle": json.dumps([[3, 2, 1, 0], [1, 4, 2, 3], [2, 3, 4, 1], [4, 1, 0, 2]])}, seed=0)
    text = env.observation("plan")[1]["content"]
    assert "Empty cells (row, col): (1, 4), (4, 3)." in text
    # the answer format's example points at an empty cell (never at a given), not at its value
    assert "Actions: (1, 4, 1)\nputs 1 in row 1, column 4." in text
    env.step("plan", "Actions: (1, 4, 4)")
    text = env.observation("plan")[1]["content"]
    assert "Empty cells (row, col): (4, 3)." in text and "Actions: (4, 3, 1)\n" in text


def test_code_easy_test_split_mixes_the_templates():
    from pettingllms.envs.code.easy import TEST_CONSTANTS, easy_rows

    _, test = easy_rows(0)
    templates = [r["template"] for r in test]
    # no template fills the split (add_N once had 7 of 28 test rows, all at its start)
    assert max(templates.count(t) for t in set(templates)) <= TEST_CONSTANTS
    assert len(set(templates[:8])) >= 6  # eval.limit=8 already sees a mix
