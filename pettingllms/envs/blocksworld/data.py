"""blocksworld dataset: seeded start and goal stacks with a BFS-optimal plan (no download needed).

Each row: id, seed, tier, n_blocks, start and goal (JSON lists of stacks, bottom to top),
solution (JSON list of [block, destination] moves, one shortest plan), optimal_moves.
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pettingllms.envs.blocksworld.game import canonical, generate
from pettingllms.envs.grid.splits import build_splits, choose_tier, preset_of

# tier -> (blocks, min optimal moves, max optimal moves, share of rows)
TIERS = {"3": (3, 2, 4, 0.3), "4": (4, 2, 6, 0.4), "5": (5, 3, 8, 0.3)}
# `blocksworld_easy` (env.data=blocksworld_easy): 3-5 blocks, the goal one move from the start
EASY_TIERS = {"3": (3, 1, 1, 0.3), "4": (4, 1, 1, 0.4), "5": (5, 1, 1, 0.3)}
PRESETS = {"default": TIERS, "easy": EASY_TIERS}
DATA_NAMES = ("blocksworld", "blocksworld_easy")  # built on first use (pettingllms.envs.dataset)


def make_row(gen_seed: int, tiers: dict[str, tuple] = TIERS) -> dict[str, Any]:
    rng = random.Random(gen_seed)
    tier, (n_blocks, lo, hi) = choose_tier(rng, tiers)
    start, goal, path = generate(rng.randrange(2**31), n_blocks, lo, hi)
    # stacks in a canonical order, so that one problem is one row (the dedup key)
    return {"tier": tier, "n_blocks": n_blocks, "start": json.dumps([list(s) for s in canonical(start)]),
            "goal": json.dumps([list(s) for s in canonical(goal)]),
            "solution": json.dumps([list(m) for m in path]), "optimal_moves": len(path)}


def build(out_dir: str | Path, *, seed: int = 0, offline: bool | None = None,
          n_train: int | None = None, n_test: int | None = None, preset: str | None = None) -> dict[str, Any]:
    """Write train/test parquet; procedural, so `offline` changes nothing. The easy level has a
    few hundred distinct problems, so both levels default to 200 train / 60 test rows."""
    name = preset_of(out_dir, preset, PRESETS)
    tiers = PRESETS[name]
    report = build_splits(out_dir, "blocksworld", lambda s: make_row(s, tiers),
                          n_train=200 if n_train is None else n_train,
                          n_test=60 if n_test is None else n_test, seed=seed, key=("start", "goal"))
    report.update(preset=name, tiers={k: v[:3] for k, v in tiers.items()})
    return report
