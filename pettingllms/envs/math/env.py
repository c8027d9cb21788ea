"""Math env: a Python `tool` agent and a `reasoner` agent solve one problem together.

Turn order is tool -> reasoner. The episode ends after a turn in which their answers
agree (math-equivalent), or after `max_turns` turns.

Answers
  tool      writes a program (last ```python block; see `extract_program`); it runs in
            `pettingllms.sandbox` (child process, time/memory/output limits). Its answer
            is the program's last printed line (see `tool_answer_from_output`).
  reasoner  answers in \\boxed{}. Unless `strict_boxed`, a reply without \\boxed{} is
            read by its last number instead: a reward-shaping choice for small models
            that seldom box their answer.

Rewards (1.0 or 0.0, judged by `verify.answers_equal` against the problem's `answer`)
  local (step's return)  the acting agent's own answer is correct.
  team_reward()          the team's current answer is correct: the reasoner's latest
                         answer once the reasoner has acted, before that the tool's.
                         Since the reasoner acts last in every turn, the final team
                         reward is the correctness of the reasoner's final answer,
                         which is the agreed answer when the episode ended by agreement.
  Garbage, empty or huge replies yield no answer, hence 0; nothing raises.

`math_single`: one agent `reasoner` (the baseline), answers in \\boxed{}; it ends as soon
as it gives an answer (like the MAS ends on agreement, without looking at the gold
answer); a reply without one gets another turn, which shows it its last reply's
outcome, up to `max_turns`. Local = team = correctness.
"""
from __future__ import annotations

import re
from typing import Any

from pettingllms.envs.base import MultiAgentEnv, StepResult, register_env
from pettingllms.envs.math import prompts
from pettingllms.envs.programs import MAX_PROGRAM_CHARS, extract_program
from pettingllms.envs.math.verify import MAX_ANSWER_CHARS, answers_equal, extract_answer, extract_boxed, extract_final_number
from pettingllms.sandbox import SandboxLimits, run_python

PROGRAM_OUTPUT_BYTES = 64_000  # what a program may print before the sandbox stops it

_WORD = re.compile(r"[A-Za-z]{3,}")
_MATH_WORDS = {"sqrt", "frac", "boxed", "log", "exp", "sin", "cos", "tan", "pi", "oo", "inf"}


def tool_answer_from_output(stdout: str) -> str | None:
    """The answer a program printed: its last non-empty line. A \\boxed{} in it wins;
    a line of prose ("The answer is 42") is read by its last number."""
    lines = [ln.strip() for ln in (stdout or "").splitlines() if ln.strip()]
    if not lines:
        return None
    line = lines[-1]
    boxed = extract_boxed(line)
    if boxed:
        line = boxed
    elif any(w.lower() not in _MATH_WORDS for w in _WORD.findall(line)):
        line = extract_final_number(line) or ""
    return line if 0 < len(line) <= MAX_ANSWER_CHARS else None


def _describe_run(result) -> str:
    """What the tool is shown of its last run: output, or why it failed."""
    if result.ok:
        return result.stdout.strip() or "(nothing)"
    if result.error:
        return f"(stopped: {result.error})"
    err = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    return f"(error: {err[-1] if err else f'exit code {result.exit_code}'})"


class _MathBase(MultiAgentEnv):
    def __init__(self, max_turns: int = 2, strict_boxed: bool = False, **options: Any) -> None:
        super().__init__(max_turns=max_turns, **options)
        if int(max_turns) < 1:
            raise ValueError(f"{type(self).__name__}: max_turns must be >= 1, got {max_turns}")
        self.strict_boxed = bool(strict_boxed)
        self.question = ""
        self.gold = ""
        self._clear()

    def _clear(self) -> None:
        """Forget the episode's answers (subclasses hold their own)."""

    def reset(self, problem: dict[str, Any], seed: int) -> None:
        if not isinstance(problem, dict) or "question" not in problem or "answer" not in problem:
            raise ValueError(f"{self.name}: a problem needs 'question' and 'answer', got "
                             f"{sorted(problem) if isinstance(problem, dict) else type(problem).__name__}")
        self.problem = dict(problem)
        self.question = str(problem["question"])
        self.gold = str(problem["answer"])
        self.turn = 0
        self._clear()

    def _judge(self, answer: str | None) -> bool:
        return answer is not None and answers_equal(self.gold, answer)

    def _reasoner_answer(self, action: Any) -> str | None:
        answer = extract_answer(action if isinstance(action, str) else "", self.strict_boxed)
        return answer if answer and len(answer) <= MAX_ANSWER_CHARS else None

    def _refuse(self, agent: str) -> StepResult | None:
        if agent not in self.agents:
            return StepResult(0.0, {"error": f"unknown agent {agent!r}; agents are {list(self.agents)}"})
        if self.done:
            return StepResult(0.0, {"error": "episode is over"})
        return None


@register_env("math")
class MathEnv(_MathBase):
    agents = ("tool", "reasoner")

    def __init__(self, max_turns: int = 2, strict_boxed: bool = False, timeout_s: float = 5.0,
                 memory_mb: int = 512, **options: Any) -> None:
        super().__init__(max_turns=max_turns, strict_boxed=strict_boxed, **options)
        self.limits = SandboxLimits(wall_s=float(timeout_s), cpu_s=float(timeout_s),
                                    memory_mb=int(memory_mb), max_output_bytes=PROGRAM_OUTPUT_BYTES)

    def _clear(self) -> None:
        self.program: str | None = None
        self.program_output = ""
        self.answers: dict[str, str | None] = {"tool": None, "reasoner": None}
        self.correct = {"tool": False, "reasoner": False}
        self.reasoner_acted = False
        self.agreed = False

    def observation(self, agent: str) -> list[dict[str, str]]:
        if agent == "tool":
            system = prompts.TOOL_SYSTEM
            user = prompts.tool_user(self.question, self.turn, self.program, self.program_output,
                                     self.answers["tool"], self.answers["reasoner"])
        elif agent == "reasoner":
            system = prompts.REASONER_SYSTEM
            user = prompts.reasoner_user(self.question, self.turn, self.answers["reasoner"],
                                         self.answers["tool"])
        else:
            raise KeyError(f"unknown agent {agent!r}; agents are {list(self.agents)}")
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def step(self, agent: str, action: str) -> StepResult:
        refused = self._refuse(agent)
        if refused is not None:
            return refused
        info: dict[str, Any] = {}
        if agent == "tool":
            answer = self._run_tool(action, info)
        else:
            answer = self._reasoner_answer(action)
            self.reasoner_acted = True
        self.answers[agent] = answer
        self.correct[agent] = self._judge(answer)
        if agent == "reasoner":
            tool = self.answers["tool"]
            self.agreed = answer is not None and tool is not None and answers_equal(tool, answer)
        info.update(answer=answer, correct=self.correct[agent], agreed=self.agreed)
        return StepResult(1.0 if self.correct[agent] else 0.0, info)

    def _run_tool(self, action: Any, info: dict[str, Any]) -> str | None:
        code = extract_program(action if isinstance(action, str) else "")
        self.program = code
        if code is None:
            self.program_output = "(no program found)"
            info["program_error"] = "no_program"
            return None
        if len(code) > MAX_PROGRAM_CHARS:
            self.program_output = "(program too long; not run)"
            info["program_error"] = "program_too_long"
            return None
        result = run_python(code, "", self.limits)
        self.program_output = _describe_run(result)
        info.update(program_ok=result.ok, program_error=result.error or (None if result.ok else "exit"),
                    program_wall_s=round(result.wall_s, 3))
        return tool_answer_from_output(result.stdout) if result.ok else None

    @property
    def done(self) -> bool:
        return self.agreed or self.turn >= self.max_turns

    def team_reward(self) -> float:
        current = "reasoner" if self.reasoner_acted else "tool"
        return 1.0 if self.correct[current] else 0.0

    def render(self) -> str:
        return (f"Problem: {self.question}\nGold: {self.gold}\nTurn {self.turn}/{self.max_turns}\n"
                f"Tool program output: {prompts.clip(self.program_output, 200, 'tail')}\n"
                f"Tool answer: {self.answers['tool']} ({'right' if self.correct['tool'] else 'wrong'})\n"
                f"Reasoner answer: {self.answers['reasoner']} "
                f"({'right' if self.correct['reasoner'] else 'wrong'})\nAgreed: {self.agreed}")


@register_env("math_single")
class MathSingleEnv(_MathBase):
    agents = ("reasoner",)

    def __init__(self, max_turns: int = 1, strict_boxed: bool = False, **options: Any) -> None:
        super().__init__(max_turns=max_turns, strict_boxed=strict_boxed, **options)

    def _clear(self) -> None:
        self.answer: str | None = None
        self.correct = False

    def observation(self, agent: str) -> list[dict[str, str]]:
        if agent != "reasoner":
            raise KeyError(f"unknown agent {agent!r}; agents are {list(self.agents)}")
        return [{"role": "system", "content": prompts.SINGLE_SYSTEM},
                {"role": "user", "content": prompts.single_user(self.question, self.turn, self.answer)}]

    def step(self, agent: str, action: str) -> StepResult:
        refused = self._refuse(agent)
        if refused is not None:
            return refused
        self.answer = self._reasoner_answer(action)
        self.correct = self._judge(self.answer)
        return StepResult(1.0 if self.correct else 0.0, {"answer": self.answer, "correct": self.correct})

    @property
    def done(self) -> bool:
        return self.answer is not None or self.turn >= self.max_turns

    def team_reward(self) -> float:
        return 1.0 if self.correct else 0.0

    def render(self) -> str:
        return (f"Problem: {self.question}\nGold: {self.gold}\nTurn {self.turn}/{self.max_turns}\n"
                f"Answer: {self.answer} ({'right' if self.correct else 'wrong'})")
