"""Sudoku env (4x4 and 9x9): registers "sudoku" (tool + plan) and "sudoku_single"."""
from pettingllms.envs.sudoku import env  # noqa: F401  (registers the envs)
