"""`validate(cfg)`: merge a composed config onto the schema, move renamed keys, run every check.

One place decides whether a config can run: unknown keys (with the closest known key), closed
choices, ranges, names the registries own (envs, engines, dtypes, models) and the cross-field
rules. Each failure is one ConfigError line, raised before any model or data loads.
"""
from __future__ import annotations

import difflib
import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from pettingllms.config.checks import check_values
from pettingllms.config.schema import (CheckpointConfig, ExperimentConfig, LoggingConfig, OptimConfig,
                                       ValidationConfig)
from pettingllms.errors import ConfigError

log = logging.getLogger(__name__)


def _moved_keys() -> dict[str, str]:
    """Old key -> new key: the one device setting, and the trainer fields now in sub-blocks."""
    moved = {"trainer.verl.device": "trainer.device"}
    for block, cls in (("optim", OptimConfig), ("checkpoint", CheckpointConfig),
                       ("validation", ValidationConfig), ("logging", LoggingConfig)):
        for name in cls.__dataclass_fields__:
            moved[f"trainer.{name}"] = f"trainer.{block}.{name}"
    return moved


MOVED = _moved_keys()
_warned: set[str] = set()


def moved_key(key: str) -> str | None:
    """The new name of a renamed key, saying so once per process; None for a current key."""
    new = MOVED.get(key)
    if new is not None and key not in _warned:
        _warned.add(key)
        log.warning("config key '%s' is deprecated: it is now '%s' (the old name still works)", key, new)
    return new


def move_renamed(cfg: DictConfig) -> None:
    """Rewrite renamed keys in place (a YAML, an override or an older run's config.yaml that
    still uses an old name)."""
    for old in MOVED:
        parent_key, _, leaf = old.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key)
        if not isinstance(parent, DictConfig) or leaf not in parent:
            continue
        new = moved_key(old)
        value = parent[leaf]
        with _open(parent):
            del parent[leaf]
        OmegaConf.update(cfg, new, value, merge=False, force_add=True)


class _open:
    """Struct mode off for one node while keys are deleted."""

    def __init__(self, node: DictConfig) -> None:
        self.node, self.was = node, OmegaConf.is_struct(node)

    def __enter__(self) -> None:
        OmegaConf.set_struct(self.node, False)

    def __exit__(self, *exc: Any) -> None:
        OmegaConf.set_struct(self.node, self.was)


def known_keys(node: Any, prefix: str = "") -> list[str]:
    keys = []
    if isinstance(node, DictConfig):
        for k in node.keys():
            full = f"{prefix}{k}"
            keys.append(full)
            try:
                keys += known_keys(node._get_node(k), full + ".")
            except Exception:  # pragma: no cover - defensive for interpolations
                pass
    return keys


def unknown_key(key: str, known: Any) -> ConfigError:
    """The one-line error for a key the schema lacks, naming the closest known key (a misspelt
    old name, such as trainer.lrr for trainer.lr, points at where that key lives now)."""
    close = difflib.get_close_matches(key, list(known) + list(MOVED), n=1)
    hint = f" (did you mean '{MOVED.get(close[0], close[0])}'?)" if close else ""
    return ConfigError(f"unknown config key '{key}'{hint}")


def validate(cfg: Any) -> DictConfig:
    """Merge `cfg` onto the schema and check every value; returns the typed config (a DictConfig
    backed by `ExperimentConfig`, struct mode on); raises ConfigError naming what is wrong."""
    schema = OmegaConf.structured(ExperimentConfig)
    try:
        raw = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg)
        raw = OmegaConf.create(OmegaConf.to_container(raw, resolve=False))  # a copy we may rewrite
        move_renamed(raw)
        merged = OmegaConf.merge(schema, raw)
        OmegaConf.to_container(merged, resolve=True)  # surface bad interpolations now
    except ConfigKeyError as e:
        raise unknown_key(getattr(e, "full_key", None) or str(e), known_keys(schema)) from None
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        where = f" at '{key}'" if key else ""
        raise ConfigError(f"invalid config{where}: {str(e).splitlines()[0]}") from None
    check_values(merged)
    OmegaConf.set_struct(merged, True)
    return merged
