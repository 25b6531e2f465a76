"""MXNet's ``_linalg_*`` operators (src/operator/tensor/la_op.*, MXNet 1.9.1), batched over leading axes.

Every op acts on the trailing two axes (``makediag``/``maketrian``: the last axis) and maps over the
leading ones, as MXNet's LaOpForward does. ``_linalg_gemm2`` lives in ``matrix.py``; ``_linalg_gemm``
here reuses its shape rule, forward and gradient products.

Triangle conventions follow MXNet (and BLAS/LAPACK): ``potrf`` and ``syevd`` read only one triangle of
their (symmetric) input, ``potri``, ``trmm`` and ``trsm`` only the triangle of their triangular input.
Gradients w.r.t. a triangular input are masked to that triangle (the true derivative: the other
triangle is never read). Gradients w.r.t. a *symmetric* input (``potrf``, ``syevd``) are MXNet's
symmetric ones, ``dA = (D + D^T) / 2`` of the full-matrix derivative ``D``: the derivative along every
symmetric perturbation, not the derivative w.r.t. the read triangle alone.

Every gradient is a Symbol built from these ops, ``_linalg_gemm2`` and elementwise/broadcast ops, so
each op is differentiable any number of times (``sumlogdiag``'s rule divides by the diagonal, ``syevd``'s
by the eigenvalue gaps, ``det``/``slogdet``/``inverse`` invert ``A``: they hold where those are defined).
Triangle masks are ``maketrian(extracttrian(x))`` and transposes of a triangle
``maketrian(extracttrian(x, lower=True), lower=False)``: both linear, so they differentiate into
each other.

Like MXNet these ops compute in float32 and float64 only.
"""

from __future__ import annotations

import numpy as np

from ..base import ShapeError, SymgradError
from ..opdef import Param, expect_input_shape, register, same_type, wait_for_first_input, wait_for_inputs
from .matrix import gemm2_fwd, gemm2_out, matmul_grads

_LA_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _la_type(params, in_types, out_types, where="op"):
    """float32/float64 only (MXNet: "The operator supports float32 and float64 data types only")."""
    for t in in_types:
        if t is not None and np.dtype(t) not in _LA_DTYPES:
            raise TypeError(f"{where}: inputs must be float32 or float64 (as in MXNet), got {np.dtype(t)}")
    return same_type(params, in_types, out_types, where)


# ----------------------------------------------------------------------------
# shared helpers: shapes, array helpers, symbolic building blocks
# ----------------------------------------------------------------------------


def _matrices(where, name, shape):
    """``shape`` as a tuple, checked to be a tensor of matrices (ndim >= 2)."""
    shape = tuple(shape)
    if len(shape) < 2:
        raise ShapeError(f"{where}: input {name!r} must be a tensor of matrices (ndim >= 2), got shape {shape}")
    return shape


def _square(where, name, shape):
    shape = _matrices(where, name, shape)
    if shape[-1] != shape[-2]:
        raise ShapeError(f"{where}: input {name!r} must hold square matrices, got shape {shape}")
    return shape


def _on_matrix(check=_square):
    """Decorator: the shape rule of a one-input op, waiting for input 'A' and checking it with ``check``.

    The decorated ``rule(params, a, n_out, where)`` only maps the checked shape ``a`` to the output shapes.
    """

    def wrap(rule):
        @wait_for_first_input
        def infer_shape(params, in_shapes, out_shapes, where):
            (a,) = in_shapes
            a = check(where, "A", a)
            return [a], rule(params, a, len(out_shapes), where)

        return infer_shape

    return wrap


def _reduced(shape):
    """Output shape of a per-matrix scalar (sumlogdiag, det): the batch axes, or (1,) for one matrix."""
    return tuple(shape[:-2]) or (1,)


def _swap(xp, x):
    return xp.swapaxes(x, -1, -2)


def _tri(xp, x, lower):
    return xp.tril(x) if lower else xp.triu(x)


def _sym_from(xp, x, lower):
    """The symmetric matrix whose ``lower`` (else upper) triangle is that of ``x``."""
    if lower:
        return xp.tril(x) + _swap(xp, xp.tril(x, -1))
    return xp.triu(x) + _swap(xp, xp.triu(x, 1))


def _trian_index(n, offset, lower):
    """(rows, cols) of the triangle MXNet's CopyTrian packs, in its packing order.

    The lower triangle (offset < 0, or offset == 0 and lower) is packed row by row, starting ``|offset|``
    rows down; the upper one (offset > 0, or offset == 0 and not lower) is the lower triangle of the
    transposed matrix, i.e. packed column by column.
    """
    k = abs(offset)
    r, c = np.tril_indices(n - k)
    if offset < 0 or (offset == 0 and lower):
        return r + k, c
    return c, r + k


def _diag_index(n, offset):
    """(rows, cols) of the ``offset``-th diagonal of an n x n matrix (positive: above the main one)."""
    i = np.arange(n - abs(offset))
    return (i, i + offset) if offset >= 0 else (i - offset, i)


def _mask(F, x, lower):
    """tril(x) (lower) or triu(x), as two linear ops."""
    return F._linalg_maketrian(F._linalg_extracttrian(x, lower=lower), lower=lower)


def _copy_tri(F, x, lower):
    """copyLTU(x) (lower) / copyUTL(x): the symmetric matrix holding x's lower (upper) triangle.

    tril(x) + tril(x)^T - diag(x); tril(x)^T is maketrian of the packed lower triangle as upper.
    """
    v = F._linalg_extracttrian(x, lower=lower)
    diag = F._linalg_makediag(F._linalg_extractdiag(x))
    return F._linalg_maketrian(v, lower=lower) + F._linalg_maketrian(v, lower=not lower) - diag


def _mtrans(F, x):
    return F.swapaxes(x, dim1=-1, dim2=-2)


def _per_matrix(F, s, like):
    """A per-matrix scalar ``s`` (shape: batch axes, or (1,)) broadcast over the matrices of ``like``."""
    s3 = F.expand_dims(F.expand_dims(s, axis=-1), axis=-1)
    return F.reshape_like(F.broadcast_mul(s3, like), like)


def _gemm2(F, a, b, ta=False, tb=False, alpha=1.0):
    return F._linalg_gemm2(a, b, transpose_a=ta, transpose_b=tb, alpha=alpha)


def _la_error(op, what):
    return SymgradError(f"{op}: {what}")


# ----------------------------------------------------------------------------
# gemm: alpha op(A) op(B) + beta C
# ----------------------------------------------------------------------------


@wait_for_inputs(0, 1)
def _gemm_shape(params, in_shapes, out_shapes, where):
    a, b, c = in_shapes
    out = gemm2_out(params, a, b, where)[1]
    ins = [a, b, c]
    expect_input_shape(ins, 2, "C", out, where, " (the shape of alpha*op(A)*op(B))")
    return ins, [out]


def _gemm_fwd(xp, a, b, c, transpose_a, transpose_b, alpha, beta, axis):
    out = gemm2_fwd(xp, a, b, transpose_a, transpose_b, alpha, axis)
    if beta != 0.0:  # BLAS does not read C when beta == 0
        out = out + c.dtype.type(beta) * c
    return out


def _gemm_grad(F, n, g):
    # D = alpha op(A) op(B) + beta C: dA, dB as for gemm2 (the same alpha and axis), dC = beta G
    p = n.params

    def make(x, y, ta, tb):
        return F._linalg_gemm2(x, y, transpose_a=ta, transpose_b=tb, alpha=p["alpha"], axis=p["axis"])

    a, b, _ = n.inputs
    da, db = matmul_grads(make, a, b, p["transpose_a"], p["transpose_b"], g[0])
    return [da, db, g[0] if p["beta"] == 1.0 else g[0] * p["beta"]]


register(
    "_linalg_gemm",
    aliases=("linalg_gemm",),
    inputs=("A", "B", "C"),
    params={
        "transpose_a": Param("bool", False),
        "transpose_b": Param("bool", False),
        "alpha": Param("float", 1.0),
        "beta": Param("float", 1.0),
        "axis": Param("int", -2),
    },
    forward=_gemm_fwd,
    infer_shape=_gemm_shape,
    infer_type=_la_type,
    gradient=_gemm_grad,
    doc="alpha * op(A) * op(B) + beta * C for each matrix (rows along ``axis``, columns along the last axis).",
)


# ----------------------------------------------------------------------------
# potrf / potri: Cholesky factor and the inverse from it
# ----------------------------------------------------------------------------

_CHOL_PARAMS = {"lower": Param("bool", True)}


@_on_matrix()
def _square_same(params, a, n_out, where):
    return [a] * n_out


def _potrf_fwd(xp, a, lower):
    # MXNet reads the ``lower`` (else upper) triangle only: A = L L^T, or A = U^T U with U = L^T
    try:
        chol = xp.linalg.cholesky(_sym_from(xp, a, lower))
    except np.linalg.LinAlgError:
        raise _la_error("_linalg_potrf", "input 'A' is not symmetric positive-definite") from None
    return chol if lower else _swap(xp, chol)


def _potrf_grad(F, n, g):
    # A = L L^T (lower). With P = L^-1 dA L^-T (symmetric), dL = L Phi(P), Phi(P) = tril(P) - diag(P)/2.
    # <G, dL> = <M, Phi(P)>, M = L^T G; for symmetric P, <M, Phi(P)> = <copyLTU(M) / 2, P>, so
    #   dA = 0.5 L^-T copyLTU(L^T G) L^-1          (MXNet's potrf_backward; symmetric)
    # upper (A = U^T U, U = L^T, G_L = G^T): dA = 0.5 U^-1 copyUTL(G U^T) U^-T
    lower = n.params["lower"]
    b = n.outputs[0]
    if lower:
        s = _copy_tri(F, _gemm2(F, b, g[0], ta=True), True)
        x = F._linalg_trsm(b, s, transpose=True, lower=True)  # L^-T S
        return [F._linalg_trsm(b, x, rightside=True, lower=True, alpha=0.5)]  # 0.5 X L^-1
    s = _copy_tri(F, _gemm2(F, g[0], b, tb=True), False)
    x = F._linalg_trsm(b, s, lower=False)  # U^-1 S
    return [F._linalg_trsm(b, x, rightside=True, transpose=True, lower=False, alpha=0.5)]  # 0.5 X U^-T


register(
    "_linalg_potrf",
    aliases=("linalg_potrf",),
    inputs=("A",),
    params=dict(_CHOL_PARAMS),
    forward=_potrf_fwd,
    infer_shape=_square_same,
    infer_type=_la_type,
    gradient=_potrf_grad,
    doc="Cholesky factor of symmetric positive-definite matrices (lower, or upper with lower=False).",
)


def _potri_fwd(xp, a, lower):
    # out = (L L^T)^-1 = L^-T L^-1 (lower) or (U^T U)^-1 = U^-1 U^-T; only the triangle of A is read
    try:
        inv = xp.linalg.inv(_tri(xp, a, lower))
    except np.linalg.LinAlgError:
        raise _la_error("_linalg_potri", "input 'A' is a singular triangular matrix") from None
    return _swap(xp, inv) @ inv if lower else inv @ _swap(xp, inv)


def _potri_grad(F, n, g):
    # Y = (L L^T)^-1: dY = -Y (dL L^T + L dL^T) Y, so <G, dY> = -<Y (G + G^T) Y L, dL> and Y L = L^-T:
    #   dL = -tril(Y (G + G^T) L^-T)                 (MXNet's potri_backward)
    # upper (Y = (U^T U)^-1, Y U^T = U^-1): dU = -triu(U^-T (G + G^T) Y)
    lower = n.params["lower"]
    b, y, gy = n.inputs[0], n.outputs[0], g[0]
    if lower:
        m = _gemm2(F, y, gy) + _gemm2(F, y, gy, tb=True)
        d = F._linalg_trsm(b, m, rightside=True, transpose=True, lower=True, alpha=-1.0)
    else:
        m = _gemm2(F, gy, y) + _gemm2(F, gy, y, ta=True)
        d = F._linalg_trsm(b, m, transpose=True, lower=False, alpha=-1.0)
    return [_mask(F, d, lower)]


register(
    "_linalg_potri",
    aliases=("linalg_potri",),
    inputs=("A",),
    params=dict(_CHOL_PARAMS),
    forward=_potri_fwd,
    infer_shape=_square_same,
    infer_type=_la_type,
    gradient=_potri_grad,
    doc="Inverse of B = A A^T (lower) or A^T A (upper) from its triangular Cholesky factor A.",
)


# ----------------------------------------------------------------------------
# trmm / trsm: multiply with / solve against a triangular matrix
# ----------------------------------------------------------------------------

_TRI_PARAMS = {
    "transpose": Param("bool", False),
    "rightside": Param("bool", False),
    "lower": Param("bool", True),
    "alpha": Param("float", 1.0),
}


@wait_for_inputs(0, 1)
def _tri_shape(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    a, b = tuple(a), tuple(b)
    if len(a) < 2 or len(a) != len(b):
        raise ShapeError(f"{where}: inputs 'A' {a} and 'B' {b} must have the same ndim >= 2")
    _square(where, "A", a)
    if a[:-2] != b[:-2]:
        raise ShapeError(f"{where}: inputs 'A' {a} and 'B' {b} must agree on all but the last two axes")
    k = b[-1] if params["rightside"] else b[-2]
    if k != a[-1]:
        side = "columns" if params["rightside"] else "rows"
        raise ShapeError(
            f"{where}: incompatible matrix dimensions: 'B' {b} has {k} {side}, the triangular 'A' {a} is "
            f"{a[-1]} x {a[-1]} (rightside={params['rightside']})"
        )
    return [a, b], [b]


def _trmm_fwd(xp, a, b, transpose, rightside, lower, alpha):
    t = _tri(xp, a, lower)
    if transpose:
        t = _swap(xp, t)
    out = b @ t if rightside else t @ b
    return out * out.dtype.type(alpha) if alpha != 1.0 else out


def _tri_factor_grad(F, n, x, y):
    """dT of C = alpha op(T) B (left) / alpha B op(T) (right) for head/adjoint ``x`` and operand ``y``.

    left:  dT = x y^T (op = id),  y x^T (op = T);  right: dT = y^T x (id),  x^T y (T) -- MXNet's gemm
    choice ``rightside == transpose``; masked to the triangle T is read from.
    """
    p = n.params
    t = p["transpose"]
    if p["rightside"] == t:
        d = _gemm2(F, x, y, ta=t, tb=not t)
    else:
        d = _gemm2(F, y, x, ta=not t, tb=t)
    return _mask(F, d, p["lower"])


def _trmm_grad(F, n, g):
    # C = alpha op(T) B: dT = alpha (G B^T, op-transposed as needed, masked), dB = alpha op(T)^T G
    p = n.params
    a, b = n.inputs
    da = db = None
    if n.needs[0]:
        da = _tri_factor_grad(F, n, g[0], b)
        if p["alpha"] != 1.0:
            da = da * p["alpha"]
    if n.needs[1]:
        db = F._linalg_trmm(
            a, g[0], transpose=not p["transpose"], rightside=p["rightside"], lower=p["lower"], alpha=p["alpha"]
        )
    return [da, db]


register(
    "_linalg_trmm",
    aliases=("linalg_trmm",),
    inputs=("A", "B"),
    params=dict(_TRI_PARAMS),
    forward=_trmm_fwd,
    infer_shape=_tri_shape,
    infer_type=_la_type,
    gradient=_trmm_grad,
    doc="alpha * op(A) * B (or alpha * B * op(A) with rightside=True) for triangular A.",
)


def _trsm_fwd(xp, a, b, transpose, rightside, lower, alpha):
    t = _tri(xp, a, lower)
    if transpose:
        t = _swap(xp, t)
    rhs = b * b.dtype.type(alpha) if alpha != 1.0 else b
    try:
        if rightside:  # X op(T) = alpha B  <=>  op(T)^T X^T = alpha B^T
            return _swap(xp, xp.linalg.solve(_swap(xp, t), _swap(xp, rhs)))
        return xp.linalg.solve(t, rhs)
    except np.linalg.LinAlgError:
        raise _la_error("_linalg_trsm", "input 'A' is a singular triangular matrix") from None


def _trsm_grad(F, n, g):
    # C = alpha op(T)^-1 B (left): T-bar C = ... with Z = op(T)^-T G (trsm with the transpose flipped):
    #   dB = alpha Z,   dT from dC = -op(T)^-1 d(op(T)) C:  d op(T) = -Z C^T, i.e. dT = -(Z C^T or C Z^T)
    # right (C = alpha B op(T)^-1, Z = G op(T)^-T): dB = alpha Z, d op(T) = -C^T Z. Masked to the triangle.
    p = n.params
    a, c = n.inputs[0], n.outputs[0]
    z = F._linalg_trsm(a, g[0], transpose=not p["transpose"], rightside=p["rightside"], lower=p["lower"])
    da = _tri_factor_grad(F, n, z, c) * -1.0 if n.needs[0] else None
    db = (z * p["alpha"] if p["alpha"] != 1.0 else z) if n.needs[1] else None
    return [da, db]


register(
    "_linalg_trsm",
    aliases=("linalg_trsm",),
    inputs=("A", "B"),
    params=dict(_TRI_PARAMS),
    forward=_trsm_fwd,
    infer_shape=_tri_shape,
    infer_type=_la_type,
    gradient=_trsm_grad,
    doc="Solves op(A) X = alpha * B (or X op(A) = alpha * B with rightside=True) for triangular A.",
)


# ----------------------------------------------------------------------------
# syrk: alpha A A^T
# ----------------------------------------------------------------------------


@_on_matrix(_matrices)
def _syrk_shape(params, a, n_out, where):
    k = a[-1] if params["transpose"] else a[-2]
    return [a[:-2] + (k, k)]


def _syrk_fwd(xp, a, transpose, alpha):
    out = _swap(xp, a) @ a if transpose else a @ _swap(xp, a)
    return out * out.dtype.type(alpha) if alpha != 1.0 else out


def _syrk_grad(F, n, g):
    # B = alpha A A^T: dA = alpha (G + G^T) A;   transpose (B = alpha A^T A): dA = alpha A (G + G^T)
    a, gy, alpha = n.inputs[0], g[0], n.params["alpha"]
    if n.params["transpose"]:
        return [_gemm2(F, a, gy, alpha=alpha) + _gemm2(F, a, gy, tb=True, alpha=alpha)]
    return [_gemm2(F, gy, a, alpha=alpha) + _gemm2(F, gy, a, ta=True, alpha=alpha)]


register(
    "_linalg_syrk",
    aliases=("linalg_syrk",),
    inputs=("A",),
    params={"transpose": Param("bool", False), "alpha": Param("float", 1.0)},
    forward=_syrk_fwd,
    infer_shape=_syrk_shape,
    infer_type=_la_type,
    gradient=_syrk_grad,
    doc="alpha * A * A^T (or alpha * A^T * A with transpose=True).",
)


# ----------------------------------------------------------------------------
# gelqf: A = L Q (LQ factorisation), syevd: A = U^T diag(lambda) U
# ----------------------------------------------------------------------------


@_on_matrix(_matrices)
def _gelqf_shape(params, a, n_out, where):
    if a[-2] > a[-1]:
        raise ShapeError(f"{where}: input 'A' {a} must have at most as many rows as columns (LQ factorisation)")
    return [a, a[:-1] + (a[-2],)]


def _gelqf_fwd(xp, a):
    # A = L Q  <=>  A^T = Q^T L^T: the QR factorisation of A^T (LAPACK's Householder signs, as MXNet's
    # gelqf + orglq: L's diagonal is not made positive)
    q, r = xp.linalg.qr(_swap(xp, a))
    return _swap(xp, q), _swap(xp, r)


def _gelqf_grad(F, n, g):
    # (Q, L) = gelqf(A), A = L Q, Q Q^T = I (Seeger et al., arXiv:1710.08717, as MXNet's gelqf_backward):
    #   M = L^T dL - dQ Q^T,   dA = L^-T (dQ + copyLTU(M) Q)
    q, l_ = n.outputs
    dq, dl = g
    m = _gemm2(F, l_, dl, ta=True) - _gemm2(F, dq, q, tb=True)
    return [F._linalg_trsm(l_, dq + _gemm2(F, _copy_tri(F, m, True), q), transpose=True, lower=True)]


register(
    "_linalg_gelqf",
    aliases=("linalg_gelqf",),
    inputs=("A",),
    num_outputs=2,
    forward=_gelqf_fwd,
    infer_shape=_gelqf_shape,
    infer_type=_la_type,
    gradient=_gelqf_grad,
    doc="LQ factorisation A = L Q of matrices with rows <= columns; outputs (Q, L).",
)


@_on_matrix()
def _syevd_shape(params, a, n_out, where):
    return [a, a[:-1]]


def _syevd_fwd(xp, a):
    # reads the lower triangle; rows of U are the eigenvectors, eigenvalues ascending; each row's sign
    # makes its largest-magnitude entry (the first one on a tie) positive (MXNet's SyevdEigenVecSigns)
    w, v = xp.linalg.eigh(_sym_from(xp, a, True))
    u = _swap(xp, v)
    k = xp.argmax(xp.abs(u), axis=-1)
    big = xp.take_along_axis(u, k[..., None], axis=-1)
    return xp.where(big < 0, -u, u), w


def _syevd_grad(F, n, g):
    # A = U^T diag(lam) U (rows of U orthonormal eigenvectors), as MXNet's syevd_backward:
    #   X = dU U^T,  Y_ij = (X_ij - X_ji) / (2 (lam_i - lam_j)) for i != j,  Y_ii = dlam_i,
    #   dA = U^T Y U (symmetric).
    # (X - X^T) is 0 on the diagonal, so dividing by 2 (lam_i - lam_j + [i == j]) keeps it 0 there.
    # MXNet clamps lam_i - lam_j (i > j) at 1e-100 for tied eigenvalues, where no derivative exists; this
    # rule divides by the gap as is.
    u, lam = n.outputs
    du, dlam = g
    x_minus_xt = _gemm2(F, du, u, tb=True) - _gemm2(F, u, du, tb=True)
    gap = F.broadcast_sub(F.expand_dims(lam, axis=-1), F.expand_dims(lam, axis=-2))
    eye = F._linalg_makediag(F.ones_like(lam))
    y = x_minus_xt / ((gap + eye) * 2.0) + F._linalg_makediag(dlam)
    return [_gemm2(F, _gemm2(F, u, y, ta=True), u)]


register(
    "_linalg_syevd",
    inputs=("A",),
    num_outputs=2,
    forward=_syevd_fwd,
    infer_shape=_syevd_shape,
    infer_type=_la_type,
    gradient=_syevd_grad,
    doc="Eigendecomposition of symmetric matrices: U (eigenvectors as rows) and ascending eigenvalues.",
)


# ----------------------------------------------------------------------------
# sumlogdiag, diagonals and triangles
# ----------------------------------------------------------------------------


@_on_matrix()
def _sumlogdiag_shape(params, a, n_out, where):
    return [_reduced(a)]


def _sumlogdiag_fwd(xp, a):
    out = xp.log(xp.diagonal(a, axis1=-2, axis2=-1)).sum(axis=-1)
    return out.reshape(_reduced(a.shape))


def _sumlogdiag_grad(F, n, g):
    # y = sum_i log A_ii  ->  dA = diag(g / A_ii)
    a = n.inputs[0]
    return [
        F.reshape_like(F._linalg_makediag(F.broadcast_div(F.expand_dims(g[0], axis=-1), F._linalg_extractdiag(a))), a)
    ]


register(
    "_linalg_sumlogdiag",
    aliases=("linalg_sumlogdiag",),
    inputs=("A",),
    forward=_sumlogdiag_fwd,
    infer_shape=_sumlogdiag_shape,
    infer_type=_la_type,
    gradient=_sumlogdiag_grad,
    doc="Sum of the logarithms of the diagonal of square matrices (shape (1,) for a single matrix).",
)


def _trian_side(length):
    """The side m of the triangle that packs into ``length`` = m (m + 1) / 2 entries (rounded)."""
    return int(np.floor(0.5 + (np.sqrt(8 * length + 1) - 1.0) * 0.5))


def _diag_trian_shape(diag, extract):
    @wait_for_first_input
    def rule(params, in_shapes, out_shapes, where):
        (a,) = in_shapes
        a = tuple(a)
        k = params["offset"]
        if extract:
            _square(where, "A", a)
            m = a[-1] - abs(k)
            if m <= 0:
                raise ShapeError(f"{where}: offset={k} is out of range for {a[-1]} x {a[-1]} matrices")
            return [a], [a[:-2] + ((m if diag else m * (m + 1) // 2),)]
        if len(a) < 1:
            raise ShapeError(f"{where}: input 'A' must be at least 1-d, got shape {a}")
        if diag:
            n = a[-1] + abs(k)
        else:
            m = _trian_side(a[-1])
            if m * (m + 1) // 2 != a[-1]:
                raise ShapeError(
                    f"{where}: input 'A' {a}: the last axis ({a[-1]}) is not a triangular number m (m + 1) / 2"
                )
            n = m + abs(k)
        return [a], [a[:-1] + (n, n)]

    return rule


def _extractdiag_fwd(xp, a, offset):
    return xp.diagonal(a, offset=offset, axis1=-2, axis2=-1).copy()


def _scatter(xp, v, n, index):
    out = xp.zeros(v.shape[:-1] + (n, n), dtype=v.dtype)
    out[..., xp.asarray(index[0]), xp.asarray(index[1])] = v
    return out


def _makediag_fwd(xp, a, offset):
    n = a.shape[-1] + abs(offset)
    return _scatter(xp, a, n, _diag_index(n, offset))


def _extracttrian_fwd(xp, a, offset, lower):
    r, c = _trian_index(a.shape[-1], offset, lower)
    return a[..., xp.asarray(r), xp.asarray(c)]


def _maketrian_fwd(xp, a, offset, lower):
    m = _trian_side(a.shape[-1])
    n = m + abs(offset)
    return _scatter(xp, a, n, _trian_index(n, offset, lower))


# extract and make are adjoint linear maps (a gather and the scatter into zeros): each one's gradient is
# the other with the same parameters
def _register_extract_make(kind, params, extract_fwd, make_fwd, extract_doc, make_doc):
    """Register ``_linalg_extract<kind>`` and ``_linalg_make<kind>``, each the other's gradient."""
    for verb, other, fwd, doc in (
        ("extract", "make", extract_fwd, extract_doc),
        ("make", "extract", make_fwd, make_doc),
    ):
        adjoint = f"_linalg_{other}{kind}"
        register(
            f"_linalg_{verb}{kind}",
            aliases=(f"linalg_{verb}{kind}",),
            inputs=("A",),
            params=dict(params),
            forward=fwd,
            infer_shape=_diag_trian_shape(kind == "diag", verb == "extract"),
            infer_type=_la_type,
            gradient=lambda F, n, g, adjoint=adjoint: [getattr(F, adjoint)(g[0], **n.params)],
            doc=doc,
        )


_register_extract_make(
    "diag",
    {"offset": Param("int", 0)},
    _extractdiag_fwd,
    _makediag_fwd,
    "The ``offset``-th diagonal of square matrices.",
    "Square matrices with the input on the ``offset``-th diagonal, zeros elsewhere.",
)
_register_extract_make(
    "trian",
    {"offset": Param("int", 0), "lower": Param("bool", True)},
    _extracttrian_fwd,
    _maketrian_fwd,
    "A triangle of square matrices packed into a vector (lower: row by row; upper: column by column).",
    "Square matrices from packed triangles (the inverse of extracttrian), zeros elsewhere.",
)


# ----------------------------------------------------------------------------
# inverse, det, slogdet
# ----------------------------------------------------------------------------


def _inverse_fwd(xp, a):
    try:
        return xp.linalg.inv(a)
    except np.linalg.LinAlgError:
        raise _la_error("_linalg_inverse", "input 'A' is singular") from None


def _inverse_grad(F, n, g):
    # Y = A^-1: dY = -Y dA Y, so <G, dY> = <-Y^T G Y^T, dA>:  dA = -Y^T G Y^T
    y = n.outputs[0]
    return [_gemm2(F, y, _gemm2(F, g[0], y, tb=True), ta=True, alpha=-1.0)]


register(
    "_linalg_inverse",
    aliases=("linalg_inverse", "_npi_inv"),
    inputs=("A",),
    forward=_inverse_fwd,
    infer_shape=_square_same,
    infer_type=_la_type,
    gradient=_inverse_grad,
    doc="Inverse of square matrices.",
)


@_on_matrix()
def _det_shape(params, a, n_out, where):
    return [_reduced(a)] * n_out


def _det_fwd(xp, a):
    return xp.linalg.det(a).reshape(_reduced(a.shape))


def _det_grad(F, n, g):
    # Jacobi: d det(A) = det(A) tr(A^-1 dA)  ->  dA = g det(A) A^-T.
    # MXNet gives 0 where det(A) == 0; here the inverse of a singular A raises instead.
    a = n.inputs[0]
    return [_per_matrix(F, g[0] * n.outputs[0], _mtrans(F, F._linalg_inverse(a)))]


register(
    "_linalg_det",
    aliases=("linalg_det", "_npi_det"),
    inputs=("A",),
    # MXNet's det has two hidden outputs (its LU factors and pivots), so its one visible output is "output0"
    output_names=("output0",),
    forward=_det_fwd,
    infer_shape=_det_shape,
    infer_type=_la_type,
    gradient=_det_grad,
    doc="Determinant of square matrices (shape (1,) for a single matrix).",
)


def _slogdet_fwd(xp, a):
    sign, logabs = xp.linalg.slogdet(a)
    shape = _reduced(a.shape)
    return sign.reshape(shape), logabs.reshape(shape)


def _slogdet_grad(F, n, g):
    # log|det A| has d = tr(A^-1 dA)  ->  dA = g_logabsdet A^-T; sign is piecewise constant (no gradient).
    # MXNet gives 0 where det(A) == 0; here the inverse of a singular A raises instead.
    a = n.inputs[0]
    return [_per_matrix(F, g[1], _mtrans(F, F._linalg_inverse(a)))]


register(
    "_linalg_slogdet",
    aliases=("linalg_slogdet", "_npi_slogdet"),
    inputs=("A",),
    num_outputs=2,
    forward=_slogdet_fwd,
    infer_shape=_det_shape,
    infer_type=_la_type,
    gradient=_slogdet_grad,
    doc="Sign and log of the absolute value of the determinant of square matrices.",
)
