"""Process-wide event counters (sandbox runs and errors, math-judge errors) as per-run metrics.

A source registers a prefix and a function that returns its counts since the process started
(`{"runs": n, "errors/<kind>": m}`): the sandbox as `sandbox`, the math judge as `judge`.
Whoever steps envs wraps its `run` in `counted`, which puts the counts of that run on
`Batch.counters` as metrics (`sandbox/runs`, `sandbox/errors`, `sandbox/errors/<kind>`,
`judge/errors`, ...). So the counts travel with the Batch from the process that stepped the envs
(a Ray rollout worker, say) to the trainer, which sums the batches (`sum_counters`).

The delta is process-wide: anything counted in the process while a run is in progress lands on
that run's Batch. One runner call at a time per process is what the backends do (the trainer loop
and evaluation call the runner one after another; each Ray worker is an actor running one call at
a time); two overlapping runs in one process would each count the other's events.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterable

_SOURCES: dict[str, Callable[[], dict[str, int]]] = {}
_QUIET: set[str] = set()  # sources that report nothing until they have counted something


def register(prefix: str, counts: Callable[[], dict[str, int]], quiet_when_empty: bool = False) -> None:
    """Report `counts()` (cumulative, by key) under `<prefix>/<key>`; registering again replaces.
    quiet_when_empty: nothing while counts() is empty (an optional source, e.g. env=graph, that a
    Ray worker may never import, so local and Ray runs report the same metrics)."""
    _SOURCES[prefix] = counts
    if quiet_when_empty:
        _QUIET.add(prefix)


def snapshot() -> dict[str, dict[str, int]]:
    """Every registered source's counts now."""
    return {prefix: dict(counts()) for prefix, counts in _SOURCES.items()}


def counter_delta(before: dict[str, int], after: dict[str, int], prefix: str
                  ) -> dict[str, float]:
    """Per-run counts from two snapshots of one source; `runs` is always reported, an
    `errors/<kind>` only when it moved, and `<prefix>/errors` is the sum of those kinds."""
    m = {f"{prefix}/{k}": float(after[k] - before.get(k, 0)) for k in after
         if k == "runs" or after[k] != before.get(k, 0)}
    m[f"{prefix}/errors"] = sum(v for k, v in m.items() if k.startswith(f"{prefix}/errors/"))
    return m


def since(before: dict[str, dict[str, int]]) -> dict[str, float]:
    """The metrics of everything counted since the snapshot `before`."""
    out: dict[str, float] = {}
    for prefix, after in snapshot().items():
        if prefix in _QUIET and not after:
            continue
        out.update(counter_delta(before.get(prefix, {}), after, prefix))
    return out


def sum_counters(parts: Iterable[dict[str, float]]) -> dict[str, float]:
    """Batch counters of several processes (rollout workers) as one: sums by key."""
    out: dict[str, float] = {}
    for part in parts:
        for k, v in part.items():
            out[k] = out.get(k, 0.0) + float(v)
    return out


def counted(run: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a runner's `run(...) -> Batch`: the Batch's `counters` hold what the run counted."""
    @functools.wraps(run)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = snapshot()
        batch = run(*args, **kwargs)
        batch.counters = since(before)
        return batch
    return wrapper
