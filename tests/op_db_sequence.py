"""OpInfo rows for the sequence operators (symgrad/ops/sequence.py): SequenceReverse and SequenceLast with
and without ``sequence_length``, on axis 0 and 1. References are numpy loops written from MXNet 1.9's
sequence_reverse-inl.h and sequence_last-inl.h.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as S_  # noqa: N812

S = S_.sym


def _lengths(values):
    values = np.array(values)
    return In(values.shape, sample=lambda r: values, grad=False, integer=True)


def _reverse(x, lengths=None):
    """Reverse steps 0..L-1 of each sequence b (axis 0); steps L.. stay where they are."""
    out = x.copy()
    for b in range(x.shape[1]):
        n = x.shape[0] if lengths is None else int(lengths[b])
        for t in range(n):
            out[t, b] = x[n - 1 - t, b]
    return out


def _last(x, lengths=None, axis=0):
    """Step L_b - 1 of each sequence b (L_b = the axis length without lengths)."""
    batch = x.shape[1] if axis == 0 else x.shape[0]
    rows = []
    for b in range(batch):
        n = x.shape[axis] if lengths is None else int(lengths[b])
        rows.append(x[n - 1, b] if axis == 0 else x[b, n - 1])
    return np.array(rows)


OPS = [
    OpInfo("SequenceReverse", S.SequenceReverse, {"x": In((4, 3, 2))}, _reverse),
    OpInfo(
        "SequenceReverse_lengths",
        lambda x, n: S.SequenceReverse(x, n, use_sequence_length=True),
        {"x": In((5, 3, 2)), "n": _lengths([5, 2, 0])},
        _reverse,
    ),
    OpInfo(
        "SequenceReverse_lengths_2d_float",
        lambda x, n: S.SequenceReverse(x, n, use_sequence_length=True),
        {"x": In((4, 2)), "n": In((2,), sample=lambda r: np.array([3.0, 1.0]), grad=False)},
        _reverse,
    ),
    OpInfo("SequenceLast", S.SequenceLast, {"x": In((4, 3, 2))}, _last),
    OpInfo("SequenceLast_axis1", lambda x: S.SequenceLast(x, axis=1), {"x": In((3, 4, 2))}, lambda x: _last(x, axis=1)),
    OpInfo(
        "SequenceLast_lengths_4d",
        lambda x, n: S.SequenceLast(x, n, use_sequence_length=True),
        {"x": In((4, 3, 2, 2)), "n": _lengths([1, 4, 2])},
        _last,
    ),
    OpInfo(
        "SequenceLast_lengths_axis1_2d",
        lambda x, n: S.SequenceLast(x, n, use_sequence_length=True, axis=1),
        {"x": In((3, 5)), "n": _lengths([2, 5, 3])},
        lambda x, n: _last(x, n, axis=1),
    ),
]
