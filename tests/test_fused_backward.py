"""The fused elementwise backwards (``_backward_tanh`` and friends, ``symgrad.ops.elemwise.FUSED_BACKWARDS``).

Each evaluates a unary op's gradient rule on arrays in one instruction instead of building the rule's 2-4
nodes. These tests hold the fused instruction to the expansion it replaces (the same rule built from
separate symbols) in every float dtype, check the integer case and that a gradient graph holds one node per
op; the derivatives themselves are proved against finite differences by the operator table
(``tests/op_db_elemwise.py``: first and second order).
"""

import numpy as np
import pytest

import symgrad as sg
from symgrad.ops.elemwise import FUSED_BACKWARDS

# where each op is smooth and finite (default: (0.1, 0.9))
DOMAIN = {
    "arccosh": (1.1, 3.0),
    "erfinv": (-0.9, 0.9),
    "gamma": (0.5, 3.0),
    "gammaln": (0.5, 3.0),
    "_polygamma": (0.5, 3.0),
}
PARAMS = {"_polygamma": {"n": 1}, "hard_sigmoid": {"alpha": 0.7, "beta": 0.3}}
# float16: the fused rule and its expansion round the same operations, but a promoted rule (hard_sigmoid's
# comparison times alpha) rounds once where the expansion rounds twice
RTOL = {np.float16: 2e-3, np.float32: 2e-7, np.float64: 1e-15}


def _unary(name, x, **params):
    return getattr(sg.sym, name)(x, **params)


def _eval(sym, **arrays):
    exe = sym.bind(sg.cpu(), {k: v for k, v in arrays.items() if k in sym.list_arguments()}, grad_req="null")
    return exe.forward()[0]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("name", sorted(FUSED_BACKWARDS), ids=str)
def test_fused_backward_equals_the_rule_built_as_symbols(name, dtype):
    backward, rule, reads = FUSED_BACKWARDS[name]
    params = PARAMS.get(name, {})
    rng = np.random.default_rng(0)
    lo, hi = DOMAIN.get(name, (0.1, 0.9))
    xv = rng.uniform(lo, hi, (3, 5)).astype(dtype)
    gv = rng.standard_normal((3, 5)).astype(dtype)
    x, g = sg.sym.Variable("x"), sg.sym.Variable("g")
    y = _unary(name, x, **params)
    yv = _eval(y, x=xv)
    expansion = rule(sg.sym, x, y, g, **params)
    values = [x if r == "x" else sg.sym.Variable("y") for r in reads]
    fused = getattr(sg.sym, backward)(g, *values, **params)
    want = _eval(expansion, x=xv, g=gv)
    got = _eval(fused, x=xv, y=yv, g=gv)
    assert got.dtype == want.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=RTOL[dtype], atol=0)


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "sin", "exp"])
def test_gradient_of_an_integer_input_is_zero(name):
    # y = trunc(f(x)) is piecewise constant: dy/dx = 0 (MXNet's dtype rule keeps the integer dtype)
    x = sg.sym.Variable("x")
    y = _unary(name, x)
    xv = np.array([[1, 2, -3]], dtype=np.int32)
    grad = np.full_like(xv, 7)
    exe = y.bind(sg.cpu(), {"x": xv}, args_grad={"x": grad})
    exe.forward(is_train=True)
    exe.backward(np.array([[1, 5, -2]], dtype=np.int32))
    assert grad.dtype == np.int32
    assert np.array_equal(grad, np.zeros_like(xv))


def test_tanh_chain_gradient_is_one_node_per_tanh():
    # the chain benchmark's shape: before fusion tanh's gradient was square, rminus_scalar and mul
    x = sg.sym.Variable("x")
    y = x
    for _ in range(5):
        y = sg.sym.tanh(y) * 1.01
    (gx,) = sg.grad(sg.sym.sum(y), [x])
    ops = [n["op"] for n in gx.to_networkx().nodes.values() if n["op"].startswith("_backward")]
    assert ops.count("_backward_tanh") == 5
    assert "square" not in {n["op"] for n in gx.to_networkx().nodes.values()}


@pytest.mark.parametrize("act", ["tanh", "sigmoid", "softsign"])
def test_activation_uses_the_fused_backward_and_keeps_second_order(act):
    from symgrad.test_utils import check_numeric_gradient

    x = sg.sym.Variable("x")
    (gx,) = sg.grad(sg.sym.sum(sg.sym.Activation(x, act_type=act) ** 2), [x])
    assert f"_backward_{act}" in {n["op"] for n in gx.to_networkx().nodes.values()}
    xv = np.random.default_rng(1).uniform(-1.5, 1.5, (4, 3))
    # second order: the fused node differentiates through the rule it evaluates
    check_numeric_gradient(gx, [xv], dtype=np.float64)
