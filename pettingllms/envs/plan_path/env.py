"""Grid shortest-path planning with a tool agent and a plan agent; see envs/grid/env.py.

Success: standing on the goal. Progress (in [0, 1], 1 only at the goal):
max(0, 1 - d(position) / d(start)) with d the BFS distance to the goal. On success the
bonus is path optimality, optimal moves / moves made.
"""
from __future__ import annotations

import json
from typing import Any

from pettingllms.envs.grid.actions import MOVE_DELTAS
from pettingllms.envs.grid.env import MoveGridEnv, register_variants
from pettingllms.envs.grid.render import cell_words, offset_words, render_grid
from pettingllms.envs.grid.vision import PLAN_PATH_PALETTE, register_vision
from pettingllms.envs.plan_path import prompts
from pettingllms.envs.plan_path.game import distances, free, shortest_path


class PlanPathEnv(MoveGridEnv):
    prompts = prompts

    def __init__(self, max_turns: int = 4, **options: Any) -> None:
        super().__init__(max_turns=max_turns, **options)
        self.rows: list[str] = []
        self.goal = (0, 0)
        self.to_goal: list[list[int]] = []
        self.start_distance = 1

    def load_state(self, problem: dict[str, Any]) -> dict[str, Any]:
        self.rows = json.loads(problem["grid"]) if isinstance(problem["grid"], str) else list(problem["grid"])
        start = tuple(json.loads(problem["start"]) if isinstance(problem["start"], str) else problem["start"])
        goal = json.loads(problem["goal"]) if isinstance(problem["goal"], str) else problem["goal"]
        self.goal = (int(goal[0]), int(goal[1]))
        if not (free(self.rows, start) and free(self.rows, self.goal)):
            raise ValueError(f"plan_path problem {problem.get('id')}: start or goal is not a free cell")
        self.to_goal = distances(self.rows, self.goal)
        self.start_distance = self.to_goal[start[0]][start[1]]
        if self.start_distance < 0:
            raise ValueError(f"plan_path problem {problem.get('id')}: goal unreachable")
        self.optimal_moves = max(1, self.start_distance)
        return {"pos": [int(start[0]), int(start[1])], "moves": 0}

    def try_move(self, state: dict[str, Any], move: str) -> str | None:
        dr, dc = MOVE_DELTAS[move]
        nxt = (state["pos"][0] + dr, state["pos"][1] + dc)
        if not free(self.rows, nxt):
            return "hits an obstacle or leaves the grid"
        state["pos"] = list(nxt)
        return None

    def solved(self, state: dict[str, Any]) -> bool:
        return tuple(state["pos"]) == self.goal

    def progress(self, state: dict[str, Any]) -> float:
        if self.solved(state):
            return 1.0
        d = self.to_goal[state["pos"][0]][state["pos"][1]]
        return max(0.0, 1.0 - d / max(1, self.start_distance))

    def reference_actions(self, state: dict[str, Any]) -> list[Any]:
        return list(shortest_path(self.rows, tuple(state["pos"]), self.goal) or "")

    def _rows(self, state: dict[str, Any]) -> list[str]:
        cells = [list(row) for row in self.rows]
        cells[self.goal[0]][self.goal[1]] = "G"
        cells[state["pos"][0]][state["pos"][1]] = "A"
        return ["".join(row) for row in cells]

    def render_state(self, state: dict[str, Any]) -> str:
        return render_grid(self._rows(state), coords=True)

    def describe_state(self, state: dict[str, Any]) -> str:
        pos = tuple(state["pos"])
        return (f"You (A) are at {cell_words(pos)}; the goal (G) is at {cell_words(self.goal)}, "
                f"{offset_words(pos, self.goal)} from you.")

    def state_json(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"rows": self.rows, "position": state["pos"], "goal": list(self.goal),
                "moves_so_far": state["moves"]}

    def prompt_fields(self) -> dict[str, Any]:
        return {"height": len(self.rows), "width": len(self.rows[0]) if self.rows else 0,
                "optimal": self.start_distance}


PlanPathEnvMAS, PlanPathEnvSingle = register_variants("plan_path", PlanPathEnv)
PlanPathEnvVision = register_vision("plan_path", PlanPathEnvMAS, PLAN_PATH_PALETTE)
