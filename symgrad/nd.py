"""A minimal ``mx.nd`` for custom-op code: MXNet's array-creation functions, making the arrays of a context.

MXNet's custom operators (its docs, ``example/numpy-ops``) compute with numpy and hand the result back as
``mx.nd.array(y)``; with ``import symgrad as mx`` that line runs unchanged::

    class Sigmoid(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            x = in_data[0].asnumpy()
            self.assign(out_data[0], req[0], mx.nd.array(1.0 / (1.0 + np.exp(-x))))

Each function makes its array on ``ctx`` (default: ``current_context()``, which is ``cpu(0)`` unless a
``with sg.gpu(0):`` block or ``Context.default_ctx`` says otherwise, as in MXNet): on cpu a numpy array of the
subclass ``HostArray``, which also answers the NDArray methods custom-op code uses (``asnumpy()``,
``asscalar()``, ``context``, ``wait_to_read()``); on gpu a CuPy array on that device. ``CustomOp.assign``
copies either kind into an operator's buffers, across devices too. There is no imperative computing here
(``mx.nd.exp``, ``mx.nd.Custom``): symgrad computes symbolically.

dtypes are MXNet's: float32 unless ``dtype`` says otherwise; ``zeros_like``/``ones_like`` and ``array`` of
an array keep its dtype. Deliberately different from MXNet: ``array`` of a numpy floating array keeps its
dtype (MXNet makes it float32), so a custom op checked in float64 is not rounded to float32 on the way out.

>>> import numpy as np, symgrad as sg
>>> a = sg.nd.array([1, 2, 3])
>>> a.dtype, a.context, a.asnumpy().tolist()
(dtype('float32'), cpu(0), [1.0, 2.0, 3.0])
>>> sg.nd.array(np.array([0.5])).dtype  # a float64 array stays float64
dtype('float64')
>>> sg.nd.arange(3, repeat=2).tolist()
[0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .context import Array, Context, array_context, cpu, current_context

__all__ = [
    "HostArray",
    "array",
    "empty",
    "zeros",
    "ones",
    "full",
    "arange",
    "linspace",
    "eye",
    "zeros_like",
    "ones_like",
    "waitall",
]

#: a shape as the functions take it: an int or a sequence of ints
ShapeLike = int | Sequence[int]


class HostArray(np.ndarray):
    """A numpy array that also answers the NDArray API custom-op code typically uses: ``asnumpy()`` (a plain
    copy), ``asscalar()``, ``wait_to_read()``, ``stype`` (always ``'default'``: symgrad has dense storage
    only) and ``context`` (``cpu(0)``). Custom ops get their inputs and buffers on cpu as views of this class
    (writes go through)."""

    stype = "default"

    @property
    def context(self) -> Context:
        """``cpu(0)`` (``ctx`` is the same)."""
        return cpu()

    ctx = context

    def asnumpy(self) -> np.ndarray:
        """A plain numpy copy."""
        return np.array(self, copy=True)

    def asscalar(self) -> Any:
        """The one element as a Python number (ValueError for any other size)."""
        if self.size != 1:
            raise ValueError(f"asscalar: the array has {self.size} elements, not 1 (shape {self.shape})")
        return self.reshape(()).item()

    def wait_to_read(self) -> None:
        """Nothing to wait for: symgrad computes synchronously."""


_DEVICE_ARRAY_CLASSES: dict[Any, type] = {}


def device_array_class(xp: Any) -> type:
    """The CuPy counterpart of ``HostArray`` (made once per array module): a ``cupy.ndarray`` subclass that answers
    ``asnumpy()`` (a host copy), ``asscalar()``, ``wait_to_read()`` (synchronises the device), ``stype`` and
    ``context`` (``gpu(i)``), so custom-op code written for MXNet's NDArrays runs on a gpu too."""
    cls = _DEVICE_ARRAY_CLASSES.get(xp)
    if cls is None:

        class DeviceArray(xp.ndarray):  # type: ignore[name-defined,misc]
            stype = "default"

            @property
            def context(self) -> Context:
                return Context("gpu", int(self.device.id))

            ctx = context

            def asnumpy(self) -> np.ndarray:
                return np.asarray(xp.asnumpy(self))

            def asscalar(self) -> Any:
                if self.size != 1:
                    raise ValueError(f"asscalar: the array has {self.size} elements, not 1 (shape {self.shape})")
                return self.reshape(()).item()

            def wait_to_read(self) -> None:
                self.device.synchronize()

        cls = _DEVICE_ARRAY_CLASSES[xp] = DeviceArray
    return cls


def _ctx(ctx: Context | None, who: str) -> Context:
    if ctx is None:
        return current_context()
    if not isinstance(ctx, Context):
        raise TypeError(f"nd.{who}: ctx must be a Context such as sg.cpu() or sg.gpu(0), got {ctx!r}")
    return ctx


def _dtype(dtype: npt.DTypeLike | None, who: str, default: npt.DTypeLike = np.float32) -> np.dtype[Any]:
    try:
        return np.dtype(default if dtype is None else dtype)
    except TypeError:
        raise TypeError(f"nd.{who}: dtype {dtype!r} is not a numpy dtype") from None


def _shape(shape: ShapeLike, who: str) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (numbers.Integral, np.integer)) else shape
    if not isinstance(dims, (tuple, list)) or not all(
        isinstance(d, (numbers.Integral, np.integer)) and not isinstance(d, bool) and int(d) >= 0 for d in dims
    ):
        raise ValueError(f"nd.{who}: shape must be a non-negative int or a tuple of them, got {shape!r}")
    return tuple(int(d) for d in dims)


def _make(ctx: Context | None, who: str, build: Any) -> Array:
    """``build(xp)`` on the device of ``ctx``: a ``HostArray`` on cpu, a CuPy array on gpu."""
    ctx = _ctx(ctx, who)
    if ctx.device_type == "cpu":
        return build(np).view(HostArray)
    with ctx.device_scope():
        return build(ctx.xp)


def array(source_array: Any, ctx: Context | None = None, dtype: npt.DTypeLike | None = None) -> Array:
    """A copy of ``source_array`` (an array, a nested list, a number) on ``ctx`` (``mx.nd.array``).

    ``dtype`` None: an array's own dtype when it is a float (or any array of a device: numpy subclass
    ``HostArray``, CuPy), else float32 as in MXNet.
    """
    if dtype is None:
        kept = isinstance(source_array, HostArray) or array_context(source_array) not in (None, cpu())
        src_dtype = getattr(source_array, "dtype", None)
        if kept or (isinstance(source_array, np.ndarray) and np.issubdtype(src_dtype, np.floating)):
            dtype = src_dtype
    dt = _dtype(dtype, "array")
    host = getattr(source_array, "get", None)
    if host is not None and type(source_array).__module__.startswith("cupy"):
        source_array = host()  # a CuPy array: through the host, onto the device asked for
    try:
        data = np.array(source_array, dtype=dt)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"nd.array: cannot make a {dt} array of {type(source_array).__name__}: {exc}") from None
    return _make(ctx, "array", lambda xp: xp.array(data))


def empty(shape: ShapeLike, ctx: Context | None = None, dtype: npt.DTypeLike | None = None) -> Array:
    """An array of ``shape`` whose values are not set (``mx.nd.empty``; float32 unless ``dtype``)."""
    s, dt = _shape(shape, "empty"), _dtype(dtype, "empty")
    return _make(ctx, "empty", lambda xp: xp.empty(s, dt))


def zeros(shape: ShapeLike, ctx: Context | None = None, dtype: npt.DTypeLike | None = None, **kwargs: Any) -> Array:
    """An array of ``shape`` filled with 0 (``mx.nd.zeros``; float32 unless ``dtype``)."""
    _dense_only(kwargs, "zeros")
    s, dt = _shape(shape, "zeros"), _dtype(dtype, "zeros")
    return _make(ctx, "zeros", lambda xp: xp.zeros(s, dt))


def ones(shape: ShapeLike, ctx: Context | None = None, dtype: npt.DTypeLike | None = None, **kwargs: Any) -> Array:
    """An array of ``shape`` filled with 1 (``mx.nd.ones``; float32 unless ``dtype``)."""
    _dense_only(kwargs, "ones")
    s, dt = _shape(shape, "ones"), _dtype(dtype, "ones")
    return _make(ctx, "ones", lambda xp: xp.ones(s, dt))


def full(shape: ShapeLike, val: float, ctx: Context | None = None, dtype: npt.DTypeLike | None = None) -> Array:
    """An array of ``shape`` filled with ``val`` (``mx.nd.full``; float32 unless ``dtype``)."""
    s, dt = _shape(shape, "full"), _dtype(dtype, "full")
    if not isinstance(val, (numbers.Number, np.generic)):
        raise TypeError(f"nd.full: val must be a number, got {type(val).__name__}")
    return _make(ctx, "full", lambda xp: xp.full(s, val, dt))


def arange(
    start: float,
    stop: float | None = None,
    step: float = 1.0,
    repeat: int = 1,
    infer_range: bool | None = None,
    ctx: Context | None = None,
    dtype: npt.DTypeLike | None = None,
) -> Array:
    """``start, start + step, ...`` below ``stop`` (``arange(n)``: 0 .. n-1), each value ``repeat`` times
    (``mx.nd.arange``; float32 unless ``dtype``). ``infer_range`` is MXNet's keyword for symbols: refused."""
    if infer_range:
        raise ValueError("nd.arange: infer_range needs a symbol (sg.sym.arange); give stop here")
    if stop is None:
        start, stop = 0.0, start
    if step == 0:
        raise ValueError("nd.arange: step must not be 0")
    if not isinstance(repeat, (numbers.Integral, np.integer)) or repeat < 1:
        raise ValueError(f"nd.arange: repeat must be a positive int, got {repeat!r}")
    dt = _dtype(dtype, "arange")
    # the values in float64, then cast (MXNet computes start + i * step and casts)
    values = np.repeat(np.arange(start, stop, step, dtype=np.float64), int(repeat)).astype(dt)
    return _make(ctx, "arange", lambda xp: xp.array(values))


def linspace(
    start: float,
    stop: float,
    num: int,
    endpoint: bool = True,
    ctx: Context | None = None,
    dtype: npt.DTypeLike | None = None,
) -> Array:
    """``num`` evenly spaced values from ``start`` to ``stop`` (``mx.nd.linspace``; float32 unless ``dtype``)."""
    if not isinstance(num, (numbers.Integral, np.integer)) or num < 0:
        raise ValueError(f"nd.linspace: num must be a non-negative int, got {num!r}")
    dt = _dtype(dtype, "linspace")
    values = np.linspace(start, stop, int(num), endpoint=bool(endpoint)).astype(dt)
    return _make(ctx, "linspace", lambda xp: xp.array(values))


def eye(N: int, M: int = 0, k: int = 0, ctx: Context | None = None, dtype: npt.DTypeLike | None = None) -> Array:  # noqa: N803
    """An ``N x M`` array (``M`` 0: ``N x N``) with ones on diagonal ``k`` (``mx.nd.eye``; float32 unless
    ``dtype``)."""
    rows, cols = _shape(N, "eye"), _shape(M, "eye")
    dt = _dtype(dtype, "eye")
    return _make(ctx, "eye", lambda xp: xp.eye(rows[0], cols[0] or rows[0], int(k), dt))


def zeros_like(data: Array) -> Array:
    """Zeros of ``data``'s shape and dtype, on its device (``mx.nd.zeros_like``)."""
    return _like(data, "zeros_like", 0)


def ones_like(data: Array) -> Array:
    """Ones of ``data``'s shape and dtype, on its device (``mx.nd.ones_like``)."""
    return _like(data, "ones_like", 1)


def _like(data: Array, who: str, value: int) -> Array:
    ctx = array_context(data)
    if ctx is None:
        raise TypeError(f"nd.{who}: expected a numpy or CuPy array, got {type(data).__name__}")
    return _make(ctx, who, lambda xp: xp.full(data.shape, value, data.dtype))


def waitall() -> None:
    """Nothing to wait for: symgrad computes synchronously (``mx.nd.waitall``)."""


def _dense_only(kwargs: dict[str, Any], who: str) -> None:
    stype = kwargs.pop("stype", None)
    if stype not in (None, "default"):
        raise NotImplementedError(f"nd.{who}: sparse storage type {stype!r} is not supported")
    if kwargs:
        raise TypeError(f"nd.{who}: unexpected keyword arguments {sorted(kwargs)}")
