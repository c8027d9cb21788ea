"""Code env: a coder writes a solution, a tester writes unit tests (turn order coder -> tester).

Rewards (all execution goes through `pettingllms.sandbox`):
  coder local   pass ratio of its code on the hidden reference tests
  tester local  validity (fraction of its tests the *reference solution* passes)
                + catch_bonus if one of its valid tests fails a coder solution that the
                  reference tests also fail
  team          hidden-test pass ratio of the current (final) code
The episode ends when the tester's tests all pass on the coder's code, or at max_turns.

`code_single`: one `solver` agent writes the solution and its own tests in one answer;
local reward = 0.5 * hidden pass ratio + 0.5 * validity of its tests.
"""
from __future__ import annotations

import json
from typing import Any

from pettingllms.envs.base import MultiAgentEnv, StepResult, register_env
from pettingllms.envs.code import prompts
from pettingllms.envs.code.execution import Outcome, pass_ratio, run_tests, solution_program
from pettingllms.envs.code.parsing import extract_assert_tests, extract_code, extract_io_tests
from pettingllms.sandbox import SandboxLimits


def _load_problem(problem: dict[str, Any]) -> dict[str, Any]:
    p = dict(problem)
    tests = p.get("tests")
    if isinstance(tests, str):
        tests = json.loads(tests)
    if p.get("kind") not in ("function", "io") or not isinstance(tests, list) or not tests:
        raise ValueError(f"code problem {p.get('id')!r} needs kind function|io and a "
                         "non-empty tests list")
    if p["kind"] == "function" and not p.get("entry_point"):
        raise ValueError(f"function problem {p.get('id')!r} has no entry_point")
    p["tests"] = [t if isinstance(t, str) else {"input": str(t["input"]),
                                                  "output": str(t["output"])} for t in tests]
    for key in ("question", "starter", "reference", "entry_point"):
        p[key] = str(p.get(key) or "")
    return p


class _CodeEnvBase(MultiAgentEnv):
    """Shared state and scoring for the MAS and single-agent variants."""

    def __init__(self, max_turns: int = 3, max_tests: int = 6, catch_bonus: float = 0.5,
                 max_action_chars: int = 20_000, test_wall_s: float = 3.0,
                 test_memory_mb: int = 512, **options: Any) -> None:
        super().__init__(max_turns=max_turns, **options)
        self.max_tests = int(max_tests)
        self.catch_bonus = float(catch_bonus)
        self.max_action_chars = int(max_action_chars)
        self.limits = SandboxLimits(wall_s=float(test_wall_s), cpu_s=float(test_wall_s),
                                    memory_mb=int(test_memory_mb), max_output_bytes=200_000)
        self._clear()

    def _clear(self) -> None:
        self.code = ""
        self.tests: list = []  # generated tests (assert snippets or {input, output})
        self.tests_valid: list[bool] = []  # does the reference pass each generated test
        self.tests_on_code: list[Outcome] = []  # each generated test on the current code
        self.agreed = False
        self.log: list[str] = []
        self._hidden_cache: dict[str, float] = {}
        self._valid_cache: dict[str, bool] = {}

    def reset(self, problem: dict[str, Any], seed: int) -> None:
        self.problem = _load_problem(problem)
        self.turn = 0
        self._clear()

    # --- scoring ------------------------------------------------------------------------
    def _program(self, code: str) -> str:
        return solution_program(self.problem["kind"], self.problem["starter"], code)

    def hidden_ratio(self, code: str) -> float:
        if code not in self._hidden_cache:
            outcomes = run_tests(self.problem["kind"], self._program(code),
                                 self.problem["tests"], self.limits)
            self._hidden_cache[code] = pass_ratio(outcomes)
        return self._hidden_cache[code]

    def _validity(self, tests: list) -> list[bool]:
        """Run each generated test on the real reference solution (cached per test)."""
        ref = self.problem["reference"]
        if not ref.strip():
            return [False] * len(tests)  # no reference (e.g. LiveCodeBench): no validity credit
        keys = [json.dumps(t, sort_keys=True) for t in tests]
        todo = [(k, t) for k, t in zip(keys, tests) if k not in self._valid_cache]
        if todo:
            outcomes = run_tests(self.problem["kind"], ref, [t for _, t in todo], self.limits)
            for (k, _), o in zip(todo, outcomes):
                self._valid_cache[k] = o.passed
        return [self._valid_cache[k] for k in keys]

    def _rerun_tests_on_code(self) -> None:
        self.tests_on_code = run_tests(self.problem["kind"], self._program(self.code),
                                       self.tests, self.limits) if self.tests else []
        self.agreed = bool(self.code.strip() and self.tests_on_code
                           and all(o.passed for o in self.tests_on_code))

    def _parse_tests(self, action: str, tests_block_only: bool = False) -> list:
        if self.problem["kind"] == "function":
            # `assert True` would be "valid" (the reference passes it) and test nothing
            return extract_assert_tests(action, self.max_tests, tests_block_only,
                                        uses=self.problem["entry_point"])
        return extract_io_tests(action, self.max_tests, tests_block_only)

    def _entry_point(self) -> str | None:
        """The function a function task asks for (the solution block must define it)."""
        return self.problem["entry_point"] if self.problem["kind"] == "function" else None

    def _usable(self, action: Any) -> str:
        """Raw model text, or "" when it is not text or too long to be a sane answer."""
        if not isinstance(action, str) or len(action) > self.max_action_chars:
            return ""
        return action

    def _failures(self) -> list[tuple[str, str]]:
        return [(self._show_test(t), o.detail) for t, o in zip(self.tests, self.tests_on_code)
                if not o.passed]

    def _show_test(self, test) -> str:
        if isinstance(test, str):
            return test
        return f"input: {test['input'][:300]!r}\nexpected output: {test['output'][:300]!r}"

    # --- episode ------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.agreed or self.turn >= self.max_turns

    def team_reward(self) -> float:
        return self.hidden_ratio(self.code) if self.problem else 0.0

    def render(self) -> str:
        p = self.problem
        lines = [f"[{self.name}] {p.get('id', '?')} ({p.get('kind', '?')}) "
                 f"turn {self.turn}/{self.max_turns}"]
        lines.append("code:\n" + (self.code or "(none)"))
        if self.tests:
            lines.append(f"generated tests ({len(self.tests)}):")
            for t, v, o in zip(self.tests, self.tests_valid, self.tests_on_code):
                mark = ("valid" if v else "INVALID") + (", passes code" if o.passed else
                                                         f", fails code: {o.detail}")
                lines.append(f"  [{mark}] " + self._show_test(t).replace("\n", "\n    "))
        if p:
            lines.append(f"hidden pass ratio: {self.team_reward():.3f}   agreed: {self.agreed}")
        lines += self.log
        return "\n".join(lines)


@register_env("code")
class CodeEnv(_CodeEnvBase):
    agents = ("coder", "tester")

    def observation(self, agent: str) -> list[dict[str, str]]:
        if agent == "coder":
            return [{"role": "system", "content": prompts.CODER_SYSTEM},
                    {"role": "user", "content": prompts.coder_message(
                        self.problem, self.code, self._failures())}]
        if agent == "tester":
            return [{"role": "system", "content": prompts.TESTER_SYSTEM},
                    {"role": "user", "content": prompts.tester_message(
                        self.problem, self.code, self.max_tests, self._failures(),
                        had_tests=bool(self.tests))}]
        raise KeyError(f"code env has agents {self.agents}, not {agent!r}")

    def step(self, agent: str, action: str) -> StepResult:
        text = self._usable(action)
        if agent == "coder":
            self.code = extract_code(text, self._entry_point())
            ratio = self.hidden_ratio(self.code)
            self._rerun_tests_on_code()
            self.log.append(f"turn {self.turn} coder: code {'found' if self.code else 'MISSING'},"
                            f" hidden pass {ratio:.3f}")
            return StepResult(ratio, {"hidden_pass": ratio, "code_found": bool(self.code),
                                      "agreed": self.agreed})
        if agent == "tester":
            self.tests = self._parse_tests(text)
            self.tests_valid = self._validity(self.tests)
            self._rerun_tests_on_code()
            validity = sum(self.tests_valid) / len(self.tests) if self.tests else 0.0
            caught = bool(self.code.strip()) and self.hidden_ratio(self.code) < 1.0 and any(
                v and not o.passed for v, o in zip(self.tests_valid, self.tests_on_code))
            reward = validity + (self.catch_bonus if caught else 0.0)
            self.log.append(f"turn {self.turn} tester: {len(self.tests)} tests, validity "
                            f"{validity:.3f}, caught bug {caught}")
            return StepResult(reward, {"num_tests": len(self.tests), "validity": validity,
                                       "caught_bug": caught, "agreed": self.agreed})
        raise KeyError(f"code env has agents {self.agents}, not {agent!r}")


@register_env("code_single")
class CodeSingleEnv(_CodeEnvBase):
    agents = ("solver",)

    def observation(self, agent: str) -> list[dict[str, str]]:
        if agent != "solver":
            raise KeyError(f"code_single has agents {self.agents}, not {agent!r}")
        return [{"role": "system", "content": prompts.SOLVER_SYSTEM},
                {"role": "user", "content": prompts.solver_message(
                    self.problem, self.code, self.max_tests, self._failures())}]

    def step(self, agent: str, action: str) -> StepResult:
        if agent != "solver":
            raise KeyError(f"code_single has agents {self.agents}, not {agent!r}")
        text = self._usable(action)
        self.code = extract_code(text, self._entry_point())
        self.tests = self._parse_tests(text, tests_block_only=True)
        self.tests_valid = self._validity(self.tests)
        self._rerun_tests_on_code()
        ratio = self.hidden_ratio(self.code)
        validity = sum(self.tests_valid) / len(self.tests) if self.tests else 0.0
        self.log.append(f"turn {self.turn} solver: hidden pass {ratio:.3f}, "
                        f"{len(self.tests)} tests, validity {validity:.3f}")
        return StepResult(0.5 * ratio + 0.5 * validity,
                          {"hidden_pass": ratio, "validity": validity,
                           "num_tests": len(self.tests), "agreed": self.agreed})
