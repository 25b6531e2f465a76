"""Loss heads: SoftmaxOutput, Linear/Logistic/MAE regression outputs, MakeLoss.

A loss head's backward ignores the head gradient, exactly as MXNet's: the
gradient it sends to ``data`` is a defined quantity (softmax - label, ...),
computed by a fused hidden ``_backward_*`` op. Those hidden ops have no
gradient rule of their own, so a second-order gradient through a loss head
raises a clear error (as MXNet, whose backward heads have no FGradient).
Labels never get a gradient and may be float or integer arrays.

Semantics follow MXNet 1.9 src/operator/softmax_output-inl.h,
regression_output-inl.h, make_loss-inl.h and mshadow's SoftmaxGrad.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import (
    Param,
    check_float,
    expect_input_shape,
    float_inputs,
    output_like,
    register,
    same_shape,
    wait_for_first_input,
)


def _label_type(params, in_types, out_types, where):
    """Output dtype = data dtype (float); labels keep whatever dtype they have (default: data's)."""
    dt = in_types[0] if in_types[0] is not None else out_types[0]
    check_float(where, "data", dt)
    return [dt] + [t if t is not None else dt for t in in_types[1:]], [dt]


def _grad_type(params, in_types, out_types, where):
    return in_types, [in_types[0]]


#: what every (data, label) loss head shares: its label is an input of the loss, never differentiated
_HEAD_SPEC: dict[str, Any] = dict(
    inputs=("data", "label"), infer_type=_label_type, is_loss=True, no_grad_inputs=("label",)
)


def _head_backward(name, head, params, forward, **spec):
    """Register ``name``, the fused backward of the loss head ``head``: (out, label) -> the gradient of data,
    shaped like out; it has no gradient rule, so second order through the head is a clear error (as MXNet)."""
    register(
        name,
        inputs=("out", "label"),
        params=params,
        forward=forward,
        infer_shape=output_like(0),
        infer_type=_grad_type,
        gradient=None,
        grad_undefined_reason=f"{head} is a loss head whose backward is the fused hidden op {name}: "
        "second-order gradients through it are not defined",
        **spec,
    )


# ----------------------------------------------------------------------------
# SoftmaxOutput
# ----------------------------------------------------------------------------

_SOFTMAX_OUT_PARAMS = {
    "grad_scale": Param("float", 1.0),
    "ignore_label": Param("float", -1.0),
    "multi_output": Param("bool", False),
    "use_ignore": Param("bool", False),
    "preserve_shape": Param("bool", False),
    "normalization": Param("str", "null", choices=("null", "batch", "valid")),
    "out_grad": Param("bool", False),
    "smooth_alpha": Param("float", 0.0),
}


def _so_prepare(params, name):
    if not 0.0 <= params["smooth_alpha"] <= 1.0:
        raise ParamError(
            f"SoftmaxOutput {name!r}: parameter 'smooth_alpha' must be in [0, 1], got {params['smooth_alpha']}"
        )
    return params


def _softmax(xp, x, axis):
    z = x.astype(np.float32 if x.dtype == np.float16 else x.dtype, copy=False)
    e = xp.exp(z - z.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype, copy=False)


def _so_fwd(xp, data, label, *, multi_output, preserve_shape, **_):
    if multi_output:
        return _softmax(xp, data, 1)
    if preserve_shape:
        return _softmax(xp, data, -1)
    return _softmax(xp, data.reshape(data.shape[0], -1), 1).reshape(data.shape)


# Kernels for the common head: 2-d float32/float64 data, labels of shape (batch,). They run the same
# numpy operations as the general code without its float16 casts and reshapes, in place where the
# general code makes a temporary it does not keep (in-place and out-of-place arithmetic round alike).
_SO_FAST = (np.dtype(np.float32), np.dtype(np.float64))


def _so_fwd_specialize(xp, in_types, *, multi_output, preserve_shape, **_):
    """Forward kernel: softmax over axis 1 of a matrix (what every flag combination computes for one)."""

    def kernel(data, label):
        if not (data.ndim == 2 and data.size and data.dtype in _SO_FAST):  # empty: the general errors
            return _so_fwd(xp, data, label, multi_output=multi_output, preserve_shape=preserve_shape)
        e = data - data.max(axis=1, keepdims=True)
        xp.exp(e, out=e)
        e /= e.sum(axis=1, keepdims=True)
        return e

    return kernel, (), ()


@wait_for_first_input
def _so_shape(params, in_shapes, out_shapes, where):
    """MXNet's label shapes: data's shape (probability labels); with multi_output
    (n, prod(rest)) (the default), (n, *rest) or (n, 1, *rest) for data (n, k, *rest);
    otherwise data's shape without its last axis."""
    data, label = in_shapes
    data = tuple(data)
    if len(data) < 2 and params["multi_output"]:
        raise ShapeError(f"{where}: multi_output needs data of rank >= 2 (batch, class, ...), got {data}")
    if label is not None and tuple(label) == data:
        return [data, data], [data]
    if params["multi_output"]:
        rest = data[2:]
        allowed = [(data[0], math.prod(rest)), (data[0],) + rest, (data[0], 1) + rest]
    else:
        allowed = [data[:-1]]
    if label is None:
        return [data, allowed[0]], [data]
    if tuple(label) not in allowed:
        raise ShapeError(
            f"{where}: input 'label' has shape {tuple(label)}, expected {' or '.join(map(str, allowed))} "
            f"for data {data} (or {data} for probability labels)"
        )
    return [data, tuple(label)], [data]


def _so_bwd(
    xp,
    out,
    label,
    *,
    grad_scale,
    ignore_label,
    multi_output,
    use_ignore,
    preserve_shape,
    normalization,
    out_grad,
    smooth_alpha,
):
    """d loss / d data = softmax - target, masked, smoothed and normalised as MXNet 1.9 does.

    * probability labels (label.shape == data.shape): (out - label) * grad_scale, nothing else;
    * multi_output, data seen as (n, k, s): target one-hot along k; ignored labels (use_ignore)
      zero their column; no label smoothing; scale = grad_scale / s / count with count
      n ('batch') or 1 ('null'), or grad_scale / #(label != ignore_label) ('valid', at least 1);
    * otherwise data seen as (rows, k) (rows = batch, or every position with preserve_shape),
      row r taking label.flat[r]: target one-hot, smoothed to 1 - alpha / alpha/(k-1) by
      smooth_alpha; scale = grad_scale / count with count = #labels ('batch'), 1 ('null') or
      #(label != ignore_label) ('valid', at least 1).
    With out_grad the result is multiplied by the op's own output, as MXNet 1.9.1 does: its
    _backward_SoftmaxOutput receives (output, label) only and passes the output where the
    legacy operator read the head gradient, so the head gradient is ignored either way.
    """
    acc = np.float32 if out.dtype == np.float16 else out.dtype
    o = out.astype(acc, copy=False)
    if label.shape == out.shape:  # probability labels
        grad = (o - label.astype(acc, copy=False)) * grad_scale
    else:
        ignore = int(ignore_label)
        if multi_output:
            n, k = out.shape[0], out.shape[1]
            o3 = o.reshape(n, k, -1)
            spatial = o3.shape[2]
            lab = label.reshape(n, -1).astype(np.int64)  # (n, s)
        else:
            o2 = o.reshape(-1, out.shape[-1]) if preserve_shape else o.reshape(out.shape[0], -1)
            k = o2.shape[1]
            o3 = o2[:, :, None]
            spatial = 1
            lab = label.reshape(-1).astype(np.int64)[: o2.shape[0], None]  # (rows, 1)
        onehot = (xp.arange(k).reshape(1, k, 1) == lab[:, None, :]).astype(acc)
        if smooth_alpha and not multi_output:
            off = smooth_alpha / (k - 1) if k > 1 else 0.0
            onehot = onehot * (1.0 - smooth_alpha - off) + off
        grad = o3 - onehot
        if use_ignore:
            grad = grad * (lab != ignore)[:, None, :]
        n_labels = label.size
        if normalization == "valid":
            count = max(int((label.reshape(-1).astype(np.int64) != ignore).sum()), 1)
            scale = grad_scale / count
        elif normalization == "batch":
            scale = grad_scale / (out.shape[0] * spatial if multi_output else n_labels)
        else:
            scale = grad_scale / spatial
        grad = (grad * scale).reshape(out.shape)
    if out_grad:
        grad = grad * o
    return grad.astype(out.dtype, copy=False)


def _so_bwd_specialize(xp, in_types, **params):
    """Backward kernel for class labels without multi_output, smoothing, ignore or out_grad, and
    'null' or 'batch' normalization: (out - onehot(label)) * scale, as ``_so_bwd`` computes it."""
    p = params
    if p["multi_output"] or p["use_ignore"] or p["out_grad"] or p["smooth_alpha"] or p["normalization"] == "valid":
        return None
    if not math.isfinite(p["ignore_label"]):
        return None  # the general code's int(ignore_label) raises for it
    grad_scale, batch = p["grad_scale"], p["normalization"] == "batch"

    def kernel(out, label):
        # an empty out takes the general path, whose reshape with -1 rejects it
        if not (
            out.ndim == 2 and out.size and label.ndim == 1 and label.shape[0] == out.shape[0] and out.dtype in _SO_FAST
        ):
            return _so_bwd(xp, out, label, **params)
        onehot = (xp.arange(out.shape[1]) == label.astype(np.int64)[:, None]).astype(out.dtype)
        grad = out - onehot
        scale = grad_scale / label.size if batch else grad_scale / 1
        if scale != 1.0:  # x * 1.0 is x for every value grad can hold (its NaNs are already quiet)
            grad *= scale
        return grad

    return kernel, (), ()


def _rows3(x, params):
    """Softmax layout of SoftmaxOutput as (A, classes, B), softmax over axis 1."""
    if params.get("multi_output"):
        return x.reshape(x.shape[0], x.shape[1], -1)
    if params.get("preserve_shape"):
        return x.reshape(-1, x.shape[-1])[:, :, None]
    return x.reshape(x.shape[0], -1)[:, :, None]


def _so_loss(params, inputs, output):
    """L = sum_rows c * (logsumexp(z) - t . z), so dL/dz = c * (softmax(z) - t) (MXNet's backward).

    t is the (smoothed) one-hot label or the probability label, c folds grad_scale, use_ignore and
    normalization exactly as MXNet's SoftmaxOutput backward.
    """
    z, label = inputs[0], inputs[1]
    gs = float(params.get("grad_scale", 1.0))
    z3 = _rows3(z, params)
    if label.shape == z.shape:  # probability labels: grad = (p - label) * grad_scale
        t = _rows3(label, params)
        c = np.full((z3.shape[0], 1, z3.shape[2]), gs)
    else:
        multi = bool(params.get("multi_output"))
        k = z3.shape[1]
        lab = label.reshape(z.shape[0], -1) if multi else label.reshape(-1, 1)
        lab_int = lab.astype(np.int64)
        t = (np.arange(k).reshape(1, k, 1) == lab_int[:, None, :]).astype(np.float64)
        alpha = float(params.get("smooth_alpha", 0.0))
        if alpha:
            t = t * (1.0 - alpha - alpha / (k - 1)) + alpha / (k - 1)
        ignored = lab_int == int(params.get("ignore_label", -1.0))
        spatial = z3.shape[2] if multi else 1
        norm = params.get("normalization", "null")
        if norm == "batch":
            scale = gs / lab.shape[0] / spatial
        elif norm == "valid":
            scale = gs / max(int(lab.size - int(ignored.sum())), 1)
        else:
            scale = gs / spatial
        mask = (~ignored).astype(np.float64) if params.get("use_ignore") else np.ones(lab.shape)
        c = scale * mask[:, None, :]

    def loss(ins, out):
        zz = _rows3(np.asarray(ins[0], np.float64), params)
        m = zz.max(axis=1, keepdims=True)
        lse = m + np.log(np.exp(zz - m).sum(axis=1, keepdims=True))
        terms = c * (lse - (t * zz).sum(axis=1, keepdims=True))
        return float(terms.sum()), float(np.abs(c * lse).sum() + np.abs(c * t * zz).sum())

    return loss


def _so_grad(F, n, g):
    out, label = n.outputs[0], n.inputs[1]
    return [F._backward_SoftmaxOutput(out, label, **n.params), None]


register(
    "SoftmaxOutput",
    aliases=("Softmax",),
    params=_SOFTMAX_OUT_PARAMS,
    forward=_so_fwd,
    specialize=_so_fwd_specialize,
    infer_shape=_so_shape,
    gradient=_so_grad,
    implied_loss=_so_loss,
    prepare=_so_prepare,
    **_HEAD_SPEC,
    doc="Softmax forward; backward is the cross-entropy gradient (head gradient ignored; out_grad "
    "multiplies it by the output, as MXNet 1.9.1).",
)
_head_backward("_backward_SoftmaxOutput", "SoftmaxOutput", _SOFTMAX_OUT_PARAMS, _so_bwd, specialize=_so_bwd_specialize)


# ----------------------------------------------------------------------------
# Linear / Logistic / MAE regression outputs
# ----------------------------------------------------------------------------


@wait_for_first_input
def _reg_shape(params, in_shapes, out_shapes, where):
    """label defaults to data's shape, or (n,) for data (n, 1); a given label needs data's
    first dimension and size."""
    data, label = in_shapes
    data = tuple(data)
    if label is None:
        label = (data[0],) if len(data) == 2 and data[1] == 1 else data
    elif len(label) == 0 or label[0] != data[0] or math.prod(label) != math.prod(data):
        raise ShapeError(
            f"{where}: input 'label' has shape {tuple(label)}, inconsistent with data {data} "
            f"(needs the same first dimension and number of elements)"
        )
    return [data, tuple(label)], [data]


def _frozen_loss(scale, terms):
    """``loss(inputs, output)`` of an ``implied_loss``: ``scale * sum(value)``, magnitude ``|scale| * sum(mag)``,
    ``(value, mag) = terms(data)`` with data the first input in float64."""

    def loss(ins, out):
        value, mag = terms(np.asarray(ins[0], np.float64))
        return float(scale * value.sum()), float(abs(scale) * mag.sum())

    return loss


def _regression_loss(piece):
    """The ``implied_loss`` of a regression head: L = grad_scale / m * sum(piece), m outputs per sample, with
    ``piece(data0, label) -> terms(data) -> (value, magnitude)`` (data0, the base point, freezes MAE's sign)."""

    def factory(params, inputs, output):
        data, label = inputs
        num_output = label.size // label.shape[0] if label.ndim else 1
        lab = label.reshape(data.shape).astype(np.float64)
        return _frozen_loss(float(params["grad_scale"]) / num_output, piece(data, lab))

    return factory


def _signed_distance(sign, lab):
    return lambda d: (sign * (d - lab), np.abs(d) + np.abs(lab))


def _regression(name, forward, residual, piece, doc):
    """Register ``name`` and its fused ``_backward_*``: d/d data = residual(out, label) * grad_scale / m,
    m = label.size / label.shape[0] (outputs per sample), as MXNet's RegressionBackward; ``piece`` is the
    loss term whose derivative in data is the residual (``_regression_loss``)."""
    bwd_name = {
        "LinearRegressionOutput": "_backward_linear_reg_out",
        "LogisticRegressionOutput": "_backward_logistic_reg_out",
        "MAERegressionOutput": "_backward_mae_reg_out",
    }[name]

    def backward(xp, out, label, *, grad_scale):
        num_output = label.size // label.shape[0] if label.ndim else 1
        lab = label.reshape(out.shape).astype(out.dtype, copy=False)
        return (residual(xp, out, lab) * (grad_scale / num_output)).astype(out.dtype, copy=False)

    register(
        name,
        params={"grad_scale": Param("float", 1.0)},
        forward=lambda xp, data, label, grad_scale: forward(xp, data),
        infer_shape=_reg_shape,
        gradient=lambda F, n, g: [getattr(F, bwd_name)(n.outputs[0], n.inputs[1], **n.params), None],
        implied_loss=_regression_loss(piece),
        **_HEAD_SPEC,
        doc=doc,
    )
    _head_backward(bwd_name, name, {"grad_scale": Param("float", 1.0)}, backward)


def _sigmoid_fwd(xp, x):
    from .elemwise import stable_sigmoid

    return stable_sigmoid(xp, x)


_regression(
    "LinearRegressionOutput",
    lambda xp, x: x,
    lambda xp, out, lab: out - lab,
    # L = (d - label)^2 / 2: dL/dd = d - label; its rounding scale |d - label| (|d| + |label|)
    lambda d0, lab: lambda d: (0.5 * (d - lab) ** 2, np.abs(d - lab) * (np.abs(d) + np.abs(lab))),
    "Identity forward; backward (out - label) * grad_scale / outputs-per-sample (L2 loss).",
)
_regression(
    "LogisticRegressionOutput",
    _sigmoid_fwd,
    lambda xp, out, lab: out - lab,
    # L = softplus(d) - label d: dL/dd = sigmoid(d) - label
    lambda d0, lab: lambda d: (np.logaddexp(0.0, d) - lab * d, np.logaddexp(0.0, d) + np.abs(lab * d)),
    "Sigmoid forward; backward (sigmoid(x) - label) * grad_scale / outputs-per-sample (logistic loss).",
)
_regression(
    "MAERegressionOutput",
    lambda xp, x: x,
    # MXNet's minus_sign: 1 where out - label > 0, else -1 (also at 0)
    lambda xp, out, lab: xp.where(out - lab > 0, 1.0, -1.0).astype(out.dtype),
    # L = s (d - label) with s that sign frozen at the base point: the piece of |d - label| backward chose
    lambda d0, lab: _signed_distance(np.where(d0 - lab > 0, 1.0, -1.0), lab),
    "Identity forward; backward sign(out - label) * grad_scale / outputs-per-sample (L1 loss; -1 at ties).",
)


# ----------------------------------------------------------------------------
# MakeLoss
# ----------------------------------------------------------------------------

_MAKE_LOSS_PARAMS = {
    "grad_scale": Param("float", 1.0),
    "valid_thresh": Param("float", 0.0),
    "normalization": Param("str", "null", choices=("null", "batch", "valid")),
}


def _make_loss_grad_fwd(xp, data, *, grad_scale, valid_thresh, normalization):
    """d loss / d data = grad_scale, / batch size ('batch') or / max(1, #(data > valid_thresh)) ('valid')."""
    if normalization == "batch":
        scale = grad_scale / data.shape[0]
    elif normalization == "valid":
        scale = grad_scale / max(int((data > valid_thresh).sum()), 1)
    else:
        scale = grad_scale
    return xp.full(data.shape, scale, dtype=data.dtype)


def _make_loss_loss(params, inputs, output):
    """L = scale * sum(data), scale = grad_scale (/ batch size, / count(data > valid_thresh) at the base point)."""
    data = inputs[0]
    gs = float(params.get("grad_scale", 1.0))
    norm = params.get("normalization", "null")
    if norm == "batch":
        scale = gs / data.shape[0]
    elif norm == "valid":
        scale = gs / max(int((data > float(params.get("valid_thresh", 0.0))).sum()), 1)
    else:
        scale = gs

    def loss(ins, out):
        d = np.asarray(ins[0], np.float64)
        return float(scale * d.sum()), float(abs(scale) * np.abs(d).sum())

    return loss


register(
    "MakeLoss",
    params=_MAKE_LOSS_PARAMS,
    forward=lambda xp, x, **_: x,
    infer_shape=same_shape,
    infer_type=float_inputs("data"),
    gradient=lambda F, n, g: [F._backward_MakeLoss(n.inputs[0], **n.params)],
    is_loss=True,
    implied_loss=_make_loss_loss,
    doc="Marks ``data`` as a loss: forward is the identity, backward is a constant (head gradient ignored).",
)

register(
    "_backward_MakeLoss",
    params=_MAKE_LOSS_PARAMS,
    forward=_make_loss_grad_fwd,
    infer_shape=same_shape,
    # the gradient of a loss head is piecewise constant in data: its own derivative is zero
    gradient=lambda F, n, g: [None],
)


# ----------------------------------------------------------------------------
# SVMOutput
# ----------------------------------------------------------------------------

_SVM_PARAMS = {
    "margin": Param("float", 1.0),
    "regularization_coefficient": Param("float", 1.0),
    "use_linear": Param("bool", False),
}


@wait_for_first_input
def _svm_shape(params, in_shapes, out_shapes, where):
    """label: data's shape without its last (class) axis."""
    data, label = in_shapes
    data = tuple(data)
    if len(data) == 0:
        raise ShapeError(f"{where}: input 'data' must be at least 1-d (..., classes), got ()")
    ins = [data, label]
    expect_input_shape(ins, 1, "label", data[:-1], where, f" for data {data}")
    return ins, [data]


def _svm_bwd(xp, out, label, *, margin, regularization_coefficient, use_linear):
    """The hinge-loss gradient MXNet's SVMOutput sends to data (head gradient ignored).

    Rows r of the output seen as (rows, classes) with class k = int(label[r]) (truncated), o = output:
    L1 (use_linear), loss sum_{j != k} max(0, m + o_j) + max(0, m - o_k):
        d/do_k = -c [m > o_k],  d/do_j = c [m > -o_j];
    L2, loss sum_{j != k} max(0, m + o_j)^2 + max(0, m - o_k)^2:
        d/do_k = -2c (m - o_k) [m > o_k],  d/do_j = 2c (m + o_j) [m > -o_j];
    with m = margin, c = regularization_coefficient (strict comparisons, as MXNet).
    """
    o = out.reshape(-1, out.shape[-1])
    k = label.reshape(-1).astype(np.int64)
    is_k = xp.arange(o.shape[1]).reshape(1, -1) == k.reshape(-1, 1)
    # MXNet's parameters are C++ floats: margin 0.3 is float32(0.3) even for float64 data
    m, c = out.dtype.type(np.float32(margin)), out.dtype.type(np.float32(regularization_coefficient))
    zero = xp.zeros((), dtype=out.dtype)
    if use_linear:
        g_k = xp.where(m > o, -c, zero)
        g_j = xp.where(m > -o, c, zero)
    else:
        g_k = xp.where(m > o, -2 * c * (m - o), zero)
        g_j = xp.where(m > -o, 2 * c * (m + o), zero)
    return xp.where(is_k, g_k, g_j).reshape(out.shape).astype(out.dtype, copy=False)


def _svm_loss(params, inputs, output):
    """The hinge loss whose gradient ``_svm_bwd`` is, on the piece of the base point: with the active sets
    A_k = [m > o_k] (label class) and A_j = [m > -o_j] (others) frozen there,
    L1: c (sum_j A_j (m + o_j) + A_k (m - o_k));  L2: c (sum_j A_j (m + o_j)^2 + A_k (m - o_k)^2)."""
    o0, label = inputs[0], inputs[1]
    classes = o0.shape[-1]
    k = label.reshape(-1).astype(np.int64)
    is_k = np.arange(classes).reshape(1, -1) == k.reshape(-1, 1)
    # margin and coefficient are C++ floats in MXNet (as in _svm_bwd)
    m, c = float(np.float32(params["margin"])), float(np.float32(params["regularization_coefficient"]))
    o0 = o0.reshape(-1, classes).astype(np.float64)
    hinge0 = np.where(is_k, m - o0, m + o0)  # > 0 exactly where the term is active
    active = hinge0 > 0
    power = 1 if params["use_linear"] else 2

    def terms(d):
        hinge = np.where(is_k, m - d.reshape(-1, classes), m + d.reshape(-1, classes))
        value = np.where(active, hinge**power, 0.0)
        return value, np.where(
            active, power * np.abs(hinge) ** (power - 1) * (abs(m) + np.abs(d.reshape(hinge.shape))), 0.0
        )

    return _frozen_loss(c, terms)


register(
    "SVMOutput",
    params=dict(_SVM_PARAMS),
    forward=lambda xp, data, label, **_: data,
    infer_shape=_svm_shape,
    gradient=lambda F, n, g: [F._backward_SVMOutput(n.outputs[0], n.inputs[1], **n.params), None],
    implied_loss=_svm_loss,
    **_HEAD_SPEC,
    doc="Identity forward; backward the L2 (default) or L1 (use_linear) multi-class hinge-loss gradient "
    "(head gradient ignored).",
)
_head_backward("_backward_SVMOutput", "SVMOutput", dict(_SVM_PARAMS), _svm_bwd)


# ----------------------------------------------------------------------------
# softmax_cross_entropy
# ----------------------------------------------------------------------------


@wait_for_first_input
def _sce_shape(params, in_shapes, out_shapes, where):
    data, label = in_shapes
    data = tuple(data)
    if len(data) != 2:
        raise ShapeError(f"{where}: input 'data' must be 2-d (batch, classes), got {data}")
    ins = [data, label]
    expect_input_shape(ins, 1, "label", data[:1], where, f" for data {data}")
    return ins, [(1,)]


def _class_labels(xp, label, n_classes, op):
    """Integer class labels (truncated), each in [0, n_classes): MXNet reads out of bounds otherwise."""
    lab = label.astype(np.int64)
    if bool(((lab < 0) | (lab >= n_classes)).any()):
        raise ValueError(f"{op}: input 'label' must hold classes in [0, {n_classes}), got {label.reshape(-1).tolist()}")
    return lab


def _sce_fwd(xp, data, label):
    """sum_r -log(max(softmax(x)[r, l_r], 1e-8)) as a (1,) array (MXNet clamps the probability at 1e-8)."""
    lab = _class_labels(xp, label, data.shape[1], "softmax_cross_entropy")
    p = _softmax(xp, data.astype(np.float32 if data.dtype == np.float16 else data.dtype, copy=False), 1)
    picked = p[xp.arange(data.shape[0]), lab]
    return (-xp.log(xp.maximum(picked, 1e-8)).sum()).reshape(1).astype(data.dtype)


def _sce_grad(F, n, g):
    # loss = -sum_r log softmax(x)[r, l_r]  ->  dx[r] = (softmax(x)[r] - one_hot(l_r)) * g  (g of shape (1,));
    # like MXNet's, this ignores the forward's 1e-8 clamp. one_hot(l) * g is pick's adjoint applied to g
    # repeated once per row (broadcast like the (batch,) picked values).
    x, label = n.inputs
    g_rows = F.broadcast_like(g[0], F.pick(x, label, axis=1))
    onehot_g = F._pick_scatter(g_rows, label, x, axis=1, keepdims=False, mode="clip")
    return [F.broadcast_mul(F.softmax(x, axis=1), g[0]) - onehot_g, None]


register(
    "softmax_cross_entropy",
    inputs=("data", "label"),
    forward=_sce_fwd,
    infer_shape=_sce_shape,
    infer_type=_label_type,
    gradient=_sce_grad,
    no_grad_inputs=("label",),
    doc="Summed cross entropy of softmax(data) (rows = samples) and integer class labels; output shape (1,).",
)


# ----------------------------------------------------------------------------
# CTCLoss
# ----------------------------------------------------------------------------

_CTC_PARAMS = {
    "use_data_lengths": Param("bool", False),
    "use_label_lengths": Param("bool", False),
    "blank_label": Param("str", "first", choices=("first", "last")),
}


def _ctc_inputs(params):
    names = ["data", "label"]
    if params["use_data_lengths"]:
        names.append("data_lengths")
    if params["use_label_lengths"]:
        names.append("label_lengths")
    return names


@wait_for_first_input
def _ctc_shape(params, in_shapes, out_shapes, where):
    """data (T, N, alphabet), label (N, L) with L <= T, lengths (N,); outputs loss (N,) and the
    hidden gradient (T, N, alphabet)."""
    data, label = in_shapes[0], in_shapes[1]
    data = tuple(data)
    if len(data) != 3:
        raise ShapeError(f"{where}: input 'data' must be 3-d (sequence, batch, alphabet), got {data}")
    ins = list(in_shapes)
    if label is not None:
        label = tuple(label)
        if len(label) != 2 or label[0] != data[1]:
            raise ShapeError(
                f"{where}: input 'label' has shape {label}, expected ({data[1]}, label_length) for data {data}"
            )
        if label[1] > data[0]:
            raise ShapeError(
                f"{where}: the label length {label[1]} exceeds the sequence length {data[0]} of data {data}"
            )
    for k, name in enumerate(_ctc_inputs(params)[2:], start=2):
        expect_input_shape(ins, k, name, (data[1],), where)
    return ins, [(data[1],), data]


def _ctc_type(params, in_types, out_types, where):
    dt = in_types[0] if in_types[0] is not None else out_types[0]
    check_float(where, "data", dt)
    return [dt] + [t if t is not None else dt for t in in_types[1:]], [dt, dt]


def _ctc_lengths(xp, values, low, high, op, name):
    lengths = values.astype(np.int64)
    if bool(((lengths < low) | (lengths > high)).any()):
        raise ValueError(
            f"{op}: input {name!r} must hold lengths in [{low}, {high}], got {values.reshape(-1).tolist()}"
        )
    return lengths


def _shift(xp, a, k, fill):
    """``a`` shifted by ``k`` along its last axis (k > 0: towards higher indices), ``fill`` entering."""
    out = xp.full(a.shape, fill, dtype=a.dtype)
    if k > 0:
        out[..., k:] = a[..., :-k]
    else:
        out[..., :k] = a[..., -k:]
    return out


def _ctc_fwd(xp, data, label, *lengths, use_data_lengths, use_label_lengths, blank_label):
    """Per sample b, loss_b = -log p(l_b | x_b) and d loss_b / d x[:, b] (softmax applied inside).

    The label l (length L) is extended with blanks, l' = (blank, l_1, blank, ..., l_L, blank), S = 2L + 1.
    With y_t = softmax(x_t) and log-space forward/backward variables (both including the emission at t)
        alpha_0(s) = y_0(l'_s) for s < 2,
        alpha_t(s) = (alpha_{t-1}(s) + alpha_{t-1}(s-1) + [skip_s] alpha_{t-1}(s-2)) y_t(l'_s),
        beta_{T-1}(s) = y_{T-1}(l'_s) for s >= S - 2,
        beta_t(s) = (beta_{t+1}(s) + beta_{t+1}(s+1) + [skip_{s+2}] beta_{t+1}(s+2)) y_t(l'_s),
    skip_s = l'_s != blank and l'_s != l'_{s-2}, p = alpha_{T-1}(S-1) + alpha_{T-1}(S-2), and
        d(-log p)/d x_t(k) = y_t(k) - (1/p) sum_{s: l'_s = k} alpha_t(s) beta_t(s) / y_t(l'_s).
    Steps at and beyond a sample's data length get gradient 0. A sample no alignment can produce
    (L + #repeated neighbours > T) gets loss 0 and gradient 0, as MXNet's (warp-ctc's) CPU kernel.
    Computed in float64 whatever the input dtype.
    """
    op = "CTCLoss"
    steps, batch, alphabet = data.shape
    acc = np.float64
    x = data.astype(acc)
    x = x - x.max(axis=2, keepdims=True)
    logp = x - xp.log(xp.exp(x).sum(axis=2, keepdims=True))  # (T, N, A)
    k = 0
    if use_data_lengths:
        t_len = _ctc_lengths(xp, lengths[0], 0, steps, op, "data_lengths")
        k = 1
    else:
        t_len = xp.full((batch,), steps, dtype=np.int64)
    lab = label.astype(np.int64)
    lmax = lab.shape[1]
    blank = 0 if blank_label == "first" else alphabet - 1
    if use_label_lengths:
        l_len = _ctc_lengths(xp, lengths[k], 0, lmax, op, "label_lengths")
    elif lmax == 0:
        l_len = xp.zeros((batch,), dtype=np.int64)
    else:  # the first padding value (0 with blank 'first', -1 with 'last') ends the label
        is_pad = lab == (0 if blank_label == "first" else -1)
        l_len = xp.where(is_pad.any(axis=1), xp.argmax(is_pad, axis=1), lmax)
    valid = xp.arange(lmax).reshape(1, -1) < l_len.reshape(-1, 1)  # (N, L)
    if bool((valid & ((lab < 0) | (lab >= alphabet) | (lab == blank))).any()):
        # MXNet reads out of bounds for classes outside the alphabet, and warp-ctc's gradient is inconsistent
        # with its loss when a label is the blank itself (MXNet's docs: the blank "should not be passed")
        raise ValueError(
            f"{op}: input 'label' must hold classes in [0, {alphabet}) other than the blank "
            f"{blank} (blank_label={blank_label!r}) within each label's length, "
            f"got {label.tolist()}"
        )
    n_ext = 2 * lmax + 1
    ext = xp.full((batch, n_ext), blank, dtype=np.int64)
    ext[:, 1::2] = xp.where(valid, lab, blank)
    s_len = 2 * l_len + 1
    s_idx = xp.arange(n_ext).reshape(1, -1)
    s_valid = s_idx < s_len.reshape(-1, 1)  # (N, S)
    skip = xp.zeros((batch, n_ext), dtype=bool)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    repeats = ((lab[:, 1:] == lab[:, :-1]) & valid[:, 1:]).sum(axis=1) if lmax > 1 else xp.zeros(batch, np.int64)
    feasible = (l_len + repeats <= t_len) & (t_len > 0)
    neg_inf = -np.inf
    em = xp.take_along_axis(logp, xp.broadcast_to(ext.reshape(1, batch, n_ext), (steps, batch, n_ext)), axis=2)
    em = xp.where(s_valid.reshape(1, batch, n_ext), em, neg_inf)  # (T, N, S) log emissions
    alpha = xp.full((steps, batch, n_ext), neg_inf, dtype=acc)
    alpha[0] = xp.where(s_idx < 2, em[0], neg_inf)
    skip_in = xp.where(skip, 0.0, neg_inf)  # log [skip_s]
    for t in range(1, steps):
        a = alpha[t - 1]
        alpha[t] = xp.logaddexp(xp.logaddexp(a, _shift(xp, a, 1, neg_inf)), _shift(xp, a, 2, neg_inf) + skip_in) + em[t]
    bidx = xp.arange(batch)
    last = alpha[xp.maximum(t_len - 1, 0), bidx]  # (N, S): alpha at each sample's last step
    end1 = xp.take_along_axis(last, (s_len - 1).reshape(-1, 1), axis=1)[:, 0]
    end2 = xp.take_along_axis(last, xp.maximum(s_len - 2, 0).reshape(-1, 1), axis=1)[:, 0]
    loglike = xp.where(l_len > 0, xp.logaddexp(end1, end2), end1)
    beta = xp.full((steps, batch, n_ext), neg_inf, dtype=acc)
    skip_out = _shift(xp, skip_in, -2, neg_inf)  # log [skip_{s+2}]
    at_end = s_idx >= (s_len - 2).reshape(-1, 1)
    for t in range(steps - 1, -1, -1):
        b = beta[t + 1] if t + 1 < steps else xp.full((batch, n_ext), neg_inf, dtype=acc)
        rec = xp.logaddexp(xp.logaddexp(b, _shift(xp, b, -1, neg_inf)), _shift(xp, b, -2, neg_inf) + skip_out) + em[t]
        start = xp.where(at_end, em[t], neg_inf)
        tt = t_len.reshape(-1, 1)
        beta[t] = xp.where(t == tt - 1, start, xp.where(t < tt - 1, rec, neg_inf))
    with np.errstate(invalid="ignore"):
        gamma = xp.where(xp.isfinite(em), alpha + beta - em, neg_inf)  # log alpha beta / y
    ok = feasible.reshape(1, batch, 1)
    post = xp.where(ok, xp.exp(gamma - xp.where(feasible, loglike, 0.0).reshape(1, batch, 1)), 0.0)
    onehot = ((ext.reshape(batch, n_ext, 1) == xp.arange(alphabet).reshape(1, 1, -1)) & s_valid[:, :, None]).astype(acc)
    occupancy = xp.einsum("tns,nsa->tna", post, onehot)
    active = (xp.arange(steps).reshape(-1, 1) < t_len.reshape(1, -1)) & feasible.reshape(1, -1)  # (T, N)
    grad = xp.where(active[:, :, None], xp.exp(logp) - occupancy, 0.0)
    loss = xp.where(feasible, -loglike, 0.0)
    return loss.astype(data.dtype), grad.astype(data.dtype)


register(
    "CTCLoss",
    aliases=("ctc_loss", "_contrib_CTCLoss", "_contrib_ctc_loss"),
    inputs=_ctc_inputs,
    params=dict(_CTC_PARAMS),
    num_outputs=2,
    num_visible=1,
    forward=_ctc_fwd,
    infer_shape=_ctc_shape,
    infer_type=_ctc_type,
    # the forward also returns d loss_b / d data[:, b] (hidden output 1); the head gradient g (N,) scales
    # each sample's block: d data[t, b, k] = g[b] * grad[t, b, k] (MXNet's _backward_ctc_loss)
    gradient=lambda F, n, g: [F._backward_ctc_loss(g[0], n.outputs[1])] + [None] * (len(n.inputs) - 1),
    no_grad_inputs=("label", "data_lengths", "label_lengths"),
    doc="Connectionist Temporal Classification loss per sample of (T, N, alphabet) activations (softmax "
    "applied inside); blank is class 0 ('first') or alphabet - 1 ('last').",
)

register(
    "_backward_ctc_loss",
    inputs=("ograd", "grad"),
    forward=lambda xp, ograd, grad: (grad * ograd.reshape(1, -1, 1)).astype(grad.dtype, copy=False),
    infer_shape=output_like(1),
    infer_type=output_like(1),
    gradient=None,
    grad_undefined_reason="CTCLoss computes its gradient in the forward pass (alpha-beta recursion) and "
    "scales it in the hidden op _backward_ctc_loss, which has no gradient rule: second-order gradients "
    "through CTCLoss are not defined",
)
