"""symgrad: MXNet-style symbols and executors for proving operator gradients right.

>>> import numpy as np, symgrad as sg
>>> x = sg.sym.Variable("x")
>>> exe = sg.sym.sum(x * x).simple_bind(sg.cpu(), x=(3,))
>>> _ = exe.forward(is_train=True, x=np.array([1.0, 2.0, 3.0]))
>>> exe.backward(np.ones(1, np.float32))
>>> exe.grad_dict["x"]
array([2., 4., 6.], dtype=float32)
"""

import importlib.abc
import importlib.util
import sys

from . import operator, sym
from .base import (
    AttrScope,
    BindError,
    MXNetError,
    NameManager,
    ParamError,
    Prefix,
    SerializationError,
    ShapeError,
    SymgradError,
)
from .context import Context, cpu, current_context, gpu, num_gpus
from .executor import Executor
from .gradient import grad
from .serialization import load_params, nd_load, nd_save, save_params
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
    "SerializationError",
    "load_params",
    "save_params",
    "nd_load",
    "nd_save",
    "test_utils",
]


def __getattr__(name):
    # ``symgrad.test_utils`` is the top-level ``test_utils`` package (like mxnet.test_utils),
    # imported lazily so that importing symgrad stays cheap.
    if name == "test_utils":
        import importlib

        return importlib.import_module("test_utils")
    raise AttributeError(f"module 'symgrad' has no attribute {name!r}")


class _TestUtilsAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``import symgrad.test_utils[.sub]`` give the top-level ``test_utils[.sub]`` module
    itself (one module object under both names), imported only when asked for."""

    _prefix = __name__ + ".test_utils"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self._prefix and not fullname.startswith(self._prefix + "."):
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module("test_utils" + spec.name[len(self._prefix):])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # the import system stamped the alias spec on the shared module: give it its own back
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(f, _TestUtilsAlias) for f in sys.meta_path):
    sys.meta_path.insert(0, _TestUtilsAlias())  # before PathFinder, which would load a duplicate
