"""The run config: its schema (`schema.py`: one typed dataclass per block), its value checks
(`checks.py`) and `validate.validate`, the one function that turns a composed config into the
run's typed config.

This package's `__init__` imports only the schema, a leaf: components import their own block's
type from `pettingllms.config.schema` (or from here) without pulling in the checks, which read the
env and engine registries. Entry points call `pettingllms.config.validate.validate`.
"""
from pettingllms.config.schema import *  # noqa: F401,F403 - the blocks, under their schema names
from pettingllms.config.schema import ExperimentConfig
from pettingllms.errors import ConfigError

__all__ = ["ConfigError", "ExperimentConfig"]
