"""BatchNorm's float32 forward and fused backward against a float64 numpy reference, where the data's
mean is large against its spread (an ill-conditioned case for the affine ``y = x * a + b`` form and
for the uncentred terms of the backward). The rounding of the float32 batch mean alone moves every
centred value by ``eps * |mean|``, so the achievable relative error is ``~ eps * |mean| / std``; each
output must stay within twice that (relative to its scale), and within float32's rtol 1e-5 when well
conditioned."""

import numpy as np
import pytest

import symgrad as sg

S = sg.sym
EPS32 = float(np.finfo(np.float32).eps)


def _reference(x, g, gamma, beta, eps, axis):
    """(y, dx, dgamma, dbeta) of training-mode BatchNorm in float64."""
    x, g = x.astype(np.float64), g.astype(np.float64)
    red = tuple(i for i in range(x.ndim) if i != axis % x.ndim)
    shape = [1] * x.ndim
    shape[axis] = -1
    gam, bet = gamma.astype(np.float64).reshape(shape), beta.astype(np.float64).reshape(shape)
    mu = x.mean(red, keepdims=True)
    r = 1 / np.sqrt(((x - mu) ** 2).mean(red, keepdims=True) + eps)
    xh = (x - mu) * r
    dxh = g * gam
    n = x.size / x.shape[axis]
    dx = r / n * (n * dxh - dxh.sum(red, keepdims=True) - xh * (dxh * xh).sum(red, keepdims=True))
    return xh * gam + bet, dx, (g * xh).sum(red), g.sum(red)


def _symgrad(x, g, gamma, beta, eps, axis):
    sym = S.BatchNorm(
        S.Variable("x"), S.Variable("gamma"), S.Variable("beta"), fix_gamma=False, eps=eps, axis=axis, name="bn"
    )
    args = {"x": x, "gamma": gamma, "beta": beta}
    grads = {n: np.zeros_like(a) for n, a in args.items()}
    c = x.shape[axis]
    aux = {"bn_moving_mean": np.zeros(c, np.float32), "bn_moving_var": np.ones(c, np.float32)}
    exe = sym.bind(sg.cpu(), args, args_grad=grads, aux_states=aux)
    y = exe.forward(is_train=True)[0].copy()
    exe.backward([g])
    return y, grads["x"], grads["gamma"], grads["beta"]


@pytest.mark.parametrize("shape, axis", [((4, 3, 8, 8), 1), ((2, 64, 28, 28), 1), ((8, 5, 16), -1), ((300, 7), 1)])
@pytest.mark.parametrize("ratio", [0.0, 1e3])
def test_batchnorm_float32_matches_float64_with_large_mean(shape, axis, ratio):
    rng = np.random.default_rng(len(shape) * 10 + shape[1])
    c = shape[axis]
    cshape = [1] * len(shape)
    cshape[axis] = c
    std = np.exp(rng.standard_normal(c)).reshape(cshape)
    x = ((rng.standard_normal(shape) + ratio) * std).astype(np.float32)  # mean = ratio x std per channel
    g = rng.standard_normal(shape).astype(np.float32)
    gamma = rng.standard_normal(c).astype(np.float32)
    beta = rng.standard_normal(c).astype(np.float32)
    got = _symgrad(x, g, gamma, beta, 1e-5, axis)
    want = _reference(x, g, gamma, beta, 1e-5, axis)
    # dgamma = sum(g xhat): a shift of xhat by eps * ratio moves it by that times sum|g|, not times |dgamma|
    red = tuple(i for i in range(len(shape)) if i != axis % len(shape))
    scales = (
        np.abs(want[0]).max(),
        np.abs(want[1]).max(),
        np.abs(g.astype(np.float64)).sum(red).max(),
        np.abs(want[3]).max(),
    )
    for name, a, b, scale in zip(("y", "dx", "dgamma", "dbeta"), got, want, scales):
        assert a.dtype == np.float32, name
        if ratio:
            err = np.abs(a - b).max() / scale
            assert err <= 2 * EPS32 * ratio, (name, err)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * scale, err_msg=name)
