"""What a rollout strategy decides; the episode loop itself lives in rollout/runner.py.

The runner plays *tracks*: committed lines of play, one env each. Per (turn,
agent) it sends one request per live track (n = samples_per_request), scores
every completion on its own deep copy of the track's env, and asks the strategy
which branch the track continues from.
"""
from __future__ import annotations

import random
from abc import ABC, abstractmethod

from pettingllms.envs.base import MultiAgentEnv
from pettingllms.records import Episode


def mixed_reward(team: float, local: float, team_weight: float, local_weight: float) -> float:
    """A sample's reward from its parts: reward.team_weight x the team's reward + reward.local_weight x
    the acting agent's own (local) reward (config/schema.py RewardConfig)."""
    return team_weight * float(team) + local_weight * float(local)


class Strategy(ABC):
    name: str = ""

    @abstractmethod
    def start(self, env: MultiAgentEnv, k: int) -> list[MultiAgentEnv]:
        """The tracks to play for one problem, given its freshly reset env."""

    @abstractmethod
    def samples_per_request(self, k: int) -> int:
        """Completions drawn per track for each (turn, agent)."""

    @abstractmethod
    def choose(self, rewards: list[float], rng: random.Random) -> int:
        """Index of the branch the track continues from."""

    def finish(self, episode: Episode, team_weight: float, local_weight: float) -> None:
        """Called once per episode after it ended (its trajectory is final); may rewrite
        the rewards of its samples. Default: keep each sample's own step reward."""
