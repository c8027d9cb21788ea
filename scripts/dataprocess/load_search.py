"""Write a search data folder: train.parquet, test.parquet (+ corpus.jsonl for the synthetic sets).

    python scripts/dataprocess/load_search.py [--out datasets/search] [--seed 0] [--n-train N] [--n-test N]
        synthetic 2-hop questions over a seeded invented knowledge base (offline);
        --out datasets/search_easy builds the 1-hop level
    python scripts/dataprocess/load_search.py --hub --train-set nq --test-sets nq,hotpotqa,bamboogle \
        --out datasets/search_flashrag [--hub-dir DIR] [--offline] [--limit N]
        FlashRAG QA sets (RUC-NLPIR/FlashRAG_datasets), from a local copy
        (DIR/RUC-NLPIR/FlashRAG_datasets/<set>/<split>.jsonl, or $PETTINGLLMS_HUB_DIR) else the hub;
        search them through a retrieval server (env.options.search_url)
"""
import argparse
import json

from pettingllms.envs.search.data import build
from pettingllms.envs.search.hub import build_hub
from pettingllms.errors import ConfigError

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Write datasets/search*/{train,test}.parquet")
    ap.add_argument("--out", default=None, help="output folder (default datasets/search, or datasets/search_flashrag)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-train", type=int, default=None)
    ap.add_argument("--n-test", type=int, default=None)
    ap.add_argument("--hub", action="store_true", help="FlashRAG QA sets instead of the synthetic data")
    ap.add_argument("--train-set", default="nq")
    ap.add_argument("--test-sets", default="nq", help="comma-separated, e.g. nq,hotpotqa,2wikimultihopqa,bamboogle")
    ap.add_argument("--hub-dir", default=None, help="local hub files (default $PETTINGLLMS_HUB_DIR)")
    ap.add_argument("--offline", action="store_true", help="never ask the hub (local files only)")
    ap.add_argument("--limit", type=int, default=None, help="rows per set")
    args = ap.parse_args()
    try:
        if args.hub:
            report = build_hub(args.out or "datasets/search_flashrag", train_set=args.train_set,
                               test_sets=[s.strip() for s in args.test_sets.split(",") if s.strip()],
                               hub_dir=args.hub_dir, online=not args.offline, limit=args.limit)
        else:
            report = build(args.out or "datasets/search", seed=args.seed, n_train=args.n_train, n_test=args.n_test)
    except (ConfigError, FileNotFoundError, ValueError) as e:
        raise SystemExit(f"load_search: {e}") from None
    print(json.dumps(report, indent=2, default=str))
