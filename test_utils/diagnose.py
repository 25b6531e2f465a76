"""Guess the likely bug behind a gradient mismatch from the two arrays alone.

``diagnose(actual, expected)`` runs a list of rules and returns the first one-line diagnosis, or
None. Every checker puts that line into its ``GradientCheckError``. Add a rule with
``register_rule(fn)``; a rule takes ``(actual, expected)`` as float64 arrays of one shape and returns
a string or None.

>>> import numpy as np
>>> diagnose(np.array([2.0, -4.0]), np.array([1.0, -2.0]))
"actual = 2 x expected: counted twice / accumulated over two backward calls -- grad_req 'add' or a gradient not zeroed"
>>> diagnose(np.array([1.0, 3.0]), np.array([1.0, 2.0])) is None
True
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

__all__ = ["diagnose", "register_rule", "RULES"]

#: residual of the best fit ``actual ~ k * expected``, relative to ``|expected|``, below which the
#: two arrays count as proportional (loose enough for float16 round-off, tight enough for real bugs)
FIT_RTOL = 2e-2

Rule = Callable[[np.ndarray, np.ndarray], "str | None"]


def _nonfinite(actual, expected):
    bad = ~np.isfinite(actual) & np.isfinite(expected)
    if bad.any():
        n_nan = int(np.isnan(actual[bad]).sum())
        return (
            f"actual has {int(bad.sum())} non-finite values ({n_nan} NaN, {int(bad.sum()) - n_nan} Inf) where "
            "expected is finite: overflow, a division by zero or a log/sqrt of a non-positive value in the rule"
        )
    return None


def _nice(k: float) -> str:
    return f"{k:.6g}"


def _scaled(actual, expected):
    """actual = k * expected for one constant k."""
    ee = float(np.vdot(expected, expected))
    if ee == 0.0:
        if np.any(actual != 0):
            return ("expected is all zeros but actual is not: a gradient where none should flow (a constant, an "
                    "index input or a BlockGrad'ed path got one)")
        return None
    k = float(np.vdot(actual, expected)) / ee
    resid = float(np.linalg.norm(actual - k * expected)) / np.sqrt(ee)
    # the fit must explain the difference: residual small in itself and against the deviation from k = 1
    if resid > FIT_RTOL or resid > 0.1 * abs(k - 1.0):
        return None
    if abs(k - 1.0) <= FIT_RTOL:
        return None  # proportional with k ~ 1: a small error, nothing structural to say
    if abs(k) <= FIT_RTOL:
        return ("actual is (close to) zero: gradient missing / not connected -- the rule returns zeros or the "
                "argument's path to the output is cut")
    kr = round(k)
    if kr != 0 and abs(k - kr) <= FIT_RTOL * max(1.0, abs(k)):
        if kr == -1:
            return "actual = -expected: sign flipped"
        if kr == 2:
            return ("actual = 2 x expected: counted twice / accumulated over two backward calls -- "
                    "grad_req 'add' or a gradient not zeroed")
        if kr > 2:
            return (f"actual = {kr} x expected: accumulated over {kr} backward calls (grad_req 'add' or a gradient "
                    f"not zeroed between calls) or a contribution counted {kr} times")
        return f"actual = {kr} x expected: scaled by {kr} (sign flipped and scaled)"
    inv = 1.0 / k
    ir = round(inv)
    if abs(ir) >= 2 and abs(inv - ir) <= FIT_RTOL * abs(inv):
        return (f"actual = expected / {ir}: scaled by 1/{ir} -- a normalisation (batch size, element count, "
                "grad_scale) applied once too often")
    return f"actual = {_nice(k)} x expected: scaled by {_nice(k)}"


def _offset(actual, expected):
    """actual = expected + c for one constant c."""
    if actual.size < 2:
        return None
    d = actual - expected
    c = float(d.mean())
    if c != 0 and float(d.std()) <= FIT_RTOL * abs(c):
        sign = "+" if c > 0 else "-"
        return (f"actual = expected {sign} {_nice(abs(c))} everywhere: a constant offset (a bias or constant term "
                "added twice or missing)")
    return None


def _transposed(actual, expected):
    if actual.ndim == 2 and actual.shape[0] == actual.shape[1] and actual.shape[0] > 1:
        if np.allclose(actual, expected.T, rtol=FIT_RTOL, atol=0) and not np.allclose(actual, expected, rtol=FIT_RTOL):
            return "actual = expected transposed: the rule swaps the axes (a missing or extra .T)"
    return None


def _sign_partly_flipped(actual, expected):
    scale = float(np.abs(expected).max())
    if scale == 0:
        return None
    mag = np.abs(expected)
    flipped = (np.abs(actual + expected) <= FIT_RTOL * mag) & (mag > 1e-3 * scale)
    same = np.abs(actual - expected) <= FIT_RTOL * mag + 1e-6 * scale
    if flipped.any() and not flipped.all() and (flipped | same).all():
        return (f"actual = expected but with the sign flipped in {int(flipped.sum())} of {flipped.size} elements "
                f"({100 * flipped.mean():.3g}%): the rule is wrong on one side of a kink (abs, relu, sign, max)")
    return None


_nonfinite.finite_only = False  # type: ignore[attr-defined]

RULES: list[Rule] = [_nonfinite, _scaled, _offset, _transposed, _sign_partly_flipped]


def register_rule(rule: Rule, first: bool = False) -> Rule:
    """Add a diagnosis rule (at the end, or tried first). Returns it, so it works as a decorator.

    A rule only sees arrays without NaN/Inf unless it sets ``rule.finite_only = False``.
    """
    if first:
        RULES.insert(0, rule)
    else:
        RULES.append(rule)
    return rule


def diagnose(actual, expected, names=("actual", "expected")) -> str | None:
    """A one-line guess at the bug making ``actual`` differ from ``expected``, or None.

    Rules, in order: non-finite values; ``actual = k x expected`` (k = 0 missing, -1 sign, 2 counted
    twice, n accumulated n times, 1/n over-normalised, other k scaled); a constant offset; transposed;
    sign flipped on part of the elements. Arrays of different shapes are not diagnosed. ``names`` replace the words
    "actual" and "expected" in the text (``("analytic", "numeric")`` for a numeric check).
    """
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape or a.size == 0:
        return None
    finite = bool(np.isfinite(a).all() and np.isfinite(e).all())
    for rule in RULES:
        if not finite and getattr(rule, "finite_only", True):
            continue
        msg = rule(a, e)
        if msg:
            if tuple(names) != ("actual", "expected"):
                msg = re.sub(r"\b(actual|expected)\b", lambda m: names[m.group(1) == "expected"], msg)
            return msg
    return None
