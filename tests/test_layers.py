"""The layers of ``../shared/DESIGN.md`` hold: imports only point down, and nothing imports in a circle.

The contract lives in ``pyproject.toml`` (``[tool.importlinter]``); import-linter checks it on the source
files (statically: nothing is imported), grimp gives the import graph the circle test reads.
"""

import ast
import os
import subprocess
import sys

import grimp
import networkx as nx
import pytest

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]


def _graph():
    sys.path.insert(0, ROOT)  # the folder test_utils/ is the package test_utils to grimp
    try:
        return grimp.build_graph(*_config()["root_packages"], cache_dir=None)
    finally:
        sys.path.remove(ROOT)


def test_the_layer_contract_is_kept():
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(no_cache=True, no_logo=True))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 kept, 0 broken" in run.stdout


def test_no_module_imports_in_a_circle():
    graph = _graph()
    edges = nx.DiGraph()
    for module in graph.modules:
        edges.add_node(module)
        edges.add_edges_from((module, imported) for imported in graph.find_modules_directly_imported_by(module))
    circles = [sorted(c) for c in nx.strongly_connected_components(edges) if len(c) > 1]
    assert circles == []


def test_every_module_sits_in_a_layer():
    (contract,) = _config()["contracts"]
    layers = [name.strip() for layer in contract["layers"] for name in layer.replace(":", "|").split("|")]
    unplaced = [
        m
        for m in _graph().modules
        if m != "symgrad" and not any(m == layer or m.startswith(layer + ".") for layer in layers)
    ]
    assert unplaced == []


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules() -> dict:
    """``{path relative to the repository: parsed module}`` of every source file in symgrad/ and test_utils/."""
    trees = {}
    for package in ("symgrad", "test_utils"):
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    with open(path, encoding="utf-8") as f:
                        trees[os.path.relpath(path, ROOT)] = ast.parse(f.read(), path)
    return trees


def _private_methods_and_local_names(trees: dict) -> tuple:
    """``({private method name: the modules whose classes define it}, {module: the names it defines})``: the
    names a module defines are its functions, classes and the attributes it assigns (``obj._x = ...``)."""
    methods: dict = {}
    local: dict = {}
    for path, tree in trees.items():
        names = local.setdefault(path, set())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_private(item.name):
                        methods.setdefault(item.name, set()).add(path)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.attr for t in node.targets if isinstance(t, ast.Attribute))
    return methods, local


def _assigned(item) -> list:
    """The targets an assignment statement (plain or annotated) binds."""
    if isinstance(item, ast.Assign):
        return list(item.targets)
    return [item.target] if isinstance(item, ast.AnnAssign) else []


def _class_private_attributes(cls: ast.ClassDef) -> set:
    """The private attribute names a class defines: its ``__slots__`` strings, the names its body binds and the
    ``self._x`` its methods assign."""
    names = set()
    for item in ast.walk(cls):
        for t in _assigned(item):
            if isinstance(t, ast.Name) and t.id == "__slots__" and isinstance(item.value, (ast.Tuple, ast.List)):
                names.update(e.value for e in item.value.elts if isinstance(e, ast.Constant))
            elif isinstance(t, ast.Name) and item in cls.body:
                names.add(t.id)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                names.add(t.attr)
    return {n for n in names if isinstance(n, str) and _is_private(n)}


def _private_attributes(trees: dict) -> dict:
    """``{private attribute name: the modules whose classes define it}``."""
    owners: dict = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for name in _class_private_attributes(node):
                    owners.setdefault(name, set()).add(path)
    return owners


#: ``Class._name`` reads that are MXNet's own spelling of a user-facing hook, kept where MXNet keeps it:
#: ``AttrScope._subgraph_names`` counts control-flow subgraphs, and MXNet users assign it (test_scope.py)
MXNET_SPELLED = {"AttrScope._subgraph_names"}


def _private_attribute_reads(trees: dict, local: dict) -> list:
    """``<expr>._name`` reads (not calls: ``test_no_module_reaches_into_another_modules_privates`` checks those)
    of a private attribute that a class of another module defines, by a module defining no such name itself."""
    owners = _private_attributes(trees)
    found = []
    for path, tree in trees.items():
        called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _is_private(node.attr)):
                continue
            name, owner = node.attr, ast.unparse(node.value)
            if id(node) in called or owner in ("self", "cls", "super()") or name in local[path]:
                continue
            if path not in owners.get(name, {path}) and f"{owner}.{name}" not in MXNET_SPELLED:
                found.append(f"{path}:{node.lineno}: {owner}.{name} ({', '.join(sorted(owners[name]))})")
    return found


def test_no_module_reaches_into_another_modules_privates():
    """``../shared/DESIGN.md``: no module of symgrad/ or test_utils/ uses another module's private names.

    Two things are checked on the source (statically). (1) ``from <module> import _name``: importing a
    leading-underscore name (not a dunder) from another module; a private module's public names
    (``from ._inputs import parse_aux``) and ``import x as _x`` aliases are fine. (2) ``<expr>._name(...)``
    calls of a private method that a class of another module defines (``symbol._nodes()`` from viz.py), where
    the calling module defines no function, class or attribute of that name itself and ``<expr>`` is not
    ``self``, ``cls`` or ``super()``. Hidden operators called through the op namespace (``F._backward_relu``)
    are no methods of a class, so the rule leaves them alone. (3) ``<expr>._name`` attribute reads, on the
    same terms, of a private attribute a class of another module defines (``sym._outputs``, a ``__slots__``
    name of Symbol: ``sym.output_entries()`` is the public way).
    """
    trees = _modules()
    methods, local = _private_methods_and_local_names(trees)
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                found += [
                    f"{path}:{node.lineno}: from {module} import {a.name}" for a in node.names if _is_private(a.name)
                ]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_private(node.func.attr):
                name, owner = node.func.attr, ast.unparse(node.func.value)
                if owner in ("self", "cls", "super()") or name in local[path]:
                    continue
                if path not in methods.get(name, {path}):
                    found.append(f"{path}:{node.lineno}: {owner}.{name}(...) ({', '.join(sorted(methods[name]))})")
    assert found + _private_attribute_reads(trees, local) == []


def test_the_private_reach_rule_catches_attribute_reads():
    """Rule (3) of the test above on a planted module pair: a read of another module's slot is caught; the same
    read in the owning module, through ``self``, or of a name the reader defines itself is not."""
    owner = ast.parse("class Sym:\n    __slots__ = ('_outs',)\n    def first(self):\n        return self._outs[0]\n")
    reader = ast.parse("def heads(sym):\n    return sym._outs\n")
    shadow = ast.parse("class Box:\n    def __init__(self):\n        self._outs = []\ndef f(b):\n    return b._outs\n")
    trees = {"a/sym.py": owner, "a/viz.py": reader, "a/box.py": shadow}
    _, local = _private_methods_and_local_names(trees)
    assert _private_attribute_reads(trees, local) == ["a/viz.py:2: sym._outs (a/box.py, a/sym.py)"]
