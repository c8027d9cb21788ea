"""K independent episodes per problem (GRPO and single-agent baselines).

Each episode starts from a deep copy of the reset env and keeps every action it
takes. Like GRPO over whole trajectories (the paper's GRPO baseline), every
sample of an episode is trained on ONE episode-level return

    R = team_weight * final team reward + local_weight * mean local reward of its steps

(the step's own reward is kept in info["step_reward"]), and the samples are marked
(info["episode_return"]) so that a group's statistics count each episode once
(algorithms/advantages.py). Grouped by `problem` (algorithm=grpo), a group is the
K episodes of one problem, whatever turn each action was taken at.
"""
from __future__ import annotations

import copy
import random

from pettingllms.algorithms.advantages import EPISODE_RETURN_KEY
from pettingllms.envs.base import MultiAgentEnv
from pettingllms.records import Episode
from pettingllms.rollout.strategies.base import Strategy, mixed_reward


def episode_return(episode: Episode, team_weight: float, local_weight: float) -> float:
    traj = episode.trajectory
    locals_ = [float(st.local_reward) for st in traj.steps]
    local = sum(locals_) / len(locals_) if locals_ else 0.0
    return mixed_reward(traj.team_reward, local, team_weight, local_weight)


class FlatStrategy(Strategy):
    name = "flat"

    def start(self, env: MultiAgentEnv, k: int) -> list[MultiAgentEnv]:
        return [copy.deepcopy(env) for _ in range(k)]

    def samples_per_request(self, k: int) -> int:
        return 1

    def choose(self, rewards: list[float], rng: random.Random) -> int:
        return 0  # the episode's only action

    def finish(self, episode: Episode, team_weight: float, local_weight: float) -> None:
        ret = episode_return(episode, team_weight, local_weight)
        for s in episode.samples:
            s.info["step_reward"] = s.reward
            s.info[EPISODE_RETURN_KEY] = True
            s.reward = ret
