"""Per-agent blocks (`agents.<name>`: policy, sampling, eval_sampling, trainable), env.turn_order
and parallel agents, and the refill rollouts' metrics.

ToySumEnv (tests/fakes.py): the proposer says x, the finisher sees x and says y; team reward 1
iff x + y == target; local reward 1 for a parsable integer.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes import ScriptedEngine, ToySumEnv, make_cfg, parse_toy_request, toy_script  # noqa: E402
from trainer_fixtures import RandomTokenEngine, trainer_cfg  # noqa: E402

from pettingllms.errors import ConfigError  # noqa: E402
from pettingllms.policies.mapping import MappingConfig, resolve_policies  # noqa: E402
from pettingllms.records import Batch, Episode  # noqa: E402
from pettingllms.rollout.runner import Rollout  # noqa: E402
from pettingllms.trainer.assemble import rollout_settings  # noqa: E402
from pettingllms.trainer.evaluation import eval_settings  # noqa: E402
from pettingllms.trainer.metrics import refill_metrics, summed_counters  # noqa: E402

POLICY = {"proposer": "shared", "finisher": "shared"}
SCRIPT = {("proposer", 0): ["2", "abc"], ("finisher", 0): ["3", "x"]}


def _rollout(script=SCRIPT, k=2, **sections):
    cfg = make_cfg(rollout={"k": k, "strategy": "tree", "env_workers": 1},
                   reward={"team_weight": 1.0, "local_weight": 0.5}, **sections)
    engine = ScriptedEngine(toy_script(script))
    return Rollout(engine, lambda: ToySumEnv(max_turns=1), POLICY, rollout_settings(cfg)), engine, cfg


# ------------------------------------------------------------------ per-agent sampling
def test_agent_sampling_overrides_rollout_sampling_in_training_and_eval():
    agents = {"proposer": "shared",
              "finisher": {"sampling": {"temperature": 0.2, "min_p": 0.1, "max_new_tokens": 5},
                           "eval_sampling": {"top_k": 7}}}
    rollout, engine, cfg = _rollout(agents=agents)
    rollout.run([{"id": "p0", "target": 5}], seed=0)
    params = {parse_toy_request(r)[0]: r.params for call in engine.calls for r in call}
    base = cfg.rollout.sampling
    assert (params["proposer"].temperature, params["proposer"].min_p) == (base.temperature, 0.0)
    assert params["proposer"].max_new_tokens == base.max_new_tokens
    finisher = params["finisher"]
    assert (finisher.temperature, finisher.min_p, finisher.max_new_tokens) == (0.2, 0.1, 5)
    ev = eval_settings(rollout.settings, k=1, temperature=0.9)
    assert ev.sampling_for("proposer")["temperature"] == 0.9
    # eval: the agent's training block, then eval.temperature, then its eval block
    assert ev.sampling_for("finisher") == {**ev.sampling_for("proposer"), "temperature": 0.9, "min_p": 0.1,
                                           "max_new_tokens": 5, "top_k": 7}


@pytest.mark.parametrize("agents,match", [
    ({"finisher": {"sampling": {"temprature": 0.2}}}, "unknown sampling keys"),
    ({"finisher": {"sampling": {"min_p": 1.5}}}, "agents.finisher.sampling.min_p"),
    ({"finisher": {"trainble": False}}, "unknown keys"),
    ({"finisher": {"trainable": "no"}}, "trainable"),
    ({"finisher": 3}, "policy name or a block"),
])
def test_bad_agent_blocks_are_one_line(agents, match):
    with pytest.raises(ConfigError, match=match):
        make_cfg(agents=agents)


def test_new_sampling_keys_are_checked():
    with pytest.raises(ConfigError, match="repetition_penalty"):
        make_cfg(rollout={"sampling": {"repetition_penalty": 0.0}})
    with pytest.raises(ConfigError, match="enable_thinking"):
        make_cfg(rollout={"sampling": {"enable_thinking": "maybe"}})


# ------------------------------------------------------------------ turn order, parallel agents
def test_turn_order_changes_who_acts_first():
    rollout, engine, _ = _rollout(env={"turn_order": ["finisher", "proposer"]})
    batch = rollout.run([{"id": "p0", "target": 5}], seed=0)
    assert [parse_toy_request(call[0])[0] for call in engine.calls] == ["finisher", "proposer"]
    assert [s.agent for s in batch.episodes[0].trajectory.steps] == ["finisher", "proposer"]
    # the finisher acted before any proposal; the proposer's "2" then wiped its answer (y=None)
    assert "proposed None" in engine.calls[0][0].messages[1]["content"]


def test_parallel_agents_see_one_state_and_both_actions_are_applied():
    for env in ({"parallel": True}, {"turn_order": [["proposer", "finisher"]]}):
        rollout, engine, _ = _rollout(env=env)
        batch = rollout.run([{"id": "p0", "target": 5}], seed=0)
        assert len(engine.calls) == 1  # both agents in one generate call
        by_agent = {parse_toy_request(r)[0]: r for r in engine.calls[0]}
        assert "proposed None" in by_agent["finisher"].messages[1]["content"]  # the same, untouched state
        traj = batch.episodes[0].trajectory
        # the committed candidates are those that parse (local reward 1): "2" and "3"
        assert [(s.agent, s.action) for s in traj.steps] == [("proposer", "2"), ("finisher", "3")]
        assert traj.team_reward == 1.0 and traj.success  # 2 + 3: both actions reached the env
        finisher = [s for s in batch.samples if s.agent == "finisher"]
        # each candidate was scored on the shared state (no x yet): team 0, local 1 for "3"
        assert [(s.team_reward, s.local_reward) for s in finisher] == [(0.0, 1.0), (0.0, 0.0)]
        assert traj.steps[1].team_reward == 1.0  # the commit re-applied it after the proposer's


def test_turn_order_must_name_every_agent_once():
    for order in (["proposer"], ["proposer", "finisher", "proposer"], ["proposer", "ghost", "finisher"]):
        rollout, _, _ = _rollout(env={"turn_order": order})
        with pytest.raises(ConfigError, match="turn_order"):
            rollout.run([{"id": "p0", "target": 5}], seed=0)
    with pytest.raises(ConfigError, match="turn_order"):
        make_cfg(env={"turn_order": [[]]})


# ------------------------------------------------------------------ trainable: false
def _plan(agents, policies=None, temperature=0.7):
    return resolve_policies(MappingConfig(policies=policies or {}, agents=agents, temperature=temperature),
                            ["proposer", "finisher"])


def test_untrained_agents_in_the_policy_plan():
    plan = _plan({"proposer": {"policy": "a"}, "finisher": {"policy": "b", "trainable": False}},
                 policies={"a": None, "b": None})
    assert plan.untrained == {"finisher"} and plan.specs["b"].frozen and not plan.specs["a"].frozen
    shared = _plan({"finisher": {"trainable": False}})  # one policy, one agent of it untrained
    assert not shared.specs["shared"].frozen and shared.specs["shared"].untrained == ["finisher"]
    # a policy's logprobs have one temperature: its trained agents must agree (untrained ones need not)
    assert _plan({"finisher": {"sampling": {"temperature": 0.3}}}, temperature=0.3).specs["shared"].temperature == 0.3
    with pytest.raises(ConfigError, match="one temperature"):
        _plan({"finisher": {"sampling": {"temperature": 0.3}}})
    untrained = _plan({"finisher": {"trainable": False, "sampling": {"temperature": 0.3}}})
    assert untrained.specs["shared"].temperature == 0.7
    with pytest.raises(ConfigError, match="ghost"):
        _plan({"ghost": {"trainable": False}})


def test_policy_set_drops_untrained_samples_and_freezes_their_policies():
    from pettingllms.policies import PolicySet
    from pettingllms.records import Sample

    ps = PolicySet(workers={"a": None, "b": None}, agent_policy={"proposer": "a", "finisher": "b", "x": "a"},
                   untrained=frozenset({"finisher", "x"}))
    assert ps.trainable_at(1) == {"a"}
    samples = [Sample(agent=a, turn=0, problem_id="p", episode_id="e", prompt_ids=[1], response_ids=[2],
                      logprobs=[-1.0]) for a in ("proposer", "finisher", "x")]
    assert {n: [s.agent for s in part] for n, part in ps.split(samples).items()} == {"a": ["proposer"], "b": []}


@pytest.mark.slow
def test_an_untrained_agent_generates_but_never_trains(tmp_path):
    """One tiny step: the checker's samples are generated and scored, its policy has no optimizer,
    is handed nothing and keeps its weights; the writer's policy trains at its own lr."""
    from pettingllms.trainer.local import LocalTrainer

    cfg = trainer_cfg(tmp_path, "trainer.total_steps=1", "trainer.checkpoint.save_freq=0", "trainer.run_name=u",
                      "rollout.k=3", "+policies.w={}", "+policies.c={}", "+agents.writer=w",
                      "+agents.checker={policy:c,trainable:false}")
    trainer = LocalTrainer(cfg, engine=RandomTokenEngine())
    try:
        assert trainer.workers["c"].optimizer is None and trainer.workers["w"].optimizer is not None
        handed = {}
        for name, worker in trainer.workers.items():
            def update(samples, step, _n=name, _real=worker.update, **kw):
                handed[_n] = list(samples)
                return _real(samples, step, **kw)
            worker.update = update
        before = {n: [p.detach().clone() for p in w.model.parameters()] for n, w in trainer.workers.items()}
        last = trainer.fit()[-1]
        moved = {n: any(not torch.equal(x, y) for x, y in zip(before[n], w.model.parameters()))
                 for n, w in trainer.workers.items()}
        run_dir = trainer.run_dir
    finally:
        trainer.close()
    assert set(handed) == {"w"} and {s.agent for s in handed["w"]} == {"writer"}
    assert moved == {"w": True, "c": False}
    assert last["policies/trained"] == 1.0 and "reward/checker/mean" in last
    assert last["policy/w/lr"] == pytest.approx(float(cfg.trainer.optim.lr), rel=0.5)
    saved = list(run_dir.rglob("c/policy.json"))
    assert saved and not (saved[0].parent / "optimizer.pt").exists()


# ------------------------------------------------------------------ refill metrics
def test_refill_metrics_cover_only_the_refills_and_counters_sum():
    def batch(success, counters):
        eps = []
        for i, ok in enumerate(success):
            e = Episode(problem_id=str(i), episode_id=f"{i}/tree0", env="toy")
            e.trajectory.success = ok
            eps.append(e)
        return Batch(step=1, episodes=eps, counters=counters)

    first, r1, r2 = batch([True, True], {"sandbox/runs": 2.0}), batch([False], {"sandbox/runs": 1.0}), \
        batch([True, False, False], {"sandbox/runs": 3.0, "sandbox/errors": 1.0})
    assert refill_metrics([first]) == {}
    m = refill_metrics([first, r1, r2])
    assert m["refill/episode/count"] == 4.0 and m["refill/episode/success_rate"] == 0.25
    assert summed_counters([first, r1, r2]) == {"sandbox/runs": 6.0, "sandbox/errors": 1.0}
