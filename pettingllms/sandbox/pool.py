"""Run many sandboxed programs in parallel.

Each program is its own subprocess, so a thread per in-flight program is all the
parallelism needs (threads wait on pipes, the GIL is free). `arun` hands the call to
the same threads so an asyncio rollout loop is never blocked.
"""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from pettingllms.sandbox.core import run_python
from pettingllms.sandbox.limits import SandboxLimits, SandboxResult


class SandboxPool:
    def __init__(self, workers: int = 2) -> None:
        if int(workers) < 1:
            raise ValueError(f"SandboxPool needs workers >= 1, got {workers}")
        self.workers = int(workers)
        self._executor = ThreadPoolExecutor(max_workers=self.workers,
                                            thread_name_prefix="sandbox")

    def run_many(self, jobs: list[tuple[str, str]], limits: SandboxLimits | None = None
                 ) -> list[SandboxResult]:
        """Results in the order of `jobs` (each a (code, stdin) pair)."""
        futures = [self._executor.submit(run_python, code, stdin, limits) for code, stdin in jobs]
        return [f.result() for f in futures]

    async def arun(self, code: str, stdin: str = "", limits: SandboxLimits | None = None
                   ) -> SandboxResult:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, run_python, code, stdin, limits)

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_shared: SandboxPool | None = None
_shared_lock = threading.Lock()


def run_many(jobs: list[tuple[str, str]], limits: SandboxLimits | None = None,
             workers: int = 2) -> list[SandboxResult]:
    """Run jobs on a process-wide shared pool (envs call this; they hold no pool themselves,
    which keeps them deep-copyable). `workers` sizes the pool on first use only."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SandboxPool(workers)
    return _shared.run_many(jobs, limits)
