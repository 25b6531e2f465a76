"""Reductions over axes (MXNet ``axis`` int/tuple/None, ``keepdims``, ``exclude``)."""

from __future__ import annotations

from .registry import Param, normalize_axis, register

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
        raise ValueError(f"{where}: parameter 'axis' repeats an axis: {axis}")
    if exclude:
        axes = tuple(i for i in range(ndim) if i not in axes)
    return axes


def reduced_shape(shape, axes, keepdims):
    """Output shape of a reduction; MXNet gives (1,), not (), when everything is reduced."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes) or (1,)


def _reduce_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if x is None:
        return in_shapes, out_shapes
    axes = reduce_axes(len(x), params["axis"], params["exclude"], where)
    out = reduced_shape(x, axes, params["keepdims"])
    return in_shapes, [out]


def _reducer(name, np_name, mean=False, doc=""):
    def forward(xp, x, axis, keepdims, exclude):
        axes = reduce_axes(x.ndim, axis, exclude, name)
        out = getattr(xp, np_name)(x, axis=axes, keepdims=keepdims)
        return out.reshape(1) if out.ndim == 0 else out

    def gradient(F, n, g):
        # sum: d/dx_i = 1 for every reduced element -> broadcast g back over the reduced axes;
        # mean: the same divided by the number of reduced elements.
        return [F._unreduce_like(g[0], n.inputs[0], mean=mean, **_pick(n.params))]

    register(
        name,
        forward=forward,
        infer_shape=_reduce_shape,
        params=dict(_REDUCE_PARAMS),
        gradient=gradient,
        doc=doc,
    )


def _pick(params):
    return {k: params[k] for k in ("axis", "keepdims", "exclude")}


_reducer("sum", "sum", doc="Sum over ``axis`` (all axes by default).")
_reducer("mean", "mean", mean=True, doc="Mean over ``axis`` (all axes by default).")


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


def _unreduce_shape(params, in_shapes, out_shapes, where):
    g, like = in_shapes
    if like is None:
        return in_shapes, out_shapes
    axes = reduce_axes(len(like), params["axis"], params["exclude"], where)
    return [reduced_shape(like, axes, params["keepdims"]), like], [like]


register(
    "_unreduce_like",
    inputs=("data", "like"),
    params={**_REDUCE_PARAMS, "mean": Param("bool", False)},
    forward=_unreduce_fwd,
    infer_shape=_unreduce_shape,
    # adjoint of broadcasting over the reduced axes is the reduction itself
    gradient=lambda F, n, g: [
        (F.mean if n.params["mean"] else F.sum)(g[0], **_pick(n.params)),
        None,
    ],
    doc="Gradient of a reduction: broadcast over the reduced axes of ``like`` (/count for mean).",
)
