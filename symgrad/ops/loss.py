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

import numpy as np

from ..base import ParamError, ShapeError
from .registry import Param, check_float, float_inputs, register, same_shape


def _label_type(params, in_types, out_types, where):
    """Output dtype = data dtype (float); labels keep whatever dtype they have (default: data's)."""
    dt = in_types[0] if in_types[0] is not None else out_types[0]
    check_float(where, "data", dt)
    return [dt] + [t if t is not None else dt for t in in_types[1:]], [dt]


def _grad_type(params, in_types, out_types, where):
    return in_types, [in_types[0]]


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
        raise ParamError(f"SoftmaxOutput {name!r}: parameter 'smooth_alpha' must be in [0, 1], "
                         f"got {params['smooth_alpha']}")
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


def _so_shape(params, in_shapes, out_shapes, where):
    """MXNet's label shapes: data's shape (probability labels); with multi_output
    (n, prod(rest)) (the default), (n, *rest) or (n, 1, *rest) for data (n, k, *rest);
    otherwise data's shape without its last axis."""
    data, label = in_shapes
    if data is None:
        return in_shapes, out_shapes
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


def _so_bwd(xp, out, label, *, grad_scale, ignore_label, multi_output, use_ignore, preserve_shape,
            normalization, out_grad, smooth_alpha):
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


def _so_grad(F, n, g):
    out, label = n.outputs[0], n.inputs[1]
    return [F._backward_SoftmaxOutput(out, label, **n.params), None]


register(
    "SoftmaxOutput",
    aliases=("Softmax",),
    inputs=("data", "label"),
    params=_SOFTMAX_OUT_PARAMS,
    forward=_so_fwd,
    infer_shape=_so_shape,
    infer_type=_label_type,
    gradient=_so_grad,
    is_loss=True,
    no_grad_inputs=("label",),
    prepare=_so_prepare,
    doc="Softmax forward; backward is the cross-entropy gradient (head gradient ignored; out_grad "
    "multiplies it by the output, as MXNet 1.9.1).",
)

register(
    "_backward_SoftmaxOutput",
    inputs=("out", "label"),
    params=_SOFTMAX_OUT_PARAMS,
    forward=_so_bwd,
    infer_shape=lambda p, i, o, w: (i, [i[0]]),
    infer_type=_grad_type,
    gradient=None,
    grad_undefined_reason="SoftmaxOutput is a loss head whose backward is the fused hidden op "
    "_backward_SoftmaxOutput: second-order gradients through it are not defined",
)


# ----------------------------------------------------------------------------
# Linear / Logistic / MAE regression outputs
# ----------------------------------------------------------------------------


def _reg_shape(params, in_shapes, out_shapes, where):
    """label defaults to data's shape, or (n,) for data (n, 1); a given label needs data's
    first dimension and size."""
    data, label = in_shapes
    if data is None:
        return in_shapes, out_shapes
    data = tuple(data)
    if label is None:
        label = (data[0],) if len(data) == 2 and data[1] == 1 else data
    elif len(label) == 0 or label[0] != data[0] or math.prod(label) != math.prod(data):
        raise ShapeError(
            f"{where}: input 'label' has shape {tuple(label)}, inconsistent with data {data} "
            f"(needs the same first dimension and number of elements)"
        )
    return [data, tuple(label)], [data]


def _regression(name, forward, residual, doc):
    """Register ``name`` and its fused ``_backward_*``: d/d data = residual(out, label) * grad_scale / m,
    m = label.size / label.shape[0] (outputs per sample), as MXNet's RegressionBackward."""
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
        inputs=("data", "label"),
        params={"grad_scale": Param("float", 1.0)},
        forward=lambda xp, data, label, grad_scale: forward(xp, data),
        infer_shape=_reg_shape,
        infer_type=_label_type,
        gradient=lambda F, n, g: [getattr(F, bwd_name)(n.outputs[0], n.inputs[1], **n.params), None],
        is_loss=True,
        no_grad_inputs=("label",),
        doc=doc,
    )
    register(
        bwd_name,
        inputs=("out", "label"),
        params={"grad_scale": Param("float", 1.0)},
        forward=backward,
        infer_shape=lambda p, i, o, w: (i, [i[0]]),
        infer_type=_grad_type,
        gradient=None,
        grad_undefined_reason=f"{name} is a loss head whose backward is the fused hidden op {bwd_name}: "
        "second-order gradients through it are not defined",
    )


def _sigmoid_fwd(xp, x):
    from .elemwise import _sigmoid

    return _sigmoid(xp, x)


_regression(
    "LinearRegressionOutput",
    lambda xp, x: x,
    lambda xp, out, lab: out - lab,
    "Identity forward; backward (out - label) * grad_scale / outputs-per-sample (L2 loss).",
)
_regression(
    "LogisticRegressionOutput",
    _sigmoid_fwd,
    lambda xp, out, lab: out - lab,
    "Sigmoid forward; backward (sigmoid(x) - label) * grad_scale / outputs-per-sample (logistic loss).",
)
_regression(
    "MAERegressionOutput",
    lambda xp, x: x,
    # MXNet's minus_sign: 1 where out - label > 0, else -1 (also at 0)
    lambda xp, out, lab: xp.where(out - lab > 0, 1.0, -1.0).astype(out.dtype),
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


register(
    "MakeLoss",
    params=_MAKE_LOSS_PARAMS,
    forward=lambda xp, x, **_: x,
    infer_shape=same_shape,
    infer_type=float_inputs("data"),
    gradient=lambda F, n, g: [F._backward_MakeLoss(n.inputs[0], **n.params)],
    is_loss=True,
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

