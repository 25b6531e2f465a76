"""Elementwise operators: unary math, binary same-shape, scalar and broadcast forms.

Each registration keeps forward, shape rule and gradient a few lines apart.
Gradient rules build Symbols through ``F`` and receive ``n`` (the node: its
``inputs``/``outputs`` as Symbols, ``params``) and ``g`` (one head gradient
Symbol per output). Derivations are written next to each rule.

dtype semantics follow MXNet 1.9: an op keeps its input dtype (``int32`` in,
``int32`` out, results truncated toward zero), scalar operands are first cast
to the input dtype (``DType(scalar)``), comparisons return 0/1 in the input
dtype. Special functions (erf, erfinv, gamma, gammaln, polygamma) are written
with ``xp`` primitives only, evaluated in float64, so they run on CuPy too.
"""

from __future__ import annotations

import dis
import functools
import math
import operator

import numpy as np

from .. import util
from ..base import ParamError, ShapeError
from ..opdef import (
    Param,
    broadcast_shapes,
    elementwise,
    float_inputs,
    get_op,
    masked,
    output_like,
    register,
    same_shape,
    wait_for_inputs,
)


def _keep(r, like):
    """Keep the input's dtype (MXNet semantics: ``int_array + 2.5`` stays int)."""
    if r.dtype != like.dtype:
        return r.astype(like.dtype)
    return r


def _is_int(dtype) -> bool:
    return np.dtype(dtype).kind in "iub"


def _zero_grad(F, n, g):
    """Differentiable almost nowhere or constant: every input gets no gradient."""
    return [None] * len(n.inputs)


# ----------------------------------------------------------------------------
# kernels: cheaper exact forms of a forward for known input dtypes (executor.plan, "Kernels")
# ----------------------------------------------------------------------------


def _float_kinds(in_types, kinds="fc") -> bool:
    """Every input dtype is floating (or complex): the ops below then keep that dtype by themselves."""
    for t in in_types:
        if np.dtype(t).kind not in kinds:
            return False
    return True


@functools.cache
def _largest(dtype) -> float:
    return float(np.finfo(dtype).max)


def _weak_scalar_fits(scalar, dtype) -> bool:
    """Whether ``scalar`` as a Python float (numpy casts it to the array's dtype, NEP 50) equals MXNet's
    ``DType(scalar)`` without an overflow warning: a finite scalar beyond the dtype's range overflows."""
    return not math.isfinite(scalar) or abs(scalar) <= _largest(np.dtype(dtype))


#: unary ops whose forward on a float/complex input is this ufunc itself (``_float_in`` passes floats as
#: they are and ``_keep`` then casts nothing); square only for real floats (x * x, numpy's square loop)
_UFUNC_UNARY = {
    name: (name, "fc")
    for name in (
        "tanh",
        "exp",
        "expm1",
        "log",
        "log1p",
        "log2",
        "log10",
        "sqrt",
        "sin",
        "cos",
        "tan",
        "sinh",
        "cosh",
        "arcsin",
        "arccos",
        "arctan",
        "arcsinh",
        "arccosh",
        "arctanh",
        "negative",
    )
}
_UFUNC_UNARY["square"] = ("square", "f")


# ----------------------------------------------------------------------------
# special functions (xp only, float64 inside)
# ----------------------------------------------------------------------------

_SQRT_PI = math.sqrt(math.pi)
_ERF_SPLIT = 2.5  # series below, continued fraction for erfc above
_ERFC_AT_SPLIT = math.erfc(_ERF_SPLIT)


def _erf_series(xp, x):
    """erf x = 2/sqrt(pi) e^(-x^2) sum_n 2^n x^(2n+1) / (2n+1)!!, for 0 <= x < 2.5.

    Every term is positive (no cancellation); 50 terms reach float64 precision at x = 2.5.
    """
    x2 = x * x
    term = x.copy()
    total = x.copy()
    for k in range(1, 50):
        term = term * (2.0 * x2 / (2 * k + 1))
        total = total + term
    return (2.0 / _SQRT_PI) * xp.exp(-x2) * total


def _erfc_cf_denominator(x):
    """f(x) with erfc x = e^(-x^2) / (sqrt(pi) f(x)), x >= 2.5, from the continued fraction
    f = x + (1/2)/(x + 1/(x + (3/2)/(x + ...))), evaluated bottom-up (60 levels)."""
    f = x.copy()
    for k in range(60, 0, -1):
        f = x + (k / 2.0) / f
    return f


def _erfc_cf(xp, x):
    return xp.exp(-x * x) / (_SQRT_PI * _erfc_cf_denominator(x))


def erf_erfc(xp, x):
    """(erf |x|, erfc |x|) in float64 with |x| handled by the accurate branch."""
    a = xp.abs(x)
    small = a < _ERF_SPLIT
    s = _erf_series(xp, xp.where(small, a, 0.0))
    c = _erfc_cf(xp, xp.where(small, _ERF_SPLIT, a))
    erf = xp.where(small, s, 1.0 - c)
    erfc = xp.where(small, 1.0 - s, c)
    return erf, erfc


def _erf(xp, x):
    x = x.astype(np.float64)
    erf, _ = erf_erfc(xp, x)
    return xp.sign(x) * erf


def _erfinv(xp, y):
    """Inverse of erf: Giles' single-precision approximation, then refined in float64.

    Centre (erfc(x) >= erfc(2.5)): two Halley steps on erf(x) - |y|. Tails: five Newton steps
    on log erfc(x) - log(1 - |y|), which is nearly quadratic in x and has derivative -2 f(x)
    (f the continued-fraction denominator), so |y| up to 1 - 1e-16 keeps full relative precision.
    """
    y = y.astype(np.float64)
    a = xp.abs(y)
    inside = a < 1.0
    a_in = xp.where(inside, a, 0.5)
    w = -xp.log((1.0 - a_in) * (1.0 + a_in))
    wc = w - 2.5
    p = 2.81022636e-08
    for c in (
        3.43273939e-07,
        -3.5233877e-06,
        -4.39150654e-06,
        0.00021858087,
        -0.00125372503,
        -0.00417768164,
        0.246640727,
        1.50140941,
    ):
        p = c + p * wc
    wt = xp.sqrt(w) - 3.0
    q = -0.000200214257
    for c in (
        0.000100950558,
        0.00134934322,
        -0.00367342844,
        0.00573950773,
        -0.0076224613,
        0.00943887047,
        1.00167406,
        2.83297682,
    ):
        q = c + q * wt
    x0 = xp.where(w < 5.0, p, q) * a_in
    tail = (1.0 - a_in) < _ERFC_AT_SPLIT
    x = xp.where(tail, 0.5, x0)
    for _ in range(2):
        erf, _ = erf_erfc(xp, x)
        r = erf - a_in
        d = (2.0 / _SQRT_PI) * xp.exp(-x * x)  # erf'
        x = x - r / (d + x * r)  # Halley: f'' = -2 x f'
    xt = xp.where(tail, xp.maximum(x0, _ERF_SPLIT), 3.0)
    log_target = xp.log1p(-a_in)
    for _ in range(5):
        f = _erfc_cf_denominator(xt)
        xt = xt + (-xt * xt - xp.log(_SQRT_PI * f) - log_target) / (2.0 * f)
    out = xp.where(tail, xt, x)
    out = xp.where(inside, out, xp.where(a == 1.0, np.inf, np.nan))
    return xp.sign(y) * out


# Lanczos approximation, g = 7, n = 9 (relative error ~1e-15 on [0.5, inf))
_LANCZOS_G = 7.0
_LANCZOS_C = (
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
)


def _lanczos(xp, x):
    """For x >= 0.5: (z + 0.5, t, A) with Gamma(x) = sqrt(2 pi) t^(z+1/2) e^-t A, z = x - 1."""
    z = x - 1.0
    a = xp.full_like(z, _LANCZOS_C[0])
    for i in range(1, len(_LANCZOS_C)):
        a = a + _LANCZOS_C[i] / (z + i)
    return z + 0.5, z + _LANCZOS_G + 0.5, a


def _sinpi(xp, x):
    """sin(pi x), exactly 0 at the integers: r = x - 2 round(x/2) in [-1, 1] is exact, and
    sin(pi r) = sign(r) sin(pi (1 - |r|)) folds |r| > 1/2 (1 - |r| is exact there too)."""
    r = x - 2.0 * xp.round(x / 2.0)
    a = xp.abs(r)
    return xp.sign(r) * xp.sin(math.pi * xp.where(a > 0.5, 1.0 - a, a))


def _gamma(xp, x):
    """Gamma(x); reflection Gamma(x) = pi / (sin(pi x) Gamma(1 - x)) below 0.5."""
    x = x.astype(np.float64)
    refl = x < 0.5
    xr = xp.where(refl, 1.0 - x, x)
    e, t, a = _lanczos(xp, xr)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        p = t ** (e / 2.0)  # t^e split in two halves so Gamma(171) does not overflow on the way
        g = math.sqrt(2 * math.pi) * p * (p * xp.exp(-t)) * a
        out = xp.where(refl, math.pi / (_sinpi(xp, x) * g), g)
    # exact (n-1)! at the positive integers, as C tgamma (and MXNet's integer gamma: 1, 1, 2, 6, ...)
    whole = x == xp.floor(x)
    table = whole & (x >= 1) & (x <= len(_FACTORIALS))  # False for NaN and +-inf
    fact = xp.asarray(_FACTORIALS)[(xp.where(table, x, 1) - 1).astype(np.int64)]
    out = xp.where(table, fact, out)
    # C tgamma: a pole at 0 (inf), a domain error (NaN) at the negative integers and -inf, +inf at +inf
    out = xp.where(x == np.inf, np.inf, out)
    return xp.where((x < 0) & whole, np.nan, out)


_FACTORIALS = np.array([float(math.factorial(k)) for k in range(171)])  # Gamma(1..171), correctly rounded


def log_gamma(xp, x):
    """log |Gamma(x)|; reflection log pi - log|sin(pi x)| - lgamma(1 - x) below 0.5."""
    x = x.astype(np.float64)
    refl = x < 0.5
    xr = xp.where(refl, 1.0 - x, x)
    e, t, a = _lanczos(xp, xr)
    lg = 0.5 * math.log(2 * math.pi) + e * xp.log(t) - t + xp.log(a)
    with np.errstate(divide="ignore"):
        return xp.where(refl, math.log(math.pi) - xp.log(xp.abs(_sinpi(xp, x))) - lg, lg)


# Bernoulli numbers B_2, B_4, ..., B_20 for the asymptotic series of polygamma
_BERNOULLI_2K = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510, 43867 / 798, -174611 / 330)
_PG_SHIFT = 12


def _cot_derivative_poly(n):
    """Coefficients (low to high) of P_n with d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x)).

    P_0(c) = c and P_(k+1)(c) = -(1 + c^2) P_k'(c), since d/dx cot(pi x) = -pi (1 + cot^2).
    """
    p = [0.0, 1.0]
    for _ in range(n):
        d = [i * p[i] for i in range(1, len(p))] or [0.0]
        q = [0.0] * (len(d) + 2)
        for i, c in enumerate(d):
            q[i] -= c
            q[i + 2] -= c
        p = q
    return p


def _polygamma_large(xp, z, n):
    """Asymptotic series of psi^(n)(z) for z >= 12.5:
    psi(z) ~ ln z - 1/(2z) - sum B_2k / (2k z^2k);
    psi^(n)(z) ~ (-1)^(n+1) [(n-1)!/z^n + n!/(2 z^(n+1)) + sum B_2k (2k+n-1)!/((2k)! z^(2k+n))]."""
    if n == 0:
        s = xp.log(z) - 0.5 / z
        z2 = 1.0 / (z * z)
        zp = z2
        for k, b in enumerate(_BERNOULLI_2K, start=1):
            s = s - (b / (2 * k)) * zp
            zp = zp * z2
        return s
    s = math.factorial(n - 1) / z**n + math.factorial(n) / (2.0 * z ** (n + 1))
    for k, b in enumerate(_BERNOULLI_2K, start=1):
        s = s + (b * math.factorial(2 * k + n - 1) / math.factorial(2 * k)) / z ** (2 * k + n)
    return (-1) ** (n + 1) * s


def _polygamma(xp, x, n):
    """psi^(n)(x), the (n+1)-th derivative of log Gamma.

    For x >= 0.5 the recurrence psi^(n)(x) = psi^(n)(x + m) - (-1)^n n! sum_k (x + k)^-(n+1)
    shifts x past 12 for the asymptotic series; below 0.5 the reflection formula
    psi^(n)(x) = (-1)^n psi^(n)(1 - x) - pi^(n+1) P_n(cot(pi x)) applies.
    """
    x = x.astype(np.float64)
    refl = x < 0.5
    xr = xp.where(refl, 1.0 - x, x)
    acc = xp.zeros_like(xr)
    for k in range(_PG_SHIFT):
        acc = acc + 1.0 / (xr + k) ** (n + 1)
    v = _polygamma_large(xp, xr + _PG_SHIFT, n) - (-1) ** n * math.factorial(n) * acc
    r = x - xp.round(x)  # cot has period 1: exact reduction
    with np.errstate(divide="ignore", invalid="ignore"):
        c = xp.cos(math.pi * r) / xp.sin(math.pi * r)
        p = xp.zeros_like(x)
        for coef in reversed(_cot_derivative_poly(n)):
            p = p * c + coef
        return xp.where(refl, (-1) ** n * v - math.pi ** (n + 1) * p, v)


def _round_half_away(xp, x):
    """C ``round``: halves go away from zero (numpy's round goes to even)."""
    t = xp.trunc(x)
    return xp.where(xp.abs(x - t) == 0.5, t + xp.sign(x), xp.round(x))


def _rint_mxnet(xp, x):
    """MXNet ``rint``: floor if x - floor(x) <= ceil(x) - x, else ceil (halves go down)."""
    f, c = xp.floor(x), xp.ceil(x)
    return xp.where(x - f <= c - x, f, c)


def _fix_mxnet(xp, x):
    """MXNet ``fix``: of floor and ceil, the one nearer to zero."""
    f, c = xp.floor(x), xp.ceil(x)
    return xp.where(xp.abs(f) < xp.abs(c), f, c)


def stable_sigmoid(xp, x):
    """sigmoid(x) in x's dtype, stable for large |x|: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) otherwise."""
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


def _float_in(fn):
    """Evaluate ``fn`` on a float input (integer inputs go through float64, as C math does)."""

    def run(xp, x, **params):
        return fn(xp, x.astype(np.float64) if _is_int(x.dtype) else x, **params)

    run.float_math = True  # the result is truncated back to an integer input's dtype (see _unary)
    return run


def _float_math(fn):
    """Mark ``fn`` as computing in floating point (it casts integer inputs to float64 itself)."""
    fn.float_math = True
    return fn


# ----------------------------------------------------------------------------
# unary
# ----------------------------------------------------------------------------


def _unary(name, fwd, grad, aliases=(), doc="", params=None, infer_type=None, decisions=None, pinned=None):
    """Register ``y = fwd(xp, x, **params)``; ``grad(F, x, y, gy, **params)`` is a Symbol (or None).

    The output keeps the input dtype. ``decisions(xp, x, **params)``: the op's discrete choices
    (``registry.Decision``), for ops with kinks or jumps; ``pinned(xp, choices, x, **params)``: forward on the
    piece the recorded ``choices`` select (``OpDef.pinned``; cast to the input dtype here, as forward).
    """
    params = dict(params or {})
    reads = _reads(grad) if grad is not None else ()
    if grad is None:
        rule = _zero_grad
    elif getattr(fwd, "float_math", False) and reads:
        # one fused instruction for ograd * f'(x or y) (zero for an integer input, see below)
        backward = _fused_backward(name, grad, reads, params)

        def rule(F, n, g):
            values = [n.inputs[0] if r == "x" else n.outputs[0] for r in reads]
            return [getattr(F, backward)(g[0], *values, **n.params)]
    elif getattr(fwd, "float_math", False):
        # Float math on an integer input is truncated back to the integer dtype (MXNet's dtype rule):
        # y = trunc(f(x)) is piecewise constant in x, so dy/dx = 0, not f'(x) evaluated in integers
        # (tanh's 1 - y^2 with y truncated to 0 was 1 everywhere). The dtype is known only at bind:
        # the hidden _zero_grad_if_int zeroes the gradient then.
        def rule(F, n, g):
            return [F._zero_grad_if_int(grad(F, n.inputs[0], n.outputs[0], g[0], **n.params), n.inputs[0])]
    else:

        def rule(F, n, g):
            return [grad(F, *_operands(n, reads), g[0], **n.params)]

    def forward(xp, x, **p):
        return _keep(fwd(xp, x, **p), x)

    def pinned_rule(xp, choices, x, **p):  # the recorded piece, in the input dtype as forward
        return _keep(pinned(xp, choices, x, **p), x)

    specialize = None
    if name in _UFUNC_UNARY:
        ufunc, kinds = _UFUNC_UNARY[name]

        def specialize(xp, in_types):
            return (getattr(xp, ufunc), (), ()) if _float_kinds(in_types, kinds) else None

    return register(
        name,
        aliases=aliases,
        forward=forward,
        specialize=specialize,
        infer_shape=same_shape,
        infer_type=infer_type,
        gradient=rule,
        params=params,
        decisions=decisions,
        pinned=pinned_rule if pinned is not None else None,
        doc=doc or f"Elementwise {name}.",
    )


def _reads(grad):
    """Which of ``x`` and ``y`` a unary gradient rule ``grad(F, x, y, g, **params)`` reads: the ones its code
    loads (a rule of ``g`` alone, ``g * c``, builds a single node and gains nothing from fusing)."""
    x, y = grad.__code__.co_varnames[1:3]
    loaded = set()
    for ins in dis.get_instructions(grad):
        if ins.opname.startswith("LOAD_FAST"):
            loaded.update(ins.argval if isinstance(ins.argval, tuple) else (ins.argval,))
    return tuple(name for name, var in (("x", x), ("y", y)) if var in loaded)


def _operands(n, reads):
    """(x, y) for a rule that reads ``reads`` (``_reads``): the node's input and output, None for one it does not
    read (no Symbol is made for it)."""
    return (n.inputs[0] if "x" in reads else None, n.outputs[0] if "y" in reads else None)


#: unary op name -> (its fused backward's name, the rule it evaluates, what it reads: "x" and/or "y")
FUSED_BACKWARDS: dict[str, tuple] = {}


class _Eager:
    """``F`` for a unary gradient rule evaluated on arrays of a float dtype: ``F.square(y)`` is the op's own
    forward (its ufunc, where a float input's forward is exactly one), arithmetic is the array module's."""

    def __init__(self, xp):
        self._xp = xp

    def __getattr__(self, name):
        if name in _UFUNC_UNARY:
            fn = getattr(self._xp, _UFUNC_UNARY[name][0])
        else:
            fn = functools.partial(get_op(name).forward, self._xp)
        setattr(self, name, fn)
        return fn


@functools.cache
def _eager(xp):
    return _Eager(xp)


def _fused_backward(name, grad, reads, params):
    """Register ``_backward_<name>(ograd, data and/or out)``: ``ograd * f'`` as one instruction, evaluating the
    unary's rule ``grad`` on arrays instead of building its 2-4 nodes (tanh: square, rminus, mul) as symbols.

    Same values as the expansion: for a float input every ``F.op`` is the op's own forward and Python-float
    constants combine with arrays as scalar ops do (the array's dtype); a rule that promotes (a comparison
    times a float) is cast back to ograd's dtype. An integer input gets zeros (the expansion's
    ``_zero_grad_if_int``). Its own gradient differentiates the expansion, so every order works.
    """
    names = {"x": "data", "y": "out"}

    def apply(xp, g, values, p):
        like = values[0] if values else g  # the unary's input dtype (x, y and ograd share it)
        if _is_int(like.dtype):
            return xp.zeros_like(g)
        xy = dict(zip(reads, values))
        return grad(_eager(xp), xy.get("x"), xy.get("y"), g, **p).astype(g.dtype, copy=False)

    def forward(xp, g, *values, **p):
        return apply(xp, g, values, p)

    def specialize(xp, in_types, **p):
        # float inputs: the rule itself, nothing to dispatch (the test suite holds every rule to keeping
        # ograd's dtype, so no cast either); a rule reading one value gets it as both x and y
        if not _float_kinds(in_types):
            return None
        F = _eager(xp)
        if len(reads) == 2:
            return (lambda g, x, y: grad(F, x, y, g, **p), (), ())
        if p:
            return (lambda g, v: grad(F, v, v, g, **p), (), ())
        return (lambda g, v: grad(F, v, v, g), (), ())

    def expand(F, n_params):
        def build(g, *values):
            xy = dict(zip(reads, values))
            like = values[0]
            return F._zero_grad_if_int(grad(F, xy.get("x"), xy.get("y"), g, **n_params), like)

        return build

    def rule(F, n, h):
        return n.expansion_gradients(expand(F, n.params), h[0])

    backward = f"_backward_{name.lstrip('_')}"
    FUSED_BACKWARDS[name] = (backward, grad, reads)
    register(
        backward,
        inputs=("ograd", *[names[r] for r in reads]),
        forward=forward,
        specialize=specialize,
        params=params,
        infer_shape=same_shape,
        infer_type=output_like(0),
        gradient=rule,
        doc=f"Hidden: the backward of {name} as one instruction (ograd times its derivative).",
    )
    return backward


def _zero_grad_if_int_forward(xp, data, like):
    return xp.zeros_like(data) if _is_int(like.dtype) else data


register(
    "_zero_grad_if_int",
    inputs=("data", "like"),
    forward=_zero_grad_if_int_forward,
    # like's dtype known at bind and not an integer: the op is its first input (no instruction left to run)
    specialize=lambda xp, in_types: None if _is_int(in_types[1]) else (None, (), ()),
    infer_shape=output_like(0),
    infer_type=output_like(0),
    no_grad_inputs=("like",),
    # linear in data (identity or zero, fixed by like's dtype): the adjoint is the same map
    gradient=lambda F, n, g: [F._zero_grad_if_int(g[0], n.inputs[1]), None],
    doc="data, or zeros when like has an integer dtype (hidden: gradients w.r.t. integer inputs).",
)

_LN2, _LN10 = math.log(2.0), math.log(10.0)


def _sign_choice(xp, x):
    # |x|, sign x: the side of 0 decides (|x|' = sign x, sign jumps at 0)
    return elementwise(0, choice=xp.sign(x), value=x)


def _abs_pinned(xp, choices, x):
    # piece: sign(x0) x (0 where x0 = 0, as |x|' = sign 0 = 0 there; NaN where x0 was NaN)
    c = choices[0]
    return xp.where(c == 0, 0, c * x)


def _recorded_constant(xp, choices, x, **params):
    # piece of a piecewise-constant op (sign, rounding): the recorded choice is forward's value
    return choices[0].astype(x.dtype)  # a copy in forward's dtype (forward casts to it too)


def _rounded_choice(rounding):
    # rounding ops jump where x crosses a rounding boundary: the integer they pick is the choice
    def decide(xp, x):
        return elementwise(0, choice=rounding(xp, x), value=x)

    return decide


# -- sign, rounding, identity-like --------------------------------------------
_unary("negative", lambda xp, x: -x, lambda F, x, y, g: -g)  # d(-x) = -1
_unary("_copy", lambda xp, x: x.copy(), lambda F, x, y, g: g, aliases=("identity",))
# |x|' = sign x (0 at 0, as MXNet)
_unary("abs", lambda xp, x: xp.abs(x), lambda F, x, y, g: g * F.sign(x), decisions=_sign_choice, pinned=_abs_pinned)
# piecewise constant; pinned: the recorded sign
_unary("sign", lambda xp, x: xp.sign(x), None, decisions=_sign_choice, pinned=_recorded_constant)
for _name, _rounding, _doc in [
    ("round", _float_in(_round_half_away), "Round half away from zero."),
    ("rint", _float_in(_rint_mxnet), "Round to the nearest integer; halves go down (MXNet)."),
    ("ceil", _float_in(lambda xp, x: xp.ceil(x)), ""),
    ("floor", _float_in(lambda xp, x: xp.floor(x)), ""),
    ("trunc", _float_in(lambda xp, x: xp.trunc(x)), ""),
    ("fix", _float_in(_fix_mxnet), "Round toward zero."),
]:
    # pinned: the recorded rounded value (a constant piece)
    _unary(_name, _rounding, None, doc=_doc, decisions=_rounded_choice(_rounding), pinned=_recorded_constant)
_unary("zeros_like", lambda xp, x: xp.zeros_like(x), None)
_unary("ones_like", lambda xp, x: xp.ones_like(x), None)
_unary("logical_not", lambda xp, x: x == 0, None, doc="1 where x == 0, else 0 (in the input dtype).")
# BlockGrad: identity forward, no gradient through it (its input carries no dependency: ops behind it need none)
_unary("BlockGrad", lambda xp, x: x, None, aliases=("stop_gradient",)).no_grad_inputs = ("data",)

# -- exponentials and logarithms ------------------------------------------------
_unary("exp", _float_in(lambda xp, x: xp.exp(x)), lambda F, x, y, g: g * y)  # (e^x)' = e^x = y
_unary("expm1", _float_in(lambda xp, x: xp.expm1(x)), lambda F, x, y, g: g * (y + 1.0))  # (e^x - 1)' = y + 1
_unary("log", _float_in(lambda xp, x: xp.log(x)), lambda F, x, y, g: g / x)  # (ln x)' = 1/x
# (log2 x)' = 1/(x ln 2); (log10 x)' = 1/(x ln 10)
_unary("log2", _float_in(lambda xp, x: xp.log2(x)), lambda F, x, y, g: g / (x * _LN2))
_unary("log10", _float_in(lambda xp, x: xp.log10(x)), lambda F, x, y, g: g / (x * _LN10))
_unary("log1p", _float_in(lambda xp, x: xp.log1p(x)), lambda F, x, y, g: g / (x + 1.0))  # 1/(1+x)

# -- powers ---------------------------------------------------------------------
_unary("square", lambda xp, x: x * x, lambda F, x, y, g: g * (x * 2.0))  # (x^2)' = 2x
_unary("sqrt", _float_in(lambda xp, x: xp.sqrt(x)), lambda F, x, y, g: g / (y * 2.0))  # (x^1/2)' = 1/(2y)
# y = x^-1/2: y' = -1/2 x^-3/2 = -y / (2x)
_unary("rsqrt", _float_in(lambda xp, x: 1.0 / xp.sqrt(x)), lambda F, x, y, g: -(g * y) / (x * 2.0))
# y = x^1/3: y' = 1/3 x^-2/3 = 1 / (3 y^2)
_unary("cbrt", _float_in(lambda xp, x: xp.cbrt(x)), lambda F, x, y, g: g / (F.square(y) * 3.0))
# y = x^-1/3: y' = -1/3 x^-4/3 = -y / (3x)
_unary("rcbrt", _float_in(lambda xp, x: 1.0 / xp.cbrt(x)), lambda F, x, y, g: -(g * y) / (x * 3.0))
# y = 1/x: y' = -1/x^2 = -y^2
_unary("reciprocal", _float_in(lambda xp, x: 1.0 / x), lambda F, x, y, g: -(g * F.square(y)))

# -- trigonometric and hyperbolic ------------------------------------------------
_unary("sin", _float_in(lambda xp, x: xp.sin(x)), lambda F, x, y, g: g * F.cos(x))  # sin' = cos
_unary("cos", _float_in(lambda xp, x: xp.cos(x)), lambda F, x, y, g: -(g * F.sin(x)))  # cos' = -sin
_unary("tan", _float_in(lambda xp, x: xp.tan(x)), lambda F, x, y, g: g * (F.square(y) + 1.0))  # tan' = 1 + tan^2
# arcsin' = 1/sqrt(1 - x^2); arccos' = -1/sqrt(1 - x^2); arctan' = 1/(1 + x^2)
_unary("arcsin", _float_in(lambda xp, x: xp.arcsin(x)), lambda F, x, y, g: g * F.rsqrt(1.0 - F.square(x)))
_unary("arccos", _float_in(lambda xp, x: xp.arccos(x)), lambda F, x, y, g: -(g * F.rsqrt(1.0 - F.square(x))))
_unary("arctan", _float_in(lambda xp, x: xp.arctan(x)), lambda F, x, y, g: g / (F.square(x) + 1.0))
# degrees = 180/pi x, radians = pi/180 x: constant slopes
_unary("degrees", _float_in(lambda xp, x: x * (180.0 / math.pi)), lambda F, x, y, g: g * (180.0 / math.pi))
_unary("radians", _float_in(lambda xp, x: x * (math.pi / 180.0)), lambda F, x, y, g: g * (math.pi / 180.0))
_unary("sinh", _float_in(lambda xp, x: xp.sinh(x)), lambda F, x, y, g: g * F.cosh(x))  # sinh' = cosh
_unary("cosh", _float_in(lambda xp, x: xp.cosh(x)), lambda F, x, y, g: g * F.sinh(x))  # cosh' = sinh
# tanh' = 1 - tanh^2
_unary("tanh", _float_in(lambda xp, x: xp.tanh(x)), lambda F, x, y, g: g * (1.0 - F.square(y)))
# arcsinh' = 1/sqrt(x^2 + 1); arccosh' = 1/sqrt(x^2 - 1); arctanh' = 1/(1 - x^2)
_unary("arcsinh", _float_in(lambda xp, x: xp.arcsinh(x)), lambda F, x, y, g: g * F.rsqrt(F.square(x) + 1.0))
_unary("arccosh", _float_in(lambda xp, x: xp.arccosh(x)), lambda F, x, y, g: g * F.rsqrt(F.square(x) - 1.0))
_unary("arctanh", _float_in(lambda xp, x: xp.arctanh(x)), lambda F, x, y, g: g / (1.0 - F.square(x)))

# -- activations ----------------------------------------------------------------
# sigmoid' = s (1 - s)
_unary("sigmoid", _float_in(stable_sigmoid), lambda F, x, y, g: g * (y * (1.0 - y)))
# relu' = 1 where x > 0 else 0 (MXNet takes 0 at x = 0)
# (NaN passes through relu, as MXNet's IsNan(a) || a > 0 ? a : 0)
# pinned: the recorded mask instead of x > 0 (NaN still passes)
_unary(
    "relu",
    lambda xp, x: xp.where((x > 0) | (x != x), x, 0),
    lambda F, x, y, g: F._backward_relu(g, x),
    decisions=lambda xp, x: elementwise(0, choice=x > 0, value=x),
    pinned=lambda xp, choices, x: masked(xp, x, choices[0]),
)
# softsign = x / (1 + |x|): softsign' = 1 / (1 + |x|)^2
_unary("softsign", _float_in(lambda xp, x: x / (1.0 + xp.abs(x))), lambda F, x, y, g: g / F.square(F.abs(x) + 1.0))


def _hard_sigmoid_fwd(xp, x, alpha, beta):
    return xp.clip(x * alpha + beta, 0.0, 1.0)


def _hard_sigmoid_pinned(xp, choices, x, alpha, beta):
    # piece: alpha x + beta on the recorded middle segment (c = 1), the constant 0 / 1 on the others: there u is
    # kept on its recorded side and clipped as forward does (forward's value at the base point, NaN passes)
    x = x.astype(np.float64) if _is_int(x.dtype) else x
    c = choices[0]
    u = x * alpha + beta
    side = xp.where(c == 0, xp.where(u > 0, 0.0, u), xp.where(u < 1, 1.0, u))
    return xp.where(c == 1, u, xp.clip(side, 0.0, 1.0))


def _hard_sigmoid_grad(F, x, y, g, alpha, beta):
    # y = clip(alpha x + beta, 0, 1): y' = alpha strictly inside (0, 1), else 0 (MXNet's strict bounds)
    u = x * alpha + beta
    return g * alpha * (u > 0.0) * (u < 1.0)  # scaled first: on arrays a mask times a float would promote


def _hard_sigmoid_choice(xp, x, alpha, beta):
    # the segment of u = alpha x + beta: 0 (u <= 0, y = 0), 1 (0 < u < 1, slope alpha), 2 (u >= 1, y = 1)
    u = x * alpha + beta
    return elementwise(0, choice=(u > 0).astype(np.int8) + (u >= 1), value=u)


_unary(
    "hard_sigmoid",
    _float_in(_hard_sigmoid_fwd),
    _hard_sigmoid_grad,
    decisions=_float_in(_hard_sigmoid_choice),
    pinned=_hard_sigmoid_pinned,
    params={"alpha": Param("float", 0.2), "beta": Param("float", 0.5)},
    infer_type=float_inputs("data"),
    doc="max(0, min(1, alpha * x + beta)).",
)

# -- special functions -------------------------------------------------------------
# erf' = 2/sqrt(pi) e^(-x^2)
_unary("erf", _float_math(_erf), lambda F, x, y, g: g * (F.exp(-F.square(x)) * (2.0 / _SQRT_PI)))
# x = erfinv(y)  <=>  y = erf(x): erfinv' = 1 / erf'(erfinv) = sqrt(pi)/2 e^(erfinv^2)
_unary("erfinv", _float_math(_erfinv), lambda F, x, y, g: g * (F.exp(F.square(y)) * (_SQRT_PI / 2.0)))
# Gamma' = Gamma psi; (ln |Gamma|)' = psi (digamma = polygamma order 0)
_unary("gamma", _float_math(_gamma), lambda F, x, y, g: g * (y * F._polygamma(x, n=0)))
_unary("gammaln", _float_math(log_gamma), lambda F, x, y, g: g * F._polygamma(x, n=0))
# (psi^(n))' = psi^(n+1): gradients of every order
_unary(
    "_polygamma",
    _float_math(lambda xp, x, n: _polygamma(xp, x, n)),
    lambda F, x, y, g, n: g * F._polygamma(x, n=n + 1),
    params={"n": Param("int", 0)},
    doc="psi^(n)(x), the (n+1)-th derivative of log Gamma (hidden).",
)


# -- Cast ------------------------------------------------------------------------------
_CAST_DTYPES = ("float16", "float32", "float64", "uint8", "int8", "int32", "int64", "bool")


def _cast_prepare(params, node_name):
    dt = params["dtype"]
    if dt.name not in _CAST_DTYPES:
        raise ParamError(f"Cast {node_name!r}: parameter 'dtype' must be one of {list(_CAST_DTYPES)}, got {dt.name!r}")
    return params


def _cast_type(params, in_types, out_types, where):
    return in_types, [params["dtype"]]


register(
    "Cast",
    aliases=("cast",),
    params={"dtype": Param("dtype")},
    prepare=_cast_prepare,
    forward=lambda xp, x, dtype: x.astype(dtype),
    infer_shape=same_shape,
    infer_type=_cast_type,
    # the gradient is the head gradient cast back to the input dtype
    gradient=lambda F, n, g: [F._cast_like(g[0], n.inputs[0])],
    doc="Cast to ``dtype`` (one of float16/32/64, uint8, int8, int32, int64, bool).",
)


def _cast_like_shape(params, in_shapes, out_shapes, where):
    (d, like), (o,) = in_shapes, out_shapes
    s = d if d is not None else o
    return [s, like], [s]


def _cast_like_type(params, in_types, out_types, where):
    return in_types, [in_types[1]]


register(
    "_cast_like",
    inputs=("data", "like"),
    forward=lambda xp, x, like: x.astype(like.dtype, copy=False),
    infer_shape=_cast_like_shape,
    infer_type=_cast_like_type,
    gradient=lambda F, n, g: [F._cast_like(g[0], n.inputs[0]), None],  # cast is linear: cast back
    doc="Cast ``data`` to the dtype of ``like`` (only its dtype is used; gradient of Cast; hidden).",
)


# -- clip ---------------------------------------------------------------------------------


def _clip_bounds(x, a_min, a_max):
    # the bounds are float32 parameters in MXNet (real_t), cast to the input dtype
    return (
        np.asarray(a_min, dtype=np.float32).astype(x.dtype)[()],
        np.asarray(a_max, dtype=np.float32).astype(x.dtype)[()],
    )


def _clip_select(xp, x, lo, hi, above, below):
    return xp.where(above, hi, xp.where(below, lo, x))


def _clip_fwd(xp, x, a_min, a_max):
    # MXNet order: above a_max -> a_max, else below a_min -> a_min, else x (NaN passes)
    lo, hi = _clip_bounds(x, a_min, a_max)
    return _clip_select(xp, x, lo, hi, x > hi, x < lo)


def _clip_pinned(xp, choices, x, a_min, a_max):
    # piece: x where the base point was kept (segment 1), else the bound it was clipped to
    lo, hi = _clip_bounds(x, a_min, a_max)
    c = choices[0]
    return _clip_select(xp, x, lo, hi, c == 2, c == 0)


def _clip_grad(F, x, y, g, a_min, a_max):
    # 1 where a_min <= x <= a_max (both bounds included, as MXNet's clip_grad), 0 outside;
    # the bounds are float32 parameters in MXNet (real_t), in forward and backward alike
    lo, hi = float(np.float32(a_min)), float(np.float32(a_max))
    return g * ((1.0 - (x > hi)) * (1.0 - (x < lo)))


def _clip_choice(xp, x, a_min, a_max):
    # the segment, decided in forward's order: 2 above a_max, else 0 below a_min, else 1 (kept: bounds included,
    # slope 1, as the gradient; NaN too). (It was (x >= lo) + (x > hi), which called x in (a_max, a_min) "kept"
    # when a_min > a_max, where forward gives a_max and the gradient 0, and NaN "below", where forward passes it.)
    lo, hi = _clip_bounds(x, a_min, a_max)
    return elementwise(0, choice=xp.where(x > hi, 2, xp.where(x < lo, 0, 1)).astype(np.int8), value=x)


_unary(
    "clip",
    _clip_fwd,
    _clip_grad,
    params={"a_min": Param("float"), "a_max": Param("float")},
    decisions=_clip_choice,
    pinned=_clip_pinned,
    doc="Clip to [a_min, a_max]; the gradient passes where a_min <= x <= a_max.",
)


# -- make_loss (lowercase: MXNet's elementwise loss marker) ---------------------------------
# MXNet's ``make_loss`` is NOT the legacy ``MakeLoss`` (ops/loss.py): no parameters, output
# named 'loss', and its gradient is ones_like(data) whatever the head gradient.
register(
    "make_loss",
    forward=lambda xp, x: x,
    infer_shape=same_shape,
    output_names=("loss",),
    is_loss=True,
    gradient=lambda F, n, g: [F.ones_like(n.inputs[0])],  # d loss / d data := 1 (head ignored)
    # the loss is sum(data)
    implied_loss=lambda params, inputs, output: (
        lambda ins, out: (
            float(np.asarray(ins[0], np.float64).sum()),
            float(np.abs(np.asarray(ins[0], np.float64)).sum()),
        )
    ),
    doc="Marks ``data`` as a loss: identity forward, gradient ones (the head gradient is ignored).",
)


# ----------------------------------------------------------------------------
# scalar forms behind the overloads (x op s, s op x)
# ----------------------------------------------------------------------------

_SCALAR = {"scalar": Param("float", 1.0), "is_int": Param("bool", True)}


def _scalar_operands(x, scalar, is_int):
    """MXNet's NumpyBinaryScalar rules: an integer input with a non-integer scalar computes in
    float64; otherwise the scalar is cast to the input dtype first (``DType(scalar)``)."""
    kind = x.dtype.kind
    if kind == "b":
        x = x.astype(np.int64 if is_int else np.float64)
    elif kind in "iu" and not is_int:
        x = x.astype(np.float64)
    return x, _cast_scalar(scalar, x.dtype)


@functools.lru_cache(maxsize=1024)
def _cast_scalar(scalar, dtype):
    """``DType(scalar)`` (from float64, overflow to inf and NaN to an integer as C casts do, silently);
    cached: the same few (scalar, dtype) pairs come back on every call of a graph's ops."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(scalar, dtype=np.float64).astype(dtype)[()]


_CONSTANTS: dict = {}


def _constant(xp, scalar: float, dtype):
    """``scalar`` as a read-only 0-d array of ``dtype``, one per value (by its bits: -0.0 is not 0.0) shared by
    every kernel that multiplies, adds... with it."""
    key = (xp, dtype, scalar.hex())
    c = _CONSTANTS.get(key)
    if c is None:
        c = xp.asarray(scalar, dtype=dtype)
        if xp is np:
            c.flags.writeable = False
        if len(_CONSTANTS) < 4096:
            _CONSTANTS[key] = c
    return c


def _scalar_type(params, in_types, out_types, where):
    t = in_types[0]
    if t is None:
        return in_types, out_types
    t = np.dtype(t)
    kind = t.kind
    if kind == "b":
        return in_types, [np.dtype(np.int64 if params["is_int"] else np.float64)]
    if kind in "iu" and not params["is_int"]:
        return in_types, [np.dtype(np.float64)]
    return in_types, [t]


#: scalar ops with a kernel: the forward is ``fn(x, s)`` (``fn(s, x)`` when the flag is set), fn an operator
#: or the name of an ``xp`` ufunc
_SCALAR_KERNELS = {
    "_plus_scalar": (operator.add, False),
    "_minus_scalar": (operator.sub, False),
    "_rminus_scalar": (operator.sub, True),
    "_mul_scalar": (operator.mul, False),
    "_div_scalar": (operator.truediv, False),
    "_rdiv_scalar": (operator.truediv, True),
    "_maximum_scalar": ("maximum", False),
    "_minimum_scalar": ("minimum", False),
}


def _scalar(name, fwd, grad, aliases=(), params=None, choice=None, piece=None):
    """Register ``y = fwd(xp, x, s)``; ``grad(F, x, y, gy, s)``; ``choice(xp, x, s) -> (choice, value)``
    of an op with a kink or jump (``registry.Decision``), on the operands forward computes with;
    ``piece(xp, c, x, s)``: forward on the piece a recorded choice ``c`` selects (``OpDef.pinned``)."""
    if grad is None:
        rule = _zero_grad
    else:
        reads = _reads(grad)  # most rules read only g (x + s, x * s): no Symbols made for x and y

        def rule(F, n, g):
            return [grad(F, *_operands(n, reads), g[0], n.params["scalar"])]

    def forward(xp, x, scalar, is_int=True):
        x, s = _scalar_operands(x, scalar, is_int)
        return _keep(fwd(xp, x, s), x)

    specialize = None
    fast = _SCALAR_KERNELS.get(name)
    if fast is not None:
        fn, scalar_first = fast

        def specialize(xp, in_types, scalar, is_int=True):
            # a float/complex x keeps its dtype and the scalar is cast to it (_scalar_operands): x op s with
            # s = DType(scalar) as a 0-d array of x's dtype is the whole forward. (numpy would cast a Python
            # float the same way (NEP 50), but resolving a weak scalar costs a second small-array op's time.)
            if not (_float_kinds(in_types) and _weak_scalar_fits(scalar, in_types[0])):
                return None
            fn_ = getattr(xp, fn) if isinstance(fn, str) else fn
            s = _constant(xp, float(scalar), np.dtype(in_types[0]))
            return (fn_, (s,), ()) if scalar_first else (fn_, (), (s,))

    def decisions(xp, x, scalar, is_int=True):
        c, v = choice(xp, *_scalar_operands(x, scalar, is_int))
        return elementwise(0, choice=c, value=v)

    def pinned(xp, choices, x, scalar, is_int=True):
        x, s = _scalar_operands(x, scalar, is_int)
        return _keep(piece(xp, choices[0], x, s), x)

    return register(
        name,
        aliases=aliases,
        forward=forward,
        specialize=specialize,
        infer_shape=same_shape,
        infer_type=_scalar_type,
        gradient=rule,
        params=dict(params or _SCALAR),
        decisions=decisions if choice else None,
        pinned=pinned if piece else None,
    )


def _side_piece(xp, c, a, b):
    # piece of maximum / minimum: a where the base point chose a (NaN in a passes, as forward), else b
    return xp.where(c | (a != a), a, b)


def _constant_piece(xp, c, a, b):
    # piece of a comparison: the recorded 0/1 (a copy; the caller casts it to forward's dtype)
    return c.copy()


def _int_safe_pow(xp, a, b):
    # integers go through float64 (numpy refuses negative integer powers of integers)
    if _is_int(a.dtype):
        return xp.power(a.astype(np.float64), b)
    return a**b


def _mod(xp, a, b):
    """MXNet mod: the sign follows the divisor (Python's %), and x mod 0 = 0."""
    zero = b == 0
    return xp.where(zero, 0, xp.mod(a, xp.where(zero, 1, b)))


_scalar("_plus_scalar", lambda xp, x, s: x + s, lambda F, x, y, g, s: g, aliases=("_PlusScalar",))
_scalar("_minus_scalar", lambda xp, x, s: x - s, lambda F, x, y, g, s: g, aliases=("_MinusScalar",))
_scalar("_rminus_scalar", lambda xp, x, s: s - x, lambda F, x, y, g, s: -g, aliases=("_RMinusScalar",))
_scalar("_mul_scalar", lambda xp, x, s: x * s, lambda F, x, y, g, s: g * s, aliases=("_MulScalar",))
_scalar("_div_scalar", lambda xp, x, s: x / s, lambda F, x, y, g, s: g / s, aliases=("_DivScalar",))
# y = s / x  ->  dy/dx = -s / x^2 = -y / x
_scalar("_rdiv_scalar", lambda xp, x, s: s / x, lambda F, x, y, g, s: -g * y / x, aliases=("_RDivScalar",))
# y = x^s  ->  dy/dx = s x^(s-1)
_scalar(
    "_power_scalar",
    lambda xp, x, s: _int_safe_pow(xp, x, s),
    lambda F, x, y, g, s: g * (F._power_scalar(x, scalar=s - 1.0) * s),
    aliases=("_PowerScalar",),
)
# y = s^x  ->  dy/dx = y ln s
_scalar(
    "_rpower_scalar",
    lambda xp, x, s: xp.power(s, x.astype(np.float64) if _is_int(x.dtype) else x),
    lambda F, x, y, g, s: g * (y * float(np.log(s))),
    aliases=("_RPowerScalar",),
)
# hypot(x, s)' = x / hypot(x, s) = x / y
_scalar("_hypot_scalar", lambda xp, x, s: xp.hypot(x, s), lambda F, x, y, g, s: g * (x / y), aliases=("_HypotScalar",))
# _maximum_scalar and _minimum_scalar: with the binary forms below (_extremum)
# x mod s has slope 1 almost everywhere; s mod x = s - x floor(s/x) has slope -floor(s/x)
# (integer operands: MXNet's mod gradient is 0, as for every integer-valued op; _zero_grad_if_int)
_scalar(
    "_mod_scalar",
    lambda xp, x, s: xp.zeros_like(x) if s == 0 else xp.mod(x, s),
    lambda F, x, y, g, s: F._zero_grad_if_int(g, x),
    aliases=("_ModScalar",),
)
_scalar(
    "_rmod_scalar",
    lambda xp, x, s: _mod(xp, s, x),
    lambda F, x, y, g, s: F._zero_grad_if_int(-g * F.floor(F._rdiv_scalar(x, scalar=s)), x),
    aliases=("_RModScalar",),
)
for _name, _alias, _f in [
    ("_equal_scalar", "_EqualScalar", lambda xp, x, s: x == s),
    ("_not_equal_scalar", "_NotEqualScalar", lambda xp, x, s: x != s),
    ("_greater_scalar", "_GreaterScalar", lambda xp, x, s: x > s),
    ("_greater_equal_scalar", "_GreaterEqualScalar", lambda xp, x, s: x >= s),
    ("_lesser_scalar", "_LesserScalar", lambda xp, x, s: x < s),
    ("_lesser_equal_scalar", "_LesserEqualScalar", lambda xp, x, s: x <= s),
]:
    # comparisons: 0/1 in the input dtype, zero gradient; the 0/1 they output is their decision (and pinned piece)
    _scalar(
        _name, _f, None, aliases=(_alias,), choice=lambda xp, x, s, f=_f: (f(xp, x, s), x - s), piece=_constant_piece
    )
for _name, _alias, _f in [
    ("_logical_and_scalar", "_LogicalAndScalar", lambda xp, x, s: (x != 0) & (s != 0)),
    ("_logical_or_scalar", "_LogicalOrScalar", lambda xp, x, s: (x != 0) | (s != 0)),
    ("_logical_xor_scalar", "_LogicalXorScalar", lambda xp, x, s: (x != 0) ^ (s != 0)),
]:
    _scalar(_name, _f, None, aliases=(_alias,))  # logic: 0/1 in the input dtype, zero gradient


# smooth_l1(x, sigma): 0.5 (sigma x)^2 for |x| < 1/sigma^2, |x| - 0.5/sigma^2 otherwise.
# Its derivative sigma^2 x inside, sign(x) outside, is exactly clip(sigma^2 x, -1, 1)
# (MXNet's smooth_l1_gradient; the boundary |x| = 1/sigma^2 gives +-1 both ways).
def _smooth_l1_fwd(xp, x, s, linear=None):
    s2 = s * s
    a = xp.abs(x)
    return xp.where(a > 1.0 / s2 if linear is None else linear, a - 0.5 / s2, 0.5 * x * x * s2)


def _smooth_l1_choice(xp, x, s):
    # the branch of _smooth_l1_fwd (quadratic inside, linear outside), computed as forward does
    excess = xp.abs(x) - 1.0 / (s * s)
    return excess > 0, excess


# pinned: the branch recorded (|x| - 0.5/sigma^2 where the base point was outside, else the quadratic)
_scalar(
    "smooth_l1",
    _smooth_l1_fwd,
    lambda F, x, y, g, s: g * F.clip(x * (s * s), a_min=-1.0, a_max=1.0),
    choice=_smooth_l1_choice,
    piece=lambda xp, c, x, s: _smooth_l1_fwd(xp, x, s, linear=c),
)


# ----------------------------------------------------------------------------
# binary, same shape (elemwise_*) and broadcasting (broadcast_*)
# ----------------------------------------------------------------------------


@wait_for_inputs(0, 1)
def _broadcast_shape(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    if util.zeros_are_unknown() and (0 in a or 0 in b):
        return in_shapes, [_partial_broadcast(a, b, where)]
    return in_shapes, [broadcast_shapes(a, b, where)]


def _partial_broadcast(a, b, where):
    """MXNet's ``BroadcastShapeCompact`` with unknown dimensions (0 in the legacy reading): a dimension either
    side does not know stays unknown, even against a known n (the unknown one may be 1 or n); known pairs
    broadcast as numpy's (1 against n, or equal). MXNet 1.9.1: (2, 0) + (1, 3) -> (2, 0); with np_shape,
    (0, -1) + (1, 3) -> (0, -1)."""
    n = max(len(a), len(b))
    x_all, y_all = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(x_all, y_all):
        if x == 0 or y == 0:
            out.append(0)
        elif x == y or y == 1 or x == 1:
            out.append(max(x, y))
        else:
            raise ShapeError(f"{where}: shapes {tuple(a)} and {tuple(b)} cannot be broadcast together")
    return tuple(out)


def _same_shape_binary(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    if a is not None and b is not None and tuple(a) != tuple(b):
        raise ShapeError(
            f"{where}: elementwise inputs must have the same shape, got lhs {tuple(a)} and rhs {tuple(b)}"
            " (use broadcast_* for broadcasting)"
        )
    return same_shape(params, in_shapes, out_shapes, where)


class _BinaryOps:
    """The binary ops a gradient rule combines with: same-shape or broadcasting flavour."""

    def __init__(self, F, broadcast):
        pick = lambda b_, e_: getattr(F, b_ if broadcast else e_)
        self.mul = pick("broadcast_mul", "elemwise_mul")
        self.div = pick("broadcast_div", "elemwise_div")
        self.pow = pick("broadcast_power", "_power")
        self.ge = pick("broadcast_greater_equal", "_greater_equal")
        self.gt = pick("broadcast_greater", "_greater")
        self.le = pick("broadcast_lesser_equal", "_lesser_equal")
        self.lt = pick("broadcast_lesser", "_lesser")


def _binary(names, fwd, grad, aliases=((), ()), choice=None, fast=None, piece=None):
    """Register ``y = fwd(a, b)`` as ``elemwise``-style and ``broadcast``-style ops.

    ``grad(F, o, a, b, y, gy)`` returns the two full-shape gradients, combining
    values with ``o.mul``/``o.div``/... of the matching flavour; for the
    broadcast form each is then reduced to its input's shape by ``_sum_to_like``.
    ``grad=None``: no gradient (comparisons, logic). ``choice(xp, a, b) -> (choice, value)``: the
    elementwise decision of an op with a kink or jump (``registry.Decision``), read from both inputs;
    ``piece(xp, c, a, b)``: forward on the piece a recorded choice ``c`` selects (``OpDef.pinned``).
    ``fast``: the operator ``fwd`` applies (its kernel for two inputs of one float dtype).
    """
    same_name, bcast_name = names

    def same_rule(F, n, g):
        a, b = n.inputs
        return list(grad(F, _BinaryOps(F, False), a, b, n.outputs[0], g[0]))

    def bcast_rule(F, n, g):
        a, b = n.inputs
        ga, gb = grad(F, _BinaryOps(F, True), a, b, n.outputs[0], g[0])
        return [
            None if ga is None else F._sum_to_like(ga, a),
            None if gb is None else F._sum_to_like(gb, b),
        ]

    def forward(xp, a, b):
        return _keep(fwd(xp, a, b), a)

    specialize = None
    if fast is not None:
        # one float/complex dtype on both sides: a op b has that dtype already (_keep casts nothing)
        def specialize(xp, in_types):
            return (fast, (), ()) if _float_kinds(in_types) and in_types[0] == in_types[1] else None

    def decisions(xp, a, b):
        c, v = choice(xp, a, b)
        return elementwise(0, 1, choice=c, value=v)

    def pinned(xp, choices, a, b):
        return _keep(piece(xp, choices[0], a, b), a)

    dec = decisions if choice else None
    pin = pinned if piece else None
    for name, alias, shape_rule, rule in (
        (same_name, aliases[0], _same_shape_binary, same_rule),
        (bcast_name, aliases[1], _broadcast_shape, bcast_rule),
    ):
        if name:
            register(
                name,
                aliases=alias,
                inputs=("lhs", "rhs"),
                forward=forward,
                specialize=specialize,
                infer_shape=shape_rule,
                gradient=rule if grad else _zero_grad,
                decisions=dec,
                pinned=pin,
            )


_binary(
    ("elemwise_add", "broadcast_add"),
    lambda xp, a, b: a + b,
    lambda F, o, a, b, y, g: (g, g),
    aliases=(("_add", "_plus", "_Plus"), ("broadcast_plus",)),
    fast=operator.add,
)
_binary(
    ("elemwise_sub", "broadcast_sub"),
    lambda xp, a, b: a - b,
    lambda F, o, a, b, y, g: (g, -g),
    aliases=(("_sub", "_minus", "_Minus"), ("broadcast_minus",)),
    fast=operator.sub,
)
# (ab)' = (b, a)
_binary(
    ("elemwise_mul", "broadcast_mul"),
    lambda xp, a, b: a * b,
    lambda F, o, a, b, y, g: (o.mul(g, b), o.mul(g, a)),
    aliases=(("_mul", "_Mul"), ()),
    fast=operator.mul,
)
# (a/b)' = (1/b, -a/b^2 = -y/b); integer inputs: quotient truncated toward zero (C division)
_binary(
    ("elemwise_div", "broadcast_div"),
    lambda xp, a, b: a / b,
    lambda F, o, a, b, y, g: (o.div(g, b), -o.div(g * y, b)),
    aliases=(("_div", "_Div"), ()),
    fast=operator.truediv,
)
# (a^b)' = (b a^(b-1), a^b ln a)
_binary(
    ("_power", "broadcast_power"),
    _int_safe_pow,
    lambda F, o, a, b, y, g: (o.mul(g, o.mul(b, o.pow(a, b - 1.0))), g * o.mul(y, F.log(a))),
    aliases=(("_Power",), ()),
)


def _extremum(ext, keeps, keep, drop):
    """Register ``_{ext}``, ``broadcast_{ext}`` and ``_{ext}_scalar`` (ext: maximum or minimum), which keep lhs
    (x) where ``keeps(lhs, rhs)`` holds, else rhs (s); ``keep`` and ``drop`` name that comparison and its
    complement among ``_BinaryOps``."""
    cap = ext.capitalize()
    # max(a, b)' = (1 where a >= b, 1 where a < b) (MXNet: ties go to lhs); min likewise with a <= b / a > b
    _binary(
        (f"_{ext}", f"broadcast_{ext}"),
        lambda xp, a, b: getattr(xp, ext)(a, b),
        lambda F, o, a, b, y, g: (g * getattr(o, keep)(a, b), g * getattr(o, drop)(a, b)),
        aliases=((f"_{cap}",), ()),
        choice=lambda xp, a, b: (keeps(a, b), a - b),
        piece=_side_piece,  # lhs where the base point chose lhs, else rhs
    )
    # max(x, s)' = 1 where x >= s (ties go to x); min likewise with x <= s
    _scalar(
        f"_{ext}_scalar",
        lambda xp, x, s: getattr(xp, ext)(x, s),
        lambda F, x, y, g, s: g * keeps(x, s),
        aliases=(f"_{cap}Scalar",),
        choice=lambda xp, x, s: (keeps(x, s), x - s),
        piece=_side_piece,  # x where the base point chose x, else s
    )


_extremum("maximum", operator.ge, "ge", "lt")
_extremum("minimum", operator.le, "le", "gt")
# a mod b = a - b floor(a/b): (1, -floor(a/b)) almost everywhere; 0 for integer operands (MXNet)
_binary(
    ("_mod", "broadcast_mod"),
    _mod,
    lambda F, o, a, b, y, g: (F._zero_grad_if_int(g, a), F._zero_grad_if_int(-o.mul(g, F.floor(o.div(a, b))), b)),
    aliases=(("_Mod",), ()),
)
# hypot = sqrt(a^2 + b^2): (a/y, b/y)
_binary(
    ("_hypot", "broadcast_hypot"),
    lambda xp, a, b: xp.hypot(a, b),
    lambda F, o, a, b, y, g: (g * o.div(a, y), g * o.div(b, y)),
    aliases=(("_Hypot",), ()),
)

# comparisons and logic: 0/1 in the input dtype, zero gradient; a comparison's 0/1 is its decision
for _pair, _als, _fn in [
    (("_equal", "broadcast_equal"), "_Equal", lambda xp, a, b: a == b),
    (("_not_equal", "broadcast_not_equal"), "_Not_Equal", lambda xp, a, b: a != b),
    (("_greater", "broadcast_greater"), "_Greater", lambda xp, a, b: a > b),
    (("_greater_equal", "broadcast_greater_equal"), "_Greater_Equal", lambda xp, a, b: a >= b),
    (("_lesser", "broadcast_lesser"), "_Lesser", lambda xp, a, b: a < b),
    (("_lesser_equal", "broadcast_lesser_equal"), "_Lesser_Equal", lambda xp, a, b: a <= b),
]:
    _binary(
        _pair,
        _fn,
        None,
        aliases=((_als,), ()),
        choice=lambda xp, a, b, f=_fn: (f(xp, a, b), a - b),
        piece=_constant_piece,
    )  # pinned: the recorded 0/1
for _pair, _als, _fn in [
    (("_logical_and", "broadcast_logical_and"), "_Logical_And", lambda xp, a, b: (a != 0) & (b != 0)),
    (("_logical_or", "broadcast_logical_or"), "_Logical_Or", lambda xp, a, b: (a != 0) | (b != 0)),
    (("_logical_xor", "broadcast_logical_xor"), "_Logical_Xor", lambda xp, a, b: (a != 0) ^ (b != 0)),
]:
    _binary(_pair, _fn, None, aliases=((_als,), ()))


# ----------------------------------------------------------------------------
# where(condition, x, y)
# ----------------------------------------------------------------------------


def _where_fwd(xp, cond, x, y):
    c = cond != 0
    if c.ndim == 1 and x.ndim > 1:  # a 1-d condition picks whole rows along axis 0
        c = c.reshape((-1,) + (1,) * (x.ndim - 1))
    return xp.where(c, x, y)


def _where_shape(params, in_shapes, out_shapes, where):
    c, x, y = in_shapes
    (o,) = out_shapes
    if c is None or (0 in c and util.zeros_are_unknown()):
        return in_shapes, out_shapes  # MXNet infers nothing until the condition's shape is fully known
    t = None
    for name, s in (("x", x), ("y", y), ("output", o)):
        if s is None:
            continue
        if t is None:
            t = (name, tuple(s))
        elif tuple(s) != t[1]:
            raise ShapeError(
                f"{where}: inputs {t[0]!r} and {name!r} must have the same shape, got {t[1]} and {tuple(s)}"
            )
    if t is None:
        return in_shapes, out_shapes
    t = t[1]
    if c is not None:
        c = tuple(c)
        if c != t and not (len(c) == 1 and len(t) >= 1 and c[0] == t[0]):
            raise ShapeError(
                f"{where}: input 'condition' must have the shape of x {t} or be 1-d of length "
                f"{t[0] if t else '?'}, got {c}"
            )
    return [c, t, t], [t]


def _where_type(params, in_types, out_types, where):
    c, x, y = in_types
    known = [t for t in (x, y, out_types[0]) if t is not None]
    if not known:
        return in_types, out_types
    for t in known:
        if np.dtype(t) != np.dtype(known[0]):
            raise TypeError(
                f"{where}: inputs 'x' and 'y' must have the same dtype, got {np.dtype(x)} and {np.dtype(y)}"
            )
    t = known[0]
    return [c, t, t], [t]


register(
    "where",
    inputs=("condition", "x", "y"),
    forward=_where_fwd,
    infer_shape=_where_shape,
    infer_type=_where_type,
    no_grad_inputs=("condition",),
    # out = x where condition != 0 else y: the head gradient is routed the same way
    gradient=lambda F, n, g: [
        None,
        F.where(n.inputs[0], g[0], F.zeros_like(g[0])),
        F.where(n.inputs[0], F.zeros_like(g[0]), g[0]),
    ],
    doc="Elements of x where condition is nonzero, of y elsewhere (condition: x's shape or 1-d over axis 0).",
)


# ----------------------------------------------------------------------------
# helpers used by gradient rules
# ----------------------------------------------------------------------------


def _add_n_shape(params, in_shapes, out_shapes, where):
    return same_shape(params, in_shapes, out_shapes, where)


def _add_n_fwd(xp, *xs, num_args):
    out = xs[0] + xs[1] if len(xs) > 1 else xs[0].copy()
    for x in xs[2:]:
        out += x
    return out


register(
    "add_n",
    aliases=("ElementWiseSum",),
    variadic="num_args",
    params={"num_args": Param("int")},
    forward=_add_n_fwd,
    infer_shape=_add_n_shape,
    gradient=lambda F, n, g: [g[0]] * len(n.inputs),  # d(sum x_i)/dx_i = 1
    doc="Sum of all inputs (used to add gradient contributions).",
)


def _sum_to_like_fwd(xp, a, like):
    """Sum ``a`` down to ``like.shape`` (the reverse of numpy broadcasting)."""
    if a.shape == like.shape:
        return a
    lead = a.ndim - like.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(like.shape) if d == 1 and a.shape[lead + i] != 1)
    return a.sum(axis=axes).reshape(like.shape)


def _broadcast_to_like_fwd(xp, a, like):
    if a.shape == like.shape:
        return a
    return xp.broadcast_to(a, like.shape)


def _adjoint_of(other):
    # this op A and ``other`` B are linear and each other's adjoint, <B g, p> = <g, A p>: so d<g, A p>/dp = B g,
    # B applied to the head gradient and shaped like A's data (the pair's own derivation is at its call)
    return lambda F, n, g: [getattr(F, other)(g[0], n.inputs[0]), None]


def adjoint_pair(names, forwards, docs, **spec):
    """Register two linear hidden ops ``(data, like)`` -> an array shaped like ``like``, each the other's adjoint,
    so each one's gradient is the other (``like`` only gives a shape); ``spec``: more fields for both."""
    for name, other, forward, doc in zip(names, names[::-1], forwards, docs):
        register(
            name,
            inputs=("data", "like"),
            forward=forward,
            infer_shape=output_like(1),
            gradient=_adjoint_of(other),
            doc=doc,
            **spec,
        )


# sum_to S is linear; its adjoint broadcasts back: d/da <g, S a> = broadcast(g, a.shape)
adjoint_pair(
    ("_sum_to_like", "_broadcast_to_like"),
    (_sum_to_like_fwd, _broadcast_to_like_fwd),
    (
        "The one shared reduction of broadcast gradients to an input's shape.",
        "numpy-broadcast ``data`` to ``like``'s shape (adjoint of _sum_to_like).",
    ),
)


# -- straight-through estimators, gradient scaling, mixed-precision casts ------------------------------
# y = round(x) / sign(x), but the gradient passes straight through (the straight-through estimator of
# quantisation-aware training): dx = g. Not the derivative (0 almost everywhere): MXNet's definition.
_unary(
    "_contrib_round_ste",
    _float_in(_round_half_away),
    lambda F, x, y, g: F.identity(g),
    doc="round(x) forward, identity gradient (straight-through estimator).",
)
_unary(
    "_contrib_sign_ste",
    lambda xp, x: xp.sign(x),
    lambda F, x, y, g: F.identity(g),
    doc="sign(x) forward, identity gradient (straight-through estimator).",
)
# y = x; dx = scalar * g (a gradient reversal layer with scalar=-1)
_unary(
    "_contrib_gradientmultiplier",
    lambda xp, x, scalar, is_int: x.copy(),
    lambda F, x, y, g, scalar, is_int: F._mul_scalar(g, scalar=scalar),
    params={"scalar": Param("float", 1.0), "is_int": Param("bool", True)},
    doc="Identity forward; the gradient is multiplied by ``scalar``.",
)


# MXNet's AMP casts touch float16 and float32 values only; float64 and integers pass through unchanged
_AMP_FLOATS = (np.dtype(np.float16), np.dtype(np.float32))


def _amp_cast_type(params, in_types, out_types, where):
    t = in_types[0]
    if t is None:
        return in_types, out_types
    return in_types, [params["dtype"] if np.dtype(t) in _AMP_FLOATS else t]


register(
    "amp_cast",
    params={"dtype": Param("dtype")},
    forward=lambda xp, x, dtype: x.astype(dtype) if x.dtype in _AMP_FLOATS else x,
    infer_shape=same_shape,
    infer_type=_amp_cast_type,
    # a cast is the identity on values: the gradient is cast back to the input's dtype
    gradient=lambda F, n, g: [F._cast_like(g[0], n.inputs[0])],
    doc="Automatic-mixed-precision cast of a float16/float32 input to ``dtype`` (other dtypes pass through).",
)


def _amp_multicast_target(types, narrow):
    """MXNet's rule: float32 if any input is float32 (else the first input's dtype); with cast_narrow,
    float16 if any input is float16 (else float32)."""
    types = [np.dtype(t) for t in types]
    if narrow:
        return np.dtype(np.float16) if np.dtype(np.float16) in types else np.dtype(np.float32)
    return np.dtype(np.float32) if np.dtype(np.float32) in types else types[0]


def _amp_multicast_type(params, in_types, out_types, where):
    if any(t is None for t in in_types):
        return in_types, out_types
    target = _amp_multicast_target(in_types, params["cast_narrow"])
    return in_types, [target if np.dtype(t) in _AMP_FLOATS else t for t in in_types]


def _amp_multicast_fwd(xp, *xs, num_outputs, cast_narrow):
    target = _amp_multicast_target([x.dtype for x in xs], cast_narrow)
    return tuple(x.astype(target) if x.dtype in _AMP_FLOATS else x for x in xs)


def _amp_multicast_shape(params, in_shapes, out_shapes, where):
    if len(in_shapes) != params["num_outputs"]:
        raise ShapeError(f"{where}: num_outputs={params['num_outputs']} but {len(in_shapes)} inputs")
    return in_shapes, list(in_shapes)


register(
    "amp_multicast",
    variadic="num_outputs",
    params={"num_outputs": Param("int"), "cast_narrow": Param("bool", False)},
    num_outputs=lambda p: p["num_outputs"],
    forward=_amp_multicast_fwd,
    infer_shape=_amp_multicast_shape,
    infer_type=_amp_multicast_type,
    # each output is its input cast: each gradient is its head gradient cast back
    gradient=lambda F, n, g: [F._cast_like(gi, x) for gi, x in zip(g, n.inputs)],
    doc="Cast the float16/float32 inputs to float32 if any is float32 (with cast_narrow: to float16 if any is "
    "float16); other dtypes pass through.",
)

register(
    "_grad_add",
    inputs=("lhs", "rhs"),
    forward=lambda xp, a, b: a + b,
    infer_shape=same_shape,
    gradient=lambda F, n, g: [F.identity(g[0]), F.identity(g[0])],  # d(a + b) = da + db
    doc="a + b of equal shapes (MXNet's gradient accumulation).",
)

register(
    "_identity_with_attr_like_rhs",
    inputs=("lhs", "rhs"),
    forward=lambda xp, a, b: a.copy(),
    infer_shape=same_shape,  # MXNet: lhs, rhs and the output share one shape (inference flows through rhs)
    infer_type=output_like(0),
    no_grad_inputs=("rhs",),
    gradient=lambda F, n, g: [F.identity(g[0]), None],  # y = lhs; rhs only lends its attributes
    doc="lhs unchanged (MXNet uses it to give lhs rhs's storage attributes).",
)
