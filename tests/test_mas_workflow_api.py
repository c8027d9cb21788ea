"""Designs in the released MetaAgent-X format (`from workflow import ...`) run end to end through
the sandbox with a scripted engine: every node's calls, batches and the final answer by hand."""
from __future__ import annotations

import re

import pytest

from fakes import ScriptedEngine
from pettingllms.mas.budgets import MasBudgets
from pettingllms.mas.checks import check_design
from pettingllms.mas.executor import DesignJob, run_designs
from pettingllms.rollout.engines.base import SamplingParams

SAMPLING = SamplingParams(temperature=0.7, max_new_tokens=32)
FAST = MasBudgets(round_wall_s=10.0, wall_s=60.0)
HEAD = "from workflow import AgentNode, Workflow, ToolRegistry\n"
TAIL = ('print("=" * 48)\nprint("FINAL ANSWER:")\nresult = workflow.run(question)\n'
        'print(result.content)\nprint("=" * 48)\n')


def agent(name, max_turns=1, tools="ToolRegistry()"):
    return (f'{name.lower()} = AgentNode(name="{name}", system_prompt="ROLE={name}. Solve.", '
            f'tool_registry={tools}, max_turns={max_turns})\n')


def chain(*nodes):
    return "workflow = Workflow(name='w')\n" + "".join(f"workflow.add_node({n})\n" for n in nodes)


DESIGNS = {
    "single": HEAD + agent("Solver") + chain("solver") + TAIL,
    "pipeline": HEAD + agent("Solver") + agent("Verifier") + chain("solver", "verifier") + TAIL,
    "vote_unanimous": HEAD + "from workflow.nodes import EnsembleNode\n" + agent("A") + agent("B")
    + agent("Judge") + "e = EnsembleNode(name='E', agents=[a, b], strategy='majority_vote', "
    "consensus_agent=judge)\n" + chain("e") + TAIL,
    "vote_split": HEAD + "from workflow.nodes import EnsembleNode\n" + agent("A") + agent("C")
    + agent("Judge") + "e = EnsembleNode(name='E', agents=[a, c], strategy='majority_vote', "
    "consensus_agent=judge)\n" + chain("e") + TAIL,
    "weighted": HEAD + "from workflow.nodes import EnsembleNode\n" + agent("A") + agent("C") + agent("D")
    + "e = EnsembleNode(name='E', agents=[a, c, d], strategy='weighted_vote', weights=[1.0, 3.0, 1.0])\n"
    + chain("e") + TAIL,
    "consensus": HEAD + "from workflow.nodes import EnsembleNode\n" + agent("A") + agent("C")
    + agent("Judge") + "e = EnsembleNode(name='E', agents=[a, c], strategy='consensus', "
    "consensus_agent=judge)\n" + chain("e") + TAIL,
    "debate": HEAD + "from workflow.nodes import DebateNode\n" + agent("A") + agent("C") + agent("Judge")
    + "d = DebateNode(name='D', debaters=[a, c], judge=judge, num_rounds=2)\n" + chain("d") + TAIL,
    "reflection": HEAD + "from workflow.nodes import ReflectionNode\n" + agent("Solver") + agent("Critic")
    + "r = ReflectionNode(name='R', agent=solver, critic_agent=critic, num_iterations=2)\n"
    + chain("r") + TAIL,
    "router": HEAD + "from workflow.nodes import RouterNode\n" + agent("A") + agent("C")
    + "def pick(ctx):\n    return 'geo' if 'triangle' in ctx.get_latest_message().content else 'alg'\n"
    + "r = RouterNode(name='R', routes={'geo': c, 'alg': a}, routing_func=pick, default_route='alg')\n"
    + chain("r") + TAIL,
    "tool_call": HEAD + "def add(x, y):\n    return x + y\n"
    + "reg = ToolRegistry()\nreg.register('add', add, 'adds', {'type': 'object'})\n"
    + agent("Tooler", max_turns=2, tools="reg") + chain("tooler") + TAIL,
    "python_block": HEAD + agent("Coder", max_turns=1) + chain("coder") + TAIL,
    "loop": "from workflow import AgentNode, LoopWorkflow, ToolRegistry\n" + agent("Solver")
    + "workflow = LoopWorkflow(name='L', max_iterations=5)\nworkflow.add_node(solver)\n"
    + "workflow.set_loop_condition(lambda ctx: 'boxed{9}' not in ctx.get_latest_message().content)\n" + TAIL,
    "conditional": "from workflow import AgentNode, ConditionalWorkflow, ToolRegistry\n" + agent("Solver")
    + agent("Verifier") + "workflow = ConditionalWorkflow(name='C')\nworkflow.add_node(solver)\n"
    + "workflow.add_node(verifier, condition=lambda ctx: 'boxed{1}' in ctx.get_latest_message().content)\n"
    + TAIL,
    "graph": "from workflow import AgentNode, AgentGraph, ToolRegistry\n" + agent("Solver") + agent("A")
    + agent("Verifier") + "workflow = AgentGraph(name='g')\nworkflow.add_node('s', solver)\n"
    + "workflow.add_node('a', a).add_node('v', verifier)\n"
    + "workflow.add_conditional_edges('s', lambda ctx: 'v' if 'boxed{1}' in "
    "ctx.get_latest_message().content else 'a')\n"
    + "workflow.set_entry_point('s').set_finish_point('v').set_finish_point('a')\n" + TAIL,
    "no_print": HEAD + agent("Solver") + chain("solver") + "out = workflow.run(question)\n",
}


def _role(req) -> str:
    return re.match(r"ROLE=(\w+)", req.messages[0]["content"]).group(1)


def _script(req):
    role, user = _role(req), req.messages[-1]["content"]
    if role == "Tooler":
        if len(req.messages) == 2:
            return ['<tool_call>{"name": "add", "arguments": {"x": 40, "y": 2}}</tool_call>']
        return [f"The tool said {req.messages[-1]['content']}. FINAL ANSWER: \\boxed{{42}}"]
    if role == "Coder":
        if len(req.messages) == 2:
            return ["```python\nprint(6 * 7)\n```"]
        return [f"ran: {req.messages[-1]['content'].strip()} so FINAL ANSWER: \\boxed{{42}}"]
    if role == "Critic":
        return ["Wrong sign. Verdict: INCORRECT" if "boxed{1}" in user else "Final verdict: CORRECT"]
    if role == "Solver":
        if "previous response" in user:
            return ["<delivery>fixed the sign</delivery> FINAL ANSWER: \\boxed{2}"]
        # loop: the n-th solver call sees n-1 earlier responses
        return [f"<delivery>step {user.count('[Solver]')}</delivery> \\boxed{{{1 + 4 * user.count('[Solver]')}}}"]
    if role == "Judge":
        seen = len(re.findall(r"--- Solution \d|Response \d from", user))
        return [f"judged {seen} \\boxed{{7}}"]
    return [{"A": "\\boxed{1}", "B": "so \\boxed{1.0}", "C": "\\boxed{3}", "D": "\\boxed{1}",
             "Verifier": "checked \\boxed{1}"}[role]]


def _run(names, question="What is x?"):
    engine = ScriptedEngine(_script)
    jobs = [DesignJob(DESIGNS[n], question, n, design_format="workflow") for n in names]
    return engine, {r.job_id: r for r in run_designs(jobs, engine, "shared", SAMPLING, FAST, seed=3)}


def test_every_design_passes_the_workflow_checks_and_fails_ours():
    for name, src in DESIGNS.items():
        assert check_design(src, design_format="workflow") == [], name
        assert any("import from 'workflow'" in p for p in check_design(src)), name
    dsl_design = "from pettingllms.mas.dsl import *\nworkflow = Agent('a')\n"
    assert "import from 'pettingllms.mas.dsl'" in check_design(dsl_design, design_format="workflow")[0]
    assert check_design("import os\n", design_format="nope") == [
        "unknown design format 'nope' (one of pettingllms, workflow)"]


def test_released_format_designs_by_hand():
    engine, res = _run(list(DESIGNS))
    calls = {n: [c.role for c in r.node_calls] for n, r in res.items()}
    answers = {n: r.answer for n, r in res.items()}
    for name, r in res.items():
        assert r.ok, (name, r.error, r.log[-800:])
    assert calls["single"] == ["Solver"] and answers["single"] == "<delivery>step 0</delivery> \\boxed{1}"
    # the verifier sees the question and the solver's <delivery> only
    assert calls["pipeline"] == ["Solver", "Verifier"]
    verifier_user = res["pipeline"].node_calls[1].messages[1]["content"]
    assert "**Original Question:**\nWhat is x?" in verifier_user and "[Solver]:\nstep 0" in verifier_user
    assert "\\boxed{1}" not in verifier_user.split("[Solver]:")[1]
    # a vote: 1 and 1.0 agree, so no judge; split votes go to the judge (who sees both)
    assert calls["vote_unanimous"] == ["A", "B"] and answers["vote_unanimous"] == "\\boxed{1}"
    assert calls["vote_split"] == ["A", "C", "Judge"] and answers["vote_split"] == "judged 2 \\boxed{7}"
    assert answers["weighted"] == "\\boxed{3}"  # C weighs 3 against A + D's 2
    assert calls["consensus"] == ["A", "C", "Judge"]
    # debate: 2 rounds x 2 debaters (each round in one batch), then the judge
    assert calls["debate"] == ["A", "C", "A", "C", "Judge"]
    round2 = res["debate"].node_calls[2].messages[1]["content"]
    assert "=== Round 1 ===" in round2 and "Agent 2 (C):\n\\boxed{3}" in round2
    # reflection: critic says INCORRECT to 1, the solver fixes it, the critic says CORRECT
    assert calls["reflection"] == ["Solver", "Critic", "Solver", "Critic"]
    assert answers["reflection"].endswith("\\boxed{2}")
    assert calls["router"] == ["A"] and answers["router"] == "\\boxed{1}"
    # a <tool_call> runs the design's own tool; the agent sees its result and answers
    assert calls["tool_call"] == ["Tooler", "Tooler"]
    assert res["tool_call"].node_calls[1].messages[-1]["content"] == "Tool 'add' returned: 42"
    assert "<tool_call>" in res["tool_call"].node_calls[0].messages[0]["content"] or \
        '"name": "add"' in res["tool_call"].node_calls[0].messages[0]["content"]
    # a ```python block runs in its own sandbox process (a tool call of the execution)
    assert calls["python_block"] == ["Coder", "Coder"]
    assert [t["kind"] for t in res["python_block"].trace] == ["llm", "tool", "llm"]
    assert answers["python_block"] == "ran: 42 so FINAL ANSWER: \\boxed{42}"
    # loop: 1, 5, 9 then the condition stops it
    assert calls["loop"] == ["Solver"] * 3 and answers["loop"].endswith("\\boxed{9}")
    assert calls["conditional"] == ["Solver", "Verifier"]
    assert calls["graph"] == ["Solver", "Verifier"] and answers["graph"] == "checked \\boxed{1}"
    assert answers["no_print"].endswith("\\boxed{1}")  # no FINAL ANSWER printed: the last run
    # the delivery instruction is added to every agent
    assert "<delivery>...</delivery>" in res["single"].node_calls[0].messages[0]["content"]
    # ensemble members are answered in one batch
    [batch] = [b for b in engine.calls if any(q.request_id.startswith("vote_unanimous:") for q in b)]
    assert sorted(_role(q) for q in batch if q.request_id.startswith("vote_unanimous:")) == ["A", "B"]


@pytest.mark.parametrize("src,error", [
    (HEAD + "w = AgentNode(name='x', system_prompt='s', ai_client=object())\n",
     "unsupported: workflow: AgentNode(ai_client=...) is not supported here"),
    (HEAD + "from workflow.nodes import EnsembleNode\ne = EnsembleNode(name='e', agents=[], "
     "strategy='borda')\n", "unsupported: workflow: EnsembleNode strategy 'borda'"),
    (HEAD + "from utils.BaseOpenAI import AIClient\n", "design_check: line 2: import from 'utils.BaseOpenAI'"),
    (HEAD + "workflow = Workflow(\n", "design_check: syntax: line 2"),
    (HEAD + "x = 1\n", "design: TypeError: the design printed no FINAL ANSWER and ran no workflow"),
])
def test_broken_released_designs_fail_with_one_line(src, error):
    engine = ScriptedEngine(_script)
    [r] = run_designs([DesignJob(src, "q", "bad", design_format="workflow")], engine, "shared",
                      SAMPLING, FAST, seed=0)
    assert not r.ok and r.error.startswith(error), r.error
    assert "\n" not in r.error.split(":", 1)[1] or r.error.startswith("design")


@pytest.mark.slow
def test_released_format_designs_on_the_embedded_model_raise_no_python_error():
    """The same designs answered by the embedded model (short replies): each ends with an answer
    or a budget/format failure, never an error of the API itself."""
    from pettingllms.rollout.engines.hf import HFEngine

    engine = HFEngine({"shared": "embedded:smollm2-135m-instruct"}, dtype="float32")
    jobs = [DesignJob(src, "What is 2 + 3?", name, design_format="workflow") for name, src in DESIGNS.items()]
    results = run_designs(jobs, engine, "shared", SamplingParams(temperature=0.7, max_new_tokens=12),
                          MasBudgets(round_wall_s=20.0, wall_s=300.0), seed=0)
    for r in results:
        assert r.ok or not r.error.startswith(("design:", "protocol:", "sandbox:", "unsupported:")), \
            (r.job_id, r.error)
    assert sum(r.ok for r in results) >= len(results) - 2, [(r.job_id, r.error) for r in results]
