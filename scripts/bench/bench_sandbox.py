"""Sandbox throughput: N trivial programs on 1 worker vs 2 workers.

    .venv/bin/python scripts/bench/bench_sandbox.py --n 200
    .venv/bin/python scripts/bench/bench_sandbox.py --resident-gb 6 --workers 2

Prints the backend, programs/s for each worker count and the 2-vs-1 ratio. `--resident-gb G`
first makes this process hold G GB (as a trainer holding a model does). Running as root with
util-linux setpriv, each count is measured twice, side by side: the uid switched by setpriv in
the child's exec chain (what the sandbox does) and by Popen's user= (which makes CPython fork
this whole process instead of vfork), with their ratio.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

from pettingllms.sandbox import SandboxLimits, SandboxPool, isolation, sandbox_backend

PROGRAM = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))"


def measure(workers: int, n: int, limits: SandboxLimits) -> float:  # programs/s
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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200, help="programs per measurement")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--resident-gb", type=float, default=0.0,
                    help="memory this process holds resident while measuring")
    args = ap.parse_args()
    backend = sandbox_backend()
    print(f"backend={backend.kind} separate_uid={backend.separate_uid} python={backend.python} "
          f"confinement={backend.confinement or '-'} setpriv={backend.setpriv or '-'}")
    held = bytearray(int(args.resident_gb * 2**30))
    for i in range(0, len(held), 4096):  # touch every page: resident, not just reserved
        held[i] = 1
    if held:
        print(f"holding {args.resident_gb:g} GB resident")
    limits = SandboxLimits(wall_s=10.0, cpu_s=5.0)
    ours = "setpriv" if backend.separate_uid and backend.setpriv else "default"
    launches = {ours: backend.setpriv}
    if ours == "setpriv":
        launches["popen-user"] = None
    rates = {}
    for w in args.workers:
        for name, setpriv in launches.items():
            isolation._backend = dataclasses.replace(backend, setpriv=setpriv)
            rates[w, name] = measure(w, args.n, limits)
            print(f"workers={w} launch={name}: {rates[w, name]:.1f} programs/s  ({args.n} programs)")
        if len(launches) > 1:
            print(f"ratio setpriv vs popen-user, workers={w}: "
                  f"{rates[w, 'setpriv'] / rates[w, 'popen-user']:.2f}x")
    isolation._backend = backend
    if 1 in args.workers:
        for w in args.workers:
            if w != 1:
                print(f"ratio {w} vs 1 workers ({ours}): {rates[w, ours] / rates[1, ours]:.2f}x")


if __name__ == "__main__":
    main()
