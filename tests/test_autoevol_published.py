"""`mas.reward: published` (the released recipe's terms) and `mas.design_format: workflow` in the
autoevol rollout, by hand (the episode of tests/test_autoevol_rollout.py).

Scripted executions (autoevol_fakes): A/x0 \\boxed{5} (right), A/x1 \\boxed{4}, B/x0 fails,
B/x1 "The answer is \\boxed{5}"; here A/x0's node also wrote a <delivery> block.
Published score = outcome + 0.4 delivery + 0.4 boxed answer:
  A/x0: 1 + 0.4 + 0.4 = 1.8   A/x1: 0 + 0 + 0.4 = 0.4   B/x0: 0   B/x1: 1 + 0.4 = 1.4
  designer A: (1.8 + 0.4) / 2 = 1.1   B: (0 + 1.4) / 2 = 0.7   no design: 0
pettingllms scheme (format_valid 0.1, format_missing -0.1): A 0.6, B 0.55, none -0.1.
"""
from __future__ import annotations

import pytest

from autoevol_fakes import DESIGN_A, DESIGN_B, NO_DESIGN, scripted_run_designs
from fakes import ScriptedEngine, make_cfg
from pettingllms.envs import make_env
from pettingllms.mas.prompts import WORKFLOW_SYSTEM, WORKFLOW_USER
from pettingllms.rollout.autoevol import AutoEvolRollout
from pettingllms.trainer.assemble import rollout_settings

PROBLEM = {"id": "p0", "question": "What is 2 + 3?", "answer": "5"}
OPTIONS = {"designs": 3, "executions": 2, "format_valid": 0.1, "format_missing": -0.1}


def _script(request):
    if request.request_id.endswith("/design"):
        return [DESIGN_A, DESIGN_B, NO_DESIGN]
    return ["node reply"]


def _with_delivery(log):
    run = scripted_run_designs(log)

    def wrapped(jobs, *args):
        results = run(jobs, *args)
        for r in results:
            r.trace = [{"kind": "llm", "output": "<delivery>2+3</delivery>" if r.job_id == "p0/d0/x0"
                        else "plain"}]
        return results
    return wrapped


def _run(reward, design_format="pettingllms"):
    cfg = make_cfg(env={"name": "autoevol", "options": OPTIONS}, rollout={"strategy": "autoevol"},
                   mas={"reward": reward, "design_format": design_format})
    engine, log = ScriptedEngine(_script), []
    rollout = AutoEvolRollout(engine, lambda: make_env("autoevol", **OPTIONS),
                              {"designer": "des", "executor": "exe"}, rollout_settings(cfg),
                              run_designs=_with_delivery(log))
    return rollout.run([PROBLEM], seed=3), engine, log


@pytest.mark.parametrize("scheme", ["published", "pettingllms"])
def test_both_reward_schemes_by_hand_and_both_recorded(scheme):
    batch, _, _ = _run(scheme)
    des = [s for s in batch.samples if s.agent == "designer"]
    exe = [s for s in batch.samples if s.agent == "executor"]
    assert [round(s.info["reward_published"], 10) for s in des] == [1.1, 0.7, 0.0]
    assert [round(s.info["reward_pettingllms"], 10) for s in des] == [0.6, 0.55, -0.1]
    assert [round(s.info["reward_published"], 10) for s in exe] == [1.8, 1.8, 0.4, 0.4, 0.0, 1.4]
    assert [s.info["reward_pettingllms"] for s in exe] == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    key = f"reward_{scheme}"
    assert [s.reward for s in des + exe] == pytest.approx([s.info[key] for s in des + exe])
    assert [s.team_reward for s in des] == [0.5, 0.5, 0.0]  # the outcome part is the same
    assert all(s.info["reward_scheme"] == scheme for s in des)


def test_published_terms_by_hand():
    math_env = make_env("autoevol", task="math")
    assert math_env.published_terms(["<delivery>x</delivery>"], "FINAL ANSWER: \\boxed{12}") == (0.4, 0.4)
    assert math_env.published_terms(["\\boxed{answer}"], "\\boxed{answer}") == (0.0, 0.0)  # placeholder
    assert math_env.published_terms(["<delivery>x"], "12") == (0.0, 0.0)  # no tag closed, no box
    code_env = make_env("autoevol", task="code")
    good = "<delivery>read n</delivery><solution>\nn = int(input())\nprint(n * 2)\n</solution>"
    assert code_env.published_terms([good], None) == (0.4, 0.4)
    assert code_env.published_terms(["<solution>def f(:</solution>"], None) == (0.0, 0.0)
    assert code_env.published_terms(["<solution>x=1</solution>"], None) == (0.0, 0.0)  # < 10 chars


def test_workflow_format_reaches_the_designer_prompt_and_the_jobs():
    _, engine, log = _run("published", design_format="workflow")
    [request] = engine.calls[0]
    assert request.messages == [{"role": "system", "content": WORKFLOW_SYSTEM},
                                {"role": "user", "content": WORKFLOW_USER + PROBLEM["question"]}]
    assert {(j.design_format, j.task) for j in log[0]["jobs"]} == {("workflow", "math")}


def test_config_rejects_unknown_format_and_reward():
    from pettingllms.errors import ConfigError
    for key, value in (("design_format", "dsl"), ("reward", "paper")):
        with pytest.raises(ConfigError, match=f"'mas.{key}'"):
            make_cfg(mas={key: value})
