"""softmax, log_softmax, softmin (MXNet 1.9 src/operator/nn/softmax-inl.h) and SoftmaxActivation.

All gradients are Symbols built from the op's own output, so every order of
derivative works:

    softmax:      y = softmax(x / T)          dx = y (g - sum(g y)) / T
    log_softmax:  y = log softmax(x / T)      dx = (g - e^y sum(g)) / T
    softmin:      y = softmax(-x / T)         dx = -y (g - sum(g y)) / T

``use_length`` (a second input ``length``, one per softmax row) masks the
positions at and beyond each row's length: they take no part in the
normalisation, their output is 0 and so is their gradient. ``dtype`` sets the
output dtype (float16 inputs are accumulated in float32 either way); the
gradient is cast back to the input's dtype.
"""

from __future__ import annotations

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import (
    Param,
    acc_dtype,
    check_float,
    data_axis,
    expect_input_shape,
    float_inputs,
    normalize_axis,
    output_like,
    register,
    wait_for_first_input,
)

_FLOAT_NAMES = ("float16", "float32", "float64")

_SOFTMAX_PARAMS = {
    "axis": Param("int", -1),
    "temperature": Param("float", None),
    "dtype": Param("dtype", None),
    "use_length": Param("bool", False, optional=True),
}


def _prepare(opname):
    def prepare(params, name):
        dt = params["dtype"]
        if dt is not None and np.dtype(dt).name not in _FLOAT_NAMES:
            raise ParamError(f"{opname} {name!r}: parameter 'dtype' must be one of {list(_FLOAT_NAMES)}, got {dt}")
        if params["temperature"] == 0.0:
            raise ParamError(f"{opname} {name!r}: parameter 'temperature' must be non-zero")
        if params["use_length"] is None:
            params = {**params, "use_length": False}
        return params

    return prepare


def _inputs(params):
    return ["data", "length"] if params["use_length"] else ["data"]


def _length_shape(xshape, axis):
    """The ``length`` input's shape: data's without the softmax axis ((1,) for 1-d data)."""
    return tuple(d for i, d in enumerate(xshape) if i != axis) or (1,)


@wait_for_first_input
def _shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    ax = data_axis(x, params["axis"], where)
    ins = list(in_shapes)
    if params["use_length"]:
        expect_input_shape(ins, 1, "length", _length_shape(x, ax), where, f" (data {tuple(x)} without axis {ax})")
    return ins, [x]


def _type(params, in_types, out_types, where):
    dt = in_types[0]
    check_float(where, "data", dt)
    out = params["dtype"] if params["dtype"] is not None else (dt if dt is not None else out_types[0])
    if dt is None and params["dtype"] is None:
        dt = out
    return [dt] + list(in_types[1:]), [out]


def _valid_mask(xp, x, length, axis):
    """Boolean mask of the positions before each row's length, shaped to broadcast against x."""
    steps = xp.arange(x.shape[axis]).reshape(_channel(x.ndim, axis, x.shape[axis]))
    return steps < xp.expand_dims(
        length.astype(np.int64).reshape([d for i, d in enumerate(x.shape) if i != axis]), axis
    )


def _channel(ndim, axis, size):
    shape = [1] * ndim
    shape[axis] = size
    return tuple(shape)


def _softmax_core(xp, x, length, axis, temperature, negate, log):
    """softmax / log_softmax of (+-x / T) along ``axis`` in the accumulation dtype."""
    ax = normalize_axis(axis, x.ndim, "softmax")
    z = x.astype(acc_dtype(x.dtype), copy=False)
    if negate:
        z = -z
    if temperature is not None and temperature != 1.0:
        z = z / temperature
    if length is None:
        z = z - z.max(axis=ax, keepdims=True)
        e = xp.exp(z)
        s = e.sum(axis=ax, keepdims=True)
        return z - xp.log(s) if log else e / s
    valid = _valid_mask(xp, z, length, ax)
    zmax = xp.where(valid, z, -xp.inf).max(axis=ax, keepdims=True)
    z = xp.where(valid, z - xp.where(xp.isfinite(zmax), zmax, 0), 0)  # a fully masked row: all zeros
    e = xp.where(valid, xp.exp(z), 0)
    s = e.sum(axis=ax, keepdims=True)
    s = xp.where(s > 0, s, 1)
    return xp.where(valid, z - xp.log(s), 0) if log else e / s


def _forward(negate, log):
    def forward(xp, x, length=None, *, axis, temperature, dtype, use_length):
        y = _softmax_core(xp, x, length if use_length else None, axis, temperature, negate, log)
        return y.astype(dtype if dtype is not None else x.dtype, copy=False)

    return forward


def _gradient(negate, log):
    def rule(F, n, g):
        p = n.params
        x, y, gy = n.inputs[0], n.outputs[0], g[0]
        ax = p["axis"]
        if log:
            # y = z - logsumexp(z), z = x / T:  dz = g - softmax(z) sum(g), softmax(z) = e^y
            if p["use_length"]:  # only the valid positions take part: mask g and the result
                mask = F._softmax_length_mask(x, n.inputs[1], axis=ax)
                gy = gy * mask
                dz = (gy - F.broadcast_mul(F.exp(y), F.sum(gy, axis=ax, keepdims=True))) * mask
            else:
                dz = gy - F.broadcast_mul(F.exp(y), F.sum(gy, axis=ax, keepdims=True))
        else:
            # y = softmax(z):  dz = y (g - sum(g y))   (y = 0 at masked positions, so is dz)
            dz = y * F.broadcast_sub(gy, F.sum(gy * y, axis=ax, keepdims=True))
        scale = (-1.0 if negate else 1.0) / (p["temperature"] if p["temperature"] is not None else 1.0)
        dx = dz * scale if scale != 1.0 else dz
        if p["dtype"] is not None:  # the output dtype may differ from the input's
            dx = F._cast_like(dx, x)  # (elemwise.py's hidden cast)
        return [dx] + [None] * (len(n.inputs) - 1)

    return rule


for _name, _negate, _log, _doc in (
    ("softmax", False, False, "softmax(x / T) along ``axis``"),
    ("log_softmax", False, True, "log(softmax(x / T)) along ``axis``"),
    ("softmin", True, False, "softmax(-x / T) along ``axis``"),
):
    register(
        _name,
        inputs=_inputs,
        params=dict(_SOFTMAX_PARAMS),
        forward=_forward(_negate, _log),
        infer_shape=_shape,
        infer_type=_type,
        gradient=_gradient(_negate, _log),
        no_grad_inputs=("length",),
        prepare=_prepare(_name),
        doc=f"{_doc}; temperature T (default 1), output dtype, optional per-row ``length`` (use_length).",
    )


def _length_mask_fwd(xp, x, length, *, axis):
    ax = normalize_axis(axis, x.ndim, "softmax")
    return xp.broadcast_to(_valid_mask(xp, x, length, ax), x.shape).astype(x.dtype)


register(
    "_softmax_length_mask",
    inputs=("data", "length"),
    params={"axis": Param("int", -1)},
    forward=_length_mask_fwd,
    infer_shape=output_like(0),
    infer_type=output_like(0),
    gradient=lambda F, n, g: [None, None],  # a 0/1 constant
    no_grad_inputs=("length",),
    doc="1 before each row's length along ``axis``, 0 after (log_softmax's gradient with use_length); hidden.",
)


# ----------------------------------------------------------------------------
# SoftmaxActivation (deprecated in MXNet; kept for old symbol files)
# ----------------------------------------------------------------------------


@wait_for_first_input
def _sa_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    if params["mode"] == "channel" and len(x) < 3:
        raise ShapeError(f"{where}: mode='channel' needs data of rank >= 3, got {tuple(x)}")
    if len(x) < 1:
        raise ShapeError(f"{where}: input 'data' must be at least 1-d")
    return in_shapes, [x]


def _sa_fwd(xp, x, *, mode):
    # instance mode: MXNet 1.9 views the data as FlatTo2D, i.e. (prod(shape[:-1]), shape[-1]),
    # so the softmax runs over the last axis (for 2-d data: over each instance)
    return _softmax_core(xp, x, None, 1 if mode == "channel" else -1, None, False, False).astype(x.dtype, copy=False)


def _sa_grad(F, n, g):
    # y = softmax over the last axis (instance) or over axis 1 (channel):  dx = y (g - sum(g y))
    # (MXNet 1.9's backward always sums over axis 1, which is not the derivative of its own
    # forward for instance mode on >2-d data; we use the derivative.)
    axis = 1 if n.params["mode"] == "channel" else -1
    y, gy = n.outputs[0], g[0]
    return [y * F.broadcast_sub(gy, F.sum(gy * y, axis=axis, keepdims=True))]


register(
    "SoftmaxActivation",
    params={"mode": Param("str", "instance", choices=("instance", "channel"))},
    forward=_sa_fwd,
    infer_shape=_sa_shape,
    infer_type=float_inputs("data"),
    gradient=_sa_grad,
    doc="Softmax over the last axis (instance mode, MXNet's FlatTo2D view) or across channels (axis 1).",
)
