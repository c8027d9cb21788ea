"""Group keys for the paper's grouping ablation (none / agent / turn / both / + problem)."""
from __future__ import annotations

import pytest

from fakes import ScriptedEngine, ToySumEnv, make_cfg, toy_script
from pettingllms.algorithms.grouping import group_key, group_samples, normalize_group_by
from pettingllms.trainer.assemble import rollout_settings
from pettingllms.records import Sample
from pettingllms.rollout.runner import Rollout


def _s(problem, turn, agent, key=()):
    return Sample(agent=agent, turn=turn, problem_id=problem, episode_id=f"{problem}/e", prompt_ids=[],
                  response_ids=[], logprobs=[], group_key=key)


@pytest.mark.parametrize("group_by, expected", [
    ([], ()),
    (["agent"], ("tool",)),
    (["turn"], (1,)),
    (["turn", "agent"], (1, "tool")),
    (["agent", "turn"], (1, "tool")),  # canonical order whatever the config order
    (["problem"], ("gsm-3",)),
    (["problem", "agent"], ("gsm-3", "tool")),
    (["problem", "turn", "agent"], ("gsm-3", 1, "tool")),
    (None, ("gsm-3", 1, "tool")),  # default: AT-GRPO's key
])
def test_group_key_for_each_choice(group_by, expected):
    assert group_key("gsm-3", 1, "tool", group_by) == expected


def test_bad_group_by_is_rejected():
    with pytest.raises(ValueError, match="unknown field"):
        normalize_group_by(["episode"])
    with pytest.raises(ValueError, match="repeats"):
        normalize_group_by(["agent", "agent"])
    with pytest.raises(ValueError, match="list"):
        normalize_group_by("agent")


def test_group_samples_recomputed_keys_and_order():
    samples = [_s("a", 0, "tool"), _s("b", 0, "tool"), _s("a", 0, "reasoner"), _s("a", 1, "tool"),
               _s("b", 1, "reasoner")]
    groups = {tuple(by): group_samples(samples, by) for by in ([], ["agent"], ["turn"], ["turn", "agent"],
                                                               ["problem", "turn", "agent"])}
    members = {by: [(g.key, [samples.index(s) for s in g.samples]) for g in gs] for by, gs in groups.items()}
    assert members[()] == [((), [0, 1, 2, 3, 4])]
    assert members[("agent",)] == [(("tool",), [0, 1, 3]), (("reasoner",), [2, 4])]
    assert members[("turn",)] == [((0,), [0, 1, 2]), ((1,), [3, 4])]
    assert members[("turn", "agent")] == [((0, "tool"), [0, 1]), ((0, "reasoner"), [2]), ((1, "tool"), [3]),
                                          ((1, "reasoner"), [4])]
    assert [g.key for g in groups[("problem", "turn", "agent")]] == [
        ("a", 0, "tool"), ("b", 0, "tool"), ("a", 0, "reasoner"), ("a", 1, "tool"), ("b", 1, "reasoner")]


def test_group_samples_uses_stored_keys_by_default():
    samples = [_s("a", 0, "tool", key=("x",)), _s("b", 1, "tool", key=("y",)), _s("c", 2, "r", key=("x",))]
    assert [(g.key, len(g.samples)) for g in group_samples(samples)] == [(("x",), 2), (("y",), 1)]


@pytest.mark.parametrize("group_by, n_groups", [([], 1), (["agent"], 2), (["problem"], 2),
                                                 (["problem", "turn", "agent"], 4)])
def test_rollout_stores_keys_from_config(group_by, n_groups):
    engine = ScriptedEngine(toy_script({("proposer", 0): ["2", "3"], ("finisher", 0): ["3", "1"]}))
    cfg = make_cfg(rollout={"k": 2}, algorithm={"group_by": group_by})
    batch = Rollout(engine, lambda: ToySumEnv(max_turns=1), {"proposer": "s", "finisher": "s"}, rollout_settings(cfg)).run(
        [{"id": "p0", "target": 5}, {"id": "p1", "target": 4}], seed=0)
    groups = group_samples(batch.samples)
    assert len(groups) == n_groups
    assert sum(len(g.samples) for g in groups) == 8
    for s in batch.samples:
        assert s.group_key == group_key(s.problem_id, s.turn, s.agent, group_by)
