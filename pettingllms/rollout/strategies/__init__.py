"""Rollout strategies: `tree` (AT-GRPO) and `flat` (K independent episodes)."""
from pettingllms.rollout.strategies.base import Strategy
from pettingllms.rollout.strategies.flat import FlatStrategy
from pettingllms.rollout.strategies.tree import TreeStrategy

STRATEGIES: dict[str, type[Strategy]] = {"tree": TreeStrategy, "flat": FlatStrategy}


def get_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown rollout.strategy '{name}'; choose from {sorted(STRATEGIES)}")
    return STRATEGIES[name]()


__all__ = ["STRATEGIES", "FlatStrategy", "Strategy", "TreeStrategy", "get_strategy"]
