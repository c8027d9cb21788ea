"""The workflow DSL: what a designer writes a multi-agent system in.

A design is a plain Python file that imports only this module (plus, if it needs them, the pure
stdlib modules in `ALLOWED_MODULES`) and defines `workflow`, a function or a node:

    from pettingllms.mas.dsl import *

    solver = Agent("solver", "Solve the problem step by step. End with \\boxed{answer}.")
    critic = Agent("critic", "Check the solution. Reply CORRECT if it is right, else name the error.")

    def workflow(question: str) -> str:
        return Reflection(solver, critic, rounds=2)(question)

Every node is called as `node(task, context=None) -> str`; `context` is a list of
(label, text) pairs shown to the node's agents below the task.

    Agent(role, instructions)            one LLM call: system = role + instructions, user = task + context
    Sequential(*steps)                   each step sees the task and the previous step's output
    Parallel(*branches)                  same input to every branch, their LLM calls go out in one
                                         batch; returns the outputs labelled by role
    parallel(branches, task, context)    the same, returning the list of outputs
    Ensemble(members, aggregator)        members in parallel, then the aggregator sees their answers
    Debate(agents, rounds, judge=None)   every round each agent answers seeing the others' last answers
    Reflection(solver, critic, rounds)   solve, critique, revise; stops when the critic says CORRECT
    Router(classifier, routes, default)  the classifier's reply names the route (a key of `routes`)
    If(predicate, then, otherwise)       predicate(task) -> bool picks the branch
    Loop(body, until, max_iters)         body runs on its own last output until until(output) is true
    CodeAgent(role, instructions)        asks for a Python program, runs it with python_tool, returns
                                         the program's output
    python_tool(code) -> ToolResult      runs Python in its own sandbox process (stdout, stderr, ok)
    extract_answer(text), majority_vote(texts)   answer helpers (last \\boxed{...}, else last number)

This file is stdlib-only on purpose: the executor ships its source into the sandbox next to the
design (`pettingllms.mas.executor`), so the same code runs in tests and in the sandbox. How LLM
calls are answered is the runtime's business (`set_runtime`): in the sandbox a replay runtime
answers calls recorded by the host and raises `_Pending` for new ones; in-process, `LocalRuntime`
calls a Python function (unit tests, SFT data checks).
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

__all__ = ["Agent", "CodeAgent", "Debate", "Ensemble", "If", "Loop", "Node", "Parallel",
           "Reflection", "Router", "Sequential", "ToolResult", "BudgetExceeded", "extract_answer",
           "majority_vote", "parallel", "python_tool"]

# Modules a design may import besides this one (pure computation, no I/O).
ALLOWED_MODULES = ("math", "re", "json", "itertools", "functools", "collections", "statistics",
                   "fractions", "string")
DSL_MODULE = "pettingllms.mas.dsl"
DEFAULT_LIMITS = {"max_nodes": 64, "max_calls": 32, "max_tool_calls": 8, "max_prompt_chars": 16000,
                  "max_loop_iters": 8}


class BudgetExceeded(BaseException):
    """A design went over a budget (nodes, calls, prompt size). BaseException so that a design's
    own `except Exception:` cannot swallow it."""


class _Pending(BaseException):
    """Raised (replay runtime only) when calls need answers from the host; carries their keys."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__(keys)
        self.keys = keys


class ToolResult:
    def __init__(self, stdout: str = "", stderr: str = "", ok: bool = False, error: str | None = None):
        self.stdout, self.stderr, self.ok, self.error = stdout, stderr, ok, error

    def __repr__(self) -> str:
        return f"ToolResult(ok={self.ok}, stdout={self.stdout[:200]!r}, error={self.error!r})"


def digest(messages: list[dict]) -> str:
    """Stable fingerprint of a call's messages (replay checks the design is deterministic)."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------- runtimes

class _Runtime:
    """Counts nodes and calls against the limits and gives every call a structural key.

    Keys are paths: the n-th call under a prefix is "<prefix>/<n>"; branch i of a parallel block
    with key K runs under prefix "K.i". So a call's key depends only on the code path that led to
    it, never on which other branches were waiting for answers in an earlier replay.
    """

    def __init__(self, limits: dict | None = None) -> None:
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}
        self.nodes = 0
        self.calls = 0
        self.tool_calls = 0
        self._prefix = ""
        self._counters: dict[str, int] = {}

    def next_key(self) -> str:
        n = self._counters.get(self._prefix, 0)
        self._counters[self._prefix] = n + 1
        return f"{self._prefix}/{n}" if self._prefix else str(n)

    def count_node(self) -> int:
        self.nodes += 1
        if self.nodes > self.limits["max_nodes"]:
            raise BudgetExceeded(f"budget: more than {self.limits['max_nodes']} nodes")
        return self.nodes

    def llm(self, node_id: str, role: str, messages: list[dict]) -> str:
        self.calls += 1
        if self.calls > self.limits["max_calls"]:
            raise BudgetExceeded(f"budget: more than {self.limits['max_calls']} LLM calls")
        size = sum(len(m["content"]) for m in messages)
        if size > self.limits["max_prompt_chars"]:
            raise BudgetExceeded(f"budget: a prompt of {size} characters (limit "
                                 f"{self.limits['max_prompt_chars']})")
        return self._answer_llm(self.next_key(), node_id, role, messages)

    def tool(self, code: str) -> ToolResult:
        self.tool_calls += 1
        if self.tool_calls > self.limits["max_tool_calls"]:
            raise BudgetExceeded(f"budget: more than {self.limits['max_tool_calls']} tool calls")
        return self._answer_tool(self.next_key(), str(code))

    def branch(self, key: str, i: int):
        runtime, old = self, self._prefix

        class _Scope:
            def __enter__(self):
                runtime._prefix = f"{key}.{i}"

            def __exit__(self, *exc):
                runtime._prefix = old
        return _Scope()

    def _answer_llm(self, key, node_id, role, messages) -> str:
        raise NotImplementedError

    def _answer_tool(self, key, code) -> ToolResult:
        raise NotImplementedError


class LocalRuntime(_Runtime):
    """Answers calls at once in-process: `llm(messages, role) -> str`, `tool(code) -> ToolResult`."""

    def __init__(self, llm, tool=None, limits: dict | None = None) -> None:
        super().__init__(limits)
        self._llm, self._tool = llm, tool
        self.log: list[dict] = []

    def _answer_llm(self, key, node_id, role, messages) -> str:
        text = str(self._llm(messages, role))
        self.log.append({"key": key, "kind": "llm", "node_id": node_id, "role": role,
                         "messages": messages, "output": text})
        return text

    def _answer_tool(self, key, code) -> ToolResult:
        result = self._tool(code) if self._tool else ToolResult(error="no tool runner")
        self.log.append({"key": key, "kind": "tool", "code": code, "output": result.stdout})
        return result


class ReplayRuntime(_Runtime):
    """Sandbox runtime: answers from the host's record; a new call is recorded and `_Pending`."""

    def __init__(self, answers: dict, tools: dict, limits: dict | None = None) -> None:
        super().__init__(limits)
        self.answers, self.tools = answers, tools
        self.requests: list[dict] = []  # new calls for the host
        self.seen: list[dict] = []  # answered calls replayed: key + digest

    def _answer_llm(self, key, node_id, role, messages) -> str:
        d = digest(messages)
        if key in self.answers:
            self.seen.append({"key": key, "digest": d})
            return self.answers[key]
        self.requests.append({"key": key, "kind": "llm", "node_id": node_id, "role": role,
                              "messages": messages, "digest": d})
        raise _Pending([key])

    def _answer_tool(self, key, code) -> ToolResult:
        d = digest([{"role": "tool", "content": code}])
        if key in self.tools:
            self.seen.append({"key": key, "digest": d})
            return ToolResult(**self.tools[key])
        self.requests.append({"key": key, "kind": "tool", "code": code, "digest": d})
        raise _Pending([key])


_RUNTIME: _Runtime | None = None


def set_runtime(runtime: _Runtime | None) -> None:
    global _RUNTIME
    _RUNTIME = runtime


def _runtime() -> _Runtime:
    if _RUNTIME is None:
        raise RuntimeError("no DSL runtime: designs run through pettingllms.mas.executor "
                           "(or set_runtime(LocalRuntime(...)) in-process)")
    return _RUNTIME


# ---------------------------------------------------------------- nodes

def _render(task: str, context) -> str:
    text = str(task)
    for label, value in context or []:
        text += f"\n\n### {label}\n{value}"
    return text


class Node:
    role = "node"

    def __init__(self) -> None:
        self.node_id = f"{type(self).__name__.lower()}#{_runtime().count_node()}"

    def __call__(self, task: str, context=None) -> str:
        raise NotImplementedError


class Agent(Node):
    def __init__(self, role: str, instructions: str = "") -> None:
        super().__init__()
        self.role, self.instructions = str(role), str(instructions)
        self.node_id = f"{self.role}#{self.node_id.split('#')[1]}"

    def messages(self, task: str, context=None) -> list[dict]:
        system = f"You are the {self.role} in a team of agents. {self.instructions}".strip()
        return [{"role": "system", "content": system},
                {"role": "user", "content": _render(task, context)}]

    def __call__(self, task: str, context=None) -> str:
        return _runtime().llm(self.node_id, self.role, self.messages(task, context))


def parallel(branches, task: str, context=None) -> list[str]:
    """Run every branch on the same input; their calls are answered in one batch."""
    rt = _runtime()
    key, outs, pending = rt.next_key(), [], []
    for i, branch in enumerate(branches):
        with rt.branch(key, i):
            try:
                outs.append(branch(task, context))
            except _Pending as p:  # keep going: the other branches' calls join the same batch
                pending += p.keys
    if pending:
        raise _Pending(pending)
    return outs


def _label(node, i: int) -> str:
    return f"{getattr(node, 'role', 'branch')} {i + 1}"


class Parallel(Node):
    def __init__(self, *branches) -> None:
        super().__init__()
        self.branches = list(branches)

    def __call__(self, task: str, context=None) -> str:
        outs = parallel(self.branches, task, context)
        return _render("", [(_label(b, i), o) for i, (b, o) in enumerate(zip(self.branches, outs))]).strip()


class Sequential(Node):
    def __init__(self, *steps) -> None:
        super().__init__()
        self.steps = list(steps)

    def __call__(self, task: str, context=None) -> str:
        out, ctx = "", list(context or [])
        for step in self.steps:
            out = step(task, ctx)
            ctx = list(context or []) + [(f"output of the {getattr(step, 'role', 'previous step')}", out)]
        return out


class Ensemble(Node):
    def __init__(self, members, aggregator) -> None:
        super().__init__()
        self.members, self.aggregator = list(members), aggregator

    def __call__(self, task: str, context=None) -> str:
        outs = parallel(self.members, task, context)
        ctx = list(context or []) + [(f"candidate answer {i + 1}", o) for i, o in enumerate(outs)]
        return self.aggregator(task, ctx)


class Debate(Node):
    def __init__(self, agents, rounds: int = 2, judge=None) -> None:
        super().__init__()
        self.agents, self.rounds, self.judge = list(agents), max(1, int(rounds)), judge

    def __call__(self, task: str, context=None) -> str:
        last: list[str] = []
        for r in range(min(self.rounds, _runtime().limits["max_loop_iters"])):
            branches = []
            for i, agent in enumerate(self.agents):
                others = [(f"{_label(a, j)} said (round {r})", last[j])
                          for j, a in enumerate(self.agents) if j != i and last]
                branches.append(lambda t, c, a=agent, o=others: a(t, list(c or []) + o))
            last = parallel(branches, task, context)
        if self.judge is None:
            return last[0]
        return self.judge(task, list(context or []) + [(_label(a, i), o) for i, (a, o)
                                                      in enumerate(zip(self.agents, last))])


class Reflection(Node):
    def __init__(self, solver, critic, rounds: int = 1, stop_word: str = "CORRECT") -> None:
        super().__init__()
        self.solver, self.critic, self.rounds, self.stop_word = solver, critic, max(1, int(rounds)), stop_word

    def __call__(self, task: str, context=None) -> str:
        answer = self.solver(task, context)
        for _ in range(min(self.rounds, _runtime().limits["max_loop_iters"])):
            review = self.critic(task, list(context or []) + [("proposed solution", answer)])
            if self.stop_word.lower() in review.lower() and "incorrect" not in review.lower():
                break
            answer = self.solver(task, list(context or []) + [("your previous solution", answer),
                                                               ("critique", review)])
        return answer


class Router(Node):
    def __init__(self, classifier, routes: dict, default=None) -> None:
        super().__init__()
        if not routes:
            raise ValueError("Router needs at least one route")
        self.classifier, self.routes, self.default = classifier, dict(routes), default

    def __call__(self, task: str, context=None) -> str:
        choice = self.classifier(task, list(context or []) + [
            ("routes", "Reply with exactly one of: " + ", ".join(self.routes))]).lower()
        for name, node in self.routes.items():
            if str(name).lower() in choice:
                return node(task, context)
        fallback = self.default or next(iter(self.routes.values()))
        return fallback(task, context)


class If(Node):
    def __init__(self, predicate, then, otherwise) -> None:
        super().__init__()
        self.predicate, self.then, self.otherwise = predicate, then, otherwise

    def __call__(self, task: str, context=None) -> str:
        return (self.then if self.predicate(task) else self.otherwise)(task, context)


class Loop(Node):
    def __init__(self, body, until, max_iters: int = 3) -> None:
        super().__init__()
        self.body, self.until, self.max_iters = body, until, max(1, int(max_iters))

    def __call__(self, task: str, context=None) -> str:
        out = self.body(task, context)
        for i in range(1, min(self.max_iters, _runtime().limits["max_loop_iters"])):
            if self.until(out):
                break
            out = self.body(task, list(context or []) + [(f"previous attempt {i}", out)])
        return out


_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


class CodeAgent(Agent):
    def messages(self, task: str, context=None) -> list[dict]:
        msgs = super().messages(task, context)
        msgs[0]["content"] += (" Write one Python program in a ```python block that prints the "
                               "result; it is run and its output is your answer.")
        return msgs

    def __call__(self, task: str, context=None) -> str:
        reply = super().__call__(task, context)
        blocks = _FENCE.findall(reply)
        if not blocks:
            return reply
        result = python_tool(blocks[-1])
        return result.stdout.strip() if result.ok else f"{reply}\n(program failed: {result.error})"


def python_tool(code: str) -> ToolResult:
    """Run Python code in a sandbox process of its own; returns its output."""
    return _runtime().tool(code)


# ---------------------------------------------------------------- answer helpers

_BOXED = re.compile(r"\\boxed\s*\{")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def extract_answer(text: str) -> str | None:
    """The content of the last \\boxed{...}, else the last number, else None."""
    text = str(text)
    starts = [m.end() for m in _BOXED.finditer(text)]
    for start in reversed(starts):
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start:i - 1].strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def majority_vote(texts) -> str:
    """The most common extracted answer (first seen wins ties), as \\boxed{...}; "" if none."""
    answers = [a for a in (extract_answer(t) for t in texts) if a]
    if not answers:
        return ""
    counts = Counter(answers)
    best = max(answers, key=lambda a: (counts[a], -answers.index(a)))
    return f"\\boxed{{{best}}}"
