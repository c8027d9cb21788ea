"""Prompts of the sudoku env (tool / plan roles and the single-agent variant)."""

ROLE_PROMPTS = {
    "tool": ("You are the tool agent of a two-agent team solving a Sudoku. You write a Python program "
             "that prints moves; they are checked on a copy of the board and shown to your teammate, "
             "the plan agent, who decides which moves to make."),
    "plan": ("You are the plan agent of a two-agent team solving a Sudoku. A teammate's program "
             "suggests moves; you decide the moves that are actually made on the board."),
    "single": "You solve Sudoku puzzles. Reason step by step, then give your moves.",
}

TASK = ("Fill the {size}x{size} Sudoku grid so that every row, every column and every "
        "{box_h}x{box_w} box contains each number 1-{size} exactly once. '.' is an empty cell; "
        "given numbers cannot be changed. Rows and columns are numbered from 1.")

_MOVES = ("Moves are (row, col, value) triples, 1-based; value 0 empties a cell you filled. "
          "You may instead give the whole filled grid: {size} lines of {size} digits, or a JSON "
          "list of rows. A move that repeats a number in its row, column or box is rejected "
          "and penalised.")

ACTION_FORMAT = ("Answer with one line: `Actions:` and a (row, col, value) triple for each empty cell you "
                 "fill. For example\nActions: ({ex_row}, {ex_col}, 1)\nputs 1 in row {ex_row}, column {ex_col}. Or answer `Actions:` "
                 "followed by the full grid. " + _MOVES)

TOOL_FORMAT = ("Write a Python program in one ```python code block. It reads the state as JSON on "
               "stdin, for example:\n{state_json}\n(grid: current board, 0 = empty; puzzle: the "
               "givens) and prints the moves, e.g. `Actions: (1, 2, 3), (4, 1, 2)` or the full grid, "
               "one row per line. " + _MOVES)
