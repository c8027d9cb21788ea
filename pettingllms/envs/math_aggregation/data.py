"""math_aggregation reads the math env's data (datasets/math, math_easy, ...), built by the same builder."""
from pettingllms.envs.math import data as _math
from pettingllms.envs.math.data import DATA_NAMES, PRESETS, build  # noqa: F401

DATA_VERSIONS = getattr(_math, "DATA_VERSIONS", {})
