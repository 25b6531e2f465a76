"""The stride-phase im2col/col2im and the per-sample GEMM paths of strided convolutions (symgrad/kernels/conv.py)
against the generic channel-major im2col + one GEMM + strided col2im, on geometries with padding, dilation,
groups, uneven sizes and 1-d/3-d kernels; and the public ops on a layer wide enough to take the per-sample path."""

import numpy as np
import pytest

from symgrad.kernels import conv as C

GEOMS = [  # (N, C, F, groups, X, k, s, d, lo)
    (2, 3, 4, 1, (11, 13), (3, 3), (2, 2), (1, 1), (1, 1)),
    (1, 3, 8, 1, (30, 30), (7, 7), (2, 2), (1, 1), (3, 3)),
    (2, 4, 6, 1, (12, 12), (1, 1), (2, 2), (1, 1), (0, 0)),
    (2, 4, 6, 2, (10, 9), (3, 2), (3, 2), (2, 1), (2, 0)),
    (3, 2, 5, 1, (9,), (3,), (2,), (1,), (0,)),
    (2, 3, 3, 3, (7, 8, 9), (2, 3, 1), (2, 1, 3), (1, 1, 1), (1, 0, 0)),
]


def _generic(b, w, sm, k, s, d, lo, g):
    """(forward, data gradient, weight gradient) by channel-major columns, one GEMM per group, col2im."""
    N, F = b.shape[0], w.shape[0]
    Y = sm.shape[2:]
    cols = C.channel_major_columns(np, b, k, s, d, lo, Y).reshape(g, -1, N * int(np.prod(Y)))
    wm = w.reshape(g, F // g, -1)
    fwd = np.matmul(wm, cols).reshape((F, N) + Y).swapaxes(0, 1)
    smm = sm.reshape(N, F, -1).swapaxes(0, 1).reshape(g, F // g, -1)
    dcols = np.matmul(wm.swapaxes(1, 2), smm).reshape((b.shape[1],) + k + (N,) + Y)
    dx = C.col2im_add(np, dcols, np.zeros(b.shape), k, s, d, lo)
    dw = np.matmul(smm, cols.swapaxes(1, 2)).reshape(w.shape)
    return fwd, dx, dw


@pytest.mark.parametrize("geom", GEOMS, ids=lambda g: f"X{g[4]}k{g[5]}s{g[6]}d{g[7]}p{g[8]}g{g[3]}")
def test_phase_paths_match_generic_im2col(geom):
    N, Cin, F, g, X, k, s, d, lo = geom
    Y = tuple((x + 2 * p - (ki - 1) * di - 1) // si + 1 for x, p, ki, di, si in zip(X, lo, k, d, s))
    rng = np.random.default_rng(0)
    b = rng.standard_normal((N, Cin) + X)
    w = rng.standard_normal((F, Cin // g) + k)
    sm = rng.standard_normal((N, F) + Y)
    fwd, dx, dw = _generic(b, w, sm, k, s, d, lo, g)
    np.testing.assert_allclose(C.strided_correlate(np, b, w, k, s, d, lo, Y, g), fwd, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(C.strided_transpose(np, sm, w, k, s, d, lo, X, g), dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(C.strided_weight_grad(np, b, sm, k, s, d, lo, g), dw, rtol=1e-12, atol=1e-12)
    for cm in (True, False):  # the columns are exactly the generic ones, in either layout
        cols = C.phase_columns(np, b, k, s, d, lo, Y, channel_major=cm)
        if not cm:
            cols = np.moveaxis(cols, 0, 1 + len(k))
        assert np.array_equal(cols.reshape(-1), C.channel_major_columns(np, b, k, s, d, lo, Y).reshape(-1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_public_ops_take_the_per_sample_path_on_wide_strided_layers(dtype):
    # 7x7 stride 2 on 120x120: 60x60 outputs per sample, at least _PER_SAMPLE_MIN
    k, s, d, lo = (7, 7), (2, 2), (1, 1), (3, 3)
    X, Y = (120, 120), (60, 60)
    assert C._per_sample(s, Y)
    rng = np.random.default_rng(1)
    b = rng.standard_normal((2, 3) + X).astype(dtype)
    w = rng.standard_normal((8, 3) + k).astype(dtype)
    sm = rng.standard_normal((2, 8) + Y).astype(dtype)
    fwd, dx, dw = _generic(b.astype(np.float64), w.astype(np.float64), sm.astype(np.float64), k, s, d, lo, 1)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    got = (
        C.correlate(np, b, w, k, s, d, lo, Y, 1),
        C.transpose(np, sm, w, k, s, d, lo, X, 1),
        C.weight_grad(np, b, sm, k, s, d, lo, 1),
    )
    for a, want in zip(got, (fwd, dx, dw)):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, want, rtol=tol, atol=tol * np.abs(want).max())
