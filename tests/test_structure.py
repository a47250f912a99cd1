"""The package's module structure, read from the sources with ``ast`` (nothing is imported).

- The layer contracts: each sub-package of ``mentored`` (a layer) imports only the layers listed for
  it in ``LAYERS``, no private module or name crosses from one sub-package into another, and torch is
  imported only by the torch backend, the integrations and the demo. Lazy imports (inside
  functions) count: they hide a dependency from the interpreter, not from the reader.
- No import cycle among mentored's modules, lazy imports included (the order of first use would
  otherwise decide which module half-exists). ``if TYPE_CHECKING:`` blocks are left out (never run).
- Every module lists its public names in ``__all__``, and every listed name is defined there.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mentored"


def _dotted(path: Path) -> str:
    """A source file's module under mentored: "verify.serving", "divergences" (its __init__), "__init__" (the root)."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


MODULES = {_dotted(path): path for path in sorted(PACKAGE.rglob("*.py")) if "models" not in path.relative_to(PACKAGE).parts}
_PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py" and name != "__init__"}
_COMPILED = {path.stem for path in PACKAGE.glob("*.pyi")}  # the compiled core (_core), stubs only here

# layer (a sub-package, or a root module) -> the layers it may import. The root's __init__ is the
# public face; the compiled core (_core) sits under every layer and any may call it.
LAYERS = {
    "divergences": set(),
    "check": {"divergences"},
    "backends": {"divergences", "check"},
    "solver": {"divergences", "check", "backends"},
    "verify": {"divergences", "check", "backends"},  # decoding never needs the solver's face
    "analysis": {"divergences", "check", "solver"},
    "integrations": {"divergences", "check", "verify"},
    "demo": {"__init__", "divergences", "check", "solver", "verify", "integrations"},
    "__init__": {"divergences", "solver", "verify"},
    "__main__": {"demo"},
}
TORCH_LAYERS = {"integrations", "demo"}  # and the torch backend module itself
TORCH_MODULES = {"backends.torch"}


def _layer(module: str) -> str:
    return module.split(".")[0]


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


def _package_of(module: str) -> list[str]:
    """The package a module's relative imports start from, as parts under mentored ([] = the root)."""
    if module == "__init__" or module in ("__main__", "_core"):
        return []
    parts = module.split(".")
    return parts if module in _PACKAGES else parts[:-1]


def _imports(module: str, node: ast.AST) -> list[tuple[str, list[str]]]:
    """(mentored module loaded, names taken from it) for an import statement in ``module``; the root
    package as "__init__", a submodule taken by `from pkg import sub` as that submodule."""
    if isinstance(node, ast.Import):
        out = []
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] == "mentored":
                out.append((".".join(parts[1:]) or "__init__", []))
        return out
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level == 0:
        parts = (node.module or "").split(".")
        if parts[0] != "mentored":
            return []
        base = parts[1:]
    else:
        pkg = _package_of(module)
        if node.level - 1 > len(pkg):
            raise AssertionError(f"{module}: an import {node.level} levels up leaves the package (line {node.lineno})")
        base = pkg[: len(pkg) - (node.level - 1)] + (node.module.split(".") if node.module else [])
    target = ".".join(base) or "__init__"
    out, names = [], []
    for alias in node.names:
        sub = ".".join(base + [alias.name])
        if sub in MODULES or sub in _COMPILED:
            out.append((sub, []))
        else:
            names.append(alias.name)
    if names:
        out.append((target, names))
    return out


def _targets(node: ast.AST, module: str = "__init__") -> list[str]:
    return [t for t, _ in _imports(module, node)]


def _edges() -> list[tuple[str, str, list[str], int]]:
    """(importer, imported, names, line) for every import of a mentored module by a mentored module."""
    out = []
    for name, path in MODULES.items():
        for node in _walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            for target, names in _imports(name, node):
                if target != name:
                    out.append((name, target, names, node.lineno))
    return out


def _graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import}, for .py modules of the package."""
    graph: dict[str, dict[str, int]] = {name: {} for name in MODULES}
    for a, b, _, line in _edges():
        if b in MODULES:  # the compiled _core is not a source module
            graph[a].setdefault(b, line)
    return graph


def _torch_imports() -> list[tuple[str, int]]:
    out = []
    for name, path in MODULES.items():
        for node in _walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if any(m == "torch" or m.startswith("torch.") for m in mods):
                out.append((name, node.lineno))
    return out


def _violations(edges, torch_imports) -> list[str]:
    """Each breach of the layer contracts, as a line naming the file, the line and the rule."""
    bad = []
    for a, b, names, line in edges:
        la, lb = _layer(a), _layer(b)
        where = f"{MODULES[a].relative_to(PACKAGE.parent) if a in MODULES else a}:{line}"
        if lb == "_core" or la == lb:
            continue
        if lb not in LAYERS.get(la, set()):
            bad.append(f"{where}: layer {la!r} imports layer {lb!r} ({b}); {la!r} may import only {sorted(LAYERS.get(la, set()))}")
        private = [part for part in b.split(".") if part.startswith("_") and part not in ("__init__",)]
        private += [n for n in names if n.startswith("_")]
        if private:
            bad.append(f"{where}: private {', '.join(private)} of {b} crosses from layer {lb!r} into {la!r}")
    for module, line in torch_imports:
        if module not in TORCH_MODULES and _layer(module) not in TORCH_LAYERS:
            bad.append(f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}: torch imported outside the torch backend, the integrations and the demo")
    return bad


def test_the_layer_contracts_hold():
    bad = _violations(_edges(), _torch_imports())
    assert not bad, "the layer contracts are broken (tests/test_structure.py, LAYERS):\n" + "\n".join(bad)


def test_the_layer_check_sees_each_breach():
    """The contract check itself, on the real edges plus forbidden ones: the solver importing decoding,
    the library importing its demo, a lower layer importing a higher one, a private name and a private
    module crossing a boundary, and torch imported by the solver."""
    edges = _edges()
    forbidden = [
        ("solver._solve", "verify.serving", ["rejection_sample"], 1),
        ("integrations.hf", "demo.textlm", ["demo_models"], 2),
        ("check.inputs", "solver", ["solve"], 3),
        ("verify.serving", "backends.host", ["_given_pi"], 4),
        ("analysis.rules", "solver._solve", ["solve"], 5),
    ]
    bad = _violations(edges + forbidden, _torch_imports() + [("solver._solve", 6)])
    assert len(bad) == len(forbidden) + 1, bad  # one line each (analysis -> solver is allowed: only _solve breaks it)
    for needle in ("_solve.py:1: layer 'solver' imports layer 'verify'", "hf.py:2: layer 'integrations' imports layer 'demo'",
                   "inputs.py:3: layer 'check' imports layer 'solver'", "private _given_pi of backends.host",
                   "rules.py:5: private _solve of solver._solve", "_solve.py:6: torch imported outside"):
        assert any(needle in line for line in bad), (needle, bad)
    assert set(LAYERS) >= {_layer(m) for m in MODULES}, "a layer has no contract in LAYERS"


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
    """The parser itself, from verify/serving.py: a lazy relative import, an absolute one, a submodule
    taken from its package, two dots up, and a TYPE_CHECKING block left out."""
    src = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..integrations.hf import Pair\n"
        "def f():\n    from ..check.oracle import oracle_solve\n    import mentored.analysis.rules\n    from mentored.check import reference\n"
        "from .. import solve\nfrom . import decoding\nfrom .. import _core\n"
    )
    found = [t for node in _walk(ast.parse(src)) for t in _targets(node, "verify.serving")]
    assert found == ["check.oracle", "analysis.rules", "check.reference", "__init__", "verify.decoding", "_core"]
    assert _targets(ast.parse("from .program import program").body[0], "divergences") == ["divergences.program"]


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
    where = MODULES[name].relative_to(PACKAGE.parent)
    assert listed is not None, f"{where} has no __all__"
    assert len(set(listed)) == len(listed), f"{where}: __all__ lists a name twice"
    missing = sorted(set(listed) - _top_level_names(tree))
    assert not missing, f"{where}: __all__ lists names it does not define: {missing}"


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


# The enums of the compiled core: written once, in the C++ headers; the bindings export them (and the
# stub lists them), and Python compares against their members instead of mirroring an integer.
_CPP = PACKAGE.parent / "cpp" / "mentored"
_EXPORTED_ENUMS = ("Generator", "Status", "StepStatus", "Mode", "Op")


def _x_lists(text: str) -> dict[str, list[tuple[str, ...]]]:
    """The X-macro lists of a header, ``#define L(X) X(a, A) X(b, B) ...``: {"L": [("a", "A"), ("b", "B")]}."""
    import re

    lists = {}
    for name, body in re.findall(r"#define (\w+)\(X\)((?:[^\n]*\\\n)*[^\n]*)", text):
        lists[name] = [tuple(a.strip() for a in args.split(",")) for args in re.findall(r"\bX\(([^()]*)\)", body)]
    return lists


def _expand_enum_body(body: str, lists: dict[str, list[tuple[str, ...]]]) -> str:
    """An enum body with its X-macro lines expanded: ``#define E(id, Type) id,`` then ``L(E)`` names
    the first field of each entry of the list L (generators.hpp generates Generator so)."""
    import re

    expanders = {}
    for name, params, value in re.findall(r"#define (\w+)\(([^)]*)\)\s*([^\n]*)", body):
        first = params.split(",")[0].strip()
        assert value.strip() == f"{first},", f"enum expander {name} writes {value!r}, not its first argument"
        expanders[name] = True
    lines = [line for line in body.splitlines() if not line.strip().startswith("#")]
    out = "\n".join(lines)
    for name, expander in re.findall(r"\b(\w+)\((\w+)\)", out):
        if name in lists and expander in expanders:
            out = out.replace(f"{name}({expander})", "".join(f"{entry[0]}," for entry in lists[name]))
    return out


def _header_enums() -> dict[str, dict[str, int]]:
    """``enum class E : int { name = value, ... }`` of the headers, comments left out, X-macro lists expanded."""
    import re

    enums = {}
    for header in sorted(_CPP.glob("*.hpp")):
        text = re.sub(r"//[^\n]*", "", header.read_text(encoding="utf-8"))
        lists = _x_lists(text)
        for name, body in re.findall(r"enum class (\w+) : int \{(.*?)\};", text, re.S):
            body = _expand_enum_body(body, lists)
            members, value = {}, 0  # C++'s rule: an enumerator without "= n" is the one before it plus 1
            for item in filter(None, (x.strip() for x in body.split(","))):
                key, _, given = (part.strip() for part in item.partition("="))
                value = int(given) if given else value
                if key != "count":  # a trailing `count` sentinel sizes tables in C++; it is no member
                    members[key] = value
                value += 1
            enums[name] = members
    return enums


def _stub_enums() -> dict[str, dict[str, int]]:
    tree = ast.parse((PACKAGE / "_core.pyi").read_text(encoding="utf-8"))
    return {
        node.name: {s.targets[0].id: s.value.value for s in node.body if isinstance(s, ast.Assign)}
        for node in tree.body
        if isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("IntEnum") for b in node.bases)
    }


def test_the_core_exports_the_enums_of_its_headers():
    """Names and values of each exported enum are those of its C++ header, in the module and the stub."""
    from mentored import _core

    header, stub = _header_enums(), _stub_enums()
    assert set(_EXPORTED_ENUMS) <= set(header), f"enums not found in cpp/mentored/*.hpp: {set(_EXPORTED_ENUMS) - set(header)}"
    assert set(stub) == set(_EXPORTED_ENUMS)
    for name in _EXPORTED_ENUMS:
        module = {k: int(v) for k, v in getattr(_core, name).__members__.items()}
        assert module == header[name], f"_core.{name} {module} differs from the header's {header[name]}"
        assert stub[name] == header[name], f"mentored/_core.pyi's {name} {stub[name]} differs from the header's {header[name]}"


# The built-in generators: one type each in generators.hpp, named once in its list MENTORED_GENERATORS,
# which generates the enum, the count, the names and every dispatch; one registry entry each in
# mentored/divergences/__init__.py.
_GENERATORS_HPP = _CPP / "generators.hpp"


def _generators_header() -> tuple[str, list[tuple[str, str]], dict[str, str]]:
    """generators.hpp without comments, its list [(enumerator, type)], and {type: its name literal}."""
    import re

    text = re.sub(r"//[^\n]*", "", _GENERATORS_HPP.read_text(encoding="utf-8"))
    entries = _x_lists(text)["MENTORED_GENERATORS"]
    names = {}
    for _, kind in entries:
        bodies = re.findall(rf"\bstruct {kind}\s*\{{(.*?)\n\}};", text, re.S)
        assert len(bodies) == 1, f"generators.hpp: struct {kind} defined {len(bodies)} times"
        found = re.findall(r'static constexpr const char\* name = "(\w+)";', bodies[0])
        assert len(found) == 1, f"generators.hpp: struct {kind} has {len(found)} names"
        names[kind] = found[0]
    return text, entries, names


def test_the_generators_are_named_in_one_list():
    import re

    text, entries, names = _generators_header()
    assert entries and all(len(e) == 2 for e in entries), entries
    enumerators = [e for e, _ in entries]
    assert len(set(enumerators)) == len(enumerators) and len({k for _, k in entries}) == len(entries)
    for enumerator, kind in entries:
        assert names[kind] == enumerator, f"struct {kind} is named {names[kind]!r}, its list entry {enumerator!r}"
        # the name's one literal is its type's: no table of names, no second list
        assert text.count(f'"{enumerator}"') == 1, f'generators.hpp writes "{enumerator}" {text.count(chr(34) + enumerator + chr(34))} times'
    # no dispatch written by hand: a member is only ever reached through the list's expansion
    by_hand = sorted(set(re.findall(r"Generator::(\w+)", text)) & set(enumerators))
    assert not by_hand, f"generators.hpp names Generator::{by_hand} outside its list"


def test_the_generator_list_the_core_and_the_registry_agree():
    import mentored
    from mentored import _core, _core_testing
    from mentored.divergences import _REGISTRY

    _, entries, _ = _generators_header()
    listed = [e for e, _ in entries]
    members = _core.Generator.__members__
    assert [int(members[n]) for n in listed] == list(range(len(listed))), "codes are the list positions"
    assert sorted(members, key=lambda n: int(members[n])) == listed
    assert _core_testing.generator_names() == listed  # kGeneratorNames, in code order
    registry = [spec.name for spec in _REGISTRY]
    assert sorted(registry) == sorted(listed), f"registry {registry} against the list {listed}: one entry per name"
    assert mentored.BUILTIN_NAMES == tuple(listed)


def _mirrored_enums(source: str) -> list[str]:
    """Places where Python writes a core status or mode as a literal integer instead of reading the
    exported enum: ``status == 3``, ``mode = 1`` (and ``mode, values = 1, ...``), a table of statuses
    keyed or listed by ints, ``_X = 3  # ... status`` and a constant named after a member
    (``_BAD_VALUE = 3``)."""
    import re

    def about(node: ast.AST) -> bool:  # a status or a mode itself (len(statuses) is not one)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "int" and len(node.args) == 1:
            node = node.args[0]
        return isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and re.search(r"status|mode", ast.unparse(node), re.I) is not None

    def integer(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is int

    statuses = ("Status", "StepStatus", "Mode")  # the enums whose values Python reads (Op is written, not read)
    members = {m for name, enum in _header_enums().items() if name in statuses for m in enum}
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"line {getattr(node, 'lineno', '?')}: {lines[node.lineno - 1].strip()}" if hasattr(node, "lineno") else ""
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(integer, sides)) and any(map(about, sides)):
                found.append(where)
        elif isinstance(node, ast.Assign):
            pairs = []
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs += zip(target.elts, node.value.elts)
                else:
                    pairs.append((target, node.value))
            value = node.value
            table = isinstance(value, ast.Dict) and any(map(integer, value.keys)) or isinstance(value, (ast.Tuple, ast.List, ast.Set)) and value.elts and all(map(integer, value.elts))
            comment = re.search(r"#.*status", lines[node.lineno - 1], re.I) and integer(value)
            named = any(isinstance(t, ast.Name) and t.id.strip("_").lower() in members and integer(v) for t, v in pairs)
            if any(about(t) and integer(v) for t, v in pairs) or (table and any(map(about, node.targets))) or comment or named:
                found.append(where)
    return list(dict.fromkeys(found))


def test_no_status_is_mirrored_by_an_integer():
    bad = [f"mentored/{path.relative_to(PACKAGE)} {hit}" for path in sorted(PACKAGE.rglob("*.py"))
           for hit in _mirrored_enums(path.read_text(encoding="utf-8"))]
    assert not bad, "core statuses or modes written as integers (compare with _core.Status.x.value etc.):\n" + "\n".join(bad)


def test_the_mirror_check_sees_each_form():
    """The detector itself, on the forms it exists for; the enums' own values pass."""
    mirrored = [
        "_UNREACHABLE = 3  # the one status of the core for a row whose entries and sums pass",
        "if status[r] == 3:\n    pass",
        "ok = status == 1 and x == -1",
        "ok = 2 != int(status)",
        "_STEP_STATUS = {1: 'draft_token_ids: an id outside', 2: 'sums to zero'}",
        "_ROW_STATUSES = (2, 3, 6)",
        "_BAD_VALUE = 3",
        "mode, values = 0, per_row(budget, rows, 'budget')",
        "if mode == 1:\n    pass",
    ]
    for src in mirrored:
        assert _mirrored_enums(src), src
    clean = [
        "if status[r] == _core.Status.unreachable.value:\n    pass",
        "_ROW_STATUSES = (_core.StepStatus.zero_row, _core.StepStatus.bad_value)",
        "mode, values = _core.Mode.budget.value, per_row(budget, rows, 'budget')",
        "bad = np.flatnonzero(status)\nn = len(statuses) == 0 or True",
        "exit_code = 2",
    ]
    for src in clean:
        assert not _mirrored_enums(src), src


# ---------------------------------------------------------------- the device rule, written once

# Torch cumulative sums that are not the verification rule's draw, each with its reason.
_OTHER_CUMSUMS = {
    "backends.torch._Rows.__init__": "the solve's prefix sums of p and q in ratio order",
    "integrations.vllm_plugin._top_k_top_p_mask": "top-p's cumulative mass",
    "integrations.hf._draw": "sampling a draft (and the bonus) from a model's law in the decoding loop, not a verification rule",
}


def _cumsum_owners(source: str, module: str) -> set[str]:
    """The functions (``module.qualname``) of ``source`` that take a cumulative sum in torch's forms:
    ``x.cumsum(…)``, ``x.cumsum_(…)``, ``torch.cumsum(…)`` (numpy code writes ``np.cumsum``)."""
    owners: set[str] = set()

    def visit(node: ast.AST, names: tuple) -> None:
        for child in ast.iter_child_nodes(node):
            inner = names
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = names + (child.name,)
            elif isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr in ("cumsum", "cumsum_"):
                base = child.func.value
                if not (isinstance(base, ast.Name) and base.id in ("np", "numpy")):
                    owners.add(".".join((module,) + names))
            visit(child, inner)

    visit(ast.parse(source), ())
    return owners


def test_the_device_rule_is_written_once():
    # The inverse CDF of the residual (π − q)₊ in torch is one function, which every device
    # verification reaches (torch_backend._verify); a second torch draw, a second rule, fails here.
    owners = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        owners |= _cumsum_owners(path.read_text(encoding="utf-8"), module)
    draws = sorted(owners - set(_OTHER_CUMSUMS))
    assert draws == ["backends.torch._inverse_cdf"], f"torch cumulative sums outside the solve and top-p: {draws}"


def test_the_cumsum_check_sees_each_form():
    source = (
        "import numpy as np\n"
        "def a(w): return w.cumsum(-1)\n"
        "class B:\n    def c(self, w): return torch.cumsum(w, -1)\n"
        "def d(w):\n    def e(v): return v.cumsum_(0)\n    return e\n"
        "def f(w): return np.cumsum(w)\n"
    )
    assert _cumsum_owners(source, "m") == {"m.a", "m.B.c", "m.d.e"}


def _inverse_cdfs(text: str) -> list[str]:
    """The C++ functions defined in ``text`` that draw a token by the inverse CDF (a running sum
    compared with a uniform's fraction of the total) or decide an acceptance from a uniform."""
    import re

    found = []
    for m in re.finditer(r"^(?:template <[^>]*>\s*)?(?:(?:inline|static|constexpr)\s+)*[\w:<>]+\s+(\w+)\(([^)]*)\)\s*(?:const\s*)?\{", text, re.M):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[m.end():i]
        if re.search(r"\bc \+= |u\w*\[0\]\s*[*<]", body):
            found.append(m.group(1))
    return found


def test_the_host_rule_is_written_once():
    # accept / first rejection / residual in C++ is speculative.hpp's inverse_cdf, decide (dense drafts)
    # and land (a uniform walking masses: a token-only draft's test, a tree node's children in
    # tree.hpp): a second copy of the rule fails here.
    owners = {}
    for path in sorted((PACKAGE.parent / "cpp").rglob("*.[ch]pp")):
        for name in _inverse_cdfs(path.read_text(encoding="utf-8")):
            owners.setdefault(name, []).append(path.name)
    assert owners == {"inverse_cdf": ["speculative.hpp"], "decide": ["speculative.hpp"], "land": ["speculative.hpp"]}, owners


def test_the_host_rule_check_sees_a_copy():
    copy = "double draw(const double* w, std::size_t V, double u) {\n  double c = 0.0;\n  for (;;) { c += w[0]; }\n}\n"
    accept = "template <class T>\nbool keep(const T* u, double pi) {\n  return u[0] * 2.0 < pi;\n}\n"
    walk = "inline std::size_t walk(const double* m, const double* u) {\n  return u[0] < m[0] ? 0 : 1;\n}\n"
    assert _inverse_cdfs(copy) == ["draw"] and _inverse_cdfs(accept) == ["keep"] and _inverse_cdfs(walk) == ["walk"]
