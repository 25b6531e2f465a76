"""One step rule for ``numeric_grad`` and ``check_numeric_gradient`` (``test_utils.numeric.refuse_small_eps``).

A full-width step below ``tolerance.min_numeric_eps(dtype under test, dtype the differences are taken in)`` is
refused: below it the difference quotient is rounding noise. ``numeric_grad`` takes its differences in its
executor's dtype, ``check_numeric_gradient`` in ``numeric_dtype`` (float64 by default); so the same eps=1e-5 is
refused by both where the differences are float32 (about 1% of |f| of noise) and accepted by both where they are
float64 -- with the same words, naming the function, the step and the minimum.
"""

import re

import numpy as np
import pytest

import symgrad as sg
import symgrad.test_utils as tu
from symgrad.test_utils.tolerance import min_numeric_eps

S = sg.sym
EPS = 1e-5
X = np.array([0.5, -1.25, 2.0])


def _net():
    return S.tanh(S.Variable("x"), name="t")


def _numeric_grad_error(dtype):
    exe = _net().simple_bind(sg.cpu(), x=(3,), type_dict={"x": dtype})
    with pytest.raises(ValueError) as info:
        tu.numeric_grad(exe, {"x": X}, eps=EPS, dtype=dtype, progress=False)
    return str(info.value)


def _check_numeric_gradient_error(dtype, numeric_dtype):
    with pytest.raises(ValueError) as info:
        tu.check_numeric_gradient(
            _net(), {"x": X.astype(dtype)}, numeric_eps=EPS, dtype=dtype, numeric_dtype=numeric_dtype
        )
    return str(info.value)


def _as_one(text):
    """The message with the function's name, its parameter's name and numeric_grad's argument prefix taken out."""
    text = re.sub(r"^(numeric_grad|check_numeric_gradient): (argument 'x': )?", "", text)
    return re.sub(r"\bnumeric_eps\b|\beps\b(?!_)", "EPS", text)


def test_float32_differences_refuse_the_same_eps_in_both_functions_with_the_same_words():
    floor = min_numeric_eps(np.float32, np.float32)
    assert EPS < floor == pytest.approx(8.63e-5, rel=1e-3)
    ng = _numeric_grad_error(np.float32)
    cng = _check_numeric_gradient_error(np.float32, np.float32)
    assert ng.startswith("numeric_grad: argument 'x': eps=1e-05 is too small for float32 under test")
    assert cng.startswith("check_numeric_gradient: numeric_eps=1e-05 is too small for float32 under test")
    for text in (ng, cng):
        assert "the finite differences are taken in float32" in text and "(minimum 8.63e-05)" in text
        assert (
            "numeric_grad and check_numeric_gradient share this rule: the minimum is set by the dtype the "
            "differences are taken in (for float32 under test: 8.63e-05 in float32" in text
        )
        assert "1e-05 in float64, as check_numeric_gradient does by default" in text
    assert _as_one(ng) == _as_one(cng)


def test_float64_differences_accept_the_same_eps_in_both_functions():
    assert EPS >= min_numeric_eps(np.float32, np.float64)
    exe = _net().simple_bind(sg.cpu(), x=(3,), type_dict={"x": np.float64})
    by_numeric_grad = tu.numeric_grad(exe, {"x": X}, eps=EPS, dtype=np.float64, progress=False)["x"]
    exact = 1 - np.tanh(X) ** 2
    np.testing.assert_allclose(by_numeric_grad, exact, rtol=1e-8)
    # float32 under test, differences in float64 (the default): the check runs and passes at the same step
    analytic, numeric = tu.check_numeric_gradient(_net(), {"x": X.astype(np.float32)}, numeric_eps=EPS)["x"]
    np.testing.assert_allclose(numeric, analytic, rtol=1e-6)


def test_float16_refuses_in_both_with_the_same_words():
    ng = _numeric_grad_error(np.float16)
    cng = _check_numeric_gradient_error(np.float16, np.float16)
    assert "(minimum 0.00781)" in ng and _as_one(ng) == _as_one(cng)


def test_the_message_gives_the_fix():
    text = _numeric_grad_error(np.float32)
    assert text.endswith("Use a larger eps, or eps=None for a step chosen per element.")
    text = _check_numeric_gradient_error(np.float32, np.float32)
    assert text.endswith("Use a larger numeric_eps, or numeric_eps=None for a step chosen per element.")


def test_a_refused_step_leaves_the_executor_alone():
    exe = _net().simple_bind(sg.cpu(), x=(3,))
    exe.arg_dict["x"][:] = 7.0
    with pytest.raises(ValueError, match="share this rule"):
        tu.numeric_grad(exe, {"x": X}, eps=EPS, progress=False)
    np.testing.assert_array_equal(exe.arg_dict["x"], np.full(3, 7.0, np.float32))
