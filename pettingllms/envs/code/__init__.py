"""Code env (`code`: coder + tester; `code_single`: one solver). Importing registers both."""
from pettingllms.envs.code.env import CodeEnv, CodeSingleEnv

__all__ = ["CodeEnv", "CodeSingleEnv"]
