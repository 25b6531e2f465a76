"""Sequence operators: SequenceReverse and SequenceLast (SequenceMask lives in ``nn.py`` and shares
this module's ``sequence_inputs`` and ``sequence_shape``).

Data is laid out (time, batch, ...) (SequenceLast also takes (batch, time, ...) with axis=1); the
optional ``sequence_length`` input (present only with ``use_sequence_length=True``) holds each
sequence's length, truncated to an integer as MXNet does, and never gets a gradient.

Both ops are linear permutations/selections of ``data``, so their gradients are Symbols:
SequenceReverse is its own adjoint (reversing the first L steps twice is the identity) and
SequenceLast's adjoint is the hidden ``_sequence_last_scatter``, whose adjoint is SequenceLast
again; second-order gradients therefore work.

Semantics follow MXNet 1.9 src/operator/sequence_reverse-inl.h and sequence_last-inl.h: steps at
and beyond a sequence's length are left where they are by SequenceReverse; lengths outside
[0, T] (SequenceReverse) or [1, T] (SequenceLast), on which MXNet reads out of bounds, raise a
``ValueError`` naming the op.
"""

from __future__ import annotations

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import Param, check_float, expect_input_shape, register, wait_for_first_input, wait_for_inputs

_SEQ_PARAMS = {
    "use_sequence_length": Param("bool", False),
    "axis": Param("int", 0),
}


def sequence_inputs(params):
    return ["data", "sequence_length"] if params["use_sequence_length"] else ["data"]


def _type(params, in_types, out_types, where):
    """Output dtype = data's; sequence_length keeps its own dtype (default: data's)."""
    dt = in_types[0] if in_types[0] is not None else out_types[0]
    check_float(where, "data", dt)
    return [dt] + [t if t is not None else dt for t in in_types[1:]], [dt] * len(out_types)


def _check_rank(x, where):
    if len(x) < 2:
        raise ShapeError(f"{where}: input 'data' must be of rank >= 2 (sequence, batch, ...), got {tuple(x)}")


def _batch(shape, axis):
    """The batch size of (time, batch, ...) data, or of (batch, time, ...) data with axis=1."""
    return shape[1] if axis == 0 else shape[0]


def _length_shape(params, ins, batch, where):
    """Check / fill the shape of the optional ``sequence_length`` input: (batch,)."""
    if not params["use_sequence_length"]:
        return
    note = f" (the batch size; sequence axis {params['axis']})"
    expect_input_shape(ins, 1, "sequence_length", (batch,), where, note)


def sequence_shape(out_shape):
    """Shape rule of an op on ``data`` (time, batch, ...) ((batch, time, ...) with axis=1) and the optional
    ``sequence_length`` (batch,): data of rank >= 2; ``out_shape(x, axis)`` is the output's shape."""

    @wait_for_first_input
    def rule(params, in_shapes, out_shapes, where):
        x = in_shapes[0]
        _check_rank(x, where)
        ins = list(in_shapes)
        _length_shape(params, ins, _batch(x, params["axis"]), where)
        return ins, [out_shape(x, params["axis"])]

    return rule


def _lengths(xp, seq, batch, steps, low, op):
    """Integer lengths (MXNet truncates float lengths), each in [low, steps]; ``steps`` each without input."""
    if seq is None:
        return xp.full((batch,), steps, dtype=np.int64)
    lengths = seq.astype(np.int64)
    bad = (lengths < low) | (lengths > steps)
    if bool(bad.any()):
        raise ValueError(
            f"{op}: input 'sequence_length' must hold lengths in [{low}, {steps}] (the sequence axis has "
            f"{steps} steps), got {seq.reshape(-1).tolist()}"
        )
    return lengths


# ----------------------------------------------------------------------------
# SequenceReverse
# ----------------------------------------------------------------------------


def _rev_prepare(params, name):
    if params["axis"] != 0:
        raise ParamError(
            f"SequenceReverse {name!r}: parameter 'axis' must be 0 (MXNet 1.9 supports no other), got {params['axis']}"
        )
    return params


def _rev_fwd(xp, x, seq=None, *, use_sequence_length, axis):
    """out[t, b] = x[L_b - 1 - t, b] for t < L_b, x[t, b] for t >= L_b (padding stays in place)."""
    steps, batch = x.shape[0], x.shape[1]
    if not use_sequence_length:
        return x[::-1].copy()
    lengths = _lengths(xp, seq, batch, steps, 0, "SequenceReverse")
    t = xp.arange(steps).reshape(steps, 1)
    src = xp.where(t < lengths.reshape(1, batch), lengths.reshape(1, batch) - 1 - t, t)  # (T, B)
    x3 = x.reshape(steps, batch, -1)
    out = x3[src, xp.arange(batch).reshape(1, batch)]
    return out.reshape(x.shape)


register(
    "SequenceReverse",
    inputs=sequence_inputs,
    params=dict(_SEQ_PARAMS),
    prepare=_rev_prepare,
    forward=_rev_fwd,
    infer_shape=sequence_shape(lambda x, axis: tuple(x)),
    infer_type=_type,
    # y = P x with P a permutation that is its own inverse (P = P^T):  dx = P g = SequenceReverse(g)
    gradient=lambda F, n, g: [F.SequenceReverse(g[0], *n.inputs[1:], **n.params)] + [None] * (len(n.inputs) - 1),
    no_grad_inputs=("sequence_length",),
    doc="Reverse the first ``sequence_length`` steps of each sequence along axis 0 (all steps without it).",
)


# ----------------------------------------------------------------------------
# SequenceLast and its adjoint
# ----------------------------------------------------------------------------


def _last_prepare(params, name):
    if params["axis"] not in (0, 1):
        raise ParamError(f"SequenceLast {name!r}: parameter 'axis' must be 0 or 1, got {params['axis']}")
    return params


def _last_out_shape(x, axis):
    """(batch,) + x.shape[2:]: the sequence axis dropped."""
    return (_batch(x, axis),) + tuple(x[2:])


def _last_index(xp, shape, seq, axis, op):
    """(time index, batch index) arrays picking each sequence's last valid step from (d0, d1, rest)."""
    batch = _batch(shape, axis)
    steps = shape[axis]
    t = _lengths(xp, seq, batch, steps, 1, op) - 1
    b = xp.arange(batch)
    return (t, b) if axis == 0 else (b, t)


def _last_fwd(xp, x, seq=None, *, use_sequence_length, axis):
    """out[b] = x[L_b - 1, b] (axis 0) or x[b, L_b - 1] (axis 1); L_b = T without lengths."""
    x3 = x.reshape(x.shape[0], x.shape[1], -1)
    out = x3[_last_index(xp, x.shape, seq, axis, "SequenceLast")]
    return out.reshape(_last_out_shape(x.shape, axis))


register(
    "SequenceLast",
    inputs=sequence_inputs,
    params=dict(_SEQ_PARAMS),
    prepare=_last_prepare,
    forward=_last_fwd,
    infer_shape=sequence_shape(_last_out_shape),
    infer_type=_type,
    # y[b] = x[L_b - 1, b] (a selection S x):  dx = S^T g, g placed at each sequence's last step, zeros elsewhere
    gradient=lambda F, n, g: (
        [F._sequence_last_scatter(g[0], n.inputs[0], *n.inputs[1:], **n.params)] + [None] * (len(n.inputs) - 1)
    ),
    no_grad_inputs=("sequence_length",),
    doc="The last valid step of each sequence (step ``sequence_length - 1``, or the last step without it).",
)


def _scatter_inputs(params):
    return ["ograd", "data", "sequence_length"] if params["use_sequence_length"] else ["ograd", "data"]


@wait_for_inputs(1)
def _scatter_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[1]
    ins = list(in_shapes)
    ins[0] = _last_out_shape(x, params["axis"])
    data_and_length = ins[1:]  # _length_shape checks and fills the list it is given, in place
    _length_shape(params, data_and_length, _batch(x, params["axis"]), where)
    return [ins[0], *data_and_length], [tuple(x)]


def _scatter_fwd(xp, g, x, seq=None, *, use_sequence_length, axis):
    """zeros shaped like ``data`` with ``ograd[b]`` at each sequence's last step (one step per sequence)."""
    out = xp.zeros(x.shape[:2] + (int(np.prod(x.shape[2:], dtype=np.int64)),), dtype=g.dtype)
    out[_last_index(xp, x.shape, seq, axis, "SequenceLast")] = g.reshape(g.shape[0], -1)
    return out.reshape(x.shape)


register(
    "_sequence_last_scatter",
    inputs=_scatter_inputs,
    params=dict(_SEQ_PARAMS),
    forward=_scatter_fwd,
    infer_shape=_scatter_shape,
    infer_type=lambda p, i, o, w: (i, [i[0] if i[0] is not None else i[1]]),
    no_grad_inputs=("data", "sequence_length"),
    # linear in ograd; its adjoint is the selection: SequenceLast(h)  (data only gives the shape)
    gradient=lambda F, n, g: [F.SequenceLast(g[0], *n.inputs[2:], **n.params)] + [None] * (len(n.inputs) - 1),
    doc="SequenceLast's gradient: ``ograd`` placed at each sequence's last step of zeros shaped like "
    "``data`` (hidden).",
)
