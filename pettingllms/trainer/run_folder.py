"""What a run may do with an existing run folder: resume it or refuse it, never overwrite it.

- A fresh run (trainer.checkpoint.resume=none) takes only a new or empty folder, or one that holds
  only the records of attempts that never trained (Hydra's .hydra/ and train.log of a refused
  start, outputs without a step), so a corrected command may reuse the run name.
- A resumed run compares its config with the folder's config.yaml; a change is refused unless
  trainer.checkpoint.resume_allow_changes=true, and then recorded in config_changes.jsonl.
- resume=auto with no complete checkpoint starts fresh, says so, and first moves what an
  earlier (killed) attempt left into stale-<time>/, so old trajectories never mix with new ones.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pettingllms.errors import ConfigError

log = logging.getLogger(__name__)

# Keys that may differ between a run and its resumption: where it is started from and
# bookkeeping that does not change what is trained.
RESUME_FREE_KEYS = ("trainer.checkpoint.resume", "trainer.checkpoint.resume_allow_changes", "trainer.run_name",
                    "trainer.output_dir", "trainer.logging.progress_bar", "trainer.checkpoint.save_freq",
                    "trainer.checkpoint.keep_checkpoints", "trainer.logging.log_tensorboard", "trainer.logging.save_trajectories",
                    "trainer.logging.logger", "trainer.logging.project", "eval.progress_s")
CHANGES_FILE = "config_changes.jsonl"
# What a run writes into its folder (outputs.py, checkpoint.py).
RUN_OUTPUTS = ("config.yaml", "metrics.jsonl", "tensorboard", "trajectories", "checkpoints",
               "wandb", "mlflow.db", "mlartifacts", "loggers.json")
# What Hydra writes into its run dir before the job starts (the job is named after the program).
HYDRA_FILES = (".hydra", "train.log")


def has_content(run_dir: Path, ignore: tuple[str, ...] = ()) -> bool:
    return run_dir.is_dir() and any(p.name not in ignore for p in run_dir.iterdir())


def never_trained(run_dir: Path) -> bool:
    """The folder holds only records of attempts that never finished a step: Hydra's files, and
    run outputs with no metrics line and no checkpoint (e.g. a start refused for a bad data name)."""
    metrics, checkpoints = run_dir / "metrics.jsonl", run_dir / "checkpoints"
    if metrics.exists() and metrics.stat().st_size > 0:
        return False
    if checkpoints.exists() and any(checkpoints.iterdir()):
        return False
    return all(p.name in HYDRA_FILES + RUN_OUTPUTS for p in run_dir.iterdir())


def refuse_used_folder(run_dir: Path, ignore: tuple[str, ...] = ()) -> None:
    """A fresh run never writes into a folder that holds anything (but the `ignore` names), unless
    all it holds are records of attempts that never trained."""
    if has_content(run_dir, ignore) and not never_trained(run_dir):
        found = sorted(p.name for p in run_dir.iterdir() if p.name not in ignore)
        raise ConfigError(f"run folder {run_dir} is not empty (has {', '.join(found[:5])}); use "
                          f"trainer.checkpoint.resume=auto to continue it, or choose another trainer.run_name")


def set_aside_stale_outputs(run_dir: Path) -> Path | None:
    """Move an earlier attempt's outputs into stale-<time>/ (nothing is deleted)."""
    present = [run_dir / name for name in RUN_OUTPUTS if (run_dir / name).exists()]
    if not present:
        return None
    stamp = time.strftime("stale-%Y%m%d-%H%M%S")
    stale, n = run_dir / stamp, 1
    while stale.exists():
        stale, n = run_dir / f"{stamp}-{n}", n + 1
    stale.mkdir()
    for p in present:
        p.rename(stale / p.name)
    return stale


def start_fresh_in(run_dir: Path) -> None:
    """resume=auto without a complete checkpoint: say so, and keep old outputs apart."""
    stale = set_aside_stale_outputs(run_dir) if run_dir.is_dir() else None
    if stale is not None:
        log.warning("trainer.checkpoint.resume=auto: no complete checkpoint in %s; starting fresh (the earlier "
                    "attempt's outputs were moved to %s)", run_dir, stale)
    else:
        log.warning("trainer.checkpoint.resume=auto: no complete checkpoint in %s; starting fresh", run_dir)


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: {}}
    return {prefix[:-1]: node}


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    """key -> [old value, new value] for every leaf that differs (missing shows as None)."""
    a, b = _flatten(old), _flatten(new)
    diff = {}
    for key in sorted(set(a) | set(b)):
        if key.startswith(RESUME_FREE_KEYS):
            continue
        if a.get(key) != b.get(key):
            diff[key] = [a.get(key), b.get(key)]
    return diff


def check_resume_config(run_dir: Path, cfg: DictConfig, allow_changes: bool, checkpoint: Path) -> None:
    """Refuse a config that differs from the run's own, unless `allow_changes`
    (trainer.checkpoint.resume_allow_changes)."""
    saved = run_dir / "config.yaml"
    if not saved.exists():
        return
    from pettingllms.config.validate import move_renamed

    old_cfg = OmegaConf.load(saved)
    move_renamed(old_cfg)  # a run saved before a key moved compares under the key's new name
    old = OmegaConf.to_container(old_cfg, resolve=True)
    new = OmegaConf.to_container(cfg, resolve=True)
    diff = config_diff(old, new)  # type: ignore[arg-type]
    if not diff:
        return
    shown = "; ".join(f"{k}: {v[0]!r} -> {v[1]!r}" for k, v in list(diff.items())[:4])
    more = f" (+{len(diff) - 4} more)" if len(diff) > 4 else ""
    if not allow_changes:
        raise ConfigError(f"resuming {run_dir} with a config that differs from its config.yaml: {shown}{more}; "
                          f"resume with the same settings, or set trainer.checkpoint.resume_allow_changes=true "
                          f"(the changes are then recorded in {CHANGES_FILE})")
    with (run_dir / CHANGES_FILE).open("a", encoding="utf-8") as f:
        f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "checkpoint": checkpoint.name,
                            "changes": diff}, default=str) + "\n")
    log.warning("resuming %s with changed settings (recorded in %s): %s%s", run_dir, CHANGES_FILE, shown, more)
