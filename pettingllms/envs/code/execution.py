"""Run a program against unit tests, every run through `pettingllms.sandbox`.

One sandboxed process per test: tests cannot disturb each other, and a crash or
timeout costs only its own test. Tests run in chunks of the shared pool's width; once a
chunk has a timeout the remaining tests count as failed without running, so a looping
solution costs one chunk of wall time instead of one timeout per test.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from pettingllms.envs.code.parsing import strip_main_guard
from pettingllms.sandbox import SandboxLimits, SandboxResult, run_many

POOL_WORKERS = max(1, int(os.environ.get("PETTINGLLMS_SANDBOX_WORKERS", os.cpu_count() or 1)))


@dataclass
class Outcome:
    passed: bool
    detail: str = ""  # short reason for a failure, shown to agents and in traces


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def _failure(r: SandboxResult) -> str:
    if r.timed_out:
        return "timed out"
    if r.error:
        return r.error
    return _last_line(r.stderr) or f"exit code {r.exit_code}"


def _run_chunked(jobs: list[tuple[str, str]], limits: SandboxLimits
                 ) -> list[SandboxResult | None]:
    results: list[SandboxResult | None] = []
    for i in range(0, len(jobs), POOL_WORKERS):
        chunk = run_many(jobs[i:i + POOL_WORKERS], limits, workers=POOL_WORKERS)
        results.extend(chunk)
        if any(r.timed_out for r in chunk):
            results.extend([None] * (len(jobs) - len(results)))
            break
    return results


def solution_program(kind: str, starter: str, code: str) -> str:
    """What runs for a candidate: function tasks run after the starter, so helpers given in
    the prompt exist (the env scores this, the data build checks a no-op through it)."""
    if not code.strip():
        return ""
    return starter + "\n\n" + code if kind == "function" else code


def function_program(program: str, test: str, marker: str) -> str:
    """Solution then one assert snippet then a marker line only reached if nothing failed."""
    return f"{strip_main_guard(program)}\n\n{test}\nprint({marker!r})\n"


def run_function_tests(program: str, tests: list[str], limits: SandboxLimits
                       ) -> list[Outcome]:
    if not tests:
        return []
    if not program.strip():
        return [Outcome(False, "no code") for _ in tests]
    marker = "__pettingllms_test_passed_" + os.urandom(8).hex()
    jobs = [(function_program(program, t, marker), "") for t in tests]
    out = []
    for r in _run_chunked(jobs, limits):
        if r is None:
            out.append(Outcome(False, "skipped after a timeout"))
        elif r.ok and r.stdout.rstrip().endswith(marker):
            out.append(Outcome(True))
        elif r.ok:
            out.append(Outcome(False, "exited before the test ran"))
        else:
            tail = _last_line(r.stderr)
            detail = "assertion failed" if tail.startswith("AssertionError") else _failure(r)
            out.append(Outcome(False, detail))
    return out


def _number(tok: str) -> float | None:
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _close(a, b) -> bool:
    """Deep equality with float tolerance (for JSON values)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def outputs_match(got: str, expected: str) -> bool:
    """Whitespace-insensitive comparison, numbers within 1e-6, JSON values compared deeply."""
    g, e = got.split(), expected.split()
    if g == e:
        return True
    if len(g) == len(e) and all(x == y or (_number(x) is not None and _number(y) is not None
                                           and math.isclose(_number(x), _number(y),
                                                            rel_tol=1e-6, abs_tol=1e-6))
                                for x, y in zip(g, e)):
        return True
    try:
        return _close(json.loads(got), json.loads(expected))
    except (ValueError, RecursionError):
        return False


def run_io_tests(program: str, tests: list[dict[str, str]], limits: SandboxLimits
                 ) -> list[Outcome]:
    if not tests:
        return []
    if not program.strip():
        return [Outcome(False, "no code") for _ in tests]
    jobs = [(program, t["input"]) for t in tests]
    out = []
    for t, r in zip(tests, _run_chunked(jobs, limits)):
        if r is None:
            out.append(Outcome(False, "skipped after a timeout"))
        elif not r.ok:
            out.append(Outcome(False, _failure(r)))
        elif outputs_match(r.stdout, t["output"]):
            out.append(Outcome(True))
        else:
            out.append(Outcome(False, f"expected {t['output'][:80]!r}, "
                                          f"got {r.stdout.strip()[:80]!r}"))
    return out


def run_tests(kind: str, program: str, tests: list, limits: SandboxLimits) -> list[Outcome]:
    if kind == "function":
        return run_function_tests(program, tests, limits)
    return run_io_tests(program, tests, limits)


def pass_ratio(outcomes: list[Outcome]) -> float:
    return sum(o.passed for o in outcomes) / len(outcomes) if outcomes else 0.0
