"""Checkpoints: `<run_dir>/checkpoints/step_NNNNNN/`.

Layout of one checkpoint:
    policies/<name>/     whatever PolicyWorker.save(dir) writes (weights or adapter,
                         optimizer, scheduler)
    trainer_state.pt     step, data position, RNG states, metrics so far
    COMPLETE             written last; a folder without it is ignored
A checkpoint is written into a temporary folder and renamed into place, so a run
killed while saving never leaves a folder that looks complete.
"""
from __future__ import annotations

import json
import logging
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any, Mapping

import torch

from pettingllms.errors import ConfigError, WriteFailed
from pettingllms.utils.diskio import as_write_failed, folder_bytes, free_bytes, is_write_error
from pettingllms.utils.seeding import capture_rng_state

log = logging.getLogger(__name__)

MARKER = "COMPLETE"
STATE_FILE = "trainer_state.pt"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def save_checkpoint(run_dir: Path, step: int, workers: Mapping[str, Any], state: dict[str, Any]) -> Path:
    """Write checkpoint `step`; a checkpoint that will not fit (the previous one's size, or an
    estimate for the first) or whose write fails raises WriteFailed, its .tmp folder removed."""
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    needed, basis = checkpoint_bytes(run_dir, workers)
    free = free_bytes(final.parent)
    if needed is not None and free is not None and needed > free:
        raise WriteFailed(tmp, f"not enough free space for checkpoint {final.name} (by {basis}); nothing written",
                          needed, free)
    try:
        (tmp / "policies").mkdir(parents=True)
        for name, worker in workers.items():
            worker.save(str(tmp / "policies" / name))
        torch.save({**state, "step": step, "rng": capture_rng_state()}, tmp / STATE_FILE)
        (tmp / MARKER).write_text(f"{step}\n")
    except Exception as e:
        if not is_write_error(e):
            raise
        failed = as_write_failed(tmp, e, needed)
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written checkpoint is never left behind
        raise failed from None
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final


def checkpoint_bytes(run_dir: Path, workers: Mapping[str, Any]) -> tuple[int | None, str]:
    """Bytes the next checkpoint needs, and on what basis: the newest complete one's size, else an
    estimate from the workers' parameters (weights saved + two fp32 Adam moments per trained one)."""
    latest = latest_checkpoint(run_dir)
    if latest is not None:
        return folder_bytes(latest), f"the size of {latest.name}"
    total = 0
    for worker in workers.values():
        model = getattr(worker, "model", None)
        if model is None or not hasattr(model, "parameters"):
            return None, "unknown"  # e.g. verl's workers: their ranks write the checkpoint
        params = list(model.parameters())
        trained = [p for p in params if p.requires_grad]
        saved = trained if getattr(getattr(worker, "spec", None), "is_lora", False) else params
        total += sum(p.numel() * p.element_size() for p in saved) + sum(p.numel() * 8 for p in trained)
    return total, "an estimate from the policies' parameters"


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
    have = sorted(p.name for p in (Path(ckpt) / "policies").iterdir()) if (Path(ckpt) / "policies").is_dir() else []
    missing = [name for name in workers if name not in have]
    if missing:  # e.g. an L2 (per-agent adapters) config on an L1 (one shared policy) checkpoint
        raise ConfigError(f"checkpoint {ckpt} holds policies {have} but this config has {sorted(workers)}: "
                          f"it was made with other policies / agents_mode; use the config it was made with")
    for name, worker in workers.items():
        if weights_only:
            worker.load(str(Path(ckpt) / "policies" / name), weights_only=True)
        else:
            worker.load(str(Path(ckpt) / "policies" / name))


def _check_safetensors(path: Path) -> None:
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError("shorter than its header")
        n = int.from_bytes(head, "little")
        header = json.loads(f.read(n))
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if path.stat().st_size < 8 + n + end:
        raise ValueError(f"truncated: {path.stat().st_size} bytes, its header needs {8 + n + end}")


def unreadable_file(ckpt: Path) -> tuple[Path, str] | None:
    """The first file of a checkpoint that cannot be read whole, and why (None: all readable)."""
    for path in sorted(Path(ckpt).rglob("*")):
        if not path.is_file():
            continue
        try:
            if path.suffix == ".safetensors":
                _check_safetensors(path)
            elif path.suffix in (".pt", ".bin"):  # torch.save writes zip archives: check every CRC
                with zipfile.ZipFile(path) as z:
                    bad = z.testzip()
                if bad is not None:
                    raise ValueError(f"corrupt member {bad}")
            elif path.suffix == ".json":
                json.loads(path.read_text())
        except Exception as e:  # noqa: BLE001 - any failure to read is the answer
            return path, (str(e).strip().splitlines() or [type(e).__name__])[0]
    return None


def load_checkpoint(ckpt: Path, workers: Mapping[str, Any],
                    run_dir: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """Load trainer state and policies from `ckpt`; returns (the checkpoint used, its state).

    If a file of it is unreadable (truncated weights, optimizer...), warn naming the file and,
    given `run_dir`, fall back to the previous complete checkpoint of that run. A readable
    checkpoint that does not fit the config is one ConfigError line."""
    ckpt = Path(ckpt)
    candidates = [ckpt]
    if run_dir is not None:
        step = _step_of(ckpt)
        candidates += [p for s, p in reversed(list_checkpoints(run_dir)) if step is None or s < step]
    for candidate in candidates:
        try:
            state = load_state(candidate)
            load_policies(candidate, workers)
            if candidate != ckpt:
                log.warning("resuming from %s instead", candidate)
            return candidate, state
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - decide below whether a file is damaged
            bad = unreadable_file(candidate)
            if bad is None:
                first = (str(e).strip().splitlines() or [""])[0]
                raise ConfigError(f"checkpoint {candidate} does not fit this config "
                                  f"({type(e).__name__}: {first})") from None
        log.warning("checkpoint %s is unreadable: %s (%s)%s", candidate, bad[0], bad[1],
                    "; trying the previous complete checkpoint" if candidate != candidates[-1] else "")
    raise ConfigError(f"no readable checkpoint to resume from: {ckpt} has an unreadable file"
                      + (f" and so do the earlier ones in {run_dir}" if len(candidates) > 1 else "")
                      + " (see the warnings above)")


def _step_of(ckpt: Path) -> int | None:
    m = _STEP_DIR.match(Path(ckpt).name)
    return int(m.group(1)) if m else None


def prune_checkpoints(run_dir: Path, keep: int) -> None:
    """Delete all but the newest `keep` complete checkpoints (keep <= 0 keeps all)."""
    if keep <= 0:
        return
    for _, path in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(path, ignore_errors=True)
