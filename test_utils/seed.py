"""Reproducible randomness for tests: the ``with_seed`` decorator, the seed every checker runs under and
the one-line reproduction its failure report prints.

Every random draw of the checkers (dirty gradient buffers, projection weights, random directions,
random arguments) comes from numpy's global RNG, as in MXNet. Inside a seeded test (``@with_seed()``
or the pytest plugin's ``rng`` fixture) that RNG is already seeded with the test's seed. Outside one,
a checker seeds it itself for the duration of the call (``check_seed``): with ``$SYMGRAD_TEST_SEED``
when set, else with a seed drawn from the global RNG (so ``np.random.seed(n)`` before the call still
reproduces it), restoring the caller's RNG state afterwards. Either way a failure report ends with::

    seed 1234 -- reproduce: SYMGRAD_TEST_SEED=1234 python -m pytest 'tests/test_ops.py::test_tanh'
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import random
import shlex
import sys
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar, overload

import numpy as np

from .frames import hide_from_pytest

__all__ = [
    "with_seed",
    "current_seed",
    "check_seed",
    "seeded_check",
    "reproduction",
    "reproduction_line",
    "SEED_ENV",
    "COUNT_ENV",
    "REPRODUCE_MARK",
]

__tracebackhide__ = hide_from_pytest  # a failed check run under with_seed shows its report, not these frames

SEED_ENV = "SYMGRAD_TEST_SEED"
COUNT_ENV = "SYMGRAD_TEST_COUNT"
#: the text that marks the reproduction line of a report (one per report)
REPRODUCE_MARK = "-- reproduce: "

_P = ParamSpec("_P")
_R = TypeVar("_R")

_current: contextvars.ContextVar[int | None] = contextvars.ContextVar("symgrad_test_seed", default=None)


def current_seed() -> int | None:
    """The seed of the ``with_seed`` test (or ``rng`` fixture, or checker call) running now, or None."""
    return _current.get()


def _env_seed() -> int | None:
    env = os.environ.get(SEED_ENV, "").strip()
    if not env:
        return None
    try:
        return int(env)
    except ValueError:
        raise ValueError(f"${SEED_ENV} must be an integer seed, got {env!r}") from None


def _command() -> str:
    """The command that re-runs what is running now: the pytest node, else the script."""
    test = os.environ.get("PYTEST_CURRENT_TEST")
    if test:
        nodeid = test.rsplit(" (", 1)[0]  # "tests/t.py::test_x[a] (call)"
        return f"python -m pytest {shlex.quote(nodeid)}"
    argv = [a for a in sys.argv if a]
    if argv and argv[0] not in ("-c", "-m") and argv[0].endswith(".py") and "ipykernel" not in argv[0]:
        return "python " + " ".join(shlex.quote(a) for a in argv)
    return "<the same code>"  # an interactive session, a notebook, python -c


def reproduction(seed: int | None = None) -> str:
    """One shell line re-running the current test (or script) with ``seed`` (None: no seed needed).

    >>> reproduction(7).startswith("SYMGRAD_TEST_SEED=7 ")
    True
    """
    cmd = _command()
    return cmd if seed is None else f"{SEED_ENV}={int(seed)} {cmd}"


def reproduction_line(seed: int | None = None) -> str:
    """The last line of every failure report: the seed and the one-line reproduction."""
    lead = f"seed {int(seed)}" if seed is not None else "no random seed involved"
    return f"{lead} {REPRODUCE_MARK}{reproduction(seed)}"


def _seed_note(seed: int, i: int, count: int) -> str:
    run = f" (run {i + 1} of {count})" if count > 1 else ""
    return f"seed={seed}{run}: reproduce with {reproduction(seed)}"


@contextlib.contextmanager
def check_seed() -> Iterator[int]:
    """The scope of one checker call: yields the seed its random draws are reproducible from.

    Inside a seeded test the global RNG is left alone (the test's seed reproduces the draws). Outside
    one, numpy's and Python's global RNGs are seeded with ``$SYMGRAD_TEST_SEED`` when set, else with a
    seed drawn from numpy's global RNG, and restored on exit; the seed is ``current_seed()`` meanwhile,
    so the failure report prints it. Cost: one integer drawn from the caller's RNG.
    """
    seed = current_seed()
    if seed is not None:
        yield seed
        return
    seed = _env_seed()
    if seed is None:
        seed = int(np.random.randint(0, 2**31 - 1))
    state, py_state = np.random.get_state(), random.getstate()
    np.random.seed(seed)
    random.seed(seed)
    token = _current.set(seed)
    try:
        yield seed
    finally:
        _current.reset(token)
        np.random.set_state(state)
        random.setstate(py_state)


def seeded_check(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Decorator: run the checker ``fn`` inside ``check_seed()`` (its signature is kept)."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with check_seed():
            return fn(*args, **kwargs)

    return wrapper


@overload
def with_seed(seed: Callable[_P, _R]) -> Callable[_P, _R | None]: ...
@overload
def with_seed(seed: int | np.integer[Any] | None = None) -> Callable[[Callable[_P, _R]], Callable[_P, _R | None]]: ...


def with_seed(seed: int | np.integer[Any] | Callable[..., Any] | None = None) -> Callable[..., Any]:
    """Decorator seeding numpy's and Python's global RNGs before each run of a test.

    The seed is ``seed`` when given, else the environment variable ``SYMGRAD_TEST_SEED``, else a
    fresh random one. If the test fails, the seed is printed to stderr with the command that reproduces
    the failure, and added to the exception as a note (a ``GradientCheckError`` already ends with that
    line, and gets ``.seed``): ``seed=123: reproduce with SYMGRAD_TEST_SEED=123 python -m pytest '...'``.
    ``SYMGRAD_TEST_COUNT=n`` runs the test n times with fresh seeds. numpy's global RNG state is
    restored afterwards, so tests do not leak randomness.

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
            env = _env_seed()
            result = None
            for i in range(count):
                if seed is not None:
                    this = int(seed)
                elif env is not None:
                    this = env
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
                    is_check_error = hasattr(exc, "names") and hasattr(exc, "worst")  # a GradientCheckError
                    if is_check_error:
                        exc.seed = this
                    if hasattr(exc, "add_note") and not (
                        is_check_error and REPRODUCE_MARK in str(exc) and f"seed {this} " in str(exc)
                    ):
                        exc.add_note(note)
                    raise
                finally:
                    _current.reset(token)
                    np.random.set_state(state)
                    random.setstate(py_state)
            return result

        return wrapper

    return decorate
