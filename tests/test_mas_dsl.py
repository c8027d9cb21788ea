"""The workflow DSL in-process (LocalRuntime), the static design checks and the templates."""
from __future__ import annotations

import pytest

from pettingllms.mas import dsl
from pettingllms.mas.checks import check_design
from pettingllms.mas.templates import load_templates


class Recorder:
    """An LLM stand-in: answers from a per-role script and records what each role saw."""

    def __init__(self, script=None):
        self.script = script or {}
        self.seen: list[tuple[str, str]] = []

    def __call__(self, messages, role):
        self.seen.append((role, messages[-1]["content"]))
        answers = self.script.get(role, [f"{role} says \\boxed{{1}}"])
        return answers[min(sum(r == role for r, _ in self.seen) - 1, len(answers) - 1)]


@pytest.fixture
def llm():
    rec = Recorder()
    dsl.set_runtime(dsl.LocalRuntime(rec))
    yield rec
    dsl.set_runtime(None)


def test_agent_messages_and_sequential_context(llm):
    a, b = dsl.Agent("planner", "plan it"), dsl.Agent("solver", "solve it")
    assert a.messages("Q?")[0] == {"role": "system",
                                   "content": "You are the planner in a team of agents. plan it"}
    out = dsl.Sequential(a, b)("Q?")
    assert out == "solver says \\boxed{1}"
    assert llm.seen == [("planner", "Q?"),
                        ("solver", "Q?\n\n### output of the planner\nplanner says \\boxed{1}")]


def test_ensemble_debate_reflection_router_loop_if(llm):
    llm.script = {"critic": ["wrong: check step 2", "CORRECT"], "classifier": ["geometry"],
                  "judge": ["\\boxed{7}"]}
    solver, critic = dsl.Agent("solver"), dsl.Agent("critic")
    assert dsl.Ensemble([solver, solver], dsl.Agent("aggregator"))("Q") == "aggregator says \\boxed{1}"
    assert llm.seen[-1][1].count("### candidate answer") == 2

    llm.seen.clear()
    assert dsl.Debate([solver, critic], rounds=2, judge=dsl.Agent("judge"))("Q") == "\\boxed{7}"
    assert [r for r, _ in llm.seen] == ["solver", "critic", "solver", "critic", "judge"]
    assert "critic 2 said (round 1)" in llm.seen[2][1]  # round 2 sees the others' round-1 answers

    llm.seen.clear()
    llm.script["critic"] = ["wrong: check step 2", "CORRECT"]
    dsl.Reflection(solver, critic, rounds=5)("Q")
    assert [r for r, _ in llm.seen] == ["solver", "critic", "solver", "critic"]  # stops at CORRECT
    assert "### critique\nwrong: check step 2" in llm.seen[2][1]

    llm.seen.clear()
    geo, alg = dsl.Agent("geometer"), dsl.Agent("algebraist")
    assert dsl.Router(dsl.Agent("classifier"), {"algebra": alg, "geometry": geo})("Q").startswith("geometer")

    llm.seen.clear()
    dsl.Loop(dsl.Agent("tries"), until=lambda out: False, max_iters=3)("Q")
    assert [r for r, _ in llm.seen] == ["tries"] * 3
    assert dsl.If(lambda q: q == "a", geo, alg)("b").startswith("algebraist")


def test_parallel_keys_are_code_paths():
    rt = dsl.LocalRuntime(lambda m, r: "x")
    dsl.set_runtime(rt)
    try:
        a = dsl.Agent("a")
        a("q")
        dsl.Parallel(a, dsl.Sequential(a, a))("q")
        a("q")
    finally:
        dsl.set_runtime(None)
    assert [e["key"] for e in rt.log] == ["0", "1.0/0", "1.1/0", "1.1/1", "2"]


def test_budgets_in_the_dsl():
    dsl.set_runtime(dsl.LocalRuntime(lambda m, r: "x", limits={"max_nodes": 3, "max_calls": 2}))
    try:
        with pytest.raises(dsl.BudgetExceeded, match="nodes"):
            [dsl.Agent("a") for _ in range(10)]
        dsl.set_runtime(dsl.LocalRuntime(lambda m, r: "x", limits={"max_calls": 2}))
        a = dsl.Agent("a")
        a("q"), a("q")
        with pytest.raises(dsl.BudgetExceeded, match="LLM calls"):
            a("q")
    finally:
        dsl.set_runtime(None)


def test_answer_helpers():
    assert dsl.extract_answer("so \\boxed{\\frac{1}{2}} and then \\boxed{3}") == "3"
    assert dsl.extract_answer("x = 1,200 then 17") == "17"
    assert dsl.extract_answer("no number") is None
    assert dsl.majority_vote(["\\boxed{2}", "it is 3", "\\boxed{3}", "\\boxed{2}"]) == "\\boxed{2}"
    assert dsl.majority_vote(["\\boxed{3}", "\\boxed{2}"]) == "\\boxed{3}"  # first seen wins ties
    assert dsl.majority_vote(["nothing"]) == ""


@pytest.mark.parametrize("source, problem", [
    ("def workflow(:\n", "syntax"),
    ("import os\ndef workflow(q): return q", "import of 'os'"),
    ("from subprocess import run\ndef workflow(q): return q", "import from 'subprocess'"),
    ("from pettingllms.mas.dsl import *\nx = 1", "defines no `workflow`"),
    ("def workflow(q): return open('/etc/passwd').read()", "'open'"),
    ("def workflow(q): return ().__class__.__bases__", "dunder"),
    ("", "empty"),
    ("x" * 30000, "characters"),
])
def test_check_design_rejects(source, problem):
    assert any(problem in p for p in check_design(source)), check_design(source)


def test_templates_are_valid_designs_and_run(llm):
    templates = load_templates()
    assert {"single", "sequential", "parallel", "ensemble", "debate", "reflection", "router",
            "loop", "conditional", "tool"} <= set(templates)
    for name, source in templates.items():
        assert check_design(source) == [], name
        dsl.set_runtime(dsl.LocalRuntime(
            Recorder({"coder": ["```python\nprint(2)\n```"]}),
            tool=lambda code: dsl.ToolResult(stdout="2\n", ok=True)))
        namespace: dict = {}
        exec(compile(source, f"{name}.py", "exec"), namespace)
        out = namespace["workflow"]("What is 1 + 1?")
        assert isinstance(out, str) and out, name
