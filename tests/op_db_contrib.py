"""OpInfo rows for the ``_contrib_`` operators (symgrad/ops/contrib.py): quadratic, div_sqrt_dim, the interleaved
attention matmuls, allclose and quantize / quantize_v2.

References are plain numpy written from MXNet 1.9.1's kernels: the interleaved attention layouts from the
strided GEMMs of transformer.cc (per head h of width D, the last axis of queries_keys_values is (H, 3, D), of
keys_values (H, 2, D); attention batch index b * H + h), quantize from quantize-inl.h.
"""

import math

import numpy as np
from np_refs import softmax
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

F16 = {np.float16: (2e-2, 2e-2)}
L, B, H, D = 3, 2, 2, 2
LK = 4


# -- interleaved attention references (loops over batch and head, as the layout reads) -------------------------


def _head(x, b, h, parts, index):
    """(L, D) block of head h, batch b, part ``index`` of an (L, B, parts*H*D) tensor."""
    d = x.shape[2] // (parts * H)
    start = (h * parts + index) * d
    return x[:, b, start : start + d]


def _att_qk(q_src, q_parts, k_src, k_parts, k_index):
    """Scaled q @ k.T per (batch, head): queries are part 0 of ``q_src``, keys part ``k_index`` of ``k_src``."""
    out = np.zeros((B * H, q_src.shape[0], k_src.shape[0]))
    for b in range(B):
        for h in range(H):
            q, k = _head(q_src, b, h, q_parts, 0), _head(k_src, b, h, k_parts, k_index)
            out[b * H + h] = q @ k.T / math.sqrt(q.shape[1])
    return out


def _att_valatt(v_src, parts, att):
    """att @ v per (batch, head); the values are the last of the ``parts`` of ``v_src``."""
    d = v_src.shape[2] // (parts * H)
    out = np.zeros((att.shape[1], B, H * d))
    for b in range(B):
        for h in range(H):
            out[:, b, h * d : (h + 1) * d] = att[b * H + h] @ _head(v_src, b, h, parts, parts - 1)
    return out


def _selfatt_qk(qkv):
    return _att_qk(qkv, 3, qkv, 3, 1)


def _selfatt_valatt(qkv, att):
    return _att_valatt(qkv, 3, att)


def _encdec_qk(q_in, kv):
    return _att_qk(q_in, 1, kv, 2, 0)


def _encdec_valatt(kv, att):
    return _att_valatt(kv, 2, att)


def _att_row(kind, inputs, ref):
    """The row of ``_contrib_interleaved_matmul_<kind>`` with H heads."""
    op = getattr(S, f"_contrib_interleaved_matmul_{kind}")
    return OpInfo(f"_contrib_interleaved_matmul_{kind}", lambda *xs: op(*xs, heads=H), inputs, ref, fwd_tol=F16)


# -- quantize (MXNet's reference kernels, float32) ----------------------------------------------------------------


def _quantize_ref(x, lo, hi, out_type):
    x = x.astype(np.float32)
    lo, hi = np.float32(lo.ravel()[0]), np.float32(hi.ravel()[0])
    if out_type == "uint8":
        q = np.floor((x - lo) * np.float32(255.0 / float(hi - lo)) + 0.5)  # non-negative: floor == truncation
        return np.clip(q, 0, 255).astype(np.uint8), np.array([lo]), np.array([hi])
    real = max(abs(lo), abs(hi))
    q = np.sign(x) * np.minimum(np.abs(x) * (np.float32(127.0) / real) + np.float32(0.5), 127.0)
    return np.trunc(q).astype(np.int8), np.array([-real]), np.array([real])


OPS = [
    # -- quadratic, div_sqrt_dim --------------------------------------------------------------------------------
    OpInfo(
        "_contrib_quadratic",
        lambda x: S._contrib_quadratic(x, a=1.5, b=-0.5, c=0.25),
        {"x": In((2, 3))},
        lambda x: 1.5 * x * x - 0.5 * x + 0.25,
    ),
    OpInfo(
        "_contrib_quadratic_linear_only", lambda x: S._contrib_quadratic(x, b=2.0), {"x": In((4,))}, lambda x: 2.0 * x
    ),
    OpInfo("_contrib_div_sqrt_dim", S._contrib_div_sqrt_dim, {"x": In((2, 3, 5))}, lambda x: x / math.sqrt(5)),
    # -- interleaved attention matmuls ---------------------------------------------------------------------------
    _att_row("selfatt_qk", {"qkv": In((L, B, 3 * H * D))}, _selfatt_qk),
    _att_row("selfatt_valatt", {"qkv": In((L, B, 3 * H * D)), "att": In((B * H, L, L), low=0.0)}, _selfatt_valatt),
    _att_row("encdec_qk", {"q": In((L, B, H * D)), "kv": In((LK, B, 2 * H * D))}, _encdec_qk),
    _att_row("encdec_valatt", {"kv": In((LK, B, 2 * H * D)), "att": In((B * H, L, LK), low=0.0)}, _encdec_valatt),
    # an attention block: softmax(Q K^T / sqrt(D)) V, the two self-attention ops composed
    OpInfo(
        "_contrib_interleaved_matmul_selfatt_block",
        lambda x: S._contrib_interleaved_matmul_selfatt_valatt(
            x, S.softmax(S._contrib_interleaved_matmul_selfatt_qk(x, heads=H), axis=-1), heads=H
        ),
        {"qkv": In((L, B, 3 * H * D))},
        lambda x: _selfatt_valatt(x, softmax(_selfatt_qk(x), -1)),
        fwd_tol=F16,
    ),
    # -- allclose (no gradient) ----------------------------------------------------------------------------------
    OpInfo(
        "_contrib_allclose_true",
        lambda a, b: S._contrib_allclose(a, b),
        {
            "a": In((3,), sample=lambda rng: np.array([0.5, -1.0, 2.0])),
            "b": In((3,), sample=lambda rng: np.array([0.5, -1.0, 2.0]) * (1 + 1e-7)),
        },
        lambda a, b: np.array(np.all(np.abs(a - b) <= 1e-8 + 1e-5 * np.abs(b)), dtype=np.uint8),
        grad=False,
    ),
    OpInfo(
        "_contrib_allclose_false_rtol",
        lambda a, b: S._contrib_allclose(a, b, rtol=1e-3, atol=0.0),
        {
            "a": In((2,), sample=lambda rng: np.array([1.0, 100.0])),
            "b": In((2,), sample=lambda rng: np.array([1.0, 100.5])),
        },
        lambda a, b: np.array(0, dtype=np.uint8),
        grad=False,
    ),
    # -- quantize (float32 only, zero gradients as MXNet: not checked against differences) -------------------------
    OpInfo(
        "_contrib_quantize_uint8",
        lambda x, lo, hi: S._contrib_quantize(x, lo, hi, out_type="uint8"),
        {
            "x": In((2, 5)),
            "lo": In((1,), sample=lambda rng: np.array([-1.0])),
            "hi": In((1,), sample=lambda rng: np.array([1.0])),
        },
        lambda x, lo, hi: _quantize_ref(x, lo, hi, "uint8"),
        dtypes=(np.float32,),
        grad=False,
    ),
    OpInfo(
        "_contrib_quantize_int8",
        lambda x, lo, hi: S._contrib_quantize(x, lo, hi, out_type="int8"),
        {
            "x": In((2, 5), low=-1.5, high=2.0),
            "lo": In((1,), sample=lambda rng: np.array([-1.5])),
            "hi": In((1,), sample=lambda rng: np.array([2.0])),
        },
        lambda x, lo, hi: _quantize_ref(x, lo, hi, "int8"),
        dtypes=(np.float32,),
        grad=False,
    ),
    OpInfo(
        "_contrib_quantize_v2_uncalibrated",
        lambda x: S._contrib_quantize_v2(x, out_type="uint8"),
        {"x": In((3, 4))},
        lambda x: _quantize_ref(x, x.min().reshape(1), x.max().reshape(1), "uint8"),
        dtypes=(np.float32,),
        grad=False,
    ),
    OpInfo(
        "_contrib_quantize_v2_calibrated_auto",
        lambda x: S._contrib_quantize_v2(x, out_type="auto", min_calib_range=-1.0, max_calib_range=1.0),
        {"x": In((3, 4))},
        lambda x: _quantize_ref(x, np.array([-1.0]), np.array([1.0]), "int8"),
        dtypes=(np.float32,),
        grad=False,
    ),
]
