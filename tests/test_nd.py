"""``sg.nd``: MXNet's array-creation functions for custom-op code, and MXNet's custom-op examples run with only
the import changed (docs/python_docs/python/tutorials/extend/customop.md, example/numpy-ops/custom_softmax.py).
"""

import sys

import custom_softmax  # noqa: F401 - registers softmax_t
import numpy as np
import pytest

import symgrad as sg
from symgrad.nd import HostArray
from symgrad.test_utils import check_numeric_gradient

mx = sg  # the examples below are MXNet's, with ``import mxnet as mx`` changed to ``import symgrad as mx``


# -- the creation functions ----------------------------------------------------------------------------


def test_creation_functions_give_mxnets_dtypes_and_values():
    cases = {
        "zeros": (sg.nd.zeros((2, 3)), np.zeros((2, 3))),
        "ones": (sg.nd.ones(4), np.ones(4)),
        "full": (sg.nd.full((2,), 2.5), np.array([2.5, 2.5])),
        "arange": (sg.nd.arange(1, 2.5, 0.5), np.array([1.0, 1.5, 2.0])),
        "arange repeat": (sg.nd.arange(3, repeat=2), np.array([0.0, 0, 1, 1, 2, 2])),
        "linspace": (sg.nd.linspace(0, 1, 5), np.array([0, 0.25, 0.5, 0.75, 1.0])),
        "eye": (sg.nd.eye(2, 3, 1), np.array([[0.0, 1, 0], [0, 0, 1]])),
        "eye square": (sg.nd.eye(2), np.array([[1.0, 0], [0, 1]])),
    }
    for what, (got, want) in cases.items():
        assert type(got) is HostArray and got.dtype == np.float32, what  # MXNet's default: float32
        np.testing.assert_array_equal(got, want, err_msg=what)
    assert sg.nd.empty((3, 0)).shape == (3, 0) and sg.nd.empty(2).dtype == np.float32
    assert sg.nd.zeros(3, dtype="float64").dtype == np.float64 and sg.nd.ones(2, dtype=np.int32).dtype == np.int32
    like = sg.nd.ones_like(np.zeros((2, 2), np.float16))
    assert like.dtype == np.float16 and like.tolist() == [[1, 1], [1, 1]]
    assert sg.nd.zeros_like(sg.nd.ones(3, dtype="int64")).tolist() == [0, 0, 0]
    assert sg.nd.waitall() is None


def test_array_dtypes_follow_mxnet_except_float_arrays_keep_theirs():
    assert sg.nd.array([1, 2, 3]).dtype == np.float32  # MXNet: a list -> float32
    assert sg.nd.array(np.arange(3)).dtype == np.float32  # MXNet: a numpy int array -> float32
    assert sg.nd.array(7).shape == () and sg.nd.array(7).dtype == np.float32
    # deliberately different: a numpy float array keeps its dtype (MXNet: float32), so float64 stays exact
    x = np.array([0.1, 1 / 3])
    y = sg.nd.array(x)
    assert y.dtype == np.float64 and y.tolist() == x.tolist()
    assert sg.nd.array(x, dtype="float16").dtype == np.float16
    # the array of a device (a custom op's input) keeps its dtype, as an NDArray's does in MXNet
    assert sg.nd.array(np.arange(3).view(HostArray)).dtype == np.int64
    y[0] = 5.0
    assert x[0] == 0.1  # a copy


def test_host_arrays_answer_the_ndarray_methods_custom_ops_use():
    a = sg.nd.array([[1.5, 2.0]])
    assert a.context == a.ctx == sg.cpu() and a.stype == "default"
    plain = a.asnumpy()
    assert type(plain) is np.ndarray and plain.tolist() == [[1.5, 2.0]]
    plain[0, 0] = 9
    assert a[0, 0] == 1.5  # asnumpy() is a copy
    assert sg.nd.array([4.0]).asscalar() == 4.0
    assert a.wait_to_read() is None
    with pytest.raises(ValueError, match="2 elements"):
        a.asscalar()


def test_creation_errors_name_the_function_and_the_value():
    with pytest.raises(ValueError, match=r"nd.zeros: shape .* got \(2, -1\)"):
        sg.nd.zeros((2, -1))
    with pytest.raises(ValueError, match="nd.ones: shape"):
        sg.nd.ones("3")
    with pytest.raises(TypeError, match="nd.zeros: dtype 'floaty' is not a numpy dtype"):
        sg.nd.zeros(2, dtype="floaty")
    with pytest.raises(TypeError, match="nd.array: ctx must be a Context"):
        sg.nd.array([1], ctx="gpu0")
    with pytest.raises(NotImplementedError, match="'csr'"):
        sg.nd.zeros(2, stype="csr")
    with pytest.raises(ValueError, match="step must not be 0"):
        sg.nd.arange(0, 3, 0)
    with pytest.raises(ValueError, match="cannot make a float32 array"):
        sg.nd.array([[1, 2], [3]])
    with pytest.raises(TypeError, match="nd.zeros_like: expected a numpy or CuPy array"):
        sg.nd.zeros_like([1, 2])


def test_arrays_go_to_the_current_context(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError: no GPU needed to see where
    with sg.gpu(0):
        with pytest.raises(ImportError, match=r"gpu\(0\) needs CuPy"):
            sg.nd.array([1.0])
    with pytest.raises(ImportError, match=r"gpu\(1\) needs CuPy"):
        sg.nd.zeros(2, ctx=sg.gpu(1))
    assert type(sg.nd.ones(2)) is HostArray  # outside the block: cpu again


# -- MXNet's custom-op docs: the Sigmoid and Dense operators, unchanged -------------------------------------


class Sigmoid(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0].asnumpy()
        y = 1.0 / (1.0 + np.exp(-x))
        self.assign(out_data[0], req[0], mx.nd.array(y))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        y = out_data[0].asnumpy()
        dy = out_grad[0].asnumpy()
        dx = dy * (1.0 - y) * y
        self.assign(in_grad[0], req[0], mx.nd.array(dx))


@mx.operator.register("nd_docs_sigmoid")
class SigmoidProp(mx.operator.CustomOpProp):
    def __init__(self):
        super(SigmoidProp, self).__init__(True)  # noqa: UP008 - the docs' spelling

    def list_arguments(self):
        return ["data"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shapes):
        data_shape = in_shapes[0]
        output_shape = data_shape
        return (data_shape,), (output_shape,), ()

    def create_operator(self, ctx, in_shapes, in_dtypes):
        return Sigmoid()


class Dense(mx.operator.CustomOp):
    def __init__(self, bias):
        self._bias = bias

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0].asnumpy()
        weight = in_data[1].asnumpy()
        y = x.dot(weight.T) + self._bias
        self.assign(out_data[0], req[0], mx.nd.array(y))


@mx.operator.register("nd_docs_dense")
class DenseProp(mx.operator.CustomOpProp):
    def __init__(self, bias):
        super(DenseProp, self).__init__(True)  # noqa: UP008 - the docs' spelling
        self._bias = float(bias)

    def list_arguments(self):
        return ["data", "weight"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shapes):
        data_shape = in_shapes[0]
        weight_shape = in_shapes[1]
        output_shape = (data_shape[0], weight_shape[0])
        return (data_shape, weight_shape), (output_shape,), ()

    def create_operator(self, ctx, in_shapes, in_dtypes):
        return Dense(self._bias)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_docs_sigmoid_forward_backward_and_gradient(dtype):
    x = np.array([0.0, 1.0, 2.0, 3.0], dtype)
    net = mx.sym.Custom(mx.sym.Variable("x"), op_type="nd_docs_sigmoid")
    grad = np.zeros_like(x)
    exe = net.bind(mx.cpu(), {"x": x}, args_grad={"x": grad})
    (y,) = exe.forward(is_train=True)
    want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    assert y.dtype == dtype
    np.testing.assert_allclose(y, want, rtol=1e-6 if dtype == np.float32 else 1e-15)
    exe.backward(np.ones_like(x))
    np.testing.assert_allclose(grad, want * (1 - want), rtol=1e-6 if dtype == np.float32 else 1e-14)
    if dtype == np.float64:  # float64 all the way through sg.nd.array: finite differences agree closely
        check_numeric_gradient(net, {"x": np.random.default_rng(0).standard_normal((3, 4))}, rtol=1e-6, atol=1e-9)


def test_docs_dense_forward_with_a_string_parameter():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    net = mx.sym.Custom(mx.sym.Variable("x"), mx.sym.Variable("w"), bias=0.1, op_type="nd_docs_dense")
    assert net.infer_shape(x=(4, 3), w=(5, 3))[1] == [(4, 5)]
    (y,) = net.bind(mx.cpu(), {"x": x, "w": w}).forward()
    np.testing.assert_allclose(y, x @ w.T + 0.1, rtol=1e-13)


# -- example/numpy-ops/custom_softmax.py's operator (tests/custom_softmax.py, registered as softmax_t) ---------


def test_example_custom_softmax_in_an_mlp():
    # the example's MLP (its mx.symbol is mx.sym here: symgrad.symbol is the module of the Symbol class)
    data = mx.sym.Variable("data")
    fc1 = mx.sym.FullyConnected(data=data, name="fc1", num_hidden=6)
    act1 = mx.sym.Activation(data=fc1, name="relu1", act_type="relu")
    fc3 = mx.sym.FullyConnected(data=act1, name="fc3", num_hidden=3)
    mlp = mx.sym.Custom(data=fc3, name="softmax", op_type="softmax_t")
    assert mlp.list_arguments() == ["data", "fc1_weight", "fc1_bias", "fc3_weight", "fc3_bias", "softmax_label"]
    rng = np.random.default_rng(2)
    shapes = dict(zip(mlp.list_arguments(), mlp.infer_shape(data=(5, 4))[0]))
    args = {n: rng.standard_normal(s) for n, s in shapes.items()}
    args["softmax_label"] = np.array([0.0, 2, 1, 1, 0])
    grads = {n: np.zeros(s) for n, s in shapes.items() if n != "softmax_label"}
    exe = mlp.bind(mx.cpu(), args, args_grad=grads)
    (p,) = exe.forward(is_train=True)
    # independent numpy: the MLP, softmax, and the gradient of cross entropy at the logits (p - onehot)
    h = np.maximum(args["data"] @ args["fc1_weight"].T + args["fc1_bias"], 0)
    z = h @ args["fc3_weight"].T + args["fc3_bias"]
    e = np.exp(z - z.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(p, want, rtol=1e-13)
    exe.backward()  # need_top_grad=False: a loss head
    dz = want - np.eye(3)[args["softmax_label"].astype(int)]
    np.testing.assert_allclose(grads["fc3_bias"], dz.sum(0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(grads["fc3_weight"], dz.T @ h, rtol=1e-12, atol=1e-14)


# -- on a GPU: CuPy arrays, and host arrays assigned into device buffers ----------------------------------------


class _Twice(mx.operator.CustomOp):
    """MXNet's pattern on a GPU: compute on the host, hand back ``mx.nd.array`` (made on the default cpu)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        assert in_data[0].context == mx.gpu(0) and in_data[0].stype == "default"
        self.assign(out_data[0], req[0], mx.nd.array(in_data[0].asnumpy() * 2.0))  # MXNet's spelling

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], mx.nd.full(in_grad[0].shape, 2.0, ctx=mx.gpu(0), dtype=in_grad[0].dtype))


@mx.operator.register("nd_twice")
class _TwiceProp(mx.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return _Twice()


@pytest.mark.gpu
def test_nd_on_a_gpu_and_custom_ops_assigning_host_arrays():
    cupy = pytest.importorskip("cupy", reason="no GPU / CuPy: CuPy is not installed (the gpu marker skips first)")
    with sg.gpu(0):
        a = sg.nd.array([1.0, 2.0])
        z = sg.nd.zeros((2, 2), dtype="float64")
        r = sg.nd.arange(4)
    assert isinstance(a, cupy.ndarray) and a.device.id == 0 and a.dtype == np.float32
    assert z.dtype == np.float64 and cupy.asnumpy(z).tolist() == [[0, 0], [0, 0]]
    assert cupy.asnumpy(r).tolist() == [0, 1, 2, 3]
    assert isinstance(sg.nd.ones_like(z), cupy.ndarray)
    back = sg.nd.array(a)  # a device array, made on the current (cpu) context
    assert type(back) is HostArray and back.dtype == np.float32 and back.tolist() == [1.0, 2.0]
    x = np.array([[0.5, -1.0, 3.0]])
    net = mx.sym.Custom(mx.sym.Variable("x"), op_type="nd_twice")
    g = cupy.zeros((1, 3))
    exe = net.bind(sg.gpu(0), {"x": cupy.asarray(x)}, args_grad={"x": g})
    (y,) = exe.forward(is_train=True)
    exe.backward(cupy.ones((1, 3)))
    np.testing.assert_array_equal(cupy.asnumpy(y), 2 * x)
    np.testing.assert_array_equal(cupy.asnumpy(g), np.full((1, 3), 2.0))


@pytest.mark.gpu
def test_docs_sigmoid_runs_unchanged_on_a_gpu():
    """The docs' Sigmoid calls ``in_data[0].asnumpy()``: on a gpu its arrays are CuPy arrays that answer it."""
    cupy = pytest.importorskip("cupy", reason="no GPU / CuPy: CuPy is not installed (the gpu marker skips first)")
    x = np.array([0.0, 1.0, -2.0, 3.0])
    net = mx.sym.Custom(mx.sym.Variable("x"), op_type="nd_docs_sigmoid")
    grad = cupy.zeros(4)
    exe = net.bind(mx.gpu(0), {"x": cupy.asarray(x)}, args_grad={"x": grad})
    (y,) = exe.forward(is_train=True)
    exe.backward(cupy.ones(4))
    want = 1.0 / (1.0 + np.exp(-x))
    np.testing.assert_allclose(cupy.asnumpy(y), want, rtol=1e-15)
    np.testing.assert_allclose(cupy.asnumpy(grad), want * (1 - want), rtol=1e-14)
