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
differences of half-width ``eps`` (5 points and one Richardson step with ``detect_nondifferentiable``).
Cost: 1 forward + 1 backward, then 2 (or 4) forwards of the reference graph.

Differences from Chainer (all on the side of trustworthy numbers):

- the finite differences run on a float64 copy of the graph and of its inputs (``float64_reference=True``,
  keyword-only), so float32 and float16 gradients are checked against an accurate reference at
  Chainer's default tolerances; ``dtype`` still picks the reference dtype explicitly, as in Chainer;
- the criterion is ``|backward - numeric| <= atol + rtol * |numeric| + noise`` (Chainer scales rtol by
  ``|backward|``), ``noise`` being the estimated rounding noise of the reference and of the backward;
- a failure reports the contribution of every input (its part of ``backward . r`` against the numeric
  derivative moving that input alone) and, for inputs of at most 5 000 elements, a per-element
  central-difference comparison (the numeric engine of ``test_utils.numeric``) with the worst
  elements and a diagnosis (scaled, doubled, sign flipped, missing, transposed, ...);
- ``NondifferentiableError`` names the input element at the kink when it can be found.

The graph harness at the end of this module (``_Graph``, ``_Reference``) is shared with
``test_utils.torch_checks``.
"""

from __future__ import annotations

import numbers

import numpy as np

import symgrad as sg
from symgrad.base import SymgradError
from symgrad.context import array_context, cpu
from symgrad.symbol import Group, Symbol

from ._inputs import check_dtype, check_finite, check_kind, check_shapes
from .compare import _violations, compare
from .context import default_context, to_device, to_numpy
from .mxnet_checks import _diagnosis_context
from .numeric import (
    NOISE_FACTOR,
    _Evaluator,
    _Progress,
    assert_deterministic,
    central_differences,
    check_step,
    default_steps,
    find_kinks,
    projected_objective,
    rounding_noise,
)
from .report import GradientCheckError, with_reproduction
from .seed import current_seed, reproduction, seeded_check

__all__ = ["check_backward", "check_double_backward", "numerical_grad", "NondifferentiableError"]

#: inputs up to this many elements get a per-element comparison when a projected check fails
MAX_LOCALISE = 5000


class NondifferentiableError(ValueError):
    """``func`` is not differentiable at the sampled point (Chainer's ``NondifferentiableError``).

    Raised by ``numerical_grad`` / ``check_backward`` with ``detect_nondifferentiable=True`` when the
    outputs sampled around the point do not fit a quadratic (a kink: relu/abs at 0, max ties) or
    change finiteness. A ``ValueError``: the point, not the gradient, is wrong for the check; pick
    another input. Attributes carry the samples:

    Attributes:
        arg_name: the input (``"x0"``, ``"inputs[1]"``) whose perturbation crossed the kink, or
            ``"direction"`` when only the random direction is known.
        index: the element of that input, or None.
        value: the input value at that element, or None.
        output_index, output_element: the output and its element whose samples do not fit.
        eps: half-width of the sampling.
        offsets: the perturbations actually applied (input units), ``0`` included.
        samples: the output element's value at each offset (same order).
        residual, threshold: the quadratic fit's RMS residual and the allowed value
            (``diff_atol + diff_rtol * (ymax - ymin)`` plus the outputs' rounding noise).
        nonfinite: True when finiteness changed between the samples.
        seed, reproduce: the seed of the check (its random direction) and the one-line reproduction, also the
            message's last line (as ``GradientCheckError``'s).
    """

    def __init__(self, message, **facts):
        self.seed = current_seed()
        self.reproduce = reproduction(self.seed)
        super().__init__(with_reproduction(message, self.seed))
        self.arg_name = facts.pop("arg_name", None)
        self.index = facts.pop("index", None)
        self.value = facts.pop("value", None)
        self.output_index = facts.pop("output_index", None)
        self.output_element = facts.pop("output_element", None)
        self.eps = facts.pop("eps", None)
        self.offsets = facts.pop("offsets", ())
        self.samples = facts.pop("samples", ())
        self.residual = facts.pop("residual", None)
        self.threshold = facts.pop("threshold", None)
        self.nonfinite = facts.pop("nonfinite", False)
        for k, v in facts.items():
            setattr(self, k, v)


# == finite differences ================================================================================


def _host64(y):
    return None if y is None else np.array(to_numpy(y), dtype=np.float64, copy=True)


def _as_outputs(ys):
    if ys is None or isinstance(ys, (list, tuple)):
        return list(ys or ())
    return [ys]


def _sweep(arrays, steps, evaluate, offsets):
    """Perturb every element of every array in turn; yield ``(i, index, deltas, outputs)``.

    ``arrays[i][index]`` is set to ``x + c * steps[i][index]`` for each ``c`` in ``offsets`` (rounded to
    the array's dtype), ``evaluate(i)`` gives the outputs there, and the element is restored. ``deltas``
    are the perturbations actually stored, ``outputs`` one list of float64 arrays per offset.
    """
    for i, x in enumerate(arrays):
        h = np.broadcast_to(np.asarray(steps[i], np.float64), x.shape)
        orig = x.copy()
        orig_host = np.asarray(to_numpy(orig), np.float64)
        cast = np.dtype(x.dtype).type
        try:
            for idx in np.ndindex(*x.shape):
                x0 = float(orig_host[idx])
                deltas, outs = [], []
                for c in offsets:
                    v = cast(x0 + c * float(h[idx]))
                    x[idx] = v
                    deltas.append(float(v) - x0)
                    outs.append([_host64(y) for y in _as_outputs(evaluate(i))])
                x[idx] = orig[idx]
                yield i, idx, deltas, outs
        finally:
            x[...] = orig


def _derivatives(deltas, outs):
    """Per-output derivative arrays from the samples of ``_sweep`` (2 points, or 4 with Richardson).

    Two points: ``(y+ - y-) / (d+ - d-)``. Four points ``(-1, -1/2, 1/2, 1) * h``: ``(4 D_half - D_full) / 3``
    (Chainer's ``(-y3 + 8 y2 - 8 y1 + y0) / (6 h)``, with the widths actually stored). Raises ValueError
    when a step vanishes in the input's dtype.
    """
    def quotient(a, b):
        width = deltas[b] - deltas[a]
        if width <= 0:
            raise ValueError("numerical_grad: the step vanishes in the input's dtype (x + eps == x - eps); "
                             "use a larger eps")
        return [None if ya is None else (yb - ya) / width for ya, yb in zip(outs[a], outs[b])]

    if len(outs) == 2:
        return quotient(0, 1)
    full, half = quotient(0, 3), quotient(1, 2)
    return [None if f is None else (4.0 * hh - f) / 3.0 for f, hh in zip(full, half)]


def _noise_floor(y):
    """Rounding noise of an output sampled in its own dtype: NOISE_FACTOR * eps * |y|."""
    dt = np.dtype(getattr(y, "dtype", np.float64))
    eps = float(np.finfo(dt).eps) if dt.kind == "f" else float(np.finfo(np.float64).eps)
    return NOISE_FACTOR * eps * np.abs(np.asarray(to_numpy(y), np.float64))


def _kink(deltas, outs, raw_center, diff_atol, diff_rtol):
    """``(output, element, residual, threshold, nonfinite)`` of the first output element whose five
    samples (``deltas`` with 0 in the middle) change finiteness or do not fit a quadratic, else None.

    A fit residual counts when it exceeds ``diff_atol + diff_rtol * (ymax - ymin)`` (Chainer) plus the
    outputs' rounding noise (samples differing only by rounding are not a kink); constant outputs never do.
    """
    t = np.asarray(deltas, np.float64)
    scale = float(np.max(np.abs(t))) or 1.0
    vander = np.vander(t / scale, 3)
    for k in range(len(outs[0])):
        if outs[0][k] is None:
            continue
        ys = np.stack([o[k].ravel() for o in outs])
        finite = np.isfinite(ys)
        changed = (finite != finite[:1]).any(axis=0)
        if changed.any():
            e = int(np.flatnonzero(changed)[0])
            return k, e, float("nan"), float("nan"), True
        if not finite.all():
            continue
        coef, *_ = np.linalg.lstsq(vander, ys, rcond=None)
        resid = np.sqrt(np.mean((ys - vander @ coef) ** 2, axis=0))
        ymax, ymin = ys.max(axis=0), ys.min(axis=0)
        floor = _noise_floor(raw_center[k]).ravel() if raw_center is not None else 0.0
        allowed = diff_atol + diff_rtol * (ymax - ymin) + floor
        bad = (resid > allowed) & (ymax != ymin)
        if bad.any():
            e = int(np.argmax(np.where(bad, resid - allowed, -np.inf)))
            return k, e, float(resid[e]), float(allowed[e]), False
    return None


def _kink_error(found, *, arg_name, index, value, eps, deltas, outs, out_shapes, out_names, lead=None, extra=()):
    k, e, resid, allowed, nonfinite = found
    elem = tuple(int(i) for i in np.unravel_index(e, out_shapes[k])) if out_shapes[k] else ()
    samples = [float(o[k].ravel()[e]) for o in outs]
    where = f"{arg_name}[{', '.join(str(i) for i in index)}]" if index is not None else arg_name
    head = lead or (f"non-differentiable point at {where}" + (f" (value {value:.8g})" if value is not None else ""))
    lines = [head + ": the one-sided derivatives differ, so finite differences and backward need not agree "
             "there (a kink, not a gradient bug); move the input away from it"]
    oname = out_names[k] if out_names else f"output {k}"
    if nonfinite:
        lines.append(f"  {oname}{list(elem)} changes between finite and non-finite values around the point")
    else:
        lines.append(f"  {oname}{list(elem)} does not fit a quadratic: RMS residual {resid:.3g} > {allowed:.3g} "
                     "(diff_atol + diff_rtol * (ymax - ymin) + rounding noise)")
    lines.append(f"  samples (offset -> value), half-width {eps:g}:")
    lines += [f"    {d:+.6g} -> {s:.10g}" for d, s in zip(deltas, samples)]
    lines += list(extra)
    return NondifferentiableError(
        "\n".join(lines), arg_name=arg_name, index=index, value=value, output_index=k, output_element=elem,
        eps=eps, offsets=tuple(deltas), samples=tuple(samples), residual=resid, threshold=allowed,
        nonfinite=nonfinite)


def _numerical(evaluate, inputs, grad_outputs, steps, *, detect=False, diff_atol=0.0, diff_rtol=1e-2,
               center_outputs=None, names=None, out_names=None, lead=None):
    """Numeric gradients of ``sum(grad_outputs * outputs)`` w.r.t. ``inputs`` (float64 arrays).

    ``evaluate(i)`` returns the outputs after ``inputs[i]`` was changed in place; ``steps[i]`` are the
    half-widths (a number or an array). With ``detect`` the outputs are sampled at 5 points and a kink
    raises ``NondifferentiableError``. Returns ``(gradients, widths)``.
    """
    names = names or [f"inputs[{i}]" for i in range(len(inputs))]
    grads = [np.zeros(np.shape(x), np.float64) for x in inputs]
    widths = [np.ones(np.shape(x), np.float64) for x in inputs]
    gys = [None if g is None else (float(g) if isinstance(g, numbers.Number) else _host64(g))
           for g in grad_outputs]
    center, raw_center = None, None
    if detect:
        raw = _as_outputs(center_outputs) if center_outputs is not None else _as_outputs(evaluate(None))
        raw_center = [None if y is None else np.asarray(to_numpy(y)) for y in raw]
        center = [_host64(y) for y in raw]
    offsets = (-1.0, -0.5, 0.5, 1.0) if detect else (-1.0, 1.0)
    for i, idx, deltas, outs in _sweep(inputs, steps, evaluate, offsets):
        if len(outs[0]) != len(gys):
            raise ValueError(f"numerical_grad: f returned {len(outs[0])} outputs for {len(gys)} grad_outputs")
        if detect:
            deltas5 = deltas[:2] + [0.0] + deltas[2:]
            outs5 = outs[:2] + [center] + outs[2:]
            found = _kink(deltas5, outs5, raw_center, diff_atol, diff_rtol)
            if found is not None:
                host = np.asarray(to_numpy(inputs[i]), np.float64)
                value = float(host[idx]) if host.ndim else float(host)
                h = float(np.broadcast_to(np.asarray(steps[i], np.float64), np.shape(inputs[i]))[idx])
                raise _kink_error(found, arg_name=names[i], index=idx if host.ndim else None, value=value,
                                  eps=h, deltas=deltas5, outs=outs5, lead=lead,
                                  out_shapes=[np.shape(y) if y is not None else () for y in center],
                                  out_names=out_names)
        total = 0.0
        for d, gy in zip(_derivatives(deltas, outs), gys):
            if d is None or gy is None:
                continue
            total += float(np.sum(d * gy))
        grads[i][idx] = total
        widths[i][idx] = deltas[-1] - deltas[0]
    return grads, widths


def numerical_grad(f, inputs, grad_outputs, eps=1e-3, detect_nondifferentiable=False, diff_atol=0, diff_rtol=1e-2,
                   center_outputs=None):
    """Numeric gradient of ``sum(grad_outputs * f())`` w.r.t. ``inputs`` (Chainer's ``numerical_grad``).

    ``f`` takes no arguments and returns the outputs (an array or a tuple of arrays; None entries are
    skipped); every element of every array in ``inputs`` is changed in place to ``x +- eps`` (and
    restored). The quotient divides by the distance between the two values actually stored, and sums
    in float64. Cost: 2 calls of ``f`` per element, 4 with ``detect_nondifferentiable``.

    Args:
        f: callable with no arguments returning the outputs.
        inputs: tuple of float arrays (numpy or CuPy) read by ``f``.
        grad_outputs: tuple of arrays, scalars or None, one per output.
        eps: half-width of the central differences.
        detect_nondifferentiable: sample 5 points (``x + {-1, -1/2, 0, 1/2, 1} * eps``), raise
            ``NondifferentiableError`` where the outputs do not fit a quadratic or change finiteness; the
            derivative then takes one Richardson step (error O(eps^4)).
        diff_atol, diff_rtol: allowed fit residual, ``diff_atol + diff_rtol * (ymax - ymin)``; rounding
            noise of the outputs' dtype is added (a difference at the rounding level is not a kink).
        center_outputs: outputs of ``f`` at ``inputs`` (saves a call with ``detect_nondifferentiable``).

    Returns:
        A tuple of gradients, one per input, in the input's dtype.

    >>> import numpy as np
    >>> x = np.array([1.0, 2.0])
    >>> gx, = numerical_grad(lambda: (x ** 3,), (x,), (np.ones(2),))
    >>> np.round(gx, 4)  # central differences: error eps^2 = 1e-6
    array([ 3., 12.])
    """
    inputs = tuple(inputs)
    for i, x in enumerate(inputs):
        if array_context(x) is None:
            raise TypeError(f"numerical_grad: inputs[{i}] must be a numpy or CuPy array, got {type(x).__name__}")
        if np.dtype(x.dtype).kind != "f":
            raise TypeError(f"numerical_grad: inputs[{i}] has dtype {x.dtype}; the inputs must be float arrays")
    eps = float(eps)
    if not eps > 0:
        raise ValueError(f"numerical_grad: eps must be positive, got {eps!r}")
    grad_outputs = _as_outputs(grad_outputs)
    grads, _ = _numerical(lambda i: f(), inputs, grad_outputs, [eps] * len(inputs),
                          detect=bool(detect_nondifferentiable), diff_atol=float(diff_atol),
                          diff_rtol=float(diff_rtol), center_outputs=center_outputs)
    return tuple(g.astype(x.dtype) for g, x in zip(grads, inputs))


# == check_backward ====================================================================================


def _as_tuple(x):
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


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


def _analytic_noise(grads, weights):
    """Rounding noise of ``sum(g * w)`` computed from gradients ``g`` in their own dtype."""
    total = 0.0
    for g, w in zip(grads, weights):
        eps = float(np.finfo(np.dtype(g.dtype)).eps) if np.dtype(g.dtype).kind == "f" else 0.0
        total += NOISE_FACTOR * eps * float(np.sum(np.abs(g.astype(np.float64) * w)))
    return total


@seeded_check
def check_backward(func, x_data, y_grad, params=(), eps=1e-3, atol=1e-5, rtol=1e-4, no_grads=None, dtype=None,
                   detect_nondifferentiable=False, *, float64_reference=True, progress=True):
    """Test the backward of ``func`` along a random direction (Chainer's ``check_backward``).

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
    return _check_backward("check_backward", func, x_data, y_grad, params, eps, atol, rtol, no_grads, dtype,
                           detect_nondifferentiable, float64_reference, progress)


def _check_backward(who, func, x_data, y_grad, params, eps, atol, rtol, no_grads, dtype, detect, float64_reference,
                    progress=True, names=None, wrap=None):
    xs = _as_tuple(x_data)
    for i, x in enumerate(xs):
        if array_context(x) is None:
            raise TypeError(f"{who}: x_data[{i}] must be a numpy or CuPy array, got {type(x).__name__}")
    names = list(names) if names is not None else [f"x{i}" for i in range(len(xs))]
    if no_grads is None:
        no_grads = [np.dtype(x.dtype).kind != "f" for x in xs]
    else:
        no_grads = list(no_grads)
        if len(no_grads) != len(xs):
            raise ValueError(f"{who}: length of no_grads and x_data should be the same: {len(no_grads)} != {len(xs)}")
    for n, x, ng in zip(names, xs, no_grads):
        if not ng and np.dtype(x.dtype).kind != "f":
            raise ValueError(f"{who}: input {n!r} has dtype {x.dtype} but no_grads is False for it; finite "
                             "differences need a float input (integer inputs default to no_grads=True)")
    if dtype is not None:
        dtype = check_dtype(dtype, who)
    eps, rtol, atol = float(eps), float(rtol), float(atol)
    if not eps > 0:
        raise ValueError(f"{who}: eps must be positive, got {eps!r}")
    graph = _Graph(who, func, list(zip(names, xs)), params)
    heads = graph.head_grads(y_grad)

    # inputs with no_grads: their gradient must be absent
    graph.assert_no_gradient([n for n, ng in zip(names, no_grads) if ng])

    checked = [n for n, ng in zip(names, no_grads) if not ng and n in graph.arg_names] + list(graph.param_names)
    checked = [n for n in checked if np.dtype(graph.values[n].dtype).kind == "f"]
    if not checked:
        return None
    grads = graph.analytic(checked, heads)
    r = dict(zip(checked, _direction([graph.values[n].shape for n in checked])))

    ndtype = dtype if dtype is not None else (np.dtype(np.float64) if float64_reference else None)
    weights = graph.weights(heads)
    ref = _Reference(graph, ndtype, weights, progress)
    check_step(eps, ref.dtype, ref.dtype, who, " Use a larger eps, or keep the float64 reference (dtype=None, "
               "float64_reference=True).")
    analytic_terms = {n: float(np.sum(grads[n].astype(np.float64) * r[n])) for n in checked}
    analytic = float(sum(analytic_terms.values()))
    numeric, width = ref.directional(checked, r, eps, detect, diff_rtol=rtol,
                                     kink_names=checked if detect else None)
    noise = (rounding_noise(ref.magnitude, width, ref.dtype) * (3.0 if detect else 1.0)
             + _analytic_noise([grads[n] for n in checked], [r[n] for n in checked]))
    under_test = ", ".join(sorted({np.dtype(graph.values[n].dtype).name for n in checked}))
    context = [f"dtype under test {under_test}, numeric reference in {ref.dtype.name}"
               f"{' (float64_reference=False)' if ndtype is None else ''}, forward is_train=True"]
    try:
        compare(analytic, numeric, rtol, atol, check=who, names=("backward . r", "numeric"),
                what="backward does not match finite differences along a random direction r",
                eps=f"{eps:g} (step along r, |r| = 1)", noise=noise, extra_lines=context)
    except GradientCheckError as err:
        raise _directional_failure(who, graph, ref, grads, r, weights, analytic, numeric, eps, rtol, atol, noise,
                                   context, err, wrap) from None
    return None


def _directional_failure(who, graph, ref, grads, r, weights, analytic, numeric, eps, rtol, atol, noise, context, err,
                         wrap):
    """The GradientCheckError of a failed directional check, with per-input and per-element detail."""
    checked = list(r)
    lines = [f"{who}: backward does not match finite differences along a random direction r "
             f"(eps={eps:g}, atol={atol:.3g}, rtol={rtol:.3g})" + (f" -- {wrap}" if wrap else ""),
             f"  directional derivative: backward . r = {analytic:.10g}, numeric = {numeric:.10g}, "
             f"|error| = {abs(analytic - numeric):.3g} > tolerance {atol + rtol * abs(numeric) + noise:.3g} "
             f"(atol + rtol * |numeric| + rounding noise {noise:.2g})"]
    lines += [f"  {c}" for c in context]
    # contribution of each input: its share of backward . r, and the numeric derivative moving it alone
    contributions, failing = {}, []
    for n in checked:
        a_n = float(np.sum(grads[n].astype(np.float64) * r[n]))
        num_n, width_n = ref.directional([n], {n: r[n]}, eps, False)
        noise_n = rounding_noise(ref.magnitude, width_n, ref.dtype) + _analytic_noise([grads[n]], [r[n]])
        contributions[n] = (a_n, num_n)
        tol_n = atol + rtol * abs(num_n) + noise_n
        if not abs(a_n - num_n) <= tol_n:
            failing.append((abs(a_n - num_n) / tol_n if tol_n > 0 else np.inf, n))
    width = max(len(n) for n in checked)
    lines.append("  contribution of each input (backward_i . r_i vs numeric derivative moving that input alone):")
    for n in checked:
        a_n, num_n = contributions[n]
        mark = "  <-- mismatch" if any(f[1] == n for f in failing) else ""
        lines.append(f"    {n:<{width}}  {a_n:>16.8g}  {num_n:>16.8g}{mark}")
    failing.sort(reverse=True)
    if not failing:  # only the sum fails: look at the input with the largest discrepancy
        worst = max(checked, key=lambda n: abs(contributions[n][0] - contributions[n][1]))
        failing = [(0.0, worst)]
    # per-element comparison of the failing inputs
    element_errors, skipped = [], []
    for _, n in failing:
        if graph.values[n].size > MAX_LOCALISE:
            skipped.append(n)
            continue
        e = ref.element_view(who, n, grads[n], weights, rtol, atol)
        if e is not None:
            element_errors.append(e)
    facts = {"directional": (analytic, numeric), "contributions": contributions, "direction": r,
             "dtype": graph.values[failing[0][1]].dtype}
    if element_errors:
        primary = element_errors[0]
        lines.append(f"  per-element check of {primary.arg_name!r} (gradient of sum(y_grad * y), "
                     f"central differences {ref.step_description}):")
        lines += ["  " + line for line in str(primary).split("\n")[1:]]
        if len(element_errors) > 1:
            more = ", ".join(f"{e.arg_name!r} ({100 * e.mismatch_fraction:.3g}% mismatch)" for e in element_errors[1:])
            lines.append(f"  also failing per element: {more}")
        if skipped:
            lines.append(f"  not compared per element (more than {MAX_LOCALISE} elements): {skipped}")
        state = {k: v for k, v in primary.__dict__.items() if not k.startswith("_")}
        state.update(check=who, others=element_errors[1:], **facts)
        out = GradientCheckError("\n".join(lines))
        out.__dict__.update(state)
        return out
    n = failing[0][1]
    if n in skipped:
        lines.append(f"  {n!r} has {graph.values[n].size} elements (> {MAX_LOCALISE}): no per-element comparison; "
                     "the contributions above locate the argument")
    else:
        lines.append(f"  the per-element comparison of {n!r} passes at rtol={rtol:.3g}, atol={atol:.3g}: the error "
                     "is too small to show per element")
    a_vec = np.array([contributions[k][0] for k in checked])
    n_vec = np.array([contributions[k][1] for k in checked])
    return GradientCheckError(
        "\n".join(lines), check=who, arg_name=n, index=None, worst=list(err.worst), mismatch_fraction=1.0,
        n_mismatch=1, size=1, rtol=rtol, atol=atol, eps=eps, names=("backward . r", "numeric"), diagnosis=None,
        actual=a_vec, expected=n_vec, seed=err.seed, **facts)


# == check_double_backward ===============================================================================


@seeded_check
def check_double_backward(func, x_data, y_grad, x_grad_grad, params=(), params_grad_grad=(), eps=1e-3, atol=1e-4,
                          rtol=1e-3, no_grads=None, dtype=None, detect_nondifferentiable=False, *,
                          float64_reference=True, progress=True):
    """Test the second-order gradient of ``func`` (Chainer's ``check_double_backward``).

    The first-order gradient ``(x, gy) -> (gx, gparams)`` is built as Symbols with ``symgrad.grad``
    and checked with ``check_backward`` (head gradients ``x_grad_grad + params_grad_grad``), so the
    second-order gradient rules are compared with finite differences of the first-order ones.

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
    xs = _as_tuple(x_data)
    n_x = len(xs)
    gys = None if y_grad is None else _as_tuple(y_grad)
    float_x = [np.dtype(x.dtype).kind == "f" for x in xs]
    ggx = list(_as_tuple(x_grad_grad))
    if len(ggx) == n_x and len(ggx) != sum(float_x):
        ggx = [g for g, f in zip(ggx, float_x) if f]
    if len(ggx) != sum(float_x):
        raise ValueError(f"{who}: x_grad_grad has {len(ggx)} arrays for {sum(float_x)} float inputs")
    param_dict = _param_dict(params, who)
    if isinstance(params_grad_grad, dict):
        unknown = [k for k in params_grad_grad if k not in param_dict]
        if unknown or len(params_grad_grad) != len(param_dict):
            raise ValueError(f"{who}: params_grad_grad keys {sorted(params_grad_grad)} must equal the params "
                             f"{sorted(param_dict)}")
        ggp = [params_grad_grad[k] for k in param_dict]
    else:
        ggp = list(_as_tuple(params_grad_grad)) if params_grad_grad is not None else []
        if ggp == [()] or (len(ggp) == 0):
            ggp = []
        if len(ggp) != len(param_dict):
            raise ValueError(f"{who}: params_grad_grad has {len(ggp)} arrays for {len(param_dict)} params "
                             f"{list(param_dict)}")
    x_names = [f"x{i}" for i in range(n_x)]
    gy_names = [] if gys is None else [f"gy{i}" for i in range(len(gys))]

    def first_order_grad(*vs):
        xv, gv = vs[:n_x], vs[n_x:]
        ys = _symbols(func(*xv), who)
        if gys is not None and len(gv) != len(ys):
            raise ValueError(f"{who}: y_grad has {len(gv)} arrays for {len(ys)} outputs of func")
        grad_vars = [v for v, f in zip(xv, float_x) if f]
        grad_vars += [_variable(ys, p, who) for p in param_dict]
        gs = sg.grad(ys, grad_vars, grad_outputs=None if gys is None else list(gv))
        # an input not connected to the outputs has a zero gradient
        return tuple(sg.sym.zeros_like(v) if g is None else g for g, v in zip(gs, grad_vars))

    inputs = tuple(xs) + (() if gys is None else tuple(gys))
    _check_backward(who, first_order_grad, inputs, tuple(ggx) + tuple(ggp), param_dict, eps, atol, rtol, no_grads,
                    dtype, detect_nondifferentiable, float64_reference, progress, names=x_names + gy_names,
                    wrap="the second-order gradient (gradient of the first-order gradient (gx, gparams) w.r.t. "
                         "x, gy and params) disagrees with finite differences of the first-order gradient")
    return None


# == graph harness (shared with torch_checks) ============================================================


def _symbols(out, who):
    """The outputs of ``func`` as a list of single-output Symbols."""
    if isinstance(out, Symbol):
        return [out[i] for i in range(len(out))] if len(out) > 1 else [out]
    if isinstance(out, (list, tuple)) and out and all(isinstance(o, Symbol) for o in out):
        res = []
        for o in out:
            res += _symbols(o, who)
        return res
    raise TypeError(f"{who}: func must return a Symbol or a tuple of Symbols, got {type(out).__name__}")


def _variable(outputs, name, who):
    """The Variable named ``name`` inside the graph of ``outputs``."""
    internals = Group(outputs).get_internals()
    try:
        return internals[name]
    except Exception:
        raise ValueError(f"{who}: params names {name!r}, which is not an argument of the graph func built") from None


def _param_dict(params, who):
    if params is None or (isinstance(params, (tuple, list)) and len(params) == 0):
        return {}
    if not isinstance(params, dict):
        raise TypeError(f"{who}: params must be a dict name -> array (the values of the arguments func creates), "
                        f"got {type(params).__name__}")
    return dict(params)


class _Graph:
    """``func`` applied to input Variables: argument values, head gradients and the analytic side.

    ``inputs`` is a list of ``(name, value)``; an array becomes a Variable of that name, anything else
    (name None) is passed to ``func`` as it is. ``params`` gives the values of the other arguments (and
    optionally auxiliary states) of the graph ``func`` builds.
    """

    def __init__(self, who, func, inputs, params, allow_params=True):
        self.who = who
        params = _param_dict(params, who)
        variables, values = [], {}
        for name, value in inputs:
            if name is None:
                variables.append(value)
                continue
            variables.append(sg.sym.Variable(name))
            values[name] = value
        if not callable(func):
            raise TypeError(f"{who}: func must be callable, got {type(func).__name__}")
        self.outputs = _symbols(func(*variables), who)
        self.sym = Group(self.outputs)
        self.input_names = [n for n, _ in inputs if n is not None]
        self.arg_names = self.sym.list_arguments()
        self.aux_names = self.sym.list_auxiliary_states()
        self.out_names = self.sym.list_outputs()
        created = [n for n in self.arg_names if n not in values]
        clash = [k for k in params if k in values]
        if clash:
            raise ValueError(f"{who}: params names {clash}, which are inputs of func")
        unknown = [k for k in params if k not in self.arg_names and k not in self.aux_names]
        if unknown:
            raise ValueError(f"{who}: params names {unknown}, which are not arguments of the graph func built; "
                             f"its arguments are {self.arg_names}, its auxiliary states {self.aux_names}")
        missing = [n for n in created if n not in params]
        if missing:
            hint = ("pass their values in params (a dict name -> array)" if allow_params else
                    "pass them as inputs: create the Variables in func from the inputs "
                    "(e.g. FullyConnected(x, weight=w, bias=b, ...))")
            raise ValueError(f"{who}: func created arguments {missing} that have no values; {hint}")
        self.param_names = [n for n in self.arg_names if n in params]
        host = {}
        for n in self.arg_names:
            v = values[n] if n in values else params[n]
            if array_context(v) is None and not isinstance(v, (numbers.Number, list)):
                raise TypeError(f"{who}: value of {n!r} must be an array, got {type(v).__name__}")
            host[n] = check_kind(np.array(to_numpy(v), copy=True), who, "input" if n in values else "param", n,
                                 allow_complex=False)
        aux_given = {k: np.array(to_numpy(params[k]), copy=True) for k in self.aux_names if k in params}
        check_finite(host, who, "input")
        _, out_shapes, aux_shapes = check_shapes(self.sym, {**host, **aux_given}, who)
        self.out_shapes = [tuple(s) for s in out_shapes]
        for n, s in zip(self.aux_names, aux_shapes):
            if n not in aux_given:
                aux_given[n] = np.zeros(s, self._float_dtype(host))
        self.values = host
        self.aux = aux_given
        out_types = self.sym.infer_type(**{k: v.dtype for k, v in host.items()})[1] or [None] * len(out_shapes)
        self.out_dtypes = [np.dtype(np.float64 if t is None else t) for t in out_types]
        self.loss_heads = [node.op is not None and node.op.loss_head(node.params) for node, _ in self.sym._outputs]
        where = next((array_context(v) for _, v in inputs if array_context(v) is not None), None)
        self.ctx = where if where is not None and where.device_type != "cpu" else default_context()

    @staticmethod
    def _float_dtype(host):
        floats = [v.dtype for v in host.values() if v.dtype.kind == "f"]
        return np.result_type(*floats) if floats else np.float32

    # -- head gradients ----------------------------------------------------------------------------
    def head_grads(self, y_grad):
        """Chainer's ``y_grad`` as one host array (output dtype) or None (loss head) per output."""
        who, n = self.who, len(self.out_shapes)
        if y_grad is None:
            heads = []
            for k, (s, loss) in enumerate(zip(self.out_shapes, self.loss_heads)):
                if loss:
                    heads.append(None)
                elif int(np.prod(s)) == 1:
                    heads.append(np.ones(s, self.out_dtypes[k]))
                else:
                    shapes = ", ".join(str(x) for x in self.out_shapes)
                    raise ValueError(f"{who}: y_grad can be None only for a loss (outputs of one element or loss "
                                     f"heads); output {self.out_names[k]!r} has shape {s} (all outputs: {shapes})")
            return heads
        gys = list(_as_tuple(y_grad))
        if len(gys) != n:
            raise ValueError(f"{who}: y_grad has {len(gys)} arrays for {n} outputs {self.out_names}")
        heads = []
        for k, g in enumerate(gys):
            if g is None:
                heads.append(None if self.loss_heads[k] else np.zeros(self.out_shapes[k], self.out_dtypes[k]))
                continue
            g = check_kind(np.asarray(to_numpy(g)), who, "y_grad for output", self.out_names[k], allow_complex=False)
            if tuple(g.shape) != self.out_shapes[k]:
                raise ValueError(f"{who}: y_grad for output {self.out_names[k]!r} has shape {tuple(g.shape)}, "
                                 f"expected {self.out_shapes[k]}")
            check_finite({self.out_names[k]: g}, who, "y_grad for output")
            heads.append(g.astype(self.out_dtypes[k]) if self.out_dtypes[k].kind == "f" else g)
        return heads

    def weights(self, heads):
        """Float64 projection weights of the numeric objective (ignored for loss heads)."""
        return [np.zeros(s) if h is None else h.astype(np.float64) for h, s in zip(heads, self.out_shapes)]

    # -- analytic ----------------------------------------------------------------------------------
    def executor(self, names):
        """The graph bound in the dtypes under test on ``self.ctx``, gradients for ``names``, after one forward."""
        ctx = self.ctx
        args = {k: to_device(v, ctx) for k, v in self.values.items()}
        bufs = {k: to_device(np.zeros_like(self.values[k]), ctx) for k in names}
        exe = self.sym.bind(ctx, args, args_grad=bufs, grad_req={k: "write" for k in names},
                            aux_states={k: to_device(v, ctx) for k, v in self.aux.items()})
        exe.forward(is_train=True)
        return exe, bufs

    def vjp(self, exe, bufs, heads):
        exe.backward([None if h is None else to_device(h, self.ctx) for h in heads])
        return {k: np.array(to_numpy(b), copy=True) for k, b in bufs.items()}

    def analytic(self, names, heads):
        exe, bufs = self.executor(names)
        return self.vjp(exe, bufs, heads)

    def assert_no_gradient(self, names):
        """Inputs with no_grads: symgrad.grad must find no gradient (None) for them."""
        names = [n for n in names if n in self.arg_names]
        if not names:
            return
        var = {n: _variable(self.outputs, n, self.who) for n in names}
        for n in names:
            try:
                (g,) = sg.grad(self.outputs, [var[n]])
            except SymgradError:
                continue  # no gradient rule on the path: no gradient flows
            if g is None:
                continue
            msg = (f"{self.who}: input {n!r} (no_grads=True, dtype {self.values[n].dtype}) receives a gradient: "
                   f"symgrad.grad returns {g.name!r} for it, where Chainer requires the gradient of an integer / "
                   "no_grads input to be None; an op on its path is differentiated w.r.t. an index input "
                   "(declare it in no_grad_inputs) or the input should not be in no_grads")
            raise GradientCheckError(msg, check=self.who, arg_name=n, diagnosis="a gradient where none should flow",
                                     names=("backward", "expected"))


class _Reference:
    """The graph bound on host copies in the reference dtype, for finite differences.

    ``ndtype`` None keeps every array's own dtype (no float64 reference). ``weights`` (one float64
    array per output) define the objective ``sum(w * y)`` (loss heads: their implied loss).
    """

    def __init__(self, graph, ndtype, weights, progress=True):
        who = graph.who
        self.graph = graph
        self.dtype = np.dtype(ndtype) if ndtype is not None else np.dtype(
            np.result_type(*[v.dtype for v in graph.values.values() if v.dtype.kind == "f"] or [np.float64]))
        self.objective_weights = weights
        self.progress = progress

        def cast(v):
            return v.astype(ndtype) if (ndtype is not None and v.dtype.kind == "f") else v.copy()

        ref_sym, _, make_objective = projected_objective(graph.sym, weights, who)
        self.ref_sym = ref_sym
        self.args = {k: cast(v) for k, v in graph.values.items()}
        aux = {k: cast(v) for k, v in graph.aux.items()}
        self.exe = ref_sym.bind(cpu(), {k: v.copy() for k, v in self.args.items()}, grad_req="null", aux_states=aux)
        self.ev = _Evaluator(self.exe, None, True, {k: v.copy() for k, v in aux.items()})
        self._check_deterministic()
        base = self.ev.base()
        self.base = [_host64(b) for b in base]
        self.raw_base = [np.array(b, copy=True) for b in base]
        self.n_out = len(graph.out_shapes)
        self.objective = make_objective(self.base)
        self.magnitude = float(self.objective(self.base)[1])
        self.step_description = (f"h = {float(np.cbrt(np.finfo(self.dtype).eps)):.3g} * max(|x|, 1) "
                                 f"in {self.dtype.name}")

    def objective_for(self, weights):
        _, _, make = projected_objective(self.graph.sym, weights, self.graph.who)
        return make(self.base)

    def _check_deterministic(self):
        assert_deterministic(self.exe, True, self.ev.aux_initial, self.graph.who, "the forward of func")

    # -- evaluations -------------------------------------------------------------------------------
    def at(self, names):
        """Every output (float64 copies) after the bound arrays of ``names`` were changed in place."""
        self.ev._reset_aux()
        outs = self.exe.rerun_downstream(list(names)) if self.ev.fast else self.exe.forward(is_train=True)
        return [_host64(o) for o in outs]

    def parts(self, outs):
        """Outputs as seen by the projection: the non-loss outputs (in the reference dtype, whose rounding
        level the kink test allows for), then the loss heads' implied loss."""
        return [outs[k].astype(self.dtype, copy=False) for k in range(self.n_out) if not self.graph.loss_heads[k]] + (
            [np.array(self._loss_only(outs))] if any(self.graph.loss_heads) else [])

    def _loss_only(self, outs):
        if not hasattr(self, "_loss_objective"):
            zero = [np.zeros(s) for s in self.graph.out_shapes]
            self._loss_objective = self.objective_for(zero)
        return self._loss_objective(outs)[0]

    def _part_weights(self, weights=None):
        weights = self.objective_weights if weights is None else weights
        parts = [w for w, loss in zip(weights, self.graph.loss_heads) if not loss]
        return parts + ([1.0] if any(self.graph.loss_heads) else [])

    def directional(self, names, r, eps, detect, diff_rtol=1e-2, kink_names=None, weights=None):
        """Derivative of ``delta -> objective(x + delta r)`` at 0 (``names`` move along ``r[name]``).

        ``weights`` (default: the reference's) project the outputs. Returns ``(value, width)``. With
        ``detect`` a kink raises ``NondifferentiableError`` (localised to an element of ``kink_names``
        when one of them is small enough).
        """
        arrays = {n: self.exe.arg_dict[n] for n in names}
        base = {n: self.args[n].astype(np.float64) for n in names}
        delta = np.zeros((), np.float64)
        weights = self._part_weights(weights)

        def evaluate(_):
            for n in names:
                arrays[n][...] = (base[n] + float(delta) * r[n]).astype(arrays[n].dtype)
            return self.parts(self.at(names))

        try:
            try:
                grads, widths = _numerical(evaluate, [delta], weights, [eps], detect=detect, diff_rtol=diff_rtol,
                                           center_outputs=self.parts(self.base), names=["direction"],
                                           out_names=self.part_names,
                                           lead="non-differentiable point along the random direction r")
            finally:
                for n in names:
                    arrays[n][...] = self.args[n]
        except NondifferentiableError as err:
            raise self._localise_kink(err, kink_names or [], r, eps, diff_rtol) from None
        return float(grads[0]), float(widths[0])

    @property
    def part_names(self):
        names = [n for n, loss in zip(self.graph.out_names, self.graph.loss_heads) if not loss]
        return names + (["implied loss of the loss heads"] if any(self.graph.loss_heads) else [])

    def _localise_kink(self, err, names, r, eps, diff_rtol):
        """Find the input element behind a kink seen along the direction (5-point fits per element)."""
        weights = self._part_weights()
        for n in names:
            if self.args[n].size > MAX_LOCALISE:
                continue
            steps = eps * np.abs(r[n])
            arr = self.exe.arg_dict[n]
            try:
                _numerical(lambda _, n=n: self.parts(self.at([n])), [arr], weights, [steps], detect=True,
                           diff_rtol=diff_rtol, center_outputs=self.parts(self.base), names=[n],
                           out_names=self.part_names)
            except NondifferentiableError as found:
                extra = ["  (found by sampling each element of the inputs in turn; along the random direction:",
                         *["  " + line for line in str(err).split("\n")[1:]], "  )"]
                found.args = (with_reproduction(str(found) + "\n" + "\n".join(extra), found.seed),)
                found.direction_samples = err.samples
                return found
        return err

    def jacobian(self, name, steps):
        """Numeric Jacobian of every output w.r.t. ``name`` by central differences of half-widths ``steps``.

        Returns ``(blocks, widths)``: one float64 ``(output size, input size)`` matrix per output and the
        width of each difference (input size). Cost: 2 partial forwards per element of ``name``.
        """
        arr = self.exe.arg_dict[name]
        blocks = [np.zeros((int(np.prod(s)), arr.size)) for s in self.graph.out_shapes]
        widths = np.ones(arr.size)
        evaluate = lambda _: self.at([name])[: self.n_out]
        bar = _Progress(arr.size, self.progress, f"{self.graph.who}: numeric Jacobian of {name!r}")
        try:
            for _, idx, deltas, outs in _sweep([arr], [steps], evaluate, (-1.0, 1.0)):
                m = int(np.ravel_multi_index(idx, arr.shape)) if arr.ndim else 0
                for k, d in enumerate(_derivatives(deltas, outs)):
                    blocks[k][:, m] = d.ravel()
                widths[m] = deltas[1] - deltas[0]
                bar.update()
        finally:
            bar.close()
        return blocks, widths

    def element_view(self, who, name, analytic, weights, rtol, atol):
        """Per-element central differences of ``sum(weights * y)`` w.r.t. ``name`` against ``analytic``.

        Mismatching elements are examined for kinks (``numeric.find_kinks``) and the diagnosis gets the
        same context as the MXNet-style checkers (kinks, broadcast axes, one-slice probes). Returns the
        GradientCheckError of the comparison, or None when it passes. Cost: 2 partial forwards per
        element (4 more per mismatching element examined for a kink).
        """
        graph = self.graph
        objective = self.objective_for(weights)
        scalar = lambda outs: objective(outs)[0]
        steps = {name: default_steps(self.args[name], self.dtype)}
        numeric, widths = central_differences(self.exe, [name], scalar, steps, is_train=True,
                                              aux_initial=self.ev.aux_initial, progress=self.progress,
                                              desc=f"{who}: per-element check of {name!r}")
        magnitude = objective(self.base)[1]
        a = analytic.astype(np.float64)
        eps_dt = float(np.finfo(analytic.dtype).eps) if analytic.dtype.kind == "f" else 0.0
        noise = rounding_noise(magnitude, widths[name], self.dtype) + NOISE_FACTOR * eps_dt * np.abs(a)
        bad, _, allowed = _violations(a, numeric[name], rtol, atol, False, noise)
        if not bad.any():
            return None
        kinks = find_kinks(self.exe, name, scalar, np.argwhere(bad), steps[name], a, allowed, magnitude=magnitude,
                           numeric_dtype=self.dtype, is_train=True, aux_initial=self.ev.aux_initial)
        heads = [None if loss else w.astype(dt) for w, loss, dt in zip(weights, graph.loss_heads, graph.out_dtypes)]

        def context():
            return _diagnosis_context(graph.sym, graph.ctx, graph.values, graph.aux, heads, name, graph.out_shapes,
                                      kinks)

        try:
            compare(a, numeric[name], rtol, atol, check=who, arg_name=name, names=("analytic", "numeric"),
                    what=f"analytic gradient of {name!r} does not match the numeric gradient",
                    eps=self.step_description, noise=noise, broadcast=False, facts={"dtype": analytic.dtype},
                    context=context)
        except GradientCheckError as err:
            return err
        return None
