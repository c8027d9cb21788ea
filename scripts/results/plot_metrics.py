#!/usr/bin/env python
"""Plot metrics of a run's metrics.jsonl against the step (a PNG), e.g. a co-training reward curve.

    python scripts/results/plot_metrics.py outputs/autoevol_cotrain/<run>/metrics.jsonl \
        --keys episode/team_reward reward/designer/mean reward/executor/mean --out curve.png

Rows without a key are skipped for that key; evaluation rows (keys under val/) plot only when named.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

DEFAULT_KEYS = ("episode/team_reward", "reward/designer/mean", "reward/executor/mean")


def series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    pts = [(float(r["step"]), float(r[key])) for r in rows
           if "step" in r and isinstance(r.get(key), (int, float)) and not math.isnan(float(r[key]))]
    return [p[0] for p in pts], [p[1] for p in pts]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", help="a metrics.jsonl (one JSON object per step)")
    ap.add_argument("--keys", nargs="+", default=list(DEFAULT_KEYS), help="metric names to plot")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--title", default="", help="plot title (default: the run folder's name)")
    args = ap.parse_args(argv)

    path = Path(args.metrics)
    if not path.is_file():
        print(f"plot_metrics: {path}: no such file", file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    found = {k: series(rows, k) for k in args.keys}
    if not any(xs for xs, _ in found.values()):
        print(f"plot_metrics: none of {args.keys} is in {path}", file=sys.stderr)
        return 2

    import matplotlib
    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, (xs, ys) in found.items():
        if xs:
            ax.plot(xs, ys, marker="o", label=key)
    ax.set_xlabel("step")
    ax.set_ylabel("value")
    ax.set_title(args.title or path.parent.name)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out} ({', '.join(f'{k}: {len(xs)} points' for k, (xs, _) in found.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
