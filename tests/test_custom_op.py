"""Custom operators with MXNet's API: CustomOp / CustomOpProp / register / sym.Custom."""

import custom_softmax  # noqa: F401 - registers softmax_t, the tutorial's softmax loss
import numpy as np
import pytest
from custom_unary import register_unary

import symgrad as sg
import symgrad.test_utils as tu

S = sg.sym
mx = sg  # an MXNet custom op only changes its import


class Scale(mx.operator.CustomOp):
    """y = k * x^2 with k from the constructor (kwargs arrive as strings); also returns x + 1."""

    def __init__(self, k):
        super().__init__()
        self.k = k
        self.calls = 0

    def forward(self, is_train, req, in_data, out_data, aux):
        self.calls += 1
        x = in_data[0]
        self.assign(out_data[0], req[0], self.k * x * x)
        self.assign(out_data[1], req[1], x + 1)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x = in_data[0]
        self.assign(in_grad[0], req[0], out_grad[0] * 2 * self.k * x + out_grad[1])


@mx.operator.register("scale_sq")
class ScaleProp(mx.operator.CustomOpProp):
    def __init__(self, k="1.0"):
        super().__init__(need_top_grad=True)
        assert isinstance(k, str), "kwargs reach the prop as strings, as in MXNet"
        self.k = float(k)

    def list_outputs(self):
        return ["sq", "plus1"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0], in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        assert ctx == sg.cpu() and shapes == [[2, 3]]
        return Scale(self.k)


class Broken(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        raise RuntimeError("kaboom")


@mx.operator.register("broken_t")
class BrokenProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return Broken()


class Counter(mx.operator.CustomOp):
    """Counts forward calls in an auxiliary state (aux arrays are writable in place)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        aux[0][...] += 1
        self.assign(out_data[0], req[0], in_data[0] * aux[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * aux[0])


@mx.operator.register("counter_t")
class CounterProp(mx.operator.CustomOpProp):
    def list_auxiliary_states(self):
        return ["count"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], [in_shape[0]]

    def create_operator(self, ctx, shapes, dtypes):
        return Counter()


def test_mxnet_tutorial_softmax_runs_unchanged():
    data = S.Variable("data")
    net = S.Custom(data, op_type="softmax_t", name="sm")
    assert net.list_arguments() == ["data", "sm_label"]
    assert net.list_outputs() == ["sm_output"]
    x = np.random.default_rng(0).standard_normal((4, 3))
    lab = np.array([0, 2, 1, 1], np.float64)
    g = np.full_like(x, 3.0)
    exe = net.bind(sg.cpu(), {"data": x, "sm_label": lab}, args_grad={"data": g}, grad_req={"data": "add"})
    p = exe.forward(is_train=True)[0]
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(p, e / e.sum(1, keepdims=True))
    assert type(p) is np.ndarray
    exe.backward()  # need_top_grad=False: a loss head, no out_grads needed
    np.testing.assert_allclose(g, 3.0 + p - np.eye(3)[lab.astype(int)])


@pytest.mark.parametrize("req", ["write", "add", "null"])
def test_custom_op_gradients_with_every_grad_req(req):
    x = S.Variable("x")
    net = S.Custom(x, op_type="scale_sq", k=2.5, name="sc")
    assert net.list_outputs() == ["sc_sq", "sc_plus1"]
    assert net.attr("k") == "2.5"
    xv = np.random.default_rng(1).standard_normal((2, 3))
    start = np.random.default_rng(2).standard_normal((2, 3))
    gx = start.copy()
    exe = net.bind(sg.cpu(), {"x": xv}, args_grad={"x": gx}, grad_req=req)
    sq, p1 = exe.forward(is_train=True)
    np.testing.assert_allclose(sq, 2.5 * xv**2)
    np.testing.assert_allclose(p1, xv + 1)
    h0, h1 = np.ones((2, 3)), np.full((2, 3), 0.5)
    exe.backward([h0, h1])
    want = h0 * 5.0 * xv + h1
    expected = {"write": want, "add": start + want, "null": start}[req]
    np.testing.assert_allclose(gx, expected)
    # against central finite differences of the forward (xv is bound by reference: perturb a copy)
    x0 = xv.copy()
    num = np.zeros_like(xv)
    for i in np.ndindex(xv.shape):
        d = np.zeros_like(xv)
        d[i] = 1e-6
        fp = sum((o * h).sum() for o, h in zip(exe.forward(x=x0 + d), (h0, h1)))
        fm = sum((o * h).sum() for o, h in zip(exe.forward(x=x0 - d), (h0, h1)))
        num[i] = (fp - fm) / 2e-6
    np.testing.assert_allclose(h0 * 5.0 * x0 + h1, num, rtol=1e-6)


def test_custom_op_inside_a_larger_graph_and_through_sg_grad():
    x = S.Variable("x")
    y = S.tanh(S.Custom(x * 2.0, op_type="scale_sq", k="1.5")[0])
    (gx,) = sg.grad(S.sum(y), [x])
    xv = np.random.default_rng(3).standard_normal((2, 3))
    got = gx.bind(sg.cpu(), {"x": xv}).forward(is_train=True)[0]
    u = 2 * xv
    np.testing.assert_allclose(got, (1 - np.tanh(1.5 * u * u) ** 2) * 3.0 * u * 2.0)


def test_auxiliary_states_of_custom_ops():
    x = S.Variable("x")
    net = S.Custom(x, op_type="counter_t", name="c")
    assert net.list_auxiliary_states() == ["c_count"]
    exe = net.simple_bind(sg.cpu(), x=(3,))
    exe.arg_dict["x"][:] = 2.0
    exe.forward(is_train=True)
    out = exe.forward(is_train=True)[0]
    np.testing.assert_allclose(exe.aux_dict["c_count"], 2.0)
    np.testing.assert_allclose(out, 4.0)
    exe.backward(np.ones(3, np.float32))
    np.testing.assert_allclose(exe.grad_dict["x"], 2.0)


def test_errors_inside_a_custom_op_name_it():
    x = S.Variable("x")
    exe = S.Custom(x, op_type="broken_t", name="bad").simple_bind(sg.cpu(), x=(2,))
    with pytest.raises(RuntimeError, match=r"Custom 'bad' \(op_type 'broken_t'\).*forward.*kaboom"):
        exe.forward()


def test_unregistered_op_type_and_second_order():
    x = S.Variable("x")
    with pytest.raises(ValueError, match="'nope' is not registered"):
        S.Custom(x, op_type="nope")
    (g,) = sg.grad(S.sum(S.Custom(x, op_type="scale_sq", k=1.0)[0]), [x])
    with pytest.raises(ValueError, match="_backward_Custom.*second-order"):
        sg.grad(S.sum(g), [x])


# -- grad_req and the gradient buffer as MXNet hands them to CustomOp.backward ------------------------------------


class _Doubling(mx.operator.CustomOp):
    """y = 2x; ``backward`` writes ``in_grad`` the way ``how`` says and records what it was handed."""

    seen = []

    def __init__(self, how):
        self.how = how

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * 2)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        _Doubling.seen.append((req[0], np.array(in_grad[0], copy=True)))
        g = out_grad[0] * 2
        if self.how == "assign":  # honours req, as MXNet's ops must
            self.assign(in_grad[0], req[0], g)
        elif self.how == "overwrite":  # ignores req='add'
            in_grad[0][:] = g
        elif self.how == "accumulate":  # reads the buffer it should overwrite under 'write'
            in_grad[0][:] += g
        elif self.how == "raise":
            in_grad[0][:] = 99.0
            raise RuntimeError("backward failed after writing in_grad")


for _how in ("assign", "overwrite", "accumulate", "raise"):
    register_unary(f"doubling_{_how}", lambda how=_how: _Doubling(how))


def _doubling(how):
    return S.Custom(S.Variable("x"), op_type=f"doubling_{how}", name="d")


@pytest.mark.parametrize("req", ["write", "add"])
def test_custom_op_gets_the_arguments_grad_req_and_its_dirty_buffer(req):
    # an argument's gradient computed by one custom op alone: the op gets MXNet's req and the buffer as the
    # caller left it (not a zeroed temporary), and the caller's array ends as req says
    x, buf = np.arange(6.0).reshape(2, 3), np.full((2, 3), 5.0)
    exe = _doubling("assign").bind(sg.cpu(), {"x": x}, args_grad={"x": buf}, grad_req=req)
    exe.forward(is_train=True)
    _Doubling.seen.clear()
    exe.backward([np.ones((2, 3))])
    ((got_req, handed),) = _Doubling.seen
    assert got_req == req
    np.testing.assert_array_equal(handed, np.full((2, 3), 5.0))
    np.testing.assert_array_equal(buf, np.full((2, 3), 2.0 + (5.0 if req == "add" else 0.0)))


def test_custom_op_whose_gradient_is_summed_writes_a_fresh_buffer():
    # x feeds the custom op and a plain op: the contributions are summed by the executor, so the op writes a
    # zeroed temporary with req 'write' and the executor applies the argument's 'add'
    x = S.Variable("x")
    sym = S.Custom(x, op_type="doubling_assign", name="d") + 3 * x
    buf = np.full((2, 3), 1.0)
    exe = sym.bind(sg.cpu(), {"x": np.ones((2, 3))}, args_grad={"x": buf}, grad_req="add")
    exe.forward(is_train=True)
    _Doubling.seen.clear()
    exe.backward([np.ones((2, 3))])
    ((got_req, handed),) = _Doubling.seen
    assert got_req == "write" and not handed.any()
    np.testing.assert_array_equal(buf, np.full((2, 3), 1.0 + 2.0 + 3.0))


@pytest.mark.parametrize("how, req", [("overwrite", "add"), ("accumulate", "write")])
def test_check_symbolic_backward_catches_an_op_that_ignores_req(how, req):
    # the two shipped MXNet custom-op bugs: '=' where req is 'add', '+=' into a buffer that is not zero
    x = np.random.default_rng(0).random((2, 3))
    tu.check_symbolic_backward(
        _doubling("assign"), {"x": x}, [np.ones((2, 3))], {"x": np.full((2, 3), 2.0)}, grad_req=req, dtype=np.float64
    )
    with pytest.raises(tu.GradientCheckError, match=f"grad_req '{req}'"):
        tu.check_symbolic_backward(
            _doubling(how), {"x": x}, [np.ones((2, 3))], {"x": np.full((2, 3), 2.0)}, grad_req=req, dtype=np.float64
        )


def test_a_custom_backward_that_raises_leaves_the_callers_buffer_alone():
    buf = np.full((2, 3), 7.0)
    exe = _doubling("raise").bind(sg.cpu(), {"x": np.ones((2, 3))}, args_grad={"x": buf}, grad_req="add")
    exe.forward(is_train=True)
    with pytest.raises(RuntimeError, match="backward failed"):
        exe.backward([np.ones((2, 3))])
    np.testing.assert_array_equal(buf, np.full((2, 3), 7.0))
