"""Sokoban dataset: seeded reverse-play levels, small rooms with 1-2 boxes, then larger.

Each row: id, seed, tier, height, width, n_boxes, level (JSON list of rows, see game.py
symbols), solution (move string), optimal_moves, solution_optimal (BFS-verified shortest).
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pettingllms.envs.grid_common import build_splits, choose_tier, preset_of
from pettingllms.envs.sokoban.game import generate

# tier -> (height, width incl. outer walls, boxes, share of rows)
TIERS = {
    "small": (6, 6, 1, 0.4),
    "medium": (7, 7, 2, 0.35),
    "large": (9, 9, 2, 0.25),
}


# `sokoban_easy` (env.data=sokoban_easy): open rooms with one box next to its target, solved in
# at most 3 moves, where a small model's untrained success is far from 0 (mixed groups for RL
# at CPU scale). Fields as TIERS; the generator retries until the level is that easy.
EASY_TIERS = {"3x3": (5, 5, 1, 0.2), "3x4": (5, 6, 1, 0.2), "4x3": (6, 5, 1, 0.2), "4x4": (6, 6, 1, 0.4)}
PRESETS = {"default": TIERS, "easy": EASY_TIERS}
DATA_NAMES = ("sokoban", "sokoban_easy")  # what training builds on first use (pettingllms.envs.dataset)
EASY_MAX_MOVES = 3


def _easy_level(rng: random.Random, height: int, width: int):
    for _ in range(200):
        level, solution, optimal = generate(rng.randrange(2**31), height, width, 1, wall_rate=0.0,
                                            min_moves=1)
        (box,), (target,) = level.boxes, level.targets
        if len(solution) <= EASY_MAX_MOVES and abs(box[0] - target[0]) + abs(box[1] - target[1]) == 1:
            return level, solution, optimal
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
    has a few hundred distinct levels, so it defaults to 200 train / 60 test rows."""
    name = preset_of(out_dir, preset, PRESETS)
    tiers = PRESETS[name]
    sizes = (1000, 200) if name == "default" else (200, 60)
    report = build_splits(out_dir, "sokoban", lambda s: make_row(s, tiers),
                          n_train=sizes[0] if n_train is None else n_train,
                          n_test=sizes[1] if n_test is None else n_test, seed=seed, key=("level",))
    report.update(preset=name, tiers={k: v[:3] for k, v in tiers.items()})
    return report
