"""MetaAgent-X envs `autoevol` and `autoevol_mixed` (math + code): a designer writes a workflow, an
executor runs it. Importing registers them."""
from pettingllms.envs.autoevol.env import AutoEvolEnv, AutoEvolOptions
from pettingllms.envs.autoevol.mixed import AutoEvolMixedEnv

__all__ = ["AutoEvolEnv", "AutoEvolMixedEnv", "AutoEvolOptions"]
