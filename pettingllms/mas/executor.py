"""Run designs in the sandbox, answering every node's LLM call from one batched engine.

    run_designs(jobs: list[DesignJob], engine, policy, sampling: SamplingParams,
                budgets: MasBudgets, seed: int, progress=None) -> list[ExecutionResult]

How a design runs. Its program (`build_program`: the DSL source, `driver.py` and the design
text; saved as `mas.py`) runs in `pettingllms.sandbox` as a one-shot child process. The channel
is JSON over the child's stdin/stdout pipes: stdin carries the answers known so far, stdout
returns the new calls the design is waiting on (and, at the end, its answer). So each execution
advances in *rounds*: replay the design with the recorded answers up to its next calls; then
the host answers the pending calls of ALL live executions together — tool calls in their own
sandbox processes, LLM calls in ONE `engine.generate(...)` — and replays again. Replay is exact
because a call's key is its code path (see `dsl._Runtime`) and each answered call's messages are
fingerprinted and checked on every replay (a design that changes its calls between replays is
stopped as non-deterministic). A child never waits on the host, so no design can block the
host or hold a process open: each round is bounded by the sandbox's wall/CPU/memory/output
limits, and the whole execution by `MasBudgets` (nodes, calls, tokens, wall time).

Sampling: every LLM call is sampled with the training settings `sampling` (n=1 per call) and a
per-call seed `derive_seed(seed, job_id, key)`, so N executions of one design differ, and a seed
fixes them all. The engine's prompt/response token ids and logprobs are kept in
`NodeCall.completion`: the executor samples a trainer uses. The final answer is what the design
returned from those calls; nothing is generated that does not feed it (no discarded work).

A broken design (syntax error, `import os`, infinite loop, 10^6 nodes, huge output, garbage)
ends with `ok=False`, an `error` of the form "<kind>: <message>" and the calls made so far; it
never raises. Kinds: design_check, syntax, design, budget, timeout, output_limit, memory,
sandbox, protocol, nondeterministic.
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from pettingllms.mas import driver, dsl, workflow_api, workflow_flows
from pettingllms.mas.budgets import MasBudgets
from pettingllms.mas.checks import check_design
from pettingllms.rollout.engines.base import Completion, GenerationRequest, SamplingParams
from pettingllms.sandbox import SandboxLimits, run_python
from pettingllms.utils.seeding import derive_seed

__all__ = ["DesignJob", "ExecutionResult", "MasBudgets", "NodeCall", "build_program", "run_designs"]


@dataclass
class DesignJob:
    design_source: str
    question: str
    job_id: str
    design_format: str = "pettingllms"  # pettingllms (our DSL) | workflow (the released model's API)
    task: str = "math"  # math | code: the released API's agents are told how to hand on an answer


@dataclass
class NodeCall:
    node_id: str  # "<role>#<n>": the n-th node the design built
    role: str
    messages: list[dict[str, str]]  # exactly what the engine was asked
    completion: Completion  # token ids and sampler logprobs kept
    key: str = ""  # the call's code path (stable across replays)
    round: int = 0  # the batch it was answered in


@dataclass
class ExecutionResult:
    job_id: str
    ok: bool
    answer: str | None
    error: str | None  # "<kind>: <message>" when not ok
    node_calls: list[NodeCall]
    trace: list[dict[str, Any]]  # per call (LLM and tool): inputs, output, tokens, timing
    log: str  # host events per round, then what the design printed
    timing: dict[str, float]  # total_s, sandbox_s, generate_s, charged_s, rounds
    program: str = ""  # the exact program that ran (mas.py)


def _source(module) -> str:
    with open(module.__file__, encoding="utf-8") as f:
        return f.read()


def build_program(design_source: str, design_format: str = "pettingllms") -> str:
    """The complete program the sandbox runs for a design (what `mas.py` holds). Format
    `workflow` also embeds the released `workflow` API (pettingllms.mas.workflow_api + workflow_flows,
    merged into the module `workflow`)."""
    api = [] if design_format != "workflow" else [
        "_core = types.ModuleType('pettingllms.mas.workflow_api')",
        f"exec(compile({_source(workflow_api)!r}, 'pettingllms/mas/workflow_api.py', 'exec'), _core.__dict__)",
        "sys.modules['pettingllms.mas.workflow_api'] = _core",
        "_flows = types.ModuleType('pettingllms.mas.workflow_flows')",
        f"exec(compile({_source(workflow_flows)!r}, 'pettingllms/mas/workflow_flows.py', 'exec'), _flows.__dict__)",
        "_api = types.ModuleType('workflow'); _api.__path__ = []",
        "_api.__dict__.update({k: v for m in (_core, _flows) for k, v in vars(m).items() if not k.startswith('__')})",
        "for _name in _api.SUBMODULES:",
        "    sys.modules[_name] = _api"]
    return "\n".join([
        "# mas.py: generated by pettingllms.mas.executor; exactly what runs in the sandbox.",
        "# The DSL and the driver are embedded as source; the design text is DESIGN below.",
        "import sys, types",
        "for _pkg in ('pettingllms', 'pettingllms.mas'):",
        "    sys.modules[_pkg] = types.ModuleType(_pkg); sys.modules[_pkg].__path__ = []",
        "_dsl = types.ModuleType('pettingllms.mas.dsl')",
        f"exec(compile({_source(dsl)!r}, 'pettingllms/mas/dsl.py', 'exec'), _dsl.__dict__)",
        "sys.modules['pettingllms.mas.dsl'] = _dsl",
        "_driver = types.ModuleType('pettingllms.mas.driver')",
        f"exec(compile({_source(driver)!r}, 'pettingllms/mas/driver.py', 'exec'), _driver.__dict__)",
        *api,
        f"DESIGN = {design_source!r}",
        "_driver.main(_dsl, DESIGN, _api)" if api else "_driver.main(_dsl, DESIGN)",
        ""])


class _Exec:
    """One execution's state between rounds."""

    def __init__(self, job: DesignJob, budgets: MasBudgets) -> None:
        self.job, self.budgets = job, budgets
        self.program = build_program(job.design_source, job.design_format)
        self.answers: dict[str, str] = {}
        self.tools: dict[str, dict] = {}
        self.digests: dict[str, str] = {}
        self.calls: list[NodeCall] = []
        self.trace: list[dict] = []
        self.events: list[str] = []
        self.design_log = ""
        self.pending: list[dict] = []
        self.done, self.ok, self.answer, self.error = False, False, None, None
        self.tokens = self.rounds = 0
        self.sandbox_s = self.generate_s = 0.0

    def finish(self, ok: bool, answer: str | None = None, error: str | None = None) -> None:
        self.done, self.ok, self.answer, self.error = True, ok, answer, error
        self.pending = []
        self.events.append(f"result: {'ok' if ok else 'failed'}" + (f" ({error})" if error else ""))

    def charged_s(self) -> float:
        return self.sandbox_s + self.generate_s

    def stdin(self) -> str:
        return json.dumps({"question": self.job.question, "answers": self.answers, "tools": self.tools,
                           "limits": self.budgets.dsl_limits(),
                           "max_log_chars": self.budgets.max_log_chars,
                           "max_answer_chars": self.budgets.max_answer_chars,
                           "format": self.job.design_format, "task": self.job.task})

    def limits(self) -> SandboxLimits:
        left = max(0.5, min(self.budgets.round_wall_s, self.budgets.wall_s - self.charged_s()))
        # room for the requests a round may return (prompts of up to max_calls calls) + the log
        out = 2 * (self.budgets.max_calls * self.budgets.max_prompt_chars + self.budgets.max_log_chars) + 65536
        return SandboxLimits(wall_s=left, cpu_s=left, memory_mb=self.budgets.memory_mb,
                             max_output_bytes=out)

    def absorb(self, r, round_no: int) -> None:
        """Take one sandbox run's report: finished, failed, or new calls to answer."""
        self.sandbox_s += r.wall_s
        self.rounds = round_no
        head = f"[round {round_no}] sandbox {r.wall_s:.2f}s"
        # the report is the line that starts with the mark (inside JSON a newline is escaped, so
        # a design that prints the mark cannot fake the line)
        mark = r.stdout.rfind("\n" + driver.RESULT_MARK)
        if mark < 0 or not r.ok:
            why = {"timeout": "timeout", "cpu_time": "timeout", "output_limit": "output_limit",
                   "memory": "memory"}.get(r.error or "", "sandbox")
            detail = r.error or f"exit code {r.exit_code}"
            tail = (r.stderr or r.stdout)[-500:].strip()
            self.events.append(f"{head}: stopped ({detail})")
            return self.finish(False, error=f"{why}: the design process stopped ({detail})"
                               + (f": {tail}" if tail and why == "sandbox" else ""))
        try:
            msg = json.loads(r.stdout[mark + 1 + len(driver.RESULT_MARK):].strip().splitlines()[0])
            status, requests, seen = msg["status"], list(msg["requests"]), list(msg["seen"])
            self.design_log = str(msg.get("log", ""))[:self.budgets.max_log_chars + 200]
        except (ValueError, KeyError, TypeError, IndexError) as e:
            return self.finish(False, error=f"protocol: unreadable report from the design ({e})")
        for s in seen:
            if not isinstance(s, dict) or self.digests.get(s.get("key")) != s.get("digest"):
                return self.finish(False, error="nondeterministic: a replayed call changed its "
                                   "inputs (designs must not depend on randomness or time)")
        if status == "done":
            self.events.append(f"{head}: finished")
            return self.finish(True, answer=str(msg.get("answer")))
        if status != "pending":
            self.events.append(f"{head}: design error")
            return self.finish(False, error=str(msg.get("error") or "design: unknown error")[:2000])
        problem = _check_requests(requests, self)
        if problem:
            return self.finish(False, error=f"protocol: {problem}")
        self.pending = requests
        names = ", ".join(q.get("node_id", "python_tool") for q in requests)
        self.events.append(f"{head}: {len(requests)} new call(s): {names}")

    def result(self, total_s: float) -> ExecutionResult:
        log = "\n".join(self.events)
        if self.design_log:
            log += "\n--- design output ---\n" + self.design_log
        return ExecutionResult(
            job_id=self.job.job_id, ok=self.ok, answer=self.answer, error=self.error,
            node_calls=self.calls, trace=self.trace, log=log, program=self.program,
            timing={"total_s": total_s, "sandbox_s": self.sandbox_s, "generate_s": self.generate_s,
                    "charged_s": self.charged_s(), "rounds": self.rounds})


def _check_requests(requests: list, ex: _Exec) -> str | None:
    """Reject reports the real driver cannot produce (a design writing to the channel itself)."""
    if not requests:
        return "pending without calls"
    b = ex.budgets
    if len(ex.answers) + len(requests) > b.max_calls or \
            len(ex.tools) + sum(1 for q in requests if isinstance(q, dict) and q.get("kind") == "tool") \
            > b.max_tool_calls:
        return "more calls than the budget allows"
    for q in requests:
        if not isinstance(q, dict) or not isinstance(q.get("key"), str) or q["key"] in ex.digests:
            return "malformed or repeated call key"
        if q.get("kind") == "llm":
            msgs = q.get("messages")
            if not (isinstance(msgs, list) and msgs and all(
                    isinstance(m, dict) and isinstance(m.get("role"), str)
                    and isinstance(m.get("content"), str) for m in msgs)):
                return "malformed messages"
            if sum(len(m["content"]) for m in msgs) > b.max_prompt_chars:
                return "prompt over the budget"
        elif q.get("kind") != "tool" or not isinstance(q.get("code"), str):
            return "unknown call kind"
    return None


def _run_tools(states: list[_Exec], pool: ThreadPoolExecutor, round_no: int) -> None:
    todo = [(ex, q) for ex in states for q in ex.pending if q["kind"] == "tool"]
    limits = [SandboxLimits(wall_s=ex.budgets.tool_wall_s, cpu_s=ex.budgets.tool_wall_s,
                            memory_mb=ex.budgets.memory_mb, max_output_bytes=64_000) for ex, _ in todo]
    results = list(pool.map(lambda a: run_python(a[0][1]["code"], "", a[1]), zip(todo, limits)))
    for (ex, q), r in zip(todo, results):
        fields = {"stdout": r.stdout[:20000], "stderr": r.stderr[-4000:], "ok": r.ok, "error": r.error
                  or (None if r.ok else f"exit code {r.exit_code}")}
        ex.tools[q["key"]] = fields
        ex.digests[q["key"]] = q["digest"]
        ex.trace.append({"key": q["key"], "kind": "tool", "node_id": "python_tool", "role": "tool",
                         "round": round_no, "code": q["code"], **fields, "wall_s": r.wall_s})


def _answer_llm(states: list[_Exec], engine, policy: str, sampling: SamplingParams, seed: int,
                round_no: int) -> None:
    todo = [(ex, q) for ex in states for q in ex.pending if q["kind"] == "llm"]
    if not todo:
        return
    requests = [GenerationRequest(
        messages=q["messages"], policy=policy, request_id=f"{ex.job.job_id}:{q['key']}",
        params=replace(sampling, n=1, seed=derive_seed(seed, ex.job.job_id, q["key"]) % 2**31))
        for ex, q in todo]
    start = time.monotonic()
    outputs = engine.generate(requests)
    spent = time.monotonic() - start
    for ex in {id(ex): ex for ex, _ in todo}.values():
        ex.generate_s += spent
    for (ex, q), outs in zip(todo, outputs):
        c = outs[0]
        ex.answers[q["key"]] = c.text
        ex.digests[q["key"]] = q["digest"]
        ex.calls.append(NodeCall(q["node_id"], q["role"], q["messages"], c, key=q["key"], round=round_no))
        ex.tokens += len(c.prompt_ids) + len(c.response_ids)
        ex.trace.append({"key": q["key"], "kind": "llm", "node_id": q["node_id"], "role": q["role"],
                         "round": round_no, "messages": q["messages"], "output": c.text,
                         "prompt_tokens": len(c.prompt_ids), "completion_tokens": len(c.response_ids),
                         "finish_reason": c.finish_reason, "generate_s": spent, "batch_size": len(todo)})


def run_designs(jobs: list[DesignJob], engine, policy: str, sampling: SamplingParams,
                budgets: MasBudgets | None = None, seed: int = 0,
                progress: Callable[[dict], None] | None = None) -> list[ExecutionResult]:
    """Execute every job; results in the order of `jobs`. Never raises for a bad design
    (engine errors do propagate: they are not the design's fault)."""
    budgets = MasBudgets.from_cfg(budgets)
    start = time.monotonic()
    states = [_Exec(job, budgets) for job in jobs]
    for ex in states:
        problems = check_design(ex.job.design_source, budgets.max_design_chars, ex.job.design_format)
        if problems:
            ex.finish(False, error="design_check: " + "; ".join(problems))
    max_rounds = budgets.max_calls + budgets.max_tool_calls + 2  # each round answers >= 1 call
    round_no = 0
    workers = max(1, min(int(budgets.sandbox_workers), os.cpu_count() or 1, len(jobs) or 1))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mas") as pool:
        while live := [ex for ex in states if not ex.done]:
            round_no += 1
            if round_no > max_rounds:
                for ex in live:
                    ex.finish(False, error="budget: too many rounds")
                break
            runs = list(pool.map(lambda ex: run_python(ex.program, ex.stdin(), ex.limits()), live))
            for ex, r in zip(live, runs):
                ex.absorb(r, round_no)
            waiting = [ex for ex in live if not ex.done]
            _run_tools(waiting, pool, round_no)
            _answer_llm(waiting, engine, policy, sampling, seed, round_no)
            for ex in waiting:
                ex.pending = []
                if ex.tokens > budgets.max_tokens:
                    ex.finish(False, error=f"budget: {ex.tokens} tokens (limit {budgets.max_tokens})")
                elif ex.charged_s() > budgets.wall_s:
                    ex.finish(False, error=f"timeout: {ex.charged_s():.1f}s over the wall budget "
                              f"({budgets.wall_s}s)")
            if progress is not None:
                progress({"round": round_no, "live": sum(not ex.done for ex in states),
                          "calls": sum(len(ex.calls) for ex in states),
                          "events": {ex.job.job_id: ex.events[-1] for ex in states if ex.events}})
    total = time.monotonic() - start
    return [ex.result(total) for ex in states]
