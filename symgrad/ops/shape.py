"""Shape operators (MXNet 1.9 ``src/operator/tensor/matrix_op*``, ``broadcast_reduce_op*``,
``swapaxis``, ``slice_channel``, ``concat``).

Reshape (with MXNet's special values and the deprecated ``target_shape``), Flatten,
transpose, expand_dims, squeeze, SwapAxis, reverse/flip, Concat, stack,
SliceChannel/split, slice/slice_axis/slice_like, tile, repeat, broadcast_to,
broadcast_like, broadcast_axis, reshape_like, depth_to_space and space_to_depth.

Every gradient is built from Symbols. Pure rearrangements (reshape, transpose,
flip, depth_to_space, ...) differentiate into their inverse rearrangement. The
slicing ops differentiate into hidden "scatter into zeros" ops, tile/repeat into
hidden "sum the copies" ops; each hidden op's own gradient is the forward op again
(the pair is linear and mutually adjoint), so every order of derivative works.
"""

from __future__ import annotations

import math

import numpy as np

from .. import util
from ..base import ParamError, ShapeError
from ..opdef import Param, like_input1, normalize_axis, register, same_shape, wait_for_first_input, wait_for_inputs


def _prod(dims):
    return math.prod(int(d) for d in dims)


def _acc(dtype):
    """Accumulation dtype: float16 sums in float32."""
    return np.float32 if np.dtype(dtype) == np.float16 else None


def _keep_first_type(params, in_types, out_types, where):
    """Output has the first input's dtype; the other inputs only lend their shape (any dtype)."""
    t = in_types[0] if in_types[0] is not None else out_types[0]
    return [t] + list(in_types[1:]), [t] * len(out_types)


def _grad_like_first(gradient):
    """Wrap a rule for an op whose extra inputs lend only their shape: they get no gradient."""

    def rule(F, n, g):
        return [gradient(F, n, g)] + [None] * (len(n.inputs) - 1)

    return rule


def _opt_int_tuple(value, where, pname):
    """A tuple of ints / None (MXNet ``Tuple<optional<int>>``) from a Python value or JSON string."""
    if value is None:
        return ()
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),)
    if isinstance(value, (list, tuple)) and all(
        v is None or (isinstance(v, (int, np.integer)) and not isinstance(v, bool)) for v in value
    ):
        return tuple(None if v is None else int(v) for v in value)
    raise ParamError(f"{where}: parameter {pname!r} expects a tuple of ints or None, got {value!r}")


# ----------------------------------------------------------------------------
# Reshape, Flatten, reshape_like
# ----------------------------------------------------------------------------


def reshape_target(shape, dshape, reverse, where="Reshape"):
    """MXNet's InferReshapeShape: 0 copy, -1 infer, -2 copy the rest, -3 merge two, -4 split one.

    With ``reverse`` both the input shape and ``shape`` are read right to left (so a ``-4`` comes
    *after* its two split dims: ``(16, -1, -4)``). Where MXNet records the position of ``-1`` as its
    index in ``shape`` (which goes wrong after a ``-2`` or ``-4``), this uses its position in the
    output, which is what the documentation describes.
    """
    src, spec = list(dshape), list(shape)
    if reverse:
        src.reverse()
        spec.reverse()
    reader = _ReshapeReader(src, shape, dshape, where)
    i = 0
    while i < len(spec):
        i += reader.read(spec, i)
    out = reader.out
    if reader.inf_idx >= 0:
        out[reader.inf_idx] = _inferred_dim(out, dshape, reader.copied_zeros, shape, where)
    if reverse:
        out.reverse()
    out = tuple(out)
    if _prod(out) != _prod(dshape):
        raise ShapeError(
            f"{where}: cannot reshape input of shape {tuple(dshape)} ({_prod(dshape)} elements) "
            f"to {out} ({_prod(out)} elements) given shape={tuple(shape)}"
        )
    return out


class _ReshapeReader:
    """Reads ``shape``'s codes one at a time against the input dimensions ``src``, building ``out``."""

    def __init__(self, src, shape, dshape, where):
        self.src, self.shape, self.dshape, self.where = src, shape, dshape, where
        self.out: list = []
        self.src_idx = 0
        self.inf_idx = -1  # where -1 sits in the output
        self.copied_zeros = 0  # 0 dimensions copied through by 0 / -2 (unknown in MXNet's legacy shape mode)

    def take(self):
        if self.src_idx >= len(self.src):
            raise ShapeError(
                f"{self.where}: shape={tuple(self.shape)} uses more input dimensions than {tuple(self.dshape)} has"
            )
        self.src_idx += 1
        return self.src[self.src_idx - 1]

    def read(self, spec, i) -> int:
        """Apply code ``spec[i]``; returns how many codes it used."""
        d = spec[i]
        if d == 0:
            self.out.append(self.take())
            self.copied_zeros += self.out[-1] == 0
        elif d == -1:
            if self.inf_idx >= 0:
                raise ShapeError(f"{self.where}: shape={tuple(self.shape)} has more than one -1")
            self.inf_idx = len(self.out)
            self.out.append(1)
            self.src_idx += 1
        elif d == -2:
            rest = self.src[self.src_idx :]
            self.copied_zeros += rest.count(0)
            self.out.extend(rest)
            self.src_idx = len(self.src)
        elif d == -3:
            self.out.append(self.take() * self.take())
        elif d == -4:
            self.split(spec, i)
            return 3
        elif d > 0:
            self.out.append(d)
            self.src_idx += 1
        else:
            raise ShapeError(f"{self.where}: invalid value {d} in shape={tuple(self.shape)}")
        return 1

    def split(self, spec, i) -> None:
        """``-4, d1, d2``: one input dimension split in two, one of them possibly -1."""
        where = self.where
        if i + 2 >= len(spec):
            raise ShapeError(f"{where}: -4 in shape={tuple(self.shape)} must be followed by two dimensions")
        d0 = self.take()
        d1, d2 = spec[i + 1], spec[i + 2]
        if d1 == -1 and d2 == -1:
            raise ShapeError(f"{where}: split dims after -4 cannot both be -1")
        if d1 == -1:
            d1 = d0 // d2 if d2 else 0
        if d2 == -1:
            d2 = d0 // d1 if d1 else 0
        if d1 < 1 or d2 < 1 or d1 * d2 != d0:
            raise ShapeError(f"{where}: split dims {d1}, {d2} do not divide dimension {d0}")
        self.out.extend([d1, d2])


def _inferred_dim(out, dshape, copied_zeros, shape, where) -> int:
    """The size of the -1 dimension (``out`` holds 1 there)."""
    rest, total = _prod(out), _prod(dshape)
    if rest == 0 and copied_zeros == out.count(0) == list(dshape).count(0):
        # every 0 dimension is copied through as it is (an unknown batch size: (0, 3, 4) with
        # shape=(0, -1)): those factors cancel, so -1 is still determined
        rest, total = _prod([d for d in out if d]), _prod([d for d in dshape if d])
    if rest == 0 or total % rest:
        raise ShapeError(f"{where}: cannot infer -1 in shape={tuple(shape)} for input {tuple(dshape)}")
    return total // rest


def _legacy_target(target, keep_highest, dshape, where):
    """The deprecated ``target_shape``: one 0 is inferred; ``keep_highest`` keeps dim 0 of the input."""
    out = list(target)
    if keep_highest:
        if not out or not dshape:
            raise ShapeError(f"{where}: keep_highest needs a non-empty target_shape and input")
        out[0] = dshape[0]
    zeros = [i for i in range(1 if keep_highest else 0, len(out)) if out[i] == 0]
    if len(zeros) == 1:
        out[zeros[0]] = 1
        out[zeros[0]] = _prod(dshape) // max(_prod(out), 1)
    out = tuple(out)
    if _prod(out) != _prod(dshape) or any(d < 1 for d in out):
        raise ShapeError(
            f"{where}: cannot reshape input of shape {tuple(dshape)} to target_shape={tuple(target)} "
            f"(keep_highest={keep_highest})"
        )
    return out


def _reshape_out(params, dshape, where):
    if params["shape"]:
        return reshape_target(params["shape"], dshape, params["reverse"], where)
    if params["target_shape"]:
        return _legacy_target(params["target_shape"], params["keep_highest"], dshape, where)
    raise ShapeError(f"{where}: needs parameter 'shape' (or the deprecated 'target_shape')")


@wait_for_first_input
def _reshape_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    return in_shapes, [_reshape_out(params, x, where)]


def _reshape_fwd(xp, x, shape, reverse, target_shape, keep_highest):
    p = {"shape": shape, "reverse": reverse, "target_shape": target_shape, "keep_highest": keep_highest}
    return x.reshape(_reshape_out(p, x.shape, "Reshape"))


def _reshape_like_grad(F, n, g):
    # any pure reshape: the gradient is the head gradient reshaped back to the input
    return [F.reshape_like(g[0], n.inputs[0])] + [None] * (len(n.inputs) - 1)


register(
    "Reshape",
    aliases=("reshape",),
    params={
        "shape": Param("shape", ()),
        "reverse": Param("bool", False),
        "target_shape": Param("shape", ()),
        "keep_highest": Param("bool", False),
    },
    forward=_reshape_fwd,
    infer_shape=_reshape_shape,
    gradient=_reshape_like_grad,
    doc="Reshape with MXNet's special values 0, -1, -2, -3, -4 and ``reverse`` (or the deprecated "
    "``target_shape``/``keep_highest``).",
)


@wait_for_first_input
def _flatten_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if len(x) == 0:
        raise ShapeError(f"{where}: cannot flatten a 0-d input")
    return in_shapes, [(x[0], _prod(x[1:]))]


def _flatten_fwd(xp, x):
    return x.reshape(x.shape[0], _prod(x.shape[1:]))


def _flatten_2d(x):
    """Flatten of a matrix: the same (n, m) view, without the product over trailing dims."""
    return x.reshape(x.shape) if x.ndim == 2 else _flatten_fwd(None, x)


register(
    "Flatten",
    aliases=("flatten",),
    forward=_flatten_fwd,
    # a reshape is the same for every dtype; only the rank decides whether the short path applies
    specialize=lambda xp, in_types: (_flatten_2d, (), ()),
    infer_shape=_flatten_shape,
    gradient=_reshape_like_grad,
    doc="Collapse every axis but the first: (N, d1, d2, ...) -> (N, d1*d2*...).",
)


def _like_range(ndim, begin, end, side, where):
    """MXNet's ReshapeLikeRangeCanonicalize: [begin, end) over ``ndim`` dims, negatives allowed."""
    b = 0 if begin is None else begin
    if b < 0:
        b += ndim
    e = ndim if end is None else end
    if e < 0:
        e += ndim
    if not (0 <= b < e <= ndim):
        raise ShapeError(
            f"{where}: invalid range {side}_begin={begin}, {side}_end={end} for the {ndim}-d input {side!r}"
        )
    return b, e


def _reshape_like_target(params, a, b, where):
    lb, le = _like_range(len(a), params["lhs_begin"], params["lhs_end"], "lhs", where)
    rb, re = _like_range(len(b), params["rhs_begin"], params["rhs_end"], "rhs", where)
    out = tuple(a[:lb]) + tuple(b[rb:re]) + tuple(a[le:])
    if _prod(out) != _prod(a):
        raise ShapeError(
            f"{where}: cannot reshape lhs of shape {tuple(a)} to {out} (from rhs {tuple(b)}): element counts differ"
        )
    return out


@wait_for_inputs(0, 1)
def _reshape_like_shape(params, in_shapes, out_shapes, where):
    a, b = in_shapes
    return in_shapes, [_reshape_like_target(params, a, b, where)]


def _reshape_like_fwd(xp, a, b, **params):
    return a.reshape(_reshape_like_target(params, a.shape, b.shape, "reshape_like"))


def _reshape_like_whole(a, b):
    """reshape_like with every range at its default: lhs takes rhs's whole shape. The target is then
    b.shape; the general forward's checks (both ranks >= 1, equal sizes) pick the short path, and
    anything they would reject goes to the general forward for its ShapeError."""
    if a.ndim and b.ndim and a.size == b.size:
        return a.reshape(b.shape)
    return _reshape_like_fwd(None, a, b, lhs_begin=None, lhs_end=None, rhs_begin=None, rhs_end=None)


def _reshape_like_specialize(xp, in_types, lhs_begin, lhs_end, rhs_begin, rhs_end):
    """Kernel for the default ranges (every dtype: a reshape does not look at values)."""
    if (lhs_begin, lhs_end, rhs_begin, rhs_end) != (None, None, None, None):
        return None
    return _reshape_like_whole, (), ()


register(
    "reshape_like",
    inputs=("lhs", "rhs"),
    params={k: Param("int", None) for k in ("lhs_begin", "lhs_end", "rhs_begin", "rhs_end")},
    forward=_reshape_like_fwd,
    specialize=_reshape_like_specialize,
    infer_shape=_reshape_like_shape,
    infer_type=_keep_first_type,
    gradient=_reshape_like_grad,
    doc="Reshape ``lhs`` (dims [lhs_begin, lhs_end)) to the shape of ``rhs`` (dims [rhs_begin, rhs_end)).",
)


# ----------------------------------------------------------------------------
# transpose, SwapAxis, expand_dims, squeeze, reverse
# ----------------------------------------------------------------------------


def _perm(axes, ndim, where):
    """The permutation ``axes`` stands for (default: reverse every axis); validated."""
    if not axes:
        return tuple(range(ndim - 1, -1, -1))
    if len(axes) != ndim:
        raise ShapeError(f"{where}: parameter 'axes'={tuple(axes)} has {len(axes)} entries, the input has {ndim} dims")
    perm = tuple(normalize_axis(a, ndim, where, "axes") for a in axes)
    if sorted(perm) != list(range(ndim)):
        raise ShapeError(f"{where}: parameter 'axes'={tuple(axes)} is not a permutation of {tuple(range(ndim))}")
    return perm


def _transpose_shape(params, in_shapes, out_shapes, where):
    # y[i] = x[perm[i]], so each shape gives the other: x[perm[i]] = y[i] (MXNet's TransposeShape fills both
    # ways; with partial shapes an unknown (0) input dimension takes the output's, as in
    # test_transpose_infer_shape_back / _mixed)
    (x,), (y,) = in_shapes, out_shapes
    if x is None and y is None:
        return in_shapes, out_shapes
    if x is not None and y is not None and len(x) != len(y):
        raise ShapeError(f"{where}: input shape {tuple(x)} and output shape {tuple(y)} differ in rank")
    ndim = len(x) if x is not None else len(y)
    perm = _perm(params["axes"], ndim, where)
    back = [0] * ndim  # the input shape the output gives (0: unknown)
    if y is not None:
        for i, p in enumerate(perm):
            back[p] = y[i]
    if x is None:
        return [tuple(back)], out_shapes
    if y is not None and util.zeros_are_unknown():
        x = tuple(d or b for d, b in zip(x, back))
    return [tuple(x)], [tuple(x[p] for p in perm)]


def _transpose_grad(F, n, g):
    # y = x.transpose(p)  ->  dx = dy.transpose(p^-1), with p^-1[p[i]] = i (no axes: reversal, self-inverse)
    axes = n.params["axes"]
    if not axes:
        return [F.transpose(g[0])]
    nd = len(axes)
    inv = [0] * nd
    for i, a in enumerate(axes):
        inv[a % nd] = i
    return [F.transpose(g[0], axes=tuple(inv))]


register(
    "transpose",
    params={"axes": Param("shape", ())},
    forward=lambda xp, x, axes: xp.transpose(x, _perm(axes, x.ndim, "transpose")),
    infer_shape=_transpose_shape,
    gradient=_transpose_grad,
    doc="Permute the axes (default: reverse them).",
)


@wait_for_first_input
def _swap_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    a = normalize_axis(params["dim1"], len(x), where, "dim1")
    b = normalize_axis(params["dim2"], len(x), where, "dim2")
    out = list(x)
    out[a], out[b] = out[b], out[a]
    return in_shapes, [tuple(out)]


register(
    "SwapAxis",
    aliases=("swapaxes",),
    params={"dim1": Param("int", 0), "dim2": Param("int", 0)},
    forward=lambda xp, x, dim1, dim2: xp.swapaxes(x, dim1, dim2),
    infer_shape=_swap_shape,
    # swapping two axes is its own inverse
    gradient=lambda F, n, g: [F.SwapAxis(g[0], dim1=n.params["dim1"], dim2=n.params["dim2"])],
    doc="Interchange two axes (``dim1``, ``dim2``).",
)


def _expand_dims_shape(params, in_shapes, out_shapes, where):
    (x,), (y,) = in_shapes, out_shapes
    if x is not None:
        axis = normalize_axis(params["axis"], len(x) + 1, where)
        return in_shapes, [tuple(x[:axis]) + (1,) + tuple(x[axis:])]
    if y is not None and len(y) >= 1:
        axis = normalize_axis(params["axis"], len(y), where)
        return [tuple(y[:axis]) + tuple(y[axis + 1 :])], out_shapes
    return in_shapes, out_shapes


def _expand_dims_fwd(xp, x, axis):
    return xp.expand_dims(x, normalize_axis(axis, x.ndim + 1, "expand_dims"))


register(
    "expand_dims",
    params={"axis": Param("int")},
    forward=_expand_dims_fwd,
    infer_shape=_expand_dims_shape,
    gradient=_reshape_like_grad,
    doc="Insert an axis of size 1 at ``axis`` (in [-ndim-1, ndim]).",
)


def _squeezed(params, x, where):
    axis = params["axis"]
    if axis is None:
        drop = {i for i, d in enumerate(x) if d == 1}
    else:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        drop = set()
        for a in axes:
            i = normalize_axis(a, len(x), where)
            if x[i] != 1:
                raise ShapeError(f"{where}: cannot squeeze axis {a} of size {x[i]} (input shape {tuple(x)})")
            if i in drop:
                raise ShapeError(f"{where}: parameter 'axis'={axes} repeats axis {a}")
            drop.add(i)
    out = tuple(d for i, d in enumerate(x) if i not in drop)
    return out or (1,)  # MXNet keeps at least one dimension


@wait_for_first_input
def _squeeze_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    return in_shapes, [_squeezed(params, x, where)]


register(
    "squeeze",
    params={"axis": Param("axis", None)},
    forward=lambda xp, x, axis: x.reshape(_squeezed({"axis": axis}, x.shape, "squeeze")),
    infer_shape=_squeeze_shape,
    gradient=_reshape_like_grad,
    doc="Remove size-1 axes (all, or those in ``axis``); the result keeps at least one dimension.",
)


def _flip_axes(axis, ndim, where):
    """Axes flipped an odd number of times (MXNet reverses once per entry, so a repeat cancels)."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    count: dict = {}
    for a in axes:
        i = normalize_axis(a, ndim, where)
        count[i] = count.get(i, 0) + 1
    return tuple(sorted(i for i, c in count.items() if c % 2))


def _reverse_shape(params, in_shapes, out_shapes, where):
    (x,), (y,) = in_shapes, out_shapes
    s = x if x is not None else y
    if s is not None:
        _flip_axes(params["axis"], len(s), where)
        return [s], [s]
    return in_shapes, out_shapes


def _reverse_fwd(xp, x, axis):
    axes = _flip_axes(axis, x.ndim, "reverse")
    return xp.flip(x, axis=axes) if axes else x


register(
    "reverse",
    aliases=("flip",),
    params={"axis": Param("axis")},
    forward=_reverse_fwd,
    infer_shape=_reverse_shape,
    # reversing is an involution: dx = reverse(dy) along the same axes
    gradient=lambda F, n, g: [F.reverse(g[0], axis=n.params["axis"])],
    doc="Reverse the order of elements along ``axis`` (int or tuple).",
)


# ----------------------------------------------------------------------------
# SliceChannel / split, Concat, stack
# ----------------------------------------------------------------------------


def _split_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    n = params["num_outputs"]
    if n < 1:
        raise ShapeError(f"{where}: num_outputs must be >= 1, got {n}")
    if x is None:
        return in_shapes, out_shapes
    axis = normalize_axis(params["axis"], len(x), where)
    partial = util.zeros_are_unknown()
    if partial:
        x = _split_back(params, x, axis, out_shapes)
    if x[axis] % n:
        raise ShapeError(f"{where}: axis {axis} of size {x[axis]} is not divisible by num_outputs={n}")
    part = list(x)
    part[axis] = x[axis] // n
    if params["squeeze_axis"]:
        if part[axis] != 1 and not (partial and x[axis] == 0):
            raise ShapeError(f"{where}: squeeze_axis needs num_outputs equal to the axis size {x[axis]}")
        del part[axis]
    return [tuple(x)], [tuple(part)] * n


def _split_back(params, x, axis, out_shapes):
    """MXNet's backward step of SliceChannel: a known output gives the data's unknown (0) dimensions, the split
    axis ``num_outputs`` times the output's (or ``num_outputs`` itself where ``squeeze_axis`` dropped it)."""
    n = params["num_outputs"]
    for o in out_shapes:
        if o is None:
            continue
        o = list(o)
        if params["squeeze_axis"]:
            if len(o) != len(x) - 1:
                continue
            back = o[:axis] + [n] + o[axis:]
        else:
            if len(o) != len(x):
                continue
            back = o[:axis] + [o[axis] * n] + o[axis + 1 :]
        x = tuple(b if a == 0 else a for a, b in zip(x, back))
    return tuple(x)


def _split_fwd(xp, x, num_outputs, axis, squeeze_axis):
    axis = normalize_axis(axis, x.ndim, "SliceChannel")
    parts = xp.split(x, num_outputs, axis=axis)
    if squeeze_axis:
        parts = [p.squeeze(axis) for p in parts]
    return tuple(parts)


def split_grad(F, n, g, first=0):
    """Gradient of a split along ``axis`` (SliceChannel, and _split_v2 whose parts start at ``first``)."""
    # y_k = x[k-th chunk]  ->  dx = concat(dy_0, ..., dy_{n-1}) along the axis; elements before the first
    # part's start (``first`` > 0) reach no output: zero gradient
    axis = n.params["axis"]
    gs = list(g)
    if n.params["squeeze_axis"]:
        gs = [F.expand_dims(gi, axis=axis) for gi in gs]
    if first > 0:
        gs.insert(0, F.slice_axis(F.zeros_like(n.inputs[0]), axis=axis, begin=0, end=first))
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
    # MXNet numbers the outputs even when there is one: split(x, num_outputs=1) -> "<name>_output0"
    output_names=lambda p: [f"output{i}" for i in range(p["num_outputs"])],
    forward=_split_fwd,
    infer_shape=_split_shape,
    gradient=split_grad,
    doc="Split ``data`` into ``num_outputs`` equal parts along ``axis`` (multiple outputs).",
)


def _concat_partial(params, in_shapes, out_shapes, where):
    """Concat's rule where 0 dimensions may be unknown (MXNet's ConcatShape): every shape shares all dimensions
    but the concatenation axis, filled from whichever knows them (the output too); the output's axis is the
    inputs' sum once all are known, and a known output axis gives the one input whose axis is unknown."""
    shapes = [s for s in (*in_shapes, *out_shapes) if s is not None]
    if not shapes:
        return in_shapes, out_shapes
    ndim = len(shapes[0])
    axis = normalize_axis(params["dim"], ndim, where, "dim")
    common = [0] * ndim
    for s in shapes:
        if len(s) != ndim:
            raise ShapeError(f"{where}: shapes {tuple(shapes[0])} and {tuple(s)} differ in rank")
        for k, d in enumerate(s):
            if k != axis and d:
                if common[k] and common[k] != d:
                    raise ShapeError(f"{where}: dimension {k} is {common[k]} in one shape and {d} in another")
                common[k] = d
    sizes = [0 if s is None else s[axis] for s in in_shapes]
    total = out_shapes[0][axis] if out_shapes[0] is not None else 0
    if total and sizes.count(0) == 1:
        rest = total - sum(sizes)
        if rest < 1:
            raise ShapeError(f"{where}: output size {total} along dim {axis} leaves no room for the unknown input")
        sizes[sizes.index(0)] = rest
    if all(sizes):
        total = sum(sizes)

    def with_axis(size):
        return tuple(size if k == axis else d for k, d in enumerate(common))

    return [with_axis(z) for z in sizes], [with_axis(total)]


def _concat_shape(params, in_shapes, out_shapes, where):
    if util.zeros_are_unknown():
        return _concat_partial(params, in_shapes, out_shapes, where)
    dim = params["dim"]
    known = [(i, s) for i, s in enumerate(in_shapes) if s is not None]
    out = out_shapes[0]
    if not known:
        return in_shapes, out_shapes
    i0, s0 = known[0]
    ndim = len(s0)
    axis = normalize_axis(dim, ndim, where, "dim")
    for i, s in known[1:]:
        if len(s) != ndim or any(a != b for k, (a, b) in enumerate(zip(s, s0)) if k != axis):
            raise ShapeError(
                f"{where}: input arg{i} has shape {tuple(s)}, incompatible with arg{i0} of shape {tuple(s0)} "
                f"for concatenation along dim {dim} (all dims but {axis} must agree)"
            )
    missing = [i for i, s in enumerate(in_shapes) if s is None]
    if len(missing) == 1 and out is not None:  # the output fills the one unknown input
        rest = out[axis] - sum(s[axis] for _, s in known)
        if rest < 1:
            raise ShapeError(f"{where}: output shape {tuple(out)} leaves no room for input arg{missing[0]}")
        filled = list(out)
        filled[axis] = rest
        in_shapes = list(in_shapes)
        in_shapes[missing[0]] = tuple(filled)
        missing = []
    if missing:
        return in_shapes, out_shapes
    total = list(s0)
    total[axis] = sum(s[axis] for s in in_shapes)
    return in_shapes, [tuple(total)]


def _concat_fwd(xp, *xs, num_args, dim):
    return xp.concatenate(xs, axis=normalize_axis(dim, xs[0].ndim, "Concat", "dim"))


# _rnn_param_concat: Gluon's RNN layers pack their parameters with it: Concat whose shape rule may also fill
# an input's unknown shape from the output's (symgrad's Concat rule already fills what it can)
for _name, _aliases, _doc in (
    ("Concat", ("concat",), "Concatenate inputs along ``dim``."),
    (
        "_rnn_param_concat",
        ("_npi_rnn_param_concat",),
        "Concat as Gluon's RNN layers use it to pack their parameters into RNN's ``parameters`` vector.",
    ),
):
    register(
        _name,
        aliases=_aliases,
        variadic="num_args",
        params={"num_args": Param("int"), "dim": Param("int", 1)},
        forward=_concat_fwd,
        infer_shape=_concat_shape,
        # y = [x_0 | x_1 | ...]  ->  dx_k = the k-th piece of dy
        gradient=lambda F, n, g: list(F._split_like(g[0], *n.inputs, dim=n.params["dim"])),
        doc=_doc,
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


def _stack_shape(params, in_shapes, out_shapes, where):
    n = params["num_args"]
    if n < 1:
        raise ShapeError(f"{where}: num_args must be >= 1, got {n}")
    known = [(i, s) for i, s in enumerate(in_shapes) if s is not None]
    y = out_shapes[0]
    if not known and y is None:
        return in_shapes, out_shapes
    if known:
        i0, s0 = known[0]
        for i, s in known[1:]:
            if tuple(s) != tuple(s0):
                raise ShapeError(
                    f"{where}: all inputs must have the same shape; arg{i} has {tuple(s)}, arg{i0} has {tuple(s0)}"
                )
        axis = normalize_axis(params["axis"], len(s0) + 1, where)
        out = tuple(s0[:axis]) + (n,) + tuple(s0[axis:])
        return [tuple(s0)] * len(in_shapes), [out]
    axis = normalize_axis(params["axis"], len(y), where)
    s0 = tuple(y[:axis]) + tuple(y[axis + 1 :])
    return [s0] * len(in_shapes), out_shapes


def _stack_fwd(xp, *xs, axis, num_args):
    return xp.stack(xs, axis=normalize_axis(axis, xs[0].ndim + 1, "stack"))


def _stack_grad(F, n, g):
    # y[..., k, ...] = x_k  ->  dx_k = dy split along the new axis, which is then dropped
    parts = F.SliceChannel(g[0], num_outputs=n.params["num_args"], axis=n.params["axis"], squeeze_axis=True)
    return list(parts)


register(
    "stack",
    variadic="num_args",
    params={"axis": Param("int", 0), "num_args": Param("int")},
    forward=_stack_fwd,
    infer_shape=_stack_shape,
    gradient=_stack_grad,
    doc="Join equally shaped inputs along a new axis ``axis``.",
)


# ----------------------------------------------------------------------------
# slice, slice_axis, slice_like
# ----------------------------------------------------------------------------


def _slice_prepare(params, name):
    where = f"slice {name!r}"
    begin = _opt_int_tuple(params["begin"], where, "begin")
    end = _opt_int_tuple(params["end"], where, "end")
    step = _opt_int_tuple(params["step"], where, "step")
    if len(begin) != len(end):
        raise ParamError(f"{where}: 'begin' {begin} and 'end' {end} must have the same length")
    if step and len(step) != len(begin):
        raise ParamError(f"{where}: 'step' {step} and 'begin' {begin} must have the same length")
    if any(s == 0 for s in step):
        raise ParamError(f"{where}: 'step' {step} cannot contain 0")
    return {"begin": begin, "end": end, "step": step}


def slice_index(shape, begin, end, step, where="slice"):
    """MXNet's GetIndexRange as a tuple of Python slices (one per sliced axis) and the output shape.

    Missing begin/end are the ends of the axis in the step's direction; negative values count from
    the end; out-of-range values are clamped (an empty selection gives a zero-size axis).
    """
    nd = len(shape)
    if nd == 0:
        raise ShapeError(f"{where}: slice only works on inputs with ndim > 0")
    if len(begin) > nd:
        raise ShapeError(f"{where}: begin={tuple(begin)} slices {len(begin)} axes, the input {tuple(shape)} has {nd}")
    index, out = [], list(shape)
    for i in range(len(begin)):
        s = step[i] if step and step[i] is not None else 1
        if s == 0:
            raise ShapeError(f"{where}: step[{i}] cannot be 0")
        n = shape[i]
        b = begin[i] if begin[i] is not None else (n - 1 if s < 0 else 0)
        e = end[i] if end[i] is not None else (-1 if s < 0 else n)
        if b < 0:
            b += n
        if e < 0 and end[i] is not None:
            e += n
        if b < 0 and s > 0:
            b = 0
        if b > n - 1 and s < 0:
            b = n - 1
        if b < 0 or b > n - 1:
            b = -1  # the selection is empty
        e = min(max(e, -1), n)
        if b >= 0 and e != b:
            size = ((e - b - 1) // s + 1 if e > b else 0) if s > 0 else ((b - e - 1) // -s + 1 if e < b else 0)
        else:
            size = 0
        out[i] = size
        if size == 0:
            index.append(slice(0, 0))
        else:
            index.append(slice(b, None if e < 0 else e, s))
    return tuple(index), tuple(out)


@wait_for_first_input
def _slice_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    return in_shapes, [slice_index(x, params["begin"], params["end"], params["step"], where)[1]]


def _slice_fwd(xp, x, begin, end, step):
    return x[slice_index(x.shape, begin, end, step)[0]]


register(
    "slice",
    aliases=("crop",),
    params={"begin": Param("any"), "end": Param("any"), "step": Param("any", ())},
    prepare=_slice_prepare,
    forward=_slice_fwd,
    infer_shape=_slice_shape,
    # y = x[b:e:s]  ->  dx = zeros like x with dy written at [b:e:s]
    gradient=lambda F, n, g: [F._slice_scatter(g[0], n.inputs[0], **n.params)],
    doc="Slice with per-axis ``begin``/``end``/``step`` tuples (None entries, negative values and steps).",
)


def _register_scatter(name, *, params, forward, gradient, doc):
    """Register a hidden gradient op from (``ograd``, ``data``) to an array shaped and typed like ``data``."""
    register(
        name,
        inputs=("ograd", "data"),
        params=params,
        forward=forward,
        infer_shape=like_input1,
        infer_type=_keep_first_type,
        no_grad_inputs=("data",),
        gradient=gradient,
        doc=doc,
    )


def _slice_scatter_fwd(xp, g, like, begin, end, step):
    out = xp.zeros(like.shape, dtype=g.dtype)
    out[slice_index(like.shape, begin, end, step)[0]] = g
    return out


_register_scatter(
    "_slice_scatter",
    params={"begin": Param("any"), "end": Param("any"), "step": Param("any", ())},
    forward=_slice_scatter_fwd,
    # writing g into a zero array at [b:e:s] is linear in g; its adjoint reads [b:e:s] back
    gradient=lambda F, n, g: [F.slice(g[0], **n.params), None],
    doc="slice's gradient: zeros shaped like ``data`` with ``ograd`` at the slice (hidden).",
)


def _slice_axis_range(params, shape, where):
    nd = len(shape)
    axis = params["axis"]
    if not -nd <= axis < nd:
        raise ShapeError(f"{where}: parameter 'axis'={axis} is out of range for a {nd}-d input")
    axis %= nd
    n = shape[axis]
    b, e = params["begin"], params["end"]
    if b < 0:
        b += n
    e = n if e is None else (e + n if e < 0 else e)
    if not (0 <= b < e <= n):
        raise ShapeError(
            f"{where}: begin={params['begin']}, end={params['end']} select nothing valid on axis {axis} "
            f"of size {n} (need 0 <= begin < end <= {n} after adding the size to negative values)"
        )
    return axis, b, e


@wait_for_first_input
def _slice_axis_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    axis = normalize_axis(params["axis"], len(x), where)
    if x[axis] == 0 and util.zeros_are_unknown():
        return in_shapes, [tuple(x)]  # MXNet: a slice of an unknown axis has an unknown size
    axis, b, e = _slice_axis_range(params, x, where)
    out = list(x)
    out[axis] = e - b
    return in_shapes, [tuple(out)]


def _axis_index(axis, b, e):
    return (slice(None),) * axis + (slice(b, e),)


def _slice_axis_fwd(xp, x, axis, begin, end):
    a, b, e = _slice_axis_range({"axis": axis, "begin": begin, "end": end}, x.shape, "slice_axis")
    return x[_axis_index(a, b, e)]


_SLICE_AXIS_PARAMS = {"axis": Param("int"), "begin": Param("int"), "end": Param("int", optional=True)}

register(
    "slice_axis",
    params=dict(_SLICE_AXIS_PARAMS),
    forward=_slice_axis_fwd,
    infer_shape=_slice_axis_shape,
    # y = x[..., b:e, ...]  ->  dx = zeros with dy at [b:e] on the axis
    gradient=lambda F, n, g: [F._slice_axis_scatter(g[0], n.inputs[0], **n.params)],
    doc="Slice one ``axis`` from ``begin`` to ``end`` (None: to the end; negatives count from the end).",
)


def _slice_axis_scatter_fwd(xp, g, like, axis, begin, end):
    a, b, e = _slice_axis_range({"axis": axis, "begin": begin, "end": end}, like.shape, "_slice_axis_scatter")
    out = xp.zeros(like.shape, dtype=g.dtype)
    out[_axis_index(a, b, e)] = g
    return out


_register_scatter(
    "_slice_axis_scatter",
    params=dict(_SLICE_AXIS_PARAMS),
    forward=_slice_axis_scatter_fwd,
    # linear in g; the adjoint of writing into [b:e] is reading [b:e]
    gradient=lambda F, n, g: [F.slice_axis(g[0], **n.params), None],
    doc="slice_axis's gradient (hidden).",
)


def _slice_like_out(params, x, like, where):
    axes = params["axes"]
    if not axes:
        if len(x) != len(like):
            raise ShapeError(
                f"{where}: without 'axes' the inputs must have the same ndim, got data {tuple(x)} and "
                f"shape_like {tuple(like)}"
            )
        axes = range(len(x))
    out = list(x)
    for a in axes:
        i = normalize_axis(a, len(x), where, "axes")
        if i >= len(like):
            raise ShapeError(f"{where}: axis {a} does not exist in shape_like {tuple(like)}")
        if like[i] > x[i]:
            raise ShapeError(
                f"{where}: axis {i} of shape_like {tuple(like)} ({like[i]}) exceeds that of data {tuple(x)} ({x[i]})"
            )
        out[i] = like[i]
    return tuple(out)


@wait_for_inputs(0, 1)
def _slice_like_shape(params, in_shapes, out_shapes, where):
    x, like = in_shapes
    return in_shapes, [_slice_like_out(params, x, like, where)]


def _slice_like_fwd(xp, x, like, axes):
    out = _slice_like_out({"axes": axes}, x.shape, like.shape, "slice_like")
    return x[tuple(slice(0, d) for d in out)]


register(
    "slice_like",
    inputs=("data", "shape_like"),
    params={"axes": Param("shape", ())},
    forward=_slice_like_fwd,
    infer_shape=_slice_like_shape,
    infer_type=_keep_first_type,
    # y = x[:d0, :d1, ...]  ->  dx = zeros with dy in the leading corner; shape_like gets none
    gradient=lambda F, n, g: [F._corner_scatter(g[0], n.inputs[0]), None],
    doc="Slice ``data`` from 0 to the size of ``shape_like`` on ``axes`` (default: every axis).",
)


def _corner_fwd(xp, g, like):
    out = xp.zeros(like.shape, dtype=g.dtype)
    out[tuple(slice(0, d) for d in g.shape)] = g
    return out


_register_scatter(
    "_corner_scatter",
    params={},
    forward=_corner_fwd,
    # linear in g; the adjoint reads the leading corner of g's size back: slice_like(h, g)
    gradient=lambda F, n, g: [F.slice_like(g[0], n.inputs[0]), None],
    doc="slice_like's gradient: zeros shaped like ``data`` with ``ograd`` in the leading corner (hidden).",
)


# ----------------------------------------------------------------------------
# tile, repeat
# ----------------------------------------------------------------------------


def _tile_prepare(params, name):
    reps = params["reps"]
    if any(r < 1 for r in reps):
        raise ParamError(f"tile {name!r}: every entry of 'reps' must be a positive integer, got {reps}")
    return params


def _tile_dims(x, reps):
    nd = max(len(x), len(reps))
    return (1,) * (nd - len(x)) + tuple(x), (1,) * (nd - len(reps)) + tuple(reps)


@wait_for_first_input
def _tile_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if not params["reps"]:
        return in_shapes, [x]
    xs, rs = _tile_dims(x, params["reps"])
    return in_shapes, [tuple(d * r for d, r in zip(xs, rs))]


def _tile_fwd(xp, x, reps):
    return xp.tile(x, reps) if reps else x


def _tile_sum_fwd(xp, g, like, reps):
    """Sum the tiled copies: g viewed as (r0, d0, r1, d1, ...), summed over every r axis."""
    if not reps:
        return g
    xs, rs = _tile_dims(like.shape, reps)
    inter = tuple(v for pair in zip(rs, xs) for v in pair)
    s = g.reshape(inter).sum(axis=tuple(range(0, 2 * len(xs), 2)), dtype=_acc(g.dtype))
    return s.astype(g.dtype, copy=False).reshape(like.shape)


register(
    "tile",
    params={"reps": Param("shape")},
    prepare=_tile_prepare,
    forward=_tile_fwd,
    infer_shape=_tile_shape,
    # every input element appears once per tile: dx = sum of dy over the copies
    gradient=lambda F, n, g: [F._tile_sum(g[0], n.inputs[0], reps=n.params["reps"])],
    doc="Repeat the whole array ``reps`` times per axis (numpy.tile).",
)

_register_scatter(
    "_tile_sum",
    params={"reps": Param("shape")},
    forward=_tile_sum_fwd,
    # summing copies is linear; its adjoint copies again: tile(h, reps) has the tiled shape
    gradient=lambda F, n, g: [F.tile(g[0], reps=n.params["reps"]), None],
    doc="tile's gradient: the sum of the tiled copies of ``ograd`` (hidden).",
)


def _repeat_prepare(params, name):
    if params["repeats"] < 0:
        raise ParamError(f"repeat {name!r}: parameter 'repeats' cannot be negative, got {params['repeats']}")
    return params


@wait_for_first_input
def _repeat_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    r, axis = params["repeats"], params["axis"]
    if axis is not None:
        axis = normalize_axis(axis, len(x), where)
    if r == 0:  # MXNet: an empty 1-d array, whatever the axis
        return in_shapes, [(0,)]
    if axis is None:
        return in_shapes, [(_prod(x) * r,)]
    out = list(x)
    out[axis] *= r
    return in_shapes, [tuple(out)]


def _repeat_fwd(xp, x, repeats, axis):
    if repeats == 0:
        return xp.zeros((0,), dtype=x.dtype)
    if axis is None:
        return xp.repeat(x.reshape(-1), repeats)
    return xp.repeat(x, repeats, axis=normalize_axis(axis, x.ndim, "repeat"))


def _repeat_sum_fwd(xp, g, like, repeats, axis):
    """Sum each element's copies: the repeated axis is split into (size, repeats), then summed."""
    if repeats == 0:
        return xp.zeros(like.shape, dtype=g.dtype)
    if axis is None:
        s = g.reshape(like.size, repeats).sum(axis=1, dtype=_acc(g.dtype))
    else:
        a = normalize_axis(axis, like.ndim, "_repeat_sum")
        s = g.reshape(like.shape[: a + 1] + (repeats,) + like.shape[a + 1 :]).sum(axis=a + 1, dtype=_acc(g.dtype))
    return s.astype(g.dtype, copy=False).reshape(like.shape)


_REPEAT_PARAMS = {"repeats": Param("int"), "axis": Param("int", None)}

register(
    "repeat",
    params=dict(_REPEAT_PARAMS),
    prepare=_repeat_prepare,
    forward=_repeat_fwd,
    infer_shape=_repeat_shape,
    # each element is copied ``repeats`` times: dx = sum of dy over its copies
    gradient=lambda F, n, g: [F._repeat_sum(g[0], n.inputs[0], **n.params)],
    doc="Repeat each element ``repeats`` times along ``axis`` (None: of the flattened input).",
)

_register_scatter(
    "_repeat_sum",
    params=dict(_REPEAT_PARAMS),
    forward=_repeat_sum_fwd,
    # linear; the adjoint of summing the copies is repeating again
    gradient=lambda F, n, g: [F.repeat(g[0], **n.params), None],
    doc="repeat's gradient: the sum of each element's copies (hidden).",
)


# ----------------------------------------------------------------------------
# broadcast_to, broadcast_axis, broadcast_like
# ----------------------------------------------------------------------------


def _broadcast_check(x, out, where, what):
    for d, o in zip(x, out):
        if d != o and d != 1:
            raise ShapeError(f"{where}: cannot broadcast input of shape {tuple(x)} to {tuple(out)} ({what})")
    return tuple(out)


def _broadcast_to_out(params, x, where):
    shape = params["shape"]
    if len(shape) != len(x):
        raise ShapeError(f"{where}: parameter 'shape'={tuple(shape)} must have as many dims as the input {tuple(x)}")
    out = tuple(d if s == 0 else s for d, s in zip(x, shape))
    return _broadcast_check(x, out, where, f"shape={tuple(shape)}")


def _bcast_shape_rule(out_fn):
    def rule(params, in_shapes, out_shapes, where):
        x = in_shapes[0]
        if x is None or any(s is None for s in in_shapes):
            return in_shapes, out_shapes
        return in_shapes, [out_fn(params, *in_shapes, where)]

    return rule


def _bcast_fwd(out_fn, name):
    def forward(xp, x, *rest, **params):
        out = out_fn(params, x.shape, *[r.shape for r in rest], name)
        return x if out == x.shape else xp.ascontiguousarray(xp.broadcast_to(x, out))

    return forward


# y = broadcast(x)  ->  dx = dy summed over the broadcast axes (the one shared hidden _sum_to_like)
_bcast_grad = _grad_like_first(lambda F, n, g: F._sum_to_like(g[0], n.inputs[0]))

register(
    "broadcast_to",
    params={"shape": Param("shape", ())},
    forward=_bcast_fwd(_broadcast_to_out, "broadcast_to"),
    infer_shape=_bcast_shape_rule(_broadcast_to_out),
    gradient=_bcast_grad,
    doc="Broadcast size-1 axes to ``shape`` (0 keeps the input's size).",
)


def _broadcast_axis_out(params, x, where):
    axis, size = params["axis"], params["size"]
    if len(axis) != len(size):
        raise ShapeError(f"{where}: 'axis'={tuple(axis)} and 'size'={tuple(size)} must have the same length")
    out = list(x)
    for a, s in zip(axis, size):
        i = normalize_axis(a, len(x), where)
        if x[i] != 1:
            raise ShapeError(f"{where}: broadcasting axis {a} must have size 1, input shape is {tuple(x)}")
        if s < 1:
            raise ShapeError(f"{where}: 'size' entries must be positive, got {tuple(size)}")
        out[i] = s
    return tuple(out)


register(
    "broadcast_axis",
    aliases=("broadcast_axes",),
    params={"axis": Param("shape", ()), "size": Param("shape", ())},
    forward=_bcast_fwd(_broadcast_axis_out, "broadcast_axis"),
    infer_shape=_bcast_shape_rule(_broadcast_axis_out),
    gradient=_bcast_grad,
    doc="Broadcast the size-1 axes ``axis`` to the sizes ``size``.",
)


def _broadcast_like_out(params, x, like, where):
    la, ra = params["lhs_axes"], params["rhs_axes"]
    if la is None or ra is None:
        if len(x) != len(like):
            raise ShapeError(f"{where}: lhs of shape {tuple(x)} cannot be broadcast to rhs {tuple(like)}")
        return _broadcast_check(x, like, where, f"like rhs {tuple(like)}")
    if len(la) != len(ra):
        raise ShapeError(f"{where}: lhs_axes={tuple(la)} and rhs_axes={tuple(ra)} must have the same length")
    if not la:
        raise ShapeError(f"{where}: empty lhs_axes/rhs_axes are not allowed")
    out = list(x)
    for a, b in zip(la, ra):
        i = normalize_axis(a, len(x), where, "lhs_axes")
        j = normalize_axis(b, len(like), where, "rhs_axes")
        if x[i] != 1:
            raise ShapeError(f"{where}: lhs axis {a} has size {x[i]} (lhs {tuple(x)}), it must be 1 to broadcast")
        out[i] = like[j]
    return tuple(out)


register(
    "broadcast_like",
    inputs=("lhs", "rhs"),
    params={"lhs_axes": Param("shape", None), "rhs_axes": Param("shape", None)},
    forward=_bcast_fwd(_broadcast_like_out, "broadcast_like"),
    infer_shape=_bcast_shape_rule(_broadcast_like_out),
    infer_type=_keep_first_type,
    gradient=_bcast_grad,
    doc="Broadcast ``lhs`` like ``rhs`` (all axes, or ``lhs_axes`` to the sizes of ``rhs_axes``).",
)


# ----------------------------------------------------------------------------
# depth_to_space, space_to_depth
# ----------------------------------------------------------------------------


def _block_prepare(opname):
    def prepare(params, name):
        if params["block_size"] < 1:
            raise ParamError(f"{opname} {name!r}: 'block_size' must be a positive integer, got {params['block_size']}")
        return params

    return prepare


def _check_block_input(x, where):
    """4-d with no zero-size axis (MXNet's DepthToSpace/SpaceToDepth shape checks refuse one)."""
    if len(x) != 4:
        raise ShapeError(f"{where}: input must be 4-d (N, C, H, W), got {tuple(x)}")
    if 0 in tuple(x):
        raise ShapeError(f"{where}: input {tuple(x)} has a zero-size axis {tuple(x).index(0)}; MXNet refuses one")


def _d2s_out(x, bs, where):
    _check_block_input(x, where)
    if x[1] % (bs * bs):
        raise ShapeError(f"{where}: channels {x[1]} of input {tuple(x)} are not a multiple of block_size^2={bs * bs}")
    return (x[0], x[1] // (bs * bs), x[2] * bs, x[3] * bs)


def _s2d_out(x, bs, where):
    _check_block_input(x, where)
    if x[2] % bs or x[3] % bs:
        raise ShapeError(f"{where}: height and width of input {tuple(x)} must be multiples of block_size={bs}")
    return (x[0], x[1] * bs * bs, x[2] // bs, x[3] // bs)


def _block_shape(fn):
    @wait_for_first_input
    def rule(params, in_shapes, out_shapes, where):
        (x,) = in_shapes
        return in_shapes, [fn(x, params["block_size"], where)]

    return rule


def _d2s_fwd(xp, x, block_size):
    # DCR order (MXNet): channel c = (b1 * bs + b2) * C' + c', out[n, c', h*bs + b1, w*bs + b2]
    n, c, h, w = x.shape
    bs = block_size
    y = x.reshape(n, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    return y.reshape(_d2s_out(x.shape, bs, "depth_to_space"))


def _s2d_fwd(xp, x, block_size):
    # the inverse of depth_to_space: out[n, (b1 * bs + b2) * C + c, h, w] = x[n, c, h*bs + b1, w*bs + b2]
    n, c, h, w = x.shape
    bs = block_size
    y = x.reshape(n, c, h // bs, bs, w // bs, bs).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(_s2d_out(x.shape, bs, "space_to_depth"))


register(
    "depth_to_space",
    params={"block_size": Param("int")},
    prepare=_block_prepare("depth_to_space"),
    forward=_d2s_fwd,
    infer_shape=_block_shape(_d2s_out),
    # a permutation of the elements: the gradient applies the inverse permutation, space_to_depth
    gradient=lambda F, n, g: [F.space_to_depth(g[0], block_size=n.params["block_size"])],
    doc="Move (block_size x block_size) blocks of channels into space (MXNet's DCR ordering).",
)

register(
    "space_to_depth",
    params={"block_size": Param("int")},
    prepare=_block_prepare("space_to_depth"),
    forward=_s2d_fwd,
    infer_shape=_block_shape(_s2d_out),
    # the inverse permutation of depth_to_space
    gradient=lambda F, n, g: [F.depth_to_space(g[0], block_size=n.params["block_size"])],
    doc="Move (block_size x block_size) spatial blocks into channels (inverse of depth_to_space).",
)


# ----------------------------------------------------------------------------
# _slice_assign, _slice_assign_scalar: x with a slice replaced (``x[b:e:s] = v`` as an op)
# ----------------------------------------------------------------------------


@wait_for_first_input
def _slice_assign_shape(params, in_shapes, out_shapes, where):
    lhs, rhs = in_shapes
    want = slice_index(lhs, params["begin"], params["end"], params["step"], where)[1]
    if rhs is not None and tuple(rhs) != tuple(want):
        raise ShapeError(f"{where}: input 'rhs' has shape {tuple(rhs)}, the slice of 'lhs' {tuple(lhs)} is {want}")
    return [tuple(lhs), want], [tuple(lhs)]


def _slice_assign_fwd(xp, lhs, rhs, begin, end, step):
    out = lhs.copy()
    out[slice_index(lhs.shape, begin, end, step)[0]] = rhs
    return out


_ASSIGN_PARAMS = {"begin": Param("any"), "end": Param("any"), "step": Param("any", ())}

register(
    "_slice_assign",
    aliases=("_crop_assign",),
    inputs=("lhs", "rhs"),
    params=_ASSIGN_PARAMS,
    prepare=_slice_prepare,
    forward=_slice_assign_fwd,
    infer_shape=_slice_assign_shape,
    infer_type=_keep_first_type,
    # y = lhs outside the slice, rhs inside: d lhs = g with the slice zeroed, d rhs = g[slice]
    gradient=lambda F, n, g: [F._slice_assign_scalar(g[0], scalar=0.0, **n.params), F.slice(g[0], **n.params)],
    doc="``lhs`` with ``lhs[begin:end:step]`` replaced by ``rhs``.",
)


def _slice_assign_scalar_fwd(xp, x, scalar, begin, end, step):
    out = x.copy()
    out[slice_index(x.shape, begin, end, step)[0]] = scalar
    return out


register(
    "_slice_assign_scalar",
    aliases=("_crop_assign_scalar",),
    params={"scalar": Param("float", 0.0), **_ASSIGN_PARAMS},
    prepare=lambda params, name: {
        "scalar": params["scalar"],
        **_slice_prepare({k: v for k, v in params.items() if k != "scalar"}, name),
    },
    forward=_slice_assign_scalar_fwd,
    infer_shape=same_shape,
    infer_type=_keep_first_type,
    # y = x outside the slice, a constant inside: dx = g with the slice zeroed
    gradient=lambda F, n, g: [F._slice_assign_scalar(g[0], **{**n.params, "scalar": 0.0})],
    doc="``data`` with ``data[begin:end:step]`` set to ``scalar``.",
)


# ----------------------------------------------------------------------------
# Crop (legacy, NCHW): crop data to h_w or to crop_like's spatial size, at offset or centred
# ----------------------------------------------------------------------------


def _crop_offset(params, dshape, oh, ow, where):
    h, w = dshape[2], dshape[3]
    if oh > h or ow > w:
        raise ShapeError(f"{where}: the crop ({oh}, {ow}) is larger than the input's spatial size ({h}, {w})")
    if params["center_crop"]:
        return (h - oh) // 2, (w - ow) // 2
    oy, ox = (tuple(params["offset"]) + (0, 0))[:2]
    if not (0 <= oy <= h - oh and 0 <= ox <= w - ow):
        raise ShapeError(f"{where}: offset ({oy}, {ox}) leaves the input ({h}, {w}) for a crop of ({oh}, {ow})")
    return oy, ox


def _crop_legacy_shape(params, in_shapes, out_shapes, where):
    data = in_shapes[0]
    if data is None or (params["num_args"] == 2 and in_shapes[1] is None):
        return in_shapes, out_shapes
    if len(data) != 4:
        raise ShapeError(f"{where}: input 'data' must be 4-d (N, C, H, W), got {tuple(data)}")
    if params["num_args"] == 2:
        oh, ow = in_shapes[1][2:4] if len(in_shapes[1]) == 4 else (None, None)
        if oh is None:
            raise ShapeError(f"{where}: input 'crop_like' must be 4-d (N, C, H, W), got {tuple(in_shapes[1])}")
    else:
        oh, ow = (tuple(params["h_w"]) + (0, 0))[:2]
        if oh <= 0 or ow <= 0:
            raise ParamError(f"{where}: parameter 'h_w' must be two positive sizes with one input, got {params['h_w']}")
    _crop_offset(params, data, oh, ow, where)
    return in_shapes, [(data[0], data[1], oh, ow)]


def _crop_legacy_fwd(xp, data, *like, num_args, offset, h_w, center_crop):
    p = {"offset": offset, "center_crop": center_crop}
    oh, ow = like[0].shape[2:4] if like else h_w[:2]
    oy, ox = _crop_offset(p, data.shape, oh, ow, "Crop")
    return data[:, :, oy : oy + oh, ox : ox + ow].copy()


def _crop_scatter_fwd(xp, g, data, offset, center_crop):
    oh, ow = g.shape[2:4]
    oy, ox = _crop_offset({"offset": offset, "center_crop": center_crop}, data.shape, oh, ow, "Crop")
    out = xp.zeros(data.shape, dtype=g.dtype)
    out[:, :, oy : oy + oh, ox : ox + ow] = g
    return out


def _crop_legacy_grad(F, n, g):
    # y = data[:, :, oy:oy+h, ox:ox+w]: d data = g written into zeros at that window; crop_like only
    # lends its shape (MXNet writes it a zero gradient)
    p = {"offset": n.params["offset"], "center_crop": n.params["center_crop"]}
    return [F._crop_scatter(g[0], n.inputs[0], **p)] + [None] * (len(n.inputs) - 1)


register(
    "Crop",
    variadic="num_args",
    inputs=lambda p: ["data", "crop_like"][: p["num_args"]],
    params={
        "num_args": Param("int"),
        "offset": Param("shape", (0, 0)),
        "h_w": Param("shape", (0, 0)),
        "center_crop": Param("bool", False),
    },
    forward=_crop_legacy_fwd,
    infer_shape=_crop_legacy_shape,
    infer_type=_keep_first_type,
    no_grad_inputs=("crop_like",),
    gradient=_crop_legacy_grad,
    doc="Legacy NCHW crop: to ``h_w`` (one input) or to ``crop_like``'s spatial size, at ``offset`` or centred.",
)

_register_scatter(
    "_crop_scatter",
    params={"offset": Param("shape", (0, 0)), "center_crop": Param("bool", False)},
    forward=_crop_scatter_fwd,
    # linear in g; its adjoint crops the window back out, to g's own spatial size
    gradient=lambda F, n, g: [F.Crop(g[0], n.inputs[0], num_args=2, **n.params), None],
    doc="Crop's gradient: zeros shaped like ``data`` with ``ograd`` in the crop window (hidden).",
)
