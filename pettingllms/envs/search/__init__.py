"""Search env (the reference's search): a reasoning agent and a web-search agent over a retriever."""
from pettingllms.envs.search.env import SearchEnv

__all__ = ["SearchEnv"]
