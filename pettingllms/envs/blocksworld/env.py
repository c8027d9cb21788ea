"""Blocksworld (the reference's Blocksworld) with a tool agent and a plan agent; see envs/grid/env.py.

Moves: (block, destination), destination another block or `table`. Success: the non-empty
stacks equal the goal's, in any order. Progress (in [0, 1], 1 only when solved): the fraction
of blocks well placed (on what the goal puts them on, with everything below well placed). On
success the bonus is plan optimality, optimal moves / moves made (as MoveGridEnv).
"""
from __future__ import annotations

import json
import re
from typing import Any

from pettingllms.envs.blocksworld import prompts
from pettingllms.envs.blocksworld.game import (TABLE, canonical, move, moves_from, plan, well_placed,
                                                why_invalid)
from pettingllms.envs.grid.actions import ParsedActions
from pettingllms.envs.grid.env import MoveGridEnv, register_variants

_Q = "[\"'`]?"
_MOVE = re.compile(rf"[(\[{{]?\s*{_Q}\b([A-Za-z])\b{_Q}\s*(?:,|->|→|\bonto\b|\bon\b|\bto\b)\s*"
                   rf"{_Q}\b([A-Za-z]|table)\b{_Q}\s*[)\]}}]?", re.I)
_SEPARATORS = re.compile(r"(?:[\s,;.\[\]{}\"'`:]|move)*", re.I)  # what may sit between moves


def _stacks(value: Any) -> list[list[str]]:
    stacks = json.loads(value) if isinstance(value, str) else value
    return [[str(b) for b in s] for s in stacks if len(s)]


class BlocksworldEnv(MoveGridEnv):
    """MoveGridEnv's apply and optimality bonus, with (block, destination) moves."""

    prompts = prompts

    def __init__(self, max_turns: int = 4, **options: Any) -> None:
        super().__init__(max_turns=max_turns, **options)
        self.goal: list[list[str]] = []
        self.blocks: list[str] = []
        self.optimal_moves = 1

    def load_state(self, problem: dict[str, Any]) -> dict[str, Any]:
        start, self.goal = _stacks(problem["start"]), _stacks(problem["goal"])
        self.blocks = sorted(b for s in start for b in s)
        if not self.blocks or self.blocks != sorted(b for s in self.goal for b in s) or \
                len(set(self.blocks)) != len(self.blocks):
            raise ValueError(f"blocksworld problem {problem.get('id')}: start and goal must hold the same distinct blocks")
        self.optimal_moves = max(1, int(problem.get("optimal_moves") or len(plan(start, self.goal) or [0])))
        return {"stacks": start, "moves": 0}

    def parse(self, payload: str | None, strict: bool) -> ParsedActions:
        out = ParsedActions()
        if not payload:
            return out
        moves = [(a.upper(), TABLE if b.lower() == TABLE else b.upper()) for a, b in _MOVE.findall(payload)]
        if strict and (not moves or _SEPARATORS.fullmatch(_MOVE.sub("", payload)) is None):
            return out
        out.actions = moves[: self.max_actions]
        out.truncated = max(0, len(moves) - self.max_actions)
        return out

    def try_move(self, state: dict[str, Any], action: tuple[str, str]) -> str | None:
        why = why_invalid(state["stacks"], *action)
        if why is None:
            state["stacks"] = move(state["stacks"], *action)
        return why

    def solved(self, state: dict[str, Any]) -> bool:
        return canonical(state["stacks"]) == canonical(self.goal)

    def progress(self, state: dict[str, Any]) -> float:
        return 1.0 if self.solved(state) else well_placed(state["stacks"], self.goal) / len(self.blocks)

    def reference_actions(self, state: dict[str, Any]) -> list[Any]:
        return list(plan(state["stacks"], self.goal) or [])

    def render_state(self, state: dict[str, Any]) -> str:
        def lines(stacks: list[list[str]]) -> list[str]:
            return [f"  stack {i + 1}: {' '.join(s)}" for i, s in enumerate(stacks)]

        return "\n".join(["Now (bottom to top):", *lines(state["stacks"]), "Goal (bottom to top):", *lines(self.goal)])

    def describe_state(self, state: dict[str, Any]) -> str:
        clear = sorted(s[-1] for s in state["stacks"] if s)
        return f"Clear blocks (can move): {', '.join(clear)}."

    def state_json(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"stacks": state["stacks"], "goal": self.goal, "moves_so_far": state["moves"]}

    def format_actions(self, actions: list[Any]) -> str:
        return ", ".join(f"({b}, {d})" for b, d in actions)

    def prompt_fields(self) -> dict[str, Any]:
        # the format's example is a legal move that is not the best plan's first one (a small
        # model copies the example; it must not be handed the answer)
        stacks = self.state["stacks"] if self.state is not None else [["A"]]
        best = (plan(stacks, self.goal) or [None])[0] if self.goal else None
        spare = chr(ord(max(self.blocks or ["A"])) + 1)  # when the only legal move is the answer
        example = next((m for m in moves_from(stacks) if m != best), (spare, TABLE))
        return {"blocks": ", ".join(self.blocks), "optimal": self.optimal_moves,
                "example": f"({example[0]}, {example[1]})"}


BlocksworldEnvMAS, BlocksworldEnvSingle = register_variants("blocksworld", BlocksworldEnv)
