"""Runnable corpus of gradient bugs that shipped (``catalogue.jsonl``), as symgrad ``CustomOp`` pairs.

For every entry: a *buggy* op whose backward computes what the catalogue's ``buggy_backward`` says the shipped code
computed, and a *correct* twin with the same forward and the fixed backward (at a non-differentiable point: the
subgradient / convention the fix chose). Both are registered at import time (op types ``sb_<n>_buggy`` and
``sb_<n>_correct``). ``CORPUS`` lists the entries; each has ``inputs(rng, dtype)`` (a user's test draw: standard
normal values of a small shape, random integer indices with replacement; nothing placed at the special point) and
``special(rng, dtype)`` (the inputs AT the catalogue's special point). Index inputs are float arrays holding
integers (MXNet's convention) and are named in ``index_args``; every op writes a zero gradient for them and rounds
them with ``np.rint`` so that a finite-difference step never changes the index.

Forward and backward compute in the input dtype (python-float constants keep float32 float32, NEP 50).

Catalogue entries NOT in the corpus, and why:

- the 10 entries marked ``unsure`` (atan2 origin, hardsigmoid x2, hardswish, reduce-max ties, recompute_grad,
  paddle ignore_index, conv-weight groups x2, Theano ConvOp subsample);
- torch-logsumexp-all-neginf-nan, jax-logsumexp-all-neginf-nan: the special point is an all ``-inf`` row, and
  every symgrad checker refuses non-finite inputs (ValueError), so no check can run there;
- tinygrad-max-fp16-count-overflow, chainerx-take-fp16-repeated, mxnet-embedding-take-fp16-accumulation: float16
  only (70 000 ties, native fp16 scatter, fp16 accumulation); the runner checks float32 and float64;
- oneflow-fmod-broadcast-not-reduced, nd4j-broadcast-add-not-reduced: the shipped gradient had the *output's*
  shape; a CustomOp's ``in_grad`` buffer has the input's shape, so this bug cannot be expressed (writing it raises);
- mxnet-boolean-mask-grad-add: the output shape depends on the index values (CustomOp shapes are static);
- ttnn-rsqrt-bw-zero-sign: the difference is ``+inf`` vs ``-inf`` at the pole x = 0 (forward ``inf``), outside
  what finite differences can compare;
- flaggems-layernorm-backward-rank3: the shipped kernel read out of bounds (not reproducible in numpy);
- neon-bprop-conv-depth-index: full 3-D convolution input gradient (too large to emulate faithfully here);
- torch-embedding-padding-idx-cuda: same math as torch-embedding-sparse-padding-idx (kept), CUDA only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import symgrad as sg

__all__ = ["Entry", "CORPUS", "by_id"]


@dataclass
class Entry:
    id: str
    repo: str
    issue: int
    bug_class: str
    args: tuple  # input names, data first (the output dtype follows the first input)
    inputs: Callable  # (rng, dtype) -> {name: array}: a user's test draw
    special: Callable  # (rng, dtype) -> {name: array}: at the catalogue's special point
    buggy: str = ""  # op_type of the buggy op
    correct: str = ""  # op_type of the correct twin
    index_args: tuple = ()  # inputs holding integer indices (float arrays): not differentiated
    note: str = ""
    float_args: tuple = field(default=())

    def __post_init__(self):
        self.float_args = tuple(a for a in self.args if a not in self.index_args)


CORPUS: list[Entry] = []


# -- registration helpers -----------------------------------------------------------------------------------------


def _np(arrays):
    return [np.asarray(a).view(np.ndarray) for a in arrays]


class _Op(sg.operator.CustomOp):
    """One output; ``fwd(*xs) -> y``, ``bwd(g, y, *xs) -> grads`` (None: zero, for index inputs)."""

    def __init__(self, fwd, bwd):
        super().__init__()
        self.fwd, self.bwd = fwd, bwd

    def forward(self, is_train, req, in_data, out_data, aux):
        with np.errstate(all="ignore"):
            y = self.fwd(*_np(in_data))
        self.assign(out_data[0], req[0], np.asarray(y, dtype=out_data[0].dtype).reshape(out_data[0].shape))

    def grads(self, out_grad, in_data, out_data):
        xs = _np(in_data)
        with np.errstate(all="ignore"):
            gs = self.bwd(np.asarray(out_grad[0]), np.asarray(out_data[0]), *xs)
        return [
            np.zeros_like(x) if gr is None else np.broadcast_to(np.asarray(gr, x.dtype), x.shape)
            for gr, x in zip(gs, xs)
        ]

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        for i, gr in enumerate(self.grads(out_grad, in_data, out_data)):
            self.assign(in_grad[i], req[i], gr)


def _prop(op_type, args, oshape, make_op):
    @sg.operator.register(op_type)
    class _Prop(sg.operator.CustomOpProp):
        def __init__(self):
            super().__init__(need_top_grad=True)

        def list_arguments(self):
            return list(args)

        def list_outputs(self):
            return ["output"]

        def infer_shape(self, in_shape):
            return [list(s) for s in in_shape], [list(oshape(*in_shape))], []

        def create_operator(self, ctx, shapes, dtypes):
            return make_op()

    return _Prop


def add(id, repo, issue, bug_class, args, oshape, fwd, bad, good, inputs, special, index_args=(), note="", bad_op=None):
    """Register ``sb_<n>_buggy`` / ``sb_<n>_correct`` and append the entry. ``bad_op``: a CustomOp class
    (taking ``fwd, bad``) for bugs in the handling of ``req`` itself."""
    n = len(CORPUS)
    e = Entry(
        id,
        repo,
        issue,
        bug_class,
        tuple(args),
        inputs,
        special,
        f"sb_{n:02d}_buggy",
        f"sb_{n:02d}_correct",
        tuple(index_args),
        note,
    )
    _prop(e.buggy, args, oshape, lambda: (bad_op or _Op)(fwd, bad))
    _prop(e.correct, args, oshape, lambda: _Op(fwd, good))
    CORPUS.append(e)
    return e


def by_id(entry_id):
    return next(e for e in CORPUS if e.id == entry_id)


# -- shared pieces ---------------------------------------------------------------------------------------------------


def _n(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def _idx(rng, high, shape, dtype):
    return rng.integers(0, high, size=shape).astype(dtype)  # with replacement, as a user draws them


def _i(a):
    return np.rint(a).astype(np.int64)


def _safe_div(a, b):
    return a / np.where(b == 0, 1, b).astype(b.dtype)


def _prod_others(x, axis):
    """prod_{j != i} x_j along ``axis`` without division (exclusive prefix times exclusive suffix products)."""
    one = np.ones_like(np.take(x, [0], axis=axis))
    pre = np.cumprod(np.concatenate([one, np.delete(x, -1, axis=axis)], axis=axis), axis=axis)
    suf = np.flip(
        np.cumprod(np.concatenate([one, np.delete(np.flip(x, axis), -1, axis=axis)], axis=axis), axis=axis), axis
    )
    return pre * suf


def _rev_cumsum(a, axis):
    return np.flip(np.cumsum(np.flip(a, axis), axis=axis), axis)


def _cumprod_grad(g, x, axis):
    """Division-free: grad_i = sum_{j >= i} g_j prod_{k <= j, k != i} x_k."""
    out = np.empty_like(x)
    for i in range(x.shape[axis]):
        xi = np.moveaxis(x.copy(), axis, 0)
        xi[i] = 1
        cp = np.moveaxis(np.cumprod(xi, axis=0), 0, axis)
        s = np.moveaxis(_rev_cumsum(g * cp, axis), axis, 0)[i]
        np.moveaxis(out, axis, 0)[i] = s
    return out


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _onehot(t, c, dtype):
    return (np.arange(c)[None, :] == t[:, None]).astype(dtype)


def _scalar(*shapes):
    return (1,)


def _same(*shapes):
    return shapes[0]


# == nan_at_special_point =============================================================================================


def _norm_over_norm(id, repo, issue, shape, special_shape):
    """||x|| over all elements whose shipped backward was g*x/||x||: 0/0 = NaN at x = 0 (the fix: 0 there); drawn
    of ``shape``, all zeros of ``special_shape`` at the special point."""
    add(
        id,
        repo,
        issue,
        "nan_at_special_point",
        ["x"],
        _scalar,
        lambda x: np.sqrt(np.sum(x * x)),
        lambda g, y, x: [g * x / y],
        lambda g, y, x: [g * _safe_div(x, y) * (y > 0)],
        lambda r, dt: {"x": _n(r, shape, dt)},
        lambda r, dt: {"x": np.zeros(special_shape, dt)},
    )


# pytorch/pytorch#2421 -- norm backward divided by the saved norm: g*x/||x||, 0/0 = NaN at x = 0.
_norm_over_norm("torch-norm-zero-nan", "pytorch/pytorch", 2421, (3, 4), (3, 4))

# tensorflow/tensorflow#12071 -- norm = sqrt(sum(x*x), axis=1): (0.5/sqrt(s)) * 2x * g, inf*0 = NaN on a zero row.
add(
    "tf-norm-zero-nan",
    "tensorflow/tensorflow",
    12071,
    "nan_at_special_point",
    ["x"],
    lambda s: (s[0],),
    lambda x: np.sqrt(np.sum(x * x, axis=1)),
    lambda g, y, x: [g[:, None] * (0.5 / np.sqrt(np.sum(x * x, axis=1)))[:, None] * (2 * x)],
    lambda g, y, x: [g[:, None] * _safe_div(x, y[:, None]) * (y[:, None] > 0)],
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": np.concatenate([_n(r, (1, 4), dt), np.zeros((1, 4), dt), _n(r, (1, 4), dt)])},
)

# HIPS/autograd#151 -- linalg.norm vjp g*x/norm(x): NaN at the zero vector.
_norm_over_norm("autograd-linalg-norm-zero-nan", "HIPS/autograd", 151, (5,), (3,))

# tenstorrent/tt-metal#55585 -- moreh_norm_backward sign(x)|x|^(p-1) * y * dy / y^p, no guard: NaN on an all-zero
# slice (here p = 3 over dim 1).
P3 = 3.0
add(
    "ttnn-moreh-norm-zero-slice",
    "tenstorrent/tt-metal",
    55585,
    "nan_at_special_point",
    ["x"],
    lambda s: (s[0],),
    lambda x: np.sum(np.abs(x) ** P3, axis=1) ** (1 / P3),
    lambda g, y, x: [np.sign(x) * np.abs(x) ** (P3 - 1) * (y * g * (1 / y**P3))[:, None]],
    lambda g, y, x: [np.sign(x) * np.abs(x) ** (P3 - 1) * (g * _safe_div(np.ones_like(y), y ** (P3 - 1)))[:, None]],
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": np.concatenate([np.zeros((1, 4), dt), _n(r, (2, 4), dt)])},
)


# tensorflow/tensorflow#22048 -- clip_by_norm: the inactive sqrt branch of maximum(l2norm, c) is still
# differentiated; at t = 0, 0 * (0.5/sqrt(0)) = NaN for every element (c = 1).
def _clip_bad(g, y, t):
    s = np.sum(t * t)
    n = np.sqrt(s)
    m = np.maximum(n, 1.0)
    dm = -np.sum(g * t) / m**2
    dn = dm * (n >= 1.0)  # zero cotangent of the inactive branch ...
    return [g / m + dn * (0.5 / np.sqrt(s)) * 2 * t]  # ... times inf at s = 0


def _clip_good(g, y, t):
    n = np.sqrt(np.sum(t * t))
    if n < 1.0:
        return [g]  # identity below the clip norm
    return [g / n - t * np.sum(g * t) / n**3]


add(
    "tf-clip-by-norm-zero-nan",
    "tensorflow/tensorflow",
    22048,
    "nan_at_special_point",
    ["t"],
    _same,
    lambda t: t * 1.0 / np.maximum(np.sqrt(np.sum(t * t)), 1.0),
    _clip_bad,
    _clip_good,
    lambda r, dt: {"t": _n(r, (4,), dt)},
    lambda r, dt: {"t": np.zeros((3,), dt)},
)

# PaddlePaddle/Paddle#32448 -- dist(x, y, 2): g*(x-y)/||x-y||, NaN when x == y (the same tensor twice).
add(
    "paddle-dist-equal-inputs-nan",
    "PaddlePaddle/Paddle",
    32448,
    "nan_at_special_point",
    ["x", "y"],
    _scalar,
    lambda x, y: np.sqrt(np.sum((x - y) ** 2)),
    lambda g, o, x, y: [g * (x - y) / o, -g * (x - y) / o],
    lambda g, o, x, y: [g * _safe_div(x - y, o) * (o > 0), -g * _safe_div(x - y, o) * (o > 0)],
    lambda r, dt: {"x": _n(r, (3, 4), dt), "y": _n(r, (3, 4), dt)},
    lambda r, dt: (lambda x: {"x": x, "y": x})(_n(r, (3, 4), dt)),
)

# pytorch/pytorch#45720 -- cdist p < 1: sign(diff)|diff|^(p-1) g / dist^(p-1) is 0*inf = NaN where one coordinate
# difference is exactly 0 (p = 0.5).
PC = 0.5


def _cdist_grads(g, d, x, y, fixed):
    diff = x[:, None, :] - y[None, :, :]
    core = np.sign(diff) * np.abs(diff) ** (PC - 1)
    if fixed:
        core = np.where(diff == 0, 0, core)
    w = np.where(d == 0, 0, g / np.where(d == 0, 1, d) ** (PC - 1))[:, :, None]
    t = core * w
    return [t.sum(axis=1), -t.sum(axis=0)]


def _cdist_special(r, dt):
    x, y = _n(r, (2, 3), dt), _n(r, (3, 3), dt)
    y[1, 0] = x[0, 0]  # the pair (0, 1) shares one coordinate exactly
    return {"x": x, "y": y}


add(
    "torch-cdist-p-lt-1-nan",
    "pytorch/pytorch",
    45720,
    "nan_at_special_point",
    ["x", "y"],
    lambda sx, sy: (sx[0], sy[0]),
    lambda x, y: np.sum(np.abs(x[:, None, :] - y[None, :, :]) ** PC, axis=2) ** (1 / PC),
    lambda g, d, x, y: _cdist_grads(g, d, x, y, False),
    lambda g, d, x, y: _cdist_grads(g, d, x, y, True),
    lambda r, dt: {"x": _n(r, (2, 3), dt), "y": _n(r, (3, 3), dt)},
    _cdist_special,
)


# pytorch/pytorch#4320 -- std: g (x - mean) / ((N-1) std), 0/0 = NaN on a constant slice (std over axis 1).
def _std_grad(g, y, x, fixed):
    n = x.shape[1]
    c = x - x.mean(axis=1, keepdims=True)
    if fixed:
        return [g[:, None] * _safe_div(c, (n - 1) * y[:, None]) * (y[:, None] > 0)]
    return [g[:, None] * c / ((n - 1) * y[:, None])]


add(
    "torch-std-constant-nan",
    "pytorch/pytorch",
    4320,
    "nan_at_special_point",
    ["x"],
    lambda s: (s[0],),
    lambda x: np.std(x, axis=1, ddof=1),
    lambda g, y, x: _std_grad(g, y, x, False),
    lambda g, y, x: _std_grad(g, y, x, True),
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": np.concatenate([_n(r, (1, 4), dt), np.ones((1, 4), dt), _n(r, (1, 4), dt)])},
)


# tensorflow/tensorflow#56830 -- reduce_std = sqrt(reduce_variance): (0.5/sqrt(0)) * 0 = NaN for a length-1 axis.
def _rstd_bad(g, y, x):
    n = x.shape[0]
    c = x - x.mean(axis=0, keepdims=True)
    dvar = g * 0.5 / np.sqrt(np.mean(c * c, axis=0, keepdims=True))
    return [dvar * 2 * c / n]


def _rstd_good(g, y, x):
    n = x.shape[0]
    c = x - x.mean(axis=0, keepdims=True)
    return [g * _safe_div(c, n * y) * (y > 0)]


add(
    "tf-reduce-std-single-element-nan",
    "tensorflow/tensorflow",
    56830,
    "nan_at_special_point",
    ["x"],
    lambda s: (1,) + tuple(s[1:]),
    lambda x: np.sqrt(np.mean((x - x.mean(axis=0, keepdims=True)) ** 2, axis=0, keepdims=True)),
    _rstd_bad,
    _rstd_good,
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": _n(r, (1, 4), dt)},
)

# apache/mxnet#17864 -- prod backward g*prod(x)/x_i: [[4, 0]] -> [[0, nan]] (prod over axis 1).
add(
    "mxnet-prod-zero-nan",
    "apache/mxnet",
    17864,
    "nan_at_special_point",
    ["x"],
    lambda s: (s[0],),
    lambda x: np.prod(x, axis=1),
    lambda g, y, x: [g[:, None] * y[:, None] / x],
    lambda g, y, x: [g[:, None] * _prod_others(x, 1)],
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": np.array([[4, 0]], dt)},
)

# HIPS/autograd#378 -- prod vjp g*prod(x)/x: grad(np.prod)([0., 1.]) = [nan, 0.].
add(
    "autograd-prod-zero-nan",
    "HIPS/autograd",
    378,
    "nan_at_special_point",
    ["x"],
    _scalar,
    lambda x: np.prod(x),
    lambda g, y, x: [g * y / x],
    lambda g, y, x: [g * _prod_others(x, 0)],
    lambda r, dt: {"x": _n(r, (4,), dt)},
    lambda r, dt: {"x": np.array([0.0, 1.0], dt)},
)


# tinygrad/tinygrad#17404 -- prod backward g*ret/x: [0, 2, 3] -> [nan, 0, 0]; the fix counts the zeros.
def _tiny_prod_good(g, y, x):
    flat = x.reshape(-1)
    zeros = flat == 0
    if zeros.sum() == 0:
        return [g * y / x]
    if zeros.sum() == 1:
        return [g * np.where(x == 0, np.prod(np.where(zeros, 1, flat)), 0)]
    return [np.zeros_like(x)]


add(
    "tinygrad-prod-zero-nan",
    "tinygrad/tinygrad",
    17404,
    "nan_at_special_point",
    ["x"],
    _scalar,
    lambda x: np.prod(x),
    lambda g, y, x: [g * y / x],
    _tiny_prod_good,
    lambda r, dt: {"x": _n(r, (2, 3), dt)},
    lambda r, dt: {"x": np.array([[0.0, 2.0, 3.0], [1.5, 0.5, 2.0]], dt)},
)


def _cumprod_over_x(id, repo, issue, axis, shape, special, bad=None):
    """cumprod along ``axis`` whose shipped backward was reverse_cumsum(g*cumprod(x))/x: NaN where x == 0 (``bad``:
    another shipped form of it); the fix is division-free (``_cumprod_grad``). Drawn of ``shape``."""
    add(
        id,
        repo,
        issue,
        "nan_at_special_point",
        ["x"],
        _same,
        lambda x: np.cumprod(x, axis=axis),
        bad or (lambda g, y, x: [_rev_cumsum(g * y, axis) / x]),
        lambda g, y, x: [_cumprod_grad(g, x, axis)],
        lambda r, dt: {"x": _n(r, shape, dt)},
        special,
    )


# tensorflow/tensorflow#3862 -- cumprod backward reverse_cumsum(g*cumprod(x))/x: NaN where x == 0 (axis 1).
_cumprod_over_x(
    "tf-cumprod-zero-nan",
    "tensorflow/tensorflow",
    3862,
    1,
    (3, 4),
    lambda r, dt: {"x": _n(r, (3, 4), dt) * np.array([1, 1, 0, 1], dt)},
)

# tensorflow/tensorflow#119430 -- same formula with 0/0 silently replaced by 0 (div_no_nan): finite but wrong,
# [0, 2, 3] -> [0, 0, 0] instead of [9, 0, 0] (1-D).
_cumprod_over_x(
    "tf-cumprod-zero-masked-to-zero",
    "tensorflow/tensorflow",
    119430,
    0,
    (5,),
    lambda r, dt: {"x": np.array([0.0, 2.0, 3.0], dt)},
    bad=lambda g, y, x: [np.where(x == 0, 0, _safe_div(_rev_cumsum(g * y, 0), x))],
)

# pymc-devs/pytensor#1911 -- CumOp.L_op cumsum((cumprod(x)*g)[::-1])[::-1] / x: NaN where x == 0 (axis 0).
_cumprod_over_x(
    "pytensor-cumprod-zero-nan",
    "pymc-devs/pytensor",
    1911,
    0,
    (4, 3),
    lambda r, dt: {"x": _n(r, (4, 3), dt) * np.array([[1, 1, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], dt)},
)


# tensorflow/tfjs#346 -- pow: d/db = a^b log(a) = 0*(-inf) = NaN at a = 0, and d/da (b a^b / a) NaN there too.
def _pow_special(r, dt):
    a, b = np.abs(_n(r, (3, 4), dt)), _n(r, (3, 4), dt)
    a[0, 1] = a[2, 2] = 0
    b[0, 1] = b[2, 2] = 2  # tf.pow(0, 2)
    return {"a": a, "b": b}


add(
    "tfjs-pow-zero-base-nan",
    "tensorflow/tfjs",
    346,
    "nan_at_special_point",
    ["a", "b"],
    _same,
    lambda a, b: a**b,
    lambda g, y, a, b: [g * b * y / a, g * y * np.log(a)],
    # the twin also zeroes d/da where b == 0 (a^0 = 1 for every a; b a^(b-1) is 0 * inf = NaN at a = 0), as
    # PyTorch's pow_backward does: the checkers' b = 0 probe found the NaN at the special point's zero bases
    lambda g, y, a, b: [
        g * np.where(b == 0, 0, b * np.where(b == 0, 1, a) ** (b - 1)),
        g * np.where(a == 0, 0, y * np.log(np.where(a == 0, 1, a))),
    ],
    lambda r, dt: {"a": np.abs(_n(r, (3, 4), dt)), "b": _n(r, (3, 4), dt)},  # positive bases: a user's pow test
    _pow_special,
    note="user draws positive bases |N(0,1)| (negative bases make the forward NaN)",
)


# apache/mxnet#14673 -- Gluon ELU as where(x > 0, x, alpha*(exp(x)-1)): the unselected branch's zero cotangent times
# exp(x) = inf gives NaN for large positive x (alpha = 1).
def _elu_big(r, dt):
    x = _n(r, (3, 4), dt)
    x[1, 2] = x[2, 0] = 100 if np.dtype(dt) == np.float32 else 1000  # exp overflows (float64 needs x > 709)
    return {"x": x}


add(
    "mxnet-gluon-elu-overflow-nan",
    "apache/mxnet",
    14673,
    "nan_at_special_point",
    ["x"],
    _same,
    lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    lambda g, y, x: [g * (x > 0) + (g * (x <= 0)) * np.exp(x)],
    lambda g, y, x: [g * np.where(x > 0, 1, np.exp(np.minimum(x, 0)))],
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    _elu_big,
)


# pytorch/pytorch#56760 -- sinc backward (pi x cos(pi x) - sin(pi x)) / (pi x^2): 0/0 = NaN at x = 0.
def _sinc_d(x):
    px = np.pi * x
    return (px * np.cos(px) - np.sin(px)) / (px * x)


add(
    "torch-sinc-zero-nan",
    "pytorch/pytorch",
    56760,
    "nan_at_special_point",
    ["x"],
    _same,
    lambda x: np.sinc(x),
    lambda g, y, x: [g * _sinc_d(x)],
    lambda g, y, x: [g * np.where(x == 0, 0, _sinc_d(np.where(x == 0, 1, x)))],
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": _n(r, (3, 4), dt) * np.array([1, 0, 1, 1], dt)},
)

# == evaluated_at_output ==============================================================================================

# pytorch/pytorch#55587 -- softplus backward tests the threshold on the OUTPUT (beta*y > threshold): returns g instead
# of g*sigmoid(x) for beta*x <= threshold < beta*softplus(x)  (beta = 1, threshold = 1: x in (0.541, 1]).
SP_T = 1.0
add(
    "torch-softplus-threshold-on-output",
    "pytorch/pytorch",
    55587,
    "evaluated_at_output",
    ["x"],
    _same,
    lambda x: np.where(x > SP_T, x, np.log1p(np.exp(np.minimum(x, SP_T)))),
    lambda g, y, x: [np.where(y > SP_T, g, g * (np.exp(y) - 1) / np.exp(y))],
    lambda g, y, x: [np.where(x > SP_T, g, g * _sigmoid(x))],
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": r.uniform(0.6, 0.95, (3, 4)).astype(dt)},
)

# pytorch/pytorch#47671 -- elu_backward picks the branch from the output: g if y > 0 else g*(y + alpha); with
# alpha = -2 negative x give y > 0, so grad = g.
EA = -2.0
add(
    "torch-elu-negative-alpha-output-branch",
    "pytorch/pytorch",
    47671,
    "evaluated_at_output",
    ["x"],
    _same,
    lambda x: np.where(x > 0, x, EA * np.expm1(np.minimum(x, 0))),
    lambda g, y, x: [np.where(y > 0, g, g * (y + EA))],
    lambda g, y, x: [np.where(x > 0, g, g * EA * np.exp(np.minimum(x, 0)))],
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": -r.uniform(0.2, 2.0, (3, 4)).astype(dt)},
)

# pytorch/pytorch#31938 -- leaky_relu_ (in-place) saves only y and branches on y > 0; slope = -2 makes x < 0 give
# y > 0, so grad = g instead of -2g.
LS = -2.0
add(
    "torch-leaky-relu-inplace-negative-slope",
    "pytorch/pytorch",
    31938,
    "evaluated_at_output",
    ["x"],
    _same,
    lambda x: np.where(x > 0, x, LS * x),
    lambda g, y, x: [np.where(y > 0, g, g * LS)],
    lambda g, y, x: [np.where(x > 0, g, g * LS)],
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": -r.uniform(0.2, 2.0, (3, 4)).astype(dt)},
)

# chainer/chainer#5898 -- leaky_relu with slope = 0: mask from the output (y >= 0 is always true), so every element
# gets g, x < 0 included.
add(
    "chainer-leaky-relu-slope-zero",
    "chainer/chainer",
    5898,
    "evaluated_at_output",
    ["x"],
    _same,
    lambda x: np.where(x >= 0, x, 0 * x),
    lambda g, y, x: [np.where(y >= 0, g, 0 * g)],
    lambda g, y, x: [np.where(x >= 0, g, 0 * g)],
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": -r.uniform(0.2, 2.0, (3, 4)).astype(dt)},
)


# tensorflow/tensorflow#126063 -- EluGrad's gradient selects on elu(x) < 0 (the output); for tiny negative x,
# exp(x) - 1 rounds to +0.0 and d/dx [dy * elu'(x)] comes out 0 instead of dy*exp(x) ~ dy. The op here is
# f(dy, x) = dy * elu'(x) (the first derivative, as a function to differentiate once more).
def _elugrad_bwd(gg, f, dy, x, fixed):
    neg = (x <= 0) if fixed else ((np.exp(x) - 1) < 0)
    return [gg * np.where(x > 0, 1, np.exp(np.minimum(x, 0))), np.where(neg, gg * dy * np.exp(np.minimum(x, 0)), 0)]


def _tiny_neg(r, dt):
    x = _n(r, (3, 4), dt)
    x[0, 1] = x[1, 3] = x[2, 2] = -1e-30 if np.dtype(dt) == np.float32 else -1e-300
    return {"dy": _n(r, (3, 4), dt), "x": x}


add(
    "tf-elu-gradgrad-output-sign",
    "tensorflow/tensorflow",
    126063,
    "evaluated_at_output",
    ["dy", "x"],
    _same,
    lambda dy, x: dy * np.where(x > 0, 1, np.exp(np.minimum(x, 0))),
    lambda g, f, dy, x: _elugrad_bwd(g, f, dy, x, False),
    lambda g, f, dy, x: _elugrad_bwd(g, f, dy, x, True),
    lambda r, dt: {"dy": _n(r, (3, 4), dt), "x": _n(r, (3, 4), dt)},
    _tiny_neg,
)

# == aliasing_same_input ==============================================================================================

# tinygrad/tinygrad#9597 -- two distinct tensors with equal values are deduplicated into one node: out = w1 + w2
# sends both contributions to both (grad 2 each).
add(
    "tinygrad-identical-consts-aliased",
    "tinygrad/tinygrad",
    9597,
    "aliasing_same_input",
    ["w1", "w2"],
    _same,
    lambda a, b: a + b,
    lambda g, y, a, b: [2 * g, 2 * g] if np.array_equal(a, b) else [g, g],
    lambda g, y, a, b: [g, g],
    lambda r, dt: {"w1": _n(r, (2, 3), dt), "w2": _n(r, (2, 3), dt)},
    lambda r, dt: (lambda w: {"w1": w, "w2": w.copy()})(_n(r, (2, 3), dt)),
)

# NervanaSystems/neon#169 -- dot(x, x.T): the gradient through the x.T operand is dropped: g @ x instead of
# (g + g.T) @ x.
add(
    "neon-dot-x-xT-aliasing",
    "NervanaSystems/neon",
    169,
    "aliasing_same_input",
    ["x"],
    lambda s: (s[0], s[0]),
    lambda x: x @ x.T,
    lambda g, y, x: [g @ x],
    lambda g, y, x: [(g + g.T) @ x],
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": np.ones((1, 1), dt)},
)


# == repeated_indices ================================================================================================


def _scatter_set(shape, idx, g, dtype):
    dx = np.zeros(shape, dtype)
    dx[idx] = g  # assignment: the last duplicate wins
    return dx


def _scatter_add(shape, idx, g, dtype):
    dx = np.zeros(shape, dtype)
    np.add.at(dx, idx, g)
    return dx


# pytorch/pytorch#1631 -- gather backward scattered (overwrote) instead of scatter-adding: idx [0, 0] -> [0.3].
add(
    "torch-gather-repeated-indices",
    "pytorch/pytorch",
    1631,
    "repeated_indices",
    ["x", "idx"],
    lambda sx, si: si,
    lambda x, idx: x[_i(idx)],
    lambda g, y, x, idx: [_scatter_set(x.shape, _i(idx), g, x.dtype), None],
    lambda g, y, x, idx: [_scatter_add(x.shape, _i(idx), g, x.dtype), None],
    lambda r, dt: {"x": _n(r, (5,), dt), "idx": _idx(r, 5, (4,), dt)},
    lambda r, dt: {"x": _n(r, (5,), dt), "idx": np.array([0, 0, 3, 3], dt)},
    index_args=("idx",),
)


def _rows_gathered_by_set(id, repo, issue, index, rows, picks, repeat):
    """x[index] (whole rows) whose shipped backward scattered by assignment: a repeated row keeps one copy."""
    add(
        id,
        repo,
        issue,
        "repeated_indices",
        ["x", index],
        lambda sx, si: (si[0],) + tuple(sx[1:]),
        lambda x, idx: x[_i(idx)],
        lambda g, y, x, idx: [_scatter_set(x.shape, _i(idx), g, x.dtype), None],
        lambda g, y, x, idx: [_scatter_add(x.shape, _i(idx), g, x.dtype), None],
        lambda r, dt: {"x": _n(r, (rows, 3), dt), index: _idx(r, rows, (picks,), dt)},
        lambda r, dt: {"x": _n(r, (rows, 3), dt), index: np.array(repeat, dt)},
        index_args=(index,),
    )


# pytorch/pytorch#1528 -- x[LongTensor] backward kept only the last copy of a duplicated index (rows here).
_rows_gathered_by_set("torch-longtensor-indexing-duplicates", "pytorch/pytorch", 1528, "idx", 4, 3, [0, 0])

# PaddlePaddle/Paddle#17509 -- gather_grad used scatter in overwrite mode: index [1, 1] gives 1 instead of 2.
_rows_gathered_by_set("paddle-gather-duplicate-index", "PaddlePaddle/Paddle", 17509, "index", 5, 2, [1, 1])

# apache/mxnet#9172 -- gather_nd backward was scatter_nd (assignment): a repeated column (1, 1) gets one contribution.
add(
    "mxnet-gather-nd-duplicates",
    "apache/mxnet",
    9172,
    "repeated_indices",
    ["data", "indices"],
    lambda sd, si: (si[1],),
    lambda d, ind: d[tuple(_i(ind))],
    lambda g, y, d, ind: [_scatter_set(d.shape, tuple(_i(ind)), g, d.dtype), None],
    lambda g, y, d, ind: [_scatter_add(d.shape, tuple(_i(ind)), g, d.dtype), None],
    lambda r, dt: {"data": _n(r, (3, 4), dt), "indices": np.stack([_idx(r, 3, (3,), dt), _idx(r, 4, (3,), dt)])},
    lambda r, dt: {"data": _n(r, (2, 2), dt), "indices": np.array([[1, 1, 0], [1, 1, 0]], dt)},
    index_args=("indices",),
)

# == padding_or_ignore_index =========================================================================================

# pytorch/pytorch#3506 -- sparse embedding backward emitted rows for padding_idx too (padding_idx = 0). PyTorch's
# padding row is zero and never updated; the forward here returns zeros for it, so "no gradient" is the derivative.
PAD = 0
add(
    "torch-embedding-sparse-padding-idx",
    "pytorch/pytorch",
    3506,
    "padding_or_ignore_index",
    ["weight", "idx"],
    lambda sw, si: (si[0], sw[1]),
    lambda w, idx: w[_i(idx)] * (_i(idx) != PAD)[:, None],
    lambda g, y, w, idx: [_scatter_add(w.shape, _i(idx), g, w.dtype), None],
    lambda g, y, w, idx: [_scatter_add(w.shape, _i(idx), g * (_i(idx) != PAD)[:, None], w.dtype), None],
    lambda r, dt: {"weight": _n(r, (5, 3), dt), "idx": _idx(r, 5, (4,), dt)},
    lambda r, dt: {"weight": _n(r, (5, 3), dt), "idx": np.array([0, 2, 0, 4], dt)},
    index_args=("idx",),
    note="forward zeroes padding rows (PyTorch keeps weight[padding_idx] = 0)",
)

# pytorch/pytorch#73205 -- cross_entropy(label_smoothing, ignore_index=-100): the uniform smoothing term is summed
# over ignored rows too, which receive eps/C * (C softmax - 1).
EPS_LS, IGN = 0.1, -100


def _ls_loss(x, t):
    lp = _log_softmax(x)
    m = _i(t) != IGN
    tt = np.where(m, _i(t), 0)
    c = x.shape[1]
    row = (1 - EPS_LS) * -lp[np.arange(len(tt)), tt] + EPS_LS / c * -lp.sum(axis=1)
    return np.sum(row * m) / x.dtype.type(m.sum())


def _ls_grad(g, y, x, t, fixed):
    p = np.exp(_log_softmax(x))
    m = (_i(t) != IGN)[:, None].astype(x.dtype)
    c = x.shape[1]
    oh = _onehot(np.where(m[:, 0] > 0, _i(t), 0), c, x.dtype)
    smooth = EPS_LS / c * (c * p - 1)
    gx = m * (1 - EPS_LS) * (p - oh) + (m * smooth if fixed else smooth)
    return [g * gx / x.dtype.type(m.sum()), None]


add(
    "torch-ce-label-smoothing-ignore-index",
    "pytorch/pytorch",
    73205,
    "padding_or_ignore_index",
    ["x", "target"],
    _scalar,
    _ls_loss,
    lambda g, y, x, t: _ls_grad(g, y, x, t, False),
    lambda g, y, x, t: _ls_grad(g, y, x, t, True),
    lambda r, dt: {"x": _n(r, (4, 5), dt), "target": _idx(r, 5, (4,), dt)},
    lambda r, dt: {"x": _n(r, (4, 5), dt), "target": np.array([2, IGN, 0, IGN], dt)},
    index_args=("target",),
)

# chainer/chainer#2715 -- softmax_cross_entropy backward_gpu hard-coded -1 as the ignored label: with
# ignore_label = 0, rows labelled 0 get softmax - onehot and are counted in the normaliser.
IGN_C = 0


def _sce_loss(x, t):
    lp = _log_softmax(x)
    m = _i(t) != IGN_C
    return -np.sum(lp[np.arange(len(t)), _i(t)] * m) / max(int(m.sum()), 1)


def _sce_grad(g, y, x, t, ignore):
    p = np.exp(_log_softmax(x))
    m = (_i(t) != ignore)[:, None]
    return [g * m * (p - _onehot(_i(t), x.shape[1], x.dtype)) / max(int(m.sum()), 1), None]


add(
    "chainer-softmax-ce-ignore-label-gpu",
    "chainer/chainer",
    2715,
    "padding_or_ignore_index",
    ["x", "t"],
    _scalar,
    _sce_loss,
    lambda g, y, x, t: _sce_grad(g, y, x, t, -1),
    lambda g, y, x, t: _sce_grad(g, y, x, t, IGN_C),
    lambda r, dt: {"x": _n(r, (4, 5), dt), "t": _idx(r, 5, (4,), dt)},
    lambda r, dt: {"x": _n(r, (4, 5), dt), "t": np.array([IGN_C, 3, IGN_C, 1], dt)},
    index_args=("t",),
)


# == ties ===========================================================================================================


# Theano/Theano#5248 -- max_pool_2d backward (non-cuDNN): every input equal to the window max receives the full g,
# so k tied maxima pass k*g (2x2 windows, stride 2).
def _pool_fwd(x):
    h, w = x.shape
    return x.reshape(h // 2, 2, w // 2, 2).max(axis=(1, 3))


def _pool_bad(g, y, x):
    up = np.repeat(np.repeat(y, 2, 0), 2, 1)
    return [(x == up) * np.repeat(np.repeat(g, 2, 0), 2, 1)]


def _pool_good(g, y, x):
    h, w = x.shape
    win = x.reshape(h // 2, 2, w // 2, 2).transpose(0, 2, 1, 3).reshape(h // 2, w // 2, 4)
    first = np.argmax(win, axis=2)  # route g to one argmax (the first, as cuDNN / Caffe)
    d = (np.arange(4)[None, None, :] == first[:, :, None]) * g[:, :, None]
    return [d.reshape(h // 2, w // 2, 2, 2).transpose(0, 2, 1, 3).reshape(h, w).astype(x.dtype)]


def _sparse_pool(r, dt):
    x = np.maximum(_n(r, (4, 4), dt), 0)  # sparse input: many zeros
    x[0:2, 0:2] = 0  # one all-zero window: four tied maxima
    x[2, 2] = x[3, 3] = 1.5  # two tied positive maxima
    x[2, 3] = x[3, 2] = 0.5
    return {"x": x}


add(
    "theano-maxpool-ties-all",
    "Theano/Theano",
    5248,
    "ties",
    ["x"],
    lambda s: (s[0] // 2, s[1] // 2),
    _pool_fwd,
    _pool_bad,
    _pool_good,
    lambda r, dt: {"x": _n(r, (4, 4), dt)},
    _sparse_pool,
)

# jax-ml/jax#2140 -- log_sigmoid = -softplus(-x) built on logaddexp/max: at x = 0 exactly (the tie of the max
# inside) the derivative came out 0 instead of sigmoid(-0) = 0.5.
add(
    "jax-log-sigmoid-zero",
    "jax-ml/jax",
    2140,
    "ties",
    ["x"],
    _same,
    lambda x: -(np.maximum(-x, 0) + np.log1p(np.exp(-np.abs(x)))),
    lambda g, y, x: [np.where(x == 0, 0, g * _sigmoid(-x))],
    lambda g, y, x: [g * _sigmoid(-x)],
    lambda r, dt: {"x": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": _n(r, (3, 4), dt) * np.array([1, 0, 1, 0], dt)},
)

# == grad_req_or_accumulation =======================================================================================

BN_EPS = 1e-3


def _bn_fwd(x, gamma, beta):
    m, v = x.mean(axis=0), x.var(axis=0)
    return gamma * (x - m) / np.sqrt(v + BN_EPS) + beta


def _bn_bwd(g, y, x, gamma, beta):
    n = x.shape[0]
    inv = 1 / np.sqrt(x.var(axis=0) + BN_EPS)
    xh = (x - x.mean(axis=0)) * inv
    dxh = g * gamma
    dx = inv / n * (n * dxh - dxh.sum(axis=0) - xh * np.sum(dxh * xh, axis=0))
    return [dx, np.sum(g * xh, axis=0), np.sum(g, axis=0)]


class _BatchNormAddBug(_Op):
    """apache/mxnet#18499: with grad_req 'add' the data gradient is overwritten and beta's is never written."""

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        dx, dgamma, dbeta = self.grads(out_grad, in_data, out_data)
        if req[0] == "add":
            in_grad[0][...] = dx  # kWriteTo although kAddTo
        else:
            self.assign(in_grad[0], req[0], dx)
        self.assign(in_grad[1], req[1], dgamma)
        if req[2] != "add":  # beta's gradient never written under 'add'
            self.assign(in_grad[2], req[2], dbeta)


# apache/mxnet#18499 -- BatchNorm with grad_req='add' overwrote the data gradient and never wrote beta's gradient.
add(
    "mxnet-batchnorm-grad-req-add",
    "apache/mxnet",
    18499,
    "grad_req_or_accumulation",
    ["data", "gamma", "beta"],
    _same,
    _bn_fwd,
    _bn_bwd,
    _bn_bwd,
    lambda r, dt: {"data": _n(r, (4, 3), dt), "gamma": _n(r, (3,), dt), "beta": _n(r, (3,), dt)},
    lambda r, dt: {"data": _n(r, (4, 3), dt), "gamma": _n(r, (3,), dt), "beta": _n(r, (3,), dt)},
    bad_op=_BatchNormAddBug,
    note="special point: grad_req 'add' (no input point); special draws as user",
)


class _RetainGradTwice(_Op):
    """Oneflow-Inc/oneflow#8955: the leaf gradient is accumulated twice (retain hook + AccumulateGrad)."""

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        for i, gr in enumerate(self.grads(out_grad, in_data, out_data)):
            self.assign(in_grad[i], req[i], gr)
            if req[i] != "null":
                in_grad[i][...] += gr  # the second accumulation


# Oneflow-Inc/oneflow#8955 -- retain_grad() on a leaf accumulated its gradient twice: x1.grad = 11 instead of 5.5.
add(
    "oneflow-leaf-retain-grad-doubled",
    "Oneflow-Inc/oneflow",
    8955,
    "grad_req_or_accumulation",
    ["x1", "x2"],
    _same,
    lambda x1, x2: np.log(x1) + x1 * x2 - np.sin(x2),
    lambda g, y, x1, x2: [g * (1 / x1 + x2), g * (x1 - np.cos(x2))],
    lambda g, y, x1, x2: [g * (1 / x1 + x2), g * (x1 - np.cos(x2))],
    lambda r, dt: {"x1": r.uniform(0.5, 2.0, (3, 4)).astype(dt), "x2": _n(r, (3, 4), dt)},
    lambda r, dt: {"x1": np.array([2.0], dt), "x2": np.array([5.0], dt)},
    bad_op=_RetainGradTwice,
    note="user draws x1 uniform in [0.5, 2) (log needs x1 > 0)",
)

# == swapped_arguments ===============================================================================================

# apache/mxnet#17893 -- np.where(cond, x, scalar) backward masked x's gradient with cond == 0 (the else branch).
add(
    "mxnet-np-where-scalar-mask-flipped",
    "apache/mxnet",
    17893,
    "swapped_arguments",
    ["x", "cond"],
    _same,
    lambda x, c: np.where(c != 0, x, -1),
    lambda g, y, x, c: [g * (c == 0), None],
    lambda g, y, x, c: [g * (c != 0), None],
    lambda r, dt: {"x": _n(r, (3, 4), dt), "cond": _idx(r, 2, (3, 4), dt)},
    lambda r, dt: {"x": _n(r, (3,), dt), "cond": np.array([1, 0, 1], dt)},
    index_args=("cond",),
)

LN_EPS = 1e-5


def _ln_parts(x):
    m = x.mean(axis=1, keepdims=True)
    inv = 1 / np.sqrt(x.var(axis=1, keepdims=True) + LN_EPS)
    return (x - m) * inv, inv


def _ln_fwd(x, gamma, beta):
    return gamma * _ln_parts(x)[0] + beta


def _ln_dx(g, x, gamma):
    xh, inv = _ln_parts(x)
    h = x.shape[1]
    dxh = g * gamma
    return inv / h * (h * dxh - dxh.sum(axis=1, keepdims=True) - xh * np.sum(dxh * xh, axis=1, keepdims=True))


# Oneflow-Inc/oneflow#6149 -- eager LayerNorm backward swapped the weight and bias gradients.
add(
    "oneflow-layernorm-gamma-beta-swapped",
    "Oneflow-Inc/oneflow",
    6149,
    "swapped_arguments",
    ["x", "gamma", "beta"],
    _same,
    _ln_fwd,
    lambda g, y, x, gm, bt: [_ln_dx(g, x, gm), g.sum(axis=0), np.sum(g * _ln_parts(x)[0], axis=0)],
    lambda g, y, x, gm, bt: [_ln_dx(g, x, gm), np.sum(g * _ln_parts(x)[0], axis=0), g.sum(axis=0)],
    lambda r, dt: {"x": _n(r, (3, 4), dt), "gamma": _n(r, (4,), dt), "beta": _n(r, (4,), dt)},
    lambda r, dt: {"x": _n(r, (3, 4), dt), "gamma": _n(r, (4,), dt), "beta": _n(r, (4,), dt)},
    note="no special point: special draws as user",
)


# == sign ============================================================================================================


def _mvn_fwd(x, mu, cov):
    r = x - mu
    d = x.shape[0]
    return -0.5 * (d * math.log(2 * math.pi) + np.linalg.slogdet(cov)[1] + r @ np.linalg.solve(cov, r))


def _mvn_bwd(g, y, x, mu, cov, sign):
    r = x - mu
    sr, st = np.linalg.solve(cov, r), np.linalg.solve(cov.T, r)
    dr = -0.5 * (sr + st)  # d/dr of -0.5 r^T S^-1 r (S symmetric: -S^-1 r)
    dcov = 0.5 * (np.outer(st, sr) - np.linalg.inv(cov).T)  # 0.5 (S^-1 r r^T S^-1 - S^-1), unsymmetrised
    return [g * dr, -g * dr, sign * g * dcov]


def _spd(r, dt, d=3):
    a = r.standard_normal((d, d))
    return (a @ a.T + d * np.eye(d)).astype(dt)


# HIPS/autograd#412 -- multivariate_normal.logpdf vjp w.r.t. cov had the wrong sign (autograd 1.2).
add(
    "autograd-mvn-logpdf-cov-sign",
    "HIPS/autograd",
    412,
    "sign",
    ["x", "mean", "cov"],
    _scalar,
    _mvn_fwd,
    lambda g, y, x, mu, cov: _mvn_bwd(g, y, x, mu, cov, -1),
    lambda g, y, x, mu, cov: _mvn_bwd(g, y, x, mu, cov, 1),
    lambda r, dt: {"x": _n(r, (3,), dt), "mean": _n(r, (3,), dt), "cov": _spd(r, dt)},
    lambda r, dt: {"x": _n(r, (3,), dt), "mean": _n(r, (3,), dt), "cov": _spd(r, dt)},
    note="user cov = A A^T + 3 I (a user's SPD draw); no special point: special draws as user",
)

# == missing_factor ==================================================================================================

# torch/cunn#318 -- DistKLDivCriterion updateGradInput used norm = 2/size: grad_input = -2 target/size.
add(
    "torch7-cunn-distkldiv-factor-2",
    "torch/cunn",
    318,
    "missing_factor",
    ["input", "target"],
    _scalar,
    lambda x, t: np.sum(t * (np.log(t) - x)) / x.size,
    lambda g, y, x, t: [-2 * g * t / x.size, g * (np.log(t) + 1 - x) / x.size],
    lambda g, y, x, t: [-g * t / x.size, g * (np.log(t) + 1 - x) / x.size],
    lambda r, dt: {"input": _n(r, (3, 4), dt), "target": r.uniform(0.1, 1.0, (3, 4)).astype(dt)},
    lambda r, dt: {"input": _n(r, (3, 4), dt), "target": r.uniform(0.1, 1.0, (3, 4)).astype(dt)},
    note="targets uniform in [0.1, 1) (log needs target > 0); no special point: special draws as user",
)

HD = 1.0


def _huber_core(x, t):
    d = x - t
    return np.where(np.abs(d) <= HD, d, HD * np.sign(d))


# chainer/chainer#1175 -- HuberLoss.backward returned where(|d| <= delta, d, delta sign(d)) without multiplying by gy.
add(
    "chainer-huber-loss-ignores-gy",
    "chainer/chainer",
    1175,
    "missing_factor",
    ["x", "t"],
    lambda sx, st: (sx[0],),
    lambda x, t: np.sum(np.where(np.abs(x - t) <= HD, 0.5 * (x - t) ** 2, HD * (np.abs(x - t) - 0.5 * HD)), axis=1),
    lambda g, y, x, t: [_huber_core(x, t), -_huber_core(x, t)],
    lambda g, y, x, t: [g[:, None] * _huber_core(x, t), -g[:, None] * _huber_core(x, t)],
    lambda r, dt: {"x": _n(r, (3, 4), dt), "t": _n(r, (3, 4), dt)},
    lambda r, dt: {"x": _n(r, (3, 4), dt), "t": _n(r, (3, 4), dt)},
    note="special point: any gy != 1 (no input point); special draws as user",
)


# == stride_dilation =================================================================================================


# pytorch/pytorch#50042 -- depthwise conv2d (stride 2, padding 1, 3x3, mkldnn) weight gradient treated the last
# input row as padding: ones 6x6 gives last kernel row [4, 6, 6] instead of [6, 9, 9].
def _dw_patches(x):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ho, wo = (x.shape[2] - 1) // 2 + 1, (x.shape[3] - 1) // 2 + 1
    return xp, ho, wo


def _dw_fwd(x, w):
    xp, ho, wo = _dw_patches(x)
    y = np.zeros((x.shape[0], x.shape[1], ho, wo), x.dtype)
    for kh in range(3):
        for kw in range(3):
            y += w[None, :, 0, kh, kw, None, None] * xp[:, :, kh : kh + 2 * ho : 2, kw : kw + 2 * wo : 2]
    return y


def _dw_bwd(g, y, x, w, last_row_as_pad):
    xp, ho, wo = _dw_patches(x)
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    xw = xp.copy()
    if last_row_as_pad:
        xw[:, :, x.shape[2], :] = 0  # the last input row read as padding in the weight gradient
    for kh in range(3):
        for kw in range(3):
            dw[:, 0, kh, kw] = np.sum(g * xw[:, :, kh : kh + 2 * ho : 2, kw : kw + 2 * wo : 2], axis=(0, 2, 3))
            dxp[:, :, kh : kh + 2 * ho : 2, kw : kw + 2 * wo : 2] += g * w[None, :, 0, kh, kw, None, None]
    return [dxp[:, :, 1:-1, 1:-1], dw]


add(
    "torch-depthwise-conv-stride2-weight-grad",
    "pytorch/pytorch",
    50042,
    "stride_dilation",
    ["x", "w"],
    lambda sx, sw: (sx[0], sx[1], (sx[2] - 1) // 2 + 1, (sx[3] - 1) // 2 + 1),
    _dw_fwd,
    lambda g, y, x, w: _dw_bwd(g, y, x, w, True),
    lambda g, y, x, w: _dw_bwd(g, y, x, w, False),
    lambda r, dt: {"x": _n(r, (1, 2, 6, 6), dt), "w": _n(r, (2, 1, 3, 3), dt)},
    lambda r, dt: {"x": np.ones((1, 2, 6, 6), dt), "w": np.ones((2, 1, 3, 3), dt)},
    note="emulated for any channel count (shipped: groups = 24 on mkldnn); special = the report's all-ones input",
)


# == normalization ===================================================================================================


# deepspeedai/DeepSpeed#692 -- invertible LayerNormBackward1 reconstructs xhat = (out - beta[pos]) / gamma[pos] with
# pos = threadIdx.y (the row inside the tile) instead of the column: dgamma uses the wrong column's gamma/beta.
def _ds_ln_bad(g, y, x, gm, bt):
    rows = np.arange(x.shape[0]) % 32  # pos = blockIdx.x * TILE_DIM + threadIdx.y, one block, TILE_DIM = 32
    xh_bad = (y - bt[rows][:, None]) / gm[rows][:, None]
    return [_ln_dx(g, x, gm), np.sum(g * xh_bad, axis=0), g.sum(axis=0)]


add(
    "deepspeed-invertible-layernorm-gamma-index",
    "deepspeedai/DeepSpeed",
    692,
    "normalization",
    ["x", "gamma", "beta"],
    _same,
    _ln_fwd,
    _ds_ln_bad,
    lambda g, y, x, gm, bt: [_ln_dx(g, x, gm), np.sum(g * _ln_parts(x)[0], axis=0), g.sum(axis=0)],
    lambda r, dt: {"x": _n(r, (3, 5), dt), "gamma": _n(r, (5,), dt), "beta": _n(r, (5,), dt)},
    lambda r, dt: {"x": _n(r, (3, 5), dt), "gamma": _n(r, (5,), dt), "beta": _n(r, (5,), dt)},
    note="rows (3) < hidden (5) so pos stays in bounds; no special point: special draws as user",
)
