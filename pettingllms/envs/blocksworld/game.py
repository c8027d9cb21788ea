"""Blocksworld rules, a breadth-first optimal planner and a seeded problem generator.

A state is a list of stacks, each a list of one-letter blocks from bottom to top; the table
holds any number of stacks. A move (block, dest) takes a clear block (the top of its stack) and
puts it on the table (dest "table") or on another clear block. Two states are equal when their
non-empty stacks are the same, in any order.
"""
from __future__ import annotations

import random
from collections import deque
from typing import Optional

Stacks = list[list[str]]
Move = tuple[str, str]
TABLE = "table"


def canonical(stacks: Stacks) -> tuple[tuple[str, ...], ...]:
    return tuple(sorted(tuple(s) for s in stacks if s))


def why_invalid(stacks: Stacks, block: str, dest: str) -> Optional[str]:
    """Why (block, dest) cannot be made on `stacks` (None: it can). A block already on the table
    moved to the table is not a move either."""
    tops = {s[-1] for s in stacks if s}
    blocks = {b for s in stacks for b in s}
    if block not in blocks:
        return f"there is no block {block}"
    if block not in tops:
        return f"{block} is not clear (a block is on it)"
    if dest == TABLE:
        return f"{block} is already on the table" if any(s == [block] for s in stacks) else None
    if dest not in blocks:
        return f"there is no block {dest}"
    if dest == block:
        return "a block cannot go on itself"
    return None if dest in tops else f"{dest} is not clear (a block is on it)"


def move(stacks: Stacks, block: str, dest: str) -> Stacks:
    """`stacks` after the (valid) move, as a new list."""
    out = [list(s) for s in stacks]
    src = next(s for s in out if s and s[-1] == block)
    src.pop()
    if dest == TABLE:
        out.append([block])
    else:
        next(s for s in out if s and s[-1] == dest).append(block)
    return [s for s in out if s]


def moves_from(stacks: Stacks) -> list[Move]:
    tops = [s[-1] for s in stacks if s]
    out = [(b, TABLE) for b in tops if not any(s == [b] for s in stacks)]
    return out + [(b, d) for b in tops for d in tops if b != d]


def plan(start: Stacks, goal: Stacks, max_states: int = 200_000) -> Optional[list[Move]]:
    """A shortest move list from `start` to `goal` (breadth-first), or None past max_states."""
    target = canonical(goal)
    if sorted(b for s in start for b in s) != sorted(b for s in goal for b in s):
        return None
    prev: dict = {canonical(start): None}
    queue = deque([[list(s) for s in start if s]])
    while queue:
        state = queue.popleft()
        key = canonical(state)
        if key == target:
            path = []
            while prev[key] is not None:
                key, m = prev[key]
                path.append(m)
            return path[::-1]
        for m in moves_from(state):
            nxt = move(state, *m)
            k = canonical(nxt)
            if k not in prev:
                prev[k] = (key, m)
                if len(prev) > max_states:
                    return None
                queue.append(nxt)
    return None


def well_placed(stacks: Stacks, goal: Stacks) -> int:
    """Blocks on what the goal puts them on, with everything below them well placed too."""
    def supports(st: Stacks) -> dict[str, str]:
        return {b: (s[i - 1] if i else TABLE) for s in st for i, b in enumerate(s)}

    now, want = supports(stacks), supports(goal)
    count = 0
    for s in stacks:
        for b in s:  # bottom to top: a block counts only while the stack below it does
            if now.get(b) != want.get(b):
                break
            count += 1
    return count


def random_stacks(rng: random.Random, blocks: list[str]) -> Stacks:
    order = list(blocks)
    rng.shuffle(order)
    stacks: Stacks = []
    for b in order:
        if stacks and rng.random() < 0.5:
            rng.choice(stacks).append(b)
        else:
            stacks.append([b])
    return stacks


def generate(seed: int, n_blocks: int, min_moves: int, max_moves: int) -> tuple[Stacks, Stacks, list[Move]]:
    """(start, goal, a shortest plan) with min_moves <= plan length <= max_moves."""
    rng = random.Random(seed)
    blocks = [chr(ord("A") + i) for i in range(n_blocks)]
    for _ in range(2000):
        start = random_stacks(rng, blocks)
        if max_moves == 1:  # one move from the start: the goal is a neighbour
            goal = move(start, *rng.choice(moves_from(start)))
        else:
            goal = random_stacks(rng, blocks)
        path = plan(start, goal)
        if path is not None and min_moves <= len(path) <= max_moves:
            return start, goal, path
    raise RuntimeError(f"no blocksworld problem for seed {seed} ({n_blocks} blocks, {min_moves}-{max_moves} moves)")
