"""`graph` (graph-based MAS): an unmodified agent program is the episode.

The user writes `run(problem, clients) -> answer` in any framework that talks to an
OpenAI-compatible server (plain `openai`, AutoGen, LangGraph, ...); `env.options.program` names it
("pkg.module" or "pkg.module:function", importable from the working directory). Each of the
program's agents points its client at its own base URL (`clients.base_url(agent)`), so each call
is attributed to an agent and answered by that agent's policy. The episode (K independent
executions per problem, each in a subprocess, every call batched through the engine) is played
by `pettingllms.rollout.graph.runner.GraphRollout`; this env holds the problem, the options and
the grader.

Grading is the MetaAgent-X env's: `task: math` judges the answer with math-verify against the
gold answer (`\\boxed{}` or the last number), `task: code` by the hidden tests' pass ratio in the
sandbox. That outcome is the team reward of every call of the execution; a program that raises,
hangs past `wall_s`, goes over `max_calls` / `max_tokens`, or never calls the gateway
(`min_calls`) gets 0, with the reason and its traceback in the trajectory.

Per-agent (local) rewards: `local_rewards: "pkg.module:function"` names a function, called in the
trainer after each execution that ended well, as

    local_rewards(problem, answer, outcome, calls) -> {agent: reward}

`calls` lists the execution's model calls in order, each `{"agent", "index", "messages", "reply"}`
(`reply`: the first completion's text, the one the program got with n=1). Agents it leaves out get
0. Each call's samples then have the reward `reward.team_weight x outcome + reward.local_weight x
their agent's reward`, the mix of the turn-based envs; a failed execution gets 0 for all.
With local rewards the samples of one execution differ by agent, so `algorithm.group_by` must
keep `agent` (a config check says so). The program itself stays unmodified.

The program is trusted code (it is yours): it runs as a plain child process, not in the sandbox,
so that it can reach the gateway. Model-written code is only ever run by the code grader, in the
sandbox.
"""
from __future__ import annotations

import importlib.machinery
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from pettingllms.envs.autoevol.env import AutoEvolEnv
from pettingllms.envs.base import MultiAgentEnv, StepResult, register_env


@dataclass
class GraphOptions:
    """`env.options` of graph (checked here; unknown keys fail as a ConfigError)."""
    program: str = ""  # "pkg.module" (its run) or "pkg.module:function"
    agents: tuple[str, ...] = ()  # the program's agents: each gets a policy (L1 / L2 / L3)
    task: str = "math"  # math | code: the grader
    strict_boxed: bool = False
    grader: dict[str, Any] = field(default_factory=dict)  # code: test_wall_s, test_memory_mb
    max_calls: int = 16  # model calls of one execution
    max_tokens: int = 32768  # prompt + response tokens over one execution's calls
    wall_s: float = 120.0  # one execution's own time (waiting on the engine is not counted)
    min_calls: int = 1  # fewer calls than this: reward 0 (a program that never asked the models)
    workers: int = 4  # executions running at once
    wait_s: float = 0.05  # how long a request waits for others to share its engine batch
    local_rewards: str = ""  # "pkg.module:function": each agent's own reward (see the module doc)

    def check(self) -> None:
        if not self.program or not isinstance(self.program, str):
            raise ValueError("graph: set env.options.program to 'pkg.module' or 'pkg.module:function'")
        module = self.program.partition(":")[0]
        if program_spec(module) is None:
            raise ValueError(f"graph: program module {module!r} not found (searched the working "
                             f"directory {os.getcwd()} and sys.path)")
        if not self.agents or len(set(self.agents)) != len(self.agents) or not all(
                isinstance(a, str) and a and "/" not in a for a in self.agents):
            raise ValueError(f"graph: env.options.agents must list distinct agent names, got {list(self.agents)}")
        if self.local_rewards and program_spec(self.local_rewards.partition(":")[0]) is None:
            raise ValueError(f"graph: local_rewards module {self.local_rewards.partition(':')[0]!r} not found "
                             f"(searched the working directory {os.getcwd()} and sys.path)")
        if min(self.max_calls, self.max_tokens, self.workers) < 1 or self.wall_s <= 0 or self.min_calls < 0:
            raise ValueError("graph: max_calls, max_tokens, workers and wall_s must be positive")


def search_path() -> list[str]:
    """Where a program module is looked up (in the trainer and in its child): the working
    directory first, then the interpreter's path."""
    return [os.getcwd()]


def program_spec(module: str) -> Any:
    """The module's spec if the child will find it, without importing it here."""
    path, spec = search_path() + sys.path, None
    for part in module.split("."):
        spec = importlib.machinery.PathFinder.find_spec(part, path) if part.isidentifier() else None
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    return spec


@register_env("graph")
class GraphEnv(MultiAgentEnv):
    def __init__(self, max_turns: int = 1, program: str = "", agents: Any = (), task: str = "math",
                 strict_boxed: bool = False, grader: dict[str, Any] | None = None, max_calls: int = 16,
                 max_tokens: int = 32768, wall_s: float = 120.0, min_calls: int = 1, workers: int = 4,
                 wait_s: float = 0.05, local_rewards: str = "", **options: Any) -> None:
        super().__init__(max_turns=max_turns, **options)  # unknown options fail there
        self.opts = GraphOptions(program=program, agents=tuple(str(a) for a in agents), task=task,
                                 strict_boxed=bool(strict_boxed), grader=dict(grader or {}),
                                 max_calls=int(max_calls), max_tokens=int(max_tokens), wall_s=float(wall_s),
                                 min_calls=int(min_calls), workers=int(workers), wait_s=float(wait_s),
                                 local_rewards=str(local_rewards or ""))
        self.opts.check()
        self.agents = self.opts.agents
        # the grader: MetaAgent-X's outcome grading (math-verify / hidden tests), reused as it is
        self._grader = AutoEvolEnv(task=task, strict_boxed=strict_boxed, grader=grader)
        self.answer: str | None = None
        self.outcome = 0.0

    def reset(self, problem: dict[str, Any], seed: int) -> None:
        self._grader.reset(problem, seed)
        self.problem = dict(problem)
        self.turn = 0
        self.answer, self.outcome = None, 0.0

    @property
    def question(self) -> str:
        """The task as the grader states it (code tasks: with the signature to complete)."""
        return self._grader.question

    @property
    def program_problem(self) -> dict[str, Any]:
        """The problem as the program (and local_rewards) get it: the dataset row, plus the task as
        the grader states it under `task` (code: with the signature to complete)."""
        return {"task": self.question, **self.problem}

    def grade(self, answer: Any) -> float:
        """Outcome in [0, 1] of a final answer; garbage and None give 0. Thread-safe."""
        return self._grader.grade(answer)

    # the turn-based seam: the program makes the prompts, so only the final answer is a step
    def observation(self, agent: str) -> list[dict[str, str]]:
        raise KeyError("graph: prompts come from the user's program; use rollout.strategy=graph")

    def step(self, agent: str, action: str) -> StepResult:
        self.answer = action if isinstance(action, str) else None
        self.outcome = self.grade(action)
        return StepResult(self.outcome, {"answer": self.answer, "outcome": self.outcome})

    @property
    def done(self) -> bool:
        return self.answer is not None or self.turn >= self.max_turns

    def team_reward(self) -> float:
        return self.outcome

    def render(self) -> str:
        return f"Problem: {self.question}\nAnswer: {self.answer} (outcome {self.outcome})"
