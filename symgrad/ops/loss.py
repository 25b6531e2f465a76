"""Loss heads. Their backward ignores the head gradient, exactly as MXNet's.

SoftmaxOutput's gradient is the fused hidden op ``_backward_SoftmaxOutput``
(MXNet's own backward, with its normalisation rules); it has no gradient rule
of its own, so a second-order gradient through SoftmaxOutput raises a clear error.
"""

from __future__ import annotations

import numpy as np

from ..base import ShapeError
from .registry import Param, register, same_shape

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


def _softmax(xp, x, axis):
    z = x - x.max(axis=axis, keepdims=True)
    e = xp.exp(z)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def _so_fwd(xp, data, label, *, multi_output, preserve_shape, **_):
    if multi_output:
        return _softmax(xp, data, 1)
    if preserve_shape:
        return _softmax(xp, data, -1)
    return _softmax(xp, data.reshape(data.shape[0], -1), 1).reshape(data.shape)


def _so_shape(params, in_shapes, out_shapes, where):
    data, label = in_shapes
    if data is None:
        return in_shapes, out_shapes
    data = tuple(data)
    if params["multi_output"]:
        want = (data[0],) + data[2:]
    elif params["preserve_shape"]:
        want = data[:-1]
    else:
        want = (data[0],)
    if label is not None and tuple(label) not in (want, data):
        if not (params["multi_output"] and int(np.prod(label)) == int(np.prod(want))):
            raise ShapeError(
                f"{where}: input 'label' has shape {tuple(label)}, expected {want} for data {data} "
                f"(or {data} for probability labels)"
            )
    return [data, label if label is not None else want], [data]


def _so_bwd(xp, out, label, ograd=None, *, grad_scale, ignore_label, multi_output, use_ignore, preserve_shape,
            normalization, out_grad, smooth_alpha):
    """dL/d data = softmax - onehot(label), masked, smoothed and normalised as MXNet does."""
    if label.shape == out.shape:  # probability labels
        grad = (out - label) * grad_scale
        return grad * ograd if out_grad else grad
    if multi_output:
        n, k = out.shape[0], out.shape[1]
        o = out.reshape(n, k, -1)
        lab = label.reshape(n, -1)
        spatial = o.shape[2]
    else:
        o = out.reshape(-1, out.shape[-1]) if preserve_shape else out.reshape(out.shape[0], -1)
        k = o.shape[1]
        o = o[:, :, None]
        lab = label.reshape(-1, 1)
        spatial = 1
    lab_int = lab.astype(np.int64)
    onehot = (xp.arange(k).reshape(1, k, 1) == lab_int[:, None, :]).astype(out.dtype)
    if smooth_alpha:
        onehot = onehot * (1.0 - smooth_alpha - smooth_alpha / (k - 1)) + smooth_alpha / (k - 1)
    grad = o - onehot
    ignored = lab_int == int(ignore_label)
    if use_ignore:
        grad = grad * (~ignored)[:, None, :]
    if normalization == "batch":
        scale = grad_scale / lab.shape[0] / (spatial if multi_output else 1)
    elif normalization == "valid":
        valid = max(int(lab.size - int(ignored.sum())), 1)
        scale = grad_scale / valid
    else:
        scale = grad_scale / (spatial if multi_output else 1)
    grad = (grad * scale).reshape(out.shape).astype(out.dtype, copy=False)
    return grad * ograd if out_grad else grad


def _so_grad(F, n, g):
    p = dict(n.params)
    out, label = n.outputs[0], n.inputs[1]
    if p["out_grad"]:
        return [F._backward_SoftmaxOutput(out, label, g[0], **p), None]
    return [F._backward_SoftmaxOutput(out, label, **p), None]


register(
    "SoftmaxOutput",
    aliases=("Softmax",),
    inputs=("data", "label"),
    params=_SOFTMAX_OUT_PARAMS,
    forward=_so_fwd,
    infer_shape=_so_shape,
    gradient=_so_grad,
    is_loss=lambda p: not p["out_grad"],
    no_grad_inputs=("label",),
    doc="Softmax forward; backward is the cross-entropy gradient (head gradient ignored).",
)

register(
    "_backward_SoftmaxOutput",
    inputs=lambda p: ["out", "label", "ograd"] if p["out_grad"] else ["out", "label"],
    params=_SOFTMAX_OUT_PARAMS,
    forward=_so_bwd,
    infer_shape=lambda p, i, o, w: (i, [i[0]]),
    gradient=None,
    grad_undefined_reason="SoftmaxOutput is a loss head whose backward is the fused hidden op "
    "_backward_SoftmaxOutput: second-order gradients through it are not defined",
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
    """d loss / d data = grad_scale, / batch size ('batch') or / #(data > valid_thresh) ('valid')."""
    if normalization == "batch":
        scale = grad_scale / data.shape[0]
    elif normalization == "valid":
        scale = grad_scale / max(int((data > valid_thresh).sum()), 1)
    else:
        scale = grad_scale
    return xp.full(data.shape, scale, dtype=data.dtype)


register(
    "MakeLoss",
    aliases=("make_loss",),
    params=_MAKE_LOSS_PARAMS,
    forward=lambda xp, x, **_: x,
    infer_shape=same_shape,
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
