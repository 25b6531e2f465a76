"""The layers of ``../shared/DESIGN.md`` hold: imports only point down, and nothing imports in a circle.

The contract lives in ``pyproject.toml`` (``[tool.importlinter]``); import-linter checks it on the source
files (statically: nothing is imported), grimp gives the import graph the circle test reads.
"""

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
