"""MXNet's ``mx.sym.random`` Python helpers: one function per distribution that picks the operator.

Numbers as distribution parameters give the ``_random_<distr>`` op (scalar parameters, ``shape`` is the
output shape); Symbols give the ``_sample_<distr>`` op (one distribution per element, ``shape`` samples
from each). Mixing the two is an error, as in MXNet.

>>> import symgrad as sg
>>> sg.sym_random.normal(0, 1, shape=(2, 3)).heads()[0].op_name
'_random_normal'
>>> mu, sigma = sg.sym.Variable("mu"), sg.sym.Variable("sigma")
>>> sg.sym_random.normal(mu, sigma, shape=(4,)).infer_shape(mu=(2,), sigma=(2,))[1]
[(2, 4)]
"""

from __future__ import annotations

import numbers

from . import sym as _sym
from .symbol import Symbol

__all__ = [
    "uniform",
    "normal",
    "randn",
    "poisson",
    "exponential",
    "gamma",
    "multinomial",
    "negative_binomial",
    "generalized_negative_binomial",
    "shuffle",
    "randint",
]


def _options(shape, dtype, kwargs):
    out = dict(kwargs)
    if shape is not None:
        out["shape"] = shape
    if dtype is not None:
        out["dtype"] = dtype
    return out


def _pick(who, random_op, sample_op, params, shape, dtype, kwargs):
    """``random_op`` for numbers, ``sample_op`` for Symbols (MXNet's ``_random_helper``)."""
    opts = _options(shape, dtype, kwargs)
    if all(isinstance(p, Symbol) for p in params):
        if sample_op is None:
            raise TypeError(f"{who}: distribution parameters must be numbers, got Symbols")
        return getattr(_sym, sample_op)(*params, **opts)
    if all(isinstance(p, numbers.Number) and not isinstance(p, bool) for p in params):
        names = _SCALAR_NAMES[random_op]
        return getattr(_sym, random_op)(**dict(zip(names, params)), **opts)
    kinds = ", ".join(type(p).__name__ for p in params)
    raise TypeError(f"{who}: distribution parameters must be all numbers or all Symbols, got {kinds}")


_SCALAR_NAMES = {
    "_random_uniform": ("low", "high"),
    "_random_normal": ("loc", "scale"),
    "_random_poisson": ("lam",),
    "_random_exponential": ("lam",),
    "_random_gamma": ("alpha", "beta"),
    "_random_negative_binomial": ("k", "p"),
    "_random_generalized_negative_binomial": ("mu", "alpha"),
    "_random_randint": ("low", "high"),
}


def uniform(low=0, high=1, shape=None, dtype=None, **kwargs):
    """Samples uniform on [low, high): ``_random_uniform`` for numbers, ``_sample_uniform`` for Symbols."""
    return _pick("uniform", "_random_uniform", "_sample_uniform", [low, high], shape, dtype, kwargs)


def normal(loc=0, scale=1, shape=None, dtype=None, **kwargs):
    """Normal samples (mean ``loc``, standard deviation ``scale``): ``_random_normal`` / ``_sample_normal``."""
    return _pick("normal", "_random_normal", "_sample_normal", [loc, scale], shape, dtype, kwargs)


def randn(*shape, **kwargs):
    """Normal samples of shape ``shape`` (``loc``, ``scale``, ``dtype`` as keywords)."""
    loc = kwargs.pop("loc", 0)
    scale = kwargs.pop("scale", 1)
    dtype = kwargs.pop("dtype", None)
    return _pick("randn", "_random_normal", "_sample_normal", [loc, scale], shape or None, dtype, kwargs)


def poisson(lam=1, shape=None, dtype=None, **kwargs):
    """Poisson samples of rate ``lam`` (float output): ``_random_poisson`` / ``_sample_poisson``."""
    return _pick("poisson", "_random_poisson", "_sample_poisson", [lam], shape, dtype, kwargs)


def exponential(scale=1, shape=None, dtype=None, **kwargs):
    """Exponential samples of *scale* ``scale`` (the ops take the rate ``lam = 1 / scale``, as MXNet)."""
    return _pick("exponential", "_random_exponential", "_sample_exponential", [1.0 / scale], shape, dtype, kwargs)


def gamma(alpha=1, beta=1, shape=None, dtype=None, **kwargs):
    """Gamma samples of shape ``alpha`` and scale ``beta``: ``_random_gamma`` / ``_sample_gamma``."""
    return _pick("gamma", "_random_gamma", "_sample_gamma", [alpha, beta], shape, dtype, kwargs)


def negative_binomial(k=1, p=1, shape=None, dtype=None, **kwargs):
    """Negative binomial samples (``k`` failure limit, ``p`` probability): ``_random_negative_binomial`` /
    ``_sample_negative_binomial``."""
    return _pick(
        "negative_binomial", "_random_negative_binomial", "_sample_negative_binomial", [k, p], shape, dtype, kwargs
    )


def generalized_negative_binomial(mu=1, alpha=1, shape=None, dtype=None, **kwargs):
    """Generalized negative binomial samples (mean ``mu``, dispersion ``alpha``)."""
    return _pick(
        "generalized_negative_binomial",
        "_random_generalized_negative_binomial",
        "_sample_generalized_negative_binomial",
        [mu, alpha],
        shape,
        dtype,
        kwargs,
    )


def multinomial(data, shape=None, get_prob=True, dtype="int32", **kwargs):
    """Outcome indices drawn from the distributions on the last axis of ``data`` (``_sample_multinomial``;
    note MXNet's Python default ``get_prob=True``: a second output holds the log probabilities)."""
    return _sym._sample_multinomial(data, get_prob=get_prob, **_options(shape, dtype, kwargs))


def shuffle(data, **kwargs):
    """``data`` randomly permuted along its first axis (``_shuffle``)."""
    return _sym._shuffle(data, **kwargs)


def randint(low, high, shape=None, dtype=None, **kwargs):
    """Integers drawn uniformly from [low, high) (``_random_randint``; numbers only)."""
    return _pick("randint", "_random_randint", None, [low, high], shape, dtype, kwargs)
