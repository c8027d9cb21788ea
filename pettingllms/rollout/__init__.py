"""Rollout: engines (engines/), the episode loop (runner.py) and its strategies (strategies/).

`make_runner` picks the runner for a config: the turn-based episode loop (`Rollout`, strategies
tree / flat) or MetaAgent-X's designs x executions (`AutoEvolRollout`, rollout.strategy=autoevol).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping


def make_runner(engine: Any, env_factory: Callable[[], Any], agent_policy: Mapping[str, str], cfg: Any) -> Any:
    from pettingllms.config import ConfigError

    env, strategy = str(cfg.env.name), str(cfg.rollout.strategy)
    if (env == "autoevol") != (strategy == "autoevol"):
        raise ConfigError("env=autoevol and rollout=autoevol go together (MetaAgent-X's designs x "
                          f"executions); got env.name={env}, rollout.strategy={strategy}")
    if strategy == "autoevol":
        from pettingllms.rollout.strategies.autoevol import AutoEvolRollout
        return AutoEvolRollout(engine, env_factory, dict(agent_policy), cfg)
    from pettingllms.rollout.runner import Rollout
    return Rollout(engine, env_factory, dict(agent_policy), cfg)
