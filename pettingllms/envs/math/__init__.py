"""Math env (`math`: tool + reasoner; `math_single`: one reasoner). Importing registers them."""
from pettingllms.envs.math.env import MathEnv, MathSingleEnv

__all__ = ["MathEnv", "MathSingleEnv"]
