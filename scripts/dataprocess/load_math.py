"""Write datasets/<preset>/{train,test}.parquet for the math env and print what was used.

    python scripts/dataprocess/load_math.py                        # datasets/math (hub if reachable)
    python scripts/dataprocess/load_math.py --preset math_easy     # the quick start's arithmetic
    python scripts/dataprocess/load_math.py --offline --sources gsm8k champ --out /tmp/m
    python scripts/dataprocess/load_math.py --preset math_published   # POLARIS, DAPO, AIME 1983-2024
    python scripts/dataprocess/load_math.py --preset polaris --hub-dir /data/hub   # local hub files
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

from pettingllms.envs.math.data import PRESETS, SOURCES, build
from pettingllms.errors import WriteFailed
from pettingllms.trainer.stopping import EXIT_IO_ERROR


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="math", choices=sorted(PRESETS),
                    help="which mix; also the default output folder name")
    ap.add_argument("--out", default=None, help="output folder (default: datasets/<preset>)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sources", nargs="+", default=None,
                    help=f"override the preset's sources: {' '.join(SOURCES)}")
    ap.add_argument("--hub-dir", default=None,
                    help="local copies of hub files as <dir>/<owner>/<name>/<file>, used before the hub "
                         "(default: $PETTINGLLMS_HUB_DIR)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--offline", dest="offline", action="store_true", default=None,
                      help="never touch the hub")
    mode.add_argument("--online", dest="offline", action="store_false",
                      help="use the hub (fails per source if unreachable)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the build's progress lines
    try:
        report = build(args.out or f"datasets/{args.preset}", seed=args.seed, offline=args.offline,
                       preset=args.preset, sources=args.sources, hub_dir=args.hub_dir)
    except (ValueError, RuntimeError) as e:
        print(f"load_math: {e}", file=sys.stderr)
        return 2
    except WriteFailed as e:  # the disk is full...: one line, no half-written split
        print(f"load_math: {e}", file=sys.stderr)
        return EXIT_IO_ERROR
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
