"""run_query with scripted designer and executor engines: attempts, artifacts, the report."""
from __future__ import annotations

import json
import re

from fakes import ScriptedEngine
from pettingllms.mas.run import run_query

GOOD = '''```python
from pettingllms.mas.dsl import *
solver = Agent("solver", "Solve.")
critic = Agent("critic", "Check.")
workflow = Reflection(solver, critic, rounds=2)
```'''
BROKEN = "```python\nimport os\ndef workflow(q):\n    return os.getcwd()\n```"
CFG = {"max_attempts": 3, "budgets": {"round_wall_s": 10.0}}


def _executor(req):
    role = re.match(r"You are the (\w+)", req.messages[0]["content"]).group(1)
    return ["CORRECT <script>alert(1)</script>" if role == "critic" else "\\boxed{5}"]


def test_run_query_retries_and_writes_artifacts(tmp_path):
    replies = iter(["I cannot write code.", BROKEN, GOOD])
    designer = ScriptedEngine(lambda req: [next(replies)])
    events = []
    q = run_query("What is 2+3?", designer, "designer", ScriptedEngine(_executor), "executor",
                  tmp_path / "run", CFG, seed=1, progress=events.append)
    assert q.ok and q.answer == "\\boxed{5}"
    assert [a.ok for a in q.attempts] == [False, False, True]
    assert q.attempts[0].error.startswith("design_check: the reply holds no")
    assert q.attempts[1].error.startswith("design_check: line 1: import of 'os'")
    # the retry prompt carries the previous failure
    assert "import of 'os'" in designer.calls[2][0].messages[-1]["content"]
    out = tmp_path / "run"
    assert {p.name for p in out.iterdir()} == {"mas_design.py", "mas.py", "execution.log",
                                              "trace.jsonl", "attempts.json", "result.json",
                                              "index.html", "mas_visualization.mmd"}
    assert (out / "mas_design.py").read_text().startswith("from pettingllms.mas.dsl import *")
    assert "_driver.main(_dsl, DESIGN)" in (out / "mas.py").read_text()
    trace = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]
    assert [t["role"] for t in trace] == ["solver", "critic"]  # the critic said CORRECT: stop
    assert trace[0]["messages"][1]["content"] == "What is 2+3?" and trace[0]["completion_tokens"] > 0
    result = json.loads((out / "result.json").read_text())
    assert result["ok"] and result["attempts"] == 3 and result["node_calls"] == 2
    page = (out / "index.html").read_text()
    for tab in ("Design", "Execution", "Agent Trace", "Workflow", "Attempts"):
        assert f">{tab}</label>" in page
    assert "<svg" in page and page.count('class="wf-node"') == 4  # question, 2 rounds, answer
    # the same graph as Mermaid: 4 nodes, 3 edges
    mmd = (out / "mas_visualization.mmd").read_text().splitlines()
    assert mmd[0] == "flowchart LR"
    assert [line.strip() for line in mmd if "[" in line] == [
        'n0_0["question"]:::io', 'n1_0["solver (solver#1)"]:::llm', 'n2_0["critic (critic#2)"]:::llm',
        'n3_0["answer"]:::io']
    assert [line.strip() for line in mmd if "-->" in line] == ["n0_0 --> n1_0", "n1_0 --> n2_0",
                                                               "n2_0 --> n3_0"]
    assert "import os" in page  # the failed attempt's reply is shown
    assert "&lt;script&gt;alert(1)" in page and "<script>alert(1)" not in page  # escaped
    assert [e["stage"] for e in events][:2] == ["designing", "designing"] and events[-1] == \
        {"stage": "done", "ok": True}


def test_run_query_all_attempts_fail(tmp_path):
    q = run_query("q", ScriptedEngine(lambda req: [BROKEN]), "d", ScriptedEngine(_executor), "e",
                  tmp_path, {"max_attempts": 2}, seed=0)
    assert not q.ok and len(q.attempts) == 2 and q.error.startswith("design_check")
    assert "import os" in (tmp_path / "mas_design.py").read_text()
    assert (tmp_path / "trace.jsonl").read_text() == ""
    assert "failed" in (tmp_path / "index.html").read_text()


def test_fallback_template_is_a_labelled_attempt(tmp_path):
    q = run_query("q", ScriptedEngine(lambda req: ["no code here"]), "d", ScriptedEngine(_executor),
                  "e", tmp_path, {"max_attempts": 1, "fallback_template": "reflection"}, seed=0)
    assert q.ok and [a.ok for a in q.attempts] == [False, True]
    assert "fallback template 'reflection'" in q.attempts[1].designer_reply
    assert (tmp_path / "mas_design.py").read_text().startswith("# Pattern: reflection")


RELEASED = """Problem Type: MATH
<code>
```python
from workflow import AgentNode, Workflow, ToolRegistry
from workflow.nodes import EnsembleNode
a = AgentNode(name="ForwardSolver", system_prompt="Solve forward.", tool_registry=ToolRegistry(), max_turns=1)
b = AgentNode(name="BackwardSolver", system_prompt="Solve backward.", tool_registry=ToolRegistry(), max_turns=1)
ensemble = EnsembleNode(name="E", agents=[a, b], strategy="majority_vote")
workflow = Workflow(name="math_ensemble_vote")
workflow.add_node(ensemble)
print("FINAL ANSWER:")
result = workflow.run(question)
print(result.content)
```
</code>"""


def test_run_query_runs_a_released_format_design(tmp_path):
    designer = ScriptedEngine(lambda req: [RELEASED])
    executor = ScriptedEngine(lambda req: ["<delivery>2+3</delivery> FINAL ANSWER: \\boxed{5}"])
    q = run_query("What is 2+3?", designer, "designer", executor, "executor", tmp_path / "run",
                  {**CFG, "design_format": "workflow"}, seed=1)
    assert q.ok and q.answer.endswith("FINAL ANSWER: \\boxed{5}"), q.error
    assert designer.calls[0][0].messages[1]["content"] == "Design Multi Agent System for the Question: What is 2+3?"
    assert [c.role for c in q.execution.node_calls] == ["ForwardSolver", "BackwardSolver"]
    assert "_driver.main(_dsl, DESIGN, _api)" in (tmp_path / "run" / "mas.py").read_text()
    assert "ForwardSolver" in (tmp_path / "run" / "mas_visualization.mmd").read_text()


def test_released_format_fallback_template(tmp_path):
    """mas.design_format=workflow: the fallback templates are released-format designs."""
    from pettingllms.mas.checks import check_design
    from pettingllms.mas.templates import load_templates

    released = load_templates("workflow")
    assert set(released) == {"single", "ensemble_vote"}
    assert all(check_design(src, design_format="workflow") == [] for src in released.values())
    designer = ScriptedEngine(lambda req: ["I would ask three solvers."])
    executor = ScriptedEngine(lambda req: ["\\boxed{5}" if "forward" in req.messages[0]["content"] or
                                           "backwards" in req.messages[0]["content"] else "\\boxed{6}"])
    q = run_query("What is 2+3?", designer, "designer", executor, "executor", tmp_path / "run",
                  {**CFG, "design_format": "workflow", "fallback_template": "ensemble_vote"}, seed=1)
    assert q.ok and q.answer == "\\boxed{6}", (q.answer, q.error)  # the judge's reply
    roles = [c.role for c in q.execution.node_calls]
    assert roles == ["ForwardSolver", "BackwardSolver", "CaseAnalyzer", "Judge"]  # 5, 5, 6: split
    assert q.attempts[-1].source == "fallback template 'ensemble_vote'"
