"""Checkpoints: `<run_dir>/checkpoints/step_<N>/`.

Layout of one checkpoint:
    policies/<name>/     whatever PolicyWorker.save(dir) writes (weights or adapter,
                         optimizer, scheduler)
    trainer_state.pt     step, data position, RNG states, metrics so far
    COMPLETE             written last; a folder without it is ignored
A checkpoint is written into a temporary folder and renamed into place, so a run
killed while saving never leaves a folder that looks complete.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Mapping

import torch

from pettingllms.utils.seeding import capture_rng_state

MARKER = "COMPLETE"
STATE_FILE = "trainer_state.pt"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def save_checkpoint(run_dir: Path, step: int, workers: Mapping[str, Any], state: dict[str, Any]) -> Path:
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "policies").mkdir(parents=True)
    for name, worker in workers.items():
        worker.save(str(tmp / "policies" / name))
    torch.save({**state, "step": step, "rng": capture_rng_state()}, tmp / STATE_FILE)
    (tmp / MARKER).write_text(f"{step}\n")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final


def is_complete(ckpt: Path) -> bool:
    return (Path(ckpt) / MARKER).exists() and (Path(ckpt) / STATE_FILE).exists()


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir() and is_complete(p):
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def load_state(ckpt: Path) -> dict[str, Any]:
    if not is_complete(ckpt):
        raise FileNotFoundError(f"{ckpt} is not a complete checkpoint (no {MARKER} or {STATE_FILE})")
    return torch.load(Path(ckpt) / STATE_FILE, weights_only=True)


def resolve_checkpoint(path: str, what: str) -> Path:
    """A checkpoint folder, or a run folder's latest complete checkpoint; ConfigError names `what`."""
    from pettingllms.config import ConfigError

    p = Path(path)
    if (p / "checkpoints").is_dir():
        latest = latest_checkpoint(p)
        if latest is None:
            raise ConfigError(f"{what}={path}: no complete checkpoint in that run folder")
        return latest
    if not is_complete(p):
        raise ConfigError(f"{what}={path}: not a complete checkpoint folder")
    return p


def load_policies(ckpt: Path, workers: Mapping[str, Any], weights_only: bool = False) -> None:
    """Load each worker from <ckpt>/policies/<name>; `weights_only` keeps optimizers fresh."""
    for name, worker in workers.items():
        folder = Path(ckpt) / "policies" / name
        if not folder.exists():
            raise FileNotFoundError(f"checkpoint {ckpt} has no policy '{name}' "
                                    f"(it has: {sorted(p.name for p in (Path(ckpt) / 'policies').iterdir())})")
        if weights_only:
            worker.load(str(folder), weights_only=True)
        else:
            worker.load(str(folder))


def prune_checkpoints(run_dir: Path, keep: int) -> None:
    """Delete all but the newest `keep` complete checkpoints (keep <= 0 keeps all)."""
    if keep <= 0:
        return
    for _, path in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(path, ignore_errors=True)
