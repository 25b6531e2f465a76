"""OpInfo rows for the indexing and ordering operators (symgrad/ops/indexing.py): take,
pick, one_hot, sort, argsort, topk and the hidden scatter/gather ops their gradients use.

References are plain numpy written from MXNet 1.9's kernels: an index is truncated toward
zero (C cast), then clipped to [0, n-1] or wrapped modulo n. Values fed to sort/topk are
distinct and exact in float16 (a permutation of multiples of 1/4), so every dtype sorts the
same way and finite differences never reorder them.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

FLOATS = (np.float16, np.float32, np.float64)


def _index(values, integer=False):
    return In(np.shape(values), sample=lambda r: np.array(values, dtype=np.float64), grad=False, integer=integer)


def _distinct(shape):
    """Distinct values, exact in float16, in a random order."""
    n = int(np.prod(shape))
    return In(shape, sample=lambda r: (r.permutation(n).reshape(shape) - n / 2) / 4)


def _positions(j, n, mode):
    j = np.trunc(j).astype(np.int64)
    return np.mod(j, n) if mode == "wrap" else np.clip(j, 0, n - 1)


def _take_ref(a, idx, axis=0, mode="clip"):
    return np.take(a, _positions(idx, a.shape[axis], mode), axis=axis)


def _take_scatter_ref(g, idx, a, axis=0, mode="clip"):
    out = np.zeros(a.shape)
    j = _positions(idx, a.shape[axis], mode)
    g = np.moveaxis(g, list(range(axis, axis + j.ndim)), list(range(j.ndim)))  # index dims first
    moved = np.moveaxis(out, axis, 0)
    for pos, k in np.ndenumerate(j):
        moved[k] += g[pos]
    return out


def _pick_ref(x, idx, axis, keepdims=False, mode="clip"):
    j = _positions(idx, x.shape[axis], mode)
    if j.ndim < x.ndim:
        j = np.expand_dims(j, axis)
    out = np.take_along_axis(x, j, axis)
    return out if keepdims else np.squeeze(out, axis)


def _pick_scatter_ref(g, idx, x, axis, keepdims=False, mode="clip"):
    j = _positions(idx, x.shape[axis], mode)
    if j.ndim < x.ndim:
        j, g = np.expand_dims(j, axis), np.expand_dims(g, axis)
    out = np.zeros(x.shape)
    np.put_along_axis(out, j, g, axis)
    return out


def _one_hot_ref(idx, depth, on=1.0, off=0.0, dtype=np.float32):
    j = np.trunc(idx).astype(np.int64)
    out = np.full(j.shape + (depth,), np.array(off).astype(dtype))
    for pos, k in np.ndenumerate(j):
        if 0 <= k < depth:
            out[pos + (k,)] = np.array(on).astype(dtype)
    return out


def _order(x, axis, ascend):
    return np.argsort(x if ascend else -x, axis=axis, kind="stable")


def _topk_ref(x, k, axis=-1, ascend=False, ret="indices"):
    if axis is None:
        x, axis = x.ravel(), 0
    order = np.take(_order(x, axis, ascend), np.arange(k), axis=axis)
    vals = np.take_along_axis(x, order, axis)
    if ret == "value":
        return vals
    if ret == "both":
        return vals, order
    return order


def _mask_ref(x, k, axis=-1, ascend=False):
    flat = axis is None
    src = x.ravel() if flat else x
    ax = 0 if flat else axis
    mask = np.zeros(src.shape)
    np.put_along_axis(mask, np.take(_order(src, ax, ascend), np.arange(k), axis=ax), 1.0, ax)
    return mask.reshape(x.shape)


def _scatter_along_ref(g, idx, x, axis):
    out = np.zeros(x.shape)
    j = idx.astype(np.int64)
    for pos in np.ndindex(g.shape):
        tgt = list(pos)
        tgt[axis] = j[pos]
        out[tuple(tgt)] += g[pos]
    return out


A = (3, 4)

OPS = [
    # -- take ------------------------------------------------------------------------------------
    OpInfo("take_clip", lambda a, i: S.take(a, i), {"a": In(A), "i": _index([[2.7, -1.0], [5.0, 0.0]])},
           lambda a, i: _take_ref(a, i)),
    OpInfo("take_wrap_axis1", lambda a, i: S.take(a, i, axis=1, mode="wrap"),
           {"a": In(A), "i": _index([-1, 5, 2, -6], integer=True)}, lambda a, i: _take_ref(a, i, 1, "wrap")),
    # 'raise' is treated like 'clip' (symgrad does not check index values)
    OpInfo("take_raise_negative_axis", lambda a, i: S.take(a, i, axis=-1, mode="raise"),
           {"a": In((2, 2, 3)), "i": _index([[0, 2], [1, 1]], integer=True)},
           lambda a, i: _take_ref(a, i, 2)),
    OpInfo("_take_scatter", lambda g, i, a: S._take_scatter(g, i, a, axis=1, mode="wrap"),
           {"g": In((3, 2, 2)), "i": _index([[0, 4], [-1, 0]]), "a": In(A, grad=False)},
           lambda g, i, a: _take_scatter_ref(g, i, a, 1, "wrap")),
    # -- pick ------------------------------------------------------------------------------------
    OpInfo("pick", lambda x, i: S.pick(x, i), {"x": In(A), "i": _index([0, 3, 9])},
           lambda x, i: _pick_ref(x, i, 1)),
    OpInfo("pick_axis0_keepdims", lambda x, i: S.pick(x, i, axis=0, keepdims=True),
           {"x": In(A), "i": _index([[2, -1, 1, 0]], integer=True)}, lambda x, i: _pick_ref(x, i, 0, True)),
    OpInfo("pick_wrap", lambda x, i: S.pick(x, i, axis=-1, mode="wrap"), {"x": In(A), "i": _index([-1, 5, 2.5])},
           lambda x, i: _pick_ref(x, i, 1, mode="wrap")),
    OpInfo("choose_element_0index", lambda x, i: S.choose_element_0index(x, i), {"x": In((4,)), "i": _index([2])},
           lambda x, i: x[2:3]),
    OpInfo("_pick_scatter", lambda g, i, x: S._pick_scatter(g, i, x, axis=0, mode="wrap"),
           {"g": In((4,)), "i": _index([0, -1, 5, 2]), "x": In(A, grad=False)},
           lambda g, i, x: _pick_scatter_ref(g, i, x, 0, mode="wrap")),
    # -- one_hot: out-of-range and negative indices give a row of off_value -----------------------
    OpInfo("one_hot", lambda i: S.one_hot(i, depth=4), {"i": _index([[0, 3], [4, -1]], integer=True)},
           lambda i: _one_hot_ref(i, 4), dtypes=(np.float32,), grad=False),
    OpInfo("one_hot_float64_values", lambda i: S.one_hot(i, depth=3, on_value=2.5, off_value=-0.5, dtype="float64"),
           {"i": _index([2.9, 0.0, -0.7])}, lambda i: _one_hot_ref(i, 3, 2.5, -0.5, np.float64),
           dtypes=(np.float64,), grad=False),
    # int32 output: on/off values truncate like static_cast<int>
    OpInfo("one_hot_int32", lambda i: S.one_hot(i, depth=3, on_value=2.7, off_value=-1.5, dtype="int32"),
           {"i": _index([1, 2, 0])}, lambda i: _one_hot_ref(i, 3, 2.7, -1.5, np.int32), grad=False),
    # -- sort / argsort ----------------------------------------------------------------------------
    OpInfo("sort", S.sort, {"x": _distinct(A)}, lambda x: np.sort(x, -1)),
    OpInfo("sort_descending_axis0", lambda x: S.sort(x, axis=0, is_ascend=False), {"x": _distinct(A)},
           lambda x: -np.sort(-x, 0)),
    OpInfo("sort_flat", lambda x: S.sort(x, axis=None), {"x": _distinct((2, 3))}, lambda x: np.sort(x.ravel())),
    OpInfo("argsort", lambda x: S.argsort(x, is_ascend=False), {"x": _distinct(A)},
           lambda x: _order(x, -1, False), grad=False),
    OpInfo("argsort_int32_axis0", lambda x: S.argsort(x, axis=0, dtype="int32"), {"x": _distinct(A)},
           lambda x: _order(x, 0, True), grad=False),
    # -- topk ------------------------------------------------------------------------------------
    OpInfo("topk", lambda x: S.topk(x, k=2), {"x": _distinct(A)}, lambda x: _topk_ref(x, 2), grad=False),
    OpInfo("topk_value", lambda x: S.topk(x, k=2, ret_typ="value"), {"x": _distinct(A)},
           lambda x: _topk_ref(x, 2, ret="value")),
    OpInfo("topk_both_ascend_axis0", lambda x: S.topk(x, k=2, axis=0, ret_typ="both", is_ascend=True),
           {"x": _distinct(A)}, lambda x: _topk_ref(x, 2, 0, True, "both")),
    OpInfo("topk_value_flat_k0", lambda x: S.topk(x, k=0, axis=None, ret_typ="value"), {"x": _distinct((2, 3))},
           lambda x: _topk_ref(x, 6, None, ret="value")),
    OpInfo("topk_mask", lambda x: S.topk(x, k=3, axis=0, ret_typ="mask"), {"x": _distinct((4, 2))},
           lambda x: _mask_ref(x, 3, 0), grad=False),
    OpInfo("topk_mask_flat", lambda x: S.topk(x, k=2, axis=None, ret_typ="mask", is_ascend=True),
           {"x": _distinct((2, 3))}, lambda x: _mask_ref(x, 2, None, True), grad=False),
    OpInfo("topk_indices_int64", lambda x: S.topk(x, k=1, axis=0, dtype="int64"), {"x": _distinct(A)},
           lambda x: _topk_ref(x, 1, 0), grad=False),
    # -- the gather/scatter pair behind sort and topk gradients ---------------------------------
    OpInfo("_gather_along_axis", lambda x, i: S._gather_along_axis(x, i, axis=0),
           {"x": In(A), "i": _index([[2, 0, 1, 1], [0, 0, 2, 1]], integer=True)},
           lambda x, i: np.take_along_axis(x, i.astype(np.int64), 0)),
    OpInfo("_scatter_along_axis", lambda g, i, x: S._scatter_along_axis(g, i, x, axis=1),
           {"g": In((3, 2)), "i": _index([[3, 0], [1, 1], [2, 0]]), "x": In(A, grad=False)},
           lambda g, i, x: _scatter_along_ref(g, i, x, 1)),
    # -- squared compositions: second-order derivatives run through the scatter ops' gradients ---
    OpInfo("take_squared", lambda a, i: S.square(S.take(a, i, axis=1)),
           {"a": In(A), "i": _index([[1, 1], [3, 0]], integer=True)}, lambda a, i: np.square(_take_ref(a, i, 1))),
    OpInfo("pick_squared", lambda x, i: S.square(S.pick(x, i, axis=0, keepdims=True)),
           {"x": In(A), "i": _index([0, 2, 2, 1])}, lambda x, i: np.square(_pick_ref(x, i, 0, True))),
    OpInfo("sort_squared", lambda x: S.square(S.sort(x, axis=0)), {"x": _distinct(A)},
           lambda x: np.square(np.sort(x, 0))),
    OpInfo("topk_value_squared", lambda x: S.square(S.topk(x, k=2, axis=None, ret_typ="value")),
           {"x": _distinct(A)}, lambda x: np.square(_topk_ref(x, 2, None, ret="value"))),
]
