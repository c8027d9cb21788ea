"""Shared config loading for the command-line entry points.

`load_config(name, overrides)` composes `configs/<name>.yaml` with Hydra's compose
API and validates the result against `pettingllms.config.ExperimentConfig`.

A `SearchPath` adds the user's folders to ours, in the order Hydra looks them up:
the `--config-dir` folder first (its files shadow ours), then `configs/`, then the
`hydra.searchpath` entries (from the command line, else the primary config's `hydra:`
block). Hydra 1.3 takes the primary config only from the first two.

Overrides are checked against the schema *before* composing, so a misspelt key
fails with one message naming it instead of a Hydra traceback. Value overrides
are passed to Hydra as `++key=value` (set or add): the YAML files need not
list every schema field, the schema supplies the defaults.
"""
from __future__ import annotations

import difflib
import importlib.resources
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence, Union

from omegaconf import DictConfig, OmegaConf

from pettingllms.config.schema import ExperimentConfig
from pettingllms.config.validate import MOVED, unknown_key, validate
from pettingllms.errors import ConfigError

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


@dataclass(frozen=True)
class SearchPath:
    """Config folders in lookup order: `user` (--config-dir), `project`, then `extra`."""
    project: Path
    user: Path | None = None
    extra: tuple[Path, ...] = ()

    @property
    def primary_dirs(self) -> list[Path]:
        """Where Hydra finds the primary config: its main config path and --config-dir."""
        return [self.user, self.project] if self.user else [self.project]

    @property
    def dirs(self) -> list[Path]:
        return self.primary_dirs + list(self.extra)

    @property
    def main(self) -> Path:
        """hydra.main's config_path. Hydra puts its own --config-dir *after* this one, so the
        user's folder is the main path and `project` is passed as Hydra's --config-dir."""
        return self.primary_dirs[0]

    @property
    def hydra_config_dir(self) -> Path | None:
        return self.project if self.user else None

    def searchpath_overrides(self) -> list[str]:
        """`hydra.searchpath=[...]` with every entry resolved to an absolute folder."""
        if not self.extra:
            return []
        return ["hydra.searchpath=[" + ",".join(quote(f"file://{d}") for d in self.extra) + "]"]


ConfigDirs = Union[Path, SearchPath, None]  # a Path stands in for configs/ (a full copy of it)


def _search(cdir: ConfigDirs) -> SearchPath:
    return cdir if isinstance(cdir, SearchPath) else SearchPath(Path(cdir) if cdir else config_dir())


def quote(value: Path | str) -> str:
    """A Hydra override value that any path survives (spaces, commas, quotes)."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _searchpath_dir(entry: str) -> Path:
    """The folder behind a hydra.searchpath entry: file://DIR (relative to cwd, as in Hydra),
    pkg://module/sub/dir, or a plain path."""
    scheme, sep, rest = entry.partition("://")
    if sep and scheme == "pkg":
        module, _, sub = rest.partition("/")
        try:
            folder = Path(str(importlib.resources.files(module) / sub))
        except (ImportError, TypeError, ValueError):
            raise ConfigError(f"hydra.searchpath entry '{entry}': cannot import '{module}'") from None
    elif sep and scheme != "file":
        raise ConfigError(f"hydra.searchpath entry '{entry}': use file://DIR or pkg://module/dir")
    else:
        folder = Path(rest if sep else entry)
    if not folder.is_dir():
        raise ConfigError(f"hydra.searchpath entry '{entry}' is not a folder")
    return folder.resolve()


def _searchpath_entries(value: Any, where: str) -> list[str]:
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"hydra.searchpath {where} must be a list of strings, "
                          f"e.g. hydra.searchpath=[file:///abs/dir,pkg://module/dir]; got {value!r}")
    return value


def _primary_searchpath(name: str, sp: SearchPath) -> list[str]:
    """hydra.searchpath in the primary config's `hydra:` block (Hydra reads only the primary's)."""
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    path = find_config(name, sp.primary_dirs)
    try:
        value = OmegaConf.select(OmegaConf.load(path), "hydra.searchpath") if path else None
    except (OSError, YAMLError, OmegaConfBaseException):  # a broken file: composing it reports the problem
        return []
    return [] if value is None else _searchpath_entries(value, f"in {path}")


def search_path(name: str, user: Path | None = None, searchpath: Any = None) -> SearchPath:
    """The search path of a command: `--config-dir` (user), then configs/, then the
    `hydra.searchpath` entries (`searchpath` from the command line, else the primary config's)."""
    sp = SearchPath(config_dir())
    if user is not None:
        if not user.is_dir():
            raise ConfigError(f"--config-dir '{user}' is not a folder")
        if user.resolve() != sp.project:
            sp = replace(sp, user=user.resolve())
    entries = _searchpath_entries(searchpath, "on the command line") if searchpath is not None \
        else _primary_searchpath(name, sp)
    extra = [d for d in map(_searchpath_dir, entries) if d not in sp.primary_dirs]
    return replace(sp, extra=tuple(dict.fromkeys(extra)))


def find_config(name: str, dirs: Iterable[Path]) -> Path | None:
    return next((d / f"{name}.yaml" for d in dirs if (d / f"{name}.yaml").is_file()), None)


def experiment_names(cdir: ConfigDirs = None) -> list[str]:
    """Configs that `--config-name` can pick (the primary config's folders)."""
    return sorted({p.stem for d in _search(cdir).primary_dirs for p in d.glob("*.yaml")})


def group_options(group: str, cdir: ConfigDirs = None) -> list[str]:
    return sorted({p.stem for d in _search(cdir).dirs for p in (d / group).glob("*.yaml")})


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
    if key in known or key in MOVED or _is_free_form(key):  # an old name: validate moves it, saying so
        return
    # A list element, e.g. trainer.optim.betas.0 -> trainer.optim.betas
    head, _, tail = key.rpartition(".")
    if tail.isdigit() and head in known:
        return
    raise unknown_key(key, known)


def check_group_option(group: str, option: str, cdir: ConfigDirs = None) -> None:
    options = group_options(group, cdir)
    if option not in options:
        close = difflib.get_close_matches(option, options, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"unknown {group} config '{option}'{hint}; known: {', '.join(options) or '(none)'}")


def prepare_overrides(overrides: Iterable[str], cdir: ConfigDirs = None) -> list[str]:
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


def check_primary_config(name: str, cdir: ConfigDirs = None) -> None:
    sp = _search(cdir)
    if find_config(name, sp.primary_dirs):
        return
    elsewhere = find_config(name, sp.extra)
    if elsewhere:  # Hydra 1.3 does not look for the primary config in hydra.searchpath
        raise ConfigError(f"config '{name}' is only in hydra.searchpath ({elsewhere.parent}); "
                          f"the primary config comes from --config-dir or {sp.project}: "
                          f"pass --config-dir {elsewhere.parent}")
    names = experiment_names(sp)
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    where = ", ".join(map(str, sp.primary_dirs))
    raise ConfigError(f"unknown config '{name}' in {where}{hint}; known: {', '.join(names)}")


def _initialize_hydra(sp: SearchPath) -> None:
    """Hydra's global state with the search path that hydra.main builds from
    config_path=sp.main and --config-dir sp.hydra_config_dir (hydra/_internal/utils.py:run_hydra)."""
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery

    version.setbase(None)
    csp = create_config_search_path(str(sp.main))
    if sp.hydra_config_dir:
        csp.prepend("command-line", f"file://{sp.hydra_config_dir}", anchor=SearchPathQuery(provider="schema"))
    Hydra.create_main_hydra2(task_name="pettingllms", config_search_path=csp)


def compose_raw(name: str, overrides: Sequence[str] = (), cdir: ConfigDirs = None) -> DictConfig:
    """Compose config `name` from the search path with overrides; no schema validation."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    sp = _search(cdir)
    check_primary_config(name, sp)
    ovs = prepare_overrides(overrides, sp) + sp.searchpath_overrides()
    GlobalHydra.instance().clear()
    try:
        _initialize_hydra(sp)
        cfg = compose(config_name=name, overrides=ovs)
    except (HydraException, OmegaConfBaseException, YAMLError, ValueError) as e:
        raise ConfigError(f"cannot compose config '{name}': {_hydra_message(e)}") from None
    finally:
        GlobalHydra.instance().clear()
    OmegaConf.set_struct(cfg, False)
    return cfg


def load_config(name: str, overrides: Sequence[str] = (), cdir: ConfigDirs = None) -> DictConfig:
    """Compose and validate: the one way entry points get their config."""
    return validate(compose_raw(name, overrides, cdir))


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)
