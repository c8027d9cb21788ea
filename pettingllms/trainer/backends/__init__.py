"""Backends: `make_backend(cfg, env_factory)` builds the one `trainer.backend` names; each builds
its pieces through `trainer.assemble`. See `base.py` for the protocol and docs/backends.md for how
the pieces are placed."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig

from pettingllms.errors import ConfigError
from pettingllms.trainer.backends.base import Backend, GenerationStats, Runner

__all__ = ["Backend", "GenerationStats", "Runner", "make_backend"]


def make_backend(cfg: DictConfig, env_factory: Callable[[], Any], engine: Any = None,
                 run_dir: Path | None = None) -> Backend:
    """`cfg` is the run config the backend hands to `trainer.assemble` to build its pieces."""
    from pettingllms.trainer.assemble import backend_name

    backend = _backend(backend_name(cfg), cfg, env_factory, engine)
    backend.run_dir = run_dir
    return backend


def _backend(name: str, cfg: DictConfig, env_factory: Callable[[], Any], engine: Any) -> Backend:
    if name == "local":
        from pettingllms.trainer.backends.local import LocalBackend
        return LocalBackend(cfg, env_factory, engine=engine)
    if engine is not None:
        raise ConfigError(f"trainer.backend={name} builds its own engines; a given engine needs trainer.backend=local")
    if name == "ray":
        from pettingllms.trainer.backends.ray import RayBackend
        return RayBackend(cfg, env_factory)
    if name == "verl":
        from pettingllms.trainer.backends.verl import VerlBackend
        return VerlBackend(cfg, env_factory)
    raise ConfigError(f"unknown trainer.backend {name!r}; choose one of local, ray, verl")
