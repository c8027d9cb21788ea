"""Advantage estimators over Samples (one scalar reward per sample).

Groups are the samples sharing `sample.group_key` (set by the rollout from
`algorithm.group_by`, see grouping.py). Estimators (`algorithm.advantage`):

grpo        (r - group mean) / (group std + eps). The std is the unbiased one
            (divides by n - 1), as torch.std in verl's GRPO outcome advantage.
agent_norm  Dr. MAS agent-wise normalisation (arXiv 2602.08847): a single global
            scale mixes agents whose reward distributions differ, which inflates
            gradient norms; each agent is scaled by its own reward statistics:
            (r - mean of the agent's samples in the group) / (std_agent + eps),
            std_agent the unbiased std of all of that agent's real rewards in the
            batch. Both statistics are the agent's own, so a group_by without
            `agent` cannot divide one agent's spread by another's zero std: an
            agent whose rewards are all equal gets 0, and |advantage| <=
            sqrt(2 (n_agent - 1)) always. With the default group_by (problem,
            turn, agent) the group is already one agent's.
mean_only   Dr. GRPO: r - group mean (no std scaling).

Episode-level returns (the flat strategy, see rollout/strategies/flat.py) mark
their samples with info["episode_return"]: a group's statistics then take ONE
value per episode, however many turns each episode played, as GRPO over whole
trajectories does; every sample of an episode gets that episode's advantage.

A group with a single real sample (or episode) gets advantage 0 (nothing to
compare with; verl instead keeps the raw reward there). Padding samples
(info["padding"] true) never enter any statistic and get advantage 0.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from pettingllms.config.schema import AlgorithmConfig
from pettingllms.records import Sample

ESTIMATORS = ("grpo", "agent_norm", "mean_only")
PADDING_KEY = "padding"
EPISODE_RETURN_KEY = "episode_return"  # sample.reward is its episode's return


def is_padding(sample: Sample) -> bool:
    return bool(sample.info.get(PADDING_KEY, False))


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def unbiased_std(xs: Sequence[float]) -> float:
    """Sample std with Bessel's correction (n - 1); 0 for fewer than two values."""
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def compute_advantages(samples: Sequence[Sample], algo: AlgorithmConfig) -> None:
    """Set `.advantage` on every sample (`algo`: the estimator and its eps)."""
    name = str(algo.advantage)
    eps = float(algo.eps)
    if name not in ESTIMATORS:
        raise ValueError(f"unknown algorithm.advantage '{name}'; choose from {list(ESTIMATORS)}")
    for s in samples:
        if not math.isfinite(s.reward):
            raise ValueError(f"non-finite reward {s.reward} on sample {s.problem_id}/{s.turn}/{s.agent}")
        s.advantage = 0.0

    real = [s for s in samples if not is_padding(s)]
    groups: dict[tuple, list[Sample]] = {}
    for s in real:
        groups.setdefault(tuple(s.group_key), []).append(s)
    agent_std: dict[str, float] = {}
    if name == "agent_norm":
        by_agent: dict[str, list[Sample]] = {}
        for s in real:
            by_agent.setdefault(s.agent, []).append(s)
        agent_std = {a: unbiased_std(stat_values(ms)) for a, ms in by_agent.items()}

    for members in groups.values():
        if name == "agent_norm":  # the baseline is the agent's own, inside the group
            parts: dict[str, list[Sample]] = {}
            for s in members:
                parts.setdefault(s.agent, []).append(s)
            for agent, part in parts.items():
                _normalise(part, lambda values, a=agent: agent_std[a] + eps)
        elif name == "grpo":
            _normalise(members, lambda values: unbiased_std(values) + eps)
        else:
            _normalise(members, lambda values: 1.0)


def stat_values(members: Sequence[Sample]) -> list[float]:
    """The rewards statistics are taken over: one per sample, or one per episode when the
    samples carry an episode-level return."""
    if members and all(s.info.get(EPISODE_RETURN_KEY) for s in members):
        per_episode: dict[str, float] = {}
        for s in members:
            per_episode.setdefault(s.episode_id, s.reward)
        return list(per_episode.values())
    return [s.reward for s in members]


def _normalise(members: Sequence[Sample], scale_of) -> None:
    values = stat_values(members)
    if len(values) < 2:
        return  # a lone sample (or episode) has no baseline: advantage stays 0
    if max(values) == min(values):
        return  # no signal; skip so float noise in the mean is not blown up by 1/eps
    mean = _mean(values)
    scale = scale_of(values)
    for s in members:
        s.advantage = (s.reward - mean) / scale
