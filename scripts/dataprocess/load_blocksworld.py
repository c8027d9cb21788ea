"""Write datasets/blocksworld/{train,test}.parquet (seeded procedural generation, works offline).

    python scripts/dataprocess/load_blocksworld.py [--out datasets/blocksworld] [--seed 0] [--n-train N] [--n-test N]

(--out datasets/blocksworld_easy builds the easy level.)
"""
from pettingllms.envs.blocksworld.data import build
from pettingllms.envs.grid.splits import data_cli

if __name__ == "__main__":
    data_cli("blocksworld", build)
