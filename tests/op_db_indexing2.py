"""OpInfo rows for the N-d indexing operators (symgrad/ops/indexing.py, second part): gather_nd,
scatter_nd, _backward_gather_nd, batch_take, diag, _split_v2, _contrib_index_copy (with gradients) and
_ravel_multi_index, _unravel_index, _histogram, _contrib_index_array (forward only).

References are plain numpy loops written from MXNet 1.9's kernels: gather_nd resolves a position as
``trunc(index + dim) % dim`` (negative indices count from the end), batch_take clips, index_copy lets
the last copy of a repeated row win. _contrib_boolean_mask's output shape depends on the mask values, so
it cannot be inferred before the forward and is tested in ``tests/test_ops_indexing2.py`` instead.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym


def _fixed(values, integer=False):
    """An index input with fixed values (float unless ``integer``), never differentiated."""
    return In(np.shape(values), sample=lambda r: np.array(values, dtype=np.float64), grad=False, integer=integer)


def _data(values):
    """A non-index input with fixed values that is not differentiated (forward-only rows)."""
    return In(np.shape(values), sample=lambda r: np.array(values, dtype=np.float64), grad=False)


# -- gather_nd / scatter_nd ------------------------------------------------------------------------


def _positions(idx, dims):
    """One tuple of positions per index column: trunc(index + dim) % dim on each indexed axis."""
    m = idx.shape[0]
    cols = idx.reshape(m, -1)
    return [tuple(int(np.trunc(cols[k, c] + dims[k])) % dims[k] for k in range(m)) for c in range(cols.shape[1])]


def _gather_nd_ref(x, idx):
    m = idx.shape[0]
    rows = [x[p] for p in _positions(idx, x.shape[:m])]
    return np.array(rows).reshape(idx.shape[1:] + x.shape[m:])


def _scatter_nd_ref(d, idx, shape, add):
    out = np.zeros(shape)
    m = idx.shape[0]
    rows = d.reshape((-1,) + tuple(shape[m:]))
    for r, p in enumerate(_positions(idx, shape[:m])):
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

OPS = [
    # -- gather_nd: full positions, slices with a repeated position, float indices ----------------------
    OpInfo("gather_nd_full_positions", S.gather_nd,
           {"x": In((2, 3)), "i": _fixed([[0, 1, -1, 1], [2, 0, 1, -3]], integer=True)}, _gather_nd_ref),
    # positions 2 and -1 are the same row: the gradient adds both
    OpInfo("gather_nd_slices_repeated", S.gather_nd,
           {"x": In((3, 2, 2)), "i": _fixed([[[0, 2], [2, -1]]])}, _gather_nd_ref),
    # float indices: trunc(-0.5 + 3) = 2, trunc(1.75 + 3) % 3 = 1
    OpInfo("gather_nd_float_indices", S.gather_nd, {"x": In((3,)), "i": _fixed([[-0.5, 1.75]])}, _gather_nd_ref),
    OpInfo("scatter_nd_positions", lambda d, i: S.scatter_nd(d, i, shape=(2, 3)),
           {"d": In((3,)), "i": _fixed([[0, 1, 1], [2, 0, 2]], integer=True)},
           lambda d, i: _scatter_nd_ref(d, i, (2, 3), False)),
    OpInfo("scatter_nd_slices", lambda d, i: S.scatter_nd(d, i, shape=(3, 4)),
           {"d": In((2, 4)), "i": _fixed([[2, 0]])}, lambda d, i: _scatter_nd_ref(d, i, (3, 4), False)),
    # MXNet's gather_nd gradient as an op: repeated positions add
    OpInfo("_backward_gather_nd_repeated", lambda d, i: S._backward_gather_nd(d, i, shape=(2, 2)),
           {"d": In((3, 2)), "i": _fixed([[1, 1, 0]], integer=True)}, lambda d, i: _scatter_nd_ref(d, i, (2, 2), True)),
    # -- batch_take: clipped positions; N-d data as rows of its last axis ------------------------------
    OpInfo("batch_take_clip", S.batch_take, {"a": In((3, 4)), "i": _fixed([0, 3, -2])}, _batch_take_ref),
    OpInfo("batch_take_3d", S.batch_take, {"a": In((2, 2, 3)), "i": _fixed([[0, 2], [1, 7]], integer=True)},
           _batch_take_ref),
    # -- diag ---------------------------------------------------------------------------------------
    OpInfo("diag_1d", S.diag, {"x": In((3,))}, _diag_ref),
    OpInfo("diag_1d_k_neg2", lambda x: S.diag(x, k=-2), {"x": In((2,))}, lambda x: _diag_ref(x, -2)),
    OpInfo("diag_2d_k1", lambda x: S.diag(x, k=1), {"x": In((3, 4))}, lambda x: _diag_ref(x, 1)),
    OpInfo("diag_2d_k_neg2", lambda x: S.diag(x, k=-2), {"x": In((3, 4))}, lambda x: _diag_ref(x, -2)),
    OpInfo("diag_3d_axes_reversed", lambda x: S.diag(x, k=1, axis1=2, axis2=0), {"x": In((2, 3, 4))},
           lambda x: _diag_ref(x, 1, 2, 0)),
    OpInfo("diag_4d_negative_axes", lambda x: S.diag(x, k=-1, axis1=-1, axis2=1), {"x": In((2, 3, 2, 3))},
           lambda x: _diag_ref(x, -1, -1, 1)),
    # -- _split_v2 (through MXNet's Python split_v2 and directly) ---------------------------------------
    OpInfo("_split_v2_sections_uneven", lambda x: S.split_v2(x, 3, axis=1), {"x": In((2, 7))},
           lambda x: _split_ref(x, [(0, 3), (3, 5), (5, 7)], 1)),
    OpInfo("_split_v2_indices", lambda x: S.split_v2(x, (1, 3), axis=0), {"x": In((5, 2))},
           lambda x: _split_ref(x, [(0, 1), (1, 3), (3, 5)], 0)),
    OpInfo("_split_v2_squeeze", lambda x: S.split_v2(x, 3, axis=-2, squeeze_axis=True), {"x": In((3, 2))},
           lambda x: _split_ref(x, [(0, 1), (1, 2), (2, 3)], 0, True)),
    # indices not starting at 0: the leading columns reach no output (zero gradient there)
    OpInfo("_split_v2_indices_from_1", lambda x: S._split_v2(x, indices=(1, 3), axis=-1), {"x": In((2, 5))},
           lambda x: _split_ref(x, [(1, 3), (3, 5)], 1)),
    OpInfo("_split_v2_one_section", lambda x: S._split_v2(x, indices=(), sections=1, axis=0), {"x": In((2, 2))},
           lambda x: x),
    # -- _contrib_index_copy ------------------------------------------------------------------------
    OpInfo("_contrib_index_copy", S._contrib_index_copy,
           {"old": In((5, 2)), "i": _fixed([3, 0, 4], integer=True), "new": In((3, 2))}, _index_copy_ref),
    # row 1 written twice: the second copy wins, the first gets no gradient
    OpInfo("_contrib_index_copy_repeated", S._contrib_index_copy,
           {"old": In((4, 3)), "i": _fixed([1, 3, 1]), "new": In((3, 3))}, _index_copy_ref),
    # -- forward only -------------------------------------------------------------------------------
    OpInfo("_ravel_multi_index", lambda x: S.ravel_multi_index(x, shape=(7, 6)),
           {"x": _data([[3, 6, 6, 0], [4, 5, 1, 5]])}, lambda x: _ravel_ref(x, (7, 6)), grad=False),
    # -1 leading dim, three axes, a fraction truncated after each step
    OpInfo("_ravel_multi_index_3d", lambda x: S._ravel_multi_index(x, shape=(-1, 3, 4)),
           {"x": _data([[1, 0], [2, 1], [3, 2.5]])}, lambda x: _ravel_ref(x, (-1, 3, 4)), grad=False),
    OpInfo("_unravel_index", lambda x: S.unravel_index(x, shape=(7, 6)), {"x": _data([22, 41, 37, 0, -5])},
           lambda x: _unravel_ref(x, (7, 6)), grad=False),
    OpInfo("_unravel_index_3d", lambda x: S._unravel_index(x, shape=(-1, 3, 4)), {"x": _data([0, 13, 23, 30])},
           lambda x: _unravel_ref(x, (-1, 3, 4)), grad=False),
    OpInfo("_histogram_bin_cnt", lambda x: S._histogram(x, bin_cnt=6, range=(0, 3)), {"x": _data(HIST)},
           lambda x: (_histogram_ref(x, np.linspace(0, 3, 7)), np.linspace(0, 3, 7)), grad=False),
    OpInfo("_histogram_bins_input", lambda x, b: S.histogram(x, bins=b), {"x": _data(HIST), "b": _data([0, 1, 2.5, 3])},
           lambda x, b: (_histogram_ref(x, b), b), grad=False),
    # low == high: MXNet widens the range to (low - 0.5, high + 0.5)
    OpInfo("_histogram_empty_range", lambda x: S.histogram(x, bins=2, range=(1, 1)), {"x": _data(HIST)},
           lambda x: (_histogram_ref(x, [0.5, 1, 1.5]), np.array([0.5, 1, 1.5])), grad=False),
    OpInfo("_contrib_index_array", S._contrib_index_array, {"x": In((3, 2))}, _index_array_ref, grad=False),
    OpInfo("_contrib_index_array_axes", lambda x: S._contrib_index_array(x, axes=(1, -3)), {"x": In((3, 2, 2))},
           lambda x: _index_array_ref(x, (1, 0)), grad=False),
]
