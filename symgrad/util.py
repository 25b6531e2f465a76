"""MXNet's NumPy-shape switch (``mx.util.set_np_shape`` / ``is_np_shape`` / ``np_shape`` / ``use_np_shape``).

Shapes given to and returned by shape inference have two readings, as in MXNet 1.6+:

- **legacy** (the default): a 0 dimension is *unknown* and ``()`` is an unknown shape, so ``(0, 3)`` says
  "some batch size, 3 features" and nothing can be a scalar or have a zero-size dimension;
  ``infer_shape_partial`` reports what stays unknown the same way (``()`` and 0).
- **NumPy shape** (``set_np_shape(True)``): ``-1`` is an unknown dimension, ``None`` an unknown shape,
  ``()`` a scalar and 0 a real zero size; symbols saved in this mode carry the JSON marker ``is_np_shape``.

The switch is per thread (MXNet keeps it thread-local), off in every new thread.

>>> from symgrad import util
>>> util.is_np_shape()
False
>>> with util.np_shape():
...     util.is_np_shape()
True
>>> util.is_np_shape()
False
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["set_np_shape", "is_np_shape", "np_shape", "use_np_shape"]

_state = threading.local()

F = TypeVar("F")


def is_np_shape() -> bool:
    """Whether NumPy shape semantics are on in this thread (-1 unknown, 0 a real size, ``()`` a scalar)."""
    return bool(getattr(_state, "active", False))


def zeros_are_unknown() -> bool:
    """For shape rules: whether a 0 dimension in the shapes they are handed may be unknown.

    Shape inference hands a rule MXNet's legacy reading (0 for an unknown dimension) at a node where some shape
    is partial, and real sizes everywhere else; a rule that must tell the two apart (``where`` needs its
    condition fully known, as MXNet's does) asks here.
    """
    return bool(getattr(_state, "unknown_zeros", False))


@contextlib.contextmanager
def unknown_zeros() -> Iterator[None]:
    """The scope in which ``zeros_are_unknown()`` is true (shape inference around a rule call)."""
    prev = zeros_are_unknown()
    _state.unknown_zeros = True
    try:
        yield
    finally:
        _state.unknown_zeros = prev


def set_np_shape(active: bool) -> bool:
    """Turn NumPy shape semantics on or off in this thread; returns the previous state."""
    if not isinstance(active, (bool, int)):
        raise TypeError(f"set_np_shape: 'active' must be a bool, got {active!r}")
    prev = is_np_shape()
    _state.active = bool(active)
    return prev


class _NumpyShapeScope:
    """``with np_shape(active):`` -- the state ``active`` inside, the previous one restored on exit.
    ``active=None`` leaves the state alone (MXNet's scope does the same)."""

    def __init__(self, active: bool | None) -> None:
        self._active = active
        self._prev: bool | None = None

    def __enter__(self) -> _NumpyShapeScope:
        if self._active is not None:
            self._prev = set_np_shape(self._active)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._active is not None and self._prev is not None:
            set_np_shape(self._prev)


def np_shape(active: bool | None = True) -> _NumpyShapeScope:
    """A scope with NumPy shape semantics ``active`` (``with np_shape(): ...``, ``with np_shape(False): ...``)."""
    return _NumpyShapeScope(active)


def use_np_shape(func: F) -> F:
    """Decorator: ``func`` (a function, or every method and property of a class) runs with NumPy shape
    semantics on, keeping its name and docstring."""
    if inspect.isclass(func):
        for name, member in list(vars(func).items()):
            if isinstance(member, property):
                fget = None if member.fget is None else use_np_shape(member.fget)
                fset = None if member.fset is None else use_np_shape(member.fset)
                setattr(func, name, property(fget, fset, member.fdel, member.__doc__))
            elif inspect.isfunction(member):
                setattr(func, name, use_np_shape(member))
        return func
    if not callable(func):
        raise TypeError(f"use_np_shape can only decorate classes and callables, got {type(func).__name__}")
    call: Callable[..., Any] = func

    @functools.wraps(call)
    def with_np_shape(*args: Any, **kwargs: Any) -> Any:
        with np_shape(True):
            return call(*args, **kwargs)

    return with_np_shape  # type: ignore[return-value]
