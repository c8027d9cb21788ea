"""Prompts of the plan_path env (tool / plan roles and the single-agent variant)."""

ROLE_PROMPTS = {
    "tool": ("You are the tool agent of a two-agent team finding a shortest path on a grid. You write "
             "a Python program that prints moves; they are tried on a copy of the grid and shown to "
             "your teammate, the plan agent, who decides which moves to make."),
    "plan": ("You are the plan agent of a two-agent team finding a shortest path on a grid. A "
             "teammate's program suggests moves; you decide the moves that are actually made."),
    "single": "You find shortest paths on grids. Reason step by step, then give your moves.",
}

TASK = ("Move from 'A' (you) to 'G' (the goal) on a {height}x{width} grid. '.' is free, '#' is an "
        "obstacle. Moves: U (up, row - 1), D (down, row + 1), L (left, col - 1), R (right, col + 1). "
        "The shortest path takes {optimal} moves; fewer moves are better.")

_MOVES = "Moves into an obstacle or off the grid are rejected and penalised."

ACTION_FORMAT = "Answer with one line: `Actions:` and your moves in order, for example\nActions: R, R, D, L\n" + _MOVES

TOOL_FORMAT = ("Write a Python program in one ```python code block. It reads the state as JSON on "
               "stdin, for example:\n{state_json}\n(rows: the grid, top row first; position and goal: "
               "[row, col], 0-based) and prints the moves, e.g. `Actions: R, R, D, L`. " + _MOVES)
