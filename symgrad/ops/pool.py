"""Pooling (max/avg/sum/lp, 1-D/2-D/3-D, valid/full/same, global) and Pad, with MXNet 1.9 semantics.

Pooling reduces the windows of the padded input tap by tap (one vectorised step per kernel
offset, see ``_taps``). MXNet's rules, kept here:

- window ``o`` covers ``o*s - p ... o*s - p + k - 1``; output size ``(x + 2p - k)//s + 1``
  ('valid'), ``1 + ceil((x + 2p - k)/s)`` ('full'), ``ceil(x/s)`` ('same', 1-D, pad 0);
- max: padding never wins (windows are clipped to the data); the gradient goes to the
  first maximum in row-major window order;
- avg: divisor ``min(start + k, x + p) - start`` per axis with ``count_include_pad`` (the
  default), else the number of data elements in the window; a window with no element gives 0;
- sum: no divisor; lp: ``(sum x^p)^(1/p)`` for p in 1, 2, 3 (no divisor, no abs).

Gradients are symbolic: avg/sum pooling is linear, its adjoint ``_pool_sum_adjoint`` has
Pooling itself as its adjoint; max pooling's gradient ``_pool_max_scatter`` (scatter to the
argmax) and ``_pool_max_gather`` (read at the argmax) are each other's adjoints and constant
in the data almost everywhere. Only lp pooling with p in (2, 3) uses a fused
``_backward_Pooling`` (no second order).
"""

from __future__ import annotations

import numpy as np

from ..base import ParamError, ShapeError
from ..kernels.conv import hi_pad, padded, tap_ranges, tap_slices
from ..opdef import Decision, Param, acc_dtype, float_inputs, like_input1, output_like, register, wait_for_first_input
from .conv import check_layout, spatial_param

_POOL_PARAMS = {
    "kernel": Param("shape", ()),
    "pool_type": Param("str", "max", choices=("max", "avg", "sum", "lp")),
    "global_pool": Param("bool", False),
    "cudnn_off": Param("bool", False),
    "pooling_convention": Param("str", "valid", choices=("full", "valid", "same")),
    "stride": Param("shape", ()),
    "pad": Param("shape", ()),
    "p_value": Param("int", None),
    "count_include_pad": Param("bool", None),
    "layout": Param("str", None, choices=("NCW", "NCHW", "NCDHW", "NWC", "NHWC", "NDHWC")),
}


def _pool_prepare(params, node_name):
    where = f"Pooling {node_name!r}"
    k = tuple(params["kernel"])
    nd = len(k)
    out = dict(params)
    if nd == 0:
        if not params["global_pool"]:
            raise ParamError(f"{where}: parameter 'kernel' is required unless global_pool=True")
        if params["layout"] is not None and params["layout"] not in ("NCW", "NCHW", "NCDHW"):
            check_layout(where, params["layout"], 0, "input")
    else:
        if nd > 3:
            raise ParamError(f"{where}: parameter 'kernel' must be (w,), (h, w) or (d, h, w), got {k}")
        if any(v < 1 for v in k):
            raise ParamError(f"{where}: every entry of parameter 'kernel' must be >= 1, got {k}")
        check_layout(where, params["layout"], nd)
        out["stride"] = spatial_param(where, params, "stride", nd, 1, 1)
        if params["pooling_convention"] == "same" and len(params["pad"]) != nd and not any(params["pad"]):
            # MXNet 1.9.1's shape check reads pad[0], pad[1] and pad[2] for 'same', so a symbol that
            # runs there carries pad=(0, 0, 0) for its 1-d kernel: all zeros mean no padding
            out["pad"] = (0,) * nd
        else:
            out["pad"] = spatial_param(where, params, "pad", nd, 0, 0)
    if params["pool_type"] == "lp":
        if params["p_value"] is None:
            raise ParamError(f"{where}: pool_type='lp' needs parameter 'p_value' (1, 2 or 3)")
        if params["p_value"] not in (1, 2, 3):
            raise ParamError(f"{where}: parameter 'p_value' must be 1, 2 or 3 (as MXNet), got {params['p_value']}")
    return out


def pool_geometry(params, X, where="Pooling"):
    """(kernel, stride, leading pad, output size) of a pooling over spatial size ``X``."""
    nd = len(X)
    if params["global_pool"]:
        return tuple(X), (1,) * nd, (0,) * nd, (1,) * nd
    k = tuple(params["kernel"])
    if len(k) != nd:
        raise ShapeError(
            f"{where}: input 'data' has {nd} spatial axes ({nd + 2}-d), but kernel={k} has {len(k)}; Pooling "
            f"needs a {len(k) + 2}-d input"
        )
    s = tuple(params["stride"]) or (1,) * nd
    p = tuple(params["pad"]) or (0,) * nd
    conv = params["pooling_convention"]
    if conv == "same":
        if nd != 1:
            raise ShapeError(
                f"{where}: pooling_convention='same' supports 1-D pooling only (3-d data), got {nd + 2}-d data"
            )
        if any(p):
            raise ShapeError(f"{where}: pooling_convention='same' does not take a pad, got pad={p}")
    Y = []
    for i, (x, ki, si, pi) in enumerate(zip(X, k, s, p)):
        if ki > x + 2 * pi:
            raise ShapeError(
                f"{where}: kernel size {ki} exceeds input size {x} padded to {x + 2 * pi} on spatial axis {i}"
            )
        if conv == "valid":
            Y.append((x + 2 * pi - ki) // si + 1)
        elif conv == "full":
            Y.append(1 + -(-(x + 2 * pi - ki) // si))
        else:
            Y.append(-(-(x + 2 * pi) // si))
    return k, s, p, tuple(Y)


def _avg_divisor(xp, X, k, s, p, Y, include_pad, dtype):
    """MXNet's per-window element count, as an array broadcastable to (N, C, *Y)."""
    div = None
    for i, (x, ki, si, pi, y) in enumerate(zip(X, k, s, p, Y)):
        start = xp.arange(y) * si - pi
        if include_pad:
            cnt = xp.minimum(start + ki, x + pi) - start
        else:
            cnt = xp.minimum(start + ki, x) - xp.maximum(start, 0)
        shape = [1] * len(X)
        shape[i] = y
        cnt = xp.maximum(cnt, 1).reshape(shape)  # an empty window sums nothing: any divisor gives 0
        div = cnt if div is None else div * cnt
    return div.astype(dtype)


def _lowest(dtype):
    return np.finfo(dtype).min


def _taps(xp, xpd, k, s, Y):
    """(index, strided view (N, C, *Y)) of each kernel tap over the padded input.

    Reductions over windows loop over the prod(k) taps, each step vectorised over the whole
    (N, C, *Y) output: on the ResNet stem pool this is ~10x faster than one numpy reduction
    over the 2*nd-axis ``as_strided`` window view (whose short strided axes defeat numpy's
    reduction loops), and it never materialises the windows.
    """
    one = (1,) * len(k)
    for t, tap in enumerate(np.ndindex(*k)):
        yield t, xpd[tap_slices(tap, s, one, Y)]


def _pad_for(xp, x, k, s, p, Y, value):
    return padded(xp, x, p, hi_pad(x.shape[2:], Y, k, s, (1,) * len(k), p), value)


def _window_max(xp, x, k, s, p, Y):
    """Max of every window; padding holds the lowest value, so it never wins."""
    out = None
    for _, v in _taps(xp, _pad_for(xp, x, k, s, p, Y, _lowest(x.dtype)), k, s, Y):
        out = v.copy() if out is None else xp.maximum(out, v, out=out)
    return out


def _argmax(xp, x, params):
    """Tap index (row-major in the window) of each window's first maximum: strict > keeps the first.

    Taps come in increasing order and every index so far is below ``t``, so "idx = t where v
    beats the running max" is ``idx = max(idx, t * (v > best))``: branch-free passes into
    preallocated buffers (a masked fill with a random mask is ~10x slower).
    """
    k, s, p, Y = pool_geometry(params, x.shape[2:])
    best = idx = better = tmp = None
    for t, v in _taps(xp, _pad_for(xp, x, k, s, p, Y, _lowest(x.dtype)), k, s, Y):
        if best is None:
            best, idx = v.copy(), xp.zeros(v.shape, dtype=np.int32)
            better, tmp = xp.empty(v.shape, dtype=bool), xp.empty(v.shape, dtype=np.int32)
            continue
        xp.greater(v, best, out=better)
        xp.maximum(idx, xp.multiply(better, np.int32(t), out=tmp), out=idx)
        xp.maximum(best, v, out=best)
    return idx, (k, s, p, Y)


def _max_and_argmax(xp, x, k, s, p, Y):
    """(max, tap index of the first maximum) of every window: ``_window_max`` and ``_argmax`` in one sweep.

    The same strict ``>`` running comparison as ``_argmax`` (so the same picks, ties and NaNs
    included), with each tap's strided view copied once into a contiguous buffer: the four
    passes per tap then run on contiguous memory (the strided reads dominate otherwise), and the
    tap index is a uint8 array (bool * t, in place) where up to 256 taps allow it.
    """
    n_taps = int(np.prod(k))
    small = n_taps <= 256
    best = idx = better = tap = step = None
    for t, v in _taps(xp, _pad_for(xp, x, k, s, p, Y, _lowest(x.dtype)), k, s, Y):
        if best is None:
            best = v.copy()
            idx = xp.zeros(v.shape, dtype=np.uint8 if small else np.int32)
            better, tap = xp.empty(v.shape, dtype=bool), xp.empty_like(best)
            step = better.view(np.uint8) if small else xp.empty(v.shape, dtype=np.int32)
            continue
        xp.copyto(tap, v)
        xp.greater(tap, best, out=better)
        xp.multiply(better, idx.dtype.type(t), out=step)
        xp.maximum(idx, step, out=idx)
        xp.maximum(best, tap, out=best)
    return best, idx


def _flat_index(xp, idx, x_shape, k, s, p, Y):
    """Flat index into the data (shape ``x_shape``) of tap ``idx`` of every window, as int64.

    Output ``o`` reads input ``o*s - p + tap`` on each spatial axis; the flat index is the
    sum over axes of that coordinate times the axis's row-major stride, plus the (n, c)
    offset: a lookup of each tap's offset, plus a per-output base, plus a per-channel base.
    """
    X = tuple(x_shape[2:])
    nd = len(X)
    axis_stride = [int(np.prod(X[a + 1 :])) for a in range(nd)]
    taps = np.array(list(np.ndindex(*k)), dtype=np.int64).reshape(-1, nd)
    tap_offset = xp.asarray(taps @ np.array(axis_stride, dtype=np.int64))
    base = 0
    for a in range(nd):
        start = (np.arange(Y[a], dtype=np.int64) * s[a] - p[a]) * axis_stride[a]
        base = base + start.reshape((Y[a],) + (1,) * (nd - 1 - a))
    base = xp.asarray(base)
    nc = (xp.arange(idx.shape[0] * idx.shape[1], dtype=np.int64) * int(np.prod(X))).reshape(idx.shape[:2] + (1,) * nd)
    flat = xp.take(tap_offset, idx)
    flat += base
    flat += nc
    return flat


def _mark_padding_picks(xp, flat, idx, best, x_shape, k, s, p, Y):
    """-1 where a window's pick is a padding position.

    Padding holds the lowest value and loses every strict comparison with a data value above
    it, so it can be picked only where the window's result is that lowest value or NaN: when
    every result is above it (the common case, one pass), nothing is padding.
    """
    if bool((best > _lowest(best.dtype)).all()):
        return flat
    X = tuple(x_shape[2:])
    nd = len(X)
    inside = xp.ones(idx.shape, dtype=bool)
    rest = idx.astype(np.int64)
    for a in reversed(range(nd)):
        rest, t = rest // k[a], rest % k[a]
        o = xp.arange(Y[a], dtype=np.int64).reshape((Y[a],) + (1,) * (nd - 1 - a))
        coord = o * s[a] - p[a] + t
        inside &= (coord >= 0) & (coord < X[a])
    return xp.where(inside, flat, np.int64(-1))


def _global_argmax(xp, x):
    """(max, flat index of the first maximum) over all spatial axes (a global pool: one window).

    numpy's argmax picks the first maximum, as ``_argmax``'s strict ``>`` does, while no value
    is NaN; with a NaN the running comparison (which a NaN never wins) decides, as in ``_argmax``.
    """
    N, C = x.shape[:2]
    nd = x.ndim - 2
    L = int(np.prod(x.shape[2:]))
    x3 = x.reshape(N, C, L)
    best = x3.max(axis=2).reshape((N, C) + (1,) * nd)
    if L and not bool(xp.isnan(best).any()):
        tap = x3.argmax(axis=2).reshape(best.shape).astype(np.int64)
    else:
        tap = _argmax(xp, x, {"global_pool": True, "kernel": (), "stride": (), "pad": ()})[0].astype(np.int64)
    nc = (xp.arange(N * C, dtype=np.int64) * L).reshape(best.shape)
    return best, tap + nc


def _max_with_workspace(xp, x, params):
    """Max pooling's (output, workspace): the workspace holds the int64 flat index into ``x`` of each
    window's first maximum (-1 where that is padding), which the gradient scatters to."""
    if params["global_pool"]:
        return _global_argmax(xp, x)
    k, s, p, Y = pool_geometry(params, x.shape[2:])
    best, idx = _max_and_argmax(xp, x, k, s, p, Y)
    flat = _flat_index(xp, idx, x.shape, k, s, p, Y)
    return best, _mark_padding_picks(xp, flat, idx, best, x.shape, k, s, p, Y)


def _scatter_taps(xp, x_shape, k, s, p, Y, values_for_tap, dtype):
    """Adjoint of reading windows: sum ``values_for_tap(t)`` (shape (N, C, *Y)) into each tap's positions.

    Each tap adds only where it reads data (``tap_ranges``): padding positions are never
    written, so there is no padded buffer to crop and copy.
    """
    X = tuple(x_shape[2:])
    one = (1,) * len(k)
    every = (slice(None), slice(None))
    out = xp.zeros(tuple(x_shape), dtype=dtype)
    for t, tap in enumerate(np.ndindex(*k)):
        r = tap_ranges(tap, s, one, p, X, Y)
        if r is None:
            continue
        osl, isl = r
        dst = out[every + isl]
        xp.add(dst, values_for_tap(t)[every + osl], out=dst)
    return out


def _sum_windows(xp, xa, k, s, p, Y):
    """Sum of every (zero-padded) window: (N, C, *Y)."""
    nd = len(k)
    if tuple(k) == tuple(xa.shape[2:]) and not any(p):
        return xa.sum(axis=tuple(range(2, 2 + nd))).reshape(xa.shape[:2] + (1,) * nd)
    out = None
    for _, v in _taps(xp, _pad_for(xp, xa, k, s, p, Y, 0.0), k, s, Y):
        out = v.copy() if out is None else xp.add(out, v, out=out)
    return out


def keeps_argmax(params) -> bool:
    """Whether Pooling has its hidden ``workspace`` output: max pooling with a kernel, as MXNet 1.9.1's
    oneDNN build (whose symbol JSON and monitor show ``<name>_workspace`` exactly then)."""
    return params["pool_type"] == "max" and len(params["kernel"]) > 0


def _pool_outputs(xp, x, **params):
    """Pooling's outputs: (output,), or (output, workspace) where ``keeps_argmax``."""
    if keeps_argmax(params):
        return _max_with_workspace(xp, x, params)
    return (_pool_fwd(xp, x, **params),)


def _pool_fwd(xp, x, **params):
    k, s, p, Y = pool_geometry(params, x.shape[2:])
    nd = len(k)
    pt = params["pool_type"]
    if pt == "max":
        if params["global_pool"]:
            return x.max(axis=tuple(range(2, 2 + nd)), keepdims=True)
        return _window_max(xp, x, k, s, p, Y)
    acc = acc_dtype(x.dtype)
    xa = x.astype(acc, copy=False)
    pv = params["p_value"] if pt == "lp" else 1
    if pv == 2:
        xa = xa * xa
    elif pv == 3:
        xa = xa * xa * xa
    out = _sum_windows(xp, xa, k, s, p, Y)
    if pt == "avg":
        inc = params["count_include_pad"] is not False
        out = out / _avg_divisor(xp, x.shape[2:], k, s, p, Y, inc, acc)
    if pv == 2:
        out = xp.sqrt(out)
    elif pv == 3:
        out = xp.cbrt(out)
    return out.astype(x.dtype, copy=False)


@wait_for_first_input
def _pool_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if not 3 <= len(x) <= 5:
        raise ShapeError(
            f"{where}: input 'data' has shape {tuple(x)}; Pooling needs 3-d (N, C, x), 4-d (N, C, y, x) "
            f"or 5-d (N, C, d, y, x) input"
        )
    if params["global_pool"]:
        check_layout(where, params["layout"], len(x) - 2, "input")
    _, _, _, Y = pool_geometry(params, x[2:], where)
    return in_shapes, [tuple(x[:2]) + Y]


def _pool_outputs_shape(params, in_shapes, out_shapes, where):
    ins, outs = _pool_shape(params, in_shapes, out_shapes[:1], where)
    return ins, outs * len(out_shapes)  # the workspace has one index per output element


def _pool_outputs_type(params, in_types, out_types, where):
    ins, outs = float_inputs("data")(params, in_types, out_types[:1], where)
    return ins, outs + [np.dtype(np.int64)] * (len(out_types) - 1)


def _linear_kind(params):
    return params["pool_type"] in ("avg", "sum") or (params["pool_type"] == "lp" and params["p_value"] == 1)


def _pool_grad(F, n, g):
    x, gy = n.inputs[0], g[0]
    p = dict(n.params)
    if p["pool_type"] == "max" and len(n.outputs) > 1:
        # y[o] = x[argmax_o], the argmax kept in the hidden workspace  ->  dx = g added at each argmax
        return [F._pool_max_scatter_at(gy, n.outputs[1], x)]
    if p["pool_type"] == "max":
        # (global pooling without a kernel, Pooling_v1: no workspace) the same scatter, argmax recomputed
        return [F._pool_max_scatter(gy, x, **p)]
    if _linear_kind(p):
        # y = P x (linear: window sums, divided for avg)  ->  dx = P^T g
        return [F._pool_sum_adjoint(gy, x, **p)]
    # y = (sum x^p)^(1/p)  ->  dx_i = sum_o g_o (x_i / y_o)^(p-1)   (0 where y_o == 0, as MXNet)
    return [F._backward_Pooling(gy, x, n.outputs[0], **p)]


def _window_gap(xp, x, k, s, p, Y):
    """Largest minus second largest value of every window (inf for one-element windows): how near a tie."""
    top = second = None
    for _, v in _taps(xp, _pad_for(xp, x, k, s, p, Y, _lowest(x.dtype)), k, s, Y):
        if top is None:
            top, second = v.copy(), xp.full(v.shape, -np.inf, dtype=v.dtype)
            continue
        second = xp.maximum(second, xp.minimum(top, v))
        top = xp.maximum(top, v)
    return top - second


def _window_support(X, k, s, p):
    """``support(site)`` of a pooling decision: the (unpadded) input window of output ``(n, c, *o)``."""

    def support(site):
        n, c, *o = (int(i) for i in site)
        spans = tuple(
            slice(max(oi * si - pi, 0), min(oi * si - pi + ki, xi)) for oi, si, pi, ki, xi in zip(o, s, p, k, X)
        )
        return ((n, c) + spans,)

    return support


def _pool_decisions(xp, x, **params):
    # max pooling picks one element per window (its first maximum, _argmax; the backward scatters to
    # it): a near tie between a window's two largest values can be picked differently in two dtypes
    if params["pool_type"] != "max":
        return []  # avg / sum / lp are smooth in x
    idx, (k, s, p, Y) = _argmax(xp, x, params)
    return [Decision((0,), idx, _window_gap(xp, x, k, s, p, Y), _window_support(x.shape[2:], k, s, p))]


def _pool_pinned(xp, choices, x, **params):
    """Pooling's outputs with every max window reading the tap recorded in ``choices[0]`` (``_argmax``'s)."""
    if params["pool_type"] != "max":
        return _pool_outputs(xp, x, **params)
    return (*_pinned_max(xp, choices[0], x, params),)


def _pool_pinned_single(xp, choices, x, **params):
    return _pool_pinned(xp, choices, x, **params)[0]


def _pinned_max(xp, idx, x, params):
    # y[o] = x[window o, tap idx[o]]: one where per tap, starting from tap 0 (so -inf padding reads as in forward)
    k, s, p, Y = pool_geometry(params, x.shape[2:])
    out = None
    for t, v in _taps(xp, _pad_for(xp, x, k, s, p, Y, _lowest(x.dtype)), k, s, Y):
        out = v.copy() if out is None else xp.where(idx == t, v, out)
    if not keeps_argmax(params):
        return (out,)
    flat = _flat_index(xp, idx, x.shape, k, s, p, Y)
    return out, _mark_padding_picks(xp, flat, idx, out, x.shape, k, s, p, Y)


#: Pooling's rules with a single output (no workspace): ``Pooling_v1``'s, as MXNet's legacy op has none
SINGLE_OUTPUT_RULES = dict(
    num_outputs=1,
    num_visible=None,
    output_names=None,
    forward=_pool_fwd,
    infer_shape=_pool_shape,
    infer_type=float_inputs("data"),
    pinned=_pool_pinned_single,
)

register(
    "Pooling",
    aliases=("_npx_pooling",),
    params=dict(_POOL_PARAMS),
    prepare=_pool_prepare,
    num_outputs=lambda p: 2 if keeps_argmax(p) else 1,
    num_visible=1,
    output_names=("output", "workspace"),
    forward=_pool_outputs,
    infer_shape=_pool_outputs_shape,
    infer_type=_pool_outputs_type,
    gradient=_pool_grad,
    decisions=_pool_decisions,
    pinned=_pool_pinned,
    doc="Max/avg/sum/lp pooling over 1-3 spatial axes with MXNet's conventions (valid/full/same, global_pool, "
    "count_include_pad).",
)


# ----------------------------------------------------------------------------
# Hidden gradient ops
# ----------------------------------------------------------------------------


def _max_scatter_fwd(xp, g, x, **params):
    idx, (k, s, p, Y) = _argmax(xp, x, params)
    acc = acc_dtype(g.dtype)
    ga = g.astype(acc, copy=False)
    # "g where tap t is the argmax, else +0" without a data-dependent branch (a random mask makes
    # masked copies slow) and without g * mask (inf/nan elsewhere must stay out): AND the bits of g
    # with an all-ones / all-zeros integer mask of the same width
    bits = np.dtype(f"i{acc.itemsize}")
    gbits = xp.ascontiguousarray(ga).view(bits)
    hit = xp.empty(idx.shape, dtype=bool)
    mask = xp.empty(idx.shape, dtype=bits)
    part = xp.empty(idx.shape, dtype=acc)

    def at_tap(t):
        xp.equal(idx, t, out=hit)
        xp.multiply(hit, bits.type(-1), out=mask)  # 0 or -1 (all bits set)
        xp.bitwise_and(gbits, mask, out=part.view(bits))
        return part

    return _scatter_taps(xp, x.shape, k, s, p, Y, at_tap, acc).astype(g.dtype, copy=False)


def _max_gather_fwd(xp, v, x, **params):
    idx, (k, s, p, Y) = _argmax(xp, x, params)
    out = xp.zeros(idx.shape, dtype=v.dtype)
    # zero padding: an all-padding window (whose argmax is a padded position) reads 0
    for t, vt in _taps(xp, _pad_for(xp, v, k, s, p, Y, 0.0), k, s, Y):
        xp.copyto(out, vt, where=idx == t)
    return out


def _gather_shape(params, in_shapes, out_shapes, where):
    v, x = in_shapes
    ref = x if x is not None else v
    if ref is None:
        return in_shapes, out_shapes
    _, _, _, Y = pool_geometry(params, ref[2:], where)
    return [ref, ref], [tuple(ref[:2]) + Y]


# scatter(G; x) is linear in G with the argmax of x fixed (piecewise constant in x):
#   <H, scatter(G; x)> = <gather(H; x), G>,  d/dx = 0 almost everywhere
register(
    "_pool_max_scatter",
    inputs=("ograd", "data"),
    params=dict(_POOL_PARAMS),
    forward=_max_scatter_fwd,
    infer_shape=like_input1,
    no_grad_inputs=("data",),
    gradient=lambda F, n, g: [F._pool_max_gather(g[0], n.inputs[1], **n.params), None],
    doc="Max pooling's gradient: each output gradient added at its window's first maximum of ``data`` (hidden).",
)
register(
    "_pool_max_gather",
    inputs=("value", "data"),
    params=dict(_POOL_PARAMS),
    forward=_max_gather_fwd,
    infer_shape=_gather_shape,
    no_grad_inputs=("data",),
    gradient=lambda F, n, g: [F._pool_max_scatter(g[0], n.inputs[1], **n.params), None],
    doc="``value`` read at each window's first maximum of ``data`` (hidden; adjoint of _pool_max_scatter).",
)


def _scatter_at_fwd(xp, g, index, like):
    """zeros like ``like`` with each ``g[o]`` added at flat index ``index[o]`` (skipped where -1).

    One ``add.at`` in the accumulation dtype instead of a masked pass per tap, over the outputs in
    reverse order: an input element is tap ``i - o*s + p`` of window ``o``, so later windows
    reach it through earlier taps, and the reverse order adds its contributions in increasing tap
    order -- the order (and so the rounding) of the tap-by-tap scatter ``_pool_max_scatter``.
    """
    acc = acc_dtype(g.dtype)
    index = index.astype(np.int64, copy=False)  # the checkers may hand in an index array as floats
    flat, values = index.reshape(-1)[::-1], g.reshape(-1)[::-1].astype(acc, copy=False)
    if flat.size and int(flat.min()) < 0:
        keep = flat >= 0
        flat, values = flat[keep], values[keep]
    out = xp.zeros(like.size, dtype=acc)
    xp.add.at(out, flat, values)
    return out.reshape(like.shape).astype(g.dtype, copy=False)


def _gather_at_fwd(xp, v, index):
    """``v`` read at flat index ``index[o]`` (0 where -1)."""
    index = index.astype(np.int64, copy=False)
    got = xp.take(v.reshape(-1), xp.maximum(index, 0))
    if index.size and int(index.min()) < 0:
        got = xp.where(index >= 0, got, xp.zeros((), dtype=v.dtype))
    return got


# scatter(G; index) is linear in G with the index fixed: <H, scatter(G)> = <gather(H), G>
register(
    "_pool_max_scatter_at",
    inputs=("ograd", "workspace", "like"),
    forward=_scatter_at_fwd,
    infer_shape=output_like(2),
    infer_type=output_like(0),
    no_grad_inputs=("workspace", "like"),
    gradient=lambda F, n, g: [F._pool_max_gather_at(g[0], n.inputs[1]), None, None],
    doc="Max pooling's gradient from its workspace: ``ograd`` added at the flat indices ``workspace`` (-1 "
    "skipped) of an array shaped like ``like`` (hidden).",
)
register(
    "_pool_max_gather_at",
    inputs=("value", "workspace"),
    forward=_gather_at_fwd,
    infer_shape=output_like(1),
    infer_type=output_like(0),
    no_grad_inputs=("workspace",),
    gradient=lambda F, n, g: [F._pool_max_scatter_at(g[0], n.inputs[1], n.inputs[0]), None],
    doc="``value`` read at max pooling's workspace indices (0 where -1): adjoint of _pool_max_scatter_at (hidden).",
)


def _sum_adjoint_fwd(xp, g, like, **params):
    X = like.shape[2:]
    k, s, p, Y = pool_geometry(params, X)
    acc = acc_dtype(g.dtype)
    ga = g.astype(acc, copy=False)
    if params["pool_type"] == "avg":
        ga = ga / _avg_divisor(xp, X, k, s, p, Y, params["count_include_pad"] is not False, acc)
    if params["global_pool"]:
        out = xp.broadcast_to(ga, like.shape).copy()
    else:
        out = _scatter_taps(xp, like.shape, k, s, p, Y, lambda t: ga, acc)
    return out.astype(g.dtype, copy=False)


# P^T: each window's gradient (divided for avg) added to every element of the window.
# <H, P^T G> = <P H, G>  ->  the gradient in G is Pooling itself.
register(
    "_pool_sum_adjoint",
    inputs=("ograd", "like"),
    params=dict(_POOL_PARAMS),
    forward=_sum_adjoint_fwd,
    infer_shape=like_input1,
    no_grad_inputs=("like",),
    gradient=lambda F, n, g: [F.Pooling(g[0], **n.params), None],
    doc="Adjoint of avg/sum pooling (hidden).",
)


def _lp_backward_fwd(xp, g, x, y, **params):
    k, s, p, Y = pool_geometry(params, x.shape[2:])
    pv = params["p_value"]
    acc = acc_dtype(x.dtype)
    xa, ya, ga = (a.astype(acc, copy=False) for a in (x, y, g))
    ypow = ya if pv == 2 else ya * ya
    safe = xp.where(ya == 0, xp.ones((), dtype=acc), ypow)
    r = xp.where(ya == 0, xp.zeros((), dtype=acc), ga / safe)  # g / y^(p-1), 0 where y == 0
    if params["global_pool"]:
        spread = xp.broadcast_to(r, x.shape)
    else:
        spread = _scatter_taps(xp, x.shape, k, s, p, Y, lambda t: r, acc)
    xpow = xa if pv == 2 else xa * xa
    return (xpow * spread).astype(x.dtype, copy=False)


register(
    "_backward_Pooling",
    inputs=("ograd", "data", "output"),
    params=dict(_POOL_PARAMS),
    forward=_lp_backward_fwd,
    infer_shape=output_like(1),
    gradient=None,
    grad_undefined_reason="lp Pooling (p_value 2 or 3) uses the fused hidden op _backward_Pooling, which has no "
    "gradient rule: second-order gradients through it are not defined",
    doc="Fused gradient of lp pooling (hidden).",
)


# ----------------------------------------------------------------------------
# Pad
# ----------------------------------------------------------------------------

_PAD_PARAMS = {
    "mode": Param("str", choices=("constant", "edge", "reflect")),
    "pad_width": Param("shape"),
    "constant_value": Param("float", 0.0),
}


def _pairs(pad_width):
    return [(pad_width[2 * i], pad_width[2 * i + 1]) for i in range(len(pad_width) // 2)]


@wait_for_first_input
def _pad_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    pw = tuple(params["pad_width"])
    if len(x) not in (4, 5):
        raise ShapeError(f"{where}: input 'data' has shape {tuple(x)}; Pad supports 4-d or 5-d input only (as MXNet)")
    if len(pw) != 2 * len(x):
        raise ShapeError(
            f"{where}: parameter 'pad_width' has {len(pw)} entries, expected {2 * len(x)} "
            f"(before/after for each of the {len(x)} axes of data {tuple(x)})"
        )
    if any(pw[:4]):
        raise ShapeError(
            f"{where}: parameter 'pad_width'={pw} must be 0 for the first two axes (N and C), got {pw[:4]}"
        )
    if any(v < 0 for v in pw):
        raise ShapeError(f"{where}: parameter 'pad_width'={pw} must not be negative")
    if params["mode"] == "reflect":
        for i, (a, b) in enumerate(_pairs(pw)[2:], start=2):
            if a >= x[i] or b >= x[i]:
                raise ShapeError(
                    f"{where}: reflect padding {(a, b)} on axis {i} must be smaller than the input size {x[i]}"
                )
    return in_shapes, [tuple(n + a + b for n, (a, b) in zip(x, _pairs(pw)))]


def _pad_fwd(xp, x, mode, pad_width, constant_value):
    pairs = _pairs(pad_width)
    if mode == "constant":
        return xp.pad(x, pairs, mode="constant", constant_values=constant_value)
    return xp.pad(x, pairs, mode=mode)


def _pad_adjoint_fwd(xp, g, mode, pad_width, constant_value):
    """Fold each axis's padding back: crop (constant), add to the edge (edge), add mirrored (reflect)."""
    acc = acc_dtype(g.dtype)
    out = g.astype(acc, copy=False)
    for axis, (a, b) in enumerate(_pairs(pad_width)):
        if not a and not b:
            continue
        n = out.shape[axis] - a - b

        def sl(start, stop, ax=axis):
            idx = [slice(None)] * out.ndim
            idx[ax] = slice(start, stop)
            return tuple(idx)

        core = out[sl(a, a + n)].copy()
        if mode == "edge":
            core[sl(0, 1)] += out[sl(0, a)].sum(axis=axis, keepdims=True)
            core[sl(n - 1, n)] += out[sl(a + n, a + n + b)].sum(axis=axis, keepdims=True)
        elif mode == "reflect":
            # output a - 1 - u reads input 1 + u; output a + n + t reads input n - 2 - t
            if a:
                core[sl(1, a + 1)] += xp.flip(out[sl(0, a)], axis=axis)
            if b:
                core[sl(n - 1 - b, n - 1)] += xp.flip(out[sl(a + n, a + n + b)], axis=axis)
        out = core
    return xp.ascontiguousarray(out.astype(g.dtype, copy=False))


@wait_for_first_input
def _pad_adjoint_shape(params, in_shapes, out_shapes, where):
    (g,) = in_shapes
    return in_shapes, [tuple(n - a - b for n, (a, b) in zip(g, _pairs(params["pad_width"])))]


register(
    "Pad",
    aliases=("pad",),
    params=dict(_PAD_PARAMS),
    forward=_pad_fwd,
    infer_shape=_pad_shape,
    infer_type=float_inputs("data"),
    # y = pad(x) is affine in x (constant_value adds a constant)  ->  dx = pad^T(g)
    gradient=lambda F, n, g: [F._pad_adjoint(g[0], **n.params)],
    doc="Pad the spatial axes of a 4-d/5-d input (constant, edge or reflect; pad_width flat as numpy.pad's, with "
    "zeros for N and C).",
)
register(
    "_pad_adjoint",
    params=dict(_PAD_PARAMS),
    forward=_pad_adjoint_fwd,
    infer_shape=_pad_adjoint_shape,
    # pad^T is linear; its adjoint is the linear part of Pad: padding with 0 (constant) / edge / reflect
    gradient=lambda F, n, g: [F.Pad(g[0], **{**n.params, "constant_value": 0.0})],
    doc="Adjoint of Pad's linear part (hidden).",
)
