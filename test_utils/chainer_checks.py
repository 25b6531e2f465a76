"""Chainer's gradient checks on symgrad graphs: ``check_backward``, ``check_double_backward``,
``numerical_grad`` and ``NondifferentiableError``.

Names, signatures and semantics are those of ``chainer.gradient_check`` (v7). ``func`` receives one
input Variable per array of ``x_data`` (named ``x0``, ``x1``, ...) and returns a Symbol or a tuple of
Symbols; the ops it builds may create their own arguments (``FullyConnected`` weights), whose values
come in ``params`` (a dict name -> array) and whose gradients are checked too.

Method of ``check_backward``: one forward + backward with ``y_grad`` in the dtype under test gives the
analytic gradients; one random direction ``r`` over every checked input and parameter (random signs,
magnitudes uniform in [0.5, 1.5), normalised to ``|r| = 1``) reduces the check to one number:
``backward . r`` against the derivative of ``delta -> sum(y_grad * func(x + delta r))`` at 0, by central
differences of half-width ``eps`` (4 samples and one Richardson step with ``detect_nondifferentiable``).
Cost: 1 forward + 1 backward, then 2 (or 4) forwards of the reference graph, plus the noise estimates (8
forwards of the reference; 7 float64 forward and backward passes for float16/float32 gradients, 1 for float64).

Differences from Chainer (all on the side of trustworthy numbers):

- the finite differences run on a float64 copy of the graph and of its inputs (``float64_reference=True``,
  keyword-only), so float32 and float16 gradients are checked against an accurate reference at
  Chainer's default tolerances; ``dtype`` still picks the reference dtype explicitly, as in Chainer;
- the criterion is ``|backward - numeric| <= atol + rtol * |numeric| + noise`` (Chainer scales rtol by
  ``|backward|``), ``noise`` being the estimated rounding noise of the reference and of the backward in
  its dtype (``tolerance``);
- a kink (relu/abs at 0, max ties) is not a failure with ``detect_nondifferentiable=False`` (Chainer
  fails there): when the directional check fails, each input of at most 5 000 elements is compared
  element by element; if every mismatching element sits at a kink and the backward gives a value between
  its one-sided derivatives, those elements are moved a few steps off the kink and the check runs again
  (after ``MAX_REDRAWS`` rounds they leave the direction), with a ``NondifferentiablePointWarning`` that
  names them -- as ``check_numeric_gradient`` does;
- a failure reports the contribution of every input and, for inputs of at most 5 000 elements, the
  per-element comparison with the worst elements and a diagnosis (scaled, doubled, sign flipped, missing,
  transposed, rounding, ...), as child reports;
- ``NondifferentiableError`` names the input element at the kink when it can be found, by the one kink
  test of ``differencer`` (one-sided derivatives at two step sizes).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

import symgrad as sg
from symgrad.context import array_context

from ._inputs import check_callable, check_dtype, check_flag, check_number
from .compare import compare
from .differencer import DirectionProbe, ElementProbe, KinkTest, derivative, sweep
from .frames import hide_from_pytest as _hide_from_pytest
from .funcgraph import (
    MAX_LOCALISE,
    FuncGraph,
    OnlyKinks,
    Reference,
    as_tuple,
    only_kinks,
    param_dict,
    symbols_of,
    variable_in,
)
from .harness import analytic_noise
from .numeric import KinkRedraws, check_step, relative_step
from .report import GradientCheckError, NondifferentiableError, NondifferentiablePointWarning, Report, format_index
from .seed import seeded_check
from .ties import off_ties, retaking
from .tolerance import NOISE_FACTOR

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, DTypeLike

    from symgrad.symbol import Symbol

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

__all__ = ["check_backward", "check_double_backward", "numerical_grad", "NondifferentiableError"]

# == finite differences ================================================================================


def _as_outputs(ys):
    if ys is None or isinstance(ys, (list, tuple)):
        return list(ys or ())
    return [ys]


def _noise_floor(y):
    """Rounding noise of an output sampled in its own dtype: NOISE_FACTOR * eps * |y|."""
    dt = np.dtype(getattr(y, "dtype", np.float64))
    eps = float(np.finfo(dt).eps) if dt.kind == "f" else float(np.finfo(np.float64).eps)
    return NOISE_FACTOR * eps * np.abs(np.asarray(y, np.float64))


def _kink_in(deltas, samples, center, raw_center, diff_atol, diff_rtol):
    """``(output, element, KinkTest)`` of the first output element whose one-sided derivatives differ (the one
    kink test of ``differencer``), or None. The least jump that counts is ``(diff_atol + diff_rtol * (ymax -
    ymin)) / s`` (Chainer's fit tolerance, per unit step) plus the outputs' rounding noise."""
    s = deltas[2]
    for k in range(len(center)):
        if center[k] is None:
            continue
        ys = np.stack([np.ravel(smp[k]) for smp in samples] + [np.ravel(center[k])])
        spread = np.nan_to_num(ys.max(axis=0) - ys.min(axis=0))
        floor = (diff_atol + diff_rtol * spread) / s
        noise = 2.0 * np.ravel(_noise_floor(raw_center[k])) / s
        test = KinkTest(deltas, [np.ravel(smp[k]) for smp in samples], np.ravel(center[k]), noise, floor)
        hit = test.kink & ((spread > 0) | test.nonfinite)
        if hit.any():
            return k, int(np.flatnonzero(hit)[0]), test
    return None


def _kink_error(
    found, *, arg_name, index, value, eps, deltas, samples, center, out_shapes, out_names, lead=None, extra=()
):
    k, e, test = found
    elem = tuple(int(i) for i in np.unravel_index(e, out_shapes[k])) if out_shapes[k] else ()
    offsets = [deltas[0], deltas[1], 0.0, deltas[2], deltas[3]]
    values = [
        float(np.ravel(samples[0][k])[e]),
        float(np.ravel(samples[1][k])[e]),
        float(np.ravel(center[k])[e]),
        float(np.ravel(samples[2][k])[e]),
        float(np.ravel(samples[3][k])[e]),
    ]
    where = f"{arg_name}[{format_index(index)}]" if index is not None else arg_name
    head = lead or (f"non-differentiable point at {where}" + (f" (value {value:.8g})" if value is not None else ""))
    lines = [
        head + ": the one-sided derivatives differ, so finite differences and backward need not agree "
        "there (a kink, not a gradient bug); move the input away from it"
    ]
    oname = out_names[k] if out_names else f"output {k}"
    nonfinite = bool(test.nonfinite[e])
    left, right, jump = float(test.left[e]), float(test.right[e]), float(test.jump[e])
    if nonfinite:
        lines.append(f"  {oname}{list(elem)} changes between finite and non-finite values around the point")
    else:
        lines.append(
            f"  {oname}{list(elem)}: left derivative {left:.6g}, right derivative {right:.6g}; the jump "
            f"{abs(jump):.3g} > {float(np.ravel(test.threshold)[e]):.3g} and does not shrink with the step"
        )
    lines.append(f"  samples (offset -> value), half-width {eps:g}:")
    lines += [f"    {d:+.6g} -> {v:.10g}" for d, v in zip(offsets, values)]
    lines += list(extra)
    return NondifferentiableError(
        "\n".join(lines),
        arg_name=arg_name,
        index=index,
        value=value,
        output_index=k,
        output_element=elem,
        eps=eps,
        offsets=tuple(offsets),
        samples=tuple(values),
        left=left,
        right=right,
        residual=abs(jump),
        threshold=float(np.ravel(test.threshold)[e]),
        nonfinite=nonfinite,
    )


def _numerical(
    evaluate,
    probes,
    steps,
    grad_outputs,
    *,
    detect=False,
    diff_atol=0.0,
    diff_rtol=1e-2,
    center=None,
    out_names=None,
    lead=None,
):
    """Numeric derivatives of ``sum(grad_outputs * outputs)`` for each probe (one differencer sweep).

    ``evaluate()`` returns the outputs with the probe applied. With ``detect`` the outputs are sampled at
    ``+-h/2, +-h`` (Chainer's layout) and a kink raises ``NondifferentiableError``. Returns ``[(probe,
    derivative, width)]``.
    """
    gys = [None if g is None else np.asarray(to_host(g), np.float64) for g in grad_outputs]
    raw_center = center
    center64 = None if center is None else [None if y is None else np.asarray(y, np.float64) for y in center]
    rule = "kink2" if detect else "central"
    out = []
    for probe, deltas, samples in sweep(probes, (h / 2.0 if detect else h for h in steps), evaluate, rule):
        if len(samples[0]) != len(gys):
            raise ValueError(f"numerical_grad: f returned {len(samples[0])} outputs for {len(gys)} grad_outputs")
        if detect:
            found = _kink_in(deltas, samples, center64, raw_center, diff_atol, diff_rtol)
            if found is not None:
                label, index = probe.name, probe.index
                value = None if index is None else probe.x
                raise _kink_error(
                    found,
                    arg_name=label,
                    index=index,
                    value=value,
                    eps=2.0 * deltas[2],
                    deltas=deltas,
                    samples=samples,
                    center=center64,
                    lead=lead,
                    out_names=out_names,
                    out_shapes=[np.shape(y) if y is not None else () for y in center64],
                )
        ds, width = derivative("kink2" if detect else "central", deltas, samples, probe.label)
        total = sum(float(np.sum(d * gy)) for d, gy in zip(ds, gys) if d is not None and gy is not None)
        out.append((probe, total, width))
    return out


def to_host(v):
    from .context import to_numpy

    return v if np.isscalar(v) else to_numpy(v)


def numerical_grad(
    f: Callable[[], object],
    inputs: Sequence[np.ndarray],
    grad_outputs: ArrayLike | Sequence[ArrayLike | None] | None,
    eps: float = 1e-3,
    detect_nondifferentiable: bool = False,
    diff_atol: float = 0,
    diff_rtol: float = 1e-2,
    center_outputs: ArrayLike | Sequence[ArrayLike | None] | None = None,
) -> tuple[np.ndarray, ...]:
    """Numeric gradient of ``sum(grad_outputs * f())`` w.r.t. ``inputs`` (Chainer's ``numerical_grad``).

    ``f`` takes no arguments and returns the outputs (an array or a tuple of arrays; None entries are
    skipped); every element of every array in ``inputs`` is changed in place to ``x +- eps`` (and
    restored).

    Method:
        Central differences per element, in the inputs' own dtype (``f`` computes there); the quotient
        divides by the distance between the two values actually stored, and sums in float64.

    Cost:
        2 calls of ``f`` per element, 4 with ``detect_nondifferentiable`` (plus one at ``inputs`` unless
        ``center_outputs`` is given).

    Tolerance:
        None: the gradient is returned, not judged. ``detect_nondifferentiable`` judges kinks: a jump
        between the one-sided derivatives larger than its rounding noise and than ``(diff_atol + diff_rtol *
        (ymax - ymin)) / eps``.

    Args:
        f: callable with no arguments returning the outputs.
        inputs: tuple of float arrays (numpy or CuPy) read by ``f``.
        grad_outputs: tuple of arrays, scalars or None, one per output.
        eps: half-width of the central differences.
        detect_nondifferentiable: sample 5 points (``x + {-1, -1/2, 0, 1/2, 1} * eps``), raise
            ``NondifferentiableError`` where the one-sided derivatives at ``eps/2`` and ``eps`` differ (the one
            kink test of ``differencer``) or the outputs change finiteness; the derivative then takes one
            Richardson step (error O(eps^4)).
        diff_atol, diff_rtol: the least jump that counts as a kink, ``diff_atol + diff_rtol * (ymax - ymin)``
            per unit step (Chainer's fit tolerance); rounding noise of the outputs' dtype is added (a
            difference at the rounding level is not a kink).
        center_outputs: outputs of ``f`` at ``inputs`` (saves a call with ``detect_nondifferentiable``).

    Returns:
        A tuple of gradients, one per input, in the input's dtype.

    >>> import numpy as np
    >>> x = np.array([1.0, 2.0])
    >>> gx, = numerical_grad(lambda: (x ** 3,), (x,), (np.ones(2),))
    >>> np.round(gx, 4)  # central differences: error eps^2 = 1e-6
    array([ 3., 12.])
    """
    who = "numerical_grad"
    check_callable(f, who, "f", "a function of no arguments returning the outputs")
    if not isinstance(inputs, (tuple, list)):
        raise TypeError(f"{who}: inputs must be a tuple of arrays, got {type(inputs).__name__}")
    inputs = tuple(inputs)
    for i, x in enumerate(inputs):
        if array_context(x) is None:
            raise TypeError(f"numerical_grad: inputs[{i}] must be a numpy or CuPy array, got {type(x).__name__}")
        if np.dtype(x.dtype).kind != "f":
            raise TypeError(f"numerical_grad: inputs[{i}] has dtype {x.dtype}; the inputs must be float arrays")
        if isinstance(x, np.ndarray) and not x.flags.writeable:
            raise ValueError(
                f"{who}: inputs[{i}] is read-only; numerical_grad changes each element in place (and "
                "restores it), so give a writeable array"
            )
    eps = check_number(eps, who, "eps", positive=True)
    detect_nondifferentiable = check_flag(detect_nondifferentiable, who, "detect_nondifferentiable")
    diff_atol, diff_rtol = check_number(diff_atol, who, "diff_atol"), check_number(diff_rtol, who, "diff_rtol")
    grad_outputs = _as_outputs(grad_outputs)
    evaluate = lambda: _as_outputs(f())
    center = None
    if detect_nondifferentiable:
        raw = _as_outputs(center_outputs) if center_outputs is not None else evaluate()
        center = [None if y is None else np.array(to_host(y), copy=True) for y in raw]
    grads = []
    for i, x in enumerate(inputs):
        g = np.zeros(np.shape(x), np.float64)
        probes = [ElementProbe(x, idx, f"inputs[{i}]") for idx in np.ndindex(*np.shape(x))]
        for probe, d, _ in _numerical(
            evaluate,
            probes,
            [eps] * len(probes),
            grad_outputs,
            detect=bool(detect_nondifferentiable),
            diff_atol=float(diff_atol),
            diff_rtol=float(diff_rtol),
            center=center,
        ):
            g[probe.index] = d
        grads.append(g.astype(x.dtype))
    return tuple(grads)


# == check_backward ====================================================================================


def _direction(shapes):
    """Random direction over several arrays: random signs, magnitudes uniform in [0.5, 1.5), |r| = 1.

    Entries are kept away from zero (Chainer draws standard normals) so that no element's gradient
    is weighted into invisibility. Uses numpy's global RNG (``with_seed`` reproduces it).
    """
    parts = []
    for s in shapes:
        mag = np.random.uniform(0.5, 1.5, size=s)
        sign = np.where(np.random.random_sample(size=s) < 0.5, -1.0, 1.0)
        parts.append(np.asarray(mag * sign, np.float64))
    norm = float(np.sqrt(sum(float(np.sum(p * p)) for p in parts)))
    return [p / norm for p in parts] if norm > 0 else parts


@seeded_check
def check_backward(
    func: Callable[..., Symbol | Sequence[Symbol]],
    x_data: np.ndarray | Sequence[np.ndarray],
    y_grad: ArrayLike | Sequence[ArrayLike | None] | None,
    params: Mapping[str, ArrayLike] | tuple[()] | None = (),
    eps: float = 1e-3,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    no_grads: Sequence[bool] | None = None,
    dtype: DTypeLike | None = None,
    detect_nondifferentiable: bool = False,
    *,
    float64_reference: bool = True,
    progress: bool = True,
    probes: bool | None = None,
) -> None:
    """Test the backward of ``func`` along a random direction (Chainer's ``check_backward``).

    Method:
        One forward + backward with ``y_grad`` in the dtype under test gives the analytic gradients. One random
        direction ``r`` over every checked input and parameter (random signs, magnitudes uniform in
        [0.5, 1.5), normalised to ``|r| = 1``, from numpy's global RNG) reduces the check to one number:
        ``backward . r`` against the derivative of ``delta -> sum(y_grad * func(x + delta r))`` at 0, by
        central differences of half-width ``eps`` on a float64 copy of the graph and its inputs
        (``float64_reference``). ``detect_nondifferentiable`` samples ``+-eps/2`` and ``+-eps`` instead,
        raises ``NondifferentiableError`` where the one-sided derivatives differ (naming the input element
        when it can be found), and takes one Richardson step. A failure is looked at again before it is
        reported: with the reference evaluated on the forward's own pieces (ReLU masks, pooling windows), with
        shorter steps (``eps/4``, ``eps/16``, ... until the difference settles: a long ``eps`` next to a steep
        point), and element by element for inputs of at most 5 000 elements, where mismatches at kinks whose
        one-sided derivatives bracket the backward are moved off the kink (then left out of ``r``) with a
        ``NondifferentiablePointWarning``, as ``check_numeric_gradient`` does. A pass is taken again at
        ``eps/2``, where the truncation is a quarter: a wrong backward that the truncation at ``eps`` met fails.

    Cost:
        Independent of the input sizes when the check passes: one forward and one backward in the dtype
        under test; a float64 bind, 4 forwards along ``r`` (at ``eps`` and ``eps/2``; 4 with
        ``detect_nondifferentiable``) and the noise estimates (8 float64 forwards; 7 float64 forward and
        backward passes for float16/float32 gradients, 1 for float64). A failure adds 2 partial forwards per
        element of each failing input of at most 5 000 elements (6 more per mismatching element for the kink
        test) and 2 forwards per shorter step. Graphs with ``Custom`` nodes add the buffer probe and the special
        points.

    Tolerance:
        ``|backward . r - numeric| <= atol + rtol * |numeric| + noise`` on the one projected number (Chainer
        scales ``rtol`` by ``|backward . r|``), with Chainer's defaults ``atol=1e-5``, ``rtol=1e-4``. ``noise``
        is the rounding noise of the reference's difference (the objective's noise divided by the width,
        times 3 with ``detect_nondifferentiable``) plus the analytic side's rounding noise in its dtype
        projected on ``|r|`` (emulated as in ``check_numeric_gradient``); with the float64 reference both are
        far below ``atol`` for a correct gradient, so float32 and float16 gradients pass at Chainer's
        defaults.

    Args:
        func: takes one input Symbol per array of ``x_data`` (Variables ``x0``, ``x1``, ...) and returns
            a Symbol or a tuple of Symbols. Arguments created by its ops take their values from ``params``.
        x_data: an array or a tuple of arrays (numpy or CuPy).
        y_grad: head gradients: an array, a tuple of arrays (None entries: no gradient from that output),
            or None for a loss (outputs of one element get 1, loss heads such as SoftmaxOutput need none).
        params: dict ``name -> array`` with the values of the arguments ``func`` creates (their gradients
            are checked; auxiliary states may be given too, default zeros); ``()`` for none.
        eps: half-width of the central differences along the unit direction.
        atol, rtol: ``|backward . r - numeric| <= atol + rtol * |numeric| + rounding noise``.
        no_grads: one bool per input; True inputs are not checked and their gradient must be absent
            (``symgrad.grad`` gives None). Default: True for integer inputs.
        dtype: float dtype of the numeric reference (x_data, y_grad and params are cast to it); None
            keeps float64 (or the inputs' dtypes with ``float64_reference=False``).
        detect_nondifferentiable: raise ``NondifferentiableError`` at a kink instead of comparing.
        float64_reference: compute the finite differences on float64 copies (default True).
        progress: a tqdm bar when the per-element comparison of a failure runs longer than 2 seconds.
        probes: the special-point probes (``test_utils.probes``): None (default) where the graph has Custom
            nodes, True everywhere, False never.

    Returns:
        None (as Chainer).

    Raises:
        GradientCheckError: the backward disagrees with the numeric derivative, or an input with
            ``no_grads`` True receives a gradient.
        NondifferentiableError: with ``detect_nondifferentiable``, ``func`` has a kink at ``x_data``.
        ValueError / TypeError: bad arguments (shapes, lengths, missing params, complex, non-numeric or
            non-finite inputs, a non-deterministic forward naming the op, an ``eps`` below
            ``numeric.min_step`` of the reference's dtype).

    >>> import numpy as np, symgrad as sg
    >>> x = np.random.uniform(-1, 1, (3, 4)).astype(np.float32)
    >>> check_backward(lambda x: sg.sym.tanh(x), x, np.ones((3, 4), np.float32))
    """
    return _check_backward(
        "check_backward",
        func,
        x_data,
        y_grad,
        params,
        eps,
        atol,
        rtol,
        no_grads,
        dtype,
        detect_nondifferentiable,
        float64_reference,
        progress,
        probes=probes,
    )


def _arrays(values, who, label, why=""):
    """``values`` (an array or a sequence of them) as a tuple; TypeError naming ``label[i]`` for a non-array."""
    xs = as_tuple(values)
    for i, x in enumerate(xs):
        if array_context(x) is None:
            raise TypeError(f"{who}: {label}[{i}] must be a numpy or CuPy array{why}, got {type(x).__name__}")
    return xs


def _validate(who, func, x_data, params, eps, atol, rtol, no_grads, dtype, names, flags=None):
    """Phase 1: the graph of ``func`` at ``x_data`` and the validated options (``flags``: ``{name: value}`` of the
    boolean options, which must be True or False)."""
    check_callable(func, who)
    for label, v in (flags or {}).items():
        check_flag(v, who, label)
    xs = _arrays(x_data, who, "x_data")
    names = list(names) if names is not None else [f"x{i}" for i in range(len(xs))]
    if no_grads is None:
        no_grads = [np.dtype(x.dtype).kind != "f" for x in xs]
    else:
        no_grads = list(no_grads)
        if len(no_grads) != len(xs):
            raise ValueError(f"{who}: length of no_grads and x_data should be the same: {len(no_grads)} != {len(xs)}")
    for n, x, ng in zip(names, xs, no_grads):
        if not ng and np.dtype(x.dtype).kind != "f":
            raise ValueError(
                f"{who}: input {n!r} has dtype {x.dtype} but no_grads is False for it; finite "
                "differences need a float input (integer inputs default to no_grads=True)"
            )
    if dtype is not None:
        dtype = check_dtype(dtype, who)
    for label, v in (("eps", eps), ("atol", atol), ("rtol", rtol)):
        check_number(v, who, label, positive=label == "eps")
    graph = FuncGraph(who, func, list(zip(names, xs)), params)
    return graph, names, no_grads, dtype


def _check_backward(
    who,
    func,
    x_data,
    y_grad,
    params,
    eps,
    atol,
    rtol,
    no_grads,
    dtype,
    detect,
    float64_reference,
    progress=True,
    names=None,
    wrap=None,
    probes=None,
):
    call = dict(locals())  # the arguments as given, for a retake at a point moved off exact ties
    flags = {"detect_nondifferentiable": detect, "float64_reference": float64_reference, "progress": progress}
    graph, names, no_grads, dtype = _validate(who, func, x_data, params, eps, atol, rtol, no_grads, dtype, names, flags)
    eps, rtol, atol = float(eps), float(rtol), float(atol)
    heads = graph.head_grads(y_grad)
    graph.assert_no_gradient([n for n, ng in zip(names, no_grads) if ng])  # no_grads inputs: no gradient flows
    checked = [n for n, ng in zip(names, no_grads) if not ng and n in graph.arg_names] + list(graph.param_names)
    checked = [n for n in checked if np.dtype(graph.values[n].dtype).kind == "f"]
    if not checked:
        return None
    ndtype = dtype if dtype is not None else (np.dtype(np.float64) if float64_reference else None)
    r = dict(zip(checked, _direction([graph.values[n].shape for n in checked])))
    check = _Directional(who, graph, heads, checked, r, ndtype, eps, rtol, atol, detect, progress, wrap)
    check_step(
        eps,
        check.ref.dtype,
        check.ref.dtype,
        who,
        " Use a larger eps, or keep the float64 reference (dtype=None, float64_reference=True).",
    )
    try:
        check.run()
    except GradientCheckError as err:
        moved = off_ties(graph, who, f"the directional check ({err.arg_name!r})")
        if moved is None:
            raise
        xs = tuple(moved[n] if n in moved else x for n, x in zip(names, as_tuple(x_data)))
        given = {**param_dict(params, who), **{k: moved[k] for k in graph.param_names}}
        with retaking():
            return _check_backward(**{**call, "x_data": xs, "params": given})
    graph.probe_buffers(checked, heads, who)
    if probes is not False and not wrap:  # first order only: a second-order graph's points are the first's
        graph.probe_points(probes, checked, heads, who, rtol, atol)
    return None


class _Directional:
    """One directional check (phases 2-5): analytic side, reference, kinks re-drawn, compare and report."""

    def __init__(self, who, graph, heads, checked, r, ndtype, eps, rtol, atol, detect, progress, wrap):
        self.who, self.graph, self.heads, self.checked, self.r = who, graph, heads, checked, r
        self.ndtype, self.eps, self.rtol, self.atol, self.detect = ndtype, eps, rtol, atol, detect
        self.given_eps = eps
        self.progress, self.wrap = progress, wrap
        self.analytic_rounding = 0.0  # the analytic side's rounding along r, of the latest ``_sides``
        self.weights = graph.weights(heads)
        self._rebuild()
        self.kinks = KinkRedraws(who, graph.values, relative_step(self.ref.dtype, graph.values))

    def _rebuild(self):
        self.ref = Reference(self.graph, self.ndtype, self.weights, self.progress)
        self.f_noise = self.ref.evaluation_noise()
        self.grads = self.graph.analytic(self.checked, self.heads)

    # -- phase 3: both sides along r ---------------------------------------------------------------------
    def _pinned_passes(self) -> bool:
        """The comparison against a reference evaluated on the forward's own pieces (``decisions.pinned_symbol``:
        ReLU masks, pooling windows ... of the forward under test): what backprop differentiates, whatever kinks
        the step ``eps`` along ``r`` crosses. Taken only when the unpinned reference, with its kink handling
        (exact kinks re-drawn and named in warnings), fails: a backward that matches the derivative of the
        forward's own piece is what backprop computes, so the pass stands; a wrong rule fails both. Measured on
        a ResNet basic block at 56x56: Chainer's eps=1e-3 along r crosses ReLU kinks and fails a correct block
        by 3% unpinned."""
        record = self.graph.decisions()
        if not record.nodes:
            return False  # nothing to pin: the plain reference is the same
        ref = Reference(self.graph, self.ndtype, self.weights, self.progress, record=record)
        analytic, numeric, noise = self._sides(ref, ref.evaluation_noise())
        try:
            compare(analytic, numeric, self.rtol, self.atol, check=self.who, noise=noise)
        except GradientCheckError:
            return False
        return True

    def _sides(self, ref=None, f_noise=None):
        graph, r = self.graph, self.r
        ref = self.ref if ref is None else ref
        f_noise = self.f_noise if f_noise is None else f_noise
        analytic = float(sum(float(np.sum(self.grads[n].astype(np.float64) * r[n])) for n in self.checked))
        if self.detect:
            value, width = self._detected()
        else:
            value, width = ref.directional(r, self.eps)
        dt = {n: self.grads[n].dtype for n in self.checked}
        _, a_noise = analytic_noise(
            graph.sym,
            graph.values,
            graph.aux,
            self.heads,
            self.checked,
            max(dt.values(), key=lambda d: np.finfo(d).eps),
            actual=self.grads,
        )
        self.analytic_rounding = float(sum(np.nansum(a_noise[n] * np.abs(r[n])) for n in self.checked))
        noise = f_noise / width * (3.0 if self.detect else 1.0) + self.analytic_rounding
        return analytic, value, noise

    def _detected(self):
        """The derivative along r from Chainer's samples, raising NondifferentiableError at a kink."""
        ref = self.ref
        h = ref.harness
        arrays = {n: h.array(n) for n in self.checked}
        base = {n: ref.args[n].astype(np.float64) for n in self.checked}
        parts = lambda: _parts(ref, h.outputs(self.checked))
        center = _parts(ref, ref.base)
        probe = DirectionProbe(arrays, base, self.r)
        try:
            ((_, d, width),) = _numerical(
                parts,
                [probe],
                [self.eps],
                _part_weights(ref),
                detect=True,
                diff_rtol=self.rtol,
                center=center,
                out_names=_part_names(ref),
                lead="non-differentiable point along the random direction r",
            )
        except NondifferentiableError as err:
            raise self._localise(err) from None
        return d, width

    def _localise(self, err):
        """Find the input element behind a kink seen along the direction (kink tests per element)."""
        ref = self.ref
        h = ref.harness
        center = _parts(ref, ref.base)
        for n in self.checked:
            if ref.args[n].size > MAX_LOCALISE:
                continue
            arr = h.array(n)
            probes = [ElementProbe(arr, i, n) for i in np.ndindex(*arr.shape)]
            steps = [self.eps * abs(float(self.r[n][p.index])) for p in probes]
            try:
                _numerical(
                    lambda n=n: _parts(ref, h.outputs([n])),
                    probes,
                    steps,
                    _part_weights(ref),
                    detect=True,
                    diff_rtol=self.rtol,
                    center=center,
                    out_names=_part_names(ref),
                )
            except NondifferentiableError as found:
                extra = [
                    "  (found by sampling each element of the inputs in turn; along the random direction:",
                    *["  " + line for line in str(err).split("\n")[1:-1]],
                    "  )",
                ]
                out = NondifferentiableError(
                    str(found).rsplit("\n", 1)[0] + "\n" + "\n".join(extra),
                    **{k: v for k, v in found.__dict__.items() if k not in ("seed", "reproduce")},
                )
                out.direction_samples = err.samples
                return out
        return err

    def _settles(self) -> bool:
        """Whether the failed comparison passes once the step along ``r`` is shortened (``differencer.settle``:
        ``eps/4, eps/16, ...`` with Richardson extrapolation): Chainer's ``eps=1e-3`` is long next to a
        singularity, where the objective's curvature along ``r`` makes the central difference's truncation
        exceed ``rtol`` (measured: atan2 at (0.024, -0.007), a shipped-bug twin, failed correct in float32 and
        float64). A wrong backward settles at once at its wrong value and still fails. A pass here warns that
        ``eps`` was too long."""
        from .differencer import settle, settled_note

        analytic, first, _ = self._sides()
        rounding = self.analytic_rounding  # the analytic side's part of the allowance
        # the truncation counts as settled within what the comparison allows: atol alone (Chainer's 1e-5,
        # absolute) never settles a derivative of 5e4, whose rounding passes 1e-5 first (measured: a zero-weight
        # convolution before a BatchNorm over data of scale 255)
        bound = self.atol + self.rtol * max(abs(first), abs(analytic)) + rounding
        ref, where = self.ref, ""
        got = settle(lambda h: ref.directional(self.r, h), self.eps, first, analytic, bound, self.f_noise, self.rtol)
        if not got.settled and ref.dtype.itemsize < 8:
            # the reference's own rounding (dtype=float32 asked for) outgrew the tolerance before its truncation
            # settled: a float64 reference takes the shorter steps (measured: LayerNorm over constant rows, whose
            # x_hat turns on a scale of sqrt(1e-5), failed correct with dtype=float32 in 6 of 18 draws)
            ref, where = Reference(self.graph, np.float64, self.weights, False), " on a float64 reference"
            first64, _ = ref.directional(self.r, self.eps)
            got = settle(
                lambda h: ref.directional(self.r, h),
                self.eps,
                first64,
                analytic,
                bound,
                ref.evaluation_noise(),
                self.rtol,
            )
        if got.settled and got.ok:
            what = f"the central difference with eps={self.eps:g} along r"
            warnings.warn(settled_note(self.who, what, first, analytic, got, where), RuntimeWarning, stacklevel=4)
            return True
        return False

    # -- phase 4: kinks --------------------------------------------------------------------------------
    def run(self):
        try:
            passed = self._run_unpinned()
        except NondifferentiableError:
            raise
        except GradientCheckError:
            if self.detect or not (self._pinned_passes() or self._settles()):
                raise
            return
        if passed is not None and not self.detect:
            self._confirm_at_half_step(passed)

    def _confirm_at_half_step(self, analytic):
        """A pass at ``eps`` taken again at ``eps/2``: the central difference's truncation is ``eps^2/6`` times
        the third derivative along ``r``, so halving the step quarters it, and a wrong backward that the
        truncation at ``eps`` happened to meet (same sign, same size) misses the shorter difference by 3/4 of
        that truncation. Measured: LayerNorm over constant rows (``x_hat`` turns on a scale of ``sqrt(1e-5)``),
        where ``eps=1e-3`` errs by up to 0.27%: a backward 0.3% off passed in 2 of 360 random directions. Where
        the shorter difference does not match, the settle decides (a correct backward matches where the
        difference settles), then the reference on the forward's own pieces at ``eps/2`` (kinks the shorter step
        still crosses), and a wrong backward is reported as a directional failure at ``eps/2``. Cost: 2
        forwards."""
        value, width = self.ref.directional(self.r, self.eps / 2.0)
        noise = self.f_noise / width + self.analytic_rounding
        try:
            self._compare(analytic, value, noise, self.eps / 2.0)
        except GradientCheckError as err:
            if self._settles():
                return
            self.eps /= 2.0  # the pinned look, the report and its localisation at the step that showed the failure
            if self._pinned_passes():
                return
            failure = self._failure(analytic, value, noise, err)
            if isinstance(failure, GradientCheckError):  # not a kink or a domain edge along r
                raise failure from None

    def _compare(self, analytic, numeric, noise, eps):
        compare(
            analytic,
            numeric,
            self.rtol,
            self.atol,
            check=self.who,
            names=("backward . r", "numeric"),
            what="backward does not match finite differences along a random direction r",
            eps=f"{eps:g} (step along r, |r| = 1)",
            noise=noise,
        )

    def _run_unpinned(self):
        """The directional comparison, kinks re-drawn until it passes or fails; the backward . r of a plain pass
        (None where a kink or a domain edge along r decided it)."""
        passed = None
        while True:
            analytic, numeric, noise = self._sides()
            try:
                self._compare(analytic, numeric, noise, self.eps)
                passed = analytic
                break
            except GradientCheckError as err:
                failure = self._failure(analytic, numeric, noise, err)
            if failure is None:  # a kink along r that no element shows: warned, passes
                break
            if isinstance(failure, OnlyKinks):  # re-drawn (or left out of r), run again
                if failure.kinks:
                    self.kinks.handle(failure.kinks, lambda arg, i: self.eps * abs(float(self.r[arg][i])))
                else:
                    self.kinks.rounds += 1
                for arg, indices in self.kinks.excluded.items():
                    for i in indices:
                        self.r[arg][i] = 0.0
                self._rebuild()
                continue
            raise failure from None
        self.kinks.warn(stacklevel=5)
        return passed

    # -- phase 5: report -------------------------------------------------------------------------------
    def _failure(self, analytic, numeric, noise, err):
        """The GradientCheckError of a failed directional check, or ``OnlyKinks`` when every mismatch sits at a
        kink whose one-sided derivatives bracket the backward (without ``detect_nondifferentiable``)."""
        contributions, failing = self._contributions()
        elements, skipped = [], []
        for _, n in failing:
            if self.graph.values[n].size > MAX_LOCALISE:
                skipped.append(n)
                continue
            e, ks = self.ref.element_view(self.who, n, self.grads[n], self.weights, self.rtol, self.atol)
            if e is not None:
                elements.append((e, ks))
        kinks = None if (skipped or self.detect or self.kinks.exhausted) else only_kinks(elements)
        if kinks and self.kinks.new(kinks):
            return OnlyKinks(kinks)
        if (
            not skipped
            and self.kinks.redrawn
            and not self.detect
            and not self.kinks.exhausted
            and all(self._at_redrawn(e) for e, _ in elements)
        ):
            # every element passes on its own, or only elements that were moved off a kink still mismatch: the
            # direction still meets that kink (two tied elements moved the same way by nearly the same
            # distance). Leave the moved elements -- proven kinks with a valid subgradient -- out of r and run
            # again; a real error elsewhere still fails then
            self.kinks.exclude_redrawn()
            return OnlyKinks([])
        if not elements and not skipped and not self.detect and self._kink_along_r(analytic, noise):
            return None
        if not elements and not skipped and self._edge_along_r(analytic, numeric, contributions):
            return None
        return self._report(analytic, numeric, noise, err, contributions, failing, [e for e, _ in elements], skipped)

    def _edge_along_r(self, analytic, numeric, contributions) -> bool:
        """Whether the direction alone leaves the function's domain: the difference along ``r`` is not finite,
        while the backward is and every input moved alone along its part of ``r`` gives a finite derivative that
        agrees (or, where it does not, each of its elements does alone). Measured: pow at a base of 0 with an
        exponent of 2 -- moving base and exponent together gives ``(-eps)^(2 + eps)``, NaN, though each moved alone
        stays in the domain; a correct twin failed. The derivative is linear in ``r``, so the inputs' parts
        decide; warns and passes."""
        if math.isfinite(numeric) or not math.isfinite(analytic):
            return False
        if not all(math.isfinite(a) and math.isfinite(n) for a, n in contributions.values()):
            return False
        warnings.warn(
            NondifferentiablePointWarning(
                f"{self.who}: the difference along the random direction r is {numeric} (the objective is not "
                "finite at x +- eps r: r leaves the function's domain, as a base of 0 moved below it), while each "
                "input moved alone along its part of r, and element by element where that differs, agrees with "
                "the backward -- judged by those parts: pass"
            ),
            stacklevel=5,
        )
        return True

    def _kink_along_r(self, analytic, noise) -> bool:
        """Whether the direction meets a kink no single element shows: the one-sided derivatives along ``r``
        differ and the backward lies between them, while every element passes alone (measured: cdist with
        p = 0.5 at a pair sharing a coordinate, a cusp along r whose per-element slopes are symmetric; the
        central difference along r then misses the backward). Warns and passes; a wrong backward outside the
        one-sided derivatives still fails."""
        plus, minus = self.ref.one_sided(self.r, self.eps)
        short = self.ref.one_sided(self.r, self.eps / 16.0)
        if not all(math.isfinite(d) for d in (plus, minus) + short):
            return False
        lo, hi = min(plus, minus), max(plus, minus)
        tol = self.atol + self.rtol * max(abs(plus), abs(minus)) + noise
        # a kink keeps its gap as the step shrinks; curvature's gap (eps f'') shrinks with it (a steep smooth
        # point: left to _settles)
        if abs(short[0] - short[1]) < 0.5 * (hi - lo):
            return False
        if hi - lo <= tol or not lo - tol <= analytic <= hi + tol:
            return False
        warnings.warn(
            NondifferentiablePointWarning(
                f"{self.who}: the random direction r meets a kink no single input element shows (each passes alone): "
                f"one-sided derivatives along r {minus:.6g} (left) and {plus:.6g} (right), "
                f"backward . r = {analytic:.6g} lies between them -- a non-differentiable point, not a gradient error"
            ),
            stacklevel=5,
        )
        return True

    def _at_redrawn(self, err) -> bool:
        """Whether every mismatching element of a per-element failure is one that was moved off a kink."""
        indices = [row[0] for row in err.worst]
        moved = self.kinks.redrawn.get(err.arg_name, [])
        return err.n_mismatch <= len(indices) and all(i in moved for i in indices)

    def _contributions(self):
        """Each input's share of backward . r, and the numeric derivative moving it alone."""
        contributions, failing = {}, []
        for n in self.checked:
            a_n = float(np.sum(self.grads[n].astype(np.float64) * self.r[n]))
            num_n, width_n = self.ref.directional({n: self.r[n]}, self.eps)
            eps_dt = float(np.finfo(self.grads[n].dtype).eps)
            noise_n = self.f_noise / width_n + NOISE_FACTOR * eps_dt * float(
                np.sum(np.abs(self.grads[n].astype(np.float64) * self.r[n]))
            )
            contributions[n] = (a_n, num_n)
            tol_n = self.atol + self.rtol * abs(num_n) + noise_n
            if not abs(a_n - num_n) <= tol_n:
                failing.append((abs(a_n - num_n) / tol_n if tol_n > 0 else np.inf, n))
        failing.sort(reverse=True)
        if not failing:  # only the sum fails: look at the input with the largest discrepancy
            failing = [(0.0, max(self.checked, key=lambda n: abs(contributions[n][0] - contributions[n][1])))]
        return contributions, failing

    def _report(self, analytic, numeric, noise, err, contributions, failing, elements, skipped):
        who, checked = self.who, self.checked
        report = Report(
            who,
            "backward does not match finite differences along a random direction r "
            f"(eps={self.eps:g}, atol={self.atol:.3g}, rtol={self.rtol:.3g})"
            + (f" -- {self.wrap}" if self.wrap else "")
            + (
                f" -- at half the given eps={self.given_eps:g}, whose difference passed"
                if self.eps < self.given_eps
                else ""
            ),
        )
        report.summary.append(
            f"directional derivative: backward . r = {analytic:.10g}, numeric = {numeric:.10g}, "
            f"|error| = {abs(analytic - numeric):.3g} > tolerance {self.atol + self.rtol * abs(numeric) + noise:.3g} "
            f"(atol + rtol * |numeric| + rounding noise {noise:.2g})"
        )
        under_test = ", ".join(sorted({np.dtype(self.graph.values[n].dtype).name for n in checked}))
        report.context.append(
            f"dtype under test {under_test}, numeric reference in {self.ref.dtype.name}"
            f"{' (float64_reference=False)' if self.ndtype is None else ''}, forward is_train=True"
        )
        width = max(len(n) for n in checked)
        report.context.append(
            "contribution of each input (backward_i . r_i vs numeric derivative moving that input alone):"
        )
        for n in checked:
            a_n, num_n = contributions[n]
            mark = "  <-- mismatch" if any(f[1] == n for f in failing) else ""
            report.context.append(f"  {n:<{width}}  {a_n:>16.8g}  {num_n:>16.8g}{mark}")
        facts = {
            "directional": (analytic, numeric),
            "contributions": contributions,
            "direction": self.r,
            "dtype": self.graph.values[failing[0][1]].dtype,
            "redrawn": self.kinks.redrawn,
        }
        if elements:
            primary = elements[0]
            report.children.append(
                (
                    f"per-element check of {primary.arg_name!r} (gradient of sum(y_grad * y), "
                    f"central differences {self.ref.step_description}):",
                    primary.report,
                )
            )
            if len(elements) > 1:
                more = ", ".join(f"{e.arg_name!r} ({100 * e.mismatch_fraction:.3g}% mismatch)" for e in elements[1:])
                report.notes.append(f"also failing per element: {more}")
            if skipped:
                report.notes.append(f"not compared per element (more than {MAX_LOCALISE} elements): {skipped}")
            state = primary.facts()
            state.update(check=who, others=elements[1:], **facts)
            return GradientCheckError(report, **state)
        n = failing[0][1]
        if n in skipped:
            report.notes.append(
                f"{n!r} has {self.graph.values[n].size} elements (> {MAX_LOCALISE}): no per-element "
                "comparison; the contributions above locate the argument"
            )
        else:
            report.notes.append(
                f"the per-element comparison of {n!r} passes at rtol={self.rtol:.3g}, "
                f"atol={self.atol:.3g}: the error is too small to show per element"
            )
        a_vec = np.array([contributions[k][0] for k in checked])
        n_vec = np.array([contributions[k][1] for k in checked])
        return GradientCheckError(
            report,
            check=who,
            arg_name=n,
            index=None,
            worst=list(err.worst),
            mismatch_fraction=1.0,
            n_mismatch=1,
            size=1,
            rtol=self.rtol,
            atol=self.atol,
            eps=self.eps,
            names=("backward . r", "numeric"),
            diagnosis=None,
            actual=a_vec,
            expected=n_vec,
            seed=err.seed,
            **facts,
        )


def _parts(ref, outs):
    """Outputs as seen by the projection: the non-loss outputs (in the reference dtype, whose rounding level
    the kink test allows for), then the loss heads' implied loss."""
    graph = ref.graph
    parts = [np.asarray(outs[k]).astype(ref.dtype, copy=False) for k in range(ref.n_out) if not graph.loss_heads[k]]
    if any(graph.loss_heads):
        zero = [np.zeros(s) for s in graph.out_shapes]
        parts.append(np.array(ref.objective_for(zero)(outs)[0]))
    return parts


def _part_weights(ref):
    parts = [w for w, loss in zip(ref.objective_weights, ref.graph.loss_heads) if not loss]
    return parts + ([1.0] if any(ref.graph.loss_heads) else [])


def _part_names(ref):
    names = [n for n, loss in zip(ref.graph.out_names, ref.graph.loss_heads) if not loss]
    return names + (["implied loss of the loss heads"] if any(ref.graph.loss_heads) else [])


# == check_double_backward ===============================================================================


@seeded_check
def check_double_backward(
    func: Callable[..., Symbol | Sequence[Symbol]],
    x_data: np.ndarray | Sequence[np.ndarray],
    y_grad: np.ndarray | Sequence[np.ndarray] | None,
    x_grad_grad: ArrayLike | Sequence[ArrayLike],
    params: Mapping[str, ArrayLike] | tuple[()] | None = (),
    params_grad_grad: Mapping[str, ArrayLike] | ArrayLike | Sequence[ArrayLike] | None = (),
    eps: float = 1e-3,
    atol: float = 1e-4,
    rtol: float = 1e-3,
    no_grads: Sequence[bool] | None = None,
    dtype: DTypeLike | None = None,
    detect_nondifferentiable: bool = False,
    *,
    float64_reference: bool = True,
    progress: bool = True,
) -> None:
    """Test the second-order gradient of ``func`` (Chainer's ``check_double_backward``).

    The first-order gradient ``(x, gy) -> (gx, gparams)`` is built as Symbols with ``symgrad.grad``
    and checked with ``check_backward`` (head gradients ``x_grad_grad + params_grad_grad``), so the
    second-order gradient rules are compared with finite differences of the first-order ones.

    Method:
        ``check_backward``'s, on the first-order gradient graph: its inputs are ``x_data``, ``y_grad`` and
        ``params``, its outputs ``gx`` and ``gparams``; the random direction runs over all of them.

    Cost:
        ``check_backward``'s on the gradient graph, whose forward is the first-order forward and backward
        (about 2 to 3 times a forward) and whose backward runs the gradient rules of those.

    Tolerance:
        ``check_backward``'s model with Chainer's defaults for this check, ``atol=1e-4``, ``rtol=1e-3``.

    Args:
        func, x_data, params, eps, atol, rtol, dtype, detect_nondifferentiable, float64_reference, progress:
            as ``check_backward`` (``params`` are inputs of the first-order gradient too).
        y_grad: the first-order head gradients (an array or a tuple, checked as inputs); None for a loss
            (ones, not checked).
        x_grad_grad: one array per float input of ``x_data`` (the head gradients of ``gx``).
        params_grad_grad: one array per entry of ``params`` (dict order), or a dict by name.
        no_grads: one bool per input of the first-order gradient (``x_data`` then ``y_grad``); default
            True for integer inputs.

    >>> import numpy as np, symgrad as sg
    >>> x = np.random.uniform(-1, 1, (2, 3))
    >>> gy, ggx = np.random.uniform(-1, 1, (2, 3)), np.random.uniform(-1, 1, (2, 3))
    >>> check_double_backward(lambda x: sg.sym.tanh(x), x, gy, ggx)
    """
    who = "check_double_backward"
    check_callable(func, who)
    xs = _arrays(x_data, who, "x_data")
    n_x = len(xs)
    why = " (the head gradients are inputs of the first-order gradient)"
    gys = None if y_grad is None else _arrays(y_grad, who, "y_grad", why)
    float_x = [np.dtype(x.dtype).kind == "f" for x in xs]
    ggx = list(as_tuple(x_grad_grad))
    if len(ggx) == n_x and len(ggx) != sum(float_x):
        ggx = [g for g, f in zip(ggx, float_x) if f]
    if len(ggx) != sum(float_x):
        raise ValueError(f"{who}: x_grad_grad has {len(ggx)} arrays for {sum(float_x)} float inputs")
    pdict = param_dict(params, who)
    if isinstance(params_grad_grad, dict):
        unknown = [k for k in params_grad_grad if k not in pdict]
        if unknown or len(params_grad_grad) != len(pdict):
            raise ValueError(
                f"{who}: params_grad_grad keys {sorted(params_grad_grad)} must equal the params {sorted(pdict)}"
            )
        ggp = [params_grad_grad[k] for k in pdict]
    else:
        ggp = list(as_tuple(params_grad_grad)) if params_grad_grad is not None else []
        if ggp == [()] or (len(ggp) == 0):
            ggp = []
        if len(ggp) != len(pdict):
            raise ValueError(f"{who}: params_grad_grad has {len(ggp)} arrays for {len(pdict)} params {list(pdict)}")
    x_names = [f"x{i}" for i in range(n_x)]
    gy_names = [] if gys is None else [f"gy{i}" for i in range(len(gys))]

    def first_order_grad(*vs):
        xv, gv = vs[:n_x], vs[n_x:]
        ys = symbols_of(func(*xv), who)
        if gys is not None and len(gv) != len(ys):
            raise ValueError(f"{who}: y_grad has {len(gv)} arrays for {len(ys)} outputs of func")
        grad_vars = [v for v, f in zip(xv, float_x) if f]
        grad_vars += [variable_in(ys, p, who) for p in pdict]
        gs = sg.grad(ys, grad_vars, grad_outputs=None if gys is None else list(gv))
        # an input not connected to the outputs has a zero gradient
        return tuple(sg.sym.zeros_like(v) if g is None else g for g, v in zip(gs, grad_vars))

    inputs = tuple(xs) + (() if gys is None else tuple(gys))
    _check_backward(
        who,
        first_order_grad,
        inputs,
        tuple(ggx) + tuple(ggp),
        pdict,
        eps,
        atol,
        rtol,
        no_grads,
        dtype,
        detect_nondifferentiable,
        float64_reference,
        progress,
        names=x_names + gy_names,
        wrap="the second-order gradient (gradient of the first-order gradient (gx, gparams) w.r.t. "
        "x, gy and params) disagrees with finite differences of the first-order gradient",
    )
    return None
