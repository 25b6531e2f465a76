"""Indexing and ordering operators (MXNet 1.9 ``indexing_op``, ``broadcast_reduce_op`` pick,
``ordering_op``, ``ravel``, ``diag_op``, ``matrix_op`` split_v2, ``histogram``, contrib ``index_array``,
``index_copy``, ``boolean_mask``): take, pick, one_hot, sort, argsort, topk; gather_nd, scatter_nd,
batch_take, ravel_multi_index / unravel_index, diag, _split_v2, _histogram, index_array, index_copy,
boolean_mask (second part of the module).

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
from ..opdef import (
    Decision,
    Param,
    acc_dtype,
    adjoint_shape,
    check_at_least,
    normalize_axis,
    register,
    wait_for_first_input,
    wait_for_inputs,
)
from .shape import split_grad

_INDEX_DTYPES = ("uint8", "int32", "int64", "float16", "float32", "float64")


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


def _register_index_scatter(name, index, **spec):
    """Register a hidden gradient op from (``ograd``, ``index``, ``data``) to zeros shaped like ``data``.

    ``ograd`` lands at the positions ``index`` selects and keeps its dtype; ``index`` and ``data`` (read for
    its shape only) are not differentiated.
    """
    register(name, inputs=("ograd", index, "data"), infer_type=_first_type, no_grad_inputs=(index, "data"), **spec)


# ----------------------------------------------------------------------------
# take
# ----------------------------------------------------------------------------

_TAKE_PARAMS = {"axis": Param("int", 0), "mode": Param("str", "clip", choices=("raise", "wrap", "clip"))}


def _take_out(a, idx, axis, where):
    ax = normalize_axis(axis, len(a), where)
    return ax, tuple(a[:ax]) + tuple(idx) + tuple(a[ax + 1 :])


@wait_for_inputs(0, 1)
def _take_shape(params, in_shapes, out_shapes, where):
    a, idx = in_shapes
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
    post = int(np.prod(like.shape[ax + 1 :], dtype=np.int64))
    j = _resolve(xp, indices, n, mode).reshape(-1)
    acc = acc_dtype(g.dtype)
    # (pre, K, post) -> (K, pre * post): the scattered axis first, so add.at gets one index array
    g2 = g.reshape(pre, j.size, post).transpose(1, 0, 2).reshape(j.size, pre * post).astype(acc, copy=False)
    out = xp.zeros((n, pre * post), dtype=acc)
    xp.add.at(out, j, g2)
    out = out.reshape(n, pre, post).transpose(1, 0, 2).reshape(like.shape)
    return out.astype(g.dtype, copy=False)


_register_index_scatter(
    "_take_scatter",
    "indices",
    params=dict(_TAKE_PARAMS),
    forward=_take_scatter_fwd,
    infer_shape=adjoint_shape("take", (2, 1), like=2),
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


@wait_for_first_input
def _pick_shape(params, in_shapes, out_shapes, where):
    x, idx = in_shapes
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


_register_index_scatter(
    "_pick_scatter",
    "index",
    params=dict(_PICK_PARAMS),
    forward=_pick_scatter_fwd,
    infer_shape=adjoint_shape("pick", (2, 1), like=2),
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
    acc = acc_dtype(g.dtype)
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

_register_index_scatter(
    "_scatter_along_axis",
    "index",
    params={"axis": Param("int")},
    forward=_scatter_along_fwd,
    infer_shape=_like_shape,
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


def _order_choice(xp, x, axis, k, is_ascend):
    """The decision of sort / topk: the source index of each output element along ``axis`` (None: flattened),
    with its gap to the neighbouring values in sorted order as the quantity (0 at a tie: moving a tied element
    changes the permutation, a kink of the output). Each output element is decided over its whole row."""
    src = x.reshape(-1) if axis is None else xp.moveaxis(x, axis, -1)
    order = _sorted_index(xp, src, is_ascend)
    ranked = xp.take_along_axis(src, order, axis=-1).astype(np.float64)
    gaps = xp.abs(xp.diff(ranked, axis=-1))
    inf = xp.full(gaps.shape[:-1] + (1,), np.inf)
    gap = xp.minimum(xp.concatenate([inf, gaps], axis=-1), xp.concatenate([gaps, inf], axis=-1))[..., :k]
    idx = order[..., :k]
    if axis is not None:
        idx, gap = xp.moveaxis(idx, -1, axis), xp.moveaxis(gap, -1, axis)

    def support(site):  # the whole row the element was ranked in
        if axis is None:
            return (tuple(slice(None) for _ in x.shape),)
        return (tuple(slice(None) if i == axis else int(j) for i, j in enumerate(site)),)

    return [Decision((0,), idx, gap, support)]


def _ordered_piece(xp, x, axis, idx):
    """The values at the recorded source indices ``idx`` (in the output's layout): sort / topk on their piece."""
    if axis is None:
        return x.reshape(-1)[idx]
    return xp.take_along_axis(x, idx, axis=axis)


def _dtype_prepare(opname, extra=None):
    def prepare(params, name):
        if params["dtype"].name not in _INDEX_DTYPES:
            raise ParamError(
                f"{opname} {name!r}: parameter 'dtype' must be one of {list(_INDEX_DTYPES)}, "
                f"got {params['dtype'].name!r}"
            )
        return extra(params, name) if extra else params

    return prepare


@wait_for_first_input
def _sort_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    axis, n, _ = _topk_parse(x, params["axis"], 0, where)
    out = (n,) if axis is None else tuple(x)
    return in_shapes, [out] * len(out_shapes)


_INDEX_TYPE = np.dtype(np.int32)  # MXNet's hidden index outputs (MXNET_USE_INT64_TENSOR_SIZE off)


def _sort_fwd(xp, x, axis, is_ascend):
    axis = None if axis is None else normalize_axis(axis, x.ndim, "sort")
    vals, idx = _topk_core(xp, x, axis, x.size if axis is None else x.shape[axis], is_ascend)
    return vals, idx.astype(_INDEX_TYPE)


def _sort_choice(xp, x, axis, is_ascend):
    axis = None if axis is None else normalize_axis(axis, x.ndim, "sort")
    return _order_choice(xp, x, axis, x.size if axis is None else x.shape[axis], is_ascend)


def _sort_pinned(xp, choices, x, axis, is_ascend):
    axis = None if axis is None else normalize_axis(axis, x.ndim, "sort")
    return _ordered_piece(xp, x, axis, choices[0]), choices[0].astype(_INDEX_TYPE)


register(
    "sort",
    params={"axis": Param("int", -1, optional=True), "is_ascend": Param("bool", True)},
    num_outputs=2,
    num_visible=1,
    forward=_sort_fwd,
    decisions=_sort_choice,
    pinned=_sort_pinned,
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


@wait_for_first_input
def _topk_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
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


def _topk_choice(xp, x, axis, k, ret_typ, is_ascend, dtype):
    """The order decision of the values topk returns (``ret_typ`` value/both); none for indices and masks,
    which have no gradient."""
    if ret_typ not in ("value", "both"):
        return []
    axis, _, k = _topk_parse(x.shape, axis, k, "topk")
    return _order_choice(xp, x, axis, k, is_ascend)


def _topk_pinned(xp, choices, x, axis, k, ret_typ, is_ascend, dtype):
    if not choices:
        return _topk_fwd(xp, x, axis, k, ret_typ, is_ascend, dtype)
    axis, _, k = _topk_parse(x.shape, axis, k, "topk")
    idx = choices[0]
    return _ordered_piece(xp, x, axis, idx), idx.astype(_INDEX_TYPE if ret_typ == "value" else dtype)


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
    decisions=_topk_choice,
    pinned=_topk_pinned,
    infer_shape=_topk_shape,
    infer_type=_topk_type,
    gradient=_topk_grad,
    doc="The k largest (or smallest, is_ascend=True) along ``axis``: values, indices, a 0/1 mask or both.",
)


# ============================================================================
# N-d gather and scatter, batch_take, ravel/unravel, diag, split_v2, histogram,
# index_array, index_copy, boolean_mask (MXNet 1.9 indexing_op, ravel, diag_op,
# matrix_op, histogram, contrib/index_array, contrib/index_copy, contrib/boolean_mask)
# ============================================================================


def _acc_zeros(xp, shape, dtype):
    return xp.zeros(shape, dtype=acc_dtype(dtype))


def _nd_offsets(xp, indices, dims):
    """Flat positions into the leading ``len(dims)`` axes from an (M, ...) index array, as MXNet's
    gather_nd resolves them: ``static_cast<index_t>(index + dim) % dim`` per axis, so a negative index
    counts from the end and a float index is truncated *after* adding the dimension (-0.5 -> dim - 1).
    gather_nd raises on out-of-range values first (``_gather_nd_check_bounds``); scatter_nd wraps them, as
    MXNet's does not check."""
    m = len(dims)
    j = indices.reshape(m, -1)
    lin = xp.zeros(j.shape[1], dtype=np.int64)
    for k, d in enumerate(dims):
        lin = lin * d + xp.mod((j[k] + d).astype(np.int64), max(d, 1))
    return lin


def _nd_check_indices(ishape, ndim, where, what):
    if len(ishape) < 2:
        raise ShapeError(f"{where}: input 'indices' must have at least 2 dimensions (M, ...), got {tuple(ishape)}")
    if ishape[0] > ndim:
        raise ShapeError(
            f"{where}: input 'indices' indexes {ishape[0]} axes (its first dimension) but {what} has only {ndim}"
        )
    if ishape[0] > 10:
        raise ShapeError(f"{where}: at most 10 axes can be indexed (MXNet), got {ishape[0]}")


@wait_for_inputs(0, 1)
def _gather_nd_shape(params, in_shapes, out_shapes, where):
    d, i = in_shapes
    _nd_check_indices(i, len(d), where, "'data'")
    return in_shapes, [tuple(i[1:]) + tuple(d[i[0] :])]


def _gather_nd_check_bounds(xp, indices, lead):
    """MXNet's GatherNDCheckBound: every index of axis k must lie in [-dim_k, dim_k - 1] (compared before
    truncation, so 2.5 is out of bounds for a size-3 axis); IndexError names the first bad one per axis."""
    j = indices.reshape(len(lead), -1)
    for k, d in enumerate(lead):
        bad = (j[k] < -d) | (j[k] > d - 1)
        if bool(bad.any()):
            value = j[k][bad][0].item()
            raise IndexError(f"gather_nd: index {value:g} is out of bounds for axis {k} with size {d}")


def _gather_nd_fwd(xp, data, indices):
    m = indices.shape[0]
    lead = data.shape[:m]
    _gather_nd_check_bounds(xp, indices, lead)
    flat = data.reshape((int(np.prod(lead, dtype=np.int64)),) + data.shape[m:])
    return flat[_nd_offsets(xp, indices, lead)].reshape(indices.shape[1:] + data.shape[m:])


def _scatter_nd_core(xp, data, indices, shape, accumulate):
    """Zeros of ``shape`` with the rows of ``data`` written (or added, ``accumulate``) at the positions."""
    m = indices.shape[0]
    lead = tuple(shape[:m])
    rows = (int(np.prod(lead, dtype=np.int64)),) + tuple(shape[m:])
    lin = _nd_offsets(xp, indices, lead)
    src = data.reshape((lin.size,) + tuple(shape[m:]))
    if accumulate:
        out = _acc_zeros(xp, rows, data.dtype)
        xp.add.at(out, lin, src.astype(out.dtype, copy=False))
        return out.reshape(tuple(shape)).astype(data.dtype, copy=False)
    out = xp.zeros(rows, dtype=data.dtype)
    out[lin] = src  # duplicate positions: one of the rows wins (MXNet: "non-deterministic")
    return out.reshape(tuple(shape))


def _scatter_nd_shape(params, in_shapes, out_shapes, where):
    d, i = in_shapes
    out = tuple(params["shape"])
    if i is not None:
        _nd_check_indices(i, len(out), where, f"the output shape {out}")
        want = tuple(i[1:]) + out[i[0] :]
        if d is None:
            d = want
        elif tuple(d) != want:
            raise ShapeError(
                f"{where}: input 'data' has shape {tuple(d)}, expected {want} for indices {tuple(i)} and shape={out}"
            )
    return [d, i], [out]


def _scatter_nd_like_shape(params, in_shapes, out_shapes, where):
    g, i, like = in_shapes
    if like is not None and i is not None:
        _nd_check_indices(i, len(like), where, "'data'")
        g = tuple(i[1:]) + tuple(like[i[0] :])
    return [g, i, like], [like] if like is not None else out_shapes


register(
    "gather_nd",
    aliases=("_npi_gather_nd", "_npx_gather_nd"),
    inputs=("data", "indices"),
    forward=_gather_nd_fwd,
    infer_shape=_gather_nd_shape,
    infer_type=_first_type,
    no_grad_inputs=("indices",),
    # y[y_idx, x_rest] = data[idx(y_idx), x_rest]  ->  d data[p, x_rest] = sum of dy over the y_idx with
    # idx(y_idx) = p: the accumulating scatter (MXNet's _backward_gather_nd), shaped like data
    gradient=lambda F, n, g: [F._gather_nd_scatter(g[0], n.inputs[1], n.inputs[0]), None],
    doc="Gather elements or slices of ``data`` at the N-d positions in ``indices`` (shape (M, ...)).",
)

_register_index_scatter(
    "_gather_nd_scatter",
    "indices",
    forward=lambda xp, g, indices, like: _scatter_nd_core(xp, g, indices, like.shape, True),
    infer_shape=_scatter_nd_like_shape,
    # linear in ograd; the adjoint of a scatter-add is the gather at the same positions
    gradient=lambda F, n, g: [F.gather_nd(g[0], n.inputs[1]), None, None],
    doc="gather_nd's gradient: scatter-add ``ograd`` into zeros shaped like ``data`` (hidden).",
)


def _register_scatter_nd(name, accumulate, doc):
    """Register a scatter of ``data``'s rows into zeros of ``shape``: written, or added (``accumulate``)."""
    register(
        name,
        inputs=("data", "indices"),
        params={"shape": Param("shape")},
        forward=lambda xp, data, indices, shape: _scatter_nd_core(xp, data, indices, shape, accumulate),
        infer_shape=_scatter_nd_shape,
        infer_type=_first_type,
        no_grad_inputs=("indices",),
        # both linear in data. Written: out[idx(y), rest] = data[y, rest]  ->  d data[y, rest] =
        # dout[idx(y), rest]: gather_nd (exact for distinct positions; with duplicates the forward itself is
        # undefined, as MXNet warns). Added: the adjoint of the accumulating scatter is the same gather.
        gradient=lambda F, n, g: [F.gather_nd(g[0], n.inputs[1]), None],
        doc=doc,
    )


_register_scatter_nd(
    "scatter_nd", False, "Scatter the rows of ``data`` into zeros of ``shape`` at the N-d positions in ``indices``."
)
_register_scatter_nd(
    "_backward_gather_nd",
    True,
    "scatter_nd that adds the rows landing on one position (gather_nd's gradient, as MXNet names it).",
)


# -- batch_take ----------------------------------------------------------------


def _batch_take_shape(params, in_shapes, out_shapes, where):
    a, idx = in_shapes
    if idx is None and out_shapes[0] is not None:
        idx = out_shapes[0]
    if a is not None:
        if len(a) < 2:
            raise ShapeError(f"{where}: input 'a' must be at least 2-d, got {tuple(a)}")
        if idx is not None:
            rows = int(np.prod(a[:-1], dtype=np.int64))
            if int(np.prod(idx, dtype=np.int64)) != rows:
                raise ShapeError(
                    f"{where}: input 'indices' {tuple(idx)} must have one index per row of 'a' "
                    f"{tuple(a)} ({rows} rows of length {a[-1]})"
                )
    return [a, idx], [idx] if idx is not None else out_shapes


def _batch_rows(xp, a, indices):
    """(rows, positions) of ``a`` seen as (rows, last axis): positions clipped to [0, n - 1] (MXNet)."""
    n = a.shape[-1]
    j = xp.clip(indices.reshape(-1).astype(np.int64), 0, n - 1)
    return xp.arange(j.size), j


def _batch_take_fwd(xp, a, indices):
    r, j = _batch_rows(xp, a, indices)
    return a.reshape(-1, a.shape[-1])[r, j].reshape(indices.shape)


def _batch_take_scatter_fwd(xp, g, indices, like):
    r, j = _batch_rows(xp, like, indices)
    out = xp.zeros((r.size, like.shape[-1]), dtype=g.dtype)
    out[r, j] = g.reshape(-1)  # one position per row: no sums
    return out.reshape(like.shape)


def _batch_take_type(params, in_types, out_types, where):
    """The output has a's dtype; unknown indices are int32, as MXNet's type rule assigns them."""
    t = in_types[0] if in_types[0] is not None else out_types[0]
    idx = in_types[1] if in_types[1] is not None else np.dtype(np.int32)
    return [t, idx], [t]


register(
    "batch_take",
    inputs=("a", "indices"),
    forward=_batch_take_fwd,
    infer_shape=_batch_take_shape,
    infer_type=_batch_take_type,
    no_grad_inputs=("indices",),
    # y[r] = a[r, j(r)] (a seen as rows of its last axis)  ->  da[r, k] = dy[r] if k = j(r) else 0.
    # MXNet registers no gradient for batch_take; this is the gradient of what it computes.
    gradient=lambda F, n, g: [F._batch_take_scatter(g[0], n.inputs[1], n.inputs[0]), None],
    doc="``out[i] = a[i, indices[i]]`` for 2-d ``a`` (rows of the last axis for N-d); indices are clipped.",
)


def _batch_take_scatter_shape(params, in_shapes, out_shapes, where):
    g, idx, like = in_shapes
    return [idx if g is None else g, idx, like], [like] if like is not None else out_shapes


_register_index_scatter(
    "_batch_take_scatter",
    "indices",
    forward=_batch_take_scatter_fwd,
    infer_shape=_batch_take_scatter_shape,
    # linear in ograd; its adjoint is the gather batch_take(h, indices)
    gradient=lambda F, n, g: [F.batch_take(g[0], n.inputs[1]), None, None],
    doc="batch_take's gradient: ``ograd`` at the taken positions of zeros shaped like ``data`` (hidden).",
)


# -- ravel_multi_index / unravel_index ------------------------------------------


def _ravel_prepare(opname):
    def prepare(params, name):
        if len(params["shape"]) == 0:
            raise ParamError(f"{opname} {name!r}: parameter 'shape' must not be empty")
        if any(d == 0 for d in params["shape"][1:]):
            raise ParamError(f"{opname} {name!r}: parameter 'shape' {params['shape']} has a zero dimension")
        return params

    return prepare


def _ravel_shape(params, in_shapes, out_shapes, where):
    (x,), (y,) = in_shapes, out_shapes
    m = len(params["shape"])
    if x is not None:
        if len(x) != 2 or x[0] != m:
            raise ShapeError(
                f"{where}: input 'data' must have shape ({m}, N) for shape={params['shape']}, got {tuple(x)}"
            )
        return [x], [(x[1],)]
    if y is not None:
        return [(m, y[0])], [y]
    return in_shapes, out_shapes


def _ravel_fwd(xp, data, shape):
    # MXNet: ret = ret * shape[j] + data[j], the sum in data's dtype, each step truncated to an integer
    # (shape[0] is never used, so -1 may stand for it)
    ret = xp.zeros(data.shape[1], dtype=np.int64)
    for j, d in enumerate(shape):
        step = ret * d
        step = step.astype(data.dtype) + data[j] if data.dtype.kind == "f" else step + data[j]
        ret = step.astype(np.int64)
    return ret.astype(data.dtype)


def _unravel_shape(params, in_shapes, out_shapes, where):
    (x,), (y,) = in_shapes, out_shapes
    m = len(params["shape"])
    if x is not None:
        if len(x) != 1:
            raise ShapeError(f"{where}: input 'data' must be 1-d, got {tuple(x)}")
        return [x], [(m, x[0])]
    if y is not None:
        return [(y[1],)], [y]
    return in_shapes, out_shapes


def _unravel_fwd(xp, data, shape):
    # MXNet: the flat index truncated to an integer, then C division (toward zero) by each trailing dim
    idx = data.astype(np.int64)
    rows = [None] * len(shape)
    for j in range(len(shape) - 1, 0, -1):
        d = shape[j]
        q = xp.sign(idx) * (d // abs(d)) * (xp.abs(idx) // abs(d))
        rows[j] = idx - q * d
        idx = q
    rows[0] = idx
    return xp.stack(rows).astype(data.dtype)


register(
    "_ravel_multi_index",
    aliases=("ravel_multi_index",),
    params={"shape": Param("shape", ())},
    prepare=_ravel_prepare("_ravel_multi_index"),
    forward=_ravel_fwd,
    infer_shape=_ravel_shape,
    gradient=lambda F, n, g: [None],  # integer-valued (MXNet: zero gradient)
    doc="Flat indices of the multi-indices in the columns of ``data`` (M, N) for an array of ``shape``.",
)

register(
    "_unravel_index",
    aliases=("unravel_index",),
    params={"shape": Param("shape", ())},
    prepare=_ravel_prepare("_unravel_index"),
    forward=_unravel_fwd,
    infer_shape=_unravel_shape,
    gradient=lambda F, n, g: [None],  # integer-valued (MXNet: zero gradient)
    doc="Multi-indices (as columns of an (M, N) array) of the flat indices in ``data`` for ``shape``.",
)


# -- diag ----------------------------------------------------------------------

_DIAG_PARAMS = {"k": Param("int", 0), "axis1": Param("int", 0), "axis2": Param("int", 1)}


def _diag_out(x, k, axis1, axis2, where):
    if len(x) == 0:
        raise ShapeError(f"{where}: input 'data' must be at least 1-d, got a scalar")
    if len(x) == 1:
        s = x[0] + abs(k)
        return (s, s)
    a1 = normalize_axis(axis1, len(x), where, "axis1")
    a2 = normalize_axis(axis2, len(x), where, "axis2")
    if a1 == a2:
        raise ShapeError(f"{where}: axis1 and axis2 refer to the same axis {a1}")
    h, w = x[a1], x[a2]
    if k > 0:
        w -= k
    elif k < 0:
        h += k
    s = min(h, w)
    if s < 0:
        raise ShapeError(f"{where}: diagonal k={k} does not exist in a {x[a1]} x {x[a2]} matrix (input {tuple(x)})")
    return tuple(d for i, d in enumerate(x) if i not in (a1, a2)) + (s,)


@wait_for_first_input
def _diag_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    return in_shapes, [_diag_out(x, params["k"], params["axis1"], params["axis2"], where)]


def _diag_positions(xp, like_shape, k, axis1, axis2):
    a1 = normalize_axis(axis1, len(like_shape), "diag", "axis1")
    a2 = normalize_axis(axis2, len(like_shape), "diag", "axis2")
    s = _diag_out(like_shape, k, a1, a2, "diag")[-1]
    base = xp.arange(s)
    return a1, a2, base + max(-k, 0), base + max(k, 0)


def _diag_fwd(xp, data, k, axis1, axis2):
    if data.ndim == 1:
        n = data.shape[0] + abs(k)
        out = xp.zeros((n, n), dtype=data.dtype)
        base = xp.arange(data.shape[0])
        out[base + max(-k, 0), base + max(k, 0)] = data
        return out
    a1, a2, rows, cols = _diag_positions(xp, data.shape, k, axis1, axis2)
    return xp.moveaxis(data, (a1, a2), (-2, -1))[..., rows, cols]


def _diag_scatter_fwd(xp, g, like, k, axis1, axis2):
    if like.ndim == 1:  # diag built a matrix: its adjoint reads the k-th diagonal back
        base = xp.arange(like.shape[0])
        return g[base + max(-k, 0), base + max(k, 0)]
    a1, a2, rows, cols = _diag_positions(xp, like.shape, k, axis1, axis2)
    out = xp.zeros(like.shape, dtype=g.dtype)
    xp.moveaxis(out, (a1, a2), (-2, -1))[..., rows, cols] = g  # a view: writes land in ``out``
    return out


register(
    "diag",
    params=dict(_DIAG_PARAMS),
    forward=_diag_fwd,
    infer_shape=_diag_shape,
    # linear: 1-d input -> the matrix with x on diagonal k (adjoint: read diagonal k of dy);
    # N-d input -> diagonal k of the (axis1, axis2) planes (adjoint: place dy on it in zeros like x)
    gradient=lambda F, n, g: [F._diag_scatter(g[0], n.inputs[0], **n.params)],
    doc="1-d input: the square matrix with it on diagonal ``k``; N-d: diagonal ``k`` of the (axis1, axis2) planes.",
)

register(
    "_diag_scatter",
    inputs=("ograd", "data"),
    params=dict(_DIAG_PARAMS),
    forward=_diag_scatter_fwd,
    infer_shape=_like_shape,
    infer_type=_first_type,
    no_grad_inputs=("data",),
    # linear in ograd; its adjoint is diag itself (build <-> extract)
    gradient=lambda F, n, g: [F.diag(g[0], **n.params), None],
    doc="diag's gradient, shaped like ``data`` (hidden).",
)


# -- _split_v2 -----------------------------------------------------------------


def _split_v2_n(params):
    return params["sections"] if params["sections"] > 0 else len(params["indices"])


def _split_v2_prepare(params, name):
    check_at_least(params, "sections", 0, f"_split_v2 {name!r}")
    if _split_v2_n(params) == 0:
        raise ParamError(f"_split_v2 {name!r}: give 'sections' > 0 or a non-empty 'indices'")
    return params


def _split_v2_bounds(n, indices, sections, where):
    """[(start, end)] of each output along the axis (MXNet's GetSplitIndices for ``sections``: the
    first n % sections parts are one longer, as numpy.array_split)."""
    if sections > 0:
        size, extra = divmod(n, sections)
        starts = [i * size + min(i, extra) for i in range(sections)]
    else:
        starts = list(indices)
    ends = starts[1:] + [n]
    for i, (a, b) in enumerate(zip(starts, ends)):
        if n and not (0 <= a <= b <= n):
            raise ShapeError(
                f"{where}: split {i} runs from {a} to {b}, outside 0..{n} or backwards "
                f"(indices={tuple(indices)}, axis length {n})"
            )
    return list(zip(starts, ends))


@wait_for_first_input
def _split_v2_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    ax = normalize_axis(params["axis"], len(x), where)
    outs = []
    for a, b in _split_v2_bounds(x[ax], params["indices"], params["sections"], where):
        if params["squeeze_axis"]:
            if b - a != 1:
                raise ShapeError(
                    f"{where}: squeeze_axis=True needs parts of length 1 along axis {ax}, "
                    f"got {b - a} (input {tuple(x)})"
                )
            outs.append(tuple(x[:ax]) + tuple(x[ax + 1 :]))
        else:
            outs.append(tuple(x[:ax]) + (b - a,) + tuple(x[ax + 1 :]))
    return in_shapes, outs


def _split_v2_fwd(xp, x, indices, axis, squeeze_axis, sections):
    ax = normalize_axis(axis, x.ndim, "_split_v2")
    parts = []
    for a, b in _split_v2_bounds(x.shape[ax], indices, sections, "_split_v2"):
        p = xp.take(x, xp.arange(a, b), axis=ax)  # a copy, never a view of the input
        parts.append(p.squeeze(ax) if squeeze_axis else p)
    return tuple(parts)


def _split_v2_grad(F, n, g):
    # y_i = x[start_i:end_i] along the axis  ->  dx = concat(dy_0, ..., dy_{n-1}), as for SliceChannel;
    # elements before the first start (indices not starting at 0) reach no output: zero gradient
    p = n.params
    return split_grad(F, n, g, first=0 if p["sections"] > 0 else p["indices"][0])


register(
    "_split_v2",
    aliases=("_npi_split",),
    params={
        "indices": Param("shape"),
        "axis": Param("int", 1),
        "squeeze_axis": Param("bool", False),
        "sections": Param("int", 0),
    },
    prepare=_split_v2_prepare,
    num_outputs=_split_v2_n,
    forward=_split_v2_fwd,
    infer_shape=_split_v2_shape,
    gradient=_split_v2_grad,
    doc="Split along ``axis`` at ``indices`` (the part starts) or into ``sections`` near-equal parts.",
)


# -- _histogram ----------------------------------------------------------------


def _histogram_inputs(params):
    return ("data",) if params["bin_cnt"] is not None else ("data", "bins")


def _histogram_prepare(params, name):
    cnt, rng = params["bin_cnt"], params["range"]
    where = f"_histogram {name!r}"
    if (cnt is None) != (rng is None):
        raise ParamError(f"{where}: give both 'bin_cnt' and 'range', or neither (then pass 'bins' edges)")
    if cnt is not None:
        if cnt <= 0:
            raise ParamError(f"{where}: parameter 'bin_cnt' must be positive, got {cnt}")
        ok = (
            isinstance(rng, (tuple, list))
            and len(rng) == 2
            and all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in rng)
        )
        if not ok:
            raise ParamError(f"{where}: parameter 'range' must be a pair of numbers (low, high), got {rng!r}")
        if not float(rng[0]) <= float(rng[1]):
            raise ParamError(f"{where}: parameter 'range' must have low <= high, got {tuple(rng)}")
        params = {**params, "range": (float(rng[0]), float(rng[1]))}
    return params


def _histogram_shape(params, in_shapes, out_shapes, where):
    cnt = params["bin_cnt"]
    if cnt is not None:
        return in_shapes, [(cnt,), (cnt + 1,)]
    b = in_shapes[1]
    if b is None:
        return in_shapes, out_shapes
    if len(b) != 1 or b[0] < 2:
        raise ShapeError(f"{where}: input 'bins' must be a 1-d vector of at least 2 edges, got {tuple(b)}")
    return in_shapes, [(b[0] - 1,), tuple(b)]


def _histogram_type(params, in_types, out_types, where):
    t = in_types[0]
    return in_types, [np.dtype(np.int64), t]


def _histogram_fwd(xp, data, bins=None, bin_cnt=None, range=None):  # noqa: A002 - MXNet's name
    x = data.reshape(-1)
    if bin_cnt is not None:
        lo, hi = range
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        i = np.arange(bin_cnt + 1, dtype=np.float64)
        edges = xp.asarray(((hi * i + (bin_cnt - i) * lo) / bin_cnt).astype(data.dtype))
        # MXNet guesses the bin as trunc((x - lo) * n / (hi - lo)) and moves it by one where the edges (rounded
        # to data's dtype) disagree: the edges decide, as in the search below. Whether x counts at all is
        # decided against the float64 range (float32(0.1) > 0.1 lies outside (0, 0.1)).
        xd = x.astype(np.float64)
        inside = (xd >= lo) & (xd <= hi)
    else:
        edges = bins.reshape(-1).astype(data.dtype, copy=True)
        inside = (x >= edges[0]) & (x <= edges[-1])
    n = edges.shape[0] - 1
    # bin b holds edges[b] <= x < edges[b + 1]; the last bin also holds its right edge (numpy.histogram)
    target = xp.clip(xp.searchsorted(edges, x, side="right") - 1, 0, n - 1)
    counts = xp.bincount(target[inside], minlength=n)[:n].astype(np.int64)
    return counts, edges


register(
    "_histogram",
    aliases=("_npi_histogram",),
    inputs=_histogram_inputs,
    params={"bin_cnt": Param("int", None), "range": Param("any", None)},
    prepare=_histogram_prepare,
    num_outputs=2,
    forward=_histogram_fwd,
    infer_shape=_histogram_shape,
    infer_type=_histogram_type,
    gradient=None,
    grad_undefined_reason="a histogram is piecewise constant (MXNet registers no gradient for _histogram)",
    doc="Counts (int64) of ``data`` in ``bin_cnt`` equal bins over ``range``, or between the ``bins`` edges; "
    "and the edges.",
)


# -- _contrib_index_array ------------------------------------------------------


@wait_for_first_input
def _index_array_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    axes = params["axes"]
    if axes is not None and len(x) == 0 and len(axes):
        raise ShapeError(f"{where}: parameter 'axes' {axes} given for a scalar input")
    return in_shapes, [tuple(x) + (len(x) if axes is None else len(axes),)]


def _index_array_fwd(xp, data, axes):
    shape = data.shape
    axes = range(len(shape)) if axes is None else [a % len(shape) for a in axes]
    grids = [
        xp.broadcast_to(
            xp.arange(shape[a], dtype=np.int64).reshape(tuple(shape[a] if i == a else 1 for i in range(len(shape)))),
            shape,
        )
        for a in axes
    ]
    if not grids:
        return xp.zeros(shape + (0,), dtype=np.int64)
    return xp.stack(grids, axis=-1)


register(
    "_contrib_index_array",
    params={"axes": Param("shape", None)},
    forward=_index_array_fwd,
    infer_shape=_index_array_shape,
    infer_type=lambda p, i, o, w: (i, [np.dtype(np.int64)]),
    gradient=lambda F, n, g: [None],  # depends only on the shape (MXNet: zero gradient)
    doc="int64 array of the index of every element along the last axis (only ``axes``, negative allowed).",
)


# -- _contrib_index_copy -------------------------------------------------------


def _index_copy_shape(params, in_shapes, out_shapes, where):
    old, idx, new = in_shapes
    if old is None and out_shapes[0] is not None:
        old = out_shapes[0]
    if idx is not None and len(idx) != 1:
        raise ShapeError(f"{where}: input 'index_vector' must be 1-d, got {tuple(idx)}")
    if old is not None and new is not None:
        if len(old) != len(new) or tuple(old[1:]) != tuple(new[1:]) or new[0] > old[0]:
            raise ShapeError(
                f"{where}: input 'new_tensor' {tuple(new)} must have the rows of 'old_tensor' "
                f"{tuple(old)} (same trailing dims, no more rows)"
            )
    if idx is not None and new is not None and idx[0] != new[0]:
        raise ShapeError(f"{where}: input 'index_vector' has {idx[0]} entries but 'new_tensor' has {new[0]} rows")
    return [old, idx, new], [old] if old is not None else out_shapes


def _index_copy_type(params, in_types, out_types, where):
    """old_tensor, new_tensor and the output share one dtype; the index vector may have any."""
    known = [t for t in (in_types[0], in_types[2], out_types[0]) if t is not None]
    if not known:
        return in_types, out_types
    t = known[0]
    if any(np.dtype(k) != np.dtype(t) for k in known):
        raise TypeError(
            f"{where}: 'old_tensor' and 'new_tensor' must have the same dtype, got {[str(np.dtype(k)) for k in known]}"
        )
    return [t, in_types[1], t], [t]


def _last_writers(xp, idx, n_rows):
    """(row positions, mask of the entries whose row no later entry writes again): with repeated indices
    the last copy wins, as MXNet's sequential CPU loop does."""
    j = idx.astype(np.int64)
    pos = xp.arange(j.size)
    winner = xp.full(n_rows, -1, dtype=np.int64)
    xp.maximum.at(winner, j, pos)
    return j, winner[j] == pos


def _index_copy_fwd(xp, old, idx, new):
    j, last = _last_writers(xp, idx, old.shape[0])
    out = old.copy()
    out[j[last]] = new[last]
    return out


def _index_copy_gather_fwd(xp, g, idx):
    j, last = _last_writers(xp, idx, g.shape[0])
    mask = last.reshape((-1,) + (1,) * (g.ndim - 1))
    return xp.where(mask, g[j], xp.zeros((), dtype=g.dtype))


register(
    "_contrib_index_copy",
    inputs=("old_tensor", "index_vector", "new_tensor"),
    forward=_index_copy_fwd,
    infer_shape=_index_copy_shape,
    infer_type=_index_copy_type,
    no_grad_inputs=("index_vector",),
    # out = old with rows idx replaced by new (the last copy of a repeated index wins): linear in both.
    # d old = dout with rows idx zeroed = index_copy(dout, idx, 0); d new[i] = dout[idx_i] where copy i is
    # the one kept, else 0 (MXNet gives dout[idx_i] to every copy)
    gradient=lambda F, n, g: [
        F._contrib_index_copy(g[0], n.inputs[1], F.zeros_like(n.inputs[2])),
        None,
        F._index_copy_gather(g[0], n.inputs[1]),
    ],
    doc="A copy of ``old_tensor`` with its rows ``index_vector`` replaced by the rows of ``new_tensor``.",
)

register(
    "_index_copy_gather",
    inputs=("ograd", "index_vector"),
    forward=_index_copy_gather_fwd,
    infer_shape=lambda p, i, o, w: (i, [(i[1][0],) + tuple(i[0][1:])] if None not in i else o),
    infer_type=_first_type,
    no_grad_inputs=("index_vector",),
    # linear in ograd: the rows a kept copy read; the adjoint writes h back there: index_copy(0, idx, h)
    gradient=lambda F, n, g: [F._contrib_index_copy(F.zeros_like(n.inputs[0]), n.inputs[1], g[0]), None],
    doc="index_copy's gradient for new_tensor: the rows of ``ograd`` the kept copies landed on (hidden).",
)


# -- _contrib_boolean_mask -----------------------------------------------------
# The output length along ``axis`` is the number of nonzero mask entries: a value, not a shape. Shape
# inference leaves the output unknown (MXNet registers no FInferShape either: infer_shape gives None);
# the executor takes such shapes from the forward (head gradients are checked against the output).


def _boolean_mask_shape(params, in_shapes, out_shapes, where):
    x, m = in_shapes
    if x is not None:
        ax = normalize_axis(params["axis"], len(x), where)
        if m is None:
            m = (x[ax],)
        elif len(m) != 1 or m[0] != x[ax]:
            raise ShapeError(
                f"{where}: input 'index' must be 1-d of length {x[ax]} (axis {ax} of data {tuple(x)}), got {tuple(m)}"
            )
    return [x, m], out_shapes  # the output stays unknown: it depends on the mask values


def _selected(xp, index):
    return xp.nonzero(index.reshape(-1))[0]


def _boolean_mask_fwd(xp, data, index, axis):
    return xp.take(data, _selected(xp, index), axis=normalize_axis(axis, data.ndim, "boolean_mask"))


def _boolean_mask_scatter_fwd(xp, g, index, like, axis):
    ax = normalize_axis(axis, like.ndim, "boolean_mask")
    out = xp.zeros(like.shape, dtype=g.dtype)
    xp.moveaxis(out, ax, 0)[_selected(xp, index)] = xp.moveaxis(g, ax, 0)
    return out


register(
    "_contrib_boolean_mask",
    aliases=("_npi_boolean_mask",),
    inputs=("data", "index"),
    params={"axis": Param("int", 0)},
    forward=_boolean_mask_fwd,
    infer_shape=_boolean_mask_shape,
    infer_type=_first_type,
    no_grad_inputs=("index",),
    # y = the slices of x along the axis where index != 0  ->  dx = dy placed back at those slices, 0 elsewhere
    gradient=lambda F, n, g: [F._boolean_mask_scatter(g[0], n.inputs[1], n.inputs[0], **n.params), None],
    doc="The slices of ``data`` along ``axis`` where ``index`` is nonzero (output length known only after "
    "the forward).",
)

_register_index_scatter(
    "_boolean_mask_scatter",
    "index",
    params={"axis": Param("int", 0)},
    forward=_boolean_mask_scatter_fwd,
    infer_shape=_like_shape,
    # linear in ograd; its adjoint selects again: boolean_mask(h, index)
    gradient=lambda F, n, g: [F._contrib_boolean_mask(g[0], n.inputs[1], **n.params), None, None],
    doc="boolean_mask's gradient: ``ograd`` at the selected slices of zeros shaped like ``data`` (hidden).",
)
