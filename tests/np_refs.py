"""Plain-numpy references and helpers shared by several test modules (the op tables ``tests/op_db_*.py``,
``tests/test_ops_ctc.py``, ``tests/checker_cases.py``): each is written once here and imported, so two
tables cannot drift apart on what, say, a softmax is."""

import numpy as np


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softmax(x, axis=-1, t=1.0):
    """softmax of ``x / t`` along ``axis`` (``t`` the temperature), the maximum subtracted first."""
    z = x / t
    e = np.exp(z - z.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def per_axis(v, nd, fill):
    """A per-spatial-axis parameter as a tuple: ``v`` itself, or ``fill`` on each of ``nd`` axes when not given."""
    return tuple(v) if v else (fill,) * nd
