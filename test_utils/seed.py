"""Reproducible randomness for tests: the ``with_seed`` decorator."""

from __future__ import annotations

import contextvars
import functools
import os
import random
import sys

import numpy as np

__all__ = ["with_seed", "current_seed", "SEED_ENV", "COUNT_ENV"]

SEED_ENV = "SYMGRAD_TEST_SEED"
COUNT_ENV = "SYMGRAD_TEST_COUNT"

_current: contextvars.ContextVar = contextvars.ContextVar("symgrad_test_seed", default=None)


def current_seed():
    """The seed of the ``with_seed`` test running now, or None."""
    return _current.get()


def _seed_note(seed, i, count) -> str:
    run = f" (run {i + 1} of {count})" if count > 1 else ""
    return f"seed={seed}{run}: reproduce with {SEED_ENV}={seed}"


def with_seed(seed=None):
    """Decorator seeding numpy's and Python's global RNGs before each run of a test.

    The seed is ``seed`` when given, else the environment variable ``SYMGRAD_TEST_SEED``, else a
    fresh random one. If the test fails, the seed is printed to stderr and added to the exception
    as a note (and as ``.seed`` on a ``GradientCheckError``): ``seed=123: reproduce with
    SYMGRAD_TEST_SEED=123``. ``SYMGRAD_TEST_COUNT=n`` runs the test n times with fresh seeds.
    numpy's global RNG state is restored afterwards, so tests do not leak randomness.

    >>> @with_seed(7)
    ... def draw():
    ...     return np.random.randint(100)
    >>> draw() == draw()
    True
    """
    if callable(seed):  # used as @with_seed without parentheses
        return with_seed()(seed)

    def decorate(test):
        @functools.wraps(test)
        def wrapper(*args, **kwargs):
            count = int(os.environ.get(COUNT_ENV, "1"))
            env = os.environ.get(SEED_ENV)
            result = None
            for i in range(count):
                if seed is not None:
                    this = int(seed)
                elif env is not None and env.strip():
                    this = int(env)
                else:
                    this = int(np.random.SeedSequence().generate_state(1)[0] % (2**31 - 1))
                state = np.random.get_state()
                py_state = random.getstate()
                np.random.seed(this)
                random.seed(this)
                token = _current.set(this)
                try:
                    result = test(*args, **kwargs)
                except Exception as exc:
                    note = _seed_note(this, i, count)
                    print(f"\n{test.__qualname__} failed with {note}", file=sys.stderr)
                    if hasattr(exc, "add_note"):
                        exc.add_note(note)
                    if hasattr(exc, "names") and hasattr(exc, "worst"):  # a GradientCheckError
                        exc.seed = this
                    raise
                finally:
                    _current.reset(token)
                    np.random.set_state(state)
                    random.setstate(py_state)
            return result

        return wrapper

    return decorate
