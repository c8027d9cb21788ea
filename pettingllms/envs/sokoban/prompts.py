"""Prompts of the sokoban env (tool / plan roles and the single-agent variant)."""

ROLE_PROMPTS = {
    "tool": ("You are the tool agent of a two-agent team playing Sokoban. You write a Python program "
             "that prints moves; they are tried on a copy of the level and shown to your teammate, "
             "the plan agent, who decides which moves to make."),
    "plan": ("You are the plan agent of a two-agent team playing Sokoban. A teammate's program "
             "suggests moves; you decide the moves that are actually made."),
    "single": "You play Sokoban. Reason step by step, then give your moves.",
}

TASK = ("Push every box onto a target. Symbols: '#' wall, '_' floor, '.' target, '$' box, "
        "'*' box on a target, '@' you, '+' you on a target. Moves: U (up), D (down), L (left), "
        "R (right). Walking into a box pushes it one cell if the cell behind it is free; boxes "
        "cannot be pulled, and you cannot push two boxes at once. {n_boxes} box(es); "
        "fewer moves are better.")

_MOVES = "Moves that hit a wall or push a box into a wall or box are rejected and penalised."

ACTION_FORMAT = "Answer with one line: `Actions:` and your moves in order, for example\nActions: U, U, L, D\n" + _MOVES

TOOL_FORMAT = ("Write a Python program in one ```python code block. It reads the state as JSON on "
               "stdin, for example:\n{state_json}\n(rows: the level, top row first) and prints the "
               "moves, e.g. `Actions: U, U, L, D`. " + _MOVES)
