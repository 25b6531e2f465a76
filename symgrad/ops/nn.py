"""Neural-network layers: Activation and BatchNorm."""

from __future__ import annotations

import numpy as np

from ..base import ShapeError
from .registry import Param, normalize_axis, register, same_shape

# ----------------------------------------------------------------------------
# Activation
# ----------------------------------------------------------------------------

_ACT = ("relu", "sigmoid", "tanh", "softrelu", "softsign")


def _act_fwd(xp, x, act_type):
    if act_type == "relu":
        return xp.maximum(x, 0)
    if act_type == "sigmoid":
        from .elemwise import _sigmoid

        return _sigmoid(xp, x)
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
        return [gy * (x > 0.0)]  # 1 where x > 0
    if act == "sigmoid":
        return [gy * (y * (1.0 - y))]  # s (1 - s)
    if act == "tanh":
        return [gy * (1.0 - F.square(y))]  # 1 - tanh^2
    if act == "softrelu":
        return [gy * F.sigmoid(x)]  # d log(1+e^x) = sigmoid(x)
    return [gy / F.square(F.abs(x) + 1.0)]  # softsign' = 1 / (1 + |x|)^2


register(
    "Activation",
    params={"act_type": Param("str", choices=_ACT)},
    forward=_act_fwd,
    infer_shape=same_shape,
    gradient=_act_grad,
    doc="Elementwise activation: relu, sigmoid, tanh, softrelu or softsign.",
)


# ----------------------------------------------------------------------------
# BatchNorm
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


def _bn_layout(x, axis):
    """Reduction axes and the broadcast shape of per-channel vectors."""
    ax = normalize_axis(axis, x.ndim, "BatchNorm")
    red = tuple(i for i in range(x.ndim) if i != ax)
    bshape = [1] * x.ndim
    bshape[ax] = x.shape[ax]
    return red, tuple(bshape)


def _bn_fwd(xp, x, gamma, beta, mmean, mvar, *, is_train, eps, momentum, fix_gamma, use_global_stats,
            output_mean_var, axis, **_):
    red, bshape = _bn_layout(x, axis)
    acc = np.float32 if x.dtype == np.float16 else x.dtype  # accumulate float16 in float32
    xa = x.astype(acc, copy=False)
    if is_train and not use_global_stats:
        mean = xa.mean(axis=red)
        var = xa.var(axis=red)  # biased batch variance, as MXNet
        new_mean = mmean * momentum + mean.astype(mmean.dtype) * (1 - momentum)
        new_var = mvar * momentum + var.astype(mvar.dtype) * (1 - momentum)
        updates = (new_mean, new_var)
    else:
        mean, var = mmean.astype(acc, copy=False), mvar.astype(acc, copy=False)
        updates = (None, None)
    g = np.ones((), acc) if fix_gamma else gamma.astype(acc, copy=False)
    invstd = 1.0 / xp.sqrt(var + eps)
    scale = (g * invstd).reshape(bshape) if not fix_gamma else invstd.reshape(bshape)
    y = (xa - mean.reshape(bshape)) * scale + beta.astype(acc, copy=False).reshape(bshape)
    outs = (y.astype(x.dtype, copy=False), mean.astype(x.dtype, copy=False), var.astype(x.dtype, copy=False))
    return outs, updates


def _bn_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    if x is None:
        return in_shapes, out_shapes
    ax = normalize_axis(params["axis"], len(x), where)
    c = (x[ax],)
    for i, name in zip(range(1, 5), ("gamma", "beta", "moving_mean", "moving_var")):
        if in_shapes[i] is not None and tuple(in_shapes[i]) != c:
            raise ShapeError(f"{where}: input {name!r} has shape {tuple(in_shapes[i])}, expected {c} (channels on axis {ax})")
    return [x, c, c, c, c], [x, c, c]


def _bn_grad(F, n, g):
    x, gamma = n.inputs[0], n.inputs[1]
    mean, var = n.outputs[1], n.outputs[2]
    p = {k: n.params[k] for k in ("eps", "fix_gamma", "use_global_stats", "axis")}
    dx, dgamma, dbeta = F._backward_BatchNorm(g[0], x, gamma, mean, var, **p)
    return [dx, dgamma, dbeta, None, None]


register(
    "BatchNorm",
    inputs=("data", "gamma", "beta"),
    aux=("moving_mean", "moving_var"),
    params=_BN_PARAMS,
    num_outputs=3,
    num_visible=lambda p: 3 if p["output_mean_var"] else 1,
    output_names=("output", "mean", "var"),
    forward=_bn_fwd,
    infer_shape=_bn_shape,
    gradient=_bn_grad,
    needs_is_train=True,
    mutates_aux=True,
    doc="Batch normalisation over every axis but ``axis``; fix_gamma defaults to True as in MXNet.",
)


def _bn_backward_fwd(xp, gy, x, gamma, mean, var, *, is_train, eps, fix_gamma, use_global_stats, axis):
    """Fused VJP of BatchNorm.

    With xhat = (x - mu) * r, r = 1/sqrt(var + eps), y = gamma xhat + beta, N elements per channel:
      dbeta = sum(gy),  dgamma = sum(gy xhat),  dxhat = gy gamma
      batch statistics:  dx = r/N (N dxhat - sum(dxhat) - xhat sum(dxhat xhat))
      global statistics: dx = r dxhat (mu and var are constants)
    """
    red, bshape = _bn_layout(x, axis)
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    xa, ga = x.astype(acc, copy=False), gy.astype(acc, copy=False)
    r = (1.0 / xp.sqrt(var.astype(acc) + eps)).reshape(bshape)
    xhat = (xa - mean.astype(acc).reshape(bshape)) * r
    dbeta = ga.sum(axis=red)
    dgamma = (ga * xhat).sum(axis=red)
    gam = (xp.ones_like(dbeta) if fix_gamma else gamma.astype(acc)).reshape(bshape)
    dxhat = ga * gam
    if is_train and not use_global_stats:
        count = x.size // int(np.prod(bshape))  # elements per channel
        dx = (r / count) * (
            count * dxhat - dxhat.sum(axis=red, keepdims=True) - xhat * (dxhat * xhat).sum(axis=red, keepdims=True)
        )
    else:
        dx = dxhat * r
    if fix_gamma:
        dgamma = xp.zeros_like(dgamma)
    dt = x.dtype
    return dx.astype(dt, copy=False), dgamma.astype(gamma.dtype, copy=False), dbeta.astype(gamma.dtype, copy=False)


register(
    "_backward_BatchNorm",
    inputs=("ograd", "data", "gamma", "mean", "var"),
    params={
        "eps": Param("float", 1e-3),
        "fix_gamma": Param("bool", True),
        "use_global_stats": Param("bool", False),
        "axis": Param("int", 1),
    },
    num_outputs=3,
    forward=_bn_backward_fwd,
    infer_shape=lambda p, i, o, w: (i, [i[1], i[2], i[2]]),
    gradient=None,
    grad_undefined_reason="BatchNorm's backward is the fused hidden op _backward_BatchNorm, "
    "which has no gradient rule: second-order gradients through BatchNorm are not defined",
    needs_is_train=True,
)
