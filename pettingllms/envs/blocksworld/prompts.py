"""Prompts of the blocksworld env (tool / plan roles and the single-agent variant)."""

ROLE_PROMPTS = {
    "tool": ("You are the tool agent of a two-agent team solving a Blocksworld puzzle. You write a Python "
             "program that prints moves; they are checked on a copy of the blocks and shown to your "
             "teammate, the plan agent, who decides which moves to make."),
    "plan": ("You are the plan agent of a two-agent team solving a Blocksworld puzzle. A teammate's "
             "program suggests moves; you decide the moves that are actually made."),
    "single": "You solve Blocksworld puzzles. Reason step by step, then give your moves.",
}

TASK = ("Rearrange the blocks {blocks} into the goal stacks. Stacks are listed from bottom to top; the "
        "table holds any number of stacks, and the order of the stacks does not matter. Only a clear "
        "block (the top of a stack) can move, onto the table or onto another clear block. The best plan "
        "takes {optimal} moves; fewer moves are better.")

_MOVES = ("A move is (block, destination): (B, table) puts block B on the table, (B, C) puts B on top "
          "of C. A move of a block that is not clear, or onto a block that is not clear, is rejected "
          "and penalised.")

ACTION_FORMAT = ("Answer with one line: `Actions:` and your moves in order, for example\n"
                 "Actions: {example}\n" + _MOVES)

TOOL_FORMAT = ("Write a Python program in one ```python code block. It reads the state as JSON on stdin, "
               "for example:\n{state_json}\n(stacks and goal: lists of stacks, each bottom to top) and "
               "prints the moves, e.g. `Actions: (C, table), (B, C)`. " + _MOVES)
