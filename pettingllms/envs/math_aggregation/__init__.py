"""Math aggregation env (the reference's math_aggregation): two samplers, then an aggregator."""
from pettingllms.envs.math_aggregation.env import MathAggregationEnv

__all__ = ["MathAggregationEnv"]
