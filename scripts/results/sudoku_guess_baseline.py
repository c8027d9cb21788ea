"""What a plan agent that only writes well-formed moves scores on sudoku_easy: the bar a
cold-started (SFT) model's held-out success must be read against.

    python scripts/results/sudoku_guess_baseline.py [--limit 16] [--turns 2] [--draws 2000]

The guesser plays the real env: each turn the tool agent writes no program, then the plan agent
fills every empty cell with a value drawn uniformly from 1..n, in one `Actions:` line (what the
SFT rows teach, with the value left to chance). Rejected moves leave their cells empty, so a later
turn guesses them again. Prints the mean success per problem and overall on the first --limit test
problems, averaged over --draws seeded draws.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def guess_reply(env, rng: random.Random) -> str:
    """One `Actions:` line filling every empty cell of the env's grid with a uniform guess, in the
    env's own move format (as the SFT rows write the solver's answer)."""
    fills = [("fill", r + 1, c + 1, rng.randint(1, env.n))
             for r, row in enumerate(env.state["grid"]) for c, v in enumerate(row) if v == 0]
    return "Actions: " + env.format_actions(fills)


def play(env, problem: dict, turns: int, rng: random.Random) -> bool:
    """One episode of the guesser through the env; True when the puzzle ends solved."""
    env.reset(problem, 0)
    for _ in range(turns):
        if env.done:
            break
        env.step("tool", "no program")
        env.step("plan", guess_reply(env, rng))
        env.end_turn()
    return env.success


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="sudoku_easy")
    ap.add_argument("--data-root", default="datasets")
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit", type=int, default=16, help="the first N problems of the split")
    ap.add_argument("--turns", type=int, default=2, help="env.max_turns")
    ap.add_argument("--draws", type=int, default=2000, help="episodes per problem")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from pettingllms.envs import make_env
    from pettingllms.envs.dataset import load_split

    problems = load_split(args.data, args.split, args.data_root, limit=args.limit,
                          builder="pettingllms.envs.sudoku.data")
    env = make_env("sudoku", max_turns=args.turns)
    rng = random.Random(args.seed)
    per_problem = {}
    for problem in problems:
        wins = sum(play(env, problem, args.turns, rng) for _ in range(args.draws))
        per_problem[problem["id"]] = {"success": wins / args.draws, "blanks": env.blanks}  # set by reset
    overall = sum(p["success"] for p in per_problem.values()) / max(len(per_problem), 1)
    print(json.dumps({"data": args.data, "split": args.split, "problems": len(problems), "turns": args.turns,
                      "draws": args.draws, "success": round(overall, 4), "per_problem": per_problem}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
