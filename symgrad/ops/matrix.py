"""Linear algebra: dot (MXNet's 1-D/2-D/N-D semantics) and FullyConnected.

``dot`` treats each operand as a matrix: without ``transpose_a`` the lhs is
``(prod(shape[:-1]), shape[-1])``, with it ``(shape[0], prod(shape[1:]))``
transposed; symmetrically for the rhs. Its gradients are two hidden ops,
``_dot_grad_lhs`` and ``_dot_grad_rhs``, whose own gradients are again
``dot``/``_dot_grad_*``: the trio is closed under differentiation, so every
order of derivative works.
"""

from __future__ import annotations

import math

from ..base import ShapeError
from .registry import Param, register

_DOT_PARAMS = {
    "transpose_a": Param("bool", False),
    "transpose_b": Param("bool", False),
    "forward_stype": Param("str", None, optional=True),
}


def _split(shape, transposed, lhs):
    """(outer dims, contraction size) of one operand seen as a matrix."""
    shape = tuple(shape)
    if len(shape) == 0:
        raise ShapeError("dot: operands must be at least 1-d")
    if lhs != transposed:  # lhs as-is or rhs transposed: contract the last axis
        return shape[:-1], shape[-1]
    return shape[1:], shape[0]


def dot_shapes(ashape, bshape, ta, tb, where="dot"):
    a_outer, ka = _split(ashape, ta, lhs=True)
    b_outer, kb = _split(bshape, tb, lhs=False)
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


def _dot_fwd(xp, a, b, transpose_a, transpose_b, forward_stype=None):
    _, _, _, out = dot_shapes(a.shape, b.shape, transpose_a, transpose_b)
    return (_mat(a, transpose_a, True) @ _mat(b, transpose_b, False)).reshape(out)


def _dot_shape(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    if a is None or b is None:
        return in_shapes, out_shapes
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
    forward=_dot_fwd,
    infer_shape=_dot_shape,
    gradient=_dot_grad,
    doc="Matrix product with MXNet's N-d and transpose semantics.",
)


def _grad_lhs_fwd(xp, g, a, b, transpose_a, transpose_b):
    """dA = G B^T, written back in ``a``'s layout (``a`` gives the shape only)."""
    b2 = _mat(b, transpose_b, False)
    g2 = g.reshape(-1, b2.shape[1])
    da = g2 @ b2.T
    return (da.T if transpose_a else da).reshape(a.shape)


def _grad_rhs_fwd(xp, g, a, b, transpose_a, transpose_b):
    """dB = A^T G, written back in ``b``'s layout (``b`` gives the shape only)."""
    a2 = _mat(a, transpose_a, True)
    g2 = g.reshape(a2.shape[0], -1)
    db = a2.T @ g2
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
    infer_shape=_grad_shape(1),
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
# FullyConnected
# ----------------------------------------------------------------------------


def _fc_inputs(params):
    return ["data", "weight"] if params["no_bias"] else ["data", "weight", "bias"]


def _fc_shape(params, in_shapes, out_shapes, where):
    x, w = in_shapes[0], in_shapes[1]
    h = params["num_hidden"]
    if h < 1:
        raise ShapeError(f"{where}: num_hidden must be positive, got {h}")
    ins = list(in_shapes)
    if not params["no_bias"]:
        if ins[2] is not None and tuple(ins[2]) != (h,):
            raise ShapeError(f"{where}: input 'bias' has shape {tuple(ins[2])}, expected {(h,)} (num_hidden={h})")
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
    if w is not None and tuple(w) != (h, d):
        raise ShapeError(
            f"{where}: input 'weight' has shape {tuple(w)}, expected {(h, d)} "
            f"(num_hidden={h}, data {tuple(x)}, flatten={params['flatten']})"
        )
    ins[1] = (h, d)
    return ins, [out]


def _fc_fwd(xp, x, w, b=None, *, num_hidden, no_bias, flatten):
    x2 = x.reshape(x.shape[0], -1) if flatten else x
    y = x2 @ w.T
    if b is not None:
        y += b
    return y


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
        grads.append(db)
    return grads


register(
    "FullyConnected",
    inputs=_fc_inputs,
    params={
        "num_hidden": Param("int"),
        "no_bias": Param("bool", False),
        "flatten": Param("bool", True),
    },
    forward=_fc_fwd,
    infer_shape=_fc_shape,
    gradient=_fc_grad,
    doc="y = x W^T + b (x flattened to 2-d unless flatten=False).",
)
