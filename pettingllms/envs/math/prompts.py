"""Prompts of the math env: short role prompts the small model can follow.

Turn 0: each agent sees only the problem (independent first answers).
Later turns: each agent also sees its own last answer and the other agent's last
answer; the tool also sees its last program and what that program printed (or the
error). Everything shown is capped so a runaway output never bloats a prompt.
"""
from __future__ import annotations

TOOL_SYSTEM = (
    "You solve math problems by writing Python code. Reply with one ```python code block. "
    "The program must print only the final answer."
)
REASONER_SYSTEM = (
    "You solve math problems. Think briefly, then give the final answer in \\boxed{}, "
    "for example \\boxed{12}."
)
SINGLE_SYSTEM = REASONER_SYSTEM

SHOWN_ANSWER_CHARS = 120
SHOWN_OUTPUT_CHARS = 300
SHOWN_PROGRAM_CHARS = 1200


def clip(text: str | None, limit: int, keep: str = "head") -> str:
    """At most `limit` characters of text, marking what was cut."""
    if text is None:
        return "(none)"
    text = str(text)
    if len(text) <= limit:
        return text
    return text[:limit] + " …" if keep == "head" else "… " + text[-limit:]


def shown_answer(answer: str | None) -> str:
    return clip(answer, SHOWN_ANSWER_CHARS) if answer else "(no answer)"


def tool_user(question: str, turn: int, last_program: str | None, last_output: str,
              own_answer: str | None, reasoner_answer: str | None) -> str:
    if turn == 0:
        return f"Problem: {question}\nWrite a Python program that prints the answer."
    program = clip(last_program, SHOWN_PROGRAM_CHARS) if last_program else "(no program found)"
    return (
        f"Problem: {question}\n"
        f"Your last program:\n```python\n{program}\n```\n"
        f"It printed: {clip(last_output, SHOWN_OUTPUT_CHARS, keep='tail')}\n"
        f"Your answer: {shown_answer(own_answer)}\n"
        f"The reasoner's answer: {shown_answer(reasoner_answer)}\n"
        "Check both and write a Python program that prints the correct answer."
    )


def reasoner_user(question: str, turn: int, own_answer: str | None,
                  tool_answer: str | None) -> str:
    if turn == 0:
        return f"Problem: {question}"
    return (
        f"Problem: {question}\n"
        f"Your last answer: {shown_answer(own_answer)}\n"
        f"The Python tool's answer: {shown_answer(tool_answer)}\n"
        "Check both and give the correct final answer in \\boxed{}."
    )


def single_user(question: str, turn: int, own_answer: str | None) -> str:
    if turn == 0:
        return f"Problem: {question}"
    return (
        f"Problem: {question}\n"
        f"Your last answer: {shown_answer(own_answer)}\n"
        "Check it and give the correct final answer in \\boxed{}."
    )
