"""Random test data: arrays and shapes (MXNet's ``random_arrays``, ``rand_shape_nd``, ``rand_ndarray``).

Everything draws from numpy's global RNG, so ``with_seed`` makes it reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from .context import to_device
from .tolerance import default_dtype

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from symgrad.context import Context

__all__ = ["random_arrays", "random_uniform_arrays", "rand_shape_2d", "rand_shape_3d", "rand_shape_nd", "rand_ndarray"]


@overload
def random_arrays(shape: Sequence[int], /) -> np.ndarray: ...
@overload
def random_arrays() -> list[np.ndarray]: ...
@overload
def random_arrays(shape0: Sequence[int], shape1: Sequence[int], /, *shapes: Sequence[int]) -> list[np.ndarray]: ...


def random_arrays(*shapes: Sequence[int]) -> np.ndarray | list[np.ndarray]:
    """Standard-normal float32 arrays, one per shape (one array when one shape is given).

    >>> random_arrays((2, 3)).shape, random_arrays((2,), ()).__len__()
    ((2, 3), 2)
    """
    arrays = [
        np.array(np.random.randn(), dtype=default_dtype())
        if len(s) == 0
        else np.random.randn(*s).astype(default_dtype())
        for s in shapes
    ]
    return arrays[0] if len(arrays) == 1 else arrays


@overload
def random_uniform_arrays(
    shape: int | Sequence[int], /, *, low: float = ..., high: float = ..., dtype: DTypeLike | None = ...
) -> np.ndarray: ...
@overload
def random_uniform_arrays(
    *, low: float = ..., high: float = ..., dtype: DTypeLike | None = ...
) -> list[np.ndarray]: ...
@overload
def random_uniform_arrays(
    shape0: int | Sequence[int],
    shape1: int | Sequence[int],
    /,
    *shapes: int | Sequence[int],
    low: float = ...,
    high: float = ...,
    dtype: DTypeLike | None = ...,
) -> list[np.ndarray]: ...


def random_uniform_arrays(
    *shapes: int | Sequence[int], low: float = 0.0, high: float = 1.0, dtype: DTypeLike | None = None
) -> np.ndarray | list[np.ndarray]:
    """Uniform ``[low, high)`` arrays (float32 by default), one per shape."""
    dtype = default_dtype() if dtype is None else dtype
    arrays = [np.random.uniform(low, high, size=s).astype(dtype) for s in shapes]
    return arrays[0] if len(arrays) == 1 else arrays


def _low(allow_zero_size: bool) -> int:
    return 0 if allow_zero_size else 1


def rand_shape_2d(dim0: int = 10, dim1: int = 10, allow_zero_size: bool = False) -> tuple[int, int]:
    """A random 2-d shape with sides in ``[1, dim]`` (``[0, dim]`` with ``allow_zero_size``)."""
    lo = _low(allow_zero_size)
    return int(np.random.randint(lo, dim0 + 1)), int(np.random.randint(lo, dim1 + 1))


def rand_shape_3d(
    dim0: int = 10, dim1: int = 10, dim2: int = 10, allow_zero_size: bool = False
) -> tuple[int, int, int]:
    """A random 3-d shape with sides in ``[1, dim]``."""
    lo = _low(allow_zero_size)
    return (
        int(np.random.randint(lo, dim0 + 1)),
        int(np.random.randint(lo, dim1 + 1)),
        int(np.random.randint(lo, dim2 + 1)),
    )


def rand_shape_nd(num_dim: int, dim: int = 10, allow_zero_size: bool = False) -> tuple[int, ...]:
    """A random ``num_dim``-d shape (a tuple of ints) with sides in ``[1, dim]``.

    >>> len(rand_shape_nd(4)), all(1 <= d <= 3 for d in rand_shape_nd(5, dim=3))
    (4, True)
    """
    return tuple(int(d) for d in np.random.randint(_low(allow_zero_size), dim + 1, size=num_dim))


def rand_ndarray(
    shape: Sequence[int],
    stype: str = "default",
    density: float | None = None,
    dtype: DTypeLike | None = None,
    ctx: Context | None = None,
) -> Any:
    """A standard-normal dense array of ``shape`` (float32 unless ``dtype``).

    There is no NDArray class: the result is a numpy array (a CuPy array when a gpu ``ctx`` is given).
    Sparse storage types are not supported (``NotImplementedError``).
    """
    if stype != "default":
        raise NotImplementedError(
            f"rand_ndarray: storage type {stype!r} is not supported; symgrad arrays are dense (stype='default')"
        )
    arr = np.asarray(random_arrays(tuple(shape)), dtype=default_dtype() if dtype is None else dtype)
    if ctx is None or ctx.device_type == "cpu":
        return arr
    return to_device(arr, ctx)
