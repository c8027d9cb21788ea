"""The LangGraph example (examples/langgraph_code: coder <-> tester, `ChatOpenAI` clients) runs
unmodified under the graph runner: each LangGraph node's call is a sample of its agent, in the
graph's order, and the coder's answer is graded by the code env's hidden tests in the sandbox.
The engine is the scripted test double (tests/fakes.py), so the graph's path is known: in
execution 0 the tester fails the first code once, in execution 1 it passes it at once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakes import ScriptedEngine
from pettingllms.envs import make_env
from pettingllms.rollout.graph.runner import PROGRAM_STEP, GraphRollout
from pettingllms.rollout.runner import RolloutSettings

pytest.importorskip("langgraph", reason="the graph extra (PETTINGLLMS_EXTRAS=graph) is not installed")
pytest.importorskip("langchain_openai", reason="the graph extra (PETTINGLLMS_EXTRAS=graph) is not installed")

ROOT = Path(__file__).resolve().parents[1]
ADD = {"id": "unit/add", "source": "unit", "kind": "function", "entry_point": "add",
       "question": "def add(a: int, b: int) -> int:\n    \"\"\"Return a + b.\"\"\"\n",
       "starter": "def add(a: int, b: int) -> int:\n    \"\"\"Return a + b.\"\"\"\n",
       "reference": "def add(a: int, b: int) -> int:\n    return a + b\n",
       "tests": json.dumps(["assert add(1, 2) == 3", "assert add(-1, 1) == 0"])}
WRONG, RIGHT = "```python\ndef add(a, b):\n    return a - b\n```", "```python\ndef add(a, b):\n    return a + b\n```"


def script(req):
    first = "/c0" in req.request_id
    if req.policy == "pol_coder":
        return [WRONG if first and "/graph0/" in req.request_id else RIGHT]
    return ["FAIL on add(1, 2)" if first and "/graph0/" in req.request_id else "PASS"]


def test_langgraph_program_trains_per_node(monkeypatch):
    monkeypatch.chdir(ROOT)
    engine = ScriptedEngine(script)
    opts = dict(program="examples.langgraph_code.program", agents=["coder", "tester"], task="code",
                max_calls=8, wall_s=60.0)
    rollout = GraphRollout(engine, lambda: make_env("graph", **opts),
                           {"coder": "pol_coder", "tester": "pol_tester"},
                           RolloutSettings(strategy="graph", k=2, sampling={"max_new_tokens": 64}))
    batch = rollout.run([ADD], seed=0)
    first, second = batch.episodes
    assert first.trajectory.steps[-1].agent == PROGRAM_STEP and first.trajectory.steps[-1].info["ok"], \
        first.trajectory.steps[-1].info
    assert [(s.agent, s.turn) for s in first.samples] == [("coder", 0), ("tester", 0), ("coder", 1), ("tester", 1)]
    assert [(s.agent, s.turn) for s in second.samples] == [("coder", 0), ("tester", 0)]
    assert first.trajectory.team_reward == second.trajectory.team_reward == 1.0  # the fixed code passes
    assert all(s.policy == f"pol_{s.agent}" for e in batch.episodes for s in e.samples)
    # LangChain's messages reached the engine as chat messages, the task as the grader states it
    asked = [r for call in engine.calls for r in call if r.policy == "pol_coder"][0]
    assert asked.messages[0]["role"] == "system" and "def add(a: int, b: int)" in asked.messages[1]["content"]
