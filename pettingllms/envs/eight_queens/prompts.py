"""Prompts of the eight_queens env (tool / plan roles and the single-agent variant)."""

ROLE_PROMPTS = {
    "tool": ("You are the tool agent of a two-agent team solving an N-queens puzzle. You write a Python "
             "program that prints moves; they are checked on a copy of the board and shown to your "
             "teammate, the plan agent, who decides which moves to make."),
    "plan": ("You are the plan agent of a two-agent team solving an N-queens puzzle. A teammate's "
             "program suggests moves; you decide the moves that are actually made on the board."),
    "single": "You solve N-queens puzzles. Reason step by step, then give your moves.",
}

TASK = ("Place {n} queens on the {n}x{n} board, exactly one in each row, so that no two queens share "
        "a column or a diagonal. 'Q' is a queen, '.' an empty square. The queens on the board at the "
        "start are fixed. Rows and columns are numbered from 1.")

_MOVES = ("A move is a (row, col) pair, 1-based: it puts the row's queen in that column; (row, 0) "
          "removes a queen you placed. You may instead give the whole board: {n} column numbers, one "
          "per row from row 1, e.g. [2, 4, 1, 3] on a 4x4 board. A queen that shares a column or a "
          "diagonal with another queen is rejected and penalised.")

ACTION_FORMAT = ("Answer with one line: `Actions:` and a (row, col) pair for each queen you place. For "
                 "example\nActions: ({ex_row}, 1)\nputs a queen in row {ex_row}, column 1. " + _MOVES)

TOOL_FORMAT = ("Write a Python program in one ```python code block. It reads the state as JSON on stdin, "
               "for example:\n{state_json}\n(queens: the column of each row's queen, row 1 first, 0 = "
               "no queen; fixed_rows: rows whose queen is given) and prints the moves, e.g. "
               "`Actions: (1, 2), (3, 4)` or the whole board as a list. " + _MOVES)
