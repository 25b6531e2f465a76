"""OpInfo rows for the matrix-product operators (symgrad/ops/matrix.py): dot (2-d, 1-d and N-d operands,
every transpose), batch_dot, linalg_gemm2 (transposes, alpha, a non-default row axis), FullyConnected
(flatten or not, bias shapes) and khatri_rao. References are plain numpy (``@``, tensordot, einsum, kron)
written from MXNet 1.9's DotShape, BatchDotShape and LaMatrixMultMacOpShape.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

# float16 products are accumulated in float32 and rounded once; sums of a few terms
F16 = {np.float16: (2e-2, 2e-2)}


def _bt(x):
    return np.swapaxes(x, -1, -2)


def _khatri_rao(*mats):
    return np.stack([_kron_all([m[:, j] for m in mats]) for j in range(mats[0].shape[1])], axis=1)


def _kron_all(vectors):
    out = np.ones(1)
    for v in vectors:
        out = np.kron(out, v)
    return out


OPS = [
    # -- dot -----------------------------------------------------------------------------------------
    OpInfo("dot", S.dot, {"a": In((2, 3)), "b": In((3, 4))}, lambda a, b: a @ b),
    OpInfo(
        "dot_transpose_a",
        lambda a, b: S.dot(a, b, transpose_a=True),
        {"a": In((3, 2)), "b": In((3, 4))},
        lambda a, b: a.T @ b,
    ),
    OpInfo(
        "dot_transpose_b",
        lambda a, b: S.dot(a, b, transpose_b=True),
        {"a": In((2, 3)), "b": In((4, 3))},
        lambda a, b: a @ b.T,
    ),
    OpInfo("dot_1d", S.dot, {"a": In((3,)), "b": In((3,))}, lambda a, b: np.dot(a, b).reshape(1)),
    OpInfo("dot_nd", S.dot, {"a": In((2, 2, 3)), "b": In((3, 2, 2))}, lambda a, b: np.tensordot(a, b, 1)),
    # 1-D operands contribute no output dims
    OpInfo("dot_1d_2d", S.dot, {"a": In((3,)), "b": In((3, 4))}, lambda a, b: a @ b, fwd_tol=F16),
    OpInfo("dot_2d_1d", S.dot, {"a": In((2, 3)), "b": In((3,))}, lambda a, b: a @ b, fwd_tol=F16),
    OpInfo(
        "dot_1d_transpose_b",
        lambda a, b: S.dot(a, b, transpose_b=True),
        {"a": In((3,)), "b": In((4, 3))},
        lambda a, b: b @ a,
        fwd_tol=F16,
    ),
    OpInfo(
        "dot_both_transposed",
        lambda a, b: S.dot(a, b, transpose_a=True, transpose_b=True),
        {"a": In((3, 2)), "b": In((4, 3))},
        lambda a, b: a.T @ b.T,
        fwd_tol=F16,
    ),
    # N-D with transpose_a: lhs (3, 2, 2) is the matrix (3, 4) transposed -> contract its first axis
    OpInfo(
        "dot_nd_transpose_a",
        lambda a, b: S.dot(a, b, transpose_a=True),
        {"a": In((3, 2, 2)), "b": In((3, 2))},
        lambda a, b: np.tensordot(a, b, axes=([0], [0])),
        fwd_tol=F16,
    ),
    # N-D with transpose_b: rhs (2, 2, 3) is the matrix (4, 3) transposed -> contract its last axis
    OpInfo(
        "dot_nd_transpose_b",
        lambda a, b: S.dot(a, b, transpose_b=True),
        {"a": In((2, 3)), "b": In((2, 2, 3))},
        lambda a, b: np.tensordot(a, b, axes=([1], [2])),
        fwd_tol=F16,
    ),
    # -- batch_dot ----------------------------------------------------------------------------------
    OpInfo("batch_dot", S.batch_dot, {"a": In((2, 2, 3)), "b": In((2, 3, 2))}, lambda a, b: a @ b, fwd_tol=F16),
    OpInfo(
        "batch_dot_transpose_a",
        lambda a, b: S.batch_dot(a, b, transpose_a=True),
        {"a": In((2, 3, 2)), "b": In((2, 3, 2))},
        lambda a, b: _bt(a) @ b,
        fwd_tol=F16,
    ),
    OpInfo(
        "batch_dot_transpose_b",
        lambda a, b: S.batch_dot(a, b, transpose_b=True),
        {"a": In((2, 2, 3)), "b": In((2, 4, 3))},
        lambda a, b: a @ _bt(b),
        fwd_tol=F16,
    ),
    OpInfo(
        "batch_dot_both_4d",
        lambda a, b: S.batch_dot(a, b, transpose_a=True, transpose_b=True),
        {"a": In((2, 1, 3, 2)), "b": In((2, 1, 2, 3))},
        lambda a, b: _bt(a) @ _bt(b),
        fwd_tol=F16,
    ),
    # -- linalg_gemm2: alpha * op(A) op(B), rows along ``axis`` -------------------------------------
    OpInfo("linalg_gemm2", S.linalg_gemm2, {"a": In((2, 3)), "b": In((3, 2))}, lambda a, b: a @ b, fwd_tol=F16),
    OpInfo(
        "linalg_gemm2_transposes_alpha",
        lambda a, b: S.linalg_gemm2(a, b, transpose_a=True, transpose_b=True, alpha=-1.5),
        {"a": In((2, 3, 2)), "b": In((2, 4, 3))},
        lambda a, b: -1.5 * _bt(a) @ _bt(b),
        fwd_tol=F16,
    ),
    OpInfo(
        "linalg_gemm2_transpose_b",
        lambda a, b: S._linalg_gemm2(a, b, transpose_b=True, alpha=2.0),
        {"a": In((2, 3)), "b": In((4, 3))},
        lambda a, b: 2.0 * a @ b.T,
        fwd_tol=F16,
    ),
    # rows on axis 0 of 3-d tensors: C[i, n, j] = sum_k A[i, n, k] B[k, n, j]
    OpInfo(
        "linalg_gemm2_axis0",
        lambda a, b: S.linalg_gemm2(a, b, axis=0),
        {"a": In((2, 2, 3)), "b": In((3, 2, 2))},
        lambda a, b: np.einsum("ink,knj->inj", a, b),
        fwd_tol=F16,
    ),
    OpInfo(
        "linalg_gemm2_axis_neg3_transpose_a",
        lambda a, b: S.linalg_gemm2(a, b, axis=-3, transpose_a=True),
        {"a": In((3, 2, 2)), "b": In((3, 2, 2))},
        lambda a, b: np.einsum("kni,knj->inj", a, b),
        fwd_tol=F16,
    ),
    # -- FullyConnected ------------------------------------------------------------------------------
    OpInfo(
        "FullyConnected",
        lambda x, w, b: S.FullyConnected(x, w, b, num_hidden=4),
        {"x": In((2, 3, 2)), "w": In((4, 6)), "b": In((4,))},
        lambda x, w, b: x.reshape(2, -1) @ w.T + b,
    ),
    OpInfo(
        "FullyConnected_no_flatten",
        lambda x, w: S.FullyConnected(x, w, num_hidden=4, no_bias=True, flatten=False),
        {"x": In((2, 3, 2)), "w": In((4, 2))},
        lambda x, w: x @ w.T,
    ),
    OpInfo(
        "FullyConnected_bias_column",
        lambda x, w, b: S.FullyConnected(x, w, b, num_hidden=3),
        {"x": In((2, 4)), "w": In((3, 4)), "b": In((3, 1))},
        lambda x, w, b: x @ w.T + b.ravel(),
        fwd_tol=F16,
    ),
    OpInfo(
        "FullyConnected_1d_data_flatten",
        lambda x, w: S.FullyConnected(x, w, num_hidden=2, no_bias=True),
        {"x": In((3,)), "w": In((2, 1))},
        lambda x, w: x[:, None] @ w.T,
        fwd_tol=F16,
    ),
    OpInfo(
        "FullyConnected_1d_data_no_flatten",
        lambda x, w, b: S.FullyConnected(x, w, b, num_hidden=2, flatten=False),
        {"x": In((3,)), "w": In((2, 3)), "b": In((2,))},
        lambda x, w, b: w @ x + b,
        fwd_tol=F16,
    ),
    OpInfo(
        "FullyConnected_4d_no_flatten",
        lambda x, w, b: S.FullyConnected(x, w, b, num_hidden=2, flatten=False),
        {"x": In((2, 1, 2, 3)), "w": In((2, 3)), "b": In((2,))},
        lambda x, w, b: x @ w.T + b,
        fwd_tol=F16,
    ),
    # -- khatri_rao: column-wise Kronecker product --------------------------------------------------
    OpInfo("khatri_rao_two", S.khatri_rao, {"a": In((2, 3)), "b": In((3, 3))}, _khatri_rao, fwd_tol=F16),
    OpInfo(
        "khatri_rao_three", S.khatri_rao, {"a": In((2, 2)), "b": In((1, 2)), "c": In((3, 2))}, _khatri_rao, fwd_tol=F16
    ),
]
