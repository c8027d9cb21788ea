"""Sokoban env: registers "sokoban" (tool + plan) and "sokoban_single"."""
from pettingllms.envs.sokoban import env  # noqa: F401  (registers the envs)
