"""Grid path-planning env: registers "plan_path" (tool + plan), "plan_path_single" and "plan_path_vision"."""
from pettingllms.envs.plan_path import env  # noqa: F401  (registers the envs)
