"""OpInfo rows for symgrad/ops/creation.py: moments (with gradients) and the forward-only creation and
introspection ops (_zeros, _ones, _full, _arange, _linspace, _eye, shape_array, size_array,
all_finite, multi_all_finite). Creation ops have no inputs; their dtype comes from a parameter, so each
row runs in that one dtype. References are plain numpy.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

F64 = (np.float64,)
F32 = (np.float32,)


def _moments_ref(x, axes, keepdims=False):
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    if keepdims:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:  # every axis reduced: (1,), as MXNet's reductions
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes) or (1,)
    return mean.reshape(shape), var.reshape(shape)


def _fixed(values):
    return In(np.shape(values), sample=lambda r: np.array(values, dtype=np.float64), grad=False)


def _const(name, make, ref, dtypes=F32):
    """A row for an op without inputs: ``make()`` builds it, ``ref()`` is the expected array."""
    return OpInfo(name, make, {}, ref, dtypes=dtypes, grad=False)


# float16 sums of a few squares: relative error of a few units of 2^-11
F16 = {np.float16: (2e-2, 2e-2)}

OPS = [
    # -- moments ------------------------------------------------------------------------------------
    OpInfo(
        "moments_axis1",
        lambda x: S.moments(x, axes=(1,)),
        {"x": In((2, 3))},
        lambda x: _moments_ref(x, (1,)),
        fwd_tol=F16,
    ),
    OpInfo(
        "moments_axes02_keepdims",
        lambda x: S.moments(x, axes=(0, 2), keepdims=True),
        {"x": In((2, 3, 2))},
        lambda x: _moments_ref(x, (0, 2), True),
        fwd_tol=F16,
    ),
    # every axis of a 1-d input: shape (1,), as MXNet's reductions
    OpInfo(
        "moments_all_negative_axis",
        lambda x: S.moments(x, axes=(-1,)),
        {"x": In((4,))},
        lambda x: _moments_ref(x, (0,)),
        fwd_tol=F16,
    ),
    # -- introspection (all_finite's output is float32 whatever the input: one dtype per row; the others
    # are tested in test_ops_creation.py) ------------------------------------------------------------------------------
    OpInfo("shape_array", S.shape_array, {"x": In((2, 1, 3))}, lambda x: np.array(x.shape, dtype=np.int64), grad=False),
    OpInfo("size_array", S.size_array, {"x": In((2, 3))}, lambda x: np.array([x.size], dtype=np.int64), grad=False),
    OpInfo(
        "all_finite_true",
        S.all_finite,
        {"x": In((2, 3))},
        lambda x: np.array([1.0], dtype=np.float32),
        dtypes=F32,
        grad=False,
    ),
    OpInfo(
        "all_finite_inf",
        lambda x: S.all_finite(x, init_output=False),
        {"x": _fixed([1.0, -np.inf, 2.0])},
        lambda x: np.array([0.0], dtype=np.float32),
        dtypes=F32,
        grad=False,
    ),
    OpInfo(
        "multi_all_finite_nan",
        lambda a, b: S.multi_all_finite(a, b, num_arrays=2),
        {"a": In((2,)), "b": _fixed([[0.0, np.nan]])},
        lambda a, b: np.array([0.0], dtype=np.float32),
        dtypes=F32,
        grad=False,
    ),
    # -- creation -----------------------------------------------------------------------------------
    _const("_zeros", lambda: S.zeros((2, 3)), lambda: np.zeros((2, 3), np.float32)),
    _const("_zeros_float64", lambda: S._zeros(shape=(4,), dtype="float64"), lambda: np.zeros(4), F64),
    _const("_zeros_without_dtype", lambda: S._zeros_without_dtype(shape=(2,)), lambda: np.zeros(2, np.float32)),
    _const("_ones", lambda: S.ones(3), lambda: np.ones(3, np.float32)),
    _const("_ones_int32", lambda: S.ones((2, 2), dtype="int32"), lambda: np.ones((2, 2), np.int32)),
    _const("_full", lambda: S.full((2, 2), -1.5), lambda: np.full((2, 2), -1.5, np.float32)),
    # static_cast<int>(-2.7) = -2
    _const("_full_int_truncates", lambda: S.full((3,), -2.7, dtype="int64"), lambda: np.full(3, -2, np.int64)),
    _const("_arange_stop_only", lambda: S.arange(5), lambda: np.arange(5, dtype=np.float32)),
    _const(
        "_arange_step_repeat",
        lambda: S.arange(2, 7, 1.5, repeat=2, dtype="float64"),
        lambda: np.repeat(np.arange(2, 7, 1.5), 2),
        F64,
    ),
    _const("_arange_negative_step", lambda: S.arange(1, -2, -0.75), lambda: np.arange(1, -2, -0.75, dtype=np.float32)),
    # integer dtypes: start and step truncated first (2.5 -> 2, 1.7 -> 1), the length from the real values
    _const(
        "_arange_int_truncates",
        lambda: S.arange(2.5, 9, 1.7, dtype="int32"),
        lambda: np.array([2, 3, 4, 5], dtype=np.int32),
    ),
    _const("_linspace", lambda: S.linspace(-1, 2, 5, dtype="float64"), lambda: np.linspace(-1, 2, 5), F64),
    _const(
        "_linspace_no_endpoint",
        lambda: S.linspace(0, 1, 4, endpoint=False),
        lambda: np.linspace(0, 1, 4, endpoint=False).astype(np.float32),
    ),
    OpInfo(
        "_contrib_arange_like",
        lambda x: S._contrib_arange_like(x, start=1, step=0.5, repeat=2),
        {"x": In((2, 3))},
        lambda x: (1 + 0.5 * (np.arange(6) // 2)).reshape(2, 3),
        grad=False,
    ),
    OpInfo(
        "_contrib_arange_like_axis",
        lambda x: S._contrib_arange_like(x, start=-2, axis=-1),
        {"x": In((2, 3))},
        lambda x: np.arange(-2.0, 1.0),
        grad=False,
    ),
    _const("_eye", lambda: S.eye(3), lambda: np.eye(3, dtype=np.float32)),
    _const("_eye_rect_k", lambda: S.eye(2, 4, 2, dtype="float64"), lambda: np.eye(2, 4, 2), F64),
    _const("_eye_k_below", lambda: S._eye(N=3, M=2, k=-1, dtype="int8"), lambda: np.eye(3, 2, -1, dtype=np.int8)),
]
