"""Neural-network layers: activations, normalisation, Dropout, Embedding, SequenceMask.

Gradients are Symbols built from other ops (so second order works) except
BatchNorm's, which is the fused hidden ``_backward_BatchNorm``. Normalisation
layers recompute their statistics from ``data`` inside the gradient graph
instead of reading their own ``mean``/``std`` outputs: MXNet blocks gradients
through those outputs, and a second-order pass must still see how the
statistics depend on ``data``.

Semantics follow MXNet 1.9 (src/operator/nn/*, leaky_relu-inl.h,
instance_norm-inl.h, l2_normalization-inl.h, sequence_mask-inl.h,
tensor/indexing_op.h); where this module differs on purpose it says so.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import (
    Param,
    acc_dtype,
    check_float,
    data_axis,
    elementwise,
    expect_input_shape,
    float_inputs,
    masked,
    normalize_axis,
    register,
    same_shape,
    wait_for_first_input,
)
from .elemwise import adjoint_pair
from .sequence import sequence_inputs, sequence_shape


def _channel_shape(ndim, axis, size):
    """Broadcast shape of a per-channel vector: ones except ``size`` at ``axis``."""
    shape = [1] * ndim
    shape[axis] = size
    return tuple(shape)


#: BatchNorm's per-channel inputs after ``data`` (BatchNorm_v1's too): the affine pair, then the moving statistics
BN_VECTORS = ("gamma", "beta", "moving_mean", "moving_var")


def check_vectors(in_shapes, names, want, why, where):
    """A normalisation layer's parameter vectors, inputs 1, 2, ... named ``names``, must have the shape ``want``
    where it is known; ``why`` says in the error what one entry stands for."""
    for i, name in enumerate(names, 1):
        if in_shapes[i] is not None and tuple(in_shapes[i]) != want:
            raise ShapeError(f"{where}: input {name!r} has shape {tuple(in_shapes[i])}, expected {want} ({why})")


# ----------------------------------------------------------------------------
# Activation
# ----------------------------------------------------------------------------

_ACT = ("relu", "sigmoid", "tanh", "softrelu", "softsign")


def _act_fwd(xp, x, act_type):
    if act_type == "relu":
        return xp.maximum(x, 0)
    if act_type == "sigmoid":
        from .elemwise import stable_sigmoid

        return stable_sigmoid(xp, x)
    if act_type == "tanh":
        return xp.tanh(x)
    if act_type == "softrelu":
        # log(1 + e^x), stable: max(x, 0) + log1p(e^-|x|)
        return (xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))).astype(x.dtype, copy=False)
    return x / (1 + xp.abs(x))  # softsign


def _act_grad(F, n, g):
    x, y, gy = n.inputs[0], n.outputs[0], g[0]
    act = n.params["act_type"]
    if act == "relu":
        return [F._backward_relu(gy, x)]  # gy * (x > 0): MXNet takes 0 at x = 0
    # the elementwise ops' fused backwards (one instruction each; elemwise.py holds their derivations)
    if act == "sigmoid":
        return [F._backward_sigmoid(gy, y)]  # s (1 - s)
    if act == "tanh":
        return [F._backward_tanh(gy, y)]  # 1 - tanh^2
    if act == "softrelu":
        return [gy * F.sigmoid(x)]  # d log(1+e^x) = sigmoid(x)
    return [F._backward_softsign(gy, x)]  # softsign' = 1 / (1 + |x|)^2


def _act_decisions(xp, x, act_type):
    # relu's mask x > 0 (its gradient's); the other activations are smooth
    return elementwise(0, choice=x > 0, value=x) if act_type == "relu" else []


def _act_pinned(xp, choices, x, act_type):
    # relu on its recorded mask: x where the base point had x > 0, else 0 (NaN passes, as forward's maximum(x, 0))
    if act_type != "relu":
        return _act_fwd(xp, x, act_type)
    return masked(xp, x, choices[0])


register(
    "Activation",
    params={"act_type": Param("str", choices=_ACT)},
    forward=_act_fwd,
    infer_shape=same_shape,
    infer_type=float_inputs("data"),
    gradient=_act_grad,
    decisions=_act_decisions,
    pinned=_act_pinned,
    doc="Elementwise activation: relu, sigmoid, tanh, softrelu or softsign.",
)

# relu's backward as one op (instead of _greater_scalar + elemwise_mul: one instruction and
# one temporary less). Linear in ograd with a piecewise-constant mask: its own gradient is
# itself w.r.t. ograd and zero w.r.t. data.
register(
    "_backward_relu",
    inputs=("ograd", "data"),
    forward=lambda xp, g, x: g * (x > 0),
    infer_shape=same_shape,
    gradient=lambda F, n, g: [F._backward_relu(g[0], n.inputs[1]), None],
    doc="Hidden: ograd * (data > 0), the backward of Activation(act_type='relu').",
)


# ----------------------------------------------------------------------------
# LeakyReLU: leaky, prelu, rrelu, elu, selu, gelu
# ----------------------------------------------------------------------------

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_LAMBDA = 1.0507009873554804934193349852946
_LEAKY = ("rrelu", "leaky", "prelu", "elu", "selu", "gelu")


def _norm_cdf_fwd(xp, x):
    """Phi(x) = P(N(0,1) <= x) = erfc(-x / sqrt 2) / 2, from elemwise's float64 erf/erfc of |x|
    (erfc(-a) = 2 - erfc(a)), so both tails keep their relative precision."""
    from .elemwise import erf_erfc

    z = x.astype(np.float64) * (1.0 / math.sqrt(2.0))
    _, erfc_abs = erf_erfc(xp, z)
    return xp.where(z < 0, 0.5 * erfc_abs, 1.0 - 0.5 * erfc_abs).astype(x.dtype, copy=False)


def _norm_pdf(F, x):
    """phi(x) = e^(-x^2/2) / sqrt(2 pi), as a Symbol."""
    return F.exp(F.square(x) * -0.5) * (1.0 / math.sqrt(2.0 * math.pi))


register(
    "_norm_cdf",
    forward=_norm_cdf_fwd,
    infer_shape=same_shape,
    gradient=lambda F, n, g: [g[0] * _norm_pdf(F, n.inputs[0])],  # Phi' = phi
    doc="Standard normal CDF (GELU's erf part); hidden.",
)


def _prelu_gamma_shape(gshape, dshape, where):
    """Where ``gamma`` sits in ``data``'s shape (MXNet's expand_shape): its trailing
    dims align with data axes 0-1 from the right, each equal or 1; other axes 1."""
    out = [1] * len(dshape)
    s = len(gshape) - 1
    for i in range(len(dshape) - 1, -1, -1):
        if s >= 0 and i <= 1 and (dshape[i] == gshape[s] or gshape[s] == 1):
            out[i] = gshape[s]
            s -= 1
    if s != -1:
        c = dshape[1] if len(dshape) > 1 else dshape[0]
        raise ShapeError(
            f"{where}: input 'gamma' has shape {tuple(gshape)}, which cannot broadcast to data {tuple(dshape)}; "
            f"expected {(c,)} (one slope per channel of axis 1) or (1,)"
        )
    return tuple(out)


def _leaky_inputs(params):
    return ["data", "gamma"] if params["act_type"] == "prelu" else ["data"]


def _leaky_nout(params):
    return 2 if params["act_type"] == "rrelu" else 1


@wait_for_first_input
def _leaky_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    ins = list(in_shapes)
    if params["act_type"] == "prelu":
        if len(x) == 0:
            raise ShapeError(f"{where}: prelu needs at least 1-d data")
        if ins[1] is None:
            ins[1] = (x[1],) if len(x) > 1 else (x[0],)
        _prelu_gamma_shape(ins[1], x, where)
    return ins, [x] * len(out_shapes)


def _leaky_fwd(xp, x, gamma=None, *, is_train, act_type, slope, lower_bound, upper_bound):
    """A tuple of outputs ((output,), or (output, mask) for rrelu: num_outputs depends on act_type)."""
    out = _leaky_compute(xp, x, gamma, is_train, act_type, slope, lower_bound, upper_bound)
    return out if isinstance(out, tuple) else (out,)


def _leaky_pinned(xp, choices, x, gamma=None, *, is_train, act_type, slope, lower_bound, upper_bound):
    # each branch on the side x had at the base point (choices[0] = x > 0 there): elu's e^x - 1 is evaluated
    # at positive x too where the base point was negative
    pos = choices[0] if act_type != "gelu" else None
    out = _leaky_compute(xp, x, gamma, is_train, act_type, slope, lower_bound, upper_bound, pos=pos)
    return out if isinstance(out, tuple) else (out,)


def _leaky_compute(xp, x, gamma, is_train, act_type, slope, lower_bound, upper_bound, pos=None):
    pinned = pos is not None
    pos = x > 0 if pos is None else pos
    if act_type == "leaky":
        return xp.where(pos, x, x * slope).astype(x.dtype, copy=False)
    if act_type == "prelu":
        g = gamma.reshape(_prelu_gamma_shape(gamma.shape, x.shape, "LeakyReLU"))
        return xp.where(pos, x, x * g).astype(x.dtype, copy=False)
    if act_type == "rrelu":
        if is_train:  # one random slope per element, drawn in [lower, upper) (MXNet's mask output)
            mask = xp.random.uniform(lower_bound, upper_bound, x.shape).astype(x.dtype)
        else:  # inference: the mean slope (MXNet leaves the mask output unwritten here)
            mask = xp.full(x.shape, (lower_bound + upper_bound) / 2.0, dtype=x.dtype)
        return xp.where(pos, x, x * mask).astype(x.dtype, copy=False), mask
    if act_type in ("elu", "selu"):
        # e^x - 1 on the negative side (no overflow for large x)
        neg = xp.expm1(xp.where(pos, 0, x) if pinned else xp.minimum(x, 0))
        if act_type == "elu":
            return xp.where(pos, x, neg * slope).astype(x.dtype, copy=False)
        return (xp.where(pos, x, neg * _SELU_ALPHA) * _SELU_LAMBDA).astype(x.dtype, copy=False)
    # gelu (MXNet 1.9 uses the erf form, not the tanh approximation): x Phi(x)
    return x * _norm_cdf_fwd(xp, x)


def _leaky_grad(F, n, g):
    x, y, gy = n.inputs[0], n.outputs[0], g[0]
    act = n.params["act_type"]
    pos = x > 0.0  # 0/1, zero gradient
    neg = 1.0 - pos
    if act == "leaky":  # y' = 1 (x > 0) else slope
        return [gy * (pos + neg * n.params["slope"])]
    if act == "prelu":
        # y = x (x > 0) else gamma x:  dy/dx = 1 or gamma,  dy/dgamma = 0 or x (summed to gamma's shape)
        gamma = n.inputs[1]
        gb = F._prelu_broadcast(gamma, x)
        return [gy * (pos + neg * gb), F._prelu_reduce(gy * (x * neg), gamma)]
    if act == "rrelu":  # the slopes drawn in forward (the 'mask' output) are constants
        return [gy * (pos + neg * n.outputs[1])]
    if act == "elu":  # y = s (e^x - 1) for x <= 0:  y' = s e^x = y + s
        return [gy * (pos + neg * (y + n.params["slope"]))]
    if act == "selu":
        # y = L x (x > 0) else L a (e^x - 1):  y' = L, or L a e^x = y + L a.
        # (MXNet 1.9's selu_grad uses L (a + y) here, which is not the derivative; we use the derivative.)
        return [gy * (pos * _SELU_LAMBDA + neg * (y + _SELU_LAMBDA * _SELU_ALPHA))]
    # gelu: y = x Phi(x):  y' = Phi(x) + x phi(x)
    return [gy * (F._norm_cdf(x) + x * _norm_pdf(F, x))]


def _leaky_decisions(xp, x, gamma=None, *, act_type, slope, lower_bound, upper_bound):
    # every branch but gelu's switches at x > 0 (the ``pos`` of forward and gradient); gelu is smooth
    return [] if act_type == "gelu" else elementwise(0, choice=x > 0, value=x)


register(
    "LeakyReLU",
    inputs=_leaky_inputs,
    params={
        "act_type": Param("str", "leaky", choices=_LEAKY),
        "slope": Param("float", 0.25),
        "lower_bound": Param("float", 0.125),
        "upper_bound": Param("float", 0.334),
    },
    num_outputs=_leaky_nout,
    output_names=("output", "mask"),
    forward=_leaky_fwd,
    infer_shape=_leaky_shape,
    infer_type=float_inputs("data"),
    gradient=_leaky_grad,
    decisions=_leaky_decisions,
    pinned=_leaky_pinned,
    needs_is_train=True,
    doc="Leaky ReLU family: leaky (slope), prelu (learned per-channel gamma), rrelu (random slope in "
    "training, the mean slope in inference; outputs 'output' and 'mask'), elu, selu, gelu (erf form).",
)


def _prelu_bcast_fwd(xp, gamma, like):
    g = gamma.reshape(_prelu_gamma_shape(gamma.shape, like.shape, "LeakyReLU"))
    return xp.broadcast_to(g, like.shape)


def _prelu_reduce_fwd(xp, a, gamma):
    gshape = _prelu_gamma_shape(gamma.shape, a.shape, "LeakyReLU")
    axes = tuple(i for i, d in enumerate(gshape) if d == 1 and a.shape[i] != 1)
    return a.sum(axis=axes, keepdims=True).reshape(gamma.shape)


# broadcasting is linear; its adjoint sums back to gamma's shape (and the other way round)
adjoint_pair(
    ("_prelu_broadcast", "_prelu_reduce"),
    (_prelu_bcast_fwd, _prelu_reduce_fwd),
    (
        "Broadcast PReLU's gamma to the data shape (channel on axis 1); hidden.",
        "Sum a data-shaped array down to PReLU's gamma shape (adjoint of _prelu_broadcast); hidden.",
    ),
)


# ----------------------------------------------------------------------------
# BatchNorm (fused backward)
# ----------------------------------------------------------------------------

_BN_PARAMS = {
    "eps": Param("float", 1e-3),
    "momentum": Param("float", 0.9),
    "fix_gamma": Param("bool", True),
    "use_global_stats": Param("bool", False),
    "output_mean_var": Param("bool", False),
    "axis": Param("int", 1),
    "cudnn_off": Param("bool", False),
    "min_calib_range": Param("float", None),
    "max_calib_range": Param("float", None),
}
#: the parameters of every BatchNorm variant (_contrib_SyncBatchNorm, BatchNorm_v1): BatchNorm's without the axis
#: and the backend ones
BN_COMMON_PARAMS = {k: _BN_PARAMS[k] for k in ("eps", "momentum", "fix_gamma", "use_global_stats", "output_mean_var")}


def _bn_view(x, axis):
    """``x`` as ``(before, C, after)``: per-channel sums become a sum over a contiguous last axis
    then over the first (numpy's fast pairwise loops), and per-channel vectors broadcast as ``(C, 1)``."""
    ax = normalize_axis(axis, x.ndim, "BatchNorm")
    return x.reshape(math.prod(x.shape[:ax]), x.shape[ax], math.prod(x.shape[ax + 1 :]))


def _channel_sum(a3):
    """Per-channel sum of a ``(before, C, after)`` array: pairwise along the contiguous last axis (numpy's
    accurate loop; a BLAS dot accumulates long rows in a few float32 lanes and loses digits)."""
    return a3.sum(axis=2).sum(axis=0)


def _invstd(xp, var, eps):
    """1/sqrt(var + eps); 0 where var + eps == 0 (MXNet's guard against 0/0)."""
    ve = var + eps
    ok = ve > 0
    return xp.where(ok, 1.0 / xp.sqrt(xp.where(ok, ve, 1.0)), 0.0).astype(var.dtype, copy=False)


def moving_update(mmean, mvar, mean, var, momentum):
    """The moving statistics after a training batch: m * momentum + batch * (1 - momentum) each, in m's dtype."""
    return (
        mmean * momentum + mean.astype(mmean.dtype) * (1 - momentum),
        mvar * momentum + var.astype(mvar.dtype) * (1 - momentum),
    )


def _bn_fwd(
    xp, x, gamma, beta, mmean, mvar, *, is_train, eps, momentum, fix_gamma, use_global_stats, output_mean_var, axis, **_
):
    """Outputs (y, mean, invstd): like MXNet, the third output ('var') holds 1/sqrt(var + eps).

    In training (and not use_global_stats) the moving statistics are updated here, with the
    biased batch variance; MXNet 1.9's CPU kernels do the same update in backward.

    Passes over the data: the mean, the centred copy ``d = x - mean``, the variance (``d * d``
    summed), then ``y = d * scale + beta`` in place in ``d``.
    """
    acc = acc_dtype(x.dtype)
    x3 = _bn_view(x.astype(acc, copy=False), axis)
    count = max(x3.shape[0] * x3.shape[2], 1)  # elements per channel
    if is_train and not use_global_stats and x.size == 0:
        # an empty batch has no statistics: the moving ones stay as they are (their mean would be 0/0 =
        # NaN and poison every later inference); the batch mean/var outputs are 0 for an empty y
        mean = xp.zeros(x3.shape[1], dtype=acc)  # one per channel
        var = xp.zeros_like(mean)
        d = x3 - mean[:, None]
        updates = (None, None)
    elif is_train and not use_global_stats:
        mean = _channel_sum(x3) / acc.type(count)
        d = x3 - mean[:, None]
        var = _channel_sum(d * d) / acc.type(count)  # biased batch variance
        updates = moving_update(mmean, mvar, mean, var, momentum)
    else:
        mean, var = mmean.astype(acc, copy=False), mvar.astype(acc, copy=False)
        d = x3 - mean[:, None]
        updates = (None, None)
    invstd = _invstd(xp, var, eps)
    scale = invstd if fix_gamma else gamma.astype(acc, copy=False) * invstd
    d *= scale[:, None]
    d += beta.astype(acc, copy=False)[:, None]
    outs = (
        d.reshape(x.shape).astype(x.dtype, copy=False),
        mean.astype(acc, copy=False),
        invstd.astype(acc, copy=False),
    )
    return outs, updates


@wait_for_first_input
def _bn_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    ax = data_axis(x, params["axis"], where)
    c = (x[ax],)
    check_vectors(in_shapes, BN_VECTORS, c, f"channels on axis {ax}", where)
    return [x, c, c, c, c], [x, c, c]


def bn_type(params, in_types, out_types, where):
    """data float16/32/64; gamma, beta and the moving statistics share one dtype, float32 for
    float16 data (MXNet/cuDNN), or the data dtype; the mean/var outputs use the float32/data one."""
    dt = in_types[0] if in_types[0] is not None else out_types[0]
    if dt is None:
        return in_types, out_types
    check_float(where, "data", dt)
    dt = np.dtype(dt)
    acc = acc_dtype(dt)
    known = [np.dtype(t) for t in in_types[1:] if t is not None]
    pdt = known[0] if known else acc
    for name, t in zip(BN_VECTORS, in_types[1:]):
        if t is not None and (np.dtype(t) != pdt or pdt not in (acc, dt)):
            want = pdt if pdt in (acc, dt) else acc
            raise TypeError(
                f"{where}: input {name!r} has dtype {np.dtype(t)}, expected {want} (for {dt} data; "
                f"{', '.join(BN_VECTORS)} share one dtype)"
            )
    return [dt, pdt, pdt, pdt, pdt], [dt, acc, acc]


def _bn_grad(F, n, g):
    x, gamma = n.inputs[0], n.inputs[1]
    mean, invstd = n.outputs[1], n.outputs[2]
    p = {k: n.params[k] for k in ("eps", "fix_gamma", "use_global_stats", "axis")}
    dx, dgamma, dbeta = F._backward_BatchNorm(g[0], x, gamma, mean, invstd, **p)
    return [dx, dgamma, dbeta, None, None]


# what every BatchNorm variant shares (BatchNorm_v1 in norm.py too): inputs, moving statistics (updated in
# training), outputs
BN_SPEC: dict[str, Any] = dict(
    inputs=("data", "gamma", "beta"),
    aux=("moving_mean", "moving_var"),
    num_outputs=3,
    num_visible=lambda p: 3 if p["output_mean_var"] else 1,
    output_names=("output", "mean", "var"),
    infer_type=bn_type,
    needs_is_train=True,
    mutates_aux=True,
)

register(
    "BatchNorm",
    params=_BN_PARAMS,
    forward=_bn_fwd,
    infer_shape=_bn_shape,
    gradient=_bn_grad,
    **BN_SPEC,
    doc="Batch normalisation over every axis but ``axis``; fix_gamma defaults to True as in MXNet. "
    "With output_mean_var the outputs are (y, batch mean, 1/sqrt(batch var + eps)), as MXNet's.",
)


def _bn_relu_fwd(xp, x, gamma, beta, mmean, mvar, **p):
    (y, mean, invstd), updates = _bn_fwd(xp, x, gamma, beta, mmean, mvar, **p)
    return (xp.maximum(y, 0).astype(y.dtype, copy=False), mean, invstd), updates


def _bn_relu_grad(F, n, g):
    # y = relu(bn(x)): the head gradient passes where y > 0 (bn's output > 0), then BatchNorm's rule
    masked = F._backward_relu(g[0], n.outputs[0])
    return _bn_grad(F, n, [masked] + list(g[1:]))


register(
    "_contrib_BatchNormWithReLU",
    params=_BN_PARAMS,
    forward=_bn_relu_fwd,
    infer_shape=_bn_shape,
    gradient=_bn_relu_grad,
    **BN_SPEC,
    doc="relu(BatchNorm(x)) in one op (MXNet's oneDNN fusion; the statistics outputs are BatchNorm's).",
)


def _sync_bn_prepare(params, name):
    if params["ndev"] != 1:
        raise ParamError(
            f"_contrib_SyncBatchNorm {name!r}: parameter 'ndev'={params['ndev']}: symgrad runs one "
            "device per executor, so statistics can only be synchronised over ndev=1 (plain BatchNorm)"
        )
    return params


def _with_channel_axis(rule):
    """A BatchNorm rule for SyncBatchNorm, whose channels are always on axis 1."""

    def wrapped(params, *args, **kwargs):
        return rule({**params, "axis": 1}, *args, **kwargs)

    return wrapped


def _sync_bn_grad(F, n, g):
    x, gamma = n.inputs[0], n.inputs[1]
    p = {k: n.params[k] for k in ("eps", "fix_gamma", "use_global_stats")}
    dx, dgamma, dbeta = F._backward_BatchNorm(g[0], x, gamma, n.outputs[1], n.outputs[2], axis=1, **p)
    return [dx, dgamma, dbeta, None, None]


register(
    "_contrib_SyncBatchNorm",
    params=BN_COMMON_PARAMS | {"ndev": Param("int", 1), "key": Param("str")},
    prepare=_sync_bn_prepare,
    forward=lambda xp, *arrays, ndev, key, **p: _bn_fwd(xp, *arrays, axis=1, **p),
    infer_shape=_with_channel_axis(_bn_shape),
    gradient=_sync_bn_grad,
    **BN_SPEC,
    doc="Cross-device BatchNorm; with symgrad's one device per executor (ndev=1) it is BatchNorm on axis 1.",
)


def _bn_backward_fwd(xp, gy, x, gamma, mean, invstd, *, is_train, eps, fix_gamma, use_global_stats, axis):
    """Fused VJP of BatchNorm.

    With xhat = (x - mu) * r, r = 1/sqrt(var + eps) (the saved 'var' output), y = gamma xhat + beta,
    N elements per channel:
      dbeta = sum(gy),  dgamma = sum(gy xhat) (0 with fix_gamma),  dxhat = gy gamma
      batch statistics:  dx = r/N (N dxhat - sum(dxhat) - xhat sum(dxhat xhat))
      global statistics: dx = r dxhat (mu and var are constants)
    With d = x - mu and per-channel sums Sg = sum(gy), Sd = sum(gy d) the batch rule is affine
    in (gy, d) per channel:
      dx = a gy + b d + c,   a = gamma r,  b = -gamma r^3 Sd / N,  c = -a Sg / N
    so one centred copy ``d`` (updated in place) and one array (``gy d``, then dx) are all the memory used.
    """
    acc = acc_dtype(x.dtype)
    x3 = _bn_view(x.astype(acc, copy=False), axis)
    g3 = _bn_view(gy.astype(acc, copy=False), axis)
    count = acc.type(max(x3.shape[0] * x3.shape[2], 1))  # elements per channel
    r = invstd.astype(acc, copy=False)
    gam = xp.ones_like(r) if fix_gamma else gamma.astype(acc, copy=False)
    dbeta = _channel_sum(g3)
    d = x3 - mean.astype(acc, copy=False)[:, None]
    dx = g3 * d
    s_gd = _channel_sum(dx)
    a = gam * r
    dx = xp.multiply(g3, a[:, None], out=dx)
    if is_train and not use_global_stats:
        d *= (-gam * r * r * r * s_gd / count)[:, None]
        dx += d
        dx += (-a * dbeta / count)[:, None]
    dgamma = xp.zeros_like(s_gd) if fix_gamma else r * s_gd
    return (
        dx.reshape(x.shape).astype(x.dtype, copy=False),
        dgamma.astype(gamma.dtype, copy=False),
        dbeta.astype(gamma.dtype, copy=False),
    )


register(
    "_backward_BatchNorm",
    inputs=("ograd", "data", "gamma", "mean", "invstd"),
    params={
        "eps": Param("float", 1e-3),
        "fix_gamma": Param("bool", True),
        "use_global_stats": Param("bool", False),
        "axis": Param("int", 1),
    },
    num_outputs=3,
    forward=_bn_backward_fwd,
    infer_shape=lambda p, i, o, w: (i, [i[1], i[2], i[2]]),
    infer_type=lambda p, i, o, w: (i, [i[1], i[2], i[2]]),
    gradient=None,
    grad_undefined_reason="BatchNorm's backward is the fused hidden op _backward_BatchNorm, "
    "which has no gradient rule: second-order gradients through BatchNorm are not defined",
    needs_is_train=True,
)


# ----------------------------------------------------------------------------
# LayerNorm, InstanceNorm, L2Normalization (symbolic gradients)
# ----------------------------------------------------------------------------


def centered_rstd(F, x, spec, eps):
    """Symbols (x - mean, 1/sqrt(var + eps)), statistics over the axes ``spec`` (F.mean kwargs), keepdims."""
    xc = F.broadcast_sub(x, F.mean(x, keepdims=True, **spec))
    r = F._power_scalar(F.mean(F.square(xc), keepdims=True, **spec) + eps, scalar=-0.5)
    return xc, r


def normalize_vjp(F, dxhat, xhat, r, spec):
    """dx for xhat = (x - mean) r, mean and var taken over ``spec`` (N elements each):

    dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat))
    (mean' = 1/N; var' = 2 (x - mean)/N; r' = -r^3/2 var').
    """
    m1 = F.mean(dxhat, keepdims=True, **spec)
    m2 = F.mean(dxhat * xhat, keepdims=True, **spec)
    return F.broadcast_mul(F.broadcast_sub(dxhat, m1) - F.broadcast_mul(xhat, m2), r)


def affine_norm_vjp(F, x, gamma, gy, stat_spec, channel_axis, eps):
    """[dx, dgamma, dbeta] of y = gamma_c xhat + beta_c with xhat normalised over ``stat_spec`` and one gamma_c,
    beta_c per index of ``channel_axis`` (LayerNorm, InstanceNorm, and GroupNorm in its grouped view)."""
    xc, r = centered_rstd(F, x, stat_spec, eps)
    xhat = F.broadcast_mul(xc, r)
    per_channel = {"axis": channel_axis, "exclude": True}
    dgamma = F.sum(gy * xhat, **per_channel)  # y' w.r.t. gamma_c: sum of gy xhat over all but the channel axis
    dbeta = F.sum(gy, **per_channel)
    dx = normalize_vjp(F, gy * F._unreduce_like(gamma, x, **per_channel), xhat, r, stat_spec)
    return [dx, dgamma, dbeta]


@wait_for_first_input
def _ln_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    ax = normalize_axis(params["axis"], len(x), where)
    c = (x[ax],)
    check_vectors(in_shapes, ("gamma", "beta"), c, f"axis {ax}", where)
    moments = tuple(1 if i == ax else d for i, d in enumerate(x))
    return [x, c, c], [x, moments, moments]


def _ln_fwd(xp, x, gamma, beta, *, axis, eps, output_mean_var):
    ax = normalize_axis(axis, x.ndim, "LayerNorm")
    xa = x.astype(acc_dtype(x.dtype), copy=False)
    mean = xa.mean(axis=ax, keepdims=True)
    xc = xa - mean
    std = xp.sqrt((xc * xc).mean(axis=ax, keepdims=True) + eps)
    bshape = _channel_shape(x.ndim, ax, x.shape[ax])
    y = xc / std * gamma.reshape(bshape) + beta.reshape(bshape)
    return tuple(a.astype(x.dtype, copy=False) for a in (y, mean, std))


register(
    "LayerNorm",
    inputs=("data", "gamma", "beta"),
    params={"axis": Param("int", -1), "eps": Param("float", 1e-5), "output_mean_var": Param("bool", False)},
    num_outputs=3,
    num_visible=lambda p: 3 if p["output_mean_var"] else 1,
    output_names=("output", "mean", "std"),
    forward=_ln_fwd,
    infer_shape=_ln_shape,
    infer_type=float_inputs("data"),
    # no gradient flows through the mean/std outputs (MXNet); the statistics are recomputed from data
    gradient=lambda F, n, g: affine_norm_vjp(
        F, n.inputs[0], n.inputs[1], g[0], {"axis": n.params["axis"]}, n.params["axis"], n.params["eps"]
    ),
    doc="Layer normalisation over ``axis``; outputs (y, mean, std) with output_mean_var, std = sqrt(var + eps).",
)


@wait_for_first_input
def _in_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    if len(x) < 3:
        raise ShapeError(f"{where}: InstanceNorm needs data of rank >= 3 (batch, channel, spatial...), got {tuple(x)}")
    c = (x[1],)
    check_vectors(in_shapes, ("gamma", "beta"), c, "channels", where)
    return [x, c, c], [x, (x[0], x[1]), (x[0], x[1])]


def _in_fwd(xp, x, gamma, beta, *, eps):
    """Normalise each (sample, channel) over the spatial axes; hidden outputs mean and (biased) var."""
    xa = x.astype(acc_dtype(x.dtype), copy=False)
    sp = tuple(range(2, x.ndim))
    mean = xa.mean(axis=sp, keepdims=True)
    xc = xa - mean
    var = (xc * xc).mean(axis=sp, keepdims=True)
    bshape = _channel_shape(x.ndim, 1, x.shape[1])
    y = xc / xp.sqrt(var + eps) * gamma.reshape(bshape) + beta.reshape(bshape)
    nc = x.shape[:2]
    return y.astype(x.dtype, copy=False), mean.reshape(nc).astype(x.dtype), var.reshape(nc).astype(x.dtype)


register(
    "InstanceNorm",
    inputs=("data", "gamma", "beta"),
    params={"eps": Param("float", 1e-3)},
    num_outputs=3,
    num_visible=1,
    output_names=("output", "mean", "var"),
    forward=_in_fwd,
    infer_shape=_in_shape,
    infer_type=float_inputs("data"),
    gradient=lambda F, n, g: affine_norm_vjp(
        F, n.inputs[0], n.inputs[1], g[0], {"axis": (0, 1), "exclude": True}, 1, n.params["eps"]
    ),
    doc="Instance normalisation: each (sample, channel) over its spatial axes; gamma/beta per channel.",
)

_L2_SPEC = {  # the axes each mode sums over, as reduction kwargs
    "instance": {"axis": 0, "exclude": True},
    "channel": {"axis": 1},
    "spatial": {"axis": (0, 1), "exclude": True},
}


@wait_for_first_input
def _l2_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    mode = params["mode"]
    if len(x) == 0:
        raise ShapeError(f"{where}: input 'data' must be at least 1-d")
    if mode == "instance":
        norm = (x[0],)
    else:
        if len(x) < 3:
            raise ShapeError(f"{where}: mode={mode!r} needs data of rank >= 3, got {tuple(x)}")
        norm = (x[0], 1) + tuple(x[2:]) if mode == "channel" else (x[0], x[1])
    return in_shapes, [x, norm]


def _l2_fwd(xp, x, *, eps, mode):
    xa = x.astype(acc_dtype(x.dtype), copy=False)
    if mode == "instance":
        axes = tuple(range(1, x.ndim))
    elif mode == "channel":
        axes = (1,)
    else:
        axes = tuple(range(2, x.ndim))
    norm = xp.sqrt((xa * xa).sum(axis=axes, keepdims=True) + eps)
    y = xa / norm
    nshape = (x.shape[0],) if mode == "instance" else (norm.shape if mode == "channel" else x.shape[:2])
    return y.astype(x.dtype, copy=False), norm.reshape(nshape).astype(x.dtype, copy=False)


def _l2_grad(F, n, g):
    # y = x r, r = (sum x^2 + eps)^(-1/2) over the mode's axes:  dx = r (g - y sum(g y))
    x, y, gy = n.inputs[0], n.outputs[0], g[0]
    spec = _L2_SPEC[n.params["mode"]]
    r = F._power_scalar(F.sum(F.square(x), keepdims=True, **spec) + n.params["eps"], scalar=-0.5)
    return [F.broadcast_mul(gy - F.broadcast_mul(y, F.sum(gy * y, keepdims=True, **spec)), r)]


register(
    "L2Normalization",
    params={"eps": Param("float", 1e-10), "mode": Param("str", "instance", choices=("instance", "channel", "spatial"))},
    num_outputs=2,
    num_visible=1,
    output_names=("output", "norm"),
    forward=_l2_fwd,
    infer_shape=_l2_shape,
    infer_type=float_inputs("data"),
    gradient=_l2_grad,
    doc="x / sqrt(sum(x^2) + eps) per sample (instance), per position across channels (channel) "
    "or per (sample, channel) over the spatial axes (spatial).",
)


# ----------------------------------------------------------------------------
# Dropout
# ----------------------------------------------------------------------------


def _dropout_prepare(params, name):
    if not 0.0 <= params["p"] <= 1.0:
        raise ParamError(f"Dropout {name!r}: parameter 'p' must be in [0, 1], got {params['p']}")
    return params


def _mask_shape(shape, axes, where):
    out = list(shape)
    for a in axes:
        out[normalize_axis(a, len(shape), where, "axes")] = 1
    return tuple(out)


@wait_for_first_input
def _dropout_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    return in_shapes, [x, _mask_shape(x, params["axes"], where)]


def _dropout_fwd(xp, x, *, is_train, p, mode, axes, cudnn_off):
    """Outputs (y, mask). Active in training (or always with mode='always') when p > 0:
    mask = keep / (1 - p), keep ~ Bernoulli(1 - p), shared along ``axes``; otherwise the
    identity with a mask of ones, so backward (g * mask) is the identity too."""
    mshape = _mask_shape(x.shape, axes, "Dropout")
    if p > 0 and (is_train or mode == "always"):
        pkeep = 1.0 - p
        keep = xp.random.random_sample(mshape) < pkeep
        mask = keep.astype(x.dtype) * (x.dtype.type(1.0 / pkeep) if pkeep > 0 else x.dtype.type(0))
        return (x * mask).astype(x.dtype, copy=False), mask
    return x, xp.ones(mshape, dtype=x.dtype)


register(
    "Dropout",
    params={
        "p": Param("float", 0.5),
        "mode": Param("str", "training", choices=("training", "always")),
        "axes": Param("shape", ()),
        "cudnn_off": Param("bool", False, optional=True),
    },
    num_outputs=2,
    num_visible=1,
    output_names=("output", "mask"),
    forward=_dropout_fwd,
    infer_shape=_dropout_shape,
    infer_type=float_inputs("data"),
    # y = x * mask (mask drawn in forward, a constant):  dx = g * mask (the mask gets no gradient)
    gradient=lambda F, n, g: [F.broadcast_mul(g[0], n.outputs[1])],
    needs_is_train=True,
    prepare=_dropout_prepare,
    doc="Dropout: in training zero each element (or slice along ``axes``) with probability p and scale "
    "the rest by 1/(1-p); the identity in inference unless mode='always'.",
)


# ----------------------------------------------------------------------------
# Embedding
# ----------------------------------------------------------------------------


def _embedding_prepare(params, name):
    where = f"Embedding {name!r}"
    for k in ("input_dim", "output_dim"):
        if params[k] < 1:
            raise ParamError(f"{where}: parameter {k!r} must be >= 1, got {params[k]}")
    if params["sparse_grad"]:
        raise ParamError(f"{where}: sparse_grad=True (row_sparse gradients) is not supported; use sparse_grad=False")
    return params


def _embedding_shape(params, in_shapes, out_shapes, where):
    ins = list(in_shapes)
    want = (params["input_dim"], params["output_dim"])
    expect_input_shape(ins, 1, "weight", want, where, " (input_dim, output_dim)")
    data = ins[0]
    if data is None:
        return ins, out_shapes
    return ins, [tuple(data) + (params["output_dim"],)]


def _embedding_type(params, in_types, out_types, where):
    """Indices may be any dtype; the weight (and output) dtype is the bound one, else ``dtype``."""
    w = in_types[1] if in_types[1] is not None else out_types[0]
    w = np.dtype(w) if w is not None else params["dtype"]
    return [in_types[0], w], [w]


def _indices(xp, data, size):
    """MXNet's index rule: cast to integer (truncating), then clip to [0, size - 1]."""
    return xp.clip(data.astype(np.int64), 0, size - 1)


def _embedding_fwd(xp, data, weight, *, input_dim, output_dim, dtype, sparse_grad):
    return xp.take(weight, _indices(xp, data, input_dim), axis=0)


register(
    "Embedding",
    inputs=("data", "weight"),
    params={
        "input_dim": Param("int"),
        "output_dim": Param("int"),
        "dtype": Param("dtype", np.dtype(np.float32)),
        "sparse_grad": Param("bool", False),
    },
    forward=_embedding_fwd,
    infer_shape=_embedding_shape,
    infer_type=_embedding_type,
    # out[i] = weight[idx[i]]:  dweight[k] = sum of g[i] over i with idx[i] = k (a scatter-add)
    gradient=lambda F, n, g: [
        None,
        F._embedding_scatter(g[0], n.inputs[0], input_dim=n.params["input_dim"], output_dim=n.params["output_dim"]),
    ],
    no_grad_inputs=("data",),
    prepare=_embedding_prepare,
    doc="Look up rows of ``weight`` (input_dim, output_dim) at the (clipped) indices in ``data``.",
)


def _scatter_fwd(xp, g, data, *, input_dim, output_dim):
    acc = acc_dtype(g.dtype)
    out = xp.zeros((input_dim, output_dim), dtype=acc)
    xp.add.at(out, _indices(xp, data, input_dim).reshape(-1), g.reshape(-1, output_dim).astype(acc, copy=False))
    return out.astype(g.dtype, copy=False)


def _scatter_shape(params, in_shapes, out_shapes, where):
    data = in_shapes[1]
    ins = list(in_shapes)
    if data is not None:
        ins[0] = tuple(data) + (params["output_dim"],)
    return ins, [(params["input_dim"], params["output_dim"])]


register(
    "_embedding_scatter",
    inputs=("ograd", "data"),
    params={"input_dim": Param("int"), "output_dim": Param("int")},
    forward=_scatter_fwd,
    infer_shape=_scatter_shape,
    infer_type=lambda p, i, o, w: (i, [i[0] if i[0] is not None else o[0]]),
    # scatter-add is linear in ograd; its adjoint is the gather, i.e. Embedding itself
    gradient=lambda F, n, g: [F.Embedding(n.inputs[1], g[0], **n.params), None],
    no_grad_inputs=("data",),
    doc="Embedding's weight gradient: scatter-add rows of ograd at the indices; hidden.",
)


# ----------------------------------------------------------------------------
# SequenceMask
# ----------------------------------------------------------------------------


def _seqmask_prepare(params, name):
    if params["axis"] not in (0, 1):
        raise ParamError(f"SequenceMask {name!r}: parameter 'axis' must be 0 or 1, got {params['axis']}")
    return params


def _seqmask_fwd(xp, x, seq=None, *, use_sequence_length, value, axis):
    if not use_sequence_length:
        return x
    steps = xp.arange(x.shape[axis])
    lengths = seq.astype(np.int64)
    keep = steps[:, None] < lengths[None, :] if axis == 0 else lengths[:, None] > steps[None, :]
    keep = keep.reshape(keep.shape + (1,) * (x.ndim - 2))
    return xp.where(keep, x, x.dtype.type(value)).astype(x.dtype, copy=False)


register(
    "SequenceMask",
    inputs=sequence_inputs,
    params={
        "use_sequence_length": Param("bool", False),
        "value": Param("float", 0.0),
        "axis": Param("int", 0),
    },
    forward=_seqmask_fwd,
    infer_shape=sequence_shape(lambda x, axis: x),
    infer_type=lambda p, i, o, w: ([i[0]] + [t if t is not None else i[0] for t in i[1:]], [i[0]]),
    # masked steps are constants: dx = g with the same steps set to 0
    gradient=lambda F, n, g: (
        [
            F.SequenceMask(g[0], n.inputs[1], use_sequence_length=True, value=0.0, axis=n.params["axis"])
            if n.params["use_sequence_length"]
            else g[0]
        ]
        + [None] * (len(n.inputs) - 1)
    ),
    no_grad_inputs=("sequence_length",),
    prepare=_seqmask_prepare,
    doc="Set the steps at and beyond each sequence's length to ``value`` (sequence axis 0 or 1).",
)
