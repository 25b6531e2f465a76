"""Indexing and ordering operators (MXNet 1.9 ``indexing_op``, ``broadcast_reduce_op`` pick,
``ordering_op``): take, pick, one_hot, sort, argsort, topk.

Index inputs may be float or integer arrays; like MXNet they are cast to integers by
truncation toward zero (``static_cast<int64_t>``), then clipped to ``[0, n - 1]``
(``mode='clip'``, the default) or wrapped modulo ``n`` (``mode='wrap'``). ``take``'s
``mode='raise'`` is treated like ``'clip'`` (MXNet's CPU kernel raises on an out-of-range
index; symgrad does not inspect index values for errors, so the forward never syncs a GPU).

Index inputs never get a gradient. The gradients w.r.t. the data are scatter-adds, each
a hidden op whose own gradient is the gather again (``take``, ``pick``,
``_gather_along_axis``), so second-order gradients work. sort and topk values scatter
the head gradient back to the positions the values came from (MXNet's _backward_topk);
argsort, topk indices/mask and one_hot have no gradient (MXNet: zero gradient).
Ties are ordered stably (first occurrence first); MXNet uses std::sort, whose order
among equal values is unspecified.
"""

from __future__ import annotations

import numpy as np

from ..base import ParamError, ShapeError
from .registry import Param, normalize_axis, register

_INDEX_DTYPES = ("uint8", "int32", "int64", "float16", "float32", "float64")


def _acc(dtype):
    """Accumulation dtype: float16 sums in float32."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def _resolve(xp, index, n, mode):
    """Integer positions in [0, n) from an index array: truncate, then wrap or clip."""
    j = index.astype(np.int64)
    if mode == "wrap":
        return xp.mod(j, n)  # C's % then +n for negatives == Python's floor mod
    return xp.clip(j, 0, n - 1)  # 'clip' and 'raise'


def _first_type(params, in_types, out_types, where):
    """The output has the first input's dtype; index / shape-only inputs may have any dtype."""
    t = in_types[0] if in_types[0] is not None else out_types[0]
    return [t] + list(in_types[1:]), [t]


def _like_shape(params, in_shapes, out_shapes, where):
    like = in_shapes[-1]
    return in_shapes, [like] if like is not None else out_shapes


# ----------------------------------------------------------------------------
# take
# ----------------------------------------------------------------------------

_TAKE_PARAMS = {"axis": Param("int", 0), "mode": Param("str", "clip", choices=("raise", "wrap", "clip"))}


def _take_out(a, idx, axis, where):
    ax = normalize_axis(axis, len(a), where)
    return ax, tuple(a[:ax]) + tuple(idx) + tuple(a[ax + 1:])


def _take_shape(params, in_shapes, out_shapes, where):
    a, idx = in_shapes
    if a is None or idx is None:
        return in_shapes, out_shapes
    if len(a) == 0:
        raise ShapeError(f"{where}: input 'a' must be at least 1-d")
    return in_shapes, [_take_out(a, idx, params["axis"], where)[1]]


def _take_fwd(xp, a, indices, axis, mode):
    ax = normalize_axis(axis, a.ndim, "take")
    return xp.take(a, _resolve(xp, indices, a.shape[ax], mode), axis=ax)


register(
    "take",
    inputs=("a", "indices"),
    params=dict(_TAKE_PARAMS),
    forward=_take_fwd,
    infer_shape=_take_shape,
    infer_type=_first_type,
    no_grad_inputs=("indices",),
    # y[..., i, ...] = a[..., j(i), ...]  ->  da[..., k, ...] = sum of dy over the i with j(i) = k
    gradient=lambda F, n, g: [F._take_scatter(g[0], n.inputs[1], n.inputs[0], **n.params), None],
    doc="Take slices of ``a`` along ``axis`` at ``indices`` (out-of-range: clip, or wrap; raise acts as clip).",
)


def _take_scatter_fwd(xp, g, indices, like, axis, mode):
    """Scatter-add g (take's output shape) back into zeros shaped like the taken array."""
    ax = normalize_axis(axis, like.ndim, "_take_scatter")
    n = like.shape[ax]
    pre = int(np.prod(like.shape[:ax], dtype=np.int64))
    post = int(np.prod(like.shape[ax + 1:], dtype=np.int64))
    j = _resolve(xp, indices, n, mode).reshape(-1)
    acc = _acc(g.dtype)
    # (pre, K, post) -> (K, pre * post): the scattered axis first, so add.at gets one index array
    g2 = g.reshape(pre, j.size, post).transpose(1, 0, 2).reshape(j.size, pre * post).astype(acc, copy=False)
    out = xp.zeros((n, pre * post), dtype=acc)
    xp.add.at(out, j, g2)
    out = out.reshape(n, pre, post).transpose(1, 0, 2).reshape(like.shape)
    return out.astype(g.dtype, copy=False)


register(
    "_take_scatter",
    inputs=("ograd", "indices", "data"),
    params=dict(_TAKE_PARAMS),
    forward=_take_scatter_fwd,
    infer_shape=_like_shape,
    infer_type=_first_type,
    no_grad_inputs=("indices", "data"),
    # the scatter-add is linear in ograd; its adjoint is the gather: take(h, indices)
    gradient=lambda F, n, g: [F.take(g[0], n.inputs[1], **n.params), None, None],
    doc="take's gradient: scatter-add ``ograd`` into zeros shaped like ``data`` (hidden).",
)


# ----------------------------------------------------------------------------
# pick
# ----------------------------------------------------------------------------

_PICK_PARAMS = {
    "axis": Param("int", -1, optional=True),
    "keepdims": Param("bool", False),
    "mode": Param("str", "clip", choices=("wrap", "clip")),
}


def _pick_prepare(params, name):
    if params["axis"] is None:
        raise ParamError(f"pick {name!r}: axis=None is not supported by pick (MXNet); give an axis")
    return params


def _pick_shapes(x, axis, keepdims, where):
    """(axis, output shape, index shape with the axis kept as 1, index shape with it removed)."""
    ax = normalize_axis(axis, len(x), where)
    kept = tuple(1 if i == ax else d for i, d in enumerate(x))
    dropped = tuple(d for i, d in enumerate(x) if i != ax) or (1,)
    if len(x) == 1:  # MXNet's ReduceAxisShapeImpl: a 1-d input reduces to (1,)
        kept = dropped = (1,)
    return ax, (kept if keepdims else dropped), kept, dropped


def _pick_shape(params, in_shapes, out_shapes, where):
    x, idx = in_shapes
    if x is None:
        return in_shapes, out_shapes
    if len(x) == 0:
        raise ShapeError(f"{where}: input 'data' must be at least 1-d")
    _, out, kept, dropped = _pick_shapes(x, params["axis"], params["keepdims"], where)
    if idx is None:
        idx = kept if params["keepdims"] else dropped
    else:
        want = kept if len(idx) == len(x) else dropped
        if tuple(idx) != want:
            raise ShapeError(
                f"{where}: input 'index' has shape {tuple(idx)}, expected {want} for data {tuple(x)} "
                f"(axis={params['axis']})"
            )
    return [x, idx], [out]


def _pick_fwd(xp, data, index, axis, keepdims, mode):
    ax, out, kept, _ = _pick_shapes(data.shape, axis, keepdims, "pick")
    j = _resolve(xp, index, data.shape[ax], mode).reshape(kept)
    return xp.take_along_axis(data, j, axis=ax).reshape(out)


register(
    "pick",
    aliases=("choose_element_0index",),
    inputs=("data", "index"),
    params=dict(_PICK_PARAMS),
    prepare=_pick_prepare,
    forward=_pick_fwd,
    infer_shape=_pick_shape,
    infer_type=_first_type,
    no_grad_inputs=("index",),
    # y[r] = x[r, j(r)]  ->  dx[r, k] = dy[r] where k = j(r), else 0
    gradient=lambda F, n, g: [F._pick_scatter(g[0], n.inputs[1], n.inputs[0], **n.params), None],
    doc="Pick one element per position along ``axis`` at ``index`` (clip or wrap out-of-range indices).",
)


def _pick_scatter_fwd(xp, g, index, like, axis, keepdims, mode):
    """dx = one_hot(j) along the axis times g (one index per row, so no sums are needed)."""
    ax, _, kept, _ = _pick_shapes(like.shape, axis, keepdims, "_pick_scatter")
    n = like.shape[ax]
    j = _resolve(xp, index, n, mode).reshape(kept)
    pos = xp.arange(n).reshape(tuple(n if i == ax else 1 for i in range(like.ndim)))
    return xp.where(pos == j, g.reshape(kept), xp.zeros((), dtype=g.dtype)).astype(g.dtype, copy=False)


register(
    "_pick_scatter",
    inputs=("ograd", "index", "data"),
    params=dict(_PICK_PARAMS),
    forward=_pick_scatter_fwd,
    infer_shape=_like_shape,
    infer_type=_first_type,
    no_grad_inputs=("index", "data"),
    # linear in ograd; its adjoint is the gather: pick(h, index)
    gradient=lambda F, n, g: [F.pick(g[0], n.inputs[1], **n.params), None, None],
    doc="pick's gradient: ``ograd`` placed at the picked positions of zeros shaped like ``data`` (hidden).",
)


# ----------------------------------------------------------------------------
# one_hot
# ----------------------------------------------------------------------------


def _one_hot_prepare(params, name):
    if params["depth"] < 0:
        raise ParamError(f"one_hot {name!r}: parameter 'depth' must be non-negative, got {params['depth']}")
    return params


def _one_hot_fwd(xp, indices, depth, on_value, off_value, dtype):
    j = indices.astype(np.int64)[..., None]
    hit = j == xp.arange(depth)  # out-of-range (and negative) indices hit nothing: all off_value
    on = xp.asarray(np.asarray(on_value).astype(dtype))  # MXNet: static_cast<DType>(value)
    off = xp.asarray(np.asarray(off_value).astype(dtype))
    return xp.where(hit, on, off).astype(dtype, copy=False)


register(
    "one_hot",
    inputs=("indices",),
    params={
        "depth": Param("int"),
        "on_value": Param("float", 1.0),
        "off_value": Param("float", 0.0),
        "dtype": Param("dtype", np.dtype(np.float32)),
    },
    prepare=_one_hot_prepare,
    forward=_one_hot_fwd,
    infer_shape=lambda p, i, o, w: (i, [tuple(i[0]) + (p["depth"],)] if i[0] is not None else o),
    infer_type=lambda p, i, o, w: (i, [p["dtype"]]),
    no_grad_inputs=("indices",),
    gradient=lambda F, n, g: [None],  # piecewise constant in the indices (MXNet: zero gradient)
    doc="One-hot rows of length ``depth`` (on_value at the index, off_value elsewhere) in ``dtype``.",
)


# ----------------------------------------------------------------------------
# gather / scatter along an axis (sort and topk values)
# ----------------------------------------------------------------------------


def _gather_fwd(xp, data, index, axis):
    return xp.take_along_axis(data, index.astype(np.int64), axis=normalize_axis(axis, data.ndim, "gather"))


def _scatter_along_fwd(xp, g, index, like, axis):
    """out[..., index[..., i, ...], ...] += g[..., i, ...] along ``axis``, out shaped like ``like``."""
    ax = normalize_axis(axis, like.ndim, "_scatter_along_axis")
    n = like.shape[ax]
    acc = _acc(g.dtype)
    g2 = xp.moveaxis(g, ax, -1)
    moved = g2.shape[:-1] + (n,)
    rows = int(np.prod(g2.shape[:-1], dtype=np.int64))
    k = g2.shape[-1]
    j = xp.moveaxis(index, ax, -1).astype(np.int64).reshape(rows, k)
    lin = (xp.arange(rows, dtype=np.int64)[:, None] * n + j).reshape(-1)
    out = xp.zeros(rows * n, dtype=acc)
    xp.add.at(out, lin, g2.reshape(-1).astype(acc, copy=False))
    return xp.moveaxis(out.reshape(moved), -1, ax).astype(g.dtype, copy=False)


def _gather_shape(params, in_shapes, out_shapes, where):
    return in_shapes, [in_shapes[1]] if in_shapes[1] is not None else out_shapes


register(
    "_gather_along_axis",
    inputs=("data", "index"),
    params={"axis": Param("int")},
    forward=_gather_fwd,
    infer_shape=_gather_shape,
    infer_type=_first_type,
    no_grad_inputs=("index",),
    # y = x[index] along the axis  ->  dx = scatter-add of dy at index
    gradient=lambda F, n, g: [F._scatter_along_axis(g[0], n.inputs[1], n.inputs[0], axis=n.params["axis"]), None],
    doc="numpy.take_along_axis with in-range indices (hidden; sort/topk second order).",
)

register(
    "_scatter_along_axis",
    inputs=("ograd", "index", "data"),
    params={"axis": Param("int")},
    forward=_scatter_along_fwd,
    infer_shape=_like_shape,
    infer_type=_first_type,
    no_grad_inputs=("index", "data"),
    # linear in ograd; its adjoint gathers: take_along_axis(h, index)
    gradient=lambda F, n, g: [F._gather_along_axis(g[0], n.inputs[1], axis=n.params["axis"]), None, None],
    doc="Scatter-add ``ograd`` along ``axis`` at ``index`` into zeros shaped like ``data`` (hidden).",
)


def _scatter_back(F, n, g, axis):
    """Gradient of values gathered at the node's indices output (outputs[1]) along ``axis``."""
    x, idx = n.inputs[0], n.outputs[1]
    if axis is None:  # the values came from the flattened input
        flat = F.Reshape(x, shape=(-1,))
        return [F.reshape_like(F._scatter_along_axis(g[0], idx, flat, axis=0), x)]
    return [F._scatter_along_axis(g[0], idx, x, axis=axis)]


# ----------------------------------------------------------------------------
# sort, argsort, topk
# ----------------------------------------------------------------------------


def _sorted_index(xp, x, is_ascend):
    """Stable argsort along the last axis, ascending or descending."""
    if is_ascend:
        return xp.argsort(x, axis=-1, kind="stable")
    key = x.astype(np.int64) if x.dtype.kind in "iub" else x
    return xp.argsort(-key, axis=-1, kind="stable")


def _topk_parse(shape, axis, k, where):
    """(axis or None, element count along it, k) as MXNet's ParseTopKParam resolves them."""
    if axis is None:
        n = int(np.prod(shape, dtype=np.int64))
    else:
        if len(shape) == 0:
            raise ShapeError(f"{where}: input must be at least 1-d")
        axis = normalize_axis(axis, len(shape), where)
        n = shape[axis]
    if k <= 0:
        k = n
    if k > n:
        raise ShapeError(f"{where}: k={k} is larger than the {n} elements along the axis (input {tuple(shape)})")
    return axis, n, k


def _topk_core(xp, x, axis, k, is_ascend):
    """(values, indices) of the first k in sorted order along ``axis`` (None: flattened)."""
    src = x.reshape(-1) if axis is None else xp.moveaxis(x, axis, -1)
    idx = _sorted_index(xp, src, is_ascend)[..., :k]
    vals = xp.take_along_axis(src, idx, axis=-1)
    if axis is not None:
        idx, vals = xp.moveaxis(idx, -1, axis), xp.moveaxis(vals, -1, axis)
    return vals, idx


def _dtype_prepare(opname, extra=None):
    def prepare(params, name):
        if params["dtype"].name not in _INDEX_DTYPES:
            raise ParamError(
                f"{opname} {name!r}: parameter 'dtype' must be one of {list(_INDEX_DTYPES)}, "
                f"got {params['dtype'].name!r}"
            )
        return extra(params, name) if extra else params

    return prepare


def _sort_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if x is None:
        return in_shapes, out_shapes
    axis, n, _ = _topk_parse(x, params["axis"], 0, where)
    out = (n,) if axis is None else tuple(x)
    return in_shapes, [out] * len(out_shapes)


_INDEX_TYPE = np.dtype(np.int32)  # MXNet's hidden index outputs (MXNET_USE_INT64_TENSOR_SIZE off)


def _sort_fwd(xp, x, axis, is_ascend):
    axis = None if axis is None else normalize_axis(axis, x.ndim, "sort")
    vals, idx = _topk_core(xp, x, axis, x.size if axis is None else x.shape[axis], is_ascend)
    return vals, idx.astype(_INDEX_TYPE)


register(
    "sort",
    params={"axis": Param("int", -1, optional=True), "is_ascend": Param("bool", True)},
    num_outputs=2,
    num_visible=1,
    forward=_sort_fwd,
    infer_shape=_sort_shape,
    infer_type=lambda p, i, o, w: (i, [i[0] if i[0] is not None else o[0], _INDEX_TYPE]),
    # y_i = x[idx_i] (a permutation): dx[idx_i] = dy_i, dx = scatter of dy at the hidden indices
    gradient=lambda F, n, g: _scatter_back(F, n, g, n.params["axis"]),
    doc="Sorted copy along ``axis`` (None: flattened), ascending unless is_ascend=False.",
)


def _argsort_fwd(xp, x, axis, is_ascend, dtype):
    axis = None if axis is None else normalize_axis(axis, x.ndim, "argsort")
    _, idx = _topk_core(xp, x, axis, x.size if axis is None else x.shape[axis], is_ascend)
    return idx.astype(dtype)


register(
    "argsort",
    params={
        "axis": Param("int", -1, optional=True),
        "is_ascend": Param("bool", True),
        "dtype": Param("dtype", np.dtype(np.float32)),
    },
    prepare=_dtype_prepare("argsort"),
    forward=_argsort_fwd,
    infer_shape=_sort_shape,
    infer_type=lambda p, i, o, w: (i, [p["dtype"]]),
    gradient=lambda F, n, g: [None],  # indices are piecewise constant (MXNet: zero gradient)
    doc="Indices that sort ``data`` along ``axis`` (None: flattened), as ``dtype``.",
)


def _topk_n_out(p):
    return 1 if p["ret_typ"] in ("indices", "mask") else 2


def _topk_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if x is None:
        return in_shapes, out_shapes
    axis, _, k = _topk_parse(x, params["axis"], params["k"], where)
    if params["ret_typ"] == "mask":
        out = tuple(x)
    elif axis is None:
        out = (k,)
    else:
        out = tuple(k if i == axis else d for i, d in enumerate(x))
    return in_shapes, [out] * len(out_shapes)


def _topk_type(params, in_types, out_types, where):
    t = in_types[0] if in_types[0] is not None else out_types[0]
    ret = params["ret_typ"]
    if ret == "indices":
        return in_types, [params["dtype"]]
    if ret == "mask":
        return [t], [t]
    return [t], [t, _INDEX_TYPE if ret == "value" else params["dtype"]]


def _topk_fwd(xp, x, axis, k, ret_typ, is_ascend, dtype):
    axis, _, k = _topk_parse(x.shape, axis, k, "topk")
    vals, idx = _topk_core(xp, x, axis, k, is_ascend)
    if ret_typ == "indices":
        return (idx.astype(dtype),)
    if ret_typ == "mask":
        # an element is in the top k when its rank in the sorted order is below k
        src = x.reshape(-1) if axis is None else xp.moveaxis(x, axis, -1)
        rank = xp.argsort(_sorted_index(xp, src, is_ascend), axis=-1, kind="stable")
        mask = (rank < k).astype(x.dtype)
        return (mask.reshape(x.shape) if axis is None else xp.moveaxis(mask, -1, axis),)
    return vals, idx.astype(_INDEX_TYPE if ret_typ == "value" else dtype)


def _topk_grad(F, n, g):
    # values (ret_typ value/both): y_i = x[idx_i]  ->  dx = scatter of dy at idx (MXNet's _backward_topk);
    # indices and mask are piecewise constant: no gradient
    if n.params["ret_typ"] in ("indices", "mask"):
        return [None]
    return _scatter_back(F, n, g, n.params["axis"])


register(
    "topk",
    params={
        "axis": Param("int", -1, optional=True),
        "k": Param("int", 1),
        "ret_typ": Param("str", "indices", choices=("value", "indices", "mask", "both")),
        "is_ascend": Param("bool", False),
        "dtype": Param("dtype", np.dtype(np.float32)),
    },
    prepare=_dtype_prepare("topk"),
    num_outputs=_topk_n_out,
    num_visible=lambda p: 2 if p["ret_typ"] == "both" else 1,
    forward=_topk_fwd,
    infer_shape=_topk_shape,
    infer_type=_topk_type,
    gradient=_topk_grad,
    doc="The k largest (or smallest, is_ascend=True) along ``axis``: values, indices, a 0/1 mask or both.",
)
