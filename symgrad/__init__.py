"""symgrad: MXNet-style symbols and executors for proving operator gradients right.

>>> import numpy as np, symgrad as sg
>>> x = sg.sym.Variable("x")
>>> exe = sg.sym.sum(x * x).simple_bind(sg.cpu(), x=(3,))
>>> _ = exe.forward(is_train=True, x=np.array([1.0, 2.0, 3.0]))
>>> exe.backward(np.ones(1, np.float32))
>>> exe.grad_dict["x"]
array([2., 4., 6.], dtype=float32)
"""

from . import operator, sym
from .base import AttrScope, BindError, MXNetError, NameManager, ParamError, Prefix, ShapeError, SymgradError
from .context import Context, cpu, current_context, gpu, num_gpus
from .executor import Executor
from .gradient import grad
from .symbol import Group, Symbol, Variable, var

__version__ = "0.1.0"

__all__ = [
    "sym",
    "operator",
    "Symbol",
    "Variable",
    "var",
    "Group",
    "grad",
    "Executor",
    "Context",
    "cpu",
    "gpu",
    "current_context",
    "num_gpus",
    "NameManager",
    "Prefix",
    "AttrScope",
    "SymgradError",
    "MXNetError",
    "ParamError",
    "ShapeError",
    "BindError",
    "test_utils",
]


def __getattr__(name):
    # ``symgrad.test_utils`` is the top-level ``test_utils`` package (like mxnet.test_utils),
    # imported lazily so that importing symgrad stays cheap.
    if name == "test_utils":
        import importlib

        return importlib.import_module("test_utils")
    raise AttributeError(f"module 'symgrad' has no attribute {name!r}")
