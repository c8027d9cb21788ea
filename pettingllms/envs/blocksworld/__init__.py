"""Blocksworld env (the reference's Blocksworld): registers "blocksworld" (tool + plan) and "blocksworld_single"."""
from pettingllms.envs.blocksworld import env  # noqa: F401  (registers the envs)
