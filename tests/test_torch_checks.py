"""test_utils, PyTorch-style part: gradcheck and gradgradcheck.

The planted ops (custom ops whose backward is broken on purpose, and a registered op whose second-order
gradient is broken) live in tests/test_chainer_checks.py; expected values are plain numpy.
"""

import re

import numpy as np
import pytest
from test_chainer_checks import PLANTED_FACTORS, planted, planted_bias, planted_cube, planted_matmul

import symgrad as sg
import symgrad.test_utils as tu
from symgrad.test_utils.report import GradientCheckError, NondifferentiablePointWarning
from symgrad.test_utils.torch_checks import gradcheck, gradgradcheck

S = sg.sym
F32, F64 = np.float32, np.float64


def _normal(rng, *shape, dtype=F64):
    return rng.standard_normal(shape).astype(dtype)


# == semantics ===========================================================================================


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("fast_mode", [False, True], ids=["slow", "fast"])
def test_gradcheck_passes_correct_ops(dtype, fast_mode):
    rng = np.random.default_rng(0)
    x, y = _normal(rng, 3, 4, dtype=dtype), _normal(rng, 3, 4, dtype=dtype)
    assert gradcheck(lambda x: S.tanh(x) * x, (x,), fast_mode=fast_mode) is True
    assert gradcheck(lambda x, y: (x * y, S.sum(S.sin(x))), (x, y), fast_mode=fast_mode)
    assert gradcheck(planted(), x, fast_mode=fast_mode)  # the unbroken custom op; one array is (array,)
    assert gradcheck(lambda x: S.split(x, num_outputs=2, axis=1), (x,), fast_mode=fast_mode)


def test_float32_passes_where_pytorchs_float32_differences_fail():
    """PyTorch's default eps=1e-6 on float32 values: x +- eps rounds, the quotient is off by far more than rtol."""
    x = np.float32(0.7)
    eps = 1e-6
    quotient = (float(np.tanh(x + F32(eps))) - float(np.tanh(x - F32(eps)))) / (2 * eps)
    exact = 1 - np.tanh(0.7) ** 2
    assert abs(quotient - exact) > 1e-5 + 1e-3 * exact  # torch.allclose(analytic, numeric) would fail
    assert gradcheck(lambda x: S.tanh(x), (np.full((2, 3), x),))  # float64 reference at the same eps


def test_only_float_inputs_are_checked_and_others_pass_through():
    rng = np.random.default_rng(1)
    x, idx = _normal(rng, 4, 3), np.array([2, 0])
    assert gradcheck(lambda x, i, k: S.take(x, i) * k, (x, idx, 3.0))
    with pytest.raises(ValueError, match="at least one float input"):
        gradcheck(lambda i: S.one_hot(i, depth=3), (idx,))


def test_eps_none_picks_a_step_per_element():
    x = np.array([1e-3, 1.0, 1e4])
    assert gradcheck(lambda x: S.log(x), (x,), eps=None)
    with pytest.raises(ValueError, match="eps must be positive"):
        gradcheck(lambda x: S.log(x), (x,), eps=-1.0)


def test_raise_exception_false_returns_false():
    x = _normal(np.random.default_rng(2), 2, 3)
    assert gradcheck(planted("scale", 2.0), (x,), raise_exception=False) is False
    assert gradcheck(planted("scale", 2.0), (x,), raise_exception=False, fast_mode=True) is False
    assert gradgradcheck(planted_cube(3.0), (x,), raise_exception=False) is False
    with pytest.raises(ValueError):  # bad arguments still raise
        gradcheck(lambda i: S.one_hot(i, depth=3), (np.arange(2),), raise_exception=False)


def test_nondet_tol_checks_that_backward_is_reentrant():
    x = _normal(np.random.default_rng(3), 3, 4)
    np.random.seed(0)
    with pytest.raises(GradientCheckError, match="not reentrant") as info:
        gradcheck(planted("noise"), (x,))
    err = info.value
    assert err.arg_name == "input0" and 0 < max(r[3] for r in err.worst) < 1e-8
    assert gradcheck(planted("noise"), (x,), nondet_tol=1e-6)
    with pytest.raises(GradientCheckError, match="not reentrant"):
        gradcheck(planted("noise"), (x,), fast_mode=True)
    assert gradcheck(planted("noise"), (x,), nondet_tol=1e-6, fast_mode=True)


def test_check_undefined_grad_zero_head_gradients_give_zero_gradients():
    x = _normal(np.random.default_rng(4), 3, 4)
    with pytest.raises(GradientCheckError, match="undefined or zero") as info:
        gradcheck(planted("undefined"), (x,))
    err = info.value
    assert err.arg_name == "input0" and err.mismatch_fraction == 1.0
    np.testing.assert_allclose(err.actual, x)  # the planted backward returns x for a zero head gradient
    assert gradcheck(planted("undefined"), (x,), check_undefined_grad=False)
    assert gradcheck(planted("undefined"), (x,), check_undefined_grad=False, fast_mode=True)


def test_arguments_func_creates_and_loss_heads_are_refused():
    x = _normal(np.random.default_rng(5), 3, 4)
    with pytest.raises(ValueError, match=r"func created arguments \['fc_weight', 'fc_bias'\].*pass them as inputs"):
        gradcheck(lambda x: S.FullyConnected(x, num_hidden=2, name="fc"), (x,))
    w, b = _normal(np.random.default_rng(6), 2, 4), np.zeros(2)
    assert gradcheck(lambda x, w, b: S.FullyConnected(x, weight=w, bias=b, num_hidden=2), (x, w, b))
    with pytest.raises(NotImplementedError, match="loss heads"):
        gradcheck(lambda x, t: S.SoftmaxOutput(x, t), (x, np.array([0.0, 1.0, 3.0])))


def test_integer_outputs_are_not_differentiated():
    x = _normal(np.random.default_rng(7), 3, 4)
    assert gradcheck(lambda x: (S.tanh(x), S.argmax(x, axis=1)), (x,))
    assert gradcheck(lambda x: S.argmax(x, axis=1), (x,))  # no float output: the numeric gradient is zero


@pytest.mark.parametrize("fast_mode", [False, True], ids=["slow", "fast"])
def test_kinks_are_redrawn_and_named_not_failed(fast_mode):
    # issue 8: PyTorch fails here; symgrad recognises the kink, moves the element off it and says so
    relu_at_zero = np.array([[0.0, 1.0], [-1.0, 2.0]])
    with pytest.warns(NondifferentiablePointWarning, match=r"non-differentiable point at input0\[0, 0\]"):
        assert gradcheck(lambda x: S.relu(x), (relu_at_zero,), fast_mode=fast_mode)
    assert relu_at_zero[0, 0] == 0.0  # the caller's array is untouched
    tie = np.array([[1.0, 1.0, 0.0], [0.5, 2.0, -1.0]])  # a max tie in row 0
    with pytest.warns(NondifferentiablePointWarning, match=r"input0\[0, [01]\].*not a gradient error"):
        assert gradcheck(lambda x: S.max(x, axis=1), (tie,), fast_mode=fast_mode)


# == planted bugs =========================================================================================


@PLANTED_FACTORS
@pytest.mark.parametrize("fast_mode", [False, True], ids=["slow", "fast"])
def test_planted_constant_factors_are_caught_and_named(k, pattern, words, fast_mode):
    x = _normal(np.random.default_rng(8), 3, 4, dtype=F32)
    with pytest.raises(GradientCheckError) as info:
        gradcheck(planted("scale", k), (x,), fast_mode=fast_mode)
    err = info.value
    assert err.check == "gradcheck" and err.arg_name == "input0" and err.input_index == 0 and err.output_index == 0
    assert err.pattern == pattern and words in err.diagnosis
    text = str(err)
    assert "Jacobian mismatch for output 0" in text and "with respect to input 0 ('input0')" in text
    assert "rtol=0.001" in text and "atol=1e-05" in text and "diagnosis:" in text
    if fast_mode:
        a, n = err.fast
        assert a == pytest.approx(k * n, rel=1e-3, abs=1e-6) and "fast mode" in text
    else:
        # the Jacobian of an elementwise op is diagonal: only the 12 diagonal entries are wrong
        assert err.jacobian_mismatch_fraction == pytest.approx(12 / 144)
        np.testing.assert_allclose(
            np.diag(err.jacobian_analytic), k * np.diag(err.jacobian_numeric), rtol=1e-5, atol=1e-6
        )


def test_slow_mode_takes_the_rows_noise_a_block_at_a_time(monkeypatch):
    """The rows' rounding noise is emulated NOISE_BLOCK rows at a time (memory in proportion to the block): with
    blocks of 5 over 12 rows (the last one short) correct ops pass, a 1% wrong backward still fails in float32,
    and a float64 failure reports the same numbers as one block does (float64 draws no random numbers)."""
    import symgrad.test_utils.torch_checks as torch_checks

    rng = np.random.default_rng(8)
    x32 = _normal(rng, 3, 4, dtype=F32)
    x64 = x32.astype(F64)

    def report(x):
        with pytest.raises(GradientCheckError) as info:
            gradcheck(planted("scale", 1.01), (x,))
        # the Jacobian part (the gradient view after it draws fresh head weights); the op's name counts up
        return re.sub(r"custom\d+", "custom", str(info.value).split("as a gradient")[0])

    whole = report(x64)
    monkeypatch.setattr(torch_checks, "NOISE_BLOCK", 5)
    y32 = _normal(rng, 3, 4, dtype=F32)
    assert gradcheck(lambda x, y: (S.tanh(x) * y, S.sum(S.sin(x))), (x32, y32))
    assert gradcheck(planted(), (x32,))
    assert "Jacobian mismatch for output 0" in report(x32)
    assert report(x64) == whole


def test_planted_structural_bugs_are_named():
    rng = np.random.default_rng(9)
    x = _normal(rng, 3, 4)
    cases = [
        (planted("product"), (x,), "spread", "product rule", (False, True)),
        # fast mode allows atol * sum|u| * sum|v| (~ atol * sqrt(output size * input size)): one wrong
        # element among many is only certain to show in the full Jacobian
        (planted("one"), (_normal(rng, 4, 25),), "confined", "(0, 17)", (False,)),
        (planted("pct"), (x,), "small", "1%", (False, True)),
        (planted_bias, (x, _normal(rng, 4)), "broadcast", "wrong broadcast reduction", (False, True)),
        (planted_matmul, (x, _normal(rng, 4, 4)), "transposed", "transposed", (False, True)),
    ]
    for func, inputs, pattern, words, modes in cases:
        for fast_mode in modes:
            with pytest.raises(GradientCheckError) as info:
                # seeded: fast mode's one random (u, v) pair can cancel u^T J v below its tolerance, and then only
                # the probe at 0 catches the 1% error (5 of 300 seeds), with the probe's diagnosis
                tu.with_seed(0)(gradcheck)(func, inputs, fast_mode=fast_mode)
            assert info.value.pattern == pattern, (pattern, fast_mode, info.value.diagnosis)
            assert words in info.value.diagnosis


# == gradgradcheck ===========================================================================================


@pytest.mark.parametrize("dtype", [F32, F64])
def test_gradgradcheck_passes_correct_ops(dtype):
    rng = np.random.default_rng(10)
    x, w = _normal(rng, 3, 4, dtype=dtype), _normal(rng, 2, 4, dtype=dtype)
    assert gradgradcheck(lambda x: S.tanh(x) * S.exp(x), (x,)) is True
    assert gradgradcheck(planted_cube(), (x,), fast_mode=True)
    assert gradgradcheck(lambda x, w: S.sigmoid(S.FullyConnected(x, weight=w, no_bias=True, num_hidden=2)), (x, w))
    go = (_normal(rng, 3, 4, dtype=dtype),)
    assert gradgradcheck(lambda x: S.sin(x) * x, (x,), go)
    assert gradgradcheck(lambda x: S.sin(x) * x, (x,), gen_non_contig_grad_outputs=True)


def test_gradgradcheck_catches_a_wrong_second_order_gradient():
    x = _normal(np.random.default_rng(11), 3, 4)
    for fast_mode in (False, True):
        with pytest.raises(GradientCheckError) as info:
            gradgradcheck(planted_cube(-1.0), (x,), fast_mode=fast_mode)
        err = info.value
        assert err.check == "gradgradcheck" and err.arg_name == "input0" and err.pattern == "sign"
        assert "second order" in str(err)
    # the first order of the same op is right
    assert gradcheck(planted_cube(-1.0), (x,))


def test_gradgradcheck_argument_errors():
    x = _normal(np.random.default_rng(12), 3, 4)
    with pytest.raises(ValueError, match="2 grad_outputs for 1 differentiable outputs"):
        gradgradcheck(lambda x: S.tanh(x), (x,), (x, x))
    with pytest.raises(ValueError, match=r"has shape \(4,\), expected \(3, 4\)"):
        gradgradcheck(lambda x: S.tanh(x), (x,), (x[0],))


# == no false alarms ===========================================================================================


def _smooth_cases(rng, dtype):
    def n(*shape):
        return _normal(rng, *shape, dtype=dtype)

    return [
        (lambda x: S.tanh(x), (n(4, 5),)),
        (lambda x: S.sigmoid(x), (n(4, 5),)),
        (lambda x: S.exp(x), (n(4, 5),)),
        (lambda x: S.softmax(x, axis=-1), (n(4, 5),)),
        (lambda x, w, b: S.FullyConnected(x, weight=w, bias=b, num_hidden=3), (n(4, 5), n(3, 5), n(3))),
        (
            lambda x, g, b: S.BatchNorm(x, gamma=g, beta=b, fix_gamma=False, name="bn"),
            (n(6, 3), rng.uniform(0.5, 1.5, 3).astype(dtype), n(3)),
        ),
    ]


@pytest.mark.parametrize("dtype", [F32, F64])
def test_no_false_alarm_on_correct_smooth_ops_over_20_seeds(dtype):
    for seed in range(20):
        rng = np.random.default_rng(200 + seed)
        np.random.seed(seed)
        for func, inputs in _smooth_cases(rng, dtype):
            assert gradcheck(func, inputs)
            assert gradcheck(func, inputs, fast_mode=True)


def test_exported_from_the_package():
    assert tu.gradcheck is gradcheck and tu.gradgradcheck is gradgradcheck
    assert {"gradcheck", "gradgradcheck"} <= set(tu.__all__)


# == signatures, the float64 reference switch, bad inputs ========================================================


def test_signatures_and_defaults_are_pytorchs():
    import inspect

    def spec(fn):
        ps = inspect.signature(fn).parameters.values()
        return (
            [p.name for p in ps if p.kind is p.POSITIONAL_OR_KEYWORD],
            {p.name: p.default for p in ps if p.kind is p.KEYWORD_ONLY},
        )

    pos, kw = spec(gradcheck)
    assert pos == ["func", "inputs"]
    assert {
        k: kw[k] for k in ("eps", "atol", "rtol", "raise_exception", "nondet_tol", "check_undefined_grad", "fast_mode")
    } == {
        "eps": 1e-6,
        "atol": 1e-5,
        "rtol": 1e-3,
        "raise_exception": True,
        "nondet_tol": 0.0,
        "check_undefined_grad": True,
        "fast_mode": False,
    }
    pos, kw = spec(gradgradcheck)
    assert pos == ["func", "inputs", "grad_outputs"]
    assert {
        k: kw[k]
        for k in (
            "eps",
            "atol",
            "rtol",
            "gen_non_contig_grad_outputs",
            "raise_exception",
            "nondet_tol",
            "check_undefined_grad",
            "fast_mode",
        )
    } == {
        "eps": 1e-6,
        "atol": 1e-5,
        "rtol": 1e-3,
        "gen_non_contig_grad_outputs": False,
        "raise_exception": True,
        "nondet_tol": 0.0,
        "check_undefined_grad": True,
        "fast_mode": False,
    }


def test_full_jacobian_matches_one_written_in_numpy():
    # y = x @ w for x (2, 3), w (3, 3): dy[i, j] / dw[k, j] = x[i, k]; the reported Jacobian is (output, input)
    rng = np.random.default_rng(30)
    x, w = _normal(rng, 2, 3), _normal(rng, 3, 3)
    with pytest.raises(GradientCheckError) as info:
        gradcheck(lambda x, w: planted_matmul(x, w), (x, w))
    err = info.value
    assert err.input_index == 1  # x's gradient is right, w's is transposed
    jw = np.zeros((6, 9))
    for i, j, k in np.ndindex(2, 3, 3):
        jw[i * 3 + j, k * 3 + j] = x[i, k]
    np.testing.assert_allclose(err.jacobian_numeric, jw, atol=1e-8)
    np.testing.assert_allclose(err.jacobian_analytic, jw.reshape(6, 3, 3).transpose(0, 2, 1).reshape(6, 9), atol=1e-12)


def test_float64_reference_can_be_turned_off_and_pytorchs_float32_step_is_refused():
    x32 = _normal(np.random.default_rng(31), 3, 4, dtype=F32)
    # PyTorch's eps=1e-6 on float32 differences: x +- eps rounds, the quotient is noise -- a clear error, not a
    # check that could pass a 1% error hidden in the noise
    with pytest.raises(ValueError, match=r"eps=1e-06 is too small for float32 under test.*PyTorch's default eps"):
        gradcheck(lambda x: S.tanh(x), (x32,), float64_reference=False)
    assert gradcheck(lambda x: S.tanh(x), (x32,), float64_reference=False, eps=None, atol=1e-3, rtol=1e-2)
    with pytest.raises(GradientCheckError, match=r"numeric reference in float32 \(float64_reference=False\)"):
        gradcheck(planted("scale", 1.5), (x32,), float64_reference=False, eps=None, atol=1e-3, rtol=1e-2)
    x64 = x32.astype(F64)
    assert gradcheck(lambda x: S.tanh(x), (x64,), float64_reference=False)  # float64 inputs: the same reference


def test_dropout_and_complex_inputs_are_clear_errors():
    x = _normal(np.random.default_rng(32), 5, 5)
    with pytest.raises(ValueError, match=r"not deterministic: op Dropout 'drop'"):
        gradcheck(lambda x: S.Dropout(x, p=0.5, name="drop"), (x,))
    with pytest.raises(ValueError, match=r"not deterministic: op Dropout 'drop'"):
        gradgradcheck(lambda x: S.Dropout(x, p=0.5, name="drop") * x, (x,))
    with pytest.raises(ValueError, match=r"input 'input0' is complex"):
        gradcheck(lambda x: S.tanh(x), (x + 1j,))
    bad = x.copy()
    bad[2, 3] = np.nan
    with pytest.raises(ValueError, match=r"input 'input0' contains 1 NaN .*\(2, 3\)"):
        gradcheck(lambda x: S.tanh(x), (bad,))


class _TripleOneOff(sg.operator.CustomOp):
    """y = 3 x; the backward is right except at element 0, where it is 25% too large."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], 3.0 * in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        g = 3.0 * out_grad[0]
        g.reshape(-1)[0] *= 1.25
        self.assign(in_grad[0], req[0], g)


@sg.operator.register("tt_triple_one_off")
class _TripleOneOffProp(sg.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return _TripleOneOff()


def test_fast_mode_catches_one_wrong_element_among_a_thousand():
    # the error on u^T J v is 0.75 |u_0 v_0| ~ 1e-3 for unit vectors of 1 000 entries: PyTorch's allowance
    # atol * sum|u| * sum|v| (~1e-2) hides it, fast_atol_scale (16 atol |u| |v| = 1.6e-4) does not
    from symgrad.test_utils.torch_checks import fast_atol_scale

    def func(x):
        return S.Custom(x, op_type="tt_triple_one_off")

    # one random u and v: the error is 2.25 |u_0 v_0| ~ 2.25e-3 |z z'| for standard normal z, z', caught where
    # that exceeds 1.6e-4, i.e. |z z'| > 0.07: about 88% of the draws (a fast-mode check is a random projection)
    caught = 0
    for seed in range(40):
        np.random.seed(seed)
        x = np.random.default_rng(seed).standard_normal(1000)
        try:
            gradcheck(func, (x,), fast_mode=True)
        except GradientCheckError as err:
            assert "fast mode" in str(err)
            caught += 1
            analytic, numeric = err.fast
            assert abs(analytic - numeric) < 1e-5 * 1000 * 0.9  # below PyTorch's worst-case allowance
    assert caught >= 32, caught
    rng = np.random.default_rng(0)
    u = rng.choice([-1.0, 1.0], 1000) / np.sqrt(1000)
    v = rng.choice([-1.0, 1.0], 50) / np.sqrt(50)
    assert fast_atol_scale(u, v) == pytest.approx(16.0)
    # with few entries the worst case is the smaller bound
    assert fast_atol_scale(u[:2] * np.sqrt(500), v[:1] * np.sqrt(50)) == pytest.approx(np.sqrt(2))
