"""OpInfo rows for the indexing and ordering operators (symgrad/ops/indexing.py): take, pick, one_hot, sort,
argsort, topk and the hidden scatter/gather ops their gradients use; the N-d indexing ops gather_nd,
scatter_nd, _backward_gather_nd, batch_take, diag, _split_v2, _contrib_index_copy (with gradients) and
_ravel_multi_index, _unravel_index, _histogram, _contrib_index_array (forward only).

References are plain numpy written from MXNet 1.9's kernels: an index is truncated toward
zero (C cast), then clipped to [0, n-1] or wrapped modulo n; gather_nd resolves a position as
``trunc(index + dim) % dim`` (negative indices count from the end), batch_take clips, index_copy lets
the last copy of a repeated row win. Values fed to sort/topk are distinct and exact in float16 (a
permutation of multiples of 1/4), so every dtype sorts the same way and finite differences never
reorder them. _contrib_boolean_mask's output shape depends on the mask values, so it cannot be inferred
before the forward and is tested in ``tests/test_ops_indexing.py`` instead.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

FLOATS = (np.float16, np.float32, np.float64)


def _index(values, integer=False):
    """An index input with fixed values (float unless ``integer``), never differentiated."""
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


def _data(values):
    """A non-index input with fixed values that is not differentiated (forward-only rows)."""
    return In(np.shape(values), sample=lambda r: np.array(values, dtype=np.float64), grad=False)


# -- gather_nd / scatter_nd ------------------------------------------------------------------------


def _nd_positions(idx, dims):
    """One tuple of positions per index column: trunc(index + dim) % dim on each indexed axis."""
    m = idx.shape[0]
    cols = idx.reshape(m, -1)
    return [tuple(int(np.trunc(cols[k, c] + dims[k])) % dims[k] for k in range(m)) for c in range(cols.shape[1])]


def _gather_nd_ref(x, idx):
    m = idx.shape[0]
    rows = [x[p] for p in _nd_positions(idx, x.shape[:m])]
    return np.array(rows).reshape(idx.shape[1:] + x.shape[m:])


def _scatter_nd_ref(d, idx, shape, add):
    out = np.zeros(shape)
    m = idx.shape[0]
    rows = d.reshape((-1,) + tuple(shape[m:]))
    for r, p in enumerate(_nd_positions(idx, shape[:m])):
        out[p] = out[p] + rows[r] if add else rows[r]
    return out


# -- batch_take, diag, split, index_copy ----------------------------------------------------------


def _batch_take_ref(a, idx):
    rows = a.reshape(-1, a.shape[-1])
    j = np.clip(np.trunc(idx.reshape(-1)).astype(int), 0, a.shape[-1] - 1)
    return np.array([rows[r, j[r]] for r in range(j.size)]).reshape(idx.shape)


def _diag_ref(x, k=0, axis1=0, axis2=1):
    if x.ndim == 1:
        n = x.size + abs(k)
        out = np.zeros((n, n))
        for i, v in enumerate(x):
            out[i + max(-k, 0), i + max(k, 0)] = v
        return out
    moved = np.moveaxis(x, (axis1, axis2), (-2, -1))
    h, w = moved.shape[-2:]
    s = min(h + min(k, 0), w - max(k, 0))
    return np.stack([moved[..., i + max(-k, 0), i + max(k, 0)] for i in range(s)], axis=-1)


def _split_ref(x, bounds, axis, squeeze=False):
    parts = [np.take(x, np.arange(a, b), axis=axis) for a, b in bounds]
    return tuple(np.squeeze(p, axis) if squeeze else p for p in parts)


def _index_copy_ref(old, idx, new):
    out = old.copy()
    for i, j in enumerate(np.trunc(idx).astype(int)):
        out[j] = new[i]  # in order: the last copy of a repeated index wins
    return out


# -- forward-only ops ------------------------------------------------------------------------------


def _ravel_ref(x, shape):
    out = np.zeros(x.shape[1])
    for c in range(x.shape[1]):
        r = 0
        for j, d in enumerate(shape):
            r = int(np.trunc(r * d + x[j, c]))
        out[c] = r
    return out


def _unravel_ref(x, shape):
    out = np.zeros((len(shape), x.size))
    for c, v in enumerate(x):
        idx = int(np.trunc(v))
        for j in range(len(shape) - 1, 0, -1):
            q = int(idx / shape[j])  # C division: toward zero
            out[j, c] = idx - q * shape[j]
            idx = q
        out[0, c] = idx
    return out


def _histogram_ref(x, edges):
    counts = np.zeros(len(edges) - 1, dtype=np.int64)
    for v in x.ravel():
        for b in range(len(edges) - 1):
            last = b == len(edges) - 2
            if edges[b] <= v < edges[b + 1] or (last and v == edges[-1]):
                counts[b] += 1
    return counts


def _index_array_ref(x, axes=None):
    grids = np.indices(x.shape)
    axes = range(x.ndim) if axes is None else axes
    return np.stack([grids[a] for a in axes], axis=-1).astype(np.int64)


# values exact in float16 (so every dtype bins them the same way), some on edges, some outside the range
HIST = [[0.25, 0.5, 2.75, 3.0], [-1.0, 1.0, 1.25, 3.5]]


A = (3, 4)

OPS = [
    # -- take ------------------------------------------------------------------------------------
    OpInfo(
        "take_clip",
        lambda a, i: S.take(a, i),
        {"a": In(A), "i": _index([[2.7, -1.0], [5.0, 0.0]])},
        lambda a, i: _take_ref(a, i),
    ),
    OpInfo(
        "take_wrap_axis1",
        lambda a, i: S.take(a, i, axis=1, mode="wrap"),
        {"a": In(A), "i": _index([-1, 5, 2, -6], integer=True)},
        lambda a, i: _take_ref(a, i, 1, "wrap"),
    ),
    # 'raise' is treated like 'clip' (symgrad does not check index values)
    OpInfo(
        "take_raise_negative_axis",
        lambda a, i: S.take(a, i, axis=-1, mode="raise"),
        {"a": In((2, 2, 3)), "i": _index([[0, 2], [1, 1]], integer=True)},
        lambda a, i: _take_ref(a, i, 2),
    ),
    OpInfo(
        "_take_scatter",
        lambda g, i, a: S._take_scatter(g, i, a, axis=1, mode="wrap"),
        {"g": In((3, 2, 2)), "i": _index([[0, 4], [-1, 0]]), "a": In(A, grad=False)},
        lambda g, i, a: _take_scatter_ref(g, i, a, 1, "wrap"),
    ),
    # -- pick ------------------------------------------------------------------------------------
    OpInfo("pick", lambda x, i: S.pick(x, i), {"x": In(A), "i": _index([0, 3, 9])}, lambda x, i: _pick_ref(x, i, 1)),
    OpInfo(
        "pick_axis0_keepdims",
        lambda x, i: S.pick(x, i, axis=0, keepdims=True),
        {"x": In(A), "i": _index([[2, -1, 1, 0]], integer=True)},
        lambda x, i: _pick_ref(x, i, 0, True),
    ),
    OpInfo(
        "pick_wrap",
        lambda x, i: S.pick(x, i, axis=-1, mode="wrap"),
        {"x": In(A), "i": _index([-1, 5, 2.5])},
        lambda x, i: _pick_ref(x, i, 1, mode="wrap"),
    ),
    OpInfo(
        "choose_element_0index",
        lambda x, i: S.choose_element_0index(x, i),
        {"x": In((4,)), "i": _index([2])},
        lambda x, i: x[2:3],
    ),
    OpInfo(
        "_pick_scatter",
        lambda g, i, x: S._pick_scatter(g, i, x, axis=0, mode="wrap"),
        {"g": In((4,)), "i": _index([0, -1, 5, 2]), "x": In(A, grad=False)},
        lambda g, i, x: _pick_scatter_ref(g, i, x, 0, mode="wrap"),
    ),
    # -- one_hot: out-of-range and negative indices give a row of off_value -----------------------
    OpInfo(
        "one_hot",
        lambda i: S.one_hot(i, depth=4),
        {"i": _index([[0, 3], [4, -1]], integer=True)},
        lambda i: _one_hot_ref(i, 4),
        dtypes=(np.float32,),
        grad=False,
    ),
    OpInfo(
        "one_hot_float64_values",
        lambda i: S.one_hot(i, depth=3, on_value=2.5, off_value=-0.5, dtype="float64"),
        {"i": _index([2.9, 0.0, -0.7])},
        lambda i: _one_hot_ref(i, 3, 2.5, -0.5, np.float64),
        dtypes=(np.float64,),
        grad=False,
    ),
    # int32 output: on/off values truncate like static_cast<int>
    OpInfo(
        "one_hot_int32",
        lambda i: S.one_hot(i, depth=3, on_value=2.7, off_value=-1.5, dtype="int32"),
        {"i": _index([1, 2, 0])},
        lambda i: _one_hot_ref(i, 3, 2.7, -1.5, np.int32),
        grad=False,
    ),
    # -- sort / argsort ----------------------------------------------------------------------------
    OpInfo("sort", S.sort, {"x": _distinct(A)}, lambda x: np.sort(x, -1)),
    OpInfo(
        "sort_descending_axis0",
        lambda x: S.sort(x, axis=0, is_ascend=False),
        {"x": _distinct(A)},
        lambda x: -np.sort(-x, 0),
    ),
    OpInfo("sort_flat", lambda x: S.sort(x, axis=None), {"x": _distinct((2, 3))}, lambda x: np.sort(x.ravel())),
    OpInfo(
        "argsort",
        lambda x: S.argsort(x, is_ascend=False),
        {"x": _distinct(A)},
        lambda x: _order(x, -1, False),
        grad=False,
    ),
    OpInfo(
        "argsort_int32_axis0",
        lambda x: S.argsort(x, axis=0, dtype="int32"),
        {"x": _distinct(A)},
        lambda x: _order(x, 0, True),
        grad=False,
    ),
    # -- topk ------------------------------------------------------------------------------------
    OpInfo("topk", lambda x: S.topk(x, k=2), {"x": _distinct(A)}, lambda x: _topk_ref(x, 2), grad=False),
    OpInfo(
        "topk_value",
        lambda x: S.topk(x, k=2, ret_typ="value"),
        {"x": _distinct(A)},
        lambda x: _topk_ref(x, 2, ret="value"),
    ),
    OpInfo(
        "topk_both_ascend_axis0",
        lambda x: S.topk(x, k=2, axis=0, ret_typ="both", is_ascend=True),
        {"x": _distinct(A)},
        lambda x: _topk_ref(x, 2, 0, True, "both"),
    ),
    OpInfo(
        "topk_value_flat_k0",
        lambda x: S.topk(x, k=0, axis=None, ret_typ="value"),
        {"x": _distinct((2, 3))},
        lambda x: _topk_ref(x, 6, None, ret="value"),
    ),
    OpInfo(
        "topk_mask",
        lambda x: S.topk(x, k=3, axis=0, ret_typ="mask"),
        {"x": _distinct((4, 2))},
        lambda x: _mask_ref(x, 3, 0),
        grad=False,
    ),
    OpInfo(
        "topk_mask_flat",
        lambda x: S.topk(x, k=2, axis=None, ret_typ="mask", is_ascend=True),
        {"x": _distinct((2, 3))},
        lambda x: _mask_ref(x, 2, None, True),
        grad=False,
    ),
    OpInfo(
        "topk_indices_int64",
        lambda x: S.topk(x, k=1, axis=0, dtype="int64"),
        {"x": _distinct(A)},
        lambda x: _topk_ref(x, 1, 0),
        grad=False,
    ),
    # -- the gather/scatter pair behind sort and topk gradients ---------------------------------
    OpInfo(
        "_gather_along_axis",
        lambda x, i: S._gather_along_axis(x, i, axis=0),
        {"x": In(A), "i": _index([[2, 0, 1, 1], [0, 0, 2, 1]], integer=True)},
        lambda x, i: np.take_along_axis(x, i.astype(np.int64), 0),
    ),
    OpInfo(
        "_scatter_along_axis",
        lambda g, i, x: S._scatter_along_axis(g, i, x, axis=1),
        {"g": In((3, 2)), "i": _index([[3, 0], [1, 1], [2, 0]]), "x": In(A, grad=False)},
        lambda g, i, x: _scatter_along_ref(g, i, x, 1),
    ),
    # -- squared compositions: second-order derivatives run through the scatter ops' gradients ---
    OpInfo(
        "take_squared",
        lambda a, i: S.square(S.take(a, i, axis=1)),
        {"a": In(A), "i": _index([[1, 1], [3, 0]], integer=True)},
        lambda a, i: np.square(_take_ref(a, i, 1)),
    ),
    OpInfo(
        "pick_squared",
        lambda x, i: S.square(S.pick(x, i, axis=0, keepdims=True)),
        {"x": In(A), "i": _index([0, 2, 2, 1])},
        lambda x, i: np.square(_pick_ref(x, i, 0, True)),
    ),
    OpInfo(
        "sort_squared", lambda x: S.square(S.sort(x, axis=0)), {"x": _distinct(A)}, lambda x: np.square(np.sort(x, 0))
    ),
    OpInfo(
        "topk_value_squared",
        lambda x: S.square(S.topk(x, k=2, axis=None, ret_typ="value")),
        {"x": _distinct(A)},
        lambda x: np.square(_topk_ref(x, 2, None, ret="value")),
    ),
    # -- gather_nd: full positions, slices with a repeated position, float indices ----------------------
    OpInfo(
        "gather_nd_full_positions",
        S.gather_nd,
        {"x": In((2, 3)), "i": _index([[0, 1, -1, 1], [2, 0, 1, -3]], integer=True)},
        _gather_nd_ref,
    ),
    # positions 2 and -1 are the same row: the gradient adds both
    OpInfo(
        "gather_nd_slices_repeated", S.gather_nd, {"x": In((3, 2, 2)), "i": _index([[[0, 2], [2, -1]]])}, _gather_nd_ref
    ),
    # float indices: trunc(-0.5 + 3) = 2, trunc(1.75 + 3) % 3 = 1
    OpInfo("gather_nd_float_indices", S.gather_nd, {"x": In((3,)), "i": _index([[-0.5, 1.75]])}, _gather_nd_ref),
    OpInfo(
        "scatter_nd_positions",
        lambda d, i: S.scatter_nd(d, i, shape=(2, 3)),
        {"d": In((3,)), "i": _index([[0, 1, 1], [2, 0, 2]], integer=True)},
        lambda d, i: _scatter_nd_ref(d, i, (2, 3), False),
    ),
    OpInfo(
        "scatter_nd_slices",
        lambda d, i: S.scatter_nd(d, i, shape=(3, 4)),
        {"d": In((2, 4)), "i": _index([[2, 0]])},
        lambda d, i: _scatter_nd_ref(d, i, (3, 4), False),
    ),
    # MXNet's gather_nd gradient as an op: repeated positions add
    OpInfo(
        "_backward_gather_nd_repeated",
        lambda d, i: S._backward_gather_nd(d, i, shape=(2, 2)),
        {"d": In((3, 2)), "i": _index([[1, 1, 0]], integer=True)},
        lambda d, i: _scatter_nd_ref(d, i, (2, 2), True),
    ),
    # -- batch_take: clipped positions; N-d data as rows of its last axis ------------------------------
    OpInfo("batch_take_clip", S.batch_take, {"a": In((3, 4)), "i": _index([0, 3, -2])}, _batch_take_ref),
    OpInfo(
        "batch_take_3d",
        S.batch_take,
        {"a": In((2, 2, 3)), "i": _index([[0, 2], [1, 7]], integer=True)},
        _batch_take_ref,
    ),
    # -- diag ---------------------------------------------------------------------------------------
    OpInfo("diag_1d", S.diag, {"x": In((3,))}, _diag_ref),
    OpInfo("diag_1d_k_neg2", lambda x: S.diag(x, k=-2), {"x": In((2,))}, lambda x: _diag_ref(x, -2)),
    OpInfo("diag_2d_k1", lambda x: S.diag(x, k=1), {"x": In((3, 4))}, lambda x: _diag_ref(x, 1)),
    OpInfo("diag_2d_k_neg2", lambda x: S.diag(x, k=-2), {"x": In((3, 4))}, lambda x: _diag_ref(x, -2)),
    OpInfo(
        "diag_3d_axes_reversed",
        lambda x: S.diag(x, k=1, axis1=2, axis2=0),
        {"x": In((2, 3, 4))},
        lambda x: _diag_ref(x, 1, 2, 0),
    ),
    OpInfo(
        "diag_4d_negative_axes",
        lambda x: S.diag(x, k=-1, axis1=-1, axis2=1),
        {"x": In((2, 3, 2, 3))},
        lambda x: _diag_ref(x, -1, -1, 1),
    ),
    # -- _split_v2 (through MXNet's Python split_v2 and directly) ---------------------------------------
    OpInfo(
        "_split_v2_sections_uneven",
        lambda x: S.split_v2(x, 3, axis=1),
        {"x": In((2, 7))},
        lambda x: _split_ref(x, [(0, 3), (3, 5), (5, 7)], 1),
    ),
    OpInfo(
        "_split_v2_indices",
        lambda x: S.split_v2(x, (1, 3), axis=0),
        {"x": In((5, 2))},
        lambda x: _split_ref(x, [(0, 1), (1, 3), (3, 5)], 0),
    ),
    OpInfo(
        "_split_v2_squeeze",
        lambda x: S.split_v2(x, 3, axis=-2, squeeze_axis=True),
        {"x": In((3, 2))},
        lambda x: _split_ref(x, [(0, 1), (1, 2), (2, 3)], 0, True),
    ),
    # indices not starting at 0: the leading columns reach no output (zero gradient there)
    OpInfo(
        "_split_v2_indices_from_1",
        lambda x: S._split_v2(x, indices=(1, 3), axis=-1),
        {"x": In((2, 5))},
        lambda x: _split_ref(x, [(1, 3), (3, 5)], 1),
    ),
    OpInfo(
        "_split_v2_one_section",
        lambda x: S._split_v2(x, indices=(), sections=1, axis=0),
        {"x": In((2, 2))},
        lambda x: x,
    ),
    # -- _contrib_index_copy ------------------------------------------------------------------------
    OpInfo(
        "_contrib_index_copy",
        S._contrib_index_copy,
        {"old": In((5, 2)), "i": _index([3, 0, 4], integer=True), "new": In((3, 2))},
        _index_copy_ref,
    ),
    # row 1 written twice: the second copy wins, the first gets no gradient
    OpInfo(
        "_contrib_index_copy_repeated",
        S._contrib_index_copy,
        {"old": In((4, 3)), "i": _index([1, 3, 1]), "new": In((3, 3))},
        _index_copy_ref,
    ),
    # -- forward only -------------------------------------------------------------------------------
    OpInfo(
        "_ravel_multi_index",
        lambda x: S.ravel_multi_index(x, shape=(7, 6)),
        {"x": _data([[3, 6, 6, 0], [4, 5, 1, 5]])},
        lambda x: _ravel_ref(x, (7, 6)),
        grad=False,
    ),
    # -1 leading dim, three axes, a fraction truncated after each step
    OpInfo(
        "_ravel_multi_index_3d",
        lambda x: S._ravel_multi_index(x, shape=(-1, 3, 4)),
        {"x": _data([[1, 0], [2, 1], [3, 2.5]])},
        lambda x: _ravel_ref(x, (-1, 3, 4)),
        grad=False,
    ),
    OpInfo(
        "_unravel_index",
        lambda x: S.unravel_index(x, shape=(7, 6)),
        {"x": _data([22, 41, 37, 0, -5])},
        lambda x: _unravel_ref(x, (7, 6)),
        grad=False,
    ),
    OpInfo(
        "_unravel_index_3d",
        lambda x: S._unravel_index(x, shape=(-1, 3, 4)),
        {"x": _data([0, 13, 23, 30])},
        lambda x: _unravel_ref(x, (-1, 3, 4)),
        grad=False,
    ),
    OpInfo(
        "_histogram_bin_cnt",
        lambda x: S._histogram(x, bin_cnt=6, range=(0, 3)),
        {"x": _data(HIST)},
        lambda x: (_histogram_ref(x, np.linspace(0, 3, 7)), np.linspace(0, 3, 7)),
        grad=False,
    ),
    OpInfo(
        "_histogram_bins_input",
        lambda x, b: S.histogram(x, bins=b),
        {"x": _data(HIST), "b": _data([0, 1, 2.5, 3])},
        lambda x, b: (_histogram_ref(x, b), b),
        grad=False,
    ),
    # low == high: MXNet widens the range to (low - 0.5, high + 0.5)
    OpInfo(
        "_histogram_empty_range",
        lambda x: S.histogram(x, bins=2, range=(1, 1)),
        {"x": _data(HIST)},
        lambda x: (_histogram_ref(x, [0.5, 1, 1.5]), np.array([0.5, 1, 1.5])),
        grad=False,
    ),
    OpInfo("_contrib_index_array", S._contrib_index_array, {"x": In((3, 2))}, _index_array_ref, grad=False),
    OpInfo(
        "_contrib_index_array_axes",
        lambda x: S._contrib_index_array(x, axes=(1, -3)),
        {"x": In((3, 2, 2))},
        lambda x: _index_array_ref(x, (1, 0)),
        grad=False,
    ),
]
