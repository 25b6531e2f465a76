"""OpInfo rows for MXNet's ``_linalg_*`` operators (symgrad/ops/linalg.py; gemm2 is in op_db_matrix.py).

References are plain numpy (np.linalg, loops for the packed triangles) written from MXNet 1.9.1's la_op
docs. The ops compute in float32/float64 only (as MXNet), so every row restricts ``dtypes``.

Domains:
- ``potrf`` and ``syevd`` read one triangle of a symmetric input, and MXNet's gradient is the symmetric
  one (the derivative along symmetric perturbations), which finite differences of the op alone would not
  give (they see the unread triangle as constant). Their rows therefore differentiate
  ``op((X + X^T) / 2)``: then the derivative w.r.t. X is exactly MXNet's gradient (symmetrised again,
  which leaves it unchanged). ``X`` is drawn symmetric positive-definite (potrf) or symmetric with
  well-separated eigenvalues (syevd). The op's own triangle reading is tested in test_ops_linalg.py.
- ``potri``, ``trmm``, ``trsm`` read one triangle of ``A``; their gradients are masked to it, which is the
  true derivative, so those rows take the op alone (the unread triangle holds random values, which must
  not matter). Triangular factors have diagonals in [1.5, 2.5] (well conditioned solves).
- ``inverse``, ``det``, ``slogdet``: 2 I + a small random matrix (well conditioned); one ``slogdet`` row
  has a negative determinant. ``sumlogdiag`` gets a positive diagonal.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym
LA = (np.float32, np.float64)


def _t(x):
    return np.swapaxes(x, -1, -2)


def _sym(x):
    return (x + S.swapaxes(x, dim1=-1, dim2=-2)) * 0.5


def _spd(shape):
    def draw(rng):
        m = rng.uniform(-1, 1, shape)
        return m @ _t(m) + shape[-1] * np.eye(shape[-1])

    return draw


def _lower_factor(shape):
    """Triangular factor (lower) with a diagonal in [1.5, 2.5]; the other triangle random (unread)."""

    def draw(rng):
        a = rng.uniform(-0.5, 0.5, shape)
        idx = np.arange(shape[-1])
        a[..., idx, idx] = rng.uniform(1.5, 2.5, shape[:-1])
        return a

    return draw


def _eig_sym(shape):
    """Symmetric matrices with eigenvalues 1, 2.5, 4, ... (gaps 1.5) and random eigenvectors."""

    def draw(rng):
        q, _ = np.linalg.qr(rng.standard_normal(shape))
        lam = 1.0 + 1.5 * np.arange(shape[-1])
        return (q * lam[..., None, :]) @ _t(q)

    return draw


def _well(shape, sign=1.0):
    def draw(rng):
        a = 0.3 * rng.uniform(-1, 1, shape) + 2 * np.eye(shape[-1])
        if sign < 0:
            a[..., 0, :] *= -1  # flips the determinant's sign
        return a

    return draw


# -- references ----------------------------------------------------------------------------------------------


def _tri(a, lower):
    return np.tril(a) if lower else np.triu(a)


def _op(a, transpose):
    return _t(a) if transpose else a


def _trmm_ref(transpose=False, rightside=False, lower=True, alpha=1.0):
    def ref(a, b):
        t = _op(_tri(a, lower), transpose)
        return alpha * (b @ t if rightside else t @ b)

    return ref


def _trsm_ref(transpose=False, rightside=False, lower=True, alpha=1.0):
    def ref(a, b):
        t = _op(_tri(a, lower), transpose)
        inv = np.linalg.inv(t)
        return alpha * (b @ inv if rightside else inv @ b)

    return ref


def _gemm_ref(ta=False, tb=False, alpha=1.0, beta=1.0):
    return lambda a, b, c: alpha * _op(a, ta) @ _op(b, tb) + beta * c


def _gelqf_ref(a):
    # A^T = Q' R' (Householder QR, LAPACK's signs as MXNet's gelqf/orglq)  ->  Q = Q'^T, L = R'^T
    q, r = np.linalg.qr(_t(a))
    return _t(q), _t(r)


def _syevd_ref(a):
    w, v = np.linalg.eigh(a)
    u = _t(v).copy()
    for idx in np.ndindex(*u.shape[:-1]):  # each row: its largest-magnitude entry positive
        row = u[idx]
        if row[np.argmax(np.abs(row))] < 0:
            u[idx] = -row
    return u, w


def _reduced(x, a):
    return np.asarray(x).reshape(a.shape[:-2] or (1,))


def _extracttrian_ref(offset=0, lower=True):
    def ref(a):
        n = a.shape[-1]
        items = []
        if offset < 0 or (offset == 0 and lower):
            for i in range(n):
                for j in range(n):
                    if i - j >= -offset:
                        items.append((i, j))  # row by row
        else:
            for j in range(n):
                for i in range(n):
                    if j - i >= offset:
                        items.append((i, j))  # column by column
        return np.stack([a[..., i, j] for i, j in items], axis=-1)

    return ref


def _maketrian_ref(offset=0, lower=True):
    def ref(v):
        m = int(round((np.sqrt(8 * v.shape[-1] + 1) - 1) / 2))
        n = m + abs(offset)
        pos = _extracttrian_ref(offset, lower)(np.arange(n * n).reshape(n, n))
        out = np.zeros(v.shape[:-1] + (n * n,))
        out[..., pos] = v
        return out.reshape(v.shape[:-1] + (n, n))

    return ref


def _makediag_ref(offset=0):
    def ref(v):
        n = v.shape[-1] + abs(offset)
        out = np.zeros(v.shape[:-1] + (n, n))
        for idx in np.ndindex(*v.shape[:-1]):
            out[idx] = np.diag(v[idx], offset)
        return out

    return ref


def _row(name, make, inputs, ref, **kw):
    return OpInfo(name, make, inputs, ref, dtypes=LA, **kw)


OPS = [
    # -- gemm: alpha op(A) op(B) + beta C -----------------------------------------------------------------
    _row("_linalg_gemm", S._linalg_gemm, {"a": In((2, 3)), "b": In((3, 2)), "c": In((2, 2))}, _gemm_ref()),
    _row(
        "_linalg_gemm_transposes_alpha_beta",
        lambda a, b, c: S._linalg_gemm(a, b, c, transpose_a=True, transpose_b=True, alpha=-1.5, beta=0.5),
        {"a": In((2, 3, 2)), "b": In((2, 4, 3)), "c": In((2, 2, 4))},
        _gemm_ref(True, True, -1.5, 0.5),
    ),
    _row(
        "_linalg_gemm_transpose_b_beta0",
        lambda a, b, c: S.linalg_gemm(a, b, c, transpose_b=True, beta=0.0),
        {"a": In((2, 3)), "b": In((2, 3)), "c": In((2, 2))},
        _gemm_ref(False, True, 1.0, 0.0),
    ),
    # rows on axis 0 of 3-d tensors: D[i, n, j] = sum_k A[i, n, k] B[k, n, j] + C[i, n, j]
    _row(
        "_linalg_gemm_axis0",
        lambda a, b, c: S._linalg_gemm(a, b, c, axis=0, alpha=2.0),
        {"a": In((2, 2, 3)), "b": In((3, 2, 2)), "c": In((2, 2, 2))},
        lambda a, b, c: 2.0 * np.einsum("ink,knj->inj", a, b) + c,
    ),
    # -- potrf: symmetric input, see the module docstring --------------------------------------------------
    _row(
        "_linalg_potrf",
        lambda a: S._linalg_potrf(_sym(a)),
        {"a": In((3, 3), sample=_spd((3, 3)))},
        lambda a: np.linalg.cholesky((a + _t(a)) / 2),
    ),
    _row(
        "_linalg_potrf_batched_upper",
        lambda a: S.linalg_potrf(_sym(a), lower=False),
        {"a": In((2, 3, 3), sample=_spd((2, 3, 3)))},
        lambda a: _t(np.linalg.cholesky((a + _t(a)) / 2)),
    ),
    # -- potri: inverse of A A^T (A^T A) from the triangle of A ----------------------------------------------
    _row(
        "_linalg_potri",
        S._linalg_potri,
        {"a": In((3, 3), sample=_lower_factor((3, 3)))},
        lambda a: np.linalg.inv(np.tril(a) @ _t(np.tril(a))),
    ),
    _row(
        "_linalg_potri_batched_upper",
        lambda a: S.linalg_potri(a, lower=False),
        {"a": In((2, 3, 3), sample=_lower_factor((2, 3, 3)))},
        lambda a: np.linalg.inv(_t(np.triu(a)) @ np.triu(a)),
    ),
    # -- trmm / trsm -----------------------------------------------------------------------------------------
    _row("_linalg_trmm", S._linalg_trmm, {"a": In((3, 3)), "b": In((3, 2))}, _trmm_ref()),
    _row(
        "_linalg_trmm_rightside_transpose_alpha",
        lambda a, b: S._linalg_trmm(a, b, rightside=True, transpose=True, alpha=-2.0),
        {"a": In((3, 3)), "b": In((2, 3))},
        _trmm_ref(True, True, True, -2.0),
    ),
    _row(
        "_linalg_trmm_batched_upper_transpose",
        lambda a, b: S.linalg_trmm(a, b, lower=False, transpose=True),
        {"a": In((2, 3, 3)), "b": In((2, 3, 2))},
        _trmm_ref(True, False, False),
    ),
    _row(
        "_linalg_trmm_upper_rightside",
        lambda a, b: S._linalg_trmm(a, b, lower=False, rightside=True),
        {"a": In((2, 2)), "b": In((3, 2))},
        _trmm_ref(False, True, False),
    ),
    _row("_linalg_trsm", S._linalg_trsm, {"a": In((3, 3), sample=_lower_factor((3, 3))), "b": In((3, 2))}, _trsm_ref()),
    _row(
        "_linalg_trsm_rightside_transpose_alpha",
        lambda a, b: S._linalg_trsm(a, b, rightside=True, transpose=True, alpha=0.5),
        {"a": In((3, 3), sample=_lower_factor((3, 3))), "b": In((2, 3))},
        _trsm_ref(True, True, True, 0.5),
    ),
    _row(
        "_linalg_trsm_batched_upper_transpose",
        lambda a, b: S.linalg_trsm(a, b, lower=False, transpose=True),
        {"a": In((2, 3, 3), sample=_lower_factor((2, 3, 3))), "b": In((2, 3, 2))},
        _trsm_ref(True, False, False),
    ),
    _row(
        "_linalg_trsm_upper_rightside_alpha",
        lambda a, b: S._linalg_trsm(a, b, lower=False, rightside=True, alpha=-1.5),
        {"a": In((2, 2), sample=_lower_factor((2, 2))), "b": In((3, 2))},
        _trsm_ref(False, True, False, -1.5),
    ),
    # -- syrk -------------------------------------------------------------------------------------------------
    _row("_linalg_syrk", S._linalg_syrk, {"a": In((2, 3))}, lambda a: a @ a.T),
    _row(
        "_linalg_syrk_batched_transpose_alpha",
        lambda a: S.linalg_syrk(a, transpose=True, alpha=-0.5),
        {"a": In((2, 3, 2))},
        lambda a: -0.5 * _t(a) @ a,
    ),
    # -- gelqf (Q, L), syevd (U, lambda) -------------------------------------------------------------------
    _row("_linalg_gelqf", S._linalg_gelqf, {"a": In((2, 3))}, _gelqf_ref),
    _row("_linalg_gelqf_batched", S.linalg_gelqf, {"a": In((2, 2, 4))}, _gelqf_ref),
    _row("_linalg_gelqf_square", S._linalg_gelqf, {"a": In((2, 2), sample=_well((2, 2)))}, _gelqf_ref),
    _row("_linalg_syevd", lambda a: S._linalg_syevd(_sym(a)), {"a": In((3, 3), sample=_eig_sym((3, 3)))}, _syevd_ref),
    _row(
        "_linalg_syevd_batched",
        lambda a: S._linalg_syevd(_sym(a)),
        {"a": In((2, 2, 2), sample=_eig_sym((2, 2, 2)))},
        _syevd_ref,
    ),
    # -- sumlogdiag, diagonals, triangles ---------------------------------------------------------------------
    _row(
        "_linalg_sumlogdiag",
        S._linalg_sumlogdiag,
        {"a": In((3, 3), sample=_lower_factor((3, 3)))},
        lambda a: _reduced(np.log(np.diag(a)).sum(), a),
    ),
    _row(
        "_linalg_sumlogdiag_batched",
        S.linalg_sumlogdiag,
        {"a": In((2, 2, 2), sample=_lower_factor((2, 2, 2)))},
        lambda a: np.log(np.diagonal(a, axis1=-2, axis2=-1)).sum(-1),
    ),
    _row("_linalg_extractdiag", S._linalg_extractdiag, {"a": In((3, 3))}, np.diag),
    _row(
        "_linalg_extractdiag_batched_offset1",
        lambda a: S.linalg_extractdiag(a, offset=1),
        {"a": In((2, 3, 3))},
        lambda a: np.diagonal(a, 1, -2, -1),
    ),
    _row(
        "_linalg_extractdiag_offset_neg2",
        lambda a: S._linalg_extractdiag(a, offset=-2),
        {"a": In((3, 3))},
        lambda a: np.diag(a, -2),
    ),
    _row("_linalg_makediag", S._linalg_makediag, {"a": In((3,))}, np.diag),
    _row(
        "_linalg_makediag_batched_offset_neg1",
        lambda a: S.linalg_makediag(a, offset=-1),
        {"a": In((2, 2))},
        _makediag_ref(-1),
    ),
    _row("_linalg_makediag_offset2", lambda a: S._linalg_makediag(a, offset=2), {"a": In((1, 2))}, _makediag_ref(2)),
    _row("_linalg_extracttrian", S._linalg_extracttrian, {"a": In((3, 3))}, _extracttrian_ref()),
    _row(
        "_linalg_extracttrian_batched_upper",
        lambda a: S.linalg_extracttrian(a, lower=False),
        {"a": In((2, 3, 3))},
        _extracttrian_ref(0, False),
    ),
    _row(
        "_linalg_extracttrian_offset1",
        lambda a: S._linalg_extracttrian(a, offset=1),
        {"a": In((4, 4))},
        _extracttrian_ref(1),
    ),
    _row(
        "_linalg_extracttrian_offset_neg1",
        lambda a: S._linalg_extracttrian(a, offset=-1),
        {"a": In((2, 3, 3))},
        _extracttrian_ref(-1),
    ),
    _row("_linalg_maketrian", S._linalg_maketrian, {"a": In((6,))}, _maketrian_ref()),
    _row(
        "_linalg_maketrian_batched_upper",
        lambda a: S.linalg_maketrian(a, lower=False),
        {"a": In((2, 3))},
        _maketrian_ref(0, False),
    ),
    _row("_linalg_maketrian_offset1", lambda a: S._linalg_maketrian(a, offset=1), {"a": In((3,))}, _maketrian_ref(1)),
    _row(
        "_linalg_maketrian_batched_offset_neg2",
        lambda a: S._linalg_maketrian(a, offset=-2),
        {"a": In((2, 3))},
        _maketrian_ref(-2),
    ),
    # -- inverse, det, slogdet --------------------------------------------------------------------------------
    _row("_linalg_inverse", S._linalg_inverse, {"a": In((3, 3), sample=_well((3, 3)))}, np.linalg.inv),
    _row("_linalg_inverse_batched", S.linalg_inverse, {"a": In((2, 2, 2), sample=_well((2, 2, 2)))}, np.linalg.inv),
    _row(
        "_linalg_det", S._linalg_det, {"a": In((3, 3), sample=_well((3, 3)))}, lambda a: _reduced(np.linalg.det(a), a)
    ),
    _row(
        "_linalg_det_batched_negative", S.linalg_det, {"a": In((2, 2, 2), sample=_well((2, 2, 2), -1.0))}, np.linalg.det
    ),
    _row(
        "_linalg_slogdet",
        S._linalg_slogdet,
        {"a": In((3, 3), sample=_well((3, 3), -1.0))},
        lambda a: tuple(_reduced(x, a) for x in np.linalg.slogdet(a)),
    ),
    _row(
        "_linalg_slogdet_batched",
        S.linalg_slogdet,
        {"a": In((2, 2, 2), sample=_well((2, 2, 2)))},
        lambda a: tuple(np.linalg.slogdet(a)),
    ),
]
