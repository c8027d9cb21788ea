"""Build datasets/code/{train,test}.parquet (HumanEval + CodeI/O offline; APPS train/test,
CodeContests train/test and LiveCodeBench v6 test from the HF hub or a local copy of its files).

    .venv/bin/python scripts/dataprocess/load_code.py [--out datasets/code] [--seed 0] [--offline]
        [--hub-dir DIR]   # DIR/<owner>/<name>/<file>, e.g. DIR/codeparrot/apps/test.jsonl
"""
from __future__ import annotations

import argparse
import json
import logging

from pettingllms.envs.code.data import build
from pettingllms.errors import WriteFailed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="datasets/code")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--offline", action="store_true", help="never try the HF hub")
    ap.add_argument("--io-tasks", type=int, default=120, help="CodeI/O stdin/stdout tasks")
    ap.add_argument("--humaneval-limit", type=int, default=None)
    ap.add_argument("--hub-dir", default=None, help="local copies of hub files, used before the hub "
                                                    "(default: $PETTINGLLMS_HUB_DIR)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the build's progress lines
    try:
        report = build(args.out, seed=args.seed, offline=True if args.offline else None,
                       io_tasks=args.io_tasks, humaneval_limit=args.humaneval_limit,
                       hub_dir=args.hub_dir)
    except (ValueError, WriteFailed) as e:  # --out already holds a split, the disk is full: one line
        raise SystemExit(f"load_code: {e}") from None
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
