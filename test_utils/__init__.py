"""symgrad's checkers: prove gradients right and explain what is wrong when they are not.

This is ``symgrad.test_utils``: the repository folder ``test_utils/``, installed under symgrad (never as a
top-level ``test_utils``, a name many projects' test suites use), as ``mxnet.test_utils`` sits under mxnet.
Import it as ``from symgrad.test_utils import check_numeric_gradient``. Its names load on first use, so
importing the package (or its pytest plugin) is cheap. The MXNet-compatible
part mirrors ``mxnet.test_utils`` 1.9: same names, signatures and per-dtype tolerance tables, on plain
numpy arrays. Every checker failure raises ``GradientCheckError`` (an ``AssertionError``) whose message
names the argument, the worst elements, the mismatch share, the tolerances, a diagnosis and, last, the
seed with a one-line reproduction (``seed 1234 -- reproduce: SYMGRAD_TEST_SEED=1234 python -m pytest
'tests/test_x.py::test_y'``): checkers draw from numpy's global RNG, seeded by the test (``with_seed``,
the ``rng`` fixture) or, outside a seeded test, by the checker itself (``seed.check_seed``).

>>> import numpy as np, symgrad as sg
>>> from symgrad import test_utils as tu
>>> x, w = sg.sym.Variable("x"), sg.sym.Variable("w")
>>> y = sg.sym.sum(sg.sym.tanh(x) * w)
>>> res = tu.check_numeric_gradient(y, {"x": np.array([0.5, -1.0]), "w": np.array([2.0, 3.0])})
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # loaded on first use by __getattr__ below
    from .chainer_checks import NondifferentiableError, check_backward, check_double_backward, numerical_grad
    from .compare import almost_equal, assert_allclose, assert_almost_equal, compare, same
    from .consistency import check_consistency
    from .context import default_context, set_default_context
    from .data import rand_ndarray, rand_shape_2d, rand_shape_3d, rand_shape_nd, random_arrays, random_uniform_arrays
    from .decisions import DecisionFlipWarning
    from .diagnose import diagnose, register_rule
    from .model_check import ModelCheckResult, check_model
    from .mxnet_checks import (
        check_numeric_gradient,
        check_speed,
        check_symbolic_backward,
        check_symbolic_forward,
        simple_forward,
    )
    from .numeric import numeric_grad
    from .objectives import register_loss_objective
    from .report import GradientCheckError
    from .seed import with_seed
    from .tolerance import (
        default_atols,
        default_dtype,
        default_numeric_eps,
        default_rtols,
        get_atol,
        get_rtol,
        get_tolerance,
        get_tols,
    )
    from .torch_checks import gradcheck, gradgradcheck

__all__ = [
    # comparison
    "assert_almost_equal",
    "almost_equal",
    "assert_allclose",
    "same",
    "compare",
    # tolerances
    "default_rtols",
    "default_atols",
    "default_numeric_eps",
    "default_dtype",
    "get_tolerance",
    "get_tols",
    "get_rtol",
    "get_atol",
    # context, data, seeds
    "default_context",
    "set_default_context",
    "random_arrays",
    "random_uniform_arrays",
    "rand_shape_2d",
    "rand_shape_3d",
    "rand_shape_nd",
    "rand_ndarray",
    "with_seed",
    # checkers
    "check_symbolic_forward",
    "check_symbolic_backward",
    "check_numeric_gradient",
    "numeric_grad",
    "check_speed",
    "check_consistency",
    "simple_forward",
    # Chainer- and PyTorch-style checkers
    "check_backward",
    "check_double_backward",
    "numerical_grad",
    "NondifferentiableError",
    "gradcheck",
    "gradgradcheck",
    # whole models
    "check_model",
    "ModelCheckResult",
    # reporting
    "GradientCheckError",
    "DecisionFlipWarning",
    "diagnose",
    "register_rule",
    "register_loss_objective",
]

# name -> the module of this package that defines it
_EXPORTS = {
    **dict.fromkeys(
        ["NondifferentiableError", "check_backward", "check_double_backward", "numerical_grad"], "chainer_checks"
    ),
    **dict.fromkeys(["almost_equal", "assert_allclose", "assert_almost_equal", "compare", "same"], "compare"),
    "check_consistency": "consistency",
    **dict.fromkeys(["default_context", "set_default_context"], "context"),
    **dict.fromkeys(
        ["rand_ndarray", "rand_shape_2d", "rand_shape_3d", "rand_shape_nd", "random_arrays", "random_uniform_arrays"],
        "data",
    ),
    "DecisionFlipWarning": "decisions",
    **dict.fromkeys(["diagnose", "register_rule"], "diagnose"),
    **dict.fromkeys(
        [
            "check_numeric_gradient",
            "check_speed",
            "check_symbolic_backward",
            "check_symbolic_forward",
            "simple_forward",
        ],
        "mxnet_checks",
    ),
    **dict.fromkeys(["check_model", "ModelCheckResult"], "model_check"),
    "numeric_grad": "numeric",
    "register_loss_objective": "objectives",
    "GradientCheckError": "report",
    "with_seed": "seed",
    **dict.fromkeys(
        [
            "default_atols",
            "default_dtype",
            "default_numeric_eps",
            "default_rtols",
            "get_atol",
            "get_rtol",
            "get_tolerance",
            "get_tols",
        ],
        "tolerance",
    ),
    **dict.fromkeys(["gradcheck", "gradgradcheck"], "torch_checks"),
}


def __getattr__(name: str) -> Any:
    # PEP 562: the checkers (numpy, symgrad's ops) load when a name is first used, not when the package or its
    # pytest plugin is imported.
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


class _Package(types.ModuleType):
    """``compare`` and ``diagnose`` are both a function exported here and a module of this package. Importing
    the module (from anywhere) makes the import system bind it as an attribute of the package, which would
    hide the lazily loaded function: the package keeps the function, as an eager ``from .compare import
    compare`` did (the module itself stays importable as ``symgrad.test_utils.compare``)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}":
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
