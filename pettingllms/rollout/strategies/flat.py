"""K independent episodes per problem (GRPO and single-agent baselines).

Each episode starts from a deep copy of the reset env and keeps every action it
takes; episodes of one problem share its problem id, so a (problem, turn, agent)
group holds the K episodes' actions at that turn.
"""
from __future__ import annotations

import copy
import random

from pettingllms.envs.base import MultiAgentEnv
from pettingllms.rollout.strategies.base import Strategy


class FlatStrategy(Strategy):
    name = "flat"

    def start(self, env: MultiAgentEnv, k: int) -> list[MultiAgentEnv]:
        return [copy.deepcopy(env) for _ in range(k)]

    def samples_per_request(self, k: int) -> int:
        return 1

    def choose(self, rewards: list[float], rng: random.Random) -> int:
        return 0  # the episode's only action
