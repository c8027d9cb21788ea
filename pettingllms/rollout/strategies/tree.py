"""AT-GRPO's tree sampling: K candidates from the committed state, keep the best.

One track per problem. At each (turn, agent) the agent draws K candidates from
the committed state; each is scored on its own copy of the env; the best branch
(ties broken by a seeded RNG) becomes the committed state the next agent sees.
"""
from __future__ import annotations

import random

from pettingllms.envs.base import MultiAgentEnv
from pettingllms.rollout.strategies.base import Strategy

_TIE_TOL = 1e-12  # rewards this close count as a tie (guards float noise only)


class TreeStrategy(Strategy):
    name = "tree"

    def start(self, env: MultiAgentEnv, k: int) -> list[MultiAgentEnv]:
        return [env]

    def samples_per_request(self, k: int) -> int:
        return k

    def choose(self, rewards: list[float], rng: random.Random) -> int:
        best = max(rewards)
        tied = [i for i, r in enumerate(rewards) if r >= best - _TIE_TOL]
        return tied[0] if len(tied) == 1 else rng.choice(tied)
