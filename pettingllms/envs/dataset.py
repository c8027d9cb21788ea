"""Loading an env's problems from `datasets/<env>/<split>.parquet`.

Each env package has a `data.py` with
    build(out_dir: Path, *, seed: int = 0, offline: bool | None = None) -> dict
that writes `train.parquet` and `test.parquet` into `out_dir` and returns a report
of what it used. The `scripts/dataprocess/load_<env>.py` scripts are thin CLIs over
it; training builds a missing split on first use so a fresh clone just runs.
"""
from __future__ import annotations

import difflib
import importlib
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pettingllms.errors import ConfigError
from pettingllms.utils.diskio import write_atomic

log = logging.getLogger(__name__)


SPLITS = ("train", "test")
DEFAULT_DATA_ROOT = "datasets"  # the only data root created on first use


def dataset_dir(data_name: str, data_root: str | Path = DEFAULT_DATA_ROOT) -> Path:
    return Path(data_root) / data_name


def new_output_dir(out: str | Path) -> Path:
    """The folder a build writes into. A build never replaces files: a folder that already
    holds a split is refused."""
    out = Path(out)
    existing = [f"{s}.parquet" for s in SPLITS if (out / f"{s}.parquet").exists()]
    if existing:
        raise ConfigError(f"{out} already has {' and '.join(existing)}; a build never replaces files: "
                          f"move them away or choose another output folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


BUILD_RECORD = "build.json"  # written next to the splits: which data version built them


def data_version(module: Any, data_name: str) -> int:
    """The version of `data_name`'s generator: a builder module's DATA_VERSIONS[name] (default
    1). Bumped when a change alters the rows, so that an older folder is noticed (below)."""
    return int(getattr(module, "DATA_VERSIONS", {}).get(data_name, 1))


def _builder_module(data_name: str, builder: str | None) -> str:
    """The module whose build() makes `data_name` (default: the env package named like the data)."""
    return builder or f"pettingllms.envs.{data_name}.data"


def _warn_if_stale(out: Path, data_name: str, builder: str | None) -> None:
    """A folder built by an older generator is kept (a build never replaces files), but said so:
    otherwise a documented number silently stops reproducing after an update."""
    try:
        module = importlib.import_module(_builder_module(data_name, builder))
    except ImportError:  # the user's own data: no generator to compare with
        return
    if data_name not in buildable_names(module):
        return
    record = out / BUILD_RECORD
    try:
        built = int(json.loads(record.read_text()).get("version", 1)) if record.exists() else 1
    except (ValueError, OSError, AttributeError):
        built = 1
    now = data_version(module, data_name)
    if built != now:
        log.warning("%s was built by data version %d of %s, this version makes %d: its rows differ from "
                    "what the docs measured; move the folder away to have it rebuilt", out, built, data_name, now)


def buildable_names(module: Any) -> tuple[str, ...]:
    """Dataset names a builder module makes: its DATA_NAMES, else its env package's name."""
    names = getattr(module, "DATA_NAMES", None)
    return tuple(names) if names else (module.__name__.rsplit(".", 2)[-2],)


def _splits_present(folder: Path) -> list[str]:
    """The splits whose parquet file the folder holds."""
    return [s for s in SPLITS if (folder / f"{s}.parquet").exists()]


def ensure_dataset(data_name: str, data_root: str | Path = DEFAULT_DATA_ROOT, seed: int = 0,
                   builder: str | None = None) -> Path:
    """The dataset folder, built on first use into a fresh folder and moved into place.

    `builder` names the module whose build() makes the data (default: the env package named
    like the data); e.g. datasets/math_easy is built by pettingllms.envs.math.data. Nothing the
    user made is replaced: a folder missing a split is an error naming it, an unknown name
    is an error listing what can be built, and a data root other than the default must exist."""
    out = dataset_dir(data_name, data_root)
    have = _splits_present(out)
    if len(have) == len(SPLITS):
        _warn_if_stale(out, data_name, builder)
        return out
    if out.is_dir() and any(out.iterdir()):
        missing = [f"{s}.parquet" for s in SPLITS if s not in have]
        raise ConfigError(f"dataset folder {out} has no {' or '.join(missing)}; add it, or move the folder "
                          f"away to have it built (a build never replaces files)")
    if str(data_root) != DEFAULT_DATA_ROOT and not Path(data_root).is_dir():
        raise ConfigError(f"env.data_root={data_root} does not exist; create it or fix the path "
                          f"(only the default '{DEFAULT_DATA_ROOT}' is created on first use)")
    module = importlib.import_module(_builder_module(data_name, builder))
    names = buildable_names(module)
    if data_name not in names:
        close = difflib.get_close_matches(data_name, names, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"env.data={data_name}: no dataset folder {out} and no preset of that name{hint}; "
                          f"presets: {', '.join(names)} (or put train.parquet and test.parquet in {out})")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{data_name}.building-", dir=out.parent))
    try:
        report = module.build(tmp / data_name, seed=seed)
        write_atomic(tmp / data_name / BUILD_RECORD, json.dumps(
            {"version": data_version(module, data_name), "seed": seed, "report": report}, default=str, indent=1))
        try:
            if out.is_dir():
                out.rmdir()  # empty (checked above); a non-empty folder makes rename fail, never replaced
            (tmp / data_name).rename(out)
        except OSError:
            # another process built the same folder meanwhile (two runs, or two test workers, at once):
            # keep theirs, complete; anything else is still an error
            if len(_splits_present(out)) != len(SPLITS):
                raise
            log.info("dataset %s was built by another process meanwhile; using it", data_name)
            return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("built dataset %s: %s", data_name, report)
    return out


def load_split(data_name: str, split: str, data_root: str | Path = DEFAULT_DATA_ROOT,
               limit: int | None = None, builder: str | None = None) -> list[dict[str, Any]]:
    """Rows of one split as dicts of plain Python values (str, int, float, list, dict, None);
    every row has a string `id`. Read with pyarrow alone: pandas would add ~60 MB to every
    training process and turn list columns into numpy arrays."""
    import pyarrow.parquet as pq

    path = ensure_dataset(data_name, data_root, builder=builder) / f"{split}.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found (splits are 'train' and 'test')")
    try:
        rows = pq.ParquetFile(path).read().to_pylist()  # read_table would import pandas
    except Exception as e:  # pyarrow raises several types; the user needs the file, not the stack
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"cannot read dataset file {path}: {first}; fix or replace it "
                          f"(or point env.data / env.data_root elsewhere)") from None
    if limit is not None:
        rows = rows[:limit]
    for r in rows:
        r["id"] = str(r["id"])
    return rows
