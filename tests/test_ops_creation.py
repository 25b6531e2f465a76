"""Creation and introspection operators (symgrad/ops/creation.py) beyond the OpInfo table: MXNet's Python
helpers ``zeros``/``ones``/``full``/``arange``/``linspace``/``eye`` and the attribute strings they write,
ops without inputs inside larger graphs (gradients flow around them), MXNet's quirks, moments' second
order and bad parameters."""

import json

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ParamError, ShapeError

S = sg.sym
X = S.Variable("x")


def _run(sym, **arrays):
    return sym.bind(sg.cpu(), {n: arrays[n] for n in sym.list_arguments()}).forward()


def test_python_helpers_write_mxnet_attributes_and_default_to_float32():
    z = S.zeros((2, 3))
    node = json.loads(z.tojson())["nodes"][0]
    assert node["op"] == "_zeros" and node["attrs"] == {"shape": "(2, 3)", "dtype": "float32"}
    assert z.list_arguments() == [] and z.infer_shape() == ([], [(2, 3)], [])
    assert z.infer_type()[1] == [np.float32]
    assert json.loads(S.full(2, 7, dtype="int8").tojson())["nodes"][0]["attrs"]["value"] == "7.0"
    assert S.eye(2).list_attr() == {"N": "2", "M": "0", "k": "0", "dtype": "float32"}
    for make in (lambda: S.ones((2,)), lambda: S.arange(3), lambda: S.linspace(0, 1, 3), lambda: S.eye(2)):
        assert _run(make())[0].dtype == np.float32


def test_creation_ops_load_from_mxnet_json_and_take_ctx():
    """MXNet writes ``_arange``'s attributes as given (``{"start": "3"}``: stop defaults to start)."""
    doc = {
        "nodes": [
            {"op": "_arange", "name": "r", "attrs": {"start": "3"}, "inputs": []},
            {"op": "_full", "name": "f", "attrs": {"shape": "(2,)", "value": "1.5", "ctx": "cpu(0)"}, "inputs": []},
        ],
        "arg_nodes": [],
        "node_row_ptr": [0, 1, 2],
        "heads": [[0, 0, 0], [1, 0, 0]],
        "attrs": {"mxnet_version": ["int", 10901]},
    }
    r, f = _run(S.load_json(json.dumps(doc)))
    np.testing.assert_array_equal(r, [0, 1, 2])
    np.testing.assert_array_equal(f, [1.5, 1.5])
    assert r.dtype == f.dtype == np.float32


def test_creation_ops_in_a_graph_with_gradients():
    """A zero-input node beside data: shapes come from its parameters and gradients flow around it."""
    y = S.broadcast_mul(X, S.arange(1, 4, dtype="float64")) + S.ones((2, 3), dtype="float64")
    x = np.arange(6.0).reshape(2, 3)
    grads = {"x": np.zeros((2, 3))}
    exe = y.bind(sg.cpu(), {"x": x}, args_grad=grads)
    (out,) = exe.forward(is_train=True)
    np.testing.assert_array_equal(out, x * [1, 2, 3] + 1)
    exe.backward([np.ones((2, 3))])
    np.testing.assert_array_equal(grads["x"], np.tile([1.0, 2, 3], (2, 1)))
    exe = y.simple_bind(sg.cpu(), x=(2, 3), type_dict={"x": np.float64})
    assert exe.forward()[0].shape == (2, 3)


def test_arange_mxnet_value_rules():
    # uint8 / int32: start and step truncated, the length ceil((stop - start) / step) from the real values
    for dtype in ("uint8", "int32", "int64"):
        np.testing.assert_array_equal(_run(S.arange(2.5, 9, 1.7, dtype=dtype))[0], [2, 3, 4, 5])
    np.testing.assert_array_equal(_run(S.arange(0, 3, 0.5, repeat=2, dtype="int32"))[0], [0] * 12)
    # float16: the range itself (MXNet's float16 arange truncates start and step: all zeros here)
    out = _run(S.arange(0.1, 3, 0.7, dtype="float16"))[0]
    np.testing.assert_allclose(out, [0.1, 0.8, 1.5, 2.2, 2.9], rtol=1e-3)
    assert out.dtype == np.float16
    # float32: start + (i // repeat) * step in float32
    out = _run(S.arange(0.1, 1, 0.3, repeat=3))[0]
    k = np.repeat(np.arange(3), 3).astype(np.float32)
    np.testing.assert_array_equal(out, k * np.float32(0.3) + np.float32(0.1))


def test_linspace_and_eye_edge_cases():
    np.testing.assert_array_equal(_run(S.linspace(2, 3, 1))[0], [2.0])
    assert _run(S.linspace(2, 3, 0))[0].shape == (0,)
    np.testing.assert_array_equal(_run(S.linspace(0, 10, 4, dtype="int32"))[0], [0, 3, 6, 10])
    np.testing.assert_array_equal(_run(S.eye(2, 3, 5))[0], np.zeros((2, 3)))
    np.testing.assert_array_equal(_run(S.eye(3, k=-1, dtype="int64"))[0], np.eye(3, k=-1, dtype=np.int64))


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: S.arange(3, 3), "empty range"),
        (lambda: S.arange(0, 3, -1), "empty range"),
        (lambda: S.arange(0, 3, 0), "'step' must not be 0"),
        (lambda: S.arange(0, 3, repeat=0), "'repeat' must be positive"),
        (lambda: S.arange(0, step=0, infer_range=True), "'step' must not be 0"),
        (lambda: S.arange(3, dtype="bool"), "'dtype' must be one of"),
        (lambda: S.linspace(0, 1, -1), "'num' must be non-negative"),
        (lambda: S.eye(-1), "must be non-negative"),
        (lambda: S.zeros((2, -2)), "dimension below -1"),
        (lambda: S._full(shape=(2,)), "required parameter 'value'"),
        (lambda: S._zeros_without_dtype(shape=(2,), dtype=9), "MXNet type code"),
        (lambda: S.moments(X), "'axes' must name at least one axis"),
        (lambda: S.moments(X, axes=()), "'axes' must name at least one axis"),
    ],
)
def test_bad_parameters_name_the_op(make, match):
    with pytest.raises(ParamError, match=match):
        make()


def test_zeros_without_dtype_uses_mxnet_type_codes():
    assert _run(S._zeros_without_dtype(shape=(2,), dtype=6))[0].dtype == np.int64
    assert _run(S._zeros_without_dtype(shape=(1,)))[0].dtype == np.float32


# -- introspection --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32])
def test_shape_size_and_all_finite_for_every_input_dtype(dtype):
    x = np.ones((2, 0, 3) if dtype == np.int32 else (2, 3), dtype=dtype)
    (shape,) = _run(S.shape_array(X), x=x)
    (size,) = _run(S.size_array(X), x=x)
    assert shape.tolist() == list(x.shape) and shape.dtype == np.int64
    assert size.tolist() == [x.size] and size.dtype == np.int64
    (ok,) = _run(S.all_finite(X), x=x)
    assert ok.tolist() == [1.0] and ok.dtype == np.float32
    assert S._npx_shape_array(X).infer_shape(x=(4, 5))[1] == [(2,)]


def test_all_finite_tests_the_value_not_its_float32_cast():
    """MXNet casts to float32 first, so float64 1e300 counts as infinite there; it is finite."""
    assert _run(S.all_finite(X), x=np.array([1e300]))[0].tolist() == [1.0]
    assert _run(S.all_finite(X), x=np.array([1.0, np.nan], dtype=np.float16))[0].tolist() == [0.0]
    y = S.multi_all_finite(X, S.Variable("b"), S.Variable("c"))
    assert y.list_arguments() == ["x", "b", "c"] and y.list_attr()["num_arrays"] == "3"
    ok = _run(y, x=np.ones(2), b=np.ones((1, 2), np.float32), c=np.array([np.inf]))
    assert ok[0].tolist() == [0.0]


def test_introspection_ops_have_zero_gradient():
    """y = x * sum(shape_array(x)): the shape term is constant, so dy/dx = sum of the shape (5)."""
    y = S.broadcast_mul(X, S.sum(S.cast(S.shape_array(X), dtype="float64")))
    grads = {"x": np.zeros((2, 3))}
    exe = y.bind(sg.cpu(), {"x": np.ones((2, 3))}, args_grad=grads)
    exe.forward(is_train=True)
    exe.backward([np.ones((2, 3))])
    np.testing.assert_array_equal(grads["x"], np.full((2, 3), 5.0))


# -- moments -------------------------------------------------------------------------------------


def test_moments_mxnet_doc_example_and_shapes():
    x = np.array([[1.0, 2, 3], [4, 5, 6]])
    mean, var = _run(S.moments(X, axes=(0,)), x=x)
    np.testing.assert_allclose(mean, [2.5, 3.5, 4.5])
    np.testing.assert_allclose(var, [2.25, 2.25, 2.25])
    mean, var = _run(S.moments(X, axes=(0, 1)), x=x)
    np.testing.assert_allclose(mean, [3.5])
    np.testing.assert_allclose(var, [35 / 12])
    y = S.moments(X, axes=(1,), name="m")
    assert y.list_outputs() == ["m_output0", "m_output1"]
    with pytest.raises(ShapeError, match="repeats an axis"):
        S.moments(X, axes=(1, -1)).infer_shape(x=(2, 3))


def test_moments_float16_accumulates_in_float32():
    x = np.ones(8192, dtype=np.float16)
    x[:4096] = 1.5  # a float16 running sum would stall at 2048
    mean, var = _run(S.moments(X, axes=(0,)), x=x)
    assert mean.dtype == var.dtype == np.float16
    assert mean.tolist() == [1.25] and var.tolist() == [0.0625]
