"""Grid path-planning env: registers "plan_path" (tool + plan) and "plan_path_single"."""
from pettingllms.envs.plan_path import env  # noqa: F401  (registers the envs)
