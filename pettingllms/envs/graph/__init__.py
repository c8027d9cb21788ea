"""`graph`: a user's own agent program (any OpenAI-client framework), run per problem and graded.
Importing registers it."""
from pettingllms.envs.graph.env import GraphEnv, GraphOptions

__all__ = ["GraphEnv", "GraphOptions"]
