"""Symbolic gradients of the core operators, proven against the tests' own finite-difference oracle
(``fd_oracle``, plain numpy), plus ``sg.grad`` semantics and second derivatives.

The op table (``test_ops.py``) proves every op with ``check_numeric_gradient``; the rows here prove the core
ops once more without symgrad's checkers, so a checker bug that let a wrong gradient pass there fails here."""

import numpy as np
import pytest
from fd_oracle import central_gradient

import symgrad as sg

S = sg.sym


def _check(sym, values, wrt=None, rtol=1e-6, atol=1e-8):
    """Gradient of sum(out_k * h_k) from the executor vs finite differences of the forward."""
    rng = np.random.default_rng(0)
    names = sym.list_arguments()
    wrt = wrt or names
    exe = sym.bind(
        sg.cpu(), dict(values), args_grad={n: np.zeros_like(values[n]) for n in wrt}, grad_req={n: "write" for n in wrt}
    )
    outs = exe.forward(is_train=True)
    heads = [rng.standard_normal(o.shape) for o in outs]
    exe.backward(heads)
    for n in wrt:

        def f(v, n=n):
            vals = dict(values)
            vals[n] = v
            o = sym.bind(sg.cpu(), vals).forward(is_train=True)
            return sum(float((a * h).sum()) for a, h in zip(o, heads))

        np.testing.assert_allclose(exe.grad_dict[n], central_gradient(f, values[n]), rtol=rtol, atol=atol, err_msg=n)
    return list(wrt)


def _rand(*shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


a, b = S.Variable("a"), S.Variable("b")

UNARY = [
    ("negative", S.negative, -1, 1),
    ("exp", S.exp, -1, 1),
    ("log", S.log, 0.5, 2),
    ("tanh", S.tanh, -1, 1),
    ("sigmoid", S.sigmoid, -3, 3),
    ("relu", S.relu, 0.1, 1),  # away from the kink
    ("relu_neg", S.relu, -1, -0.1),
    ("square", S.square, -1, 1),
    ("sqrt", S.sqrt, 0.5, 2),
    ("abs", S.abs, 0.2, 1),
    ("softrelu", lambda x: S.Activation(x, act_type="softrelu"), -2, 2),
    ("softsign", lambda x: S.Activation(x, act_type="softsign"), 0.1, 2),
    ("act_sigmoid", lambda x: S.Activation(x, act_type="sigmoid"), -2, 2),
    ("act_tanh", lambda x: S.Activation(x, act_type="tanh"), -2, 2),
    ("act_relu", lambda x: S.Activation(x, act_type="relu"), 0.1, 2),
    ("plus_scalar", lambda x: x + 2.5, -1, 1),
    ("rminus_scalar", lambda x: 2.5 - x, -1, 1),
    ("mul_scalar", lambda x: x * 3.0, -1, 1),
    ("div_scalar", lambda x: x / 3.0, -1, 1),
    ("rdiv_scalar", lambda x: 3.0 / x, 0.5, 2),
    ("power_scalar", lambda x: x**3.0, -1, 1),
    ("rpower_scalar", lambda x: 2.0**x, -1, 1),
    ("sum_all", S.sum, -1, 1),
    ("sum_axis", lambda x: S.sum(x, axis=1), -1, 1),
    ("sum_keepdims_exclude", lambda x: S.sum(x, axis=(0, 2), keepdims=True, exclude=True), -1, 1),
    ("mean_axis", lambda x: S.mean(x, axis=(0, 2)), -1, 1),
    ("reshape", lambda x: S.Reshape(x, shape=(-1, 0), reverse=True), -1, 1),
    ("flatten", S.Flatten, -1, 1),
    ("expand_dims", lambda x: S.expand_dims(x, axis=1), -1, 1),
    ("slicechannel", lambda x: S.SliceChannel(x, num_outputs=3, axis=2), -1, 1),
]


@pytest.mark.parametrize("name, fn, lo, hi", UNARY, ids=[u[0] for u in UNARY])
def test_unary_gradients_match_finite_differences(name, fn, lo, hi):
    assert _check(fn(a), {"a": _rand(2, 3, 3, lo=lo, hi=hi)}) == ["a"]  # a mismatch fails inside _check


BINARY = [
    ("elemwise_add", S.elemwise_add, (2, 3), (2, 3)),
    ("elemwise_sub", S.elemwise_sub, (2, 3), (2, 3)),
    ("elemwise_mul", S.elemwise_mul, (2, 3), (2, 3)),
    ("elemwise_div", S.elemwise_div, (2, 3), (2, 3)),
    ("broadcast_add", S.broadcast_add, (2, 3), (1, 3)),
    ("broadcast_sub", S.broadcast_sub, (2, 1, 3), (4, 1)),
    ("broadcast_mul", S.broadcast_mul, (3,), (2, 3)),
    ("broadcast_div", S.broadcast_div, (2, 3), (2, 1)),
    ("dot_2d", S.dot, (2, 3), (3, 4)),
    ("dot_ta", lambda x, y: S.dot(x, y, transpose_a=True), (3, 2), (3, 4)),
    ("dot_tb", lambda x, y: S.dot(x, y, transpose_b=True), (2, 3), (4, 3)),
    ("dot_tab", lambda x, y: S.dot(x, y, transpose_a=True, transpose_b=True), (3, 2), (4, 3)),
    ("dot_1d", S.dot, (3,), (3,)),
    ("dot_nd", S.dot, (2, 2, 3), (3, 2, 2)),
    ("dot_nd_ta", lambda x, y: S.dot(x, y, transpose_a=True), (3, 2, 2), (3, 4)),
    ("power", lambda x, y: x**y, (2, 3), (2, 3)),
    ("concat", lambda x, y: S.Concat(x, y, dim=1), (2, 3), (2, 2)),
]


@pytest.mark.parametrize("name, fn, sa, sb", BINARY, ids=[b_[0] for b_ in BINARY])
def test_binary_gradients_match_finite_differences(name, fn, sa, sb):
    lo = 0.5 if name in ("power", "elemwise_div", "broadcast_div") else -1.0
    checked = _check(fn(a, b), {"a": _rand(*sa, lo=lo, hi=1.5, seed=1), "b": _rand(*sb, lo=lo, hi=1.5, seed=2)})
    assert checked == ["a", "b"]  # a mismatch fails inside _check


@pytest.mark.parametrize("flatten", [True, False])
@pytest.mark.parametrize("no_bias", [True, False])
def test_fully_connected_gradients(flatten, no_bias):
    x = S.Variable("x")
    fc = S.FullyConnected(x, num_hidden=3, flatten=flatten, no_bias=no_bias, name="fc")
    d = 6 if flatten else 3
    values = {"x": _rand(2, 2, 3), "fc_weight": _rand(3, d, seed=1)}
    if not no_bias:
        values["fc_bias"] = _rand(3, seed=2)
    assert sorted(_check(fc, values)) == sorted(values)  # a mismatch fails inside _check


def test_softmax_output_gradient_is_cross_entropy():
    # d/d data of -sum log softmax(data)[label] is softmax - onehot: compare with finite differences
    d = S.Variable("data")
    x = _rand(4, 5, seed=3)
    lab = np.array([1, 0, 4, 2], np.float64)
    exe = S.SoftmaxOutput(d, name="sm").bind(
        sg.cpu(), {"data": x, "sm_label": lab}, args_grad={"data": np.zeros_like(x)}, grad_req={"data": "write"}
    )
    exe.forward(is_train=True)
    exe.backward()

    def xent(v):
        z = v - v.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        return -float(logp[np.arange(4), lab.astype(int)].sum())

    np.testing.assert_allclose(exe.grad_dict["data"], central_gradient(xent, x), rtol=1e-6, atol=1e-9)


def test_grad_defaults_match_chainer_semantics():
    x, y = S.Variable("x"), S.Variable("y")
    f = x * y + S.exp(x)
    xv, yv = _rand(3, seed=4), _rand(3, seed=5)
    gx, gy = sg.grad(f, [x, y])  # grad_outputs default to ones
    out = S.Group([gx, gy]).bind(sg.cpu(), {"x": xv, "y": yv}).forward()
    np.testing.assert_allclose(out[0], yv + np.exp(xv))
    np.testing.assert_allclose(out[1], xv)
    # explicit grad_outputs, grad_inputs added, loss_scale multiplies then divides back
    h, extra = S.Variable("h"), S.Variable("extra")
    gx2, gy2 = sg.grad([f], [x, y], grad_outputs=[h], grad_inputs=[extra, None], loss_scale=8.0)
    hv, ev = _rand(3, seed=6), _rand(3, seed=7)
    vals = {"x": xv, "y": yv, "h": hv, "extra": ev}
    o = S.Group([gx2, gy2]).bind(sg.cpu(), {k: vals[k] for k in S.Group([gx2, gy2]).list_arguments()}).forward()
    np.testing.assert_allclose(o[0], hv * (yv + np.exp(xv)) + ev)
    np.testing.assert_allclose(o[1], hv * xv)
    # an input with no path to the output gets None (or just its grad_input)
    z = S.Variable("z")
    assert sg.grad(f, [z]) == [None]
    assert sg.grad(f, [z], grad_inputs=[extra])[0] is extra


@pytest.mark.parametrize(
    "name, make, lo, hi",
    [
        ("tanh", S.tanh, -1, 1),
        ("sigmoid", S.sigmoid, -2, 2),
        ("exp", S.exp, -1, 1),
        ("log", S.log, 0.5, 2),
        ("sqrt", S.sqrt, 0.5, 2),
        ("square", S.square, -1, 1),
        ("rdiv", lambda x: 2.0 / x, 0.5, 2),
        ("power_scalar", lambda x: x**3.0, 0.5, 2),
        ("softrelu", lambda x: S.Activation(x, act_type="softrelu"), -2, 2),
        ("mean", lambda x: S.mean(x * x, axis=1), -1, 1),
        ("fc", lambda x: S.FullyConnected(S.tanh(x), num_hidden=2, name="fc"), -1, 1),
        ("dot_nd", lambda x: S.dot(x * x, x, transpose_b=True), -1, 1),
    ],
)
def test_second_derivatives_match_finite_differences_of_the_first(name, make, lo, hi):
    x = S.Variable("x")
    y = make(x)
    xv = _rand(2, 3, lo=lo, hi=hi, seed=8)
    extra = {n: _rand(*s, seed=9) for n, s in zip(y.list_arguments(), y.infer_shape(x=xv.shape)[0]) if n != "x"}
    (g,) = sg.grad(S.sum(y), [x])
    (gg,) = sg.grad(S.sum(g * g), [x])  # d/dx sum(g^2) = 2 g g'
    exe = gg.bind(sg.cpu(), {"x": xv, **{k: v for k, v in extra.items() if k in gg.list_arguments()}})
    got = exe.forward()[0]

    def f(v):
        vals = {"x": v, **{k: w for k, w in extra.items() if k in g.list_arguments()}}
        return float((g.bind(sg.cpu(), vals).forward()[0] ** 2).sum())

    np.testing.assert_allclose(got, central_gradient(f, xv), rtol=1e-5, atol=1e-7)


def test_third_derivative():
    x = S.Variable("x")
    g1 = sg.grad(S.sum(x**4.0), [x])[0]
    g2 = sg.grad(S.sum(g1), [x])[0]
    g3 = sg.grad(S.sum(g2), [x])[0]  # 24 x
    xv = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(g3.bind(sg.cpu(), {"x": xv}).forward()[0], 24 * xv)


def test_second_order_through_fused_backward_is_a_clear_error():
    x = S.Variable("x")
    (g,) = sg.grad(S.sum(S.BatchNorm(x, name="bn") * x), [x])
    with pytest.raises(ValueError, match="_backward_BatchNorm.*not defined|not defined.*_backward_BatchNorm"):
        sg.grad(S.sum(g), [x])
    (gs,) = sg.grad(S.SoftmaxOutput(x, name="sm"), [x])
    with pytest.raises(ValueError, match="_backward_SoftmaxOutput"):
        sg.grad(S.sum(gs * x), [x])


def test_gradient_nodes_do_not_consume_user_auto_names():
    with sg.NameManager():
        x = S.Variable("x")
        a = S.tanh(x)
        sg.grad(S.sum(a * a), [x])
        a.simple_bind(sg.cpu(), x=(2,))
        b = S.tanh(x)
    assert (a.name, b.name) == ("tanh0", "tanh1")


def test_loss_scale_keeps_small_float16_gradients_alive():
    # f = sum(((x * 1e4) * 1e-4) * 1e-4), df/dx = 1e-4; going backward in float16 the head gradient
    # is multiplied by 1e-4 twice first: 1e-8 underflows to 0, unless loss_scale lifts it
    x = S.Variable("x")
    f = S.sum(((x * 1e4) * 1e-4) * 1e-4)
    xv = np.array([0.5, 1.0, 2.0], np.float16)
    (plain,) = sg.grad(f, [x])
    (scaled,) = sg.grad(f, [x], loss_scale=1024.0)
    np.testing.assert_array_equal(plain.bind(sg.cpu(), {"x": xv}).forward()[0], 0.0)
    got = scaled.bind(sg.cpu(), {"x": xv}).forward()[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), 1e-4, rtol=1e-2)


def test_loss_scale_applies_to_loss_heads_and_grad_inputs_are_added_unscaled():
    # SoftmaxOutput ignores its head gradient, so the scale must reach what it emits: the result
    # is still softmax - onehot, not divided by loss_scale; grad_inputs are added after the division
    d, extra = S.Variable("data"), S.Variable("extra")
    sm = S.SoftmaxOutput(d, name="sm")
    x = _rand(3, 4, seed=10)
    lab = np.array([3, 0, 1], np.float64)
    ev = _rand(3, 4, seed=11)
    (g,) = sg.grad(sm, [d], grad_inputs=[extra], loss_scale=16.0)
    got = g.bind(sg.cpu(), {"data": x, "sm_label": lab, "extra": ev}).forward()[0]
    e = np.exp(x - x.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(got, p - np.eye(4)[lab.astype(int)] + ev, rtol=1e-12, atol=1e-15)
    # the same through MakeLoss(sum(x^2)) inside a larger graph: d/dx = 2x
    y = S.Variable("y")
    (gy,) = sg.grad(S.Group([S.MakeLoss(S.sum(y * y)), y * 3.0]), [y], loss_scale=4.0)
    yv = _rand(5, seed=12)
    np.testing.assert_allclose(gy.bind(sg.cpu(), {"y": yv}).forward()[0], 2 * yv + 3.0, rtol=1e-12)


def test_grad_of_several_outputs_sums_their_contributions():
    x = S.Variable("x")
    outs = [S.sum(S.exp(x)), x * x]  # ones for each: exp(x) + 2x
    xv = _rand(4, seed=13)
    (g,) = sg.grad(outs, [x])
    np.testing.assert_allclose(g.bind(sg.cpu(), {"x": xv}).forward()[0], np.exp(xv) + 2 * xv, rtol=1e-12)
    with pytest.raises(ValueError, match="1 grad_outputs for 2 outputs"):
        sg.grad(outs, [x], grad_outputs=[None])
    with pytest.raises(TypeError, match="inputs must be Variables"):
        sg.grad(outs, [x * 2.0])
