"""N-d indexing operators beyond the OpInfo table: _contrib_boolean_mask (whose output shape depends on
the mask values, so shape inference cannot give it and the generic table cannot hold it), the gradient
rules' own gradients (gather_nd <-> scatter-add), MXNet's Python split_v2 / histogram wrappers, and
bad-input errors that name the operator, the argument and what was expected."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ParamError, ShapeError, SymgradError

S = sg.sym
X = S.Variable("x")
I = S.Variable("i")


def _run(sym, **arrays):
    return sym.bind(sg.cpu(), {n: arrays[n] for n in sym.list_arguments()}).forward()


def _grads(sym, heads, wrt, req="write", init=None, **arrays):
    names = sym.list_arguments()
    grads = {n: (np.zeros_like(arrays[n]) if init is None else init[n].copy()) for n in wrt}
    exe = sym.bind(
        sg.cpu(),
        {n: arrays[n] for n in names},
        args_grad=grads,
        grad_req={n: (req if n in wrt else "null") for n in names},
    )
    exe.forward(is_train=True)
    exe.backward(heads)
    return grads


# ----------------------------------------------------------------------------
# _contrib_boolean_mask: a data-dependent output shape
# ----------------------------------------------------------------------------

MASK = np.array([1.0, 0.0, 1.0, 1.0])


def _mask_ref(x, m, axis=0):
    return np.compress(m != 0, x, axis=axis)


def _unmask_ref(g, m, shape, axis=0):
    out = np.zeros(shape)
    moved = np.moveaxis(out, axis, 0)
    moved[np.nonzero(m)[0]] = np.moveaxis(g, axis, 0)
    return out


def test_boolean_mask_shape_is_unknown_before_the_forward_as_in_mxnet():
    y = S._contrib_boolean_mask(X, I)
    with pytest.warns(UserWarning, match="Cannot decide shape"):
        assert y.infer_shape(x=(4, 3), i=(4,)) == (None, None, None)
    args, outs, _ = y.infer_shape_partial(x=(4, 3), i=(4,))
    assert args == [(4, 3), (4,)] and outs == [()]  # MXNet's legacy "unknown"
    assert y.infer_type(x=np.float64, i=np.float32)[1] == [np.float64]
    assert S._npi_boolean_mask is not None and y.list_outputs() == [y.name + "_output"]
    assert y.infer_shape_partial(x=(4, 3))[0] == [(4, 3), (4,)]  # the mask length follows from the data
    exe = y.simple_bind(sg.cpu(), x=(4, 3))
    assert exe.arg_dict["i"].shape == (4,) and exe.forward()[0].shape == (0, 3)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize(("axis", "shape"), [(0, (4, 3)), (1, (2, 4, 2)), (-1, (3, 4))])
def test_boolean_mask_forward_backward_and_grad_req_add(axis, shape, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    y = S._contrib_boolean_mask(X, I, axis=axis)
    (out,) = _run(y, x=x, i=MASK)
    np.testing.assert_array_equal(out, _mask_ref(x, MASK, axis))
    assert out.dtype == dtype
    g = rng.standard_normal(out.shape).astype(dtype)
    want = _unmask_ref(g.astype(np.float64), MASK, shape, axis)
    np.testing.assert_array_equal(_grads(y, [g], ["x"], x=x, i=MASK)["x"], want)
    dirty = {"x": np.full(shape, 0.5, dtype)}
    np.testing.assert_array_equal(
        _grads(y, [g], ["x"], req="add", init=dirty, x=x, i=MASK)["x"], want.astype(dtype) + dirty["x"]
    )


def test_boolean_mask_bool_and_int_masks_and_an_empty_selection():
    x = np.arange(6.0).reshape(3, 2)
    for m in (np.array([True, False, True]), np.array([0, 2, -1], dtype=np.int32)):
        np.testing.assert_array_equal(_run(S._contrib_boolean_mask(X, I), x=x, i=m)[0], _mask_ref(x, m))
    (out,) = _run(S._contrib_boolean_mask(X, I), x=x, i=np.zeros(3))
    assert out.shape == (0, 2)


def test_boolean_mask_feeds_other_ops_and_gradients_flow_through_them():
    """Downstream ops see the real shape at run time; the backward checks the head gradient against the
    forward's output, since bind could not know it."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3))
    z = S.sum(S.square(S._contrib_boolean_mask(X, I)) * 3.0)
    grads = _grads(z, [np.ones(1)], ["x"], x=x, i=MASK)
    np.testing.assert_allclose(grads["x"], 6.0 * x * (MASK != 0)[:, None], rtol=1e-12)
    y = S._contrib_boolean_mask(X, I)
    exe = y.bind(sg.cpu(), {"x": x, "i": MASK}, args_grad={"x": np.zeros((4, 3))}, grad_req={"x": "write", "i": "null"})
    exe.forward(is_train=True)
    with pytest.raises(ShapeError, match=r"expected \(3, 3\)"):
        exe.backward([np.ones((4, 3))])


def test_boolean_mask_second_order_is_the_mask_again():
    """dx = unmask(h) is linear in the head gradient h; its gradient w.r.t. h projected on v is mask(v)."""
    rng = np.random.default_rng(2)
    x, h = rng.standard_normal((4, 3)), rng.standard_normal((3, 3))
    v = rng.standard_normal((4, 3))
    H, V = S.Variable("h"), S.Variable("v")
    (gx,) = sg.grad(S._contrib_boolean_mask(X, I), [X], grad_outputs=[H])
    phi = S.sum(gx * V)
    args = {"x": x, "i": MASK, "h": h, "v": v}
    (val,) = _run(phi, **args)
    np.testing.assert_allclose(val, [np.sum(_unmask_ref(h, MASK, (4, 3)) * v)], rtol=1e-12)
    grads = _grads(phi, [np.ones(1)], ["h"], **args)
    np.testing.assert_allclose(grads["h"], _mask_ref(v, MASK), rtol=1e-12)


def test_boolean_mask_bad_index_shape():
    with pytest.raises(ShapeError, match=r"_contrib_boolean_mask .*'index' must be 1-d of length 4"):
        S._contrib_boolean_mask(X, I).infer_shape_partial(x=(4, 3), i=(3,))


# ----------------------------------------------------------------------------
# gather_nd / scatter_nd / _backward_gather_nd
# ----------------------------------------------------------------------------


def test_gather_nd_mxnet_doc_examples():
    data = np.array([[0.0, 1], [2, 3]])
    np.testing.assert_array_equal(_run(S.gather_nd(X, I), x=data, i=np.array([[1, 1, 0], [0, 1, 0]]))[0], [2, 3, 0])
    data = np.arange(1.0, 9).reshape(2, 2, 2)
    np.testing.assert_array_equal(_run(S.gather_nd(X, I), x=data, i=np.array([[0, 1], [1, 0]]))[0], [[3, 4], [5, 6]])
    out = _run(S.scatter_nd(X, I, shape=(2, 2)), x=np.array([2.0, 3, 0]), i=np.array([[1, 1, 0], [0, 1, 0]]))[0]
    np.testing.assert_array_equal(out, [[0, 0], [2, 3]])
    out = _run(S._backward_gather_nd(X, I, shape=(2, 2)), x=np.array([2.0, 3, 0]), i=np.array([[1, 1, 0], [1, 1, 0]]))
    np.testing.assert_array_equal(out[0], [[0, 0], [0, 5]])


def test_gather_nd_gradient_is_a_scatter_add_whose_gradient_is_gather_nd():
    """The two rules are each other's adjoint: phi = <dx(h), v> has d phi / dh = gather_nd(v)."""
    rng = np.random.default_rng(3)
    x, idx = rng.standard_normal((3, 2)), np.array([[2, 0, 2]])
    h, v = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    H, V = S.Variable("h"), S.Variable("v")
    (gx,) = sg.grad(S.gather_nd(X, I), [X], grad_outputs=[H])
    want = np.zeros((3, 2))
    np.add.at(want, idx[0], h)
    np.testing.assert_allclose(_run(gx, x=x, i=idx, h=h)[0], want, rtol=1e-12)
    grads = _grads(S.sum(gx * V), [np.ones(1)], ["h"], x=x, i=idx, h=h, v=v)
    np.testing.assert_allclose(grads["h"], v[idx[0]], rtol=1e-12)


def test_gather_nd_index_gets_no_gradient_and_any_index_dtype_works():
    x = np.arange(6.0).reshape(2, 3)
    for dt in (np.int32, np.int64, np.float32, np.uint8):
        np.testing.assert_array_equal(_run(S.gather_nd(X, I), x=x, i=np.array([[1], [2]], dtype=dt))[0], [5.0])
    grads = _grads(S.gather_nd(X, I), [np.ones(1)], ["x", "i"], x=x, i=np.array([[1.0], [2.0]]))
    np.testing.assert_array_equal(grads["i"], 0)


@pytest.mark.parametrize(
    ("sym", "shapes", "match"),
    [
        (S.gather_nd(X, I), {"x": (2, 3), "i": (2,)}, r"gather_nd .*'indices' must have at least 2 dimensions"),
        (S.gather_nd(X, I), {"x": (2, 3), "i": (3, 1)}, r"indexes 3 axes .* 'data' has only 2"),
        (
            S.scatter_nd(X, I, shape=(2, 3)),
            {"x": (4,), "i": (2, 3)},
            r"scatter_nd .*'data' has shape \(4,\), expected \(3,\)",
        ),
        (S.scatter_nd(X, I, shape=(2,)), {"x": (3,), "i": (2, 3)}, r"indexes 2 axes .* output shape \(2,\)"),
    ],
)
def test_nd_shape_errors(sym, shapes, match):
    with pytest.raises(ShapeError, match=match):
        sym.infer_shape(**shapes)


def test_scatter_nd_requires_shape():
    with pytest.raises(ParamError, match="required parameter 'shape' of scatter_nd"):
        S.scatter_nd(X, I)


# ----------------------------------------------------------------------------
# batch_take, ravel/unravel, diag
# ----------------------------------------------------------------------------


def test_batch_take_mxnet_example_and_errors():
    assert S.batch_take(X, I).infer_type(x=np.float64)[0] == [np.float64, np.int32]  # MXNet's index type
    x = np.array([[1.0, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(_run(S.batch_take(X, I), x=x, i=np.array([0, 1, 0], np.int32))[0], [1, 4, 5])
    with pytest.raises(ShapeError, match="at least 2-d"):
        S.batch_take(X, I).infer_shape(x=(3,), i=(3,))
    with pytest.raises(ShapeError, match="one index per row"):
        S.batch_take(X, I).infer_shape(x=(3, 2), i=(2,))


def test_ravel_unravel_round_trip_and_aliases():
    a = np.array([[3, 6, 6], [4, 5, 1]], dtype=np.int64)
    (flat,) = _run(S.ravel_multi_index(X, shape=(7, 6)), x=a)
    np.testing.assert_array_equal(flat, [22, 41, 37])
    assert flat.dtype == np.int64
    np.testing.assert_array_equal(_run(S._unravel_index(X, shape=(-1, 6)), x=flat)[0], a)
    assert S.ravel_multi_index(X, shape=(7, 6)).infer_shape(x=(2, 5))[1] == [(5,)]
    assert S.unravel_index(X, shape=(7, 6)).infer_shape(x=(5,))[1] == [(2, 5)]


@pytest.mark.parametrize(
    ("make", "shapes", "exc", "match"),
    [
        (lambda: S.ravel_multi_index(X), None, ParamError, "'shape' must not be empty"),
        (lambda: S.ravel_multi_index(X, shape=(7, 6)), {"x": (3, 4)}, ShapeError, r"must have shape \(2, N\)"),
        (lambda: S.unravel_index(X, shape=(7, 6)), {"x": (3, 4)}, ShapeError, "must be 1-d"),
        (lambda: S.unravel_index(X, shape=(7, 0)), None, ParamError, "zero dimension"),
    ],
)
def test_ravel_errors(make, shapes, exc, match):
    with pytest.raises(exc, match=match):
        make().infer_shape(**shapes)


def test_diag_mxnet_doc_examples():
    x = np.array([[1.0, 2, 3], [4, 5, 6]])
    assert _run(S.diag(X), x=x)[0].tolist() == [1, 5]
    assert _run(S.diag(X, k=1), x=x)[0].tolist() == [2, 6]
    assert _run(S.diag(X, k=-1), x=x)[0].tolist() == [4]
    assert _run(S.diag(X, k=1), x=np.array([1.0, 2, 3]))[0].tolist() == [
        [0, 1, 0, 0],
        [0, 0, 2, 0],
        [0, 0, 0, 3],
        [0, 0, 0, 0],
    ]
    x = np.arange(1.0, 9).reshape(2, 2, 2)
    assert _run(S.diag(X), x=x)[0].tolist() == [[1, 7], [2, 8]]
    assert _run(S.diag(X, axis1=-2, axis2=-1), x=x)[0].tolist() == [[1, 4], [5, 8]]
    assert _run(S.diag(X, k=-2), x=np.ones((2, 3)))[0].shape == (0,)  # an empty diagonal exists


@pytest.mark.parametrize(
    ("kwargs", "shape", "match"),
    [
        ({"k": -3}, (2, 3), "diagonal k=-3 does not exist"),
        ({"axis1": 1, "axis2": -1}, (2, 3), "same axis 1"),
        ({"axis1": 2}, (2, 3), "'axis1'=2 is out of range"),
        ({}, (), "at least 1-d"),
    ],
)
def test_diag_errors(kwargs, shape, match):
    # under NumPy shape semantics () is a scalar (legacy mode reads it as "unknown", as MXNet)
    with sg.util.np_shape(True), pytest.raises(ShapeError, match=match):
        S.diag(X, **kwargs).infer_shape(x=shape)


# ----------------------------------------------------------------------------
# _split_v2 and the split_v2 wrapper
# ----------------------------------------------------------------------------


def test_split_v2_wrapper_matches_mxnet_python_mapping():
    y = S.split_v2(X, (2, 3), axis=0)
    assert y.list_attr()["indices"] == "(0, 2, 3)" and y.list_attr()["sections"] == "0"
    assert len(y.list_outputs()) == 3
    one = S.split_v2(X, 1)
    assert one.list_outputs() == [one.name + "_output"]
    x = np.arange(14.0).reshape(7, 2)
    parts = _run(S.split_v2(X, 3), x=x)
    assert [p.shape[0] for p in parts] == [3, 2, 2]  # MXNet: the first n % sections parts are longer
    with pytest.raises(ValueError, match="int or a tuple"):
        S.split_v2(X, [1, 2])


def test_split_v2_outputs_are_copies():
    x = np.arange(6.0).reshape(3, 2)
    parts = _run(S.split_v2(X, 3, axis=0, squeeze_axis=True), x=x)
    parts[0][...] = -1
    assert x[0, 0] == 0.0


@pytest.mark.parametrize(
    ("kwargs", "shape", "exc", "match"),
    [
        ({"indices": (0, 4)}, (2, 3), ShapeError, r"split 0 runs from 0 to 4"),
        ({"indices": (0, 2, 1)}, (2, 3), ShapeError, r"split 1 runs from 2 to 1"),
        ({"indices": (0, 1), "squeeze_axis": True}, (2, 3), ShapeError, "parts of length 1"),
        ({"indices": ()}, (2, 3), ParamError, "give 'sections' > 0 or a non-empty 'indices'"),
        ({"indices": (), "sections": -1}, (2, 3), ParamError, "'sections' must be >= 0"),
    ],
)
def test_split_v2_errors(kwargs, shape, exc, match):
    with pytest.raises(exc, match=match):
        S._split_v2(X, axis=1, **kwargs).infer_shape(x=shape)


# ----------------------------------------------------------------------------
# _histogram, index_array, index_copy
# ----------------------------------------------------------------------------


def test_histogram_mxnet_doc_example_counts_are_int64_and_no_gradient():
    x = np.array([[0.0, 1], [2, 2], [3, 4]])
    counts, edges = _run(S.histogram(X, bins=5, range=(0, 5)), x=x)
    assert counts.tolist() == [1, 1, 2, 1, 1] and counts.dtype == np.int64
    np.testing.assert_array_equal(edges, [0, 1, 2, 3, 4, 5])
    counts, _ = _run(S.histogram(X, bins=S.Variable("b")), x=x, b=np.array([0.0, 2.1, 3.0]))
    assert counts.tolist() == [4, 1]
    with pytest.raises(SymgradError, match="piecewise constant"):
        sg.grad(S.histogram(X, bins=2, range=(0, 1))[1], [X])


def test_histogram_float32_edges_and_range_in_float64():
    """The range test uses the float64 range (MXNet): float32(0.1) > 0.1 is outside (0, 0.1)."""
    x = np.array([0.0, 0.05, 0.1], dtype=np.float32)
    counts, edges = _run(S.histogram(X, bins=2, range=(0, 0.1)), x=x)
    assert counts.tolist() == [1, 1] and edges.dtype == np.float32


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bin_cnt": 3}, "both 'bin_cnt' and 'range'"),
        ({"range": (0, 1)}, "both 'bin_cnt' and 'range'"),
        ({"bin_cnt": 0, "range": (0, 1)}, "'bin_cnt' must be positive"),
        ({"bin_cnt": 2, "range": (1, 0)}, "low <= high"),
        ({"bin_cnt": 2, "range": (0, 1, 2)}, "pair of numbers"),
    ],
)
def test_histogram_param_errors(kwargs, match):
    with pytest.raises(ParamError, match=match):
        S._histogram(X, **kwargs)


def test_histogram_wrapper_needs_range_for_int_bins():
    with pytest.raises(ValueError, match="range is required"):
        S.histogram(X, bins=3)
    with pytest.raises(ShapeError, match="at least 2 edges"):
        S.histogram(X, bins=S.Variable("b")).infer_shape(x=(3,), b=(1,))


def test_index_array_mxnet_doc_example():
    (out,) = _run(S._contrib_index_array(X), x=np.ones((3, 2)))
    assert out.dtype == np.int64 and out.tolist() == [[[0, 0], [0, 1]], [[1, 0], [1, 1]], [[2, 0], [2, 1]]]
    (out,) = _run(S._contrib_index_array(X, axes=(1, 0)), x=np.ones((3, 2, 2)))
    assert out.shape == (3, 2, 2, 2)
    np.testing.assert_array_equal(out[..., 0], np.indices((3, 2, 2))[1])
    np.testing.assert_array_equal(out[..., 1], np.indices((3, 2, 2))[0])


def test_index_copy_mxnet_example_and_errors():
    old = np.zeros((5, 3))
    new = np.array([[1.0, 2, 3], [4, 5, 6], [7, 8, 9]])
    (out,) = _run(S._contrib_index_copy(X, I, S.Variable("n")), x=old, i=np.array([0, 4, 2]), n=new)
    assert out.tolist() == [[1, 2, 3], [0, 0, 0], [7, 8, 9], [0, 0, 0], [4, 5, 6]]
    assert not old.any()  # the input is not written
    y = S._contrib_index_copy(X, I, S.Variable("n"))
    with pytest.raises(ShapeError, match="'index_vector' has 2 entries but 'new_tensor' has 3 rows"):
        y.infer_shape(x=(5, 3), i=(2,), n=(3, 3))
    with pytest.raises(ShapeError, match="same trailing dims"):
        y.infer_shape(x=(5, 3), i=(3,), n=(3, 2))


def test_index_copy_tensors_share_a_dtype_the_index_may_differ():
    y = S._contrib_index_copy(X, I, S.Variable("n"))
    assert y.infer_type(x=np.float32, i=np.int64)[0] == [np.float32, np.int64, np.float32]
    with pytest.raises(TypeError, match="same dtype"):
        y.infer_type(x=np.float32, i=np.int64, n=np.float64)
