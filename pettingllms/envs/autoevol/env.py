"""`autoevol` (MetaAgent-X): a `designer` writes a multi-agent workflow for each problem and an
`executor` policy answers every LLM node of it; both are rewarded by the outcome.

The env holds one problem, the designer's prompt and the grader; the episode itself (M designs x
N executions per problem, every node call batched through the engine) is played by
`pettingllms.rollout.autoevol.AutoEvolRollout`. Graders are the math and code envs'
own: math answers are judged by math-verify against the gold answer (`\\boxed{}` or the last
number), code answers by the hidden tests' pass ratio (the code env's sandboxed runner).

Rewards (see AutoEvolRollout for where they are applied)
  executor  every node call of execution j gets outcome_j (its own execution's grade); a
            failed execution (broken design, budget hit) has outcome 0.
  designer  mean_j outcome_j over its N executions
            + format_valid * (fraction of its executions that ran to an answer)
            + format_missing if its reply holds no design (no ```python block)
With `mas.reward: published` (the released recipe's terms) the execution score is
  outcome_j + 0.4 if any node's output holds a <delivery>...</delivery> block
            + 0.4 if (math) a \\boxed{} answer that is not a bare placeholder name was given, or
              (code) a <solution>...</solution> block whose code parses (>= 10 characters);
the executor's node calls of execution j get that score and the designer the mean over its
executions (a reply without a design: 0). Both schemes are recorded in every sample's info.
Groups: designer by problem; executor by problem (`executor_group: question`, the published
recipe's choice: every node call of every design of one problem is compared with the others)
or by (problem, design) (`executor_group: design`).

`step()` applies the same rules to one action, so the env can be played by hand: the designer's
action is its reply (local reward = the format terms that need no execution), the executor's is a
final answer (local reward = its grade).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from pettingllms.envs.base import MultiAgentEnv, StepResult, register_env
from pettingllms.envs.code.env import CodeSingleEnv
from pettingllms.envs.code.parsing import extract_code
from pettingllms.envs.math.verify import extract_answer, is_correct
from pettingllms.envs.programs import MAX_PROGRAM_CHARS, extract_program

TASKS = ("math", "code")
PUBLISHED_TERM = 0.4  # each of the published recipe's two format terms
_DELIVERY = re.compile(r"<delivery>.*?</delivery>", re.DOTALL)
_SOLUTION = re.compile(r"<solution>\s*(.*?)\s*</solution>", re.DOTALL)
_PLACEHOLDER = re.compile(r"^[{}]*[a-zA-Z_][a-zA-Z_0-9]*[{}]*$")
EXECUTOR_GROUPS = ("question", "design")


@dataclass
class AutoEvolOptions:
    """`env.options` of autoevol (checked here; unknown keys fail as a ConfigError)."""
    task: str = "math"  # math | code: which grader and which problem fields
    designs: int = 4  # M designs per problem
    executions: int = 4  # N executions per design
    executor_group: str = "question"  # question | design
    format_valid: float = 0.1  # designer bonus x fraction of its executions that ran to an answer
    format_missing: float = -0.1  # designer term when its reply holds no design at all
    strict_boxed: bool = False  # math: read an unboxed answer by its last number
    grader: dict[str, Any] = field(default_factory=dict)  # code: test_wall_s, test_memory_mb

    def check(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"autoevol: task must be one of {TASKS}, got {self.task!r}")
        if self.executor_group not in EXECUTOR_GROUPS:
            raise ValueError(f"autoevol: executor_group must be one of {EXECUTOR_GROUPS}, "
                             f"got {self.executor_group!r}")
        if int(self.designs) < 1 or int(self.executions) < 1:
            raise ValueError("autoevol: designs and executions must be >= 1")


def design_source(reply: Any) -> str | None:
    """The workflow program in a designer's reply (its last ```python block), or None."""
    code = extract_program(reply if isinstance(reply, str) else "")
    if code is None or not code.strip() or len(code) > MAX_PROGRAM_CHARS:
        return None
    return code


@register_env("autoevol")
class AutoEvolEnv(MultiAgentEnv):
    agents = ("designer", "executor")

    def __init__(self, max_turns: int = 1, task: str = "math", designs: int = 4, executions: int = 4,
                 executor_group: str = "question", format_valid: float = 0.1, format_missing: float = -0.1,
                 strict_boxed: bool = False, grader: dict[str, Any] | None = None, **options: Any) -> None:
        super().__init__(max_turns=max_turns, **options)  # unknown options fail there
        self.opts = AutoEvolOptions(task=task, designs=int(designs), executions=int(executions),
                                    executor_group=executor_group, format_valid=float(format_valid),
                                    format_missing=float(format_missing), strict_boxed=bool(strict_boxed),
                                    grader=dict(grader or {}))
        self.opts.check()
        self._code = CodeSingleEnv(**dict(self.opts.grader)) if self.opts.task == "code" else None
        self.question = ""
        self.gold = ""
        self.design_format = "pettingllms"  # mas.design_format; the autoevol rollout sets it
        self._clear()

    def _clear(self) -> None:
        self.design: str | None = None
        self.answer: str | None = None
        self.outcome = 0.0
        self.designed = False

    # ------------------------------------------------------------------ problem
    def reset(self, problem: dict[str, Any], seed: int) -> None:
        if not isinstance(problem, dict) or "question" not in problem:
            raise ValueError(f"autoevol: a problem needs a 'question', got "
                             f"{sorted(problem) if isinstance(problem, dict) else type(problem).__name__}")
        self.problem = dict(problem)
        self.turn = 0
        self._clear()
        if self._code is not None:
            self._code.reset(problem, seed)
            self.question = self._task_text(self._code.problem)
            self.gold = ""
        else:
            if "answer" not in problem:
                raise ValueError("autoevol (math): a problem needs an 'answer'")
            self.question = str(problem["question"])
            self.gold = str(problem["answer"])

    @staticmethod
    def _task_text(p: dict[str, Any]) -> str:
        """What the workflow is asked: the statement, plus the signature for function tasks."""
        if p["kind"] == "function" and p["starter"].strip():
            return (f"{p['question']}\n\nComplete this Python function (answer with the whole "
                    f"function in a ```python block):\n```python\n{p['starter']}\n```")
        return p["question"] + "\n\nAnswer with a complete Python program in a ```python block."

    def grade(self, answer: Any) -> float:
        """Outcome reward of a final answer in [0, 1]; garbage and None give 0. Thread-safe."""
        if not isinstance(answer, str) or not answer.strip():
            return 0.0
        if self._code is not None:
            code = extract_code(answer)
            return float(self._code.hidden_ratio(code)) if code else 0.0
        return 1.0 if is_correct(extract_answer(answer, self.opts.strict_boxed), self.gold) else 0.0

    def format_terms(self, reply: Any, ran_fraction: float) -> float:
        """The designer's format terms: a bonus for designs that run, a term for no design."""
        if design_source(reply) is None:
            return float(self.opts.format_missing)
        return float(self.opts.format_valid) * float(ran_fraction)

    def published_terms(self, outputs: list[str], answer: Any) -> tuple[float, float]:
        """(delivery, solution) terms of `mas.reward: published` for one execution, read from its
        node outputs and its final answer."""
        text = "\n".join([str(o) for o in outputs] + ([answer] if isinstance(answer, str) else []))
        delivery = PUBLISHED_TERM if _DELIVERY.search(text) else 0.0
        if self._code is not None:
            blocks = _SOLUTION.findall(text)
            code = extract_code(blocks[-1]) or blocks[-1] if blocks else ""
            try:
                ast.parse(code)
                parses = len(code.strip()) >= 10
            except (SyntaxError, ValueError):
                parses = False
            return delivery, PUBLISHED_TERM if parses else 0.0
        final = extract_answer(answer if isinstance(answer, str) else "", False) or ""
        boxed = "\\boxed{" in text and bool(final.strip()) and not _PLACEHOLDER.match(final.strip())
        return delivery, PUBLISHED_TERM if boxed else 0.0

    # ------------------------------------------------------------------ seam
    def observation(self, agent: str) -> list[dict[str, str]]:
        if agent == "designer":
            from pettingllms.mas.prompts import designer_messages
            if self.design_format == "pettingllms":
                return designer_messages(self.question)
            return designer_messages(self.question, design_format=self.design_format)
        if agent == "executor":
            raise KeyError("autoevol: the executor's prompts are the design's nodes; "
                           "the autoevol rollout builds them")
        raise KeyError(f"autoevol has agents {self.agents}, not {agent!r}")

    def step(self, agent: str, action: str) -> StepResult:
        if agent == "designer":
            self.design = design_source(action)
            self.designed = True
            return StepResult(self.format_terms(action, 0.0), {"design_found": self.design is not None})
        if agent == "executor":
            self.answer = action if isinstance(action, str) else None
            self.outcome = self.grade(action)
            return StepResult(self.outcome, {"answer": self.answer, "outcome": self.outcome})
        return StepResult(0.0, {"error": f"unknown agent {agent!r}; agents are {list(self.agents)}"})

    @property
    def done(self) -> bool:
        return self.answer is not None or self.turn >= self.max_turns

    def team_reward(self) -> float:
        return self.outcome

    def render(self) -> str:
        return (f"Problem: {self.question}\nGold: {self.gold}\n"
                f"Design: {'found' if self.design else ('missing' if self.designed else '-')}\n"
                f"Answer: {self.answer} (outcome {self.outcome})")
