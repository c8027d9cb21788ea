"""Advantage estimators against numbers worked out by hand."""
from __future__ import annotations

import math

import pytest

from pettingllms.algorithms.advantages import compute_advantages
from pettingllms.config.schema import AlgorithmConfig
from pettingllms.records import Sample


def _s(reward, key=("p", 0, "a"), agent="a", padding=False):
    return Sample(agent=agent, turn=0, problem_id="p", episode_id="e", prompt_ids=[], response_ids=[],
                  logprobs=[], reward=reward, group_key=key, info={"padding": True} if padding else {})


def _cfg(name, eps=1e-6):
    return AlgorithmConfig(advantage=name, eps=eps)


@pytest.mark.parametrize("name", ["grpo", "agent_norm", "mean_only"])
def test_single_sample_group_gets_zero(name):
    samples = [_s(1.0, key=("lonely",)), _s(0.0, key=("pair",)), _s(1.0, key=("pair",))]
    samples[0].advantage = 123.0
    compute_advantages(samples, _cfg(name))
    assert samples[0].advantage == 0.0
    assert samples[1].advantage < 0 < samples[2].advantage


def test_grpo_by_hand():
    # rewards 1, 0, 0, 1: mean 0.5; unbiased var = 4 * 0.25 / 3 = 1/3; std = 0.5773503
    # -> +-0.5 / 0.5773503 = +-0.8660254
    samples = [_s(r) for r in (1.0, 0.0, 0.0, 1.0)]
    compute_advantages(samples, _cfg("grpo", eps=0.0))
    assert [s.advantage for s in samples] == pytest.approx([0.8660254, -0.8660254, -0.8660254, 0.8660254])
    # A constant group has std 0: advantages 0 / eps = 0, not NaN.
    flat = [_s(0.7) for _ in range(3)]
    compute_advantages(flat, _cfg("grpo"))
    assert [s.advantage for s in flat] == [0.0, 0.0, 0.0]


def test_grpo_eps_is_added_to_std():
    # rewards 2, 0: mean 1, unbiased std sqrt(2) = 1.4142136; eps 0.5 -> 1 / 1.9142136 = 0.5224077
    samples = [_s(2.0), _s(0.0)]
    compute_advantages(samples, _cfg("grpo", eps=0.5))
    assert [s.advantage for s in samples] == pytest.approx([0.5224077, -0.5224077])


def test_mean_only_by_hand():
    samples = [_s(3.0), _s(1.0), _s(2.0)]  # mean 2
    compute_advantages(samples, _cfg("mean_only"))
    assert [s.advantage for s in samples] == [1.0, -1.0, 0.0]


def test_agent_norm_by_hand():
    # Agent "t" over the batch: rewards 1, 0, 1, 1 -> mean 0.75, unbiased var (3*0.0625 + 0.5625)/3 = 0.25, std 0.5
    # Agent "r" over the batch: rewards 4, 0, 2 -> mean 2, var (4 + 4 + 0)/2 = 4, std 2
    samples = [
        _s(1.0, key=("p", 0, "t"), agent="t"), _s(0.0, key=("p", 0, "t"), agent="t"),
        _s(1.0, key=("q", 0, "t"), agent="t"), _s(1.0, key=("q", 0, "t"), agent="t"),
        _s(4.0, key=("p", 0, "r"), agent="r"), _s(0.0, key=("p", 0, "r"), agent="r"),
        _s(2.0, key=("q", 0, "r"), agent="r"),  # a lone sample in its group: 0
    ]
    compute_advantages(samples, _cfg("agent_norm", eps=0.0))
    # group (p,0,t): mean 0.5 -> +-0.5 / 0.5 = +-1; group (q,0,t): constant -> 0
    # group (p,0,r): mean 2 -> +-2 / 2 = +-1
    assert [s.advantage for s in samples] == pytest.approx([1.0, -1.0, 0.0, 0.0, 1.0, -1.0, 0.0])


def test_padding_never_enters_statistics():
    samples = [_s(1.0), _s(0.0), _s(100.0, padding=True)]
    compute_advantages(samples, _cfg("mean_only"))
    assert [s.advantage for s in samples] == [0.5, -0.5, 0.0]
    samples = [_s(1.0), _s(5.0, padding=True)]  # one real sample left: size-1 group
    compute_advantages(samples, _cfg("grpo"))
    assert [s.advantage for s in samples] == [0.0, 0.0]


def test_bad_input_fails_clearly():
    with pytest.raises(ValueError, match="unknown algorithm.advantage"):
        compute_advantages([_s(1.0)], _cfg("ppo"))
    with pytest.raises(ValueError, match="non-finite"):
        compute_advantages([_s(math.nan), _s(1.0)], _cfg("grpo"))


def test_accepts_schema_config():
    from fakes import make_cfg
    samples = [_s(1.0), _s(0.0)]
    compute_advantages(samples, make_cfg(algorithm={"advantage": "mean_only"}).algorithm)
    assert [s.advantage for s in samples] == [0.5, -0.5]


def test_agent_norm_without_agent_in_group_by_is_finite():
    # group_by [problem]: one group mixes two agents. Agent "t" has equal rewards everywhere
    # (std 0); before, its samples were centred on the mixed group mean and divided by eps
    # (an advantage of ~250,000). Now each agent is centred on its own mean in the group.
    key = ("p",)
    samples = [_s(0.5, key=key, agent="t"), _s(0.5, key=key, agent="t"),
               _s(1.0, key=key, agent="r"), _s(0.0, key=key, agent="r")]
    compute_advantages(samples, _cfg("agent_norm"))
    # r: rewards 1, 0 -> mean 0.5, unbiased std 0.7071068 -> +-0.5 / (0.7071068 + 1e-6)
    assert [s.advantage for s in samples] == pytest.approx([0.0, 0.0, 0.7071058, -0.7071058], abs=1e-6)


@pytest.mark.parametrize("group_by", [(), ("problem",), ("turn",), ("problem", "turn")])
def test_agent_norm_bounded_for_any_grouping(group_by):
    # |A| <= sqrt(2 (n - 1)) for n samples of an agent: its deviation from any sub-mean is at
    # most its range, and the unbiased std is at least range / sqrt(2 (n - 1)).
    import random

    from pettingllms.algorithms.grouping import group_key
    rng = random.Random(0)
    samples = []
    for i in range(60):
        agent, problem, turn = rng.choice("ab"), rng.choice("pq"), rng.randint(0, 1)
        # agent a: (almost) constant rewards, the case that divided by eps; b: spread out
        reward = 0.5 + 1e-9 * rng.random() if agent == "a" else rng.choice([0.0, 1.0]) + rng.random()
        samples.append(Sample(agent=agent, turn=turn, problem_id=problem, episode_id="e", prompt_ids=[],
                              response_ids=[], logprobs=[], reward=reward,
                              group_key=group_key(problem, turn, agent, group_by)))
    compute_advantages(samples, _cfg("agent_norm"))
    for agent in "ab":
        n = sum(s.agent == agent for s in samples)
        assert max(abs(s.advantage) for s in samples if s.agent == agent) <= math.sqrt(2 * (n - 1))
