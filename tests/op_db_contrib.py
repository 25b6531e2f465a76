"""OpInfo rows for the ``_contrib_`` operators (symgrad/ops/contrib.py) and the deterministic ops of the random
family, the probability densities ``_random_pdf_*`` (symgrad/ops/random.py); the sampling ops themselves are
random and tested in tests/test_ops_random.py.

References are plain numpy written from MXNet 1.9.1's kernels: the interleaved attention layouts from the
strided GEMMs of transformer.cc (per head h of width D, the last axis of queries_keys_values is (H, 3, D), of
keys_values (H, 2, D); attention batch index b * H + h), quantize from quantize-inl.h, the densities from
pdf_op.h (gamma's beta is a rate there).
"""

import math

import numpy as np
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
    return x[:, b, start:start + d]


def _selfatt_qk(qkv):
    out = np.zeros((B * H, qkv.shape[0], qkv.shape[0]))
    for b in range(B):
        for h in range(H):
            q, k = _head(qkv, b, h, 3, 0), _head(qkv, b, h, 3, 1)
            out[b * H + h] = q @ k.T / math.sqrt(q.shape[1])
    return out


def _selfatt_valatt(qkv, att):
    d = qkv.shape[2] // (3 * H)
    out = np.zeros((qkv.shape[0], B, H * d))
    for b in range(B):
        for h in range(H):
            out[:, b, h * d:(h + 1) * d] = att[b * H + h] @ _head(qkv, b, h, 3, 2)
    return out


def _encdec_qk(q_in, kv):
    out = np.zeros((B * H, q_in.shape[0], kv.shape[0]))
    for b in range(B):
        for h in range(H):
            q, k = _head(q_in, b, h, 1, 0), _head(kv, b, h, 2, 0)
            out[b * H + h] = q @ k.T / math.sqrt(q.shape[1])
    return out


def _encdec_valatt(kv, att):
    d = kv.shape[2] // (2 * H)
    out = np.zeros((att.shape[1], B, H * d))
    for b in range(B):
        for h in range(H):
            out[:, b, h * d:(h + 1) * d] = att[b * H + h] @ _head(kv, b, h, 2, 1)
    return out


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


# -- densities ----------------------------------------------------------------------------------------------------


def _lgamma(x):
    return np.vectorize(math.lgamma)(x)


def _nb_log(x, k, p):
    """log of the negative binomial density: x failures before the k-th success of probability p"""
    return _lgamma(x + k) - _lgamma(x + 1) - _lgamma(k) + k * np.log(p) + x * np.log(1 - p)


def _bc(p, x):
    """parameter p (a leading subshape of x) broadcast over x's trailing axes"""
    return p.reshape(p.shape + (1,) * (x.ndim - p.ndim))


def _pdf(log, is_log):
    return log if is_log else np.exp(log)


def _range(lo, hi):
    return lambda shape: In(shape, low=lo, high=hi)


_pos = _range(0.5, 2.0)

OPS = [
    # -- quadratic, div_sqrt_dim --------------------------------------------------------------------------------
    OpInfo("_contrib_quadratic", lambda x: S._contrib_quadratic(x, a=1.5, b=-0.5, c=0.25), {"x": In((2, 3))},
           lambda x: 1.5 * x * x - 0.5 * x + 0.25),
    OpInfo("_contrib_quadratic_linear_only", lambda x: S._contrib_quadratic(x, b=2.0), {"x": In((4,))},
           lambda x: 2.0 * x),
    OpInfo("_contrib_div_sqrt_dim", S._contrib_div_sqrt_dim, {"x": In((2, 3, 5))}, lambda x: x / math.sqrt(5)),
    # -- interleaved attention matmuls ---------------------------------------------------------------------------
    OpInfo("_contrib_interleaved_matmul_selfatt_qk", lambda x: S._contrib_interleaved_matmul_selfatt_qk(x, heads=H),
           {"qkv": In((L, B, 3 * H * D))}, _selfatt_qk, fwd_tol=F16),
    OpInfo("_contrib_interleaved_matmul_selfatt_valatt",
           lambda x, a: S._contrib_interleaved_matmul_selfatt_valatt(x, a, heads=H),
           {"qkv": In((L, B, 3 * H * D)), "att": In((B * H, L, L), low=0.0)}, _selfatt_valatt, fwd_tol=F16),
    OpInfo("_contrib_interleaved_matmul_encdec_qk",
           lambda q, kv: S._contrib_interleaved_matmul_encdec_qk(q, kv, heads=H),
           {"q": In((L, B, H * D)), "kv": In((LK, B, 2 * H * D))}, _encdec_qk, fwd_tol=F16),
    OpInfo("_contrib_interleaved_matmul_encdec_valatt",
           lambda kv, a: S._contrib_interleaved_matmul_encdec_valatt(kv, a, heads=H),
           {"kv": In((LK, B, 2 * H * D)), "att": In((B * H, L, LK), low=0.0)}, _encdec_valatt, fwd_tol=F16),
    # an attention block: softmax(Q K^T / sqrt(D)) V, the two self-attention ops composed
    OpInfo("_contrib_interleaved_matmul_selfatt_block",
           lambda x: S._contrib_interleaved_matmul_selfatt_valatt(
               x, S.softmax(S._contrib_interleaved_matmul_selfatt_qk(x, heads=H), axis=-1), heads=H),
           {"qkv": In((L, B, 3 * H * D))},
           lambda x: _selfatt_valatt(x, (lambda s: np.exp(s - s.max(-1, keepdims=True))
                                         / np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True))(
               _selfatt_qk(x))), fwd_tol=F16),
    # -- allclose (no gradient) ----------------------------------------------------------------------------------
    OpInfo("_contrib_allclose_true", lambda a, b: S._contrib_allclose(a, b),
           {"a": In((3,), sample=lambda rng: np.array([0.5, -1.0, 2.0])),
            "b": In((3,), sample=lambda rng: np.array([0.5, -1.0, 2.0]) * (1 + 1e-7))},
           lambda a, b: np.array(np.all(np.abs(a - b) <= 1e-8 + 1e-5 * np.abs(b)), dtype=np.uint8), grad=False),
    OpInfo("_contrib_allclose_false_rtol", lambda a, b: S._contrib_allclose(a, b, rtol=1e-3, atol=0.0),
           {"a": In((2,), sample=lambda rng: np.array([1.0, 100.0])),
            "b": In((2,), sample=lambda rng: np.array([1.0, 100.5]))},
           lambda a, b: np.array(0, dtype=np.uint8), grad=False),
    # -- quantize (float32 only, zero gradients as MXNet: not checked against differences) -------------------------
    OpInfo("_contrib_quantize_uint8", lambda x, lo, hi: S._contrib_quantize(x, lo, hi, out_type="uint8"),
           {"x": In((2, 5)), "lo": In((1,), sample=lambda rng: np.array([-1.0])),
            "hi": In((1,), sample=lambda rng: np.array([1.0]))},
           lambda x, lo, hi: _quantize_ref(x, lo, hi, "uint8"), dtypes=(np.float32,), grad=False),
    OpInfo("_contrib_quantize_int8", lambda x, lo, hi: S._contrib_quantize(x, lo, hi, out_type="int8"),
           {"x": In((2, 5), low=-1.5, high=2.0), "lo": In((1,), sample=lambda rng: np.array([-1.5])),
            "hi": In((1,), sample=lambda rng: np.array([2.0]))},
           lambda x, lo, hi: _quantize_ref(x, lo, hi, "int8"), dtypes=(np.float32,), grad=False),
    OpInfo("_contrib_quantize_v2_uncalibrated", lambda x: S._contrib_quantize_v2(x, out_type="uint8"),
           {"x": In((3, 4))}, lambda x: _quantize_ref(x, x.min().reshape(1), x.max().reshape(1), "uint8"),
           dtypes=(np.float32,), grad=False),
    OpInfo("_contrib_quantize_v2_calibrated_auto",
           lambda x: S._contrib_quantize_v2(x, out_type="auto", min_calib_range=-1.0, max_calib_range=1.0),
           {"x": In((3, 4))}, lambda x: _quantize_ref(x, np.array([-1.0]), np.array([1.0]), "int8"),
           dtypes=(np.float32,), grad=False),
    # -- probability densities (deterministic, differentiable) ----------------------------------------------------
    OpInfo("_random_pdf_normal", S._random_pdf_normal,
           {"x": In((2, 3), low=-2, high=2), "mu": In((2,)), "sigma": _pos((2,))},
           lambda x, m, s: np.exp(-0.5 * ((x - _bc(m, x)) / _bc(s, x)) ** 2) / (math.sqrt(2 * math.pi) * _bc(s, x))),
    OpInfo("_random_pdf_normal_log", lambda x, m, s: S._random_pdf_normal(x, m, s, is_log=True),
           {"x": In((2, 2, 2), low=-2, high=2), "mu": In((2, 2)), "sigma": _pos((2, 2))},
           lambda x, m, s: -0.5 * ((x - _bc(m, x)) / _bc(s, x)) ** 2 - np.log(math.sqrt(2 * math.pi) * _bc(s, x))),
    OpInfo("_random_pdf_uniform", S._random_pdf_uniform,
           {"x": In((2, 3), low=0, high=1), "low": In((2,), low=-1.5, high=-0.5), "high": In((2,), low=1, high=2)},
           lambda x, lo, hi: np.broadcast_to(1.0 / _bc(hi - lo, x), x.shape)),
    OpInfo("_random_pdf_uniform_log", lambda x, lo, hi: S._random_pdf_uniform(x, lo, hi, is_log=True),
           {"x": In((3,), low=0, high=1), "low": In((3,), low=-1.5, high=-0.5), "high": In((3,), low=1, high=2)},
           lambda x, lo, hi: -np.log(hi - lo)),
    OpInfo("_random_pdf_gamma", S._random_pdf_gamma,
           {"x": In((2, 3), low=0.5, high=3), "alpha": In((2,), low=1, high=3), "beta": _pos((2,))},
           lambda x, a, b: np.exp(_bc(a * np.log(b) - _lgamma(a), x) + (_bc(a, x) - 1) * np.log(x) - _bc(b, x) * x)),
    OpInfo("_random_pdf_gamma_log", lambda x, a, b: S._random_pdf_gamma(x, a, b, is_log=True),
           {"x": In((3,), low=0.5, high=3), "alpha": In((3,), low=0.5, high=3), "beta": _pos((3,))},
           lambda x, a, b: a * np.log(b) - _lgamma(a) + (a - 1) * np.log(x) - b * x),
    OpInfo("_random_pdf_exponential", S._random_pdf_exponential,
           {"x": In((2, 3), low=0, high=3), "lam": _pos((2,))},
           lambda x, lam: _bc(lam, x) * np.exp(-_bc(lam, x) * x)),
    OpInfo("_random_pdf_exponential_log", lambda x, lam: S._random_pdf_exponential(x, lam, is_log=True),
           {"x": In((4,), low=0, high=3), "lam": _pos((4,))}, lambda x, lam: np.log(lam) - lam * x),
    # the Poisson sample is discrete: MXNet gives it no gradient
    OpInfo("_random_pdf_poisson", S._random_pdf_poisson,
           {"x": In((2, 3), sample=lambda rng: rng.integers(0, 6, (2, 3)), grad=False), "lam": In((2,), low=0.5,
                                                                                                   high=4)},
           lambda x, lam: np.exp(x * np.log(_bc(lam, x)) - _lgamma(x + 1) - _bc(lam, x))),
    OpInfo("_random_pdf_poisson_log", lambda x, lam: S._random_pdf_poisson(x, lam, is_log=True),
           {"x": In((4,), sample=lambda rng: rng.integers(0, 6, (4,)), grad=False), "lam": In((4,), low=0.5, high=4)},
           lambda x, lam: x * np.log(lam) - _lgamma(x + 1) - lam),
    OpInfo("_random_pdf_negative_binomial", S._random_pdf_negative_binomial,
           {"x": In((2, 3), sample=lambda rng: rng.integers(0, 6, (2, 3)), grad=False),
            "k": In((2,), low=1, high=4), "p": In((2,), low=0.2, high=0.8)},
           lambda x, k, p: np.exp(_nb_log(x, _bc(k, x), _bc(p, x)))),
    OpInfo("_random_pdf_negative_binomial_log", lambda x, k, p: S._random_pdf_negative_binomial(x, k, p, is_log=True),
           {"x": In((4,), sample=lambda rng: rng.integers(0, 6, (4,)), grad=False),
            "k": In((4,), low=0.5, high=4), "p": In((4,), low=0.2, high=0.8)}, _nb_log),
    OpInfo("_random_pdf_generalized_negative_binomial", S._random_pdf_generalized_negative_binomial,
           {"x": In((2, 3), sample=lambda rng: rng.integers(0, 6, (2, 3)), grad=False),
            "mu": In((2,), low=0.5, high=3), "alpha": In((2,), low=0.2, high=1.5)},
           lambda x, mu, a: np.exp(_nb_log(x, 1 / _bc(a, x), 1 / (_bc(mu, x) * _bc(a, x) + 1)))),
    OpInfo("_random_pdf_generalized_negative_binomial_log",
           lambda x, mu, a: S._random_pdf_generalized_negative_binomial(x, mu, a, is_log=True),
           {"x": In((4,), sample=lambda rng: rng.integers(0, 6, (4,)), grad=False),
            "mu": In((4,), low=0.5, high=3), "alpha": In((4,), low=0.2, high=1.5)},
           lambda x, mu, a: _nb_log(x, 1 / a, 1 / (mu * a + 1))),
]
