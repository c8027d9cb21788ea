"""N-queens env (the reference's EightQueens): registers "eight_queens" (tool + plan) and "eight_queens_single"."""
from pettingllms.envs.eight_queens import env  # noqa: F401  (registers the envs)
