"""OpInfo rows for the shape operators (symgrad/ops/shape.py): Reshape, Flatten, axis permutations, joining
and splitting, slicing and slice assignment, Crop, repetition, broadcasting, depth/space and
_rnn_param_concat.

References are plain numpy written from MXNet 1.9's definitions (matrix_op-inl.h,
broadcast_reduce_op.h): target shapes of Reshape's special values are written out as
literals, depth_to_space/space_to_depth by explicit index loops. Rows named after a hidden
op (``_slice_scatter``, ``_tile_sum``, ...) check the gradient ops themselves: their own
gradients (slice, tile, ...) are what second-order derivatives run through.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

X3 = (2, 3, 4)


def _like(shape):
    """A shape-only input: its values never matter."""
    return In(shape, grad=False)


def _d2s_ref(x, bs):
    n, c, h, w = x.shape
    cc = c // (bs * bs)
    out = np.zeros((n, cc, h * bs, w * bs))
    for i, k, y, z, b1, b2 in np.ndindex(n, cc, h, w, bs, bs):
        out[i, k, y * bs + b1, z * bs + b2] = x[i, (b1 * bs + b2) * cc + k, y, z]
    return out


def _s2d_ref(x, bs):
    n, c, h, w = x.shape
    out = np.zeros((n, c * bs * bs, h // bs, w // bs))
    for i, k, y, z, b1, b2 in np.ndindex(n, c, h // bs, w // bs, bs, bs):
        out[i, (b1 * bs + b2) * c + k, y, z] = x[i, k, y * bs + b1, z * bs + b2]
    return out


def _scatter_ref(shape, index, g):
    out = np.zeros(shape)
    out[index] = g
    return out


def _assign(x, index, value):
    out = x.copy()
    out[index] = value
    return out


OPS = [
    # -- Reshape, Flatten, SliceChannel: the plain cases ----------------------------------------
    OpInfo("Reshape", lambda x: S.Reshape(x, shape=(0, -1)), {"x": In((2, 3, 2))}, lambda x: x.reshape(2, 6)),
    OpInfo("Flatten", S.Flatten, {"x": In((2, 3, 2))}, lambda x: x.reshape(2, 6)),
    OpInfo(
        "SliceChannel",
        lambda x: S.SliceChannel(x, num_outputs=2, axis=1),
        {"x": In((2, 4))},
        lambda x: (x[:, :2], x[:, 2:]),
    ),
    # -- Reshape: special values, reverse, the deprecated target_shape ----------------------
    OpInfo(
        "Reshape_minus3_minus4",
        lambda x: S.Reshape(x, shape=(-3, -4, 2, -1)),
        {"x": In(X3)},
        lambda x: x.reshape(6, 2, 2),
    ),
    OpInfo(
        "Reshape_reverse", lambda x: S.Reshape(x, shape=(0, -1), reverse=True), {"x": In(X3)}, lambda x: x.reshape(3, 8)
    ),
    # MXNet's test case [(1, 2, 3, 64), (-2, -1, 16, -4), True] scaled down: the -4 follows its split dims
    OpInfo(
        "Reshape_reverse_minus4",
        lambda x: S.Reshape(x, shape=(-2, -1, 2, -4), reverse=True),
        {"x": In((1, 2, 3, 8))},
        lambda x: x.reshape(1, 2, 3, 4, 2),
    ),
    OpInfo(
        "Reshape_target_shape", lambda x: S.Reshape(x, target_shape=(0, 4)), {"x": In(X3)}, lambda x: x.reshape(6, 4)
    ),
    OpInfo(
        "Reshape_keep_highest",
        lambda x: S.Reshape(x, target_shape=(5, 0), keep_highest=True),
        {"x": In(X3)},
        lambda x: x.reshape(2, 12),
    ),
    OpInfo("Flatten_1d", S.Flatten, {"x": In((5,))}, lambda x: x.reshape(5, 1)),
    OpInfo("reshape_like", S.reshape_like, {"a": In((6, 2)), "b": _like((3, 4))}, lambda a, b: a.reshape(3, 4)),
    # MXNet's example: lhs (30, 12)-like, rhs (4, 2, 2, 3)-like, lhs_begin=-1, rhs_begin=1
    OpInfo(
        "reshape_like_ranges",
        lambda a, b: S.reshape_like(a, b, lhs_begin=-1, rhs_begin=1),
        {"a": In((3, 4)), "b": _like((5, 2, 2, 1))},
        lambda a, b: a.reshape(3, 2, 2, 1),
    ),
    OpInfo(
        "reshape_like_mid",
        lambda a, b: S.reshape_like(a, b, lhs_begin=0, lhs_end=2, rhs_begin=1, rhs_end=2),
        {"a": In((2, 3, 2)), "b": _like((1, 6, 4))},
        lambda a, b: a.reshape(6, 2),
    ),
    # -- axis permutations ----------------------------------------------------------------------
    OpInfo("transpose", S.transpose, {"x": In(X3)}, lambda x: x.transpose(2, 1, 0)),
    OpInfo("transpose_axes", lambda x: S.transpose(x, axes=(1, 2, 0)), {"x": In(X3)}, lambda x: x.transpose(1, 2, 0)),
    OpInfo(
        "transpose_negative_axes",
        lambda x: S.transpose(x, axes=(-1, 0, -2)),
        {"x": In(X3)},
        lambda x: x.transpose(2, 0, 1),
    ),
    OpInfo("SwapAxis", lambda x: S.SwapAxis(x, dim1=0, dim2=2), {"x": In(X3)}, lambda x: np.swapaxes(x, 0, 2)),
    OpInfo(
        "swapaxes_negative",
        lambda x: S.swapaxes(x, dim1=-1, dim2=1),
        {"x": In((2, 3, 2, 2))},
        lambda x: np.swapaxes(x, 3, 1),
    ),
    OpInfo("expand_dims_last", lambda x: S.expand_dims(x, axis=-1), {"x": In((2, 3))}, lambda x: x[:, :, None]),
    OpInfo("expand_dims_first", lambda x: S.expand_dims(x, axis=0), {"x": In((2, 3))}, lambda x: x[None]),
    OpInfo("squeeze", S.squeeze, {"x": In((1, 3, 1, 2))}, lambda x: x.reshape(3, 2)),
    OpInfo("squeeze_axis", lambda x: S.squeeze(x, axis=(0, -2)), {"x": In((1, 3, 1, 2))}, lambda x: x.reshape(3, 2)),
    OpInfo("squeeze_all_ones", S.squeeze, {"x": In((1, 1))}, lambda x: x.reshape(1)),
    OpInfo("reverse", lambda x: S.reverse(x, axis=1), {"x": In(X3)}, lambda x: x[:, ::-1]),
    OpInfo("flip_axes", lambda x: S.flip(x, axis=(0, 2)), {"x": In(X3)}, lambda x: x[::-1, :, ::-1]),
    # -- joining and splitting --------------------------------------------------------------------
    OpInfo(
        "Concat_three",
        lambda a, b, c: S.Concat(a, b, c, dim=1),
        {"a": In((2, 1, 2)), "b": In((2, 3, 2)), "c": In((2, 2, 2))},
        lambda a, b, c: np.concatenate([a, b, c], 1),
    ),
    OpInfo(
        "concat_last_axis",
        lambda a, b: S.concat(a, b, dim=-1),
        {"a": In((2, 2)), "b": In((2, 3))},
        lambda a, b: np.concatenate([a, b], -1),
    ),
    OpInfo("stack", lambda a, b: S.stack(a, b), {"a": In((2, 3)), "b": In((2, 3))}, lambda a, b: np.stack([a, b])),
    OpInfo(
        "stack_last_axis",
        lambda a, b, c: S.stack(a, b, c, axis=-1),
        {"a": In((2, 2)), "b": In((2, 2)), "c": In((2, 2))},
        lambda a, b, c: np.stack([a, b, c], -1),
    ),
    OpInfo(
        "SliceChannel_squeeze",
        lambda x: S.SliceChannel(x, num_outputs=3, axis=1, squeeze_axis=True),
        {"x": In(X3)},
        lambda x: (x[:, 0], x[:, 1], x[:, 2]),
    ),
    OpInfo(
        "split_last_axis",
        lambda x: S.split(x, num_outputs=2, axis=-1),
        {"x": In(X3)},
        lambda x: (x[..., :2], x[..., 2:]),
    ),
    OpInfo(
        "_split_like",
        lambda g, a, b: S._split_like(g, a, b, dim=0),
        {"g": In((5, 2)), "a": _like((2, 2)), "b": _like((3, 2))},
        lambda g, a, b: (g[:2], g[2:]),
    ),
    # -- slicing ----------------------------------------------------------------------------------
    OpInfo("slice", lambda x: S.slice(x, begin=(0, 1), end=(2, 3)), {"x": In(X3)}, lambda x: x[0:2, 1:3]),
    OpInfo(
        "slice_step_none_negative",
        lambda x: S.slice(x, begin=(None, None, -1), end=(None, 0, None), step=(None, -1, -2)),
        {"x": In(X3)},
        lambda x: x[:, :0:-1, ::-2],
    ),
    # out-of-range begin/end are clamped as in Python (MXNet's GetIndexRange)
    OpInfo(
        "slice_clamped",
        lambda x: S.slice(x, begin=(-9, 1), end=(9, 99), step=(1, 2)),
        {"x": In(X3)},
        lambda x: x[-9:9, 1:99:2],
    ),
    OpInfo(
        "crop_string_params",
        lambda x: S.crop(x, begin="(1, None)", end="(None, -1)"),
        {"x": In(X3)},
        lambda x: x[1:, :-1],
    ),
    OpInfo(
        "_slice_scatter",
        lambda g, x: S._slice_scatter(g, x, begin=(None, 2), end=(None, 0), step=(1, -1)),
        {"g": In((2, 2, 4)), "x": _like(X3)},
        lambda g, x: _scatter_ref(X3, (slice(None), slice(2, 0, -1)), g),
    ),
    OpInfo("slice_axis", lambda x: S.slice_axis(x, axis=2, begin=1, end=3), {"x": In(X3)}, lambda x: x[:, :, 1:3]),
    OpInfo(
        "slice_axis_negative_end_none",
        lambda x: S.slice_axis(x, axis=-2, begin=-2, end=None),
        {"x": In(X3)},
        lambda x: x[:, -2:],
    ),
    OpInfo(
        "_slice_axis_scatter",
        lambda g, x: S._slice_axis_scatter(g, x, axis=1, begin=1, end=None),
        {"g": In((2, 2, 4)), "x": _like(X3)},
        lambda g, x: _scatter_ref(X3, (slice(None), slice(1, None)), g),
    ),
    OpInfo("slice_like", S.slice_like, {"x": In(X3), "y": _like((1, 2, 3))}, lambda x, y: x[:1, :2, :3]),
    OpInfo(
        "slice_like_axes",
        lambda x, y: S.slice_like(x, y, axes=(-1,)),
        {"x": In(X3), "y": _like((5, 7, 2))},
        lambda x, y: x[:, :, :2],
    ),
    OpInfo(
        "_corner_scatter",
        S._corner_scatter,
        {"g": In((1, 2, 3)), "x": _like(X3)},
        lambda g, x: _scatter_ref(X3, (slice(0, 1), slice(0, 2), slice(0, 3)), g),
    ),
    # -- slice assignment (whole tensors and scalars), Crop, _rnn_param_concat --------------------
    OpInfo(
        "_slice_assign",
        lambda a, b: S._slice_assign(a, b, begin=(1, None), end=(3, None), step=(1, 2)),
        {"a": In((4, 3)), "b": In((2, 2))},
        lambda a, b: _assign(a, (slice(1, 3), slice(None, None, 2)), b),
    ),
    OpInfo(
        "_crop_assign_negative",
        lambda a, b: S._crop_assign(a, b, begin=(-2,), end=(None,)),
        {"a": In((3, 2)), "b": In((2, 2))},
        lambda a, b: _assign(a, slice(1, 3), b),
    ),
    OpInfo(
        "_slice_assign_scalar",
        lambda a: S._slice_assign_scalar(a, scalar=0.5, begin=(None, 1), end=(None, 3)),
        {"a": In((2, 4))},
        lambda a: _assign(a, (slice(None), slice(1, 3)), 0.5),
    ),
    OpInfo(
        "Crop_h_w_offset",
        lambda a: S.Crop(a, h_w=(2, 3), offset=(1, 1)),
        {"a": In((1, 2, 4, 5))},
        lambda a: a[:, :, 1:3, 1:4],
    ),
    OpInfo(
        "Crop_like_center",
        lambda a, b: S.Crop(a, b, center_crop=True),
        {"a": In((2, 1, 5, 4)), "b": In((1, 1, 2, 1), grad=False)},
        lambda a, b: a[:, :, 1:3, 1:2],
    ),
    OpInfo(
        "_rnn_param_concat",
        lambda a, b: S._rnn_param_concat(a, b, dim=0),
        {"a": In((3,)), "b": In((2,))},
        lambda a, b: np.concatenate([a, b]),
    ),
    # -- repetition -------------------------------------------------------------------------------
    OpInfo("tile_more_reps", lambda x: S.tile(x, reps=(2, 1, 3)), {"x": In((2, 2))}, lambda x: np.tile(x, (2, 1, 3))),
    OpInfo("tile_fewer_reps", lambda x: S.tile(x, reps=(2,)), {"x": In((2, 1, 3))}, lambda x: np.tile(x, 2)),
    OpInfo(
        "_tile_sum",
        lambda g, x: S._tile_sum(g, x, reps=(2, 1, 3)),
        {"g": In((2, 2, 6)), "x": _like((2, 2))},
        lambda g, x: g.reshape(2, 2, 3, 2).sum((0, 2)),
    ),
    OpInfo("repeat_axis", lambda x: S.repeat(x, repeats=2, axis=1), {"x": In(X3)}, lambda x: np.repeat(x, 2, 1)),
    OpInfo("repeat_flat", lambda x: S.repeat(x, repeats=3), {"x": In((2, 3))}, lambda x: np.repeat(x.ravel(), 3)),
    OpInfo(
        "_repeat_sum",
        lambda g, x: S._repeat_sum(g, x, repeats=2, axis=-1),
        {"g": In((2, 6)), "x": _like((2, 3))},
        lambda g, x: g[:, 0::2] + g[:, 1::2],
    ),
    # -- broadcasting -----------------------------------------------------------------------------
    OpInfo(
        "broadcast_to",
        lambda x: S.broadcast_to(x, shape=(2, 0, 4)),
        {"x": In((1, 3, 1))},
        lambda x: np.broadcast_to(x, (2, 3, 4)),
    ),
    OpInfo(
        "broadcast_axis",
        lambda x: S.broadcast_axis(x, axis=0, size=3),
        {"x": In((1, 2))},
        lambda x: np.broadcast_to(x, (3, 2)),
    ),
    OpInfo(
        "broadcast_axes_two",
        lambda x: S.broadcast_axes(x, axis=(0, -1), size=(2, 3)),
        {"x": In((1, 2, 1))},
        lambda x: np.broadcast_to(x, (2, 2, 3)),
    ),
    OpInfo(
        "broadcast_like",
        S.broadcast_like,
        {"x": In((1, 3)), "y": _like((2, 3))},
        lambda x, y: np.broadcast_to(x, (2, 3)),
    ),
    OpInfo(
        "broadcast_like_axes",
        lambda x, y: S.broadcast_like(x, y, lhs_axes=(0,), rhs_axes=(-1,)),
        {"x": In((1, 2)), "y": _like((2, 4))},
        lambda x, y: np.broadcast_to(x, (4, 2)),
    ),
    # -- depth/space ------------------------------------------------------------------------------
    OpInfo(
        "depth_to_space", lambda x: S.depth_to_space(x, block_size=2), {"x": In((1, 8, 2, 1))}, lambda x: _d2s_ref(x, 2)
    ),
    OpInfo(
        "space_to_depth", lambda x: S.space_to_depth(x, block_size=2), {"x": In((1, 2, 2, 4))}, lambda x: _s2d_ref(x, 2)
    ),
    # -- squared compositions: second-order derivatives run through each hidden gradient op ---
    OpInfo(
        "slice_squared",
        lambda x: S.square(S.slice(x, begin=(None, 2), end=(None, None), step=(None, -2))),
        {"x": In(X3)},
        lambda x: np.square(x[:, 2::-2]),
    ),
    OpInfo(
        "slice_axis_squared",
        lambda x: S.square(S.slice_axis(x, axis=0, begin=1, end=2)),
        {"x": In(X3)},
        lambda x: np.square(x[1:2]),
    ),
    OpInfo(
        "slice_like_squared",
        lambda x, y: S.square(S.slice_like(x, y, axes=(1,))),
        {"x": In(X3), "y": _like((1, 2))},
        lambda x, y: np.square(x[:, :2]),
    ),
    OpInfo(
        "tile_squared",
        lambda x: S.square(S.tile(x, reps=(1, 2))),
        {"x": In((2, 3))},
        lambda x: np.square(np.tile(x, (1, 2))),
    ),
    OpInfo(
        "repeat_squared",
        lambda x: S.square(S.repeat(x, repeats=2, axis=0)),
        {"x": In((2, 3))},
        lambda x: np.square(np.repeat(x, 2, 0)),
    ),
    OpInfo(
        "broadcast_to_squared",
        lambda x: S.square(S.broadcast_to(x, shape=(3, 0))),
        {"x": In((1, 2))},
        lambda x: np.square(np.broadcast_to(x, (3, 2))),
    ),
    OpInfo(
        "stack_times_concat",
        lambda a, b: S.stack(a, b, axis=1) * S.stack(S.concat(a, dim=0), b, axis=1),
        {"a": In((2, 3)), "b": In((2, 3))},
        lambda a, b: np.square(np.stack([a, b], 1)),
    ),
    OpInfo(
        "transpose_times_input",
        lambda x: S.transpose(S.transpose(x, axes=(1, 0, 2)) * S.SwapAxis(x, dim1=0, dim2=1), axes=(1, 0, 2)),
        {"x": In(X3)},
        lambda x: np.square(x),
    ),
    OpInfo(
        "depth_to_space_squared",
        lambda x: S.square(S.depth_to_space(x, block_size=2)),
        {"x": In((1, 4, 1, 2))},
        lambda x: np.square(_d2s_ref(x, 2)),
    ),
]
