"""OpInfo rows for the image operators (symgrad/ops/image.py, MXNet's ``mx.sym.image``).

References are plain numpy written here: layout moves and flips with ``np.moveaxis``/``np.flip``, the
resize per output pixel from OpenCV's sampling rule (bilinear: sample at (i + 0.5) * in / out - 0.5,
clamped to the border; nearest: floor(i * in / out)). MXNet's own outputs are replayed from
``tests/fixtures/mxnet_cases/image.json``.
"""

import math

import numpy as np
from op_info import In, OpInfo, unary_row

import symgrad as sg

S = sg.sym

# to_tensor's output is float32 whatever the input: rows run in float32 (the float64 gradient test still runs)
# float16 resize: a few products summed in float16
F16 = {np.float16: (1e-2, 1e-2)}


def _to_tensor(x):
    return np.moveaxis(x, -1, -3).astype(np.float32) / np.float32(255.0)


def _normalize(x, mean, std):
    c_axis = x.ndim - 3
    shape = [1] * x.ndim
    shape[c_axis] = -1
    # MXNet holds mean and std as float32 tuples
    m = np.broadcast_to(np.float32(mean).astype(np.float64), (x.shape[c_axis],)).reshape(shape)
    s = np.broadcast_to(np.float32(std).astype(np.float64), (x.shape[c_axis],)).reshape(shape)
    return (x - m) / s


def _sample_1d(i, n_in, n_out, interp):
    """[(source index, weight), ...] of output index i (OpenCV's rule, written independently)."""
    scale = n_in / n_out
    if interp == 0:
        return [(min(int(math.floor(i * scale)), n_in - 1), 1.0)]
    f = (i + 0.5) * scale - 0.5
    lo = math.floor(f)
    w = f - lo
    if lo < 0:
        return [(0, 1.0)]
    if lo >= n_in - 1:
        return [(n_in - 1, 1.0)]
    return [(lo, 1.0 - w), (lo + 1, w)]


def _resize(x, oh, ow, interp=1):
    h, w = x.shape[-3:-1]
    out = np.zeros(x.shape[:-3] + (oh, ow, x.shape[-1]))
    for i in range(oh):
        for j in range(ow):
            for p, wp in _sample_1d(i, h, oh, interp):
                for q, wq in _sample_1d(j, w, ow, interp):
                    out[..., i, j, :] += wp * wq * x[..., p, q, :]
    return out


def _resize_row(name, shape, ref_args, fwd_tol=F16, **params):
    """_image_resize of one image (batch) of ``shape`` with ``params``; reference ``_resize(x, *ref_args)``."""
    return unary_row(
        f"_image_resize_{name}", S._image_resize, shape, lambda x: _resize(x, *ref_args), fwd_tol, **params
    )


_EIG = np.array(
    [
        [55.46 * -0.5675, 4.794 * 0.7192, 1.148 * 0.4009],
        [55.46 * -0.5808, 4.794 * -0.0045, 1.148 * -0.8140],
        [55.46 * -0.5836, 4.794 * -0.6948, 1.148 * 0.4203],
    ],
    dtype=np.float32,
)


def _lighting(x, alpha):
    offset = (_EIG @ np.asarray(alpha, np.float32)).astype(np.float32)  # MXNet's float32 offsets
    return x + offset.astype(np.float64)


OPS = [
    OpInfo(
        "_image_to_tensor_hwc", S._image_to_tensor, {"x": In((3, 4, 3), 0.0, 255.0)}, _to_tensor, dtypes=(np.float32,)
    ),
    OpInfo(
        "_image_to_tensor_nhwc",
        S._image_to_tensor,
        {"x": In((2, 2, 3, 1), 0.0, 255.0)},
        _to_tensor,
        dtypes=(np.float32,),
    ),
    OpInfo(
        "_image_normalize_3ch",
        lambda x: S._image_normalize(x, mean=(0.1, -0.2, 0.3), std=(0.5, 2.0, 1.5)),
        {"x": In((3, 2, 4))},
        lambda x: _normalize(x, (0.1, -0.2, 0.3), (0.5, 2.0, 1.5)),
        fwd_tol=F16,
    ),
    OpInfo(
        "_image_normalize_batch_scalar",
        lambda x: S._image_normalize(x, mean=0.25, std=0.5),
        {"x": In((2, 1, 3, 2))},
        lambda x: _normalize(x, 0.25, 0.5),
    ),
    OpInfo("_image_flip_left_right", S._image_flip_left_right, {"x": In((3, 4, 3))}, lambda x: np.flip(x, -2)),
    OpInfo("_image_flip_top_bottom_batch", S._image_flip_top_bottom, {"x": In((2, 3, 2, 1))}, lambda x: np.flip(x, -3)),
    OpInfo(
        "_image_crop",
        lambda x: S._image_crop(x, x=1, y=2, width=2, height=1),
        {"x": In((4, 3, 3))},
        lambda x: x[2:3, 1:3, :],
    ),
    OpInfo(
        "_image_crop_batch",
        lambda x: S._image_crop(x, x=0, y=1, width=3, height=2),
        {"x": In((2, 3, 3, 1))},
        lambda x: x[:, 1:3, 0:3, :],
    ),
    OpInfo(
        "_image_adjust_lighting",
        lambda x: S._image_adjust_lighting(x, alpha=(0.01, -0.02, 0.03)),
        {"x": In((2, 3, 3))},
        lambda x: _lighting(x, (0.01, -0.02, 0.03)),
        fwd_tol=F16,
    ),
    _resize_row("up_bilinear", (2, 3, 2), (3, 5), size=(5, 3)),
    _resize_row("down_bilinear", (2, 5, 7, 1), (3, 2), size=(2, 3)),
    _resize_row("keep_ratio", (4, 6, 1), (3, 4), size=3, keep_ratio=True),
    _resize_row("nearest", (3, 3, 3), (2, 5, 0), fwd_tol={}, size=(5, 2), interp=0),
]
