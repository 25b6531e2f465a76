"""The symbol namespace users type (``sg.sym.<Op>``), like ``mx.sym``.

Holds ``Variable``, ``Group``, the naming scopes, one creator function per
registered operator (``sg.sym.FullyConnected(x, num_hidden=4, name="fc")``) and
MXNet's Python-level helpers ``maximum``/``minimum``/``hypot``/``pow`` that pick
the symbol or scalar form of an op. Gradient rules receive this module as ``F``.
"""

import builtins
import math
import numbers

from .base import AttrScope, NameManager, Prefix
from .serialization import fromjson, load, load_json
from .symbol import Group, Symbol, Variable, populate, var

__all__ = ["Symbol", "Variable", "var", "Group", "NameManager", "Prefix", "AttrScope",
           "maximum", "minimum", "hypot", "pow", "power", "load", "load_json", "fromjson"]

populate(globals())  # note: shadows builtins such as sum/max/min/abs/round in this module


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
