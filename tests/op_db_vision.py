"""OpInfo rows for the spatial / vision operators (symgrad/ops/vision.py): GridGenerator, BilinearSampler,
SpatialTransformer, Correlation, im2col/col2im, AdaptiveAvgPooling2D, BilinearResize2D, DeformableConvolution
and _contrib_ModulatedDeformableConvolution (DCNv2). References are plain-numpy loops written from MXNet
1.9.1's cpu kernels (DCNv2's from contrib/nn/modulated_deformable_im2col.h).

Sample positions (grids, deformable offsets) are drawn a fraction 0.15..0.85 of a pixel away from every
integer pixel coordinate: the bilinear kernel has kinks there.
"""

import math

import numpy as np
from op_info import In, OpInfo, unary_row

import symgrad as sg

S = sg.sym

F16 = {np.float16: (2e-2, 2e-2)}


def _frac(rng, shape, span=1):
    """Integer parts in [-span, span] plus a fraction in [0.15, 0.85]: never within 0.15 of an integer."""
    return rng.integers(-span, span + 1, shape) + rng.uniform(0.15, 0.85, shape)


# -- GridGenerator ------------------------------------------------------------------------------------------


def ref_grid_affine(theta, H, W):
    N = theta.shape[0]
    out = np.zeros((N, 2, H, W))
    for n in range(N):
        A = theta[n].reshape(2, 3)
        for i in range(H):
            for j in range(W):
                x, y = -1 + 2 * j / (W - 1), -1 + 2 * i / (H - 1)
                out[n, :, i, j] = A @ np.array([x, y, 1.0])
    return out


def ref_grid_warp(flow):
    N, _, H, W = flow.shape
    out = np.zeros_like(flow)
    for i in range(H):
        for j in range(W):
            out[:, 0, i, j] = (flow[:, 0, i, j] + j) / ((W - 1) / 2) - 1
            out[:, 1, i, j] = (flow[:, 1, i, j] + i) / ((H - 1) / 2) - 1
    return out


# -- BilinearSampler / SpatialTransformer -------------------------------------------------------------------


def ref_bilinear_sampler(data, grid):
    N, C, H, W = data.shape
    Ho, Wo = grid.shape[2:]
    out = np.zeros((N, C, Ho, Wo))
    for n in range(N):
        for h in range(Ho):
            for w in range(Wo):
                x = (grid[n, 0, h, w] + 1) * (W - 1) / 2
                y = (grid[n, 1, h, w] + 1) * (H - 1) / 2
                x0, y0 = math.floor(x), math.floor(y)
                for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
                    for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
                        if 0 <= yy < H and 0 <= xx < W:
                            out[n, :, h, w] += data[n, :, yy, xx] * wy * wx
    return out


def sample_grid(N, H, W, Ho, Wo):
    """A normalised grid whose pixel positions are off the integers (and may leave the image by < 1 px)."""

    def draw(rng):
        x = rng.integers(-1, W, (N, Ho, Wo)) + rng.uniform(0.15, 0.85, (N, Ho, Wo))
        y = rng.integers(-1, H, (N, Ho, Wo)) + rng.uniform(0.15, 0.85, (N, Ho, Wo))
        return np.stack([2 * x / (W - 1) - 1, 2 * y / (H - 1) - 1], axis=1)

    return draw


def sample_loc(N, H, W, Ho, Wo):
    """Affine matrices (N, 6) whose grid over (Ho, Wo) lands off the integer pixels of an H x W image."""

    def draw(rng):
        while True:
            loc = np.concatenate(
                [
                    rng.uniform(0.5, 0.9, (N, 1)),
                    rng.uniform(-0.3, 0.3, (N, 2)),
                    rng.uniform(-0.3, 0.3, (N, 1)),
                    rng.uniform(0.5, 0.9, (N, 1)),
                    rng.uniform(-0.3, 0.3, (N, 1)),
                ],
                axis=1,
            )
            g = ref_grid_affine(loc, Ho, Wo)
            px, py = (g[:, 0] + 1) * (W - 1) / 2, (g[:, 1] + 1) * (H - 1) / 2
            dist = min(np.abs(px - np.round(px)).min(), np.abs(py - np.round(py)).min())
            if dist > 0.05:
                return loc

    return draw


def ref_spatial_transformer(data, loc, H, W):
    return ref_bilinear_sampler(data, ref_grid_affine(loc, H, W))


# -- Correlation ---------------------------------------------------------------------------------------------


def ref_correlation(d1, d2, k=1, md=1, s1=1, s2=1, pad=0, mult=True):
    N, C, H, W = d1.shape
    P1 = np.pad(d1, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    P2 = np.pad(d2, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    border = md + (k - 1) // 2
    th = math.ceil((H + 2 * pad - 2 * border) / s1)
    tw = math.ceil((W + 2 * pad - 2 * border) / s1)
    r = md // s2
    gw = 2 * r + 1
    out = np.zeros((N, gw * gw, th, tw))
    for n in range(N):
        for q in range(gw * gw):
            dx, dy = (q % gw - r) * s2, (q // gw - r) * s2
            for i in range(th):
                for j in range(tw):
                    y1, x1 = i * s1 + md, j * s1 + md
                    a = P1[n, :, y1 : y1 + k, x1 : x1 + k]
                    b = P2[n, :, y1 + dy : y1 + dy + k, x1 + dx : x1 + dx + k]
                    out[n, q, i, j] = ((a * b).sum() if mult else np.abs(a - b).sum()) / (k * k * C)
    return out


# -- im2col / col2im -----------------------------------------------------------------------------------------


def _windows(X, k, s, d, p):
    Y = [(x + 2 * pi - (ki - 1) * di - 1) // si + 1 for x, ki, si, di, pi in zip(X, k, s, d, p)]
    return Y


def ref_im2col(x, k, s, d, p):
    N, C = x.shape[:2]
    X = x.shape[2:]
    Y = _windows(X, k, s, d, p)
    K = math.prod(k)
    out = np.zeros((N, C * K, math.prod(Y)))
    for c in range(C):
        for t, tap in enumerate(np.ndindex(*k)):
            for o, pos in enumerate(np.ndindex(*Y)):
                src = [oi * si - pi + ti * di for oi, si, pi, ti, di in zip(pos, s, p, tap, d)]
                if all(0 <= a < b for a, b in zip(src, X)):
                    out[:, c * K + t, o] = x[(slice(None), c) + tuple(src)]
    return out


def ref_col2im(cols, X, k, s, d, p):
    N = cols.shape[0]
    K = math.prod(k)
    C = cols.shape[1] // K
    Y = _windows(X, k, s, d, p)
    out = np.zeros((N, C) + tuple(X))
    for c in range(C):
        for t, tap in enumerate(np.ndindex(*k)):
            for o, pos in enumerate(np.ndindex(*Y)):
                src = [oi * si - pi + ti * di for oi, si, pi, ti, di in zip(pos, s, p, tap, d)]
                if all(0 <= a < b for a, b in zip(src, X)):
                    out[(slice(None), c) + tuple(src)] += cols[:, c * K + t, o]
    return out


# -- AdaptiveAvgPooling2D / BilinearResize2D -----------------------------------------------------------------


def ref_adaptive_avg(x, oh, ow):
    N, C, H, W = x.shape
    out = np.zeros((N, C, oh, ow))
    for i in range(oh):
        h0, h1 = math.floor(i * H / oh), math.ceil((i + 1) * H / oh)
        for j in range(ow):
            w0, w1 = math.floor(j * W / ow), math.ceil((j + 1) * W / ow)
            out[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return out


def _src_index(o, isize, osize, align):
    """MXNet's float32 source coordinate of output index o (area_pixel_compute_source_index)."""
    f = np.float32
    if osize > 1:
        scale = f(isize - 1) / f(osize - 1) if align else f(isize) / f(osize)
    else:
        scale = f(0)
    if align:
        return f(scale * f(o))
    src = f(float(scale) * (o + 0.5) - 0.5)
    return max(src, f(0))


def ref_bilinear_resize(x, oh, ow, align=True):
    N, C, H, W = x.shape
    if (oh, ow) == (H, W):
        return x.copy()
    out = np.zeros((N, C, oh, ow))
    for i in range(oh):
        hr = _src_index(i, H, oh, align)
        h0 = int(hr)
        hp = 1 if h0 < H - 1 else 0
        lh = float(np.float32(hr - np.float32(h0)))
        for j in range(ow):
            wr = _src_index(j, W, ow, align)
            w0 = int(wr)
            wp = 1 if w0 < W - 1 else 0
            lw = float(np.float32(wr - np.float32(w0)))
            out[:, :, i, j] = (1 - lh) * ((1 - lw) * x[:, :, h0, w0] + lw * x[:, :, h0, w0 + wp]) + lh * (
                (1 - lw) * x[:, :, h0 + hp, w0] + lw * x[:, :, h0 + hp, w0 + wp]
            )
    return out


# -- DeformableConvolution -----------------------------------------------------------------------------------


def _adaptive_row(name, shape, out_hw, **params):
    """AdaptiveAvgPooling2D of an input of ``shape`` with ``params``, to ``out_hw``."""
    op = S._contrib_AdaptiveAvgPooling2D
    return unary_row(f"AdaptiveAvgPooling2D_{name}", op, shape, lambda x: ref_adaptive_avg(x, *out_hw), F16, **params)


def _resize_row(name, shape, out_hw, align=True, **params):
    """BilinearResize2D of one input of ``shape`` with ``params``, to ``out_hw`` (``align``: align_corners)."""

    def ref(x):
        return ref_bilinear_resize(x, *out_hw, align=align)

    return unary_row(f"BilinearResize2D_{name}", S._contrib_BilinearResize2D, shape, ref, F16, **params)


def _deform_sample(img, y, x):
    """MXNet's deformable sample: 0 outside [0, H) x [0, W); the last row/column is read as a constant."""
    H, W = img.shape
    if not (0 <= y < H and 0 <= x < W):
        return 0.0
    y0, x0 = math.floor(y), math.floor(x)
    if y0 >= H - 1:
        y1, y = H - 1, float(y0)
    else:
        y1 = y0 + 1
    if x0 >= W - 1:
        x1, x = W - 1, float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return (
        (1 - ly) * (1 - lx) * img[y0, x0]
        + (1 - ly) * lx * img[y0, x1]
        + ly * (1 - lx) * img[y1, x0]
        + ly * lx * img[y1, x1]
    )


def _deform_columns(data, offset, mask, kernel, stride, dilate, pad, dg, sample):
    """``cols[n, c, i, j, ho, wo]``: channel ``c`` read by ``sample`` at tap (i, j) of output pixel (ho, wo),
    moved by the offsets of its deformable group ``c // (C // dg)`` (and times ``mask`` there, unless None)."""
    N, C = data.shape[:2]
    kh, kw = kernel
    Ho, Wo = offset.shape[2:]
    cols = np.zeros((N, C, kh, kw, Ho, Wo))
    for n in range(N):
        for c in range(C):
            g = c // (C // dg)
            for i in range(kh):
                for j in range(kw):
                    t = i * kw + j
                    ch = g * 2 * kh * kw + 2 * t
                    for ho in range(Ho):
                        for wo in range(Wo):
                            y = ho * stride[0] - pad[0] + i * dilate[0] + offset[n, ch, ho, wo]
                            x = wo * stride[1] - pad[1] + j * dilate[1] + offset[n, ch + 1, ho, wo]
                            v = sample(data[n, c], y, x)
                            cols[n, c, i, j, ho, wo] = v if mask is None else mask[n, g * kh * kw + t, ho, wo] * v
    return cols


def _grouped_conv(cols, weight, bias, num_group):
    """The convolution of the sampled columns: ``out[n, f] = sum over f's group of channels c and taps (i, j) of
    weight[f, c, i, j] * cols[n, c, i, j] (+ bias[f])``."""
    N, C, kh, kw, Ho, Wo = cols.shape
    F = weight.shape[0]
    out = np.zeros((N, F, Ho, Wo))
    cg, fg = C // num_group, F // num_group
    for n in range(N):
        for f in range(F):
            grp = f // fg
            for cc in range(cg):
                c = grp * cg + cc
                for i in range(kh):
                    for j in range(kw):
                        out[n, f] += weight[f, cc, i, j] * cols[n, c, i, j]
            if bias is not None:
                out[n, f] += bias[f]
    return out


def ref_deformable_conv(
    data, offset, weight, bias=None, kernel=(2, 2), stride=(1, 1), dilate=(1, 1), pad=(0, 0), num_group=1, dg=1
):
    cols = _deform_columns(data, offset, None, kernel, stride, dilate, pad, dg, _deform_sample)
    return _grouped_conv(cols, weight, bias, num_group)


def _offset_shape(N, dg, kernel, Ho, Wo):
    return (N, 2 * kernel[0] * kernel[1] * dg, Ho, Wo)


# -- ModulatedDeformableConvolution ----------------------------------------------------------------------------


def _zero_border_sample(img, y, x):
    """MXNet's modulated sample: 0 unless -1 < y < H and -1 < x < W; corner pixels outside read 0."""
    H, W = img.shape
    if not (-1 < y < H and -1 < x < W):
        return 0.0
    y0, x0 = math.floor(y), math.floor(x)
    ly, lx = y - y0, x - x0
    total = 0.0
    for yy, wy in ((y0, 1 - ly), (y0 + 1, ly)):
        for xx, wx in ((x0, 1 - lx), (x0 + 1, lx)):
            if 0 <= yy <= H - 1 and 0 <= xx <= W - 1:
                total += wy * wx * img[yy, xx]
    return total


def ref_modulated_deformable_conv(
    data, offset, mask, weight, bias=None, kernel=(2, 2), stride=(1, 1), dilate=(1, 1), pad=(0, 0), num_group=1, dg=1
):
    cols = _deform_columns(data, offset, mask, kernel, stride, dilate, pad, dg, _zero_border_sample)
    return _grouped_conv(cols, weight, bias, num_group)


#: the grouped, padded, strided and dilated case of both deformable convolutions (op parameters, and the same
#: for the references)
_DCN_GROUPS = dict(
    kernel=(2, 2),
    stride=(2, 1),
    pad=(1, 1),
    dilate=(1, 2),
    num_filter=2,
    num_group=2,
    num_deformable_group=2,
    no_bias=True,
)
_DCN_GROUPS_REF = dict(stride=(2, 1), pad=(1, 1), dilate=(1, 2), num_group=2, dg=2)


def _mdcn_inputs(N, C, H, W, F, kernel, Ho, Wo, num_group=1, dg=1, bias=True, span=1):
    K = kernel[0] * kernel[1]
    ins = {
        "data": In((N, C, H, W)),
        "offset": In((N, 2 * K * dg, Ho, Wo), sample=lambda r: _frac(r, (N, 2 * K * dg, Ho, Wo), span)),
        "mask": In((N, K * dg, Ho, Wo), low=0.0, high=1.0),
        "weight": In((F, C // num_group) + tuple(kernel)),
    }
    if bias:
        ins["bias"] = In((F,))
    return ins


OPS = [
    # -- GridGenerator ----------------------------------------------------------------------------------------
    OpInfo(
        "GridGenerator_affine",
        lambda t: S.GridGenerator(t, transform_type="affine", target_shape=(3, 4)),
        {"theta": In((2, 6))},
        lambda t: ref_grid_affine(t, 3, 4),
        fwd_tol=F16,
    ),
    OpInfo(
        "GridGenerator_warp",
        lambda f: S.GridGenerator(f, transform_type="warp"),
        {"flow": In((2, 2, 3, 4))},
        ref_grid_warp,
        fwd_tol=F16,
    ),
    # -- BilinearSampler --------------------------------------------------------------------------------------
    OpInfo(
        "BilinearSampler",
        S.BilinearSampler,
        {"data": In((2, 2, 3, 4)), "grid": In((2, 2, 2, 3), sample=sample_grid(2, 3, 4, 2, 3))},
        ref_bilinear_sampler,
        fwd_tol=F16,
    ),
    OpInfo(
        "BilinearSampler_upsample",
        lambda d, g: S.BilinearSampler(d, g, cudnn_off=True),
        {"data": In((1, 1, 2, 3)), "grid": In((1, 2, 3, 4), sample=sample_grid(1, 2, 3, 3, 4))},
        ref_bilinear_sampler,
        fwd_tol=F16,
    ),
    # -- SpatialTransformer -----------------------------------------------------------------------------------
    OpInfo(
        "SpatialTransformer",
        lambda d, loc: S.SpatialTransformer(
            d, loc, target_shape=(3, 3), transform_type="affine", sampler_type="bilinear"
        ),
        {"data": In((2, 2, 4, 5)), "loc": In((2, 6), sample=sample_loc(2, 4, 5, 3, 3))},
        lambda d, loc: ref_spatial_transformer(d, loc, 3, 3),
        fwd_tol=F16,
    ),
    # -- Correlation ------------------------------------------------------------------------------------------
    OpInfo(
        "Correlation_multiply",
        lambda a, b: S.Correlation(a, b, kernel_size=1, max_displacement=1),
        {"data1": In((1, 2, 4, 4)), "data2": In((1, 2, 4, 4))},
        lambda a, b: ref_correlation(a, b),
        fwd_tol=F16,
    ),
    OpInfo(
        "Correlation_kernel3_pad_strides",
        lambda a, b: S.Correlation(a, b, kernel_size=3, max_displacement=2, stride1=2, stride2=2, pad_size=2),
        {"data1": In((1, 2, 4, 5)), "data2": In((1, 2, 4, 5))},
        lambda a, b: ref_correlation(a, b, k=3, md=2, s1=2, s2=2, pad=2),
        fwd_tol=F16,
    ),
    # |a - b| has a kink at a == b (and at a == 0 against the zero padding): inputs away from 0, and two
    # independent draws are never within the finite-difference step of each other
    OpInfo(
        "Correlation_abs",
        lambda a, b: S.Correlation(a, b, kernel_size=1, max_displacement=1, pad_size=1, is_multiply=False),
        {"data1": In((1, 2, 3, 3), away=0.1), "data2": In((1, 2, 3, 3), low=1.2, high=2.0)},
        lambda a, b: ref_correlation(a, b, pad=1, mult=False),
        second_order=False,
        fwd_tol=F16,
    ),
    # -- im2col / col2im --------------------------------------------------------------------------------------
    OpInfo(
        "im2col_2d",
        lambda x: S.im2col(x, kernel=(2, 2), stride=(1, 2), dilate=(1, 1), pad=(1, 0)),
        {"x": In((2, 2, 3, 4))},
        lambda x: ref_im2col(x, (2, 2), (1, 2), (1, 1), (1, 0)),
    ),
    OpInfo(
        "im2col_2d_dilate",
        lambda x: S.im2col(x, kernel=(2, 2), dilate=(2, 1)),
        {"x": In((1, 2, 4, 3))},
        lambda x: ref_im2col(x, (2, 2), (1, 1), (2, 1), (0, 0)),
    ),
    OpInfo(
        "im2col_1d",
        lambda x: S.im2col(x, kernel=(3,), stride=(2,), pad=(1,)),
        {"x": In((2, 2, 5))},
        lambda x: ref_im2col(x, (3,), (2,), (1,), (1,)),
    ),
    OpInfo(
        "im2col_3d",
        lambda x: S.im2col(x, kernel=(2, 1, 2)),
        {"x": In((1, 1, 2, 2, 3))},
        lambda x: ref_im2col(x, (2, 1, 2), (1, 1, 1), (1, 1, 1), (0, 0, 0)),
    ),
    OpInfo(
        "col2im_2d",
        lambda c: S.col2im(c, output_size=(3, 4), kernel=(2, 2), stride=(1, 2), pad=(1, 0)),
        {"c": In((2, 8, 8))},
        lambda c: ref_col2im(c, (3, 4), (2, 2), (1, 2), (1, 1), (1, 0)),
    ),
    OpInfo(
        "col2im_1d_dilate",
        lambda c: S.col2im(c, output_size=(5,), kernel=(2,), dilate=(2,)),
        {"c": In((1, 4, 3))},
        lambda c: ref_col2im(c, (5,), (2,), (1,), (2,), (0,)),
    ),
    # -- AdaptiveAvgPooling2D ---------------------------------------------------------------------------------
    _adaptive_row("overlap", (2, 2, 5, 4), (2, 3), output_size=(2, 3)),
    _adaptive_row("int_size", (1, 2, 4, 7), (3, 3), output_size=3),
    _adaptive_row("global", (2, 3, 3, 2), (1, 1)),
    # -- BilinearResize2D -------------------------------------------------------------------------------------
    _resize_row("size", (2, 2, 3, 4), (5, 3), height=5, width=3),
    _resize_row("no_align", (1, 2, 5, 3), (2, 7), align=False, height=2, width=7, align_corners=False),
    _resize_row("scale", (1, 2, 4, 6), (6, 3), scale_height=1.5, scale_width=0.5),
    _resize_row("odd_scale", (1, 1, 3, 4), (5, 8), scale_height=2.0, scale_width=2.0, mode="odd_scale"),
    OpInfo(
        "BilinearResize2D_like",
        lambda x, like: S._contrib_BilinearResize2D(x, like, mode="like"),
        {"x": In((1, 2, 3, 3)), "like": In((1, 1, 4, 2))},
        lambda x, like: ref_bilinear_resize(x, 4, 2),
        fwd_tol=F16,
    ),
    _resize_row("to_odd_up", (1, 1, 4, 3), (5, 3), align=False, mode="to_odd_up", align_corners=False),
    # -- DeformableConvolution --------------------------------------------------------------------------------
    OpInfo(
        "DeformableConvolution",
        lambda d, o, w, b: S._contrib_DeformableConvolution(d, o, w, b, kernel=(2, 2), num_filter=2),
        {
            "data": In((1, 2, 4, 4)),
            "offset": In(
                _offset_shape(1, 1, (2, 2), 3, 3), sample=lambda r: _frac(r, _offset_shape(1, 1, (2, 2), 3, 3))
            ),
            "weight": In((2, 2, 2, 2)),
            "bias": In((2,)),
        },
        lambda d, o, w, b: ref_deformable_conv(d, o, w, b),
        fwd_tol=F16,
    ),
    OpInfo(
        "DeformableConvolution_groups_pad_stride",
        lambda d, o, w: S._contrib_DeformableConvolution(d, o, w, **_DCN_GROUPS),
        {
            "data": In((1, 4, 3, 4)),
            "offset": In(
                _offset_shape(1, 2, (2, 2), 2, 4), sample=lambda r: _frac(r, _offset_shape(1, 2, (2, 2), 2, 4))
            ),
            "weight": In((2, 2, 2, 2)),
        },
        lambda d, o, w: ref_deformable_conv(d, o, w, None, **_DCN_GROUPS_REF),
        fwd_tol=F16,
    ),
    # -- ModulatedDeformableConvolution: symbolic gradients for data, offset, mask, weight, bias ----------------
    OpInfo(
        "ModulatedDeformableConvolution",
        lambda d, o, m, w, b: S._contrib_ModulatedDeformableConvolution(d, o, m, w, b, kernel=(2, 2), num_filter=2),
        _mdcn_inputs(1, 2, 4, 4, 2, (2, 2), 3, 3),
        lambda d, o, m, w, b: ref_modulated_deformable_conv(d, o, m, w, b),
        fwd_tol=F16,
    ),
    OpInfo(
        "ModulatedDeformableConvolution_groups_pad_stride",
        lambda d, o, m, w: S._contrib_ModulatedDeformableConvolution(d, o, m, w, **_DCN_GROUPS),
        _mdcn_inputs(1, 4, 3, 3, 2, (2, 2), 2, 3, num_group=2, dg=2, bias=False),
        lambda d, o, m, w: ref_modulated_deformable_conv(d, o, m, w, None, **_DCN_GROUPS_REF),
        fwd_tol=F16,
    ),
    # offsets up to +-3 pixels: many samples fade out past the border or fall outside entirely
    OpInfo(
        "ModulatedDeformableConvolution_far_offsets_batch2",
        lambda d, o, m, w, b: S._contrib_ModulatedDeformableConvolution(
            d, o, m, w, b, kernel=(1, 2), num_filter=3, im2col_step=1
        ),
        _mdcn_inputs(2, 1, 3, 3, 3, (1, 2), 3, 2, span=3),
        lambda d, o, m, w, b: ref_modulated_deformable_conv(d, o, m, w, b, kernel=(1, 2)),
        fwd_tol=F16,
    ),
]
