"""`autoevol` (MetaAgent-X): a scripted designer + scripted executor episode, rewards and groups
checked against numbers computed by hand.

Problem p0: "What is 2 + 3?", gold 5. M = 3 designs, N = 2 executions, format_valid 0.1,
format_missing -0.1. The designer writes design A, design B and a reply with no design.
The scripted executor (run_designs) runs each job's nodes through the engine and answers:
  A (2 nodes): x0 -> \\boxed{5} (right), x1 -> \\boxed{4} (wrong)
  B (1 node):  x0 -> fails after its node call (budget), x1 -> \\boxed{5}
Designer rewards (mean outcome + 0.1 x ran fraction, or -0.1 with no design):
  A: 0.5 + 0.1 * 1   = 0.60      B: 0.5 + 0.1 * 0.5 = 0.55      none: 0 - 0.1 = -0.10
Executor samples (one per node call, reward = its own execution's outcome):
  A/x0: 1, 1   A/x1: 0, 0   B/x0: 0   B/x1: 1
"""
from __future__ import annotations

import math
import pytest

from autoevol_fakes import DESIGN_A, DESIGN_B, NO_DESIGN, scripted_run_designs
from fakes import ScriptedEngine, make_cfg
from pettingllms.algorithms.advantages import compute_advantages
from pettingllms.trainer.assemble import rollout_settings
from pettingllms.envs import make_env
from pettingllms.rollout.autoevol import AutoEvolRollout

PROBLEM = {"id": "p0", "question": "What is 2 + 3?", "answer": "5"}
POLICY = {"designer": "des", "executor": "exe"}


def _script(request):
    if request.request_id.endswith("/design"):
        return [DESIGN_A, DESIGN_B, NO_DESIGN]
    return [f"node reply for {request.request_id}"]


@pytest.fixture(autouse=True)
def designer_prompt(monkeypatch):
    # The designer prompt is the MAS package's; a fixed one keeps this test about rewards.
    import pettingllms.mas.prompts as prompts
    monkeypatch.setattr(prompts, "designer_messages",
                        lambda q, feedback=None: [{"role": "user", "content": f"design for: {q}"}])


def _run(group="question", k=None, problems=(PROBLEM,)):
    options = {"designs": 3, "executions": 2, "executor_group": group,
               "format_valid": 0.1, "format_missing": -0.1}
    cfg = make_cfg(env={"name": "autoevol", "options": options}, rollout={"strategy": "autoevol"})
    engine, log = ScriptedEngine(_script), []
    rollout = AutoEvolRollout(engine, lambda: make_env("autoevol", **options), POLICY, rollout_settings(cfg),
                              run_designs=scripted_run_designs(log))
    batch = rollout.run(list(problems), seed=3, k=k)
    return batch, engine, log


def test_hand_computed_rewards_and_groups():
    batch, engine, log = _run()
    des = [s for s in batch.samples if s.agent == "designer"]
    exe = [s for s in batch.samples if s.agent == "executor"]
    assert [s.text for s in des] == [DESIGN_A, DESIGN_B, NO_DESIGN]
    assert [round(s.reward, 10) for s in des] == [0.6, 0.55, -0.1]
    assert [(s.team_reward, round(s.local_reward, 10)) for s in des] == [(0.5, 0.1), (0.5, 0.05), (0.0, -0.1)]
    assert {s.group_key for s in des} == {("p0", "designer")}
    assert [(s.info["job_id"], s.reward) for s in exe] == [
        ("p0/d0/x0", 1.0), ("p0/d0/x0", 1.0), ("p0/d0/x1", 0.0), ("p0/d0/x1", 0.0),
        ("p0/d1/x0", 0.0), ("p0/d1/x1", 1.0)]
    assert {s.group_key for s in exe} == {("p0", "executor")}
    assert all(s.policy == "exe" for s in exe) and all(s.policy == "des" for s in des)
    # the executor samples carry the engine's own tokens for that node call
    assert exe[0].text == "node reply for p0/d0/x0/n0" and exe[0].response_ids[-1] == 0

    compute_advantages(batch.samples, make_cfg().algorithm)
    # designer: mean 0.35, deviations .25 .2 -.45, unbiased std sqrt(.305 / 2)
    std = math.sqrt(0.305 / 2)
    assert [s.advantage for s in des] == pytest.approx([0.25 / std, 0.2 / std, -0.45 / std], rel=1e-5)
    # executor by question: six rewards 1 1 0 0 0 1, mean .5, unbiased std sqrt(1.5 / 5)
    a = 0.5 / math.sqrt(0.3)
    assert [s.advantage for s in exe] == pytest.approx([a, a, -a, -a, -a, a], rel=1e-5)

    # One episode per design; team reward = its mean outcome.
    assert [(e.episode_id, e.trajectory.team_reward) for e in batch.episodes] == [
        ("p0/d0", 0.5), ("p0/d1", 0.5), ("p0/d2", 0.0)]


def test_requests_jobs_and_policies():
    batch, engine, log = _run()
    (designer_call, *node_calls) = engine.calls
    (req,) = designer_call
    assert req.policy == "des" and req.params.n == 3 and req.params.max_new_tokens == 768
    assert req.messages == [{"role": "user", "content": "design for: What is 2 + 3?"}]
    (call,) = log
    # the reply without a design is never executed; the others run N = 2 times each
    assert [j.job_id for j in call["jobs"]] == ["p0/d0/x0", "p0/d0/x1", "p0/d1/x0", "p0/d1/x1"]
    assert call["jobs"][0].design_source == "# design A\nsolver = agent('solver')"
    assert call["jobs"][0].question == "What is 2 + 3?"
    assert call["policy"] == "exe" and call["sampling"].temperature == 0.7
    assert all(r.policy == "exe" for c in node_calls for r in c)


def test_executor_grouped_by_design():
    batch, _, _ = _run(group="design")
    exe = [s for s in batch.samples if s.agent == "executor"]
    assert [s.group_key for s in exe] == [("p0", "d0", "executor")] * 4 + [("p0", "d1", "executor")] * 2
    compute_advantages(batch.samples, make_cfg().algorithm)
    a, b = 0.5 / math.sqrt(1 / 3), 0.5 / math.sqrt(0.5)
    assert [s.advantage for s in exe] == pytest.approx([a, a, -a, -a, -b, b], rel=1e-5)


def test_two_problems_share_one_designer_call_and_eval_k():
    p1 = {"id": "p1", "question": "What is 1 + 1?", "answer": "2"}
    batch, engine, log = _run(k=2, problems=(PROBLEM, p1))
    assert len(engine.calls[0]) == 2 and all(r.params.n == 2 for r in engine.calls[0])
    # evaluation: k designs x 1 execution each
    assert [j.job_id for j in log[0]["jobs"]] == ["p0/d0/x0", "p0/d1/x0", "p1/d0/x0", "p1/d1/x0"]
    assert [e.episode_id for e in batch.episodes] == ["p0/d0", "p0/d1", "p1/d0", "p1/d1"]
    assert [e.trajectory.success for e in batch.episodes] == [True, False, False, False]


def test_seeded_rollout_is_deterministic():
    a, _, la = _run()
    b, _, lb = _run()
    assert [s.to_dict() for s in a.samples] == [s.to_dict() for s in b.samples]
    assert la[0]["seed"] == lb[0]["seed"]


def test_env_grading_and_options():
    env = make_env("autoevol")
    env.reset(PROBLEM, 0)
    assert env.grade("so \\boxed{5}") == 1.0 and env.grade("4") == 0.0
    assert env.grade(None) == 0.0 and env.grade("") == 0.0 and env.grade(12) == 0.0
    assert env.step("designer", NO_DESIGN).local_reward == pytest.approx(-0.1)
    assert env.step("executor", "5").local_reward == 1.0 and env.done and env.team_reward() == 1.0
    assert env.step("judge", "x").local_reward == 0.0  # garbage: zero, never an exception
    with pytest.raises(TypeError, match="unknown options"):
        make_env("autoevol", desings=2)
    with pytest.raises(ValueError, match="executor_group"):
        make_env("autoevol", executor_group="turn")


def test_code_task_graded_by_hidden_tests():
    env = make_env("autoevol", task="code")
    env.reset({"id": "c0", "question": "Add two numbers.", "kind": "function", "entry_point": "add",
               "starter": "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n", "reference": "def add(a, b):\n    return a + b\n",
               "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]}, 0)
    assert "def add(a, b)" in env.question
    assert env.grade("```python\ndef add(a, b):\n    return a + b\n```") == 1.0
    assert env.grade("```python\ndef add(a, b):\n    return 3\n```") == 0.5
    assert env.grade("no code") == 0.0


def test_bad_env_option_is_a_config_error():
    from pettingllms.errors import ConfigError
    from pettingllms.trainer.components import make_env_factory
    with pytest.raises(ConfigError, match="designz.*did you mean 'designs'"):
        make_cfg(env={"name": "autoevol", "options": {"designz": 2}}, rollout={"strategy": "autoevol"})
    cfg = make_cfg(env={"name": "autoevol", "options": {"designs": 0}}, rollout={"strategy": "autoevol"})
    with pytest.raises(ConfigError, match="designs and executions must be >= 1"):
        make_env_factory(cfg)
