"""Device contexts: ``cpu()`` runs numpy, ``gpu(i)`` runs CuPy on device ``i``.

CuPy is imported only when a gpu context is actually used.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any, Literal

import numpy as np

__all__ = ["Context", "cpu", "gpu", "current_context", "num_gpus"]

#: A numpy (cpu) or CuPy (gpu) ndarray. CuPy is an optional dependency without type information, so to a type
#: checker this is ``Any``; the name says what is meant.
Array = Any  # numpy or cupy ndarray
#: The array module of a device: ``numpy`` (cpu) or ``cupy`` (gpu).
ArrayModule = ModuleType

_local = threading.local()


class _ContextMeta(type):
    """Gives ``Context`` MXNet's class property ``default_ctx``."""

    @property
    def default_ctx(cls) -> Context:
        """This thread's current context (``current_context()``). Assigning it replaces the context of this
        thread only: inside a ``with ctx:`` block until the block ends (MXNet restores the context the block
        replaced), outside any block until ``set_default_context`` is called in this thread."""
        return current_context()

    @default_ctx.setter
    def default_ctx(cls, ctx: Context) -> None:
        if not isinstance(ctx, Context):
            raise TypeError(f"Context.default_ctx must be a Context such as sg.cpu(), got {ctx!r}")
        stack = _ctx_stack()
        if stack:
            stack[-1] = ctx
        else:
            _local.default = ctx


class Context(metaclass=_ContextMeta):
    """A device: ``Context("cpu", 0)`` or ``Context("gpu", 1)``; usable as ``with`` scope.

    ``Context.default_ctx`` is this thread's current context, assignable (MXNet's class property).

    >>> with gpu(1):
    ...     current_context()
    gpu(1)
    >>> current_context()
    cpu(0)
    """

    devtype2str = {1: "cpu", 2: "gpu"}
    devstr2type = {"cpu": 1, "gpu": 2}
    device_type: str
    device_id: int

    def __init__(self, device_type: str | Context, device_id: int | np.integer[Any] = 0) -> None:
        if isinstance(device_type, Context):
            device_id = device_type.device_id
            device_type = device_type.device_type
        if device_type not in ("cpu", "gpu"):
            raise ValueError(f"Context: device_type must be 'cpu' or 'gpu', got {device_type!r}")
        if not isinstance(device_id, (int, np.integer)) or device_id < 0:
            raise ValueError(f"Context: device_id must be a non-negative int, got {device_id!r}")
        self.device_type = device_type
        self.device_id = int(device_id)

    @property
    def device_typeid(self) -> int:
        return self.devstr2type[self.device_type]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Context) and self.device_type == other.device_type and self.device_id == other.device_id
        )

    def __hash__(self) -> int:
        return hash((self.device_type, self.device_id))

    def __repr__(self) -> str:
        return f"{self.device_type}({self.device_id})"

    __str__ = __repr__

    def __enter__(self) -> Context:
        stack = _ctx_stack()
        stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _ctx_stack().pop()

    # -- arrays ---------------------------------------------------------------
    @property
    def xp(self) -> ArrayModule:
        """The array module of this device (numpy or cupy)."""
        if self.device_type == "cpu":
            return np
        return _cupy(self)

    def device_scope(self) -> AbstractContextManager[Any]:
        """A context manager making this device current for the array module."""
        if self.device_type == "cpu":
            return _NullScope()
        return _cupy(self).cuda.Device(self.device_id)


class _NullScope:
    def __enter__(self) -> _NullScope:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


def _cupy(ctx: Context) -> ArrayModule:
    try:
        import cupy
    except ImportError as exc:
        raise ImportError(f"{ctx} needs CuPy: pip install symgrad[gpu]") from exc
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver missing
        raise RuntimeError(f"{ctx}: CuPy is installed but no CUDA device is usable ({exc})") from exc
    if ctx.device_id >= n:
        raise ValueError(f"{ctx}: only {n} GPU(s) present")
    return cupy


def array_context(arr: object) -> Context | None:
    """Where an array lives: cpu(0) for numpy, gpu(i) for a CuPy array, else None."""
    if isinstance(arr, np.ndarray):
        return Context("cpu", 0)
    dev = getattr(arr, "device", None)
    if dev is not None and any(c.__module__.startswith("cupy") for c in type(arr).__mro__[:-1]):
        # a CuPy array, or a subclass of one (a custom op's ``nd.device_array_class`` views)
        return Context("gpu", int(getattr(dev, "id", 0)))
    return None


def to_numpy(arr: Array) -> np.ndarray:
    """Copy any array (numpy or CuPy) to a numpy array on the host."""
    if isinstance(arr, np.ndarray):
        return arr
    get = getattr(arr, "get", None)
    if get is not None:
        return get()
    return np.asarray(arr)


def cpu(device_id: int = 0) -> Context:
    """The host: numpy arrays (``device_id`` only labels the context, as in MXNet)."""
    return Context("cpu", device_id)


def gpu(device_id: int = 0) -> Context:
    """CUDA device ``device_id``: CuPy arrays (CuPy is imported when the context is first used)."""
    return Context("gpu", device_id)


def num_gpus() -> int:
    """The number of CUDA devices CuPy sees; 0 without CuPy."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def _ctx_stack() -> list[Context]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = []
        _local.stack = stack
    return stack


_default_ctx = [Context("cpu", 0)]


def set_default_context(ctx: Context | None) -> None:
    """Change the process-wide default returned outside any ``with ctx:`` scope (``cpu(0)`` initially).

    ``test_utils.set_default_context`` calls this, as MXNet's does; ``None`` restores ``cpu(0)``.
    """
    if ctx is None:
        ctx = Context("cpu", 0)
    if not isinstance(ctx, Context):
        raise TypeError(f"set_default_context: expected a Context such as sg.cpu(), got {ctx!r}")
    _default_ctx[0] = ctx
    _local.default = None  # this thread's ``Context.default_ctx = ...`` gives way to the new default


def current_context() -> Context:
    """The innermost ``with ctx:`` context of this thread, else this thread's ``Context.default_ctx``
    assignment, else the process-wide default (``cpu(0)``, ``set_default_context``)."""
    stack = _ctx_stack()
    if stack:
        return stack[-1]
    return getattr(_local, "default", None) or _default_ctx[0]
