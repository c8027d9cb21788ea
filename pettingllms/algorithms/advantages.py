"""Advantage estimators over Samples (one scalar reward per sample).

Groups are the samples sharing `sample.group_key` (set by the rollout from
`algorithm.group_by`, see grouping.py). Estimators (`algorithm.advantage`):

grpo        (r - group mean) / (group std + eps). The std is the unbiased one
            (divides by n - 1), as torch.std in verl's GRPO outcome advantage.
agent_norm  Dr. MAS agent-wise normalisation (arXiv 2602.08847): a single global
            scale mixes agents whose reward distributions differ, which inflates
            gradient norms; each agent is scaled by its own reward statistics.
            Implemented as (r - group mean) / (std_agent + eps), where std_agent is
            the unbiased std of all of that agent's real rewards in the batch.
            With the default group_by (problem, turn, agent) the group mean is
            already the agent's own baseline for that state.
mean_only   Dr. GRPO: r - group mean (no std scaling).

A group with a single real sample gets advantage 0 (nothing to compare with;
verl instead keeps the raw reward there). Padding samples (info["padding"]
true) never enter any statistic and get advantage 0.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from pettingllms.algorithms.config_access import cfg_get
from pettingllms.records import Sample

ESTIMATORS = ("grpo", "agent_norm", "mean_only")
PADDING_KEY = "padding"


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


def compute_advantages(samples: Sequence[Sample], cfg: Any) -> None:
    """Set `.advantage` on every sample; `cfg` is the `algorithm` config."""
    name = str(cfg_get(cfg, "advantage", "grpo") or "grpo")
    eps = float(cfg_get(cfg, "eps", 1e-6) or 0.0)
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
        by_agent: dict[str, list[float]] = {}
        for s in real:
            by_agent.setdefault(s.agent, []).append(s.reward)
        agent_std = {a: unbiased_std(rs) for a, rs in by_agent.items()}

    for members in groups.values():
        if len(members) < 2:
            continue  # a lone sample has no baseline: advantage stays 0
        rewards = [s.reward for s in members]
        if max(rewards) == min(rewards):
            continue  # no signal; skip so float noise in the mean is not blown up by 1/eps
        mean = _mean(rewards)
        if name == "grpo":
            scale = unbiased_std(rewards) + eps
            for s in members:
                s.advantage = (s.reward - mean) / scale
        elif name == "mean_only":
            for s in members:
                s.advantage = s.reward - mean
        else:  # agent_norm
            for s in members:
                s.advantage = (s.reward - mean) / (agent_std[s.agent] + eps)
