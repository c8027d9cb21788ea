"""Data for `graph`: the math and code envs' own data sets, chosen by `env.data` (as autoevol's)."""
from pettingllms.envs.autoevol.data import DATA_NAMES, DATA_VERSIONS, build

__all__ = ["DATA_NAMES", "DATA_VERSIONS", "build"]
