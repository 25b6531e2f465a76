"""OpInfo rows for LRN, GroupNorm and BatchNorm_v1 (symgrad/ops/norm.py).

References are plain numpy written from MXNet 1.9.1's definitions (lrn-inl.h, group_norm-inl.h,
batch_norm_v1-inl.h): LRN divides alpha by nsize; GroupNorm's gamma/beta are per group in 1.9.1;
BatchNorm_v1's 'var' output is the biased variance itself.
"""

import numpy as np
from op_info import In, OpInfo, norm_inputs

import symgrad as sg

S = sg.sym

F16 = {np.float16: (2e-2, 2e-2)}


def _lrn(x, nsize, alpha=1e-4, beta=0.75, knorm=2.0):
    n, c, h, w = x.shape
    norm = np.empty_like(x)
    half = nsize // 2
    for ch in range(c):
        lo, hi = max(0, ch - half), min(c, ch + half + 1)
        norm[:, ch] = knorm + alpha / nsize * (x[:, lo:hi] ** 2).sum(axis=1)
    return x / norm**beta


def _group_norm(x, gamma, beta, groups, eps=1e-5):
    eps = float(np.float32(eps))  # MXNet's eps is a C float, in float64 data too
    n = x.shape[0]
    xg = x.reshape(n, groups, -1)
    mean = xg.mean(axis=2)
    std = np.sqrt(xg.var(axis=2) + eps)
    y = (xg - mean[:, :, None]) / std[:, :, None] * gamma[None, :, None] + beta[None, :, None]
    return y.reshape(x.shape), mean, std


def _bn_v1(x, gamma, beta, mm, mv, eps=1e-3, fix_gamma=True, batch=True):
    red = (0,) + tuple(range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    mean, var = (x.mean(red), x.var(red)) if batch else (mm, mv)
    g = np.ones_like(gamma) if fix_gamma else gamma
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * g.reshape(shape) + beta.reshape(shape)
    return y, mean, var


BN1_AUX = {"bn_moving_mean": In((3,)), "bn_moving_var": In((3,), 0.5, 1.5)}


def _bn1_row(name, make, x_shape, ref, **kw):
    """A BatchNorm_v1 row over 3 channels: moving statistics as aux, training mode, F16."""
    kw = {"is_train": True, **kw}
    return OpInfo(name, make, norm_inputs(x_shape, 3), ref, aux=BN1_AUX, fwd_tol=F16, **kw)


OPS = [
    # -- LRN ------------------------------------------------------------------------------------------
    OpInfo(
        "LRN_default", lambda x: S.LRN(x, nsize=3), {"x": In((2, 4, 2, 2), -2, 2)}, lambda x: _lrn(x, 3), fwd_tol=F16
    ),
    # a large alpha so the normalisation matters (the default's 1e-4 makes LRN nearly x / knorm^beta)
    OpInfo(
        "LRN_strong",
        lambda x: S.LRN(x, alpha=2.0, beta=0.6, knorm=1.5, nsize=5),
        {"x": In((1, 6, 2, 3), -1.5, 1.5)},
        lambda x: _lrn(x, 5, 2.0, 0.6, 1.5),
        fwd_tol=F16,
    ),
    OpInfo(
        "LRN_nsize1_strings",
        lambda x: S.LRN(x, alpha="0.5", beta="1.0", knorm="1", nsize="1"),
        {"x": In((2, 2, 1, 2))},
        lambda x: _lrn(x, 1, 0.5, 1.0, 1.0),
        fwd_tol=F16,
    ),
    # -- GroupNorm ------------------------------------------------------------------------------------
    OpInfo(
        "GroupNorm_default",
        lambda x, g, b: S.GroupNorm(x, g, b),
        norm_inputs((2, 3, 2), 1),
        lambda x, g, b: _group_norm(x, g, b, 1)[0],
        fwd_tol=F16,
    ),
    OpInfo(
        "GroupNorm_groups",
        lambda x, g, b: S.GroupNorm(x, g, b, num_groups=2, eps=1e-3),
        norm_inputs((2, 4, 2, 2), 2),
        lambda x, g, b: _group_norm(x, g, b, 2, 1e-3)[0],
        fwd_tol=F16,
    ),
    OpInfo(
        "GroupNorm_output_mean_var",
        lambda x, g, b: S.GroupNorm(x, g, b, num_groups=3, output_mean_var=True),
        norm_inputs((2, 3, 3), 3),
        lambda x, g, b: _group_norm(x, g, b, 3),
        grad=False,
        fwd_tol=F16,
    ),
    # -- BatchNorm_v1 ---------------------------------------------------------------------------------
    _bn1_row(
        "BatchNorm_v1_fix_gamma_default",
        lambda x, g, b: S.BatchNorm_v1(x, g, b, name="bn"),
        (4, 3),
        lambda x, g, b, mm, mv: _bn_v1(x, g, b, mm, mv)[0],
    ),
    _bn1_row(
        "BatchNorm_v1_4d",
        lambda x, g, b: S.BatchNorm_v1(x, g, b, fix_gamma=False, eps=1e-4, momentum=0.5, name="bn"),
        (2, 3, 2, 2),
        lambda x, g, b, mm, mv: _bn_v1(x, g, b, mm, mv, 1e-4, False)[0],
    ),
    _bn1_row(
        "BatchNorm_v1_global_stats",
        lambda x, g, b: S.BatchNorm_v1(x, g, b, fix_gamma=False, use_global_stats=True, name="bn"),
        (2, 3, 2, 2),
        lambda x, g, b, mm, mv: _bn_v1(x, g, b, mm, mv, fix_gamma=False, batch=False)[0],
    ),
    _bn1_row(
        "BatchNorm_v1_global_stats_fix_gamma",
        lambda x, g, b: S.BatchNorm_v1(x, g, b, use_global_stats=True, name="bn"),
        (3, 3),
        lambda x, g, b, mm, mv: _bn_v1(x, g, b, mm, mv, batch=False)[0],
    ),
    _bn1_row(
        "BatchNorm_v1_inference",
        lambda x, g, b: S.BatchNorm_v1(x, g, b, fix_gamma=False, name="bn"),
        (3, 3),
        lambda x, g, b, mm, mv: _bn_v1(x, g, b, mm, mv, fix_gamma=False, batch=False)[0],
        grad=False,
        is_train=False,
    ),
    # the 'var' output is the biased batch variance (BatchNorm's is 1/sqrt(var + eps))
    OpInfo(
        "BatchNorm_v1_output_mean_var",
        lambda x, g, b: S.BatchNorm_v1(x, g, b, fix_gamma=False, output_mean_var=True, name="bn"),
        norm_inputs((4, 3), 3),
        lambda x, g, b, mm, mv: _bn_v1(x, g, b, mm, mv, fix_gamma=False),
        aux=BN1_AUX,
        is_train=True,
        grad=False,
        dtypes=(np.float32, np.float64),
    ),
]
