"""Built-in environments. Importing this package registers them by name."""
import importlib
from typing import Any

from pettingllms.envs.base import ENV_REGISTRY, MultiAgentEnv, StepResult, register_env

# Each entry is a sub-package whose import registers its env and its `_single` variant.
BUILTIN_ENV_PACKAGES = ("math", "code", "sudoku", "sokoban", "plan_path", "autoevol", "eight_queens", "blocksworld",
                        "math_aggregation", "graph", "search")

for _pkg in BUILTIN_ENV_PACKAGES:
    importlib.import_module(f"pettingllms.envs.{_pkg}")


def make_env(name: str, **options: Any) -> MultiAgentEnv:
    """A new env registered as `name` (the built-ins are registered by this package's import)."""
    if name not in ENV_REGISTRY:
        raise KeyError(f"unknown env '{name}'; known: {sorted(ENV_REGISTRY)}")
    return ENV_REGISTRY[name](**options)


__all__ = ["ENV_REGISTRY", "MultiAgentEnv", "StepResult", "make_env", "register_env"]
