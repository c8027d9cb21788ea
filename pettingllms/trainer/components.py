"""Building the pieces a run needs from its config: env factory, data, policies, engine.

Shared by the trainer, the backends (trainer/backends/) and `pettingllms.evaluate`.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from pettingllms.errors import ConfigError


def data_name(cfg: DictConfig) -> str:
    """The dataset folder's name: env.data (default: the env's name); env.map_size=N picks the
    side-N data of the env's own presets (sudoku -> sudoku_N, through its data module)."""
    name = str(cfg.env.data or cfg.env.name)
    size = cfg.env.get("map_size")
    if size is None:
        return name
    builder = data_builder(cfg)
    sized = getattr(importlib.import_module(builder), "sized_data_name", None) if builder else None
    if sized is None:
        raise ConfigError(f"env.map_size={size}: env '{cfg.env.name}' has no puzzle sizes; leave it unset")
    return sized(name, int(size))


def make_env_factory(cfg: DictConfig) -> Callable[[], Any]:
    """A zero-argument env constructor; bad env options fail once, here, as a ConfigError."""
    from pettingllms.envs import make_env
    from pettingllms.sandbox import configure_sandbox, sandbox_backend, sandbox_refusal

    # say in the run's first lines how env code will run (or that it will be refused)
    configure_sandbox(bool(cfg.sandbox.allow_weak))
    sandbox_refusal(sandbox_backend())
    name = str(cfg.env.name)
    options = OmegaConf.to_container(cfg.env.options, resolve=True) or {}
    max_turns = int(cfg.env.max_turns)

    def factory():
        return make_env(name, max_turns=max_turns, **options)

    try:
        factory()
    except KeyError as e:
        raise ConfigError(f"env.name: {e.args[0]}") from None
    except (TypeError, ValueError) as e:  # an unknown option, or a value the env refuses
        raise ConfigError(f"env.options for '{name}': {e}") from None
    return factory


def data_builder(cfg: DictConfig) -> str | None:
    """The data module of the env's package (pettingllms.envs.math.data for math, math_single
    and the math_easy data): it builds a missing dataset folder on first use."""
    from pettingllms.envs import ENV_REGISTRY

    cls = ENV_REGISTRY.get(str(cfg.env.name))
    if cls is None or not cls.__module__.startswith("pettingllms.envs."):
        return None
    return cls.__module__.rsplit(".", 1)[0] + ".data"


def load_problems(cfg: DictConfig, split: str, limit: int | None = None) -> list[dict[str, Any]]:
    from pettingllms.envs import ENV_REGISTRY
    from pettingllms.envs.dataset import dataset_dir, load_split

    compose = getattr(ENV_REGISTRY.get(str(cfg.env.name)), "compose_problems", None)
    if compose is not None:  # an env whose problems come from several data sets (autoevol_mixed)
        builder = data_builder(cfg)
        return compose(dict(cfg.env.options), split, limit,
                       lambda name, sp: load_split(name, sp, cfg.env.data_root, builder=builder))
    try:
        return load_split(data_name(cfg), split, cfg.env.data_root, limit=limit, builder=data_builder(cfg))
    except ModuleNotFoundError as e:
        raise ConfigError(f"no dataset '{data_name(cfg)}' in {dataset_dir(data_name(cfg), cfg.env.data_root)} "
                          f"and no module {e.name} to build it; set env.data") from None


def policy_bases(policy_set: Any) -> dict[str, str]:
    """policy name -> base model path, for the engine."""
    out = {}
    for name, worker in policy_set.workers.items():
        spec = getattr(worker, "spec", None)
        out[name] = str(getattr(spec, "base", None) or worker.base)
    return out


def policy_lora_ranks(policy_set: Any) -> dict[str, int]:
    """policy name -> LoRA rank for the LoRA policies (engines that serve adapters need them)."""
    out = {}
    for name, worker in policy_set.workers.items():
        spec = getattr(worker, "spec", None)
        if spec is not None and spec.is_lora:
            out[name] = int(spec.lora.rank)
    return out
