import sys

import pytest

import symgrad.test_utils as tu

# symgrad's pytest plugin: ctx / rng fixtures, the gpu marker, --symgrad-seed. When symgrad is
# pip-installed, the pytest11 entry point has already registered it and this line does nothing.
pytest_plugins = ["symgrad.test_utils.pytest_plugin"]

# The checkers load lazily (on first use of a name). Load them all now, before any test: pytester's in-process
# runs (tests/test_pytest_plugin.py) drop the modules first imported inside them, which would leave two copies.
for _name in tu.__all__:
    getattr(tu, _name)


@pytest.fixture(autouse=True)
def _no_top_level_test_utils():
    """The checkers are ``symgrad.test_utils``. ``python -m pytest`` puts the repository root on sys.path, so
    a stray ``import test_utils`` would load the folder a second time as another package (a second
    ``GradientCheckError`` class that ``pytest.raises`` of the first one does not catch): fail the test
    that did it (or the first test after a module imported it at collection)."""
    assert "test_utils" not in sys.modules, _STRAY
    yield
    assert "test_utils" not in sys.modules, _STRAY


_STRAY = "a top-level `test_utils` was imported: import the checkers as `symgrad.test_utils`"


@pytest.fixture
def outside_a_seeded_test():
    """The test body runs as a script would: no test seed (the plugin seeds every test of a module using
    symgrad), so a checker seeds its own draws (``seed.check_seed``)."""
    from symgrad.test_utils import seed

    token = seed._current.set(None)
    try:
        yield
    finally:
        seed._current.reset(token)
