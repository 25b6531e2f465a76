"""Random sampling operators (MXNet 1.9.1 ``src/operator/random/``) and the probability densities.

Sampling ops draw from one symgrad-owned generator per array module (``generator(xp)``): a
``numpy.random.Generator`` on cpu, a ``cupy.random.RandomState`` on gpu, both seeded by
``symgrad.random.seed`` (as ``mx.random.seed``; never seeded, they start from seed 0, so a fresh process
draws the same numbers every run, as MXNet's do). Same seed, same graph -> same draws.

- ``_random_<distr>``: no inputs, scalar parameters, ``shape``/``ctx``/``dtype`` (float32 by default);
- ``_random_<distr>_like``: one input ``data`` giving the output shape and dtype;
- ``_sample_<distr>``: the parameters are input arrays; output shape ``param.shape + shape``;
- ``_sample_multinomial``, ``_shuffle``, ``_sample_unique_zipfian``.

Every sampling op is marked ``is_random``: the numeric gradient checkers refuse a symbol holding one
(finite differences of a fresh draw are meaningless). Gradients follow MXNet: ``_sample_*`` and the
``_like`` ops give **zero** gradients to their inputs (MXNet's ``MakeZeroGradNodes``: a sample is treated
as a constant), ``_shuffle`` has none (MXNet registers no FGradient), ``_sample_multinomial`` with
``get_prob=True`` passes the log-probability's gradient ``g / p[sample]`` to the sampled entries through the
fused ``_backward_sample_multinomial`` (MXNet's REINFORCE estimator; no second order).

The ``_random_pdf_<distr>`` ops (normal, uniform, gamma, exponential, poisson, negative_binomial,
generalized_negative_binomial; not dirichlet) are deterministic and differentiable: forward formulas are
MXNet's (``pdf_op.h``; discrete samples get no gradient, as there), gradients are symbolic (second order
works) through the linear pair
``_pdf_param_expand`` / ``_pdf_param_reduce`` (a parameter broadcast over its trailing sample axes and
back).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import Param, check_float, output_like, register, wait_for_first_input, wait_for_inputs
from .elemwise import adjoint_pair, log_gamma

__all__ = ["generator", "seed_generators"]


# ----------------------------------------------------------------------------
# The generators
# ----------------------------------------------------------------------------

_DEFAULT_SEED = 0
_seeds: dict[str, int] = {}  # array module name -> seed of its next generator
_generators: dict[str, _Draws] = {}


class _Draws:
    """The few draws the samplers need, over numpy's ``Generator`` or CuPy's ``RandomState``."""

    __slots__ = ("xp", "gen", "is_numpy")

    def __init__(self, xp, seed):
        self.xp = xp
        self.is_numpy = xp is np
        self.gen = np.random.default_rng(seed) if self.is_numpy else xp.random.RandomState(seed)

    def uniform(self, size):
        """float64 draws in [0, 1)."""
        return self.gen.random(size) if self.is_numpy else self.gen.random_sample(size)

    def normal(self, size):
        return self.gen.standard_normal(size)

    def gamma(self, alpha, size):
        """Standard gamma draws (scale 1); ``alpha`` broadcasts to ``size``; alpha 0 gives 0."""
        return self.gen.standard_gamma(alpha, size)

    def poisson(self, lam, size):
        return self.gen.poisson(lam, size)

    def integers(self, low, high, size):
        if self.is_numpy:
            return self.gen.integers(low, high, size, dtype=np.int64)
        return self.gen.randint(low, high, size, dtype=np.int64)

    def permutation(self, n):
        return self.gen.permutation(n)


def generator(xp) -> _Draws:
    """The generator of array module ``xp`` (numpy or cupy), created from its seed on first use."""
    key = xp.__name__
    gen = _generators.get(key)
    if gen is None:
        gen = _generators[key] = _Draws(xp, _seeds.get(key, _DEFAULT_SEED))
    return gen


def seed_generators(seed: int, modules=("numpy", "cupy")) -> None:
    """Re-seed the generators of the named array modules (the next draw starts the new stream)."""
    for key in modules:
        _seeds[key] = int(seed)
        _generators.pop(key, None)


# ----------------------------------------------------------------------------
# Samplers (float64 draws; the op casts to its output dtype)
# ----------------------------------------------------------------------------


def _sample_uniform(g, size, low, high):
    return low + (high - low) * g.uniform(size)


def _sample_normal(g, size, loc, scale):
    return loc + scale * g.normal(size)


def _sample_gamma(g, size, alpha, beta):
    # alpha: shape, beta: scale (MXNet's sampler; note the pdf op reads beta as a rate)
    return g.gamma(alpha, size) * beta


def _sample_exponential(g, size, lam):
    # MXNet: -log(1 - u) / lam
    return -g.xp.log1p(-g.uniform(size)) / lam


def _sample_poisson(g, size, lam):
    return g.poisson(lam, size).astype(np.float64)


def _sample_negative_binomial(g, size, k, p):
    # MXNet: lambda ~ Gamma(k, scale (1 - p) / p), sample ~ Poisson(lambda): failures before the k-th success
    lam = g.gamma(k, size) * ((1.0 - p) / p)
    return g.poisson(lam, size).astype(np.float64)


def _sample_generalized_negative_binomial(g, size, mu, alpha):
    # MXNet: lambda = mu if alpha == 0 else Gamma(1/alpha, scale alpha * mu); sample ~ Poisson(lambda)
    xp = g.xp
    alpha = xp.asarray(alpha, dtype=np.float64)
    mu = xp.asarray(mu, dtype=np.float64)
    zero = alpha == 0
    safe = xp.where(zero, 1.0, alpha)
    lam = xp.where(zero, mu, g.gamma(1.0 / safe, size) * safe * mu)
    return g.poisson(xp.broadcast_to(lam, size), size).astype(np.float64)


# name -> (sampler, [(param, default, check, what)], MXNet's input names of the _sample_ op)
_POSITIVE = (lambda v: v > 0, "> 0")
_NONNEG = (lambda v: v >= 0, ">= 0")
_PROB = (lambda v: 0 < v <= 1, "in (0, 1]")
_DISTRIBUTIONS: dict[str, tuple[Callable, list[tuple[str, float, Any]], tuple[str, ...]]] = {
    "uniform": (_sample_uniform, [("low", 0.0, None), ("high", 1.0, None)], ("low", "high")),
    "normal": (_sample_normal, [("loc", 0.0, None), ("scale", 1.0, _POSITIVE)], ("mu", "sigma")),
    "gamma": (_sample_gamma, [("alpha", 1.0, _POSITIVE), ("beta", 1.0, _POSITIVE)], ("alpha", "beta")),
    "exponential": (_sample_exponential, [("lam", 1.0, _POSITIVE)], ("lam",)),
    "poisson": (_sample_poisson, [("lam", 1.0, _NONNEG)], ("lam",)),
    "negative_binomial": (_sample_negative_binomial, [("k", 1, _NONNEG), ("p", 1.0, _PROB)], ("k", "p")),
    "generalized_negative_binomial": (
        _sample_generalized_negative_binomial,
        [("mu", 1.0, _NONNEG), ("alpha", 1.0, _NONNEG)],
        ("mu", "alpha"),
    ),
}

_FLOAT_OUT = ("float16", "float32", "float64")
_MULTINOMIAL_OUT = ("uint8", "int32", "float16", "float32", "float64")


def _check_dtype(where, params, allowed):
    """``params`` when its ``dtype`` is None or one of ``allowed`` (MXNet's enum), else ParamError."""
    dt = params.get("dtype")
    if dt is not None and np.dtype(dt).name not in allowed:
        raise ParamError(f"{where}: parameter 'dtype' must be one of {list(allowed)}, got {np.dtype(dt).name!r}")
    return params


def _check_values(where, dist, values: dict):
    """ParamError for distribution parameters outside their domain (MXNet checks them at run time)."""
    for pname, _, check in _DISTRIBUTIONS[dist][1]:
        if check is not None and not check[0](values[pname]):
            raise ParamError(
                f"{where}: parameter {pname!r} of the {dist} distribution must be {check[1]}, got {values[pname]!r}"
            )
    if dist == "uniform" and values["high"] < values["low"]:
        raise ParamError(
            f"{where}: parameter 'high' must be >= 'low' (MXNet: low must be less or equal to high), "
            f"got low={values['low']!r}, high={values['high']!r}"
        )


def _out_dtype(params, default="float32"):
    dt = params.get("dtype")
    return np.dtype(default) if dt is None else np.dtype(dt)


def _fixed_type(dtype_of):
    """dtype rule of an op whose output dtype is a function of its params; inputs are left alone."""

    def infer(params, in_types, out_types, where="op"):
        return in_types, [dtype_of(params)] + list(out_types[1:])

    return infer


def _zero_grads(F, n, g):
    # MXNet's MakeZeroGradNodes: a sample is a constant of its inputs -> zero gradients
    return [F.zeros_like(x) if need else None for x, need in zip(n.inputs, n.needs)]


def _shape_param_prepare(params, node_name, where_op):
    shape = tuple(params.get("shape") or ())
    if any(d <= 0 for d in shape):
        raise ParamError(f"{where_op} {node_name!r}: every entry of parameter 'shape' must be > 0, got {shape}")
    return params


# ----------------------------------------------------------------------------
# _random_<distr>: scalar parameters, no inputs
# ----------------------------------------------------------------------------


def _register_random(dist):
    sampler, pspec, _ = _DISTRIBUTIONS[dist]
    name = f"_random_{dist}"
    params = {p: Param("int" if p == "k" else "float", d) for p, d, _ in pspec}
    params.update(shape=Param("shape", ()), ctx=Param("str", ""), dtype=Param("dtype", None))

    def prepare(p, node_name):
        _check_values(f"{name} {node_name!r}", dist, p)
        _check_dtype(f"{name} {node_name!r}", p, _FLOAT_OUT)
        return _shape_param_prepare(p, node_name, name)

    def forward(xp, *, shape, ctx, dtype, **values):
        args = [values[p] for p, _, _ in pspec]
        return sampler(generator(xp), tuple(shape), *args).astype(_out_dtype({"dtype": dtype}))

    aliases = {"uniform": ("uniform", "random_uniform"), "normal": ("normal", "random_normal")}.get(
        dist, (f"random_{dist}",)
    )
    register(
        name,
        aliases=aliases,
        inputs=(),
        params=params,
        prepare=prepare,
        forward=forward,
        infer_shape=_random_shape,
        infer_type=_fixed_type(_out_dtype),
        is_random=True,
        doc=f"Draws from the {dist} distribution with scalar parameters ({', '.join(params)}).",
    )

    like = f"_random_{dist}_like"
    like_params = {p: Param("int" if p == "k" else "float", d) for p, d, _ in pspec}

    def like_prepare(p, node_name):
        _check_values(f"{like} {node_name!r}", dist, p)
        return p

    def like_forward(xp, data, **values):
        args = [values[p] for p, _, _ in pspec]
        return sampler(generator(xp), data.shape, *args).astype(data.dtype)

    def like_type(params, in_types, out_types, where="op"):
        t = in_types[0] if in_types[0] is not None else out_types[0]
        check_float(where, "data", t)
        return [t], [t]

    register(
        like,
        inputs=("data",),
        params=like_params,
        prepare=like_prepare,
        forward=like_forward,
        infer_shape=lambda p, i, o, w: (i, [i[0]]) if i[0] is not None else ([o[0]], o),
        infer_type=like_type,
        gradient=_zero_grads,
        is_random=True,
        doc=f"Draws from the {dist} distribution in the shape and dtype of ``data``.",
    )


def _random_shape(params, in_shapes, out_shapes, where):
    shape = tuple(params["shape"])
    if shape:
        return in_shapes, [shape]
    if out_shapes[0] is not None:
        # MXNet infers an unset shape from the consumers; symgrad's forward draws from its parameters only
        raise ShapeError(
            f"{where}: parameter 'shape' is not set; MXNet would take the output shape "
            f"{tuple(out_shapes[0])} from the consumers, symgrad needs it given: pass "
            f"shape={tuple(out_shapes[0])}"
        )
    return in_shapes, out_shapes


for _dist in _DISTRIBUTIONS:
    _register_random(_dist)


# -- randint --------------------------------------------------------------------------------------------


def _randint_prepare(p, node_name):
    where = f"_random_randint {node_name!r}"
    _check_dtype(where, p, ("int32", "int64"))
    if p["high"] <= p["low"]:
        raise ParamError(
            f"{where}: parameter 'high' must be > 'low' (the interval [low, high) must hold an "
            f"integer), got low={p['low']}, high={p['high']}"
        )
    return _shape_param_prepare(p, node_name, "_random_randint")


register(
    "_random_randint",
    aliases=("random_randint", "_npi_random_randint"),
    inputs=(),
    params={
        "low": Param("int"),
        "high": Param("int"),
        "shape": Param("shape", ()),
        "ctx": Param("str", ""),
        "dtype": Param("dtype", None),
    },
    prepare=_randint_prepare,
    forward=lambda xp, low, high, shape, ctx, dtype: (
        generator(xp).integers(low, high, tuple(shape)).astype(_out_dtype({"dtype": dtype}, "int32"))
    ),
    infer_shape=_random_shape,
    infer_type=_fixed_type(lambda p: _out_dtype(p, "int32")),
    is_random=True,
    doc="Integers drawn uniformly from [low, high) (int32 by default).",
)


# ----------------------------------------------------------------------------
# _sample_<distr>: parameters as input arrays
# ----------------------------------------------------------------------------


def _multi_shape(params, in_shapes, out_shapes, where):
    sshape = tuple(params["shape"])
    known = None
    for s in in_shapes:
        if s is not None:
            if known is not None and tuple(s) != known:
                raise ShapeError(f"{where}: the parameter inputs must have the same shape, got {known} and {tuple(s)}")
            known = tuple(s)
    out = out_shapes[0]
    if known is None and out is not None and len(out) >= len(sshape):
        known = tuple(out[: len(out) - len(sshape)])
    if known is None:
        return in_shapes, out_shapes
    return [known] * len(in_shapes), [known + sshape]


def _multi_type(params, in_types, out_types, where="op"):
    known = next((t for t in in_types if t is not None), None)
    if known is None:
        return in_types, [_out_dtype(params)]
    names = ("input 0", "input 1")
    for t, n in zip(in_types, names):
        if t is not None:
            check_float(where, n, t)
            if np.dtype(t) != np.dtype(known):
                raise TypeError(
                    f"{where}: the parameter inputs must have the same dtype, got {np.dtype(known)} and {np.dtype(t)}"
                )
    return [known] * len(in_types), [_out_dtype(params)]


def _register_sample(dist):
    sampler, _, inames = _DISTRIBUTIONS[dist]
    name = f"_sample_{dist}"

    def forward(xp, *args, shape, dtype):
        sshape = tuple(shape)
        base = args[0].shape
        # each parameter element broadcast over its trailing block of ``shape`` samples
        expanded = [a.astype(np.float64).reshape(base + (1,) * len(sshape)) for a in args]
        try:
            draws = sampler(generator(xp), base + sshape, *expanded)
        except ValueError as exc:  # numpy refuses e.g. a negative Poisson rate or gamma shape
            raise ValueError(f"{name}: invalid distribution parameters in ({', '.join(inames)}): {exc}") from None
        return draws.astype(_out_dtype({"dtype": dtype}))

    register(
        name,
        aliases=(f"sample_{dist}",),
        inputs=inames,
        params={"shape": Param("shape", ()), "dtype": Param("dtype", None)},
        prepare=lambda p, node_name: _shape_param_prepare(
            _check_dtype(f"{name} {node_name!r}", p, _FLOAT_OUT), node_name, name
        ),
        forward=forward,
        infer_shape=_multi_shape,
        infer_type=_multi_type,
        gradient=_zero_grads,
        is_random=True,
        doc=f"Draws ``shape`` samples from the {dist} distribution of each element of ({', '.join(inames)}).",
    )


for _dist in _DISTRIBUTIONS:
    _register_sample(_dist)


# -- multinomial ----------------------------------------------------------------------------------------


def _multinomial_out_shape(params, data_shape):
    sshape = tuple(params["shape"])
    if len(data_shape) == 1:
        return sshape or (1,)
    return tuple(data_shape[:-1]) + sshape


@wait_for_first_input
def _multinomial_shape(params, in_shapes, out_shapes, where):
    (data,) = in_shapes
    if len(data) < 1:
        raise ShapeError(f"{where}: input 'data' must have at least one axis (the k outcomes), got {tuple(data)}")
    out = _multinomial_out_shape(params, data)
    return in_shapes, [out] * (2 if params["get_prob"] else 1)


def _multinomial_type(params, in_types, out_types, where="op"):
    t = in_types[0]
    check_float(where, "data", t)
    outs = [np.dtype(params["dtype"])]
    if params["get_prob"]:
        outs.append(t)
    return in_types, outs


def _multinomial_fwd(xp, data, shape, get_prob, dtype):
    k = data.shape[-1]
    rows = data.reshape(-1, k)
    n = rows.shape[0]
    out_shape = _multinomial_out_shape({"shape": shape}, data.shape)
    m = max(1, int(np.prod(out_shape)) // max(n, 1))
    # MXNet: the float32 running sum of each row as a CDF; a draw u picks the first outcome whose CDF >= u
    cdf = xp.cumsum(rows.astype(np.float64), axis=1).astype(np.float32)
    u = generator(xp).uniform((n, m)).astype(np.float32)
    idx = (cdf[:, None, :] < u[:, :, None]).sum(axis=2)
    idx = xp.minimum(idx, k - 1)  # rounding: a row summing to slightly below u picks the last outcome
    out = idx.reshape(out_shape).astype(np.dtype(dtype))
    if not get_prob:
        return (out,)  # a callable num_outputs: the plan unpacks a tuple
    logp = xp.log(xp.take_along_axis(rows, idx, axis=1)).reshape(out_shape).astype(data.dtype)
    return out, logp


def _multinomial_grad(F, n, g):
    if not n.params["get_prob"]:
        return _zero_grads(F, n, g)
    # output 1 = log p[sample]: d/dp[k] = sum over draws that picked k of g1 / p[k] (the sample is constant);
    # output 0 (the integer sample) passes nothing back, as in MXNet
    return [F._backward_sample_multinomial(g[1], n.inputs[0], n.outputs[0], **n.params)]


register(
    "_sample_multinomial",
    aliases=("sample_multinomial",),
    inputs=("data",),
    params={"shape": Param("shape", ()), "get_prob": Param("bool", False), "dtype": Param("dtype", np.dtype(np.int32))},
    prepare=lambda p, node_name: _shape_param_prepare(
        _check_dtype(f"_sample_multinomial {node_name!r}", p, _MULTINOMIAL_OUT), node_name, "_sample_multinomial"
    ),
    num_outputs=lambda p: 2 if p["get_prob"] else 1,
    forward=_multinomial_fwd,
    infer_shape=_multinomial_shape,
    infer_type=_multinomial_type,
    gradient=_multinomial_grad,
    is_random=True,
    doc="Draws outcome indices from the categorical distributions on the last axis of ``data`` (with "
    "``get_prob``, also their log probabilities).",
)


def _multinomial_bwd(xp, g, data, sample, shape, get_prob, dtype):
    k = data.shape[-1]
    rows = data.reshape(-1, k)
    n = rows.shape[0]
    idx = sample.reshape(n, -1).astype(np.int64)
    gs = g.reshape(n, -1).astype(np.float64) / xp.take_along_axis(rows, idx, axis=1).astype(np.float64)
    out = xp.zeros((n, k), dtype=np.float64)
    for j in range(idx.shape[1]):  # draws of one row may pick the same outcome: accumulate
        out[xp.arange(n), idx[:, j]] += gs[:, j]
    return out.reshape(data.shape).astype(data.dtype)


register(
    "_backward_sample_multinomial",
    inputs=("ograd", "data", "sample"),
    params={"shape": Param("shape", ()), "get_prob": Param("bool", False), "dtype": Param("dtype", np.dtype(np.int32))},
    forward=_multinomial_bwd,
    infer_shape=output_like(1),
    infer_type=output_like(1),
    gradient=None,
    grad_undefined_reason="_sample_multinomial's log-probability gradient is the fused hidden op "
    "_backward_sample_multinomial, which has no gradient rule: second-order gradients through it are not defined",
    doc="Gradient of _sample_multinomial's log probabilities: g / p scattered to the sampled outcomes (hidden).",
)


# -- shuffle --------------------------------------------------------------------------------------------


def _shuffle_fwd(xp, data):
    if data.ndim == 0 or data.shape[0] <= 1:
        return data.copy()
    return data[generator(xp).permutation(data.shape[0])]


register(
    "_shuffle",
    aliases=("shuffle", "_npi_shuffle"),
    inputs=("data",),
    forward=_shuffle_fwd,
    infer_shape=lambda p, i, o, w: (i, [i[0]]) if i[0] is not None else ([o[0]], o),
    gradient=None,
    grad_undefined_reason="shuffling is not differentiable (MXNet registers no gradient for _shuffle)",
    is_random=True,
    doc="A random permutation of ``data`` along its first axis.",
)


# -- unique zipfian -------------------------------------------------------------------------------------


def _zipfian_prepare(p, node_name):
    where = f"_sample_unique_zipfian {node_name!r}"
    shape = tuple(p["shape"])
    if len(shape) != 2:
        raise ParamError(f"{where}: parameter 'shape' must be 2-d (batch_size, num_sampled), got {shape}")
    if p["range_max"] < 1:
        raise ParamError(f"{where}: parameter 'range_max' must be >= 1, got {p['range_max']}")
    if shape[1] > p["range_max"]:
        raise ParamError(
            f"{where}: cannot draw {shape[1]} distinct samples from range_max={p['range_max']} "
            "classes (MXNet: number of samples cannot exceed the number of possible classes)"
        )
    return p


def _zipfian_fwd(xp, range_max, shape):
    batch, num = shape
    g = generator(xp)
    log_range = math.log(range_max)
    samples = np.zeros((batch, num), np.int64)
    tries = np.zeros((batch,), np.int64)
    for b in range(batch):
        seen: dict[int, None] = {}
        count = 0
        while len(seen) < num:
            u = float(g.uniform(()))
            v = int(math.floor(math.exp(u * log_range) + 0.5)) - 1  # C lround (the argument is positive)
            count += 1
            if v not in seen:
                samples[b, len(seen)] = v
                seen[v] = None
        tries[b] = count
    return xp.asarray(samples), xp.asarray(tries)


register(
    "_sample_unique_zipfian",
    inputs=(),
    params={"range_max": Param("int"), "shape": Param("shape", ())},
    prepare=_zipfian_prepare,
    num_outputs=2,
    forward=_zipfian_fwd,
    infer_shape=lambda p, i, o, w: (i, [tuple(p["shape"]), (p["shape"][0],)]),
    infer_type=lambda p, i, o, w: (i, [np.dtype(np.int64), np.dtype(np.int64)]),
    is_random=True,
    doc="Distinct classes from an approximately log-uniform (Zipfian) distribution over [0, range_max), and the "
    "number of draws each row took.",
)


# ----------------------------------------------------------------------------
# Probability densities (deterministic, differentiable)
# ----------------------------------------------------------------------------


def _expand(xp, p, sample_shape):
    """Parameter ``p`` (a leading subshape of the sample) broadcast over the trailing sample axes."""
    return xp.broadcast_to(p.reshape(p.shape + (1,) * (len(sample_shape) - p.ndim)), sample_shape)


def _pdf_shape(params, in_shapes, out_shapes, where):
    sample = in_shapes[0]
    pars = in_shapes[1:]
    known = next((tuple(s) for s in pars if s is not None), None)
    for s in pars:
        if s is not None and tuple(s) != known:
            raise ShapeError(
                f"{where}: the distribution parameters must have the same shape, got {known} and {tuple(s)}"
            )
    if sample is None:
        return in_shapes, out_shapes
    sample = tuple(sample)
    if known is not None:
        if len(known) > len(sample) or sample[: len(known)] != known:
            raise ShapeError(
                f"{where}: the parameters' shape {known} must be the leading part of the shape of 'sample' {sample}"
            )
        return [sample] + [known] * len(pars), [sample]
    return in_shapes, [sample]


def _pdf_type(params, in_types, out_types, where="op"):
    known = next((t for t in list(in_types) + list(out_types) if t is not None), None)
    if known is None:
        return in_types, out_types
    for t in in_types:
        if t is not None:
            check_float(where, "sample", t)
            if np.dtype(t) != np.dtype(known):
                raise TypeError(f"{where}: inputs must have the same dtype, got {np.dtype(known)} and {np.dtype(t)}")
    return [known] * len(in_types), [known]


def _pdf_forward(logpdf):
    """forward(xp, sample, *params, is_log) from ``logpdf(xp, x, *params) -> float64 log density``."""

    def forward(xp, x, *pars, is_log):
        x64 = x.astype(np.float64)
        ps = [_expand(xp, p.astype(np.float64), x.shape) for p in pars]
        lp = logpdf(xp, x64, *ps)
        return (lp if is_log else xp.exp(lp)).astype(x.dtype)

    return forward


def _lgamma(xp, x):
    return log_gamma(xp, x)


def _logpdf_uniform(xp, x, low, high):
    return -xp.log(high - low) + 0.0 * x  # no check that x is in the support (as MXNet)


def _logpdf_normal(xp, x, mu, sigma):
    return -0.5 * (x - mu) ** 2 / (sigma * sigma) - xp.log(math.sqrt(2 * math.pi) * sigma)


def _logpdf_gamma(xp, x, alpha, beta):
    # MXNet's pdf reads beta as a rate: a log b + (a - 1) log x - b x - lgamma(a)
    return alpha * xp.log(beta) + (alpha - 1) * xp.log(x) - beta * x - _lgamma(xp, alpha)


def _logpdf_exponential(xp, x, lam):
    return xp.log(lam) - lam * x


def _logpdf_poisson(xp, x, lam):
    return x * xp.log(lam) - _lgamma(xp, x + 1) - lam


def _pdf_grad(rule):
    """Gradient of a pdf op from ``rule(F, x, params_expanded, scale) -> [d sample, d params...]`` where
    ``scale`` is g (is_log) or g * pdf; parameter gradients are summed back over the sample axes."""

    def gradient(F, n, g):
        x, pars = n.inputs[0], n.inputs[1:]
        y = n.outputs[0]
        scale = g[0] if n.params["is_log"] else g[0] * y
        expanded = [F._pdf_param_expand(p, x) for p in pars]
        grads = rule(F, x, expanded, scale)
        out = [grads[0] if n.needs[0] else None]
        for p, gp, need in zip(pars, grads[1:], n.needs[1:]):
            out.append(F._pdf_param_reduce(gp, p) if need else None)
        return out

    return gradient


# d log p / d(x, params), times scale (= g for is_log, g * p otherwise):
# uniform: log p = -log(h - l): d/dl = 1/(h - l), d/dh = -1/(h - l), d/dx = 0
def _grad_uniform(F, x, ps, s):
    low, high = ps
    w = s / (high - low)
    return [F.zeros_like(x), w, -w]


# normal: log p = -(x - u)^2 / (2 s^2) - log(sqrt(2 pi) s)
#   d/dx = (u - x)/s^2, d/du = (x - u)/s^2, d/ds = ((x - u)^2 - s^2)/s^3
def _grad_normal(F, x, ps, s):
    mu, sigma = ps
    d = x - mu
    var = sigma * sigma
    return [s * (-d) / var, s * d / var, s * (d * d - var) / (var * sigma)]


# gamma (beta a rate): log p = a log b + (a - 1) log x - b x - lgamma(a)
#   d/dx = (a - 1)/x - b, d/da = log b + log x - psi(a), d/db = a/b - x
def _grad_gamma(F, x, ps, s):
    a, b = ps
    return [s * ((a - 1.0) / x - b), s * (F.log(b) + F.log(x) - F._polygamma(a, n=0)), s * (a / b - x)]


# exponential: log p = log l - l x: d/dx = -l, d/dl = 1/l - x
def _grad_exponential(F, x, ps, s):
    (lam,) = ps
    return [s * (-lam), s * (1.0 / lam - x)]


# poisson: log p = x log l - lgamma(x + 1) - l: d/dl = x/l - 1; the sample is discrete (no gradient, as MXNet)
def _grad_poisson(F, x, ps, s):
    (lam,) = ps
    return [None, s * (x / lam - 1.0)]


def _logpdf_negative_binomial(xp, x, k, p):
    # MXNet: failures x before the k-th success, p the success probability (its docs call p the failure one):
    # lgamma(x + k) - lgamma(x + 1) - lgamma(k) + k log p + x log(1 - p)
    return _lgamma(xp, x + k) - _lgamma(xp, x + 1) - _lgamma(xp, k) + k * xp.log(p) + x * xp.log1p(-p)


def _logpdf_generalized_negative_binomial(xp, x, mu, alpha):
    # MXNet's reparameterization: k = 1 / alpha, p = 1 / (mu alpha + 1)
    return _logpdf_negative_binomial(xp, x, 1.0 / alpha, 1.0 / (mu * alpha + 1.0))


# negative binomial: d/dk = psi(x + k) - psi(k) + log p, d/dp = k/p - x/(1 - p); the sample is discrete
def _nb_partials(F, x, k, p):
    return F._polygamma(x + k, n=0) - F._polygamma(k, n=0) + F.log(p), k / p - x / (1.0 - p)


def _grad_negative_binomial(F, x, ps, s):
    dk, dp = _nb_partials(F, x, *ps)
    return [None, s * dk, s * dp]


# generalized: k = 1/alpha, p = 1/(mu alpha + 1) = 1/den:  dp/dmu = -alpha/den^2, dp/dalpha = -mu/den^2,
# dk/dalpha = -1/alpha^2  (chain rule through the negative binomial's partials)
def _grad_generalized_negative_binomial(F, x, ps, s):
    mu, alpha = ps
    den = mu * alpha + 1.0
    dk, dp = _nb_partials(F, x, 1.0 / alpha, 1.0 / den)
    dp_den2 = dp / (den * den)
    return [None, s * (-(dp_den2 * alpha)), s * (-(dk / (alpha * alpha)) - dp_den2 * mu)]


_PDFS = {
    "uniform": (_logpdf_uniform, _grad_uniform, ("low", "high"), ()),
    "normal": (_logpdf_normal, _grad_normal, ("mu", "sigma"), ()),
    "gamma": (_logpdf_gamma, _grad_gamma, ("alpha", "beta"), ()),
    "exponential": (_logpdf_exponential, _grad_exponential, ("lam",), ()),
    "poisson": (_logpdf_poisson, _grad_poisson, ("lam",), ("sample",)),
    "negative_binomial": (_logpdf_negative_binomial, _grad_negative_binomial, ("k", "p"), ("sample",)),
    "generalized_negative_binomial": (
        _logpdf_generalized_negative_binomial,
        _grad_generalized_negative_binomial,
        ("mu", "alpha"),
        ("sample",),
    ),
}

for _dist, (_lp, _rule, _names, _nograd) in _PDFS.items():
    register(
        f"_random_pdf_{_dist}",
        aliases=(f"random_pdf_{_dist}",),
        inputs=("sample",) + _names,
        params={"is_log": Param("bool", False)},
        forward=_pdf_forward(_lp),
        infer_shape=_pdf_shape,
        infer_type=_pdf_type,
        no_grad_inputs=_nograd,
        gradient=_pdf_grad(_rule),
        doc=f"The {_dist} density (or its log, ``is_log``) of ``sample`` under parameters ({', '.join(_names)}) "
        "given per leading index of the sample.",
    )


def _expand_fwd(xp, p, like):
    return xp.ascontiguousarray(_expand(xp, p, like.shape))


def _reduce_fwd(xp, g, like):
    extra = tuple(range(like.ndim, g.ndim))
    return g.sum(axis=extra).reshape(like.shape) if extra else g.copy()


def _adjoint_pair(names, forwards, docs):
    """``elemwise.adjoint_pair`` with the output in data's dtype and no gradient sought for ``like``."""
    adjoint_pair(names, forwards, docs, infer_type=output_like(0), no_grad_inputs=("like",))


# expand: E p = p broadcast over trailing axes; reduce: R g = sum over those axes. <R g, p> = <g, E p>:
# each is the other's adjoint (both linear; the ``like`` input only gives a shape)
_adjoint_pair(
    ("_pdf_param_expand", "_pdf_param_reduce"),
    (_expand_fwd, _reduce_fwd),
    (
        "``data`` broadcast over the trailing axes of ``like`` (hidden; pdf gradients).",
        "``data`` summed over its trailing axes down to the shape of ``like`` (hidden; pdf gradients).",
    ),
)


# ----------------------------------------------------------------------------
# Dirichlet density: vector samples
# ----------------------------------------------------------------------------
# alpha (S..., k) holds one parameter vector per leading index; sample (S..., N..., k) holds vectors on its
# last axis; the output is one density per sample vector, shape sample.shape[:-1] ((1,) for a single vector):
#   log p(x) = sum_j (a_j - 1) log x_j + lgamma(sum_j a_j) - sum_j lgamma(a_j)
#   d log p / d x_j = (a_j - 1) / x_j,   d log p / d a_j = log x_j + psi(sum a) - psi(a_j)
# Gradients are composed from the expand/reduce pairs below (each the other's adjoint) and elementwise ops.


def _dirichlet_check(alpha, sample, where):
    if (
        len(alpha) < 1
        or len(sample) < len(alpha)
        or tuple(sample[: len(alpha) - 1]) != tuple(alpha[:-1])
        or sample[-1] != alpha[-1]
    ):
        raise ShapeError(
            f"{where}: 'alpha' {tuple(alpha)} must be (S..., k) and 'sample' (S..., N..., k) with the "
            f"same S and k, got sample {tuple(sample)}"
        )


@wait_for_inputs(0, 1)
def _dirichlet_shape(params, in_shapes, out_shapes, where):
    sample, alpha = in_shapes
    _dirichlet_check(alpha, sample, where)
    return in_shapes, [tuple(sample[:-1]) if len(sample) > 1 else (1,)]


def _alpha_expand(xp, alpha, sample_shape):
    """alpha (S..., k) broadcast to a sample's (S..., N..., k)."""
    middle = len(sample_shape) - alpha.ndim
    return xp.broadcast_to(alpha.reshape(alpha.shape[:-1] + (1,) * middle + alpha.shape[-1:]), sample_shape)


def _dirichlet_fwd(xp, x, alpha, is_log):
    x64, a = x.astype(np.float64), _alpha_expand(xp, alpha.astype(np.float64), x.shape)
    lp = ((a - 1) * xp.log(x64)).sum(-1) + log_gamma(xp, a.sum(-1)) - log_gamma(xp, a).sum(-1)
    out = lp if is_log else xp.exp(lp)
    return out.reshape(x.shape[:-1] if x.ndim > 1 else (1,)).astype(x.dtype)


def _dirichlet_grad(F, n, g):
    x, alpha = n.inputs
    scale = g[0] if n.params["is_log"] else g[0] * n.outputs[0]
    s = F._dirichlet_spread(scale, x)  # the per-vector factor on every component
    a = F._dirichlet_alpha_expand(alpha, x)
    psi_sum = F._polygamma(F.sum(a, axis=-1, keepdims=True), n=0)
    dx = s * (a - 1.0) / x
    da = s * F.broadcast_sub(F.broadcast_add(F.log(x), psi_sum), F._polygamma(a, n=0))
    return [dx if n.needs[0] else None, F._dirichlet_alpha_reduce(da, alpha) if n.needs[1] else None]


register(
    "_random_pdf_dirichlet",
    aliases=("random_pdf_dirichlet",),
    inputs=("sample", "alpha"),
    params={"is_log": Param("bool", False)},
    forward=_dirichlet_fwd,
    infer_shape=_dirichlet_shape,
    infer_type=_pdf_type,
    gradient=_dirichlet_grad,
    doc="The Dirichlet density (or its log, ``is_log``) of the vectors on the last axis of ``sample``.",
)


def _spread_fwd(xp, s, like):
    return xp.ascontiguousarray(xp.broadcast_to(s.reshape(like.shape[:-1] + (1,)), like.shape))


def _gather_fwd(xp, g, like):
    return g.sum(axis=-1).reshape(like.shape)


def _alpha_reduce_fwd(xp, g, like):
    middle = tuple(range(like.ndim - 1, g.ndim - 1))
    return g.sum(axis=middle).reshape(like.shape) if middle else g.copy()


# spread: s (one value per vector) -> every component of its vector; its adjoint sums each vector
_adjoint_pair(
    ("_dirichlet_spread", "_dirichlet_gather"),
    (_spread_fwd, _gather_fwd),
    (
        "One value per sample vector spread over the vector's components (hidden; Dirichlet gradients).",
        "The sum over each vector's components, shaped like ``like`` (hidden; Dirichlet gradients).",
    ),
)
# alpha expand: (S..., k) -> (S..., N..., k); its adjoint sums the N axes
_adjoint_pair(
    ("_dirichlet_alpha_expand", "_dirichlet_alpha_reduce"),
    (lambda xp, alpha, like: xp.ascontiguousarray(_alpha_expand(xp, alpha, like.shape)), _alpha_reduce_fwd),
    (
        "alpha broadcast over a sample's middle axes (hidden; Dirichlet gradients).",
        "A sample-shaped gradient summed over the middle axes down to alpha's shape (hidden).",
    ),
)
