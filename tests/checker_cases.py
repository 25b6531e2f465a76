"""Shared cases of the checker regression tests (issue 8) and of ``benchmarks/false_alarms.py`` /
``benchmarks/detection_table.py``: one table, so the tests and the benchmarks measure the same things.

- ``kink_cases(rng, dtype)``: correct ops at *exact* kinks (relu/abs at 0, ties of the ``max`` reduction, of
  ``maximum`` and of ``Pooling(max)``, clip at its bounds), with the planted kink elements;
- ``zero_grad_cases(rng, dtype)``: correct graphs where one argument's gradient is zero in exact arithmetic
  but computed in floating point (``InstanceNorm(x - c)`` w.r.t. ``c``, ``sum(x - mean(x))`` w.r.t. ``x``,
  the beta of a training-mode BatchNorm feeding another BatchNorm, a softmax shift);
- planted bugs (custom ops): softmax and row-logsumexp gradients off by 1%, and an error confined to one
  element of an argument whose true gradient is zero (``pbz_shift_softmax``);
- ``run_checker(name, func, inputs, dtype)``: every checker at its default settings on ``func`` (a function
  of one Symbol per input, PyTorch/Chainer style), returning the warnings it emitted.

A case is ``(func, inputs, kinks)``: ``inputs`` a tuple of arrays already in the dtype under test, ``kinks``
``{input position: [index, ...]}`` (kink cases only). Random draws beyond ``rng`` (head gradients) use
numpy's global RNG, seeded by the caller (``tu.with_seed``).
"""

from __future__ import annotations

import warnings

import numpy as np
from np_refs import softmax

import symgrad as sg
import symgrad.test_utils as tu
from symgrad.test_utils.report import NondifferentiablePointWarning

S = sg.sym

#: every checker, PyTorch / Chainer / MXNet style (check_consistency: float32 against float64)
CHECKERS = (
    "check_numeric_gradient",
    "check_backward",
    "check_double_backward",
    "gradcheck",
    "gradcheck(fast_mode)",
    "gradgradcheck",
    "check_consistency",
)
#: checkers of second-order gradients
SECOND_ORDER = ("check_double_backward", "gradgradcheck")
#: per-element / full-Jacobian checkers (every element compared); the others compare one direction
FULL = ("check_numeric_gradient", "gradcheck", "gradgradcheck")


def _signed(rng, shape, lo=0.5, hi=1.5):
    return rng.uniform(lo, hi, shape) * np.where(rng.random(shape) < 0.5, -1.0, 1.0)


def _zeros_at(rng, shape, n):
    v = rng.standard_normal(shape)
    flat = v.reshape(-1)
    spots = rng.choice(flat.size, n, replace=False)
    flat[spots] = 0.0
    return v, sorted(tuple(int(i) for i in np.unravel_index(s, shape)) for s in spots)


# == exact kinks ========================================================================================


class _AbsGe(sg.operator.CustomOp):
    """|x| whose backward takes sign(x) with +1 at 0 (``x >= 0``): a valid subgradient that differs from the
    symmetric difference quotient at 0 (symgrad's own ``abs`` takes sign(0) = 0, which does not)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], np.abs(in_data[0]))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], np.where(in_data[0] >= 0, 1.0, -1.0).astype(in_data[0].dtype) * out_grad[0])


@sg.operator.register("cc_abs_ge")
class _AbsGeProp(sg.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return _AbsGe()


def kink_cases(rng, dtype=np.float64):
    """``name -> (func, inputs, kinks, must_warn)``: correct ops at exact kinks (exact in float32 too).

    ``must_warn`` is True where the analytic value differs from the symmetric difference quotient at the kink
    (relu'(0) = 0, both tied maxima get 1, clip's bound gets 1, ...): a first-order checker then sees a mismatch
    and must say "non-differentiable point"; symgrad's ``abs`` (sign(0) = 0) agrees with the quotient.
    """
    cases = {}
    v, z = _zeros_at(rng, (3, 4), 3)
    cases["relu"] = (lambda x: S.relu(x), (v,), {0: z}, True)
    v, z = _zeros_at(rng, (3, 4), 2)
    cases["abs"] = (lambda x: S.abs(x), (v,), {0: z}, False)
    v, z = _zeros_at(rng, (3, 4), 2)
    cases["|x| (x >= 0 rule)"] = (lambda x: S.Custom(x, op_type="cc_abs_ge"), (v,), {0: z}, True)
    m = rng.standard_normal((2, 5))
    m[0, 3] = m[0, 1] = m[0].max() + 0.5  # a tie for the maximum of each row
    m[1, 0] = m[1, 4] = m[1].max() + 0.5
    cases["max (ties)"] = (lambda x: S.max(x, axis=1), (m,), {0: [(0, 1), (0, 3), (1, 0), (1, 4)]}, True)
    a, b = rng.standard_normal(6), rng.standard_normal(6)
    b[[1, 4]] = a[[1, 4]]
    cases["maximum (ties)"] = (lambda x, y: S.maximum(x, y), (a, b), {0: [(1,), (4,)], 1: [(1,), (4,)]}, True)
    c = rng.uniform(-0.4, 0.4, 5)
    c[[0, 3]] = [-0.5, 0.5]
    cases["clip (at the bounds)"] = (lambda x: S.clip(x, a_min=-0.5, a_max=0.5), (c,), {0: [(0,), (3,)]}, True)
    p = rng.standard_normal((1, 1, 4, 4))
    p[0, 0, 0, 0] = p[0, 0, 1, 1] = p[0, 0, :2, :2].max() + 0.5  # a tie in the top-left window
    p[0, 0, 2, 3] = p[0, 0, 3, 2] = p[0, 0, 2:, 2:].max() + 0.5  # and in the bottom-right one
    cases["Pooling(max) (ties)"] = (
        lambda x: S.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max"),
        (p,),
        {0: [(0, 0, 0, 0), (0, 0, 1, 1), (0, 0, 2, 3), (0, 0, 3, 2)]},
        True,
    )
    return {k: (f, tuple(np.asarray(x).astype(dtype) for x in xs), kk, w) for k, (f, xs, kk, w) in cases.items()}


KINK_NAMES = list(kink_cases(np.random.default_rng(0)))
#: first-order gradients that are themselves discontinuous at the kink: a second-order checker sees a jump there
#: (relu' steps at 0) -- it must recognise that too; Pooling(max) and the custom |x| have no second-order rule
NO_SECOND_ORDER = {"Pooling(max) (ties)", "|x| (x >= 0 rule)"}


# == gradients that are zero in exact arithmetic ==========================================================


def zero_grad_cases(rng, dtype=np.float32):
    """``name -> (func, inputs, zero)``: ``zero`` is the position of the input whose exact gradient is zero."""
    cases = {}
    x = rng.standard_normal((1, 2, 2))
    c = rng.standard_normal((1, 2, 1))
    g, b = rng.uniform(0.5, 1.5, 2), rng.standard_normal(2)
    cases["InstanceNorm(x - c) wrt c"] = (
        lambda x, c, g, b: S.InstanceNorm(S.broadcast_sub(x, c), g, b),
        (x, c, g, b),
        1,
    )
    x = rng.standard_normal((3, 6)) * 4.0 + 10.0  # a large mean: the centring cancels
    cases["sum(x - mean(x)) wrt x"] = (
        lambda x: S.sum(S.broadcast_sub(x, S.mean(x, axis=1, keepdims=True)), axis=1),
        (x,),
        0,
    )
    x = rng.standard_normal((6, 3))
    g1, b1 = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3) * 3.0
    g2, b2 = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)
    cases["BatchNorm(BatchNorm(x)) wrt the first beta"] = (
        lambda x, g1, b1, g2, b2: S.BatchNorm(
            S.BatchNorm(x, g1, b1, fix_gamma=False, name="bn1"), g2, b2, fix_gamma=False, name="bn2"
        ),
        (x, g1, b1, g2, b2),
        2,
    )
    x = rng.standard_normal((4, 5))
    s = rng.standard_normal((4, 1)) * 5.0
    cases["softmax(x + s) wrt s"] = (lambda x, s: S.softmax(S.broadcast_add(x, s), axis=-1), (x, s), 1)
    return {k: (f, tuple(np.asarray(v).astype(dtype) for v in xs), z) for k, (f, xs, z) in cases.items()}


ZERO_NAMES = list(zero_grad_cases(np.random.default_rng(0)))
#: BatchNorm's backward is one fused node without a second-order rule
ZERO_NO_SECOND_ORDER = {"BatchNorm(BatchNorm(x)) wrt the first beta"}


# == planted bugs: 1% off in softmax / logsumexp, one element of a zero gradient ============================


class _Softmax(sg.operator.CustomOp):
    """softmax over the last axis; backward ``k * s * (g - sum(g * s))``."""

    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], softmax(in_data[0]))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        s, g = out_data[0], out_grad[0]
        self.assign(in_grad[0], req[0], self.k * s * (g - (g * s).sum(axis=-1, keepdims=True)))


@sg.operator.register("pbz_softmax")
class _SoftmaxProp(sg.operator.CustomOpProp):
    def __init__(self, k="1"):
        super().__init__()
        self.k = float(k)

    def create_operator(self, ctx, shapes, dtypes):
        return _Softmax(self.k)


class _LogSumExp(sg.operator.CustomOp):
    """logsumexp over the last axis (keepdims); backward ``k * softmax(x) * g``."""

    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        m = x.max(axis=-1, keepdims=True)
        self.assign(out_data[0], req[0], m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], self.k * softmax(in_data[0]) * out_grad[0])


@sg.operator.register("pbz_logsumexp")
class _LogSumExpProp(sg.operator.CustomOpProp):
    def __init__(self, k="1"):
        super().__init__()
        self.k = float(k)

    def infer_shape(self, in_shape):
        return in_shape, [list(in_shape[0][:-1]) + [1]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _LogSumExp(self.k)


class _ShiftSoftmax(sg.operator.CustomOp):
    """``softmax(x + s)`` over the last axis, ``s`` of shape (rows, 1): the gradient of ``s`` is zero (softmax is
    shift-invariant). The bug adds 1% of the row's summed gradient magnitude to element ``index`` of it."""

    def __init__(self, index):
        super().__init__()
        self.index = index

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], softmax(in_data[0] + in_data[1]))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        s, g = out_data[0], out_grad[0]
        gx = s * (g - (g * s).sum(axis=-1, keepdims=True))
        gs = gx.sum(axis=-1, keepdims=True)  # zero up to rounding
        if self.index >= 0:
            gs[self.index, 0] += 0.01 * np.abs(gx[self.index]).sum()
        self.assign(in_grad[0], req[0], gx)
        self.assign(in_grad[1], req[1], gs)


@sg.operator.register("pbz_shift_softmax")
class _ShiftSoftmaxProp(sg.operator.CustomOpProp):
    def __init__(self, index="-1"):
        super().__init__()
        self.index = int(index)

    def list_arguments(self):
        return ["data", "shift"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _ShiftSoftmax(self.index)


#: the row of ``pbz_shift_softmax``'s shift that gets the planted error
SHIFT_BUG_ROW = 7


def softmax_op(k=1.0):
    return lambda x: S.Custom(x, op_type="pbz_softmax", k=str(k))


def logsumexp_op(k=1.0):
    return lambda x: S.Custom(x, op_type="pbz_logsumexp", k=str(k))


def shift_softmax_op(bug):
    return lambda x, s: S.Custom(x, s, op_type="pbz_shift_softmax", index=str(SHIFT_BUG_ROW if bug else -1))


# == running a checker ===================================================================================


def _shapes(func, inputs):
    sym = S.Group([func(*[S.Variable(f"x{i}") for i in range(len(inputs))])])
    return sym.infer_shape(**{f"x{i}": v.shape for i, v in enumerate(inputs)})[1]


def arg_label(checker, position):
    """The name a checker gives input ``position`` in its reports (``x0``, ``input0``)."""
    return f"input{position}" if checker.startswith("grad") else f"x{position}"


def run_checker(checker, func, inputs, dtype=None):
    """Run ``checker`` at its default settings; returns the warnings it emitted (GradientCheckError on failure).

    ``inputs`` are in the dtype under test (``dtype`` defaults to theirs; check_numeric_gradient gets it as its
    ``dtype``). Head gradients (and Chainer's ``x_grad_grad``) are drawn from numpy's global RNG, away from zero.
    check_consistency compares a float32 and a float64 entry of the same symbol.
    """
    dtype = np.dtype(dtype or inputs[0].dtype)
    gr = np.random
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        if checker == "check_numeric_gradient":
            sym = func(*[S.Variable(f"x{i}") for i in range(len(inputs))])
            tu.check_numeric_gradient(sym, [np.asarray(v) for v in inputs], dtype=dtype)
        elif checker in ("check_backward", "check_double_backward"):
            gy = tuple(
                (gr.uniform(0.5, 1.5, s) * np.where(gr.rand(*s) < 0.5, -1, 1)).astype(dtype)
                for s in _shapes(func, inputs)
            )
            gy = gy[0] if len(gy) == 1 else gy
            if checker == "check_backward":
                tu.check_backward(func, tuple(inputs), gy)
            else:
                ggx = tuple(
                    (gr.uniform(0.5, 1.5, v.shape) * np.where(gr.rand(*v.shape) < 0.5, -1, 1)).astype(dtype)
                    for v in inputs
                )
                tu.check_double_backward(func, tuple(inputs), gy, ggx)
        elif checker == "gradcheck":
            tu.gradcheck(func, tuple(inputs))
        elif checker == "gradcheck(fast_mode)":
            tu.gradcheck(func, tuple(inputs), fast_mode=True)
        elif checker == "gradgradcheck":
            tu.gradgradcheck(func, tuple(inputs))
        elif checker == "check_consistency":
            names = [f"x{i}" for i in range(len(inputs))]
            sym = func(*[S.Variable(n) for n in names])
            shapes = {n: v.shape for n, v in zip(names, inputs)}
            entries = [
                {"ctx": sg.cpu(0), **shapes, "type_dict": {n: dt for n in names}} for dt in (np.float64, np.float32)
            ]
            params = {n: np.asarray(v, np.float64) for n, v in zip(names, inputs)}
            aux = sym.list_auxiliary_states()
            aux_params = (
                {a: (np.ones if a.endswith("var") else np.zeros)(s) for a, s in zip(aux, sym.infer_shape(**shapes)[2])}
                if aux
                else None
            )
            tu.check_consistency(sym, entries, arg_params=params, aux_params=aux_params)
        else:
            raise ValueError(f"unknown checker {checker!r}")
    return [w for w in record if issubclass(w.category, NondifferentiablePointWarning)]
