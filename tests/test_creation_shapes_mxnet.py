"""Creation ops whose shape inference fills in, and the shapes MXNet refuses, as MXNet 1.9.1's tests pin them
(tests/python/unittest/test_operator.py): ``test_init`` (``arange_inferstop``), ``test_scalar_tensor_creation``,
``test_zero_size_tensor_creation``, ``test_zero_size_min_max`` and ``test_index_array``, symbolically, in
MXNet's legacy shape mode (the default: a 0 dimension and ``()`` unknown) and in NumPy shape mode.

The expected values are numpy's; where MXNet fails, the MXNet 1.9.1 behaviour was read off by running it
(``mx.sym.zeros(shape=())`` alone fails at bind in legacy mode, ``ones(shape=(-1, -1)) + x`` takes ``x``'s
shape in both modes, ``arange(start=2, step=3, repeat=2, infer_range=True) + zeros(5)`` is [2, 2, 5, 5, 8])."""

import json
import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ParamError, ShapeError
from symgrad.test_utils import check_symbolic_backward, check_symbolic_forward

S = sg.sym
X = S.Variable("x")
F32 = np.float32


def _run(sym, **arrays):
    return sym.bind(sg.cpu(), {n: arrays[n] for n in sym.list_arguments()}).forward()


def _mode(np_shape):
    return sg.util.np_shape(np_shape)


# -- test_init ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "ref", "shape", "dtype"),
    [
        (S.zeros, np.zeros, (3, 4), np.float32),
        (S.ones, np.ones, 3, np.int32),
        (S.ones, np.ones, (2, 2, 3), np.float16),
    ],
)
def test_init_basic_val_init(make, ref, shape, dtype):
    exe = make(shape=shape, dtype=dtype).bind(sg.cpu(), args=[], args_grad=[])
    (out,) = exe.forward(is_train=True)
    np.testing.assert_array_equal(out, ref(shape=shape, dtype=dtype))
    assert out.dtype == dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
@pytest.mark.parametrize("config", [(10,), (0, 10), (5, 100, 4), (50, -50, -2), (-100, 100, 1), (1.3, 456.6, 1.3)])
@pytest.mark.parametrize("repeat", [1, 3])
def test_init_arange(config, dtype, repeat):
    # numpy refuses -100 as a uint8 start; MXNet's integer range wraps as a cast does
    expected = (
        np.arange(*config).astype(dtype) if dtype == np.uint8 and config[0] < 0 else np.arange(*config, dtype=dtype)
    )
    (out,) = _run(S.arange(*config, repeat=repeat, dtype=dtype))
    np.testing.assert_array_equal(out, np.repeat(expected, repeat))
    assert out.dtype == dtype


@pytest.mark.parametrize("np_shape", [False, True])
def test_init_arange_inferstop(np_shape):
    with _mode(np_shape):
        s = S.elemwise_add(S.arange(start=0, stop=None, infer_range=True), S.zeros(shape=[5]))
        (out,) = s.bind(sg.cpu(), args={}).forward()
    np.testing.assert_array_equal(out, np.arange(5, dtype=F32))
    assert out.dtype == F32


@pytest.mark.parametrize("shape", [(10,), (10, 20), (10, 20, 30)])
@pytest.mark.parametrize("axis", [0, -1, None])
def test_init_arange_like(shape, axis):
    data = np.random.default_rng(0).random(shape).astype(F32)
    (out,) = _run(S.contrib.arange_like(X, start=0, axis=axis), x=data)
    n = data.size if axis is None else shape[axis]
    np.testing.assert_array_equal(out, np.arange(n, dtype=F32).reshape(shape if axis is None else (n,)))


# -- _arange(infer_range=True): the length from the consumers ---------------------------------------------------


def test_arange_infer_range_takes_start_step_and_repeat():
    """start + (i // repeat) * step for as many elements as the consumer's shape has; start is not a stop here
    (MXNet's RangeParamParser swaps start into stop only without infer_range)."""
    r = S.arange(start=2, step=3, repeat=2, infer_range=True)
    (out,) = _run(S.elemwise_add(r, S.zeros(shape=(5,))))
    np.testing.assert_array_equal(out, [2, 2, 5, 5, 8])
    (out,) = _run(r + X, x=np.zeros(3, F32))
    np.testing.assert_array_equal(out, [2, 2, 5])
    # a negative step, an integer dtype (start and step truncated: 2.7 -> 2, 1.5 -> 1)
    (out,) = _run(S.arange(start=1, step=-0.5, infer_range=True) + X, x=np.zeros(3, F32))
    np.testing.assert_array_equal(out, [1.0, 0.5, 0.0])
    s = S.arange(start=2.7, step=1.5, infer_range=True, dtype="int32") + S.zeros((4,), dtype="int32")
    np.testing.assert_array_equal(_run(s)[0], [2, 3, 4, 5])


def test_arange_infer_range_fills_any_consumer_shape_in_order():
    s = S.arange(start=1, step=2, infer_range=True, dtype="int32") + S.zeros((2, 3), dtype="int32")
    (out,) = _run(s)
    np.testing.assert_array_equal(out, np.arange(1, 13, 2, dtype=np.int32).reshape(2, 3))
    with _mode(True):
        (out,) = _run(S.arange(start=2, infer_range=True) + S.zeros(shape=(0,)))
    assert out.shape == (0,)


def test_arange_infer_range_follows_rebinding_and_gradients():
    s = S.arange(start=1, step=0.5, infer_range=True, dtype="float64") * X
    x = np.array([1.0, 2.0, 3.0])
    grads = {"x": np.zeros(3)}
    exe = s.bind(sg.cpu(), {"x": x}, args_grad=grads)
    np.testing.assert_array_equal(exe.forward(is_train=True)[0], [1.0, 3.0, 6.0])
    exe.backward([np.ones(3)])
    np.testing.assert_array_equal(grads["x"], [1.0, 1.5, 2.0])
    bigger = exe.reshape(x=(5,), allow_up_sizing=True)
    bigger.arg_dict["x"][:] = 1.0
    np.testing.assert_array_equal(bigger.forward()[0], [1.0, 1.5, 2.0, 2.5, 3.0])
    exe = s.simple_bind(sg.cpu(), x=(4,), type_dict={"x": np.float64})
    assert exe.forward()[0].shape == (4,)


def test_arange_infer_range_without_a_consumer_shape_fails_at_bind():
    r = S.arange(start=0, infer_range=True)
    assert r.infer_shape_partial() == ([], [()], [])
    with pytest.warns(UserWarning, match="Cannot decide shape"):
        assert r.infer_shape() == (None, None, None)
    with pytest.raises(ShapeError, match=r"_arange '.*': cannot bind: its parameters leave its output shape open"):
        r.bind(sg.cpu(), {})
    with pytest.raises(ParamError, match="'step' must not be 0"):
        S.arange(start=0, step=0, infer_range=True)
    # infer_range with a stop is an ordinary range: its length conflicts with a consumer's other length
    with pytest.raises(ShapeError, match="same shape"):
        _run(S.elemwise_add(S.arange(start=0, stop=3, infer_range=True), S.zeros(shape=(5,))))


def test_arange_infer_range_json_round_trip():
    s = S.arange(start=1, infer_range=True) + X
    attrs = json.loads(s.tojson())["nodes"][0]["attrs"]
    assert attrs["infer_range"] == "True" and attrs["stop"] == "None"
    (out,) = _run(S.load_json(s.tojson()), x=np.zeros(4, F32))
    np.testing.assert_array_equal(out, [1, 2, 3, 4])


# -- unknown dimensions in a creation op's shape ----------------------------------------------------------------


_CREATE = [
    (lambda shape: S.zeros(shape=shape), 0.0),
    (lambda shape: S.ones(shape=shape), 1.0),
    (lambda shape: S.full(shape=shape, val=7), 7.0),
    (lambda shape: S._zeros_without_dtype(shape=shape), 0.0),
]


@pytest.mark.parametrize(("make", "value"), _CREATE)
@pytest.mark.parametrize(
    ("np_shape", "shape"),
    [(False, (0, 0)), (False, (0, 3)), (False, ()), (False, (-1, -1)), (True, (-1, -1)), (True, (-1, 3))],
)
def test_unknown_dimensions_are_filled_from_the_consumer(make, value, np_shape, shape):
    x = np.arange(6, dtype=F32).reshape(2, 3)
    with _mode(np_shape):
        for y in (make(shape) + X, S.elemwise_add(make(shape), X)):
            (out,) = _run(y, x=x)
            np.testing.assert_array_equal(out, x + value)
            assert out.dtype == F32


def test_unknown_dimensions_np_mode_zero_sizes_stay_sizes():
    with _mode(True):
        (out,) = _run(S.ones(shape=(0, -1)) + X, x=np.ones((0, 3), F32))
        assert out.shape == (0, 3)
        assert S.ones(shape=(-1, 3)).__add__(X).infer_shape_partial() == ([(-1, 3)], [(-1, 3)], [])


def test_unknown_dimensions_inference_in_both_modes():
    y = S.ones(shape=(0, 3)) + X
    assert y.infer_shape(x=(2, 3)) == ([(2, 3)], [(2, 3)], [])
    assert y.infer_shape_partial(x=(2, 0)) == ([(2, 3)], [(2, 3)], [])
    assert (S.ones(shape=()) + X).infer_shape_partial() == ([()], [()], [])
    # MXNet 1.9.1: FullyConnected's weight from the known width, the batch still unknown
    fc = S.FullyConnected(S.full(shape=(0, 3), val=2), num_hidden=4)
    assert fc.infer_shape_partial() == ([(4, 3), (4,)], [(0, 4)], [])
    with _mode(True):
        assert S.ones(shape=(-1, -1)).infer_shape_partial() == ([], [(-1, -1)], [])


@pytest.mark.parametrize("np_shape", [False, True])
def test_a_known_dimension_that_contradicts_the_consumer_is_a_conflict(np_shape):
    with _mode(np_shape), pytest.raises(ShapeError, match="shape conflict"):
        _run(S.elemwise_add(S.ones(shape=(-1, 4)), X), x=np.ones((2, 3), F32))


def test_unknown_dimensions_with_gradients_simple_bind_and_reshape():
    y = X * S.full(shape=(-1, -1), val=3, dtype="float64")
    x = np.arange(6.0).reshape(2, 3)
    grads = {"x": np.zeros((2, 3))}
    exe = y.bind(sg.cpu(), {"x": x}, args_grad=grads)
    np.testing.assert_array_equal(exe.forward(is_train=True)[0], 3 * x)
    exe.backward([np.ones((2, 3))])
    np.testing.assert_array_equal(grads["x"], np.full((2, 3), 3.0))
    exe = y.simple_bind(sg.cpu(), x=(4, 2), type_dict={"x": np.float64})
    assert exe.forward()[0].shape == (4, 2)
    exe = exe.reshape(x=(1, 5), allow_up_sizing=True)
    exe.arg_dict["x"][:] = 2.0
    np.testing.assert_array_equal(exe.forward()[0], np.full((1, 5), 6.0))


@pytest.mark.parametrize("np_shape", [False, True])
def test_unknown_dimensions_nothing_determines_fail_at_bind(np_shape):
    with _mode(np_shape):
        for y in (S.ones(shape=(-1, 3)), S.broadcast_add(S.ones(shape=(-1, -1)), X)):
            with pytest.raises(ShapeError, match=r"_ones '.*': cannot bind"):
                y.bind(sg.cpu(), {n: np.ones((2, 3), F32) for n in y.list_arguments()})


def test_shape_below_minus_one_is_refused_at_creation():
    with pytest.raises(ParamError, match=r"_ones '.*': parameter 'shape' \(-2, 3\) has a dimension below -1"):
        S.ones(shape=(-2, 3))


# -- test_scalar_tensor_creation, test_zero_size_tensor_creation -------------------------------------------------


@pytest.mark.parametrize("make", [S.zeros, S.ones, lambda shape: S.full(shape, 2)])
@pytest.mark.parametrize("shape", [(), (0, 1, 3, 0)])
def test_legacy_mode_refuses_scalar_and_zero_size_creation_at_bind(make, shape):
    """In legacy mode ``()`` is an unknown shape and 0 an unknown dimension: MXNet's bind fails ("InferShape
    failed in operator _zeros0") and its infer_shape returns Nones with its warning."""
    z = make(shape=shape)
    with pytest.raises(ShapeError, match="cannot bind"):
        z.bind(sg.cpu(), args=[])
    with pytest.raises(ShapeError, match="cannot bind"):
        z.simple_bind(sg.cpu())
    with pytest.warns(UserWarning, match="Cannot decide shape"):
        assert z.infer_shape() == (None, None, None)


@pytest.mark.parametrize(("make", "ref"), [(S.zeros, np.zeros), (S.ones, np.ones)])
@pytest.mark.parametrize("shape", [(), (0, 1, 0, 4), (0, 1, 3, 0)])
def test_np_shape_mode_creates_scalars_and_zero_size_arrays(make, ref, shape):
    with _mode(True):
        z = make(shape=shape)
        assert z.infer_shape() == ([], [shape], [])
        (out,) = z.bind(sg.cpu(), args=[]).forward()
    np.testing.assert_array_equal(out, ref(shape, dtype=F32))
    assert out.shape == shape and out.dtype == F32


def test_np_shape_symbol_bound_in_legacy_mode_reads_the_shape_as_legacy():
    """MXNet reads the mode at inference (its InitShape), not at creation."""
    with _mode(True):
        z = S.zeros(shape=())
    with pytest.raises(ShapeError, match="cannot bind"):
        z.bind(sg.cpu(), args=[])
    with _mode(True):
        assert z.bind(sg.cpu(), args=[]).forward()[0].shape == ()


# -- test_zero_size_min_max -----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["min", "max", "min_axis", "max_axis"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_zero_size_min_max(op, axis):
    """MXNet's min/max shape rule (ReduceMinMaxAxesShape) refuses a zero-size input whatever the axes, even
    where the output would be zero-size too; in NumPy shape mode both infer_shape and bind fail. In legacy mode
    a 0 is an unknown dimension to infer_shape (Nones, with the warning)."""
    kw = {} if axis is None else {"axis": axis}
    y = getattr(S, op)(X, **kw)
    with _mode(True):
        with pytest.raises(ShapeError, match=r"input 'data' must not be empty, got shape \(5, 0\)"):
            y.infer_shape(x=(5, 0))
        with pytest.raises(ShapeError, match="must not be empty"):
            y.bind(sg.cpu(), {"x": np.zeros((5, 0), F32)})
    with pytest.warns(UserWarning, match="Cannot decide shape"):
        assert y.infer_shape(x=(5, 0)) == (None, None, None)
    assert y.infer_shape(x=(5, 2))[1] == [(1,) if axis is None else (2,) if axis == 0 else (5,)]


def test_zero_size_sum_is_not_refused():
    """Only min and max refuse: a sum over a zero-size input is a zero (MXNet 1.9.1, NumPy shape mode)."""
    with _mode(True):
        (out,) = _run(S.sum(X), x=np.zeros((5, 0), F32))
        np.testing.assert_array_equal(out, [0.0])
        (out,) = _run(S.sum(X, axis=0), x=np.zeros((5, 0), F32))
        assert out.shape == (0,)


# -- test_index_array -----------------------------------------------------------------------------------------


def _index_grid(shape):
    return np.stack(np.mgrid[tuple(slice(0, n) for n in shape)], axis=-1)


def _check_index_array(sym, x, expected, head_shape=None):
    """The outputs and the (zero: an index array does not depend on the values) gradient; the checkers raise on
    a mismatch, the caller asserts on what they return."""
    outputs = check_symbolic_forward(sym, [x], [expected])
    head = np.ones(expected.shape if head_shape is None else head_shape)
    grads = check_symbolic_backward(sym, [x], [head], [np.zeros_like(x)])
    return outputs[0], grads["data"]


@pytest.mark.parametrize("np_shape", [False, True])
@pytest.mark.parametrize("shape", [(10,), (7, 5, 29), (2, 3, 1, 4, 2, 3)])
def test_index_array_default(np_shape, shape):
    with _mode(np_shape):
        out, grad = _check_index_array(S.contrib.index_array(S.Variable("data")), np.ones(shape), _index_grid(shape))
    assert out.shape == (*shape, len(shape)) and not np.any(grad)


@pytest.mark.parametrize("np_shape", [False, True])
@pytest.mark.parametrize("axes", [(3,), (4, 1), (5, 1, 3), (-1,), (-5, -1, -3)])
def test_index_array_select_axes(np_shape, axes):
    shape = (2, 3, 1, 4, 2, 3)
    with _mode(np_shape):
        sym = S.contrib.index_array(S.Variable("data"), axes=axes)
        out, grad = _check_index_array(sym, np.ones(shape), _index_grid(shape)[..., list(axes)])
    assert out.shape == (*shape, len(axes)) and not np.any(grad)


def test_index_array_default_zero_dim_and_zero_size_np_mode():
    with _mode(True):
        sym = S.contrib.index_array(S.Variable("data"))
        scalar_out, _ = _check_index_array(sym, np.ones(()), np.zeros((0,)))
        empty_out, _ = _check_index_array(sym, np.ones((0, 0, 0)), np.zeros((0, 0, 0, 3)))
    assert scalar_out.shape == (0,) and empty_out.shape == (0, 0, 0, 3)


def test_index_array_select_axes_zero_size_np_mode():
    """MXNet's test passes the expected output and head gradient as (0, 0, 2) for an output of shape
    (0, 0, 0, 0, 2): the zero-size forward comparison broadcasts, but symgrad's check_symbolic_backward refuses
    a head gradient of another shape than its output (deliberately: a wrong shape is a mistake in the test)."""
    with _mode(True):
        sym = S.contrib.index_array(S.Variable("data"), axes=(2, 1))
        x = np.ones((0, 0, 0, 0))
        assert sym.infer_shape(data=x.shape)[1] == [(0, 0, 0, 0, 2)]
        _check_index_array(sym, x, np.zeros((0, 0, 2)), head_shape=(0, 0, 0, 0, 2))
        with pytest.raises(ValueError, match=r"out_grads .* has shape \(0, 0, 2\), expected \(0, 0, 0, 0, 2\)"):
            _check_index_array(sym, x, np.zeros((0, 0, 2)))


@pytest.mark.parametrize(("shape", "out"), [((), ()), ((0, 0, 0), (0, 0, 0, 3))])
def test_index_array_scalar_and_zero_size_are_unknown_in_legacy_mode(shape, out):
    """Legacy mode reads () as an unknown shape and 0 as an unknown dimension (MXNet 1.9.1's infer_shape_partial
    gives the same); the checkers, which infer from the shapes, cannot run these cases (MXNet's forward check
    fails on them too)."""
    sym = S.contrib.index_array(S.Variable("data"))
    assert sym.infer_shape_partial(data=shape) == ([shape], [out], [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # infer_shape's "Cannot decide shape"
        with pytest.raises(ValueError, match="cannot infer every shape"):
            check_symbolic_forward(sym, [np.ones(shape)], [np.zeros(out)])
