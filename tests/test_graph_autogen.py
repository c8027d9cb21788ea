"""The AG2 (AutoGen family) example (examples/autogen_math: a solver `ag2.Agent` and a verifier
`ag2.Agent`, each on its own `OpenAIConfig` base URL) runs unmodified under the graph runner: each
agent's call is a sample of that agent, in the program's order, the solver's retry continues its
own AG2 conversation, and the answer is graded by math-verify. The engine is the scripted test
double (tests/fakes.py): in execution 0 the verifier rejects the first answer once, in execution 1
it accepts it at once. (The one-step L2 training run of this example is in test_graph_training.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest

from fakes import ScriptedEngine
from pettingllms.envs import make_env
from pettingllms.rollout.graph.runner import PROGRAM_STEP, GraphRollout
from pettingllms.rollout.runner import RolloutSettings

pytest.importorskip("ag2", reason="the graph extra (PETTINGLLMS_EXTRAS=graph) is not installed")

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = {"id": "toy/0", "question": "What is 3 + 5?", "answer": "8", "source": "toy"}
WRONG, RIGHT = "3 + 5 = \\boxed{9}", "3 + 5 = \\boxed{8}"


def script(req):
    retry = "/c0" not in req.request_id
    rejecting = "/graph0/" in req.request_id and not retry
    if req.policy == "pol_solver":
        return [RIGHT if retry or "/graph0/" not in req.request_id else WRONG]
    return ["INCORRECT: 3 + 5 is 8." if rejecting else "CORRECT: the sum is right."]


def test_ag2_program_trains_per_agent(monkeypatch):
    monkeypatch.chdir(ROOT)
    engine = ScriptedEngine(script)
    opts = dict(program="examples.autogen_math.program", agents=["solver", "verifier"], task="math",
                max_calls=8, wall_s=60.0)
    rollout = GraphRollout(engine, lambda: make_env("graph", **opts),
                           {"solver": "pol_solver", "verifier": "pol_verifier"},
                           RolloutSettings(strategy="graph", k=2, sampling={"max_new_tokens": 64}))
    first, second = rollout.run([PROBLEM], seed=0).episodes
    for e in (first, second):
        last = e.trajectory.steps[-1]
        assert last.agent == PROGRAM_STEP and last.info["ok"], last.info
        assert all(s.policy == f"pol_{s.agent}" for s in e.samples)
    assert [(s.agent, s.turn) for s in first.samples] == [("solver", 0), ("verifier", 0), ("solver", 1)]
    assert [(s.agent, s.turn) for s in second.samples] == [("solver", 0), ("verifier", 0)]
    assert first.trajectory.team_reward == second.trajectory.team_reward == 1.0  # both end on \boxed{8}
    asked = [r for call in engine.calls for r in call if "/graph0/" in r.request_id]
    solver0, verifier0, solver1 = asked
    # each agent's own system prompt reached the engine, the verifier saw the solver's answer
    assert solver0.messages[0] == {"role": "system", "content": solver0.messages[0]["content"]}
    assert solver0.messages[0]["content"].startswith("You are the solver.")
    assert verifier0.messages[0]["content"].startswith("You are the verifier.") and WRONG in verifier0.messages[-1]["content"]
    # the retry continues the solver's AG2 conversation: its question and first answer come first
    assert [m["role"] for m in solver1.messages][-3:] == ["user", "assistant", "user"]
    assert solver1.messages[-2]["content"] == WRONG and "INCORRECT" in solver1.messages[-1]["content"]
