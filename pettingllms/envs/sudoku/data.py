"""Sudoku dataset: seeded 4x4 and 9x9 puzzles with unique solutions (no download needed).

Each row: id, seed, tier, size, box_h, box_w, blanks, puzzle and solution (JSON grids,
0 = blank). The stored solution is for reference only; the env accepts any valid one.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pettingllms.envs.grid.splits import build_splits, choose_tier, preset_of
from pettingllms.envs.sudoku.game import generate

# tier -> (box_h, box_w, min blanks, max blanks, share of rows)
TIERS = {
    "4x4": (2, 2, 6, 10, 0.6),
    "9x9": (3, 3, 30, 50, 0.4),
}
# `sudoku_easy` (env.data=sudoku_easy): 4x4 grids with 1-2 blanks. Even here the untrained 135M
# model stays below the 10-60% success where RL has mixed groups (docs/results/easy_levels.md);
# scripts/train/sudoku/sudoku_easy_cold_start.sh starts it from a short SFT on solved train
# puzzles (pettingllms/envs/grid_cold_start.py).
EASY_TIERS = {"4x4_easy": (2, 2, 1, 2, 1.0)}
PRESETS = {"default": TIERS, "easy": EASY_TIERS}
DATA_NAMES = ("sudoku", "sudoku_easy")  # what training builds on first use (pettingllms.envs.dataset)


def make_row(gen_seed: int, tiers: dict[str, tuple] = TIERS) -> dict[str, Any]:
    rng = random.Random(gen_seed)
    tier, (box_h, box_w, lo, hi) = choose_tier(rng, tiers)
    puzzle, solution = generate(rng.randrange(2**31), box_h, box_w, rng.randint(lo, hi))
    return {"tier": tier, "size": box_h * box_w, "box_h": box_h, "box_w": box_w,
            "blanks": sum(v == 0 for row in puzzle for v in row),
            "puzzle": json.dumps(puzzle), "solution": json.dumps(solution)}


def build(out_dir: str | Path, *, seed: int = 0, offline: bool | None = None,
          n_train: int = 1000, n_test: int = 200, preset: str | None = None) -> dict[str, Any]:
    """Write train/test parquet; procedural, so `offline` changes nothing."""
    name = preset_of(out_dir, preset, PRESETS)
    tiers = PRESETS[name]
    report = build_splits(out_dir, "sudoku", lambda s: make_row(s, tiers), n_train=n_train,
                          n_test=n_test, seed=seed)
    report.update(preset=name, tiers={k: v[:4] for k, v in tiers.items()})
    return report
