"""Elementwise operators: unary math, binary same-shape, scalar and broadcast forms.

Each registration keeps forward, shape rule and gradient a few lines apart.
Gradient rules build Symbols through ``F`` and receive ``n`` (the node: its
``inputs``/``outputs`` as Symbols, ``params``) and ``g`` (one head gradient
Symbol per output). Derivations are written next to each rule.
"""

from __future__ import annotations

import numpy as np

from ..base import ShapeError
from .registry import Param, broadcast_shapes, register, same_shape


def _keep(r, like):
    """Keep the input's dtype (MXNet semantics: ``int_array + 2.5`` stays int)."""
    if r.dtype != like.dtype:
        return r.astype(like.dtype)
    return r


def _zero_grad(F, n, g):
    """Differentiable almost nowhere or constant: every input gets no gradient."""
    return [None] * len(n.inputs)


# ----------------------------------------------------------------------------
# unary
# ----------------------------------------------------------------------------


def _unary(name, fwd, grad, aliases=(), doc=""):
    """Register ``y = fwd(x)`` whose gradient ``grad(F, x, y, gy)`` is a Symbol (or None)."""
    if grad is None:
        rule = _zero_grad
    else:

        def rule(F, n, g):
            return [grad(F, n.inputs[0], n.outputs[0], g[0])]

    return register(name, aliases=aliases, forward=fwd, infer_shape=same_shape, gradient=rule, doc=doc)


_unary("negative", lambda xp, x: -x, lambda F, x, y, g: -g)  # d(-x) = -1
_unary("_copy", lambda xp, x: x.copy(), lambda F, x, y, g: g, aliases=("identity",))
_unary("abs", lambda xp, x: xp.abs(x), lambda F, x, y, g: g * F.sign(x))  # |x|' = sign x
_unary("sign", lambda xp, x: xp.sign(x), None)
_unary("exp", lambda xp, x: xp.exp(x), lambda F, x, y, g: g * y)  # (e^x)' = e^x = y
_unary("expm1", lambda xp, x: xp.expm1(x), lambda F, x, y, g: g * (y + 1.0))  # (e^x - 1)' = y + 1
_unary("log", lambda xp, x: xp.log(x), lambda F, x, y, g: g / x)  # (ln x)' = 1/x
_unary("log1p", lambda xp, x: xp.log1p(x), lambda F, x, y, g: g / (x + 1.0))
_unary("square", lambda xp, x: x * x, lambda F, x, y, g: g * (x * 2.0))  # (x^2)' = 2x
_unary("sqrt", lambda xp, x: xp.sqrt(x), lambda F, x, y, g: g / (y * 2.0))  # (x^1/2)' = 1/(2y)
# tanh' = 1 - tanh^2
_unary("tanh", lambda xp, x: xp.tanh(x), lambda F, x, y, g: g * (1.0 - F.square(y)))
# sigmoid' = s (1 - s)
_unary("sigmoid", lambda xp, x: _sigmoid(xp, x), lambda F, x, y, g: g * (y * (1.0 - y)))
# relu' = 1 where x > 0 else 0 (MXNet takes 0 at x = 0)
_unary("relu", lambda xp, x: xp.maximum(x, 0), lambda F, x, y, g: g * (x > 0.0))
_unary("zeros_like", lambda xp, x: xp.zeros_like(x), None)
_unary("ones_like", lambda xp, x: xp.ones_like(x), None)
# BlockGrad: identity forward, no gradient through it.
_unary("BlockGrad", lambda xp, x: x, None, aliases=("stop_gradient",))


def _sigmoid(xp, x):
    # Stable for large |x|: 1/(1+e^-x) for x >= 0, e^x/(1+e^x) otherwise.
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


# ----------------------------------------------------------------------------
# scalar forms behind the overloads (x op s, s op x)
# ----------------------------------------------------------------------------

_SCALAR = {"scalar": Param("float", 1.0), "is_int": Param("bool", True)}


def _scalar(name, fwd, grad):
    """Register ``y = fwd(x, s)``; ``grad(F, x, y, gy, s)``."""
    if grad is None:
        rule = _zero_grad
    else:

        def rule(F, n, g):
            return [grad(F, n.inputs[0], n.outputs[0], g[0], n.params["scalar"])]

    def forward(xp, x, scalar, is_int=True):
        return _keep(fwd(xp, x, scalar), x)

    return register(name, forward=forward, infer_shape=same_shape, gradient=rule, params=dict(_SCALAR))


_scalar("_plus_scalar", lambda xp, x, s: x + s, lambda F, x, y, g, s: g)
_scalar("_minus_scalar", lambda xp, x, s: x - s, lambda F, x, y, g, s: g)
_scalar("_rminus_scalar", lambda xp, x, s: s - x, lambda F, x, y, g, s: -g)
_scalar("_mul_scalar", lambda xp, x, s: x * s, lambda F, x, y, g, s: g * s)
_scalar("_div_scalar", lambda xp, x, s: x / s, lambda F, x, y, g, s: g / s)
# y = s / x  ->  dy/dx = -s / x^2 = -y / x
_scalar("_rdiv_scalar", lambda xp, x, s: s / x, lambda F, x, y, g, s: -g * y / x)
# y = x^s  ->  dy/dx = s x^(s-1)
_scalar("_power_scalar", lambda xp, x, s: x**s, lambda F, x, y, g, s: g * (F._power_scalar(x, scalar=s - 1.0) * s))
# y = s^x  ->  dy/dx = y ln s
_scalar("_rpower_scalar", lambda xp, x, s: s**x, lambda F, x, y, g, s: g * (y * float(np.log(s))))
# max(x, s)' = 1 where x >= s (MXNet: ties go to x); min likewise with x <= s
_scalar("_maximum_scalar", lambda xp, x, s: xp.maximum(x, s), lambda F, x, y, g, s: g * (x >= s))
_scalar("_minimum_scalar", lambda xp, x, s: xp.minimum(x, s), lambda F, x, y, g, s: g * (x <= s))
# x mod s has slope 1 almost everywhere; s mod x has slope -floor(s/x)
_scalar("_mod_scalar", lambda xp, x, s: xp.mod(x, s), lambda F, x, y, g, s: g)
_scalar("_rmod_scalar", lambda xp, x, s: xp.mod(s, x), lambda F, x, y, g, s: -g * F.floor(F._rdiv_scalar(x, scalar=s)))
for _name, _f in [
    ("_equal_scalar", lambda xp, x, s: x == s),
    ("_not_equal_scalar", lambda xp, x, s: x != s),
    ("_greater_scalar", lambda xp, x, s: x > s),
    ("_greater_equal_scalar", lambda xp, x, s: x >= s),
    ("_lesser_scalar", lambda xp, x, s: x < s),
    ("_lesser_equal_scalar", lambda xp, x, s: x <= s),
]:
    _scalar(_name, _f, None)  # comparisons: 0/1 in the input dtype, zero gradient


# ----------------------------------------------------------------------------
# binary, same shape (elemwise_*) and broadcasting (broadcast_*)
# ----------------------------------------------------------------------------


def _broadcast_shape(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    if a is None or b is None:
        return in_shapes, out_shapes
    return in_shapes, [broadcast_shapes(a, b, where)]


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
        pick = (lambda b_, e_: getattr(F, b_ if broadcast else e_))
        self.mul = pick("broadcast_mul", "elemwise_mul")
        self.div = pick("broadcast_div", "elemwise_div")
        self.pow = pick("broadcast_power", "_power")
        self.ge = pick("broadcast_greater_equal", "_greater_equal")
        self.gt = pick("broadcast_greater", "_greater")
        self.le = pick("broadcast_lesser_equal", "_lesser_equal")
        self.lt = pick("broadcast_lesser", "_lesser")


def _binary(names, fwd, grad):
    """Register ``y = fwd(a, b)`` as ``elemwise``-style and ``broadcast``-style ops.

    ``grad(F, o, a, b, y, gy)`` returns the two full-shape gradients, combining
    values with ``o.mul``/``o.div``/... of the matching flavour; for the
    broadcast form each is then reduced to its input's shape by ``_sum_to_like``.
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
        return fwd(xp, a, b)

    if same_name:
        register(same_name, inputs=("lhs", "rhs"), forward=forward, infer_shape=_same_shape_binary, gradient=same_rule)
    if bcast_name:
        register(bcast_name, inputs=("lhs", "rhs"), forward=forward, infer_shape=_broadcast_shape, gradient=bcast_rule)


_binary(("elemwise_add", "broadcast_add"), lambda xp, a, b: a + b, lambda F, o, a, b, y, g: (g, g))
_binary(("elemwise_sub", "broadcast_sub"), lambda xp, a, b: a - b, lambda F, o, a, b, y, g: (g, -g))
# (ab)' = (b, a)
_binary(("elemwise_mul", "broadcast_mul"), lambda xp, a, b: a * b, lambda F, o, a, b, y, g: (o.mul(g, b), o.mul(g, a)))
# (a/b)' = (1/b, -a/b^2 = -y/b)
_binary(
    ("elemwise_div", "broadcast_div"),
    lambda xp, a, b: a / b,
    lambda F, o, a, b, y, g: (o.div(g, b), -o.div(g * y, b)),
)
# (a^b)' = (b a^(b-1), a^b ln a)
_binary(
    ("_power", "broadcast_power"),
    lambda xp, a, b: a**b,
    lambda F, o, a, b, y, g: (o.mul(g, o.mul(b, o.pow(a, b - 1.0))), g * o.mul(y, F.log(a))),
)
# max/min: the gradient goes to the chosen side (ties to lhs, as MXNet)
_binary(
    ("_maximum", "broadcast_maximum"),
    lambda xp, a, b: xp.maximum(a, b),
    lambda F, o, a, b, y, g: (g * o.ge(a, b), g * o.lt(a, b)),
)
_binary(
    ("_minimum", "broadcast_minimum"),
    lambda xp, a, b: xp.minimum(a, b),
    lambda F, o, a, b, y, g: (g * o.le(a, b), g * o.gt(a, b)),
)
# a mod b = a - b floor(a/b): (1, -floor(a/b)) almost everywhere
_binary(
    ("_mod", "broadcast_mod"),
    lambda xp, a, b: xp.mod(a, b),
    lambda F, o, a, b, y, g: (g, -o.mul(g, F.floor(o.div(a, b)))),
)
# hypot = sqrt(a^2 + b^2): (a/y, b/y)
_binary(
    ("_hypot", "broadcast_hypot"),
    lambda xp, a, b: xp.hypot(a, b),
    lambda F, o, a, b, y, g: (g * o.div(a, y), g * o.div(b, y)),
)


def _cmp(xp_fn):
    return lambda xp, a, b: xp_fn(a, b).astype(np.result_type(a.dtype, b.dtype))


for _pair, _fn in [
    (("_equal", "broadcast_equal"), np.equal),
    (("_not_equal", "broadcast_not_equal"), np.not_equal),
    (("_greater", "broadcast_greater"), np.greater),
    (("_greater_equal", "broadcast_greater_equal"), np.greater_equal),
    (("_lesser", "broadcast_lesser"), np.less),
    (("_lesser_equal", "broadcast_lesser_equal"), np.less_equal),
]:
    _binary(_pair, _cmp(_fn), lambda F, o, a, b, y, g: (None, None))


# ----------------------------------------------------------------------------
# helpers used by gradient rules
# ----------------------------------------------------------------------------


def _floor_fwd(xp, x):
    return xp.floor(x)


_unary("floor", _floor_fwd, None)


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
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(like.shape) if d == 1 and a.shape[lead + i] != 1
    )
    return a.sum(axis=axes).reshape(like.shape)


def _like_shape(params, in_shapes, out_shapes, where):
    return in_shapes, [in_shapes[1]]


register(
    "_sum_to_like",
    inputs=("data", "like"),
    forward=_sum_to_like_fwd,
    infer_shape=_like_shape,
    # sum_to is linear; its adjoint broadcasts back: d/da = broadcast(g, a.shape)
    gradient=lambda F, n, g: [F._broadcast_to_like(g[0], n.inputs[0]), None],
    doc="The one shared reduction of broadcast gradients to an input's shape.",
)


def _broadcast_to_like_fwd(xp, a, like):
    if a.shape == like.shape:
        return a
    return xp.broadcast_to(a, like.shape)


register(
    "_broadcast_to_like",
    inputs=("data", "like"),
    forward=_broadcast_to_like_fwd,
    infer_shape=_like_shape,
    gradient=lambda F, n, g: [F._sum_to_like(g[0], n.inputs[0]), None],
    doc="numpy-broadcast ``data`` to ``like``'s shape (adjoint of _sum_to_like).",
)
