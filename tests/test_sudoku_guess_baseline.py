"""scripts/results/sudoku_guess_baseline.py: the well-formed random guesser, played through the
real sudoku env, scores what the odds say it must."""
from __future__ import annotations

import random

import pytest

from pettingllms.envs import make_env
from script_helpers import load_script

SOLUTION = [[1, 2, 3, 4], [3, 4, 1, 2], [2, 1, 4, 3], [4, 3, 2, 1]]
gb = load_script("scripts/results/sudoku_guess_baseline.py")


def _problem(blank_cells):
    puzzle = [row[:] for row in SOLUTION]
    for r, c in blank_cells:
        puzzle[r][c] = 0
    return {"id": "p", "puzzle": puzzle, "solution": SOLUTION, "box_h": 2, "box_w": 2}


def test_guess_reply_fills_every_empty_cell_once():
    env = make_env("sudoku", max_turns=2)
    env.reset(_problem([(0, 3), (2, 1)]), 0)
    reply = gb.guess_reply(env, random.Random(0))
    assert reply.startswith("Actions: (1, 4, ") and ", (3, 2, " in reply and reply.count("(") == 2


@pytest.mark.parametrize("turns, expected", [(1, 1 / 4), (2, 1 / 4 + 3 / 4 * 1 / 4)])
def test_one_blank_success_matches_the_odds(turns, expected):
    # one blank in a 4x4: every wrong value repeats a number of its row, so it is rejected and
    # the cell is guessed again next turn; 4000 seeded draws -> standard error about 0.008
    env, rng = make_env("sudoku", max_turns=turns), random.Random(0)
    wins = sum(gb.play(env, _problem([(1, 2)]), turns, rng) for _ in range(4000))
    assert wins / 4000 == pytest.approx(expected, abs=0.03)
