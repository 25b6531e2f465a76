"""Linear algebra: dot (MXNet's 1-D/2-D/N-D semantics), batch_dot, linalg_gemm2 and FullyConnected.

``dot`` treats each operand as a matrix (MXNet's DotShape): without ``transpose_a``
the lhs is ``(prod(shape[:-1]), shape[-1])``, with it ``(shape[0], prod(shape[1:]))``
transposed; symmetrically for the rhs (contracting its first axis unless
``transpose_b``). A 1-d operand contributes no output dims; 1-d . 1-d gives shape
``(1,)`` and allows no transpose. Its gradients are two hidden ops, ``_dot_grad_lhs``
and ``_dot_grad_rhs``, whose own gradients are again ``dot``/``_dot_grad_*``: the
trio is closed under differentiation, so every order of derivative works.

``batch_dot`` and ``linalg_gemm2`` differentiate into themselves (with flipped
transpose flags), so they are closed under differentiation too.

float16 products are accumulated in float32 and rounded back.
"""

from __future__ import annotations

import math

import numpy as np

from .. import util
from ..base import ParamError, ShapeError
from ..opdef import Param, adjoint_shape, expect_input_shape, float_inputs, output_like, register, wait_for_inputs


def _mm(xp, a, b):
    """a @ b keeping the input dtype; float16 accumulates in float32."""
    if a.dtype == np.float16:
        return (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    return a @ b


def _forward_stype_prepare(opname):
    def prepare(params, name):
        st = params["forward_stype"]
        if st is not None and st != "default":
            raise ParamError(
                f"{opname} {name!r}: forward_stype={st!r} (sparse storage) is not supported; use None or 'default'"
            )
        return params

    return prepare


_DOT_PARAMS = {
    "transpose_a": Param("bool", False),
    "transpose_b": Param("bool", False),
    "forward_stype": Param("str", None, optional=True, choices=("default", "row_sparse", "csr")),
}


def _split(shape, transposed, lhs, where="dot"):
    """(outer dims, contraction size) of one operand seen as a matrix."""
    shape = tuple(shape)
    if len(shape) == 0:
        raise ShapeError(f"{where}: operands must be at least 1-d (scalar tensors are not supported)")
    if lhs != transposed:  # lhs as-is or rhs transposed: contract the last axis
        return shape[:-1], shape[-1]
    return shape[1:], shape[0]


def dot_shapes(ashape, bshape, ta, tb, where="dot"):
    if len(ashape) == 1 and len(bshape) == 1 and (ta or tb):
        raise ShapeError(f"{where}: cannot transpose vectors (lhs {tuple(ashape)}, rhs {tuple(bshape)})")
    a_outer, ka = _split(ashape, ta, True, where)
    b_outer, kb = _split(bshape, tb, False, where)
    if ka != kb:
        raise ShapeError(
            f"{where}: contraction dimensions differ: lhs {tuple(ashape)} (transpose_a={ta}) gives {ka}, "
            f"rhs {tuple(bshape)} (transpose_b={tb}) gives {kb}"
        )
    out = tuple(a_outer) + tuple(b_outer)
    return a_outer, b_outer, ka, out or (1,)


def _mat(x, transposed, lhs):
    """The 2-D matrix an operand stands for (a view where possible)."""
    outer, k = _split(x.shape, transposed, lhs)
    m = math.prod(outer)
    if lhs:
        return x.reshape(k, m).T if transposed else x.reshape(m, k)
    return x.reshape(m, k).T if transposed else x.reshape(k, m)


def _dot_fwd(xp, a, b, transpose_a, transpose_b, forward_stype=None, out=None):
    if a.ndim == 2 == b.ndim and a.dtype != np.float16:
        y = _dot2(xp, a, b, transpose_a, transpose_b, out)
        if y is not None:
            return y
    _, _, _, shape = dot_shapes(a.shape, b.shape, transpose_a, transpose_b)
    a2, b2 = _mat(a, transpose_a, True), _mat(b, transpose_b, False)
    if (
        out is not None
        and out.shape == shape
        and out.flags.c_contiguous
        and out.dtype == a.dtype == b.dtype != np.float16
    ):
        xp.matmul(a2, b2, out=out.reshape(a2.shape[0], b2.shape[1]))
        return out
    return _mm(xp, a2, b2).reshape(shape)


def _dot2(xp, a, b, ta, tb, out):
    """The common case of ``_dot_fwd`` (matrix by matrix, no float16) without its general shape
    bookkeeping: the same views and the same matmul call, so the same result. None where the
    contraction sizes differ (the general path raises the ShapeError)."""
    a2 = a.T if ta else a
    b2 = b.T if tb else b
    if a2.shape[1] != b2.shape[0]:
        return None
    if (
        out is not None
        and out.shape == (a2.shape[0], b2.shape[1])
        and out.flags.c_contiguous
        and out.dtype == a.dtype == b.dtype
    ):
        return xp.matmul(a2, b2, out=out)
    return a2 @ b2


def _dot_specialize(xp, in_types, transpose_a, transpose_b, forward_stype=None):
    """Kernel: ``_dot_fwd`` called positionally with the flags bound, the 2-D case first (the plan's
    call of a kernel skips the keyword-bound partial; exact for every dtype since float16 and N-d
    operands go the general way)."""
    ta, tb = transpose_a, transpose_b

    def kernel(a, b, out=None):  # out=: the plan's gradient buffer, as _dot_fwd takes it
        if a.ndim == 2 == b.ndim and a.dtype != np.float16:
            y = _dot2(xp, a, b, ta, tb, out)
            if y is not None:
                return y
        return _dot_fwd(xp, a, b, ta, tb, out=out)

    return kernel, (), ()


@wait_for_inputs(0, 1)
def _dot_shape(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    return in_shapes, [dot_shapes(a, b, params["transpose_a"], params["transpose_b"], where)[3]]


def _flags(n):
    return {"transpose_a": n.params["transpose_a"], "transpose_b": n.params["transpose_b"]}


def _dot_grad(F, n, g):
    # Y = A B (as matrices)  ->  dA = G B^T,  dB = A^T G  (transposes handled inside the hidden ops)
    a, b = n.inputs
    return [F._dot_grad_lhs(g[0], a, b, **_flags(n)), F._dot_grad_rhs(g[0], a, b, **_flags(n))]


register(
    "dot",
    inputs=("lhs", "rhs"),
    params=dict(_DOT_PARAMS),
    prepare=_forward_stype_prepare("dot"),
    forward=_dot_fwd,
    specialize=_dot_specialize,
    accepts_out=True,
    infer_shape=_dot_shape,
    infer_type=float_inputs("lhs", "rhs"),
    gradient=_dot_grad,
    doc="Matrix product with MXNet's N-d and transpose semantics.",
)


def _grad_lhs_fwd(xp, g, a, b, transpose_a, transpose_b):
    """dA = G B^T, written back in ``a``'s layout (``a`` gives the shape only)."""
    b2 = _mat(b, transpose_b, False)
    g2 = g.reshape(-1, b2.shape[1])
    da = _mm(xp, g2, b2.T)
    return (da.T if transpose_a else da).reshape(a.shape)


def _grad_rhs_fwd(xp, g, a, b, transpose_a, transpose_b):
    """dB = A^T G, written back in ``b``'s layout (``b`` gives the shape only)."""
    a2 = _mat(a, transpose_a, True)
    g2 = g.reshape(a2.shape[0], -1)
    db = _mm(xp, a2.T, g2)
    return (db.T if transpose_b else db).reshape(b.shape)


def _grad_shape(which):
    def rule(params, in_shapes, out_shapes, where):
        return in_shapes, [in_shapes[which]]

    return rule


# L(G, B) = G B^T is bilinear. With cotangent H (shaped like A):
#   d/dG <H, G B^T> = H B      = dot(H, B)            (H in A's layout)
#   d/dB <H, G B^T> = H^T G    = _dot_grad_rhs(G, H, B)
register(
    "_dot_grad_lhs",
    inputs=("ograd", "lhs", "rhs"),
    params={"transpose_a": Param("bool", False), "transpose_b": Param("bool", False)},
    forward=_grad_lhs_fwd,
    infer_shape=adjoint_shape("dot", (1, 2), like=1),
    gradient=lambda F, n, g: [
        F.dot(g[0], n.inputs[2], **_flags(n)),
        None,
        F._dot_grad_rhs(n.inputs[0], g[0], n.inputs[2], **_flags(n)),
    ],
)
# R(A, G) = A^T G. With cotangent H (shaped like B):
#   d/dG <H, A^T G> = A H      = dot(A, H)
#   d/dA <H, A^T G> = G H^T    = _dot_grad_lhs(G, A, H)
register(
    "_dot_grad_rhs",
    inputs=("ograd", "lhs", "rhs"),
    params={"transpose_a": Param("bool", False), "transpose_b": Param("bool", False)},
    forward=_grad_rhs_fwd,
    infer_shape=_grad_shape(2),
    gradient=lambda F, n, g: [
        F.dot(n.inputs[1], g[0], **_flags(n)),
        F._dot_grad_lhs(n.inputs[0], n.inputs[1], g[0], **_flags(n)),
        None,
    ],
)


# ----------------------------------------------------------------------------
# batch_dot and linalg_gemm2: batched op(A) op(B)
# ----------------------------------------------------------------------------


def matmul_grads(make, a, b, ta, tb, g):
    """Gradients of Y = op(A) op(B) per matrix, each again a product ``make(x, y, ta, tb)``.

    none:  dA = G B^T          dB = A^T G
    ta:    Y = A^T B   ->  dA = (G B^T)^T = B G^T,     dB = A G
    tb:    Y = A B^T   ->  dA = G B,                   dB = (A^T G)^T = G^T A
    both:  Y = A^T B^T ->  dA = (G B)^T = B^T G^T,     dB = (A G)^T = G^T A^T
    """
    if not ta and not tb:
        return make(g, b, False, True), make(a, g, True, False)
    if ta and not tb:
        return make(b, g, False, True), make(a, g, False, False)
    if not ta and tb:
        return make(g, b, False, False), make(g, a, True, False)
    return make(b, g, True, True), make(g, a, True, True)


def _batch_dot_out(a, b, ta, tb, where):
    if len(a) < 3 or len(a) != len(b):
        raise ShapeError(
            f"{where}: batch_dot needs N-d by N-d inputs with N >= 3, got lhs {tuple(a)} and rhs {tuple(b)}"
        )
    if tuple(a[:-2]) != tuple(b[:-2]):
        raise ShapeError(f"{where}: the leading batch dimensions must be equal: lhs {tuple(a)} vs rhs {tuple(b)}")
    m, ka = (a[-1], a[-2]) if ta else (a[-2], a[-1])
    kb, n = (b[-1], b[-2]) if tb else (b[-2], b[-1])
    if ka != kb:
        raise ShapeError(
            f"{where}: matrix dims do not match: lhs {tuple(a)} (transpose_a={ta}) has {ka} columns, "
            f"rhs {tuple(b)} (transpose_b={tb}) has {kb} rows"
        )
    return tuple(a[:-2]) + (m, n)


@wait_for_inputs(0, 1)
def _batch_dot_shape(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    return in_shapes, [_batch_dot_out(a, b, params["transpose_a"], params["transpose_b"], where)]


def _t(xp, x, flag):
    return xp.swapaxes(x, -1, -2) if flag else x


def _batch_dot_fwd(xp, a, b, transpose_a, transpose_b, forward_stype=None):
    _batch_dot_out(a.shape, b.shape, transpose_a, transpose_b, "batch_dot")
    return _mm(xp, _t(xp, a, transpose_a), _t(xp, b, transpose_b))


def _batch_dot_grad(F, n, g):
    def make(x, y, ta, tb):
        return F.batch_dot(x, y, transpose_a=ta, transpose_b=tb)

    a, b = n.inputs
    return list(matmul_grads(make, a, b, n.params["transpose_a"], n.params["transpose_b"], g[0]))


register(
    "batch_dot",
    inputs=("lhs", "rhs"),
    params=dict(_DOT_PARAMS),
    prepare=_forward_stype_prepare("batch_dot"),
    forward=_batch_dot_fwd,
    infer_shape=_batch_dot_shape,
    infer_type=float_inputs("lhs", "rhs"),
    gradient=_batch_dot_grad,
    doc="Batched matrix product of N-d arrays (N >= 3) over the last two axes, optional transposes.",
)


def gemm2_out(params, a, b, where):
    ta, tb = params["transpose_a"], params["transpose_b"]
    nd = len(a)
    if nd < 2 or len(b) != nd:
        raise ShapeError(f"{where}: inputs 'A' {tuple(a)} and 'B' {tuple(b)} must have the same ndim >= 2")
    axis = params["axis"] + nd if params["axis"] < 0 else params["axis"]
    if not 0 <= axis < nd - 1:
        raise ShapeError(f"{where}: invalid row axis {params['axis']} for {nd}-d inputs (must be < ndim - 1)")
    for i in range(nd - 1):
        if i != axis and a[i] != b[i]:
            raise ShapeError(
                f"{where}: shapes of 'A' {tuple(a)} and 'B' {tuple(b)} must agree except on the row axis "
                f"{axis} and the last axis"
            )
    ka = a[axis] if ta else a[-1]
    kb = b[-1] if tb else b[axis]
    if ka != kb:
        raise ShapeError(
            f"{where}: incompatible matrix dimensions: op(A) of {tuple(a)} has {ka} columns, op(B) of "
            f"{tuple(b)} has {kb} rows (transpose_a={ta}, transpose_b={tb}, axis={params['axis']})"
        )
    out = list(a)
    out[axis] = a[-1] if ta else a[axis]
    out[-1] = b[axis] if tb else b[-1]
    return axis, tuple(out)


@wait_for_inputs(0, 1)
def _gemm2_shape(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    return in_shapes, [gemm2_out(params, a, b, where)[1]]


def gemm2_fwd(xp, a, b, transpose_a, transpose_b, alpha, axis):
    p = {"transpose_a": transpose_a, "transpose_b": transpose_b, "axis": axis}
    ax, _ = gemm2_out(p, a.shape, b.shape, "linalg_gemm2")
    # rows along ``axis``, columns along the last axis: move the rows next to the columns,
    # multiply the batch of matrices, and move them back (MXNet: swapaxes/gemm/swapaxes)
    a2 = xp.swapaxes(a, ax, -2)
    b2 = xp.swapaxes(b, ax, -2)
    out = _mm(xp, _t(xp, a2, transpose_a), _t(xp, b2, transpose_b))
    if alpha != 1.0:
        out = out * out.dtype.type(alpha)
    return xp.swapaxes(out, ax, -2)


def _gemm2_grad(F, n, g):
    # C = alpha op(A) op(B) per matrix; the gradients are gemm2 products scaled by the same alpha
    p = n.params

    def make(x, y, ta, tb):
        return F.linalg_gemm2(x, y, transpose_a=ta, transpose_b=tb, alpha=p["alpha"], axis=p["axis"])

    a, b = n.inputs
    return list(matmul_grads(make, a, b, p["transpose_a"], p["transpose_b"], g[0]))


register(
    "_linalg_gemm2",
    aliases=("linalg_gemm2",),
    inputs=("A", "B"),
    params={
        "transpose_a": Param("bool", False),
        "transpose_b": Param("bool", False),
        "alpha": Param("float", 1.0),
        "axis": Param("int", -2),
    },
    forward=gemm2_fwd,
    infer_shape=_gemm2_shape,
    infer_type=float_inputs("A", "B"),
    gradient=_gemm2_grad,
    doc="alpha * op(A) * op(B) for each matrix (rows along ``axis``, columns along the last axis).",
)


# ----------------------------------------------------------------------------
# FullyConnected
# ----------------------------------------------------------------------------


def _fc_inputs(params):
    return ["data", "weight"] if params["no_bias"] else ["data", "weight", "bias"]


def _fc_prepare(params, name):
    if params["num_hidden"] < 1:
        raise ParamError(f"FullyConnected {name!r}: num_hidden must be positive, got {params['num_hidden']}")
    return params


def _fc_shape(params, in_shapes, out_shapes, where):
    x = in_shapes[0]
    h = params["num_hidden"]
    ins = list(in_shapes)
    if not params["no_bias"]:
        # MXNet accepts the bias as (num_hidden,) or (num_hidden, 1)
        if ins[2] is not None and tuple(ins[2]) not in ((h,), (h, 1)):
            raise ShapeError(
                f"{where}: input 'bias' has shape {tuple(ins[2])}, expected {(h,)} or {(h, 1)} (num_hidden={h})"
            )
        if ins[2] is None:
            ins[2] = (h,)
    if x is None:
        return ins, out_shapes
    if len(x) == 0:
        raise ShapeError(f"{where}: input 'data' must be at least 1-d")
    if params["flatten"]:
        d = math.prod(x[1:])
        out = (x[0], h)
    else:
        d = x[-1]
        out = tuple(x[:-1]) + (h,)
    note = f" (num_hidden={h}, data {tuple(x)}, flatten={params['flatten']})"
    expect_input_shape(ins, 1, "weight", (h, d), where, note)
    o = out_shapes[0]
    if util.zeros_are_unknown() and o is not None and len(o) == len(out):
        # MXNet's backward step: the output's leading dimensions are the data's (batch size, and every axis
        # but the last without flatten); a 0 (unknown) data dimension takes them
        lead = 1 if params["flatten"] else len(x) - 1
        ins[0] = tuple(o[i] if i < lead and x[i] == 0 else x[i] for i in range(len(x)))
    return ins, [out]


def _fc_fwd(xp, x, w, b=None, *, num_hidden, no_bias, flatten):
    x2 = x.reshape(x.shape[0], -1) if flatten else x
    y = _mm(xp, x2, w.T)
    if b is not None:
        y += b.reshape(-1)
    return y


def _fc_specialize(xp, in_types, num_hidden, no_bias, flatten):
    """Kernel: ``_fc_fwd`` without the keyword-bound partial; flattened 2-D data of a non-float16
    dtype runs the same three numpy calls inline, anything else the general forward."""

    def kernel(x, w, b=None):
        if not (flatten and x.ndim == 2 and x.dtype != np.float16):
            return _fc_fwd(xp, x, w, b, num_hidden=num_hidden, no_bias=no_bias, flatten=flatten)
        y = x.reshape(x.shape[0], -1) @ w.T  # a view of 2-d x (kept: it rejects an empty batch alike)
        if b is not None:
            y += b.reshape(-1)
        return y

    return kernel, (), ()


def _fc_grad(F, n, g):
    # y = x2 W^T + b  ->  dx2 = g W,  dW = g^T x2,  db = sum of g over every axis but the last
    x, w = n.inputs[0], n.inputs[1]
    gy = g[0]
    if n.params["flatten"]:
        dx = F.reshape_like(F.dot(gy, w), x)
        dw = F.dot(gy, F.Flatten(x), transpose_a=True)
        db = F.sum(gy, axis=0)
    else:
        dx = F.dot(gy, w)
        g2 = F.Reshape(gy, shape=(-1, 0), reverse=True)
        dw = F.dot(g2, F.Reshape(x, shape=(-1, 0), reverse=True), transpose_a=True)
        db = F.sum(g2, axis=0)
    grads = [dx, dw]
    if not n.params["no_bias"]:
        grads.append(F.reshape_like(db, n.inputs[2]))  # bias may be (num_hidden, 1)
    return grads


register(
    "FullyConnected",
    inputs=_fc_inputs,
    params={
        "num_hidden": Param("int"),
        "no_bias": Param("bool", False),
        "flatten": Param("bool", True),
    },
    prepare=_fc_prepare,
    forward=_fc_fwd,
    specialize=_fc_specialize,
    infer_shape=_fc_shape,
    infer_type=float_inputs("data"),
    gradient=_fc_grad,
    doc="y = x W^T + b (x flattened to 2-d unless flatten=False).",
)


# ----------------------------------------------------------------------------
# khatri_rao: the column-wise Kronecker product
# ----------------------------------------------------------------------------
# C[(i_1, ..., i_n), j] = prod_m A_m[i_m, j] (rows in row-major order of (i_1, ..., i_n)). C is linear in
# each A_k, so dA_k[i_k, j] = sum over the other indices of G[(i_1..i_n), j] prod_{m != k} A_m[i_m, j]
# =: T_k(G, A) (``_khatri_rao_adjoint``, index k). T_k is linear in G and in each A_m (m != k), so its own
# gradients are again these two ops: for a head V on T_k's output,
#   d/dG  <T_k(G, A), V> = khatri_rao(A with A_k := V),
#   d/dA_m <T_k(G, A), V> = T_m(G, A with A_k := V)   (m != k),
# and A_k itself only lends its row count. MXNet 1.9.1 registers no gradient for khatri_rao.


def _kr_letters(n):
    return [chr(ord("a") + i) for i in range(n)]


def _khatri_rao_fwd(xp, *mats, num_args):
    letters = _kr_letters(len(mats))
    spec = ",".join(f"{c}z" for c in letters) + "->" + "".join(letters) + "z"
    out = xp.einsum(spec, *mats)
    return out.reshape(-1, mats[0].shape[1])


@wait_for_inputs()
def _khatri_rao_shape(params, in_shapes, out_shapes, where):
    for k, s in enumerate(in_shapes):
        if len(s) != 2:
            raise ShapeError(f"{where}: input 'arg{k}' must be a matrix, got shape {tuple(s)}")
        if s[1] != in_shapes[0][1]:
            raise ShapeError(
                f"{where}: every input needs {in_shapes[0][1]} columns (those of 'arg0'), 'arg{k}' has shape {tuple(s)}"
            )
    return in_shapes, [(int(np.prod([s[0] for s in in_shapes])), in_shapes[0][1])]


def _khatri_rao_grad(F, n, g):
    mats = n.inputs
    return [F._khatri_rao_adjoint(g[0], *mats, index=k, num_args=len(mats)) for k in range(len(mats))]


register(
    "khatri_rao",
    variadic="num_args",
    params={"num_args": Param("int")},
    forward=_khatri_rao_fwd,
    infer_shape=_khatri_rao_shape,
    infer_type=float_inputs(),
    gradient=_khatri_rao_grad,
    doc="Column-wise Kronecker product of matrices with the same number of columns.",
)


def _kr_adjoint_fwd(xp, g, *mats, index, num_args):
    letters = _kr_letters(len(mats))
    others = [(c, m) for k, (c, m) in enumerate(zip(letters, mats)) if k != index]
    grid = g.reshape(tuple(m.shape[0] for m in mats) + (g.shape[-1],))
    spec = "".join(letters) + "z," + ",".join(f"{c}z" for c, _ in others) + f"->{letters[index]}z"
    return xp.einsum(spec, grid, *[m for _, m in others])


def _kr_adjoint_grad(F, n, g):
    grad_out, mats, k = n.inputs[0], list(n.inputs[1:]), n.params["index"]
    swapped = mats[:k] + [g[0]] + mats[k + 1 :]
    d_mats = [
        None if m == k else F._khatri_rao_adjoint(grad_out, *swapped, index=m, num_args=len(mats))
        for m in range(len(mats))
    ]
    return [F.khatri_rao(*swapped, num_args=len(mats))] + d_mats


register(
    "_khatri_rao_adjoint",
    inputs=lambda p: ["ograd"] + [f"arg{i}" for i in range(p["num_args"])],
    params={"index": Param("int"), "num_args": Param("int")},
    forward=_kr_adjoint_fwd,
    infer_shape=lambda params, in_shapes, out_shapes, where: (in_shapes, [in_shapes[1 + params["index"]]]),
    infer_type=output_like(0),
    gradient=_kr_adjoint_grad,
    doc="khatri_rao's gradient for input ``index`` (hidden).",
)
