"""Write datasets/sudoku/{train,test}.parquet (seeded procedural generation, works offline).

    python scripts/dataprocess/load_sudoku.py [--out datasets/sudoku] [--seed 0] [--n-train N] [--n-test N]
"""
from pettingllms.envs.sudoku.data import build
from pettingllms.envs.grid.splits import data_cli

if __name__ == "__main__":
    data_cli("sudoku", build)
