"""Numeric differentiation: central differences over a bound executor.

Method (``central_differences``): for every element ``x_i`` of a checked argument, evaluate the scalar
objective at ``x_i + h_i`` and ``x_i - h_i`` and take ``(f+ - f-) / (x_i+ - x_i-)``, where the
denominator is the distance between the two points actually stored (so rounding of the perturbed
value does not bias the quotient). Only the instructions downstream of the perturbed argument are
re-run (``Executor.rerun_downstream``). Cost: 2 partial forward passes per element.

Default step (``default_steps``): ``h_i = cbrt(eps_64) * max(|x_i|, 1)`` ~= 6.1e-6 * max(|x_i|, 1),
which balances truncation error (O(h^2)) and rounding error (O(eps/h)) for a float64 reference (the
machine eps of the dtype the differences are taken in, when that is not float64).

``numeric_grad`` is MXNet's function (objective: the sum of every output); ``check_numeric_gradient``
(in ``mxnet_checks``) evaluates a float64 copy of the symbol with a random projection of its outputs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from symgrad.symbol import Group, Symbol

from ._inputs import check_dtype, check_finite, named_arrays
from .context import to_numpy
from .tolerance import min_numeric_eps

__all__ = [
    "numeric_grad",
    "central_differences",
    "default_steps",
    "resolve_numeric_eps",
    "rounding_noise",
    "register_loss_objective",
    "LOSS_OBJECTIVES",
    "projected_objective",
]

CBRT_EPS64 = float(np.cbrt(np.finfo(np.float64).eps))

#: safety factor of the rounding-noise estimate (rounding in the forward ops, not only in the final
#: sum); 1 already removed every false failure of 900 random float64 checks (6 ops x 150 seeds),
#: 0 left one (a softmax gradient of 4e-7 off by 2e-11, against float64's atol 1e-20)
NOISE_FACTOR = 4.0


def default_steps(x, numeric_dtype=np.float64) -> np.ndarray:
    """Half-steps ``h = cbrt(eps) * max(|x|, 1)`` per element, ``eps`` of the dtype the differences are taken in.

    For a float64 reference ``cbrt(eps) ~= 6.1e-6``; it minimises truncation (h^2) plus rounding (eps/h) error.
    """
    x = np.asarray(x, dtype=np.float64)
    return float(np.cbrt(np.finfo(np.dtype(numeric_dtype)).eps)) * np.maximum(np.abs(x), 1.0)


def resolve_numeric_eps(numeric_eps, dtype, numeric_dtype, who):
    """The fixed finite-difference width for ``dtype`` under test, or None for per-element steps.

    ``numeric_eps`` may be None, a number or a ``{dtype: eps}`` dict (MXNet). A width below
    ``tolerance.min_numeric_eps`` raises ``ValueError``.
    """
    if numeric_eps is None:
        return None
    if isinstance(numeric_eps, dict):
        table = {np.dtype(k): v for k, v in numeric_eps.items()}
        numeric_eps = table.get(np.dtype(dtype))
        if numeric_eps is None:
            return None
    try:
        eps = float(numeric_eps)
    except (TypeError, ValueError):
        raise TypeError(f"{who}: numeric_eps must be a number, a {{dtype: eps}} dict or None, "
                        f"got {numeric_eps!r}") from None
    if not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"{who}: numeric_eps must be a positive number, got {numeric_eps!r}")
    floor = min_numeric_eps(dtype, numeric_dtype)
    if eps < floor:
        raise ValueError(
            f"{who}: numeric_eps={eps:g} is too small for {np.dtype(dtype).name} under test with finite differences "
            f"taken in {np.dtype(numeric_dtype).name} (minimum {floor:.3g}): rounding noise would swamp the "
            "difference quotient. Leave numeric_eps=None to get a step chosen per element for a float64 reference."
        )
    return eps


def rounding_noise(magnitude, widths, numeric_dtype=np.float64) -> np.ndarray:
    """Estimated rounding noise of a difference quotient: ``NOISE_FACTOR * eps * |f| / width``."""
    eps = float(np.finfo(np.dtype(numeric_dtype)).eps)
    return NOISE_FACTOR * eps * float(magnitude) / np.asarray(widths, dtype=np.float64)


class _Evaluator:
    """Evaluates ``objective(outputs)`` at the executor's bound values, resetting aux states each time."""

    def __init__(self, exe, objective, is_train, aux_initial=None):
        self.exe = exe
        self.objective = objective
        self.is_train = bool(is_train)
        self.aux_initial = {k: as_array_like(exe.aux_dict[k], np.asarray(to_numpy(v)))
                            for k, v in (aux_initial or {}).items()}
        self.fast = hasattr(exe, "forward_all") and hasattr(exe, "rerun_downstream")

    def _reset_aux(self):
        aux = self.exe.aux_dict
        for name, value in self.aux_initial.items():
            aux[name][...] = value

    def base(self):
        self._reset_aux()
        outs = self.exe.forward_all(self.is_train) if self.fast else self.exe.forward(is_train=self.is_train)
        return [to_numpy(o) for o in outs]

    def at(self, name):
        self._reset_aux()
        if self.fast:
            outs = self.exe.rerun_downstream([name])
        else:
            outs = self.exe.forward(is_train=self.is_train)
        return self.objective([to_numpy(o) for o in outs])


def central_differences(exe, names, objective: Callable, steps: dict, *, is_train=True, aux_initial=None):
    """Central-difference gradients of ``objective(outputs) -> float`` w.r.t. the bound arguments ``names``.

    Args:
        exe: a bound executor; its argument arrays are perturbed in place and restored.
        names: arguments to differentiate.
        objective: maps the list of outputs (numpy arrays) to a float.
        steps: ``{name: half-step array}`` (float64, the argument's shape).
        is_train: forward mode of every evaluation.
        aux_initial: ``{aux name: array}`` written back into the executor before every evaluation.

    Returns:
        ``({name: float64 gradient}, {name: float64 width of each difference})``. Arguments of integer
        dtype get zero gradients.

    Raises:
        ValueError: when a step vanishes in the argument's dtype (``x + h == x - h``).
    """
    ev = _Evaluator(exe, objective, is_train, aux_initial)
    ev.base()
    grads, widths = {}, {}
    args = exe.arg_dict
    for name in names:
        arr = args[name]
        g = np.zeros(arr.shape, np.float64)
        w = np.ones(arr.shape, np.float64)
        grads[name], widths[name] = g, w
        if np.dtype(arr.dtype).kind != "f":
            continue
        orig = np.array(to_numpy(arr), copy=True)
        x64 = orig.astype(np.float64)
        h = np.broadcast_to(np.asarray(steps[name], np.float64), arr.shape)
        cast = np.dtype(arr.dtype).type
        try:
            for idx in np.ndindex(*arr.shape):
                x_plus, x_minus = cast(x64[idx] + h[idx]), cast(x64[idx] - h[idx])
                width = float(x_plus) - float(x_minus)
                if width <= 0:
                    raise ValueError(
                        f"numeric gradient: the step {h[idx]:.3g} vanishes for argument {name!r} at index {idx} "
                        f"(value {x64[idx]:.8g}) in {np.dtype(arr.dtype).name}; use a larger eps"
                    )
                arr[idx] = x_plus
                f_plus = ev.at(name)
                arr[idx] = x_minus
                f_minus = ev.at(name)
                arr[idx] = orig[idx]
                g[idx] = (f_plus - f_minus) / width
                w[idx] = width
        finally:
            arr[...] = as_array_like(arr, orig)
    ev._reset_aux()
    return grads, widths


def as_array_like(like, host):
    """``host`` moved to the array module of ``like`` (numpy or CuPy)."""
    mod = type(like).__module__.split(".")[0]
    if mod == "numpy":
        return host
    import importlib

    return importlib.import_module(mod).asarray(host)


# -- objectives -------------------------------------------------------------------------------------


def _sum_objective(outputs):
    return float(sum(np.sum(np.asarray(o, np.float64)) for o in outputs))


def numeric_grad(executor, location, aux_states=None, eps=1e-4, use_forward_train=True, dtype=np.float32):
    """Numeric gradient of the sum of every output of ``executor`` by central differences (MXNet's ``numeric_grad``).

    The values of ``location`` (a dict name -> array, or a list in ``list_arguments()`` order; a dict may
    name only some arguments) are cast to ``dtype`` and written into the executor's arguments; the
    gradient is computed for each of them (zeros for integer arrays). ``eps`` is the full width of the
    difference (``x +- eps/2``, as MXNet), ``None`` picks ``h = cbrt(eps) * max(|x|, 1)`` per element
    (``x +- h``, ``eps`` the machine epsilon of the executor's dtype). Auxiliary states are reset to
    ``aux_states`` before every evaluation. Differences are accumulated in float64; the executor
    computes in its own dtype.

    Returns:
        ``{name: gradient}`` in ``dtype``.

    >>> import numpy as np, symgrad as sg
    >>> x = sg.sym.Variable("x")
    >>> exe = sg.sym.square(x).simple_bind(sg.cpu(), x=(3,), type_dict={"x": np.float64})
    >>> numeric_grad(exe, {"x": np.array([1.0, 2.0, 3.0])}, eps=None, dtype=np.float64)["x"].round(6)
    array([2., 4., 6.])
    """
    who = "numeric_grad"
    dtype = check_dtype(dtype, who)
    arg_names = list(executor.arg_dict)
    if isinstance(location, dict):
        unknown = [k for k in location if k not in arg_names]
        if unknown:
            raise ValueError(f"{who}: location names {unknown}, which are not arguments; arguments are {arg_names}")
        loc = named_arrays(location, list(location), who, "argument")
    else:
        loc = named_arrays(location, arg_names, who, "argument")
    check_finite(loc, who)
    args = executor.arg_dict
    for k, v in loc.items():
        if tuple(v.shape) != tuple(args[k].shape):
            raise ValueError(f"{who}: argument {k!r} has shape {tuple(v.shape)}, expected {tuple(args[k].shape)}")
    for k, v in loc.items():
        args[k][...] = as_array_like(args[k], v.astype(dtype) if v.dtype.kind == "f" else v)
    aux = None
    if aux_states is not None:
        aux_names = list(executor.aux_dict)
        if isinstance(aux_states, dict):
            unknown = [k for k in aux_states if k not in aux_names]
            if unknown:
                raise ValueError(f"{who}: aux_states names {unknown}, which are not auxiliary states; "
                                 f"auxiliary states are {aux_names}")
            aux_names = list(aux_states)
        aux = named_arrays(aux_states, aux_names, who, "auxiliary state", "aux_states")
        aux = {k: as_array_like(executor.aux_dict[k], v.astype(executor.aux_dict[k].dtype)) for k, v in aux.items()}
    if eps is None:
        steps = {k: default_steps(to_numpy(args[k]), args[k].dtype) for k in loc}
    else:
        eps = float(eps)
        if not eps > 0:
            raise ValueError(f"{who}: eps must be positive, got {eps!r}")
        steps = {k: np.full(np.shape(args[k]), eps / 2.0) for k in loc}
    grads, _ = central_differences(executor, list(loc), _sum_objective, steps, is_train=use_forward_train,
                                   aux_initial=aux)
    return {k: g.astype(dtype) for k, g in grads.items()}


# -- loss heads ---------------------------------------------------------------------------------------
#
# A loss head (SoftmaxOutput, MakeLoss) ignores its head gradient: its backward is the gradient of an
# implied scalar loss. To check it numerically the objective must contain that loss, not a projection
# of the head's output. A factory gets the node's params, its inputs and output at the base point (float64
# numpy) and returns ``loss(inputs, output) -> (value, magnitude)``; constants (targets, masks, counts)
# are frozen at the base point.

LOSS_OBJECTIVES: dict[str, Callable] = {}


def register_loss_objective(op_name: str, factory: Callable | None = None):
    """Register the implied loss of a loss-head op (an op name, or a Custom op's ``op_type``).

    Usable as a decorator. ``factory(params, inputs, output) -> loss(inputs, output) -> (value, magnitude)``.
    """
    def do(f):
        LOSS_OBJECTIVES[op_name] = f
        return f

    return do(factory) if factory is not None else do


def _rows3(x, params):
    """Softmax layout of SoftmaxOutput as (A, classes, B), softmax over axis 1."""
    if params.get("multi_output"):
        return x.reshape(x.shape[0], x.shape[1], -1)
    if params.get("preserve_shape"):
        return x.reshape(-1, x.shape[-1])[:, :, None]
    return x.reshape(x.shape[0], -1)[:, :, None]


@register_loss_objective("SoftmaxOutput")
def _softmax_output_loss(params, inputs, output):
    """L = sum_rows c * (logsumexp(z) - t . z), so dL/dz = c * (softmax(z) - t) (MXNet's backward).

    t is the (smoothed) one-hot label or the probability label, c folds grad_scale, use_ignore and
    normalization exactly as MXNet's SoftmaxOutput backward.
    """
    z, label = inputs[0], inputs[1]
    gs = float(params.get("grad_scale", 1.0))
    z3 = _rows3(z, params)
    if label.shape == z.shape:  # probability labels: grad = (p - label) * grad_scale
        t = _rows3(label, params)
        c = np.full((z3.shape[0], 1, z3.shape[2]), gs)
    else:
        multi = bool(params.get("multi_output"))
        k = z3.shape[1]
        lab = label.reshape(z.shape[0], -1) if multi else label.reshape(-1, 1)
        lab_int = lab.astype(np.int64)
        t = (np.arange(k).reshape(1, k, 1) == lab_int[:, None, :]).astype(np.float64)
        alpha = float(params.get("smooth_alpha", 0.0))
        if alpha:
            t = t * (1.0 - alpha - alpha / (k - 1)) + alpha / (k - 1)
        ignored = lab_int == int(params.get("ignore_label", -1.0))
        spatial = z3.shape[2] if multi else 1
        norm = params.get("normalization", "null")
        if norm == "batch":
            scale = gs / lab.shape[0] / spatial
        elif norm == "valid":
            scale = gs / max(int(lab.size - int(ignored.sum())), 1)
        else:
            scale = gs / spatial
        mask = (~ignored).astype(np.float64) if params.get("use_ignore") else np.ones(lab.shape)
        c = scale * mask[:, None, :]

    def loss(ins, out):
        zz = _rows3(np.asarray(ins[0], np.float64), params)
        m = zz.max(axis=1, keepdims=True)
        lse = m + np.log(np.exp(zz - m).sum(axis=1, keepdims=True))
        terms = c * (lse - (t * zz).sum(axis=1, keepdims=True))
        return float(terms.sum()), float(np.abs(c * lse).sum() + np.abs(c * t * zz).sum())

    return loss


@register_loss_objective("MakeLoss")
def _make_loss_loss(params, inputs, output):
    """L = scale * sum(data), scale = grad_scale (/ batch size, / count(data > valid_thresh) at the base point)."""
    data = inputs[0]
    gs = float(params.get("grad_scale", 1.0))
    norm = params.get("normalization", "null")
    if norm == "batch":
        scale = gs / data.shape[0]
    elif norm == "valid":
        scale = gs / max(int((data > float(params.get("valid_thresh", 0.0))).sum()), 1)
    else:
        scale = gs

    def loss(ins, out):
        d = np.asarray(ins[0], np.float64)
        return float(scale * d.sum()), float(abs(scale) * np.abs(d).sum())

    return loss


def _loss_key(node):
    op_type = node.params.get("op_type") if isinstance(node.params, dict) else None
    if op_type is not None and op_type in LOSS_OBJECTIVES:
        return op_type
    return node.op.name


def projected_objective(sym, weights, who="check_numeric_gradient"):
    """The symbol to evaluate and the objective of a numeric gradient check.

    Every output ``k`` that is not a loss head contributes ``sum(w_k * out_k)`` (``weights[k]``); a loss
    head contributes its implied loss (``LOSS_OBJECTIVES``), which needs the head's inputs: they are
    appended as extra outputs of the returned symbol.

    Returns:
        ``(ref_sym, loss_heads, make_objective)``: ``loss_heads[k]`` is True for loss-head outputs;
        ``make_objective(base_outputs)`` freezes the loss constants at the base point and returns
        ``objective(outputs) -> (value, magnitude)``.
    """
    heads = list(sym._outputs)
    n = len(heads)
    extras, plan = [], []
    loss_heads = []
    for k, (node, _) in enumerate(heads):
        is_loss = node.op is not None and node.op.loss_head(node.params)
        loss_heads.append(is_loss)
        if not is_loss:
            plan.append(None)
            continue
        key = _loss_key(node)
        if key not in LOSS_OBJECTIVES:
            raise NotImplementedError(
                f"{who}: output {sym.list_outputs()[k]!r} comes from the loss head {node.op.name} {node.name!r}, "
                f"whose backward ignores the head gradient, and its implied loss is unknown; register it with "
                f"test_utils.numeric.register_loss_objective({key!r}, factory) (known: {sorted(LOSS_OBJECTIVES)})"
            )
        start = n + len(extras)
        extras.extend(node.inputs)
        plan.append((key, node.params, slice(start, start + len(node.inputs))))
    ref_sym = sym if not extras else Group([sym, Symbol(extras)])

    def make_objective(base_outputs):
        losses = []
        for k, p in enumerate(plan):
            if p is None:
                losses.append(None)
                continue
            key, params, sl = p
            losses.append((LOSS_OBJECTIVES[key](params, base_outputs[sl], base_outputs[k]), sl))

        def objective(outputs):
            total, mag = 0.0, 0.0
            for k in range(n):
                out = np.asarray(outputs[k], np.float64)
                if losses[k] is None:
                    terms = weights[k] * out
                    total += float(terms.sum())
                    mag += float(np.abs(terms).sum())
                else:
                    fn, sl = losses[k]
                    v, m = fn(outputs[sl], out)
                    total += v
                    mag += m
            return total, mag

        return objective

    return ref_sym, loss_heads, make_objective
