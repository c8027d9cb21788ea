"""Write datasets/sokoban/{train,test}.parquet (seeded procedural generation, works offline).

    python scripts/dataprocess/load_sokoban.py [--out datasets/sokoban] [--seed 0] [--n-train N] [--n-test N]
"""
from pettingllms.envs.sokoban.data import build
from pettingllms.envs.grid.splits import data_cli

if __name__ == "__main__":
    data_cli("sokoban", build)
