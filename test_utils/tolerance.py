"""Per-dtype tolerances, exactly MXNet 1.9's tables (``mxnet.test_utils.default_rtols`` & co.).

A tolerance argument is ``None`` (use the table), a number (used as is) or a ``{dtype: tol}`` dict
(entries override the table for those dtypes). Two arrays compared with each other get the looser
tolerance of their two dtypes, so float32 vs float64 is checked at float32's tolerance.

>>> import numpy as np
>>> get_tols(np.ones(2, np.float32), np.ones(2), None, None)
(0.0001, 0.001)
>>> get_tols(np.ones(2), np.ones(2), {np.float64: 1e-7}, 0.5)
(1e-07, 0.5)
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = [
    "violations",
    "default_dtype",
    "default_rtols",
    "default_atols",
    "default_numeric_eps",
    "effective_dtype",
    "get_tolerance",
    "get_tols",
    "get_rtol",
    "get_atol",
    "min_numeric_eps",
    "numeric_noise",
    "scaled_atol",
]

#: a real number as the checkers accept it (Python or numpy scalar; booleans are refused where they matter)
Real: TypeAlias = "float | np.floating[Any] | np.integer[Any]"
#: a tolerance argument: None (use the table), a number (used as is) or ``{dtype: number}`` (entries override the
#: table for those dtypes; any key ``np.dtype`` accepts)
Tolerance: TypeAlias = "Real | dict[Any, Real] | None"

_INT_TYPES = (np.bool_, np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64)


def default_dtype() -> type[np.float32]:
    """The dtype test data is created in (float32, as MXNet)."""
    return np.float32


# MXNet 1.9's default (rtol, atol) per float dtype; integers compare exactly
_DEFAULT_TOLS = {np.float16: (1e-2, 1e-1), np.float32: (1e-4, 1e-3), np.float64: (1e-5, 1e-20)}


def _tolerance_table(which: int) -> dict[np.dtype[Any], float]:
    table: dict[np.dtype[Any], float] = {np.dtype(t): tols[which] for t, tols in _DEFAULT_TOLS.items()}
    table.update({np.dtype(t): 0 for t in _INT_TYPES})
    return table


def default_rtols() -> dict[np.dtype[Any], float]:
    """Relative tolerance per dtype (MXNet 1.9): float16 1e-2, float32 1e-4, float64 1e-5, integers 0."""
    return _tolerance_table(0)


def default_atols() -> dict[np.dtype[Any], float]:
    """Absolute tolerance per dtype (MXNet 1.9): float16 1e-1, float32 1e-3, float64 1e-20, integers 0."""
    return _tolerance_table(1)


def default_numeric_eps() -> dict[np.dtype[Any], float]:
    """MXNet's finite-difference steps per dtype (powers of two).

    symgrad's ``check_numeric_gradient`` does not use them by default (it picks a step per element for
    a float64 reference); they are what ``numeric_eps`` dicts are completed from, as in MXNet.
    """
    return {np.dtype(np.float16): 1.0 / 2**6, np.dtype(np.float32): 1.0 / 2**9, np.dtype(np.float64): 1.0 / 2**14}


def min_numeric_eps(dtype: DTypeLike, numeric_dtype: DTypeLike = np.float64) -> float:
    """The smallest ``numeric_eps`` accepted for ``dtype`` under test, finite differences taken in ``numeric_dtype``.

    It is the larger of MXNet's floor (1e-5 when float16/float32 is under test) and
    ``sqrt(machine eps) / 4`` of the dtype the differences are taken in (below it rounding noise,
    about ``eps * |f| / step``, swamps the difference quotient; MXNet's default steps
    ``default_numeric_eps()`` all pass). One rule for ``numeric_grad`` (differences in its executor's dtype:
    ``min_numeric_eps(dt, dt)``) and ``check_numeric_gradient`` (in ``numeric_dtype``, float64 by default);
    ``numeric.refuse_small_eps`` applies it for both, in the same words.

    >>> min_numeric_eps(np.float32), min_numeric_eps(np.float64)
    (1e-05, 3.725290298461914e-09)
    """
    dtype, numeric_dtype = np.dtype(dtype), np.dtype(numeric_dtype)
    mxnet_floor = 1e-5 if dtype in (np.dtype(np.float16), np.dtype(np.float32)) else 0.0
    return max(mxnet_floor, float(np.sqrt(np.finfo(numeric_dtype).eps)) / 4)


def effective_dtype(dat: object) -> np.dtype[Any]:
    """The dtype whose tolerance applies to ``dat`` (numbers count as float64, as numpy scalars do)."""
    if isinstance(dat, numbers.Number) and not hasattr(dat, "dtype"):
        dat = np.asarray(dat)
    dtype = np.dtype(getattr(dat, "dtype", np.float64))
    return dtype


def _table_dtype(dtype: np.dtype, table: dict) -> np.dtype:
    """Map a dtype missing from the tables onto one that is there (int16 -> int32, complex -> float)."""
    if dtype in table:
        return dtype
    if dtype.kind in "iub":
        return np.dtype(np.int64)
    if dtype.kind == "c":
        return np.dtype(np.float32) if dtype.itemsize <= 8 else np.dtype(np.float64)
    if dtype.kind == "f":
        return np.dtype(np.float16) if dtype.itemsize <= 2 else np.dtype(np.float64)
    raise TypeError(f"no default tolerance for dtype {dtype}; pass rtol/atol explicitly")


def _norm_tol_dict(tol: dict) -> dict:
    return {np.dtype(k): v for k, v in tol.items()}


def get_tolerance(dat: object, tol: Tolerance, default_tol: dict[np.dtype[Any], float]) -> Real:
    """The tolerance for comparisons of ``dat``: ``tol`` if a number, else ``tol[dtype]`` or the default."""
    if isinstance(tol, numbers.Number) and not isinstance(tol, bool):
        return tol
    if tol is not None and not isinstance(tol, dict):
        raise TypeError(f"a tolerance must be None, a number or a {{dtype: tol}} dict, got {tol!r}")
    dtype = effective_dtype(dat)
    if tol:
        tol = _norm_tol_dict(tol)
        if dtype in tol:
            return tol[dtype]
    return default_tol[_table_dtype(dtype, default_tol)]


def get_tols(x: object, y: object, rtol: Tolerance, atol: Tolerance) -> tuple[Real, Real]:
    """``(rtol, atol)`` for comparing ``x`` with ``y``: the looser of the two dtypes' tolerances."""
    rtol = max(get_tolerance(x, rtol, default_rtols()), get_tolerance(y, rtol, default_rtols()))
    atol = max(get_tolerance(x, atol, default_atols()), get_tolerance(y, atol, default_atols()))
    return rtol, atol


def get_rtol(rtol: Tolerance = None, dtype: DTypeLike = np.float64) -> Real:
    """``rtol`` or the table's entry for ``dtype``."""
    return get_tolerance(np.empty((), dtype), rtol, default_rtols())


def get_atol(atol: Tolerance = None, dtype: DTypeLike = np.float64) -> Real:
    """``atol`` or the table's entry for ``dtype``."""
    return get_tolerance(np.empty((), dtype), atol, default_atols())


# == the tolerance model of every numeric check ==========================================================
#
# allowed error = atol + rtol * |numeric| + numeric noise + analytic noise
#
# numeric noise: the rounding noise of one evaluation of the objective divided by the width of the difference
#   (the larger of NOISE_FACTOR * eps * sum|terms of the objective| and the emulated noise of the forward,
#   ``harness.Harness.objective_noise``, which sees cancellation inside the forward);
# analytic noise: the rounding noise of the gradient in the dtype under test, estimated by emulating that
#   rounding on a float64 run (``harness.analytic_noise``): what lets an exactly-zero float32 gradient pass
#   with a tight atol, and a 1% error on any gradient that is not all tiny fail.

#: safety factor of the numeric-noise estimate (rounding in the forward ops, not only in the final sum);
#: 1 already removed every false failure of 900 random float64 checks (6 ops x 150 seeds), 0 left one
NOISE_FACTOR = 4.0


def numeric_noise(magnitude, widths, numeric_dtype=np.float64) -> np.ndarray:
    """Estimated rounding noise of a difference quotient: ``NOISE_FACTOR * eps * |f| / width``."""
    eps = float(np.finfo(np.dtype(numeric_dtype)).eps)
    return NOISE_FACTOR * eps * float(magnitude) / np.asarray(widths, dtype=np.float64)


def scaled_atol(rtol, reference) -> float:
    """``check_numeric_gradient``'s atol when none is given: ``rtol`` times the largest ``|reference|`` entry of the
    argument. An error below that share of the gradient's own scale is at rounding level in the dtype under test;
    a fixed atol (MXNet's 1e-3 for float32) hides 1% errors of gradients smaller than 0.1."""
    return float(rtol) * float(np.max(np.abs(np.asarray(reference, np.float64)), initial=0.0))


def violations(
    a: np.ndarray, e: np.ndarray, rtol: Real, atol: Any, equal_nan: bool, noise: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tolerance model's test, element by element: ``(bad mask, |a - e|, allowed)`` for broadcast float64
    arrays, where ``allowed = atol + rtol |e| + noise`` (0 where that is not finite) and an element is bad unless
    ``|a - e| <= allowed`` (equal values, equal infinities and, with ``equal_nan``, two NaNs have error 0; a NaN
    error is bad). Every checker's comparison is this test."""
    # computed in place where the arrays allow it: a Jacobian-sized comparison (gradcheck's slow mode on 12 544
    # outputs x 12 500 inputs: 1.25 GB an array) held 5 temporaries of its size at once, now 2
    with np.errstate(invalid="ignore", over="ignore"):
        equal = a == e  # equal infinities count as equal (as np.isclose)
        if equal_nan:
            equal |= np.isnan(a) & np.isnan(e)
        err = np.asarray(a - e)
        err = np.abs(err, out=err) if err.dtype.kind == "f" else np.asarray(np.abs(err))  # complex: a real |a - e|
        err[equal] = 0.0
        allowed = _into(np.multiply, np.abs(e), rtol)
        allowed = _into(np.add, allowed, atol)
        if noise is not None:
            allowed = _into(np.add, allowed, noise)
        allowed[~np.isfinite(allowed)] = 0.0
        bad = ~(err <= allowed)  # NaN errors are mismatches
    return bad, err, allowed


def _into(ufunc: np.ufunc, total: Any, x: Any) -> np.ndarray:
    """``ufunc(total, x)`` for a fresh ``total``, written into it where the result keeps its shape and dtype."""
    total = np.asarray(total)
    if np.broadcast_shapes(total.shape, np.shape(x)) == total.shape and np.result_type(total, x) == total.dtype:
        return ufunc(total, x, out=total)
    return np.asarray(ufunc(total, x))
