"""Sokoban env: registers "sokoban" (tool + plan), "sokoban_single" and "sokoban_vision"."""
from pettingllms.envs.sokoban import env  # noqa: F401  (registers the envs)
