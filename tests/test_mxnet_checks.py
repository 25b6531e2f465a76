"""test_utils, MXNet-compatible part: tolerances, assert_almost_equal, check_symbolic_forward/backward,
numeric_grad, check_numeric_gradient, GradientCheckError and its diagnosis.

Expected values are derived here in plain numpy; planted bugs (a custom op whose backward is scaled
by k, wrong expected arrays) prove that every checker fails, and says why.
"""

import os
import pickle
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from fd_oracle import central_gradient

import symgrad as sg
import symgrad.test_utils as tu
from symgrad.opdef import get_op
from symgrad.test_utils.compare import compare
from symgrad.test_utils.diagnose import diagnose
from symgrad.test_utils.objectives import LOSS_OBJECTIVES
from symgrad.test_utils.report import GradientCheckError

S = sg.sym
REPO = Path(__file__).resolve().parent.parent


def _rng(seed=0):
    return np.random.default_rng(seed)


def _fc(num_hidden=4):
    return S.FullyConnected(S.Variable("x"), num_hidden=num_hidden, name="fc")


def _fc_values(seed=0, n=2, d=3, h=4):
    r = _rng(seed)
    return r.standard_normal((n, d)), r.standard_normal((h, d)), r.standard_normal(h)


# -- a custom op with a planted bug: y = x^2, backward scaled by k -------------------------------------


class _ScaledSquare(sg.operator.CustomOp):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], self.k * 2.0 * in_data[0] * out_grad[0])


@sg.operator.register("tu_scaled_square")
class _ScaledSquareProp(sg.operator.CustomOpProp):
    def __init__(self, k="1"):
        super().__init__()
        self.k = float(k)

    def create_operator(self, ctx, shapes, dtypes):
        return _ScaledSquare(self.k)


class _Loss(sg.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], np.ones_like(in_data[0]))


@sg.operator.register("tu_unknown_loss")
class _LossProp(sg.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=False)

    def create_operator(self, ctx, shapes, dtypes):
        return _Loss()


def _scaled_square(k):
    return S.Custom(S.Variable("x"), op_type="tu_scaled_square", k=str(k))


# == package layout ===================================================================================


def test_symgrad_test_utils_is_the_repository_folder():
    assert sg.test_utils is tu
    assert not (REPO / "symgrad" / "test_utils").exists()
    for name in tu.__all__:
        assert hasattr(tu, name), name
    assert issubclass(tu.GradientCheckError, AssertionError)


# == tolerances ========================================================================================


def test_default_tolerance_tables_are_mxnets():
    rt, at = tu.default_rtols(), tu.default_atols()
    assert (rt[np.dtype(np.float16)], at[np.dtype(np.float16)]) == (1e-2, 1e-1)
    assert (rt[np.dtype(np.float32)], at[np.dtype(np.float32)]) == (1e-4, 1e-3)
    assert (rt[np.dtype(np.float64)], at[np.dtype(np.float64)]) == (1e-5, 1e-20)
    assert rt[np.dtype(np.int32)] == 0 and at[np.dtype(np.bool_)] == 0


def test_effective_tolerance_is_the_looser_dtype_and_overrides_apply():
    f16, f32, f64 = np.ones(2, np.float16), np.ones(2, np.float32), np.ones(2)
    assert tu.get_tols(f32, f64, None, None) == (1e-4, 1e-3)
    assert tu.get_tols(f64, f16, None, None) == (1e-2, 1e-1)
    assert tu.get_tols(f64, f64, None, None) == (1e-5, 1e-20)
    assert tu.get_tols(f32, f32, 0.5, 0.25) == (0.5, 0.25)
    assert tu.get_tols(f64, f64, {np.float64: 1e-9}, {"float64": 1e-12}) == (1e-9, 1e-12)
    # a dict entry for another dtype leaves the default in place
    assert tu.get_tols(f32, f32, {np.float64: 1e-9}, None) == (1e-4, 1e-3)


def test_assert_almost_equal_uses_dtype_tolerances():
    a = np.float32([1.0, 2.0, 3.0])
    tu.assert_almost_equal(a, a.astype(np.float64) + 5e-4)  # within float32 atol 1e-3
    with pytest.raises(GradientCheckError):
        tu.assert_almost_equal(a.astype(np.float64), a.astype(np.float64) + 5e-4)  # float64: far too big
    tu.assert_almost_equal(a.astype(np.float64), a + 5e-4, atol={np.float64: 1e-3})
    assert tu.almost_equal(a, a + 5e-4) and not tu.almost_equal(a, a + 5e-2)
    assert tu.same(a, a.copy()) and not tu.same(a, a[:2])


def test_assert_almost_equal_report():
    a = np.array([1.0, 2.0, 3.0, 4.0])
    b = a.copy()
    b[2] = 3.5
    with pytest.raises(GradientCheckError) as info:
        tu.assert_almost_equal(a, b, rtol=1e-3, atol=1e-3, names=("mine", "ref"))
    err = info.value
    assert err.index == (2,)
    assert err.mismatch_fraction == pytest.approx(0.25)
    assert err.worst[0][:3] == ((2,), 3.0, 3.5)
    assert err.rtol == 1e-3 and err.atol == 1e-3
    text = str(err)
    assert "mine" in text and "ref" in text and "1 of 4 elements (25%)" in text and "(2,)" in text
    # mismatches[0]: rows of the worst-element table; every mismatch is still counted
    with pytest.raises(GradientCheckError) as info:
        tu.assert_almost_equal(a, a + np.array([1.0, 4.0, 2.0, 3.0]), mismatches=(2, 10))
    # ranked by |error| / tolerance: 4 / 6e-5, then 1 / 2e-5 (float64: rtol 1e-5)
    assert [row[0] for row in info.value.worst] == [(1,), (0,)] and info.value.n_mismatch == 4
    assert "worst 2 elements:" in str(info.value)


def test_nan_and_inf_handling():
    a = np.array([1.0, np.nan, np.inf])
    tu.assert_almost_equal(a, a.copy(), equal_nan=True)
    with pytest.raises(GradientCheckError) as info:
        tu.assert_almost_equal(a, a.copy())
    assert info.value.index == (1,)
    assert "NaN" in diagnose(np.array([1.0, np.nan]), np.array([1.0, 2.0]))


def test_shape_mismatch_is_a_check_failure():
    with pytest.raises(GradientCheckError, match=r"shapes differ.*\(2, 3\).*\(3, 2\)"):
        tu.assert_almost_equal(np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(GradientCheckError):
        tu.assert_almost_equal(np.zeros((2, 3)), np.zeros(3), use_broadcast=False)
    tu.assert_almost_equal(np.zeros((2, 3)), np.zeros(3))  # MXNet broadcasts by default


# == diagnosis =========================================================================================


@pytest.mark.parametrize(
    "k, words",
    [
        (2.0, "counted twice / accumulated over two backward calls"),
        (-1.0, "sign flipped"),
        (0.0, "gradient missing / not connected"),
        (10.0, "accumulated over 10 backward calls"),
        (0.25, "scaled by 1/4"),
        (1.7, "scaled by 1.7"),
    ],
    ids=str,
)
def test_diagnose_constant_factor(k, words):
    e = _rng(1).standard_normal((3, 4))
    assert words in diagnose(k * e, e)


def test_diagnose_says_nothing_for_unstructured_errors():
    e = _rng(2).standard_normal(20)
    assert diagnose(e + _rng(3).standard_normal(20), e) is None
    assert diagnose(e, e) is None
    assert diagnose(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.1])) is None


def test_diagnose_other_rules_and_extension():
    m = _rng(4).standard_normal((3, 3))
    assert "transposed" in diagnose(m.T, m)
    assert "offset" in diagnose(m + 0.5, m)
    v = np.array([1.0, -2.0, 3.0, 4.0])
    assert "sign flipped in 1 of 4" in diagnose(np.abs(v), v)

    def always(a, e):
        return "planted rule"

    tu.register_rule(always, first=True)
    try:
        assert diagnose(np.ones(2), np.zeros(2)) == "planted rule"
    finally:
        tu.diagnose.__globals__["RULES"].remove(always)


# == check_symbolic_forward ============================================================================


def test_forward_fully_connected_list_and_dict():
    x, w, b = _fc_values()
    want = x @ w.T + b
    outs = tu.check_symbolic_forward(_fc(), [x, w, b], [want])
    assert isinstance(outs[0], np.ndarray) and outs[0].dtype == np.float32
    tu.check_symbolic_forward(_fc(), {"x": x, "fc_weight": w, "fc_bias": b}, {"fc_output": want})
    tu.check_symbolic_forward(_fc(), [x, w, b], [want], dtype=np.float64, rtol=1e-12, atol=1e-12)


def test_forward_multi_output_and_failure():
    a, b = S.Variable("a"), S.Variable("b")
    sym = S.Group([S.elemwise_mul(a, b, name="mul"), S.tanh(a, name="th"), S.sum(b, name="s")])
    va, vb = _rng(5).standard_normal((2, 3)), _rng(6).standard_normal((2, 3))
    tu.check_symbolic_forward(sym, [va, vb], [va * vb, np.tanh(va), np.array([vb.sum()])])
    tu.check_symbolic_forward(sym, {"a": va, "b": vb}, {"th_output": np.tanh(va)})
    with pytest.raises(GradientCheckError) as info:
        tu.check_symbolic_forward(sym, [va, vb], {"mul_output": 2 * va * vb})
    assert info.value.arg_name == "mul_output"
    assert "output 'mul_output' does not match expected" in str(info.value)
    with pytest.raises(ValueError, match="not outputs"):
        tu.check_symbolic_forward(sym, [va, vb], {"nope": va})


# == check_symbolic_backward ===========================================================================


def _fc_expected(x, w, og):
    return {"x": og @ w, "fc_weight": og.T @ x, "fc_bias": og.sum(0)}


@pytest.mark.parametrize("req", ["write", "add", "null"])
def test_backward_fully_connected_every_grad_req(req):
    x, w, b = _fc_values()
    og = _rng(7).standard_normal((2, 4))
    grads = tu.check_symbolic_backward(_fc(), [x, w, b], [og], _fc_expected(x, w, og), grad_req=req)
    assert sorted(grads) == ["fc_bias", "fc_weight", "x"]


def test_backward_buffers_start_dirty_and_add_accumulates_onto_them():
    x, w, b = _fc_values()
    og = _rng(8).standard_normal((2, 4))
    exp = _fc_expected(x, w, og)
    np.random.seed(3)
    written = tu.check_symbolic_backward(_fc(), [x, w, b], [og], exp, grad_req="write")
    np.random.seed(3)
    added = tu.check_symbolic_backward(_fc(), [x, w, b], [og], exp, grad_req="add")
    np.random.seed(3)
    kept = tu.check_symbolic_backward(_fc(), [x, w, b], [og], exp, grad_req="null")
    for name in exp:
        np.testing.assert_allclose(written[name], exp[name], rtol=1e-4, atol=1e-5)
        assert np.abs(kept[name]).max() > 0.1  # random initial values, left untouched
        np.testing.assert_allclose(added[name], kept[name] + exp[name], rtol=1e-4, atol=1e-5)


def test_backward_mixed_grad_req_forms_and_partial_expected():
    x, w, b = _fc_values()
    og = _rng(9).standard_normal((2, 4))
    exp = _fc_expected(x, w, og)
    reqs = {"x": "write", "fc_weight": "add", "fc_bias": "null"}
    tu.check_symbolic_backward(_fc(), [x, w, b], [og], exp, grad_req=reqs)
    tu.check_symbolic_backward(_fc(), [x, w, b], {"fc_output": og}, exp, grad_req=["null", "write", "add"])
    only_w = tu.check_symbolic_backward(
        _fc(), {"x": x, "fc_weight": w, "fc_bias": b}, og, {"fc_weight": exp["fc_weight"]}
    )
    assert list(only_w) == ["fc_weight"]  # buffers exist only for the expected arguments
    tu.check_symbolic_backward(_fc(), [x, w, b], [og], [exp["x"], None, exp["fc_bias"]])
    with pytest.raises(ValueError, match="grad_req has no entry for \\['fc_bias'\\]"):
        tu.check_symbolic_backward(_fc(), [x, w, b], [og], exp, grad_req={"x": "write", "fc_weight": "add"})


def test_backward_elemwise_mul_sum_tanh_derivations():
    a, b = S.Variable("a"), S.Variable("b")
    va, vb = _rng(10).standard_normal((3, 2)), _rng(11).standard_normal((3, 2))
    og = _rng(12).standard_normal((3, 2))
    # each call raises on a mismatch and returns the gradients it compared, by argument name
    assert set(tu.check_symbolic_backward(S.elemwise_mul(a, b), [va, vb], [og], [og * vb, og * va])) == {"a", "b"}
    assert set(tu.check_symbolic_backward(S.sum(a), [va], [np.array([2.5])], [np.full((3, 2), 2.5)])) == {"a"}
    summed = tu.check_symbolic_backward(
        S.sum(a, axis=1), [va], [np.array([1.0, 2.0, 3.0])], [np.repeat([[1.0], [2.0], [3.0]], 2, axis=1)]
    )
    tanh = tu.check_symbolic_backward(
        S.tanh(a), [va], [og], [og * (1 - np.tanh(va) ** 2)], dtype=np.float64, rtol=1e-10, atol=1e-12
    )
    assert set(summed) == set(tanh) == {"a"} and tanh["a"].dtype == np.float64


def test_backward_loss_head_without_out_grads():
    d, lab = S.Variable("data"), S.Variable("label")
    x = _rng(13).standard_normal((4, 3))
    y = np.array([0.0, 2.0, 1.0, 2.0])
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(4), y.astype(int)] -= 1.0
    compared = tu.check_symbolic_backward(S.SoftmaxOutput(d, lab), [x, y], None, {"data": p})
    assert "data" in compared  # a mismatch raised


@pytest.mark.parametrize(
    "factor, words",
    [(0.5, "counted twice"), (-1.0, "sign flipped"), (np.inf, "gradient missing")],
    ids=["doubled", "sign", "missing"],
)
def test_backward_wrong_gradient_is_diagnosed(factor, words):
    # a planted wrong gradient: expected = true / 2 means the op's gradient is twice the truth, etc.
    x, w, b = _fc_values()
    og = _rng(14).standard_normal((2, 4))
    exp = _fc_expected(x, w, og)
    if factor == np.inf:  # the op's gradient is "missing": it only reaches x through BlockGrad
        sym = S.FullyConnected(S.BlockGrad(S.Variable("x")), num_hidden=4, name="fc")
    else:
        sym = _fc()
        exp["x"] = exp["x"] * factor
    with pytest.raises(GradientCheckError) as info:
        tu.check_symbolic_backward(sym, [x, w, b], [og], exp)
    err = info.value
    assert err.arg_name == "x" and err.check == "check_symbolic_backward"
    assert words in err.diagnosis and f"diagnosis: {err.diagnosis}" in str(err)
    assert err.mismatch_fraction == 1.0 and err.grad_req == "write"


def test_backward_add_reports_the_added_part():
    x, w, b = _fc_values()
    og = _rng(15).standard_normal((2, 4))
    exp = _fc_expected(x, w, og)
    exp["fc_bias"] = exp["fc_bias"] / 2
    with pytest.raises(GradientCheckError) as info:
        tu.check_symbolic_backward(_fc(), [x, w, b], [og], exp, grad_req="add")
    assert info.value.arg_name == "fc_bias"
    assert "buffer - initial" in str(info.value) and "counted twice" in info.value.diagnosis


def test_gradient_accumulated_over_ten_backward_calls_is_named():
    # reference 004: an input gradient checked after ten backward calls without zeroing it
    x, w, b = _fc_values(27)
    og = _rng(28).standard_normal((2, 4))
    grad = np.zeros_like(x)
    exe = _fc().bind(sg.cpu(), [x, w, b], args_grad={"x": grad}, grad_req={"x": "add"})
    for _ in range(10):
        exe.forward(is_train=True)
        exe.backward([og])
    with pytest.raises(GradientCheckError) as info:
        tu.assert_almost_equal(grad, og @ w, names=("backprop", "finite differences"))
    assert "backprop = 10 x finite differences: accumulated over 10 backward calls" in str(info.value)


def test_null_buffer_written_is_reported_exactly():
    initial = _rng(16).standard_normal(5).astype(np.float32)
    touched = initial.copy()
    touched[3] += 1e-6
    with pytest.raises(GradientCheckError) as info:
        compare(touched, initial, 0.0, 0.0, check="check_symbolic_backward", arg_name="w", names=("buffer", "initial"))
    assert info.value.index == (3,) and info.value.n_mismatch == 1


def test_location_keys_must_equal_the_arguments():
    x, w, b = _fc_values()
    with pytest.raises(ValueError) as info:
        tu.check_symbolic_backward(_fc(), {"x": x, "fc_weight": w, "fc_wieght": b}, [np.ones((2, 4))], {"x": x})
    text = str(info.value)
    assert "missing ['fc_bias']" in text and "unexpected ['fc_wieght']" in text
    assert "['x', 'fc_weight', 'fc_bias']" in text
    with pytest.raises(ValueError, match="list of 2 arrays but the symbol has 3 arguments"):
        tu.check_symbolic_forward(_fc(), [x, w], [x])


def test_bad_shapes_name_the_argument_expected_and_got():
    x, w, b = _fc_values()
    with pytest.raises(ValueError, match=r"'fc_weight' has shape \(3, 4\), expected \(4, 3\)"):
        tu.check_symbolic_backward(_fc(), [x, w.T, b], [np.ones((2, 4))], [x])
    with pytest.raises(ValueError, match=r"expected gradient for 'x' has shape \(3, 2\), expected \(2, 3\)"):
        tu.check_symbolic_backward(_fc(), [x, w, b], [np.ones((2, 4))], [x.T])


def test_sparse_storage_is_not_implemented():
    x, w, b = _fc_values()
    with pytest.raises(NotImplementedError, match="row_sparse"):
        tu.check_symbolic_backward(_fc(), [x, w, b], [np.ones((2, 4))], [x], grad_stypes={"x": "row_sparse"})
    tu.check_symbolic_backward(
        _fc(), [x, w, b], [np.ones((2, 4))], {"fc_bias": np.full(4, 2.0)}, grad_stypes={"fc_bias": "default"}
    )
    with pytest.raises(NotImplementedError):
        tu.check_numeric_gradient(_fc(), [x, w, b], grad_stype_dict={"x": "csr"})
    with pytest.raises(NotImplementedError):
        tu.rand_ndarray((2, 2), "csr")


# == numeric_grad ======================================================================================


def test_numeric_grad_matches_hand_derivations():
    x = S.Variable("x")
    v = np.array([[0.3, -1.2, 2.0], [0.0, 0.7, -0.4]])
    exe = S.tanh(x).simple_bind(sg.cpu(), x=v.shape, type_dict={"x": np.float64})
    g = tu.numeric_grad(exe, {"x": v}, eps=None, dtype=np.float64)["x"]
    np.testing.assert_allclose(g, 1 - np.tanh(v) ** 2, rtol=1e-9, atol=1e-10)
    # MXNet's default eps=1e-4 (x +- eps/2) on a float32 executor
    exe32 = S.square(x).simple_bind(sg.cpu(), x=v.shape)
    g32 = tu.numeric_grad(exe32, {"x": v})["x"]
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, 2 * v, rtol=1e-2, atol=1e-2)


def test_numeric_grad_fully_connected_and_multi_output():
    x, w, b = _fc_values(17)
    exe = _fc().simple_bind(
        sg.cpu(), x=x.shape, type_dict={"x": np.float64, "fc_weight": np.float64, "fc_bias": np.float64}
    )
    g = tu.numeric_grad(exe, {"x": x, "fc_weight": w, "fc_bias": b}, eps=None, dtype=np.float64)
    ones = np.ones((2, 4))  # objective: the sum of the output
    np.testing.assert_allclose(g["x"], ones @ w, rtol=1e-8)
    np.testing.assert_allclose(g["fc_weight"], ones.T @ x, rtol=1e-8)
    np.testing.assert_allclose(g["fc_bias"], np.full(4, 2.0), rtol=1e-8)
    np.testing.assert_array_equal(exe.arg_dict["x"], x)  # perturbations undone

    a = S.Variable("a")
    exe2 = S.Group([S.square(a), S.sum(a)]).simple_bind(sg.cpu(), a=(3,), type_dict={"a": np.float64})
    va = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(tu.numeric_grad(exe2, [va], eps=None, dtype=np.float64)["a"], 2 * va + 1, rtol=1e-8)


def test_numeric_grad_resets_aux_states():
    d = S.Variable("data")
    bn = S.BatchNorm(d, fix_gamma=False, name="bn")
    r = _rng(18)
    loc = {"data": r.standard_normal((4, 3)), "bn_gamma": r.uniform(0.5, 1.5, 3), "bn_beta": r.standard_normal(3)}
    aux = {"bn_moving_mean": np.zeros(3), "bn_moving_var": np.ones(3)}
    exe = bn.bind(sg.cpu(), {k: v.copy() for k, v in loc.items()}, aux_states={k: v.copy() for k, v in aux.items()})
    g = tu.numeric_grad(exe, loc, aux_states=aux, eps=None, dtype=np.float64)
    np.testing.assert_allclose(g["bn_beta"], np.full(3, 4.0), rtol=1e-7)  # d sum(y) / d beta = batch size
    np.testing.assert_allclose(g["data"], 0.0, atol=1e-7)  # sum of a normalised batch does not move
    np.testing.assert_array_equal(exe.aux_dict["bn_moving_mean"], 0.0)


# == check_numeric_gradient ============================================================================


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_numeric_gradient_passes_on_correct_ops(dtype):
    r = _rng(19)
    x = S.Variable("x")
    tu.check_numeric_gradient(S.tanh(x), [r.uniform(-2, 2, (3, 4))], dtype=dtype)
    tu.check_numeric_gradient(S.sum(S.square(x), axis=1), [r.standard_normal((3, 4))], dtype=dtype)
    tu.check_numeric_gradient(_fc(), list(_fc_values(20)), dtype=dtype)
    res = tu.check_numeric_gradient(
        S.elemwise_mul(x, S.Variable("y")), {"x": r.standard_normal(5), "y": r.standard_normal(5)}, dtype=dtype
    )
    assert sorted(res) == ["x", "y"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_numeric_gradient_batchnorm(dtype):
    r = _rng(21)
    d = S.Variable("data")
    loc = {"data": r.standard_normal((4, 3)), "bn_gamma": r.uniform(0.5, 1.5, 3), "bn_beta": r.standard_normal(3)}
    aux = {"bn_moving_mean": r.standard_normal(3) * 0.1, "bn_moving_var": r.uniform(0.5, 1.5, 3)}
    kept = {k: v.copy() for k, v in aux.items()}
    training = tu.check_numeric_gradient(S.BatchNorm(d, fix_gamma=False, name="bn"), loc, aux_states=aux, dtype=dtype)
    # inference mode: global statistics in both passes
    inference = tu.check_numeric_gradient(
        S.BatchNorm(d, fix_gamma=False, use_global_stats=True, name="bn"), loc, aux_states=aux, dtype=dtype
    )
    assert set(training) == set(inference) == set(loc)  # every argument compared (a mismatch raised)
    for k, v in aux.items():  # the user's moving statistics are left as they were
        np.testing.assert_array_equal(v, kept[k])


def test_numeric_gradient_reference_is_float64_and_exact_for_float64():
    x = S.Variable("x")
    v = np.array([0.2, -0.7, 1.5])
    # float16 under test, float64 reference; one output element, so one projection weight w
    analytic, numeric = tu.check_numeric_gradient(S.sum(S.tanh(x)), [v], dtype=np.float16)["x"]
    vq = v.astype(np.float16).astype(np.float64)  # the point really checked: the location rounded to float16
    ratio = numeric / (1 - np.tanh(vq) ** 2)  # = w everywhere, to float64 accuracy
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
    assert 0.1 <= ratio[0] < 1.1
    np.testing.assert_allclose(analytic, numeric, rtol=1e-2, atol=1e-2)
    res64 = tu.check_numeric_gradient(S.tanh(x), [v], dtype=np.float64)
    np.testing.assert_allclose(*res64["x"], rtol=1e-8)


def test_numeric_gradient_grad_nodes_forms():
    x, w, b = _fc_values(22)
    res = tu.check_numeric_gradient(_fc(), [x, w, b], grad_nodes=["fc_weight"])
    assert list(res) == ["fc_weight"]
    res = tu.check_numeric_gradient(_fc(), [x, w, b], grad_nodes={"x": "add", "fc_weight": "null", "fc_bias": "write"})
    assert sorted(res) == ["fc_bias", "x"]
    with pytest.raises(ValueError, match=r"grad_nodes names \['nope'\]"):
        tu.check_numeric_gradient(_fc(), [x, w, b], grad_nodes=["nope"])


def test_numeric_gradient_multi_output_and_loss_heads():
    r = _rng(23)
    a = S.Variable("a")
    tu.check_numeric_gradient(S.Group([S.tanh(a), S.sum(S.square(a))]), [r.standard_normal((2, 3))])
    d, lab = S.Variable("data"), S.Variable("label")
    x, y = r.standard_normal((4, 3)), np.array([0.0, 2.0, 1.0, 1.0])
    for params in (
        {},
        {"normalization": "batch"},
        {"use_ignore": True, "ignore_label": 1, "normalization": "valid"},
        {"smooth_alpha": 0.1},
    ):
        tu.check_numeric_gradient(S.SoftmaxOutput(d, lab, **params), [x, y], grad_nodes=["data"], dtype=np.float64)
    tu.check_numeric_gradient(S.MakeLoss(S.square(d), grad_scale=3.0), [x])
    unknown = S.Custom(d, op_type="tu_unknown_loss")
    with pytest.raises(NotImplementedError, match="register_loss_objective"):
        tu.check_numeric_gradient(unknown, [x])


@pytest.mark.parametrize(
    "head",
    [
        lambda d, lab: S.LinearRegressionOutput(S.tanh(d), lab, grad_scale=2.0),
        lambda d, lab: S.LogisticRegressionOutput(d, lab),
        lambda d, lab: S.MAERegressionOutput(S.sin(d), lab, grad_scale=0.5),
        lambda d, lab: S.SVMOutput(d, S.sum(lab, axis=1), margin=0.7, regularization_coefficient=1.5),
        lambda d, lab: S.SVMOutput(d, S.sum(lab, axis=1), margin=0.3, use_linear=True),
        lambda d, lab: S.make_loss(S.square(d) + lab),
    ],
    ids=["linear", "logistic", "mae", "svm_l2", "svm_l1", "make_loss"],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numeric_gradient_through_every_loss_head(head, dtype):
    """Each built-in loss head's implied loss (OpDef.implied_loss) is what its backward differentiates: the
    numeric check of a correct head passes; an implied loss twice too large is caught (so it is the one used)."""
    r = _rng(29)
    d, lab = S.Variable("data"), S.Variable("label")
    sym = head(d, lab)
    # the SVM heads sum two label columns of {0, 1} into a class index in {0, 1, 2}; hinge and MAE kinks are
    # kept away from the base point by the draw, as the regression labels are continuous
    x, y = r.standard_normal((4, 3)), r.integers(0, 2, (4, 3)).astype(np.float64)
    tu.check_numeric_gradient(sym, [x, y], grad_nodes=["data"], dtype=dtype)
    op_name = sym.heads()[0].op_name
    double = lambda params, inputs, output: _doubled(get_op(op_name).implied_loss(params, inputs, output))
    tu.register_loss_objective(op_name, double)
    try:
        with pytest.raises(GradientCheckError):
            tu.check_numeric_gradient(sym, [x, y], grad_nodes=["data"], dtype=dtype)
    finally:
        del LOSS_OBJECTIVES[op_name]


def _doubled(loss):
    return lambda ins, out: tuple(2 * v for v in loss(ins, out))


@pytest.mark.parametrize(
    "k, words",
    [
        (2, "counted twice / accumulated over two backward calls"),
        (-1, "sign flipped"),
        (0, "gradient missing / not connected"),
        (10, "accumulated over 10 backward calls"),
    ],
    ids=str,
)
def test_numeric_gradient_catches_a_planted_bug(k, words):
    v = np.array([[0.5, -1.0, 2.0], [0.3, 0.7, -0.2]])
    tu.check_numeric_gradient(_scaled_square(1), [v])  # the correct op passes
    with pytest.raises(GradientCheckError) as info:
        tu.check_numeric_gradient(_scaled_square(k), [v])
    err = info.value
    assert err.check == "check_numeric_gradient" and err.arg_name == "x"
    assert err.names == ("analytic", "numeric") and words in err.diagnosis
    # atol=None: rtol times the largest |numeric| entry of the argument, plus the estimated noise (issue 8)
    assert err.rtol == 1e-4 and err.atol == pytest.approx(1e-4 * np.abs(err.expected).max())
    assert "h = 6.06e-06 * max(|x|, 1)" in err.eps
    text = str(err)
    for piece in (
        "'x'",
        "analytic",
        "numeric",
        "worst",
        "rtol=0.0001",
        "atol=",
        "float32 rounding",
        "6 of 6 elements (100%)",
        "float32",
        "diagnosis",
    ):
        assert piece in text, piece
    np.testing.assert_allclose(err.actual, k * err.expected, rtol=1e-5, atol=1e-6)


def test_float64_reference_catches_a_5_percent_error_in_float16():
    # |gradient| >= 2 * 2 * 0.1: a 5% error exceeds float16's atol 0.1 + rtol 1e-2 where |gradient| > 2.7
    v = _rng(29).uniform(2, 4, (3, 4)) * np.sign(_rng(30).standard_normal((3, 4)))
    tu.check_numeric_gradient(_scaled_square(1), [v], dtype=np.float16)
    with pytest.raises(GradientCheckError, match="scaled by 1.0"):
        tu.check_numeric_gradient(_scaled_square(1.05), [v], dtype=np.float16)


def test_compare_with_a_planted_wrong_analytic_array():
    numeric = _rng(24).standard_normal((4, 5))
    analytic = numeric.copy()
    analytic[1, 3] += 0.5  # one wrong element
    analytic[2, 0] -= 0.05
    with pytest.raises(GradientCheckError) as info:
        compare(
            analytic,
            numeric,
            1e-4,
            1e-3,
            check="check_numeric_gradient",
            arg_name="w",
            names=("analytic", "numeric"),
            eps="1e-3",
            what="analytic gradient of 'w' does not match",
        )
    err = info.value
    assert err.index == (1, 3) and err.n_mismatch == 2 and err.mismatch_fraction == pytest.approx(0.1)
    assert [row[0] for row in err.worst] == [(1, 3), (2, 0)]
    assert err.worst[0][3] == pytest.approx(0.5) and err.eps == "1e-3"
    assert "2 of 20 elements (10%)" in str(err) and "eps=1e-3" in str(err)
    assert err.diagnosis is None  # an isolated wrong element is not a structural bug
    assert pickle.loads(pickle.dumps(err)).index == (1, 3)


def test_numeric_gradient_input_validation():
    x, w, b = _fc_values(25)
    bad = x.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match=r"argument 'x' contains 1 NaN.*\(1, 1\)"):
        tu.check_numeric_gradient(_fc(), [bad, w, b])
    with pytest.raises(ValueError, match=r"numeric_eps=1e-06 is too small for float32"):
        tu.check_numeric_gradient(_fc(), [x, w, b], numeric_eps=1e-6)
    tu.check_numeric_gradient(_fc(), [x, w, b], numeric_eps=1e-3)  # MXNet-style fixed step
    tu.check_numeric_gradient(_fc(), [x, w, b], numeric_eps={np.float32: 1e-3})
    with pytest.raises(ValueError, match=r"'fc_bias' has shape \(5,\), expected \(4,\)"):
        tu.check_numeric_gradient(_fc(), {"x": x, "fc_weight": w, "fc_bias": np.ones(5)})
    with pytest.raises(ValueError, match="dtype must be one of"):
        tu.check_numeric_gradient(_fc(), [x, w, b], dtype=np.int32)


# == helpers: data, seeds, context, speed ==============================================================


def test_random_data_helpers():
    a = tu.random_arrays((2, 3))
    assert a.shape == (2, 3) and a.dtype == np.float32
    p, q = tu.random_arrays((1,), ())
    assert p.shape == (1,) and q.shape == ()
    s = tu.rand_shape_nd(4, dim=3)
    assert len(s) == 4 and all(isinstance(d, int) and 1 <= d <= 3 for d in s)
    arr = tu.rand_ndarray((3, 2), dtype=np.float64)
    assert arr.shape == (3, 2) and arr.dtype == np.float64 and isinstance(arr, np.ndarray)


def test_with_seed_reproduces_and_reports(monkeypatch, capsys):
    draws = []

    @tu.with_seed()
    def draw():
        draws.append((np.random.rand(), random.random()))

    monkeypatch.setenv("SYMGRAD_TEST_SEED", "1234")
    draw()
    draw()
    assert draws[0] == draws[1]
    state = np.random.get_state()[1].copy()

    @tu.with_seed(99)
    def failing():
        tu.assert_almost_equal(np.ones(2), np.zeros(2))

    with pytest.raises(GradientCheckError) as info:
        failing()
    err = info.value
    node = "tests/test_mxnet_checks.py::test_with_seed_reproduces_and_reports"
    assert err.seed == 99 and err.reproduce == f"SYMGRAD_TEST_SEED=99 python -m pytest {node}"
    # the report's last line: the seed and the one-line reproduction (not repeated in a note)
    assert str(err).split("\n")[-1] == f"  seed 99 -- reproduce: SYMGRAD_TEST_SEED=99 python -m pytest {node}"
    assert not getattr(err, "__notes__", None)
    assert f"SYMGRAD_TEST_SEED=99 python -m pytest {node}" in capsys.readouterr().err

    @tu.with_seed(98)
    def other_failure():
        raise KeyError("not a check")

    with pytest.raises(KeyError) as info:
        other_failure()
    if sys.version_info >= (3, 11):  # other exceptions get the line as a note
        assert info.value.__notes__ == [f"seed=98: reproduce with SYMGRAD_TEST_SEED=98 python -m pytest {node}"]
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # global RNG state restored
    monkeypatch.delenv("SYMGRAD_TEST_SEED")
    assert os.environ.get("SYMGRAD_TEST_SEED") is None


def test_default_context():
    assert tu.default_context() == sg.cpu()
    try:
        tu.set_default_context(sg.cpu(1))
        assert tu.default_context() == sg.cpu(1)
        assert sg.current_context() == sg.cpu(1)  # as MXNet: the library default changes too
    finally:
        tu.set_default_context(None)
    with sg.cpu(2):
        assert tu.default_context() == sg.cpu(2)


def test_check_speed_and_simple_forward():
    sym = S.tanh(_fc())
    t = tu.check_speed(sym, N=2, x=(2, 3))
    assert 0 < t < 1
    x, w, b = _fc_values(26)
    assert tu.check_speed(sym, location={"x": x, "fc_weight": w, "fc_bias": b}, N=2, typ="forward") > 0
    with pytest.raises(ValueError, match="typ"):
        tu.check_speed(sym, N=1, typ="backward", x=(2, 3))
    np.testing.assert_allclose(tu.simple_forward(sym, x=x, fc_weight=w, fc_bias=b), np.tanh(x @ w.T + b))


# == the issue's signatures, defaults and bad inputs ======================================================


_SPEC = {  # name -> positional-or-keyword parameters and defaults, as the issue (MXNet 1.9) gives them
    "check_symbolic_forward": "sym, location, expected, rtol=None, atol=None, aux_states=None, ctx=None, "
    "equal_nan=False, dtype=float32",
    "check_symbolic_backward": "sym, location, out_grads, expected, rtol=None, atol=None, aux_states=None, "
    "grad_req='write', ctx=None, grad_stypes=None, equal_nan=False, dtype=float32",
    "check_numeric_gradient": "sym, location, aux_states=None, numeric_eps=None, rtol=None, atol=None, "
    "grad_nodes=None, use_forward_train=True, ctx=None, grad_stype_dict=None, "
    "dtype=float32",
    "numeric_grad": "executor, location, aux_states=None, eps=0.0001, use_forward_train=True, dtype=float32",
    "check_consistency": "sym, ctx_list, scale=1.0, grad_req='write', arg_params=None, aux_params=None, rtol=None, "
    "atol=None, raise_on_err=True, ground_truth=None, equal_nan=False, use_uniform=False, "
    "rand_type=float64",
    "assert_almost_equal": "a, b, rtol=None, atol=None, names=('a', 'b'), equal_nan=False, mismatches=(10, 10)",
    "check_speed": "sym, location=None, ctx=None, N=20, grad_req=None, typ='whole'",
}


def _positional(fn):
    import inspect

    parts = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind is not p.POSITIONAL_OR_KEYWORD:
            continue  # symgrad's additions are keyword-only (and check_speed's **kwargs)
        if p.default is p.empty:
            parts.append(p.name)
        else:
            d = p.default
            parts.append(f"{p.name}={d.__name__ if isinstance(d, type) else repr(d)}")
    return ", ".join(parts)


@pytest.mark.parametrize("name", list(_SPEC))
def test_signatures_and_defaults_are_the_issues(name):
    assert _positional(getattr(tu, name)) == _SPEC[name]


def test_default_numeric_step_is_cbrt_eps_times_max_abs_x_1():
    from symgrad.test_utils.numeric import default_steps

    x = np.array([0.0, 0.5, -3.0, 1e4])
    want = np.cbrt(np.finfo(np.float64).eps) * np.array([1.0, 1.0, 3.0, 1e4])  # derived here
    np.testing.assert_allclose(default_steps(x, np.float64), want, rtol=1e-15)
    np.testing.assert_allclose(
        default_steps(x, np.float32), np.cbrt(np.finfo(np.float32).eps) * want / want[0] * 1.0, rtol=1e-6
    )


def test_projection_weights_are_in_0_1_to_1_1_for_every_output():
    # the numeric gradient of sum_k w_k * out_k for out_k = x * 1: numeric = w, drawn per output element
    a = S.Variable("a")
    sym = S.Group([S.identity(a, name="o1"), S.identity(a, name="o2")])
    seen = []
    for seed in range(30):
        np.random.seed(seed)
        ((_, numeric),) = tu.check_numeric_gradient(sym, [np.zeros(50)], dtype=np.float64).values()
        seen.append(numeric)  # w_1 + w_2, each in [0.1, 1.1)
    seen = np.concatenate(seen)
    assert seen.min() >= 0.2 - 1e-9 and seen.max() < 2.2 and seen.std() > 0.2


class _Counter(sg.operator.CustomOp):
    """y = x + c, and every training forward adds 1 to the auxiliary state c (dy/dx = 1 whatever c is)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] + aux[0])
        if is_train:
            aux[0][...] = aux[0] + 1.0

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0])


@sg.operator.register("tu_counter")
class _CounterProp(sg.operator.CustomOpProp):
    def list_auxiliary_states(self):
        return ["count"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], [in_shape[0]]

    def create_operator(self, ctx, shapes, dtypes):
        return _Counter()


def test_aux_states_are_reset_before_every_evaluation():
    # without the reset, f(x + h) - f(x - h) would pick up the +1 of each training forward: 1 + 1/(2h), not 1
    sym = S.Custom(S.Variable("x"), op_type="tu_counter", name="c")
    x, c = np.array([0.5, -1.0, 2.0]), np.array([0.25, 0.25, 0.25])
    analytic, numeric = tu.check_numeric_gradient(sym, [x], aux_states=[c], dtype=np.float64)["x"]
    np.testing.assert_allclose(numeric, analytic, rtol=1e-8)  # both = the projection weights, in [0.1, 1.1)
    assert ((0.1 <= numeric) & (numeric < 1.1)).all()
    exe = sym.bind(sg.cpu(), {"x": x.copy()}, aux_states={"c_count": c.copy()})
    g = tu.numeric_grad(exe, {"x": x}, aux_states={"c_count": c}, eps=None, dtype=np.float64)["x"]
    np.testing.assert_allclose(g, np.ones(3), rtol=1e-8)
    np.testing.assert_array_equal(exe.aux_dict["c_count"], c)  # left as given
    # no aux_states to reset to (MXNet: no reset): the drift is a clear error, not a wrong number
    with pytest.raises(ValueError, match=r"not deterministic.*reads an auxiliary state it updates"):
        tu.numeric_grad(exe, {"x": x}, eps=None, dtype=np.float64)


def test_dropout_in_training_is_a_clear_error_naming_the_op():
    sym = S.Dropout(S.Variable("x"), p=0.5, name="drop")
    v = np.ones((10, 10))
    for use_forward_train in (True, False):  # the analytic gradient always runs forward(is_train=True)
        with pytest.raises(ValueError, match=r"not deterministic: op Dropout 'drop'.*Dropout in training"):
            tu.check_numeric_gradient(sym, [v], use_forward_train=use_forward_train)
    exe = sym.simple_bind(sg.cpu(), x=v.shape)
    with pytest.raises(ValueError, match=r"numeric_grad: the forward is not deterministic: op Dropout 'drop'"):
        tu.numeric_grad(exe, {"x": v})
    tu.numeric_grad(exe, {"x": v}, use_forward_train=False)  # inference: the identity, deterministic
    tu.check_numeric_gradient(S.Dropout(S.Variable("x"), p=0.0), [v])  # p=0: deterministic, and passes


def test_bad_out_grads_expected_and_location_dtypes_are_clear_errors():
    x, w, b = _fc_values()
    og = np.ones((2, 4))
    with pytest.raises(ValueError, match=r"out_grads for output 'fc_output' has shape \(4, 2\), expected \(2, 4\)"):
        tu.check_symbolic_backward(_fc(), [x, w, b], [og.T], [x])
    with pytest.raises(ValueError, match=r"out_grads has 0 arrays for 1 outputs \['fc_output'\]"):
        tu.check_symbolic_backward(_fc(), [x, w, b], [], [x])
    with pytest.raises(ValueError, match=r"out_grads names \['fc_out'\], which are not outputs"):
        tu.check_symbolic_backward(_fc(), [x, w, b], {"fc_out": og}, [x])
    with pytest.raises(TypeError, match=r"out_grads for output 'fc_output' has dtype <U1"):
        tu.check_symbolic_backward(_fc(), [x, w, b], [np.full((2, 4), "a")], [x])
    with pytest.raises(ValueError, match=r"out_grads for output 'fc_output' is complex"):
        tu.check_symbolic_backward(_fc(), [x, w, b], [og + 1j], [x])
    with pytest.raises(TypeError, match=r"argument 'x' has dtype <U1"):
        tu.check_symbolic_forward(_fc(), [np.full((2, 3), "a"), w, b], [x @ w.T + b])
    with pytest.raises(ValueError, match=r"argument 'fc_weight' is complex.*imaginary part"):
        tu.check_numeric_gradient(_fc(), [x, w + 1j, b])
    with pytest.raises(ValueError, match=r"expected output for 'fc_output' is complex"):
        tu.check_symbolic_forward(_fc(), [x, w, b], [x @ w.T + b + 0j])
    with pytest.raises(TypeError, match=r"expected gradient for 'fc_bias' has dtype object"):
        tu.check_symbolic_backward(_fc(), [x, w, b], [og], {"fc_bias": np.array([None] * 4)})
    with pytest.raises(ValueError, match=r"auxiliary state 'bn_moving_var' contains 0 NaN and 1 Inf"):
        tu.check_numeric_gradient(
            S.BatchNorm(S.Variable("d"), name="bn"),
            [x, np.ones(3), np.zeros(3)],
            aux_states=[np.zeros(3), np.array([1.0, np.inf, 1.0])],
        )
    bad = x.copy()
    bad[0, 2] = -np.inf
    exe = _fc().simple_bind(sg.cpu(), x=(2, 3))
    with pytest.raises(ValueError, match=r"numeric_grad: argument 'x' contains 0 NaN and 1 Inf .*\(0, 2\)"):
        tu.numeric_grad(exe, {"x": bad, "fc_weight": w, "fc_bias": b})
    with pytest.raises(ValueError, match=r"numeric_grad: argument 'x' is complex"):
        tu.numeric_grad(exe, {"x": x + 1j})
    # NaN given to check_symbolic_backward (NaN tests are legitimate there): a failure names the argument
    with pytest.raises(GradientCheckError, match=r"note: argument 'fc_weight' contains 1 NaN"):
        tu.check_symbolic_backward(
            _fc(),
            [x, np.where(w > 10, 0, w) * np.where(np.arange(12).reshape(4, 3) == 5, np.nan, 1), b],
            [og],
            {"x": og @ w},
        )
    with pytest.raises(sg.SymgradError, match=r"grad_req for argument 'x' must be one of 'write', 'add', 'null'"):
        tu.check_symbolic_backward(_fc(), [x, w, b], [og], [x], grad_req={"x": "wirte"})


def test_numeric_eps_too_small_for_the_dtype_is_explained():
    x, w, b = _fc_values()
    # float32 differences (MXNet's way): rounding swamps the quotient below sqrt(eps_32) / 4
    with pytest.raises(
        ValueError,
        match=r"numeric_eps=1e-07 is too small for float32 under test: the finite "
        r"differences are taken in float32.*swamps the derivative",
    ):
        tu.check_numeric_gradient(_fc(), [x, w, b], numeric_dtype=np.float32, numeric_eps=1e-7)
    # float64 differences: only MXNet's floor applies, and the message says so
    with pytest.raises(ValueError, match=r"minimum 1e-05, MXNet's floor for float16/float32"):
        tu.check_numeric_gradient(_fc(), [x, w, b], numeric_eps=1e-6)
    exe = _fc().simple_bind(sg.cpu(), x=(2, 3), type_dict={"x": np.float16})
    with pytest.raises(ValueError, match=r"numeric_grad: argument 'x': eps=0.0001 is too small for float16"):
        tu.numeric_grad(exe, {"x": x}, dtype=np.float16)
    tu.numeric_grad(exe, {"x": x}, eps=2**-6, dtype=np.float16)  # MXNet's float16 step is fine


# == reference 004: a gradient accumulated over 10 backward calls, float32 steps too small ==============


def _cross_entropy_model():
    """The question's model: Linear(4 -> 2) + mean cross-entropy over 10 samples, as a symgrad loss."""
    x, t = S.Variable("x"), S.Variable("t")
    z = S.FullyConnected(x, num_hidden=2, name="m")
    return S.mean(-S.pick(S.log_softmax(z, axis=1), t, axis=1), name="loss")


def _loss_np(x, w, b, t):
    z = x @ w.T + b
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    return float(np.mean(lse - z[np.arange(len(t)), t.astype(int)]))


def test_reference_004_accumulated_gradient_and_too_small_float32_steps_are_explained():
    rng = _rng(40)
    n, d, k, lr = 10, 4, 2, 1e-3
    x = rng.standard_normal((n, d)).astype(np.float32)
    t = rng.integers(0, k, n).astype(np.float32)
    w, b = (0.5 * rng.standard_normal((k, d))).astype(np.float32), np.zeros(k, np.float32)
    sym = _cross_entropy_model()
    # the question's loop: ten forward/backward calls (an SGD step on the parameters between them), the input
    # gradient never zeroed -- symgrad's grad_req 'add'
    gx, gw, gb = np.zeros_like(x), np.zeros_like(w), np.zeros_like(b)
    exe = sym.bind(
        sg.cpu(),
        {"x": x.copy(), "m_weight": w.copy(), "m_bias": b.copy(), "t": t},
        args_grad={"x": gx, "m_weight": gw, "m_bias": gb},
        grad_req={"x": "add", "m_weight": "write", "m_bias": "write", "t": "null"},
    )
    for i in range(10):
        exe.forward(is_train=True)
        exe.backward([np.ones(1, np.float32)])
        if i < 9:
            exe.arg_dict["m_weight"][...] -= lr * gw
            exe.arg_dict["m_bias"][...] -= lr * gb
    w9, b9 = exe.arg_dict["m_weight"].astype(np.float64), exe.arg_dict["m_bias"].astype(np.float64)
    # finite differences of the loss written in numpy, float64, at the final parameters (the question's check)
    numeric = central_gradient(lambda v: _loss_np(v, w9, b9, t), x.astype(np.float64))
    relerr = np.abs(gx - numeric) / np.maximum(np.abs(gx), np.abs(numeric))
    assert abs(relerr.mean() - 0.9) < 0.01  # the question's symptom, reproduced
    with pytest.raises(GradientCheckError) as info:
        tu.assert_almost_equal(gx, numeric, names=("backprop", "finite differences"))
    diagnosis = info.value.diagnosis
    assert "\n" not in diagnosis and info.value.pattern == "accumulated"
    assert diagnosis.startswith("backprop = 10 x finite differences: accumulated over 10 backward calls")
    assert "gradient not zeroed between calls" in diagnosis and f"diagnosis: {diagnosis}" in str(info.value)
    assert info.value.factor == pytest.approx(10, rel=1e-2)  # the SGD steps between the calls move it a little

    # the second confusion: float32 steps of 1e-7 and below. symgrad refuses them and says why
    loc = {"x": x, "m_weight": w9.astype(np.float32), "m_bias": b9.astype(np.float32), "t": t}
    nodes = {"x": "write"}
    for step in (1e-7, 1e-8):
        with pytest.raises(
            ValueError,
            match=r"too small for float32 under test: the finite differences are taken "
            r"in float32, where the numbers near 1 are 1.19e-07 apart",
        ):
            tu.check_numeric_gradient(sym, loc, numeric_eps=step, numeric_dtype=np.float32, grad_nodes=nodes)
        exe32 = sym.simple_bind(sg.cpu(), x=(n, d), m_weight=(k, d), m_bias=(k,), t=(n,), grad_req="null")
        with pytest.raises(ValueError, match=r"numeric_grad: argument 'x': eps=1e-0[78] is too small for float32"):
            tu.numeric_grad(exe32, {"x": x, "m_weight": loc["m_weight"], "m_bias": loc["m_bias"]}, eps=step)
    # and the right way passes: per-element steps on a float64 copy, the analytic gradient written once
    res = tu.check_numeric_gradient(sym, loc, grad_nodes=nodes)
    analytic, num = res["x"]
    np.testing.assert_allclose(num / num.ravel()[0] * numeric.ravel()[0], numeric, rtol=1e-5, atol=1e-9)
