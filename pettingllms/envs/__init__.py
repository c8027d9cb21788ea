"""Built-in environments. Importing this package registers them by name."""
import importlib

from pettingllms.envs.base import ENV_REGISTRY, MultiAgentEnv, StepResult, make_env, register_env

# Each entry is a sub-package whose import registers its env and its `_single` variant.
BUILTIN_ENV_PACKAGES = ("math", "code", "sudoku", "sokoban", "plan_path", "autoevol")

for _pkg in BUILTIN_ENV_PACKAGES:
    importlib.import_module(f"pettingllms.envs.{_pkg}")

__all__ = ["ENV_REGISTRY", "MultiAgentEnv", "StepResult", "make_env", "register_env"]
