"""How many torch threads to use: `trainer.threads` is a count, 0 (torch's default) or `auto`.

torch's OpenMP workers spin while they wait for each other, so on a box where other processes
hold cores, one thread per *allowed* core makes every parallel region wait on the slowest,
descheduled worker (a step can get several times slower). `auto` counts the cores this process
may run on (sched_getaffinity) and subtracts the ones other processes are using now
(/proc/loadavg), and uses the rest, at least one.
"""
from __future__ import annotations

import logging
import math
import os
from typing import Any

log = logging.getLogger(__name__)


def choose_threads(allowed: int, machine_cpus: int, load1: float, runnable: int) -> int:
    """The thread count for `allowed` cores on a machine of `machine_cpus`.

    `load1` is the 1-minute load average and `runnable` the tasks running right now (the 4th
    field of /proc/loadavg, which counts the reader itself). Other work is the smaller of the
    two (minus ourselves for `runnable`): the instant count alone catches a short spike, the
    average alone still remembers our own start-up. Load is machine-wide, so when we may use
    only part of the machine it is scaled to our share.
    """
    allowed = max(1, int(allowed))
    machine_cpus = max(allowed, int(machine_cpus))
    others = max(0.0, min(float(runnable) - 1.0, float(load1)))
    others *= allowed / machine_cpus
    return max(1, allowed - math.floor(others + 0.5))


def read_load(path: str = "/proc/loadavg") -> tuple[float, int] | None:
    """(1-minute load, runnable tasks now), or None where the file is missing (not Linux)."""
    try:
        with open(path) as f:
            fields = f.read().split()
        return float(fields[0]), int(fields[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


def allowed_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def auto_threads() -> int:
    allowed = allowed_cpus()
    load = read_load()
    if load is None:
        return allowed
    return choose_threads(allowed, os.cpu_count() or allowed, *load)


def parse_threads(value: Any) -> int | str:
    """A validated `trainer.threads`: an int >= 0 or "auto"; ValueError with a readable message."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(value, bool):
        raise ValueError(f"trainer.threads must be a count >= 0 or 'auto', got {value!r}")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"trainer.threads must be a count >= 0 or 'auto', got {value!r}") from None
    if n < 0 or str(n) != str(value).strip():
        raise ValueError(f"trainer.threads must be a count >= 0 or 'auto', got {value!r}")
    return n


def apply_threads(value: Any) -> int:
    """Set torch's thread count from `trainer.threads`; return the count torch now uses."""
    import torch

    setting = parse_threads(value)
    n = auto_threads() if setting == "auto" else setting
    if n > 0:
        torch.set_num_threads(n)
    if setting == "auto":
        log.info("trainer.threads=auto: %d torch threads (%d allowed cores, load %s)", n, allowed_cpus(),
                 read_load())
    return torch.get_num_threads()


def worker_threads(setting: Any, cpus_per_worker: float, current: int) -> int:
    """A rollout worker's torch threads for `trainer.threads`: a count as given; `auto` the CPUs
    Ray reserved for the worker (ray.cpus_per_worker, at least one): the box's free cores are the
    driver's to count, not each worker's; 0 keeps `current` (Ray's OMP_NUM_THREADS default)."""
    value = parse_threads(setting)
    if value == "auto":
        return max(1, int(cpus_per_worker))
    return int(value) if int(value) > 0 else int(current)
