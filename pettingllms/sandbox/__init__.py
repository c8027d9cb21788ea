"""The one place untrusted (LLM-written) code runs.

    run_python(code, stdin="", limits=None) -> SandboxResult
    SandboxPool(workers).run_many([(code, stdin), ...], limits) / await .arun(code, stdin, limits)
    run_many(jobs, limits)          shared process-wide pool, for envs
    sandbox_backend()               which isolation is in use and what is weaker
"""
from pettingllms.sandbox.core import SandboxLimits, SandboxResult, run_python
from pettingllms.sandbox.isolation import Backend, detect_backend as sandbox_backend
from pettingllms.sandbox.pool import SandboxPool, run_many

__all__ = ["Backend", "SandboxLimits", "SandboxPool", "SandboxResult", "run_many",
           "run_python", "sandbox_backend"]
