"""Grid path planning: seeded grids with obstacles, BFS distances and shortest paths.

Grid rows use '.' free and '#' obstacle; positions are (row, col), 0-based.
"""
from __future__ import annotations

import random
from collections import deque
from typing import Optional

from pettingllms.envs.grid.actions import MOVE_DELTAS

Pos = tuple[int, int]


def free(rows: list[str], p: Pos) -> bool:
    r, c = p
    return 0 <= r < len(rows) and 0 <= c < len(rows[r]) and rows[r][c] != "#"


def distances(rows: list[str], source: Pos) -> list[list[int]]:
    """BFS distance from `source` to every cell (-1: unreachable or obstacle)."""
    dist = [[-1] * len(row) for row in rows]
    if not free(rows, source):
        return dist
    dist[source[0]][source[1]] = 0
    queue = deque([source])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVE_DELTAS.values():
            q = (r + dr, c + dc)
            if free(rows, q) and dist[q[0]][q[1]] < 0:
                dist[q[0]][q[1]] = dist[r][c] + 1
                queue.append(q)
    return dist


def shortest_path(rows: list[str], start: Pos, goal: Pos) -> Optional[str]:
    """A shortest move string from start to goal, or None when the goal is unreachable."""
    dist = distances(rows, goal)
    if dist[start[0]][start[1]] < 0:
        return None
    moves, (r, c) = [], start
    while (r, c) != goal:  # walk downhill on the distance-to-goal map
        for move, (dr, dc) in MOVE_DELTAS.items():
            q = (r + dr, c + dc)
            if free(rows, q) and dist[q[0]][q[1]] == dist[r][c] - 1:
                moves.append(move)
                r, c = q
                break
    return "".join(moves)


def generate(seed: int, height: int, width: int, density: float, min_distance: int,
             max_distance: int | None = None) -> tuple[list[str], Pos, Pos, str]:
    """(rows, start, goal, one shortest path); the goal is reachable, at least min_distance
    (and at most max_distance, when given) moves away."""
    rng = random.Random(seed)
    for _ in range(1000):
        rows = ["".join("#" if rng.random() < density else "." for _ in range(width)) for _ in range(height)]
        cells = [(r, c) for r in range(height) for c in range(width) if rows[r][c] == "."]
        if len(cells) < 2:
            continue
        start = rng.choice(cells)
        dist = distances(rows, start)
        far = [p for p in cells if min_distance <= dist[p[0]][p[1]] <= (max_distance or len(cells))]
        if not far:
            continue
        goal = rng.choice(far)
        return rows, start, goal, shortest_path(rows, start, goal)
    raise RuntimeError(f"no plan_path grid for seed {seed} ({height}x{width}, density {density})")
