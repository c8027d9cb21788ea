"""eight_queens dataset: seeded N-queens boards with some queens given (no download needed).

Each row: id, seed, tier, n, blanks (rows without a queen), puzzle and solution (JSON lists of
n columns, 1-based, 0 = no queen). The stored solution is one of possibly several; the env
accepts any valid one.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pettingllms.envs.eight_queens.game import generate
from pettingllms.envs.grid.splits import build_splits, choose_tier, preset_of

# tier -> (n, min blanks, max blanks, share of rows); the reference's board is 8x8 and empty
TIERS = {"6x6": (6, 3, 6, 0.3), "8x8": (8, 4, 8, 0.7)}
# `eight_queens_easy` (env.data=eight_queens_easy): boards of 5-8 with one or two queens missing
EASY_TIERS = {"5x5": (5, 1, 2, 0.3), "6x6": (6, 1, 2, 0.2), "7x7": (7, 1, 2, 0.25), "8x8": (8, 1, 2, 0.25)}
PRESETS = {"default": TIERS, "easy": EASY_TIERS}
DATA_NAMES = ("eight_queens", "eight_queens_easy")  # built on first use (pettingllms.envs.dataset)


def make_row(gen_seed: int, tiers: dict[str, tuple] = TIERS) -> dict[str, Any]:
    rng = random.Random(gen_seed)
    tier, (n, lo, hi) = choose_tier(rng, tiers)
    puzzle, solution = generate(rng.randrange(2**31), n, rng.randint(lo, hi))
    return {"tier": tier, "n": n, "blanks": sum(c == 0 for c in puzzle),
            "puzzle": json.dumps(puzzle), "solution": json.dumps(solution)}


def build(out_dir: str | Path, *, seed: int = 0, offline: bool | None = None,
          n_train: int | None = None, n_test: int | None = None, preset: str | None = None) -> dict[str, Any]:
    """Write train/test parquet; procedural, so `offline` changes nothing. The 5x5 and 6x6 easy
    tiers have only 150 and 84 distinct boards, so both levels default to 200 train / 60 test rows."""
    name = preset_of(out_dir, preset, PRESETS)
    tiers = PRESETS[name]
    report = build_splits(out_dir, "eight_queens", lambda s: make_row(s, tiers),
                          n_train=200 if n_train is None else n_train,
                          n_test=60 if n_test is None else n_test, seed=seed)
    report.update(preset=name, tiers={k: v[:3] for k, v in tiers.items()})
    return report
