"""Write datasets/plan_path/{train,test}.parquet (seeded procedural generation, works offline).

    python scripts/dataprocess/load_plan_path.py [--out datasets/plan_path] [--seed 0] [--n-train N] [--n-test N]
"""
from pettingllms.envs.plan_path.data import build
from pettingllms.envs.grid.splits import data_cli

if __name__ == "__main__":
    data_cli("plan_path", build)
