"""Array comparison with per-dtype tolerances; every failure is a ``GradientCheckError``.

``compare`` is the one comparison path behind every checker: elementwise
``|actual - expected| <= atol + rtol * |expected| (+ noise)``, NaN never equal unless ``equal_nan``,
equal infinities equal. On failure it builds the report (worst elements, mismatch share, tolerances,
diagnosis) and raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ._inputs import check_flag, check_tolerances, host_array
from .context import to_numpy
from .diagnose import Diagnosis, analyze
from .frames import hide_from_pytest as _hide_from_pytest
from .report import GradientCheckError, Report
from .tolerance import Real, Tolerance, get_tols, violations

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

__all__ = ["compare", "assert_almost_equal", "almost_equal", "same", "assert_allclose"]


def _as_float64(x):
    x = to_numpy(x)
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return x.astype(np.complex128)
    return x.astype(np.float64)


def compare(
    actual: ArrayLike,
    expected: ArrayLike,
    rtol: Real,
    atol: Real,
    *,
    check: str = "assert_almost_equal",
    arg_name: str | None = None,
    what: str | None = None,
    names: Sequence[str] = ("actual", "expected"),
    equal_nan: bool = False,
    eps: str | float | None = None,
    noise: ArrayLike | None = None,
    max_rows: int = 10,
    extra_lines: Iterable[str] = (),
    facts: Mapping[str, Any] | None = None,
    broadcast: bool | Literal["expected"] = True,
    context: Mapping[str, Any] | Callable[[], Mapping[str, Any] | None] | None = None,
    exclude: ArrayLike | None = None,
    analytic_noise: ArrayLike | None = None,
    noise_dtype: DTypeLike | None = None,
) -> None:
    """Raise ``GradientCheckError`` unless ``actual`` matches ``expected`` elementwise.

    Args:
        actual, expected: arrays (numpy or CuPy) or numbers; they are broadcast against each other.
        rtol, atol: numbers (resolve ``None``/dicts with ``tolerance.get_tols`` first).
        check: the checker's name, first word of the message.
        arg_name: the argument or output being checked (None for plain arrays).
        what: the headline, e.g. ``"gradient of 'x' does not match expected"`` (default from names).
        names: column labels of the two arrays.
        equal_nan: NaN == NaN.
        eps: description of the finite-difference step, reported when given.
        noise: optional array (or number) added to the allowed error (estimated rounding noise of a
            numeric reference), reported in the message.
        analytic_noise: optional array (or number) added too: the estimated rounding noise of ``actual`` in
            ``noise_dtype`` (``harness.analytic_noise``); the diagnosis says when an error is within a few
            times the two noises (rounding, not a wrong formula).
        max_rows: rows of the worst-element table.
        extra_lines: more lines for the message (context such as dtype or grad_req).
        facts: more attributes for the error.
        broadcast: True broadcasts the two arrays against each other (MXNet); ``"expected"`` only
            broadcasts ``expected`` to the shape of ``actual``; False requires equal shapes.
        context: what the checker knows beyond the arrays, for the diagnosis (``diagnose`` lists the keys),
            or a callable returning it (called only when the comparison fails).
        exclude: optional boolean array (shape of ``actual``): elements left out of the comparison (e.g.
            non-differentiable points); the report counts them.
    """
    a, e = _as_float64(actual), _as_float64(expected)
    facts = dict(facts or {})
    if what is None:
        what = f"{names[0]} and {names[1]} differ" + (f" for {arg_name!r}" if arg_name is not None else "")
    common = dict(check=check, arg_name=arg_name, rtol=rtol, atol=atol, eps=eps, names=tuple(names), **_seed_fact())
    try:
        if not broadcast and a.shape != e.shape:
            raise ValueError("shapes differ")
        a_b, e_b = np.broadcast_arrays(a, e)
        if broadcast == "expected" and a_b.shape != a.shape:
            raise ValueError("expected does not broadcast to the shape of actual")
    except ValueError:
        raise _shape_error(a, e, names, arg_name, extra_lines, common, facts) from None
    total_noise = noise
    if analytic_noise is not None:
        total_noise = analytic_noise if noise is None else np.asarray(noise) + np.asarray(analytic_noise)
    bad, err, allowed = violations(a_b, e_b, rtol, atol, equal_nan, total_noise)
    n_excluded = 0
    if exclude is not None:
        exclude = np.broadcast_to(np.asarray(exclude, bool), bad.shape)
        n_excluded = int(exclude.sum())
        bad = bad & ~exclude
    if not bad.any():
        return
    rows = _worst_rows(a_b, e_b, bad, err, allowed, max_rows)
    n_bad, size = int(bad.sum()), int(bad.size)
    context = dict((context() if callable(context) else context) or {})
    context.setdefault("mismatch", bad)
    context.setdefault("arg_name", arg_name)
    if total_noise is not None:
        context.setdefault("noise", (np.broadcast_to(np.asarray(total_noise, np.float64), bad.shape), noise_dtype))
    a_diag, e_diag = a_b, e_b
    if exclude is not None:  # left-out elements count as zero in both, so they neither fit nor break a pattern
        a_diag, e_diag = np.where(exclude, 0.0, a_b), np.where(exclude, 0.0, e_b)
    diag = analyze(a_diag, e_diag, names, context=context)
    report = Report(check, what, names=tuple(names), rows=rows, diagnosis=diag, context=list(extra_lines))
    report.summary.append(_summary(n_bad, size, names, rtol, atol, eps, noise, analytic_noise, noise_dtype))
    if n_excluded:
        report.summary.append(
            f"{n_excluded} element{'s' if n_excluded != 1 else ''} left out of the comparison "
            "(non-differentiable points)"
        )
    raise GradientCheckError(
        report,
        index=rows[0][0],
        worst=rows,
        mismatch_fraction=n_bad / size,
        n_mismatch=n_bad,
        size=size,
        diagnosis=diag,
        actual=a_b,
        expected=e_b,
        n_excluded=n_excluded,
        **common,
        **facts,
    )


def _shape_error(a, e, names, arg_name, extra_lines, common, facts):
    about = f" for {arg_name!r}" if arg_name is not None else ""
    diag = None
    if a.ndim == 2 and a.shape == e.shape[::-1]:
        diag = Diagnosis("the shapes are transposed: the rule swaps the axes", "transposed", axes=(0, 1))
    report = Report(
        common["check"],
        f"shapes differ{about}: {names[0]} has shape {a.shape}, {names[1]} has shape {e.shape}",
        diagnosis=diag,
        context=list(extra_lines),
    )
    return GradientCheckError(
        report,
        index=None,
        worst=[],
        mismatch_fraction=1.0,
        n_mismatch=max(a.size, e.size),
        size=max(a.size, e.size),
        diagnosis=diag,
        actual=a,
        expected=e,
        **common,
        **facts,
    )


def _worst_rows(a_b, e_b, bad, err, allowed, max_rows):
    """``(index, actual, expected, |error|, tolerance)`` of the worst mismatches (largest error / tolerance)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bad, np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1.0), np.inf), -1.0)
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    flat = np.argsort(-ratio, axis=None, kind="stable")[: max(int(max_rows), 1)]
    rows = []
    for f in flat:
        if not bad.flat[f]:
            break
        idx = tuple(int(i) for i in np.unravel_index(f, bad.shape))
        rows.append((idx, float(a_b[idx]), float(e_b[idx]), float(err[idx]), float(allowed[idx])))
    return rows


def _summary(n_bad, size, names, rtol, atol, eps, noise, analytic_noise, noise_dtype) -> str:
    tol_line = f"rtol={rtol:.3g}, atol={atol:.3g}"
    if eps is not None:
        tol_line += f", eps={eps}"
    rule = f"|{names[0]} - {names[1]}| <= atol + rtol * |{names[1]}|"
    if noise is not None:
        rule += " + numeric noise"
        tol_line += f", numeric noise <= {_finite_max(noise):.3g}"
    if analytic_noise is not None:
        what = f"{np.dtype(noise_dtype).name} rounding" if noise_dtype is not None else "analytic noise"
        rule += f" + {what}"
        tol_line += f", {what} of {names[0]} <= {_finite_max(analytic_noise):.3g}"
    return f"{n_bad} of {size} elements ({100 * n_bad / size:.3g}%) violate {rule} ({tol_line})"


def _finite_max(a: ArrayLike) -> float:
    """The largest finite entry (a NaN gradient element has a NaN noise estimate: not the report's bound)."""
    a = np.asarray(a, np.float64)
    return float(np.max(a, where=np.isfinite(a), initial=0.0))


def _seed_fact():
    from .seed import current_seed

    seed = current_seed()
    return {} if seed is None else {"seed": seed}


def assert_almost_equal(
    a: ArrayLike,
    b: ArrayLike,
    rtol: Tolerance = None,
    atol: Tolerance = None,
    names: Sequence[str] = ("a", "b"),
    equal_nan: bool = False,
    mismatches: Sequence[int] = (10, 10),
    *,
    use_broadcast: bool = True,
) -> None:
    """Assert ``|a - b| <= atol + rtol * |b|`` elementwise (MXNet's ``assert_almost_equal``).

    Tolerances: ``None`` takes the looser default of the two dtypes (``default_rtols``/``default_atols``),
    a number is used as is, a ``{dtype: tol}`` dict overrides the defaults per dtype. ``mismatches[0]``
    is the number of worst elements listed; every mismatch is counted exactly, so ``mismatches[1]`` (MXNet's
    search limit) is accepted and ignored. Boolean arrays must be equal. With ``use_broadcast=False``
    the shapes must be equal.

    Raises:
        GradientCheckError: (an ``AssertionError``) naming the worst elements and the mismatch share.

    >>> import numpy as np
    >>> assert_almost_equal(np.float32([1, 2]), np.array([1.00001, 2.0]))
    """
    who = "assert_almost_equal"
    if not (isinstance(names, (tuple, list)) and len(names) == 2 and all(isinstance(n, str) for n in names)):
        raise TypeError(f"{who}: names must be a pair of strings such as ('a', 'b'), got {names!r}")
    if not (
        isinstance(mismatches, (tuple, list))
        and len(mismatches) == 2
        and all(isinstance(m, (int, np.integer)) and not isinstance(m, (bool, np.bool_)) and m >= 1 for m in mismatches)
    ):
        raise TypeError(f"{who}: mismatches must be a pair of integers >= 1 such as (10, 10), got {mismatches!r}")
    check_tolerances(rtol, atol, who)
    equal_nan = check_flag(equal_nan, who, "equal_nan")
    use_broadcast = check_flag(use_broadcast, who, "use_broadcast")
    a_np, b_np = host_array(a, who, "array", names[0]), host_array(b, who, "array", names[1])
    rtol, atol = get_tols(a_np, b_np, rtol, atol)
    if getattr(a_np, "dtype", None) == np.bool_ and getattr(b_np, "dtype", None) == np.bool_:
        rtol = atol = 0
    compare(
        a_np,
        b_np,
        rtol,
        atol,
        names=names,
        equal_nan=equal_nan,
        max_rows=mismatches[0],
        what=f"{names[0]} and {names[1]} are not almost equal",
        broadcast=use_broadcast,
    )


def almost_equal(
    a: ArrayLike,
    b: ArrayLike,
    rtol: Tolerance = None,
    atol: Tolerance = None,
    equal_nan: bool = False,
    use_broadcast: bool = True,
) -> bool:
    """True when ``assert_almost_equal(a, b, rtol, atol)`` would pass.

    Unlike MXNet 1.9 (whose ``almost_equal`` falls back to float64's tolerances whatever the dtypes),
    ``None`` tolerances come from the dtypes exactly as in ``assert_almost_equal``.
    """
    who = "almost_equal"
    check_tolerances(rtol, atol, who)
    equal_nan = check_flag(equal_nan, who, "equal_nan")
    use_broadcast = check_flag(use_broadcast, who, "use_broadcast")
    a_np, b_np = host_array(a, who, "array", "a"), host_array(b, who, "array", "b")
    if not use_broadcast and a_np.shape != b_np.shape:
        return False
    rtol, atol = get_tols(a_np, b_np, rtol, atol)
    try:
        a64, b64 = np.broadcast_arrays(_as_float64(a_np), _as_float64(b_np))
    except ValueError:
        return False
    bad, _, _ = violations(a64, b64, rtol, atol, equal_nan)
    return not bool(bad.any())


def same(a: ArrayLike, b: ArrayLike) -> bool:
    """True when ``a`` and ``b`` have the same shape and exactly the same values."""
    return bool(np.array_equal(to_numpy(a), to_numpy(b)))


def assert_allclose(
    a: ArrayLike, b: ArrayLike, rtol: Tolerance = 1e-07, atol: Tolerance = 0, equal_nan: bool = True
) -> None:
    """MXNet's ``assert_allclose``: ``assert_almost_equal`` with numpy's default tolerances."""
    assert_almost_equal(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
