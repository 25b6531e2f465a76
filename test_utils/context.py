"""The default device of the checkers, and moving arrays between host and device."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from symgrad.context import Context, current_context
from symgrad.context import set_default_context as _set_default
from symgrad.context import to_numpy as _to_numpy

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

__all__ = ["default_context", "set_default_context", "to_numpy", "to_device", "synchronize"]


def default_context() -> Context:
    """The context checkers run on when ``ctx=None``: ``symgrad.current_context()``
    (the innermost ``with sg.gpu(0):`` scope, else the default set by ``set_default_context``)."""
    return current_context()


def set_default_context(ctx: Context | None) -> None:
    """Make ``ctx`` the process-wide default context (as MXNet's, this changes ``sg.current_context()``)."""
    _set_default(ctx)


def to_numpy(x: Any) -> np.ndarray:
    """A numpy array (or the number itself) for numpy / CuPy arrays, lists and numbers."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "get") or type(x).__module__.startswith("cupy"):
        return _to_numpy(x)
    asnumpy = getattr(x, "asnumpy", None)  # MXNet-style arrays
    if callable(asnumpy):
        return asnumpy()
    return np.asarray(x)


def to_device(x: Any, ctx: Context, dtype: DTypeLike | None = None) -> Any:
    """A fresh array with the values of ``x`` on ``ctx`` (cast to ``dtype`` when given)."""
    host = np.array(to_numpy(x), dtype=dtype, copy=True)
    if ctx.device_type == "cpu":
        return host
    with ctx.device_scope():
        return ctx.xp.asarray(host)


def synchronize(ctx: Context) -> None:
    """Wait for queued device work (a no-op on cpu)."""
    if ctx.device_type != "cpu":
        ctx.xp.cuda.Device(ctx.device_id).synchronize()
