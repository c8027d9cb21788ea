"""The turn logic and rewards shared by the stateful grid envs (sudoku, sokoban, plan_path).

Every grid env has the same two roles and the same turn logic:
  tool  writes a Python program (in a ```python block). The program gets the current
        state as JSON on stdin and prints an action sequence. The actions are scored on a
        COPY of the state; nothing is committed.
  plan  writes actions in text (a final line `Actions: ...`). They ARE committed.
Turn order is tool -> plan; each later turn shows each agent the other's last output and
the current state. The episode ends when the committed state is solved or at max_turns.
The `<env>_single` variant has only the `plan` role, whose prompt covers the whole task.

Rewards (documented once here, used by all three envs):
  local (tool on the copy, plan on the committed state), clipped to [-1, 2]:
      progress(after) - progress(before)
    + success_bonus (in (0, 1], only when this action sequence solves the task)
    - step_penalty * valid moves - invalid_penalty * invalid moves
    - format_penalty when no action could be read (or the program failed to run), or when
      there were more than max_actions actions (the rest are dropped)
  team: 1.0 when the committed state is solved else 0.0 (option team_reward="success"),
        or the env's shaped progress in [0, 1] (team_reward="progress"; 1.0 only when solved).
Subclasses supply the game: load, parse, apply, progress, render.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from pettingllms.envs.base import MultiAgentEnv, StepResult, register_env
from pettingllms.envs.grid.actions import ParsedActions, action_payload, has_marker, parse_moves
from pettingllms.envs.grid.render import clip_text
# one program extractor for every env that runs agent code
from pettingllms.envs.programs import MAX_PROGRAM_CHARS, extract_program
from pettingllms.sandbox import SandboxLimits, run_python

MAX_TOOL_OUTPUT_BYTES = 200_000  # a tool program printing more is stopped (and penalised)


@dataclass
class Outcome:
    """What one action sequence did to a state."""
    state: Any
    applied: int = 0
    invalid: int = 0
    notes: list[str] = field(default_factory=list)


class GridTaskEnv(MultiAgentEnv):
    """Tool/plan turn logic over a game supplied by the subclass (see module docstring)."""

    agents: tuple[str, ...] = ("tool", "plan")
    single_agent = False
    prompts: Any = None  # the env's prompts module: ROLE_PROMPTS, TASK, ACTION_FORMAT, TOOL_FORMAT

    def __init__(self, max_turns: int = 4, step_penalty: float = 0.01, invalid_penalty: float = 0.1,
                 format_penalty: float = 0.2, team_reward: str = "success", max_actions: int = 200,
                 tool_timeout_s: float = 5.0, **options: Any) -> None:
        super().__init__(max_turns=max_turns, **options)
        if team_reward not in ("success", "progress"):
            raise ValueError(f"team_reward must be 'success' or 'progress', got {team_reward!r}")
        if max_turns < 1 or max_actions < 1:
            raise ValueError("max_turns and max_actions must be >= 1")
        self.step_penalty = float(step_penalty)
        self.invalid_penalty = float(invalid_penalty)
        self.format_penalty = float(format_penalty)
        self.team_reward_mode = team_reward
        self.max_actions = int(max_actions)
        self.tool_timeout_s = float(tool_timeout_s)
        self.state: Any = None
        self.last: dict[str, dict[str, Any]] = {}
        self.history: list[str] = []

    # ---- game hooks (subclass) -------------------------------------------------------
    def load_state(self, problem: dict[str, Any]) -> Any:
        raise NotImplementedError

    def parse(self, payload: str | None, strict: bool) -> ParsedActions:
        raise NotImplementedError

    def apply(self, state: Any, actions: list[Any]) -> Outcome:
        """Apply actions in order to `state` (mutated in place); stop once solved."""
        raise NotImplementedError

    def progress(self, state: Any) -> float:
        """Shaped progress in [0, 1]; 1.0 exactly when solved."""
        raise NotImplementedError

    def solved(self, state: Any) -> bool:
        raise NotImplementedError

    def render_state(self, state: Any) -> str:
        raise NotImplementedError

    def state_json(self, state: Any) -> dict[str, Any]:
        """What the tool's program reads on stdin."""
        raise NotImplementedError

    def success_bonus(self, state: Any) -> float:
        return 1.0

    def format_actions(self, actions: list[Any]) -> str:
        return ", ".join(str(a) for a in actions)

    def reference_actions(self, state: Any) -> list[Any]:
        """A shortest action sequence that solves `state` (from the game's own solver), or [] when
        none is known; for supervised cold-start rows (envs/grid_cold_start.py), never for rollouts."""
        raise NotImplementedError(f"{type(self).__name__} has no reference solver")

    def describe_state(self, state: Any) -> str:
        """The state's key positions in words, shown under the grid: small models misread
        coordinates off a drawn grid far more often than they misplan (see easy_levels.md)."""
        return ""

    # ---- MultiAgentEnv ---------------------------------------------------------------
    def reset(self, problem: dict[str, Any], seed: int) -> None:
        self.problem = dict(problem)
        self.state = self.load_state(self.problem)
        self.turn = 0
        self.last = {}
        self.history = []

    @property
    def done(self) -> bool:
        return self.state is not None and (self.solved(self.state) or self.turn >= self.max_turns)

    def team_reward(self) -> float:
        if self.state is None:
            return 0.0
        if self.solved(self.state):
            return 1.0
        return self.progress(self.state) if self.team_reward_mode == "progress" else 0.0

    def render(self) -> str:
        return "" if self.state is None else self.render_state(self.state)

    def step(self, agent: str, action: str) -> StepResult:
        if agent not in self.agents:
            raise ValueError(f"{self.name}: unknown agent {agent!r}; agents are {self.agents}")
        if self.state is None:
            raise RuntimeError(f"{self.name}: step() before reset()")
        if self.done:
            return StepResult(0.0, {"ignored": "episode is over"})
        action = action if isinstance(action, str) else ""
        if agent == "tool":
            return self._tool_step(action)
        return self._plan_step(action)

    # ---- the two roles ---------------------------------------------------------------
    def _reward(self, before: float, out: Outcome, was_solved: bool) -> float:
        r = self.progress(out.state) - before
        if self.solved(out.state) and not was_solved:
            r += self.success_bonus(out.state)
        r -= self.step_penalty * out.applied + self.invalid_penalty * out.invalid
        return max(-1.0, min(2.0, r))

    def _run(self, parsed: ParsedActions, state: Any) -> tuple[float, Outcome]:
        before, was_solved = self.progress(state), self.solved(state)
        out = self.apply(state, parsed.actions)
        out.invalid += parsed.unknown
        reward = self._reward(before, out, was_solved)
        if parsed.truncated:  # more actions than max_actions: spam, not a plan
            reward = max(-1.0, reward - self.format_penalty)
        return reward, out

    def _info(self, parsed: ParsedActions, out: Outcome | None, **extra: Any) -> dict[str, Any]:
        info: dict[str, Any] = {"num_actions": len(parsed.actions), "truncated": parsed.truncated}
        if out is not None:
            info.update(applied=out.applied, invalid=out.invalid,
                        progress=round(self.progress(out.state), 4), solved=self.solved(out.state))
            if out.notes:
                info["notes"] = out.notes[:5]
        info.update(extra)
        return info

    def _tool_step(self, text: str) -> StepResult:
        code = extract_program(text)
        if code is None or len(code) > MAX_PROGRAM_CHARS:
            why = "no ```python block" if code is None else f"program over {MAX_PROGRAM_CHARS} characters"
            self.last["tool"] = {"error": why, "actions": []}
            return StepResult(-self.format_penalty, {"error": why})
        limits = SandboxLimits(wall_s=self.tool_timeout_s, cpu_s=self.tool_timeout_s,
                               max_output_bytes=MAX_TOOL_OUTPUT_BYTES)
        result = run_python(code, stdin=json.dumps(self.state_json(self.state)), limits=limits)
        if not result.ok:
            why = result.error or ("timeout" if result.timed_out else f"exit code {result.exit_code}")
            self.last["tool"] = {"error": f"program failed ({why}): {clip_text(result.stderr, 400)}",
                                 "actions": []}
            return StepResult(-self.format_penalty, {"error": f"program failed: {why}"})
        parsed = self.parse(action_payload(result.stdout, bare_ok=True), strict=False)
        if not parsed.actions:
            self.last["tool"] = {"error": "the program printed no actions", "actions": [],
                                 "stdout": clip_text(result.stdout, 400)}
            return StepResult(-self.format_penalty, self._info(parsed, None, error="no actions printed"))
        reward, out = self._run(parsed, copy.deepcopy(self.state))
        self.last["tool"] = {"actions": parsed.actions, "applied": out.applied, "invalid": out.invalid,
                             "solved": self.solved(out.state), "notes": out.notes[:3],
                             "progress": self.progress(out.state)}
        return StepResult(reward, self._info(parsed, out))

    def _plan_step(self, text: str) -> StepResult:
        payload = action_payload(text)
        parsed = self.parse(payload, strict=payload is None or not has_marker(text))
        if not parsed.actions:
            self.last["plan"] = {"error": "no actions found", "actions": []}
            self.history.append(f"turn {self.turn + 1}: no actions")
            return StepResult(-self.format_penalty, self._info(parsed, None, error="no actions found"))
        reward, out = self._run(parsed, self.state)
        self.state = out.state
        self.last["plan"] = {"actions": parsed.actions, "applied": out.applied, "invalid": out.invalid,
                             "notes": out.notes[:3]}
        self.history.append(f"turn {self.turn + 1}: {out.applied} applied, {out.invalid} invalid")
        return StepResult(reward, self._info(parsed, out))

    # ---- prompts ---------------------------------------------------------------------
    def _describe_last(self, agent: str, brief: bool = False) -> str:
        """`agent`'s last output for a prompt; `brief` (shown to the teammate): an error without
        the program's stderr, which only its author can act on and which derails a small model."""
        last = self.last.get(agent)
        if not last:
            return ""
        if last.get("error"):
            text = f"error: {last['error'].split(':', 1)[0] if brief else last['error']}"
        else:
            text = (f"actions: {clip_text(self.format_actions(last['actions']), 600)}\n"
                    f"{last['applied']} applied, {last['invalid']} invalid")
            if "solved" in last:
                text += f"; on a copy of the state this {'SOLVES' if last['solved'] else 'does not solve'}" \
                        f" the task (progress {last['progress']:.2f})"
        if last.get("notes"):
            text += "\nnotes: " + "; ".join(last["notes"])
        return text

    def observation(self, agent: str) -> list[dict[str, Any]]:
        if agent not in self.agents:
            raise ValueError(f"{self.name}: unknown agent {agent!r}")
        p = self.prompts
        role = "single" if self.single_agent else agent
        fields = self.prompt_fields()
        parts = [p.TASK.format(**fields), f"Current state (turn {self.turn + 1} of {self.max_turns}):\n{self.state_text()}"]
        if self.history:
            parts.append("Committed so far: " + "; ".join(self.history[-4:]))
        other = {"tool": "plan", "plan": "tool"}[agent]
        if not self.single_agent and other in self.last:
            title = ("The plan agent's last committed actions" if other == "plan" else
                     "The tool agent's program output (scored on a copy, NOT applied)")
            parts.append(f"{title}:\n{self._describe_last(other, brief=True)}")
        if agent in self.last:
            parts.append(f"Your last output:\n{self._describe_last(agent)}")
        if agent == "tool":
            parts.append(p.TOOL_FORMAT.format(state_json=json.dumps(self.state_json(self.state)), **fields))
        else:
            parts.append(p.ACTION_FORMAT.format(**fields))
        return [{"role": "system", "content": p.ROLE_PROMPTS[role]},
                {"role": "user", "content": self.user_content("\n\n".join(parts))}]

    def state_text(self) -> str:
        """The state as the prompt shows it: the drawn grid and its key positions in words."""
        text = self.render()
        described = self.describe_state(self.state) if self.state is not None else ""
        return text + "\n" + described if described else text

    def user_content(self, text: str) -> Any:
        """The user message's content (vision variants add the board's image: envs/grid/vision.py)."""
        return text

    def prompt_fields(self) -> dict[str, Any]:
        """Values for the `{...}` fields of the env's TASK prompt."""
        return {}


class MoveGridEnv(GridTaskEnv):
    """A grid env whose actions are U/D/L/R moves (sokoban, plan_path).

    The state is a dict with at least `moves` (valid moves made so far). Invalid moves
    leave the state unchanged. On success the bonus is path optimality:
    min(1, optimal_moves / moves), so shorter solutions earn more.
    """

    optimal_moves = 1

    def try_move(self, state: dict[str, Any], move: str) -> str | None:
        """Apply one move to `state` in place; return why it is invalid, or None."""
        raise NotImplementedError

    def parse(self, payload: str | None, strict: bool) -> ParsedActions:
        return parse_moves(payload, self.max_actions, strict=strict)

    def apply(self, state: dict[str, Any], actions: list[Any]) -> Outcome:
        out = Outcome(state)
        for i, move in enumerate(actions):
            if self.solved(state):
                out.notes.append(f"solved after move {i}; the remaining {len(actions) - i} were ignored")
                break
            why = self.try_move(state, move)
            if why is None:
                state["moves"] += 1
                out.applied += 1
            else:
                out.invalid += 1
                if len(out.notes) < 5:
                    out.notes.append(f"move {i + 1} ({move}) {why}")
        return out

    def success_bonus(self, state: dict[str, Any]) -> float:
        return min(1.0, self.optimal_moves / max(1, state["moves"]))


def register_variants(name: str, env_class: type) -> tuple[type, type]:
    """Register `name` (tool + plan) and `name`_single (one `plan` agent doing the whole task)."""
    # __module__: the env's own package, which is where its data builder is found (components.py)
    home = {"__module__": env_class.__module__}
    mas = register_env(name)(type(f"{env_class.__name__}MAS", (env_class,), {"agents": ("tool", "plan"), **home}))
    single = register_env(f"{name}_single")(type(f"{env_class.__name__}Single", (env_class,),
                                                 {"agents": ("plan",), "single_agent": True, **home}))
    return mas, single
