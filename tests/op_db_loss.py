"""OpInfo rows for the loss heads (symgrad/ops/loss.py).

A loss head's gradient is defined, not the derivative of its output, and ignores
the head gradient: each row's ``grad_ref`` writes that definition in numpy,
following MXNet 1.9's softmax_output-inl.h / mshadow SoftmaxGrad,
regression_output-inl.h and make_loss-inl.h.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _so_grad_rows(p, label, scale=1.0, alpha=0.0, ignore=None):
    """Per row r of p (rows, k): p - target(label[r]); rows whose label == ignore are zero."""
    rows, k = p.shape
    g = p.copy()
    for r in range(rows):
        c = int(label[r])
        if ignore is not None and c == ignore:
            g[r] = 0
            continue
        for j in range(k):
            target = (1 - alpha if j == c else alpha / (k - 1)) if alpha else float(j == c)
            g[r, j] -= target
    return g * scale


def _so_multi(x, label, scale, ignore=None):
    """multi_output: softmax over axis 1; each (sample, position) column like a row above."""
    p = _softmax(x, 1)
    n, k = x.shape[:2]
    p3 = p.reshape(n, k, -1)
    lab = label.reshape(n, -1)
    g = np.zeros_like(p3)
    for s in range(p3.shape[2]):
        g[:, :, s] = _so_grad_rows(p3[:, :, s], lab[:, s], ignore=ignore)
    return (g * scale).reshape(x.shape)


def _lab(values):
    return lambda r: np.array(values)


def _so_label(values, integer=False):
    return In((len(values),), sample=_lab(values), grad=False, integer=integer)


def _row(name, make, x, label, ref, grad_ref):
    return OpInfo(name, make, {"x": x, "label": label}, ref, grad_ref=grad_ref)


OPS = [
    # -- SoftmaxOutput: every normalisation / ignore / layout branch ------------------------
    _row("SoftmaxOutput_batch_grad_scale",
         lambda x, label: S.SoftmaxOutput(x, label, normalization="batch", grad_scale=2.0),
         In((4, 3)), _so_label([2, 0, 1, 1], integer=True), lambda x, label: _softmax(x, 1),
         lambda x, label: {"x": _so_grad_rows(_softmax(x, 1), label, 2.0 / 4)}),
    _row("SoftmaxOutput_ignore_null", lambda x, label: S.SoftmaxOutput(x, label, use_ignore=True, ignore_label=1),
         In((5, 4)), _so_label([1, 0, 2, 1, 3]), lambda x, label: _softmax(x, 1),
         lambda x, label: {"x": _so_grad_rows(_softmax(x, 1), label, ignore=1)}),
    _row("SoftmaxOutput_ignore_valid",
         lambda x, label: S.SoftmaxOutput(x, label, use_ignore=True, ignore_label=1, normalization="valid"),
         In((5, 4)), _so_label([1, 0, 2, 1, 3], integer=True), lambda x, label: _softmax(x, 1),
         lambda x, label: {"x": _so_grad_rows(_softmax(x, 1), label, 1 / 3, ignore=1)}),
    # 'valid' counts labels != ignore_label even without use_ignore; label -1 matches no class
    _row("SoftmaxOutput_valid_without_use_ignore",
         lambda x, label: S.SoftmaxOutput(x, label, normalization="valid"),
         In((4, 3)), _so_label([-1, 0, 2, -1]), lambda x, label: _softmax(x, 1),
         lambda x, label: {"x": _so_grad_rows(_softmax(x, 1), label, 1 / 2)}),
    _row("SoftmaxOutput_smooth_alpha", lambda x, label: S.SoftmaxOutput(x, label, smooth_alpha=0.2),
         In((3, 5)), _so_label([4, 0, 2]), lambda x, label: _softmax(x, 1),
         lambda x, label: {"x": _so_grad_rows(_softmax(x, 1), label, alpha=0.2)}),
    _row("SoftmaxOutput_smooth_alpha_ignore",
         lambda x, label: S.SoftmaxOutput(x, label, smooth_alpha=0.3, use_ignore=True, ignore_label=2,
                                          normalization="batch"),
         In((3, 4)), _so_label([2, 0, 3]), lambda x, label: _softmax(x, 1),
         lambda x, label: {"x": _so_grad_rows(_softmax(x, 1), label, 1 / 3, alpha=0.3, ignore=2)}),
    _row("SoftmaxOutput_multi_output", lambda x, label: S.SoftmaxOutput(x, label, multi_output=True),
         In((2, 3, 4)), In((2, 4), sample=lambda r: r.integers(0, 3, (2, 4)), grad=False),
         lambda x, label: _softmax(x, 1), lambda x, label: {"x": _so_multi(x, label, 1 / 4)}),
    # multi_output ignores smooth_alpha (MXNet 1.9); 'batch' divides by n and by the positions
    _row("SoftmaxOutput_multi_output_batch_smooth_ignored",
         lambda x, label: S.SoftmaxOutput(x, label, multi_output=True, normalization="batch", smooth_alpha=0.4),
         In((2, 3, 4)), In((2, 4), sample=lambda r: r.integers(0, 3, (2, 4)), grad=False, integer=True),
         lambda x, label: _softmax(x, 1), lambda x, label: {"x": _so_multi(x, label, 1 / 4 / 2)}),
    _row("SoftmaxOutput_multi_output_4d_valid",
         lambda x, label: S.SoftmaxOutput(x, label, multi_output=True, use_ignore=True, ignore_label=0,
                                          normalization="valid"),
         In((2, 3, 2, 2)), In((2, 2, 2), sample=_lab([[[0, 1], [2, 0]], [[1, 1], [0, 2]]]), grad=False),
         lambda x, label: _softmax(x, 1), lambda x, label: {"x": _so_multi(x, label, 1 / 5, ignore=0)}),
    _row("SoftmaxOutput_preserve_shape", lambda x, label: S.SoftmaxOutput(x, label, preserve_shape=True),
         In((2, 3, 4)), In((2, 3), sample=lambda r: r.integers(0, 4, (2, 3)), grad=False),
         lambda x, label: _softmax(x, -1),
         lambda x, label: {"x": _so_grad_rows(_softmax(x, -1).reshape(6, 4), label.reshape(-1)).reshape(x.shape)}),
    # probability labels (label shape == data shape): (p - label) * grad_scale, no normalisation
    _row("SoftmaxOutput_probability_label",
         lambda x, label: S.SoftmaxOutput(x, label, grad_scale=0.5, normalization="batch", use_ignore=True),
         In((3, 4)), In((3, 4), sample=lambda r: _softmax(r.normal(size=(3, 4)), 1), grad=False),
         lambda x, label: _softmax(x, 1), lambda x, label: {"x": (_softmax(x, 1) - label) * 0.5}),
    # >2-d data without multi_output/preserve_shape: softmax over everything but axis 0; MXNet wants
    # a (2, 3) label and row r uses label.flat[r]; 'batch' divides by the label count (6)
    _row("SoftmaxOutput_flattened_3d",
         lambda x, label: S.SoftmaxOutput(x, label, normalization="batch"),
         In((2, 3, 2)), In((2, 3), sample=_lab([[5, 1, 0], [3, 2, 2]]), grad=False),
         lambda x, label: _softmax(x.reshape(2, -1), 1).reshape(x.shape),
         lambda x, label: {"x": _so_grad_rows(_softmax(x.reshape(2, -1), 1), label.reshape(-1)[:2],
                                              1 / 6).reshape(x.shape)}),
    # -- regression outputs: (out - label) * grad_scale / (outputs per sample) ---------------
    _row("LinearRegressionOutput", lambda x, label: S.LinearRegressionOutput(x, label, grad_scale=3.0),
         In((3, 2)), In((3, 2), grad=False), lambda x, label: x, lambda x, label: {"x": (x - label) * 3.0 / 2}),
    _row("LinearRegressionOutput_column_label", lambda x, label: S.LinearRegressionOutput(x, label),
         In((4, 1)), In((4,), grad=False), lambda x, label: x, lambda x, label: {"x": x - label[:, None]}),
    _row("LogisticRegressionOutput", lambda x, label: S.LogisticRegressionOutput(x, label),
         In((2, 3), -2, 2), In((2, 3), sample=lambda r: r.integers(0, 2, (2, 3)), grad=False),
         lambda x, label: _sigmoid(x), lambda x, label: {"x": (_sigmoid(x) - label) / 3}),
    _row("MAERegressionOutput", lambda x, label: S.MAERegressionOutput(x, label, grad_scale=2.0),
         In((2, 3)), In((2, 3), grad=False), lambda x, label: x,
         lambda x, label: {"x": np.where(x - label > 0, 1.0, -1.0) * 2.0 / 3}),
    # -- MakeLoss normalisations ----------------------------------------------------------
    OpInfo("MakeLoss_batch", lambda x: S.MakeLoss(S.square(x), normalization="batch", grad_scale=3.0),
           {"x": In((4, 2))}, np.square, grad_ref=lambda x: {"x": 2 * x * 3.0 / 4}),
    # 'valid': grad_scale / #(loss > valid_thresh), at least 1
    OpInfo("MakeLoss_valid", lambda x: S.MakeLoss(S.square(x), normalization="valid", valid_thresh=0.25),
           {"x": In((2, 3), sample=_lab([[0.1, -0.9, 0.7], [0.3, 0.2, -0.6]]))}, np.square,
           grad_ref=lambda x: {"x": 2 * x / 3}),
]
