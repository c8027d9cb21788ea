"""Built-in environments. Importing this package registers them by name."""
import importlib

from pettingllms.envs.base import ENV_REGISTRY, MultiAgentEnv, StepResult, make_env, register_env

# Each entry is a sub-package whose import registers its env classes.
BUILTIN_ENV_PACKAGES = ("math", "code", "sudoku", "sokoban", "plan_path")

for _pkg in BUILTIN_ENV_PACKAGES:
    try:
        importlib.import_module(f"pettingllms.envs.{_pkg}")
    except ModuleNotFoundError as e:  # TEMPORARY while packages land; made strict before merge
        if e.name != f"pettingllms.envs.{_pkg}":
            raise

__all__ = ["ENV_REGISTRY", "MultiAgentEnv", "StepResult", "make_env", "register_env"]
