"""Sokoban with a tool agent and a plan agent; see envs/grid/env.py for turns and rewards.

Success: every box on a target. Progress (shaped, in [0, 1], 1 only when solved):
0.5 * (boxes on targets / boxes) + 0.5 * max(0, 1 - D / D0), where D is the sum over boxes
of the Manhattan distance to the nearest target and D0 its value at the start.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from pettingllms.envs.grid.env import MoveGridEnv, register_variants
from pettingllms.envs.grid.render import cell_words, offset_words, render_grid
from pettingllms.envs.grid.vision import SOKOBAN_PALETTE, register_vision
from pettingllms.envs.sokoban import prompts
from pettingllms.envs.sokoban.game import Level, parse_rows, solve, try_move


class SokobanEnv(MoveGridEnv):
    prompts = prompts

    def __init__(self, max_turns: int = 4, **options: Any) -> None:
        super().__init__(max_turns=max_turns, **options)
        self.level: Level | None = None
        self.start_distance = 1

    def load_state(self, problem: dict[str, Any]) -> dict[str, Any]:
        rows = json.loads(problem["level"]) if isinstance(problem["level"], str) else list(problem["level"])
        self.level = parse_rows(rows)
        self.optimal_moves = max(1, int(problem.get("optimal_moves") or 1))
        state = {"player": list(self.level.player), "boxes": sorted(map(list, self.level.boxes)), "moves": 0}
        self.start_distance = max(1, self._distance(state))
        return state

    def _distance(self, state: dict[str, Any]) -> int:
        return sum(min(abs(r - tr) + abs(c - tc) for tr, tc in self.level.targets) for r, c in state["boxes"])

    def try_move(self, state: dict[str, Any], move: str) -> str | None:
        boxes = {tuple(b) for b in state["boxes"]}
        player, why = try_move(self.level, boxes, tuple(state["player"]), move)
        if player is None:
            return why
        state["player"] = list(player)
        state["boxes"] = sorted(map(list, boxes))
        return None

    def solved(self, state: dict[str, Any]) -> bool:
        return all(tuple(b) in self.level.targets for b in state["boxes"])

    def progress(self, state: dict[str, Any]) -> float:
        on = sum(tuple(b) in self.level.targets for b in state["boxes"]) / len(state["boxes"])
        closer = max(0.0, 1.0 - self._distance(state) / self.start_distance)
        return 0.5 * on + 0.5 * closer

    def reference_actions(self, state: dict[str, Any]) -> list[Any]:
        now = dataclasses.replace(self.level, player=tuple(state["player"]),
                                  boxes=frozenset(map(tuple, state["boxes"])))
        return list(solve(now) or "")

    def _rows(self, state: dict[str, Any]) -> list[str]:
        return self.level.rows(frozenset(map(tuple, state["boxes"])), tuple(state["player"]))

    def render_state(self, state: dict[str, Any]) -> str:
        return render_grid(self._rows(state), coords=True)

    def describe_state(self, state: dict[str, Any]) -> str:
        player = tuple(state["player"])
        lines = [f"You (@) are at {cell_words(player)}."]
        open_targets = sorted(t for t in self.level.targets if list(t) not in state["boxes"])
        for box in map(tuple, state["boxes"]):
            if box in self.level.targets:
                lines.append(f"The box at {cell_words(box)} is on a target.")
                continue
            near = min(open_targets or self.level.targets, key=lambda t: abs(t[0] - box[0]) + abs(t[1] - box[1]))
            lines.append(f"A box ($) is at {cell_words(box)}, {offset_words(player, box)} from you; the nearest "
                         f"free target (.) is at {cell_words(near)}, {offset_words(box, near)} from that box.")
        return "\n".join(lines)

    def state_json(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"rows": self._rows(state), "moves_so_far": state["moves"]}

    def prompt_fields(self) -> dict[str, Any]:
        return {"n_boxes": len(self.level.boxes) if self.level else 0}


SokobanEnvMAS, SokobanEnvSingle = register_variants("sokoban", SokobanEnv)
SokobanEnvVision = register_vision("sokoban", SokobanEnvMAS, SOKOBAN_PALETTE)
