"""Elementwise and reduction operators: MXNet-specific semantics the generic OpInfo tests
cannot see (kinks, ties, boundaries, integer inputs, dtype changes, special-function
accuracy) and bad input errors that name the operator instance."""

import math

import numpy as np
import pytest

import symgrad as sg

S = sg.sym


def _run(sym, **arrays):
    """Forward one symbol on cpu; returns the first output."""
    return sym.bind(sg.cpu(), {n: arrays[n] for n in sym.list_arguments()}).forward()[0]


def _grad(sym, head=None, **arrays):
    """Forward + backward; returns (output, {name: gradient})."""
    grads = {n: np.zeros_like(arrays[n]) for n in sym.list_arguments()}
    exe = sym.bind(sg.cpu(), {n: arrays[n] for n in sym.list_arguments()}, args_grad=grads)
    out = exe.forward(is_train=True)[0]
    exe.backward(None if head is False else [np.ones_like(out) if head is None else head])
    return out, grads


X = S.Variable("x")


# -- special functions against the standard library --------------------------------------


def test_erf_matches_math_erf_to_float64_precision():
    x = np.concatenate([np.linspace(-7, 7, 20001), [0.0, 1e-300, -1e-8, 2.5, np.nextafter(2.5, 0), 30.0]])
    got = _run(S.erf(X), x=x)
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(got, want, rtol=4e-15, atol=4e-16)
    assert _run(S.erf(X), x=np.array([np.inf, -np.inf])).tolist() == [1.0, -1.0]
    got32 = _run(S.erf(X), x=x.astype(np.float32))
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, np.array([math.erf(v) for v in x.astype(np.float32)]), rtol=1e-6, atol=1e-7)


def test_erfinv_inverts_erf_including_the_tails():
    y = np.concatenate([np.linspace(-0.999, 0.999, 4001), [0.0, 1 - 1e-12, -(1 - 1e-15), 1e-300]])
    x = _run(S.erfinv(X), x=y)
    np.testing.assert_allclose([math.erf(v) for v in x], y, rtol=2e-15, atol=2e-16)
    # relative precision in the tails: erfc(erfinv(1 - d)) = d
    y = 1 - np.array([1e-3, 4.1e-4])  # centre: erf(x) - y near 1 costs relative precision of 1 - y
    np.testing.assert_allclose([math.erfc(v) for v in _run(S.erfinv(X), x=y)], 1 - y, rtol=1e-12)
    y = 1 - np.array([4e-4, 1e-6, 1e-10, 1e-14, 2.3e-16, 1.2e-16])  # tails: full relative precision
    np.testing.assert_allclose([math.erfc(v) for v in _run(S.erfinv(X), x=y)], 1 - y, rtol=1e-13)
    edge = _run(S.erfinv(X), x=np.array([1.0, -1.0, 1.5, -2.0]))
    assert edge[0] == np.inf and edge[1] == -np.inf and np.isnan(edge[2:]).all()


def test_gamma_and_gammaln_match_the_standard_library():
    x = np.concatenate([np.linspace(0.05, 170.5, 4001), np.linspace(-9.95, -0.05, 2000) + 1e-3])
    x = x[np.abs(x - np.round(x)) > 1e-3]
    g = _run(S.gamma(X), x=x)
    np.testing.assert_allclose(g, [math.gamma(v) for v in x], rtol=2e-12)
    lg = _run(S.gammaln(X), x=np.concatenate([x, [1e3, 1e6, 1e10]]))
    want = [math.lgamma(v) for v in np.concatenate([x, [1e3, 1e6, 1e10]])]
    np.testing.assert_allclose(lg, want, rtol=1e-13, atol=1e-13)
    # exact at the integers where C's tgamma is exact; poles as tgamma / lgamma
    np.testing.assert_array_equal(
        _run(S.gamma(X), x=np.array([1.0, 2, 5, 11, 23])), [1, 1, 24, 3628800, float(math.factorial(22))]
    )
    # so integer inputs (computed in float, cast back as MXNet does) are exact too
    np.testing.assert_array_equal(_run(S.gamma(X), x=np.array([1, 2, 3, 4, 7], np.int32)), [1, 1, 2, 6, 720])
    poles = _run(S.gamma(X), x=np.array([0.0, -1.0, -4.0]))
    assert poles[0] == np.inf and np.isnan(poles[1:]).all()
    assert (_run(S.gammaln(X), x=np.array([0.0, -1.0, -4.0])) == np.inf).all()
    assert _run(S.gamma(X), x=np.array([172.0]))[0] == np.inf
    # non-finite inputs as C tgamma: NaN -> NaN, +inf -> inf, -inf -> NaN (domain error)
    special = _run(S.gamma(X), x=np.array([np.nan, np.inf, -np.inf]))
    assert np.isnan(special[0]) and special[1] == np.inf and np.isnan(special[2])


def test_digamma_trigamma_and_higher_derivatives_of_gammaln():
    euler = 0.5772156649015329
    psi0 = _run(S._polygamma(X, n=0), x=np.array([1.0, 0.5, -0.5, 10.0]))
    np.testing.assert_allclose(
        psi0,
        [-euler, -euler - 2 * math.log(2), -euler - 2 * math.log(2) + 2, -euler + sum(1 / k for k in range(1, 10))],
        rtol=1e-14,
        atol=1e-15,
    )
    psi1 = _run(S._polygamma(X, n=1), x=np.array([1.0, 0.5, -0.5]))
    np.testing.assert_allclose(psi1, [math.pi**2 / 6, math.pi**2 / 2, math.pi**2 / 2 + 4], rtol=1e-14)
    # third derivative of lgamma through three symbolic gradients: psi''(x); psi''(1) = -2 zeta(3)
    d1 = sg.grad(S.gammaln(X), [X])[0]
    d2 = sg.grad(d1, [X])[0]
    d3 = sg.grad(d2, [X])[0]
    np.testing.assert_allclose(_run(d3, x=np.array([1.0])), [-2 * 1.2020569031595942], rtol=1e-13)
    # a float reference independent of the code: psi1(x) by Euler-Maclaurin with 1000 terms
    x = np.array([0.3, 1.7, 4.2])
    n = 1000
    ref = sum(1.0 / (x + k) ** 2 for k in range(n)) + 1 / (x + n) + 1 / (2 * (x + n) ** 2) + 1 / (6 * (x + n) ** 3)
    np.testing.assert_allclose(_run(S._polygamma(X, n=1), x=x), ref, rtol=1e-13)


# -- rounding at exact halves -------------------------------------------------------------


def test_round_rint_fix_at_exact_halves_follow_mxnet():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.4, -2.6])
    np.testing.assert_array_equal(_run(S.round(X), x=x), [-3, -2, -1, 1, 2, 3, 2, -3])  # away from zero
    np.testing.assert_array_equal(_run(S.rint(X), x=x), [-3, -2, -1, 0, 1, 2, 2, -3])  # halves go down
    np.testing.assert_array_equal(_run(S.fix(X), x=x), [-2, -1, 0, 0, 1, 2, 2, -2])  # toward zero


# -- kinks: the value MXNet takes at exactly the kink ------------------------------------


def test_relu_abs_sign_at_zero():
    x = np.array([-1.0, 0.0, 2.0])
    _, g = _grad(S.relu(X), x=x)
    np.testing.assert_array_equal(g["x"], [0, 0, 1])
    _, g = _grad(S.abs(X), x=x)
    np.testing.assert_array_equal(g["x"], [-1, 0, 1])
    np.testing.assert_array_equal(_run(S.sign(X), x=x), [-1, 0, 1])
    # NaN passes through relu (MXNet: IsNan(a) || a > 0 ? a : 0)
    assert np.isnan(_run(S.relu(X), x=np.array([np.nan]))).all()


def test_maximum_minimum_ties_go_to_lhs():
    a, b = S.Variable("a"), S.Variable("b")
    v = {"a": np.array([1.0, 2.0, 3.0]), "b": np.array([1.0, 1.0, 4.0])}
    for sym, ga, gb in [
        (S._maximum(a, b), [1, 1, 0], [0, 0, 1]),
        (S._minimum(a, b), [1, 0, 1], [0, 1, 0]),
        (S.broadcast_maximum(a, b), [1, 1, 0], [0, 0, 1]),
    ]:
        _, g = _grad(sym, **v)
        np.testing.assert_array_equal(g["a"], ga)
        np.testing.assert_array_equal(g["b"], gb)
    _, g = _grad(S._maximum_scalar(X, scalar=2.0), x=np.array([2.0, 1.0]))
    np.testing.assert_array_equal(g["x"], [1, 0])
    _, g = _grad(S._minimum_scalar(X, scalar=2.0), x=np.array([2.0, 3.0]))
    np.testing.assert_array_equal(g["x"], [1, 0])


def test_clip_boundaries_pass_the_gradient():
    x = np.array([-2.0, -0.5, 0.0, 0.75, 2.0])
    out, g = _grad(S.clip(X, a_min=-0.5, a_max=0.75), head=np.full(5, 3.0), x=x)
    np.testing.assert_array_equal(out, [-0.5, -0.5, 0.0, 0.75, 0.75])
    np.testing.assert_array_equal(g["x"], [0, 3, 3, 3, 0])  # MXNet's clip_grad: bounds included
    # a_min > a_max: MXNet tests x > a_max first, then x < a_min
    np.testing.assert_array_equal(_run(S.clip(X, a_min=1.0, a_max=0.0), x=np.array([0.5, -1.0, 2.0])), [0.0, 1.0, 0.0])


def test_clip_parses_the_infinite_bounds_mxnet_writes_into_json():
    # mx.sym.clip(x, a_min=-inf, a_max=2).list_attr() == {'a_min': '-inf', 'a_max': '2'}
    sym = S.clip(X, a_min=float("-inf"), a_max=2.0)
    assert sym.list_attr() == {"a_min": "-inf", "a_max": "2.0"}
    again = S.clip(X, **sym.list_attr())
    np.testing.assert_array_equal(_run(again, x=np.array([-1e30, 1.0, 3.0])), [-1e30, 1.0, 2.0])
    np.testing.assert_array_equal(_run(S.clip(X, a_min="-0.5", a_max="Inf"), x=np.array([-1.0, 1e30])), [-0.5, 1e30])
    with pytest.raises(sg.ParamError, match=r"clip 'c'.*'a_max'.*a number.*'infinite'"):
        S.clip(X, a_min=0.0, a_max="infinite", name="c")


def test_hard_sigmoid_and_smooth_l1_at_their_boundaries():
    _, g = _grad(S.hard_sigmoid(X), x=np.array([-2.5, 2.5, 0.0]))  # 0.2 x + 0.5 hits 0 and 1
    np.testing.assert_allclose(g["x"], [0.0, 0.0, 0.2])
    _, g = _grad(S.smooth_l1(X, scalar=2.0), x=np.array([-0.25, 0.25, 0.1, 3.0]))
    np.testing.assert_allclose(g["x"], [-1.0, 1.0, 0.4, 1.0])


def test_max_min_gradient_goes_to_every_tied_element():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    _, g = _grad(S.max(X, axis=1), head=np.array([5.0, 7.0]), x=x)
    np.testing.assert_array_equal(g["x"], [[0, 5, 5], [7, 7, 0]])
    _, g = _grad(S.min(X, axis=0, keepdims=True), head=np.array([[1.0, 2.0, 4.0]]), x=x)
    np.testing.assert_array_equal(g["x"], [[1, 0, 0], [0, 2, 4]])
    _, g = _grad(S.max(X), x=x)  # full reduction, two maxima
    np.testing.assert_array_equal(g["x"], [[0, 1, 1], [0, 0, 0]])


def test_nansum_nanprod_gradients_are_zero_at_nan():
    x = np.array([[1.0, np.nan, 2.0], [np.nan, 3.0, 4.0]])
    out, g = _grad(S.nansum(X, axis=1), x=x)
    np.testing.assert_array_equal(out, [3.0, 7.0])
    np.testing.assert_array_equal(g["x"], [[1, 0, 1], [0, 1, 1]])
    out, g = _grad(S.nanprod(X), x=x)
    np.testing.assert_array_equal(out, [24.0])
    np.testing.assert_allclose(g["x"], [[24, 0, 12], [0, 8, 6]])


def test_prod_gradient_at_zero_is_the_product_of_the_others():
    # deliberately not MXNet's _backward_prod (out / x: 0/0 = NaN where x = 0): the product of the
    # other elements, exact at zeros (tests/test_atomicity.py checks every axis and the second order)
    _, g = _grad(S.prod(X), x=np.array([0.0, 2.0, 3.0]))
    assert g["x"].tolist() == [6.0, 0.0, 0.0]


# -- shapes exactly as MXNet -----------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, shape",
    [
        ({}, (1,)),
        ({"keepdims": True}, (1, 1, 1)),
        ({"axis": 1}, (2, 4)),
        ({"axis": (0, 2)}, (3,)),
        ({"axis": (0, 1, 2)}, (1,)),
        ({"axis": 1, "exclude": True}, (3,)),
        ({"axis": (0, 2), "exclude": True}, (2, 4)),
        ({"axis": 1, "exclude": True, "keepdims": True}, (1, 3, 1)),
        ({"axis": (), "exclude": True}, (1,)),
        ({"axis": "(1,)"}, (2, 4)),
        ({"axis": "None", "keepdims": "True"}, (1, 1, 1)),
    ],
)
def test_reduction_output_shapes(kwargs, shape):
    for op in ("sum", "mean", "prod", "nansum", "nanprod", "max", "min"):
        assert getattr(S, op)(X, **kwargs).infer_shape(x=(2, 3, 4))[1] == [shape], (op, kwargs)


def test_search_and_norm_output_shapes():
    assert S.argmax(X).infer_shape(x=(2, 3))[1] == [(1,)]
    assert S.argmax(X, keepdims=True).infer_shape(x=(2, 3))[1] == [(1, 1)]
    assert S.argmin(X, axis=0).infer_shape(x=(5,))[1] == [(1,)]
    assert S.argmax_channel(X).infer_shape(x=(2, 3, 4))[1] == [(2, 4)]
    assert S.norm(X, axis=(0, 2)).infer_shape(x=(2, 3, 4))[1] == [(3,)]
    assert S.norm(X, keepdims=True).infer_shape(x=(2, 3))[1] == [(1, 1)]
    np.testing.assert_array_equal(_run(S.argmax(X), x=np.array([[1.0, 5.0], [5.0, 0.0]])), [1.0])  # first max


# -- integer inputs (MXNet keeps the dtype) ----------------------------------------------------


def test_integer_reductions_keep_the_dtype():
    x = np.array([[1, -2, 3], [4, 5, -7]], dtype=np.int32)
    for sym, want in [
        (S.sum(X), [4]),
        (S.sum(X, axis=1), [2, 2]),
        (S.mean(X, axis=1), [0, 0]),
        (S.mean(X, axis=0), [2, 1, -2]),
        (S.prod(X, axis=0), [4, -10, -21]),
        (S.max(X, axis=1), [3, 5]),
        (S.min(X), [-7]),
        (S.argmax(X, axis=1), [2, 1]),
        (S.nansum(X), [4]),
        (S.norm(X, ord=1, axis=1), [6, 16]),
    ]:
        out = _run(sym, x=x)
        assert out.dtype == np.int32, sym.name
        np.testing.assert_array_equal(out, want, err_msg=sym.name)
    assert S.sum(X).infer_type(x=np.int32)[1] == [np.int32]


def test_integer_elementwise_semantics():
    x = np.array([-3, 4, 7], dtype=np.int32)
    out = _run(X + 2.5, x=x)  # scalar cast to the input dtype first (is_int defaults to True): x + 2
    assert out.dtype == np.int32 and out.tolist() == [-1, 6, 9]
    out = _run(S._plus_scalar(X, scalar=2.5, is_int=False), x=x)  # int input, float scalar: float64
    assert out.dtype == np.float64 and out.tolist() == [-0.5, 6.5, 9.5]
    assert S._plus_scalar(X, scalar=2.5, is_int=False).infer_type(x=np.int32)[1] == [np.float64]
    assert _run(X == 4.7, x=x).tolist() == [0, 1, 0]  # compares with int32(4.7) = 4
    assert _run(X * 2, x=x).tolist() == [-6, 8, 14]
    a, b = S.Variable("a"), S.Variable("b")
    div = _run(a / b, a=np.array([7, -7, 7], dtype=np.int32), b=np.array([2, 2, -2], dtype=np.int32))
    assert div.dtype == np.int32 and div.tolist() == [3, -3, -3]  # C division truncates toward zero
    assert _run(S.relu(X), x=x).tolist() == [0, 4, 7]
    assert _run(S.sqrt(X), x=np.array([4, 8], dtype=np.int32)).tolist() == [2, 2]
    assert _run(S.square(X), x=x).dtype == np.int32


def test_mod_follows_the_divisor_sign_and_is_zero_for_a_zero_divisor():
    a, b = S.Variable("a"), S.Variable("b")
    out = _run(a % b, a=np.array([5.5, -5.5, 5.5, 3.0]), b=np.array([2.0, 2.0, -2.0, 0.0]))
    np.testing.assert_array_equal(out, [1.5, 0.5, -0.5, 0.0])
    np.testing.assert_array_equal(_run(X % 0.0, x=np.array([1.0, -2.0])), [0.0, 0.0])


def test_float16_sums_accumulate_in_float32():
    out = _run(S.sum(X), x=np.ones(10000, dtype=np.float16))
    assert out.dtype == np.float16 and out[0] == 10000
    np.testing.assert_allclose(_run(S.norm(X), x=np.full(400, 0.5, dtype=np.float16)), [10.0], rtol=1e-3)


# -- Cast and out_dtype: gradients come back in the input dtype --------------------------------


def test_cast_gradient_is_cast_back_to_the_input_dtype():
    x32 = np.array([1.5, -2.0, 0.25], dtype=np.float32)
    y = S.Cast(X, dtype="float64")
    assert y.infer_type(x=np.float32)[1] == [np.float64]
    out, g = _grad(S.square(y), x=x32)
    assert out.dtype == np.float64 and g["x"].dtype == np.float32
    np.testing.assert_allclose(g["x"], 2 * x32)
    # second order through the cast: d/dx sum(2 x * v) = 2 v
    (gx,) = sg.grad(S.square(S.Cast(X, dtype=np.float64)), [X])
    (g2,) = sg.grad(S.sum(S.Cast(gx, dtype="float32")), [X])
    np.testing.assert_allclose(_run(g2, x=x32), [2, 2, 2])
    np.testing.assert_array_equal(_run(S.cast(X, dtype="int32"), x=np.array([0.9, -1.7, 2.0])), [0, -1, 2])


def test_norm_out_dtype_gradient_has_the_input_dtype():
    x = np.array([[3.0, 4.0], [0.0, 1.0]], dtype=np.float32)
    out, g = _grad(S.norm(X, axis=1, out_dtype="float64"), x=x)
    assert out.dtype == np.float64 and g["x"].dtype == np.float32
    np.testing.assert_allclose(out, [5.0, 1.0])
    np.testing.assert_allclose(g["x"], [[0.6, 0.8], [0.0, 1.0]])


# -- loss markers and stop_gradient ---------------------------------------------------------


def test_stop_gradient_blocks_and_make_loss_sends_ones():
    x = np.array([1.0, 2.0, -3.0])
    _, g = _grad(S.stop_gradient(X) * X, x=x)
    np.testing.assert_array_equal(g["x"], x)  # only the unblocked factor
    out, g = _grad(S.make_loss(S.square(X)), head=False, x=x)  # no head gradient: a loss
    np.testing.assert_array_equal(out, x * x)
    np.testing.assert_array_equal(g["x"], 2 * x)  # d loss / d (x^2) := 1, then the chain rule


def test_make_loss_is_mxnets_lowercase_op():
    y = S.make_loss(X, name="l")
    assert y.list_outputs() == ["l_loss"]
    with pytest.raises(ValueError, match="grad_scale"):
        S.make_loss(X, grad_scale=2.0)


# -- bad input: errors name the op instance -----------------------------------------------------


def test_reduction_axis_out_of_range_names_the_op():
    with pytest.raises(ValueError, match=r"sum 'mysum'.*'axis'=3.*2-d"):
        S.sum(X, axis=3, name="mysum").infer_shape(x=(2, 3))
    with pytest.raises(ValueError, match=r"max 'm'.*'axis'=-3"):
        S.max(X, axis=(0, -3), name="m").infer_shape(x=(2, 3))
    with pytest.raises(ValueError, match=r"mean 'mu'.*repeats an axis"):
        S.mean(X, axis=(1, -1), name="mu").infer_shape(x=(2, 3))
    with pytest.raises(ValueError, match=r"argmax 'am'.*'axis'=2"):
        S.argmax(X, axis=2, name="am").infer_shape(x=(2, 3))
    with pytest.raises(ValueError, match=r"norm 'nm'.*'axis'=5"):
        S.norm(X, axis=5, name="nm").bind(sg.cpu(), {"x": np.ones((2, 3))})
    with pytest.raises(ValueError, match=r"max 'e'.*empty"):  # (infer_shape reads a 0 as an unknown dimension)
        S.max(X, name="e").bind(sg.cpu(), {"x": np.ones((2, 0))})


def test_norm_rejects_unsupported_ord():
    with pytest.raises(ValueError, match=r"norm 'n3'.*'ord' must be 1 or 2, got 3"):
        S.norm(X, ord=3, name="n3")


def test_where_shape_errors_name_the_op_and_the_inputs():
    c, x, y = S.Variable("c"), S.Variable("x"), S.Variable("y")
    w = S.where(c, x, y, name="w")
    with pytest.raises(ValueError, match=r"where 'w'.*'x' and 'y'.*\(2, 3\).*\(3, 2\)"):
        w.infer_shape(c=(2, 3), x=(2, 3), y=(3, 2))
    with pytest.raises(ValueError, match=r"where 'w'.*'condition'.*\(3,\)"):
        w.infer_shape(c=(3,), x=(2, 3), y=(2, 3))
    assert w.infer_shape(c=(2,), x=(2, 3), y=(2, 3))[1] == [(2, 3)]
    # condition may have its own dtype and never gets a gradient
    cond = np.array([1, 0], dtype=np.int32)
    xs, ys = np.ones((2, 3)), np.zeros((2, 3))
    grads = {"c": np.full(2, 9, dtype=np.int32), "x": np.zeros((2, 3)), "y": np.zeros((2, 3))}
    exe = w.bind(
        sg.cpu(), {"c": cond, "x": xs, "y": ys}, args_grad=grads, grad_req={"c": "null", "x": "write", "y": "write"}
    )
    np.testing.assert_array_equal(exe.forward(is_train=True)[0], [[1, 1, 1], [0, 0, 0]])
    exe.backward([np.full((2, 3), 2.0)])
    np.testing.assert_array_equal(grads["x"], [[2, 2, 2], [0, 0, 0]])
    np.testing.assert_array_equal(grads["y"], [[0, 0, 0], [2, 2, 2]])
    np.testing.assert_array_equal(grads["c"], [9, 9])


def test_cast_to_an_unknown_dtype_names_the_op():
    with pytest.raises(ValueError, match=r"Cast 'c1'.*'dtype'.*'float33'"):
        S.Cast(X, dtype="float33", name="c1")
    with pytest.raises(ValueError, match=r"Cast 'c2'.*'dtype'.*one of.*'complex64'"):
        S.Cast(X, dtype="complex64", name="c2")
    with pytest.raises(ValueError, match=r"Cast 'c3'.*required parameter 'dtype'"):
        S.Cast(X, name="c3")


def test_argmax_channel_has_no_gradient():
    y = S.argmax_channel(X, name="amc")
    with pytest.raises(ValueError, match=r"argmax_channel 'amc'.*not defined.*no gradient"):
        sg.grad(S.sum(y), [X])
    # argmax itself is MXNet's zero gradient, not an error
    _, g = _grad(S.argmax(X, axis=1), x=np.array([[1.0, 2.0]]))
    np.testing.assert_array_equal(g["x"], [[0, 0]])


def test_elemwise_binary_shape_mismatch_names_the_op():
    a, b = S.Variable("a"), S.Variable("b")
    with pytest.raises(ValueError, match=r"_hypot 'h'.*lhs \(2, 3\) and rhs \(3,\)"):
        S._hypot(a, b, name="h").infer_shape(a=(2, 3), b=(3,))
    with pytest.raises(ValueError, match=r"broadcast_power 'p'.*\(2, 3\) and \(2,\)"):
        S.broadcast_power(a, b, name="p").infer_shape(a=(2, 3), b=(2,))


def test_mxnet_aliases_resolve_to_the_same_operator():
    from symgrad.ops import get_op

    for alias, name in [
        ("_Plus", "elemwise_add"),
        ("_plus", "elemwise_add"),
        ("_Mul", "elemwise_mul"),
        ("_PowerScalar", "_power_scalar"),
        ("_RPowerScalar", "_rpower_scalar"),
        ("broadcast_plus", "broadcast_add"),
        ("broadcast_minus", "broadcast_sub"),
        ("sum_axis", "sum"),
        ("max_axis", "max"),
        ("min_axis", "min"),
        ("cast", "Cast"),
        ("identity", "_copy"),
        ("stop_gradient", "BlockGrad"),
        ("_Maximum", "_maximum"),
        ("_MaximumScalar", "_maximum_scalar"),
        ("_HypotScalar", "_hypot_scalar"),
    ]:
        assert get_op(alias).name == name
