"""The package keeps its shape: no import circles, no oversized modules.

Import graph. Every `pettingllms/**/*.py` is parsed with `ast`; each import of a `pettingllms.*`
module is an edge, wherever it sits: at module level and inside functions (a function-local
import only postpones a circle to the first call, it does not remove it). Imports under
`if TYPE_CHECKING:` are skipped: they never run. Relative imports are resolved; `from pkg import
name` is an edge to `pkg.name` when that is a module, else an edge to `pkg` (its `__init__`).
Dynamic imports (`importlib.import_module(f"...")`) are not seen.

Packages. Importing `pettingllms.a.b` also runs `pettingllms/a/__init__.py` first. The graph
adds that edge (importer -> `pettingllms.a`) only for an importer outside `pettingllms.a`: for a
module inside it, `a/__init__` has already started running before the module itself could (Python
initialises parents first), so the import starts nothing new. This keeps the usual facade, an
`__init__` re-exporting its submodules which import each other by full name, free of false
circles, while a module that imports names from its own package's `__init__` (`from pettingllms.a
import Thing`, Thing not a submodule) is still an edge back into `__init__`, a real circle.
"""
from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "pettingllms"
MAX_LINES = 500


# ----------------------------------------------------------------------------- the walker

def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under root/package (a package is its __init__)."""
    files = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in `tree` except those in the body of `if TYPE_CHECKING:`."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return found


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of `known` that one import statement in `module` names directly."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in known}
    if node.level:  # relative: resolve against the importer's package
        base = module.split(".")
        base = base[:len(base) - node.level + (1 if is_package else 0)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    out = {f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in known}
    if len(out) < len(node.names) and source in known:  # some name is not a submodule
        out.add(source)
    return out


def import_graph(root: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    """module -> the modules its imports run (see the module docstring for what counts)."""
    files = module_files(root, package)
    known = set(files)
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _imports(tree):
            for target in _targets(node, module, is_package, known):
                graph[module].add(target)
                parts = target.split(".")
                for i in range(1, len(parts)):  # the parent packages' __init__s it also runs
                    parent = ".".join(parts[:i])
                    inside = module == parent or module.startswith(parent + ".")
                    if parent in known and not inside:
                        graph[module].add(parent)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components, each sorted; all of them, singletons included."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def _shortest_cycle(graph: dict[str, set[str]], start: str, members: set[str]) -> list[str]:
    """start -> ... -> start, by breadth-first search inside one component."""
    came_from: dict[str, str] = {}
    todo = deque([start])
    while todo:
        v = todo.popleft()
        for w in sorted(graph[v] & members):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return path[::-1] + [start]
            if w not in came_from:
                came_from[w] = v
                todo.append(w)
    raise AssertionError(f"{start} is on no cycle")


def circles(graph: dict[str, set[str]]) -> list[str]:
    """Each import circle as a readable chain: every component of more than one module, or a
    module importing itself; the chain is a shortest cycle through its first module, and the
    component's other modules are listed after it."""
    out = []
    for component in strongly_connected(graph):
        if len(component) == 1 and component[0] not in graph[component[0]]:
            continue
        members = set(component)
        chain = _shortest_cycle(graph, component[0], members)
        rest = sorted(members - set(chain))
        out.append(" -> ".join(chain) + (f"  (same circle: {', '.join(rest)})" if rest else ""))
    return out


# ----------------------------------------------------------------------------- the checks

def test_no_import_circle():
    found = circles(import_graph(ROOT))
    assert not found, f"{len(found)} import circle(s) in {PACKAGE}/:\n  " + "\n  ".join(found)


def test_no_module_over_the_line_limit():
    counts = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
              for path in module_files(ROOT, PACKAGE).values()}
    over = sorted((n, name) for name, n in counts.items() if n > MAX_LINES)
    assert not over, f"{len(over)} module(s) over {MAX_LINES} lines (split along a seam):\n  " + \
        "\n  ".join(f"{name}: {n}" for n, name in reversed(over))


# ----------------------------------------------------------------------------- the walker itself

def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_walker_finds_a_circle_hidden_in_a_function(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import helper\n",
        "pkg/b.py": "def helper():\n    from . import a\n    return a\n",
    })
    assert circles(import_graph(tmp_path, "pkg")) == ["pkg.a -> pkg.b -> pkg.a"]


def test_walker_sees_no_circle_in_a_facade_or_type_hints(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg.core import run\nfrom pkg.pool import Pool\n",
        "pkg/core.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.pool import Pool\n",
        "pkg/pool.py": "from pkg.core import run\n",
        "pkg/io/__init__.py": "from pkg.io.files import read\n",
        "pkg/io/files.py": "from pkg.core import run\n",
        "pkg/user.py": "import pkg.io.files\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert circles(graph) == []
    assert graph["pkg.pool"] == {"pkg.core"}
    assert graph["pkg.user"] == {"pkg.io", "pkg.io.files"}  # outside pkg.io: runs its __init__ too


def test_walker_sees_a_module_importing_its_own_facade(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "from pkg.core import run\n",
        "pkg/core.py": "def run():\n    pass\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/tool.py": "from pkg import run\nfrom ..core import run as again\n",
    })
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.sub.tool"] == {"pkg", "pkg.core"}
    _write(tmp_path, {"pkg/core.py": "from pkg import run as _\n"})
    assert circles(import_graph(tmp_path, "pkg")) == ["pkg -> pkg.core -> pkg"]


# Where the run config's blocks may be read: the config package and the one place that hands each
# component its own typed blocks. Everything else takes blocks (RolloutSettings, WorkerSettings,
# MappingConfig, LoopSettings, ...), so a component never depends on the whole run config.
BLOCK_READERS = ("config/", "trainer/assemble.py")
_BLOCK_READ = re.compile(r"\bcfg\.(trainer|rollout|model|algorithm)\b")


def block_reads(package: Path) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith(BLOCK_READERS):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _BLOCK_READ.search(line):
                out.append(f"{PACKAGE}/{rel}:{n}: {line.strip()}")
    return out


def test_only_the_config_package_and_assemble_read_run_config_blocks():
    found = block_reads(ROOT / PACKAGE)
    assert not found, "read the block through trainer/assemble.py instead:\n  " + "\n  ".join(found)


def test_block_read_check_finds_a_reader(tmp_path):
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "assemble.py").write_text("x = cfg.trainer.total_steps\n")
    (tmp_path / "engine.py").write_text("steps = cfg.trainer.total_steps\nname = self.cfgx.model\n")
    assert block_reads(tmp_path) == [f"{PACKAGE}/engine.py:1: steps = cfg.trainer.total_steps"]
