"""symgrad's pytest plugin: the ``ctx`` and ``rng`` fixtures, the ``gpu`` marker and ``--symgrad-seed``.

Installed with symgrad, it is registered in every pytest run through the ``pytest11`` entry point
``symgrad``; ``pytest_plugins = ["symgrad.test_utils.pytest_plugin"]`` in a conftest.py or
``-p symgrad.test_utils.pytest_plugin`` name it explicitly (with plugin autoloading off). Any mix of these
is safe: once registered under one name the plugin blocks its other name, so it is never registered twice.

Because the entry point loads it into other projects' runs too, it stays out of their way: importing it
imports only pytest and the standard library (not numpy, not symgrad's ops, not the checkers: those load
when a ``ctx``/``rng`` fixture or a ``gpu`` marker is used), and it prints its session header line only
when asked for symgrad (``--symgrad-seed``, ``$SYMGRAD_TEST_SEED``, or the plugin named explicitly).

- ``ctx``: parametrised over ``sg.cpu(0)`` (id ``cpu0``) and ``sg.gpu(0)`` (id ``gpu0``, marked ``gpu``);
  the gpu case is skipped, with the reason ``no GPU / CuPy: ...``, when CuPy or a GPU is missing.
- ``rng``: a ``numpy.random.Generator`` seeded per test with ``--symgrad-seed=N``, else the environment
  variable ``SYMGRAD_TEST_SEED``, else a fresh random seed. numpy's and Python's global RNGs (which the
  MXNet-style checkers draw from) are seeded with the same value for the test and restored afterwards,
  and a ``GradientCheckError`` raised in the test carries it as ``.seed``. A failing test's report gets
  a section ``symgrad seed: N (reproduce with --symgrad-seed=N)``.
- tests of a module that imports symgrad: numpy's and Python's global RNGs are seeded per test the same way
  (before its fixtures, restored at teardown), so a failing check's reproduction line replays the test's own
  draws; other projects' tests are left alone.
- ``@pytest.mark.gpu``: the test is skipped unless CuPy and a CUDA GPU are present (same reason).
- ``--symgrad-seed=N`` also fixes the seed of ``symgrad.test_utils.with_seed`` tests (it sets
  ``SYMGRAD_TEST_SEED`` for the session).

CuPy is imported only when a collected test is gpu-marked (or uses ``ctx``), to see whether a GPU is there.
"""

from __future__ import annotations

import importlib
import os
import random
import secrets
import sys

import pytest

__all__ = ["gpu_available", "SEED_OPTION", "SEED_ENV", "ENTRY_POINT_NAME"]

SEED_OPTION = "--symgrad-seed"
ENTRY_POINT_NAME = "symgrad"
SEED_ENV = "SYMGRAD_TEST_SEED"  # == seed.SEED_ENV, spelled out so that loading the plugin does not import numpy
GPU_REASON = (
    "needs CuPy and a CUDA GPU (pip install 'symgrad[gpu]' for the CUDA 12 wheel cupy-cuda12x, "
    "or 'symgrad[gpu-cuda11]' for cupy-cuda11x; neither needs a CUDA toolkit)"
)
_MAX_SEED = 2**32 - 1  # numpy's legacy seeding accepts [0, 2**32)

_seed_key = pytest.StashKey[int]()
_env_key = pytest.StashKey[tuple]()


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    from symgrad.context import num_gpus

    return num_gpus() > 0


def _parse_seed(text, source):
    try:
        seed = int(str(text).strip())
    except ValueError:
        raise pytest.UsageError(f"symgrad: {source} must be an integer seed, got {text!r}") from None
    if not 0 <= seed <= _MAX_SEED:
        raise pytest.UsageError(f"symgrad: {source} must be in [0, 2**32 - 1], got {seed}")
    return seed


def _fixed_seed(config):
    """``(seed, source)`` from ``--symgrad-seed`` or ``SYMGRAD_TEST_SEED``, else ``(None, None)``."""
    opt = config.getoption("symgrad_seed", None)
    if opt is not None:
        return _parse_seed(opt, SEED_OPTION), SEED_OPTION
    env = os.environ.get(SEED_ENV, "").strip()
    if env:
        return _parse_seed(env, SEED_ENV), SEED_ENV
    return None, None


# -- registration under one name only --------------------------------------------------------------------


def pytest_addoption(parser, pluginmanager):
    # Called as soon as this module is registered (a historic hook). If it came in through the entry point
    # ("symgrad"), block the module name so a conftest's pytest_plugins or -p of the module is a no-op, and
    # the other way round, so the entry point loaded later does not register the module a second time.
    me = sys.modules[__name__]
    name = pluginmanager.get_name(me)
    for alias in (ENTRY_POINT_NAME, __name__):
        if alias != name and pluginmanager.get_plugin(alias) is None:
            pluginmanager.set_blocked(alias)
    group = parser.getgroup("symgrad", "symgrad gradient checkers")
    group.addoption(
        SEED_OPTION,
        dest="symgrad_seed",
        default=None,
        metavar="N",
        help=f"seed of the rng fixture and of with_seed tests (default: ${SEED_ENV}, else a random seed "
        "per test, printed when the test fails)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", f"gpu: {GPU_REASON}; skipped when either is missing")
    opt = config.getoption("symgrad_seed", None)
    if opt is not None:  # with_seed reads SYMGRAD_TEST_SEED: the option overrides it for this session
        seed = _parse_seed(opt, SEED_OPTION)
        config.stash[_env_key] = (os.environ.get(SEED_ENV),)
        os.environ[SEED_ENV] = str(seed)


def pytest_unconfigure(config):
    saved = config.stash.get(_env_key, None)
    if saved is None:
        return
    (old,) = saved
    if old is None:
        os.environ.pop(SEED_ENV, None)
    else:
        os.environ[SEED_ENV] = old
    del config.stash[_env_key]


def pytest_report_header(config):
    # The entry point loads the plugin into every pytest run on the machine: stay silent in other projects'
    # runs (registered as "symgrad", no seed asked for); speak when symgrad is asked for.
    seed, source = _fixed_seed(config)
    if seed is None and config.pluginmanager.get_name(sys.modules[__name__]) == ENTRY_POINT_NAME:
        return None
    if seed is None:
        return f"symgrad: random seed per test (fix it with {SEED_OPTION}=N or {SEED_ENV}=N)"
    return f"symgrad: seed {seed} (from {source})"


# -- fixtures ---------------------------------------------------------------------------------------------


@pytest.fixture(params=[pytest.param("cpu0", id="cpu0"), pytest.param("gpu0", id="gpu0", marks=pytest.mark.gpu)])
def ctx(request):
    """The device a test runs on: ``sg.cpu(0)``, and ``sg.gpu(0)`` when CuPy and a GPU are present."""
    import symgrad as sg

    return sg.cpu(0) if request.param == "cpu0" else sg.gpu(0)


@pytest.fixture
def rng(request):
    """A ``numpy.random.Generator`` seeded for this test (numpy's and Python's global RNGs too).

    The seed is ``--symgrad-seed``, else ``$SYMGRAD_TEST_SEED``, else a fresh random one; a failing
    test reports it with the option that reproduces it.
    """
    import numpy as np

    # the module in sys.modules (the one the checkers use), not a package attribute that may be stale
    seed_module = importlib.import_module(f"{__package__}.seed")

    seed = request.node.stash.get(_seed_key, None)  # pytest_runtest_setup's, for a module using symgrad
    if seed is None:
        seed, _ = _fixed_seed(request.config)
    if seed is None:
        seed = secrets.randbelow(2**31 - 1)
    request.node.stash[_seed_key] = seed
    np_state, py_state = np.random.get_state(), random.getstate()
    np.random.seed(seed)
    random.seed(seed)
    token = seed_module._current.set(seed)  # GradientCheckError.seed, as under with_seed
    try:
        yield np.random.default_rng(seed)
    finally:
        _restore(seed_module, np_state, py_state, token)


def _restore(seed_module, np_state, py_state, token):
    """Put back the test seed and the global RNG states saved before a seeded test."""
    import numpy as np

    try:
        seed_module._current.reset(token)
    except ValueError:  # reset from another context (a plugin running the test in a copied context)
        seed_module._current.set(None)
    np.random.set_state(np_state)
    random.setstate(py_state)


def _uses_symgrad(item) -> bool:
    """Whether the test's module imported symgrad (a module, function or class of symgrad among its names): the
    tests whose draws the plugin seeds. Other projects' tests (the entry point loads the plugin everywhere) keep
    their global RNGs as they are."""
    module = getattr(item, "module", None)
    if module is None:
        return False
    for value in vars(module).values():
        name = value.__name__ if isinstance(value, type(sys)) else getattr(value, "__module__", None)
        if isinstance(name, str) and (name == "symgrad" or name.startswith("symgrad.")):
            return True
    return False


_saved_key = pytest.StashKey[tuple]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """Seed numpy's and Python's global RNGs for every test of a module that uses symgrad, before its fixtures
    run, so the reproduction line a failing check prints (``SYMGRAD_TEST_SEED=N python -m pytest NODE``) replays
    the test's own draws too, not only the checker's (measured before: the same seed gave 10.06 and 2.76 for one
    element of a test drawing with ``np.random``). The ``rng`` fixture takes the same seed. Restored at
    teardown."""
    if _uses_symgrad(item):
        import numpy as np

        seed_module = importlib.import_module(f"{__package__}.seed")
        seed, _ = _fixed_seed(item.config)
        if seed is None:
            seed = secrets.randbelow(2**31 - 1)
        item.stash[_seed_key] = seed
        item.stash[_saved_key] = (np.random.get_state(), random.getstate(), seed_module._current.set(seed))
        np.random.seed(seed)
        random.seed(seed)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield
    saved = item.stash.get(_saved_key, None)
    if saved is None:
        return
    del item.stash[_saved_key]
    _restore(importlib.import_module(f"{__package__}.seed"), *saved)


# -- collection and reports -----------------------------------------------------------------------------------


def _cupy_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("cupy") is not None


def _no_gpu_reason() -> str:
    """Why the gpu tests are skipped here: ``no GPU / CuPy: <what is missing>; <what they need>``."""
    missing = "CuPy sees no CUDA GPU" if _cupy_installed() else "CuPy is not installed"
    return f"no GPU / CuPy: {missing}; {GPU_REASON}"


def pytest_collection_modifyitems(config, items):
    # The gpu-marked tests, the ctx fixture's gpu0 cases among them, are skipped with the reason, not
    # deselected: "2 deselected" said nothing of why a user's gpu cases did not run.
    if not any(item.get_closest_marker("gpu") for item in items) or gpu_available():
        return
    skip = pytest.mark.skip(reason=_no_gpu_reason())
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)  # old-style wrapper: works with pluggy < 1.2 (pytest 7) too
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    seed = item.stash.get(_seed_key, None)
    if seed is not None and report.failed:
        report.sections.append(("symgrad seed", f"symgrad seed: {seed} (reproduce with {SEED_OPTION}={seed})"))
