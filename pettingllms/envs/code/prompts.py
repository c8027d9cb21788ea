"""Role prompts and per-turn messages for the code env."""
from __future__ import annotations

from typing import Any

CODER_SYSTEM = (
    "You are the coder in a two-agent team that solves programming problems. A tester writes "
    "unit tests for your code. Write a complete, correct Python 3 solution using only the "
    "standard library. Think briefly, then put the whole solution in one ```python code block.")

TESTER_SYSTEM = (
    "You are the tester in a two-agent team that solves programming problems. A coder writes "
    "the solution; you write unit tests that every correct solution passes and that catch "
    "wrong ones. Work out each expected result carefully from the problem statement. Do not "
    "write the solution yourself.")

SOLVER_SYSTEM = (
    "You solve programming problems and test your own solutions. Write a complete, correct "
    "Python 3 solution using only the standard library, and unit tests for it.")


def task_text(problem: dict[str, Any]) -> str:
    if problem.get("kind") == "function":
        return (f"Implement the Python function `{problem['entry_point']}`:\n"
                f"```python\n{problem['question'].rstrip()}\n```")
    return f"Problem:\n{problem['question'].rstrip()}"


def solution_format(problem: dict[str, Any]) -> str:
    if problem.get("kind") == "function":
        return (f"Write the complete function `{problem['entry_point']}` with exactly this "
                "signature (plus any imports and helpers it needs). Do not read input or print: "
                "tests call the function.")
    return ("Write a complete program that reads from standard input and prints the answer to "
            "standard output.")


def tests_format(problem: dict[str, Any], max_tests: int, block: str = "python") -> str:
    if problem.get("kind") == "function":
        ep = problem["entry_point"]
        return (f"Write up to {max_tests} tests as assert statements that call `{ep}` directly, "
                f"all in one ```{block} block. Each top-level assert is one test, e.g.\n"
                f"```{block}\nassert {ep}(...) == ...\n```")
    wrap = (f"all inside one ```{block} block" if block == "tests" else "")
    return (f"Write up to {max_tests} tests {wrap}, each as an input for standard input and the "
            "exact expected output:\n<input>\n...\n</input>\n<output>\n...\n</output>").replace(
                "  ", " ")


def show_failures(failures: list[tuple[str, str]], limit: int = 4) -> str:
    """Failing tests as text: (test, reason) pairs, long ones cut."""
    lines = []
    for test, why in failures[:limit]:
        shown = test if len(test) <= 400 else test[:200] + "\n...\n" + test[-150:]
        lines.append(f"- test:\n{shown}\n  result: {why}")
    if len(failures) > limit:
        lines.append(f"... and {len(failures) - limit} more failing tests")
    return "\n".join(lines)


def coder_message(problem: dict[str, Any], code: str, failures: list[tuple[str, str]] | None
                  ) -> str:
    parts = [task_text(problem), solution_format(problem)]
    if code:
        parts.append(f"Your previous solution:\n```python\n{code}\n```")
    if failures:
        parts.append("The tester's tests that fail on it:\n" + show_failures(failures) +
                     "\nFix the solution if it is wrong (tests can be wrong too: keep correct "
                     "code as it is).")
    elif code:
        parts.append("Improve the solution if needed.")
    return "\n\n".join(parts)


def tester_message(problem: dict[str, Any], code: str, max_tests: int,
                   failures: list[tuple[str, str]] | None, had_tests: bool) -> str:
    parts = [task_text(problem)]
    if code:
        parts.append(f"The coder's current solution:\n```python\n{code}\n```")
    else:
        parts.append("The coder has not produced a solution yet.")
    if had_tests:
        parts.append("Your previous tests failing on it:\n" + show_failures(failures)
                     if failures else "Your previous tests all pass on it.")
    parts.append(tests_format(problem, max_tests))
    return "\n\n".join(parts)


def solver_message(problem: dict[str, Any], code: str, max_tests: int,
                   failures: list[tuple[str, str]] | None) -> str:
    parts = [task_text(problem), solution_format(problem)]
    if code:
        parts.append(f"Your previous solution:\n```python\n{code}\n```")
    if failures:
        parts.append("Your own tests that fail on it:\n" + show_failures(failures))
    parts.append("Give the solution in one ```python block, then your tests. " +
                 tests_format(problem, max_tests, block="tests"))
    return "\n\n".join(parts)
