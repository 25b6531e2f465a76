"""The tolerance model's element test, ``tolerance.violations``: every checker's comparison is this test.

It computes in place where it can (a Jacobian-sized comparison holds two temporaries of its size, not five); these
tests hold it to the formula written out in plain numpy, on values with NaNs, infinities, signed zeros and exact
ties, in float64, float32 and complex, with ``atol`` and ``noise`` of every broadcastable shape, and check that
the arrays handed in are unchanged.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from symgrad.test_utils.tolerance import violations

SPECIAL = [0.0, -0.0, 1.0, -1.0, 1e-300, 1e300, np.inf, -np.inf, np.nan]


def _formula(a, e, rtol, atol, equal_nan, noise):
    """The test as the docstring states it, out of place."""
    with np.errstate(invalid="ignore", over="ignore"):
        equal = a == e
        if equal_nan:
            equal = equal | (np.isnan(a) & np.isnan(e))
        err = np.where(equal, 0.0, np.abs(a - e))
        allowed = atol + rtol * np.abs(e)
        if noise is not None:
            allowed = allowed + noise
        allowed = np.where(np.isfinite(allowed), allowed, 0.0)
        return ~(err <= allowed), err, allowed


@st.composite
def _case(draw):
    dtype = draw(st.sampled_from([np.float64, np.float32, np.complex128]))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=3)))
    size = int(np.prod(shape))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def values():
        x = rng.standard_normal(size)
        pick = rng.random(size) < 0.3
        x[pick] = rng.choice(SPECIAL, int(pick.sum()))
        if dtype is np.complex128:
            x = x + 1j * rng.standard_normal(size)
        return x.astype(dtype).reshape(shape)

    a, e = values(), values()
    ties = rng.random(size) < 0.2
    a.reshape(-1)[ties] = e.reshape(-1)[ties]

    def extra(kind):
        if kind == "scalar":
            return float(rng.uniform(0, 1e-3))
        if kind == "none":
            return None
        # a shape that broadcasts with a's: some axes 1, possibly one more leading axis (a larger result)
        sub = tuple(d if rng.random() < 0.5 else 1 for d in shape)
        if kind == "wider":
            sub = (2,) + sub
        return np.abs(rng.standard_normal(sub)) * 1e-3

    atol = extra(draw(st.sampled_from(["scalar", "broadcast", "wider"])))
    noise = extra(draw(st.sampled_from(["none", "scalar", "broadcast", "wider"])))
    if isinstance(noise, np.ndarray) and rng.random() < 0.3:
        noise = noise.copy()
        noise.reshape(-1)[0] = np.inf  # a non-finite allowance counts as 0
    return a, e, float(draw(st.sampled_from([0.0, 1e-5, 1e-3]))), atol, draw(st.booleans()), noise


@settings(max_examples=300, deadline=None)
@given(_case())
def test_violations_is_the_stated_formula_and_leaves_its_inputs_alone(case):
    a, e, rtol, atol, equal_nan, noise = case
    before = [np.copy(x) if isinstance(x, np.ndarray) else x for x in (a, e, atol, noise)]
    bad, err, allowed = violations(a, e, rtol, atol, equal_nan, noise)
    want_bad, want_err, want_allowed = _formula(a, e, rtol, atol, equal_nan, noise)
    assert bad.shape == want_bad.shape and np.array_equal(bad, want_bad)
    assert err.dtype == want_err.dtype and np.array_equal(err, want_err, equal_nan=True)
    assert allowed.dtype == want_allowed.dtype and np.array_equal(allowed, want_allowed)
    for x, x0 in zip((a, e, atol, noise), before):
        if isinstance(x, np.ndarray):
            assert np.array_equal(x, x0, equal_nan=True)


def test_a_zero_dimensional_comparison_gives_arrays():
    bad, err, allowed = violations(np.array(1.0), np.array(1.5), 1e-3, 1e-5, False)
    assert bad.shape == err.shape == allowed.shape == () and bool(bad)
    assert float(err) == 0.5 and float(allowed) == 1e-5 + 1e-3 * 1.5
