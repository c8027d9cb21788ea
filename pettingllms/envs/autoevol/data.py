"""Data for `autoevol`: the math and code envs' own data sets, chosen by `env.data`.

`env.data: math` (or `math_easy`, ...) builds with `pettingllms.envs.math.data`,
`env.data: code` with `pettingllms.envs.code.data`; nothing is copied.
"""
from __future__ import annotations

from pathlib import Path

from pettingllms.envs.code import data as code_data
from pettingllms.envs.math import data as math_data

# what training builds on first use (pettingllms.envs.dataset): the two families' own names
DATA_NAMES = tuple(math_data.DATA_NAMES) + tuple(code_data.DATA_NAMES)
DATA_VERSIONS = {**getattr(math_data, "DATA_VERSIONS", {}), **getattr(code_data, "DATA_VERSIONS", {})}


def build(out_dir: str | Path, *, seed: int = 0, offline: bool | None = None) -> dict:
    """Write train/test parquet for the task family the folder name names (code* or math*)."""
    name = Path(out_dir).name
    module = code_data if name.startswith("code") else math_data
    return module.build(out_dir, seed=seed, offline=offline)
