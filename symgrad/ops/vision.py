"""Spatial / vision operators with MXNet 1.9.1 semantics.

GridGenerator, BilinearSampler, SpatialTransformer, Correlation, im2col/col2im,
``_contrib_AdaptiveAvgPooling2D``, ``_contrib_BilinearResize2D``, ``_contrib_DeformableConvolution`` and
``_contrib_ModulatedDeformableConvolution`` (DCNv2: the ``zero`` border below, each sample times a mask).

Two sampling kernels underlie BilinearSampler, SpatialTransformer and DeformableConvolution. Both read
``data`` at real positions ``(y, x)`` with the bilinear ("tent") kernel ``k(t) = max(0, 1 - |t|)``::

    sample(data; y, x) = sum_{i, j} data[i, j] k(y - i) k(x - j)

and differ at the border (MXNet's rules):

- ``zero`` (BilinearSampler / SpatialTransformer): the four corners outside the image read 0, so the
  sample fades continuously to 0 within one pixel of the border;
- ``deform`` (DeformableConvolution): a sample outside ``[0, H) x [0, W)`` is 0 (a jump), and a sample in
  the last row ``[H-1, H)`` (column ``[W-1, W)``) reads that row (column) as a constant.

Derivatives of a sample in its position are again bilinear-kernel sums with ``k`` replaced by
``k'(t) = -sign(t)`` on one axis (``k'' = 0`` away from the integer kinks, so derivatives of order > 1 on
one axis vanish). Hence one hidden op per family, parametrised by the derivative orders
``(order_y, order_x)`` in {0, 1}^2, and its adjoint (a scatter) close every order of differentiation:

    d/d data   <G, sample_ab(data; p)>  = scatter_ab(G; p)            (linear in data)
    d/d p_y    <G, sample_ab(data; p)>  = sum_c G * sample_(a+1)b(data; p)   (0 when a + 1 > 1)
    <H, scatter_ab(G; p)> = <sample_ab(H; p), G>      -> the same rules give scatter's gradients

Correlation (multiplicative) is bilinear in its two inputs; its two adjoints and Correlation itself are
closed under differentiation. The absolute-difference variant (``is_multiply=False``) uses the fused hidden
``_backward_Correlation`` (no second order). im2col/col2im, AdaptiveAvgPooling2D and BilinearResize2D are
linear with an adjoint whose gradient is the op again. GridGenerator is affine in its input.
"""

from __future__ import annotations

import math

import numpy as np

from ..base import ParamError, ShapeError
from ..kernels.conv import hi_pad, im2col_columns, tap_slices
from ..opdef import (
    Param,
    acc_dtype,
    check_at_least,
    expect_input_shape,
    float_inputs,
    like_input,
    like_input1,
    register,
    wait_for_first_input,
    wait_for_inputs,
)
from .conv import check_layout, sliding_out, spatial_param

# ----------------------------------------------------------------------------
# Sampling kernels (xp = numpy or cupy)
# ----------------------------------------------------------------------------


def _axis_taps(xp, pos, size, order, mode):
    """The two kernel taps along one axis: [(index, weight), (index, weight)] for positions ``pos``.

    Weights include the validity of the tap (0 where it falls outside, ``zero`` mode) and are the
    kernel's derivative (-1, +1) for ``order`` 1. ``deform`` mode: the caller masks invalid samples;
    a position in the last cell ``[size-1, size)`` reads that cell alone (both taps on it, the second
    with weight 0, or -1/+1 cancelling for the derivative).
    """
    lo = xp.floor(pos)
    frac = pos - lo
    lo = lo.astype(np.int64)
    if mode == "deform":
        last = lo >= size - 1
        hi = xp.where(last, size - 1, lo + 1)
        frac = xp.where(last, xp.zeros((), dtype=frac.dtype), frac)
        ok_lo = ok_hi = None
    else:
        hi = lo + 1
        ok_lo = (lo >= 0) & (lo <= size - 1)
        ok_hi = (hi >= 0) & (hi <= size - 1)
    if order == 0:
        w_lo, w_hi = 1 - frac, frac
    else:
        w_lo = xp.full(pos.shape, -1.0, dtype=pos.dtype)
        w_hi = xp.full(pos.shape, 1.0, dtype=pos.dtype)
    if ok_lo is not None:
        w_lo = xp.where(ok_lo, w_lo, xp.zeros((), dtype=pos.dtype))
        w_hi = xp.where(ok_hi, w_hi, xp.zeros((), dtype=pos.dtype))
    return [(xp.clip(lo, 0, size - 1), w_lo), (xp.clip(hi, 0, size - 1), w_hi)]


def _corners(xp, py, px, H, W, order_y, order_x, mode):
    """(flat index into H*W, weight) of the four corners of every sample position."""
    ty = _axis_taps(xp, py, H, order_y, mode)
    tx = _axis_taps(xp, px, W, order_x, mode)
    valid = None
    if mode == "deform":
        valid = (py >= 0) & (px >= 0) & (py < H) & (px < W)
    out = []
    for iy, wy in ty:
        for ix, wx in tx:
            w = wy * wx
            if valid is not None:
                w = xp.where(valid, w, xp.zeros((), dtype=w.dtype))
            out.append((iy * W + ix, w))
    return out


def _sample(xp, data, py, px, order_y, order_x, mode):
    """``data`` (N, G, Cg, H, W) read at positions ``py``/``px`` (N, G, M) -> (N, G, Cg, M)."""
    N, G, Cg, H, W = data.shape
    M = py.shape[-1]
    flat = data.reshape(N, G, Cg, H * W)
    out = None
    for idx, w in _corners(xp, py, px, H, W, order_y, order_x, mode):
        vals = xp.take_along_axis(flat, xp.broadcast_to(idx[:, :, None, :], (N, G, Cg, M)), axis=3)
        term = vals * w[:, :, None, :].astype(vals.dtype, copy=False)
        out = term if out is None else out + term
    return out


def _bincount(xp, idx, weights, size):
    if weights.dtype.kind == "c":
        return _bincount(xp, idx, weights.real, size) + 1j * _bincount(xp, idx, weights.imag, size)
    return xp.bincount(idx, weights=weights, minlength=size)


def _scatter(xp, vals, py, px, order_y, order_x, mode, H, W):
    """Adjoint of ``_sample``: ``vals`` (N, G, Cg, M) added at the positions -> (N, G, Cg, H, W)."""
    N, G, Cg, M = vals.shape
    base = (xp.arange(N * G * Cg, dtype=np.int64) * (H * W)).reshape(N, G, Cg, 1)
    idxs, wts = [], []
    for idx, w in _corners(xp, py, px, H, W, order_y, order_x, mode):
        idxs.append((base + idx[:, :, None, :]).ravel())
        wts.append((vals * w[:, :, None, :].astype(vals.dtype, copy=False)).ravel())
    size = N * G * Cg * H * W
    out = _bincount(xp, xp.concatenate(idxs), xp.concatenate(wts), size)
    return out.reshape(N, G, Cg, H, W).astype(vals.dtype, copy=False)


def _order_params():
    return {"order_y": Param("int", 0), "order_x": Param("int", 0)}


def _check_orders(params, node_name, opname):
    for k in ("order_y", "order_x"):
        if params[k] not in (0, 1):
            raise ParamError(f"{opname} {node_name!r}: parameter {k!r} must be 0 or 1, got {params[k]}")
    return params


def _shape4(where, name, s, what):
    if len(s) != 4:
        raise ShapeError(f"{where}: input {name!r} has shape {tuple(s)}; expected a 4-d {what}")


# ----------------------------------------------------------------------------
# GridGenerator
# ----------------------------------------------------------------------------

_GRID_PARAMS = {
    "transform_type": Param("str", choices=("affine", "warp")),
    "target_shape": Param("shape", (0, 0)),
}


def _affine_dst(xp, H, W, dtype):
    """MXNet's normalised target grid (3, H*W): rows x, y, 1 with x_j = -1 + 2j/(W-1), y_i = -1 + 2i/(H-1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        j = np.tile(np.arange(W, dtype=np.float64), H)
        i = np.repeat(np.arange(H, dtype=np.float64), W)
        dst = np.stack(
            [
                -1.0 + j * (2.0 / (W - 1) if W > 1 else np.inf),
                -1.0 + i * (2.0 / (H - 1) if H > 1 else np.inf),
                np.ones(H * W),
            ]
        )
    return xp.asarray(dst.astype(dtype))


def _warp_scale(xp, H, W, dtype):
    """(1, 2, 1, 1) divisors ((W-1)/2, (H-1)/2) of the warp grid."""
    return xp.asarray(np.array([(W - 1) / 2.0, (H - 1) / 2.0], dtype=dtype).reshape(1, 2, 1, 1))


def _check_target(where, ts):
    if len(ts) != 2 or ts[0] <= 0 or ts[1] <= 0:
        raise ShapeError(f"{where}: parameter 'target_shape' must be a positive (H, W), got {tuple(ts)}")


@wait_for_first_input
def _grid_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if params["transform_type"] == "affine":
        if len(x) != 2 or x[1] != 6:
            raise ShapeError(
                f"{where}: input 'data' has shape {tuple(x)}; transform_type='affine' expects "
                f"(batch, 6) affine matrices"
            )
        ts = tuple(params["target_shape"])
        _check_target(where, ts)
        return in_shapes, [(x[0], 2) + ts, (3, ts[0] * ts[1])]
    if len(x) != 4 or x[1] != 2:
        raise ShapeError(
            f"{where}: input 'data' has shape {tuple(x)}; transform_type='warp' expects an optical "
            f"flow (batch, 2, H, W)"
        )
    return in_shapes, [tuple(x), (2,) + tuple(x[2:])]


def _grid_fwd(xp, x, *, transform_type, target_shape):
    acc = acc_dtype(x.dtype)
    xa = x.astype(acc, copy=False)
    if transform_type == "affine":
        H, W = target_shape
        dst = _affine_dst(xp, H, W, acc)
        with np.errstate(invalid="ignore"):
            out = xp.matmul(xa.reshape(-1, 2, 3), dst).reshape(x.shape[0], 2, H, W)
        return out.astype(x.dtype, copy=False), dst.astype(x.dtype, copy=False)
    H, W = x.shape[2:]
    dst = xp.stack([xp.tile(xp.arange(W, dtype=acc), (H, 1)), xp.tile(xp.arange(H, dtype=acc)[:, None], (1, W))])
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (xa + dst[None]) / _warp_scale(xp, H, W, acc) - 1
    return out.astype(x.dtype, copy=False), dst.astype(x.dtype, copy=False)


register(
    "GridGenerator",
    params=dict(_GRID_PARAMS),
    num_outputs=2,
    num_visible=1,
    output_names=("output", "grid_dst"),
    forward=_grid_fwd,
    infer_shape=_grid_shape,
    infer_type=float_inputs("data"),
    # affine: out = theta @ dst (linear in theta); warp: out = (flow + dst) / scale - 1 (affine in flow).
    # Both: d data = A^T g with A the linear part; grid_dst is a constant (its head gradient is ignored).
    gradient=lambda F, n, g: [F._grid_generator_adjoint(g[0], **n.params)],
    doc="Sampling grid in [-1, 1] for BilinearSampler: from (batch, 6) affine matrices over target_shape "
    "(affine) or from an optical flow (batch, 2, H, W) (warp).",
)


@wait_for_first_input
def _grid_adj_shape(params, in_shapes, out_shapes, where):
    (g,) = in_shapes
    if params["transform_type"] == "affine":
        return in_shapes, [(g[0], 6)]
    return in_shapes, [tuple(g)]


def _grid_adj_fwd(xp, g, *, transform_type, target_shape):
    acc = acc_dtype(g.dtype)
    ga = g.astype(acc, copy=False)
    if transform_type == "affine":
        H, W = target_shape
        dst = _affine_dst(xp, H, W, acc)
        with np.errstate(invalid="ignore"):
            out = xp.matmul(ga.reshape(-1, 2, H * W), dst.T).reshape(g.shape[0], 6)
    else:
        H, W = g.shape[2:]
        with np.errstate(divide="ignore", invalid="ignore"):
            out = ga / _warp_scale(xp, H, W, acc)
    return out.astype(g.dtype, copy=False)


def _grid_adj_grad(F, n, g):
    # affine: A^T is linear with adjoint A = GridGenerator itself (theta -> theta @ dst has no offset);
    # warp: A^T = diag(1/scale) is self-adjoint
    if n.params["transform_type"] == "affine":
        return [F.GridGenerator(g[0], **n.params)]
    return [F._grid_generator_adjoint(g[0], **n.params)]


register(
    "_grid_generator_adjoint",
    params=dict(_GRID_PARAMS),
    forward=_grid_adj_fwd,
    infer_shape=_grid_adj_shape,
    gradient=_grid_adj_grad,
    doc="Adjoint of GridGenerator's linear part (hidden).",
)


# ----------------------------------------------------------------------------
# BilinearSampler
# ----------------------------------------------------------------------------


def _grid_positions(xp, grid, H, W, acc):
    """Pixel positions (N, 1, Ho*Wo) of a normalised grid (N, 2, Ho, Wo): channel 0 is x, 1 is y."""
    N = grid.shape[0]
    ga = grid.astype(acc, copy=False).reshape(N, 2, -1)
    px = (ga[:, 0:1] + 1) * (W - 1) / 2
    py = (ga[:, 1:2] + 1) * (H - 1) / 2
    return py, px


def _bs_sample(xp, data, grid, order_y=0, order_x=0):
    acc = acc_dtype(data.dtype)
    N, C, H, W = data.shape
    Ho, Wo = grid.shape[2:]
    py, px = _grid_positions(xp, grid, H, W, acc)
    out = _sample(xp, data.astype(acc, copy=False).reshape(N, 1, C, H, W), py, px, order_y, order_x, "zero")
    # d/d grid = d/d position * (size - 1) / 2 per derivative order
    scale = ((H - 1) / 2.0) ** order_y * ((W - 1) / 2.0) ** order_x
    if scale != 1.0:
        out = out * scale
    return out.reshape(N, C, Ho, Wo).astype(data.dtype, copy=False)


def _bs_scatter(xp, g, grid, like, order_y=0, order_x=0):
    acc = acc_dtype(g.dtype)
    N, C, H, W = like.shape
    py, px = _grid_positions(xp, grid, H, W, acc)
    out = _scatter(xp, g.astype(acc, copy=False).reshape(N, 1, C, -1), py, px, order_y, order_x, "zero", H, W)
    scale = ((H - 1) / 2.0) ** order_y * ((W - 1) / 2.0) ** order_x
    if scale != 1.0:
        out = out * scale
    return out.reshape(N, C, H, W).astype(g.dtype, copy=False)


def _bs_check(where, d, grid):
    if d is not None:
        _shape4(where, "data", d, "(batch, channel, H, W) input")
    if grid is not None:
        _shape4(where, "grid", grid, "(batch, 2, H, W) grid")
        if grid[1] != 2:
            raise ShapeError(f"{where}: input 'grid' has shape {tuple(grid)}; its axis 1 must be 2 (x, y)")
    if d is not None and grid is not None and d[0] != grid[0]:
        raise ShapeError(f"{where}: inputs 'data' {tuple(d)} and 'grid' {tuple(grid)} must have the same batch size")


def _bs_shape(params, in_shapes, out_shapes, where):
    d, grid = in_shapes
    _bs_check(where, d, grid)
    if d is None or grid is None:
        return in_shapes, out_shapes
    return in_shapes, [(d[0], d[1]) + tuple(grid[2:]), (grid[0],) + tuple(grid[2:]) + (2,)]


def _bs_fwd(xp, data, grid, *, cudnn_off=None):
    out = _bs_sample(xp, data, grid)
    # MXNet's hidden 'tmp' output (N, Ho, Wo, 2) is workspace its cpu kernel never writes: zeros here
    return out, xp.zeros((grid.shape[0],) + tuple(grid.shape[2:]) + (2,), dtype=grid.dtype)


def _grid_gradient(F, g, data, grid, a, b):
    """Gradient in the grid of <g, sample_ab(data; grid)>: channel x from order (a, b+1), y from (a+1, b)."""
    chans = []
    for oy, ox in ((a, b + 1), (a + 1, b)):
        if oy > 1 or ox > 1:  # k'' = 0 away from the kinks
            chans.append(F.zeros_like(F.slice_axis(grid, axis=1, begin=0, end=1)))
        else:
            chans.append(
                F.sum(g * F._bilinear_sampler_sample(data, grid, order_y=oy, order_x=ox), axis=1, keepdims=True)
            )
    return F.Concat(*chans, dim=1)


def _bs_grad(F, n, g):
    # out = sample_00(data; grid): linear in data (adjoint: scatter), grid gradient from the kernel's derivative
    data, grid = n.inputs
    gy = g[0]
    return [
        F._bilinear_sampler_scatter(gy, grid, data, order_y=0, order_x=0) if n.needs[0] else None,
        _grid_gradient(F, gy, data, grid, 0, 0) if n.needs[1] else None,
    ]


register(
    "BilinearSampler",
    inputs=("data", "grid"),
    params={"cudnn_off": Param("bool", None, optional=True)},
    num_outputs=2,
    num_visible=1,
    output_names=("output", "tmp"),
    forward=_bs_fwd,
    infer_shape=_bs_shape,
    infer_type=float_inputs("data", "grid"),
    gradient=_bs_grad,
    doc="Bilinear sampling of data (N, C, H, W) at a normalised grid (N, 2, Ho, Wo) (x, y in [-1, 1]); corners "
    "outside the image read 0.",
)


def _bss_shape(params, in_shapes, out_shapes, where):
    d, grid = in_shapes
    _bs_check(where, d, grid)
    if d is None or grid is None:
        return in_shapes, out_shapes
    return in_shapes, [(d[0], d[1]) + tuple(grid[2:])]


def _bss_grad(F, n, g):
    # sample_ab: d data = scatter_ab(G; grid); d grid from the next derivative order
    data, grid = n.inputs
    a, b = n.params["order_y"], n.params["order_x"]
    return [
        F._bilinear_sampler_scatter(g[0], grid, data, order_y=a, order_x=b) if n.needs[0] else None,
        _grid_gradient(F, g[0], data, grid, a, b) if n.needs[1] else None,
    ]


register(
    "_bilinear_sampler_sample",
    inputs=("data", "grid"),
    params=_order_params(),
    prepare=lambda p, name: _check_orders(p, name, "_bilinear_sampler_sample"),
    forward=_bs_sample,
    infer_shape=_bss_shape,
    gradient=_bss_grad,
    doc="BilinearSampler's sample or its derivative of order (order_y, order_x) in the grid (hidden).",
)


def _bsc_shape(params, in_shapes, out_shapes, where):
    return in_shapes, [in_shapes[2]] if in_shapes[2] is not None else out_shapes


def _bsc_grad(F, n, g):
    # <H, scatter_ab(G; grid)> = <sample_ab(H; grid), G>:  d G = sample_ab(H),  d grid as sample's with
    # data -> H and head -> G
    gin, grid = n.inputs[0], n.inputs[1]
    a, b = n.params["order_y"], n.params["order_x"]
    return [
        F._bilinear_sampler_sample(g[0], grid, order_y=a, order_x=b) if n.needs[0] else None,
        _grid_gradient(F, gin, g[0], grid, a, b) if n.needs[1] else None,
        None,
    ]


register(
    "_bilinear_sampler_scatter",
    inputs=("ograd", "grid", "like"),
    params=_order_params(),
    prepare=lambda p, name: _check_orders(p, name, "_bilinear_sampler_scatter"),
    forward=_bs_scatter,
    infer_shape=_bsc_shape,
    no_grad_inputs=("like",),
    gradient=_bsc_grad,
    doc="Adjoint of _bilinear_sampler_sample in its data (hidden; ``like`` gives the image shape).",
)


# ----------------------------------------------------------------------------
# SpatialTransformer
# ----------------------------------------------------------------------------


def _st_shape(params, in_shapes, out_shapes, where):
    d, loc = in_shapes
    if d is not None:
        _shape4(where, "data", d, "(batch, channel, H, W) input")
    if loc is not None and (len(loc) != 2 or loc[1] != 6):
        raise ShapeError(f"{where}: input 'loc' has shape {tuple(loc)}; expected (batch, 6) affine matrices")
    if d is not None and loc is not None and d[0] != loc[0]:
        raise ShapeError(f"{where}: inputs 'data' {tuple(d)} and 'loc' {tuple(loc)} must have the same batch size")
    ts = tuple(params["target_shape"])
    _check_target(where, ts)
    if d is None:
        return in_shapes, out_shapes
    hw = ts[0] * ts[1]
    return [d, (d[0], 6)], [(d[0], d[1]) + ts, (3, hw), (d[0], 2, hw)]


def _st_fwd(xp, data, loc, *, target_shape, transform_type, sampler_type, cudnn_off=None):
    grid, dst = _grid_fwd(xp, loc, transform_type="affine", target_shape=target_shape)
    out = _bs_sample(xp, data, grid)
    return out, dst, grid.reshape(grid.shape[0], 2, -1)


def _st_grad(F, n, g):
    # out = sample(data; G(loc)) with G = GridGenerator(affine):  d data = scatter(g; grid),
    # d loc = G^T (d grid). The grid is rebuilt from loc so that second-order terms flow through it.
    data, loc = n.inputs
    gy = g[0]
    ts = n.params["target_shape"]
    grid = F.GridGenerator(loc, transform_type="affine", target_shape=ts)
    out = [F._bilinear_sampler_scatter(gy, grid, data, order_y=0, order_x=0) if n.needs[0] else None, None]
    if n.needs[1]:
        out[1] = F._grid_generator_adjoint(
            _grid_gradient(F, gy, data, grid, 0, 0), transform_type="affine", target_shape=ts
        )
    return out


register(
    "SpatialTransformer",
    inputs=("data", "loc"),
    params={
        "target_shape": Param("shape", (0, 0)),
        "transform_type": Param("str", choices=("affine",)),
        "sampler_type": Param("str", choices=("bilinear",)),
        "cudnn_off": Param("bool", None, optional=True),
    },
    num_outputs=3,
    num_visible=1,
    output_names=("output", "grid_dst", "grid_src"),
    forward=_st_fwd,
    infer_shape=_st_shape,
    infer_type=float_inputs("data", "loc"),
    gradient=_st_grad,
    doc="Spatial transformer: an affine grid over target_shape from loc (batch, 6), then bilinear sampling of "
    "data (zero outside).",
)


# ----------------------------------------------------------------------------
# Correlation
# ----------------------------------------------------------------------------

_CORR_PARAMS = {
    "kernel_size": Param("int", 1),
    "max_displacement": Param("int", 1),
    "stride1": Param("int", 1),
    "stride2": Param("int", 1),
    "pad_size": Param("int", 0),
    "is_multiply": Param("bool", True),
}


def _corr_prepare(params, node_name, opname="Correlation"):
    where = f"{opname} {node_name!r}"
    for k in ("kernel_size", "stride1", "stride2"):
        if params[k] < 1:
            raise ParamError(f"{where}: parameter {k!r} must be >= 1, got {params[k]}")
    for k in ("max_displacement", "pad_size"):
        if params[k] < 0:
            raise ParamError(f"{where}: parameter {k!r} must be >= 0, got {params[k]}")
    if params["kernel_size"] % 2 == 0:
        raise ParamError(f"{where}: parameter 'kernel_size' must be odd, got {params['kernel_size']}")
    return params


def _corr_geom(p, H, W, where="Correlation"):
    """(top_h, top_w, displacements [(dy, dx)], sumelems) of MXNet's Correlation."""
    k, md, s1, s2, pad = p["kernel_size"], p["max_displacement"], p["stride1"], p["stride2"], p["pad_size"]
    border = md + (k - 1) // 2
    th = -(-(H + 2 * pad - 2 * border) // s1)
    tw = -(-(W + 2 * pad - 2 * border) // s1)
    if th < 1 or tw < 1:
        raise ShapeError(
            f"{where}: the neighbourhood (max_displacement={md}) and kernel (kernel_size={k}) do not "
            f"fit in the input {H}x{W} padded by {pad}"
        )
    r = md // s2
    gw = 2 * r + 1
    disps = [((q // gw - r) * s2, (q % gw - r) * s2) for q in range(gw * gw)]
    return th, tw, disps


def _corr_shape(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    for name, s in (("data1", a), ("data2", b)):
        if s is not None:
            _shape4(where, name, s, "(batch, channel, H, W) input")
    if a is not None and b is not None and tuple(a) != tuple(b):
        raise ShapeError(f"{where}: inputs 'data1' {tuple(a)} and 'data2' {tuple(b)} must have the same shape")
    x = a if a is not None else b
    if x is None:
        return in_shapes, out_shapes
    th, tw, disps = _corr_geom(params, x[2], x[3], where)
    pad = params["pad_size"]
    tmp = (x[0], x[2] + 2 * pad, x[3] + 2 * pad, x[1])
    return [tuple(x), tuple(x)], [(x[0], len(disps), th, tw), tmp, tmp]


def _corr_padded(xp, x, pad, acc):
    xa = x.astype(acc, copy=False)
    if not pad:
        return xa
    return xp.pad(xa, ((0, 0), (0, 0), (pad, pad), (pad, pad)))


def _corr_spans(p, th, tw):
    k, s1 = p["kernel_size"], p["stride1"]
    return (th - 1) * s1 + k, (tw - 1) * s1 + k


def _box_taps(p, th, tw):
    """Slices of the (span_y, span_x) map that kernel tap (h, w) reads for every output (i, j)."""
    k, s1 = p["kernel_size"], p["stride1"]
    for h in range(k):
        for w in range(k):
            yield (slice(h, h + (th - 1) * s1 + 1, s1), slice(w, w + (tw - 1) * s1 + 1, s1))


def _corr_fwd(xp, d1, d2, **p):
    acc = acc_dtype(d1.dtype)
    N, C, H, W = d1.shape
    th, tw, disps = _corr_geom(p, H, W)
    md, k = p["max_displacement"], p["kernel_size"]
    P1, P2 = _corr_padded(xp, d1, p["pad_size"], acc), _corr_padded(xp, d2, p["pad_size"], acc)
    sy, sx = _corr_spans(p, th, tw)
    a = P1[:, :, md : md + sy, md : md + sx]
    out = xp.zeros((N, len(disps), th, tw), dtype=acc)
    for q, (dy, dx) in enumerate(disps):
        b = P2[:, :, md + dy : md + dy + sy, md + dx : md + dx + sx]
        m = (a * b).sum(axis=1) if p["is_multiply"] else xp.abs(a - b).sum(axis=1)
        for ys, xs in _box_taps(p, th, tw):
            out[:, q] += m[:, ys, xs]
    out /= k * k * C
    tmp1, tmp2 = (xp.ascontiguousarray(P.transpose(0, 2, 3, 1)).astype(d1.dtype, copy=False) for P in (P1, P2))
    return out.astype(d1.dtype, copy=False), tmp1, tmp2


def _box_spread(xp, gq, p, th, tw, sy, sx):
    """Adjoint of the box sum: each output gradient added to its k x k patch -> (N, span_y, span_x)."""
    B = xp.zeros((gq.shape[0], sy, sx), dtype=gq.dtype)
    for ys, xs in _box_taps(p, th, tw):
        B[:, ys, xs] += gq
    return B


def _corr_adjoint_fwd(xp, g, other, *, which, **p):
    """Gradient of the multiplicative Correlation in data``which`` given the other input (linear in both)."""
    acc = acc_dtype(g.dtype)
    N, C, H, W = other.shape
    th, tw, disps = _corr_geom(p, H, W)
    md, pad, k = p["max_displacement"], p["pad_size"], p["kernel_size"]
    Po = _corr_padded(xp, other, pad, acc)
    ga = g.astype(acc, copy=False)
    sy, sx = _corr_spans(p, th, tw)
    G = xp.zeros(Po.shape, dtype=acc)
    for q, (dy, dx) in enumerate(disps):
        B = _box_spread(xp, ga[:, q], p, th, tw, sy, sx)[:, None]
        s1 = (slice(None), slice(None), slice(md, md + sy), slice(md, md + sx))
        s2 = (slice(None), slice(None), slice(md + dy, md + dy + sy), slice(md + dx, md + dx + sx))
        if which == 1:
            G[s1] += B * Po[s2]
        else:
            G[s2] += B * Po[s1]
    G = G[:, :, pad : pad + H, pad : pad + W] / (k * k * C)
    return xp.ascontiguousarray(G).astype(g.dtype, copy=False)


def _corr_grad(F, n, g):
    d1, d2 = n.inputs
    p = dict(n.params)
    if p["is_multiply"]:
        # out = corr(d1, d2) is bilinear:  d d1 = A1(g; d2),  d d2 = A2(g; d1)
        return [
            F._correlation_adjoint(g[0], d2, which=1, **p) if n.needs[0] else None,
            F._correlation_adjoint(g[0], d1, which=2, **p) if n.needs[1] else None,
        ]
    # out = sum |P1 - P2| / S:  d P1 = g sign(P1 - P2) / S (sign(0) = +1 as MXNet), d P2 = -that
    b = F._backward_Correlation(g[0], d1, d2, **p)
    return [b[0] if n.needs[0] else None, b[1] if n.needs[1] else None]


register(
    "Correlation",
    inputs=("data1", "data2"),
    params=dict(_CORR_PARAMS),
    prepare=_corr_prepare,
    num_outputs=3,
    num_visible=1,
    output_names=("output", "tmp1", "tmp2"),
    forward=_corr_fwd,
    infer_shape=_corr_shape,
    infer_type=float_inputs("data1", "data2"),
    gradient=_corr_grad,
    doc="FlowNet correlation of two feature maps: mean over k x k x C patches of products (is_multiply) or "
    "absolute differences, for every displacement within max_displacement (stride2) at stride1.",
)


def _corr_adj_grad(F, n, g):
    # A1(G; d2) = d/d d1 <G, corr(d1, d2)>:  <H, A1(G; d2)> = <G, corr(H, d2)>, linear in G and in d2:
    #   d G = corr(H, d2),  d d2 = A2(G; H).  Symmetrically for A2(G; d1): d G = corr(d1, H), d d1 = A1(G; H).
    gin, other = n.inputs
    p = {k: v for k, v in n.params.items() if k != "which"}
    if n.params["which"] == 1:
        return [
            F.Correlation(g[0], other, **p) if n.needs[0] else None,
            F._correlation_adjoint(gin, g[0], which=2, **p) if n.needs[1] else None,
        ]
    return [
        F.Correlation(other, g[0], **p) if n.needs[0] else None,
        F._correlation_adjoint(gin, g[0], which=1, **p) if n.needs[1] else None,
    ]


def _corr_adj_prepare(params, node_name):
    if params["which"] not in (1, 2):
        raise ParamError(f"_correlation_adjoint {node_name!r}: parameter 'which' must be 1 or 2, got {params['which']}")
    if not params["is_multiply"]:
        raise ParamError(f"_correlation_adjoint {node_name!r}: only the multiplicative correlation is bilinear")
    return _corr_prepare(params, node_name, "_correlation_adjoint")


register(
    "_correlation_adjoint",
    inputs=("ograd", "other"),
    params={**_CORR_PARAMS, "which": Param("int", 1)},
    prepare=_corr_adj_prepare,
    forward=_corr_adjoint_fwd,
    infer_shape=like_input1,
    gradient=_corr_adj_grad,
    doc="Adjoint of the multiplicative Correlation in data1 (which=1, other=data2) or data2 (which=2) (hidden).",
)


def _corr_abs_bwd(xp, g, d1, d2, **p):
    acc = acc_dtype(g.dtype)
    N, C, H, W = d1.shape
    th, tw, disps = _corr_geom(p, H, W)
    md, pad, k = p["max_displacement"], p["pad_size"], p["kernel_size"]
    P1, P2 = _corr_padded(xp, d1, pad, acc), _corr_padded(xp, d2, pad, acc)
    ga = g.astype(acc, copy=False)
    G1, G2 = xp.zeros(P1.shape, dtype=acc), xp.zeros(P2.shape, dtype=acc)
    sy, sx = _corr_spans(p, th, tw)
    one = xp.ones((), dtype=acc)
    for q, (dy, dx) in enumerate(disps):
        for ys, xs in _box_taps(p, th, tw):
            y0, x0 = ys.start + md, xs.start + md
            s1 = (
                slice(None),
                slice(None),
                slice(y0, y0 + ys.stop - ys.start, ys.step),
                slice(x0, x0 + xs.stop - xs.start, xs.step),
            )
            s2 = (
                slice(None),
                slice(None),
                slice(y0 + dy, y0 + dy + ys.stop - ys.start, ys.step),
                slice(x0 + dx, x0 + dx + xs.stop - xs.start, xs.step),
            )
            t = xp.where(P1[s1] >= P2[s2], one, -one) * ga[:, q : q + 1]
            G1[s1] += t
            G2[s2] -= t
    crop = (slice(None), slice(None), slice(pad, pad + H), slice(pad, pad + W))
    S = k * k * C
    return tuple(xp.ascontiguousarray(G[crop] / S).astype(g.dtype, copy=False) for G in (G1, G2))


register(
    "_backward_Correlation",
    inputs=("ograd", "data1", "data2"),
    params=dict(_CORR_PARAMS),
    num_outputs=2,
    forward=_corr_abs_bwd,
    infer_shape=lambda p, i, o, w: (i, [i[1], i[2]]),
    gradient=None,
    grad_undefined_reason="Correlation with is_multiply=False uses the fused hidden op _backward_Correlation, which "
    "has no gradient rule: second-order gradients through it are not defined",
    doc="Fused gradient of the absolute-difference Correlation (hidden).",
)


# ----------------------------------------------------------------------------
# im2col / col2im
# ----------------------------------------------------------------------------

_SLIDE_PARAMS = {
    "kernel": Param("shape"),
    "stride": Param("shape", ()),
    "dilate": Param("shape", ()),
    "pad": Param("shape", ()),
}


def _slide_prepare(opname):
    def prepare(params, node_name):
        where = f"{opname} {node_name!r}"
        k = tuple(params["kernel"])
        if len(k) not in (1, 2, 3):
            raise ParamError(f"{where}: parameter 'kernel' must be (w,), (h, w) or (d, h, w), got {k}")
        if any(v < 1 for v in k):
            raise ParamError(f"{where}: every entry of parameter 'kernel' must be >= 1, got {k}")
        out = dict(params)
        nd = len(k)
        out["stride"] = spatial_param(where, params, "stride", nd, 1, 1)
        out["dilate"] = spatial_param(where, params, "dilate", nd, 1, 1)
        out["pad"] = spatial_param(where, params, "pad", nd, 0, 0)
        if "output_size" in params:
            osz = tuple(params["output_size"])
            if len(osz) != nd or any(v < 1 for v in osz):
                raise ParamError(
                    f"{where}: parameter 'output_size'={osz} must have {nd} positive entries like kernel={k}"
                )
        return out

    return prepare


def _slide_out(params, X, where):
    k, s, d, p = params["kernel"], params["stride"], params["dilate"], params["pad"]
    return sliding_out(X, k, s, d, p, where, "size")


@wait_for_first_input
def _im2col_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    nd = len(params["kernel"])
    if len(x) != nd + 2:
        raise ShapeError(
            f"{where}: input 'data' has shape {tuple(x)} ({len(x)}-d), but kernel="
            f"{tuple(params['kernel'])} needs a {nd + 2}-d input"
        )
    Y = _slide_out(params, x[2:], where)
    return in_shapes, [(x[0], x[1] * math.prod(params["kernel"]), math.prod(Y))]


def _im2col_fwd(xp, x, *, kernel, stride, dilate, pad):
    Y = _slide_out({"kernel": kernel, "stride": stride, "dilate": dilate, "pad": pad}, x.shape[2:], "im2col")
    return im2col_columns(xp, x, kernel, stride, dilate, pad, Y)


def _col2im(xp, cols, X, kernel, stride, dilate, pad):
    """Adjoint of im2col: (N, C*prod(k), prod(Y)) summed back into (N, C, *X)."""
    k, s, d, p = kernel, stride, dilate, pad
    Y = _slide_out({"kernel": k, "stride": s, "dilate": d, "pad": p}, X, "col2im")
    acc = acc_dtype(cols.dtype)
    N = cols.shape[0]
    C = cols.shape[1] // math.prod(k)
    c = cols.astype(acc, copy=False).reshape((N, C) + tuple(k) + tuple(Y))
    hi = hi_pad(X, Y, k, s, d, p)
    buf = xp.zeros((N, C) + tuple(x + a + b for x, a, b in zip(X, p, hi)), dtype=acc)
    for tap in np.ndindex(*k):
        buf[tap_slices(tap, s, d, Y)] += c[(slice(None), slice(None)) + tap]
    crop = (slice(None), slice(None)) + tuple(slice(a, a + x) for a, x in zip(p, X))
    return xp.ascontiguousarray(buf[crop]).astype(cols.dtype, copy=False)


register(
    "im2col",
    params=dict(_SLIDE_PARAMS),
    prepare=_slide_prepare("im2col"),
    forward=_im2col_fwd,
    infer_shape=_im2col_shape,
    infer_type=float_inputs("data"),
    # im2col is linear (a gather of zero-padded windows):  d data = col2im(g) (its adjoint)
    gradient=lambda F, n, g: [F._im2col_adjoint(g[0], n.inputs[0], **n.params)],
    doc="Sliding blocks of (N, C, *X) as columns (N, C*prod(kernel), number of blocks), as Convolution's im2col.",
)


def _col2im_shape(params, in_shapes, out_shapes, where, X=None):
    (c,) = in_shapes
    if c is None:
        return in_shapes, out_shapes
    k = params["kernel"]
    X = tuple(params["output_size"]) if X is None else X
    if len(c) != 3:
        raise ShapeError(
            f"{where}: input 'data' has shape {tuple(c)}; col2im expects 3-d columns (N, C*prod(kernel), blocks)"
        )
    Y = _slide_out(params, X, where)
    if c[2] != math.prod(Y):
        raise ShapeError(
            f"{where}: input 'data' has {c[2]} blocks (axis 2), but output_size={X} with these "
            f"kernel/stride/dilate/pad gives {math.prod(Y)}"
        )
    if c[1] % math.prod(k):
        raise ShapeError(f"{where}: input 'data' axis 1 ({c[1]}) must be a multiple of prod(kernel)={math.prod(k)}")
    return in_shapes, [(c[0], c[1] // math.prod(k)) + tuple(X)]


def _col2im_fwd(xp, c, *, output_size, kernel, stride, dilate, pad):
    return _col2im(xp, c, tuple(output_size), kernel, stride, dilate, pad)


register(
    "col2im",
    params={"output_size": Param("shape"), **_SLIDE_PARAMS},
    prepare=_slide_prepare("col2im"),
    forward=_col2im_fwd,
    infer_shape=_col2im_shape,
    infer_type=float_inputs("data"),
    # col2im = im2col^T (linear):  d data = im2col(g)
    gradient=lambda F, n, g: [F.im2col(g[0], **{k: v for k, v in n.params.items() if k != "output_size"})],
    doc="Sum columns (N, C*prod(kernel), blocks) back into an image (N, C, *output_size): im2col's adjoint.",
)


@wait_for_inputs(1)
def _im2col_adj_shape(params, in_shapes, out_shapes, where):
    like = in_shapes[1]
    return _col2im_shape(params, in_shapes[:1], out_shapes, where, X=tuple(like[2:]))[0] + [like], [tuple(like)]


register(
    "_im2col_adjoint",
    inputs=("ograd", "like"),
    params=dict(_SLIDE_PARAMS),
    forward=lambda xp, g, like, **p: _col2im(xp, g, like.shape[2:], **p),
    infer_shape=_im2col_adj_shape,
    no_grad_inputs=("like",),
    # <H, im2col^T G> = <im2col H, G>
    gradient=lambda F, n, g: [F.im2col(g[0], **n.params), None],
    doc="col2im with the image size taken from ``like`` (hidden; im2col's gradient).",
)


# ----------------------------------------------------------------------------
# AdaptiveAvgPooling2D
# ----------------------------------------------------------------------------


def _adaptive_size(params, where):
    o = tuple(params["output_size"])
    if len(o) == 0:
        return (1, 1)
    if len(o) == 1:
        return (o[0], o[0])
    if len(o) == 2:
        return o
    raise ParamError(f"{where}: parameter 'output_size' must be an int or (height, width), got {o}")


def _adaptive_matrix(xp, isize, osize, dtype):
    """(osize, isize) averaging matrix: window o covers [floor(o*i/s), ceil((o+1)*i/s))."""
    m = np.zeros((osize, isize))
    for o in range(osize):
        a, b = (o * isize) // osize, -(-((o + 1) * isize) // osize)
        m[o, a:b] = 1.0 / (b - a)
    return xp.asarray(m.astype(dtype))


@wait_for_first_input
def _aap_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    _shape4(where, "data", x, "(batch, channel, H, W) input")
    o = _adaptive_size(params, where)
    if min(o) < 1:
        raise ShapeError(f"{where}: parameter 'output_size' must be positive, got {tuple(params['output_size'])}")
    return in_shapes, [tuple(x[:2]) + tuple(o)]


def _aap_fwd(xp, x, *, output_size):
    oh, ow = _adaptive_size({"output_size": output_size}, "AdaptiveAvgPooling2D")
    acc = acc_dtype(x.dtype)
    ph, pw = _adaptive_matrix(xp, x.shape[2], oh, acc), _adaptive_matrix(xp, x.shape[3], ow, acc)
    out = xp.matmul(xp.matmul(ph, x.astype(acc, copy=False)), pw.T)
    return out.astype(x.dtype, copy=False)


def _aap_adj_fwd(xp, g, like, *, output_size):
    acc = acc_dtype(g.dtype)
    oh, ow = g.shape[2:]
    ph, pw = _adaptive_matrix(xp, like.shape[2], oh, acc), _adaptive_matrix(xp, like.shape[3], ow, acc)
    out = xp.matmul(xp.matmul(ph.T, g.astype(acc, copy=False)), pw)
    return xp.ascontiguousarray(out).astype(g.dtype, copy=False)


register(
    "_contrib_AdaptiveAvgPooling2D",
    params={"output_size": Param("shape", ())},
    forward=_aap_fwd,
    infer_shape=_aap_shape,
    infer_type=float_inputs("data"),
    # out = Ph x Pw^T (linear):  d x = Ph^T g Pw
    gradient=lambda F, n, g: [F._adaptive_avg_pooling_adjoint(g[0], n.inputs[0], **n.params)],
    doc="2-D adaptive average pooling of (N, C, H, W) to output_size (int or (h, w); default 1): window o "
    "covers [floor(o*H/h), ceil((o+1)*H/h)).",
)
register(
    "_adaptive_avg_pooling_adjoint",
    inputs=("ograd", "like"),
    params={"output_size": Param("shape", ())},
    forward=_aap_adj_fwd,
    infer_shape=like_input1,
    no_grad_inputs=("like",),
    # <H, P^T G> = <P H, G>
    gradient=lambda F, n, g: [F._contrib_AdaptiveAvgPooling2D(g[0], **n.params), None],
    doc="Adjoint of AdaptiveAvgPooling2D (hidden).",
)


# ----------------------------------------------------------------------------
# BilinearResize2D
# ----------------------------------------------------------------------------

_RESIZE_MODES = ("size", "odd_scale", "like", "to_even_down", "to_even_up", "to_odd_down", "to_odd_up")


def _resize_prepare(params, node_name):
    where = f"_contrib_BilinearResize2D {node_name!r}"
    for k in ("height", "width"):
        if params[k] < 1:
            raise ParamError(f"{where}: parameter {k!r} must be >= 1, got {params[k]}")
    mode = params["mode"]
    if mode == "odd_scale" and (params["scale_height"] is None or params["scale_width"] is None):
        raise ParamError(f"{where}: mode='odd_scale' needs both 'scale_height' and 'scale_width'")
    if mode == "size" and params["scale_height"] is not None and params["scale_width"] is None:
        raise ParamError(f"{where}: mode='size' with 'scale_height' also needs 'scale_width' (as MXNet)")
    return params


def _scaled(scale, n):
    """int(float32(scale) * n) in float32, as MXNet's shape rule."""
    return int(np.float32(scale) * np.float32(n))


def _resize_size(p, x, like):
    H, W = x[2], x[3]
    mode = p["mode"]
    if mode == "size":
        if p["scale_height"] is not None:
            return _scaled(p["scale_height"], H), _scaled(p["scale_width"], W)
        return p["height"], p["width"]
    if mode == "odd_scale":
        return tuple(
            _scaled(s, n) if n % 2 == 0 else _scaled(s, n - 1) + 1
            for s, n in ((p["scale_height"], H), (p["scale_width"], W))
        )
    if mode == "like":
        return like[2], like[3]
    step = 1 if mode.endswith("_up") else -1
    parity = 0 if "even" in mode else 1
    return tuple(n if n % 2 == parity else n + step for n in (H, W))


def _resize_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    like = in_shapes[1] if len(in_shapes) > 1 else None
    if like is not None:
        _shape4(where, "like", like, "(batch, channel, H, W) input")
    if x is None or (params["mode"] == "like" and like is None):
        return in_shapes, out_shapes
    _shape4(where, "data", x, "(batch, channel, H, W) input")
    oh, ow = _resize_size(params, x, like)
    if oh < 1 or ow < 1:
        raise ShapeError(f"{where}: mode={params['mode']!r} resizes data {tuple(x)} to an empty ({oh}, {ow})")
    return in_shapes, [(x[0], x[1], oh, ow)]


def _resize_matrix(xp, isize, osize, align_corners, dtype):
    """(osize, isize) interpolation matrix with MXNet's float32 source-index arithmetic."""
    m = np.zeros((osize, isize))
    if isize == osize:
        m[np.arange(osize), np.arange(osize)] = 1.0
        return xp.asarray(m.astype(dtype))
    f32 = np.float32
    if osize > 1:
        scale = f32(isize - 1) / f32(osize - 1) if align_corners else f32(isize) / f32(osize)
    else:
        scale = f32(0)
    for o in range(osize):
        if align_corners:
            src = f32(scale * f32(o))
        else:
            src = f32(float(scale) * (o + 0.5) - 0.5)
            src = f32(0) if src < 0 else src
        i0 = int(src)
        step = 1 if i0 < isize - 1 else 0
        lam1 = float(f32(src - f32(i0)))
        m[o, i0] += 1.0 - lam1
        m[o, i0 + step] += lam1
    return xp.asarray(m.astype(dtype))


def _resize(xp, x, oh, ow, align_corners, adjoint=False, isize=None):
    acc = acc_dtype(x.dtype)
    ih, iw = isize if adjoint else x.shape[2:]
    rh = _resize_matrix(xp, ih, oh, align_corners, acc)
    rw = _resize_matrix(xp, iw, ow, align_corners, acc)
    xa = x.astype(acc, copy=False)
    out = xp.matmul(xp.matmul(rh.T, xa), rw) if adjoint else xp.matmul(xp.matmul(rh, xa), rw.T)
    return xp.ascontiguousarray(out).astype(x.dtype, copy=False)


def _resize_fwd(xp, x, like=None, **p):
    oh, ow = _resize_size(p, x.shape, None if like is None else like.shape)
    return _resize(xp, x, oh, ow, p["align_corners"])


def _resize_grad(F, n, g):
    # out = Rh x Rw^T (linear, the weights depend on the sizes only):  d x = Rh^T g Rw;
    # ``like`` only gives a size: MXNet writes a zero gradient for it
    out = [F._bilinear_resize_adjoint(g[0], n.inputs[0], align_corners=n.params["align_corners"])]
    if len(n.inputs) > 1:
        out.append(F.zeros_like(n.inputs[1]) if n.needs[1] else None)
    return out


register(
    "_contrib_BilinearResize2D",
    inputs=lambda p: ["data", "like"] if p["mode"] == "like" else ["data"],
    params={
        "height": Param("int", 1),
        "width": Param("int", 1),
        "scale_height": Param("float", None, optional=True),
        "scale_width": Param("float", None, optional=True),
        "mode": Param("str", "size", choices=_RESIZE_MODES),
        "align_corners": Param("bool", True),
    },
    prepare=_resize_prepare,
    forward=_resize_fwd,
    infer_shape=_resize_shape,
    infer_type=float_inputs("data"),
    gradient=_resize_grad,
    doc="Bilinear resize of (N, C, H, W) to (height, width), a scale, the size of ``like`` or the nearest "
    "even/odd size (mode), with or without align_corners.",
)


def _resize_adjoint_shape(params, in_shapes, out_shapes, where):
    """ograd (N, C, h, w) onto ``like`` (N, C, H, W): both 4-d with the same batch and channels."""
    g, like = in_shapes
    for name, shape in (("ograd", g), ("like", like)):
        if shape is not None and len(shape) != 4:
            raise ShapeError(f"{where}: input {name!r} must be 4-d (N, C, H, W), got {tuple(shape)}")
    if g is not None and like is not None and tuple(g[:2]) != tuple(like[:2]):
        raise ShapeError(
            f"{where}: input 'ograd' {tuple(g)} and 'like' {tuple(like)} differ in batch or channels (N, C)"
        )
    return in_shapes, [like] if like is not None else out_shapes


register(
    "_bilinear_resize_adjoint",
    inputs=("ograd", "like"),
    params={"align_corners": Param("bool", True)},
    forward=lambda xp, g, like, *, align_corners: _resize(
        xp, g, g.shape[2], g.shape[3], align_corners, adjoint=True, isize=like.shape[2:]
    ),
    infer_shape=_resize_adjoint_shape,
    no_grad_inputs=("like",),
    # <H, R^T G> = <R H, G>: R H is BilinearResize2D of H to G's size (mode='like')
    gradient=lambda F, n, g: [
        F._contrib_BilinearResize2D(g[0], n.inputs[0], mode="like", align_corners=n.params["align_corners"]),
        None,
    ],
    doc="Adjoint of BilinearResize2D (hidden; ``like`` gives the input size).",
)


# ----------------------------------------------------------------------------
# DeformableConvolution
# ----------------------------------------------------------------------------

_DEFORM_GEOM = {**_SLIDE_PARAMS, "num_deformable_group": Param("int", 1)}


def _deform_prepare(opname):
    def prepare(params, node_name):
        where = f"{opname} {node_name!r}"
        k = tuple(params["kernel"])
        if len(k) != 2:
            raise ParamError(
                f"{where}: parameter 'kernel' must be (h, w): MXNet implements 2-D deformable convolution only, got {k}"
            )
        if any(v < 1 for v in k):
            raise ParamError(f"{where}: every entry of parameter 'kernel' must be >= 1, got {k}")
        out = dict(params)
        out["stride"] = spatial_param(where, params, "stride", 2, 1, 1)
        out["dilate"] = spatial_param(where, params, "dilate", 2, 1, 1)
        out["pad"] = spatial_param(where, params, "pad", 2, 0, 0)
        for name in ("num_filter", "num_group", "num_deformable_group"):
            if name in params and params[name] < 1:
                raise ParamError(f"{where}: parameter {name!r} must be >= 1, got {params[name]}")
        if "num_filter" in params and params["num_filter"] % params["num_group"]:
            raise ParamError(
                f"{where}: parameter 'num_filter'={params['num_filter']} must be divisible by "
                f"'num_group'={params['num_group']}"
            )
        if "layout" in params:
            check_layout(where, params["layout"], 2)
        if "order_y" in params:
            _check_orders(params, node_name, opname)
        if "direction" in params and params["direction"] not in (0, 1):
            raise ParamError(f"{where}: parameter 'direction' must be 0 or 1, got {params['direction']}")
        return out

    return prepare


def _geom_of(p):
    return {k: p[k] for k in _DEFORM_GEOM}


def _deform_out(p, H, W, where):
    return _slide_out(p, (H, W), where)


def _deform_positions(xp, offset, p, acc):
    """Sample positions (N, dg, K*Ho*Wo) of every deformable group, kernel tap and output position."""
    kh, kw = p["kernel"]
    sh, sw = p["stride"]
    dh, dw = p["dilate"]
    ph, pw = p["pad"]
    dg = p["num_deformable_group"]
    N, _, Ho, Wo = offset.shape
    off = offset.astype(acc, copy=False).reshape(N, dg, kh * kw, 2, Ho, Wo)
    ti = xp.repeat(xp.arange(kh), kw).astype(acc)
    tj = xp.tile(xp.arange(kw), kh).astype(acc)
    base_y = (ti * dh - ph)[:, None, None] + (xp.arange(Ho, dtype=acc) * sh)[None, :, None]
    base_x = (tj * dw - pw)[:, None, None] + (xp.arange(Wo, dtype=acc) * sw)[None, None, :]
    py = (off[:, :, :, 0] + base_y).reshape(N, dg, -1)
    px = (off[:, :, :, 1] + base_x).reshape(N, dg, -1)
    return py, px


def _deform_columns(xp, data, offset, mask, order_y, order_x, border, p):
    """Deformable columns (N, C*K, Ho, Wo), channel-major like im2col, each tap times ``mask`` unless None."""
    acc = acc_dtype(data.dtype)
    N, C, H, W = data.shape
    dg = p["num_deformable_group"]
    Ho, Wo = offset.shape[2:]
    K = math.prod(p["kernel"])
    py, px = _deform_positions(xp, offset, p, acc)
    cols = _sample(xp, data.astype(acc, copy=False).reshape(N, dg, C // dg, H, W), py, px, order_y, order_x, border)
    if mask is not None:
        cols = cols * mask.astype(acc, copy=False).reshape(N, dg, 1, K * Ho * Wo)
    return cols.reshape(N, C * K, Ho, Wo).astype(data.dtype, copy=False)


def _deform_im2col_fwd(xp, data, offset, *, order_y=0, order_x=0, **p):
    """Deformable columns (N, C*K, Ho, Wo), channel-major like im2col."""
    return _deform_columns(xp, data, offset, None, order_y, order_x, "deform", p)


def _deform_image(xp, cols, offset, mask, like, order_y, order_x, border, p):
    """Adjoint of ``_deform_columns`` in data: the columns (N, C*K, Ho, Wo), each tap times ``mask`` unless None,
    added back at their sample positions into an image shaped like ``like``."""
    acc = acc_dtype(cols.dtype)
    N, C, H, W = like.shape
    dg = p["num_deformable_group"]
    py, px = _deform_positions(xp, offset, p, acc)
    vals = cols.astype(acc, copy=False).reshape(N, dg, C // dg, -1)
    if mask is not None:
        vals = vals * mask.astype(acc, copy=False).reshape(N, dg, 1, -1)
    out = _scatter(xp, vals, py, px, order_y, order_x, border, H, W)
    return out.reshape(N, C, H, W).astype(cols.dtype, copy=False)


def _deform_col2im_fwd(xp, cols, offset, like, *, order_y=0, order_x=0, **p):
    return _deform_image(xp, cols, offset, None, like, order_y, order_x, "deform", p)


def _groups(cols_shape, p):
    """Deformable columns (N, C*K, Ho, Wo) split by group: (N, dg, C/dg, K, Ho, Wo)."""
    N, CK, Ho, Wo = cols_shape
    dg = p["num_deformable_group"]
    K = math.prod(p["kernel"])
    return N, dg, CK // (dg * K), K, Ho, Wo


def _group_sums(vals, p):
    """Per deformable group, kernel tap and position, the sum over the group's channels: (N, dg, K, Ho, Wo)."""
    return vals.reshape(_groups(vals.shape, p)).sum(axis=2)


def _group_spread(xp, sel, like, p):
    """Adjoint of ``_group_sums``: ``sel`` (N, dg, 1, K, Ho, Wo) repeated over each group's channels, shaped
    like the columns ``like``."""
    return xp.ascontiguousarray(xp.broadcast_to(sel, _groups(like.shape, p))).reshape(like.shape)


def _pack_fwd(xp, vals, *, direction, **p):
    """Per deformable group, kernel tap and position, the sum over the group's channels, placed in the
    offset layout (channel g*2K + 2k + direction; the other direction's channels are 0)."""
    s = _group_sums(vals, p)
    N, dg, K, Ho, Wo = s.shape
    out = xp.zeros((N, dg, K, 2, Ho, Wo), dtype=vals.dtype)
    out[:, :, :, direction] = s
    return out.reshape(N, dg * K * 2, Ho, Wo)


def _unpack_fwd(xp, g, like, *, direction, **p):
    N, dg, _, K, Ho, Wo = _groups(like.shape, p)
    return _group_spread(xp, g.reshape(N, dg, 1, K, 2, Ho, Wo)[:, :, :, :, direction], like, p)


# The gradient rules below serve both the plain deformable ops and the modulated ones (next section): ``mask``
# None selects the plain columns C_ab(data; offset), a mask the modulated M_ab(data; offset, mask).


def _im2col_op(F, data, offset, mask, a, b, p):
    """The deformable columns of derivative order (a, b) as a graph op (modulated where ``mask`` is given)."""
    if mask is None:
        return F._deformable_im2col(data, offset, order_y=a, order_x=b, **p)
    return F._modulated_deformable_im2col(data, offset, mask, order_y=a, order_x=b, **p)


def _col2im_op(F, cols, offset, mask, like, a, b, p):
    """Adjoint of ``_im2col_op`` in data, as a graph op (``like`` gives the image shape)."""
    if mask is None:
        return F._deformable_col2im(cols, offset, like, order_y=a, order_x=b, **p)
    return F._modulated_deformable_col2im(cols, offset, mask, like, order_y=a, order_x=b, **p)


def _offset_gradient(F, head, data, offset, mask, a, b, p):
    """Gradient in the offset of <head, im2col_ab(data; offset[, mask])>: direction 0 (y) from order (a+1, b),
    direction 1 (x) from (a, b+1), each summed over the deformable group's channels."""
    terms = []
    for direction, (oy, ox) in enumerate(((a + 1, b), (a, b + 1))):
        if oy > 1 or ox > 1:  # k'' = 0 away from the kinks
            continue
        deriv = _im2col_op(F, data, offset, mask, oy, ox, p)
        terms.append(F._deformable_offset_pack(head * deriv, direction=direction, **p))
    if not terms:
        return F.zeros_like(offset)
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _mask_gradient(F, head, data, offset, mask, a, b, p):
    """Gradient in the mask of <head, M_ab(data; offset, mask)>: group sums of head * sample_ab(data)."""
    plain = F._modulated_deformable_im2col(data, offset, F.ones_like(mask), order_y=a, order_x=b, **p)
    return F._deformable_mask_pack(head * plain, **p)


def _columns_grads(F, head, data, offset, mask, a, b, p, needs):
    """Gradients of <head, im2col_ab(data; offset[, mask])> in data (col2im_ab: the columns are linear in
    data), offset and, where given, mask; None where ``needs`` says no."""
    out = [
        _col2im_op(F, head, offset, mask, data, a, b, p) if needs[0] else None,
        _offset_gradient(F, head, data, offset, mask, a, b, p) if needs[1] else None,
    ]
    if mask is not None:
        out.append(_mask_gradient(F, head, data, offset, mask, a, b, p) if needs[2] else None)
    return out


def _col2im_grads(F, n, g, mask):
    """Gradients of col2im_ab(G; offset[, mask], like): d G = im2col_ab(H), d offset (and d mask) as im2col's
    with data -> H and head -> G (rule at ``_dc2i_grad``); none for ``like``."""
    cols, offset = n.inputs[0], n.inputs[1]
    p = _geom_of(n.params)
    a, b = n.params["order_y"], n.params["order_x"]
    dcols = _im2col_op(F, g[0], offset, mask, a, b, p) if n.needs[0] else None
    rest = _columns_grads(F, cols, g[0], offset, mask, a, b, p, (False, *n.needs[1:]))
    return [dcols, *rest[1:], None]


@wait_for_inputs(0, 1)
def _dcol_shape(params, in_shapes, out_shapes, where):
    """(N, C*K) + the offset's spatial size, from data and offset (inputs 0 and 1; a mask may follow)."""
    d, off = in_shapes[0], in_shapes[1]
    return in_shapes, [(d[0], d[1] * math.prod(params["kernel"])) + tuple(off[2:])]


def _dcol_grad(F, n, g):
    # cols = im2col_ab(data; offset): linear in data (adjoint col2im_ab), offset via the next order
    data, offset = n.inputs
    a, b = n.params["order_y"], n.params["order_x"]
    return _columns_grads(F, g[0], data, offset, None, a, b, _geom_of(n.params), n.needs)


register(
    "_deformable_im2col",
    inputs=("data", "offset"),
    params={**_DEFORM_GEOM, **_order_params()},
    prepare=_deform_prepare("_deformable_im2col"),
    forward=_deform_im2col_fwd,
    infer_shape=_dcol_shape,
    gradient=_dcol_grad,
    doc="Deformable im2col (N, C*K, Ho, Wo), or its derivative of order (order_y, order_x) in the offsets (hidden).",
)


def _dc2i_grad(F, n, g):
    # <H, col2im_ab(G; offset)> = <im2col_ab(H; offset), G>:  d G = im2col_ab(H),  d offset as im2col's with
    # data -> H and head -> G
    return _col2im_grads(F, n, g, None)


register(
    "_deformable_col2im",
    inputs=("data", "offset", "like"),
    params={**_DEFORM_GEOM, **_order_params()},
    prepare=_deform_prepare("_deformable_col2im"),
    forward=_deform_col2im_fwd,
    infer_shape=like_input(2),
    no_grad_inputs=("like",),
    gradient=_dc2i_grad,
    doc="Adjoint of _deformable_im2col in its data (hidden; ``like`` gives the image shape).",
)


def _packed_shape(per_tap):
    """Shape rule of a pack op: ``(N, per_tap * K * num_deformable_group, *spatial)`` from its ``(N, ...)`` input
    (offsets: 2 per kernel tap, masks: 1)."""

    @wait_for_first_input
    def rule(params, in_shapes, out_shapes, where):
        (v,) = in_shapes
        K = math.prod(params["kernel"])
        return in_shapes, [(v[0], per_tap * K * params["num_deformable_group"]) + tuple(v[2:])]

    return rule


register(
    "_deformable_offset_pack",
    params={**_DEFORM_GEOM, "direction": Param("int", 0)},
    prepare=_deform_prepare("_deformable_offset_pack"),
    forward=_pack_fwd,
    infer_shape=_packed_shape(2),
    # linear; adjoint: broadcast each offset channel back over its group's channels
    gradient=lambda F, n, g: [F._deformable_offset_unpack(g[0], n.inputs[0], **n.params)],
    doc="Group-sum of deformable columns into one direction of the offset layout (hidden).",
)
register(
    "_deformable_offset_unpack",
    inputs=("ograd", "like"),
    params={**_DEFORM_GEOM, "direction": Param("int", 0)},
    prepare=_deform_prepare("_deformable_offset_unpack"),
    forward=_unpack_fwd,
    infer_shape=like_input1,
    no_grad_inputs=("like",),
    gradient=lambda F, n, g: [F._deformable_offset_pack(g[0], **n.params), None],
    doc="Adjoint of _deformable_offset_pack (hidden).",
)


def _dconv_inputs(params):
    return ["data", "offset", "weight"] if params["no_bias"] else ["data", "offset", "weight", "bias"]


def _dconv_shape(params, in_shapes, out_shapes, where):
    ins = list(in_shapes)
    f, g, dg = params["num_filter"], params["num_group"], params["num_deformable_group"]
    kh, kw = params["kernel"]
    K = kh * kw
    if not params["no_bias"]:
        expect_input_shape(ins, 3, "bias", (f,), where, " (num_filter)")
    x = ins[0]
    if x is None:
        return ins, out_shapes
    _shape4(where, "data", x, "(batch, channel, H, W) input")
    c = x[1]
    if c % g:
        raise ShapeError(f"{where}: num_group={g} must divide the {c} input channels of data {tuple(x)}")
    if c % dg:
        raise ShapeError(f"{where}: num_deformable_group={dg} must divide the {c} input channels of data {tuple(x)}")
    expect_input_shape(ins, 2, "weight", (f, c // g, kh, kw), where)
    Y = _deform_out(params, x[2], x[3], where)
    what = " (batch, 2*kernel_h*kernel_w*num_deformable_group, output H, output W)"
    expect_input_shape(ins, 1, "offset", (x[0], 2 * K * dg) + Y, where, what)
    return ins, [(x[0], f) + Y]


def _grouped_conv(xp, cols, weight, bias, num_filter, num_group, dtype):
    """The convolution of (deformable) im2col columns ``(N, C*K, Ho, Wo)``: one matmul per group over the batch,
    plus the bias, computed in the accumulation dtype and returned in ``dtype``."""
    acc = acc_dtype(dtype)
    N, CK, Ho, Wo = cols.shape
    g = num_group
    out = xp.matmul(
        weight.astype(acc, copy=False).reshape(g, num_filter // g, CK // g),
        cols.astype(acc, copy=False).reshape(N, g, CK // g, Ho * Wo),
    )
    out = out.reshape(N, num_filter, Ho, Wo)
    if bias is not None:
        out = out + bias.astype(acc, copy=False).reshape(1, -1, 1, 1)
    return out.astype(dtype, copy=False)


def _dconv_fwd(xp, data, offset, weight, bias=None, *, num_filter, num_group, **p):
    cols = _deform_im2col_fwd(xp, data, offset, **_geom_of(p))
    return _grouped_conv(xp, cols, weight, bias, num_filter, num_group, data.dtype)


def _pointwise_geom(num_group):
    """The hidden convolution ops' parameters for the grouped 1x1 convolution of the deformable columns."""
    return {
        "kernel": (1, 1),
        "stride": (1, 1),
        "dilate": (1, 1),
        "pad": (0, 0),
        "num_group": num_group,
        "target_shape": (),
    }


def _columns_conv_grad(F, n, g, mask):
    """Gradients of a deformable convolution (modulated where ``mask`` is given), inputs data, offset[, mask],
    weight[, bias]: the rule at ``_dconv_grad``, with the columns' rules of ``_columns_grads``."""
    k = 2 if mask is None else 3  # the weight's input
    data, offset, weight = n.inputs[0], n.inputs[1], n.inputs[k]
    gy = g[0]
    p = _geom_of(n.params)
    hp = _pointwise_geom(n.params["num_group"])
    cols = _im2col_op(F, data, offset, mask, 0, 0, p)
    out = [None] * (k + 1)
    if any(n.needs[:k]):
        gcols = F._conv_transpose_like(gy, F.reshape(weight, shape=(0, -1, 1, 1)), cols, **hp)
        out[:k] = _columns_grads(F, gcols, data, offset, mask, 0, 0, p, n.needs)
    if n.needs[k]:
        out[k] = F.reshape_like(F._conv_weight_grad(cols, gy, **hp), weight)
    if not n.params["no_bias"]:
        out.append(F.sum(gy, axis=1, exclude=True) if n.needs[k + 1] else None)
    return out


def _dconv_grad(F, n, g):
    # out = conv1x1(cols(data; offset), W') + b, with cols the deformable columns (N, C*K, Ho, Wo) and
    # W' = W reshaped (F, C/g*K, 1, 1): a grouped 1x1 convolution. So (Convolution's hidden ops):
    #   d cols = corr^T(g, W'),  d W' = wgrad(cols, g),  d b = sum of g over all axes but 1,
    #   d data = col2im(d cols; offset),  d offset = group sums of d cols * d cols/d position.
    return _columns_conv_grad(F, n, g, None)


_DCONV_PARAMS = {  # MXNet's field order (the modulated version adds im2col_step before layout)
    "kernel": Param("shape"),
    "stride": Param("shape", ()),
    "dilate": Param("shape", ()),
    "pad": Param("shape", ()),
    "num_filter": Param("int"),
    "num_group": Param("int", 1),
    "num_deformable_group": Param("int", 1),
    "workspace": Param("int", 1024),
    "no_bias": Param("bool", False),
    "layout": Param("str", None, choices=("NCW", "NCHW", "NCDHW")),
}

register(
    "_contrib_DeformableConvolution",
    inputs=_dconv_inputs,
    params=_DCONV_PARAMS,
    prepare=_deform_prepare("_contrib_DeformableConvolution"),
    forward=_dconv_fwd,
    infer_shape=_dconv_shape,
    infer_type=float_inputs("data", "offset"),
    gradient=_dconv_grad,
    doc="2-D deformable convolution: every kernel tap reads data bilinearly at its position plus a learned "
    "offset (offset (N, 2*kh*kw*num_deformable_group, Ho, Wo), (dy, dx) per tap).",
)


# ----------------------------------------------------------------------------
# ModulatedDeformableConvolution (DCNv2)
# ----------------------------------------------------------------------------
#
# cols_m = expand(mask) * sample(data; positions(offset)): DeformableConvolution's columns with MXNet's
# modulated border rule (the ``zero`` kernel: a tap outside the image reads 0, so a sample fades to 0
# within one pixel of the border; src/operator/contrib/nn/modulated_deformable_im2col.h) and every
# sample multiplied by its mask value (mask (N, dg*kh*kw, Ho, Wo): one value per deformable group, kernel
# tap and output position, shared by the group's channels). With ``M_ab(data, offset, mask) =
# expand(mask) * sample_ab(data)`` (derivative orders as above) and ``pack``/``mpack`` the group sums into
# the offset / mask layouts:
#
#     d data   <G, M_ab>  = scatter_ab(G * expand(mask))                    = _modulated_deformable_col2im
#     d offset <G, M_ab>  = pack_y(G * M_(a+1)b) + pack_x(G * M_a(b+1))     (orders > 1 vanish)
#     d mask   <G, M_ab>  = mpack(G * sample_ab(data)) = mpack(G * M_ab(data, offset, ones))
#
# and col2im is im2col's adjoint in data (<H, C_ab(G)> = <M_ab(H), G>), so the same three rules with
# data -> H give its gradients: every order of differentiation closes on these four hidden ops.


def _mdeform_im2col_fwd(xp, data, offset, mask, *, order_y=0, order_x=0, **p):
    return _deform_columns(xp, data, offset, mask, order_y, order_x, "zero", p)


def _mdeform_col2im_fwd(xp, cols, offset, mask, like, *, order_y=0, order_x=0, **p):
    return _deform_image(xp, cols, offset, mask, like, order_y, order_x, "zero", p)


def _mask_pack_fwd(xp, vals, **p):
    """Per deformable group, kernel tap and position, the sum over the group's channels (mask layout)."""
    s = _group_sums(vals, p)
    N, dg, K, Ho, Wo = s.shape
    return s.reshape(N, dg * K, Ho, Wo)


def _mask_unpack_fwd(xp, g, like, **p):
    N, dg, _, K, Ho, Wo = _groups(like.shape, p)
    return _group_spread(xp, g.reshape(N, dg, 1, K, Ho, Wo), like, p)


def _mdcol_grad(F, n, g):
    # M_ab is linear in data (adjoint col2im_ab); offset via the next order, mask via M_ab(data, offset, ones)
    data, offset, mask = n.inputs
    a, b = n.params["order_y"], n.params["order_x"]
    return _columns_grads(F, g[0], data, offset, mask, a, b, _geom_of(n.params), n.needs)


register(
    "_modulated_deformable_im2col",
    inputs=("data", "offset", "mask"),
    params={**_DEFORM_GEOM, **_order_params()},
    prepare=_deform_prepare("_modulated_deformable_im2col"),
    forward=_mdeform_im2col_fwd,
    infer_shape=_dcol_shape,
    gradient=_mdcol_grad,
    doc="Modulated deformable im2col (N, C*K, Ho, Wo) (zero border, times the mask), or its derivative of "
    "order (order_y, order_x) in the offsets (hidden).",
)


def _mdc2i_grad(F, n, g):
    # <H, col2im_ab(G; offset, mask)> = <M_ab(H; offset, mask), G>: d G = M_ab(H); d offset / d mask as
    # im2col's with data -> H and head -> G
    return _col2im_grads(F, n, g, n.inputs[2])


register(
    "_modulated_deformable_col2im",
    inputs=("data", "offset", "mask", "like"),
    params={**_DEFORM_GEOM, **_order_params()},
    prepare=_deform_prepare("_modulated_deformable_col2im"),
    forward=_mdeform_col2im_fwd,
    infer_shape=like_input(3),
    no_grad_inputs=("like",),
    gradient=_mdc2i_grad,
    doc="Adjoint of _modulated_deformable_im2col in its data (hidden; ``like`` gives the image shape).",
)


register(
    "_deformable_mask_pack",
    params=dict(_DEFORM_GEOM),
    prepare=_deform_prepare("_deformable_mask_pack"),
    forward=_mask_pack_fwd,
    infer_shape=_packed_shape(1),
    # linear; adjoint: broadcast each mask channel back over its group's channels
    gradient=lambda F, n, g: [F._deformable_mask_unpack(g[0], n.inputs[0], **n.params)],
    doc="Group-sum of deformable columns into the mask layout (hidden).",
)
register(
    "_deformable_mask_unpack",
    inputs=("ograd", "like"),
    params=dict(_DEFORM_GEOM),
    prepare=_deform_prepare("_deformable_mask_unpack"),
    forward=_mask_unpack_fwd,
    infer_shape=like_input1,
    no_grad_inputs=("like",),
    gradient=lambda F, n, g: [F._deformable_mask_pack(g[0], **n.params), None],
    doc="Adjoint of _deformable_mask_pack (hidden).",
)


def _mdconv_inputs(params):
    base = ["data", "offset", "mask", "weight"]
    return base if params["no_bias"] else base + ["bias"]


def _mdconv_prepare(params, node_name):
    out = _deform_prepare("_contrib_ModulatedDeformableConvolution")(params, node_name)
    check_at_least(params, "im2col_step", 1, f"_contrib_ModulatedDeformableConvolution {node_name!r}")
    return out


def _mdconv_shape(params, in_shapes, out_shapes, where):
    # DeformableConvolution's rules for data/offset/weight/bias, then the mask and MXNet's extra checks
    no_mask = list(in_shapes[:2]) + list(in_shapes[3:])
    ins, outs = _dconv_shape(params, no_mask, out_shapes, where)
    ins = list(ins[:2]) + [in_shapes[2]] + list(ins[2:])
    x = ins[0]
    if x is None:
        return ins, outs
    f, dg, step = params["num_filter"], params["num_deformable_group"], params["im2col_step"]
    if f % dg:
        raise ShapeError(f"{where}: num_deformable_group={dg} must divide num_filter={f} (as MXNet checks)")
    if x[0] > step and x[0] % step:
        raise ShapeError(
            f"{where}: batch size {x[0]} of data {tuple(x)} must be at most or a multiple of "
            f"im2col_step={step} (as MXNet)"
        )
    want = (x[0], math.prod(params["kernel"]) * dg) + tuple(outs[0][2:])
    what = " (batch, kernel_h*kernel_w*num_deformable_group, output H, output W)"
    expect_input_shape(ins, 2, "mask", want, where, what)
    return ins, outs


def _mdconv_fwd(xp, data, offset, mask, weight, bias=None, *, num_filter, num_group, **p):
    cols = _mdeform_im2col_fwd(xp, data, offset, mask, **_geom_of(p))
    return _grouped_conv(xp, cols, weight, bias, num_filter, num_group, data.dtype)


def _mdconv_grad(F, n, g):
    # out = conv1x1(cols_m, W') + b with cols_m = M_00(data; offset, mask) and W' = W as (F, C/g*K, 1, 1):
    #   d cols = corr^T(g, W'),  d W' = wgrad(cols_m, g),  d b = sum of g over all axes but 1,
    #   d data / d offset / d mask: the rules of M_00 (header of this section) with head d cols.
    return _columns_conv_grad(F, n, g, n.inputs[2])


register(
    "_contrib_ModulatedDeformableConvolution",
    inputs=_mdconv_inputs,
    params={k: v for k, v in _DCONV_PARAMS.items() if k != "layout"}
    | {"im2col_step": Param("int", 64), "layout": _DCONV_PARAMS["layout"]},
    prepare=_mdconv_prepare,
    forward=_mdconv_fwd,
    infer_shape=_mdconv_shape,
    infer_type=float_inputs("data", "offset", "mask"),
    gradient=_mdconv_grad,
    doc="2-D modulated deformable convolution (DCNv2): every kernel tap reads data bilinearly (0 outside the "
    "image) at its position plus a learned offset, times a learned mask (offset (N, 2*kh*kw*dg, Ho, Wo), "
    "mask (N, kh*kw*dg, Ho, Wo)).",
)
