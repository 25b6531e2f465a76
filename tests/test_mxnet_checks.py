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

import symgrad as sg
import test_utils as tu
from test_utils.compare import compare
from test_utils.diagnose import diagnose
from test_utils.report import GradientCheckError

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


def test_symgrad_test_utils_is_the_top_level_package():
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
    only_w = tu.check_symbolic_backward(_fc(), {"x": x, "fc_weight": w, "fc_bias": b}, og,
                                        {"fc_weight": exp["fc_weight"]})
    assert list(only_w) == ["fc_weight"]  # buffers exist only for the expected arguments
    tu.check_symbolic_backward(_fc(), [x, w, b], [og], [exp["x"], None, exp["fc_bias"]])
    with pytest.raises(ValueError, match="grad_req has no entry for \\['fc_bias'\\]"):
        tu.check_symbolic_backward(_fc(), [x, w, b], [og], exp, grad_req={"x": "write", "fc_weight": "add"})


def test_backward_elemwise_mul_sum_tanh_derivations():
    a, b = S.Variable("a"), S.Variable("b")
    va, vb = _rng(10).standard_normal((3, 2)), _rng(11).standard_normal((3, 2))
    og = _rng(12).standard_normal((3, 2))
    tu.check_symbolic_backward(S.elemwise_mul(a, b), [va, vb], [og], [og * vb, og * va])
    tu.check_symbolic_backward(S.sum(a), [va], [np.array([2.5])], [np.full((3, 2), 2.5)])
    tu.check_symbolic_backward(S.sum(a, axis=1), [va], [np.array([1.0, 2.0, 3.0])],
                               [np.repeat([[1.0], [2.0], [3.0]], 2, axis=1)])
    tu.check_symbolic_backward(S.tanh(a), [va], [og], [og * (1 - np.tanh(va) ** 2)], dtype=np.float64,
                               rtol=1e-10, atol=1e-12)


def test_backward_loss_head_without_out_grads():
    d, lab = S.Variable("data"), S.Variable("label")
    x = _rng(13).standard_normal((4, 3))
    y = np.array([0.0, 2.0, 1.0, 2.0])
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(4), y.astype(int)] -= 1.0
    tu.check_symbolic_backward(S.SoftmaxOutput(d, lab), [x, y], None, {"data": p})


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
        compare(touched, initial, 0.0, 0.0, check="check_symbolic_backward", arg_name="w",
                names=("buffer", "initial"))
    assert info.value.index == (3,) and info.value.n_mismatch == 1


def test_location_keys_must_equal_the_arguments():
    x, w, b = _fc_values()
    with pytest.raises(ValueError) as info:
        tu.check_symbolic_backward(_fc(), {"x": x, "fc_weight": w, "fc_wieght": b}, [np.ones((2, 4))],
                                   {"x": x})
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
    tu.check_symbolic_backward(_fc(), [x, w, b], [np.ones((2, 4))], {"fc_bias": np.full(4, 2.0)},
                               grad_stypes={"fc_bias": "default"})
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
    exe = _fc().simple_bind(sg.cpu(), x=x.shape, type_dict={"x": np.float64, "fc_weight": np.float64,
                                                             "fc_bias": np.float64})
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
    res = tu.check_numeric_gradient(S.elemwise_mul(x, S.Variable("y")), {"x": r.standard_normal(5),
                                    "y": r.standard_normal(5)}, dtype=dtype)
    assert sorted(res) == ["x", "y"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_numeric_gradient_batchnorm(dtype):
    r = _rng(21)
    d = S.Variable("data")
    loc = {"data": r.standard_normal((4, 3)), "bn_gamma": r.uniform(0.5, 1.5, 3), "bn_beta": r.standard_normal(3)}
    aux = {"bn_moving_mean": r.standard_normal(3) * 0.1, "bn_moving_var": r.uniform(0.5, 1.5, 3)}
    tu.check_numeric_gradient(S.BatchNorm(d, fix_gamma=False, name="bn"), loc, aux_states=aux, dtype=dtype)
    # inference mode: global statistics in both passes
    tu.check_numeric_gradient(S.BatchNorm(d, fix_gamma=False, use_global_stats=True, name="bn"), loc,
                              aux_states=aux, dtype=dtype)


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
    for params in ({}, {"normalization": "batch"}, {"use_ignore": True, "ignore_label": 1, "normalization": "valid"},
                   {"smooth_alpha": 0.1}):
        tu.check_numeric_gradient(S.SoftmaxOutput(d, lab, **params), [x, y], grad_nodes=["data"], dtype=np.float64)
    tu.check_numeric_gradient(S.MakeLoss(S.square(d), grad_scale=3.0), [x])
    unknown = S.Custom(d, op_type="tu_unknown_loss")
    with pytest.raises(NotImplementedError, match="register_loss_objective"):
        tu.check_numeric_gradient(unknown, [x])


@pytest.mark.parametrize(
    "k, words",
    [(2, "counted twice / accumulated over two backward calls"), (-1, "sign flipped"),
     (0, "gradient missing / not connected"), (10, "accumulated over 10 backward calls")],
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
    assert (err.rtol, err.atol) == (1e-4, 1e-3) and "h = 6.06e-06 * max(|x|, 1)" in err.eps
    text = str(err)
    for piece in ("'x'", "analytic", "numeric", "worst", "rtol=0.0001", "atol=0.001", "6 of 6 elements (100%)",
                  "float32", "diagnosis"):
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
        compare(analytic, numeric, 1e-4, 1e-3, check="check_numeric_gradient", arg_name="w",
                names=("analytic", "numeric"), eps="1e-3", what="analytic gradient of 'w' does not match")
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
    assert info.value.seed == 99
    if sys.version_info >= (3, 11):
        assert "seed=99: reproduce with SYMGRAD_TEST_SEED=99" in info.value.__notes__[0]
    assert "SYMGRAD_TEST_SEED=99" in capsys.readouterr().err
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
