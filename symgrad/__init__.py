"""symgrad: MXNet-style symbols and executors for proving operator gradients right.

>>> import numpy as np, symgrad as sg
>>> x = sg.sym.Variable("x")
>>> exe = sg.sym.sum(x * x).simple_bind(sg.cpu(), x=(3,))
>>> _ = exe.forward(is_train=True, x=np.array([1.0, 2.0, 3.0]))
>>> exe.backward(np.ones(1, np.float32))
>>> exe.grad_dict["x"]
array([2., 4., 6.], dtype=float32)
"""

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below are imported on first use (PEP 562): `import symgrad` itself is cheap
    # (test_utils is the folder test_utils/, mapped by setuptools' package_dir: mypy does not find it there)
    from . import (  # type: ignore[attr-defined]
        nd,
        operator,
        random,
        sym,
        test_utils,
    )
    from .base import (
        AttrScope,
        BindError,
        MXNetError,
        NameManager,
        NotImplementedForSymbol,
        ParamError,
        Prefix,
        SerializationError,
        ShapeError,
        SymgradError,
    )
    from .context import Context, cpu, current_context, gpu, num_gpus
    from .executor import Executor
    from .gradient import grad
    from .serialization import load_params, nd_load, nd_load_frombuffer, nd_save, save_params
    from .symbol import Group, Symbol, Variable, var

__version__ = "0.1.0"

__all__ = [
    "sym",
    "nd",
    "operator",
    "random",
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
    "NotImplementedForSymbol",
    "ParamError",
    "ShapeError",
    "BindError",
    "SerializationError",
    "load_params",
    "save_params",
    "nd_load",
    "nd_load_frombuffer",
    "nd_save",
    "test_utils",
]


# name -> the submodule that defines it; a submodule itself maps to None
_EXPORTS = {
    "sym": None,
    "nd": None,
    "operator": None,
    "random": None,
    "test_utils": None,
    "AttrScope": "base",
    "BindError": "base",
    "MXNetError": "base",
    "NameManager": "base",
    "NotImplementedForSymbol": "base",
    "ParamError": "base",
    "Prefix": "base",
    "SerializationError": "base",
    "ShapeError": "base",
    "SymgradError": "base",
    "Context": "context",
    "cpu": "context",
    "current_context": "context",
    "gpu": "context",
    "num_gpus": "context",
    "Executor": "executor",
    "grad": "gradient",
    "load_params": "serialization",
    "nd_load": "serialization",
    "nd_load_frombuffer": "serialization",
    "nd_save": "serialization",
    "save_params": "serialization",
    "Group": "symbol",
    "Symbol": "symbol",
    "Variable": "symbol",
    "var": "symbol",
}


def __getattr__(name: str) -> Any:  # a submodule, class or function: whatever ``name`` is
    # Lazy exports, so that importing a submodule (the pytest plugin, symgrad.base) does not import numpy,
    # networkx and every op. ``symgrad.test_utils`` is a real subpackage (the repository folder test_utils/,
    # mapped by setuptools' package_dir); other submodules (``sg.symbol``, ``sg.ops``) load on first access.
    if name in _EXPORTS:
        where = _EXPORTS[name]
        value = importlib.import_module(f"{__name__}.{where or name}")
        if where is not None:
            value = getattr(value, name)
    elif not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
