"""N-queens (the reference's EightQueens) with a tool agent and a plan agent; see envs/grid/env.py.

Moves: (row, col), 1-based, putting the row's queen in that column ((row, 0) removes a placed
queen); or the whole board as n column numbers. A queen that is attacked is rejected.
Success: every row has a queen and none attacks another (any valid board that keeps the given
queens). Progress: the fraction of the missing queens placed, if the board can still be
completed, else 0 (checked with the solver).
"""
from __future__ import annotations

import json
import re
from typing import Any

from pettingllms.envs.eight_queens import prompts
from pettingllms.envs.eight_queens.game import attacker, complete, is_solution
from pettingllms.envs.grid.actions import ParsedActions
from pettingllms.envs.grid.env import GridTaskEnv, Outcome, register_variants
from pettingllms.envs.grid.render import render_grid

_PAIR = re.compile(r"[(\[{]\s*(\d+)\s*[,;\s]\s*(\d+)\s*[)\]}]")
_SEPARATORS = re.compile(r"[\s,;.\[\]]*")


def _cols_from(value: Any) -> list[int]:
    cols = json.loads(value) if isinstance(value, str) else value
    return [int(c) for c in cols]


class EightQueensEnv(GridTaskEnv):
    prompts = prompts

    def __init__(self, max_turns: int = 4, step_penalty: float = 0.001, invalid_penalty: float = 0.05,
                 **options: Any) -> None:
        super().__init__(max_turns=max_turns, step_penalty=step_penalty, invalid_penalty=invalid_penalty,
                         **options)
        self.givens: list[int] = []
        self.n = 0
        self.blanks = 0

    def load_state(self, problem: dict[str, Any]) -> dict[str, Any]:
        self.givens = _cols_from(problem["puzzle"])
        self.n = len(self.givens)
        if self.n < 4 or any(not 0 <= c <= self.n for c in self.givens):
            raise ValueError(f"eight_queens problem {problem.get('id')}: puzzle must list n >= 4 columns in 0..n")
        self.blanks = sum(c == 0 for c in self.givens)
        return {"cols": list(self.givens)}

    def parse(self, payload: str | None, strict: bool) -> ParsedActions:
        out = ParsedActions()
        if not payload:
            return out
        pairs = [("place", int(a), int(b)) for a, b in _PAIR.findall(payload)]
        if pairs:
            if strict and _SEPARATORS.fullmatch(_PAIR.sub("", payload)) is None:
                return out
            out.actions = pairs[: self.max_actions]
            out.truncated = max(0, len(pairs) - self.max_actions)
            return out
        numbers = re.findall(r"\d+", payload)
        if len(numbers) == self.n and (not strict or re.fullmatch(r"[\s\d,\[\]]*", payload)):
            out.actions = [("board", [int(v) for v in numbers])]
        return out

    def apply(self, state: dict[str, Any], actions: list[Any]) -> Outcome:
        out = Outcome(state)
        for action in actions:
            if self.solved(state):
                break
            if action[0] == "board":
                if is_solution(action[1], self.givens):
                    out.applied += sum(a != b for a, b in zip(state["cols"], action[1]))
                    state["cols"] = list(action[1])
                    continue
                for r, c in enumerate(action[1]):  # not a solution: row by row, rejecting attacks
                    if c != state["cols"][r] and not self.givens[r]:
                        self._place(state["cols"], r, c, out)
            else:
                self._place(state["cols"], action[1] - 1, action[2], out)
        return out

    def _place(self, cols: list[int], r: int, c: int, out: Outcome) -> None:
        def reject(why: str) -> None:
            out.invalid += 1
            if len(out.notes) < 5:
                out.notes.append(f"({r + 1}, {c}) rejected: {why}")

        if not (0 <= r < self.n and 0 <= c <= self.n):
            return reject(f"outside the {self.n}x{self.n} board")
        if self.givens[r]:
            return reject("that row's queen is given")
        if cols[r] == c:
            return  # already there: neither a move nor an error
        if c:
            hit = attacker(cols, r, c)
            if hit is not None:
                return reject(f"attacked by the queen at ({hit + 1}, {cols[hit]})")
        cols[r] = c
        out.applied += 1

    def solved(self, state: dict[str, Any]) -> bool:
        return is_solution(state["cols"], self.givens)

    def progress(self, state: dict[str, Any]) -> float:
        if self.solved(state):
            return 1.0
        placed = sum(1 for c, g in zip(state["cols"], self.givens) if c and not g)
        if not self.blanks or complete(state["cols"]) is None:
            return 0.0
        return placed / self.blanks

    def reference_actions(self, state: dict[str, Any]) -> list[Any]:
        solution = complete(state["cols"])
        if solution is None:
            return []
        return [("place", r + 1, solution[r]) for r in range(self.n) if not state["cols"][r]]

    def render_state(self, state: dict[str, Any]) -> str:
        return render_grid([["Q" if c == j + 1 else "." for j in range(self.n)] for c in state["cols"]])

    def describe_state(self, state: dict[str, Any]) -> str:
        queens = [f"({r + 1}, {c})" for r, c in enumerate(state["cols"]) if c]
        empty = [str(r + 1) for r, c in enumerate(state["cols"]) if not c]
        return (f"Queens at (row, col): {', '.join(queens) or 'none'}. "
                f"Rows without a queen: {', '.join(empty) or 'none'}.")

    def state_json(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"n": self.n, "queens": state["cols"], "fixed_rows": [r + 1 for r, g in enumerate(self.givens) if g]}

    def format_actions(self, actions: list[Any]) -> str:
        return ", ".join(str(a[1]) if a[0] == "board" else f"({a[1]}, {a[2]})" for a in actions)

    def prompt_fields(self) -> dict[str, Any]:
        cols = self.state["cols"] if self.state is not None else []
        empty = [r + 1 for r, c in enumerate(cols) if not c]
        return {"n": self.n, "ex_row": empty[0] if empty else 1}


EightQueensEnvMAS, EightQueensEnvSingle = register_variants("eight_queens", EightQueensEnv)
