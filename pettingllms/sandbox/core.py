"""Run one untrusted Python program: pick the backend (`isolation.py`), refuse where nothing
contains the program, run it (`process.py`) and count the outcome by kind.
"""
from __future__ import annotations

import threading
from collections import Counter

from pettingllms.sandbox import isolation
from pettingllms.sandbox.limits import SandboxLimits, SandboxResult
from pettingllms.sandbox.process import run_with
from pettingllms.utils import counters


# --- error counts (process-wide; runners turn differences into Batch.counters) ----------

_counts: Counter = Counter(runs=0)  # "runs" is reported even before the first run
_counts_lock = threading.Lock()


def error_kind(error: str | None) -> str | None:
    """A SandboxResult.error as a metric name: timeout, memory, output_limit, file_size,
    process_limit, crash (killed by a signal), refused, internal (the sandbox failed)."""
    if not error:
        return None
    head = error.split(":", 1)[0]
    return {"cpu_time": "timeout", "signal": "crash", "sandbox_error": "internal"}.get(head, head)


def sandbox_counts() -> dict[str, int]:
    """{"runs": n, "errors/<kind>": m, ...} since the process started."""
    with _counts_lock:
        return dict(_counts)


counters.register("sandbox", sandbox_counts)  # per-run metrics on Batch.counters


def _count(result: SandboxResult) -> SandboxResult:
    kind = error_kind(result.error)
    with _counts_lock:
        _counts["runs"] += 1
        if kind:
            _counts[f"errors/{kind}"] += 1
    return result


def run_python(code: str, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` as a Python program in the sandbox; never raises for bad programs.

    Where the sandbox cannot contain it (see `isolation.refusal`) the program does not run:
    the result has error "refused: ..." (and exit_code None)."""
    try:
        backend = isolation.detect_backend()
        refused = isolation.refusal(backend)
    except Exception as e:  # noqa: BLE001 - a sandbox problem must not crash the caller
        return _count(SandboxResult("", "", None, False, f"sandbox_error: {e}", 0.0))
    if refused:
        return _count(SandboxResult("", refused, None, False, "refused: " + refused, 0.0))
    return _count(run_with(backend, code, stdin, limits))

