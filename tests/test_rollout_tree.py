"""AT-GRPO tree rollout, checked against an episode computed by hand.

ToySumEnv (tests/fakes.py): the proposer says x, the finisher sees x and says y;
team reward 1 iff x + y == target; local reward 1 for a parsable integer.
With team_weight 1 and local_weight 0.5 a sample's reward is
    1.0 * team + 0.5 * local.
"""
from __future__ import annotations

import pytest

from fakes import ScriptedEngine, ToySumEnv, make_cfg, parse_toy_request, toy_script
from pettingllms.algorithms.advantages import compute_advantages
from pettingllms.trainer.assemble import rollout_settings
from pettingllms.rollout.runner import Rollout

POLICY = {"proposer": "shared", "finisher": "shared"}
SCRIPT = {("proposer", 0): ["2", "3", "abc"], ("finisher", 0): ["3", "2", "x"]}


def _cfg(k=3, **over):
    return make_cfg(rollout={"k": k, "strategy": "tree", "env_workers": 2, **over},
                    reward={"team_weight": 1.0, "local_weight": 0.5})


def _run(seed, script=SCRIPT, problems=({"id": "p0", "target": 5},), max_turns=2, k=3, **over):
    engine = ScriptedEngine(script if callable(script) else toy_script(script))
    rollout = Rollout(engine, lambda: ToySumEnv(max_turns=max_turns), POLICY, rollout_settings(_cfg(k=k, **over)))
    return rollout.run(list(problems), seed=seed), engine


def _by_key(batch):
    groups = {}
    for s in batch.samples:
        groups.setdefault(s.group_key, []).append(s)
    return groups


def test_hand_computed_episode():
    committed_first = set()
    for seed in range(12):
        batch, engine = _run(seed)
        groups = _by_key(batch)
        # Group membership and keys: K=3 candidates per (problem, turn, agent), nothing else.
        assert list(groups) == [("p0", 0, "proposer"), ("p0", 0, "finisher")]
        prop, fin = groups[("p0", 0, "proposer")], groups[("p0", 0, "finisher")]
        assert [s.text for s in prop] == ["2", "3", "abc"]
        assert [s.candidate for s in prop] == [0, 1, 2]
        # proposer: no finisher answer yet, so team = 0; local = 1, 1, 0.
        assert [s.reward for s in prop] == [0.5, 0.5, 0.0]
        assert [(s.team_reward, s.local_reward) for s in prop] == [(0.0, 1.0), (0.0, 1.0), (0.0, 0.0)]
        # The first two tie; the seed picks one of them, never the worse third.
        chosen = [s.committed for s in prop].index(True)
        assert sum(s.committed for s in prop) == 1 and chosen in (0, 1)
        x = int(prop[chosen].text)
        committed_first.add(x)

        # The finisher's prompt shows exactly the committed proposal.
        (fin_request,) = engine.calls[1]
        assert fin_request.messages == [
            {"role": "system", "content": "You are the finisher. Reply with one integer."},
            {"role": "user", "content": f"TURN 0. Target 5. Your partner proposed {x}."},
        ]
        # Finisher candidates "3", "2", "x" are scored on the committed x:
        # x=2: 2+3=5 -> 1 + 0.5 = 1.5; 2+2 -> 0.5; "x" -> 0.   x=3: mirrored.
        expected = [1.5, 0.5, 0.0] if x == 2 else [0.5, 1.5, 0.0]
        assert [s.reward for s in fin] == expected
        assert [s.committed for s in fin] == [r == 1.5 for r in expected]

        # Solved on turn 0: both agents' samples of the terminal turn are kept.
        (episode,) = batch.episodes
        traj = episode.trajectory
        assert traj.success and traj.team_reward == 1.0 and traj.num_turns == 1
        assert [(st.agent, st.action) for st in traj.steps] == [("proposer", str(x)), ("finisher", str(5 - x))]
        assert traj.steps[1].observation == f"x={x} y={5 - x}"

        # GRPO advantages, by hand (unbiased std, eps = 1e-6):
        # proposer [0.5, 0.5, 0]: mean 1/3, var (1/36 + 1/36 + 4/36) / 2 = 1/12, std 0.2886751
        #   -> (1/6) / std = 0.5773503, (-1/3) / std = -1.1547005
        # finisher {1.5, 0.5, 0}: mean 2/3, var (25/36 + 1/36 + 16/36) / 2 = 7/12, std 0.7637626
        #   -> 1.5: 1.0910895, 0.5: -0.2182179, 0: -0.8728716
        compute_advantages(batch.samples, make_cfg().algorithm)
        # abs 1e-5: the constants above are rounded to 7 digits and eps = 1e-6 shifts std a little.
        assert [s.advantage for s in prop] == pytest.approx([0.5773503, 0.5773503, -1.1547005], abs=1e-5)
        by_reward = {1.5: 1.0910895, 0.5: -0.2182179, 0.0: -0.8728716}
        assert [s.advantage for s in fin] == pytest.approx([by_reward[r] for r in expected], abs=1e-5)
    assert committed_first == {2, 3}  # the tie really depends on the seed


def test_same_seed_same_batch():
    a, _ = _run(seed=7)
    b, _ = _run(seed=7)
    assert [e.to_dict() for e in a.episodes] == [e.to_dict() for e in b.episodes]


def test_one_engine_call_per_turn_and_agent_across_problems():
    problems = [{"id": "p0", "target": 5}, {"id": "p1", "target": 100}]  # p1 is never solved
    script = {**SCRIPT, ("proposer", 1): ["7", "8", "9"], ("finisher", 1): ["1", "1", "1"]}
    batch, engine = _run(seed=0, script=script, problems=problems, max_turns=2)
    # turn 0: both problems in one call per agent; turn 1: only p1 is live.
    assert [[parse_toy_request(r) for r in call] for call in engine.calls] == [
        [("proposer", 0)] * 2, [("finisher", 0)] * 2, [("proposer", 1)], [("finisher", 1)]]
    assert all(r.params.n == 3 for call in engine.calls for r in call)
    assert [r.request_id.split("/")[0] for r in engine.calls[2]] == ["p1"]
    # p1's turn-1 proposer sees the committed turn-0 pair of p1.
    p1 = batch.episodes[1]
    x0, y0 = p1.trajectory.steps[0].action, p1.trajectory.steps[1].action
    assert engine.calls[2][0].messages[1]["content"] == f"TURN 1. Target 100. Last round: {x0} + {y0}."
    assert p1.trajectory.num_turns == 2 and not p1.trajectory.success
    assert len(p1.samples) == 12 and len(batch.episodes[0].samples) == 6
    # Request seeds differ per (problem, turn, agent).
    seeds = [r.params.seed for call in engine.calls for r in call]
    assert len(set(seeds)) == len(seeds)


def test_later_agent_candidates_are_not_copies():
    # Any committed proposal: the finisher's three answers give three different sums.
    script = {("proposer", 0): ["1"], ("finisher", 0): ["4", "0", "nope"]}
    batch, _ = _run(seed=3, script=script)
    fin = _by_key(batch)[("p0", 0, "finisher")]
    assert [s.reward for s in fin] == [1.5, 0.5, 0.0]
    compute_advantages(batch.samples, make_cfg().algorithm)
    assert len({round(s.advantage, 6) for s in fin}) == 3


def test_episode_that_ends_mid_turn_keeps_acting_samples():
    # p7's proposer always quits: its episode ends before the finisher acts.
    def script(req):
        agent, _ = parse_toy_request(req)
        if agent == "proposer":
            return ["quit"] if "Target 7" in req.messages[1]["content"] else ["2", "3"]
        return ["3"]
    problems = [{"id": "p7", "target": 7}, {"id": "p5", "target": 5}]
    batch, engine = _run(seed=0, script=script, problems=problems, k=2)
    quit_ep, ok_ep = batch.episodes
    assert [(s.agent, s.text) for s in quit_ep.samples] == [("proposer", "quit")] * 2
    assert [st.agent for st in quit_ep.trajectory.steps] == ["proposer"]
    assert quit_ep.trajectory.num_turns == 1 and not quit_ep.trajectory.success
    # The finisher call holds only the live problem.
    assert [r.request_id.split("/")[0] for r in engine.calls[1]] == ["p5"]
    assert len(ok_ep.samples) == 4


def test_samples_keep_engine_tokens():
    batch, engine = _run(seed=1)
    completions = {(c.request_id, c.index): c for out in engine.outputs for comps in out for c in comps}
    assert len(completions) == len(batch.samples) == 6
    for s in batch.samples:
        c = completions[(f"{s.episode_id}/t{s.turn}/{s.agent}", s.candidate)]
        assert (s.prompt_ids, s.response_ids, s.logprobs, s.text) == (c.prompt_ids, c.response_ids,
                                                                      c.logprobs, c.text)
        assert s.policy == "shared"


def test_deterministic_whatever_the_thread_timing():
    problems = [{"id": f"q{i}", "target": 3 + i} for i in range(3)]
    script = {("proposer", t): ["1", "2", "3", "4"] for t in range(3)}
    script.update({("finisher", t): ["0", "1", "2", "9"] for t in range(3)})

    def once():
        engine = ScriptedEngine(toy_script(script))
        rollout = Rollout(engine, lambda: ToySumEnv(max_turns=3, delay_s=0.003), POLICY,
                          rollout_settings(_cfg(k=4, env_workers=4)))
        return [e.to_dict() for e in rollout.run(problems, seed=11).episodes]
    assert once() == once()


def test_same_problem_twice_gets_separate_groups():
    problems = [{"id": "p0", "target": 5}, {"id": "p0", "target": 5}]
    batch, _ = _run(seed=0, problems=problems)
    keys = list(_by_key(batch))
    assert keys == [("p0", 0, "proposer"), ("p0", 0, "finisher"), ("p0#1", 0, "proposer"),
                    ("p0#1", 0, "finisher")]
    assert all(len(v) == 3 for v in _by_key(batch).values())


def test_bad_engine_and_missing_policy_fail_clearly():
    class Short(ScriptedEngine):
        def generate(self, requests):
            return [comps[:1] for comps in super().generate(requests)]
    rollout = Rollout(Short(toy_script(SCRIPT)), lambda: ToySumEnv(), POLICY, rollout_settings(_cfg()))
    with pytest.raises(RuntimeError, match="1 completions .* n=3"):
        rollout.run([{"id": "p0", "target": 5}], seed=0)
    rollout = Rollout(ScriptedEngine(toy_script(SCRIPT)), lambda: ToySumEnv(), {"proposer": "a"}, rollout_settings(_cfg()))
    with pytest.raises(ValueError, match="finisher"):
        rollout.run([{"id": "p0", "target": 5}], seed=0)
