"""Convolution, Deconvolution and UpSampling with MXNet 1.9's parameters and shapes.

One relation underlies all three. A "big" tensor ``B`` of shape ``(N, C, *X)`` and a
"small" tensor ``S`` of shape ``(N, F, *Y)`` are related through a weight ``W`` of shape
``(F, C/g, *k)`` (``g`` groups, stride ``s``, dilation ``d``, leading zero padding ``p``)::

    S[n, f, o] = sum_{c in group(f), t} W[f, c, t] * B[n, c, o*s - p + t*d]      (B is zero outside)

``Convolution`` computes ``S`` from ``B`` (channel-major im2col over the padded input with
``as_strided``, then one ``matmul`` per group over the whole batch); ``Deconvolution`` is the
adjoint: it computes ``B`` from ``S`` (one ``matmul``, then a col2im add looping over the kernel
taps only; with stride 1, where cheaper, a correlation of ``S`` with the flipped kernel).
Three hidden ops, each linear in both of its tensor operands, are closed under
differentiation exactly like ``dot``/``_dot_grad_lhs``/``_dot_grad_rhs``::

    _conv_forward_like(B, W, like=S)   -> S      (correlation; ``like`` gives the size of S)
    _conv_transpose_like(S, W, like=B) -> B      (its adjoint in B; ``like`` gives the size of B)
    _conv_weight_grad(B, S)            -> W      (its adjoint in W)

so every order of derivative of Convolution/Deconvolution is again a graph of these ops.
``like`` inputs are read for their shape only and never differentiated. The leading pad
``p`` is the ``pad`` parameter, or, for a Deconvolution with ``target_shape``, MXNet's
``ceil((s*(Y-1) + d*(k-1) + 1 - X) / 2)``, which the hidden ops recompute from the two
sizes they see. float16 is computed in float32 and cast back.
"""

from __future__ import annotations

import functools
import math

from .. import util
from ..base import ParamError, ShapeError
from ..kernels.conv import correlate, transpose, weight_grad
from ..opdef import (
    Param,
    acc_dtype,
    check_at_least,
    expect_input_shape,
    float_inputs,
    register,
    wait_for_first_input,
    wait_for_inputs,
)

_LAYOUT = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
_ALL_LAYOUTS = ("NCW", "NCHW", "NCDHW", "NHWC", "NDHWC")


def _dk(k, d):
    return tuple((ki - 1) * di + 1 for ki, di in zip(k, d))


def check_layout(where, layout, nd, what="kernel"):
    """Accept only MXNet's default channel-first layout for ``nd`` spatial axes."""
    if layout is None or layout == _LAYOUT.get(nd):
        return
    if layout in ("NWC", "NHWC", "NDHWC"):
        raise NotImplementedError(
            f"{where}: layout={layout!r} is not supported (only channel-first "
            f"{_LAYOUT.get(nd, 'NCW/NCHW/NCDHW')!r} or None); transpose the data instead"
        )
    raise ParamError(f"{where}: layout={layout!r} does not fit a {nd}-d {what}; expected {_LAYOUT.get(nd)!r} or None")


def spatial_param(where, params, name, nd, fill, low, kernel_name="kernel"):
    """MXNet fills an empty stride/dilate/pad/adj with ``fill`` per kernel axis."""
    v = tuple(params[name])
    if len(v) == 0:
        return (fill,) * nd
    if len(v) != nd:
        raise ParamError(
            f"{where}: parameter {name!r}={v} must have as many entries as {kernel_name}="
            f"{tuple(params[kernel_name])} ({nd}), got {len(v)}"
        )
    if any(x < low for x in v):
        raise ParamError(f"{where}: every entry of parameter {name!r} must be >= {low}, got {v}")
    return v


# ----------------------------------------------------------------------------
# Geometry shared by the public and hidden ops
# ----------------------------------------------------------------------------

_GEOM_PARAMS = {
    "kernel": Param("shape"),
    "stride": Param("shape", ()),
    "dilate": Param("shape", ()),
    "pad": Param("shape", ()),
    "num_group": Param("int", 1),
    "target_shape": Param("shape", ()),
}


def _geom(params):
    k = tuple(params["kernel"])
    nd = len(k)
    s = tuple(params["stride"]) or (1,) * nd
    d = tuple(params["dilate"]) or (1,) * nd
    return k, s, d


def _lead_pad(params, X, Y):
    """Leading pad of the relation: ``pad``, or MXNet's target_shape rule from both sizes."""
    k, s, d = _geom(params)
    if any(params.get("target_shape") or ()):
        # total = s*(Y-1) + dk - X; MXNet: pad = (total + 1) // 2, adj = total % 2
        return tuple((si * (y - 1) + dki - x + 1) // 2 for si, y, dki, x in zip(s, Y, _dk(k, d), X))
    return tuple(params["pad"]) or (0,) * len(k)


def _hidden_params(params, target_shape=()):
    return {
        "kernel": params["kernel"],
        "stride": params["stride"],
        "dilate": params["dilate"],
        "pad": params["pad"],
        "num_group": params["num_group"],
        "target_shape": target_shape,
    }


# ----------------------------------------------------------------------------
# Convolution
# ----------------------------------------------------------------------------

_CUDNN_TUNE = ("off", "limited_workspace", "fastest")


def _conv_params(workspace, no_bias):
    return {
        "kernel": Param("shape", doc="(w,), (h, w) or (d, h, w)"),
        "stride": Param("shape", ()),
        "dilate": Param("shape", ()),
        "pad": Param("shape", ()),
        "num_filter": Param("int"),
        "num_group": Param("int", 1),
        "workspace": Param("int", workspace),
        "no_bias": Param("bool", no_bias),
        "cudnn_tune": Param("str", None, choices=_CUDNN_TUNE),
        "cudnn_off": Param("bool", False),
        "layout": Param("str", None, choices=_ALL_LAYOUTS),
    }


def _prepare(opname, deconv):
    def prepare(params, node_name):
        where = f"{opname} {node_name!r}"
        k = tuple(params["kernel"])
        nd = len(k)
        if nd not in (1, 2, 3):
            raise ParamError(f"{where}: parameter 'kernel' must be (w,), (h, w) or (d, h, w), got {k}")
        if any(v < 1 for v in k):
            raise ParamError(f"{where}: every entry of parameter 'kernel' must be >= 1, got {k}")
        check_layout(where, params["layout"], nd)
        out = dict(params)
        out["stride"] = spatial_param(where, params, "stride", nd, 1, 1)
        out["dilate"] = spatial_param(where, params, "dilate", nd, 1, 1)
        out["pad"] = spatial_param(where, params, "pad", nd, 0, 0)
        if deconv:
            out["adj"] = spatial_param(where, params, "adj", nd, 0, 0)
            t = tuple(params["target_shape"])
            if any(t):
                if len(t) != nd:
                    raise ParamError(f"{where}: parameter 'target_shape'={t} must have {nd} entries like kernel={k}")
                if not all(t):
                    raise ParamError(f"{where}: parameter 'target_shape'={t} must be positive on every axis")
            else:
                out["target_shape"] = ()
        f, g = params["num_filter"], params["num_group"]
        if f < 1:
            raise ParamError(f"{where}: parameter 'num_filter' must be >= 1, got {f}")
        if g < 1:
            raise ParamError(f"{where}: parameter 'num_group' must be >= 1, got {g}")
        if f % g:
            raise ParamError(f"{where}: parameter 'num_filter'={f} must be divisible by 'num_group'={g}")
        return out

    return prepare


def _check_data(where, x, k):
    nd = len(k)
    if len(x) != nd + 2:
        raise ShapeError(
            f"{where}: input 'data' has shape {tuple(x)} ({len(x)}-d), but kernel={tuple(k)} needs a "
            f"{nd + 2}-d input ({_LAYOUT[nd]})"
        )


def sliding_out(X, k, s, d, p, where, size="input size"):
    """Output sizes of a kernel ``k`` (stride ``s``, dilate ``d``) sliding over the sizes ``X`` padded by ``p``;
    ``size`` names the input's sizes in the error."""
    Y = []
    for i, (x, ki, si, di, pi) in enumerate(zip(X, k, s, d, p)):
        span = (ki - 1) * di + 1
        if span > x + 2 * pi:
            raise ShapeError(
                f"{where}: kernel {ki} (dilate {di}: spans {span}) exceeds {size} {x} padded to "
                f"{x + 2 * pi} on spatial axis {i}"
            )
        Y.append((x + 2 * pi - span) // si + 1)
    return tuple(Y)


def _conv_out(params, X, where):
    k, s, d = _geom(params)
    return sliding_out(X, k, s, d, params["pad"], where)


def _grouped_data(params, ins, where, deconv):
    """The data shape of a Convolution or Deconvolution after the checks both make (the bias's size, the data's
    rank and size, ``num_group`` dividing the channels, the weight's shape: (num_filter, C/num_group, *kernel)
    for a convolution, (C, num_filter/num_group, *kernel) for a deconvolution, its transpose), or None while
    it is unknown."""
    f, g = params["num_filter"], params["num_group"]
    if not params["no_bias"]:
        expect_input_shape(ins, 2, "bias", (f,), where, f" (num_filter={f})")
    x = ins[0]
    if x is None:
        return None
    _check_data(where, x, params["kernel"])
    if x[1] % g:
        raise ShapeError(
            f"{where}: parameter 'num_group'={g} must divide the input channels, but data {tuple(x)} "
            f"has {x[1]} channels"
        )
    k, c = tuple(params["kernel"]), x[1]
    if deconv:
        want, why = (c, f // g) + k, f"{c} input channels, num_filter={f} / num_group={g}, kernel={k}"
    else:
        want, why = (f, c // g) + k, f"num_filter={f}, {c} input channels / num_group={g}, kernel={k}"
    expect_input_shape(ins, 1, "weight", want, where, f" ({why})")
    return x


def _conv_shape(params, in_shapes, out_shapes, where):
    ins = list(in_shapes)
    if util.zeros_are_unknown():
        return _conv_partial(params, ins, out_shapes, where)
    x = _grouped_data(params, ins, where, deconv=False)
    if x is None:
        return ins, out_shapes
    return ins, [(x[0], params["num_filter"]) + _conv_out(params, x[2:], where)]


def _conv_partial(params, ins, out_shapes, where):
    """Convolution's rule where 0 dimensions may be unknown (MXNet's ConvolutionShape): the data's unknown
    dimensions come from the weight (channels = weight channels * num_group) and from a known output (the
    batch size; a spatial size where the stride is 1: x = y + span - 1 - 2 pad, inverting
    y = (x + 2 pad - span) / 1 + 1); an output size stays unknown where the data's is."""
    x, w, o = ins[0], ins[1], out_shapes[0]
    k, s, d = _geom(params)
    f, g, p = params["num_filter"], params["num_group"], params["pad"]
    if x is None:
        return ins, out_shapes
    _check_data(where, x, k)
    x = list(x)
    if w is not None and len(w) == len(x) and not x[1]:
        x[1] = w[1] * g
    if o is not None and len(o) == len(x):
        x[0] = x[0] or o[0]
        for i, (yi, ki, si, di, pi) in enumerate(zip(o[2:], k, s, d, p)):
            if not x[2 + i] and yi and si == 1:
                x[2 + i] = yi + (ki - 1) * di - 2 * pi
    ins[0] = x = tuple(x)
    if x[1] % g:
        raise ShapeError(f"{where}: parameter 'num_group'={g} must divide the input channels, data {x}")
    want = (f, x[1] // g) + tuple(k)
    if w is not None and any(a and b and a != b for a, b in zip(w, want)):
        raise ShapeError(f"{where}: input 'weight' has shape {tuple(w)}, expected {want}")
    ins[1] = want
    if not params["no_bias"]:
        expect_input_shape(ins, 2, "bias", (f,), where, f" (num_filter={f})")
    spatial = tuple(
        sliding_out((xi,), (ki,), (si,), (di,), (pi,), where)[0] if xi else 0
        for xi, ki, si, di, pi in zip(x[2:], k, s, d, p)
    )
    return ins, [(x[0], f) + spatial]


@functools.lru_cache(maxsize=256)
def _conv_out_cached(kernel, stride, dilate, pad, X):
    """``_conv_out`` of the forward, per geometry (a numeric check re-runs one small convolution thousands of
    times); an error is raised again on every call (``lru_cache`` keeps results only)."""
    return _conv_out({"kernel": kernel, "stride": stride, "dilate": dilate, "pad": pad}, X, "Convolution")


def _conv_fwd(xp, x, w, b=None, *, kernel, stride, dilate, pad, num_group, **_):
    Y = _conv_out_cached(tuple(kernel), tuple(stride), tuple(dilate), tuple(pad), x.shape[2:])
    y = correlate(xp, x, w, kernel, stride, dilate, pad, Y, num_group)
    if b is not None:
        y += b.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * len(kernel))
    return y.astype(x.dtype, copy=False)


def _with_bias_grad(F, n, gy, grads):
    """``grads`` (data's and weight's), then the bias's gradient where the op has a bias."""
    if n.params["no_bias"]:
        return grads
    # y = ... + b[f] broadcast over every axis but 1  ->  db = sum of gy over those axes
    return [*grads, F.sum(gy, axis=1, exclude=True) if n.needs[2] else None]


def _conv_grad(F, n, g):
    # S = corr(B=x, W) + b  ->  dB = corr^T(G, W) (a transposed convolution), dW = wgrad(B, G)
    x, w = n.inputs[0], n.inputs[1]
    gy = g[0]
    hp = _hidden_params(n.params)
    dx = F._conv_transpose_like(gy, w, x, **hp) if n.needs[0] else None
    dw = F._conv_weight_grad(x, gy, **hp) if n.needs[1] else None
    return _with_bias_grad(F, n, gy, [dx, dw])


def _conv_inputs(params):
    return ["data", "weight"] if params["no_bias"] else ["data", "weight", "bias"]


register(
    "Convolution",
    aliases=("_npx_convolution",),
    inputs=_conv_inputs,
    params=_conv_params(1024, False),
    prepare=_prepare("Convolution", deconv=False),
    forward=_conv_fwd,
    infer_shape=_conv_shape,
    infer_type=float_inputs("data"),
    gradient=_conv_grad,
    doc="N-d convolution (cross-correlation) of (N, C, *X) data with (num_filter, C/num_group, *kernel) "
    "weights; output size floor((x + 2p - d(k-1) - 1)/s) + 1.",
)


# ----------------------------------------------------------------------------
# Deconvolution
# ----------------------------------------------------------------------------


def _deconv_geometry(params, Y, where):
    """(leading pad, output size) of a Deconvolution on input spatial size ``Y`` (MXNet's InferPad)."""
    k, s, d = _geom(params)
    dk = _dk(k, d)
    t = params["target_shape"]
    lo, X = [], []
    for i, (y, si, dki) in enumerate(zip(Y, s, dk)):
        if any(t):
            total = si * (y - 1) + dki - t[i]
            if total < 0:
                raise ShapeError(
                    f"{where}: target_shape={tuple(t)} is too big on spatial axis {i}: the input size "
                    f"{y} gives at most {si * (y - 1) + dki}"
                )
            a, pl = total % 2, (total + 1) // 2
            if a > si - 1:
                raise ShapeError(
                    f"{where}: target_shape={tuple(t)} needs adj={a} on spatial axis {i}, but adj "
                    f"must be smaller than stride {si}"
                )
        else:
            a, pl = params["adj"][i], params["pad"][i]
            if a > si - 1:
                raise ShapeError(
                    f"{where}: parameter 'adj'={tuple(params['adj'])} must be smaller than "
                    f"stride={tuple(s)} on every axis"
                )
        x = si * (y - 1) + dki - 2 * pl + a
        if x < 1:
            raise ShapeError(
                f"{where}: output size {x} on spatial axis {i} is not positive (input {y}, "
                f"kernel span {dki}, stride {si}, pad {pl}, adj {a})"
            )
        lo.append(pl)
        X.append(x)
    return tuple(lo), tuple(X)


def _deconv_shape(params, in_shapes, out_shapes, where):
    ins = list(in_shapes)
    x = _grouped_data(params, ins, where, deconv=True)
    if x is None:
        return ins, out_shapes
    _, X = _deconv_geometry(params, x[2:], where)
    return ins, [(x[0], params["num_filter"]) + X]


def _deconv_fwd(xp, x, w, b=None, *, kernel, stride, dilate, num_group, **params):
    p = {"kernel": kernel, "stride": stride, "dilate": dilate, **params}
    lo, X = _deconv_geometry(p, x.shape[2:], "Deconvolution")
    y = transpose(xp, x, w, kernel, stride, dilate, lo, X, num_group)
    if b is not None:
        y = y + b.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * len(kernel))
    return xp.ascontiguousarray(y.astype(x.dtype, copy=False))


def _deconv_grad(F, n, g):
    # B = corr^T(S=x, W) + b  ->  dS = corr(G, W) (a convolution), dW = wgrad(G, S)
    x, w = n.inputs[0], n.inputs[1]
    gy = g[0]
    hp = _hidden_params(n.params, n.params["target_shape"])
    dx = F._conv_forward_like(gy, w, x, **hp) if n.needs[0] else None
    dw = F._conv_weight_grad(gy, x, **hp) if n.needs[1] else None
    return _with_bias_grad(F, n, gy, [dx, dw])


_DECONV_PARAMS = _conv_params(512, True)
_DECONV_PARAMS["adj"] = Param("shape", ())
_DECONV_PARAMS["target_shape"] = Param("shape", ())
# MXNet's field order (parameters may be given positionally): adj and target_shape come right after pad
_DECONV_PARAMS = {
    k: _DECONV_PARAMS[k] for k in ("kernel", "stride", "dilate", "pad", "adj", "target_shape")
} | _DECONV_PARAMS

register(
    "Deconvolution",
    aliases=("_npx_deconvolution",),
    inputs=_conv_inputs,
    params=_DECONV_PARAMS,
    prepare=_prepare("Deconvolution", deconv=True),
    forward=_deconv_fwd,
    infer_shape=_deconv_shape,
    infer_type=float_inputs("data"),
    gradient=_deconv_grad,
    doc="Transposed convolution (the gradient of Convolution w.r.t. its data); weight (C, num_filter/num_group, "
    "*kernel); output s(x-1) + d(k-1) + 1 - 2p + adj, or target_shape. no_bias defaults to True as in MXNet.",
)


# ----------------------------------------------------------------------------
# The hidden trio (closed under differentiation)
# ----------------------------------------------------------------------------


def _fwd_like(xp, b, w, like, **params):
    k, s, d = _geom(params)
    Y = like.shape[2:]
    lo = _lead_pad(params, b.shape[2:], Y)
    return correlate(xp, b, w, k, s, d, lo, Y, params["num_group"]).astype(b.dtype, copy=False)


def _transpose_like(xp, sm, w, like, **params):
    k, s, d = _geom(params)
    X = like.shape[2:]
    lo = _lead_pad(params, X, sm.shape[2:])
    out = transpose(xp, sm, w, k, s, d, lo, X, params["num_group"])
    return xp.ascontiguousarray(out.astype(sm.dtype, copy=False))


def _wgrad(xp, b, sm, **params):
    k, s, d = _geom(params)
    lo = _lead_pad(params, b.shape[2:], sm.shape[2:])
    return weight_grad(xp, b, sm, k, s, d, lo, params["num_group"]).astype(b.dtype, copy=False)


def _like_shape(params, in_shapes, out_shapes, where):
    like = in_shapes[2]
    return in_shapes, [like] if like is not None else out_shapes


@wait_for_inputs(0, 1)
def _wgrad_shape(params, in_shapes, out_shapes, where):
    b, sm = in_shapes
    return in_shapes, [(sm[1], b[1] // params["num_group"]) + tuple(params["kernel"])]


def _hp(n):
    return dict(n.params)


# <H, corr(B, W)> = <corr^T(H, W), B> = <wgrad(B, H), W>
register(
    "_conv_forward_like",
    inputs=("data", "weight", "like"),
    params=dict(_GEOM_PARAMS),
    forward=_fwd_like,
    infer_shape=_like_shape,
    no_grad_inputs=("like",),
    gradient=lambda F, n, g: [
        F._conv_transpose_like(g[0], n.inputs[1], n.inputs[0], **_hp(n)) if n.needs[0] else None,
        F._conv_weight_grad(n.inputs[0], g[0], **_hp(n)) if n.needs[1] else None,
        None,
    ],
    doc="Convolution relation S = corr(B, W) with S's size taken from ``like`` (hidden).",
)
# <H, corr^T(S, W)> = <corr(H, W), S> = <wgrad(H, S), W>
register(
    "_conv_transpose_like",
    inputs=("data", "weight", "like"),
    params=dict(_GEOM_PARAMS),
    forward=_transpose_like,
    infer_shape=_like_shape,
    no_grad_inputs=("like",),
    gradient=lambda F, n, g: [
        F._conv_forward_like(g[0], n.inputs[1], n.inputs[0], **_hp(n)) if n.needs[0] else None,
        F._conv_weight_grad(g[0], n.inputs[0], **_hp(n)) if n.needs[1] else None,
        None,
    ],
    doc="Adjoint of the convolution relation in B, B's size taken from ``like`` (hidden).",
)
# <H, wgrad(B, S)> = <corr^T(S, H), B> = <corr(B, H), S>
register(
    "_conv_weight_grad",
    inputs=("data", "ograd"),
    params=dict(_GEOM_PARAMS),
    forward=_wgrad,
    infer_shape=_wgrad_shape,
    gradient=lambda F, n, g: [
        F._conv_transpose_like(n.inputs[1], g[0], n.inputs[0], **_hp(n)) if n.needs[0] else None,
        F._conv_forward_like(n.inputs[0], g[0], n.inputs[1], **_hp(n)) if n.needs[1] else None,
    ],
    doc="Adjoint of the convolution relation in W (hidden).",
)


# ----------------------------------------------------------------------------
# UpSampling
# ----------------------------------------------------------------------------


def _bilinear_geom(scale):
    """MXNet: bilinear upsampling is a Deconvolution with these parameters."""
    k = 2 * scale - scale % 2
    return (k, k), (scale, scale), (math.ceil((scale - 1) / 2),) * 2


def _up_prepare(params, node_name):
    where = f"UpSampling {node_name!r}"
    check_at_least(params, "scale", 1, where)
    check_at_least(params, "num_args", 1, where)
    return params


def _up_inputs(params):
    if params["sample_type"] == "bilinear":
        return ["data", "weight"]
    return [f"arg{i}" for i in range(params["num_args"])]


@wait_for_first_input
def _up_shape(params, in_shapes, out_shapes, where):
    sc = params["scale"]
    ins = list(in_shapes)
    x0 = ins[0]
    if len(x0) != 4:
        raise ShapeError(
            f"{where}: input {_up_inputs(params)[0]!r} has shape {tuple(x0)}; UpSampling needs 4-d "
            f"(batch, channel, y, x) input"
        )
    oh, ow = x0[2] * sc, x0[3] * sc
    if params["sample_type"] == "bilinear":
        c = x0[1]
        if params["num_filter"] != c:
            raise ShapeError(
                f"{where}: bilinear UpSampling needs num_filter equal to the input channels {c}, "
                f"got num_filter={params['num_filter']}"
            )
        k = _bilinear_geom(sc)[0]
        expect_input_shape(ins, 1, "weight", (c, 1) + k, where, f" (channels {c}, kernel 2*scale - scale%2 = {k[0]})")
        return ins, [(x0[0], c, oh, ow)]
    if any(s is None for s in ins):
        return ins, out_shapes
    channels = 0
    for i, s in enumerate(ins):
        if len(s) != 4 or s[0] != x0[0]:
            raise ShapeError(f"{where}: input 'arg{i}' has shape {tuple(s)}; expected 4-d with batch {x0[0]}")
        if oh % s[2] or ow % s[3] or oh // s[2] != ow // s[3]:
            raise ShapeError(
                f"{where}: input 'arg{i}' of shape {tuple(s)} cannot be upsampled by one integer "
                f"factor to the output size {(oh, ow)}"
            )
        if params["multi_input_mode"] == "sum":
            if s[1] != x0[1]:
                raise ShapeError(
                    f"{where}: multi_input_mode='sum' needs equal channels, but input 'arg{i}' has "
                    f"{s[1]} and 'arg0' has {x0[1]}"
                )
            channels = s[1]
        else:
            channels += s[1]
    return ins, [(x0[0], channels, oh, ow)]


def _repeat(xp, x, a, b):
    n, c, h, w = x.shape
    return xp.broadcast_to(x[:, :, :, None, :, None], (n, c, h, a, w, b)).reshape(n, c, h * a, w * b)


def _up_fwd(xp, *xs, scale, sample_type, multi_input_mode, num_filter, **_):
    if sample_type == "bilinear":
        x, w = xs
        k, s, p = _bilinear_geom(scale)
        X = (x.shape[2] * scale, x.shape[3] * scale)
        out = transpose(xp, x, w, k, s, (1, 1), p, X, x.shape[1])
        return xp.ascontiguousarray(out.astype(x.dtype, copy=False))
    oh, ow = xs[0].shape[2] * scale, xs[0].shape[3] * scale
    ups = [_repeat(xp, x, oh // x.shape[2], ow // x.shape[3]) for x in xs]
    if len(ups) == 1:
        return ups[0]
    if multi_input_mode == "sum":
        out = ups[0].copy()
        for u in ups[1:]:
            out += u
        return out
    return xp.concatenate(ups, axis=1)


def _up_grad(F, n, g):
    p = n.params
    gy = g[0]
    if p["sample_type"] == "bilinear":
        # a Deconvolution with fixed geometry: dx = corr(G, W), dW = wgrad(G, x)
        k, s, pad = _bilinear_geom(p["scale"])
        hp = {"kernel": k, "stride": s, "dilate": (1, 1), "pad": pad, "num_group": p["num_filter"], "target_shape": ()}
        x, w = n.inputs
        return [
            F._conv_forward_like(gy, w, x, **hp) if n.needs[0] else None,
            F._conv_weight_grad(gy, x, **hp) if n.needs[1] else None,
        ]
    # y = sum_i repeat(x_i) or concat_i repeat(x_i) is linear; its adjoint (block sums of each
    # input's channel slice of G) is one hidden multi-output op whose own adjoint is UpSampling again
    grads = F._upsampling_nearest_adjoint(gy, *n.inputs, scale=p["scale"], multi_input_mode=p["multi_input_mode"])
    return [gi if need else None for gi, need in zip(grads, n.needs)]


def _up_adjoint_fwd(xp, g, *likes, num_args, scale, multi_input_mode):
    acc = acc_dtype(g.dtype)
    ga = g.astype(acc, copy=False)
    out = []
    c0 = 0
    for like in likes:
        n, c, h, w = like.shape
        a, b = g.shape[2] // h, g.shape[3] // w
        part = ga if multi_input_mode == "sum" else ga[:, c0 : c0 + c]
        out.append(part.reshape(n, c, h, a, w, b).sum(axis=(3, 5)).astype(g.dtype, copy=False))
        c0 += c
    return tuple(out)


register(
    "_upsampling_nearest_adjoint",
    variadic="num_args",
    params={
        "num_args": Param("int"),
        "scale": Param("int"),
        "multi_input_mode": Param("str", "concat", choices=("concat", "sum")),
    },
    num_outputs=lambda p: p["num_args"] - 1,
    forward=_up_adjoint_fwd,
    infer_shape=lambda p, i, o, w: (i, list(i[1:])),
    # adjoint of the adjoint: nearest UpSampling of the cotangents; the like inputs are shapes only
    gradient=lambda F, n, g: (
        [
            F.UpSampling(
                *g,
                scale=n.params["scale"],
                sample_type="nearest",
                multi_input_mode=n.params["multi_input_mode"],
                num_args=len(g),
            )
        ]
        + [None] * (len(n.inputs) - 1)
    ),
    doc="Adjoint of nearest UpSampling: block sums of each input's slice of the output gradient (hidden).",
)


register(
    "UpSampling",
    variadic="num_args",
    inputs=_up_inputs,
    params={
        "scale": Param("int"),
        "num_filter": Param("int", 0),
        "sample_type": Param("str", choices=("nearest", "bilinear")),
        "multi_input_mode": Param("str", "concat", choices=("concat", "sum")),
        "num_args": Param("int"),
        "workspace": Param("int", 512),
    },
    prepare=_up_prepare,
    forward=_up_fwd,
    infer_shape=_up_shape,
    infer_type=lambda p, i, o, w: float_inputs(_up_inputs(p)[0])(p, i, o, w),
    gradient=_up_grad,
    doc="Nearest-neighbour upsampling of 1..N NCHW inputs (concatenated or summed), or bilinear "
    "(a fixed-geometry depthwise Deconvolution with a (C, 1, k, k) weight input).",
)
