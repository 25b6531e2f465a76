"""The code stays formatted, linted and typed: ``ruff format``, ``ruff check`` and mypy (configured in
``pyproject.toml``) over the whole tree, and every public callable of ``symgrad`` and ``symgrad.test_utils``
annotated in full. The import layers have their own test (``test_layers.py``)."""

import inspect
import os
import subprocess
import sys

import pytest

import symgrad
import symgrad.operator
import symgrad.random
import symgrad.test_utils

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_the_tree_is_formatted():
    run = _run("ruff", "format", "--check", ".")
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_tree_is_linted():
    run = _run("ruff", "check", ".")
    assert run.returncode == 0, run.stdout + run.stderr


def test_mypy_finds_nothing():
    run = _run("mypy", timeout=600)  # files and settings: [tool.mypy] in pyproject.toml
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout, run.stdout


def _public_callables():
    """``(qualified name, function)`` of the public API: the modules' ``__all__`` and, for classes, ``__init__``
    and every public method or property defined in symgrad (the fluent ``Symbol`` methods included)."""
    seen = set()
    for module in (symgrad, symgrad.operator, symgrad.random, symgrad.test_utils):
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for name in names:
            obj = getattr(module, name)
            if id(obj) in seen or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            seen.add(id(obj))
            if inspect.isfunction(obj) and obj.__module__.startswith("symgrad"):
                yield f"{module.__name__}.{name}", obj
            if inspect.isclass(obj) and obj.__module__.startswith("symgrad"):
                yield from _methods(obj)


def _methods(cls):
    for attr, value in vars(cls).items():
        if attr.startswith("_") and attr != "__init__":
            continue
        func = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if inspect.isfunction(func):
            yield f"{cls.__module__}.{cls.__qualname__}.{attr}", func


def _untyped(func) -> list:
    sig = inspect.signature(func)
    missing = [
        p.name
        for p in sig.parameters.values()
        if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty
    ]
    return missing + (["return"] if sig.return_annotation is inspect.Signature.empty else [])


@pytest.mark.parametrize("module", ["symgrad", "symgrad.test_utils"])
def test_the_public_api_is_fully_annotated(module):
    untyped = {
        name: _untyped(func)
        for name, func in _public_callables()
        if name.startswith(module + ".") and (module != "symgrad" or ".test_utils" not in name)
    }
    assert len(untyped) > 20  # the walk found the API
    assert {name: missing for name, missing in untyped.items() if missing} == {}
