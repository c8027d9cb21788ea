"""plan_path dataset: seeded grids with obstacles and a reachable goal (BFS-checked).

Each row: id, seed, tier, height, width, density, grid (JSON list of rows, '.'/'#'),
start and goal (JSON [row, col], 0-based), solution (one shortest move string),
optimal_moves (BFS distance).
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pettingllms.envs.grid.splits import build_splits, choose_tier, preset_of
from pettingllms.envs.plan_path.game import generate

# tier -> (height, width, obstacle density, min start-goal distance, share of rows)
TIERS = {
    "small": (5, 5, 0.2, 3, 0.4),
    "medium": (7, 7, 0.25, 5, 0.35),
    "large": (10, 10, 0.3, 8, 0.25),
}


# `plan_path_easy` (env.data=plan_path_easy): tiny open grids, goal 1-2 moves away: close enough
# that a 135M model's untrained success is in the 10-60% band (docs/results/easy_levels.md), so
# RL at CPU scale has mixed groups to learn from.
EASY_TIERS = {"tiny": (3, 3, 0.1, 1, 0.5), "tiny4": (4, 4, 0.1, 1, 0.5)}
EASY_MAX_DISTANCE = 2
PRESETS = {"default": TIERS, "easy": EASY_TIERS}
DATA_NAMES = ("plan_path", "plan_path_easy")  # what training builds on first use (pettingllms.envs.dataset)


def make_row(gen_seed: int, tiers: dict[str, tuple] = TIERS) -> dict[str, Any]:
    rng = random.Random(gen_seed)
    tier, (height, width, density, min_distance) = choose_tier(rng, tiers)
    max_distance = EASY_MAX_DISTANCE if tiers is EASY_TIERS else None
    rows, start, goal, path = generate(rng.randrange(2**31), height, width, density, min_distance, max_distance)
    return {"tier": tier, "height": height, "width": width, "density": density,
            "grid": json.dumps(rows), "start": json.dumps(list(start)), "goal": json.dumps(list(goal)),
            "solution": path, "optimal_moves": len(path)}


def build(out_dir: str | Path, *, seed: int = 0, offline: bool | None = None,
          n_train: int = 1000, n_test: int = 200, preset: str | None = None) -> dict[str, Any]:
    """Write train/test parquet; procedural, so `offline` changes nothing."""
    name = preset_of(out_dir, preset, PRESETS)
    tiers = PRESETS[name]
    report = build_splits(out_dir, "plan_path", lambda s: make_row(s, tiers), n_train=n_train,
                          n_test=n_test, seed=seed, key=("grid", "start", "goal"))
    report.update(preset=name, tiers={k: v[:4] for k, v in tiers.items()})
    return report
