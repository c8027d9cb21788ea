"""A code dataset row, the sandbox checks that keep only tests worth scoring, and its parquet form.

Row: id, source, kind ("function" | "io"), question, entry_point, starter, reference,
tests (JSON: list of assert snippets for "function", list of {input, output} for "io").
A kept test separates a correct solution from a useless one: the reference passes it and
a no-op body fails it (function rows); no stdin/stdout test expects empty output, so a
silent program passes none (io rows).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from pettingllms.envs.code.execution import function_program, outputs_match, solution_program
from pettingllms.errors import ConfigError
from pettingllms.sandbox import SandboxLimits, run_many
from pettingllms.utils.diskio import write_parquet

BUILD_LIMITS = SandboxLimits(wall_s=10.0, cpu_s=10.0, memory_mb=1024)
MAX_REF_TESTS = 10


def spread_evenly(items: list, k: int) -> list:
    """k items evenly spaced over the list (keeps first and last), order kept."""
    if len(items) <= k:
        return items
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


NO_OP = "pass"  # a candidate that does nothing: it must fail at least one kept test


def _passed(jobs: list[tuple[str, str]], marker: str) -> list[bool]:
    results = run_many(jobs, BUILD_LIMITS)
    _refused(results)
    return [r.ok and r.stdout.rstrip().endswith(marker) for r in results]


def _refused(results: list) -> None:
    """A build whose runs the sandbox refuses would silently drop every test: stop it."""
    refused = next((r.error for r in results if (r.error or "").startswith("refused")), None)
    if refused:
        raise ConfigError(f"cannot verify the code dataset: sandbox {refused}")


def verify_function_rows(rows: list[dict]) -> dict:
    """Keep the assert tests the reference passes and a no-op body fails, so a correct
    solution scores 1 and code that does nothing scores 0; rows left with no test go."""
    marker = "__ref_ok_" + os.urandom(6).hex()
    ref = _passed([(function_program(r["reference"], t, marker), "")
                   for r in rows for t in r["tests"]], marker)
    noop = _passed([(function_program(solution_program("function", r["starter"], NO_OP), t,
                                      marker), "") for r in rows for t in r["tests"]], marker)
    stats = {"ref_failed_tests": 0, "noop_passed_tests": 0, "dropped_rows": []}
    i = 0
    for r in rows:
        kept = []
        for t in r["tests"]:
            stats["ref_failed_tests"] += not ref[i]
            stats["noop_passed_tests"] += ref[i] and noop[i]
            if ref[i] and not noop[i]:
                kept.append(t)
            i += 1
        r["tests"] = spread_evenly(kept, MAX_REF_TESTS)
    stats["dropped_rows"] = [r["id"] for r in rows if not r["tests"]]
    rows[:] = [r for r in rows if r["tests"]]
    return stats


def verify_io_rows(rows: list[dict], run_reference: bool) -> dict:
    """Drop stdin/stdout tests that a silent program passes (empty expected output) and,
    with `run_reference`, those the row's reference does not reproduce; then empty rows."""
    stats = {"silent_passed_tests": 0, "ref_failed_tests": 0, "dropped_rows": []}
    for r in rows:
        kept = [t for t in r["tests"] if not outputs_match("", t["output"])]
        stats["silent_passed_tests"] += len(r["tests"]) - len(kept)
        r["tests"] = kept
    if run_reference:
        todo = [r for r in rows if r["reference"].strip()]
        results = run_many([(r["reference"], t["input"]) for r in todo for t in r["tests"]],
                           BUILD_LIMITS)
        _refused(results)
        it = iter(results)
        for r in todo:
            kept = [t for t in r["tests"] if (res := next(it)).ok
                    and outputs_match(res.stdout, t["output"])]
            stats["ref_failed_tests"] += len(r["tests"]) - len(kept)
            r["tests"] = kept
    stats["dropped_rows"] = [r["id"] for r in rows if not r["tests"]]
    rows[:] = [r for r in rows if r["tests"]]
    return stats


def write_split(path: Path, rows: list[dict]) -> None:
    """One split's rows as parquet (tests as a JSON string column)."""
    import pandas as pd

    frame = pd.DataFrame([{**r, "tests": json.dumps(r["tests"])} for r in rows],
                         columns=["id", "source", "kind", "question", "entry_point",
                                  "starter", "reference", "tests"])
    write_parquet(frame, path)
