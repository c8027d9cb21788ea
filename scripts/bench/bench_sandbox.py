"""Sandbox throughput: N trivial programs on 1 worker vs 2 workers.

    .venv/bin/python scripts/bench/bench_sandbox.py --n 200

Prints the backend, programs/s for each worker count and the 2-vs-1 ratio.
"""
from __future__ import annotations

import argparse
import time

from pettingllms.sandbox import SandboxLimits, SandboxPool, sandbox_backend

PROGRAM = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))"


def measure(workers: int, n: int, limits: SandboxLimits) -> float:
    jobs = [(PROGRAM, f"{i} {i + 1}") for i in range(n)]
    with SandboxPool(workers) as pool:
        pool.run_many(jobs[: workers * 2], limits)  # warm up
        t0 = time.perf_counter()
        results = pool.run_many(jobs, limits)
        elapsed = time.perf_counter() - t0
    bad = [r for r in results if not r.ok]
    if bad:
        raise SystemExit(f"{len(bad)} programs failed, e.g. {bad[0]}")
    if [r.stdout.strip() for r in results] != [str(2 * i + 1) for i in range(n)]:
        raise SystemExit("wrong outputs")
    return n / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=200, help="programs per measurement")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    backend = sandbox_backend()
    print(f"backend={backend.kind} separate_uid={backend.separate_uid} python={backend.python} "
          f"confinement={backend.confinement or '-'}")
    limits = SandboxLimits(wall_s=10.0, cpu_s=5.0)
    rates = {w: measure(w, args.n, limits) for w in args.workers}
    for w, rate in rates.items():
        print(f"workers={w}: {rate:.1f} programs/s  ({args.n} programs)")
    if 1 in rates and len(rates) > 1:
        for w, rate in rates.items():
            if w != 1:
                print(f"ratio {w} vs 1 workers: {rate / rates[1]:.2f}x")


if __name__ == "__main__":
    main()
