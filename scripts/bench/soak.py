#!/usr/bin/env python
"""Soak test: does a long Ray run leak memory, file descriptors or processes?

    nice -n 10 .venv/bin/python scripts/bench/soak.py --steps 200 [--workers 2] [--out DIR] [key=value ...]

Trains the tiny_test experiment (tiny random model, math env) with trainer.backend=ray and
--workers rollout workers for --steps steps, one `fit` step at a time. After each step it records,
for the driver and for every rollout worker: resident memory (RSS, /proc/<pid>/statm), open file
descriptors (/proc/<pid>/fd) and live descendant processes (sandboxes, env helpers). Writes
DIR/soak.json (every step plus the summary) and DIR/soak.png (matplotlib, when installed).

Goal: RSS at the end within 10% of RSS at step --warmup (default 20), and no growth in open fds
or child processes after it. Each figure is the mean of a few steps (`--window`), as RSS moves
by a page or two from step to step. Exit 0 when the goal holds, 1 when it does not.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")
RSS_GROWTH_LIMIT = 0.10


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE / 2 ** 20
    except (OSError, IndexError, ValueError):
        return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def sample(pid: int) -> dict[str, Any]:
    from pettingllms.utils.procs import descendants

    return {"pid": pid, "rss_mb": rss_mb(pid), "fds": open_fds(pid), "children": len(descendants(pid))}


def _series(steps: list[dict[str, Any]], who: str, key: str) -> list[float]:
    """One figure per step: the driver's, or the workers' sum (a recreated worker keeps its slot)."""
    if who == "driver":
        return [float(s["driver"][key] or 0) for s in steps]
    return [float(sum(w[key] or 0 for w in s["workers"])) for s in steps]


def summarize(steps: list[dict[str, Any]], warmup: int = 20, window: int = 5) -> dict[str, Any]:
    """Growth from step `warmup` to the end: RSS as a fraction, fds and processes as counts.
    With fewer than warmup + window steps the warm-up is cut to half the run (and said so)."""
    n = len(steps)
    if n < 2:
        raise ValueError(f"a soak needs at least 2 steps, got {n}")
    warm = warmup if n >= warmup + 2 * window else max(1, n // 2)
    w = max(1, min(window, (n - warm + 1) // 2))  # the two windows do not overlap
    out: dict[str, Any] = {"steps": n, "warmup_step": warm, "window": w, "warmup_cut": warm != warmup}
    ok = True
    for who in ("driver", "workers"):
        for key in ("rss_mb", "fds", "children"):
            series = _series(steps, who, key)
            start, end = mean(series[warm - 1:warm - 1 + w]), mean(series[-w:])  # series[i] is step i + 1
            row = {"at_warmup": round(start, 2), "at_end": round(end, 2), "max_after_warmup": max(series[warm - 1:])}
            if key == "rss_mb":
                row["growth"] = round((end - start) / start, 4) if start else 0.0
                row["ok"] = row["growth"] < RSS_GROWTH_LIMIT
            else:
                row["growth"] = round(end - start, 2)
                row["ok"] = row["growth"] <= 0
            ok = ok and row["ok"]
            out[f"{who}/{key}"] = row
    out["ok"] = ok
    return out


def summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = [f"{summary['steps']} steps; growth from step {summary['warmup_step']} to the end "
             f"(means of {summary['window']} steps)" + (" [run too short for the usual warm-up]"
                                                          if summary["warmup_cut"] else "")]
    for key, row in summary.items():
        if isinstance(row, dict):
            growth = f"{100 * row['growth']:+.1f}%" if key.endswith("rss_mb") else f"{row['growth']:+g}"
            lines.append(f"  {key:18} {row['at_warmup']:>9} -> {row['at_end']:>9}  {growth:>8}  "
                         f"{'ok' if row['ok'] else 'GROWS'}")
    lines.append("goal met" if summary["ok"] else "goal NOT met")
    return lines


def plot(steps: list[dict[str, Any]], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install matplotlib)"
    x = [s["step"] for s in steps]
    fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    for ax, key, label in zip(axes, ("rss_mb", "fds", "children"), ("RSS (MB)", "open fds", "child processes")):
        for who in ("driver", "workers"):
            ax.plot(x, _series(steps, who, key), label=who if who == "driver" else "workers (sum)")
        ax.set_ylabel(label)
        ax.legend()
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return f"plot: {path}"


def save(out: Path, steps: list[dict[str, Any]], summary: dict[str, Any] | None = None) -> None:
    from pettingllms.utils.diskio import write_atomic

    write_atomic(out / "soak.json", json.dumps({"command": sys.argv, "summary": summary, "steps": steps}, indent=1))


def run(args: argparse.Namespace, overrides: list[str]) -> list[dict[str, Any]]:
    import ray

    from pettingllms.cli.config_loading import load_config
    from pettingllms.trainer.local import LocalTrainer

    cfg = load_config("tiny_test", [
        "trainer.backend=ray", f"ray.num_rollout_workers={args.workers}", f"ray.num_cpus={args.workers}",
        "ray.cpus_per_worker=0.5", f"trainer.total_steps={args.steps}", "trainer.checkpoint.save_freq=0",
        "trainer.validation.val_freq=0", f"trainer.output_dir={args.out / 'outputs'}",
        f"trainer.run_name=soak-{time.strftime('%Y%m%d-%H%M%S')}", "trainer.logging.logger=[jsonl]", *overrides])
    trainer = LocalTrainer(cfg)
    steps: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    try:
        for step in range(1, args.steps + 1):
            trainer.fit(max_steps=1)
            if trainer.stopped or trainer.failed:
                raise SystemExit(f"soak: the run ended at step {trainer.step}: {trainer.stopped or trainer.failed}")
            pids = ray.get([w.pid.remote() for w in trainer.backend.workers])
            steps.append({"step": step, "time_s": round(time.perf_counter() - t0, 2),
                          "driver": sample(os.getpid()), "workers": [sample(p) for p in pids]})
            if step == 1 or step % 10 == 0 or step == args.steps:
                save(args.out, steps)  # a soak stopped part way keeps what it measured
                d = steps[-1]["driver"]
                print(f"step {step} ({steps[-1]['time_s']:.0f}s): driver {d['rss_mb']:.0f} MB {d['fds']} fds "
                      f"{d['children']} children; workers " + ", ".join(
                          f"{w['rss_mb']:.0f} MB {w['fds']} fds {w['children']} children"
                          for w in steps[-1]["workers"]), flush=True)
    finally:
        trainer.close()
    return steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Any other key=value is a config override of tiny_test.")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2, help="Ray rollout workers")
    ap.add_argument("--warmup", type=int, default=20, help="growth is measured from this step")
    ap.add_argument("--window", type=int, default=5, help="steps averaged at each end")
    ap.add_argument("--out", type=Path, default=None, help="folder for soak.json / soak.png (default: a temp folder)")
    args, overrides = ap.parse_known_args(argv)
    if args.steps < 2:
        ap.error("--steps must be at least 2")
    args.out = (args.out or Path(tempfile.mkdtemp(prefix="pettingllms-soak-"))).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    steps = run(args, overrides)
    summary = summarize(steps, args.warmup, args.window)
    save(args.out, steps, summary)
    print("\n".join(summary_lines(summary)))
    print(f"data: {args.out / 'soak.json'}")
    print(plot(steps, args.out / "soak.png"))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
