"""OpInfo rows for pooling and padding (symgrad/ops/pool.py): Pooling (max, avg, sum, lp), the hidden ops its
gradients are made of (``_pool_max_scatter(_at)``, ``_pool_max_gather(_at)``, ``_pool_sum_adjoint``) and Pad.

References are plain-numpy loops written from MXNet 1.9's definitions (the C++ CPU
kernels' index arithmetic): pooling window by window with MXNet's clipping and divisor
rules, Pad element by element with MXNet's edge/reflect index maps.
"""

import itertools

import numpy as np
from np_refs import per_axis
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym


# -- Pooling ---------------------------------------------------------------------


def pool_ref(
    x,
    kernel=None,
    stride=None,
    pad=None,
    pool_type="max",
    convention="valid",
    count_include_pad=True,
    global_pool=False,
    p_value=1,
):
    """MXNet's CPU pooling kernels, window by window."""
    nd = x.ndim - 2
    X = x.shape[2:]
    if global_pool:
        kernel, stride, pad = X, (1,) * nd, (0,) * nd
    k, s, p = tuple(kernel), per_axis(stride, nd, 1), per_axis(pad, nd, 0)
    if convention == "valid":
        Y = [(X[i] + 2 * p[i] - k[i]) // s[i] + 1 for i in range(nd)]
    elif convention == "full":
        Y = [1 + int(np.ceil((X[i] + 2 * p[i] - k[i]) / s[i])) for i in range(nd)]
    else:
        Y = [int(np.ceil((X[i] + 2 * p[i]) / s[i])) for i in range(nd)]
    out = np.zeros(x.shape[:2] + tuple(Y))
    for o in itertools.product(*[range(y) for y in Y]):
        start = [o[i] * s[i] - p[i] for i in range(nd)]
        if pool_type == "max":
            end = [min(start[i] + k[i], X[i]) for i in range(nd)]
            lo = [max(v, 0) for v in start]
            win = x[(slice(None), slice(None)) + tuple(slice(lo[i], end[i]) for i in range(nd))]
            out[(slice(None), slice(None)) + o] = win.reshape(x.shape[:2] + (-1,)).max(-1)
            continue
        end = [min(start[i] + k[i], X[i] + p[i]) for i in range(nd)]
        size = int(np.prod([end[i] - start[i] for i in range(nd)])) if pool_type == "avg" else 1
        lo = [max(v, 0) for v in start]
        hi = [min(v, X[i]) for i, v in enumerate(end)]
        if pool_type == "avg" and not count_include_pad:
            size = int(np.prod([hi[i] - lo[i] for i in range(nd)]))
        win = x[(slice(None), slice(None)) + tuple(slice(lo[i], hi[i]) for i in range(nd))]
        total = (win.reshape(x.shape[:2] + (-1,)) ** p_value / size).sum(-1)
        out[(slice(None), slice(None)) + o] = np.cbrt(total) if p_value == 3 else total ** (1.0 / p_value)
    return out


def _distinct(shape, grad=True):
    """Well separated distinct values (max pooling away from ties)."""

    def draw(rng):
        n = int(np.prod(shape))
        return (rng.permutation(n) * (2.0 / n) - 1.0 + rng.uniform(0, 0.2 / n, n)).reshape(shape)

    return In(shape, sample=draw, grad=grad)


def _pool(**kw):
    return lambda x: S.Pooling(x, name="pool", **kw)


POOL_OPS = [
    OpInfo(
        "Pooling_max_valid",
        _pool(kernel=(3, 3), stride=(2, 2)),
        {"x": _distinct((1, 2, 5, 5))},
        lambda x: pool_ref(x, (3, 3), (2, 2)),
    ),
    OpInfo(
        "Pooling_max_full_pad",
        _pool(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pooling_convention="full"),
        {"x": _distinct((1, 2, 6, 6))},
        lambda x: pool_ref(x, (3, 3), (2, 2), (1, 1), convention="full"),
    ),
    OpInfo(
        "Pooling_max_1d_pad",
        _pool(kernel=(3,), stride=(2,), pad=(1,)),
        {"x": _distinct((2, 2, 7))},
        lambda x: pool_ref(x, (3,), (2,), (1,)),
    ),
    OpInfo(
        "Pooling_max_1d_same",
        _pool(kernel=(3,), stride=(2,), pooling_convention="same"),
        {"x": _distinct((2, 2, 7))},
        lambda x: pool_ref(x, (3,), (2,), convention="same"),
    ),
    OpInfo(
        "Pooling_max_3d",
        _pool(kernel=(2, 2, 2), stride=(1, 2, 1)),
        {"x": _distinct((1, 2, 3, 4, 3))},
        lambda x: pool_ref(x, (2, 2, 2), (1, 2, 1)),
    ),
    OpInfo(
        "Pooling_max_global",
        _pool(global_pool=True),
        {"x": _distinct((2, 3, 3, 4))},
        lambda x: pool_ref(x, global_pool=True),
    ),
    OpInfo(
        "Pooling_avg_valid",
        _pool(kernel=(2, 2), stride=(2, 2), pool_type="avg"),
        {"x": In((1, 2, 5, 5))},
        lambda x: pool_ref(x, (2, 2), (2, 2), pool_type="avg"),
    ),
    OpInfo(
        "Pooling_avg_pad_include",
        _pool(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg"),
        {"x": In((1, 2, 5, 5))},
        lambda x: pool_ref(x, (3, 3), (2, 2), (1, 1), pool_type="avg"),
    ),
    OpInfo(
        "Pooling_avg_pad_exclude",
        _pool(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg", count_include_pad=False),
        {"x": In((1, 2, 5, 5))},
        lambda x: pool_ref(x, (3, 3), (2, 2), (1, 1), pool_type="avg", count_include_pad=False),
    ),
    OpInfo(
        "Pooling_avg_full",
        _pool(kernel=(3, 3), stride=(2, 2), pool_type="avg", pooling_convention="full"),
        {"x": In((1, 2, 6, 6))},
        lambda x: pool_ref(x, (3, 3), (2, 2), pool_type="avg", convention="full"),
    ),
    OpInfo(
        "Pooling_avg_full_pad_exclude",
        _pool(
            kernel=(3, 2),
            stride=(2, 3),
            pad=(1, 1),
            pool_type="avg",
            pooling_convention="full",
            count_include_pad=False,
        ),
        {"x": In((1, 2, 6, 5))},
        lambda x: pool_ref(x, (3, 2), (2, 3), (1, 1), pool_type="avg", convention="full", count_include_pad=False),
    ),
    OpInfo(
        "Pooling_avg_3d",
        _pool(kernel=(2, 2, 2), stride=(2, 2, 2), pool_type="avg"),
        {"x": In((1, 2, 4, 4, 2))},
        lambda x: pool_ref(x, (2, 2, 2), (2, 2, 2), pool_type="avg"),
    ),
    OpInfo(
        "Pooling_avg_global",
        _pool(kernel=(1, 1), global_pool=True, pool_type="avg"),
        {"x": In((2, 3, 3, 4))},
        lambda x: pool_ref(x, global_pool=True, pool_type="avg"),
    ),
    OpInfo(
        "Pooling_sum_full",
        _pool(kernel=(2, 3), stride=(2, 1), pool_type="sum", pooling_convention="full"),
        {"x": In((1, 2, 5, 4))},
        lambda x: pool_ref(x, (2, 3), (2, 1), pool_type="sum", convention="full"),
    ),
    OpInfo(
        "Pooling_sum_1d_valid",
        _pool(kernel=(2,), stride=(1,), pool_type="sum"),
        {"x": In((2, 3, 5))},
        lambda x: pool_ref(x, (2,), (1,), pool_type="sum"),
    ),
    OpInfo(
        "Pooling_lp1",
        _pool(kernel=(2, 2), pool_type="lp", p_value=1),
        {"x": In((1, 2, 3, 3))},
        lambda x: pool_ref(x, (2, 2), pool_type="lp", p_value=1),
    ),
    # lp with p = 2, 3 uses the fused _backward_Pooling (no gradient rule): no second order
    OpInfo(
        "Pooling_lp2",
        _pool(kernel=(2, 2), stride=(1, 2), pool_type="lp", p_value=2),
        {"x": In((1, 2, 3, 4))},
        lambda x: pool_ref(x, (2, 2), (1, 2), pool_type="lp", p_value=2),
        second_order=False,
    ),
    OpInfo(
        "Pooling_lp3",
        _pool(kernel=(2, 2), pool_type="lp", p_value=3),
        {"x": In((1, 2, 3, 3), 0.5, 1.5)},
        lambda x: pool_ref(x, (2, 2), pool_type="lp", p_value=3),
        second_order=False,
    ),
]

_PM = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pooling_convention="full")


def _max_scatter_ref(g, x):
    """Each output gradient to the first maximum of its clipped window (MXNet's unpool_max)."""
    out = np.zeros_like(x)
    k, s, p = (3, 3), (2, 2), (1, 1)
    for n, c, i, j in itertools.product(*[range(v) for v in g.shape]):
        h0, w0 = i * s[0] - p[0], j * s[1] - p[1]
        h1, w1 = min(h0 + k[0], x.shape[2]), min(w0 + k[1], x.shape[3])
        h0, w0 = max(h0, 0), max(w0, 0)
        win = x[n, c, h0:h1, w0:w1]
        a, b = np.unravel_index(np.argmax(win), win.shape)
        out[n, c, h0 + a, w0 + b] += g[n, c, i, j]
    return out


def _max_gather_ref(v, x):
    out = np.zeros(x.shape[:2] + (3, 3))
    for n, c, i, j in itertools.product(*[range(d) for d in out.shape]):
        h0, w0 = max(i * 2 - 1, 0), max(j * 2 - 1, 0)
        h1, w1 = min(i * 2 + 2, x.shape[2]), min(j * 2 + 2, x.shape[3])
        win = x[n, c, h0:h1, w0:w1]
        a, b = np.unravel_index(np.argmax(win), win.shape)
        out[n, c, i, j] = v[n, c, h0 + a, w0 + b]
    return out


def _avg_adjoint_ref(g, like):
    """Adjoint of avg pooling (3x3, stride 2, pad 1, include pad): g / 9 added over each window."""
    out = np.zeros_like(like)
    for n, c, i, j in itertools.product(*[range(v) for v in g.shape]):
        h0, w0 = i * 2 - 1, j * 2 - 1
        out[n, c, max(h0, 0) : h0 + 3, max(w0, 0) : w0 + 3] += g[n, c, i, j] / 9
    return out


def _workspace(rng):
    """A max-pooling workspace for a (1, 2, 5, 5) input: flat indices with repeats (overlapping windows
    picking the same element) and -1 (a window whose pick is padding)."""
    idx = rng.integers(0, 50, (1, 2, 3, 3))
    idx[0, 0, 0, :2] = idx[0, 1, 2, 2] = 7
    idx[0, 1, 0, 0] = -1
    return idx


def _scatter_at_ref(g, idx, like):
    out = np.zeros(like.size)
    keep = idx.ravel() >= 0
    np.add.at(out, idx.ravel()[keep], g.ravel()[keep])
    return out.reshape(like.shape)


def _gather_at_ref(v, idx):
    return np.where(idx >= 0, v.ravel()[np.maximum(idx, 0)], 0.0)


HIDDEN_POOL_OPS = [
    OpInfo(
        "_pool_max_scatter_at",
        S._pool_max_scatter_at,
        {
            "g": In((1, 2, 3, 3)),
            "idx": In((1, 2, 3, 3), sample=_workspace, grad=False, integer=True),
            "like": In((1, 2, 5, 5), grad=False),
        },
        _scatter_at_ref,
    ),
    OpInfo(
        "_pool_max_gather_at",
        S._pool_max_gather_at,
        {"v": In((1, 2, 5, 5)), "idx": In((1, 2, 3, 3), sample=_workspace, grad=False, integer=True)},
        _gather_at_ref,
    ),
    OpInfo(
        "_pool_max_scatter",
        lambda g, x: S._pool_max_scatter(g, x, **_PM),
        {"g": In((1, 2, 3, 3)), "x": _distinct((1, 2, 5, 5), grad=False)},
        _max_scatter_ref,
    ),
    OpInfo(
        "_pool_max_gather",
        lambda v, x: S._pool_max_gather(v, x, **_PM),
        {"v": In((1, 2, 5, 5)), "x": _distinct((1, 2, 5, 5), grad=False)},
        _max_gather_ref,
    ),
    OpInfo(
        "_pool_sum_adjoint",
        lambda g, like: S._pool_sum_adjoint(g, like, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg"),
        {"g": In((1, 2, 3, 3)), "like": In((1, 2, 5, 5), grad=False)},
        _avg_adjoint_ref,
    ),
]


# -- Pad -----------------------------------------------------------------------------


def pad_ref(x, mode, pad_width, value=0.0):
    """Element by element with MXNet's index maps: edge clamps, reflect mirrors without repeating the edge."""
    pairs = [(pad_width[2 * i], pad_width[2 * i + 1]) for i in range(x.ndim)]
    shape = tuple(n + a + b for n, (a, b) in zip(x.shape, pairs))
    out = np.empty(shape)
    for idx in itertools.product(*[range(n) for n in shape]):
        src = []
        inside = True
        for j, (a, _), n in zip(idx, pairs, x.shape):
            i = j - a
            if 0 <= i < n:
                src.append(i)
            elif mode == "constant":
                inside = False
                break
            elif mode == "edge":
                src.append(min(max(i, 0), n - 1))
            else:  # reflect
                src.append(-i if i < 0 else 2 * (n - 1) - i)
        out[idx] = x[tuple(src)] if inside else value
    return out


_PW4 = (0, 0, 0, 0, 1, 2, 2, 1)
_PW5 = (0, 0, 0, 0, 1, 1, 0, 2, 1, 0)
PAD_OPS = [
    OpInfo(
        "Pad_constant",
        lambda x: S.Pad(x, mode="constant", pad_width=_PW4, constant_value=0.5),
        {"x": In((1, 2, 3, 3))},
        lambda x: pad_ref(x, "constant", _PW4, 0.5),
    ),
    OpInfo(
        "Pad_edge",
        lambda x: S.Pad(x, mode="edge", pad_width=_PW4),
        {"x": In((1, 2, 3, 3))},
        lambda x: pad_ref(x, "edge", _PW4),
    ),
    OpInfo(
        "Pad_reflect",
        lambda x: S.pad(x, mode="reflect", pad_width=_PW4),
        {"x": In((1, 2, 3, 3))},
        lambda x: pad_ref(x, "reflect", _PW4),
    ),
    OpInfo(
        "Pad_reflect_5d",
        lambda x: S.Pad(x, mode="reflect", pad_width=_PW5),
        {"x": In((1, 1, 2, 3, 2))},
        lambda x: pad_ref(x, "reflect", _PW5),
    ),
    OpInfo(
        "Pad_edge_5d",
        lambda x: S.Pad(x, mode="edge", pad_width=_PW5),
        {"x": In((1, 1, 2, 3, 2))},
        lambda x: pad_ref(x, "edge", _PW5),
    ),
]

OPS = POOL_OPS + HIDDEN_POOL_OPS + PAD_OPS
