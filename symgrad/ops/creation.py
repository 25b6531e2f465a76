"""Array creation and introspection operators (MXNet 1.9 ``init_op``, ``elemwise_unary_op_basic``
shape_array/size_array, ``contrib/all_finite``, ``nn/moments``).

The creation ops (``_zeros``, ``_ones``, ``_full``, ``_arange``, ``_linspace``, ``_eye``,
``_zeros_without_dtype``) have no inputs: their shape and dtype come from their parameters
(``_contrib_arange_like`` takes them from its input). MXNet's
Python helpers ``mx.sym.zeros(shape, dtype)`` & co. are in ``symgrad.sym``. ``ctx`` is accepted
(MXNet writes it into symbol JSON) and ignored: arrays live on the executor's device.

A ``shape`` may leave dimensions unknown, read at inference as MXNet's InitShape reads it: -1 in both shape
modes, and in the legacy mode (the default) 0 too, ``()`` being an unknown shape there; so does
``_arange(infer_range=True)`` without ``stop``. Inference fills them from the op's consumers
(``ones(shape=(-1, -1)) + x`` takes ``x``'s shape), the executor hands the shape inferred at bind to the
forward (``OpDef.needs_out_shape``), and binding fails where nothing determines it, as MXNet's does
(``zeros(shape=())`` or ``zeros(shape=(0, 1, 3, 0))`` alone in legacy mode).

Where MXNet's arithmetic is quirky, the values are computed as MXNet computes them: ``_arange``
truncates ``start`` and ``step`` to integers for integer dtypes and computes ``start + (i // repeat) *
step`` in the output dtype; ``_linspace`` computes ``start + i * step`` in float64 and casts. One
exception: MXNet's float16 ``_arange`` truncates ``start`` and ``step`` too (its ``is_signed`` test
fails for ``half_t``, so ``arange(0.1, 3, 0.7, dtype='float16')`` is all zeros); symgrad computes the
float16 range like the other float dtypes.

shape_array, size_array and all_finite have no gradient (their outputs do not vary smoothly with the
data; MXNet: zero gradient). moments' gradient is symbolic (second order works).
"""

from __future__ import annotations

import math

import numpy as np

from .. import util
from ..base import ParamError, ShapeError
from ..opdef import Param, check_at_least, normalize_axis, register, wait_for_first_input
from .reduce import reduce_axes, reduced_shape

_CTX = Param("str", "", doc="device of the output in MXNet's imperative calls; ignored")
_F32 = np.dtype(np.float32)


def _check_shape(opname):
    def prepare(params, name):
        if any(d < -1 for d in params["shape"]):
            raise ParamError(
                f"{opname} {name!r}: parameter 'shape' {params['shape']} has a dimension below -1 (-1 is an "
                "unknown dimension, filled by shape inference from the op's consumers)"
            )
        return params

    return prepare


def _param_shape(shape):
    """What a creation op's ``shape`` parameter says of its output, read as MXNet's InitShape reads it at
    inference, in the current mode (``symgrad.util``): -1 is an unknown dimension in both modes; in the legacy
    mode (the default) a 0 is one too and ``()`` an unknown shape (None), in NumPy shape mode they are a zero
    size and a scalar."""
    if util.is_np_shape():
        return tuple(shape)
    if not shape:
        return None
    return tuple(-1 if d == 0 else d for d in shape)


def _shape_open(params) -> bool:
    """Whether ``shape`` leaves the output shape to inference from the consumers (``OpDef.needs_out_shape``)."""
    shape = _param_shape(params["shape"])
    return shape is None or min(shape, default=0) < 0


def _init_shape(params, in_shapes, out_shapes, where):
    """MXNet's InitShape: the output has the shape the parameter says; what it leaves unknown (dimensions, or
    the whole shape) inference fills from the consumers, and a consumer's shape that contradicts a known
    dimension is a conflict."""
    shape = _param_shape(params["shape"])
    return in_shapes, [out_shapes[0] if shape is None else shape]


def _run_shape(opname, shape, out_shape):
    """The shape a creation forward fills: the one inferred at bind where the parameter leaves it open (the
    plan passes ``out_shape``), else the parameter itself."""
    if out_shape is not None:
        return tuple(out_shape[0])
    if any(d < 0 for d in shape):
        raise ShapeError(
            f"{opname}: parameter 'shape' {tuple(shape)} has unknown dimensions, which only shape inference at "
            "an executor's bind fills"
        )
    return tuple(shape)


def _from_params(shape_of):
    """A shape rule for an op with no inputs: the output shape is ``shape_of(params)``."""

    def infer(params, in_shapes, out_shapes, where):
        return in_shapes, [shape_of(params)]

    return infer


def _dtype_rule(params, in_types, out_types, where):
    return in_types, [params["dtype"]]


def _cast_scalar(value, dtype):
    """``static_cast<DType>(value)``: truncation toward zero for integer dtypes; a numpy scalar (a 0-d numpy
    array does not combine with CuPy arrays)."""
    return np.asarray(value).astype(dtype)[()]


# ----------------------------------------------------------------------------
# _zeros, _ones, _full, _zeros_without_dtype
# ----------------------------------------------------------------------------

_INIT_PARAMS = {"shape": Param("shape", ()), "ctx": _CTX, "dtype": Param("dtype", _F32)}


def _fill(opname, value):
    def forward(xp, shape, ctx, dtype, out_shape=None):
        return xp.full(_run_shape(opname, shape, out_shape), _cast_scalar(value, dtype), dtype=dtype)

    return forward


for _name, _value in (("_zeros", 0), ("_ones", 1)):
    register(
        _name,
        inputs=(),
        params=dict(_INIT_PARAMS),
        prepare=_check_shape(_name),
        forward=_fill(_name, _value),
        infer_shape=_init_shape,
        infer_type=_dtype_rule,
        gradient=lambda F, n, g: [],
        needs_out_shape=_shape_open,
        doc=f"An array of ``shape`` filled with {_value}s in ``dtype``.",
    )


def _full_fwd(xp, shape, ctx, dtype, value, out_shape=None):
    return xp.full(_run_shape("_full", shape, out_shape), _cast_scalar(value, dtype), dtype=dtype)


register(
    "_full",
    aliases=("_npi_full",),
    inputs=(),
    params={**_INIT_PARAMS, "value": Param("float")},
    prepare=_check_shape("_full"),
    forward=_full_fwd,
    infer_shape=_init_shape,
    infer_type=_dtype_rule,
    gradient=lambda F, n, g: [],
    needs_out_shape=_shape_open,
    doc="An array of ``shape`` filled with ``value`` (cast to ``dtype``).",
)

# MXNet's type codes (mshadow's type flags) for _zeros_without_dtype's integer ``dtype``; -1: float32
_TYPE_CODES = {
    -1: "float32",
    0: "float32",
    1: "float64",
    2: "float16",
    3: "uint8",
    4: "int32",
    5: "int8",
    6: "int64",
    7: "bool",
}


def _zeros_wo_prepare(params, name):
    params = _check_shape("_zeros_without_dtype")(params, name)
    if params["dtype"] not in _TYPE_CODES:
        raise ParamError(
            f"_zeros_without_dtype {name!r}: parameter 'dtype' must be an MXNet type code "
            f"{sorted(_TYPE_CODES)}, got {params['dtype']}"
        )
    return params


def _zeros_wo_fwd(xp, shape, ctx, dtype, out_shape=None):
    return xp.zeros(_run_shape("_zeros_without_dtype", shape, out_shape), dtype=_TYPE_CODES[dtype])


register(
    "_zeros_without_dtype",
    inputs=(),
    params={"shape": Param("shape", ()), "ctx": _CTX, "dtype": Param("int", -1)},
    prepare=_zeros_wo_prepare,
    forward=_zeros_wo_fwd,
    infer_shape=_init_shape,
    needs_out_shape=_shape_open,
    infer_type=lambda p, i, o, w: (i, [np.dtype(_TYPE_CODES[p["dtype"]])]),
    gradient=lambda F, n, g: [],
    doc="Zeros of ``shape``; ``dtype`` is an MXNet type code (-1: float32).",
)


# ----------------------------------------------------------------------------
# _arange, _linspace, _eye
# ----------------------------------------------------------------------------

_RANGE_DTYPES = ("float16", "float32", "float64", "int32", "int64", "int8", "uint8")


def _range_dtype(opname, params, name):
    if params["dtype"].name not in _RANGE_DTYPES:
        raise ParamError(
            f"{opname} {name!r}: parameter 'dtype' must be one of {list(_RANGE_DTYPES)}, got {params['dtype'].name!r}"
        )


def _infers_range(params) -> bool:
    """``infer_range=True`` without ``stop``: the length comes from the consumers (MXNet's RangeShape leaves it
    to inference; ``OpDef.needs_out_shape``)."""
    return params["infer_range"] and params["stop"] is None


def _arange_prepare(params, name):
    where = f"_arange {name!r}"
    _range_dtype("_arange", params, name)
    if params["step"] == 0:
        raise ParamError(f"{where}: parameter 'step' must not be 0")
    if params["repeat"] <= 0:
        raise ParamError(f"{where}: parameter 'repeat' must be positive, got {params['repeat']}")
    if _infers_range(params):
        return params  # start, start + step, ... for as long as inference says
    if params["stop"] is None:  # MXNet's RangeParamParser: arange(n) is arange(0, n)
        params = {**params, "start": 0.0, "stop": params["start"]}
    start, stop, step = params["start"], params["stop"], params["step"]
    if not (start < stop if step > 0 else start > stop):
        raise ParamError(f"{where}: empty range (start, stop, step) = ({start}, {stop}, {step}) (MXNet refuses it)")
    return params


def _arange_len(p):
    return (int(math.ceil((p["stop"] - p["start"]) / p["step"])) * p["repeat"],)


def _arange_shape(params, in_shapes, out_shapes, where):
    if _infers_range(params):  # any shape a consumer gives: MXNet fills its elements in order
        return in_shapes, out_shapes
    return in_shapes, [_arange_len(params)]


def _arange_fwd(xp, start, stop, step, repeat, infer_range, ctx, dtype, n=None, out_shape=None):
    shape = None if out_shape is None else tuple(out_shape[0])
    if shape is not None:
        n = math.prod(shape)
    elif n is None:
        if stop is None:
            raise ShapeError("_arange: infer_range=True without 'stop' takes its length from shape inference at bind")
        n = _arange_len({"start": start, "stop": stop, "step": step, "repeat": repeat})[0]
    if dtype.kind in "iu":  # MXNet: start and step truncated to integers, the range in integers
        start, step = math.trunc(start), math.trunc(step)
    k = (xp.arange(n, dtype=np.int64) // repeat).astype(dtype)
    out = k * _cast_scalar(step, dtype) + _cast_scalar(start, dtype)
    return out if shape is None else out.reshape(shape)


register(
    "_arange",
    inputs=(),
    params={
        "start": Param("float"),
        "stop": Param("float", None),
        "step": Param("float", 1.0),
        "repeat": Param("int", 1),
        "infer_range": Param("bool", False),
        "ctx": _CTX,
        "dtype": Param("dtype", _F32),
    },
    prepare=_arange_prepare,
    forward=_arange_fwd,
    infer_shape=_arange_shape,
    infer_type=_dtype_rule,
    gradient=lambda F, n, g: [],
    needs_out_shape=_infers_range,
    doc="``start, start + step, ...`` below ``stop`` (``arange(n)``: 0..n-1), each repeated ``repeat`` times; "
    "``infer_range=True`` without ``stop``: as many as the consumers' shape says.",
)


@wait_for_first_input
def _arange_like_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if params["axis"] is None:
        return in_shapes, [tuple(x)]
    return in_shapes, [(x[normalize_axis(params["axis"], len(x), where)],)]


def _arange_like_prepare(params, name):
    if params["repeat"] <= 0:
        raise ParamError(f"_contrib_arange_like {name!r}: parameter 'repeat' must be positive, got {params['repeat']}")
    return params


def _arange_like_fwd(xp, data, start, step, repeat, ctx, axis):
    shape = data.shape if axis is None else (data.shape[normalize_axis(axis, data.ndim, "_contrib_arange_like")],)
    n = int(np.prod(shape, dtype=np.int64))
    return _arange_fwd(xp, start, None, step, repeat, False, ctx, data.dtype, n=n).reshape(shape)


register(
    "_contrib_arange_like",
    aliases=("_npx_arange_like",),
    params={
        "start": Param("float", 0.0),
        "step": Param("float", 1.0),
        "repeat": Param("int", 1),
        "ctx": _CTX,
        "axis": Param("int", None),
    },
    prepare=_arange_like_prepare,
    forward=_arange_like_fwd,
    infer_shape=_arange_like_shape,
    gradient=lambda F, n, g: [None],  # depends only on the shape (MXNet: zero gradient)
    doc="``start + (i // repeat) * step`` shaped like ``data`` (or the length of its ``axis``), in its dtype.",
)


def _linspace_prepare(params, name):
    _range_dtype("_linspace", params, name)
    if params["num"] < 0:
        raise ParamError(f"_linspace {name!r}: parameter 'num' must be non-negative, got {params['num']}")
    return params


def _linspace_fwd(xp, start, stop, num, endpoint, ctx, dtype):
    steps = num - 1 if endpoint else num
    step = (stop - start) / steps if steps > 0 else 0.0
    return (start + step * xp.arange(num, dtype=np.float64)).astype(dtype)


register(
    "_linspace",
    aliases=("_npi_linspace",),
    inputs=(),
    # MXNet parses LinspaceParam (its operator listing shows RangeParam's fields, which it does not read)
    params={
        "start": Param("float"),
        "stop": Param("float"),
        "num": Param("int"),
        "endpoint": Param("bool", True),
        "ctx": _CTX,
        "dtype": Param("dtype", _F32),
    },
    prepare=_linspace_prepare,
    forward=_linspace_fwd,
    infer_shape=_from_params(lambda p: (p["num"],)),
    infer_type=_dtype_rule,
    gradient=lambda F, n, g: [],
    doc="``num`` evenly spaced values from ``start`` to ``stop`` (excluded unless ``endpoint``).",
)

_EYE_DTYPES = ("float16", "float32", "float64", "int32", "int64", "int8", "uint8")


def _eye_prepare(params, name):
    if params["dtype"].name not in _EYE_DTYPES:
        raise ParamError(
            f"_eye {name!r}: parameter 'dtype' must be one of {list(_EYE_DTYPES)}, got {params['dtype'].name!r}"
        )
    if params["N"] < 0 or params["M"] < 0:
        raise ParamError(f"_eye {name!r}: N and M must be non-negative, got N={params['N']}, M={params['M']}")
    return params


register(
    "_eye",
    inputs=(),
    params={"N": Param("int"), "M": Param("int", 0), "k": Param("int", 0), "ctx": _CTX, "dtype": Param("dtype", _F32)},
    prepare=_eye_prepare,
    forward=lambda xp, N, M, k, ctx, dtype: xp.eye(N, M if M > 0 else N, k, dtype=dtype),
    infer_shape=_from_params(lambda p: (p["N"], p["M"] if p["M"] > 0 else p["N"])),
    infer_type=_dtype_rule,
    gradient=lambda F, n, g: [],
    doc="An N x M (M=0: N) matrix with ones on diagonal ``k`` and zeros elsewhere.",
)


# ----------------------------------------------------------------------------
# shape_array, size_array, all_finite, multi_all_finite
# ----------------------------------------------------------------------------

_I64 = np.dtype(np.int64)

register(
    "shape_array",
    aliases=("_npx_shape_array",),
    forward=lambda xp, x: xp.asarray(np.array(x.shape, dtype=np.int64)),
    infer_shape=lambda p, i, o, w: (i, [(len(i[0]),)] if i[0] is not None else o),
    infer_type=lambda p, i, o, w: (i, [_I64]),
    gradient=lambda F, n, g: [None],  # depends only on the shape (MXNet: zero gradient)
    doc="The shape of ``data`` as a 1-d int64 array.",
)

register(
    "size_array",
    forward=lambda xp, x: xp.asarray(np.array([x.size], dtype=np.int64)),
    infer_shape=lambda p, i, o, w: (i, [(1,)]),
    infer_type=lambda p, i, o, w: (i, [_I64]),
    gradient=lambda F, n, g: [None],  # depends only on the shape (MXNet: zero gradient)
    doc="The number of elements of ``data`` as an int64 array of shape (1,).",
)


def _all_finite(xp, arrays):
    # MXNet tests static_cast<float>(x), so a float64 beyond float32's range (1e300) counts as infinite
    # there; symgrad tests the value itself (1e300 is finite)
    ok = True
    for a in arrays:
        if a.dtype.kind in "fc":
            ok = ok & xp.isfinite(a).all()
    return xp.asarray(ok, dtype=np.float32).reshape(1)


register(
    "all_finite",
    params={"init_output": Param("bool", True)},
    # init_output=False keeps the previous content of MXNet's output buffer (to AND several calls); a
    # symgrad output is always new, so it starts from 1 either way
    forward=lambda xp, x, init_output: _all_finite(xp, [x]),
    infer_shape=lambda p, i, o, w: (i, [(1,)]),
    infer_type=lambda p, i, o, w: (i, [_F32]),
    gradient=lambda F, n, g: [None],  # piecewise constant (MXNet registers no gradient)
    doc="float32 [1.] when every element of ``data`` is finite, else [0.].",
)


def _multi_all_finite_prepare(params, name):
    check_at_least(params, "num_arrays", 1, f"multi_all_finite {name!r}")
    return params


register(
    "multi_all_finite",
    inputs=lambda p: [f"array_{i}" for i in range(p["num_arrays"])],
    variadic="num_arrays",
    params={"num_arrays": Param("int", 1), "init_output": Param("bool", True)},
    prepare=_multi_all_finite_prepare,
    forward=lambda xp, *xs, num_arrays, init_output: _all_finite(xp, xs),
    infer_shape=lambda p, i, o, w: (i, [(1,)]),
    infer_type=lambda p, i, o, w: (i, [_F32]),
    gradient=lambda F, n, g: [None] * len(n.inputs),  # piecewise constant (MXNet registers no gradient)
    doc="float32 [1.] when every element of every input is finite, else [0.].",
)


# ----------------------------------------------------------------------------
# moments
# ----------------------------------------------------------------------------


def _moments_prepare(params, name):
    if params["axes"] is None or len(params["axes"]) == 0:
        raise ParamError(
            f"moments {name!r}: parameter 'axes' must name at least one axis (MXNet: for global "
            "moments pass every axis)"
        )
    return params


@wait_for_first_input
def _moments_shape(params, in_shapes, out_shapes, where):
    (x,) = in_shapes
    if len(x) == 0:
        raise ShapeError(f"{where}: input 'data' must be at least 1-d")
    out = reduced_shape(x, reduce_axes(len(x), params["axes"], False, where), params["keepdims"])
    return in_shapes, [out, out]


def _moments_fwd(xp, x, axes, keepdims):
    ax = reduce_axes(x.ndim, axes, False, "moments")
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    mean = x.mean(axis=ax, keepdims=True, dtype=acc)
    var = ((x - mean.astype(x.dtype)) ** 2).mean(axis=ax, keepdims=True, dtype=acc)
    shape = reduced_shape(x.shape, ax, keepdims)
    return mean.astype(x.dtype).reshape(shape), var.astype(x.dtype).reshape(shape)


def _moments_grad(F, n, g):
    # m = mean(x) and v = mean((x - m)^2) over the axes, N elements per group:
    #   dm/dx_i = 1/N;  dv/dx_i = 2 (x_i - m) / N  (the terms through m sum to zero: sum_j (x_j - m) = 0)
    # so dx = unreduce(gm)/N + 2 (x - unreduce(m)) unreduce(gv)/N, built from ops with gradients
    x = n.inputs[0]
    kw = {"axis": n.params["axes"], "keepdims": n.params["keepdims"]}
    per = F._unreduce_like(g[0], x, mean=True, **kw)
    centred = x - F._unreduce_like(n.outputs[0], x, **kw)
    return [per + 2.0 * centred * F._unreduce_like(g[1], x, mean=True, **kw)]


register(
    "moments",
    params={"axes": Param("shape", None), "keepdims": Param("bool", False)},
    prepare=_moments_prepare,
    num_outputs=2,
    forward=_moments_fwd,
    infer_shape=_moments_shape,
    gradient=_moments_grad,
    doc="Mean and (population) variance of ``data`` over ``axes``.",
)
