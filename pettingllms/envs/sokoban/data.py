"""Sokoban dataset: seeded reverse-play levels, small rooms with 1-2 boxes, then larger.

Each row: id, seed, tier, height, width, n_boxes, level (JSON list of rows, see game.py
symbols), solution (move string), optimal_moves, solution_optimal (BFS-verified shortest).
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pettingllms.envs.grid_common import build_splits, choose_tier
from pettingllms.envs.sokoban.game import generate

# tier -> (height, width incl. outer walls, boxes, share of rows)
TIERS = {
    "small": (6, 6, 1, 0.4),
    "medium": (7, 7, 2, 0.35),
    "large": (9, 9, 2, 0.25),
}


def make_row(gen_seed: int) -> dict[str, Any]:
    rng = random.Random(gen_seed)
    tier, (height, width, n_boxes) = choose_tier(rng, TIERS)
    level, solution, optimal = generate(rng.randrange(2**31), height, width, n_boxes)
    return {"tier": tier, "height": height, "width": width, "n_boxes": n_boxes,
            "level": json.dumps(level.rows()), "solution": solution,
            "optimal_moves": len(solution), "solution_optimal": optimal}


def build(out_dir: str | Path, *, seed: int = 0, offline: bool | None = None,
          n_train: int = 1000, n_test: int = 200) -> dict[str, Any]:
    """Write train/test parquet; procedural, so `offline` changes nothing."""
    report = build_splits(out_dir, "sokoban", make_row, n_train=n_train, n_test=n_test, seed=seed,
                          key=("level",))
    report["tiers"] = {k: v[:3] for k, v in TIERS.items()}
    return report
