"""Reductions over axes (MXNet ``axis`` int/tuple/None, ``keepdims``, ``exclude``) and arg-search.

Shapes follow MXNet 1.9's ReduceAxesShapeImpl exactly: ``axis=None`` or ``()``
reduces everything into shape ``(1,)`` (all ones with ``keepdims``, whatever
``exclude`` says); a reduction that removes every axis also gives ``(1,)``.
The output keeps the input dtype (``sum`` of int32 is int32, ``mean`` of ints
truncates toward zero as MXNet's integer division does). float16 accumulates in
float32. Every gradient broadcasts the head gradient back with the one hidden
op ``_unreduce_like``.
"""

from __future__ import annotations

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import Decision, Param, normalize_axis, register, wait_for_first_input, wait_for_inputs

_REDUCE_PARAMS = {
    "axis": Param("axis", None),
    "keepdims": Param("bool", False),
    "exclude": Param("bool", False),
}


def reduce_axes(ndim: int, axis, exclude: bool, where: str) -> tuple[int, ...]:
    """The axes MXNet reduces over, normalised and sorted."""
    if axis is None or axis == ():
        # MXNet: the default axis=() reduces over every element (exclude has nothing to keep)
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    axes = tuple(sorted({normalize_axis(a, ndim, where) for a in axis}))
    if len(axes) != len(axis):
        raise ShapeError(f"{where}: parameter 'axis' repeats an axis: {axis}")
    if exclude:
        axes = tuple(i for i in range(ndim) if i not in axes)
    return axes


def reduced_shape(shape, axes, keepdims):
    """Output shape of a reduction; MXNet gives (1,), not (), when everything is reduced."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes) or (1,)


@wait_for_first_input
def _reduce_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    axes = reduce_axes(len(x), params["axis"], params["exclude"], where)
    out = reduced_shape(x, axes, params["keepdims"])
    return in_shapes, [out]


def _nonempty_reduce_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if x is not None and int(np.prod(x)) == 0:
        raise ShapeError(f"{where}: input 'data' must not be empty, got shape {tuple(x)}")
    return _reduce_shape(params, in_shapes, out_shapes, where)


def _pick(params):
    return {k: params[k] for k in ("axis", "keepdims", "exclude")}


def _accumulate(x):
    """The dtype to accumulate in: float32 for float16, the input's own otherwise."""
    return np.float32 if x.dtype == np.float16 else None


def _finish(out, x):
    """Shape ``()`` becomes ``(1,)``; the result keeps the input dtype."""
    if out.ndim == 0:
        out = out.reshape(1)
    return out.astype(x.dtype, copy=False) if out.dtype != x.dtype else out


def _reducer(
    name, compute, gradient, aliases=(), infer_shape=_reduce_shape, doc="", choice=None, piece=None, specialize=None
):
    """Register a ReduceAxesParam reduction: ``compute(xp, x, axes, keepdims)``; ``choice(xp, x, axes)``
    returns the decision list of a reduction that picks elements (max, min), ``piece(xp, choices, x, axes,
    keepdims)`` its value on the elements the recorded ``choices`` picked (``OpDef.pinned``), ``specialize`` its
    kernel (``OpDef.specialize``). Returns the forward."""

    def forward(xp, x, axis, keepdims, exclude):
        axes = reduce_axes(x.ndim, axis, exclude, name)
        return _finish(compute(xp, x, axes, keepdims), x)

    def decisions(xp, x, axis, keepdims, exclude):
        return choice(xp, x, reduce_axes(x.ndim, axis, exclude, name))

    def pinned(xp, choices, x, axis, keepdims, exclude):
        axes = reduce_axes(x.ndim, axis, exclude, name)
        return _finish(piece(xp, choices, x, axes, keepdims), x)

    register(
        name,
        aliases=aliases,
        forward=forward,
        infer_shape=infer_shape,
        params=dict(_REDUCE_PARAMS),
        gradient=gradient,
        decisions=decisions if choice else None,
        pinned=pinned if piece else None,
        specialize=specialize,
        doc=doc,
    )
    return forward


def _unreduce(F, s, n, **kw):
    """Broadcast a reduced-shape Symbol ``s`` back over the reduced axes of the node's input."""
    return F._unreduce_like(s, n.inputs[0], **kw, **_pick(n.params))


# -- sum, mean, nansum -----------------------------------------------------------------


def _mean(xp, x, axes, keepdims):
    if x.dtype.kind in "iub":
        # MXNet sums in the integer type and divides by the count: C division truncates toward zero
        s = x.sum(axis=axes, keepdims=keepdims, dtype=np.int64)
        count = 1
        for a in axes:
            count *= x.shape[a]
        q = xp.abs(s) // max(count, 1)
        return xp.where(s < 0, -q, q)
    return x.mean(axis=axes, keepdims=keepdims, dtype=_accumulate(x))


def _sum_kernel(xp, in_types, axis, keepdims, exclude):
    """Kernel of ``sum`` for float32/float64 data: the same ``x.sum`` call with the axes worked out
    once per rank (``reduce_axes`` depends on the rank only) and no dtype to restore (the sum of
    float32/float64 keeps its dtype). Another dtype at run time takes the general forward."""
    fast = (np.dtype(np.float32), np.dtype(np.float64))
    if in_types[0] not in fast:
        return None
    axes_of = {}

    def kernel(x):
        if x.dtype not in fast:
            return _sum_forward(xp, x, axis=axis, keepdims=keepdims, exclude=exclude)
        axes = axes_of.get(x.ndim)
        if axes is None:
            axes = axes_of[x.ndim] = reduce_axes(x.ndim, axis, exclude, "sum")
        out = x.sum(axis=axes, keepdims=keepdims)
        return out.reshape(1) if out.ndim == 0 else out

    return kernel, (), ()


_sum_forward = _reducer(
    "sum",
    lambda xp, x, axes, keepdims: x.sum(axis=axes, keepdims=keepdims, dtype=_accumulate(x)),
    # sum: d/dx_i = 1 for every reduced element -> broadcast g back over the reduced axes
    lambda F, n, g: [_unreduce(F, g[0], n)],
    aliases=("sum_axis",),
    doc="Sum over ``axis`` (all axes by default).",
    specialize=_sum_kernel,
)
_reducer(
    "mean",
    _mean,
    # mean: the same as sum divided by the number of reduced elements
    lambda F, n, g: [_unreduce(F, g[0], n, mean=True)],
    doc="Mean over ``axis`` (all axes by default).",
)
_reducer(
    "nansum",
    lambda xp, x, axes, keepdims: xp.nansum(x, axis=axes, keepdims=keepdims, dtype=_accumulate(x)),
    # NaN elements are skipped: d/dx_i = 1 where x_i is a number, 0 where it is NaN (x == x is false)
    lambda F, n, g: [_unreduce(F, g[0], n) * (n.inputs[0] == n.inputs[0])],
    doc="Sum over ``axis`` treating NaN as zero (its gradient is 0 at NaN).",
)


# -- prod, nanprod ---------------------------------------------------------------------------


def _prod_of_others(F, n, x):
    """``prod_(j != i) x_j`` over the reduced group of each element ``x_i``, exact at zeros.

    ``y / x_i`` (MXNet's rule) is 0/0 = NaN at an exact zero. Instead, per group, with
    ``s = where(x == 0, 1, x)`` (zeros replaced by one), ``P = prod s`` and ``w_i`` the number of
    zeros among the *other* elements:

        prod_(j != i) x_j = (P / s_i) * prod_(j != i, x_j = 0) x_j
                          = (P / s_i) * {1 if w_i = 0;  Z_i if w_i = 1;  0 if w_i >= 2}

    where ``Z_i = sum_(j != i, x_j = 0) x_j`` is the lone other zero itself. Its value is 0, but
    symbolically it is that element, so the second derivative stays right at zeros too:
    ``d/dx_k prod_(j != i) x_j = prod_(j != i, k) x_j`` is ``P / (s_i s_k)`` when ``x_k`` is the only
    other zero and 0 when another zero remains (``w_i >= 2``; the rule is exact to second order).
    ``P / s_i`` has no 0/0: ``s`` has no zeros. Its own gradient is this rule again (through
    ``prod s``), so every order is a graph of ordinary ops.
    """
    pick = _pick(n.params)
    zeros = F.zeros_like(x)
    is_zero = x == 0.0  # 1 where x_i = 0, else 0 (in x's dtype)
    at_zeros = F.where(is_zero, x, zeros)  # the zeros themselves (value 0, derivative 1 there)
    safe = F.where(is_zero, F.ones_like(x), x)
    p_over_s = _unreduce(F, F.prod(safe, **pick), n) / safe
    others = _unreduce(F, F.sum(is_zero, **pick), n) - is_zero  # w_i
    lone = _unreduce(F, F.sum(at_zeros, **pick), n) - at_zeros  # Z_i
    factor = F.where(others == 0.0, F.ones_like(x), F.where(others == 1.0, lone, zeros))
    return p_over_s * factor


def _prod_grad(F, n, g):
    # y = prod x_j: dy/dx_i = prod_(j != i) x_j, computed without dividing by x_i (finite and exact at
    # zeros, where MXNet's y / x_i gives NaN): see _prod_of_others
    return [_unreduce(F, g[0], n) * _prod_of_others(F, n, n.inputs[0])]


def _nanprod_grad(F, n, g):
    # NaNs count as 1: y = prod_(x_j not NaN) x_j, so dy/dx_i = prod of the other numbers (NaNs as 1),
    # and 0 at NaN (as MXNet's nanprod_grad); zeros are exact as in prod (no y / x_i)
    x = n.inputs[0]
    number = x == x
    ones_for_nan = F.where(number, x, F.ones_like(x))
    grad = _unreduce(F, g[0], n) * _prod_of_others(F, n, ones_for_nan)
    return [F.where(number, grad, F.zeros_like(x))]


_reducer(
    "prod",
    lambda xp, x, axes, keepdims: x.prod(axis=axes, keepdims=keepdims, dtype=_accumulate(x)),
    _prod_grad,
    doc="Product over ``axis`` (all axes by default).",
)
_reducer(
    "nanprod",
    lambda xp, x, axes, keepdims: xp.nanprod(x, axis=axes, keepdims=keepdims, dtype=_accumulate(x)),
    _nanprod_grad,
    doc="Product over ``axis`` treating NaN as one.",
)


# -- max, min --------------------------------------------------------------------------------


def _extreme_grad(F, n, g):
    # MXNet's _backward_max/_backward_min (mshadow_op::eq): the head gradient goes, in full,
    # to EVERY element equal to the extreme value (ties are not split)
    x = n.inputs[0]
    return [_unreduce(F, g[0], n) * (x == _unreduce(F, n.outputs[0], n))]


def _to_last(xp, a, axes):
    """``a`` with the reduced axes moved to the end and flattened into one."""
    moved = xp.moveaxis(a, axes, tuple(range(-len(axes), 0)))
    return moved.reshape(moved.shape[: moved.ndim - len(axes)] + (-1,))


def _extreme_choice(sign):
    """Decisions of max (sign 1) / min (sign -1): which elements equal the extreme (the gradient's mask)."""

    def choice(xp, x, axes):
        y = x * sign  # min is max of -x
        top = y.max(axis=axes, keepdims=True)
        # margin: the winner's lead over the runner-up (>= 0; 0 on a tie), the others' distance below the top
        flat = _to_last(xp, y, axes)
        second = xp.sort(flat, axis=-1)[..., -2] if flat.shape[-1] > 1 else xp.full(flat.shape[:-1], -np.inf)
        second = second.reshape(top.shape)
        margin = xp.where(y == top, y - second, y - top)

        def support(site):  # the whole slice the element was reduced with
            return (tuple(slice(None) if i in axes else int(j) for i, j in enumerate(site)),)

        return [Decision((0,), y == top, margin, support)]

    return choice


def _extreme_piece(extreme):
    """Pinned max / min: each slice's value at the first element the recorded mask marks (``choices[0]``, the
    elements equal to the extreme at the base point). A slice whose mask marks nothing (its extreme was NaN)
    is reduced as forward reduces it."""

    def piece(xp, choices, x, axes, keepdims):
        mask = _to_last(xp, choices[0], axes)
        first = mask.argmax(axis=-1)[..., None]  # the first marked element (argmax's tie rule)
        picked = xp.take_along_axis(_to_last(xp, x, axes), first, axis=-1)[..., 0]
        plain = extreme(x, axis=axes)
        picked = xp.where(mask.any(axis=-1).reshape(plain.shape), picked.reshape(plain.shape), plain)
        return picked.reshape(reduced_shape(x.shape, axes, True)) if keepdims else picked

    return piece


# pinned (max and min): the element the base point picked in each slice; on an exact tie, the first of the
# tied elements, though the gradient (MXNet's) goes in full to every one of them: a tie has no piece whose
# derivative is that gradient
_reducer(
    "max",
    lambda xp, x, axes, keepdims: x.max(axis=axes, keepdims=keepdims),
    _extreme_grad,
    aliases=("max_axis",),
    choice=_extreme_choice(1),
    piece=_extreme_piece(lambda x, axis: x.max(axis=axis)),
    infer_shape=_nonempty_reduce_shape,
    doc="Maximum over ``axis``; the gradient goes to every element equal to the maximum.",
)
_reducer(
    "min",
    lambda xp, x, axes, keepdims: x.min(axis=axes, keepdims=keepdims),
    _extreme_grad,
    aliases=("min_axis",),
    choice=_extreme_choice(-1),
    piece=_extreme_piece(lambda x, axis: x.min(axis=axis)),
    infer_shape=_nonempty_reduce_shape,
    doc="Minimum over ``axis``; the gradient goes to every element equal to the minimum.",
)


# -- norm ---------------------------------------------------------------------------------------

_NORM_OUT_DTYPES = ("float16", "float32", "float64", "int64", "int32", "int8")


def _norm_prepare(params, node_name):
    where = f"norm {node_name!r}"
    if params["ord"] not in (1, 2):
        raise ParamError(f"{where}: parameter 'ord' must be 1 or 2, got {params['ord']}")
    dt = params["out_dtype"]
    if dt is not None and dt.name not in _NORM_OUT_DTYPES:
        raise ParamError(
            f"{where}: parameter 'out_dtype' must be one of {list(_NORM_OUT_DTYPES)} or None, got {dt.name!r}"
        )
    return params


def _norm_shape(params, in_shapes, out_shapes, where):
    return _reduce_shape({**params, "exclude": False}, in_shapes, out_shapes, where)


def _norm_type(params, in_types, out_types, where):
    if params["out_dtype"] is not None:
        return in_types, [params["out_dtype"]]
    t = in_types[0] if in_types[0] is not None else out_types[0]
    return [t], [t]


def _norm_fwd(xp, x, ord, axis, out_dtype, keepdims):
    axes = reduce_axes(x.ndim, axis, False, "norm")
    acc = np.float32 if x.dtype == np.float16 else (np.float64 if x.dtype.kind in "iub" else x.dtype)
    a = xp.abs(x.astype(acc, copy=False))
    if ord == 1:
        out = a.sum(axis=axes, keepdims=keepdims)
    else:
        # scaled like BLAS nrm2 (and MXNet's nrm2 reducer): no overflow/underflow of the squares
        m = a.max(axis=axes, keepdims=True) if a.size else xp.zeros(())
        safe = xp.where(m > 0, m, 1)
        out = xp.sqrt(((a / safe) ** 2).sum(axis=axes, keepdims=True)) * m
        if not keepdims:
            out = out.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))
    if out.ndim == 0:
        out = out.reshape(1)
    return out.astype(out_dtype if out_dtype is not None else x.dtype, copy=False)


def _norm_grad(F, n, g):
    x, y = n.inputs[0], n.outputs[0]
    p = {"axis": n.params["axis"], "keepdims": n.params["keepdims"], "exclude": False}
    gb = F._unreduce_like(g[0], x, **p)
    if n.params["out_dtype"] is not None:  # the gradient arrives in out_dtype: back to the input's
        gb = F._cast_like(gb, x)
    if n.params["ord"] == 1:
        return [gb * F.sign(x)]  # d sum|x| = sign x (0 at 0, MXNet's sign)
    yb = F._unreduce_like(y, x, **p)
    if n.params["out_dtype"] is not None:
        yb = F._cast_like(yb, x)
    return [gb * x / yb]  # d sqrt(sum x^2) = x / ||x|| (NaN at a zero norm, as MXNet)


register(
    "norm",
    params={
        "ord": Param("int", 2),
        "axis": Param("axis", None),
        "out_dtype": Param("dtype", None),
        "keepdims": Param("bool", False),
    },
    prepare=_norm_prepare,
    forward=_norm_fwd,
    infer_shape=_norm_shape,
    infer_type=_norm_type,
    gradient=_norm_grad,
    doc="L1 (ord=1) or L2 (ord=2) norm of the elements over ``axis`` (all by default; a 2-tuple of axes "
    "gives the elementwise norm of each matrix, as MXNet computes it).",
)


# -- argmax, argmin, argmax_channel ------------------------------------------------------


@wait_for_first_input
def _search_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    axis, keepdims = params["axis"], params["keepdims"]
    if axis is None or len(x) == 1:
        if axis is not None:
            normalize_axis(axis, len(x), where)
        if int(np.prod(x)) == 0:
            raise ShapeError(f"{where}: cannot search an empty input of shape {tuple(x)}")
        return in_shapes, [(1,) * len(x) if keepdims else (1,)]
    ax = normalize_axis(axis, len(x), where)
    if x[ax] == 0:
        raise ShapeError(f"{where}: cannot search along axis {axis} of size 0 (input shape {tuple(x)})")
    out = list(x)
    if keepdims:
        out[ax] = 1
    else:
        del out[ax]
    return in_shapes, [tuple(out)]


def _search(name, fn):
    def forward(xp, x, axis, keepdims):
        if axis is None:
            idx = fn(x.reshape(-1), axis=0).reshape((1,) * x.ndim if keepdims else (1,))
        else:
            idx = fn(x, axis=axis, keepdims=keepdims)
            if idx.ndim == 0:
                idx = idx.reshape(1)
        return idx.astype(x.dtype)  # MXNet returns the index as a value of the input dtype

    register(
        name,
        params={"axis": Param("int", None, optional=True), "keepdims": Param("bool", False)},
        forward=forward,
        infer_shape=_search_shape,
        gradient=lambda F, n, g: [None],  # piecewise constant (MXNet: MakeZeroGradNodes)
        doc=f"Index of the first {name[3:]}imum along ``axis`` (flattened when None), in the input dtype.",
    )


_search("argmax", lambda x, axis, keepdims=False: x.argmax(axis=axis, keepdims=keepdims))
_search("argmin", lambda x, axis, keepdims=False: x.argmin(axis=axis, keepdims=keepdims))


def _argmax_channel_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if x is not None and len(x) < 2:
        raise ShapeError(f"{where}: input 'data' must be at least 2-d (argmax over axis 1), got {tuple(x)}")
    return _search_shape({"axis": 1, "keepdims": False}, in_shapes, out_shapes, where)


register(
    "argmax_channel",
    forward=lambda xp, x: x.argmax(axis=1).astype(x.dtype),
    infer_shape=_argmax_channel_shape,
    gradient=None,
    grad_undefined_reason="argmax_channel registers no gradient in MXNet (it is an index, not a value)",
    doc="argmax over axis 1, in the input dtype.",
)


# -- the gradient helper ----------------------------------------------------------------------


def _unreduce_fwd(xp, g, like, axis, keepdims, exclude, mean):
    axes = reduce_axes(like.ndim, axis, exclude, "_unreduce_like")
    if not keepdims:
        g = g.reshape(reduced_shape(like.shape, axes, True))
    out = xp.broadcast_to(g, like.shape)
    if mean:
        count = 1
        for a in axes:
            count *= like.shape[a]
        out = out / max(count, 1)
    return out


@wait_for_inputs(1)
def _unreduce_shape(params, in_shapes, out_shapes, where):
    g, like = in_shapes
    axes = reduce_axes(len(like), params["axis"], params["exclude"], where)
    return [reduced_shape(like, axes, params["keepdims"]), like], [like]


def _unreduce_type(params, in_types, out_types, where):
    # the output has data's dtype; ``like`` only lends its shape (norm with out_dtype)
    t = in_types[0] if in_types[0] is not None else out_types[0]
    return [t, in_types[1]], [t]


register(
    "_unreduce_like",
    inputs=("data", "like"),
    params={**_REDUCE_PARAMS, "mean": Param("bool", False)},
    forward=_unreduce_fwd,
    infer_shape=_unreduce_shape,
    infer_type=_unreduce_type,
    # adjoint of broadcasting over the reduced axes is the reduction itself
    gradient=lambda F, n, g: [
        (F.mean if n.params["mean"] else F.sum)(g[0], **_pick(n.params)),
        None,
    ],
    doc="Gradient of a reduction: broadcast over the reduced axes of ``like`` (/count for mean).",
)


# ----------------------------------------------------------------------------
# cumsum
# ----------------------------------------------------------------------------


@wait_for_first_input
def _cumsum_shape(params, in_shapes, out_shapes, where):
    (a,) = in_shapes
    if params["axis"] is None:
        return in_shapes, [(int(np.prod(a)),)]
    normalize_axis(params["axis"], len(a), where)
    return in_shapes, [tuple(a)]


def _cumsum_type(params, in_types, out_types, where):
    t = in_types[0]
    if params["dtype"] is not None:
        return in_types, [params["dtype"]]
    return in_types, [t]


def _cumsum_fwd(xp, a, axis, dtype):
    out = xp.cumsum(a.reshape(-1) if axis is None else a, axis=0 if axis is None else axis)
    return out.astype(dtype if dtype is not None else a.dtype, copy=False)


def _reverse_cumsum(F, g, axis):
    # the adjoint of a running sum y_i = sum_{j<=i} x_j is dx_j = sum_{i>=j} g_i: a running sum from the end
    return F.reverse(F.cumsum(F.reverse(g, axis=axis), axis=axis), axis=axis)


def _cumsum_grad(F, n, g):
    a, axis = n.inputs[0], n.params["axis"]
    if axis is None:
        dx = F.reshape_like(_reverse_cumsum(F, g[0], 0), a)
    else:
        dx = _reverse_cumsum(F, g[0], axis)
    return [F._cast_like(dx, a)]


register(
    "cumsum",
    aliases=("_np_cumsum",),
    inputs=("a",),
    params={"axis": Param("int", None), "dtype": Param("dtype", None)},
    forward=_cumsum_fwd,
    infer_shape=_cumsum_shape,
    infer_type=_cumsum_type,
    gradient=_cumsum_grad,
    doc="Running sum along ``axis`` (of the flattened input when axis is None), in ``dtype`` if given.",
)
