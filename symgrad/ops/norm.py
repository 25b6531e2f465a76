"""Normalisation layers not in nn.py: LRN, GroupNorm and the legacy BatchNorm_v1 (MXNet 1.9.1).

All three gradients are Symbols built from other ops, so second order works. As in nn.py, the
statistics are recomputed from ``data`` inside the gradient graph rather than read from the hidden
outputs (``tmp_norm``, ``mean``, ``std``/``var``): MXNet blocks gradients through those outputs, and a
second-order pass must still see how the statistics depend on ``data``.

Semantics follow MXNet 1.9.1 (src/operator/nn/lrn-inl.h, nn/group_norm-inl.h, batch_norm_v1-inl.h):

- LRN: ``tmp_norm = knorm + alpha / nsize * sum_{|j - c| <= nsize // 2} x_j^2`` over channels (axis 1,
  zero padded; alpha is divided by nsize), ``y = x * tmp_norm^-beta``; 4-d data, odd nsize.
- GroupNorm: in 1.9.1 ``gamma`` and ``beta`` have shape ``(num_groups,)`` (one scale per *group*, not per
  channel: later MXNet versions changed this); hidden outputs mean and ``std = sqrt(var + eps)``, shape
  (N, num_groups). ``eps`` is used as MXNet holds it, a C float (1e-3 -> 0.0010000000474974513): the
  float64 MXNet fixtures tell the difference.
- BatchNorm_v1: channels on axis 1, 2-d or 4-d data; its ``var`` output is the biased batch variance
  (BatchNorm's is ``1/sqrt(var + eps)``); in inference or with use_global_stats the mean/var outputs are
  the moving statistics. MXNet updates the moving statistics in its backward pass; symgrad, as for
  BatchNorm, in the training forward (the same values after one forward + backward). MXNet also
  writes 1 into the caller's ``gamma`` array when fix_gamma is set; symgrad never modifies inputs.
"""

from __future__ import annotations

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import Param, acc_dtype, check_at_least, float_inputs, register, same_shape, wait_for_first_input
from .nn import (
    BN_COMMON_PARAMS,
    BN_SPEC,
    BN_VECTORS,
    affine_norm_vjp,
    centered_rstd,
    check_vectors,
    moving_update,
    normalize_vjp,
)

# ----------------------------------------------------------------------------
# LRN
# ----------------------------------------------------------------------------

_LRN_PARAMS = {
    "alpha": Param("float", 1e-4),
    "beta": Param("float", 0.75),
    "knorm": Param("float", 2.0),
    "nsize": Param("int"),
}


def _lrn_prepare(params, name):
    n = params["nsize"]
    if n < 1 or n % 2 != 1:
        raise ParamError(f"LRN {name!r}: parameter 'nsize' must be a positive odd number (as MXNet), got {n}")
    return params


def _window_sum(xp, x, nsize):
    """sum_{|j - c| <= nsize // 2} x[:, j] for every channel c (zero padded on axis 1)."""
    half = nsize // 2
    c = x.shape[1]
    pad = [(0, 0)] * x.ndim
    pad[1] = (half, half)
    xpd = xp.pad(x, pad)
    out = xpd[:, 0:c].copy()
    for k in range(1, nsize):
        out += xpd[:, k : k + c]
    return out


def _lrn_norm(xp, xa, alpha, knorm, nsize):
    return _window_sum(xp, xa * xa, nsize) * (alpha / nsize) + knorm


def _lrn_fwd(xp, x, *, alpha, beta, knorm, nsize):
    xa = x.astype(acc_dtype(x.dtype), copy=False)
    norm = _lrn_norm(xp, xa, alpha, knorm, nsize)
    y = xa * norm**-beta
    return y.astype(x.dtype, copy=False), norm.astype(x.dtype, copy=False)


@wait_for_first_input
def _lrn_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if len(x) != 4:
        raise ShapeError(f"{where}: input 'data' has shape {tuple(x)}; LRN needs 4-d (N, C, H, W) data (as MXNet)")
    return in_shapes, [tuple(x), tuple(x)]


def _lrn_grad(F, n, g):
    # n = k + s W(x^2) (s = alpha/nsize, W the channel window sum, symmetric so W^T = W), y = x n^-b:
    #   dy_i/dx_j = [i = j] n_i^-b - 2 b s x_i n_i^(-b-1) x_j [j in window(i)]
    #   dx = g n^-b - 2 b s x W(g x n^(-b-1))
    # (MXNet's _backward_LRN formula; the tmp_norm output gets no gradient.)
    p = n.params
    x, gy = n.inputs[0], g[0]
    s = p["alpha"] / p["nsize"]
    norm = F._lrn_window_sum(F.square(x), nsize=p["nsize"]) * s + p["knorm"]
    npow = F._power_scalar(norm, scalar=-p["beta"])
    inner = F._lrn_window_sum(gy * x * npow / norm, nsize=p["nsize"])
    return [gy * npow - x * inner * (2.0 * p["beta"] * s)]


register(
    "LRN",
    params=_LRN_PARAMS,
    prepare=_lrn_prepare,
    num_outputs=2,
    num_visible=1,
    output_names=("output", "tmp_norm"),
    forward=_lrn_fwd,
    infer_shape=_lrn_shape,
    infer_type=float_inputs("data"),
    gradient=_lrn_grad,
    doc="Local response normalisation across channels: y = x (knorm + alpha/nsize sum of x^2 over the nsize "
    "neighbouring channels)^-beta; hidden output tmp_norm.",
)

register(
    "_lrn_window_sum",
    params={"nsize": Param("int")},
    forward=lambda xp, x, nsize: _window_sum(xp, x, nsize),
    infer_shape=same_shape,
    # linear, and its window is symmetric: the adjoint is the op itself
    gradient=lambda F, n, g: [F._lrn_window_sum(g[0], **n.params)],
    doc="Sum over the nsize neighbouring channels (axis 1, zero padded); LRN's helper (hidden).",
)


# ----------------------------------------------------------------------------
# GroupNorm
# ----------------------------------------------------------------------------


def _gn_prepare(params, name):
    check_at_least(params, "num_groups", 1, f"GroupNorm {name!r}")
    return params


@wait_for_first_input
def _gn_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    ng = params["num_groups"]
    if len(x) < 3:
        raise ShapeError(
            f"{where}: input 'data' has shape {tuple(x)}; GroupNorm needs data of rank >= 3 "
            f"(batch, channel, spatial...)"
        )
    if x[1] % ng:
        raise ShapeError(f"{where}: the {x[1]} channels of data {tuple(x)} are not divisible by num_groups={ng}")
    c = (ng,)
    why = "one per group: MXNet 1.9.1's GroupNorm scales groups, not channels"
    check_vectors(in_shapes, ("gamma", "beta"), c, why, where)
    return [tuple(x), c, c], [tuple(x), (x[0], ng), (x[0], ng)]


def _gn_eps(eps):
    """eps as MXNet holds it: a C float (1e-3 is 0.0010000000474974513 there, in float64 data too)."""
    return float(np.float32(eps))


def _gn_fwd(xp, x, gamma, beta, *, num_groups, eps, output_mean_var):
    eps = _gn_eps(eps)
    acc = acc_dtype(x.dtype)
    xg = x.astype(acc, copy=False).reshape(x.shape[0], num_groups, -1)
    mean = xg.mean(axis=2, keepdims=True)
    xc = xg - mean
    std = xp.sqrt((xc * xc).mean(axis=2, keepdims=True) + eps)
    y = xc / std * gamma.astype(acc, copy=False).reshape(1, -1, 1) + beta.astype(acc, copy=False).reshape(1, -1, 1)
    nc = (x.shape[0], num_groups)
    return tuple(a.reshape(s).astype(x.dtype, copy=False) for a, s in ((y, x.shape), (mean, nc), (std, nc)))


def _gn_grad(F, n, g):
    # In the grouped view xg (N, G, rest): xhat = (xg - mean) r, r = 1/sqrt(var + eps) over axis 2,
    # y = gamma_g xhat + beta_g:
    #   dbeta = sum(gy) and dgamma = sum(gy xhat) over all axes but the group axis;
    #   dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = gy gamma_g (nn.affine_norm_vjp)
    x, gamma = n.inputs[0], n.inputs[1]
    ng, eps = n.params["num_groups"], _gn_eps(n.params["eps"])
    xg = F.Reshape(x, shape=(0, ng, -1))
    gy = F.Reshape(g[0], shape=(0, ng, -1))
    dxg, dgamma, dbeta = affine_norm_vjp(F, xg, gamma, gy, {"axis": 2}, 1, eps)
    return [F.reshape_like(dxg, x), dgamma, dbeta]


register(
    "GroupNorm",
    inputs=("data", "gamma", "beta"),
    params={"num_groups": Param("int", 1), "eps": Param("float", 1e-5), "output_mean_var": Param("bool", False)},
    prepare=_gn_prepare,
    num_outputs=3,
    num_visible=lambda p: 3 if p["output_mean_var"] else 1,
    output_names=("output", "mean", "std"),
    forward=_gn_fwd,
    infer_shape=_gn_shape,
    infer_type=float_inputs("data"),
    gradient=_gn_grad,
    doc="Group normalisation: channels split into num_groups groups, each normalised over its channels and "
    "spatial axes; gamma/beta of shape (num_groups,) as in MXNet 1.9.1; outputs (y, mean, std).",
)


# ----------------------------------------------------------------------------
# BatchNorm_v1 (legacy)
# ----------------------------------------------------------------------------


@wait_for_first_input
def _bn1_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    if len(x) not in (2, 4):
        raise ShapeError(
            f"{where}: input 'data' has shape {tuple(x)}; BatchNorm_v1 needs 2-d (N, C) or 4-d "
            f"(N, C, H, W) data (as MXNet; BatchNorm takes any rank)"
        )
    c = (x[1],)
    check_vectors(in_shapes, BN_VECTORS, c, "channels on axis 1", where)
    return [tuple(x), c, c, c, c], [tuple(x), c, c]


def _bn1_fwd(xp, x, gamma, beta, mmean, mvar, *, is_train, eps, momentum, fix_gamma, use_global_stats, output_mean_var):
    """Outputs (y, mean, var) and the moving-statistics updates (None: unchanged)."""
    acc = acc_dtype(x.dtype)
    red = tuple(i for i in range(x.ndim) if i != 1)
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    xa = x.astype(acc, copy=False)
    batch = is_train and not use_global_stats
    if batch:
        mean = xa.mean(axis=red)
        var = ((xa - mean.reshape(bshape)) ** 2).mean(axis=red)  # biased
        updates = moving_update(mmean, mvar, mean, var, momentum)
    else:
        mean, var = mmean.astype(acc, copy=False), mvar.astype(acc, copy=False)
        updates = (None, None)
    scale = 1.0 / xp.sqrt(var + eps)
    if not fix_gamma:
        scale = scale * gamma.astype(acc, copy=False)
    y = (xa - mean.reshape(bshape)) * scale.reshape(bshape) + beta.astype(acc, copy=False).reshape(bshape)
    return (y.astype(x.dtype, copy=False), mean.astype(acc, copy=False), var.astype(acc, copy=False)), updates


def _bn1_grad(F, n, g):
    x, gamma = n.inputs[0], n.inputs[1]
    p = n.params
    gy = g[0]
    per_channel = {"axis": 1, "exclude": True}
    dbeta = F.sum(gy, **per_channel)
    if p["use_global_stats"]:
        # y = gamma (x - mm) r + beta with the moving statistics (the mean/var outputs, constants in x):
        #   dx = gy gamma r,  dgamma = sum(gy (x - mm) r)
        r = F._power_scalar(n.outputs[2] + p["eps"], scalar=-0.5)
        xhat = F.broadcast_mul(
            F.broadcast_sub(x, F._unreduce_like(n.outputs[1], x, **per_channel)), F._unreduce_like(r, x, **per_channel)
        )
        scale = F._unreduce_like(r if p["fix_gamma"] else r * gamma, x, **per_channel)
        dx = gy * scale
    else:
        # batch statistics over every axis but 1 (recomputed from x, so second order sees them):
        #   dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),  dxhat = gy gamma,  dgamma = sum(gy xhat)
        spec = dict(per_channel)
        xc, r = centered_rstd(F, x, spec, p["eps"])
        xhat = F.broadcast_mul(xc, r)
        dxhat = gy if p["fix_gamma"] else gy * F._unreduce_like(gamma, x, **per_channel)
        dx = normalize_vjp(F, dxhat, xhat, r, spec)
    # fix_gamma: gamma is treated as 1 and its gradient is 0 (MXNet)
    dgamma = F.zeros_like(gamma) if p["fix_gamma"] else F.sum(gy * xhat, **per_channel)
    return [dx, dgamma, dbeta, None, None]


register(
    "BatchNorm_v1",
    params=dict(BN_COMMON_PARAMS),
    forward=_bn1_fwd,
    infer_shape=_bn1_shape,
    gradient=_bn1_grad,
    **BN_SPEC,
    doc="Legacy batch normalisation (channels on axis 1, 2-d or 4-d data); outputs (y, mean, var) with the "
    "biased batch variance (the moving statistics in inference or with use_global_stats).",
)
