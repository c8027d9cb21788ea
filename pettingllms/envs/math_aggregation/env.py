"""Math aggregation (the reference's math_aggregation): `sampler_1` and `sampler_2` each answer
the problem on their own, then the `aggregator` reads both replies and gives the final answer.

Turn order sampler_1 -> sampler_2 -> aggregator. The samplers see only the problem (two
independent samples); the aggregator sees the problem and both replies (clipped) with the
answers read from them. The episode ends once the aggregator has given an answer, or after
`max_turns` turns (a later turn shows everyone the aggregator's last reply).

Rewards (1.0 or 0.0, judged by `verify.answers_equal` against the problem's `answer`)
  local          the acting agent's own answer is correct (\\boxed{}, or unless `strict_boxed`
                 the reply's last number).
  team_reward()  the team's latest answer is correct: the aggregator's once it has answered,
                 before that the last sampler's; the final team reward is the aggregator's.
"""
from __future__ import annotations

from typing import Any

from pettingllms.envs.base import StepResult, register_env
from pettingllms.envs.math.env import _MathBase
from pettingllms.envs.math.prompts import REASONER_SYSTEM, SHOWN_ANSWER_CHARS, clip

SAMPLERS = ("sampler_1", "sampler_2")
SHOWN_REPLY_CHARS = 600  # how much of a sampler's reply the aggregator reads

AGGREGATOR_SYSTEM = (
    "You check two solutions of a math problem and give the final answer. Think briefly about which "
    "solution is right (or solve it yourself), then give the final answer in \\boxed{}, for example "
    "\\boxed{12}."
)


@register_env("math_aggregation")
class MathAggregationEnv(_MathBase):
    agents = (*SAMPLERS, "aggregator")

    def __init__(self, max_turns: int = 1, strict_boxed: bool = False, **options: Any) -> None:
        super().__init__(max_turns=max_turns, strict_boxed=strict_boxed, **options)

    def _clear(self) -> None:
        self.replies: dict[str, str] = {}
        self.answers: dict[str, str | None] = {}
        self.latest: str | None = None  # the agent whose answer is the team's now

    def observation(self, agent: str) -> list[dict[str, str]]:
        if agent not in self.agents:
            raise KeyError(f"unknown agent {agent!r}; agents are {list(self.agents)}")
        parts = [f"Problem: {self.question}"]
        if agent == "aggregator":
            for i, s in enumerate(SAMPLERS, 1):
                parts.append(f"Solution {i}:\n{clip(self.replies.get(s), SHOWN_REPLY_CHARS, keep='tail')}\n"
                             f"(answer read from it: {clip(self.answers.get(s), SHOWN_ANSWER_CHARS)})")
            parts.append("Give the final answer in \\boxed{}.")
        elif "aggregator" in self.answers:  # a later turn: the aggregator gave no answer last time
            parts.append(f"The aggregator's last reply had no answer. Your last answer: "
                         f"{clip(self.answers.get(agent), SHOWN_ANSWER_CHARS)}. Solve it again.")
        return [{"role": "system", "content": AGGREGATOR_SYSTEM if agent == "aggregator" else REASONER_SYSTEM},
                {"role": "user", "content": "\n\n".join(parts)}]

    def step(self, agent: str, action: str) -> StepResult:
        refused = self._refuse(agent)
        if refused is not None:
            return refused
        self.replies[agent] = action if isinstance(action, str) else ""
        answer = self._reasoner_answer(action)
        self.answers[agent] = answer
        self.latest = agent
        correct = self._judge(answer)
        return StepResult(1.0 if correct else 0.0, {"answer": answer, "correct": correct})

    @property
    def done(self) -> bool:
        return self.answers.get("aggregator") is not None or self.turn >= self.max_turns

    def team_reward(self) -> float:
        return 1.0 if self.latest is not None and self._judge(self.answers.get(self.latest)) else 0.0

    def render(self) -> str:
        lines = [f"Problem: {self.question}", f"Gold: {self.gold}", f"Turn {self.turn}/{self.max_turns}"]
        lines += [f"{a}: {self.answers.get(a)}" for a in self.agents if a in self.answers]
        return "\n".join(lines)
