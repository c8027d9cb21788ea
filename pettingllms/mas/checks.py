"""Static DSL checks of a design, run on the host before it goes to the sandbox.

`check_design(source) -> list[str]` returns one message per problem (empty: the design passes).
They make a design *valid* in the sense the env's format terms and the validity rate use: it
parses, imports only the DSL (and `dsl.ALLOWED_MODULES`), defines `workflow`, and stays away from
the escape hatches below. The sandbox contains whatever gets past them anyway; these checks only
turn the obvious cases into a clear message before any process starts.
"""
from __future__ import annotations

import ast

from pettingllms.mas import dsl, workflow_api

_FORBIDDEN_NAMES = {"open", "eval", "exec", "compile", "__import__", "globals", "locals", "vars",
                    "input", "breakpoint", "exit", "quit"}


DESIGN_FORMATS = ("pettingllms", "workflow")
WORKFLOW_MODULES = tuple(workflow_api.SUBMODULES)


def check_design(source: str, max_chars: int = 20000, design_format: str = "pettingllms") -> list[str]:
    """`design_format` pettingllms: our DSL, a `workflow` function or node; workflow: the released
    model's API (imports from `workflow`, a script that gets `question` and prints its answer)."""
    if design_format not in DESIGN_FORMATS:
        return [f"unknown design format {design_format!r} (one of {', '.join(DESIGN_FORMATS)})"]
    if not isinstance(source, str) or not source.strip():
        return ["empty design"]
    if len(source) > max_chars:
        return [f"design is {len(source)} characters (limit {max_chars})"]
    try:
        tree = ast.parse(source, filename="mas_design.py")
    except SyntaxError as e:
        return [f"syntax: line {e.lineno}: {e.msg}"]
    except (ValueError, RecursionError, MemoryError) as e:
        return [f"syntax: {type(e).__name__}: {e}"]
    problems: list[str] = []
    own = WORKFLOW_MODULES if design_format == "workflow" else (dsl.DSL_MODULE,)
    allowed = set(dsl.ALLOWED_MODULES) | set(own)
    only = f"only {own[0]} and {', '.join(dsl.ALLOWED_MODULES)}"
    defines_workflow = design_format == "workflow"  # a released-format design is a script
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in allowed:
                    problems.append(f"line {node.lineno}: import of {alias.name!r} (a design imports "
                                    f"{only})")
        elif isinstance(node, ast.ImportFrom):
            if node.level or node.module not in allowed:
                problems.append(f"line {node.lineno}: import from {node.module!r} (a design imports "
                                f"{only})")
        elif isinstance(node, ast.Name) and node.id in _FORBIDDEN_NAMES:
            problems.append(f"line {node.lineno}: use of {node.id!r} is not allowed in a design")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__") and node.attr.endswith("__"):
            problems.append(f"line {node.lineno}: dunder attribute {node.attr!r} is not allowed")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "workflow":
            defines_workflow = True
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "workflow"
                                                  for t in node.targets):
            defines_workflow = True
    if not defines_workflow:
        problems.append("the design defines no `workflow` (a function workflow(question) -> str "
                        "or a node)")
    return problems[:20]
