"""OpInfo rows for the softmax family (symgrad/ops/softmax.py): softmax, log_softmax and softmin (with
temperature and with use_length) and SoftmaxActivation.

References are plain numpy written from MXNet 1.9's definitions: the shared ``np_refs.softmax`` (maximum
subtracted first) and, for use_length, a row-by-row softmax of the first ``length`` entries, zeros after.
"""

import numpy as np
from np_refs import softmax
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym


def _masked(x, length, axis, log=False, negate=False):
    """softmax/log_softmax with positions >= length along axis zeroed, written row by row."""
    x = np.moveaxis(-x if negate else x, axis, -1)
    out = np.zeros_like(x)
    rows = x.reshape(-1, x.shape[-1])
    flat = out.reshape(-1, x.shape[-1])
    for r, n in enumerate(np.asarray(length).reshape(-1).astype(int)):
        if n > 0:
            z = rows[r, :n] - rows[r, :n].max()
            flat[r, :n] = z - np.log(np.exp(z).sum()) if log else np.exp(z) / np.exp(z).sum()
    return np.moveaxis(flat.reshape(x.shape), -1, axis)


OPS = [
    OpInfo("softmax", lambda x: S.softmax(x), {"x": In((2, 3, 4), -2, 2)}, lambda x: softmax(x, -1)),
    OpInfo(
        "softmax_axis1_temperature",
        lambda x: S.softmax(x, axis=1, temperature=2.0),
        {"x": In((2, 3, 2), -2, 2)},
        lambda x: softmax(x, 1, 2.0),
    ),
    OpInfo(
        "log_softmax", lambda x: S.log_softmax(x, axis=0), {"x": In((3, 4), -2, 2)}, lambda x: np.log(softmax(x, 0))
    ),
    OpInfo(
        "log_softmax_temperature",
        lambda x: S.log_softmax(x, temperature=0.5),
        {"x": In((2, 4), -2, 2)},
        lambda x: np.log(softmax(x, -1, 0.5)),
    ),
    OpInfo(
        "softmin",
        lambda x: S.softmin(x, axis=-1, temperature="3"),
        {"x": In((3, 4), -2, 2)},
        lambda x: softmax(-x, -1, 3.0),
    ),
    OpInfo(
        "softmax_use_length",
        lambda x, n: S.softmax(x, n, use_length=True),
        {"x": In((3, 4), -2, 2), "n": In((3,), sample=lambda r: np.array([2, 4, 1]), grad=False, integer=True)},
        lambda x, n: _masked(x, n, -1),
    ),
    OpInfo(
        "log_softmax_use_length_axis0",
        lambda x, n: S.log_softmax(x, n, axis=0, use_length=True),
        {"x": In((4, 3), -2, 2), "n": In((3,), sample=lambda r: np.array([3, 1, 4]), grad=False, integer=True)},
        lambda x, n: _masked(x, n, 0, log=True),
    ),
    OpInfo(
        "softmin_use_length",
        lambda x, n: S.softmin(x, n, use_length=True),
        {"x": In((2, 2, 3), -2, 2), "n": In((2, 2), sample=lambda r: np.array([[3, 2], [1, 3]]), grad=False)},
        lambda x, n: _masked(x, n, -1, negate=True),
    ),
    # instance mode on >2-d data: MXNet 1.9 flattens to (prod(shape[:-1]), shape[-1]) (FlatTo2D),
    # so the softmax runs over the last axis
    OpInfo(
        "SoftmaxActivation_instance",
        lambda x: S.SoftmaxActivation(x),
        {"x": In((2, 3, 2), -2, 2)},
        lambda x: softmax(x, -1),
    ),
    OpInfo(
        "SoftmaxActivation_instance_2d",
        lambda x: S.SoftmaxActivation(x, mode="instance"),
        {"x": In((3, 4), -2, 2)},
        lambda x: softmax(x, 1),
    ),
    OpInfo(
        "SoftmaxActivation_channel",
        lambda x: S.SoftmaxActivation(x, mode="channel"),
        {"x": In((2, 3, 2), -2, 2)},
        lambda x: softmax(x, 1),
    ),
]
