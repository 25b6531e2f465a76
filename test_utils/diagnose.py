"""Guess the likely bug behind a gradient mismatch.

``diagnose(actual, expected)`` runs a list of rules and returns the first one-line diagnosis, or None.
Every checker puts that line into its ``GradientCheckError``; ``analyze`` is what the checkers call: the
same rules, plus a description of an error that fits no rule ("no simple pattern").

A diagnosis is a ``Diagnosis``: a ``str`` (the line) that also carries its facts for programs --
``pattern`` (a short name, see ``PATTERNS``), ``factor`` (the constant ``k`` of ``actual = k x expected``
or None) and ``facts`` (a dict: the confined indices, the slice taken instead of a sum, the kinks, ...).

Rules see the two arrays (float64, one shape) and, when they ask for it, a *context* dict the checker
fills with what it knows beyond the arrays:

- ``"mismatch"``: boolean array of the elements outside the tolerance;
- ``"slice_terms"``: ``[(label, term, n_terms), ...]``: the gradient obtained from one slice of an output
  alone (the head gradient zeroed elsewhere); ``actual == term`` means the rule ignored every other slice;
- ``"broadcast_axes"``: ``[(label, size), ...]``: output axes the argument is broadcast over;
- ``"head_doubled"``: the gradient the backward gives for twice the head gradients (a backward ignoring its
  head gradient gives the same);
- ``"arrays"``: ``[(label, array)]``: the inputs and outputs of the gradient's shape (``actual`` equal to one
  of them: the wrong array returned);
- ``"other_expected"``: ``[(name, array)]``: the expected gradients of the other arguments of the same shape
  (``actual`` equal to one of them: d/da and d/db swapped);
- ``"at_output"``: ``(output name, gradient)``: the expected gradient re-taken with the argument replaced by
  that output's value (``actual`` equal to it: the derivative evaluated at the output, f'(f(x)));
- ``"values"``: the checked argument's own values (the error confined to a range of them: a wrong branch);
- ``"indices"``: ``[(name, integer array)]``: the graph's index inputs (the error confined to the rows they
  select more than once: repeated indices not accumulated);
- ``"kinks"``: ``report.Kink`` facts of mismatching elements found at non-differentiable points;
- ``"arg_name"``: the argument checked;
- ``"initial_buffer"``: what the gradient buffer held before a backward with grad_req 'write' (checkers
  start from dirty buffers): ``actual == initial_buffer + expected`` means the backward added into it.
- ``"buffer_fit"``: the buffer bug a repeated-backward probe's buffer fits (``"stale_buffer"``,
  ``"overwritten_buffer"`` or ``"kept_gradient"``; ``test_utils.buffers``);
- ``"added_to_buffer"``: the same for grad_req 'add', where ``actual`` is what the backward added (buffer after
  minus buffer before): ``actual == expected - added_to_buffer`` means the backward overwrote the buffer.

Add a rule with ``register_rule(fn)``; a rule takes ``(actual, expected)`` (or ``(actual, expected,
context)`` when ``fn.uses_context = True``) and returns a string (or a ``Diagnosis``) or None.

>>> import numpy as np
>>> diagnose(np.array([2.0, -4.0]), np.array([1.0, -2.0]))
"actual = 2 x expected: counted twice / accumulated over two backward calls -- grad_req 'add' or a gradient not zeroed"
>>> diagnose(np.array([1.0, 3.0]), np.array([1.0, 2.0])) is None
True
>>> diagnose(np.array([1.01, -2.02, 3.03]), np.array([1.0, -2.0, 3.0])).pattern
'small'
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["diagnose", "analyze", "register_rule", "RULES", "Diagnosis", "PATTERNS", "FIT_RTOL"]

#: residual of the best fit ``actual ~ k * expected``, relative to ``|expected|``, below which the
#: two arrays count as proportional (loose enough for float16 round-off, tight enough for real bugs)
FIT_RTOL = 2e-2

#: an error is "confined" when at most this share of the elements (and at most CONFINED_MAX of them)
#: is wrong, in an array of at least CONFINED_MIN_SIZE elements
CONFINED_SHARE = 0.05
CONFINED_MAX = 32
CONFINED_MIN_SIZE = 20

#: an unstructured error is described ("no simple pattern") when it covers at least this share
SPREAD_SHARE = 0.25

#: pattern names a ``Diagnosis`` can carry
PATTERNS = {
    "nonfinite": "non-finite values where the reference is finite",
    "unexpected": "a gradient where the reference is zero everywhere",
    "missing": "actual = 0 x expected (gradient missing / not connected)",
    "sign": "actual = -expected",
    "doubled": "actual = 2 x expected",
    "accumulated": "actual = n x expected, n >= 3",
    "scaled": "actual = k x expected for another constant k",
    "small": "off by a small relative error (~0.1% to 2%) everywhere",
    "offset": "actual = expected + c",
    "transposed": "actual = expected with two axes swapped",
    "partial_sign": "sign flipped on part of the elements",
    "broadcast": "one slice taken (or a mean) instead of the sum over a broadcast axis",
    "confined": "error confined to a few elements",
    "rounding": "every error within a few times the estimated rounding noise",
    "kink": "mismatch at non-differentiable points",
    "spread": "error over many elements with no simple pattern",
    "head_ignored": "the gradient does not scale with the head gradient",
    "swapped": "actual = the expected gradient of another argument",
    "region": "error confined to the elements whose input lies beyond a threshold",
    "repeated_indices": "error confined to the rows an index input selects more than once",
    "ignored_index": "rows an index input selects but the forward ignores receive gradient",
    "inverted_mask": "actual nonzero exactly where expected is zero (a condition's branches swapped)",
    "at_output": "actual = the derivative evaluated at the output instead of the input",
    "returned_array": "actual = an input, an output or the head gradient itself",
    "stale_buffer": "actual = the buffer's initial content + expected (added into a 'write' buffer)",
    "overwritten_buffer": "actual = expected - the buffer's initial content (a 'add' buffer overwritten)",
    "kept_gradient": "repeated backward calls return a growing gradient (a gradient kept between calls)",
    "custom": "a registered rule that returned a plain string",
}


class Diagnosis(str):
    """A diagnosis line (a ``str``) with its facts: ``pattern``, ``factor`` and ``facts``."""

    pattern: str
    factor: float | None
    facts: dict

    def __new__(cls, text: str, pattern: str = "custom", factor: float | None = None, **facts):
        obj = super().__new__(cls, text)
        obj.pattern = pattern
        obj.factor = None if factor is None else float(factor)
        obj.facts = facts
        return obj

    def with_text(self, text: str) -> Diagnosis:
        return Diagnosis(text, self.pattern, self.factor, **self.facts)

    def __reduce__(self):
        return (_make_diagnosis, (str(self), self.pattern, self.factor, self.facts))


def _make_diagnosis(text, pattern, factor, facts):
    return Diagnosis(text, pattern, factor, **facts)


Rule = Callable[..., "str | None"]


def _fmt_index(index) -> str:
    return ", ".join(str(int(i)) for i in index) if len(index) else ""


def _nonfinite(actual, expected):
    bad = ~np.isfinite(actual) & np.isfinite(expected)
    if bad.any():
        n_nan = int(np.isnan(actual[bad]).sum())
        return Diagnosis(
            f"actual has {int(bad.sum())} non-finite values ({n_nan} NaN, {int(bad.sum()) - n_nan} Inf) where "
            "expected is finite: overflow, a division by zero or a log/sqrt of a non-positive value in the rule",
            "nonfinite",
            n_nonfinite=int(bad.sum()),
        )
    return None


def _nice(k: float) -> str:
    return f"{k:.6g}"


def _mean_instead_of_sum(n: int, context) -> str | None:
    for label, size in (context or {}).get("broadcast_axes", ()):
        if int(size) == n:
            return label
    return None


#: how far a fitted factor may sit from an integer n and still read as "n x" (a count: accumulated n times, averaged
#: over n): FIT_RTOL of it, but never more than this much absolute -- else k = 180/pi read as "57 x: accumulated
#: over 57 backward calls"
INTEGER_SLACK = 0.05


def _integer_slack(k: float) -> float:
    return min(FIT_RTOL * max(1.0, abs(k)), INTEGER_SLACK)


def _scaled(actual, expected, context=None):
    """actual = k * expected for one constant k."""
    ee = float(np.vdot(expected, expected))
    if ee == 0.0:
        if _confined(actual, expected, context):
            return None  # a few wrong elements of a zero gradient: name them (``_confined``)
        if np.any(actual != 0):
            return Diagnosis(
                "expected is all zeros but actual is not: a gradient where none should flow (a "
                "constant, an index input or a BlockGrad'ed path got one)",
                "unexpected",
            )
        return None
    k = float(np.vdot(actual, expected)) / ee
    resid = float(np.linalg.norm(actual - k * expected)) / np.sqrt(ee)
    # the fit must explain the difference: residual small in itself and against the deviation from k = 1
    if resid > FIT_RTOL or resid > 0.1 * abs(k - 1.0):
        return None
    if abs(k - 1.0) < 1e-6:
        return None  # equal up to rounding
    if abs(k - 1.0) <= FIT_RTOL:
        pct = 100 * abs(k - 1.0)
        return Diagnosis(
            f"actual = {_nice(k)} x expected: off by ~{pct:.2g}% everywhere: a slightly wrong constant or an "
            "approximation in the rule (a rounded coefficient, a series or a cheaper formula)",
            "small",
            k,
            relative_error=abs(k - 1.0),
        )
    if abs(k) <= FIT_RTOL:
        return Diagnosis(
            "actual is (close to) zero: gradient missing / not connected -- the rule returns zeros or "
            "the argument's path to the output is cut",
            "missing",
            k,
        )
    kr = round(k)
    if kr != 0 and abs(k - kr) <= _integer_slack(k):
        if kr == -1:
            return Diagnosis("actual = -expected: sign flipped", "sign", k)
        if kr == 2:
            return Diagnosis(
                "actual = 2 x expected: counted twice / accumulated over two backward calls -- "
                "grad_req 'add' or a gradient not zeroed",
                "doubled",
                k,
            )
        if kr > 2:
            return Diagnosis(
                f"actual = {kr} x expected: accumulated over {kr} backward calls (grad_req 'add' or a "
                f"gradient not zeroed between calls) or a contribution counted {kr} times",
                "accumulated",
                k,
            )
        return Diagnosis(f"actual = {kr} x expected: scaled by {kr} (sign flipped and scaled)", "scaled", k)
    inv = 1.0 / k
    ir = round(inv)
    if abs(ir) >= 2 and abs(inv - ir) <= _integer_slack(inv):
        axis = _mean_instead_of_sum(ir, context)
        if axis is not None:
            return Diagnosis(
                f"actual = expected / {ir}: averaged over {axis} (size {ir}) instead of summed -- a broadcast "
                f"argument's gradient is the sum over the broadcast axis (or a normalisation applied once too often)",
                "broadcast",
                k,
                axis=axis,
                reduction="mean",
            )
        return Diagnosis(
            f"actual = expected / {ir}: scaled by 1/{ir} -- a normalisation (batch size, element "
            "count, grad_scale) applied once too often",
            "scaled",
            k,
        )
    return Diagnosis(f"actual = {_nice(k)} x expected: scaled by {_nice(k)}", "scaled", k)


_scaled.uses_context = True  # type: ignore[attr-defined]


#: ``_accumulated_drifting``: each element's ratio within this share of the integer n
DRIFT_BAND = 0.08


def _ratio_span(lo, hi) -> str:
    """``varies from 0.98 to 1.02``, or ``is about 2`` where the two ends print alike."""
    lo_text, hi_text = f"{float(lo):.3g}", f"{float(hi):.3g}"
    return f"is about {lo_text}" if lo_text == hi_text else f"varies from {lo_text} to {hi_text}"


def _rows_text(rows, axis) -> str:
    """``row 2 along axis 0`` or ``rows 2, 5 along axis 0`` (the first six, then an ellipsis)."""
    shown = ", ".join(str(int(r)) for r in rows[:6]) + (", ..." if len(rows) > 6 else "")
    return f"{'row' if len(rows) == 1 else 'rows'} {shown} along axis {axis}"


def _accumulated_drifting(actual, expected):
    """actual ~ n x expected, n >= 3, the ratio varying a few percent: n backward calls accumulated whose
    gradients differed a little (a training loop that never zeroes an input's gradient while the parameters
    move: the seed question of ``../shared/reference/004_*``, ratios 9.2 to 10.6 after 10 SGD steps)."""
    big = np.abs(expected) > 1e-3 * float(np.max(np.abs(expected), initial=0.0))
    if big.sum() < 4:
        return None
    ratio = actual[big] / expected[big]
    n = round(float(np.median(ratio)))
    if n < 3 or not np.all(np.abs(ratio - n) <= DRIFT_BAND * n):
        return None
    lo, hi = float(ratio.min()), float(ratio.max())
    return Diagnosis(
        f"actual ~ {n} x expected (the ratio {_ratio_span(lo, hi)}): accumulated over {n} "
        f"backward calls (grad_req 'add', or a gradient not zeroed between calls) whose gradients "
        f"differed a little -- parameters updated between the calls",
        "accumulated",
        float(n),
        ratio_range=(lo, hi),
    )


def _offset(actual, expected):
    """actual = expected + c for one constant c."""
    if actual.size < 2:
        return None
    d = actual - expected
    c = float(d.mean())
    if c != 0 and float(d.std()) <= FIT_RTOL * abs(c):
        sign = "+" if c > 0 else "-"
        return Diagnosis(
            f"actual = expected {sign} {_nice(abs(c))} everywhere: a constant offset (a bias or "
            "constant term added twice or missing)",
            "offset",
            offset=c,
        )
    return None


#: what a repeated-backward probe's buffer fits (``context["buffer_fit"]``, named by ``buffers``), as a diagnosis
_BUFFER_FITS = {
    "overwritten_buffer": "buffer = what overwriting it gives: the backward ignores grad_req 'add'",
    "stale_buffer": "buffer = its initial content + the calls' gradients: the backward adds into a 'write' buffer",
    "kept_gradient": "buffer = what a gradient kept between calls gives: the op's own state is never reset",
}


def _buffer_fit(actual, expected, context):
    """The repeated-backward probe found which buffer bug the buffer fits (``context["buffer_fit"]``): say so,
    rather than fit the two arrays (their ratio is an artefact of the random buffer)."""
    pattern = (context or {}).get("buffer_fit")
    return Diagnosis(_BUFFER_FITS[pattern], pattern) if pattern in _BUFFER_FITS else None


_buffer_fit.uses_context = True  # type: ignore[attr-defined]


def _stale_buffer(actual, expected, context):
    """A backward that ignores its grad_req. 'write' (``context["initial_buffer"]``): actual = what the buffer
    held before + expected, it added where it should write. 'add' (``context["added_to_buffer"]``, actual being
    buffer - initial): actual = expected - what the buffer held, it wrote where it should add."""
    context = context or {}
    for key, sign in (("initial_buffer", 1.0), ("added_to_buffer", -1.0)):
        initial = context.get(key)
        if initial is None:
            continue
        initial = np.broadcast_to(np.asarray(initial, np.float64), actual.shape)
        error = float(np.max(np.abs(actual - expected), initial=0.0))
        # the buffer explains (almost) the whole error on every element, not just on average: a wrong element
        # that the small dirty buffer happens to shift a little is not a stale buffer
        left = float(np.max(np.abs(actual - sign * initial - expected), initial=0.0))
        if not np.any(initial) or error == 0.0 or left > FIT_RTOL * error:
            continue
        if sign > 0:
            return Diagnosis(
                "actual = the buffer's initial content + expected: the backward reads a stale buffer: it adds "
                "into a gradient buffer it should overwrite (grad_req 'write': MXNet does not zero the buffer "
                "first; self.assign(in_grad[i], req[i], ...) writes)",
                "stale_buffer",
            )
        return Diagnosis(
            "actual = expected - the buffer's initial content: the backward overwrites a gradient buffer it "
            "should add to (grad_req 'add' keeps what the buffer held; self.assign(in_grad[i], req[i], ...) "
            "adds)",
            "overwritten_buffer",
        )
    return None


_stale_buffer.uses_context = True  # type: ignore[attr-defined]


def _close(a, b) -> bool:
    """``a`` equals ``b`` up to FIT_RTOL of ``b``'s norm (and b is not zero)."""
    nb = float(np.linalg.norm(b))
    return nb > 0 and float(np.linalg.norm(a - b)) <= FIT_RTOL * nb


def _transposed(actual, expected):
    """actual = expected with two axes swapped (a missing or extra ``.T``), possibly reshaped to fit."""
    if actual.ndim < 2 or actual.size < 4 or _close(actual, expected):
        return None
    if actual.ndim == 2:
        t = expected.T
        if actual.shape == t.shape and _close(actual, t):
            return Diagnosis(
                "actual = expected transposed: the rule swaps the axes (a missing or extra .T)",
                "transposed",
                axes=(0, 1),
            )
        if _close(actual, t.reshape(actual.shape)):
            return Diagnosis(
                "actual = expected transposed, then reshaped to fit: the rule computes the transposed "
                "gradient (e.g. x.T @ g instead of g.T @ x) and reshapes it",
                "transposed",
                axes=(0, 1),
                reshaped=True,
            )
        return None
    n = actual.ndim
    for i in range(n):
        for j in range(i + 1, n):
            t = np.swapaxes(expected, i, j)
            if t.shape == actual.shape and _close(actual, t):
                return Diagnosis(
                    f"actual = expected with axes {i} and {j} swapped: the rule transposes the wrong "
                    "axes (a missing or extra transpose/swapaxes)",
                    "transposed",
                    axes=(i, j),
                )
    return None


def _sign_partly_flipped(actual, expected):
    scale = float(np.abs(expected).max())
    if scale == 0:
        return None
    mag = np.abs(expected)
    flipped = (np.abs(actual + expected) <= FIT_RTOL * mag) & (mag > 1e-3 * scale)
    same = np.abs(actual - expected) <= FIT_RTOL * mag + 1e-6 * scale
    if flipped.any() and not flipped.all() and (flipped | same).all():
        return Diagnosis(
            f"actual = expected but with the sign flipped in {int(flipped.sum())} of {flipped.size} elements "
            f"({100 * flipped.mean():.3g}%): the rule is wrong on one side of a kink (abs, relu, sign, max)",
            "partial_sign",
            indices=[tuple(int(i) for i in ix) for ix in np.argwhere(flipped)[:CONFINED_MAX]],
        )
    return None


def _swapped(actual, expected, context):
    """actual = the expected gradient of another argument: the rule's gradients of two inputs are exchanged."""
    for name, other in (context or {}).get("other_expected", ()):
        other = np.asarray(other, np.float64)
        if other.shape == actual.shape and np.any(other) and _close(actual, other) and not _close(expected, other):
            return Diagnosis(
                f"actual = the expected gradient of {name!r}: the gradients of two arguments are "
                f"swapped (d/da returned for b and d/db for a)",
                "swapped",
                other=name,
            )
    return None


_swapped.uses_context = True  # type: ignore[attr-defined]


def _at_output(actual, expected, context):
    """actual = the gradient the rule gives with the output in place of the input: f'(f(x)) for f'(x)."""
    found = (context or {}).get("at_output")
    if found is None:
        return None
    out_name, at = found
    at = np.asarray(at, np.float64)
    if at.shape != actual.shape or not np.any(at) or not _close(actual, at) or _close(expected, at):
        return None
    # a piecewise-constant derivative (hardsigmoid's 1/6 or 0) can match at the output by coincidence of
    # pieces: only a ratio f'(y) / f'(x) that varies over the mismatching elements is evidence
    bad = _mismatch(actual, expected, context)
    if int(bad.sum()) < 2 or not np.all(expected[bad] != 0):
        return None
    ratio = at[bad] / expected[bad]
    if float(np.ptp(ratio)) <= FIT_RTOL * float(np.max(np.abs(ratio))):
        return None
    return Diagnosis(
        f"actual = the derivative evaluated at the output {out_name!r} instead of the input (f'(y) "
        "for f'(x), y = f(x)): the rule reads out_data where it should read in_data",
        "at_output",
        output=out_name,
    )


_at_output.uses_context = True  # type: ignore[attr-defined]


#: ``_region``: the chance that the mismatches are the lowest (or highest) values by accident must be below this
REGION_CHANCE = 0.01


def _repeated_indices(actual, expected, context):
    """The mismatching rows (along some axis) are rows an index input selects, and the rows it selects once
    agree. Where the expected gradient of those rows is zero, the forward ignores them (a padding row, an
    ignored label) and they still receive gradient; otherwise they are exactly the rows selected more than once:
    a gather / embedding / take whose backward overwrote the gradients of repeated indices instead of adding
    them (a scatter with ``=`` where ``+=`` was due)."""
    bad = _mismatch(actual, expected, context)
    if not bad.any() or actual.ndim == 0:
        return None
    for label, idx in (context or {}).get("indices", ()):
        values, counts = np.unique(idx, return_counts=True)
        for axis in range(actual.ndim):
            found = _selected_rows(actual, expected, bad, axis, values, counts, label)
            if found is not None:
                return found
    return None


def _selected_rows(actual, expected, bad, axis, values, counts, label):
    n = actual.shape[axis]
    inside = (values >= 0) & (values < n)
    selected, once = set(values[inside].tolist()), set(values[inside & (counts == 1)].tolist())
    per_row = lambda a: np.moveaxis(a, axis, 0).reshape(n, -1)
    rows = np.flatnonzero(np.any(per_row(bad), axis=1))
    if not rows.size or not set(rows.tolist()) <= selected:
        return None
    where = _rows_text(rows, axis)
    if not np.any(per_row(expected)[rows]):
        return Diagnosis(
            f"the {where}, which {label!r} selects but the forward ignores (the expected "
            "gradient there is 0), receive gradient -- a padding index or an ignored label that still gets (or "
            "sends) gradient",
            "ignored_index",
            index=label,
            axis=axis,
        )
    if set(rows.tolist()) & once:
        return None
    return Diagnosis(
        f"error confined to the {where}: exactly rows that {label!r} selects more than "
        "once (the rows it selects once agree) -- repeated indices whose gradients were overwritten instead of "
        "added (a scatter with = where += is due)",
        "repeated_indices",
        index=label,
        axis=axis,
    )


_repeated_indices.uses_context = True  # type: ignore[attr-defined]


def _ignored_rows(actual, expected, context):
    """With an index input in the graph: rows (along the first axis) whose expected gradient is exactly zero -- the
    forward does not read them: an ignored label's row of logits, a padding position -- receive gradient. Other
    rows may be off too (an ignored row counted in a normaliser scales the rest)."""
    if not (context or {}).get("indices") or actual.ndim < 2 or actual.shape[0] < 2:
        return None
    rows_e = np.abs(expected.reshape(actual.shape[0], -1)).max(axis=1)
    rows_a = np.abs(actual.reshape(actual.shape[0], -1)).max(axis=1)
    ignored = np.flatnonzero((rows_e == 0) & (rows_a > 0))
    if not ignored.size or ignored.size == actual.shape[0]:
        return None
    shown = ", ".join(str(int(r)) for r in ignored[:6]) + (", ..." if ignored.size > 6 else "")
    return Diagnosis(
        f"the rows {shown} receive gradient although the forward does not depend on them (expected 0 "
        "there): rows of an ignored label or a padding position that still get gradient -- an "
        "ignore_index / padding value the backward does not honour",
        "ignored_index",
        rows=len(ignored),
    )


_ignored_rows.uses_context = True  # type: ignore[attr-defined]


def _inverted_mask(actual, expected):
    """actual is nonzero exactly where expected is zero and zero where it is not: the gradient went through the
    complement of the right mask (a where/select whose backward reads the condition the wrong way round)."""
    on_a, on_e = actual != 0, expected != 0
    if actual.size < 2 or not on_a.any() or not on_e.any() or not np.array_equal(on_a, ~on_e):
        return None
    return Diagnosis(
        f"actual is nonzero at exactly the {int(on_a.sum())} elements where expected is zero, and zero "
        "where it is not: the mask is inverted -- the branches of a condition swapped (the gradient "
        "sent to the branch not taken)",
        "inverted_mask",
    )


def _region(actual, expected, context):
    """The mismatches are exactly the elements whose input value lies beyond a threshold (every element on the
    other side agrees): a formula wrong in one branch (hardsigmoid below -3, a clip or threshold region)."""
    context = context or {}
    values, bad = context.get("values"), _mismatch(actual, expected, context)
    if values is None or np.shape(values) != actual.shape:
        return None
    x = np.asarray(values, np.float64).ravel()
    bad = bad.ravel()
    k, n = int(bad.sum()), bad.size
    if k < 2 or n - k < 2 or 2.0 / math.comb(n, k) >= REGION_CHANCE:
        return None
    lo_bad, hi_bad, lo_good, hi_good = x[bad].min(), x[bad].max(), x[~bad].min(), x[~bad].max()
    if hi_bad < lo_good:
        where, edge = f"below {_nice(float((hi_bad + lo_good) / 2))}", f"x >= {_nice(float(lo_good))}"
    elif lo_bad > hi_good:
        where, edge = f"above {_nice(float((lo_bad + hi_good) / 2))}", f"x <= {_nice(float(hi_good))}"
    else:
        return None
    name = context.get("arg_name") or "x"
    return Diagnosis(
        f"error confined to the {k} of {n} elements whose {name!r} value lies {where} (from "
        f"{_nice(float(lo_bad))} to {_nice(float(hi_bad))}); every element with {edge} agrees: the rule "
        "is wrong in one region of its input (a branch, a threshold or a clip)",
        "region",
        bounds=(float(lo_bad), float(hi_bad)),
    )


_region.uses_context = True  # type: ignore[attr-defined]


def _head_ignored(actual, expected, context):
    """The backward does not scale with its head gradient: doubling out_grad leaves the gradient unchanged."""
    doubled = (context or {}).get("head_doubled")
    if doubled is None or not np.any(actual) or np.shape(doubled) != actual.shape:
        return None
    if not _close(np.asarray(doubled, np.float64), actual) or _close(actual, expected):
        return None
    return Diagnosis(
        "the backward ignores the head gradient: twice the head gradient gives the same gradient "
        "(it returns the derivative for a head gradient of ones, or a constant; multiply by "
        "out_grad)",
        "head_ignored",
    )


_head_ignored.uses_context = True  # type: ignore[attr-defined]


def _returned_array(actual, expected, context):
    """actual is one of the op's inputs or outputs (or the head gradient) as it is: the wrong array returned."""
    for label, array in (context or {}).get("arrays", ()):
        array = np.asarray(array, np.float64)
        if array.shape != actual.shape or not np.any(array) or not _close(actual, array) or _close(expected, array):
            continue
        # the claim needs the array to be wrong almost everywhere: a leaky ReLU whose rule reads the output's
        # sign returns the head gradient where x > 0 rightly -- that is a wrong region, not a wrong array
        differs = np.abs(array - expected) > FIT_RTOL * np.maximum(np.abs(expected), np.abs(array))
        if np.mean(differs) > 0.6:
            return Diagnosis(
                f"actual = {label} itself: the backward returns the wrong array (an input, an output "
                "or the head gradient passed through instead of the gradient)",
                "returned_array",
                array=label,
            )
    return None


_returned_array.uses_context = True  # type: ignore[attr-defined]


def _broadcast_reduction(actual, expected, context):
    """actual = the contribution of one output slice alone: g[0] instead of g.sum(0).

    A wrong reduction changes every element it sums; a mismatch confined to a few elements of a large array
    (one element of a zero gradient) is named by ``_confined`` instead, even if one slice's term matches."""
    if _confined(actual, expected, context):
        return None
    for label, term, n_terms in context.get("slice_terms", ()):
        term = np.asarray(term, np.float64)
        if term.shape != actual.shape or _close(term, expected) or not np.any(term):
            continue
        if _close(actual, term):
            return Diagnosis(
                f"actual = only the {label} term (1 of {n_terms} terms of the sum): one slice of the head "
                "gradient was used (g[0]) where a broadcast argument's gradient must be summed over the broadcast "
                "axis (g.sum(0)) -- wrong broadcast reduction",
                "broadcast",
                slice=label,
                n_terms=int(n_terms),
                reduction="one slice",
            )
    return None


_broadcast_reduction.uses_context = True  # type: ignore[attr-defined]


def _mismatch(actual, expected, context):
    mask = (context or {}).get("mismatch")
    if mask is not None and np.shape(mask) == actual.shape:
        return np.asarray(mask, bool)
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    return np.abs(actual - expected) > FIT_RTOL * np.abs(expected) + 1e-6 * scale


def _confined(actual, expected, context):
    """Only a few elements are wrong; the rest agree."""
    bad = _mismatch(actual, expected, context)
    n, m = int(bad.sum()), bad.size
    if n == 0 or m < CONFINED_MIN_SIZE or n > CONFINED_MAX or n > CONFINED_SHARE * m:
        return None
    idx = [tuple(int(i) for i in ix) for ix in np.argwhere(bad)]
    shown = ", ".join(f"({_fmt_index(ix)}{',' if len(ix) == 1 else ''})" for ix in idx[:8])
    more = f" and {n - 8} more" if n > 8 else ""
    off = [
        f"{100 * abs(actual[ix] - expected[ix]) / abs(expected[ix]):.3g}%"
        if expected[ix] != 0
        else f"{actual[ix]:.3g} where expected is 0"
        for ix in idx[:8]
    ]
    return Diagnosis(
        f"error confined to {n} of {m} elements: indices {shown}{more} (off by {', '.join(off)}); every other element "
        "agrees: an element-specific mistake (an edge case, a boundary or padding element, a special or tied "
        "value, an indexing error), not a wrong formula",
        "confined",
        indices=idx,
        n_wrong=n,
        size=m,
    )


_confined.uses_context = True  # type: ignore[attr-defined]


def _small_relative(actual, expected, context):
    """A small relative error (~0.1% to 2%) on (nearly) every element, not a constant factor."""
    scale = float(np.abs(expected).max())
    if scale == 0 or actual.size < 2:
        return None
    sig = np.abs(expected) > 1e-3 * scale
    if sig.sum() < 2:
        return None
    rel = np.abs(actual[sig] - expected[sig]) / np.abs(expected[sig])
    med = float(np.median(rel))
    lo, hi = np.quantile(rel, [0.1, 0.9])
    if not (1e-3 <= med <= FIT_RTOL) or hi > 2.5 * FIT_RTOL or hi > 20 * max(lo, 1e-12):
        return None
    return Diagnosis(
        f"off by ~{100 * med:.2g}% everywhere ({100 * lo:.2g}% to {100 * hi:.2g}% on 80% of the elements), not by a "
        "constant factor: a slightly wrong constant or an approximation in the rule (a cheaper formula, a series, "
        "float16 arithmetic)",
        "small",
        relative_error=med,
    )


_small_relative.uses_context = True  # type: ignore[attr-defined]


_nonfinite.finite_only = False  # type: ignore[attr-defined]


#: an error within this multiple of the estimated rounding noise is described as rounding, not as a bug
NOISE_EXPLAINS = 4.0


def _rounding(actual, expected, context):
    """Every mismatch within ``NOISE_EXPLAINS`` times the estimated rounding noise (``context["noise"]``:
    ``(noise array, dtype)``): accumulation noise of the dtype under test, not a wrong formula."""
    noise, dtype = (context or {}).get("noise", (None, None))
    if noise is None:
        return None
    bad = _mismatch(actual, expected, context)
    noise = np.broadcast_to(np.asarray(noise, np.float64), actual.shape)
    if not bad.any() or not np.all(noise[bad] > 0):
        return None
    ratio = float(np.max(np.abs(actual - expected)[bad] / noise[bad]))
    if ratio > NOISE_EXPLAINS:
        return None
    what = f"{np.dtype(dtype).name} rounding" if dtype is not None else "rounding"
    return Diagnosis(
        f"every mismatch is within {ratio:.2g} x the estimated {what} noise of actual (the size of what its sums "
        f"accumulate times eps): accumulation noise, not a wrong formula -- loosen atol to the noise "
        f"({float(np.max(noise[bad])):.3g}), or compare in float64",
        "rounding",
        ratio=ratio,
    )


_rounding.uses_context = True  # type: ignore[attr-defined]

# one-slice evidence is exact (it comes from re-running the backward), so it goes before the ratio fit,
# which a 4-element bias gradient can satisfy by chance. The derivative at the output goes before the wrong array:
# where both fit, it says why (an ELU with a negative alpha whose rule reads the output's sign takes the x > 0
# branch everywhere and returns the head gradient itself; measured on the shipped-bug corpus: 60 reports of the
# three "evaluated at the output" bugs said "returns the wrong array")
RULES: list[Rule] = [
    _nonfinite,
    _buffer_fit,
    # before the noise: a non-idempotent op (one that reads its buffer) makes the emulated noise measure the bug
    _stale_buffer,
    _rounding,
    _swapped,
    _inverted_mask,
    _at_output,
    _returned_array,
    _head_ignored,
    _broadcast_reduction,
    _repeated_indices,
    _ignored_rows,
    _scaled,
    _accumulated_drifting,
    _offset,
    _transposed,
    _region,
    _sign_partly_flipped,
    _confined,
    _small_relative,
]


def register_rule(rule: Rule, first: bool = False) -> Rule:
    """Add a diagnosis rule (at the end, or tried first). Returns it, so it works as a decorator.

    A rule only sees arrays without NaN/Inf unless it sets ``rule.finite_only = False``; it gets the
    checker's context dict as a third argument when it sets ``rule.uses_context = True``.
    """
    if first:
        RULES.insert(0, rule)
    else:
        RULES.append(rule)
    return rule


def _rename(diag, names) -> Diagnosis:
    if not isinstance(diag, Diagnosis):
        diag = Diagnosis(str(diag), "custom")
    if tuple(names) != ("actual", "expected"):
        text = re.sub(r"\b(actual|expected)\b", lambda m: names[m.group(1) == "expected"], str(diag))
        diag = diag.with_text(text)
    return diag


def _run_rules(a, e, context) -> Diagnosis | None:
    finite = bool(np.isfinite(a).all() and np.isfinite(e).all())
    for rule in RULES:
        if not finite and getattr(rule, "finite_only", True):
            continue
        msg = rule(a, e, context) if getattr(rule, "uses_context", False) else rule(a, e)
        if msg:
            return msg if isinstance(msg, Diagnosis) else Diagnosis(str(msg), "custom")
    return None


def _kink_text(kinks, arg) -> str:
    first = kinks[0]
    more = f" and {len(kinks) - 1} more" if len(kinks) > 1 else ""
    return f"{first.describe(arg)}{more}"


def _with_kinks(a, e, context, names):
    """Mismatches at non-differentiable points: named as such, the rest diagnosed as usual."""
    kinks = list(context.get("kinks") or ())
    arg = context.get("arg_name") or "x"
    mask = np.zeros(a.shape, bool)
    for k in kinks:
        mask[k.index] = True
    wrong_kinks = [k for k in kinks if not k.subgradient]
    bad = _mismatch(a, e, context)
    rest = bad & ~mask
    if rest.any():
        ctx = dict(context, mismatch=rest, kinks=())
        other = _run_rules(np.where(mask, 0.0, a), np.where(mask, 0.0, e), ctx)  # kinks neither fit nor break
        note = (
            f"; besides, {len(kinks)} mismatching element{'s' if len(kinks) != 1 else ''} sit at "
            f"non-differentiable points ({_kink_text(kinks, arg)})"
        )
        if other is not None:
            other = _rename(other, names)
            return other.with_text(str(other) + note)
        return Diagnosis(
            f"no simple pattern in the {int(rest.sum())} mismatching elements away from kinks{note}",
            "spread",
            kinks=kinks,
            n_wrong=int(rest.sum()),
            size=int(a.size),
        )
    if wrong_kinks:
        k = wrong_kinks[0]
        return Diagnosis(
            f"{k.describe(arg)}, but the {names[0]} value {k.analytic:.6g} lies outside the one-sided derivatives "
            f"[{min(k.left, k.right):.6g}, {max(k.left, k.right):.6g}]: wrong even allowing for the kink "
            f"({len(wrong_kinks)} of {len(kinks)} such elements)",
            "kink",
            kinks=kinks,
            subgradient=False,
        )
    return Diagnosis(
        f"{_kink_text(kinks, arg)}: the one-sided derivatives differ there, so no finite difference can "
        f"check it -- not a gradient error ({names[0]} lies between them); move the point off the kink",
        "kink",
        kinks=kinks,
        subgradient=True,
    )


def diagnose(
    actual: ArrayLike,
    expected: ArrayLike,
    names: Sequence[str] = ("actual", "expected"),
    *,
    context: Mapping[str, Any] | None = None,
) -> Diagnosis | None:
    """A one-line guess at the bug making ``actual`` differ from ``expected``, or None.

    Rules, in order: non-finite values; a backward ignoring its grad_req (``context["initial_buffer"]``,
    ``context["added_to_buffer"]``); rounding; the
    gradients of two arguments swapped (``context["other_expected"]``); the wrong array returned
    (``context["arrays"]``); the derivative taken at the output (``context["at_output"]``); the head gradient
    ignored (``context["head_doubled"]``); one
    slice instead of the sum over a broadcast axis (needs ``context["slice_terms"]``); ``actual = k x
    expected`` (k = 0 missing, -1 sign, 2 counted twice, n accumulated n times, 1/n over-normalised or averaged
    over a broadcast axis, k ~ 1 off by ~1%, other k scaled); ~n x expected with a drifting ratio (accumulated
    while parameters moved); a constant offset; transposed axes; the error confined to a range of the input's
    values (``context["values"]``); sign flipped on part of the elements; error
    confined to a few elements; a small relative error everywhere. Mismatches at kinks (``context["kinks"]``)
    are named as non-differentiable points. Arrays of different shapes are not diagnosed. ``names`` replace the
    words "actual" and "expected" in the text (``("analytic", "numeric")`` for a numeric check).
    """
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape or a.size == 0:
        return None
    context = dict(context or {})
    if context.get("kinks"):
        return _with_kinks(a, e, context, names)
    msg = _run_rules(a, e, context)
    return None if msg is None else _rename(msg, names)


def analyze(
    actual: ArrayLike,
    expected: ArrayLike,
    names: Sequence[str] = ("actual", "expected"),
    *,
    context: Mapping[str, Any] | None = None,
) -> Diagnosis | None:
    """``diagnose``, and when no rule fits an error spread over many elements, a "no simple pattern" line.

    That line (pattern ``"spread"``) gives the share of wrong elements and the range of the ratio
    ``actual / expected``: a missing or wrong term (the product rule's second term, a chain-rule factor)
    looks like this.
    """
    diag = diagnose(actual, expected, names, context=context)
    if diag is not None:
        return diag
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    if a.shape != e.shape or a.size == 0 or not (np.isfinite(a).all() and np.isfinite(e).all()):
        return None
    bad = _mismatch(a, e, context)
    n, m = int(bad.sum()), bad.size
    if n == 0 or n < SPREAD_SHARE * m:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = a[bad] / e[bad]
    ratio = ratio[np.isfinite(ratio)]
    rng = f"; the ratio {names[0]}/{names[1]} {_ratio_span(ratio.min(), ratio.max())}" if ratio.size else ""
    text = (
        f"no simple pattern: the error is spread over {n} of {m} elements ({100 * n / m:.3g}%) with no constant "
        f"ratio, offset, transposition or slice{rng} -- typical of a missing or wrong term (the product rule's "
        "second term, a chain-rule factor) rather than a wrong constant"
    )
    return Diagnosis(text, "spread", n_wrong=n, size=m)
