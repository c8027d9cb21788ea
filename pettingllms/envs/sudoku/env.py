"""Sudoku (sides 4, 6, 9, 12, 16) with a tool agent and a plan agent; see envs/grid/env.py.

Moves: (row, col, value), 1-based, value 0 empties a non-given cell; or a whole grid.
Success: the grid passes the rule check (any valid solution that keeps the givens).
Progress: the fraction of blanks filled, if the grid can still be completed, else 0
(checked with the solver, so a wrong fill that leads to a dead end loses progress).
"""
from __future__ import annotations

import json
import re
from typing import Any

from pettingllms.envs.grid.actions import ParsedActions
from pettingllms.envs.grid.env import GridTaskEnv, Outcome, register_variants
from pettingllms.envs.grid.render import render_grid
from pettingllms.envs.sudoku import prompts
from pettingllms.envs.sudoku.game import conflicts, is_solution, search

_TRIPLE = re.compile(r"[(\[{]\s*(\d+)\s*[,;\s]\s*(\d+)\s*[,;\s]\s*(\d+)\s*[)\]}]"
                     r"|r\s*(\d+)\s*c\s*(\d+)\s*[=:]?\s*(\d+)", re.I)
_SEPARATORS = re.compile(r"[\s,;.\[\]]*")


def _grid_from(value: Any) -> list[list[int]]:
    """A problem field (JSON string or list) as a grid of ints."""
    grid = json.loads(value) if isinstance(value, str) else value
    return [[int(v) for v in row] for row in grid]


class SudokuEnv(GridTaskEnv):
    prompts = prompts
    map_sizes = (4, 6, 9, 12, 16)  # env.map_size: the data's side (sudoku/data.py SIZES)

    def __init__(self, max_turns: int = 4, step_penalty: float = 0.001, invalid_penalty: float = 0.05,
                 **options: Any) -> None:
        super().__init__(max_turns=max_turns, step_penalty=step_penalty,
                         invalid_penalty=invalid_penalty, **options)
        self.puzzle: list[list[int]] = []
        self.box_h = self.box_w = self.n = 0
        self.blanks = 0

    # ---- game hooks ------------------------------------------------------------------
    def load_state(self, problem: dict[str, Any]) -> dict[str, Any]:
        self.puzzle = _grid_from(problem["puzzle"])
        self.box_h, self.box_w = int(problem["box_h"]), int(problem["box_w"])
        self.n = self.box_h * self.box_w
        if len(self.puzzle) != self.n or any(len(row) != self.n for row in self.puzzle):
            raise ValueError(f"sudoku problem {problem.get('id')}: puzzle is not {self.n}x{self.n}")
        self.blanks = sum(v == 0 for row in self.puzzle for v in row)
        return {"grid": [list(row) for row in self.puzzle]}

    def parse(self, payload: str | None, strict: bool) -> ParsedActions:
        out = ParsedActions()
        if not payload:
            return out
        fills = []
        for m in _TRIPLE.finditer(payload):
            a, b, c = (m.group(1), m.group(2), m.group(3)) if m.group(1) else m.groups()[3:]
            fills.append(("fill", int(a), int(b), int(c)))
        if fills:
            if strict and _SEPARATORS.fullmatch(_TRIPLE.sub("", payload)) is None:
                return out
            out.actions = fills[: self.max_actions]
            out.truncated = max(0, len(fills) - self.max_actions)
            return out
        # a whole grid: one character per cell up to 9x9, numbers apart from 12x12 (values 10-16)
        cells = re.findall(r"[0-9._]" if self.n <= 9 else r"\d+|[._]", payload)
        if len(cells) == self.n * self.n and (not strict or re.fullmatch(r"[\s0-9._,\[\]|]*", payload)):
            vals = [0 if ch in "._" else int(ch) for ch in cells]
            out.actions = [("grid", [vals[i * self.n:(i + 1) * self.n] for i in range(self.n)])]
        return out

    def apply(self, state: dict[str, Any], actions: list[Any]) -> Outcome:
        out = Outcome(state)
        grid = state["grid"]
        for action in actions:
            if self.solved(state):
                break
            if action[0] == "grid":
                self._apply_grid(state, action[1], out)
            else:
                self._fill(grid, action[1] - 1, action[2] - 1, action[3], out)
        return out

    def _apply_grid(self, state: dict[str, Any], target: list[list[int]], out: Outcome) -> None:
        grid = state["grid"]
        if is_solution(target, self.puzzle, self.box_h, self.box_w):
            out.applied += sum(grid[r][c] != target[r][c] for r in range(self.n) for c in range(self.n))
            state["grid"] = [list(row) for row in target]
            return
        for r in range(self.n):  # not a solution: apply it cell by cell, rejecting conflicts
            for c in range(self.n):
                v = target[r][c]
                if v and v != grid[r][c]:
                    self._fill(grid, r, c, v, out)

    def _fill(self, grid: list[list[int]], r: int, c: int, v: int, out: Outcome) -> None:
        def reject(why: str) -> None:
            out.invalid += 1
            if len(out.notes) < 5:
                out.notes.append(f"({r + 1}, {c + 1}, {v}) rejected: {why}")

        if not (0 <= r < self.n and 0 <= c < self.n and 0 <= v <= self.n):
            return reject(f"outside the {self.n}x{self.n} grid or value not in 0-{self.n}")
        if self.puzzle[r][c]:
            return reject("that cell is a given")
        if grid[r][c] == v:
            return  # already there: neither a move nor an error
        if v and conflicts(grid, r, c, v, self.box_h, self.box_w):
            return reject("repeats a number in its row, column or box")
        grid[r][c] = v
        out.applied += 1

    def solved(self, state: dict[str, Any]) -> bool:
        return is_solution(state["grid"], self.puzzle, self.box_h, self.box_w)

    def progress(self, state: dict[str, Any]) -> float:
        if self.solved(state):
            return 1.0
        grid = state["grid"]
        filled = sum(1 for r in range(self.n) for c in range(self.n) if grid[r][c] and not self.puzzle[r][c])
        if not self.blanks or search(grid, self.box_h, self.box_w, limit=1)[0] < 1:
            return 0.0
        return filled / self.blanks

    def reference_actions(self, state: dict[str, Any]) -> list[Any]:
        count, solution = search(state["grid"], self.box_h, self.box_w, limit=1)
        if count < 1 or solution is None:
            return []
        return [("fill", r + 1, c + 1, solution[r][c]) for r in range(self.n) for c in range(self.n)
                if not state["grid"][r][c]]

    def render_state(self, state: dict[str, Any]) -> str:
        width = len(str(self.n))  # 12x12 and 16x16 hold two-digit values: cells padded to align
        rows = [[("." if v == 0 else str(v)).rjust(width) for v in row] for row in state["grid"]]
        return render_grid(rows, coords=True, boxes=(self.box_h, self.box_w))

    def describe_state(self, state: dict[str, Any]) -> str:
        empty = [f"({r + 1}, {c + 1})" for r in range(self.n) for c in range(self.n) if not state["grid"][r][c]]
        return f"Empty cells (row, col): {', '.join(empty) or 'none'}."

    def state_json(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"size": self.n, "box_height": self.box_h, "box_width": self.box_w,
                "grid": state["grid"], "puzzle": self.puzzle}

    def format_actions(self, actions: list[Any]) -> str:
        return ", ".join("grid " + " / ".join("".join(map(str, row)) for row in a[1]) if a[0] == "grid"
                         else f"({a[1]}, {a[2]}, {a[3]})" for a in actions)

    def prompt_fields(self) -> dict[str, Any]:
        # The answer format's example names a cell that is empty now (a fixed one was often a
        # given, and a small model copies the example): where to write, never what.
        grid = self.state["grid"] if self.state is not None else []
        empty = [(r + 1, c + 1) for r, row in enumerate(grid) for c, v in enumerate(row) if not v]
        ex_row, ex_col = empty[0] if empty else (1, 1)
        return {"size": self.n, "box_h": self.box_h, "box_w": self.box_w, "ex_row": ex_row, "ex_col": ex_col}


SudokuEnvMAS, SudokuEnvSingle = register_variants("sudoku", SudokuEnv)
