"""The one place untrusted (LLM-written) code runs.

    run_python(code, stdin="", limits=None) -> SandboxResult
    SandboxPool(workers).run_many([(code, stdin), ...], limits) / await .arun(code, stdin, limits)
    run_many(jobs, limits)          shared process-wide pool, for envs
    sandbox_backend()               which isolation is in use and what is weaker
    configure_sandbox(allow_weak)   the `sandbox` config block: run uncontained code or refuse it
    sandbox_refusal(backend)        why code would be refused there (None: it runs); logs once
    sandbox_counts()                runs and errors by kind so far (per-step metrics)
"""
from pettingllms.sandbox.core import error_kind, run_python, sandbox_counts
from pettingllms.sandbox.isolation import configure as configure_sandbox
from pettingllms.sandbox.isolation import refusal as sandbox_refusal
from pettingllms.sandbox.isolation import detect_backend as sandbox_backend
from pettingllms.sandbox.launch import Backend
from pettingllms.sandbox.limits import SandboxLimits, SandboxResult
from pettingllms.sandbox.pool import SandboxPool, run_many

__all__ = ["Backend", "SandboxLimits", "SandboxPool", "SandboxResult", "configure_sandbox",
           "error_kind", "run_many", "run_python", "sandbox_backend", "sandbox_counts",
           "sandbox_refusal"]
