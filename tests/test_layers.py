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


def test_no_module_reaches_into_another_modules_privates():
    """``../shared/DESIGN.md``: no module of symgrad/ or test_utils/ uses another module's private names.

    Two things are checked on the source (statically). (1) ``from <module> import _name``: importing a
    leading-underscore name (not a dunder) from another module; a private module's public names
    (``from ._inputs import parse_aux``) and ``import x as _x`` aliases are fine. (2) ``<expr>._name(...)``
    calls of a private method that a class of another module defines (``symbol._nodes()`` from viz.py), where
    the calling module defines no function, class or attribute of that name itself and ``<expr>`` is not
    ``self``, ``cls`` or ``super()``. Hidden operators called through the op namespace (``F._backward_relu``)
    are no methods of a class, so the rule leaves them alone.
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
    assert found == []
