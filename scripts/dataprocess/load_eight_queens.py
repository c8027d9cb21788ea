"""Write datasets/eight_queens/{train,test}.parquet (seeded procedural generation, works offline).

    python scripts/dataprocess/load_eight_queens.py [--out datasets/eight_queens] [--seed 0] [--n-train N] [--n-test N]

(--out datasets/eight_queens_easy builds the easy level.)
"""
from pettingllms.envs.eight_queens.data import build
from pettingllms.envs.grid.splits import data_cli

if __name__ == "__main__":
    data_cli("eight_queens", build)
