"""Seeded train/test splits of procedurally generated grid puzzles, and the command line
of scripts/dataprocess/load_<env>.py that builds them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from pettingllms.envs.dataset import new_output_dir
from pettingllms.errors import ConfigError, WriteFailed
from pettingllms.utils.diskio import write_parquet
from pettingllms.utils.progress import Progress

# Seeds: train rows use [base, base + SPLIT_SPAN), test rows [base + SPLIT_SPAN, base + 2*SPLIT_SPAN)
# with base = seed * 2 * SPLIT_SPAN, so the two splits never share a generation seed.
SPLIT_SPAN = 5_000_000


def split_seed(split: str, index: int, seed: int = 0) -> int:
    """The generation seed of row `index` of `split` ('train' or 'test')."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not 0 <= index < SPLIT_SPAN:
        raise ValueError(f"row index {index} outside [0, {SPLIT_SPAN})")
    return seed * 2 * SPLIT_SPAN + (SPLIT_SPAN if split == "test" else 0) + index


def choose_tier(rng: Any, tiers: dict[str, tuple]) -> tuple[str, tuple]:
    """A tier drawn by its share (the last field of each tier's tuple) and its other fields."""
    names = list(tiers)
    name = rng.choices(names, weights=[tiers[t][-1] for t in names])[0]
    return name, tiers[name][:-1]


def preset_of(out_dir: Any, preset: str | None, presets: dict[str, Any]) -> str:
    """The data preset named, else the one the folder name ends with (datasets/sudoku_easy ->
    easy), else "default"; so `env.data=<env>_easy` builds the easy level on first use."""
    name = preset or ("easy" if Path(out_dir).name.endswith("_easy") else "default")
    if name not in presets:
        raise ValueError(f"unknown data preset {name!r}; choose from {sorted(presets)}")
    return name


def build_splits(out_dir: Any, env: str, make_row: Callable[[int], dict[str, Any]], *, n_train: int,
                 n_test: int, seed: int = 0, key: tuple[str, ...] = ("puzzle",),
                 patience: int = 20) -> dict[str, Any]:
    """Write train.parquet / test.parquet of procedurally generated rows and report them.

    `make_row(generation_seed)` returns one row (JSON-string columns for structured data).
    Seeds come from disjoint ranges (`split_seed`); a row whose `key` columns repeat an
    earlier row (of either split) is skipped, so no test puzzle also appears in train. A split
    gives up after `patience` skipped duplicates per row asked for (a level with few distinct
    puzzles, asked for most of them, needs more).
    """
    import pandas as pd

    out = new_output_dir(out_dir)
    seen: set[str] = set()
    report: dict[str, Any] = {"env": env, "seed": seed, "generator": "own seeded generator"}
    for split, n in (("train", n_train), ("test", n_test)):
        rows, skipped, index = [], 0, 0
        with Progress(f"building {Path(out_dir).name} ({split})", n, "rows") as progress:
            while len(rows) < n:
                gen_seed = split_seed(split, index, seed)
                index += 1
                row = make_row(gen_seed)
                fingerprint = json.dumps([row[k] for k in key])
                if fingerprint in seen:
                    skipped += 1
                    if skipped > patience * max(n, 1):
                        raise RuntimeError(f"{env}: too many duplicate {split} rows; widen the generator")
                    continue
                seen.add(fingerprint)
                rows.append({"id": f"{env}-{split}-{len(rows)}", "seed": gen_seed, **row})
                progress.advance()
        write_parquet(pd.DataFrame(rows), out / f"{split}.parquet")
        report[split] = {"rows": len(rows), "duplicates_skipped": skipped,
                         "seeds": [split_seed(split, 0, seed), split_seed(split, index - 1, seed)] if index else []}
    return report


def data_cli(env: str, build: Callable[..., dict[str, Any]], argv: list[str] | None = None) -> dict[str, Any]:
    """The command line of scripts/dataprocess/load_<env>.py for the grid envs."""
    import argparse
    import logging

    ap = argparse.ArgumentParser(description=f"Generate datasets/{env}/{{train,test}}.parquet")
    ap.add_argument("--out", default=f"datasets/{env}", help="output folder")
    ap.add_argument("--seed", type=int, default=0, help="shifts both (disjoint) seed ranges")
    ap.add_argument("--n-train", type=int, default=None)
    ap.add_argument("--n-test", type=int, default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the build's progress lines
    sizes = {k: v for k, v in (("n_train", args.n_train), ("n_test", args.n_test)) if v is not None}
    try:
        report = build(args.out, seed=args.seed, **sizes)
    except (ConfigError, WriteFailed) as e:  # --out already holds a split, the disk is full: one line
        raise SystemExit(f"load_{env}: {e}") from None
    print(json.dumps(report, indent=2, default=str))
    return report
