"""Sokoban rules, a BFS solver and a seeded reverse-play level generator.

Symbols: '#' wall, '_' floor, '.' target, '$' box, '*' box on target, '@' player,
'+' player on target. Positions are (row, col), 0-based internally.
Boxoban level files are not available offline, and reasoning-gym's generator targets 4+
boxes with its own symbol set, so levels are generated here: start from the solved state
(boxes on targets) and play backwards (the player walks and sometimes pulls a box), so
every level is solvable by construction; BFS then finds an optimal solution.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Optional

from pettingllms.envs.grid.actions import MOVE_DELTAS

Pos = tuple[int, int]


@dataclass(frozen=True)
class Level:
    height: int
    width: int
    walls: frozenset
    targets: frozenset
    boxes: frozenset
    player: Pos

    def rows(self, boxes: frozenset | None = None, player: Pos | None = None) -> list[str]:
        boxes = self.boxes if boxes is None else boxes
        player = self.player if player is None else player
        out = []
        for r in range(self.height):
            line = []
            for c in range(self.width):
                p = (r, c)
                if p in self.walls:
                    line.append("#")
                elif p == player:
                    line.append("+" if p in self.targets else "@")
                elif p in boxes:
                    line.append("*" if p in self.targets else "$")
                else:
                    line.append("." if p in self.targets else "_")
            out.append("".join(line))
        return out


def parse_rows(rows: list[str]) -> Level:
    """A level from rows of symbols (the inverse of Level.rows)."""
    walls, targets, boxes, players = set(), set(), set(), []
    for r, line in enumerate(rows):
        for c, ch in enumerate(line):
            p = (r, c)
            if ch == "#":
                walls.add(p)
            if ch in ".*+":
                targets.add(p)
            if ch in "$*":
                boxes.add(p)
            if ch in "@+":
                players.append(p)
            if ch not in "#_.$*@+ ":
                raise ValueError(f"unknown sokoban symbol {ch!r}")
    if len(players) != 1 or len(boxes) != len(targets) or not boxes:
        raise ValueError("a level needs one player and as many boxes as targets (at least one)")
    width = max(len(line) for line in rows)
    return Level(len(rows), width, frozenset(walls), frozenset(targets), frozenset(boxes), players[0])


def try_move(level: Level, boxes: set, player: Pos, move: str) -> tuple[Optional[Pos], Optional[str]]:
    """Apply one move in place on `boxes`; return (new player, None) or (None, why it is invalid)."""
    dr, dc = MOVE_DELTAS[move]
    nxt = (player[0] + dr, player[1] + dc)
    if nxt in level.walls or not (0 <= nxt[0] < level.height and 0 <= nxt[1] < level.width):
        return None, "walks into a wall"
    if nxt in boxes:
        beyond = (nxt[0] + dr, nxt[1] + dc)
        if beyond in level.walls or beyond in boxes:
            return None, "pushes a box into a wall or another box"
        boxes.remove(nxt)
        boxes.add(beyond)
    return nxt, None


def _dead_cells(level: Level) -> set:
    """Non-target floor corners: a box pushed there can never move again."""
    dead = set()
    for r in range(level.height):
        for c in range(level.width):
            p = (r, c)
            if p in level.walls or p in level.targets:
                continue
            up, down = (r - 1, c) in level.walls, (r + 1, c) in level.walls
            left, right = (r, c - 1) in level.walls, (r, c + 1) in level.walls
            if (up or down) and (left or right):
                dead.add(p)
    return dead


def solve(level: Level, max_states: int = 300_000) -> Optional[str]:
    """A shortest move string (e.g. 'UULR') solving `level`, or None if none within max_states."""
    if level.boxes == level.targets:
        return ""
    dead = _dead_cells(level)
    start = (level.player, level.boxes)
    parent: dict = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        player, boxes = state
        for move in "UDLR":
            moved = set(boxes)
            nxt, _ = try_move(level, moved, player, move)
            if nxt is None:
                continue
            new_boxes = frozenset(moved)
            if new_boxes != boxes and (new_boxes - boxes) & dead:
                continue
            child = (nxt, new_boxes)
            if child in parent:
                continue
            parent[child] = (state, move)
            if new_boxes == level.targets:
                path = []
                node = child
                while parent[node] is not None:
                    node, m = parent[node]
                    path.append(m)
                return "".join(reversed(path))
            if len(parent) >= max_states:
                return None
            queue.append(child)
    return None


_INVERSE = {"U": "D", "D": "U", "L": "R", "R": "L"}


def _room(rng: random.Random, height: int, width: int, wall_rate: float) -> set:
    """Floor cells: the interior minus random wall cells, keeping the largest connected part."""
    floor = {(r, c) for r in range(1, height - 1) for c in range(1, width - 1) if rng.random() >= wall_rate}
    best: set = set()
    todo = set(floor)
    while todo:
        seed = min(todo)
        part, stack = {seed}, [seed]
        while stack:
            r, c = stack.pop()
            for dr, dc in MOVE_DELTAS.values():
                q = (r + dr, c + dc)
                if q in todo and q not in part:
                    part.add(q)
                    stack.append(q)
        todo -= part
        if len(part) > len(best):
            best = part
    return best


def generate(seed: int, height: int, width: int, n_boxes: int, wall_rate: float = 0.12,
             min_moves: int = 4, max_states: int = 300_000) -> tuple[Level, str, bool]:
    """(level, solution, solution_is_optimal); deterministic per seed.

    The solution is BFS-optimal unless the search passed `max_states`, in which case it is
    the (longer) replay of the reverse play.
    """
    rng = random.Random(seed)
    for _ in range(1000):
        floor = _room(rng, height, width, wall_rate)
        if len(floor) < 2 * n_boxes + 4:
            continue
        cells = sorted(floor)
        targets = set(rng.sample(cells, n_boxes))
        boxes = set(targets)
        player = rng.choice([p for p in cells if p not in boxes])
        walls = frozenset((r, c) for r in range(height) for c in range(width) if (r, c) not in floor)
        reverse: list[str] = []
        for _ in range(rng.randint(3, 6) * len(cells)):
            move = rng.choice("UDLR")
            dr, dc = MOVE_DELTAS[move]
            nxt = (player[0] + dr, player[1] + dc)
            if nxt not in floor or nxt in boxes:
                continue
            behind = (player[0] - dr, player[1] - dc)
            if behind in boxes and rng.random() < 0.7:  # pull the box along
                boxes.remove(behind)
                boxes.add(player)
            player = nxt
            reverse.append(move)
        if boxes & targets:
            continue  # every box starts off its target
        level = Level(height, width, walls, frozenset(targets), frozenset(boxes), player)
        replay = "".join(_INVERSE[m] for m in reversed(reverse))
        best = solve(level, max_states)
        solution, optimal = (best, True) if best is not None else (replay, False)
        if len(solution) >= min_moves:
            return level, solution, optimal
    raise RuntimeError(f"no sokoban level for seed {seed} ({height}x{width}, {n_boxes} boxes)")
