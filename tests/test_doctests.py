"""The examples in the docstrings of symgrad and symgrad.test_utils run and print what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import numpy as np
import pytest

import symgrad


def _modules():
    tu = importlib.import_module("symgrad.test_utils")  # installed from the folder test_utils/: walked on its own
    names = [m.name for m in pkgutil.walk_packages(symgrad.__path__, "symgrad.")]
    names += ["symgrad.test_utils"] + [m.name for m in pkgutil.walk_packages(tu.__path__, "symgrad.test_utils.")]
    return sorted({n for n in names if not n.endswith("__main__")})


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    module = importlib.import_module(name)
    state = np.random.get_state()
    try:
        np.random.seed(0)
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    finally:
        np.random.set_state(state)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples of {name} failed"


def test_the_checkers_docstrings_are_collected():
    assert {"symgrad.test_utils.mxnet_checks", "symgrad.test_utils.torch_checks"} <= set(_modules())
