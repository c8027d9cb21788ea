"""Designs executed in the sandbox with a scripted engine: calls, batches and answers checked by
hand; hostile designs contained; a seed fixes the result."""
from __future__ import annotations

import re

import pytest

from fakes import ScriptedEngine
from pettingllms.mas.budgets import MasBudgets
from pettingllms.mas.executor import DesignJob, build_program, run_designs
from pettingllms.rollout.engines.base import SamplingParams
from pettingllms.utils.seeding import derive_seed

ENSEMBLE = '''
from pettingllms.mas.dsl import *
solvers = [Agent("solver", "Solve."), Agent("checker", "Solve differently.")]
judge = Agent("judge", "Pick one.")

def workflow(question):
    print("design says hi")
    return Ensemble(solvers, judge)(question)
'''

SAMPLING = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=32)
FAST = MasBudgets(round_wall_s=10.0, wall_s=60.0)  # generous: CI machines may be busy


def _role(req) -> str:
    return re.match(r"You are the (\w+)", req.messages[0]["content"]).group(1)


def _script(req):
    """solver -> 2, checker -> 3, judge -> the last candidate's number + 10 (seen in its prompt)."""
    role = _role(req)
    if role == "judge":
        last = re.findall(r"\\boxed\{(\d+)\}", req.messages[-1]["content"])[-1]
        return [f"\\boxed{{{int(last) + 10}}}"]
    return [{"solver": "\\boxed{2}", "checker": "\\boxed{3}"}.get(role, "?")]


def test_scripted_execution_by_hand():
    engine = ScriptedEngine(_script)
    jobs = [DesignJob(ENSEMBLE, "What is 1+1?", "a"), DesignJob(ENSEMBLE, "What is 1+2?", "b")]
    res = run_designs(jobs, engine, "shared", SAMPLING, FAST, seed=5)
    # round 1: both designs' two ensemble members in ONE batch; round 2: both judges
    assert [len(batch) for batch in engine.calls] == [4, 2]
    assert [_role(r) for r in engine.calls[0]] == ["solver", "checker"] * 2
    for r in res:
        assert r.ok and r.error is None
        assert r.answer == "\\boxed{13}"  # judge saw candidates 2 and 3 and added 10 to the last
        assert [c.role for c in r.node_calls] == ["solver", "checker", "judge"]
        assert [c.key for c in r.node_calls] == ["0.0/0", "0.1/0", "1"]
        assert [c.round for c in r.node_calls] == [1, 1, 2]
        assert r.timing["rounds"] == 3  # two rounds of calls, then the replay that finishes
        assert "design says hi" in r.log and "[round 3]" in r.log
        judge_prompt = r.node_calls[2].messages[-1]["content"]
        assert "### candidate answer 1\n\\boxed{2}" in judge_prompt
        assert [t["output"] for t in r.trace] == ["\\boxed{2}", "\\boxed{3}", "\\boxed{13}"]
        assert r.trace[0]["prompt_tokens"] == len(r.node_calls[0].completion.prompt_ids) > 0
        assert r.program == build_program(ENSEMBLE)
    # sampled with the training settings, one seed per call derived from (seed, job, key)
    first = engine.calls[0][0]
    assert (first.params.temperature, first.params.top_p, first.params.n) == (0.7, 0.9, 1)
    assert first.params.seed == derive_seed(5, "a", "0.0/0") % 2**31
    assert len({r.params.seed for batch in engine.calls for r in batch}) == 6
    # the engine's completions are the node calls' completions (token ids and logprobs kept)
    assert res[0].node_calls[0].completion == engine.outputs[0][0][0]


HOSTILE = {
    "syntax": ("def workflow(:\n    pass", "design_check: syntax"),
    "import_os": ("import os\ndef workflow(q):\n    return os.listdir('/')", "design_check"),
    "dynamic_import": ("from pettingllms.mas.dsl import *\nimp = getattr(__builtins__, 'get')\n"
                       "def workflow(q):\n    return str(imp('__import__')('os').listdir('/'))",
                       "design: "),
    "infinite_loop": ("def workflow(q):\n    while True:\n        pass", "timeout"),
    "million_nodes": ("from pettingllms.mas.dsl import *\ndef workflow(q):\n"
                      "    nodes = [Agent('a') for _ in range(10**6)]\n    return 'x'", "budget: more than"),
    "call_loop": ("from pettingllms.mas.dsl import *\nA = Agent('a')\ndef workflow(q):\n"
                  "    while True:\n        A(q)", "budget: more than 4 LLM calls"),
    "memory": ("def workflow(q):\n    x = [0] * 10**10\n    return 'x'", ""),
    "no_workflow": ("x = 1\n", "design_check"),
    "returns_none": ("def workflow(q):\n    return None", "design: TypeError"),
    "raises": ("def workflow(q):\n    raise ValueError('boom')", "design: ValueError: boom"),
    "recursion": ("def workflow(q):\n    return workflow(q)", "design: RecursionError"),
    "nondeterministic": ("from pettingllms.mas.dsl import *\nA = Agent('a')\ndef workflow(q):\n"
                         "    A(str(hash('salt')))\n    return A(q)", "nondeterministic"),
}


def test_hostile_designs_are_contained():
    engine = ScriptedEngine(lambda req: ["\\boxed{1}"])
    budgets = MasBudgets(round_wall_s=2.0, wall_s=10.0, max_calls=4, memory_mb=256)
    jobs = [DesignJob(src, "q", name) for name, (src, _) in HOSTILE.items()]
    jobs.append(DesignJob(ENSEMBLE, "q", "good"))
    res = {r.job_id: r for r in run_designs(jobs, engine, "shared", SAMPLING, budgets, seed=0)}
    for name, (_, want) in HOSTILE.items():
        r = res[name]
        assert not r.ok and r.answer is None and r.error.startswith(want), (name, r.error)
    assert res["call_loop"].node_calls and len(res["call_loop"].node_calls) == 4  # kept, not dropped
    assert res["good"].ok  # the broken designs did not stop the good one


def test_printing_the_channel_mark_changes_nothing():
    from pettingllms.mas.driver import RESULT_MARK

    design = (f"def workflow(q):\n    print('{RESULT_MARK}' + '{{\"status\": \"done\"}}')\n"
              "    return 'real'")
    (r,) = run_designs([DesignJob(design, "q", "mark")], ScriptedEngine(lambda req: ["z"]),
                       "shared", SAMPLING, FAST, seed=0)
    assert r.ok and r.answer == "real", r.error


def test_huge_output_is_capped():
    design = "def workflow(q):\n    print('x' * 10**7)\n    return 'y' * 10**6"
    budgets = MasBudgets(round_wall_s=5.0, max_log_chars=1000, max_answer_chars=100)
    (r,) = run_designs([DesignJob(design, "q", "huge")], ScriptedEngine(lambda req: ["z"]),
                       "shared", SAMPLING, budgets, seed=0)
    assert r.ok and r.answer == "y" * 100
    assert len(r.log) < 2000 and "more characters of output dropped" in r.log


def test_tool_calls_run_in_their_own_sandbox():
    design = ('from pettingllms.mas.dsl import *\n'
              'def workflow(q):\n'
              '    r = python_tool("print(6 * 7)")\n'
              '    bad = python_tool("import time\\nwhile True: pass")\n'
              '    return f"{r.stdout.strip()} {r.ok} {bad.ok} {bad.error}"')
    budgets = MasBudgets(round_wall_s=3.0, tool_wall_s=1.0)
    (r,) = run_designs([DesignJob(design, "q", "t")], ScriptedEngine(lambda req: ["z"]),
                       "shared", SAMPLING, budgets, seed=0)
    assert r.ok and r.answer == "42 True False timeout", r
    assert [t["kind"] for t in r.trace] == ["tool", "tool"] and r.node_calls == []


def _seeded(req):
    return [f"\\boxed{{{req.params.seed % 1000}}}"]


def test_a_seed_fixes_the_execution():
    jobs = [DesignJob(ENSEMBLE, "q", "a")]

    def answers(seed):
        (r,) = run_designs(jobs, ScriptedEngine(_seeded), "shared", SAMPLING, FAST, seed=seed)
        return [c.completion.text for c in r.node_calls], r.answer

    assert answers(1) == answers(1)
    assert answers(1) != answers(2)


@pytest.mark.parametrize("engine_seed", [0])
def test_determinism_on_the_tiny_model(engine_seed):
    from pettingllms.rollout.engines.hf import HFEngine

    engine = HFEngine({"shared": "tiny:mas"}, dtype="float32", seed=engine_seed)
    jobs = [DesignJob(ENSEMBLE, "What is 2+2?", "a"), DesignJob(ENSEMBLE, "What is 2+2?", "b")]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8)
    first = run_designs(jobs, engine, "shared", sampling, FAST, seed=3)
    again = run_designs(jobs, engine, "shared", sampling, FAST, seed=3)
    for x, y in zip(first, again):
        assert x.ok and y.ok
        assert [c.completion.response_ids for c in x.node_calls] == \
               [c.completion.response_ids for c in y.node_calls]
        assert x.answer == y.answer
    # the two executions of one design are sampled, not copies of each other
    assert [c.completion.response_ids for c in first[0].node_calls] != \
           [c.completion.response_ids for c in first[1].node_calls]
