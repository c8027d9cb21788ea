"""Files of Hugging Face hub datasets, read exactly as the hub serves them (parquet, jsonl, csv).

A loader names a dataset repo and a file name or glob inside it (`HubFile`). `hub_paths` finds
the files: first in a local copy laid out `<dir>/<owner>/<name>/<file>` (the `dir` argument or
$PETTINGLLMS_HUB_DIR; how an offline machine uses files fetched elsewhere, and how the tests feed
rows in the hub's schema), else on the hub (`huggingface_hub`, cached by it). `iter_records`
streams rows as plain dicts, so a 1 GB jsonl or a sharded parquet never sits in memory at once.
"""
from __future__ import annotations

import csv
import fnmatch
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

HUB_DIR_ENV = "PETTINGLLMS_HUB_DIR"


@dataclass(frozen=True)
class HubFile:
    repo: str      # owner/name of a dataset repo
    pattern: str   # a file name or a glob (sharded parquet) inside it

    def describe(self) -> str:
        return f"{self.repo}:{self.pattern}"


class HubFileMissing(Exception):
    """Neither a local copy nor the hub has the file; the message says where it looked."""


def local_hub_dir(explicit: str | Path | None = None) -> Path | None:
    chosen = explicit or os.environ.get(HUB_DIR_ENV)
    return Path(chosen) if chosen else None


def local_paths(spec: HubFile, hub_dir: str | Path | None = None) -> list[Path]:
    root = local_hub_dir(hub_dir)
    if root is None:
        return []
    return sorted(p for p in (root / spec.repo).glob(spec.pattern) if p.is_file())


def hub_paths(spec: HubFile, hub_dir: str | Path | None = None, online: bool = True) -> list[Path]:
    """The files of `spec`: a local copy when there is one, else downloaded when `online`."""
    local = local_paths(spec, hub_dir)
    if local:
        return local
    root = local_hub_dir(hub_dir)
    where = f"no local copy under {root / spec.repo}" if root else f"no local copy (${HUB_DIR_ENV} unset)"
    if not online:
        raise HubFileMissing(f"{spec.describe()}: {where} and the hub is not used (offline)")
    from huggingface_hub import HfApi, hf_hub_download

    try:
        names = sorted(f for f in HfApi().list_repo_files(spec.repo, repo_type="dataset")
                       if fnmatch.fnmatch(f, spec.pattern))
        if not names:
            raise HubFileMissing(f"{spec.describe()}: no such file in the dataset repo")
        return [Path(hf_hub_download(spec.repo, name, repo_type="dataset")) for name in names]
    except HubFileMissing:
        raise
    except Exception as e:  # noqa: BLE001 - network, auth, missing repo: one line for the report
        raise HubFileMissing(f"{spec.describe()}: {where} and the hub failed "
                             f"({type(e).__name__}: {str(e)[:160]})") from None


def iter_records(path: str | Path, batch_rows: int = 256) -> Iterator[dict[str, Any]]:
    """Rows of one hub file as dicts: parquet (structs and lists as dicts and lists), jsonl, csv."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows):
            yield from batch.to_pylist()
    elif name.endswith((".jsonl", ".json")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)
    elif name.endswith(".csv"):
        with open(path, encoding="utf-8", newline="") as f:
            yield from csv.DictReader(f)
    else:
        raise ValueError(f"{path}: not a parquet, jsonl or csv file")


def open_records(spec: HubFile, hub_dir: str | Path | None = None, online: bool = True
                 ) -> tuple[Iterator[dict[str, Any]], list[Path]]:
    """(rows of every file of `spec` in name order, the files). The files are found now, so a
    missing one raises HubFileMissing here rather than halfway through a loader."""
    paths = hub_paths(spec, hub_dir, online)
    return (row for path in paths for row in iter_records(path)), paths
