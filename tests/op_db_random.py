"""OpInfo rows for the deterministic ops of the random family (symgrad/ops/random.py): the probability
densities ``_random_pdf_*`` (normal, uniform, gamma, exponential, poisson, negative_binomial,
generalized_negative_binomial, dirichlet), each as a density and as a log-density. The sampling ops
themselves are random and tested in tests/test_ops_random.py.

References are plain numpy written from MXNet 1.9.1's pdf_op.h (gamma's beta is a rate there); the
Dirichlet density directly from its formula, vector by vector, with ``math.lgamma``.
"""

import math

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym


def _lgamma(x):
    return np.vectorize(math.lgamma)(x)


def _nb_log(x, k, p):
    """log of the negative binomial density: x failures before the k-th success of probability p"""
    return _lgamma(x + k) - _lgamma(x + 1) - _lgamma(k) + k * np.log(p) + x * np.log(1 - p)


def _bc(p, x):
    """parameter p (a leading subshape of x) broadcast over x's trailing axes"""
    return p.reshape(p.shape + (1,) * (x.ndim - p.ndim))


def _range(lo, hi):
    return lambda shape: In(shape, low=lo, high=hi)


_pos = _range(0.5, 2.0)


def _counts(shape):
    """The x of a discrete density: counts drawn in 0..5, no gradient."""
    return In(shape, sample=lambda rng: rng.integers(0, 6, shape), grad=False)


def _dirichlet_logpdf(x, a, is_log):
    """Direct: sum (a_j - 1) log x_j + lgamma(sum a) - sum lgamma(a_j), per vector (alpha per leading index)."""
    lead = a.shape[:-1]
    out = np.zeros(x.shape[:-1])
    for idx in np.ndindex(*x.shape[:-1]):
        av = a[idx[: len(lead)]]
        lp = float(np.sum((av - 1) * np.log(x[idx]))) + math.lgamma(av.sum()) - sum(math.lgamma(v) for v in av)
        out[idx] = lp if is_log else math.exp(lp)
    return out


def _simplex(shape):
    def draw(rng):
        v = rng.uniform(0.2, 1.0, shape)
        return v / v.sum(-1, keepdims=True)

    return draw


OPS = [
    # -- densities of the univariate distributions, parameters broadcast over x's trailing axes --------------
    OpInfo(
        "_random_pdf_normal",
        S._random_pdf_normal,
        {"x": In((2, 3), low=-2, high=2), "mu": In((2,)), "sigma": _pos((2,))},
        lambda x, m, s: np.exp(-0.5 * ((x - _bc(m, x)) / _bc(s, x)) ** 2) / (math.sqrt(2 * math.pi) * _bc(s, x)),
    ),
    OpInfo(
        "_random_pdf_normal_log",
        lambda x, m, s: S._random_pdf_normal(x, m, s, is_log=True),
        {"x": In((2, 2, 2), low=-2, high=2), "mu": In((2, 2)), "sigma": _pos((2, 2))},
        lambda x, m, s: -0.5 * ((x - _bc(m, x)) / _bc(s, x)) ** 2 - np.log(math.sqrt(2 * math.pi) * _bc(s, x)),
    ),
    OpInfo(
        "_random_pdf_uniform",
        S._random_pdf_uniform,
        {"x": In((2, 3), low=0, high=1), "low": In((2,), low=-1.5, high=-0.5), "high": In((2,), low=1, high=2)},
        lambda x, lo, hi: np.broadcast_to(1.0 / _bc(hi - lo, x), x.shape),
    ),
    OpInfo(
        "_random_pdf_uniform_log",
        lambda x, lo, hi: S._random_pdf_uniform(x, lo, hi, is_log=True),
        {"x": In((3,), low=0, high=1), "low": In((3,), low=-1.5, high=-0.5), "high": In((3,), low=1, high=2)},
        lambda x, lo, hi: -np.log(hi - lo),
    ),
    OpInfo(
        "_random_pdf_gamma",
        S._random_pdf_gamma,
        {"x": In((2, 3), low=0.5, high=3), "alpha": In((2,), low=1, high=3), "beta": _pos((2,))},
        lambda x, a, b: np.exp(_bc(a * np.log(b) - _lgamma(a), x) + (_bc(a, x) - 1) * np.log(x) - _bc(b, x) * x),
    ),
    OpInfo(
        "_random_pdf_gamma_log",
        lambda x, a, b: S._random_pdf_gamma(x, a, b, is_log=True),
        {"x": In((3,), low=0.5, high=3), "alpha": In((3,), low=0.5, high=3), "beta": _pos((3,))},
        lambda x, a, b: a * np.log(b) - _lgamma(a) + (a - 1) * np.log(x) - b * x,
    ),
    OpInfo(
        "_random_pdf_exponential",
        S._random_pdf_exponential,
        {"x": In((2, 3), low=0, high=3), "lam": _pos((2,))},
        lambda x, lam: _bc(lam, x) * np.exp(-_bc(lam, x) * x),
    ),
    OpInfo(
        "_random_pdf_exponential_log",
        lambda x, lam: S._random_pdf_exponential(x, lam, is_log=True),
        {"x": In((4,), low=0, high=3), "lam": _pos((4,))},
        lambda x, lam: np.log(lam) - lam * x,
    ),
    # the Poisson sample is discrete: MXNet gives it no gradient
    OpInfo(
        "_random_pdf_poisson",
        S._random_pdf_poisson,
        {"x": _counts((2, 3)), "lam": In((2,), low=0.5, high=4)},
        lambda x, lam: np.exp(x * np.log(_bc(lam, x)) - _lgamma(x + 1) - _bc(lam, x)),
    ),
    OpInfo(
        "_random_pdf_poisson_log",
        lambda x, lam: S._random_pdf_poisson(x, lam, is_log=True),
        {"x": _counts((4,)), "lam": In((4,), low=0.5, high=4)},
        lambda x, lam: x * np.log(lam) - _lgamma(x + 1) - lam,
    ),
    OpInfo(
        "_random_pdf_negative_binomial",
        S._random_pdf_negative_binomial,
        {"x": _counts((2, 3)), "k": In((2,), low=1, high=4), "p": In((2,), low=0.2, high=0.8)},
        lambda x, k, p: np.exp(_nb_log(x, _bc(k, x), _bc(p, x))),
    ),
    OpInfo(
        "_random_pdf_negative_binomial_log",
        lambda x, k, p: S._random_pdf_negative_binomial(x, k, p, is_log=True),
        {"x": _counts((4,)), "k": In((4,), low=0.5, high=4), "p": In((4,), low=0.2, high=0.8)},
        _nb_log,
    ),
    OpInfo(
        "_random_pdf_generalized_negative_binomial",
        S._random_pdf_generalized_negative_binomial,
        {"x": _counts((2, 3)), "mu": In((2,), low=0.5, high=3), "alpha": In((2,), low=0.2, high=1.5)},
        lambda x, mu, a: np.exp(_nb_log(x, 1 / _bc(a, x), 1 / (_bc(mu, x) * _bc(a, x) + 1))),
    ),
    OpInfo(
        "_random_pdf_generalized_negative_binomial_log",
        lambda x, mu, a: S._random_pdf_generalized_negative_binomial(x, mu, a, is_log=True),
        {"x": _counts((4,)), "mu": In((4,), low=0.5, high=3), "alpha": In((4,), low=0.2, high=1.5)},
        lambda x, mu, a: _nb_log(x, 1 / a, 1 / (mu * a + 1)),
    ),
    # -- Dirichlet: x on the simplex, one alpha vector per leading index ------------------------------------------
    OpInfo(
        "_random_pdf_dirichlet_log",
        lambda x, a: S._random_pdf_dirichlet(x, a, is_log=True),
        {"x": In((2, 3, 4), sample=_simplex((2, 3, 4))), "a": In((2, 4), 0.5, 2.0)},
        lambda x, a: _dirichlet_logpdf(x, a, True),
        dtypes=(np.float32, np.float64),
    ),
    OpInfo(
        "_random_pdf_dirichlet_single_vector",
        S.random_pdf_dirichlet,
        {"x": In((3,), sample=_simplex((3,))), "a": In((3,), 0.5, 2.0)},
        lambda x, a: _dirichlet_logpdf(x[None], a[None], False).reshape(1),
        dtypes=(np.float32, np.float64),
    ),
]
