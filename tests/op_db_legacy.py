"""OpInfo rows for the pre-1.0 operators kept for old model files (symgrad/ops/legacy.py): Convolution_v1 and
Pooling_v1, each registered with the rules of today's Convolution / Pooling.

References are plain numpy written here: a direct 2-d correlation (one einsum per output position) and a
2x2 average of shifted slices, on inputs padded with np.pad.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

F16 = {np.float16: (2e-2, 2e-2)}


def _conv2d(x, w):
    n, _, h, wd = x.shape
    out = np.zeros((n, w.shape[0], h - w.shape[2] + 1, wd - w.shape[3] + 1))
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            out[:, :, i, j] = np.einsum("nchw,ochw->no", x[:, :, i : i + w.shape[2], j : j + w.shape[3]], w)
    return out


def _avg2x2(x):
    return (x[..., :-1, :-1] + x[..., 1:, :-1] + x[..., :-1, 1:] + x[..., 1:, 1:]) / 4


OPS = [
    OpInfo(
        "Convolution_v1",
        lambda x, w, b: S.Convolution_v1(x, w, b, kernel=(2, 2), num_filter=2, pad=(1, 0)),
        {"x": In((1, 2, 3, 3)), "w": In((2, 2, 2, 2)), "b": In((2,))},
        lambda x, w, b: _conv2d(np.pad(x, ((0, 0), (0, 0), (1, 1), (0, 0))), w) + b[None, :, None, None],
        fwd_tol=F16,
        second_order=False,
    ),
    OpInfo(
        "Pooling_v1_avg_pad",
        lambda x: S.Pooling_v1(x, kernel=(2, 2), pool_type="avg", pad=(1, 1)),
        {"x": In((1, 1, 3, 3))},
        lambda x: _avg2x2(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))),
        fwd_tol=F16,
        second_order=False,
    ),
]
