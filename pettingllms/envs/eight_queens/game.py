"""N-queens rules, a completing solver and a seeded puzzle generator.

A board is a list `cols` of n ints, one per row: the 1-based column of the row's queen, 0 when
the row has none. Solved: every row has a queen and no two queens share a column or diagonal.
"""
from __future__ import annotations

import random
from typing import Optional


def attacker(cols: list[int], r: int, c: int) -> Optional[int]:
    """The (0-based) row of a queen that attacks square (r, c), ignoring row r itself; else None."""
    for r2, c2 in enumerate(cols):
        if r2 != r and c2 and (c2 == c or abs(c2 - c) == abs(r2 - r)):
            return r2
    return None


def is_solution(cols: list[int], givens: list[int]) -> bool:
    """Every row holds a queen in 1..n, none attacks another, and the given queens are kept."""
    n = len(givens)
    if len(cols) != n or any(not (1 <= c <= n) for c in cols):
        return False
    if any(g and c != g for c, g in zip(cols, givens)):
        return False
    return all(attacker(cols, r, c) is None for r, c in enumerate(cols))


def complete(cols: list[int], rng: Optional[random.Random] = None) -> Optional[list[int]]:
    """A solution that keeps every queen already on `cols`, or None when there is none.
    `rng` shuffles the column order (used to draw random solutions)."""
    n = len(cols)
    if any(c and attacker(cols, r, c) is not None for r, c in enumerate(cols)):
        return None
    board = list(cols)
    empty = [r for r in range(n) if not board[r]]

    def rec(i: int) -> bool:
        if i == len(empty):
            return True
        r = empty[i]
        order = list(range(1, n + 1))
        if rng is not None:
            rng.shuffle(order)
        for c in order:
            if attacker(board, r, c) is None:
                board[r] = c
                if rec(i + 1):
                    return True
                board[r] = 0
        return False

    return board if rec(0) else None


def generate(seed: int, n: int, blanks: int) -> tuple[list[int], list[int]]:
    """(givens, solution): a random solution of the n-queens board with `blanks` rows cleared."""
    rng = random.Random(seed)
    solution = complete([0] * n, rng)
    if solution is None:
        raise ValueError(f"the {n}-queens board has no solution")
    givens = list(solution)
    for r in rng.sample(range(n), min(blanks, n)):
        givens[r] = 0
    return givens, solution
