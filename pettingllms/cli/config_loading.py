"""Shared config loading for the command-line entry points.

`load_config(name, overrides)` composes `configs/<name>.yaml` with Hydra's compose
API and validates the result against `pettingllms.config.ExperimentConfig`.

Overrides are checked against the schema *before* composing, so a misspelt key
fails with one message naming it instead of a Hydra traceback. Value overrides
are passed to Hydra as `++key=value` (set or add): the YAML files need not
list every schema field, the schema supplies the defaults.
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from omegaconf import DictConfig, OmegaConf

from pettingllms.config import ConfigError, ExperimentConfig, unknown_key, validate

# Config groups (folders in configs/); `group=option` picks a YAML file.
CONFIG_GROUPS = ("model", "rollout", "algorithm", "trainer", "policies", "env")

# Schema fields whose children are free-form (checked by the component that owns them).
_FREE_FORM = ("policies", "agents", "env.options", "rollout.engine_options", "rollout.openai.policy_models",
              "ray.env_vars")


def config_dir() -> Path:
    """The `configs/` folder: $PETTINGLLMS_CONFIG_DIR, else the one next to the package."""
    env = os.environ.get("PETTINGLLMS_CONFIG_DIR")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parents[2] / "configs"
    if here.is_dir():
        return here
    return (Path.cwd() / "configs").resolve()


def experiment_names(cdir: Path | None = None) -> list[str]:
    cdir = cdir or config_dir()
    return sorted(p.stem for p in cdir.glob("*.yaml"))


def group_options(group: str, cdir: Path | None = None) -> list[str]:
    cdir = cdir or config_dir()
    return sorted(p.stem for p in (cdir / group).glob("*.yaml"))


def _schema_keys() -> list[str]:
    schema = OmegaConf.structured(ExperimentConfig)
    keys: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        for k in node.keys():
            full = f"{prefix}{k}"
            keys.append(full)
            child = node._get_node(k)
            if isinstance(child, DictConfig) and full not in _FREE_FORM:
                walk(child, full + ".")

    walk(schema, "")
    return keys


def _is_free_form(key: str) -> bool:
    return any(key.startswith(f + ".") for f in _FREE_FORM)


def check_override_key(key: str, known: Sequence[str] | None = None) -> None:
    """Raise ConfigError if `key` (dotted) is not a schema field."""
    known = known if known is not None else _schema_keys()
    if key in known or _is_free_form(key):
        return
    # A list element, e.g. trainer.betas.0 -> trainer.betas
    head, _, tail = key.rpartition(".")
    if tail.isdigit() and head in known:
        return
    raise unknown_key(key, known)


def check_group_option(group: str, option: str, cdir: Path | None = None) -> None:
    options = group_options(group, cdir)
    if option not in options:
        close = difflib.get_close_matches(option, options, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"unknown {group} config '{option}'{hint}; known: {', '.join(options) or '(none)'}")


def prepare_overrides(overrides: Iterable[str], cdir: Path | None = None) -> list[str]:
    """Check each `key=value` override and rewrite value overrides as `++key=value`."""
    known = _schema_keys()
    out = []
    for ov in overrides:
        if ov.startswith("~"):  # deletion (~key or ~key=value): the schema default comes back
            check_override_key(ov[1:].split("=", 1)[0], known)
            out.append(ov)
            continue
        if "=" not in ov:
            raise ConfigError(f"bad override '{ov}': expected key=value")
        key, value = ov.split("=", 1)
        bare = key.lstrip("+")
        if bare in CONFIG_GROUPS:  # group choice, e.g. env=sudoku
            if key != bare:
                raise ConfigError(f"bad override '{ov}': '{bare}' is a config group; use {bare}={value}")
            check_group_option(bare, value, cdir)
            out.append(ov)
            continue
        if "@" in bare or "/" in bare:
            raise ConfigError(f"bad override '{ov}': package/group paths are not supported here")
        check_override_key(bare, known)
        out.append(f"++{bare}={value}")
    return out


def _hydra_message(e: Exception) -> str:
    text = str(e).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return " ".join(lines[:2]) if lines else type(e).__name__


def compose_raw(name: str, overrides: Sequence[str] = (), cdir: Path | None = None) -> DictConfig:
    """Compose `configs/<name>.yaml` with overrides; no schema validation."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    cdir = cdir or config_dir()
    if not (cdir / f"{name}.yaml").exists():
        close = difflib.get_close_matches(name, experiment_names(cdir), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"unknown config '{name}' in {cdir}{hint}; known: {', '.join(experiment_names(cdir))}")
    ovs = prepare_overrides(overrides, cdir)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(cdir), version_base=None, job_name="pettingllms"):
            cfg = compose(config_name=name, overrides=ovs)
    except (HydraException, OmegaConfBaseException, YAMLError, ValueError) as e:
        raise ConfigError(f"cannot compose config '{name}': {_hydra_message(e)}") from None
    finally:
        GlobalHydra.instance().clear()
    OmegaConf.set_struct(cfg, False)
    return cfg


def load_config(name: str, overrides: Sequence[str] = (), cdir: Path | None = None) -> DictConfig:
    """Compose and validate: the one way entry points get their config."""
    return validate(compose_raw(name, overrides, cdir))


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)
