"""Sokoban dataset: seeded reverse-play levels, small rooms with 1-2 boxes, then larger.

Each row: id, seed, tier, height, width, n_boxes, level (JSON list of rows, see game.py
symbols), solution (move string), optimal_moves, solution_optimal (BFS-verified shortest).
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pettingllms.envs.grid.actions import MOVE_DELTAS
from pettingllms.envs.grid.splits import build_splits, choose_tier, preset_of
from pettingllms.envs.sokoban.game import Level, generate, solve

# tier -> (height, width incl. outer walls, boxes, share of rows)
TIERS = {
    "small": (6, 6, 1, 0.4),
    "medium": (7, 7, 2, 0.35),
    "large": (9, 9, 2, 0.25),
}


# `sokoban_easy` (env.data=sokoban_easy): an open room, one box next to its target and the player
# at most one step from the cell behind the box, so one push (after at most one step) solves it.
# Fields as TIERS. A 135M model cannot plan the walk around a box; here its untrained success is
# in the 10-60% band (docs/results/easy_levels.md), so RL has mixed groups.
EASY_TIERS = {"3x3": (5, 5, 1, 0.15), "3x4": (5, 6, 1, 0.2), "4x3": (6, 5, 1, 0.2), "4x4": (6, 6, 1, 0.25),
              "4x5": (6, 7, 1, 0.2)}
PRESETS = {"default": TIERS, "easy": EASY_TIERS}
DATA_NAMES = ("sokoban", "sokoban_easy")  # what training builds on first use (pettingllms.envs.dataset)
DATA_VERSIONS = {"sokoban_easy": 2}  # raise when a preset's rows change: older folders are then reported
EASY_MAX_MOVES = 2
# The easy tiers hold 370 distinct levels in all (3x3: 28, 3x4 and 4x3: 54 each, 4x4: 96, 4x5: 138):
# 200 train, and test is all the other 170 (data version 1 had the first 60 of them). Drawing the
# last few rare ones takes ~5,000 draws, hence the patience.
EASY_SIZES, EASY_PATIENCE = (200, 170), 100


def _easy_level(rng: random.Random, height: int, width: int) -> tuple[Level, str, bool]:
    """Target, box one cell before it, player on the cell behind the box (one push) or one step
    beside that cell (a step, then the push); BFS confirms the solution is optimal."""
    floor = [(r, c) for r in range(1, height - 1) for c in range(1, width - 1)]
    walls = frozenset((r, c) for r in range(height) for c in range(width) if (r, c) not in floor)
    for _ in range(200):
        target = rng.choice(floor)
        dr, dc = MOVE_DELTAS[rng.choice("UDLR")]  # the push direction
        box, behind = (target[0] - dr, target[1] - dc), (target[0] - 2 * dr, target[1] - 2 * dc)
        if box not in floor or behind not in floor:
            continue
        beside = [(behind[0] + a, behind[1] + b) for a, b in MOVE_DELTAS.values()]
        beside = [p for p in beside if p in floor and p != box]
        player = behind if not beside or rng.random() < 0.5 else rng.choice(beside)
        level = Level(height, width, walls, frozenset([target]), frozenset([box]), player)
        solution = solve(level)
        if solution and len(solution) <= EASY_MAX_MOVES:
            return level, solution, True
    raise RuntimeError(f"no easy sokoban level in {height}x{width} after 200 tries")


def make_row(gen_seed: int, tiers: dict[str, tuple] = TIERS) -> dict[str, Any]:
    rng = random.Random(gen_seed)
    tier, (height, width, n_boxes) = choose_tier(rng, tiers)
    if tiers is EASY_TIERS:
        level, solution, optimal = _easy_level(rng, height, width)
    else:
        level, solution, optimal = generate(rng.randrange(2**31), height, width, n_boxes)
    return {"tier": tier, "height": height, "width": width, "n_boxes": n_boxes,
            "level": json.dumps(level.rows()), "solution": solution,
            "optimal_moves": len(solution), "solution_optimal": optimal}


def build(out_dir: str | Path, *, seed: int = 0, offline: bool | None = None,
          n_train: int | None = None, n_test: int | None = None, preset: str | None = None) -> dict[str, Any]:
    """Write train/test parquet; procedural, so `offline` changes nothing. The easy preset
    has 370 distinct levels, so it defaults to 200 train / 170 test rows (EASY_SIZES)."""
    name = preset_of(out_dir, preset, PRESETS)
    tiers = PRESETS[name]
    sizes = (1000, 200) if name == "default" else EASY_SIZES
    report = build_splits(out_dir, "sokoban", lambda s: make_row(s, tiers),
                          n_train=sizes[0] if n_train is None else n_train,
                          n_test=sizes[1] if n_test is None else n_test, seed=seed, key=("level",),
                          patience=20 if name == "default" else EASY_PATIENCE)
    report.update(preset=name, tiers={k: v[:3] for k, v in tiers.items()})
    return report
