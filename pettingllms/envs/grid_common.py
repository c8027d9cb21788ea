"""Shared pieces of the stateful grid envs (sudoku, sokoban, plan_path).

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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pettingllms.config import ConfigError
from pettingllms.envs.base import MultiAgentEnv, StepResult, register_env
from pettingllms.envs.dataset import new_output_dir
# one program extractor for every env that runs agent code
from pettingllms.envs.programs import MAX_PROGRAM_CHARS, extract_program

# Seeds: train rows use [base, base + SPLIT_SPAN), test rows [base + SPLIT_SPAN, base + 2*SPLIT_SPAN)
# with base = seed * 2 * SPLIT_SPAN, so the two splits never share a generation seed.
SPLIT_SPAN = 5_000_000

MAX_ECHO_CHARS = 1200  # how much of another agent's output is shown back in a prompt
MAX_TOOL_OUTPUT_BYTES = 200_000  # a tool program printing more is stopped (and penalised)
MAX_PARSE_CHARS = 20_000  # action payloads longer than this are cut before tokenising

MOVE_DELTAS = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_MOVE_WORDS = {"u": "U", "up": "U", "d": "D", "down": "D", "l": "L", "left": "L", "r": "R", "right": "R"}


def split_seed(split: str, index: int, seed: int = 0) -> int:
    """The generation seed of row `index` of `split` ('train' or 'test')."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not 0 <= index < SPLIT_SPAN:
        raise ValueError(f"row index {index} outside [0, {SPLIT_SPAN})")
    return seed * 2 * SPLIT_SPAN + (SPLIT_SPAN if split == "test" else 0) + index


def choose_tier(rng: Any, tiers: dict[str, tuple]) -> tuple[str, tuple]:
    """A tier drawn by its share (the last field of each tier's tuple) and its other fields."""
    names = list(tiers)
    name = rng.choices(names, weights=[tiers[t][-1] for t in names])[0]
    return name, tiers[name][:-1]


def preset_of(out_dir: Any, preset: str | None, presets: dict[str, Any]) -> str:
    """The data preset named, else the one the folder name ends with (datasets/sudoku_easy ->
    easy), else "default"; so `env.data=<env>_easy` builds the easy level on first use."""
    name = preset or ("easy" if Path(out_dir).name.endswith("_easy") else "default")
    if name not in presets:
        raise ValueError(f"unknown data preset {name!r}; choose from {sorted(presets)}")
    return name


def build_splits(out_dir: Any, env: str, make_row: Callable[[int], dict[str, Any]], *, n_train: int,
                 n_test: int, seed: int = 0, key: tuple[str, ...] = ("puzzle",)) -> dict[str, Any]:
    """Write train.parquet / test.parquet of procedurally generated rows and report them.

    `make_row(generation_seed)` returns one row (JSON-string columns for structured data).
    Seeds come from disjoint ranges (`split_seed`); a row whose `key` columns repeat an
    earlier row (of either split) is skipped, so no test puzzle also appears in train.
    """
    import pandas as pd

    out = new_output_dir(out_dir)
    seen: set[str] = set()
    report: dict[str, Any] = {"env": env, "seed": seed, "generator": "own seeded generator"}
    for split, n in (("train", n_train), ("test", n_test)):
        rows, skipped, index = [], 0, 0
        while len(rows) < n:
            gen_seed = split_seed(split, index, seed)
            index += 1
            row = make_row(gen_seed)
            fingerprint = json.dumps([row[k] for k in key])
            if fingerprint in seen:
                skipped += 1
                if skipped > 20 * max(n, 1):
                    raise RuntimeError(f"{env}: too many duplicate {split} rows; widen the generator")
                continue
            seen.add(fingerprint)
            rows.append({"id": f"{env}-{split}-{len(rows)}", "seed": gen_seed, **row})
        pd.DataFrame(rows).to_parquet(out / f"{split}.parquet", index=False)
        report[split] = {"rows": len(rows), "duplicates_skipped": skipped,
                         "seeds": [split_seed(split, 0, seed), split_seed(split, index - 1, seed)] if index else []}
    return report


# ----------------------------------------------------------------------------- parsing

_MARKER = re.compile(r"^[\s>*#_`-]*(?:final\s+)?(?:actions?|moves?)\s*[*_`]*\s*[:=]", re.I | re.M)


def action_payload(text: str, bare_ok: bool = False) -> str | None:
    """The text after the last `Actions:` marker that has any, up to the next blank line (so an
    explanation after the actions is not read as actions).

    Without a marker: the last non-empty line, which the env accepts only if every token in
    it is an action; with `bare_ok` (program output) the whole text.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    payload = None
    for marker in _MARKER.finditer(text):
        rest = text[marker.end():marker.end() + MAX_PARSE_CHARS].lstrip(" \t\r\n")
        rest = re.split(r"\n[ \t\r]*\n", rest, maxsplit=1)[0]
        if rest.strip() or payload is None:  # a reply cut off right after its last marker keeps the one before
            payload = rest
    if payload is not None:
        return payload
    if bare_ok:
        return text[-MAX_PARSE_CHARS:]
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:MAX_PARSE_CHARS] if lines else None


@dataclass
class ParsedActions:
    actions: list[Any] = field(default_factory=list)
    unknown: int = 0  # tokens that were not actions (counted as invalid moves)
    truncated: int = 0  # actions beyond max_actions, dropped


_MOVE_SPLIT = re.compile(r"[\s,;.\[\]()\"'`{}|/>*+-]+")


def parse_moves(payload: str | None, max_actions: int, strict: bool = False) -> ParsedActions:
    """U/D/L/R moves from a payload: 'U, D, L', 'UUDL', '["up", "left"]', 'Up Right'.

    `strict`: the payload came without a marker, so it counts only if every token is a move.
    """
    out = ParsedActions()
    if not payload:
        return out
    for token in _MOVE_SPLIT.split(payload):
        if not token:
            continue
        low = token.lower()
        if low in _MOVE_WORDS:
            moves = [_MOVE_WORDS[low]]
        elif set(low) <= set("udlr"):
            moves = [c.upper() for c in low]
        else:
            if strict:
                return ParsedActions()
            out.unknown += 1
            continue
        for m in moves:
            if len(out.actions) < max_actions:
                out.actions.append(m)
            else:
                out.truncated += 1
    return out


# ----------------------------------------------------------------------------- rendering

def render_grid(rows: list[str] | list[list[Any]], coords: bool = True,
                boxes: tuple[int, int] | None = None) -> str:
    """Rows of one-character cells as text, with 1-based column and row numbers.

    `boxes=(h, w)` draws separators between h x w blocks (sudoku boxes).
    """
    cells = [[str(c) for c in row] for row in rows]
    width = max((len(r) for r in cells), default=0)

    def join(items: list[str]) -> str:
        if not boxes:
            return " ".join(items)
        groups = [" ".join(items[j:j + boxes[1]]) for j in range(0, len(items), boxes[1])]
        return " | ".join(groups)

    body = [join(r) for r in cells]
    pad = len(str(len(cells))) + 1 if coords else 0
    if coords:
        body = [f"{i + 1:>{pad - 1}} " + line for i, line in enumerate(body)]
    if boxes:
        rule = " " * pad + "-" * len(join(["x"] * width))
        body = [line for i, row in enumerate(body)
                for line in ([rule, row] if i and i % boxes[0] == 0 else [row])]
    if coords:
        body.insert(0, " " * pad + join([str((j + 1) % 10) for j in range(width)]))
    return "\n".join(body)


def offset_words(frm: tuple[int, int], to: tuple[int, int]) -> str:
    """Where cell `to` lies from cell `frm`, in words: '1 row down and 2 columns left'."""
    dr, dc = to[0] - frm[0], to[1] - frm[1]
    parts = [f"{abs(dr)} row{'s' * (abs(dr) != 1)} {'down' if dr > 0 else 'up'}"] if dr else []
    parts += [f"{abs(dc)} column{'s' * (abs(dc) != 1)} {'right' if dc > 0 else 'left'}"] if dc else []
    return " and ".join(parts) or "the same cell"


def cell_words(p: tuple[int, int]) -> str:
    """A 0-based (row, col) as the grid's 1-based labels."""
    return f"row {p[0] + 1}, column {p[1] + 1}"


def clip_text(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= limit else text[: limit // 2] + "\n...[cut]...\n" + text[-limit // 2:]


# ----------------------------------------------------------------------------- the env

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
        from pettingllms.sandbox import SandboxLimits, run_python

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
        has_marker = payload is not None and _MARKER.search(text) is not None
        parsed = self.parse(payload, strict=not has_marker)
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

    def observation(self, agent: str) -> list[dict[str, str]]:
        if agent not in self.agents:
            raise ValueError(f"{self.name}: unknown agent {agent!r}")
        p = self.prompts
        role = "single" if self.single_agent else agent
        fields = self.prompt_fields()
        state_text = self.render()
        described = self.describe_state(self.state) if self.state is not None else ""
        if described:
            state_text += "\n" + described
        parts = [p.TASK.format(**fields), f"Current state (turn {self.turn + 1} of {self.max_turns}):\n{state_text}"]
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
                {"role": "user", "content": "\n\n".join(parts)}]

    def prompt_fields(self) -> dict[str, Any]:
        """Values for the `{...}` fields of the env's TASK prompt."""
        return {}


def data_cli(env: str, build: Callable[..., dict[str, Any]], argv: list[str] | None = None) -> dict[str, Any]:
    """The command line of scripts/dataprocess/load_<env>.py for the grid envs."""
    import argparse

    ap = argparse.ArgumentParser(description=f"Generate datasets/{env}/{{train,test}}.parquet")
    ap.add_argument("--out", default=f"datasets/{env}", help="output folder")
    ap.add_argument("--seed", type=int, default=0, help="shifts both (disjoint) seed ranges")
    ap.add_argument("--n-train", type=int, default=None)
    ap.add_argument("--n-test", type=int, default=None)
    args = ap.parse_args(argv)
    sizes = {k: v for k, v in (("n_train", args.n_train), ("n_test", args.n_test)) if v is not None}
    try:
        report = build(args.out, seed=args.seed, **sizes)
    except ConfigError as e:  # e.g. --out already holds a split: one line, no traceback
        raise SystemExit(f"load_{env}: {e}") from None
    print(json.dumps(report, indent=2, default=str))
    return report


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
