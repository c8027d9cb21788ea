"""Flat strategy: K independent episodes per problem, one request (n=1) per episode."""
from __future__ import annotations

import pytest

from fakes import ScriptedEngine, ToySumEnv, make_cfg, parse_toy_request, toy_script
from pettingllms.rollout.runner import Rollout
from pettingllms.trainer.assemble import rollout_settings

POLICY = {"proposer": "p_policy", "finisher": "f_policy"}


def _run(script, problems, k=3, max_turns=2, seed=0):
    engine = ScriptedEngine(toy_script(script))
    cfg = make_cfg(rollout={"k": k, "strategy": "flat", "env_workers": 2},
                   reward={"team_weight": 1.0, "local_weight": 0.5})
    return Rollout(engine, lambda: ToySumEnv(max_turns=max_turns), POLICY, rollout_settings(cfg)).run(problems, seed=seed), engine


def test_k_independent_episodes():
    # The three episodes of p0 draw "2", "3", "abc" at turn 0; every finisher says "3".
    script = {("proposer", 0): ["2", "3", "abc"], ("finisher", 0): ["3"],
              ("proposer", 1): ["2"], ("finisher", 1): ["3"]}
    batch, engine = _run(script, [{"id": "p0", "target": 5}])
    assert len(batch.episodes) == 3
    assert len({e.episode_id for e in batch.episodes}) == 3
    assert {e.problem_id for e in batch.episodes} == {"p0"}
    first_moves = [e.trajectory.steps[0].action for e in batch.episodes]
    assert first_moves == ["2", "3", "abc"]
    # Episode 0 is solved on turn 0 (2 + 3); the others play turn 1 and solve it then.
    assert [e.trajectory.num_turns for e in batch.episodes] == [1, 2, 2]
    assert [e.trajectory.success for e in batch.episodes] == [True, True, True]
    # Each episode keeps only its own actions, every one committed.
    for e in batch.episodes:
        assert all(s.episode_id == e.episode_id and s.committed for s in e.samples)
        assert [(s.agent, s.turn) for s in e.samples] == [(st.agent, st.turn) for st in e.trajectory.steps]
    # One call per (turn, agent) with every live episode; n = 1 each; policies by agent.
    assert [[parse_toy_request(r) for r in call] for call in engine.calls] == [
        [("proposer", 0)] * 3, [("finisher", 0)] * 3, [("proposer", 1)] * 2, [("finisher", 1)] * 2]
    assert all(r.params.n == 1 for call in engine.calls for r in call)
    assert {r.policy for r in engine.calls[0]} == {"p_policy"} and {r.policy for r in engine.calls[1]} == {"f_policy"}
    # Episodes at the same state must not share a sampling seed.
    assert len({r.params.seed for r in engine.calls[0]}) == 3


def test_flat_groups_span_episodes_of_one_problem():
    script = {("proposer", 0): ["2", "3", "abc"], ("finisher", 0): ["3"]}
    batch, _ = _run(script, [{"id": "p0", "target": 5}, {"id": "p1", "target": 6}], max_turns=1)
    groups = {}
    for s in batch.samples:
        groups.setdefault(s.group_key, []).append(s)
    assert list(groups) == [("p0", 0, "proposer"), ("p0", 0, "finisher"), ("p1", 0, "proposer"),
                            ("p1", 0, "finisher")]
    prop = groups[("p0", 0, "proposer")]
    assert [s.candidate for s in prop] == [0, 1, 2]
    assert len({s.episode_id for s in prop}) == 3
    # Every sample carries its episode's return: team 1 * final team reward + 0.5 * mean
    # local reward of the episode's steps. finisher "3" after 2 / 3 / abc on target 5:
    # team 1, 0, 0; locals (1, 1), (1, 1), (0, 1) -> 1.5, 0.5, 0.25.
    assert [s.reward for s in groups[("p0", 0, "finisher")]] == [1.5, 0.5, 0.25]
    assert [s.reward for s in prop] == [1.5, 0.5, 0.25]
    # The step's own reward is kept: finisher team 1, 0, 0 + 0.5 * local 1.
    assert [s.info["step_reward"] for s in groups[("p0", 0, "finisher")]] == [1.5, 0.5, 0.5]
    # target 6: only 3 + 3 works.
    assert [s.reward for s in groups[("p1", 0, "finisher")]] == [0.5, 1.5, 0.25]


def test_flat_grpo_baseline_by_hand():
    """algorithm=grpo (group_by [problem]): one group per problem holding all K episodes'
    actions of every turn, and statistics over one return per episode."""
    from pettingllms.algorithms.advantages import compute_advantages

    # Episode 0 solves at turn 0 (2 + 3); episodes 1 and 2 play two turns:
    # e1: "3"+"3" (no), then "2"+"3" (yes); e2: "abc"+"3" (no), "2"+"2" (no).
    script = {("proposer", 0): ["2", "3", "abc"], ("finisher", 0): ["3"],
              ("proposer", 1): ["2"], ("finisher", 1): ["3", "2"]}
    engine = ScriptedEngine(toy_script(script))
    cfg = make_cfg(rollout={"k": 3, "strategy": "flat"}, algorithm={"group_by": ["problem"], "eps": 0.0},
                   reward={"team_weight": 1.0, "local_weight": 0.5})
    batch = Rollout(engine, lambda: ToySumEnv(max_turns=2), POLICY, rollout_settings(cfg)).run(
        [{"id": "p0", "target": 5}], seed=0)
    assert {s.group_key for s in batch.samples} == {("p0",)}
    assert [len(e.samples) for e in batch.episodes] == [2, 4, 4]
    finals = [e.trajectory.team_reward for e in batch.episodes]
    # Returns: e0 1 + 0.5 * 1 = 1.5; e1 team 1, locals all 1 -> 1.5; e2 team 0,
    # locals (0, 1, 1, 1) -> 0.5 * 0.75 = 0.375 (e1 and e2 ask the finisher the same
    # prompt at turn 1, so the scripted engine gives them "3" and "2" in that order).
    returns = [1.0 * t + 0.5 * sum(st.local_reward for st in e.trajectory.steps) / len(e.trajectory.steps)
               for t, e in zip(finals, batch.episodes)]
    for e, ret in zip(batch.episodes, returns):
        assert all(s.reward == ret and s.info["episode_return"] for s in e.samples)
    assert finals == [1.0, 1.0, 0.0] and returns == [1.5, 1.5, 0.375]
    compute_advantages(batch.samples, cfg.algorithm)
    # GRPO over the three returns (not the ten samples): mean 1.125, unbiased std
    # sqrt((2 * 0.375^2 + 0.75^2) / 2) = 0.6495191 -> +0.5773503, +0.5773503, -1.1547005.
    expected = [0.5773503, 0.5773503, -1.1547005]
    for e, adv in zip(batch.episodes, expected):
        assert [s.advantage for s in e.samples] == pytest.approx([adv] * len(e.samples), abs=1e-6)
