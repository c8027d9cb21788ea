"""Sudoku dataset: seeded puzzles with unique solutions (no download needed): a 4x4 and 9x9 mix
(`sudoku`, `sudoku_easy`) or one side N of 4, 6, 9, 12, 16 (`sudoku_N`, `sudoku_N_easy`, picked
by `env.map_size=N`; boxes 2x2, 2x3, 3x3, 3x4, 4x4).

Each row: id, seed, tier, size, box_h, box_w, blanks, puzzle and solution (JSON grids,
0 = blank). The stored solution is for reference only; the env accepts any valid one.
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from pettingllms.envs.grid.splits import build_splits, choose_tier, preset_of
from pettingllms.envs.sudoku.game import generate
from pettingllms.errors import ConfigError

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
# env.map_size=N: side N -> (box_h, box_w, min blanks, max blanks) of its default level (about 40-60%
# of the cells blank); its easy level has 1-2 blanks, as sudoku_easy.
SIZES = {4: (2, 2, 6, 10), 6: (2, 3, 14, 22), 9: (3, 3, 30, 50), 12: (3, 4, 58, 86), 16: (4, 4, 100, 150)}
for _n, (_h, _w, _lo, _hi) in SIZES.items():
    PRESETS[str(_n)] = {f"{_n}x{_n}": (_h, _w, _lo, _hi, 1.0)}
    PRESETS[f"{_n}_easy"] = {f"{_n}x{_n}_easy": (_h, _w, 1, 2, 1.0)}
# what training builds on first use (pettingllms.envs.dataset)
DATA_NAMES = ("sudoku", "sudoku_easy") + tuple(f"sudoku_{n}{e}" for n in SIZES for e in ("", "_easy"))
_SIZED = re.compile(r"sudoku_(\d+)(_easy)?")


def sized_data_name(data: str, size: int) -> str:
    """The dataset of side `size` for env.map_size: sudoku -> sudoku_6, sudoku_easy -> sudoku_6_easy
    (a name already sized keeps its level and takes the new side)."""
    if int(size) not in SIZES:
        raise ConfigError(f"env.map_size={size}: sudoku has sides {', '.join(map(str, SIZES))}")
    m = _SIZED.fullmatch(data)
    easy = data == "sudoku_easy" or bool(m and m.group(2))
    if data not in ("sudoku", "sudoku_easy") and not m:
        raise ConfigError(f"env.map_size picks one of sudoku's own datasets; env.data={data} is not one "
                          f"(leave env.map_size unset for your own data, or use env.data=sudoku)")
    return f"sudoku_{int(size)}{'_easy' if easy else ''}"


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
    sized = _SIZED.fullmatch(Path(out_dir).name)
    name = preset or (sized.group(1) + (sized.group(2) or "") if sized else preset_of(out_dir, None, PRESETS))
    if name not in PRESETS:
        raise ValueError(f"unknown data preset {name!r}; choose from {sorted(PRESETS)}")
    tiers = PRESETS[name]
    report = build_splits(out_dir, "sudoku", lambda s: make_row(s, tiers), n_train=n_train,
                          n_test=n_test, seed=seed)
    report.update(preset=name, tiers={k: v[:4] for k, v in tiers.items()})
    return report
