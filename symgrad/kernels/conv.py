"""The convolution kernel library: im2col/col2im, stride phases, per-sample GEMMs and Winograd F(2x2, 3x3).

Array functions (``xp`` = numpy or cupy) over a "big" tensor ``B`` ``(N, C, *X)``, a "small" one ``S``
``(N, F, *Y)`` and a weight ``W`` ``(F, C/g, *k)`` related by (stride ``s``, dilation ``d``, leading pad ``lo``)::

    S[n, f, o] = sum_{c in group(f), t} W[f, c, t] * B[n, c, o*s - lo + t*d]      (B is zero outside)

``correlate`` computes S from B, ``transpose`` its adjoint in B and ``weight_grad`` its adjoint in W, each
picking the cheapest path (Winograd, stride phases, per-sample or batched GEMMs) for the geometry. The ops that
use them (Convolution, Deconvolution and their hidden ops, Pooling, the deformable and correlation ops) are in
``symgrad/ops/``: this package holds no op (it takes only the accumulation dtype rule from ``opdef``).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..opdef import acc_dtype

__all__ = [
    "padded",
    "windows",
    "hi_pad",
    "tap_slices",
    "tap_ranges",
    "im2col_columns",
    "channel_major_columns",
    "col2im_add",
    "split_phases",
    "phase_columns",
    "phase_col2im",
    "strided_correlate",
    "strided_weight_grad",
    "strided_transpose",
    "winograd_applies",
    "winograd_input",
    "winograd_weight",
    "winograd_output",
    "winograd_correlate",
    "winograd_weight_grad",
    "correlate",
    "transpose",
    "weight_grad",
]


# ----------------------------------------------------------------------------
# Windows, im2col and col2im
# ----------------------------------------------------------------------------


def padded(xp, x, lo, hi, value=0.0):
    """``x`` with ``lo``/``hi`` elements of ``value`` around each spatial axis (axes 2...)."""
    if not any(lo) and not any(hi):
        return x
    shape = x.shape[:2] + tuple(n + a + b for n, a, b in zip(x.shape[2:], lo, hi))
    out = xp.full(shape, value, dtype=x.dtype) if value else xp.zeros(shape, dtype=x.dtype)
    out[(slice(None), slice(None)) + tuple(slice(a, a + n) for a, n in zip(lo, x.shape[2:]))] = x
    return out


def windows(xp, x, k, s, d, Y, kernel_last=False):
    """Strided view ``(N, C, *k, *Y)`` (or ``(N, C, *Y, *k)``) of every window of ``x``.

    Element ``[n, c, t, o]`` is ``x[n, c, o*s + t*d]``; the caller pads ``x`` so that all
    of them exist.
    """
    st = x.strides
    sp = st[2:]
    kst = tuple(a * b for a, b in zip(sp, d))
    yst = tuple(a * b for a, b in zip(sp, s))
    if kernel_last:
        shape, strides = x.shape[:2] + tuple(Y) + tuple(k), st[:2] + yst + kst
    else:
        shape, strides = x.shape[:2] + tuple(k) + tuple(Y), st[:2] + kst + yst
    return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)


def hi_pad(X, Y, k, s, d, lo):
    """Trailing padding so that the last window ``(Y-1)*s + (k-1)*d`` exists."""
    return tuple(max(0, (y - 1) * si + (ki - 1) * di + 1 - pl - x) for x, y, ki, si, di, pl in zip(X, Y, k, s, d, lo))


def tap_slices(tap, s, d, Y):
    """Index of the window elements that kernel tap ``tap`` reads in the padded tensor."""
    return (slice(None), slice(None)) + tuple(
        slice(t * di, t * di + (y - 1) * si + 1, si) for t, si, di, y in zip(tap, s, d, Y)
    )


def im2col_columns(xp, b, k, s, d, lo, Y):
    """Contiguous ``(N, C*prod(k), prod(Y))`` columns of the zero-padded ``b`` (sample-major)."""
    N, C = b.shape[:2]
    X = b.shape[2:]
    Yp = math.prod(Y)
    if all(ki == 1 for ki in k) and not any(lo):
        view = b[(slice(None), slice(None)) + tuple(slice(0, (y - 1) * si + 1, si) for y, si in zip(Y, s))]
        return xp.ascontiguousarray(view).reshape(N, C, Yp)
    bp = padded(xp, b, lo, hi_pad(X, Y, k, s, d, lo))
    cols = xp.ascontiguousarray(windows(xp, bp, k, s, d, Y))
    return cols.reshape(N, C * math.prod(k), Yp)


def channel_major_columns(xp, b, k, s, d, lo, Y):
    """Columns ``(C*prod(k), N*prod(Y))`` of the zero-padded ``b``: row ``(c, t)``, column ``(n, o)``
    holds ``b[n, c, o*s - lo + t*d]``.

    Channel-major so that the whole batch is one GEMM (``W (F, C*K) @ cols``): per-sample GEMMs
    are narrow (prod(Y) = 49 columns on ResNet's last stage) and run far below the BLAS peak.
    The window view is copied once into its transposed place (``copyto`` of a strided view: no
    intermediate ``ascontiguousarray``).
    """
    if b.shape[0] == 1 and tuple(b.shape[2:]) == tuple(Y) and all(ki == 1 for ki in k) and not any(lo):
        # a 1x1 kernel over one unpadded sample at stride 1: the columns are the sample itself, a view (a
        # DenseNet's bottlenecks, re-run in every partial forward of a whole-model check; callers only read it)
        return b.reshape(b.shape[1], -1)
    gather = _column_gather(b.shape, tuple(k), tuple(s), tuple(d), tuple(lo), tuple(Y)) if xp is np else None
    if gather is not None:
        hi, index = gather
        return padded(xp, b, lo, hi).ravel().take(index)
    return _strided_columns(xp, b, k, s, d, lo, Y)


# -- small inputs: gathers through cached indices ------------------------------------------------------------
#
# A numeric check re-runs a small convolution thousands of times (one partial forward per perturbed element): there
# the Python-level setup of the strided im2col (``as_strided``, transpose, ``copyto``, the pad arithmetic: ~12 us)
# and of the transposing copy back (~1.6 us) outweighs moving a few thousand numbers. Below ``_GATHER_MAX`` column
# entries (numpy only) both copies are one ``take`` through an index cached per geometry: the index is the very
# copy applied to ``arange``, so the gathered arrays hold exactly the same numbers in the same layout and the GEMM
# between them is the same call -- the results are bit for bit those of the strided path.

#: largest im2col (column entries) gathered through a cached index (<= 256 KiB of indices per geometry)
_GATHER_MAX = 1 << 15


def _frozen(a):
    a.flags.writeable = False
    return a


@functools.lru_cache(maxsize=64)
def _column_gather(shape, k, s, d, lo, Y):
    """``(trailing pad, flat index)`` such that ``padded(b, lo, pad).ravel().take(index)`` is
    ``channel_major_columns(b, ...)`` for inputs of ``shape``; None above ``_GATHER_MAX`` entries."""
    N, C = shape[:2]
    if C * math.prod(k) * N * math.prod(Y) > _GATHER_MAX:
        return None
    hi = hi_pad(shape[2:], Y, k, s, d, lo)
    padded_shape = shape[:2] + tuple(x + a + b for x, a, b in zip(shape[2:], lo, hi))
    positions = np.arange(math.prod(padded_shape), dtype=np.intp).reshape(padded_shape)
    return hi, _frozen(_strided_columns(np, positions, k, s, d, (0,) * len(k), Y))


@functools.lru_cache(maxsize=64)
def _correlate_gather(shape, F, k, s, d, lo, Y, groups):
    """``(column gather, output index)`` of ``correlate`` on inputs of ``shape`` when it runs as im2col + GEMM
    and its columns are gathered; ``out.ravel().take(output index)`` is ``_sample_major(out)``. Else None."""
    if winograd_applies(k, s, d, lo, groups, Y) or _per_sample(s, Y):
        return None
    columns = _column_gather(shape, k, s, d, lo, Y)
    if columns is None:
        return None
    positions = np.arange(F * shape[0] * math.prod(Y), dtype=np.intp).reshape(F, -1)
    return columns, _frozen(_sample_major(np, positions, shape[0], Y))


def _strided_columns(xp, b, k, s, d, lo, Y):
    """``channel_major_columns`` through the strided window view (any size, numpy or CuPy)."""
    N, C = b.shape[:2]
    cols = xp.empty((C,) + tuple(k) + (N,) + tuple(Y), dtype=b.dtype)
    if all(ki == 1 for ki in k) and not any(lo):
        view = b[(slice(None), slice(None)) + tuple(slice(0, (y - 1) * si + 1, si) for y, si in zip(Y, s))]
        src = view.swapaxes(0, 1).reshape(cols.shape)  # a view: only unit axes are inserted
    else:
        bp = padded(xp, b, lo, hi_pad(b.shape[2:], Y, k, s, d, lo))
        w = windows(xp, bp, k, s, d, Y)  # (N, C, *k, *Y)
        nd = len(k)
        src = w.transpose((1,) + tuple(range(2, 2 + nd)) + (0,) + tuple(range(2 + nd, 2 + 2 * nd)))
    xp.copyto(cols, src)
    return cols.reshape(C * math.prod(k), N * math.prod(Y))


def tap_ranges(tap, s, d, lo, X, Y):
    """Output and input slices of kernel tap ``tap`` restricted to inputs inside ``[0, X)``.

    Output ``o`` reads input ``i = o*s - lo + t*d``; it lies in the data for
    ``ceil((lo - t*d) / s) <= o <= floor((X - 1 + lo - t*d) / s)``. ``None`` when no output does.
    """
    osl, isl = [], []
    for t, si, di, pl, x, y in zip(tap, s, d, lo, X, Y):
        off = t * di - pl
        o0 = max(0, -(off // si))  # ceil(-off / s)
        o1 = min(y, (x - 1 - off) // si + 1)
        if o1 <= o0:
            return None
        osl.append(slice(o0, o1))
        isl.append(slice(o0 * si + off, (o1 - 1) * si + off + 1, si))
    return tuple(osl), tuple(isl)


def col2im_add(xp, cols, out, k, s, d, lo):
    """Adjoint of ``channel_major_columns``: add ``cols`` ``(C, *k, N, *Y)`` into ``out`` ``(N, C, *X)``.

    One strided add per kernel tap, clipped to the data (no padded buffer to crop and copy);
    ``out`` is written in place in its own layout, the transposition is in the read of ``cols``.
    """
    nd = len(k)
    X, Y = out.shape[2:], cols.shape[2 + nd :]
    every = (slice(None), slice(None))
    for tap in np.ndindex(*k):
        r = tap_ranges(tap, s, d, lo, X, Y)
        if r is None:
            continue
        osl, isl = r
        src = cols[(slice(None),) + tap + (slice(None),) + osl]  # (C, N, *Yclip)
        dst = out[every + isl]
        xp.add(dst, src.swapaxes(0, 1), out=dst)
    return out


# ----------------------------------------------------------------------------
# Strided im2col / col2im through stride phases
# ----------------------------------------------------------------------------
#
# With stride s, padded element ``o*s + t*d`` (output o, tap t) lies in stride phase
# ``p = (t*d) % s`` at slot ``o + (t*d) // s`` of that phase (phase p holds padded elements
# ``m*s + p``). Splitting the padded input into its phases once (each contiguous, one strided
# read of the input) makes every tap's columns a contiguous-row slice of one phase, where reading
# them from the input directly strides by s elements in the innermost loop. The adjoint adds each
# tap's columns into contiguous phase buffers and scatters every phase once into the output.
# Only the phases some tap reads are built (a 1x1 stride-2 kernel reads one: its columns).


def _phase_span(lead, phase, s, n_in, n_slots):
    """(first slot, slot count, first input index) of the slots ``m`` of one phase (padded index
    ``m*s + phase``, input index ``m*s + phase - lead``) that hold input."""
    first = max(0, -(-(lead - phase) // s))
    i0 = first * s + phase - lead
    count = min(n_slots - first, -(-(n_in - i0) // s)) if i0 < n_in else 0
    return first, max(count, 0), i0


def _phases(k, s, d, Y):
    """(phase of each kernel tap, the phases used in order, slots per phase and axis)."""
    tap_phase = {tap: tuple((t * di) % si for t, si, di in zip(tap, s, d)) for tap in np.ndindex(*k)}
    used = sorted(set(tap_phase.values()))
    slots = tuple(y + ((ki - 1) * di) // si for y, ki, si, di in zip(Y, k, s, d))
    return tap_phase, used, slots


def _phase_views(b_like, used, s, lo, L):
    """Per used phase: (slice of its buffer's slots, slice of the data) pairs, None where it holds no data."""
    out = []
    for ph in used:
        spans = [_phase_span(pl, p, si, n, m) for pl, p, si, n, m in zip(lo, ph, s, b_like, L)]
        if any(c <= 0 for _, c, _ in spans):
            out.append(None)
            continue
        out.append(
            (
                tuple(slice(f, f + c) for f, c, _ in spans),
                tuple(slice(i0, i0 + si * (c - 1) + 1, si) for (_, c, i0), si in zip(spans, s)),
            )
        )
    return out


def split_phases(xp, b, k, s, d, lo, Y, channel_major):
    """The used stride phases of the zero-padded ``b``: ``(phases, C, N, *L)`` (``channel_major``) or
    ``(phases, N, C, *L)``; the transposition to channel-major happens in this one small copy."""
    _, used, L = _phases(k, s, d, Y)
    src = b.swapaxes(0, 1) if channel_major else b
    P = xp.empty((len(used),) + src.shape[:2] + L, b.dtype)
    views = _phase_views(b.shape[2:], used, s, lo, L)
    every = (slice(None), slice(None))
    for i, v in enumerate(views):
        if v is None or any(sl.stop - sl.start != m for sl, m in zip(v[0], L)):
            P[i].fill(0)  # padding (or slots past the data) in this phase
        if v is not None:
            xp.copyto(P[(i,) + every + v[0]], src[every + v[1]])
    return P


def phase_columns(xp, b, k, s, d, lo, Y, channel_major):
    """im2col of the zero-padded ``b`` through its stride phases: ``(C, *k, N, *Y)`` (``channel_major``)
    or ``(N, C, *k, *Y)`` (sample-major); every tap's copy reads contiguous rows of one phase."""
    P = split_phases(xp, b, k, s, d, lo, Y, channel_major)
    if math.prod(k) == 1:
        return P[0] if channel_major else P[0].reshape(P.shape[1:3] + (1,) * len(k) + tuple(Y))
    tap_phase, used, _ = _phases(k, s, d, Y)
    lead = P.shape[1:3]
    cols = xp.empty(
        (lead[0],) + tuple(k) + (lead[1],) + tuple(Y) if channel_major else lead + tuple(k) + tuple(Y), b.dtype
    )
    for tap, ph in tap_phase.items():
        src = P[
            (used.index(ph), slice(None), slice(None))
            + tuple(slice((t * di) // si, (t * di) // si + y) for t, si, di, y in zip(tap, s, d, Y))
        ]
        dst = cols[(slice(None),) + tap] if channel_major else cols[(slice(None), slice(None)) + tap]
        xp.copyto(dst, src)
    return cols


def phase_col2im(xp, cols, X, k, s, d, lo, channel_major):
    """Adjoint of ``phase_columns``: ``(N, C, *X)`` from columns in either layout. Each tap adds into
    contiguous rows of its phase buffer; each phase is then copied once into its strided place."""
    nd = len(k)
    Y = cols.shape[-nd:]
    tap_phase, used, L = _phases(k, s, d, Y)
    lead = (cols.shape[0], cols.shape[1 + nd]) if channel_major else cols.shape[:2]
    if math.prod(k) == 1:
        P = cols.reshape((1,) + lead + tuple(Y))
    else:
        P = xp.empty((len(used),) + lead + L, cols.dtype)
        P.fill(0)
        for tap, ph in tap_phase.items():
            dst = P[
                (used.index(ph), slice(None), slice(None))
                + tuple(slice((t * di) // si, (t * di) // si + y) for t, si, di, y in zip(tap, s, d, Y))
            ]
            src = cols[(slice(None),) + tap] if channel_major else cols[(slice(None), slice(None)) + tap]
            xp.add(dst, src, out=dst)
    N, C = (lead[1], lead[0]) if channel_major else lead
    views = _phase_views(X, used, s, lo, L)
    out = xp.empty((N, C) + tuple(X), cols.dtype)
    written = sum(math.prod(sl.stop - sl.start for sl in v[0]) for v in views if v is not None)
    if written != math.prod(X):  # phases are disjoint: fewer elements written means some no window reads
        out.fill(0)
    every = (slice(None), slice(None))
    dst_all = out.swapaxes(0, 1) if channel_major else out
    for i, v in enumerate(views):
        if v is not None:
            xp.copyto(dst_all[every + v[1]], P[(i,) + every + v[0]])
    return out


# Per-sample GEMMs straight in the sample-major layout (``(N, F, *Y)`` out of ``W @ cols[n]``, the
# weight gradient as ``cols[n] @ S[n]^T`` summed over n) save the batch transposes of the one-GEMM
# form; they pay where each sample's GEMM is wide (ResNet's stem: 112x112 columns per sample) and
# lose where it is narrow (the late stages' 7x7), so only strided layers at least this wide use them.
_PER_SAMPLE_MIN = 56 * 56


def _per_sample(s, Y):
    return any(si > 1 for si in s) and math.prod(Y) >= _PER_SAMPLE_MIN


def strided_correlate(xp, b, w, k, s, d, lo, Y, groups):
    """``correlate`` by per-sample GEMMs on phase columns: ``S[n] = W @ cols[n]``, no output transpose."""
    N, F, g = b.shape[0], w.shape[0], groups
    cols = phase_columns(xp, b, k, s, d, lo, Y, channel_major=False)
    cols = cols.reshape(N, g, cols[0].size // (g * math.prod(Y)), math.prod(Y))
    out = xp.matmul(w.reshape(g, F // g, -1), cols)  # (N, g, F/g, prod(Y))
    return out.reshape((N, F) + tuple(Y))


def strided_weight_grad(xp, b, sm, k, s, d, lo, groups):
    """``weight_grad`` by per-sample GEMMs ``dW[n]^T = cols[n] @ S[n]^T`` (the orientation BLAS runs
    faster for the stem's long contraction), summed over the batch; no batch transposes."""
    N, F, g = b.shape[0], sm.shape[1], groups
    Y = sm.shape[2:]
    cols = phase_columns(xp, b, k, s, d, lo, Y, channel_major=False)
    cols = cols.reshape(N, g, cols[0].size // (g * math.prod(Y)), math.prod(Y))
    dwt = xp.matmul(cols, sm.reshape(N, g, F // g, -1).swapaxes(2, 3)).sum(axis=0)  # (g, C/g*K, F/g)
    return xp.ascontiguousarray(dwt.swapaxes(1, 2)).reshape((F, b.shape[1] // g) + tuple(k))


def strided_transpose(xp, sm, w, k, s, d, lo, X, groups):
    """``transpose`` by per-sample GEMMs ``cols[n] = W^T @ S[n]`` (no batch transpose of S), then the
    phase col2im (contiguous adds, one strided copy per phase)."""
    N, F, g = sm.shape[0], w.shape[0], groups
    C = w.shape[1] * g
    cols = xp.matmul(w.reshape(g, F // g, -1).swapaxes(1, 2), sm.reshape(N, g, F // g, -1))  # (N, g, C/g*K, Y)
    return phase_col2im(xp, cols.reshape((N, C) + tuple(k) + sm.shape[2:]), X, k, s, d, lo, channel_major=False)


def _batch_major(xp, a):
    """``(N, F, *Y)`` as a contiguous ``(F, N*prod(Y))`` matrix (one small transposing copy)."""
    N, F = a.shape[:2]
    return xp.ascontiguousarray(a.reshape(N, F, -1).swapaxes(0, 1)).reshape(F, -1)


def _sample_major(xp, m, N, Y):
    """``(F, N*prod(Y))`` back to a contiguous ``(N, F, *Y)``."""
    F = m.shape[0]
    return xp.ascontiguousarray(m.reshape(F, N, -1).swapaxes(0, 1)).reshape((N, F) + tuple(Y))


# ----------------------------------------------------------------------------
# Winograd F(2x2, 3x3): 3x3, stride 1, undilated, ungrouped correlations
# ----------------------------------------------------------------------------
#
# Each 2x2 block of outputs reads a 4x4 tile of the padded input (tiles overlap by 2):
#     y = A^T [(G g G^T) * (B^T d B)] A      (* elementwise over the 4x4 tile)
# so the sum over channels is 16 GEMMs ``M[k] (F, T) = U[k] (F, C) @ V[k] (C, T)`` (T tiles) with
# 16 multiplies per 4 outputs instead of 36: 2.25x fewer flops than im2col + GEMM, and V (16 C T
# elements) is smaller than im2col's columns (36 C T). The transforms have entries 0, +-1, +-1/2:
# float32 rounding stays that of a direct sum (relative L2 error ~4e-7 on ResNet's layers, im2col
# ~3.5e-7). Being linear in d and in g, the same tiles give the adjoints: the data gradient is the
# correlation of the output gradient with the flipped, channel-swapped kernel (stride 1), and
#     dU[k] (F, C) = (A dy A^T)[k] (F, T) @ V[k]^T,   dg = G^T dU G.
#
# Layout: the padded input is split by row and column parity into four phases, each a flat
# ``(C*N, (th+1)*(tw+1))`` block, so every tap of both transform stages is one contiguous slice
# (the tile at (r, c) reads phase rows r, r+1 and columns c, c+1). Positions are ``r*(tw+1) + c``:
# one garbage column per tile row (c = tw) rides along and is dropped by the output transform
# (zero in the weight gradient's dy tiles), which keeps every elementwise pass contiguous.

_WINO_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
_WINO_K = np.kron(_WINO_G, _WINO_G)  # (16, 9): U[(i, j)] = sum_(a, b) G[i, a] G[j, b] g[a, b]
_WINO_MIN_TILES = 49  # fewer 2x2 output blocks (ResNet's 7x7 stage): the weight transform outweighs the GEMMs


def winograd_applies(k, s, d, lo, groups, Y):
    """Whether the correlation with this geometry (and output size ``Y``) runs as Winograd F(2x2, 3x3)."""
    return (
        tuple(k) == (3, 3)
        and tuple(s) == (1, 1)
        and tuple(d) == (1, 1)
        and groups == 1
        and all(0 <= p <= 2 for p in lo)
        and -(-Y[0] // 2) * -(-Y[1] // 2) >= _WINO_MIN_TILES
    )


def _wino_bt(xp, d, out):
    """``out[i] = sum_j B^T[i, j] d[j]``, B^T = [[1,0,-1,0], [0,1,1,0], [0,-1,1,0], [0,1,0,-1]]."""
    xp.subtract(d[0], d[2], out=out[0])
    xp.add(d[1], d[2], out=out[1])
    xp.subtract(d[2], d[1], out=out[2])
    xp.subtract(d[1], d[3], out=out[3])


def _wino_at(xp, m, out):
    """``out[a] = sum_i A^T[a, i] m[i]``, A^T = [[1,1,1,0], [0,1,-1,-1]]."""
    xp.add(m[0], m[1], out=out[0])
    out[0] += m[2]
    xp.subtract(m[1], m[2], out=out[1])
    out[1] -= m[3]


def _wino_a(xp, y, out):
    """The adjoint of ``_wino_at``: ``out[i] = sum_a A[i, a] y[a]``, A = [[1,0], [1,1], [1,-1], [0,-1]]."""
    xp.copyto(out[0], y[0])
    xp.add(y[0], y[1], out=out[1])
    xp.subtract(y[0], y[1], out=out[2])
    xp.negative(y[1], out=out[3])


def _parity_span(lead, parity, n_in, n_slots):
    """(first slot, slot count, first input index) of the slots ``m`` of one parity phase (padded
    index ``2m + parity``, input index ``2m + parity - lead``) that hold input."""
    first = max(0, (lead - parity + 1) // 2)
    i0 = 2 * first + parity - lead
    count = min(n_slots - first, (n_in - i0 + 1) // 2) if i0 < n_in else 0
    return first, count, i0


def _wino_phases(xp, b, lo, th, tw):
    """Zero-padded ``b`` split by row/column parity: ``(2, 2, C*N, (th+1)*(tw+1) + 2)`` (2 slack slots)."""
    N, C, H, W = b.shape
    L = (th + 1) * (tw + 1)
    P = xp.empty((2, 2, C, N, L + 2), b.dtype)
    P.fill(0)  # not zeros(): calloc maps fresh pages for a large block (a page fault per 4 KiB, every call)
    for pr in range(2):
        r0, rn, i0 = _parity_span(lo[0], pr, H, th + 1)
        for pc in range(2):
            c0, cn, j0 = _parity_span(lo[1], pc, W, tw + 1)
            if rn > 0 and cn > 0:
                dst = P[pr, pc, :, :, :L].reshape(C, N, th + 1, tw + 1)[:, :, r0 : r0 + rn, c0 : c0 + cn]
                xp.copyto(dst, b[:, :, i0 : i0 + 2 * rn - 1 : 2, j0 : j0 + 2 * cn - 1 : 2].swapaxes(0, 1))
    return P.reshape(2, 2, C * N, L + 2)


def winograd_input(xp, b, lo, th, tw):
    """``V (16, C, N*th*(tw+1))``: B^T d B of every tile (rows of taps first, then columns)."""
    N, C = b.shape[:2]
    P = _wino_phases(xp, b, lo, th, tw)
    T, row = th * (tw + 1), tw + 1
    R = xp.empty((4, 2, C * N, T + 1), b.dtype)  # row transform, both column phases
    _wino_bt(xp, [P[i % 2, :, :, (i // 2) * row : (i // 2) * row + T + 1] for i in range(4)], R)
    V = xp.empty((4, 4, C * N, T), b.dtype)
    _wino_bt(xp, [R[:, j % 2, :, j // 2 : j // 2 + T] for j in range(4)], V.swapaxes(0, 1))
    return V.reshape(16, C, N * T)


def winograd_weight(xp, w, flip=False):
    """``U (16, F, C) = G g G^T`` as one GEMM; with ``flip`` that of the flipped kernel with F and C
    swapped, ``(16, C, F)`` (flipping the 9 taps reverses the columns of the transform)."""
    F, C = w.shape[:2]
    K = xp.asarray(_WINO_K[:, ::-1] if flip else _WINO_K, dtype=w.dtype)
    U = xp.matmul(K, w.reshape(F * C, 9).T).reshape(16, F, C)
    return U.swapaxes(1, 2) if flip else U


def winograd_output(xp, M, N, th, tw, Y):
    """``(N, F, *Y)`` from the 16 products ``M (16, F, N*th*(tw+1))``: A^T M A, garbage column dropped."""
    F = M.shape[1]
    M = M.reshape(4, 4, -1)
    Q = xp.empty((2, 4, M.shape[2]), M.dtype)
    _wino_at(xp, M, Q)
    Z = xp.empty((2, 2, M.shape[2]), M.dtype)
    _wino_at(xp, Q.swapaxes(0, 1), Z.swapaxes(0, 1))
    out = xp.empty((N, F, th, 2, tw, 2), M.dtype)
    xp.copyto(out.transpose(3, 5, 1, 0, 2, 4), Z.reshape(2, 2, F, N, th, tw + 1)[..., :tw])
    out = out.reshape(N, F, 2 * th, 2 * tw)
    if (2 * th, 2 * tw) != tuple(Y):
        out = xp.ascontiguousarray(out[:, :, : Y[0], : Y[1]])
    return out


def winograd_correlate(xp, b, w, lo, Y, flip=False):
    """S from B by Winograd (``flip``: with the flipped, channel-swapped kernel: the data gradient)."""
    th, tw = -(-Y[0] // 2), -(-Y[1] // 2)
    V = winograd_input(xp, b, lo, th, tw)
    M = xp.matmul(winograd_weight(xp, w, flip), V)
    return winograd_output(xp, M, b.shape[0], th, tw, Y)


def _wino_grad_tiles(xp, sm, th, tw):
    """``(A dy A^T)`` of every 2x2 output block: ``(16, F, N*th*(tw+1))``, zero past the output."""
    N, F = sm.shape[:2]
    Yt = xp.empty((2, 2, F, N, th, tw + 1), sm.dtype)
    Yt.fill(0)
    for a in range(2):
        for c in range(2):
            part = sm[:, :, a::2, c::2]
            xp.copyto(Yt[a, c, :, :, : part.shape[2], : part.shape[3]], part.swapaxes(0, 1))
    Yt = Yt.reshape(2, 2, -1)
    Z = xp.empty((4, 2, Yt.shape[2]), sm.dtype)
    _wino_a(xp, Yt, Z)
    Mt = xp.empty((4, 4, Yt.shape[2]), sm.dtype)
    _wino_a(xp, Z.swapaxes(0, 1), Mt.swapaxes(0, 1))
    return Mt.reshape(16, F, -1)


def winograd_weight_grad(xp, b, sm, lo):
    """W from B and S by Winograd: ``dU[k] = Mt[k] @ V[k]^T`` (16 GEMMs over batch and tiles), then G^T dU G."""
    C, F = b.shape[1], sm.shape[1]
    Y = sm.shape[2:]
    th, tw = -(-Y[0] // 2), -(-Y[1] // 2)
    V = winograd_input(xp, b, lo, th, tw)
    dU = xp.matmul(_wino_grad_tiles(xp, sm, th, tw), V.swapaxes(1, 2))  # (16, F, C)
    K = xp.asarray(_WINO_K, dtype=dU.dtype)
    return xp.matmul(dU.reshape(16, F * C).T, K).reshape(F, C, 3, 3)


def correlate(xp, b, w, k, s, d, lo, Y, groups):
    """S from B: ``(N, C, *X)``, ``(F, C/g, *k)`` -> ``(N, F, *Y)`` in the compute dtype.

    im2col (channel-major) and one GEMM per group over the whole batch:
    ``S[f, (n, o)] = W[f, (c, t)] @ cols[(c, t), (n, o)]``, then one transposing copy to
    ``(N, F, *Y)``. One GEMM per sample straight into the output saves that copy (~5% with one
    BLAS thread on the stem) but with multi-threaded BLAS on a loaded machine every GEMM call
    is a thread rendezvous: measured 2x slower there, so the batch stays one call.
    """
    acc = acc_dtype(b.dtype)
    b = b.astype(acc, copy=False)
    w = w.astype(acc, copy=False)
    gather = (
        _correlate_gather(b.shape, w.shape[0], tuple(k), tuple(s), tuple(d), tuple(lo), tuple(Y), groups)
        if xp is np
        else None
    )
    if gather is not None:  # small: the same columns, GEMM and layout, gathered (see _correlate_gather)
        (hi, columns), output = gather
        F, g = w.shape[0], groups
        cols = padded(xp, b, lo, hi).ravel().take(columns)
        out = xp.matmul(w.reshape(g, F // g, -1), cols.reshape(g, cols.shape[0] // g, -1))
        return out.ravel().take(output)
    if winograd_applies(k, s, d, lo, groups, Y):
        return winograd_correlate(xp, b, w, lo, Y)
    if _per_sample(s, Y):
        return strided_correlate(xp, b, w, k, s, d, lo, Y, groups)
    N = b.shape[0]
    F, g = w.shape[0], groups
    cols = channel_major_columns(xp, b, k, s, d, lo, Y)
    out = xp.matmul(w.reshape(g, F // g, -1), cols.reshape(g, cols.shape[0] // g, -1))  # (g, F/g, N*prod(Y))
    return _sample_major(xp, out.reshape(F, -1), N, Y)


def _flipped_pad(k, s, d, lo, w_shape, groups, N, X, Y):
    """Leading pad of ``transpose`` as a correlation, or None where that form does not apply or costs more.

    With stride 1, ``B[i] = sum_t W[t] S[i + lo - t*d]``; with ``t' = k-1-t`` this reads
    ``S[i + t'*d - ((k-1)*d - lo)]``: a correlation of S (zero outside) with the flipped kernel
    and leading pad ``(k-1)*d - lo``, which must not be negative. It copies the weight (flipped,
    channels swapped) and S's columns, where col2im adds ``C*K x N*prod(Y)`` elements in place
    (a read-modify-write, counted as 1.5 copies). On ResNet's early stages the columns dominate
    and the correlation wins; on the late ones the weight copy alone outweighs col2im.
    """
    if any(si != 1 for si in s) or (all(ki == 1 for ki in k) and not any(lo) and tuple(X) == tuple(Y)):
        return None
    lo2 = tuple((ki - 1) * di - pl for ki, di, pl in zip(k, d, lo))
    if any(v < 0 for v in lo2):
        return None
    F, cg = w_shape[:2]
    K = math.prod(k)
    copies = F * cg * K + F * K * N * math.prod(X)
    adds = 1.5 * cg * groups * K * N * math.prod(Y)
    return lo2 if copies < adds else None


def _flipped_weight(xp, w, groups):
    """``W (F, C/g, *k)`` as the weight of the transposed correlation: ``(C, F/g, *k)``, kernel flipped."""
    F, cg = w.shape[:2]
    k = w.shape[2:]
    wt = w.reshape((groups, F // groups, cg) + k).swapaxes(1, 2).reshape((cg * groups, F // groups) + k)
    return wt[(slice(None), slice(None)) + (slice(None, None, -1),) * len(k)]


def transpose(xp, sm, w, k, s, d, lo, X, groups):
    """B from S (the adjoint of ``correlate`` in B): ``(N, F, *Y)`` -> ``(N, C, *X)``.

    Stride 1: a correlation of S with the flipped kernel (im2col of S, one GEMM: the im2col copy
    costs less than col2im's read-modify-write adds). Otherwise the adjoint of im2col + GEMM: one
    GEMM ``cols = W^T @ S`` over the whole batch, then col2im (a strided add per kernel tap).
    A 1x1, stride-1, unpadded kernel needs neither.
    """
    acc = acc_dtype(sm.dtype)
    sm = sm.astype(acc, copy=False)
    w = w.astype(acc, copy=False)
    N, F = sm.shape[:2]
    lo2 = tuple((ki - 1) * di - pl for ki, di, pl in zip(k, d, lo))
    if winograd_applies(k, s, d, lo2, groups, X):
        return winograd_correlate(xp, sm, w, lo2, X, flip=True)
    lo2 = _flipped_pad(k, s, d, lo, w.shape, groups, N, X, sm.shape[2:])
    if lo2 is not None:
        return correlate(xp, sm, _flipped_weight(xp, w, groups), k, s, d, lo2, X, groups)
    Y = sm.shape[2:]
    if _per_sample(s, Y) or (any(si > 1 for si in s) and math.prod(k) == 1):
        return strided_transpose(xp, sm, w, k, s, d, lo, X, groups)
    g = groups
    cg = w.shape[1]
    C = cg * g
    wm = w.reshape(g, F // g, cg * math.prod(k))
    smm = _batch_major(xp, sm).reshape(g, F // g, -1)
    cols = xp.matmul(wm.swapaxes(1, 2), smm)  # (g, C/g*K, N*prod(Y))
    if all(ki == 1 for ki in k) and all(si == 1 for si in s) and not any(lo) and tuple(Y) == tuple(X):
        return _sample_major(xp, cols.reshape(C, -1), N, X)
    cols = cols.reshape((C,) + tuple(k) + (N,) + tuple(Y))
    return col2im_add(xp, cols, xp.zeros((N, C) + tuple(X), dtype=acc), k, s, d, lo)


def weight_grad(xp, b, sm, k, s, d, lo, groups):
    """W from B and S (the adjoint of ``correlate`` in W): -> ``(F, C/g, *k)``.

    ``dW[f, (c, t)] = S[f, (n, o)] @ cols[(c, t), (n, o)]^T``: one GEMM per group contracting
    over batch and positions together (no per-sample products to sum afterwards).
    """
    acc = acc_dtype(b.dtype)
    b = b.astype(acc, copy=False)
    sm = sm.astype(acc, copy=False)
    C = b.shape[1]
    F = sm.shape[1]
    Y = sm.shape[2:]
    if winograd_applies(k, s, d, lo, groups, Y):
        return winograd_weight_grad(xp, b, sm, lo)
    if _per_sample(s, Y):
        return strided_weight_grad(xp, b, sm, k, s, d, lo, groups)
    g = groups
    cols = channel_major_columns(xp, b, k, s, d, lo, Y)
    smm = _batch_major(xp, sm).reshape(g, F // g, -1)
    dw = xp.matmul(smm, cols.reshape(g, cols.shape[0] // g, -1).swapaxes(1, 2))  # (g, F/g, C/g*K)
    return dw.reshape((F, C // g) + tuple(k))
