"""The package's module structure, read from the sources with ``ast`` (nothing is imported).

- No import cycle among mentored's own modules, lazy imports (inside functions) included: a lazy
  import hides a cycle from the interpreter, not from the reader, and the order of first use then
  decides which module half-exists. ``if TYPE_CHECKING:`` blocks are left out (never run).
- Every module lists its public names in ``__all__``, and every listed name is defined there.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mentored"
MODULES = {path.stem: path for path in sorted(PACKAGE.glob("*.py"))}  # "__init__" is the package itself
_COMPILED = {path.stem for path in PACKAGE.glob("*.pyi")}  # the compiled core (_core), stubs only here



def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST):
    """Every node under ``node``, the bodies of ``if TYPE_CHECKING:`` left out (their ``else`` kept)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.orelse:
                yield sub
                yield from _walk(sub)
            continue
        yield child
        yield from _walk(child)


def _targets(node: ast.AST) -> list[str]:
    """The package's modules that an import statement loads (the package's __init__ as "__init__")."""
    if isinstance(node, ast.Import):
        out = []
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == "mentored":
                out.append(parts[1] if len(parts) > 1 else "__init__")
        return out
    if isinstance(node, ast.ImportFrom):
        if node.level == 0:
            parts = (node.module or "").split(".")
            if parts[0] != "mentored":
                return []
            rest = parts[1:]
        elif node.level == 1:  # the package is flat: one dot is mentored itself
            rest = node.module.split(".") if node.module else []
        else:
            raise AssertionError(f"an import {node.level} levels up in a flat package (line {node.lineno})")
        if rest:
            return [rest[0]]
        # `from . import x`: the submodule x if there is one, else a name of the package's __init__.
        return [a.name if a.name in MODULES or a.name in _COMPILED else "__init__" for a in node.names]
    return []


def _graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import}, for .py modules of the package."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in MODULES.items():
        edges: dict[str, int] = {}
        for node in _walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            for target in _targets(node):
                if target in MODULES and target != name:  # the compiled _core is not a source module
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def _components(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _cycle(graph: dict[str, dict[str, int]], comp: set[str]) -> str:
    """One cycle through the component, each step with the line of its import."""
    start = min(comp)
    path, seen = [start], {start}
    while True:
        v = path[-1]
        nxt = sorted(w for w in graph[v] if w in comp)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            path.append(start)
            break
        step = next((w for w in nxt if w not in seen), None)
        if step is None:  # every neighbour seen: close the loop at the first one on the path
            w = next(w for w in nxt if w in path)
            path = path[path.index(w):] + [w]
            break
        path.append(step)
        seen.add(step)
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(path, path[1:])) + f" -> {path[-1]}"


def test_no_import_cycle():
    graph = _graph()
    bad = list(_components(graph))
    assert not bad, "import cycles among mentored's modules (lazy imports count):\n" + "\n".join(
        f"{sorted(c)}: {_cycle(graph, c)}" for c in bad
    )


def test_the_graph_sees_lazy_and_absolute_imports():
    """The parser itself: a lazy relative import, an absolute one, and a TYPE_CHECKING block left out."""
    src = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .hf import Pair\n"
        "def f():\n    from .oracle import oracle_solve\n    import mentored.rules\n    from mentored import reference\n"
        "from . import solve\n"
    )
    found = [t for node in _walk(ast.parse(src)) for t in _targets(node)]
    assert found == ["oracle", "rules", "reference", "__init__"]
    assert [t for node in _walk(ast.parse("from . import _core")) for t in _targets(node)] == ["_core"]


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names bound at module level: definitions, assignments and imports, in if/try blocks too."""
    names: set[str] = set()

    def bind(target: ast.expr) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)

    def scan(body) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    bind(t)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                bind(node.target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    names.add(a.asname or a.name.split(".")[0])
            elif isinstance(node, ast.If):
                scan(node.body)
                scan(node.orelse)
            elif isinstance(node, ast.Try):
                scan(node.body)
                for h in node.handlers:
                    scan(h.body)
                scan(node.orelse)
                scan(node.finalbody)

    scan(tree.body)
    return names


def _all_of(tree: ast.Module):
    """The literal ``__all__`` of a module, or None."""
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = ast.literal_eval(node.value)
            assert isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value), "__all__ must be a literal list of names"
            return list(value)
    return None


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_lists_its_public_names(name):
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    listed = _all_of(tree)
    assert listed is not None, f"mentored/{name}.py has no __all__"
    assert len(set(listed)) == len(listed), f"mentored/{name}.py: __all__ lists a name twice"
    missing = sorted(set(listed) - _top_level_names(tree))
    assert not missing, f"mentored/{name}.py: __all__ lists names it does not define: {missing}"


def test_the_version_is_written_once():
    """pyproject.toml reads the version from mentored/__init__.py; the installed metadata agrees."""
    import importlib.metadata
    import re
    import tomllib

    import mentored

    meta = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in meta["project"] and "version" in meta["project"]["dynamic"]
    source = meta["tool"]["scikit-build"]["metadata"]["version"]
    assert source == {"provider": "scikit_build_core.metadata.regex", "input": "mentored/__init__.py"}
    written = re.findall(r'^__version__ = "([^"]+)"$', MODULES["__init__"].read_text(encoding="utf-8"), re.M)
    assert written == [mentored.__version__]
    assert importlib.metadata.version("mentored") == mentored.__version__
