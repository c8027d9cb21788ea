"""Sudoku rules, a counting solver and a seeded puzzle generator.

Grids are lists of rows of ints, 0 = blank; side n = box_h * box_w (4x4: 2x2 boxes,
9x9: 3x3 boxes). The generator uses its own `random.Random(seed)`: py-sudoku 2.0 seeds and
shuffles the *global* `random` module (`random.seed(seed)` in `Sudoku.__init__`,
`random.shuffle` in `difficulty()`), which would reset every other user of `random` in
the process and is not thread-safe, so it is not used here.
"""
from __future__ import annotations

import random
from typing import Optional

Grid = list[list[int]]


def box_index(r: int, c: int, box_h: int, box_w: int, n: int) -> int:
    return (r // box_h) * (n // box_w) + c // box_w


def conflicts(grid: Grid, r: int, c: int, v: int, box_h: int, box_w: int) -> bool:
    """True if value v at (r, c) repeats in its row, column or box (ignoring (r, c) itself)."""
    n = len(grid)
    if any(grid[r][j] == v for j in range(n) if j != c):
        return True
    if any(grid[i][c] == v for i in range(n) if i != r):
        return True
    r0, c0 = r - r % box_h, c - c % box_w
    return any(grid[i][j] == v for i in range(r0, r0 + box_h) for j in range(c0, c0 + box_w)
               if (i, j) != (r, c))


def is_solution(grid: Grid, puzzle: Grid, box_h: int, box_w: int) -> bool:
    """Rule check: every row, column and box holds 1..n once and the givens are kept.

    Any grid that passes counts, not only the stored solution.
    """
    n = box_h * box_w
    full = set(range(1, n + 1))
    if len(grid) != n or any(len(row) != n for row in grid):
        return False
    if any(puzzle[r][c] and grid[r][c] != puzzle[r][c] for r in range(n) for c in range(n)):
        return False
    rows_ok = all(set(row) == full for row in grid)
    cols_ok = all({grid[r][c] for r in range(n)} == full for c in range(n))
    boxes: list[set[int]] = [set() for _ in range(n)]
    for r in range(n):
        for c in range(n):
            boxes[box_index(r, c, box_h, box_w, n)].add(grid[r][c])
    return rows_ok and cols_ok and all(b == full for b in boxes)


def search(grid: Grid, box_h: int, box_w: int, limit: int = 1, rng: Optional[random.Random] = None,
           max_nodes: int = 2_000_000) -> tuple[int, Optional[Grid]]:
    """Count solutions of `grid` up to `limit`; also return the first one found.

    Bitmask backtracking, most-constrained cell first. `rng` shuffles candidate order
    (used to draw random full grids). A grid with a repeated value has no solutions.
    Past `max_nodes` nodes the count is unknown and -1 is returned (callers treat that as
    "not uniquely solvable" / "not completable"); not reached on 4x4/9x9 in practice.
    """
    n = box_h * box_w
    rows, cols, boxes = [0] * n, [0] * n, [0] * n
    g = [list(row) for row in grid]
    blanks = []
    for r in range(n):
        for c in range(n):
            v = g[r][c]
            if v:
                bit, b = 1 << v, box_index(r, c, box_h, box_w, n)
                if rows[r] & bit or cols[c] & bit or boxes[b] & bit:
                    return 0, None
                rows[r] |= bit
                cols[c] |= bit
                boxes[b] |= bit
            else:
                blanks.append((r, c, box_index(r, c, box_h, box_w, n)))
    all_bits = ((1 << (n + 1)) - 1) & ~1
    found: list[Grid] = []
    count = 0
    nodes = 0

    def rec(remaining: list[tuple[int, int, int]]) -> bool:  # True = stop searching
        nonlocal count, nodes
        nodes += 1
        if nodes > max_nodes:
            return True
        if not remaining:
            count += 1
            if not found:
                found.append([list(row) for row in g])
            return count >= limit
        best_i, best_free, best_n = -1, 0, n + 1
        for i, (r, c, b) in enumerate(remaining):
            free = all_bits & ~(rows[r] | cols[c] | boxes[b])
            k = bin(free).count("1")
            if k < best_n:
                best_i, best_free, best_n = i, free, k
                if k <= 1:
                    break
        if best_n == 0:
            return False
        r, c, b = remaining[best_i]
        rest = remaining[:best_i] + remaining[best_i + 1:]
        values = [v for v in range(1, n + 1) if best_free >> v & 1]
        if rng is not None:
            rng.shuffle(values)
        for v in values:
            bit = 1 << v
            g[r][c] = v
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            stop = rec(rest)
            rows[r] &= ~bit
            cols[c] &= ~bit
            boxes[b] &= ~bit
            g[r][c] = 0
            if stop:
                return True
        return False

    rec(blanks)
    if nodes > max_nodes and count < limit:
        return -1, (found[0] if found else None)
    return count, (found[0] if found else None)


def generate(seed: int, box_h: int, box_w: int, blanks: int) -> tuple[Grid, Grid]:
    """A puzzle with a unique solution and (up to) `blanks` empty cells, and its solution.

    Draw a random full grid, then blank cells in a random order, keeping each blank only
    if the solution stays unique. Deterministic per seed.
    """
    n = box_h * box_w
    rng = random.Random(seed)
    _, solution = search([[0] * n for _ in range(n)], box_h, box_w, limit=1, rng=rng)
    assert solution is not None
    puzzle = [list(row) for row in solution]
    cells = [(r, c) for r in range(n) for c in range(n)]
    rng.shuffle(cells)
    removed = 0
    for r, c in cells:
        if removed >= blanks:
            break
        keep = puzzle[r][c]
        puzzle[r][c] = 0
        if search(puzzle, box_h, box_w, limit=2)[0] != 1:
            puzzle[r][c] = keep
        else:
            removed += 1
    return puzzle, solution
