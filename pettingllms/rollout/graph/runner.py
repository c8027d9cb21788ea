"""The graph runner (`rollout.strategy: graph`): K executions of a user's agent program per problem.

Same surface as `pettingllms.rollout.runner.Rollout` (`run(problems, seed, k, step) -> Batch`), so
the trainer, advantages, metrics and evaluation use it unchanged. One run:

1. a `CallBroker` and its `Gateway` start on 127.0.0.1 (a free port) for this run's agents;
2. every (problem, execution j < k) runs the program (`env.options.program`) in a child process
   (`child.py`), `env.options.workers` at a time, with its own API key; each model call the
   program makes is attributed to that execution and an agent, batched with the other
   executions' calls into one engine call, and kept with the engine's token ids and logprobs;
3. the child is killed (its whole process group) past `wall_s` of its own time (time its calls
   spent waiting on the engine is not counted: a slow engine is not the program's fault) or once
   over `max_calls` / `max_tokens` (after a normal end too, so helpers it left running go with
   it); its answer is graded by the env (math-verify or hidden tests).

Records: one Episode per execution (`<problem>/graph<j>`). Every call's completions are Samples of
the agent that made the call, with `turn` = that agent's call index in the execution, so
`algorithm.group_by` [problem, turn, agent] groups "the i-th call of agent a" across the k
executions of a problem (flat rollout). Every sample of an execution has the execution's outcome as
its team reward, and its agent's own reward (`env.options.local_rewards`, else 0) as its local
reward, mixed by reward.team_weight / local_weight as in the turn-based envs (marked as an episode
return: a group's statistics count each execution once). A call that extends an earlier call of
its agent keeps that call's ids (prefix.py; `info["extends"]` names the call; metrics
graph/prefix_kept and graph/prefix_misses). The trajectory has one step per call and a last
`program` step with the answer, the error and the tail of the program's output.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from pettingllms.algorithms.advantages import EPISODE_RETURN_KEY
from pettingllms.algorithms.grouping import group_key
from pettingllms.envs.graph.env import GraphEnv, search_path
from pettingllms.records import Batch, Episode, Sample, Step
from pettingllms.rollout.engines.base import RolloutEngine
from pettingllms.rollout.graph.broker import Call, CallBroker, Execution
from pettingllms.rollout.graph.child import load_program
from pettingllms.rollout.graph.gateway import Gateway
from pettingllms.rollout.runner import RolloutSettings, checked_keys, derive_seed, reset_envs
from pettingllms.rollout.strategies.base import mixed_reward
from pettingllms.utils import counters
from pettingllms.utils.counters import counted

CHILD = str(Path(__file__).with_name("child.py"))
PROGRAM_STEP = "program"  # the trajectory's last step: the program's answer or failure
_TAIL = 4000
# the program runs offline: frameworks' tracing exporters stay off (a failed export must not fail it)
QUIET_ENV = {"OTEL_SDK_DISABLED": "true", "LANGCHAIN_TRACING_V2": "false", "LANGSMITH_TRACING": "false",
             "OPENAI_AGENTS_DISABLE_TRACING": "1", "AUTOGEN_DISABLE_RUNTIME_TRACING": "true",
             "HF_HUB_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

_counts: Counter = Counter()
_counts_lock = threading.Lock()


def _graph_counts() -> dict[str, int]:
    with _counts_lock:
        return dict(_counts)


# per-run metrics on Batch.counters: graph/runs (executions), graph/errors/<kind> (failed ones),
# graph/prefix_kept and graph/prefix_misses (calls extending an earlier one: ids kept, or rendered afresh)
counters.register("graph", _graph_counts, quiet_when_empty=True)


@dataclass
class ProgramRun:
    """One execution of the program, as the runner saw it."""
    key: str
    index: int  # execution index within its problem
    outcome: float
    ok: bool
    answer: str | None
    error: str | None  # "<kind>: ..." (load, program, timeout, budget, no_calls, exit)
    calls: list[Call]
    tokens: int = 0
    wall_s: float = 0.0
    trace: str = ""  # the program's traceback, if it raised
    stdout: str = ""  # tails of what it printed
    stderr: str = ""
    local: dict[str, float] = field(default_factory=dict)  # each agent's own reward (env.options.local_rewards)


class GraphRollout:
    def __init__(self, engine: RolloutEngine, env_factory: Callable[[], GraphEnv],
                 agent_policy: Mapping[str, str], settings: RolloutSettings) -> None:
        self.engine = engine
        self.env_factory = env_factory
        self.agent_policy = dict(agent_policy)
        self.settings = settings

    @counted  # Batch.counters: the graders' sandbox runs (as Rollout.run)
    def run(self, problems: list[dict[str, Any]], seed: int, k: int | None = None, *,
            step: int = 0, keys: list[str] | None = None) -> Batch:
        if not problems:
            return Batch(step=step)
        keys = checked_keys(problems, keys, "GraphRollout.run")
        envs = reset_envs(problems, keys, self.env_factory, GraphEnv, "graph", seed)
        opts = envs[0][1].opts
        missing = [a for a in opts.agents if a not in self.agent_policy]
        if missing:
            raise ValueError(f"agent_policy has no policy for agent(s) {missing} of the graph program")
        k = int(k if k is not None else self.settings.k)
        if k < 1:
            raise ValueError(f"rollout.k must be >= 1, got {k}")
        broker = CallBroker(self.engine, {a: self.agent_policy[a] for a in opts.agents},
                            self.settings.sampling, wait_s=opts.wait_s)
        gateway = Gateway(broker)
        try:
            jobs = [(key, env, j) for key, env in envs for j in range(k)]
            with ThreadPoolExecutor(max_workers=min(opts.workers, len(jobs)), thread_name_prefix="graph") as pool:
                results = list(pool.map(lambda job: self._execute(broker, gateway, *job, seed), jobs))
        finally:
            gateway.close()
            broker.shutdown()
        if broker.engine_error is not None:  # not the program's fault
            raise RuntimeError(f"the engine failed while answering the graph program's calls: "
                               f"{broker.engine_error!r}") from broker.engine_error
        by_key = dict(envs)
        if opts.local_rewards:
            score = load_program(opts.local_rewards, search_path())
            for r in results:
                r.local = local_rewards(score, opts.local_rewards, by_key[r.key], r) if r.ok else {}
        return Batch(step=step, episodes=[self._episode(r, by_key[r.key]) for r in results])

    # ------------------------------------------------------------------ one execution
    def _execute(self, broker: CallBroker, gateway: Gateway, key: str, env: GraphEnv, j: int,
                 seed: int) -> ProgramRun:
        opts = env.opts
        ex = broker.open(f"{key}/graph{j}", derive_seed(seed, key, j, "graph"), opts.max_calls, opts.max_tokens)
        tmp = Path(tempfile.mkdtemp(prefix="plm-graph-"))
        start = time.monotonic()
        try:
            spec = {"program": opts.program, "problem": env.program_problem, "url": gateway.url, "api_key": ex.token,
                    "agents": list(opts.agents), "result": str(tmp / "result.json"), "search": search_path(),
                    "parent": os.getpid(),
                    "timeout_s": opts.wall_s}
            (tmp / "spec.json").write_text(json.dumps(spec, default=str), encoding="utf-8")
            child_env = {**os.environ, **QUIET_ENV, "OPENAI_BASE_URL": f"{gateway.url}/v1",
                         "OPENAI_API_KEY": ex.token, "PYTHONUNBUFFERED": "1"}
            stopped, out, err = _run_child([sys.executable, CHILD, str(tmp / "spec.json")], child_env, ex,
                                           opts.wall_s)
            calls = broker.close(ex)
            wall = time.monotonic() - start
            try:
                report = json.loads((tmp / "result.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                report = {"ok": False, "error": "exit: the program ended without a result "
                          f"(exit code {stopped})"}
        finally:
            broker.close(ex)
            shutil.rmtree(tmp, ignore_errors=True)
        error = ex.error or (stopped if isinstance(stopped, str) else None) or report.get("error")
        if error is None and len(calls) < opts.min_calls:
            error = f"no_calls: the program made {len(calls)} model call(s) (env.options.min_calls={opts.min_calls})"
        with _counts_lock:
            _counts["runs"] += 1
            _counts["prefix_kept"] += ex.prefix_kept
            _counts["prefix_misses"] += ex.prefix_misses
            if error is not None:
                _counts[f"errors/{error.split(':', 1)[0]}"] += 1
        answer = report.get("answer") if error is None else None
        outcome = env.grade(answer) if error is None else 0.0
        return ProgramRun(key=key, index=j, outcome=float(outcome), ok=error is None, answer=answer,
                               error=error, calls=calls, tokens=ex.tokens, wall_s=wall,
                               trace=str(report.get("trace", "")), stdout=out, stderr=err)

    # ------------------------------------------------------------------ records
    def _episode(self, r: ProgramRun, env: GraphEnv) -> Episode:
        episode = Episode(problem_id=r.key, episode_id=f"{r.key}/graph{r.index}", env=env.name,
                          problem=dict(env.problem))
        group_by, st = self.settings.group_by, self.settings
        for c in r.calls:
            policy = self.agent_policy[c.agent]
            local = r.local.get(c.agent, 0.0)
            reward = mixed_reward(r.outcome, local, st.team_weight, st.local_weight)
            kept = {} if c.extends is None else {"extends": c.extends}  # its prompt begins with that call's ids
            for i, comp in enumerate(c.completions):
                episode.samples.append(Sample(
                    agent=c.agent, turn=c.index, problem_id=r.key, episode_id=episode.episode_id,
                    prompt_ids=list(comp.prompt_ids), response_ids=list(comp.response_ids),
                    logprobs=list(comp.logprobs), text=comp.text, finish_reason=comp.finish_reason,
                    policy=policy, candidate=i, committed=i == 0,
                    group_key=group_key(r.key, c.index, c.agent, group_by),
                    team_reward=r.outcome, local_reward=local, reward=reward,
                    info={"call": c.order, "execution": r.index, EPISODE_RETURN_KEY: True, **kept}))
            episode.trajectory.steps.append(Step(
                agent=c.agent, turn=c.index, action=c.completions[0].text if c.completions else "",
                local_reward=local, team_reward=r.outcome,
                info={"call": c.order, "messages": c.messages, "n": len(c.completions), **kept}))
        episode.trajectory.steps.append(Step(
            agent=PROGRAM_STEP, turn=len(r.calls), action=str(r.answer if r.ok else r.error),
            local_reward=0.0, team_reward=r.outcome,
            info={"ok": r.ok, "error": r.error, "answer": r.answer, "calls": len(r.calls), "tokens": r.tokens,
                  "local_rewards": dict(r.local),
                  "wall_s": round(r.wall_s, 3), "trace": r.trace, "stdout": r.stdout, "stderr": r.stderr}))
        episode.trajectory.team_reward = r.outcome
        episode.trajectory.success = r.outcome >= 1.0
        episode.trajectory.num_turns = 1
        return episode


def local_rewards(score: Callable[..., Any], name: str, env: GraphEnv, r: ProgramRun) -> dict[str, float]:
    """The user's per-agent rewards of one execution that ended well (GraphEnv's doc has the contract).
    A bad return is a bug in the trainer's own grading, not the program's: it fails the run."""
    calls = [{"agent": c.agent, "index": c.index, "messages": c.messages,
              "reply": c.completions[0].text if c.completions else ""} for c in r.calls]
    got = score(env.program_problem, r.answer, r.outcome, calls)
    agents = set(env.opts.agents)
    if not isinstance(got, Mapping) or not set(got) <= agents or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in got.values()):
        raise RuntimeError(f"env.options.local_rewards={name} must return {{agent: number}} for agents "
                           f"among {sorted(agents)}; for {r.key}/graph{r.index} it returned {got!r}")
    return {str(a): float(v) for a, v in got.items()}


def _run_child(cmd: list[str], env: dict[str, str], ex: Execution, wall_s: float) -> tuple[int | str, str, str]:
    """Run the program: (its exit code, or why it was stopped: "timeout: ..." / the budget error; the
    tails of its stdout and stderr). Output goes through pipes of which only the tails are kept, so a
    program printing in a loop cannot fill the disk. Its whole process group is killed at the end
    (also after a normal exit: helper processes it left behind go with it)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)  # its own group: a kill takes its children too
    tails = [b"", b""]

    def drain(stream: Any, i: int) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            tails[i] = (tails[i] + chunk)[-_TAIL:]

    readers = [threading.Thread(target=drain, args=(st, i), daemon=True)
               for i, st in enumerate((proc.stdout, proc.stderr))]
    for r in readers:
        r.start()
    start = time.monotonic()
    result: int | str | None = None
    while result is None:
        try:
            result = proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            if ex.error:
                result = ex.error
            elif ex.charged_s(time.monotonic() - start) > wall_s:
                result = f"timeout: the program ran past env.options.wall_s={wall_s}s"
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    for r in readers:
        r.join(timeout=2)  # a process that left the group may still hold the pipe: do not wait on it
    return result, *(t.decode("utf-8", "replace") for t in tails)
