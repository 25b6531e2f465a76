"""The symbol namespace users type (``sg.sym.<Op>``), like ``mx.sym``.

Holds ``Variable``, ``Group``, the naming scopes, one creator function per
registered operator (``sg.sym.FullyConnected(x, num_hidden=4, name="fc")``) and
MXNet's Python-level helpers ``maximum``/``minimum``/``hypot``/``pow`` that pick
the symbol or scalar form of an op. Gradient rules receive the same creators as ``F``
(``symgrad.symbol.F``).
"""

import builtins
import math
import numbers

from . import control_flow, operator, ops  # noqa: F401  (importing them registers every operator)
from .base import AttrScope, NameManager, Prefix
from .serialization import fromjson, load, load_json
from .symbol import Group, Symbol, Variable, populate, var

__all__ = [
    "Symbol",
    "Variable",
    "var",
    "Group",
    "NameManager",
    "Prefix",
    "AttrScope",
    "maximum",
    "minimum",
    "hypot",
    "pow",
    "power",
    "load",
    "load_json",
    "fromjson",
]

populate(globals())  # note: shadows builtins such as sum/max/min/abs/round in this module

# MXNet's control flow (``mx.sym.contrib.foreach`` & co.): Python functions that build subgraph nodes
_contrib = globals()["contrib"]  # the submodule populate() made
for _fn in (control_flow.foreach, control_flow.while_loop, control_flow.cond):
    setattr(_contrib, _fn.__name__, _fn)
    _contrib.__all__ = sorted({*_contrib.__all__, _fn.__name__})


def _is_num(v):
    return isinstance(v, numbers.Number) and not isinstance(v, bool)


def _dispatch(name, lhs, rhs, sym_op, scalar_op, rscalar_op, py):
    """Symbol-Symbol -> sym_op, Symbol-number -> scalar_op, number-Symbol -> rscalar_op, numbers -> py."""
    if isinstance(lhs, Symbol) and isinstance(rhs, Symbol):
        return globals()[sym_op](lhs, rhs)
    if isinstance(lhs, Symbol) and _is_num(rhs):
        return globals()[scalar_op](lhs, scalar=float(rhs))
    if _is_num(lhs) and isinstance(rhs, Symbol):
        return globals()[rscalar_op](rhs, scalar=float(lhs))
    if _is_num(lhs) and _is_num(rhs):
        return py(lhs, rhs)
    raise TypeError(f"{name}: unsupported operand types {type(lhs).__name__} and {type(rhs).__name__}")


def maximum(left, right):
    """Elementwise maximum of Symbols and/or numbers (``mx.sym.maximum``)."""
    return _dispatch("maximum", left, right, "_maximum", "_maximum_scalar", "_maximum_scalar", builtins.max)


def minimum(left, right):
    """Elementwise minimum of Symbols and/or numbers (``mx.sym.minimum``)."""
    return _dispatch("minimum", left, right, "_minimum", "_minimum_scalar", "_minimum_scalar", builtins.min)


def hypot(left, right):
    """sqrt(left^2 + right^2) of Symbols and/or numbers (``mx.sym.hypot``)."""
    return _dispatch("hypot", left, right, "_hypot", "_hypot_scalar", "_hypot_scalar", math.hypot)


def pow(base, exp):  # noqa: A001 - MXNet's name
    """base ** exp of Symbols and/or numbers (``mx.sym.pow``)."""
    return _dispatch("pow", base, exp, "_power", "_power_scalar", "_rpower_scalar", lambda a, b: a**b)


power = pow


# ------------------------------------------------------------------------------------------------------
# MXNet's Python-level creation helpers and wrappers (``mx.sym.zeros`` & co. in MXNet's symbol.py): they
# call the registered ``_zeros``/``_ones``/``_full``/``_arange``/``_linspace``/``_eye``/``_histogram``/
# ``_split_v2`` operators with MXNet's defaults (dtype None -> float32).
# ------------------------------------------------------------------------------------------------------

__all__ += ["zeros", "ones", "full", "arange", "linspace", "eye", "histogram", "split_v2"]


def _float32_if_none(dtype):
    return "float32" if dtype is None else dtype


def zeros(shape, dtype=None, **kwargs):
    """A symbol of ``shape`` filled with zeros (``mx.sym.zeros``; dtype defaults to float32)."""
    return _zeros(shape=shape, dtype=_float32_if_none(dtype), **kwargs)  # noqa: F821 - from populate()


def ones(shape, dtype=None, **kwargs):
    """A symbol of ``shape`` filled with ones (``mx.sym.ones``; dtype defaults to float32)."""
    return _ones(shape=shape, dtype=_float32_if_none(dtype), **kwargs)  # noqa: F821 - from populate()


def full(shape, val, dtype=None, **kwargs):
    """A symbol of ``shape`` filled with ``val`` (``mx.sym.full``; dtype defaults to float32)."""
    return _full(shape=shape, dtype=_float32_if_none(dtype), value=float(val), **kwargs)  # noqa: F821


def arange(start, stop=None, step=1.0, repeat=1, infer_range=False, name=None, dtype=None):
    """Evenly spaced values in ``[start, stop)`` (``mx.sym.arange``; ``arange(n)`` is 0..n-1)."""
    return _arange(
        start=start,
        stop=stop,
        step=step,
        repeat=repeat,  # noqa: F821 - from populate()
        infer_range=infer_range,
        name=name,
        dtype=_float32_if_none(dtype),
    )


def linspace(start, stop, num, endpoint=True, name=None, dtype=None):
    """``num`` evenly spaced values from ``start`` to ``stop`` (``mx.sym.linspace``)."""
    return _linspace(
        start=start,
        stop=stop,
        num=num,
        endpoint=endpoint,  # noqa: F821 - from populate()
        name=name,
        dtype=_float32_if_none(dtype),
    )


def eye(N, M=0, k=0, dtype=None, **kwargs):  # noqa: N803 - MXNet's names
    """An N x M matrix with ones on diagonal ``k`` (``mx.sym.eye``; dtype defaults to float32)."""
    return _eye(N=N, M=M, k=k, dtype=_float32_if_none(dtype), **kwargs)  # noqa: F821 - from populate()


def histogram(a, bins=10, range=None, **kwargs):  # noqa: A002 - MXNet's name
    """Counts of ``a`` in ``bins`` (an int, with ``range``) or between the edges of the Symbol ``bins``
    (``mx.sym.histogram``); returns the counts and the edges."""
    if isinstance(bins, Symbol):
        return _histogram(data=a, bins=bins, **kwargs)  # noqa: F821 - from populate()
    if isinstance(bins, numbers.Integral) and not isinstance(bins, bool):
        if range is None:
            raise ValueError(
                "histogram: range is required when bins is an int (null range is not supported in symbol mode)"
            )
        return _histogram(data=a, bin_cnt=bins, range=range, **kwargs)  # noqa: F821 - from populate()
    raise ValueError("histogram: bins must be an int or a Symbol of bin edges")


def split_v2(ary, indices_or_sections, axis=0, squeeze_axis=False):
    """Split ``ary`` along ``axis`` (``mx.sym.split_v2``): an int gives that many near-equal parts, a tuple
    the positions to split at (``(2, 3)``: ``[:2]``, ``[2:3]``, ``[3:]``)."""
    if isinstance(indices_or_sections, numbers.Integral) and not isinstance(indices_or_sections, bool):
        return _split_v2(
            ary,
            indices=(),
            axis=axis,
            squeeze_axis=squeeze_axis,  # noqa: F821
            sections=int(indices_or_sections),
        )
    if isinstance(indices_or_sections, tuple):
        return _split_v2(
            ary,
            indices=(0,) + tuple(indices_or_sections),
            axis=axis,  # noqa: F821
            squeeze_axis=squeeze_axis,
            sections=0,
        )
    raise ValueError("split_v2: indices_or_sections must be an int or a tuple of ints")
