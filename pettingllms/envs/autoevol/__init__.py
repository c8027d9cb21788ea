"""MetaAgent-X env `autoevol`: a designer writes a workflow, an executor runs it. Importing registers it."""
from pettingllms.envs.autoevol.env import AutoEvolEnv, AutoEvolOptions

__all__ = ["AutoEvolEnv", "AutoEvolOptions"]
