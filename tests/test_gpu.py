"""The same graphs on gpu(0) (CuPy) and cpu (numpy) agree. Skipped without CuPy and a GPU."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.test_utils import check_consistency

S = sg.sym
pytestmark = pytest.mark.gpu


def _net():
    x = S.Variable("x")
    h = S.BatchNorm(S.FullyConnected(x, num_hidden=8, name="fc1"), fix_gamma=False, name="bn")
    h = S.Activation(h, act_type="tanh")
    return S.SoftmaxOutput(S.FullyConnected(h, num_hidden=3, name="fc2"), name="sm")


def test_forward_backward_gpu_matches_cpu():
    sym = _net()
    entries = [{"ctx": ctx, "x": (6, 5), "type_dict": {"x": np.float64}} for ctx in (sg.cpu(0), sg.gpu(0))]
    shapes = dict(zip(sym.list_arguments(), sym.infer_shape(x=(6, 5))[0]))
    rng = np.random.default_rng(0)
    args = {
        n: (rng.integers(0, 3, s).astype(np.float64) if n == "sm_label" else rng.standard_normal(s))
        for n, s in shapes.items()
    }
    # outputs of both forwards, every gradient and the moving statistics BatchNorm updates in training
    truth = check_consistency(
        sym, entries, arg_params=args, aux_params=dict.fromkeys(sym.list_auxiliary_states(), 1.0), rtol=1e-8, atol=1e-12
    )
    # a difference raised; the ground truth holds the outputs, every gradient and the moving statistics compared
    assert set(sym.list_arguments()) | set(sym.list_auxiliary_states()) <= set(truth)


def test_bind_rejects_host_arrays_on_gpu():
    x = S.Variable("x")
    with pytest.raises(ValueError, match=r"'x' lives on cpu\(0\).*bound to gpu\(0\)"):
        (x * 2.0).bind(sg.gpu(0), {"x": np.ones(3)})


def test_host_values_are_copied_to_the_device_and_back():
    import cupy

    x = S.Variable("x")
    net = x * 2.0
    exe = net.simple_bind(sg.gpu(0), grad_req="add", x=(3,))
    out = exe.forward(is_train=True, x=np.array([1.0, 2.0, 3.0]))[0]  # host value into a gpu executor
    assert isinstance(out, cupy.ndarray) and isinstance(exe.arg_dict["x"], cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(out), [2.0, 4.0, 6.0])
    exe.backward(np.ones(3, np.float32))  # host head gradient
    exe.backward(cupy.ones(3, cupy.float32))
    np.testing.assert_allclose(cupy.asnumpy(exe.grad_dict["x"]), 4.0)  # 'add' twice
    exe.copy_params_from({"x": np.zeros(3)})
    np.testing.assert_array_equal(cupy.asnumpy(exe.arg_dict["x"]), 0.0)
    cpu_exe = net.simple_bind(sg.cpu(), x=(3,))
    np.testing.assert_allclose(cpu_exe.forward(x=cupy.arange(3.0))[0], [0.0, 2.0, 4.0])  # device value to host
