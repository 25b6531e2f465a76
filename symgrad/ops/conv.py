"""Convolution, Deconvolution and UpSampling with MXNet 1.9's parameters and shapes.

One relation underlies all three. A "big" tensor ``B`` of shape ``(N, C, *X)`` and a
"small" tensor ``S`` of shape ``(N, F, *Y)`` are related through a weight ``W`` of shape
``(F, C/g, *k)`` (``g`` groups, stride ``s``, dilation ``d``, leading zero padding ``p``)::

    S[n, f, o] = sum_{c in group(f), t} W[f, c, t] * B[n, c, o*s - p + t*d]      (B is zero outside)

``Convolution`` computes ``S`` from ``B`` (channel-major im2col over the padded input with
``as_strided``, then one ``matmul`` per group over the whole batch); ``Deconvolution`` is the
adjoint: it computes ``B`` from ``S`` (one ``matmul``, then a col2im add looping over the kernel
taps only; with stride 1, where cheaper, a correlation of ``S`` with the flipped kernel).
Three hidden ops, each linear in both of its tensor operands, are closed under
differentiation exactly like ``dot``/``_dot_grad_lhs``/``_dot_grad_rhs``::

    _conv_forward_like(B, W, like=S)   -> S      (correlation; ``like`` gives the size of S)
    _conv_transpose_like(S, W, like=B) -> B      (its adjoint in B; ``like`` gives the size of B)
    _conv_weight_grad(B, S)            -> W      (its adjoint in W)

so every order of derivative of Convolution/Deconvolution is again a graph of these ops.
``like`` inputs are read for their shape only and never differentiated. The leading pad
``p`` is the ``pad`` parameter, or, for a Deconvolution with ``target_shape``, MXNet's
``ceil((s*(Y-1) + d*(k-1) + 1 - X) / 2)``, which the hidden ops recompute from the two
sizes they see. float16 is computed in float32 and cast back.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import Param, acc_dtype, float_inputs, register

_LAYOUT = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
_ALL_LAYOUTS = ("NCW", "NCHW", "NCDHW", "NHWC", "NDHWC")



def _dk(k, d):
    return tuple((ki - 1) * di + 1 for ki, di in zip(k, d))


def check_layout(where, layout, nd, what="kernel"):
    """Accept only MXNet's default channel-first layout for ``nd`` spatial axes."""
    if layout is None or layout == _LAYOUT.get(nd):
        return
    if layout in ("NWC", "NHWC", "NDHWC"):
        raise NotImplementedError(
            f"{where}: layout={layout!r} is not supported (only channel-first "
            f"{_LAYOUT.get(nd, 'NCW/NCHW/NCDHW')!r} or None); transpose the data instead"
        )
    raise ParamError(f"{where}: layout={layout!r} does not fit a {nd}-d {what}; expected {_LAYOUT.get(nd)!r} or None")


def spatial_param(where, params, name, nd, fill, low, kernel_name="kernel"):
    """MXNet fills an empty stride/dilate/pad/adj with ``fill`` per kernel axis."""
    v = tuple(params[name])
    if len(v) == 0:
        return (fill,) * nd
    if len(v) != nd:
        raise ParamError(
            f"{where}: parameter {name!r}={v} must have as many entries as {kernel_name}="
            f"{tuple(params[kernel_name])} ({nd}), got {len(v)}"
        )
    if any(x < low for x in v):
        raise ParamError(f"{where}: every entry of parameter {name!r} must be >= {low}, got {v}")
    return v


# ----------------------------------------------------------------------------
# Array kernels (xp = numpy or cupy)
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
    X, Y = out.shape[2:], cols.shape[2 + nd:]
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
        out.append((tuple(slice(f, f + c) for f, c, _ in spans),
                    tuple(slice(i0, i0 + si * (c - 1) + 1, si) for (_, c, i0), si in zip(spans, s))))
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
    cols = xp.empty((lead[0],) + tuple(k) + (lead[1],) + tuple(Y) if channel_major else
                    lead + tuple(k) + tuple(Y), b.dtype)
    for tap, ph in tap_phase.items():
        src = P[(used.index(ph), slice(None), slice(None)) + tuple(
            slice((t * di) // si, (t * di) // si + y) for t, si, di, y in zip(tap, s, d, Y))]
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
            dst = P[(used.index(ph), slice(None), slice(None)) + tuple(
                slice((t * di) // si, (t * di) // si + y) for t, si, di, y in zip(tap, s, d, Y))]
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
    return (tuple(k) == (3, 3) and tuple(s) == (1, 1) and tuple(d) == (1, 1) and groups == 1
            and all(0 <= p <= 2 for p in lo) and -(-Y[0] // 2) * -(-Y[1] // 2) >= _WINO_MIN_TILES)


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
                dst = P[pr, pc, :, :, :L].reshape(C, N, th + 1, tw + 1)[:, :, r0:r0 + rn, c0:c0 + cn]
                xp.copyto(dst, b[:, :, i0:i0 + 2 * rn - 1:2, j0:j0 + 2 * cn - 1:2].swapaxes(0, 1))
    return P.reshape(2, 2, C * N, L + 2)


def winograd_input(xp, b, lo, th, tw):
    """``V (16, C, N*th*(tw+1))``: B^T d B of every tile (rows of taps first, then columns)."""
    N, C = b.shape[:2]
    P = _wino_phases(xp, b, lo, th, tw)
    T, row = th * (tw + 1), tw + 1
    R = xp.empty((4, 2, C * N, T + 1), b.dtype)  # row transform, both column phases
    _wino_bt(xp, [P[i % 2, :, :, (i // 2) * row:(i // 2) * row + T + 1] for i in range(4)], R)
    V = xp.empty((4, 4, C * N, T), b.dtype)
    _wino_bt(xp, [R[:, j % 2, :, j // 2:j // 2 + T] for j in range(4)], V.swapaxes(0, 1))
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
        out = xp.ascontiguousarray(out[:, :, :Y[0], :Y[1]])
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
            xp.copyto(Yt[a, c, :, :, :part.shape[2], :part.shape[3]], part.swapaxes(0, 1))
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
    gather = _correlate_gather(b.shape, w.shape[0], tuple(k), tuple(s), tuple(d), tuple(lo), tuple(Y),
                               groups) if xp is np else None
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


# ----------------------------------------------------------------------------
# Geometry shared by the public and hidden ops
# ----------------------------------------------------------------------------

_GEOM_PARAMS = {
    "kernel": Param("shape"),
    "stride": Param("shape", ()),
    "dilate": Param("shape", ()),
    "pad": Param("shape", ()),
    "num_group": Param("int", 1),
    "target_shape": Param("shape", ()),
}


def _geom(params):
    k = tuple(params["kernel"])
    nd = len(k)
    s = tuple(params["stride"]) or (1,) * nd
    d = tuple(params["dilate"]) or (1,) * nd
    return k, s, d


def _lead_pad(params, X, Y):
    """Leading pad of the relation: ``pad``, or MXNet's target_shape rule from both sizes."""
    k, s, d = _geom(params)
    if any(params.get("target_shape") or ()):
        # total = s*(Y-1) + dk - X; MXNet: pad = (total + 1) // 2, adj = total % 2
        return tuple((si * (y - 1) + dki - x + 1) // 2 for si, y, dki, x in zip(s, Y, _dk(k, d), X))
    return tuple(params["pad"]) or (0,) * len(k)


def _hidden_params(params, target_shape=()):
    return {
        "kernel": params["kernel"],
        "stride": params["stride"],
        "dilate": params["dilate"],
        "pad": params["pad"],
        "num_group": params["num_group"],
        "target_shape": target_shape,
    }


# ----------------------------------------------------------------------------
# Convolution
# ----------------------------------------------------------------------------

_CUDNN_TUNE = ("off", "limited_workspace", "fastest")


def _conv_params(workspace, no_bias):
    return {
        "kernel": Param("shape", doc="(w,), (h, w) or (d, h, w)"),
        "stride": Param("shape", ()),
        "dilate": Param("shape", ()),
        "pad": Param("shape", ()),
        "num_filter": Param("int"),
        "num_group": Param("int", 1),
        "workspace": Param("int", workspace),
        "no_bias": Param("bool", no_bias),
        "cudnn_tune": Param("str", None, choices=_CUDNN_TUNE),
        "cudnn_off": Param("bool", False),
        "layout": Param("str", None, choices=_ALL_LAYOUTS),
    }


def _prepare(opname, deconv):
    def prepare(params, node_name):
        where = f"{opname} {node_name!r}"
        k = tuple(params["kernel"])
        nd = len(k)
        if nd not in (1, 2, 3):
            raise ParamError(f"{where}: parameter 'kernel' must be (w,), (h, w) or (d, h, w), got {k}")
        if any(v < 1 for v in k):
            raise ParamError(f"{where}: every entry of parameter 'kernel' must be >= 1, got {k}")
        check_layout(where, params["layout"], nd)
        out = dict(params)
        out["stride"] = spatial_param(where, params, "stride", nd, 1, 1)
        out["dilate"] = spatial_param(where, params, "dilate", nd, 1, 1)
        out["pad"] = spatial_param(where, params, "pad", nd, 0, 0)
        if deconv:
            out["adj"] = spatial_param(where, params, "adj", nd, 0, 0)
            t = tuple(params["target_shape"])
            if any(t):
                if len(t) != nd:
                    raise ParamError(f"{where}: parameter 'target_shape'={t} must have {nd} entries like kernel={k}")
                if not all(t):
                    raise ParamError(f"{where}: parameter 'target_shape'={t} must be positive on every axis")
            else:
                out["target_shape"] = ()
        f, g = params["num_filter"], params["num_group"]
        if f < 1:
            raise ParamError(f"{where}: parameter 'num_filter' must be >= 1, got {f}")
        if g < 1:
            raise ParamError(f"{where}: parameter 'num_group' must be >= 1, got {g}")
        if f % g:
            raise ParamError(f"{where}: parameter 'num_filter'={f} must be divisible by 'num_group'={g}")
        return out

    return prepare


def _check_data(where, x, k):
    nd = len(k)
    if len(x) != nd + 2:
        raise ShapeError(
            f"{where}: input 'data' has shape {tuple(x)} ({len(x)}-d), but kernel={tuple(k)} needs a "
            f"{nd + 2}-d input ({_LAYOUT[nd]})"
        )


def _check_input(where, ins, i, name, want, why):
    if ins[i] is not None and tuple(ins[i]) != tuple(want):
        raise ShapeError(f"{where}: input {name!r} has shape {tuple(ins[i])}, expected {tuple(want)} ({why})")
    ins[i] = tuple(want)


def _conv_out(params, X, where):
    k, s, d = _geom(params)
    p = params["pad"]
    Y = []
    for i, (x, ki, si, di, pi) in enumerate(zip(X, k, s, d, p)):
        span = (ki - 1) * di + 1
        if span > x + 2 * pi:
            raise ShapeError(
                f"{where}: kernel {ki} (dilate {di}: spans {span}) exceeds input size {x} padded to "
                f"{x + 2 * pi} on spatial axis {i}"
            )
        Y.append((x + 2 * pi - span) // si + 1)
    return tuple(Y)


def _conv_shape(params, in_shapes, out_shapes, where):
    ins = list(in_shapes)
    k = params["kernel"]
    f, g = params["num_filter"], params["num_group"]
    if not params["no_bias"]:
        _check_input(where, ins, 2, "bias", (f,), f"num_filter={f}")
    x = ins[0]
    if x is None:
        return ins, out_shapes
    _check_data(where, x, k)
    c = x[1]
    if c % g:
        raise ShapeError(f"{where}: parameter 'num_group'={g} must divide the input channels, but data {tuple(x)} "
                         f"has {c} channels")
    _check_input(where, ins, 1, "weight", (f, c // g) + tuple(k),
                 f"num_filter={f}, {c} input channels / num_group={g}, kernel={tuple(k)}")
    return ins, [(x[0], f) + _conv_out(params, x[2:], where)]


@functools.lru_cache(maxsize=256)
def _conv_out_cached(kernel, stride, dilate, pad, X):
    """``_conv_out`` of the forward, per geometry (a numeric check re-runs one small convolution thousands of
    times); an error is raised again on every call (``lru_cache`` keeps results only)."""
    return _conv_out({"kernel": kernel, "stride": stride, "dilate": dilate, "pad": pad}, X, "Convolution")


def _conv_fwd(xp, x, w, b=None, *, kernel, stride, dilate, pad, num_group, **_):
    Y = _conv_out_cached(tuple(kernel), tuple(stride), tuple(dilate), tuple(pad), x.shape[2:])
    y = correlate(xp, x, w, kernel, stride, dilate, pad, Y, num_group)
    if b is not None:
        y += b.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * len(kernel))
    return y.astype(x.dtype, copy=False)


def _bias_grad(F, gy):
    # y = ... + b[f] broadcast over every axis but 1  ->  db = sum of gy over those axes
    return F.sum(gy, axis=1, exclude=True)


def _conv_grad(F, n, g):
    # S = corr(B=x, W) + b  ->  dB = corr^T(G, W) (a transposed convolution), dW = wgrad(B, G)
    x, w = n.inputs[0], n.inputs[1]
    gy = g[0]
    hp = _hidden_params(n.params)
    out = [
        F._conv_transpose_like(gy, w, x, **hp) if n.needs[0] else None,
        F._conv_weight_grad(x, gy, **hp) if n.needs[1] else None,
    ]
    if not n.params["no_bias"]:
        out.append(_bias_grad(F, gy) if n.needs[2] else None)
    return out


def _conv_inputs(params):
    return ["data", "weight"] if params["no_bias"] else ["data", "weight", "bias"]


register(
    "Convolution",
    aliases=("_npx_convolution",),
    inputs=_conv_inputs,
    params=_conv_params(1024, False),
    prepare=_prepare("Convolution", deconv=False),
    forward=_conv_fwd,
    infer_shape=_conv_shape,
    infer_type=float_inputs("data"),
    gradient=_conv_grad,
    doc="N-d convolution (cross-correlation) of (N, C, *X) data with (num_filter, C/num_group, *kernel) "
    "weights; output size floor((x + 2p - d(k-1) - 1)/s) + 1.",
)


# ----------------------------------------------------------------------------
# Deconvolution
# ----------------------------------------------------------------------------


def _deconv_geometry(params, Y, where):
    """(leading pad, output size) of a Deconvolution on input spatial size ``Y`` (MXNet's InferPad)."""
    k, s, d = _geom(params)
    dk = _dk(k, d)
    t = params["target_shape"]
    lo, X = [], []
    for i, (y, si, dki) in enumerate(zip(Y, s, dk)):
        if any(t):
            total = si * (y - 1) + dki - t[i]
            if total < 0:
                raise ShapeError(f"{where}: target_shape={tuple(t)} is too big on spatial axis {i}: the input size "
                                 f"{y} gives at most {si * (y - 1) + dki}")
            a, pl = total % 2, (total + 1) // 2
            if a > si - 1:
                raise ShapeError(f"{where}: target_shape={tuple(t)} needs adj={a} on spatial axis {i}, but adj "
                                 f"must be smaller than stride {si}")
        else:
            a, pl = params["adj"][i], params["pad"][i]
            if a > si - 1:
                raise ShapeError(f"{where}: parameter 'adj'={tuple(params['adj'])} must be smaller than "
                                 f"stride={tuple(s)} on every axis")
        x = si * (y - 1) + dki - 2 * pl + a
        if x < 1:
            raise ShapeError(f"{where}: output size {x} on spatial axis {i} is not positive (input {y}, "
                             f"kernel span {dki}, stride {si}, pad {pl}, adj {a})")
        lo.append(pl)
        X.append(x)
    return tuple(lo), tuple(X)


def _deconv_shape(params, in_shapes, out_shapes, where):
    ins = list(in_shapes)
    k = params["kernel"]
    f, g = params["num_filter"], params["num_group"]
    if not params["no_bias"]:
        _check_input(where, ins, 2, "bias", (f,), f"num_filter={f}")
    x = ins[0]
    if x is None:
        return ins, out_shapes
    _check_data(where, x, k)
    c = x[1]
    if c % g:
        raise ShapeError(f"{where}: parameter 'num_group'={g} must divide the input channels, but data {tuple(x)} "
                         f"has {c} channels")
    _check_input(where, ins, 1, "weight", (c, f // g) + tuple(k),
                 f"{c} input channels, num_filter={f} / num_group={g}, kernel={tuple(k)}")
    _, X = _deconv_geometry(params, x[2:], where)
    return ins, [(x[0], f) + X]


def _deconv_fwd(xp, x, w, b=None, *, kernel, stride, dilate, num_group, **params):
    p = {"kernel": kernel, "stride": stride, "dilate": dilate, **params}
    lo, X = _deconv_geometry(p, x.shape[2:], "Deconvolution")
    y = transpose(xp, x, w, kernel, stride, dilate, lo, X, num_group)
    if b is not None:
        y = y + b.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * len(kernel))
    return xp.ascontiguousarray(y.astype(x.dtype, copy=False))


def _deconv_grad(F, n, g):
    # B = corr^T(S=x, W) + b  ->  dS = corr(G, W) (a convolution), dW = wgrad(G, S)
    x, w = n.inputs[0], n.inputs[1]
    gy = g[0]
    hp = _hidden_params(n.params, n.params["target_shape"])
    out = [
        F._conv_forward_like(gy, w, x, **hp) if n.needs[0] else None,
        F._conv_weight_grad(gy, x, **hp) if n.needs[1] else None,
    ]
    if not n.params["no_bias"]:
        out.append(_bias_grad(F, gy) if n.needs[2] else None)
    return out


_DECONV_PARAMS = _conv_params(512, True)
_DECONV_PARAMS["adj"] = Param("shape", ())
_DECONV_PARAMS["target_shape"] = Param("shape", ())
# MXNet's field order (parameters may be given positionally): adj and target_shape come right after pad
_DECONV_PARAMS = {k: _DECONV_PARAMS[k] for k in ("kernel", "stride", "dilate", "pad", "adj", "target_shape")} | \
    _DECONV_PARAMS

register(
    "Deconvolution",
    aliases=("_npx_deconvolution",),
    inputs=_conv_inputs,
    params=_DECONV_PARAMS,
    prepare=_prepare("Deconvolution", deconv=True),
    forward=_deconv_fwd,
    infer_shape=_deconv_shape,
    infer_type=float_inputs("data"),
    gradient=_deconv_grad,
    doc="Transposed convolution (the gradient of Convolution w.r.t. its data); weight (C, num_filter/num_group, "
    "*kernel); output s(x-1) + d(k-1) + 1 - 2p + adj, or target_shape. no_bias defaults to True as in MXNet.",
)


# ----------------------------------------------------------------------------
# The hidden trio (closed under differentiation)
# ----------------------------------------------------------------------------


def _fwd_like(xp, b, w, like, **params):
    k, s, d = _geom(params)
    Y = like.shape[2:]
    lo = _lead_pad(params, b.shape[2:], Y)
    return correlate(xp, b, w, k, s, d, lo, Y, params["num_group"]).astype(b.dtype, copy=False)


def _transpose_like(xp, sm, w, like, **params):
    k, s, d = _geom(params)
    X = like.shape[2:]
    lo = _lead_pad(params, X, sm.shape[2:])
    out = transpose(xp, sm, w, k, s, d, lo, X, params["num_group"])
    return xp.ascontiguousarray(out.astype(sm.dtype, copy=False))


def _wgrad(xp, b, sm, **params):
    k, s, d = _geom(params)
    lo = _lead_pad(params, b.shape[2:], sm.shape[2:])
    return weight_grad(xp, b, sm, k, s, d, lo, params["num_group"]).astype(b.dtype, copy=False)


def _like_shape(params, in_shapes, out_shapes, where):
    like = in_shapes[2]
    return in_shapes, [like] if like is not None else out_shapes


def _wgrad_shape(params, in_shapes, out_shapes, where):
    b, sm = in_shapes
    if b is None or sm is None:
        return in_shapes, out_shapes
    return in_shapes, [(sm[1], b[1] // params["num_group"]) + tuple(params["kernel"])]


def _hp(n):
    return dict(n.params)


# <H, corr(B, W)> = <corr^T(H, W), B> = <wgrad(B, H), W>
register(
    "_conv_forward_like",
    inputs=("data", "weight", "like"),
    params=dict(_GEOM_PARAMS),
    forward=_fwd_like,
    infer_shape=_like_shape,
    no_grad_inputs=("like",),
    gradient=lambda F, n, g: [
        F._conv_transpose_like(g[0], n.inputs[1], n.inputs[0], **_hp(n)) if n.needs[0] else None,
        F._conv_weight_grad(n.inputs[0], g[0], **_hp(n)) if n.needs[1] else None,
        None,
    ],
    doc="Convolution relation S = corr(B, W) with S's size taken from ``like`` (hidden).",
)
# <H, corr^T(S, W)> = <corr(H, W), S> = <wgrad(H, S), W>
register(
    "_conv_transpose_like",
    inputs=("data", "weight", "like"),
    params=dict(_GEOM_PARAMS),
    forward=_transpose_like,
    infer_shape=_like_shape,
    no_grad_inputs=("like",),
    gradient=lambda F, n, g: [
        F._conv_forward_like(g[0], n.inputs[1], n.inputs[0], **_hp(n)) if n.needs[0] else None,
        F._conv_weight_grad(g[0], n.inputs[0], **_hp(n)) if n.needs[1] else None,
        None,
    ],
    doc="Adjoint of the convolution relation in B, B's size taken from ``like`` (hidden).",
)
# <H, wgrad(B, S)> = <corr^T(S, H), B> = <corr(B, H), S>
register(
    "_conv_weight_grad",
    inputs=("data", "ograd"),
    params=dict(_GEOM_PARAMS),
    forward=_wgrad,
    infer_shape=_wgrad_shape,
    gradient=lambda F, n, g: [
        F._conv_transpose_like(n.inputs[1], g[0], n.inputs[0], **_hp(n)) if n.needs[0] else None,
        F._conv_forward_like(n.inputs[0], g[0], n.inputs[1], **_hp(n)) if n.needs[1] else None,
    ],
    doc="Adjoint of the convolution relation in W (hidden).",
)


# ----------------------------------------------------------------------------
# UpSampling
# ----------------------------------------------------------------------------


def _bilinear_geom(scale):
    """MXNet: bilinear upsampling is a Deconvolution with these parameters."""
    k = 2 * scale - scale % 2
    return (k, k), (scale, scale), (math.ceil((scale - 1) / 2),) * 2


def _up_prepare(params, node_name):
    where = f"UpSampling {node_name!r}"
    if params["scale"] < 1:
        raise ParamError(f"{where}: parameter 'scale' must be >= 1, got {params['scale']}")
    if params["num_args"] < 1:
        raise ParamError(f"{where}: parameter 'num_args' must be >= 1, got {params['num_args']}")
    return params


def _up_inputs(params):
    if params["sample_type"] == "bilinear":
        return ["data", "weight"]
    return [f"arg{i}" for i in range(params["num_args"])]


def _up_shape(params, in_shapes, out_shapes, where):
    sc = params["scale"]
    ins = list(in_shapes)
    x0 = ins[0]
    if x0 is None:
        return ins, out_shapes
    if len(x0) != 4:
        raise ShapeError(f"{where}: input {_up_inputs(params)[0]!r} has shape {tuple(x0)}; UpSampling needs 4-d "
                         f"(batch, channel, y, x) input")
    oh, ow = x0[2] * sc, x0[3] * sc
    if params["sample_type"] == "bilinear":
        c = x0[1]
        if params["num_filter"] != c:
            raise ShapeError(f"{where}: bilinear UpSampling needs num_filter equal to the input channels {c}, "
                             f"got num_filter={params['num_filter']}")
        k = _bilinear_geom(sc)[0]
        _check_input(where, ins, 1, "weight", (c, 1) + k, f"channels {c}, kernel 2*scale - scale%2 = {k[0]}")
        return ins, [(x0[0], c, oh, ow)]
    if any(s is None for s in ins):
        return ins, out_shapes
    channels = 0
    for i, s in enumerate(ins):
        if len(s) != 4 or s[0] != x0[0]:
            raise ShapeError(f"{where}: input 'arg{i}' has shape {tuple(s)}; expected 4-d with batch {x0[0]}")
        if oh % s[2] or ow % s[3] or oh // s[2] != ow // s[3]:
            raise ShapeError(f"{where}: input 'arg{i}' of shape {tuple(s)} cannot be upsampled by one integer "
                             f"factor to the output size {(oh, ow)}")
        if params["multi_input_mode"] == "sum":
            if s[1] != x0[1]:
                raise ShapeError(f"{where}: multi_input_mode='sum' needs equal channels, but input 'arg{i}' has "
                                 f"{s[1]} and 'arg0' has {x0[1]}")
            channels = s[1]
        else:
            channels += s[1]
    return ins, [(x0[0], channels, oh, ow)]


def _repeat(xp, x, a, b):
    n, c, h, w = x.shape
    return xp.broadcast_to(x[:, :, :, None, :, None], (n, c, h, a, w, b)).reshape(n, c, h * a, w * b)


def _up_fwd(xp, *xs, scale, sample_type, multi_input_mode, num_filter, **_):
    if sample_type == "bilinear":
        x, w = xs
        k, s, p = _bilinear_geom(scale)
        X = (x.shape[2] * scale, x.shape[3] * scale)
        out = transpose(xp, x, w, k, s, (1, 1), p, X, x.shape[1])
        return xp.ascontiguousarray(out.astype(x.dtype, copy=False))
    oh, ow = xs[0].shape[2] * scale, xs[0].shape[3] * scale
    ups = [_repeat(xp, x, oh // x.shape[2], ow // x.shape[3]) for x in xs]
    if len(ups) == 1:
        return ups[0]
    if multi_input_mode == "sum":
        out = ups[0].copy()
        for u in ups[1:]:
            out += u
        return out
    return xp.concatenate(ups, axis=1)


def _up_grad(F, n, g):
    p = n.params
    gy = g[0]
    if p["sample_type"] == "bilinear":
        # a Deconvolution with fixed geometry: dx = corr(G, W), dW = wgrad(G, x)
        k, s, pad = _bilinear_geom(p["scale"])
        hp = {"kernel": k, "stride": s, "dilate": (1, 1), "pad": pad, "num_group": p["num_filter"],
              "target_shape": ()}
        x, w = n.inputs
        return [
            F._conv_forward_like(gy, w, x, **hp) if n.needs[0] else None,
            F._conv_weight_grad(gy, x, **hp) if n.needs[1] else None,
        ]
    # y = sum_i repeat(x_i) or concat_i repeat(x_i) is linear; its adjoint (block sums of each
    # input's channel slice of G) is one hidden multi-output op whose own adjoint is UpSampling again
    grads = F._upsampling_nearest_adjoint(gy, *n.inputs, scale=p["scale"], multi_input_mode=p["multi_input_mode"])
    return [gi if need else None for gi, need in zip(grads, n.needs)]


def _up_adjoint_fwd(xp, g, *likes, num_args, scale, multi_input_mode):
    acc = acc_dtype(g.dtype)
    ga = g.astype(acc, copy=False)
    out = []
    c0 = 0
    for like in likes:
        n, c, h, w = like.shape
        a, b = g.shape[2] // h, g.shape[3] // w
        part = ga if multi_input_mode == "sum" else ga[:, c0:c0 + c]
        out.append(part.reshape(n, c, h, a, w, b).sum(axis=(3, 5)).astype(g.dtype, copy=False))
        c0 += c
    return tuple(out)


register(
    "_upsampling_nearest_adjoint",
    variadic="num_args",
    params={
        "num_args": Param("int"),
        "scale": Param("int"),
        "multi_input_mode": Param("str", "concat", choices=("concat", "sum")),
    },
    num_outputs=lambda p: p["num_args"] - 1,
    forward=_up_adjoint_fwd,
    infer_shape=lambda p, i, o, w: (i, list(i[1:])),
    # adjoint of the adjoint: nearest UpSampling of the cotangents; the like inputs are shapes only
    gradient=lambda F, n, g: [
        F.UpSampling(*g, scale=n.params["scale"], sample_type="nearest",
                     multi_input_mode=n.params["multi_input_mode"], num_args=len(g))
    ] + [None] * (len(n.inputs) - 1),
    doc="Adjoint of nearest UpSampling: block sums of each input's slice of the output gradient (hidden).",
)


register(
    "UpSampling",
    variadic="num_args",
    inputs=_up_inputs,
    params={
        "scale": Param("int"),
        "num_filter": Param("int", 0),
        "sample_type": Param("str", choices=("nearest", "bilinear")),
        "multi_input_mode": Param("str", "concat", choices=("concat", "sum")),
        "num_args": Param("int"),
        "workspace": Param("int", 512),
    },
    prepare=_up_prepare,
    forward=_up_fwd,
    infer_shape=_up_shape,
    infer_type=lambda p, i, o, w: float_inputs(_up_inputs(p)[0])(p, i, o, w),
    gradient=_up_grad,
    doc="Nearest-neighbour upsampling of 1..N NCHW inputs (concatenated or summed), or bilinear "
    "(a fixed-geometry depthwise Deconvolution with a (C, 1, k, k) weight input).",
)
