"""Loading an env's problems from `datasets/<env>/<split>.parquet`.

Each env package has a `data.py` with
    build(out_dir: Path, *, seed: int = 0, offline: bool | None = None) -> dict
that writes `train.parquet` and `test.parquet` into `out_dir` and returns a report
of what it used. The `scripts/dataprocess/load_<env>.py` scripts are thin CLIs over
it; training builds a missing split on first use so a fresh clone just runs.
"""
from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

from pettingllms.config import ConfigError

log = logging.getLogger(__name__)


def dataset_dir(data_name: str, data_root: str | Path = "datasets") -> Path:
    return Path(data_root) / data_name


def ensure_dataset(data_name: str, data_root: str | Path = "datasets", seed: int = 0,
                   builder: str | None = None) -> Path:
    """`builder` names the module whose build() makes the data (default: the env package
    named like the data); e.g. datasets/math_easy is built by pettingllms.envs.math.data."""
    out = dataset_dir(data_name, data_root)
    if not ((out / "train.parquet").exists() and (out / "test.parquet").exists()):
        module = importlib.import_module(builder or f"pettingllms.envs.{data_name}.data")
        report = module.build(out, seed=seed)
        log.info("built dataset %s: %s", data_name, report)
    return out


def load_split(data_name: str, split: str, data_root: str | Path = "datasets",
               limit: int | None = None, builder: str | None = None) -> list[dict[str, Any]]:
    """Rows of one split as dicts; every row has a string `id`."""
    import pandas as pd

    path = ensure_dataset(data_name, data_root, builder=builder) / f"{split}.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found (splits are 'train' and 'test')")
    try:
        rows = pd.read_parquet(path).to_dict(orient="records")
    except Exception as e:  # pyarrow raises several types; the user needs the file, not the stack
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"cannot read dataset file {path}: {first}; fix or replace it "
                          f"(or point env.data / env.data_root elsewhere)") from None
    if limit is not None:
        rows = rows[:limit]
    for r in rows:
        r["id"] = str(r["id"])
    return rows
