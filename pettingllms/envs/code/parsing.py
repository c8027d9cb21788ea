"""Pull code and unit tests out of raw model text; split reference test suites.

Everything here is pure string/AST work: it never runs code and never raises on
garbage (it returns empty results instead).
"""
from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_PY_TAGS = {"python", "py", "python3", "py3"}
_IO_PAIR = re.compile(r"<input>\s*?\n?(.*?)</input>\s*<output>\s*?\n?(.*?)</output>", re.S | re.I)


def _parses(src: str) -> bool:
    try:
        ast.parse(src)
        return True
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every ``` block; an unterminated last block counts too."""
    return [(tag.lower(), body) for tag, body in _FENCE.findall(text or "")]


def _defines(src: str, name: str) -> bool:
    """Whether `src` defines a top-level function `name`."""
    try:
        return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
                   for n in ast.parse(src).body)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False


def extract_code(text: str, defines: str | None = None) -> str:
    """The solution program in a model answer.

    Preference: with `defines` (a function task's entry point), the last block that parses
    and defines that function, so a usage example after the solution (`print(f(2))`) is not
    taken for it; then the last ```python block that parses; else the last ``` block that
    parses; else the whole text if it parses and looks like code; else "".
    """
    if not isinstance(text, str) or not text.strip():
        return ""
    blocks = fenced_blocks(text)
    if defines:
        for tag, body in reversed(blocks):
            if tag != "tests" and body.strip() and _defines(body, defines):
                return body.strip("\n")
    for want_tag in (True, False):
        for tag, body in reversed(blocks):
            if tag == "tests":
                continue
            if want_tag and tag not in _PY_TAGS:
                continue
            if body.strip() and _parses(body):
                return body.strip("\n")
    if not blocks and _parses(text) and re.search(r"^\s*(def |import |from |print\(|class )",
                                                  text, re.M):
        return text.strip("\n")
    return ""


def strip_main_guard(code: str) -> str:
    """Drop top-level `if __name__ == "__main__":` blocks (they read stdin in function tasks)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return code
    lines = code.splitlines()
    for node in reversed(tree.body):
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) \
                and "__main__" in ast.unparse(node.test):
            del lines[node.lineno - 1:node.end_lineno]
    return "\n".join(lines)


def _contains_assert(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Assert) for n in ast.walk(node))


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}


def _binds(node: ast.AST) -> set[str]:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
             and isinstance(n.ctx, (ast.Store, ast.Del))}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        names.add(node.name)
    return names


def split_assert_tests(src: str, max_tests: int, uses: str | None = None) -> list[str]:
    """Split assert-style test code into standalone snippets.

    Each top-level statement holding an assert is one test; other statements
    (imports, helper definitions, assignments) are setup and precede every later test.
    `uses`: keep only tests that reference this name, directly or through setup names
    computed from it (`assert True, "..."` tests nothing and any code would pass it).
    """
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        # salvage single-line asserts from text that does not parse as a whole
        tree = ast.Module(body=[], type_ignores=[])
        for line in (src or "").splitlines():
            if line.strip().startswith("assert ") and _parses(line.strip()):
                tree.body.extend(ast.parse(line.strip()).body)
    setup: list[str] = []
    tests: list[str] = []
    derived = {uses}  # names whose value may depend on the function under test
    for node in tree.body:
        text = ast.unparse(node)
        if _contains_assert(node):
            if uses is not None and not _loads(node) & derived:
                continue
            tests.append("\n".join(setup + [text]))
            if len(tests) >= max_tests:
                break
        else:
            setup.append(text)
            if _loads(node) & derived or _binds(node) & derived:
                derived |= _binds(node)
    return tests


def extract_assert_tests(text: str, max_tests: int, tests_block_only: bool = False,
                         uses: str | None = None) -> list[str]:
    """Tester answer -> assert tests (from ```python/```tests blocks, else the raw text).

    `tests_block_only`: read only ```tests blocks (the single-agent answer holds code too).
    `uses`: drop tests that never reference this function (see split_assert_tests).
    """
    if not isinstance(text, str):
        return []
    tags = {"tests"} if tests_block_only else _PY_TAGS | {"tests", ""}
    blocks = [b for tag, b in fenced_blocks(text) if tag in tags]
    if tests_block_only and not blocks:
        return []
    src = "\n".join(blocks) if blocks else text
    return split_assert_tests(src, max_tests, uses)


def extract_io_tests(text: str, max_tests: int, tests_block_only: bool = False
                     ) -> list[dict[str, str]]:
    """Tester answer -> [{"input", "output"}] from <input>...</input><output>...</output> pairs."""
    if not isinstance(text, str):
        return []
    if tests_block_only:
        text = "\n".join(b for tag, b in fenced_blocks(text) if tag == "tests")
    pairs = []
    for inp, out in _IO_PAIR.findall(text):
        if out.strip() == "":
            continue  # an empty expected output tests nothing
        pairs.append({"input": inp if inp.endswith("\n") or not inp else inp + "\n",
                      "output": out.strip("\n")})
        if len(pairs) >= max_tests:
            break
    return pairs


def humaneval_tests(test_module: str, entry_point: str) -> list[str]:
    """HumanEval `check(candidate)` suite -> standalone snippets, one per assert statement.

    Module-level helpers stay (METADATA dropped), `candidate` is bound to the entry point,
    and setup statements inside `check` precede the asserts that follow them. Asserts that
    never touch the entry point (HumanEval's `assert True, "This prints if ..."`) are dropped.
    """
    tree = ast.parse(test_module)
    module_setup: list[str] = []
    check = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            check = node
        elif not (isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "METADATA" for t in node.targets)):
            module_setup.append(ast.unparse(node))
    if check is None:
        return []
    prefix = module_setup + [f"candidate = {entry_point}"]
    body = ast.Module(body=check.body, type_ignores=[])
    return split_assert_tests("\n".join(prefix + [ast.unparse(body)]), max_tests=10_000,
                              uses=entry_point)
