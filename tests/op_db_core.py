"""OpInfo rows for the core operators (elementwise, reductions, dot, FullyConnected,
shape ops, Activation, BatchNorm, loss heads). References are plain numpy."""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _sum_keep(x, axes, keepdims):
    out = x.sum(axis=axes, keepdims=keepdims)
    return np.asarray(out).reshape(1) if np.ndim(out) == 0 else out


SH = (2, 3)
OPS = [
    # -- unary ----------------------------------------------------------------
    OpInfo("negative", S.negative, {"x": In(SH)}, lambda x: -x),
    OpInfo("exp", S.exp, {"x": In(SH)}, np.exp),
    OpInfo("log", S.log, {"x": In(SH, 0.5, 2.0)}, np.log),
    OpInfo("sqrt", S.sqrt, {"x": In(SH, 0.5, 2.0)}, np.sqrt),
    OpInfo("square", S.square, {"x": In(SH)}, np.square),
    OpInfo("tanh", S.tanh, {"x": In(SH)}, np.tanh),
    OpInfo("sigmoid", S.sigmoid, {"x": In(SH, -3, 3)}, _sigmoid),
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
    # -- reductions ---------------------------------------------------------------
    OpInfo("sum", S.sum, {"x": In((2, 3, 2))}, lambda x: _sum_keep(x, None, False)),
    OpInfo("sum_axis", lambda x: S.sum(x, axis=1), {"x": In((2, 3, 2))}, lambda x: x.sum(1)),
    OpInfo("sum_keepdims_exclude", lambda x: S.sum(x, axis=1, keepdims=True, exclude=True),
           {"x": In((2, 3, 2))}, lambda x: x.sum(axis=(0, 2), keepdims=True)),
    OpInfo("mean", lambda x: S.mean(x, axis=(0, 2)), {"x": In((2, 3, 2))}, lambda x: x.mean(axis=(0, 2))),
    # -- linear algebra -------------------------------------------------------------
    OpInfo("dot", S.dot, {"a": In((2, 3)), "b": In((3, 4))}, lambda a, b: a @ b),
    OpInfo("dot_transpose_a", lambda a, b: S.dot(a, b, transpose_a=True), {"a": In((3, 2)), "b": In((3, 4))},
           lambda a, b: a.T @ b),
    OpInfo("dot_transpose_b", lambda a, b: S.dot(a, b, transpose_b=True), {"a": In((2, 3)), "b": In((4, 3))},
           lambda a, b: a @ b.T),
    OpInfo("dot_1d", S.dot, {"a": In((3,)), "b": In((3,))}, lambda a, b: np.dot(a, b).reshape(1)),
    OpInfo("dot_nd", S.dot, {"a": In((2, 2, 3)), "b": In((3, 2, 2))}, lambda a, b: np.tensordot(a, b, 1)),
    OpInfo("FullyConnected", lambda x, w, b: S.FullyConnected(x, w, b, num_hidden=4),
           {"x": In((2, 3, 2)), "w": In((4, 6)), "b": In((4,))}, lambda x, w, b: x.reshape(2, -1) @ w.T + b),
    OpInfo("FullyConnected_no_flatten", lambda x, w: S.FullyConnected(x, w, num_hidden=4, no_bias=True, flatten=False),
           {"x": In((2, 3, 2)), "w": In((4, 2))}, lambda x, w: x @ w.T),
    # -- shape ----------------------------------------------------------------------
    OpInfo("Reshape", lambda x: S.Reshape(x, shape=(0, -1)), {"x": In((2, 3, 2))}, lambda x: x.reshape(2, 6)),
    OpInfo("Flatten", S.Flatten, {"x": In((2, 3, 2))}, lambda x: x.reshape(2, 6)),
    OpInfo("SliceChannel", lambda x: S.SliceChannel(x, num_outputs=2, axis=1), {"x": In((2, 4))},
           lambda x: (x[:, :2], x[:, 2:])),
    # -- nn -------------------------------------------------------------------------
    OpInfo("Activation_softrelu", lambda x: S.Activation(x, act_type="softrelu"), {"x": In(SH, -2, 2)},
           lambda x: np.log1p(np.exp(x))),
    OpInfo("Activation_softsign", lambda x: S.Activation(x, act_type="softsign"), {"x": In(SH, away=0.1)},
           lambda x: x / (1 + np.abs(x))),
    OpInfo("BatchNorm_train", lambda x, g, b: S.BatchNorm(x, g, b, fix_gamma=False, name="bn"),
           {"x": In((4, 3, 2)), "g": In((3,), 0.5, 1.5), "b": In((3,))},
           lambda x, g, b, mm, mv: (x - x.mean((0, 2), keepdims=True)) / np.sqrt(x.var((0, 2), keepdims=True) + 1e-3)
           * g[None, :, None] + b[None, :, None],
           aux={"bn_moving_mean": In((3,)), "bn_moving_var": In((3,), 0.5, 1.5)}, is_train=True, second_order=False,
           fwd_tol={np.float16: (2e-2, 2e-2)}),
    # -- loss heads: the gradient is defined, the head gradient ignored ----------
    OpInfo("SoftmaxOutput", lambda x, label: S.SoftmaxOutput(x, label),
           {"x": In((3, 4)), "label": In((3,), sample=lambda r: r.integers(0, 4, 3), grad=False)},
           lambda x, label: _softmax(x, 1),
           grad_ref=lambda x, label: {"x": _softmax(x, 1) - np.eye(4)[label.astype(int)]}),
    OpInfo("MakeLoss", lambda x: S.MakeLoss(x * x, grad_scale=0.5), {"x": In(SH)}, lambda x: x * x,
           grad_ref=lambda x: {"x": 0.5 * 2 * x}),
]
