"""AT-GRPO's tree sampling: K candidates from the committed state, keep the best.

One track per problem. At each (turn, agent) the agent draws K candidates from
the committed state; each is scored on its own copy of the env; the best branch
(ties broken by a seeded RNG) becomes the committed state the next agent sees.
"""
from __future__ import annotations

import logging
import random

from pettingllms.envs.base import MultiAgentEnv
from pettingllms.rollout.strategies.base import Strategy

_TIE_TOL = 1e-12  # rewards this close count as a tie (guards float noise only)
TIE_RULE = ("tree commit: among candidates tied at the best reward, the branch is drawn by a "
            "RNG seeded from (rollout seed, problem, turn, agent), never by candidate index")
log = logging.getLogger(__name__)
_tie_logged = False  # say the rule once per process, at the first tie


class TreeStrategy(Strategy):
    name = "tree"

    def start(self, env: MultiAgentEnv, k: int) -> list[MultiAgentEnv]:
        return [env]

    def samples_per_request(self, k: int) -> int:
        return k

    def choose(self, rewards: list[float], rng: random.Random) -> int:
        best = max(rewards)
        tied = [i for i, r in enumerate(rewards) if r >= best - _TIE_TOL]
        if len(tied) == 1:
            return tied[0]
        global _tie_logged
        if not _tie_logged:
            _tie_logged = True
            log.info(TIE_RULE)
        return rng.choice(tied)
