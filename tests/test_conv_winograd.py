"""Convolution's Winograd F(2x2, 3x3) path (3x3, stride 1, no dilation, one group, >= 49 output blocks).

The operator table's images are too small to reach it; these geometries do. The reference is a direct
correlation written here in numpy (a sum over the nine taps); gradients are the forward's adjoints, checked
against the same numpy written as explicit sums, and against finite differences by the checker.
"""

import numpy as np
import pytest

import symgrad as sg
from symgrad.kernels.conv import winograd_applies
from symgrad.test_utils import check_numeric_gradient


def _direct(x, w, pad):
    """y[n, f, i, j] = sum_(c, a, b) xpad[n, c, i + a, j + b] w[f, c, a, b]."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    H, W = xp.shape[2] - 2, xp.shape[3] - 2
    y = np.zeros((x.shape[0], w.shape[0], H, W))
    for a in range(3):
        for b in range(3):
            y += np.einsum("nchw,fc->nfhw", xp[:, :, a : a + H, b : b + W], w[:, :, a, b])
    return y


def _direct_grads(x, w, pad, dy):
    """The adjoints of ``_direct``: dx scatters dy through each tap, dw correlates xpad with dy."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    H, W = dy.shape[2:]
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for a in range(3):
        for b in range(3):
            dxp[:, :, a : a + H, b : b + W] += np.einsum("nfhw,fc->nchw", dy, w[:, :, a, b])
            dw[:, :, a, b] = np.einsum("nchw,nfhw->fc", xp[:, :, a : a + H, b : b + W], dy)
    dx = dxp[:, :, pad[0] : dxp.shape[2] - pad[0], pad[1] : dxp.shape[3] - pad[1]]
    return dx, dw


GEOMETRIES = [  # (N, C, F, H, W, pad): odd and even outputs, every padding, one non-square
    (2, 3, 4, 14, 14, (1, 1)),
    (1, 2, 3, 15, 17, (0, 0)),
    (2, 4, 2, 13, 16, (2, 2)),
    (1, 3, 5, 16, 15, (1, 0)),
]


@pytest.mark.parametrize("geom", GEOMETRIES, ids=str)
def test_winograd_matches_a_direct_correlation_and_its_adjoints(geom):
    N, C, F, H, W, pad = geom
    Y = (H + 2 * pad[0] - 2, W + 2 * pad[1] - 2)
    assert winograd_applies((3, 3), (1, 1), (1, 1), pad, 1, Y)  # the path under test
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, H, W))
    w = rng.standard_normal((F, C, 3, 3))
    dy = rng.standard_normal((N, F) + Y)
    sym = sg.sym.Convolution(
        sg.sym.Variable("x"), sg.sym.Variable("w"), kernel=(3, 3), pad=pad, num_filter=F, no_bias=True
    )
    grads = {"x": np.zeros_like(x), "w": np.zeros_like(w)}
    exe = sym.bind(sg.cpu(), {"x": x, "w": w}, args_grad=grads)
    (y,) = exe.forward(is_train=True)
    exe.backward([dy])
    dx, dw = _direct_grads(x, w, pad, dy)
    np.testing.assert_allclose(y, _direct(x, w, pad), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads["x"], dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grads["w"], dw, rtol=1e-12, atol=1e-12)


def test_winograd_float32_error_is_a_direct_sums():
    # the transforms hold 0, +-1, +-1/2: float32 results stay within a few ulps of the float64 sum
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 16, 28, 28))
    w = rng.standard_normal((8, 16, 3, 3)) * 0.1
    sym = sg.sym.Convolution(
        sg.sym.Variable("x"), sg.sym.Variable("w"), kernel=(3, 3), pad=(1, 1), num_filter=8, no_bias=True
    )
    (y32,) = sym.bind(sg.cpu(), {"x": x.astype(np.float32), "w": w.astype(np.float32)}).forward()
    ref = _direct(x.astype(np.float32).astype(np.float64), w.astype(np.float32).astype(np.float64), (1, 1))
    assert np.linalg.norm(y32 - ref) / np.linalg.norm(ref) < 1e-6


def test_winograd_gradients_match_finite_differences():
    sym = sg.sym.Convolution(
        sg.sym.Variable("x"), sg.sym.Variable("w"), kernel=(3, 3), pad=(1, 1), num_filter=2, no_bias=True
    )
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((1, 2, 14, 14)), rng.standard_normal((2, 2, 3, 3))
    res = check_numeric_gradient(sym, {"x": x, "w": w}, dtype=np.float64)
    assert sorted(res) == ["w", "x"] and not res.excluded and not res.kinks  # the whole gradient was checked
