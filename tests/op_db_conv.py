"""OpInfo rows for convolution, deconvolution and upsampling (symgrad/ops/conv.py), with the hidden ops the
convolution gradients are made of.

References are plain-numpy loops written from MXNet 1.9's definitions (the C++ CPU
kernels' index arithmetic), independent of symgrad's im2col code: convolution as a
sum over output positions and kernel taps, deconvolution as the scatter of each
input element through the kernel.
"""

import itertools

import numpy as np
from np_refs import per_axis
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym


# -- convolution -----------------------------------------------------------------


def conv_ref(x, w, b=None, stride=None, pad=None, dilate=None, groups=1):
    """out[n, f, o] = b[f] + sum_{c in group(f), t} w[f, c, t] x[n, c, o*s - p + t*d] (zero outside x)."""
    nd = x.ndim - 2
    k = w.shape[2:]
    s, p, d = per_axis(stride, nd, 1), per_axis(pad, nd, 0), per_axis(dilate, nd, 1)
    xpad = np.zeros(x.shape[:2] + tuple(n + 2 * pi for n, pi in zip(x.shape[2:], p)))
    xpad[(slice(None), slice(None)) + tuple(slice(pi, pi + n) for pi, n in zip(p, x.shape[2:]))] = x
    N, C = x.shape[:2]
    F = w.shape[0]
    cg, fg = C // groups, F // groups
    Y = [(xpad.shape[2 + i] - (k[i] - 1) * d[i] - 1) // s[i] + 1 for i in range(nd)]
    out = np.zeros((N, F) + tuple(Y))
    for o in itertools.product(*[range(y) for y in Y]):
        for f in range(F):
            gi = f // fg
            acc = np.zeros(N)
            for t in itertools.product(*[range(kk) for kk in k]):
                pos = tuple(o[i] * s[i] + t[i] * d[i] for i in range(nd))
                for c in range(cg):
                    acc += xpad[(slice(None), gi * cg + c) + pos] * w[(f, c) + t]
            out[(slice(None), f) + o] = acc + (0.0 if b is None else b[f])
    return out


def deconv_ref(x, w, b=None, stride=None, pad=None, adj=None, dilate=None, groups=1, target=None):
    """Scatter every x[n, c, o] through w[c, f, t] to position o*s + t*d of the uncropped output,
    then crop pad at the start (MXNet's InferPad for target_shape)."""
    nd = x.ndim - 2
    k = w.shape[2:]
    s, p, a, d = per_axis(stride, nd, 1), per_axis(pad, nd, 0), per_axis(adj, nd, 0), per_axis(dilate, nd, 1)
    Y = x.shape[2:]
    full = [s[i] * (Y[i] - 1) + d[i] * (k[i] - 1) + 1 for i in range(nd)]
    if target:
        total = [full[i] - target[i] for i in range(nd)]
        p = tuple((t + 1) // 2 for t in total)
        a = tuple(t % 2 for t in total)
    size = [full[i] - 2 * p[i] + a[i] for i in range(nd)]
    N, C = x.shape[:2]
    fg = w.shape[1]
    F = fg * groups
    cg = C // groups
    buf = np.zeros((N, F) + tuple(full[i] + a[i] for i in range(nd)))
    for o in itertools.product(*[range(y) for y in Y]):
        for c in range(C):
            gi = c // cg
            for t in itertools.product(*[range(kk) for kk in k]):
                pos = tuple(o[i] * s[i] + t[i] * d[i] for i in range(nd))
                for f in range(fg):
                    buf[(slice(None), gi * fg + f) + pos] += x[(slice(None), c) + o] * w[(c, f) + t]
    out = buf[(slice(None), slice(None)) + tuple(slice(p[i], p[i] + size[i]) for i in range(nd))]
    if b is not None:
        out = out + b.reshape((1, -1) + (1,) * nd)
    return out


def wgrad_ref(x, gy, k, stride=None, pad=None, dilate=None, groups=1):
    """dW[f, c, t] = sum_{n, o} gy[n, f, o] x[n, group(f)*C/g + c, o*s - p + t*d]."""
    nd = x.ndim - 2
    s, p, d = per_axis(stride, nd, 1), per_axis(pad, nd, 0), per_axis(dilate, nd, 1)
    xpad = np.pad(x, [(0, 0), (0, 0)] + [(pi, pi + 4 * si) for pi, si in zip(p, s)])
    N, C = x.shape[:2]
    F = gy.shape[1]
    cg, fg = C // groups, F // groups
    dw = np.zeros((F, cg) + tuple(k))
    for f in range(F):
        gi = f // fg
        for c in range(cg):
            for t in itertools.product(*[range(kk) for kk in k]):
                for o in itertools.product(*[range(y) for y in gy.shape[2:]]):
                    pos = tuple(o[i] * s[i] + t[i] * d[i] for i in range(nd))
                    dw[(f, c) + t] += (gy[(slice(None), f) + o] * xpad[(slice(None), gi * cg + c) + pos]).sum()
    return dw


def _conv(**kw):
    def make(x, w, b=None):
        return S.Convolution(x, w, b, name="conv", **kw) if b is not None else S.Convolution(x, w, name="conv", **kw)

    return make


def _deconv(**kw):
    def make(x, w, b=None):
        if b is not None:
            return S.Deconvolution(x, w, b, name="deconv", no_bias=False, **kw)
        return S.Deconvolution(x, w, name="deconv", **kw)

    return make


F16_LOOSE = {np.float16: (2e-2, 2e-2)}

CONV_OPS = [
    OpInfo(
        "Convolution_2d",
        _conv(kernel=(3, 3), num_filter=3),
        {"x": In((1, 2, 5, 5)), "w": In((3, 2, 3, 3)), "b": In((3,))},
        conv_ref,
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Convolution_2d_stride_pad",
        _conv(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=2),
        {"x": In((1, 2, 5, 5)), "w": In((2, 2, 3, 3)), "b": In((2,))},
        lambda x, w, b: conv_ref(x, w, b, stride=(2, 2), pad=(1, 1)),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Convolution_2d_dilate_mixed",
        _conv(kernel=(3, 2), stride=(2, 1), dilate=(1, 2), pad=(1, 2), num_filter=2),
        {"x": In((1, 2, 6, 5)), "w": In((2, 2, 3, 2)), "b": In((2,))},
        lambda x, w, b: conv_ref(x, w, b, stride=(2, 1), pad=(1, 2), dilate=(1, 2)),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Convolution_2d_group",
        _conv(kernel=(2, 2), num_filter=4, num_group=2),
        {"x": In((1, 4, 4, 4)), "w": In((4, 2, 2, 2)), "b": In((4,))},
        lambda x, w, b: conv_ref(x, w, b, groups=2),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Convolution_2d_depthwise_no_bias",
        _conv(kernel=(3, 3), pad=(1, 1), num_filter=3, num_group=3, no_bias=True),
        {"x": In((1, 3, 4, 4)), "w": In((3, 1, 3, 3))},
        lambda x, w: conv_ref(x, w, pad=(1, 1), groups=3),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Convolution_1x1_no_bias",
        _conv(kernel=(1, 1), num_filter=2, no_bias=True),
        {"x": In((2, 3, 3, 3)), "w": In((2, 3, 1, 1))},
        lambda x, w: conv_ref(x, w),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Convolution_1x1_stride2",
        _conv(kernel=(1, 1), stride=(2, 2), num_filter=2, no_bias=True),
        {"x": In((1, 3, 5, 4)), "w": In((2, 3, 1, 1))},
        lambda x, w: conv_ref(x, w, stride=(2, 2)),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Convolution_1d",
        _conv(kernel=(3,), stride=(2,), pad=(1,), dilate=(2,), num_filter=2),
        {"x": In((2, 2, 8)), "w": In((2, 2, 3)), "b": In((2,))},
        lambda x, w, b: conv_ref(x, w, b, stride=(2,), pad=(1,), dilate=(2,)),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Convolution_3d",
        _conv(kernel=(2, 2, 2), stride=(1, 2, 1), pad=(1, 0, 1), num_filter=2),
        {"x": In((1, 2, 3, 4, 3)), "w": In((2, 2, 2, 2, 2)), "b": In((2,))},
        lambda x, w, b: conv_ref(x, w, b, stride=(1, 2, 1), pad=(1, 0, 1)),
        fwd_tol=F16_LOOSE,
    ),
    # -- Deconvolution (no_bias defaults to True) ------------------------------------
    OpInfo(
        "Deconvolution_2d",
        _deconv(kernel=(3, 3), num_filter=2),
        {"x": In((1, 2, 3, 3)), "w": In((2, 2, 3, 3))},
        deconv_ref,
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Deconvolution_2d_stride_pad_adj_bias",
        _deconv(kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1), num_filter=3),
        {"x": In((1, 2, 3, 3)), "w": In((2, 3, 3, 3)), "b": In((3,))},
        lambda x, w, b: deconv_ref(x, w, b, stride=(2, 2), pad=(1, 1), adj=(1, 1)),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Deconvolution_2d_target_shape",
        _deconv(kernel=(3, 3), stride=(2, 2), target_shape=(6, 5), num_filter=2),
        {"x": In((1, 2, 3, 3)), "w": In((2, 2, 3, 3))},
        lambda x, w: deconv_ref(x, w, stride=(2, 2), target=(6, 5)),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Deconvolution_2d_group",
        _deconv(kernel=(2, 2), stride=(2, 2), num_filter=4, num_group=2),
        {"x": In((1, 4, 2, 3)), "w": In((4, 2, 2, 2))},
        lambda x, w: deconv_ref(x, w, stride=(2, 2), groups=2),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Deconvolution_1d_dilate",
        _deconv(kernel=(3,), stride=(2,), dilate=(2,), pad=(1,), num_filter=3),
        {"x": In((2, 2, 4)), "w": In((2, 3, 3))},
        lambda x, w: deconv_ref(x, w, stride=(2,), dilate=(2,), pad=(1,)),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "Deconvolution_3d",
        _deconv(kernel=(2, 2, 2), stride=(2, 1, 1), num_filter=2),
        {"x": In((1, 2, 2, 2, 2)), "w": In((2, 2, 2, 2, 2))},
        lambda x, w: deconv_ref(x, w, stride=(2, 1, 1)),
        fwd_tol=F16_LOOSE,
    ),
]

# The hidden ops the gradients are made of, checked directly so that their own gradient
# rules (used from third order on for Convolution) are proven too.
_G = dict(kernel=(3, 2), stride=(2, 1), dilate=(1, 2), pad=(1, 1), num_group=2)
HIDDEN_CONV_OPS = [
    OpInfo(
        "_conv_forward_like",
        lambda b, w, like: S._conv_forward_like(b, w, like, **_G),
        {"b": In((1, 4, 5, 4)), "w": In((2, 2, 3, 2)), "like": In((1, 2, 3, 4), grad=False)},
        lambda b, w, like: conv_ref(b, w, stride=(2, 1), pad=(1, 1), dilate=(1, 2), groups=2),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "_conv_transpose_like",
        lambda s, w, like: S._conv_transpose_like(s, w, like, **_G),
        {"s": In((1, 2, 3, 4)), "w": In((2, 2, 3, 2)), "like": In((1, 4, 6, 4), grad=False)},
        lambda s, w, like: deconv_ref(s, w, stride=(2, 1), pad=(1, 1), adj=(1, 0), dilate=(1, 2), groups=2),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "_conv_weight_grad",
        lambda b, g: S._conv_weight_grad(b, g, **_G),
        {"b": In((1, 4, 5, 4)), "g": In((1, 2, 3, 4))},
        lambda b, g: wgrad_ref(b, g, (3, 2), stride=(2, 1), pad=(1, 1), dilate=(1, 2), groups=2),
        fwd_tol=F16_LOOSE,
    ),
]


# -- UpSampling ---------------------------------------------------------------------


def _nearest(x, scale):
    return np.repeat(np.repeat(x, scale, axis=2), scale, axis=3)


def _bilinear_ref(x, w, scale):
    """MXNet: a depthwise Deconvolution, kernel 2*scale - scale%2 (the weight), stride scale, pad ceil((scale-1)/2)."""
    pad = int(np.ceil((scale - 1) / 2))
    return deconv_ref(x, w, stride=(scale, scale), pad=(pad, pad), groups=x.shape[1])


UP_OPS = [
    OpInfo(
        "UpSampling_nearest",
        lambda x: S.UpSampling(x, scale=2, sample_type="nearest"),
        {"x": In((1, 2, 2, 3))},
        lambda x: _nearest(x, 2),
    ),
    OpInfo(
        "UpSampling_nearest_concat",
        lambda a, b: S.UpSampling(a, b, scale=2, sample_type="nearest"),
        {"a": In((1, 2, 2, 2)), "b": In((1, 1, 1, 1))},
        lambda a, b: np.concatenate([_nearest(a, 2), _nearest(b, 4)], axis=1),
    ),
    OpInfo(
        "UpSampling_nearest_sum",
        lambda a, b: S.UpSampling(a, b, scale=2, sample_type="nearest", multi_input_mode="sum", num_args=2),
        {"a": In((1, 2, 2, 2)), "b": In((1, 2, 4, 4))},
        lambda a, b: _nearest(a, 2) + b,
    ),
    OpInfo(
        "UpSampling_bilinear",
        lambda x, w: S.UpSampling(x, w, scale=2, sample_type="bilinear", num_filter=2),
        {"x": In((1, 2, 2, 3)), "w": In((2, 1, 4, 4))},
        lambda x, w: _bilinear_ref(x, w, 2),
        fwd_tol=F16_LOOSE,
    ),
    OpInfo(
        "UpSampling_bilinear_scale3",
        lambda x, w: S.UpSampling(x, w, scale=3, sample_type="bilinear", num_filter=1, num_args=2),
        {"x": In((1, 1, 2, 2)), "w": In((1, 1, 5, 5))},
        lambda x, w: _bilinear_ref(x, w, 3),
        fwd_tol=F16_LOOSE,
    ),
]

OPS = CONV_OPS + HIDDEN_CONV_OPS + UP_OPS
