"""Seeding symgrad's random number generators (``mx.random.seed``).

The sampling operators (``_random_uniform``, ``_sample_normal``, ``_shuffle``, ...) draw from one
generator per array module: numpy's on cpu, CuPy's on gpu. Until seeded they start from seed 0, so a
fresh process draws the same numbers every run (as MXNet's do).

>>> import numpy as np, symgrad as sg
>>> u = sg.sym._random_uniform(shape=(3,))
>>> sg.random.seed(42)
>>> a = u.bind(sg.cpu(), {}).forward()[0]
>>> sg.random.seed(42)
>>> b = u.bind(sg.cpu(), {}).forward()[0]
>>> bool(np.array_equal(a, b))
True
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, Literal

from .base import ParamError

if TYPE_CHECKING:
    import numpy as np

    from .context import Context

__all__ = ["seed"]


def seed(seed_state: int | np.integer[Any], ctx: Literal["all"] | Context = "all") -> None:
    """Seed the random number generators of the sampling operators.

    Args:
        seed_state: a non-negative integer; the same seed gives the same sequence of draws.
        ctx: ``"all"`` (default) seeds the generators of every device; a ``Context`` seeds only its
            device's (``cpu``: numpy's generator, ``gpu``: CuPy's).

    Raises:
        ParamError: ``seed_state`` is not a non-negative integer, or ``ctx`` is neither ``"all"`` nor a Context.
    """
    from .context import Context
    from .ops.random import seed_generators

    if isinstance(seed_state, bool) or not isinstance(seed_state, numbers.Integral) or seed_state < 0:
        raise ParamError(f"random.seed: seed_state must be a non-negative integer, got {seed_state!r}")
    if isinstance(ctx, str) and ctx == "all":
        seed_generators(int(seed_state))
    elif isinstance(ctx, Context):
        seed_generators(int(seed_state), ("numpy",) if ctx.device_type.startswith("cpu") else ("cupy",))
    else:
        raise ParamError(f"random.seed: ctx must be 'all' or a Context (sg.cpu(), sg.gpu(0)), got {ctx!r}")
