"""The designer's prompt: the DSL in brief, two worked designs, the question.

`designer_messages(question, feedback=None)` -> chat messages. `feedback` is the previous
attempt's failure (run_query retries with it). The reference text is the DSL module's own
listing, so the prompt cannot drift from the code.
"""
from __future__ import annotations

from pettingllms.mas import dsl
from pettingllms.mas.templates import load_templates

_EXAMPLES = ("reflection", "ensemble")


def _reference() -> str:
    doc = dsl.__doc__ or ""
    start = doc.index("Every node is called")
    end = doc.index("This file is stdlib-only")
    return doc[start:end].strip()


def designer_system_prompt() -> str:
    templates = load_templates()
    examples = "\n\n".join(f"```python\n{templates[name].strip()}\n```" for name in _EXAMPLES)
    return (
        "You design a multi-agent system that solves the user's problem. Write it as one Python "
        "program that uses only this DSL (`from pettingllms.mas.dsl import *`; the modules "
        f"{', '.join(dsl.ALLOWED_MODULES)} may also be imported) and defines "
        "`workflow(question: str) -> str` (or `workflow = <node>`), which returns the final "
        "answer. Each Agent is answered by a language model; keep the team small.\n\n"
        f"{_reference()}\n\nExamples:\n\n{examples}\n\n"
        "Reply with exactly one ```python block containing the complete design.")


def designer_messages(question: str, feedback: str | None = None) -> list[dict[str, str]]:
    user = f"Problem:\n{question}\n\nWrite the design for this problem."
    if feedback:
        user += f"\n\nYour previous design failed: {feedback}\nWrite a corrected design."
    return [{"role": "system", "content": designer_system_prompt()},
            {"role": "user", "content": user}]
