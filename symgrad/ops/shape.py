"""Shape operators: Reshape (with MXNet's special values), Flatten, expand_dims,
reshape_like, SliceChannel/split, Concat and the hidden ``_split_like``."""

from __future__ import annotations

import math

from ..base import ShapeError
from .registry import Param, normalize_axis, register


def _prod(dims):
    return math.prod(int(d) for d in dims)


# ----------------------------------------------------------------------------
# Reshape
# ----------------------------------------------------------------------------


def reshape_target(shape, dshape, reverse, where="Reshape"):
    """MXNet's special values: 0 copy, -1 infer, -2 copy the rest, -3 merge two, -4 split one."""
    src = list(dshape)
    spec = list(shape)
    if reverse:
        src.reverse()
        spec.reverse()
    out = []
    src_idx = 0
    inf_idx = -1
    i = 0

    def take():
        nonlocal src_idx
        if src_idx >= len(src):
            raise ShapeError(f"{where}: shape={tuple(shape)} uses more input dimensions than {tuple(dshape)} has")
        src_idx += 1
        return src[src_idx - 1]

    while i < len(spec):
        d = spec[i]
        if d == 0:
            out.append(take())
        elif d == -1:
            if inf_idx >= 0:
                raise ShapeError(f"{where}: shape={tuple(shape)} has more than one -1")
            inf_idx = len(out)
            out.append(1)
            src_idx += 1
        elif d == -2:
            out.extend(src[src_idx:])
            src_idx = len(src)
        elif d == -3:
            out.append(take() * take())
        elif d == -4:
            if i + 2 >= len(spec):
                raise ShapeError(f"{where}: -4 in shape={tuple(shape)} must be followed by two dimensions")
            d0 = take()
            d1, d2 = spec[i + 1], spec[i + 2]
            i += 2
            if d1 == -1 and d2 == -1:
                raise ShapeError(f"{where}: split dims after -4 cannot both be -1")
            if d1 == -1:
                d1 = d0 // d2
            if d2 == -1:
                d2 = d0 // d1
            if d1 * d2 != d0:
                raise ShapeError(f"{where}: split dims {d1}, {d2} do not divide dimension {d0}")
            out.extend([d1, d2])
        elif d > 0:
            out.append(d)
            src_idx += 1
        else:
            raise ShapeError(f"{where}: invalid value {d} in shape={tuple(shape)}")
        i += 1
    if inf_idx >= 0:
        rest = _prod(out)
        if rest == 0 or _prod(dshape) % rest:
            raise ShapeError(f"{where}: cannot infer -1 in shape={tuple(shape)} for input {tuple(dshape)}")
        out[inf_idx] = _prod(dshape) // rest
    if reverse:
        out.reverse()
    out = tuple(out)
    if _prod(out) != _prod(dshape):
        raise ShapeError(
            f"{where}: cannot reshape input of shape {tuple(dshape)} ({_prod(dshape)} elements) "
            f"to {out} ({_prod(out)} elements) given shape={tuple(shape)}"
        )
    return out


def _reshape_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if x is None:
        return in_shapes, out_shapes
    return in_shapes, [reshape_target(params["shape"], x, params["reverse"], where)]


def _reshape_fwd(xp, x, shape, reverse):
    return x.reshape(reshape_target(shape, x.shape, reverse))


def _reshape_like_grad(F, n, g):
    # any pure reshape: the gradient is the head gradient reshaped back to the input
    return [F.reshape_like(g[0], n.inputs[0])] + [None] * (len(n.inputs) - 1)


register(
    "Reshape",
    aliases=("reshape",),
    params={"shape": Param("shape", ()), "reverse": Param("bool", False)},
    forward=_reshape_fwd,
    infer_shape=_reshape_shape,
    gradient=_reshape_like_grad,
    doc="Reshape with MXNet's special values 0, -1, -2, -3, -4 and ``reverse``.",
)


def _flatten_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if x is None:
        return in_shapes, out_shapes
    if len(x) == 0:
        raise ShapeError(f"{where}: cannot flatten a 0-d input")
    return in_shapes, [(x[0], _prod(x[1:]))]


register(
    "Flatten",
    aliases=("flatten",),
    forward=lambda xp, x: x.reshape(x.shape[0], -1),
    infer_shape=_flatten_shape,
    gradient=_reshape_like_grad,
    doc="Collapse every axis but the first: (N, d1, d2, ...) -> (N, d1*d2*...).",
)


def _reshape_like_shape(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    if a is not None and b is not None and _prod(a) != _prod(b):
        raise ShapeError(f"{where}: cannot reshape {tuple(a)} like {tuple(b)}: element counts differ")
    return in_shapes, [b] if b is not None else out_shapes


register(
    "reshape_like",
    inputs=("lhs", "rhs"),
    forward=lambda xp, a, b: a.reshape(b.shape),
    infer_shape=_reshape_like_shape,
    gradient=_reshape_like_grad,
    doc="Reshape ``lhs`` to the shape of ``rhs``.",
)


def _expand_dims_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if x is None:
        return in_shapes, out_shapes
    axis = normalize_axis(params["axis"], len(x) + 1, where)
    return in_shapes, [tuple(x[:axis]) + (1,) + tuple(x[axis:])]


def _expand_dims_fwd(xp, x, axis):
    return xp.expand_dims(x, normalize_axis(axis, x.ndim + 1, "expand_dims"))


register(
    "expand_dims",
    params={"axis": Param("int")},
    forward=_expand_dims_fwd,
    infer_shape=_expand_dims_shape,
    gradient=_reshape_like_grad,
)


# ----------------------------------------------------------------------------
# SliceChannel / split and Concat
# ----------------------------------------------------------------------------


def _split_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    n = params["num_outputs"]
    if n < 1:
        raise ShapeError(f"{where}: num_outputs must be >= 1, got {n}")
    if x is None:
        return in_shapes, out_shapes
    axis = normalize_axis(params["axis"], len(x), where)
    if x[axis] % n:
        raise ShapeError(f"{where}: axis {axis} of size {x[axis]} is not divisible by num_outputs={n}")
    part = list(x)
    part[axis] = x[axis] // n
    if params["squeeze_axis"]:
        if part[axis] != 1:
            raise ShapeError(f"{where}: squeeze_axis needs num_outputs equal to the axis size {x[axis]}")
        del part[axis]
    return in_shapes, [tuple(part)] * n


def _split_fwd(xp, x, num_outputs, axis, squeeze_axis):
    axis = normalize_axis(axis, x.ndim, "SliceChannel")
    parts = xp.split(x, num_outputs, axis=axis)
    if squeeze_axis:
        parts = [p.squeeze(axis) for p in parts]
    return tuple(parts)


def _split_grad(F, n, g):
    # y_k = x[k-th chunk]  ->  dx = concat(dy_0, ..., dy_{n-1}) along the axis
    axis = n.params["axis"]
    gs = list(g)
    if n.params["squeeze_axis"]:
        gs = [F.expand_dims(gi, axis=axis) for gi in gs]
    return [F.Concat(*gs, dim=axis)]


register(
    "SliceChannel",
    aliases=("split",),
    params={
        "num_outputs": Param("int"),
        "axis": Param("int", 1),
        "squeeze_axis": Param("bool", False),
    },
    num_outputs=lambda p: p["num_outputs"],
    forward=_split_fwd,
    infer_shape=_split_shape,
    gradient=_split_grad,
    doc="Split ``data`` into ``num_outputs`` equal parts along ``axis`` (multiple outputs).",
)


def _concat_shape(params, in_shapes, out_shapes, where):
    dim = params["dim"]
    known = [s for s in in_shapes if s is not None]
    if not known:
        return in_shapes, out_shapes
    ndim = len(known[0])
    axis = normalize_axis(dim, ndim, where, "dim")
    for i, s in enumerate(in_shapes):
        if s is None:
            continue
        if len(s) != ndim or any(a != b for k, (a, b) in enumerate(zip(s, known[0])) if k != axis):
            raise ShapeError(
                f"{where}: input arg{i} has shape {tuple(s)}, incompatible with {tuple(known[0])} "
                f"for concatenation along dim {dim}"
            )
    if len(known) != len(in_shapes):
        return in_shapes, out_shapes
    out = list(known[0])
    out[axis] = sum(s[axis] for s in in_shapes)
    return in_shapes, [tuple(out)]


def _concat_fwd(xp, *xs, num_args, dim):
    return xp.concatenate(xs, axis=normalize_axis(dim, xs[0].ndim, "Concat", "dim"))


register(
    "Concat",
    aliases=("concat",),
    variadic="num_args",
    params={"num_args": Param("int"), "dim": Param("int", 1)},
    forward=_concat_fwd,
    infer_shape=_concat_shape,
    # y = [x_0 | x_1 | ...]  ->  dx_k = the k-th piece of dy
    gradient=lambda F, n, g: list(F._split_like(g[0], *n.inputs, dim=n.params["dim"])),
    doc="Concatenate inputs along ``dim``.",
)


def _split_like_shape(params, in_shapes, out_shapes, where):
    return in_shapes, list(in_shapes[1:])


def _split_like_fwd(xp, g, *likes, num_args, dim):
    axis = normalize_axis(dim, g.ndim, "_split_like", "dim")
    bounds = []
    total = 0
    for like in likes[:-1]:
        total += like.shape[axis]
        bounds.append(total)
    return tuple(xp.split(g, bounds, axis=axis))


register(
    "_split_like",
    variadic="num_args",
    params={"num_args": Param("int"), "dim": Param("int", 1)},
    num_outputs=lambda p: p["num_args"] - 1,
    forward=_split_like_fwd,
    infer_shape=_split_like_shape,
    # the adjoint of splitting is concatenating the pieces' gradients
    gradient=lambda F, n, g: [F.Concat(*g, dim=n.params["dim"])] + [None] * (len(n.inputs) - 1),
    doc="Split ``data`` (the first input) into pieces shaped like the other inputs (Concat's gradient).",
)
