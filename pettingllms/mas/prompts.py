"""The designer's prompt: the DSL in brief, two worked designs, the question.

`designer_messages(question, feedback=None, design_format="pettingllms")` -> chat messages
(`workflow`: the released model's prompt, see WORKFLOW_SYSTEM). `feedback` is the previous
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


# The released model's (Mercury7353/MetaAgent-X) designer prompt: it was trained to answer this
# with a `workflow`-API program (pettingllms/mas/workflow_api.py) in a <code> ```python block.
WORKFLOW_SYSTEM = "You are an expert Python developer specializing in multi-agent workflow systems."
WORKFLOW_USER = "Design Multi Agent System for the Question: "


def designer_messages(question: str, feedback: str | None = None,
                      design_format: str = "pettingllms") -> list[dict[str, str]]:
    if design_format == "workflow":
        user = WORKFLOW_USER + question
        if feedback:
            user += f"\n\nYour previous design failed: {feedback}\nWrite a corrected design."
        return [{"role": "system", "content": WORKFLOW_SYSTEM}, {"role": "user", "content": user}]
    user = f"Problem:\n{question}\n\nWrite the design for this problem."
    if feedback:
        user += f"\n\nYour previous design failed: {feedback}\nWrite a corrected design."
    return [{"role": "system", "content": designer_system_prompt()},
            {"role": "user", "content": user}]
