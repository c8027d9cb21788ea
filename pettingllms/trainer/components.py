"""Building the pieces a run needs from its config: env factory, data, policies, engine.

Shared by the trainer and `pettingllms.evaluate`. Everything here talks to the
engine and the policies only through their plain-data interfaces, so another
backend (Ray actors, verl workers, a vLLM server) can stand in for them.
"""
from __future__ import annotations

from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from pettingllms.config import ConfigError

BACKENDS_AVAILABLE = ("local",)


def check_backend(cfg: DictConfig) -> None:
    backend = str(cfg.trainer.backend)
    if backend not in BACKENDS_AVAILABLE:
        raise ConfigError(f"trainer.backend={backend} is not available yet; use trainer.backend=local")


def data_name(cfg: DictConfig) -> str:
    return str(cfg.env.data or cfg.env.name)


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
    except TypeError as e:
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
    from pettingllms.envs.dataset import dataset_dir, load_split

    try:
        return load_split(data_name(cfg), split, cfg.env.data_root, limit=limit, builder=data_builder(cfg))
    except ModuleNotFoundError as e:
        raise ConfigError(f"no dataset '{data_name(cfg)}' in {dataset_dir(data_name(cfg), cfg.env.data_root)} "
                          f"and no module {e.name} to build it; set env.data") from None


def build_policy_set(cfg: DictConfig, agents: list[str]) -> Any:
    from pettingllms.policies import build_policies
    return build_policies(cfg, agents)


def policy_bases(policy_set: Any) -> dict[str, str]:
    """policy name -> base model path, for the engine."""
    out = {}
    for name, worker in policy_set.workers.items():
        spec = getattr(worker, "spec", None)
        out[name] = str(getattr(spec, "base", None) or worker.base)
    return out


def build_rollout_engine(cfg: DictConfig, bases: dict[str, str]) -> Any:
    from pettingllms.rollout.engines import build_engine

    try:
        return build_engine(cfg, bases)
    except NotImplementedError as e:  # a backend that is declared but not built yet
        raise ConfigError(str(e)) from None


def make_rollout(engine: Any, env_factory: Callable[[], Any], agent_policy: dict[str, str],
                 cfg: DictConfig) -> Any:
    from pettingllms.rollout.runner import Rollout
    return Rollout(engine, env_factory, agent_policy, cfg)


def push_weights(engine: Any, workers: dict[str, Any], names: list[str] | None = None) -> None:
    """Give the engine each named policy's current weights, then let idle policies offload."""
    for name in names if names is not None else list(workers):
        worker = workers[name]
        engine.load_weights(name, worker.generation_weights())
        release = getattr(worker, "release", None)
        if release is not None:
            release()
