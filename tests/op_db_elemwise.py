"""OpInfo rows for the elementwise family (symgrad/ops/elemwise.py): unary math, rounding, special functions,
the scalar and binary arithmetic, comparison and logic forms (``_*_scalar``, ``elemwise_*``, ``_*``,
``broadcast_*``), add_n, Cast, clip, make_loss, where, BlockGrad and the identity-like ops (_grad_add,
_identity_with_attr_like_rhs, amp_multicast).

References are plain numpy / ``math`` written here. Inputs are drawn away from kinks,
ties and domain edges; ops that are piecewise constant have zero gradients, which the
generic test still checks against finite differences (second order skipped: nothing
differentiable is left).
"""

import math

import numpy as np
from np_refs import sigmoid
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym
SH = (2, 3)
HALVES = tuple(k + 0.5 for k in range(-4, 4))
INTS = tuple(float(k) for k in range(-4, 5))


def _vec(fn):
    return lambda x: np.vectorize(fn, otypes=[np.float64])(x)


def _signed(low, high, shape=SH):
    """|x| uniform in [low, high] with random signs."""
    return lambda r: r.choice([-1.0, 1.0], shape) * r.uniform(low, high, shape)


def _gamma_domain(r):
    # positive values and negative non-integers, away from the poles
    pos = r.uniform(0.3, 4.0, 4)
    neg = r.uniform(-2.8, -2.2, 2)
    return np.concatenate([pos, neg]).reshape(SH)


def _polygamma_ref(x, n, terms=2000):
    """psi^(n)(x) = (-1)^(n+1) n! sum_k (x + k)^-(n+1), the tail by Euler-Maclaurin; negative x by
    the recurrence psi^(n)(x) = psi^(n)(x + 1) - (-1)^n n! / x^(n+1), applied until x > 0."""
    x = np.asarray(x, dtype=np.float64)
    shift = np.zeros_like(x)
    while (x + shift <= 0).any():
        neg = x + shift <= 0
        shift[neg] += 1
    z = x + shift
    s = sum((z + k) ** -(n + 1.0) for k in range(terms))
    t = z + terms
    s = s + t ** -float(n) / n + 0.5 * t ** -(n + 1.0) + (n + 1) / 12.0 * t ** -(n + 2.0)
    out = (-1) ** (n + 1) * math.factorial(n) * s
    # undo the shift: psi(x) = psi(x + m) - (-1)^n n! sum_{j<m} (x + j)^-(n+1)
    for j in range(int(shift.max())):
        back = j < shift
        out = np.where(back, out - (-1) ** n * math.factorial(n) * (x + j) ** -(n + 1.0), out)
    return out


def _round_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _erfinv_ref(y):
    from statistics import NormalDist

    nd = NormalDist()
    return np.vectorize(lambda v: nd.inv_cdf((v + 1.0) / 2.0) / math.sqrt(2.0), otypes=[np.float64])(y)


def _mod_ref(a, b):
    return a - b * np.floor(a / b)


def _mod_sample(shape):
    # |a| / b in (1.1, 1.9): away from the jumps of floor(a / b)
    def draw(r):
        b = r.uniform(1.5, 2.0, shape)
        return r.choice([-1.0, 1.0], shape) * b * r.uniform(1.1, 1.9, shape), b

    return draw


_MOD_A = {
    "a": In(SH, sample=lambda r: _mod_sample(SH)(np.random.default_rng(11))[0]),
    "b": In(SH, sample=lambda r: _mod_sample(SH)(np.random.default_rng(11))[1]),
}


def _bcast_pair(a_shape, b_shape):
    return {"a": In(a_shape), "b": In(b_shape)}


def _distinct_pair(shape_a, shape_b, gap=0.1):
    """a and b drawn so that every broadcast pair differs by at least ``gap`` (no ties)."""

    def a(r):
        return np.random.default_rng(5).uniform(-1, 1, shape_a)

    def b(r):
        rng = np.random.default_rng(6)
        av = np.random.default_rng(5).uniform(-1, 1, shape_a)
        for _ in range(1000):
            bv = rng.uniform(-1, 1, shape_b)
            if np.abs(np.subtract(av, bv)).min() >= gap:
                return bv
        raise AssertionError("no tie-free sample")

    return {"a": In(shape_a, sample=a), "b": In(shape_b, sample=b)}


# zero-gradient ops: the first-order check proves the gradient is exactly 0 away from jumps;
# there is no second order to check (no differentiable path is left).
_ZERO = {"second_order": False}

OPS = [
    # -- unary ----------------------------------------------------------------
    OpInfo("negative", S.negative, {"x": In(SH)}, lambda x: -x),
    OpInfo("exp", S.exp, {"x": In(SH)}, np.exp),
    OpInfo("log", S.log, {"x": In(SH, 0.5, 2.0)}, np.log),
    OpInfo("sqrt", S.sqrt, {"x": In(SH, 0.5, 2.0)}, np.sqrt),
    OpInfo("square", S.square, {"x": In(SH)}, np.square),
    OpInfo("tanh", S.tanh, {"x": In(SH)}, np.tanh),
    OpInfo("sigmoid", S.sigmoid, {"x": In(SH, -3, 3)}, sigmoid),
    OpInfo("relu", S.relu, {"x": In(SH, away=0.1)}, lambda x: np.maximum(x, 0)),
    OpInfo("abs", S.abs, {"x": In(SH, away=0.1)}, np.abs),
    # BlockGrad's gradient is deliberately not the derivative of its output (tested in test_executor)
    OpInfo("BlockGrad", lambda x: S.BlockGrad(x) * x, {"x": In(SH)}, lambda x: x * x, grad=False),
    # -- scalar forms -------------------------------------------------------------
    OpInfo("_plus_scalar", lambda x: x + 1.5, {"x": In(SH)}, lambda x: x + 1.5),
    OpInfo("_minus_scalar", lambda x: x - 1.5, {"x": In(SH)}, lambda x: x - 1.5),
    OpInfo("_rminus_scalar", lambda x: 1.5 - x, {"x": In(SH)}, lambda x: 1.5 - x),
    OpInfo("_mul_scalar", lambda x: x * 1.5, {"x": In(SH)}, lambda x: x * 1.5),
    OpInfo("_div_scalar", lambda x: x / 1.5, {"x": In(SH)}, lambda x: x / 1.5),
    OpInfo("_rdiv_scalar", lambda x: 1.5 / x, {"x": In(SH, 0.5, 2)}, lambda x: 1.5 / x),
    OpInfo("_power_scalar", lambda x: x**2.5, {"x": In(SH, 0.5, 2)}, lambda x: x**2.5),
    OpInfo("_rpower_scalar", lambda x: 2.5**x, {"x": In(SH)}, lambda x: 2.5**x),
    # -- binary ---------------------------------------------------------------------
    OpInfo("elemwise_add", S.elemwise_add, {"a": In(SH), "b": In(SH)}, lambda a, b: a + b),
    OpInfo("elemwise_sub", S.elemwise_sub, {"a": In(SH), "b": In(SH)}, lambda a, b: a - b),
    OpInfo("elemwise_mul", S.elemwise_mul, {"a": In(SH), "b": In(SH)}, lambda a, b: a * b),
    OpInfo("elemwise_div", S.elemwise_div, {"a": In(SH), "b": In(SH, 0.5, 2)}, lambda a, b: a / b),
    OpInfo("broadcast_add", S.broadcast_add, {"a": In((2, 1, 3)), "b": In((4, 1))}, lambda a, b: a + b),
    OpInfo("broadcast_sub", S.broadcast_sub, {"a": In((2, 3)), "b": In((1, 3))}, lambda a, b: a - b),
    OpInfo("broadcast_mul", S.broadcast_mul, {"a": In((3,)), "b": In((2, 3))}, lambda a, b: a * b),
    OpInfo("broadcast_div", S.broadcast_div, {"a": In((2, 3)), "b": In((2, 1), 0.5, 2)}, lambda a, b: a / b),
    # -- rounding and sign (piecewise constant) ---------------------------------------
    OpInfo("sign", S.sign, {"x": In(SH, away=0.1)}, np.sign, **_ZERO),
    OpInfo("round", S.round, {"x": In(SH, -3.9, 3.9, away=0.1, kinks=HALVES)}, _round_away, **_ZERO),
    OpInfo("rint", S.rint, {"x": In(SH, -3.9, 3.9, away=0.1, kinks=HALVES)}, np.rint, **_ZERO),
    OpInfo("ceil", S.ceil, {"x": In(SH, -3.9, 3.9, away=0.1, kinks=INTS)}, np.ceil, **_ZERO),
    OpInfo("floor", S.floor, {"x": In(SH, -3.9, 3.9, away=0.1, kinks=INTS)}, np.floor, **_ZERO),
    OpInfo("trunc", S.trunc, {"x": In(SH, -3.9, 3.9, away=0.1, kinks=INTS)}, np.trunc, **_ZERO),
    OpInfo("fix", S.fix, {"x": In(SH, -3.9, 3.9, away=0.1, kinks=INTS)}, np.trunc, **_ZERO),
    OpInfo(
        "logical_not",
        S.logical_not,
        {"x": In(SH, sample=lambda r: r.choice([0.0, 1.5, -2.0], SH))},
        lambda x: (x == 0).astype(np.float64),
        **_ZERO,
    ),
    OpInfo("zeros_like", S.zeros_like, {"x": In(SH)}, np.zeros_like, **_ZERO),
    OpInfo("ones_like", S.ones_like, {"x": In(SH)}, np.ones_like, **_ZERO),
    OpInfo("identity", S.identity, {"x": In(SH)}, lambda x: x.copy()),
    OpInfo("_copy", lambda x: S._copy(x) * x, {"x": In(SH)}, lambda x: x * x),
    # stop_gradient: the gradient only flows through the other factor
    OpInfo(
        "stop_gradient", lambda x: S.stop_gradient(x) * x, {"x": In(SH)}, lambda x: x * x, grad_ref=None, grad=False
    ),
    # -- exponentials and logarithms --------------------------------------------------
    OpInfo("expm1", S.expm1, {"x": In(SH)}, np.expm1),
    OpInfo("log2", S.log2, {"x": In(SH, 0.5, 3.0)}, np.log2),
    OpInfo("log10", S.log10, {"x": In(SH, 0.5, 3.0)}, np.log10),
    OpInfo("log1p", S.log1p, {"x": In(SH, -0.5, 2.0)}, np.log1p),
    # -- powers ------------------------------------------------------------------------
    OpInfo("rsqrt", S.rsqrt, {"x": In(SH, 0.5, 3.0)}, lambda x: 1 / np.sqrt(x)),
    OpInfo("cbrt", S.cbrt, {"x": In(SH, -2.0, 2.0, away=0.3)}, np.cbrt),
    OpInfo("rcbrt", S.rcbrt, {"x": In(SH, -2.0, 2.0, away=0.3)}, lambda x: 1 / np.cbrt(x)),
    OpInfo("reciprocal", S.reciprocal, {"x": In(SH, -2.0, 2.0, away=0.4)}, lambda x: 1 / x),
    # -- trigonometric and hyperbolic ----------------------------------------------------
    OpInfo("sin", S.sin, {"x": In(SH, -3, 3)}, np.sin),
    OpInfo("cos", S.cos, {"x": In(SH, -3, 3)}, np.cos),
    OpInfo("tan", S.tan, {"x": In(SH, -1.2, 1.2)}, np.tan),
    OpInfo("arcsin", S.arcsin, {"x": In(SH, -0.8, 0.8)}, np.arcsin),
    OpInfo("arccos", S.arccos, {"x": In(SH, -0.8, 0.8)}, np.arccos),
    OpInfo("arctan", S.arctan, {"x": In(SH, -3, 3)}, np.arctan),
    OpInfo("degrees", S.degrees, {"x": In(SH)}, np.degrees, fwd_tol={np.float16: (1e-2, 1e-1)}),
    OpInfo("radians", S.radians, {"x": In(SH, -90, 90)}, np.radians),
    OpInfo("sinh", S.sinh, {"x": In(SH, -2, 2)}, np.sinh),
    OpInfo("cosh", S.cosh, {"x": In(SH, -2, 2)}, np.cosh),
    OpInfo("arcsinh", S.arcsinh, {"x": In(SH, -3, 3)}, np.arcsinh),
    OpInfo("arccosh", S.arccosh, {"x": In(SH, 1.3, 3)}, np.arccosh),
    OpInfo("arctanh", S.arctanh, {"x": In(SH, -0.8, 0.8)}, np.arctanh),
    # -- activations ------------------------------------------------------------------------
    OpInfo("softsign", S.softsign, {"x": In(SH, -3, 3, away=0.1)}, lambda x: x / (1 + np.abs(x))),
    OpInfo("hard_sigmoid", S.hard_sigmoid, {"x": In(SH, -2, 2)}, lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
    # both saturated regions: kinks where 0.5 x + 0.2 hits 0 and 1
    OpInfo(
        "hard_sigmoid_saturated",
        lambda x: S.hard_sigmoid(x, alpha=0.5, beta=0.2),
        {"x": In((3, 4), -4, 4, away=0.1, kinks=(-0.4, 1.6))},
        lambda x: np.clip(0.5 * x + 0.2, 0, 1),
    ),
    # -- special functions --------------------------------------------------------------------
    OpInfo("erf", S.erf, {"x": In(SH, -2.5, 2.5)}, _vec(math.erf)),
    OpInfo("erf_tails", S.erf, {"x": In(SH, sample=_signed(2.6, 4.0))}, _vec(math.erf)),
    OpInfo("erfinv", S.erfinv, {"x": In(SH, -0.9, 0.9)}, _erfinv_ref),
    OpInfo("gamma", S.gamma, {"x": In(SH, sample=_gamma_domain)}, _vec(math.gamma), fwd_tol={np.float16: (2e-2, 2e-2)}),
    OpInfo(
        "gammaln", S.gammaln, {"x": In(SH, sample=_gamma_domain)}, _vec(math.lgamma), fwd_tol={np.float16: (2e-2, 2e-2)}
    ),
    # psi^(n): the hidden op behind the derivatives of gamma/gammaln (n = 1, 2 here; n = 0 is
    # gammaln's gradient, checked against finite differences in the rows above)
    OpInfo(
        "_polygamma_trigamma",
        lambda x: S._polygamma(x, n=1),
        {"x": In(SH, sample=_gamma_domain)},
        lambda x: _polygamma_ref(x, 1),
        fwd_tol={np.float16: (2e-2, 2e-2)},
    ),
    OpInfo(
        "_polygamma_tetragamma",
        lambda x: S._polygamma(x, n=2),
        {"x": In(SH, 0.5, 4.0)},
        lambda x: _polygamma_ref(x, 2),
        fwd_tol={np.float16: (2e-2, 2e-2)},
    ),
    # -- add_n / ElementWiseSum -------------------------------------------------------------
    OpInfo(
        "add_n", lambda a, b, c: S.add_n(a, b, c), {"a": In(SH), "b": In(SH), "c": In(SH)}, lambda a, b, c: a + b + c
    ),
    OpInfo(
        "ElementWiseSum", lambda a, b: S.ElementWiseSum(a, b * a), {"a": In(SH), "b": In(SH)}, lambda a, b: a + b * a
    ),
    # -- Cast: a float64 round trip keeps the dtype the generic tests expect; the cross-dtype
    # gradient (cast back to the input dtype) is checked in test_ops_elemwise.py
    OpInfo(
        "Cast",
        lambda x: S.Cast(S.square(S.Cast(x, dtype="float64")), dtype="float64"),
        {"x": In(SH)},
        np.square,
        dtypes=(np.float64,),
    ),
    # -- clip: gradient 1 inside [a_min, a_max], 0 outside ------------------------------------------
    OpInfo(
        "clip",
        lambda x: S.clip(x, a_min=-0.5, a_max=0.75),
        {"x": In((3, 4), -1.5, 1.5, away=0.05, kinks=(-0.5, 0.75))},
        lambda x: np.clip(x, -0.5, 0.75),
    ),
    # -- make_loss: identity forward, gradient ones whatever the head gradient -----------------------
    OpInfo("make_loss", lambda x: S.make_loss(S.square(x)), {"x": In(SH)}, np.square, grad_ref=lambda x: {"x": 2 * x}),
    # -- identity-like: _grad_add, _identity_with_attr_like_rhs, amp_multicast of one dtype ------------
    OpInfo("_grad_add", S._grad_add, {"a": In((2, 3)), "b": In((2, 3))}, lambda a, b: a + b),
    OpInfo(
        "_identity_with_attr_like_rhs",
        S._identity_with_attr_like_rhs,
        {"a": In((2, 3)), "b": In((2, 3), grad=False)},
        lambda a, b: a,
    ),
    OpInfo(
        "amp_multicast_same_dtype",
        lambda a, b: S.amp_multicast(a, b, num_outputs=2),
        {"a": In((2, 3)), "b": In((3,))},
        lambda a, b: (a, b),
    ),
    # -- more scalar forms ------------------------------------------------------------------------------
    OpInfo("_mod_scalar", lambda x: x % 1.5, {"x": In(SH, sample=_signed(1.6, 2.9))}, lambda x: _mod_ref(x, 1.5)),
    OpInfo("_rmod_scalar", lambda x: 5.5 % x, {"x": In(SH, 2.0, 2.6)}, lambda x: _mod_ref(5.5, x)),
    OpInfo("_rmod_scalar_negative", lambda x: -5.5 % x, {"x": In(SH, 2.0, 2.6)}, lambda x: _mod_ref(-5.5, x)),
    OpInfo("_hypot_scalar", lambda x: S._hypot_scalar(x, scalar=1.5), {"x": In(SH, -2, 2)}, lambda x: np.hypot(x, 1.5)),
    OpInfo(
        "_maximum_scalar",
        lambda x: S._maximum_scalar(x, scalar=0.25),
        {"x": In(SH, away=0.1, kinks=(0.25,))},
        lambda x: np.maximum(x, 0.25),
    ),
    OpInfo(
        "_minimum_scalar",
        lambda x: S._minimum_scalar(x, scalar=0.25),
        {"x": In(SH, away=0.1, kinks=(0.25,))},
        lambda x: np.minimum(x, 0.25),
    ),
    OpInfo("_power_scalar_negative_exponent", lambda x: x**-1.5, {"x": In(SH, 0.5, 2)}, lambda x: x**-1.5),
    OpInfo("_rpower_scalar_below_one", lambda x: 0.5**x, {"x": In(SH)}, lambda x: 0.5**x),
    OpInfo(
        "smooth_l1",
        lambda x: S.smooth_l1(x, scalar=2.0),
        {"x": In((3, 4), -1, 1, away=0.05, kinks=(-0.25, 0.25))},
        lambda x: np.where(np.abs(x) > 0.25, np.abs(x) - 0.125, 2.0 * x * x),
    ),
    OpInfo(
        "smooth_l1_default",
        S.smooth_l1,
        {"x": In((3, 4), -2, 2, away=0.1, kinks=(-1.0, 1.0))},
        lambda x: np.where(np.abs(x) > 1, np.abs(x) - 0.5, 0.5 * x * x),
    ),
    OpInfo(
        "_equal_scalar",
        lambda x: x == 1.0,
        {"x": In(SH, sample=lambda r: r.choice([1.0, -1.0, 0.5], SH))},
        lambda x: (x == 1.0).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "_not_equal_scalar",
        lambda x: x != 1.0,
        {"x": In(SH, sample=lambda r: r.choice([1.0, -1.0, 0.5], SH))},
        lambda x: (x != 1.0).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "_greater_scalar",
        lambda x: x > 0.25,
        {"x": In(SH, away=0.1, kinks=(0.25,))},
        lambda x: (x > 0.25).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "_greater_equal_scalar",
        lambda x: x >= 0.25,
        {"x": In(SH, away=0.1, kinks=(0.25,))},
        lambda x: (x >= 0.25).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "_lesser_scalar",
        lambda x: x < 0.25,
        {"x": In(SH, away=0.1, kinks=(0.25,))},
        lambda x: (x < 0.25).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "_lesser_equal_scalar",
        lambda x: x <= 0.25,
        {"x": In(SH, away=0.1, kinks=(0.25,))},
        lambda x: (x <= 0.25).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "_logical_and_scalar",
        lambda x: S._logical_and_scalar(x, scalar=2.0),
        {"x": In(SH, sample=lambda r: r.choice([0.0, 1.5], SH))},
        lambda x: (x != 0).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "_logical_or_scalar",
        lambda x: S._logical_or_scalar(x, scalar=0.0),
        {"x": In(SH, sample=lambda r: r.choice([0.0, 1.5], SH))},
        lambda x: (x != 0).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "_logical_xor_scalar",
        lambda x: S._logical_xor_scalar(x, scalar=1.0),
        {"x": In(SH, sample=lambda r: r.choice([0.0, 1.5], SH))},
        lambda x: (x == 0).astype(np.float64),
        **_ZERO,
    ),
    # -- binary, same shape --------------------------------------------------------------------------------
    OpInfo("_power", S._power, {"a": In(SH, 0.5, 2), "b": In(SH, -1.5, 1.5)}, lambda a, b: a**b),
    OpInfo("_power_overload", lambda a, b: a**b, {"a": In(SH, 0.5, 2), "b": In(SH, -1.5, 1.5)}, lambda a, b: a**b),
    OpInfo("_maximum", S._maximum, _distinct_pair(SH, SH), np.maximum),
    OpInfo("_minimum", S._minimum, _distinct_pair(SH, SH), np.minimum),
    OpInfo("_mod", S._mod, _MOD_A, _mod_ref),
    OpInfo("_mod_overload", lambda a, b: a % b, _MOD_A, _mod_ref),
    OpInfo("_hypot", S._hypot, {"a": In(SH, away=0.2), "b": In(SH, away=0.2)}, np.hypot),
    OpInfo(
        "_equal",
        S._equal,
        {
            "a": In(SH, sample=lambda r: np.array([[1.0, 2, 3], [4, 5, 6]])),
            "b": In(SH, sample=lambda r: np.array([[1.0, 0, 3], [0, 5, 0]])),
        },
        lambda a, b: (a == b).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "_not_equal",
        S._not_equal,
        {
            "a": In(SH, sample=lambda r: np.array([[1.0, 2, 3], [4, 5, 6]])),
            "b": In(SH, sample=lambda r: np.array([[1.0, 0, 3], [0, 5, 0]])),
        },
        lambda a, b: (a != b).astype(np.float64),
        **_ZERO,
    ),
    OpInfo("_greater", lambda a, b: a > b, _distinct_pair(SH, SH), lambda a, b: (a > b).astype(np.float64), **_ZERO),
    OpInfo(
        "_greater_equal", lambda a, b: a >= b, _distinct_pair(SH, SH), lambda a, b: (a >= b).astype(np.float64), **_ZERO
    ),
    OpInfo("_lesser", lambda a, b: a < b, _distinct_pair(SH, SH), lambda a, b: (a < b).astype(np.float64), **_ZERO),
    OpInfo(
        "_lesser_equal", lambda a, b: a <= b, _distinct_pair(SH, SH), lambda a, b: (a <= b).astype(np.float64), **_ZERO
    ),
    OpInfo(
        "_logical_and",
        S._logical_and,
        {
            "a": In(SH, sample=lambda r: np.array([[0.0, 1, 2], [0, 3, 0]])),
            "b": In(SH, sample=lambda r: np.array([[0.0, 0, 2], [1, 3, 0]])),
        },
        lambda a, b: ((a != 0) & (b != 0)).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "_logical_or",
        S._logical_or,
        {
            "a": In(SH, sample=lambda r: np.array([[0.0, 1, 2], [0, 3, 0]])),
            "b": In(SH, sample=lambda r: np.array([[0.0, 0, 2], [1, 3, 0]])),
        },
        lambda a, b: ((a != 0) | (b != 0)).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "_logical_xor",
        S._logical_xor,
        {
            "a": In(SH, sample=lambda r: np.array([[0.0, 1, 2], [0, 3, 0]])),
            "b": In(SH, sample=lambda r: np.array([[0.0, 0, 2], [1, 3, 0]])),
        },
        lambda a, b: ((a != 0) ^ (b != 0)).astype(np.float64),
        **_ZERO,
    ),
    # -- broadcasting ------------------------------------------------------------------------------------
    OpInfo(
        "broadcast_power", S.broadcast_power, {"a": In((2, 3), 0.5, 2), "b": In((2, 1), -1.5, 1.5)}, lambda a, b: a**b
    ),
    OpInfo("broadcast_maximum", S.broadcast_maximum, _distinct_pair((2, 1, 3), (4, 1)), np.maximum),
    OpInfo("broadcast_minimum", S.broadcast_minimum, _distinct_pair((3,), (2, 3)), np.minimum),
    OpInfo("broadcast_hypot", S.broadcast_hypot, {"a": In((2, 3), away=0.2), "b": In((1, 3), away=0.2)}, np.hypot),
    OpInfo(
        "broadcast_mod",
        S.broadcast_mod,
        {
            "a": In((2, 3), sample=lambda r: 1.5 * _signed(1.1, 1.9, (2, 3))(r)),
            "b": In((1, 3), sample=lambda r: np.array([[1.5, 1.5, 1.5]])),
        },
        _mod_ref,
    ),
    OpInfo("broadcast_plus", S.broadcast_plus, _bcast_pair((2, 3), (3,)), lambda a, b: a + b),
    OpInfo("broadcast_minus", S.broadcast_minus, _bcast_pair((2, 1), (1, 3)), lambda a, b: a - b),
    OpInfo(
        "broadcast_equal",
        S.broadcast_equal,
        {
            "a": In((2, 3), sample=lambda r: np.array([[1.0, 2, 3], [4, 5, 6]])),
            "b": In((3,), sample=lambda r: np.array([1.0, 5, 6])),
        },
        lambda a, b: (a == b).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "broadcast_not_equal",
        S.broadcast_not_equal,
        {
            "a": In((2, 3), sample=lambda r: np.array([[1.0, 2, 3], [4, 5, 6]])),
            "b": In((3,), sample=lambda r: np.array([1.0, 5, 6])),
        },
        lambda a, b: (a != b).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "broadcast_greater",
        S.broadcast_greater,
        _distinct_pair((2, 3), (2, 1)),
        lambda a, b: (a > b).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "broadcast_greater_equal",
        S.broadcast_greater_equal,
        _distinct_pair((2, 3), (2, 1)),
        lambda a, b: (a >= b).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "broadcast_lesser",
        S.broadcast_lesser,
        _distinct_pair((2, 3), (2, 1)),
        lambda a, b: (a < b).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "broadcast_lesser_equal",
        S.broadcast_lesser_equal,
        _distinct_pair((2, 3), (2, 1)),
        lambda a, b: (a <= b).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "broadcast_logical_and",
        S.broadcast_logical_and,
        {
            "a": In((2, 3), sample=lambda r: np.array([[0.0, 1, 2], [0, 3, 0]])),
            "b": In((2, 1), sample=lambda r: np.array([[0.0], [2.0]])),
        },
        lambda a, b: ((a != 0) & (b != 0)).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "broadcast_logical_or",
        S.broadcast_logical_or,
        {
            "a": In((2, 3), sample=lambda r: np.array([[0.0, 1, 2], [0, 3, 0]])),
            "b": In((2, 1), sample=lambda r: np.array([[0.0], [2.0]])),
        },
        lambda a, b: ((a != 0) | (b != 0)).astype(np.float64),
        **_ZERO,
    ),
    OpInfo(
        "broadcast_logical_xor",
        S.broadcast_logical_xor,
        {
            "a": In((2, 3), sample=lambda r: np.array([[0.0, 1, 2], [0, 3, 0]])),
            "b": In((2, 1), sample=lambda r: np.array([[0.0], [2.0]])),
        },
        lambda a, b: ((a != 0) ^ (b != 0)).astype(np.float64),
        **_ZERO,
    ),
    # -- where: gradient to x where condition != 0, to y elsewhere, none to condition ----------------
    OpInfo(
        "where",
        S.where,
        {"c": In(SH, sample=lambda r: np.array([[1.0, 0, 2], [0, -1, 0]]), grad=False), "x": In(SH), "y": In(SH)},
        lambda c, x, y: np.where(c != 0, x, y),
    ),
    OpInfo(
        "where_1d_condition",
        S.where,
        {"c": In((3,), sample=lambda r: np.array([0.0, 1, 0]), grad=False), "x": In((3, 2)), "y": In((3, 2))},
        lambda c, x, y: np.where(c[:, None] != 0, x, y),
    ),
    OpInfo(
        "where_composed",
        lambda c, x, y: S.where(c, S.square(x), x * y),
        {"c": In(SH, sample=lambda r: np.array([[1.0, 0, 2], [0, -1, 0]]), grad=False), "x": In(SH), "y": In(SH)},
        lambda c, x, y: np.where(c != 0, x * x, x * y),
    ),
]
