"""What the private Ray's token auth and loopback binding add to start-up.

    .venv/bin/python scripts/bench/bench_ray_start.py --runs 3

Each run is a fresh Python process, the two set-ups alternating: `off` is how the run started
its Ray before (RAY_AUTH_MODE=disabled, node address = the box's network address); `auth` is
pettingllms.utils.private_ray.start_ray (a fresh 0600 token, token auth on, loopback only).
Timed: ray.init, then one actor created and called once (what a rollout worker needs), then
ray.shutdown (which also removes the token). Prints each run and the medians, in seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one(mode: str, num_cpus: int) -> dict:
    if mode == "off":
        os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray

    from pettingllms.utils.private_ray import start_ray, stop_ray

    t0 = time.perf_counter()
    if mode == "off":
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level="WARNING")
    else:
        start_ray(num_cpus=num_cpus, logging_level=30)
    t1 = time.perf_counter()

    @ray.remote
    class Echo:
        def ping(self) -> int:
            return os.getpid()

    ray.get(Echo.remote().ping.remote())
    t2 = time.perf_counter()
    stop_ray() if mode == "auth" else ray.shutdown()
    t3 = time.perf_counter()
    return {"mode": mode, "init_s": t1 - t0, "first_actor_s": t2 - t1, "shutdown_s": t3 - t2, "total_s": t3 - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each set-up (alternating)")
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--one", choices=("off", "auth"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.num_cpus)))
        return
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    rows: dict[str, list[dict]] = {"off": [], "auth": []}
    for _ in range(args.runs):
        for mode in ("off", "auth"):
            out = subprocess.run([sys.executable, __file__, "--one", mode, "--num-cpus", str(args.num_cpus)],
                                 env=env, capture_output=True, text=True, check=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            rows[mode].append(row)
            print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                  flush=True)
    for mode, runs in rows.items():
        print(f"median {mode}: " + " ".join(f"{k}={statistics.median(r[k] for r in runs):.2f}"
                                            for k in ("init_s", "first_actor_s", "shutdown_s", "total_s")))


if __name__ == "__main__":
    main()
