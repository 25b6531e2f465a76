"""``_contrib_`` operators of MXNet 1.9.1: quadratic, div_sqrt_dim, allclose, quantize/dequantize and the
interleaved multi-head attention matmuls of ``src/operator/contrib/transformer.cc``.

Interleaved attention layout (MXNet's, read from the strided GEMMs of transformer.cc). With ``H`` heads of
width ``D`` (``E = H * D``), sequence length ``L`` and batch ``B``:

- ``queries_keys_values`` (L, B, 3E): the last axis is (H, 3, D): per head, its query, key and value;
- ``keys_values`` (L, B, 2E): the last axis is (H, 2, D): per head, its key and value;
- ``queries`` and the value-attention output (L, B, E): the last axis is (H, D);
- attention scores / maps (B*H, Lq, Lk), batch index ``b * H + h``.

``selfatt_qk`` = Q K^T / sqrt(D), ``selfatt_valatt`` = att V, and the enc-dec pair the same with the queries
and the keys/values in separate tensors. The per-head slices are the hidden linear pair
``_interleaved_heads_split`` (L, B, parts*E) -> (B*H, L, D) and ``_interleaved_heads_merge`` (its adjoint),
so every gradient is batch_dot, these two and ``_contrib_div_sqrt_dim``: second order works. MXNet's CPU
kernels are float32 only; symgrad computes in every float dtype.

quantize / quantize_v2 / dequantize give zero gradients (MXNet's ``MakeZeroGradNodes``, "a temp solution to
enable GluonCV INT8 flow": they are forward-only ops). allclose has no gradient (MXNet registers none).
"""

from __future__ import annotations

import numpy as np

from ..base import ShapeError
from ..opdef import (
    Param,
    check_at_least,
    check_float,
    float_inputs,
    register,
    same_shape,
    wait_for_first_input,
    wait_for_inputs,
)

# ----------------------------------------------------------------------------
# quadratic, div_sqrt_dim
# ----------------------------------------------------------------------------


def _quadratic_fwd(xp, x, a, b, c):
    # MXNet: x * (a * x + b) + c with float parameters, computed in the data's dtype
    dt = x.dtype
    return x * (dt.type(a) * x + dt.type(b)) + dt.type(c)


register(
    "_contrib_quadratic",
    params={"a": Param("float", 0.0), "b": Param("float", 0.0), "c": Param("float", 0.0)},
    forward=_quadratic_fwd,
    infer_shape=same_shape,
    # f = a x^2 + b x + c  ->  f' = 2 a x + b
    gradient=lambda F, n, g: [g[0] * (n.inputs[0] * (2.0 * n.params["a"]) + n.params["b"])],
    doc="a * x^2 + b * x + c, elementwise.",
)


def _div_sqrt_dim_fwd(xp, x):
    if x.ndim < 1:
        raise ShapeError(f"_contrib_div_sqrt_dim: input 'data' must have at least one axis, got shape {x.shape}")
    return x / x.dtype.type(np.sqrt(float(x.shape[-1])))


def _div_sqrt_dim_shape(params, in_shapes, out_shapes, where):
    for s in list(in_shapes) + list(out_shapes):
        if s is not None and len(s) < 1:
            raise ShapeError(f"{where}: input 'data' must have at least one axis, got shape {tuple(s)}")
    return same_shape(params, in_shapes, out_shapes, where)


register(
    "_contrib_div_sqrt_dim",
    forward=_div_sqrt_dim_fwd,
    infer_shape=_div_sqrt_dim_shape,
    infer_type=float_inputs("data"),
    # y = x / sqrt(d) is linear, d = the last axis (the gradient has x's shape)  ->  dx = g / sqrt(d)
    gradient=lambda F, n, g: [F._contrib_div_sqrt_dim(g[0])],
    doc="data / sqrt(data.shape[-1]).",
)


# ----------------------------------------------------------------------------
# allclose
# ----------------------------------------------------------------------------


def _allclose_fwd(xp, a, b, rtol, atol, equal_nan):
    dt = np.result_type(a.dtype, b.dtype)
    a, b = a.astype(dt, copy=False), b.astype(dt, copy=False)
    # MXNet: NaN in either -> equal_nan and both NaN; else a == b or |a - b| <= atol + rtol * |b|,
    # with rtol and atol float32 parameters
    if dt.kind in "fc":
        na, nb = xp.isnan(a), xp.isnan(b)
    else:
        na = nb = xp.zeros(a.shape, dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):
        close = (a == b) | (xp.abs(a - b) <= float(np.float32(atol)) + float(np.float32(rtol)) * xp.abs(b))
    ok = xp.where(na | nb, (na == nb) & bool(equal_nan), close)
    return xp.asarray(bool(ok.all()), dtype=np.uint8).reshape(())


def _allclose_shape(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    if a is not None and b is not None and tuple(a) != tuple(b):
        raise ShapeError(f"{where}: inputs 'a' and 'b' must have the same shape, got {tuple(a)} and {tuple(b)}")
    known = a if a is not None else b
    return [known, known], [()]


register(
    "_contrib_allclose",
    inputs=("a", "b"),
    params={"rtol": Param("float", 1e-05), "atol": Param("float", 1e-08), "equal_nan": Param("bool", True)},
    forward=_allclose_fwd,
    infer_shape=_allclose_shape,
    infer_type=lambda p, i, o, w: (i, [np.dtype(np.uint8)]),
    gradient=None,
    grad_undefined_reason="allclose is a boolean test (MXNet registers no gradient for _contrib_allclose)",
    doc="1 (uint8, shape ()) when every |a - b| <= atol + rtol * |b| (NaNs equal when equal_nan), else 0.",
)


# ----------------------------------------------------------------------------
# quantize, quantize_v2, dequantize
# ----------------------------------------------------------------------------

_F32 = np.dtype(np.float32)


def _quantize_arrays(xp, x, lo, hi, out_type):
    """MXNet's CPU kernels in float32: uint8 ``(x - lo) * 255 / (hi - lo) + 0.5`` truncated, int8
    ``sign(x) min(|x| 127 / max(|lo|, |hi|) + 0.5, 127)`` truncated; also the output range."""
    x = x.astype(np.float32, copy=False)
    lo, hi = np.float32(lo), np.float32(hi)
    if out_type == "uint8":
        scale = np.float32(255.0 / float(hi - lo))
        q = ((x - lo) * scale).astype(np.float64) + 0.5
        out = xp.clip(xp.trunc(q), 0, 255).astype(np.uint8)
        return out, lo, hi
    real = np.float32(max(abs(lo), abs(hi)))
    scale = np.float32(127.0) / real
    q = xp.sign(x) * xp.minimum(xp.abs(x) * scale + np.float32(0.5), np.float32(127.0))
    return xp.trunc(q).astype(np.int8), -real, real


def _range_array(xp, v):
    return xp.asarray([v], dtype=np.float32)


def _quantize_fwd(xp, data, min_range, max_range, out_type):
    lo, hi = float(min_range.reshape(-1)[0]), float(max_range.reshape(-1)[0])
    out, olo, ohi = _quantize_arrays(xp, data, lo, hi, out_type)
    return out, _range_array(xp, olo), _range_array(xp, ohi)


def _quantize_shape(params, in_shapes, out_shapes, where):
    data, lo, hi = in_shapes
    for name, s in (("min_range", lo), ("max_range", hi)):
        if s is not None and tuple(s) != (1,):
            raise ShapeError(f"{where}: input {name!r} must have shape (1,), got {tuple(s)}")
    return [data, (1,), (1,)], [data, (1,), (1,)]


def _float32_inputs(names, out_types):
    def infer(params, in_types, o, where="op"):
        for name, t in zip(names, in_types):
            if t is not None and np.dtype(t) != _F32:
                raise TypeError(f"{where}: input {name!r} must be float32 (as MXNet), got {np.dtype(t)}")
        return [_F32] * len(in_types), out_types(params)

    return infer


def _zero_grads(F, n, g):
    # MXNet's MakeZeroGradNodes (forward-only quantization ops): zero gradients for every input
    return [F.zeros_like(x) if need else None for x, need in zip(n.inputs, n.needs)]


register(
    "_contrib_quantize",
    inputs=("data", "min_range", "max_range"),
    params={"out_type": Param("str", "uint8", choices=("int8", "uint8"))},
    num_outputs=3,
    forward=_quantize_fwd,
    infer_shape=_quantize_shape,
    infer_type=_float32_inputs(("data", "min_range", "max_range"), lambda p: [np.dtype(p["out_type"]), _F32, _F32]),
    gradient=_zero_grads,
    doc="float32 data quantized to uint8 (affine over [min_range, max_range]) or int8 (zero-centred); also the "
    "range the output represents.",
)


def _v2_out_type(params):
    if params["out_type"] == "auto":
        lo, hi = params["min_calib_range"], params["max_calib_range"]
        return "uint8" if lo is not None and hi is not None and lo >= 0.0 else "int8"
    return params["out_type"]


def _quantize_v2_fwd(xp, data, out_type, min_calib_range, max_calib_range):
    params = {"out_type": out_type, "min_calib_range": min_calib_range, "max_calib_range": max_calib_range}
    calibrated = min_calib_range is not None and max_calib_range is not None
    if data.dtype != _F32:  # already quantized: passed through, with the calibrated or the full type range
        lo, hi = (
            (min_calib_range, max_calib_range)
            if calibrated
            else ((0.0, 255.0) if data.dtype == np.uint8 else (-127.0, 127.0))
        )
        return data.copy(), _range_array(xp, lo), _range_array(xp, hi)
    if calibrated:
        lo, hi = min_calib_range, max_calib_range
    else:
        lo, hi = float(data.min()), float(data.max())
    out, olo, ohi = _quantize_arrays(xp, data, lo, hi, _v2_out_type(params))
    return out, _range_array(xp, olo), _range_array(xp, ohi)


def _quantize_v2_type(params, in_types, out_types, where="op"):
    t = in_types[0]
    if t is not None and np.dtype(t) not in (_F32, np.dtype(np.uint8), np.dtype(np.int8)):
        raise TypeError(f"{where}: input 'data' must be float32, uint8 or int8 (as MXNet), got {np.dtype(t)}")
    return in_types, [np.dtype(_v2_out_type(params)), _F32, _F32]


register(
    "_contrib_quantize_v2",
    inputs=("data",),
    params={
        "out_type": Param("str", "int8", choices=("auto", "int8", "uint8")),
        "min_calib_range": Param("float", None),
        "max_calib_range": Param("float", None),
    },
    num_outputs=3,
    forward=_quantize_v2_fwd,
    infer_shape=lambda p, i, o, w: (i, [i[0], (1,), (1,)]),
    infer_type=_quantize_v2_type,
    gradient=_zero_grads,
    doc="quantize with the calibrated range (min/max_calib_range) or the data's own min and max.",
)


def _dequantize_fwd(xp, data, min_range, max_range, out_type):
    lo, hi = np.float32(min_range.reshape(-1)[0]), np.float32(max_range.reshape(-1)[0])
    if data.dtype == np.uint8:
        # MXNet's kernel (its docstring omits the offset): in * (hi - lo) / 255 + lo
        scale = np.float32((hi - lo) / np.float32(255.0))
        return data.astype(np.float32) * scale + lo
    real = np.float32(max(abs(lo), abs(hi)))
    return data.astype(np.float32) * np.float32(real / np.float32(127.0))


def _dequantize_type(params, in_types, out_types, where="op"):
    t = in_types[0]
    if t is not None and np.dtype(t) not in (np.dtype(np.uint8), np.dtype(np.int8)):
        raise TypeError(f"{where}: input 'data' must be uint8 or int8 (as MXNet), got {np.dtype(t)}")
    for name, u in zip(("min_range", "max_range"), in_types[1:]):
        if u is not None and np.dtype(u) != _F32:
            raise TypeError(f"{where}: input {name!r} must be float32 (as MXNet), got {np.dtype(u)}")
    return [t, _F32, _F32], [_F32]


register(
    "_contrib_dequantize",
    inputs=("data", "min_range", "max_range"),
    params={"out_type": Param("str", "float32", choices=("float32",))},
    forward=_dequantize_fwd,
    infer_shape=lambda p, i, o, w: (_quantize_shape(p, i, o, w)[0], [i[0]]),
    infer_type=_dequantize_type,
    no_grad_inputs=("data",),
    gradient=_zero_grads,
    doc="uint8 data back to float32 over [min_range, max_range], or int8 over +-max(|min_range|, |max_range|).",
)


# ----------------------------------------------------------------------------
# Interleaved multi-head attention matmuls
# ----------------------------------------------------------------------------

_HEADS = {"heads": Param("int")}


def _heads_prepare(op):
    def prepare(params, node_name):
        check_at_least(params, "heads", 1, f"{op} {node_name!r}")
        return params

    return prepare


def _split(xp, x, heads, parts, index):
    """(L, B, parts*H*D) -> (B*H, L, D): part ``index`` of every head's interleaved group."""
    L, B, C = x.shape
    D = C // (parts * heads)
    y = x.reshape(L, B, heads, parts, D)[:, :, :, index, :]
    return xp.ascontiguousarray(y.transpose(1, 2, 0, 3)).reshape(B * heads, L, D)


def _merge(xp, y, heads, parts, index):
    """(B*H, L, D) -> (L, B, parts*H*D), ``y`` in part ``index`` and zeros elsewhere (the adjoint of _split)."""
    BH, L, D = y.shape
    B = BH // heads
    out = xp.zeros((L, B, heads, parts, D), dtype=y.dtype)
    out[:, :, :, index, :] = y.reshape(B, heads, L, D).transpose(2, 0, 1, 3)
    return out.reshape(L, B, parts * heads * D)


def _width(where, name, shape, parts, heads):
    """Head width D of a (L, B, parts*H*D) input, with errors naming the op and the input."""
    if len(shape) != 3:
        raise ShapeError(
            f"{where}: input {name!r} must be 3-d (seq_length, batch, {parts}*heads*head_dim), got shape {tuple(shape)}"
        )
    if shape[2] % (parts * heads):
        raise ShapeError(
            f"{where}: the last axis of input {name!r} ({shape[2]}) must be a multiple of "
            f"{parts} * heads = {parts * heads}"
        )
    return shape[2] // (parts * heads)


@wait_for_first_input
def _split_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    D = _width(where, "data", x, params["parts"], params["heads"])
    return in_shapes, [(x[1] * params["heads"], x[0], D)]


@wait_for_first_input
def _merge_shape(params, in_shapes, out_shapes, where):
    (y,) = in_shapes
    H, parts = params["heads"], params["parts"]
    if len(y) != 3 or y[0] % H:
        raise ShapeError(
            f"{where}: input 'data' must be 3-d (batch*heads, seq_length, head_dim) with its first "
            f"axis a multiple of heads={H}, got {tuple(y)}"
        )
    return in_shapes, [(y[1], y[0] // H, parts * H * y[2])]


_LAYOUT = {"heads": Param("int"), "parts": Param("int"), "index": Param("int")}

# split S and merge M are linear and <M y, x> = <y, S x>: each is the gradient of the other
register(
    "_interleaved_heads_split",
    params=dict(_LAYOUT),
    forward=lambda xp, x, heads, parts, index: _split(xp, x, heads, parts, index),
    infer_shape=_split_shape,
    gradient=lambda F, n, g: [F._interleaved_heads_merge(g[0], **n.params)],
    doc="(L, B, parts*H*D) -> (B*H, L, D): part ``index`` of each head's interleaved group (hidden).",
)
register(
    "_interleaved_heads_merge",
    params=dict(_LAYOUT),
    forward=lambda xp, y, heads, parts, index: _merge(xp, y, heads, parts, index),
    infer_shape=_merge_shape,
    gradient=lambda F, n, g: [F._interleaved_heads_split(g[0], **n.params)],
    doc="(B*H, L, D) -> (L, B, parts*H*D) with zeros in the other parts: adjoint of _interleaved_heads_split (hidden).",
)


def _scores(xp, q, k):
    """q k^T / sqrt(D) per attention batch."""
    return xp.matmul(q, k.transpose(0, 2, 1)) / q.dtype.type(np.sqrt(float(q.shape[-1])))


def _selfatt_qk_fwd(xp, qkv, heads):
    return _scores(xp, _split(xp, qkv, heads, 3, 0), _split(xp, qkv, heads, 3, 1))


def _selfatt_valatt_fwd(xp, qkv, att, heads):
    return _merge(xp, xp.matmul(att, _split(xp, qkv, heads, 3, 2)), heads, 1, 0)


def _encdec_qk_fwd(xp, q, kv, heads):
    return _scores(xp, _split(xp, q, heads, 1, 0), _split(xp, kv, heads, 2, 0))


def _encdec_valatt_fwd(xp, kv, att, heads):
    return _merge(xp, xp.matmul(att, _split(xp, kv, heads, 2, 1)), heads, 1, 0)


@wait_for_first_input
def _selfatt_qk_shape(params, in_shapes, out_shapes, where):
    (qkv,) = in_shapes
    _width(where, "queries_keys_values", qkv, 3, params["heads"])
    return in_shapes, [(params["heads"] * qkv[1], qkv[0], qkv[0])]


def _att_check(where, att, want):
    if att is not None and tuple(att) != tuple(want):
        raise ShapeError(
            f"{where}: input 'attention' must have shape (batch*heads, q_seq_length, kv_seq_length) = "
            f"{tuple(want)}, got {tuple(att)}"
        )


@wait_for_first_input
def _selfatt_valatt_shape(params, in_shapes, out_shapes, where):
    qkv, att = in_shapes
    H = params["heads"]
    D = _width(where, "queries_keys_values", qkv, 3, H)
    L, B = qkv[0], qkv[1]
    _att_check(where, att, (B * H, L, L))
    return [qkv, (B * H, L, L)], [(L, B, H * D)]


@wait_for_inputs(0, 1)
def _encdec_qk_shape(params, in_shapes, out_shapes, where):
    q, kv = in_shapes
    H = params["heads"]
    D = _width(where, "queries", q, 1, H)
    Dk = _width(where, "keys_values", kv, 2, H)
    if D != Dk or q[1] != kv[1]:
        raise ShapeError(
            f"{where}: 'keys_values' {tuple(kv)} must have the batch of 'queries' {tuple(q)} and twice its last axis"
        )
    return in_shapes, [(q[1] * H, q[0], kv[0])]


@wait_for_inputs(0, 1)
def _encdec_valatt_shape(params, in_shapes, out_shapes, where):
    kv, att = in_shapes
    H = params["heads"]
    D = _width(where, "keys_values", kv, 2, H)
    if len(att) != 3:
        raise ShapeError(
            f"{where}: input 'attention' must be 3-d (batch*heads, q_seq_length, kv_seq_length), got {tuple(att)}"
        )
    _att_check(where, att, (kv[1] * H, att[1], kv[0]))
    return in_shapes, [(att[1], kv[1], H * D)]


def _split_sym(F, x, heads, parts, index):
    return F._interleaved_heads_split(x, heads=heads, parts=parts, index=index)


def _merge_sym(F, y, heads, parts, index):
    return F._interleaved_heads_merge(y, heads=heads, parts=parts, index=index)


# S = Q K^T / sqrt(D)  ->  dQ = G K / sqrt(D), dK = G^T Q / sqrt(D) (both (B*H, L, D): div_sqrt_dim divides
# by sqrt of their last axis, D); each goes back to its place in the interleaved input (merge = split^T)
def _selfatt_qk_grad(F, n, g):
    H = n.params["heads"]
    qkv = n.inputs[0]
    q, k = _split_sym(F, qkv, H, 3, 0), _split_sym(F, qkv, H, 3, 1)
    dq = F._contrib_div_sqrt_dim(F.batch_dot(g[0], k))
    dk = F._contrib_div_sqrt_dim(F.batch_dot(g[0], q, transpose_a=True))
    return [_merge_sym(F, dq, H, 3, 0) + _merge_sym(F, dk, H, 3, 1)]


# O = merge(A V)  ->  dA = G' V^T, dV = A^T G' with G' = split(G) (the (B*H, L, D) view of the output gradient)
def _valatt_grad(parts):
    """Gradient rule of valatt whose V is the last of ``parts`` interleaved projections (3: Q, K, V; 2: K, V)."""

    def rule(F, n, g):
        H = n.params["heads"]
        proj, att = n.inputs
        v = _split_sym(F, proj, H, parts, parts - 1)
        gy = _split_sym(F, g[0], H, 1, 0)
        dproj = _merge_sym(F, F.batch_dot(att, gy, transpose_a=True), H, parts, parts - 1) if n.needs[0] else None
        datt = F.batch_dot(gy, v, transpose_b=True) if n.needs[1] else None
        return [dproj, datt]

    return rule


def _encdec_qk_grad(F, n, g):
    H = n.params["heads"]
    queries, kv = n.inputs
    q, k = _split_sym(F, queries, H, 1, 0), _split_sym(F, kv, H, 2, 0)
    dq = _merge_sym(F, F._contrib_div_sqrt_dim(F.batch_dot(g[0], k)), H, 1, 0) if n.needs[0] else None
    dk = _merge_sym(F, F._contrib_div_sqrt_dim(F.batch_dot(g[0], q, transpose_a=True)), H, 2, 0) if n.needs[1] else None
    return [dq, dk]


def _float_same(*names):
    def infer(params, in_types, out_types, where="op"):
        for name, t in zip(names, in_types):
            check_float(where, name, t)
        known = next((t for t in list(in_types) + list(out_types) if t is not None), None)
        if known is None:
            return in_types, out_types
        for name, t in zip(names, in_types):
            if t is not None and np.dtype(t) != np.dtype(known):
                raise TypeError(
                    f"{where}: input {name!r} has dtype {np.dtype(t)}, expected {np.dtype(known)} (the "
                    "inputs must share one dtype)"
                )
        return [known] * len(in_types), [known]

    return infer


for _name, _inputs, _fwd, _shape, _grad, _doc in (
    (
        "selfatt_qk",
        ("queries_keys_values",),
        _selfatt_qk_fwd,
        _selfatt_qk_shape,
        _selfatt_qk_grad,
        "Q K^T / sqrt(head_dim) per head from interleaved (L, B, 3*heads*head_dim) projections.",
    ),
    (
        "selfatt_valatt",
        ("queries_keys_values", "attention"),
        _selfatt_valatt_fwd,
        _selfatt_valatt_shape,
        _valatt_grad(3),
        "attention @ V per head, V from interleaved projections; output (L, B, heads*head_dim).",
    ),
    (
        "encdec_qk",
        ("queries", "keys_values"),
        _encdec_qk_fwd,
        _encdec_qk_shape,
        _encdec_qk_grad,
        "Q K^T / sqrt(head_dim) per head, K from interleaved (L, B, 2*heads*head_dim) keys/values.",
    ),
    (
        "encdec_valatt",
        ("keys_values", "attention"),
        _encdec_valatt_fwd,
        _encdec_valatt_shape,
        _valatt_grad(2),
        "attention @ V per head, V from interleaved keys/values; output (Lq, B, heads*head_dim).",
    ),
):
    _op = f"_contrib_interleaved_matmul_{_name}"
    register(
        _op,
        inputs=_inputs,
        params=dict(_HEADS),
        prepare=_heads_prepare(_op),
        forward=_fwd,
        infer_shape=_shape,
        infer_type=_float_same(*_inputs),
        gradient=_grad,
        doc=_doc,
    )
