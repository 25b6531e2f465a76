"""Shape, indexing and linear-algebra operators: MXNet 1.9 semantics the generic OpInfo tests
cannot see (Reshape's special values, slicing with None and negative steps, out-of-range
indices, dtypes of index outputs) and bad-input errors that name the operator instance, the
parameter or input, and what was expected."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ParamError, ShapeError

S = sg.sym
X = S.Variable("x")
I = S.Variable("i")


def _run(sym, **arrays):
    """Forward on cpu; returns every output."""
    return sym.bind(sg.cpu(), {n: arrays[n] for n in sym.list_arguments()}).forward()


def _out_shape(sym, **shapes):
    return sym.infer_shape(**shapes)[1][0]


def _grads(sym, heads, **arrays):
    names = sym.list_arguments()
    grads = {n: np.zeros_like(arrays[n]) for n in names}
    exe = sym.bind(sg.cpu(), {n: arrays[n] for n in names}, args_grad=grads)
    exe.forward(is_train=True)
    exe.backward(heads)
    return grads


# ----------------------------------------------------------------------------
# Reshape: every case of MXNet 1.9's test_operator.py::test_reshape
# ----------------------------------------------------------------------------

MXNET_RESHAPE_CASES = [
    [(2, 3, 5, 5), (0, -1), False, (2, 75)],
    [(2, 3, 5, 5), (0, 0, -1), False, (2, 3, 25)],
    [(5, 3, 4, 5), (0, -1, 0), False, (5, 15, 4)],
    [(2, 3, 5, 4), (-1, 0, 0), False, (8, 3, 5)],
    [(2, 3, 5, 5), (0, 0, 0, 0), False, (2, 3, 5, 5)],
    [(2, 4, 5, 3), (-1, 2, 2, 1), False, (30, 2, 2, 1)],
    [(2, 3, 5, 6), (-2,), False, (2, 3, 5, 6)],
    [(2, 3, 5, 6), (6, 1, -2), False, (6, 1, 5, 6)],
    [(2, 3, 5, 6), (-3, -3), False, (6, 30)],
    [(2, 3, 5, 6), (-3, -1), False, (6, 30)],
    [(64,), (-4, 16, 4), False, (16, 4)],
    [(64,), (-4, 16, -1), False, (16, 4)],
    [(64, 1, 2, 3), (-4, 16, -1, -2), False, (16, 4, 1, 2, 3)],
    [(2, 3, 5, 5), (0, -1), True, (5, 30)],
    [(2, 3, 5, 5), (0, 0, -1), True, (3, 5, 10)],
    [(5, 3, 4, 5), (0, -1, 0), True, (3, 20, 5)],
    [(2, 3, 5, 4), (-1, 0, 0), True, (6, 5, 4)],
    [(2, 3, 4, 5), (3, -1, 0), True, (3, 8, 5)],
    [(2, 3, 5, 5), (5, 3, 0, -1), True, (5, 3, 5, 2)],
    [(2, 3, 5, 5), (0, 0, 0, 0), True, (2, 3, 5, 5)],
    [(2, 3, 5, 6), (-2,), True, (2, 3, 5, 6)],
    [(2, 3, 5, 6), (-2, 1, 30), True, (2, 3, 1, 30)],
    [(2, 3, 5, 6), (-3, -3), True, (6, 30)],
    [(64,), (16, 4, -4), True, (16, 4)],
    [(64,), (16, -1, -4), True, (16, 4)],
    [(1, 2, 3, 64), (-2, -1, 16, -4), True, (1, 2, 3, 4, 16)],
]


@pytest.mark.parametrize("src, spec, reverse, want", MXNET_RESHAPE_CASES)
def test_reshape_matches_mxnet_test_cases(src, spec, reverse, want):
    r = S.Reshape(X, shape=spec, reverse=reverse)
    assert _out_shape(r, x=src) == want
    # the attribute strings MXNet writes into JSON give the same op
    r2 = S.Reshape(X, shape=r.attr("shape"), reverse=r.attr("reverse"))
    v = np.arange(np.prod(src), dtype=np.float32).reshape(src)
    (out,) = _run(r2, x=v)
    np.testing.assert_array_equal(out, v.reshape(want))
    g = np.arange(np.prod(src), dtype=np.float32).reshape(want)
    np.testing.assert_array_equal(_grads(r, [g], x=v)["x"], g.reshape(src))


def test_reshape_legacy_target_shape_and_keep_highest():
    assert _out_shape(S.Reshape(X, target_shape=(2, 0)), x=(2, 3, 5, 5)) == (2, 75)
    assert _out_shape(S.Reshape(X, target_shape="(0, 5)"), x=(2, 3, 5, 5)) == (30, 5)
    assert _out_shape(S.Reshape(X, target_shape=(7, 0, 3), keep_highest=True), x=(4, 3, 6)) == (4, 6, 3)
    # ``shape`` takes precedence over the deprecated ``target_shape``
    assert _out_shape(S.Reshape(X, shape=(-1,), target_shape=(2, 0)), x=(2, 3)) == (6,)


@pytest.mark.parametrize(
    "spec, reverse, src, match",
    [
        ((-1, -1), False, (2, 3), r"Reshape 'r'.*more than one -1"),
        ((0, 0, 0), False, (2, 3), r"Reshape 'r'.*more input dimensions than \(2, 3\)"),
        ((-4, -1, -1), False, (4,), r"Reshape 'r'.*cannot both be -1"),
        ((-4, 3, -1), False, (4,), r"Reshape 'r'.*do not divide dimension 4"),
        ((5, -1), False, (2, 3), r"Reshape 'r'.*cannot infer -1"),
        ((4, 2), False, (2, 3), r"Reshape 'r'.*\(2, 3\) \(6 elements\) to \(4, 2\) \(8 elements\)"),
        ((2, -4), True, (4,), r"Reshape 'r'.*-4.*followed by two dimensions"),
        ((), False, (2, 3), r"Reshape 'r'.*needs parameter 'shape'"),
    ],
)
def test_reshape_errors_name_the_op_and_the_shapes(spec, reverse, src, match):
    with pytest.raises(ShapeError, match=match):
        S.Reshape(X, shape=spec, reverse=reverse, name="r").infer_shape(x=src)


def test_reshape_like_mxnet_cases():
    # MXNet 1.9 test_operator.py::test_reshape_like
    cases = [
        [(30,), (15, 2, 4), 0, None, 0, 2, (15, 2)],
        [(30,), (15, 2, 4), None, 1, None, 2, (15, 2)],
        [(30, 7), (15, 2, 4), 0, 1, 0, 2, (15, 2, 7)],
        [(3, 5), (1, 15, 4), 0, 2, 1, 2, (15,)],
        [(3, 5), (1, 15, 4), 0, None, 1, -1, (15,)],
        [(30, 12), (4, 2, 2, 3), -1, None, 1, None, (30, 2, 2, 3)],
        [(1, 1, 7, 3, 1, 1), (81, 1, 1, 21), 1, -1, 1, None, (1, 1, 1, 21, 1)],
    ]
    b = S.Variable("b")
    for lhs, rhs, lb, le, rb, re, want in cases:
        r = S.reshape_like(X, b, lhs_begin=lb, lhs_end=le, rhs_begin=rb, rhs_end=re)
        assert _out_shape(r, x=lhs, b=rhs) == want
    # rhs lends only its shape: any dtype
    out = _run(S.reshape_like(X, b), x=np.arange(6.0), b=np.zeros((2, 3), dtype=np.int32))[0]
    assert out.shape == (2, 3) and out.dtype == np.float64
    with pytest.raises(ShapeError, match=r"reshape_like 'rl'.*lhs_begin=2, lhs_end=1"):
        S.reshape_like(X, b, lhs_begin=2, lhs_end=1, name="rl").infer_shape(x=(2, 3), b=(6,))
    with pytest.raises(ShapeError, match=r"reshape_like 'rl'.*\(2, 3\).*\(5,\).*element counts differ"):
        S.reshape_like(X, b, name="rl").infer_shape(x=(2, 3), b=(5,))


# ----------------------------------------------------------------------------
# slicing: None entries, negative steps, clamping
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "begin, end, step, want",
    [
        ((None,), (None,), (-2,), [4, 2, 0]),
        ((3,), (None,), (-1,), [3, 2, 1, 0]),
        ((-1,), (-5,), (-1,), [4, 3, 2, 1]),  # end -5 + 5 = 0 is excluded
        ((10,), (None,), (-1,), [4, 3, 2, 1, 0]),  # begin clamped to the last element for a negative step
        ((None,), (-10,), (-1,), [4, 3, 2, 1, 0]),  # end below the axis: runs through index 0
        ((-3,), (None,), (), [2, 3, 4]),
        ((1,), (100,), (3,), [1, 4]),
        ((-100,), (2,), (None,), [0, 1]),
    ],
)
def test_slice_mxnet_index_rules(begin, end, step, want):
    out = _run(S.slice(X, begin=begin, end=end, step=step), x=np.arange(5.0))[0]
    np.testing.assert_array_equal(out, want)


def test_slice_empty_selection_gives_a_zero_size_axis():
    s = S.slice(X, begin=(5, None), end=(None, None))
    assert _out_shape(s, x=(3, 2)) == (0, 2)
    assert _run(s, x=np.ones((3, 2)))[0].shape == (0, 2)


def test_slice_gradient_scatters_into_zeros():
    v = np.arange(12.0).reshape(3, 4)
    s = S.slice(X, begin=(None, 3), end=(None, 0), step=(2, -2))
    out = _run(s, x=v)[0]
    np.testing.assert_array_equal(out, v[::2, 3:0:-2])
    g = _grads(s, [np.array([[1.0, 2.0], [3.0, 4.0]])], x=v)["x"]
    want = np.zeros((3, 4))
    want[0, 3], want[0, 1], want[2, 3], want[2, 1] = 1, 2, 3, 4
    np.testing.assert_array_equal(g, want)


def test_slice_params_round_trip_through_attribute_strings():
    s = S.slice(X, begin=(1, None), end=(None, -1), step=(1, -1), name="s")
    again = S.slice(X, begin=s.attr("begin"), end=s.attr("end"), step=s.attr("step"))
    v = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(_run(again, x=v)[0], _run(s, x=v)[0])
    np.testing.assert_array_equal(_run(s, x=v)[0], v[1:, :-1:-1])


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(begin=(0, 0, 0), end=(1, 1, 1)), ShapeError, r"slice 's'.*slices 3 axes.*\(2, 3\) has 2"),
        (dict(begin=(0,), end=(1, 1)), ParamError, r"slice 's'.*'begin' \(0,\) and 'end' \(1, 1\).*same length"),
        (dict(begin=(0, 0), end=(1, 1), step=(1,)), ParamError, r"slice 's'.*'step'.*same length"),
        (dict(begin=(0,), end=(1,), step=(0,)), ParamError, r"slice 's'.*'step' \(0,\) cannot contain 0"),
        (dict(begin="(0, x)", end=(1, 1)), ParamError, r"slice 's'.*'begin'"),
    ],
)
def test_slice_bad_parameters(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        S.slice(X, name="s", **kwargs).infer_shape(x=(2, 3))


@pytest.mark.parametrize(
    "axis, begin, end, match",
    [
        (2, 0, 1, r"slice_axis 'sa'.*'axis'=2 is out of range for a 2-d input"),
        (1, 0, 4, r"slice_axis 'sa'.*begin=0, end=4.*axis 1 of size 3"),
        (1, 2, 1, r"slice_axis 'sa'.*begin=2, end=1"),
        (0, -3, None, r"slice_axis 'sa'.*begin=-3, end=None.*axis 0 of size 2"),
        (1, 3, None, r"slice_axis 'sa'.*begin=3, end=None"),
    ],
)
def test_slice_axis_out_of_range_raises(axis, begin, end, match):
    with pytest.raises(ShapeError, match=match):
        S.slice_axis(X, axis=axis, begin=begin, end=end, name="sa").infer_shape(x=(2, 3))


def test_slice_like_errors():
    y = S.Variable("y")
    with pytest.raises(ShapeError, match=r"slice_like 'sl'.*same ndim.*\(2, 3\).*\(2,\)"):
        S.slice_like(X, y, name="sl").infer_shape(x=(2, 3), y=(2,))
    with pytest.raises(ShapeError, match=r"slice_like 'sl'.*axis 1 of shape_like \(1, 4\) \(4\) exceeds.*\(3\)"):
        S.slice_like(X, y, name="sl").infer_shape(x=(2, 3), y=(1, 4))
    with pytest.raises(ShapeError, match=r"slice_like 'sl'.*'axes'=5 is out of range"):
        S.slice_like(X, y, axes=(5,), name="sl").infer_shape(x=(2, 3), y=(1, 4))


# ----------------------------------------------------------------------------
# take / pick / one_hot: out-of-range indices
# ----------------------------------------------------------------------------


def test_take_clip_and_wrap_on_out_of_range_indices():
    a = np.array([[0.0, 1.0], [10.0, 11.0], [20.0, 21.0]])
    idx = np.array([-4.0, -1.0, -0.5, 1.9, 3.0, 7.0])  # float indices truncate toward zero
    clip = _run(S.take(X, I), x=a, i=idx)[0]
    np.testing.assert_array_equal(clip[:, 0], [0, 0, 0, 10, 20, 20])
    wrap = _run(S.take(X, I, mode="wrap"), x=a, i=idx)[0]
    np.testing.assert_array_equal(wrap[:, 0], [20, 20, 0, 10, 0, 10])
    # mode='raise' is accepted and behaves like 'clip' (no value check)
    np.testing.assert_array_equal(_run(S.take(X, I, mode="raise"), x=a, i=idx)[0], clip)
    # integer indices of any dtype work the same
    np.testing.assert_array_equal(_run(S.take(X, I), x=a, i=idx.astype(np.int32))[0], clip)


def test_take_gradient_adds_up_repeated_indices():
    a = np.zeros((3, 2))
    t = S.take(X, I, mode="wrap")
    g = _grads(t, [np.ones((4, 2))], x=a, i=np.array([1.0, 4.0, 2.0, -1.0]))  # 1, 1, 2, 2
    np.testing.assert_array_equal(g["x"], [[0, 0], [2, 2], [2, 2]])
    np.testing.assert_array_equal(g["i"], np.zeros(4))  # the index input gets no gradient


def test_take_output_shape_and_dtype():
    t = S.take(X, I, axis=1)
    arg, out, _ = t.infer_shape(x=(2, 5, 3), i=(4, 1))
    assert out == [(2, 4, 1, 3)]
    assert t.infer_type(x=np.float16, i=np.int32)[1] == [np.float16]


def test_pick_clip_wrap_and_index_shapes():
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(_run(S.pick(X, I), x=x, i=np.array([-3.0, 9.0, 1.5]))[0], [0, 7, 9])
    np.testing.assert_array_equal(_run(S.pick(X, I, mode="wrap"), x=x, i=np.array([-1.0, 5.0, 2.0]))[0], [3, 5, 10])
    kept = _run(S.pick(X, I, axis=0, keepdims=True), x=x, i=np.array([[2.0, 0.0, 1.0, 2.0]]))[0]
    np.testing.assert_array_equal(kept, [[8, 1, 6, 11]])
    # the index shape is inferred when not given
    assert S.pick(X, I, axis=0).infer_shape(x=(3, 4))[0] == [(3, 4), (4,)]
    assert S.pick(X, I, axis=0, keepdims=True).infer_shape(x=(3, 4))[0] == [(3, 4), (1, 4)]
    with pytest.raises(ShapeError, match=r"pick 'p'.*'index' has shape \(3,\), expected \(4,\)"):
        S.pick(X, I, axis=0, name="p").infer_shape(x=(3, 4), i=(3,))
    with pytest.raises(ParamError, match=r"pick 'p'.*axis=None"):
        S.pick(X, I, axis=None, name="p")


def test_one_hot_out_of_range_and_dtypes():
    out = _run(S.one_hot(I, depth=3), i=np.array([0.0, 2.0, 3.0, -1.0, 1.7]))[0]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 1, 0]])
    out = _run(S.one_hot(I, depth=2, on_value=-2.9, off_value=7.2, dtype="int8"), i=np.array([[1], [0]]))[0]
    assert out.dtype == np.int8 and out.shape == (2, 1, 2)
    np.testing.assert_array_equal(out, [[[7, -2]], [[-2, 7]]])
    with pytest.raises(ParamError, match=r"one_hot 'oh'.*'depth' must be non-negative"):
        S.one_hot(I, depth=-1, name="oh")


# ----------------------------------------------------------------------------
# sort / argsort / topk
# ----------------------------------------------------------------------------


def test_topk_outputs_and_dtypes_follow_ret_typ():
    x = np.array([[0.3, 0.2, 0.4], [0.1, 0.3, 0.2]])
    # MXNet's documentation examples
    np.testing.assert_array_equal(_run(S.topk(X, k=2, ret_typ="value"), x=x)[0], [[0.4, 0.3], [0.3, 0.2]])
    np.testing.assert_array_equal(_run(S.topk(X, k=2, ret_typ="value", is_ascend=1), x=x)[0], [[0.2, 0.3], [0.1, 0.2]])
    np.testing.assert_array_equal(
        _run(S.topk(X, axis=0, k=2, ret_typ="value"), x=x)[0], [[0.3, 0.3, 0.4], [0.1, 0.2, 0.2]]
    )
    vals, idx = _run(S.topk(X, k=2, axis=None, ret_typ="both"), x=x)
    np.testing.assert_array_equal(vals, [0.4, 0.3])
    assert idx.dtype == np.float32 and idx.tolist() == [2.0, 0.0]
    both = S.topk(X, k=2, ret_typ="both", dtype="int32", name="tk")
    assert both.list_outputs() == ["tk_output0", "tk_output1"]
    assert both.infer_type(x=np.float64)[1] == [np.float64, np.int32]
    value = S.topk(X, k=2, ret_typ="value", name="tv")
    assert len(value.list_outputs()) == 1  # the indices are a hidden output
    mask = _run(S.topk(X, k=1, ret_typ="mask"), x=x.astype(np.float16))[0]
    assert mask.dtype == np.float16 and mask.tolist() == [[0, 0, 1], [0, 1, 0]]
    sort = S.sort(X, name="so")
    assert sort.list_outputs() == ["so_output0"] and sort.infer_type(x=np.float16)[1] == [np.float16]
    assert S.argsort(X).infer_type(x=np.float64)[1] == [np.float32]


def test_topk_value_gradient_goes_back_to_the_source_positions():
    x = np.array([[0.3, 0.2, 0.4], [0.1, 0.3, 0.2]])
    g = _grads(S.topk(X, k=2, ret_typ="value"), [np.array([[1.0, 2.0], [3.0, 4.0]])], x=x)["x"]
    np.testing.assert_array_equal(g, [[2, 0, 1], [0, 3, 4]])
    x = np.array([[0.3, 0.25, 0.4], [0.1, 0.35, 0.2]])
    g = _grads(S.sort(X, axis=None, is_ascend=False), [np.arange(6.0)], x=x)["x"]
    np.testing.assert_array_equal(g, [[2, 3, 0], [5, 1, 4]])


def test_topk_and_sort_errors():
    with pytest.raises(ShapeError, match=r"topk 'tk'.*k=4 is larger than the 3 elements"):
        S.topk(X, k=4, name="tk").infer_shape(x=(2, 3))
    with pytest.raises(ShapeError, match=r"topk 'tk'.*'axis'=2 is out of range for a 2-d input"):
        S.topk(X, axis=2, name="tk").infer_shape(x=(2, 3))
    with pytest.raises(ParamError, match=r"topk 'tk'.*'ret_typ' must be one of"):
        S.topk(X, ret_typ="values", name="tk")
    with pytest.raises(ParamError, match=r"argsort 'as'.*'dtype' must be one of"):
        S.argsort(X, dtype="int8", name="as")
    with pytest.raises(ShapeError, match=r"sort 'so'.*'axis'=-3 is out of range"):
        S.sort(X, axis=-3, name="so").infer_shape(x=(2, 3))


# ----------------------------------------------------------------------------
# shape errors name the op instance: axis out of range, broadcast, depth/space
# ----------------------------------------------------------------------------


AXIS_OUT_OF_RANGE = [
    (lambda: S.expand_dims(X, axis=3, name="op"), dict(x=(2, 3)), r"expand_dims 'op'.*'axis'=3"),
    (lambda: S.squeeze(X, axis=1, name="op"), dict(x=(1, 3)), r"squeeze 'op'.*axis 1 of size 3"),
    (lambda: S.squeeze(X, axis=(0, -2), name="op"), dict(x=(1, 3)), r"squeeze 'op'.*repeats axis -2"),
    (lambda: S.SwapAxis(X, dim1=0, dim2=2, name="op"), dict(x=(2, 3)), r"SwapAxis 'op'.*'dim2'=2"),
    (lambda: S.reverse(X, axis=(0, -3), name="op"), dict(x=(2, 3)), r"reverse 'op'.*'axis'=-3"),
    (lambda: S.stack(X, X, axis=3, name="op"), dict(x=(2, 3)), r"stack 'op'.*'axis'=3"),
    (lambda: S.Concat(X, X, dim=2, name="op"), dict(x=(2, 3)), r"Concat 'op'.*'dim'=2"),
    (lambda: S.SliceChannel(X, num_outputs=2, axis=-3, name="op"), dict(x=(2, 4)), r"SliceChannel 'op'.*'axis'"),
    (lambda: S.take(X, I, axis=2, name="op"), dict(x=(2, 3), i=(2,)), r"take 'op'.*'axis'=2"),
    (lambda: S.pick(X, I, axis=-3, name="op"), dict(x=(2, 3)), r"pick 'op'.*'axis'=-3"),
    (lambda: S.repeat(X, repeats=2, axis=2, name="op"), dict(x=(2, 3)), r"repeat 'op'.*'axis'=2"),
    (lambda: S.broadcast_axis(X, axis=2, size=3, name="op"), dict(x=(2, 1)), r"broadcast_axis 'op'.*'axis'=2"),
    (
        lambda: S.broadcast_like(X, I, lhs_axes=(0,), rhs_axes=(4,), name="op"),
        dict(x=(1, 3), i=(2, 3)),
        r"broadcast_like 'op'.*'rhs_axes'=4",
    ),
    (lambda: S.linalg_gemm2(X, I, axis=1, name="op"), dict(x=(2, 3), i=(3, 2)), r"_linalg_gemm2 'op'.*row axis 1"),
]

BROADCAST_AND_BLOCK = [
    (lambda: S.broadcast_to(X, shape=(2, 3), name="b"), dict(x=(2, 2)), r"broadcast_to 'b'.*\(2, 2\) to \(2, 3\)"),
    (lambda: S.broadcast_to(X, shape=(3,), name="b"), dict(x=(1, 3)), r"broadcast_to 'b'.*as many dims"),
    (lambda: S.broadcast_axis(X, axis=0, size=4, name="b"), dict(x=(2, 3)), r"broadcast_axis 'b'.*must have size 1"),
    (lambda: S.broadcast_like(X, I, name="b"), dict(x=(2, 1), i=(3, 4)), r"broadcast_like 'b'.*\(2, 1\).*\(3, 4\)"),
    (lambda: S.depth_to_space(X, block_size=2, name="b"), dict(x=(1, 6, 2, 2)), r"depth_to_space 'b'.*channels 6"),
    (lambda: S.space_to_depth(X, block_size=2, name="b"), dict(x=(1, 1, 3, 2)), r"space_to_depth 'b'.*multiples"),
    (lambda: S.depth_to_space(X, block_size=1, name="b"), dict(x=(1, 4, 2)), r"depth_to_space 'b'.*4-d"),
]


@pytest.mark.parametrize("make, shapes, match", AXIS_OUT_OF_RANGE + BROADCAST_AND_BLOCK)
def test_shape_errors_name_the_op_instance(make, shapes, match):
    with pytest.raises(ShapeError, match=match):
        make().infer_shape(**shapes)


# ----------------------------------------------------------------------------
# transpose, tile, Concat, stack, depth/space errors
# ----------------------------------------------------------------------------


def test_transpose_axes_must_be_a_permutation_of_the_right_length():
    with pytest.raises(ShapeError, match=r"transpose 't'.*'axes'=\(1, 0\) has 2 entries, the input has 3 dims"):
        S.transpose(X, axes=(1, 0), name="t").infer_shape(x=(2, 3, 4))
    with pytest.raises(ShapeError, match=r"transpose 't'.*'axes'=\(0, 0, 1\) is not a permutation"):
        S.transpose(X, axes=(0, 0, 1), name="t").infer_shape(x=(2, 3, 4))
    with pytest.raises(ShapeError, match=r"transpose 't'.*'axes'=3 is out of range"):
        S.transpose(X, axes=(0, 3, 1), name="t").infer_shape(x=(2, 3, 4))


def test_transpose_infers_its_input_shape_from_the_output():
    t = S.transpose(X, axes=(2, 0, 1), name="t")
    net = t + S.Variable("y")
    arg_shapes, _, _ = net.infer_shape(y=(4, 2, 3))
    assert dict(zip(net.list_arguments(), arg_shapes))["x"] == (2, 3, 4)


@pytest.mark.parametrize("reps", [(2, 0), (-1,), (1, -2, 3)])
def test_tile_rejects_non_positive_reps(reps):
    with pytest.raises(ParamError, match=r"tile 'tl'.*'reps' must be a positive integer.*" + str(reps[-1])):
        S.tile(X, reps=reps, name="tl")


def test_tile_bad_reps_strings_and_empty_reps():
    with pytest.raises(ParamError, match=r"tile 'tl'.*'reps'.*tuple of ints"):
        S.tile(X, reps="(2, x)", name="tl")
    with pytest.raises(ParamError, match=r"tile 'tl'.*required parameter 'reps'"):
        S.tile(X, name="tl")
    v = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(_run(S.tile(X, reps=()), x=v)[0], v)  # MXNet: empty reps is the identity


def test_concat_shapes_disagreeing_off_the_concat_dim_name_the_input():
    a, b, c = S.Variable("a"), S.Variable("b"), S.Variable("c")
    net = S.Concat(a, b, c, dim=1, name="cat")
    with pytest.raises(
        ShapeError,
        match=r"Concat 'cat'.*input arg2 has shape \(3, 1, 4\).*arg0 of shape "
        r"\(2, 3, 4\).*dim 1",
    ):
        net.infer_shape(a=(2, 3, 4), b=(2, 5, 4), c=(3, 1, 4))
    with pytest.raises(ShapeError, match=r"Concat 'cat'.*input arg1 has shape \(2, 5\).*\(2, 3, 4\)"):
        net.infer_shape(a=(2, 3, 4), b=(2, 5), c=(2, 1, 4))


def test_concat_fills_the_one_unknown_input_from_the_output():
    a, b, y = S.Variable("a"), S.Variable("b"), S.Variable("y")
    net = S.Concat(a, b, dim=0) + y
    arg_shapes, out_shapes, _ = net.infer_shape(a=(2, 3), y=(5, 3))
    assert dict(zip(net.list_arguments(), arg_shapes))["b"] == (3, 3)


def test_stack_inputs_must_share_a_shape():
    with pytest.raises(ShapeError, match=r"stack 'st'.*arg1 has \(2, 4\), arg0 has \(2, 3\)"):
        S.stack(X, I, name="st").infer_shape(x=(2, 3), i=(2, 4))


def test_depth_to_space_mxnet_example_and_inverse():
    x = np.arange(24.0).reshape(1, 4, 2, 3)
    want = [[[[0, 6, 1, 7, 2, 8], [12, 18, 13, 19, 14, 20], [3, 9, 4, 10, 5, 11], [15, 21, 16, 22, 17, 23]]]]
    y = _run(S.depth_to_space(X, block_size=2), x=x)[0]
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(_run(S.space_to_depth(X, block_size=2), x=y)[0], x)
    with pytest.raises(ParamError, match=r"space_to_depth 's'.*'block_size' must be a positive integer"):
        S.space_to_depth(X, block_size=0, name="s")


# ----------------------------------------------------------------------------
# other MXNet details
# ----------------------------------------------------------------------------


def test_squeeze_keeps_one_dimension_and_reverse_repeats_cancel():
    assert _out_shape(S.squeeze(X), x=(1, 1, 1)) == (1,)
    v = np.arange(6.0).reshape(2, 3)
    # MXNet reverses once per listed axis, so a repeated axis cancels out
    np.testing.assert_array_equal(_run(S.reverse(X, axis=(1, 1, 0)), x=v)[0], v[::-1])


def test_repeat_zero_and_flattening():
    assert _out_shape(S.repeat(X, repeats=0, axis=1), x=(2, 3)) == (0,)  # MXNet: an empty 1-d array
    np.testing.assert_array_equal(
        _run(S.repeat(X, repeats=2), x=np.array([[1.0, 2.0], [3.0, 4.0]]))[0], [1, 1, 2, 2, 3, 3, 4, 4]
    )
    with pytest.raises(ParamError, match=r"repeat 'rp'.*'repeats' cannot be negative"):
        S.repeat(X, repeats=-1, name="rp")


def test_broadcast_outputs_are_writable_and_float16_sums_accumulate_in_float32():
    y = _run(S.broadcast_to(X, shape=(3, 0)), x=np.ones((1, 2)))[0]
    y[0, 0] = 5.0  # a real array, not a read-only broadcast view
    # tile's gradient sums 4096 copies of 0.1 in float16: float32 accumulation stays exact to 1e-3
    g = _grads(S.tile(X, reps=(4096,)), [np.full(4096, 0.1, np.float16)], x=np.zeros(1, np.float16))["x"]
    assert g.dtype == np.float16
    np.testing.assert_allclose(g.astype(np.float64), [409.6], rtol=1e-3)


# ----------------------------------------------------------------------------
# linear algebra
# ----------------------------------------------------------------------------


def test_dot_shapes_follow_mxnet_dotshape():
    a, b = S.Variable("a"), S.Variable("b")
    cases = [
        ((3,), (3,), {}, (1,)),
        ((3,), (3, 4), {}, (4,)),
        ((2, 3), (3,), {}, (2,)),
        ((3,), (3, 2, 2), {}, (2, 2)),
        ((3, 2), (3,), dict(transpose_a=True), (2,)),
        ((2, 3, 4), (4, 5), {}, (2, 3, 5)),
        ((4, 2, 3), (4, 5), dict(transpose_a=True), (2, 3, 5)),
        ((2, 6), (3, 2, 6), dict(transpose_b=True), (2, 3, 2)),
        ((3, 2), (5, 2, 3), dict(transpose_a=True, transpose_b=True), (2, 5, 2)),
    ]
    for sa, sb, kw, want in cases:
        d = S.dot(a, b, **kw)
        assert d.infer_shape(a=sa, b=sb)[1] == [want], (sa, sb, kw)
        out = _run(d, a=np.ones(sa), b=np.ones(sb))[0]
        assert out.shape == want and np.all(out == (sa[-1] if not kw.get("transpose_a") else sa[0]))


def test_dot_errors():
    a, b = S.Variable("a"), S.Variable("b")
    with pytest.raises(ShapeError, match=r"dot 'd'.*cannot transpose vectors"):
        S.dot(a, b, transpose_a=True, name="d").infer_shape(a=(3,), b=(3,))
    with pytest.raises(ShapeError, match=r"dot 'd'.*lhs \(2, 3\).*gives 3.*rhs \(4, 2\).*gives 4"):
        S.dot(a, b, name="d").infer_shape(a=(2, 3), b=(4, 2))
    with pytest.raises(ParamError, match=r"dot 'd'.*forward_stype='csr'.*not supported"):
        S.dot(a, b, forward_stype="csr", name="d")
    with pytest.raises(ShapeError, match=r"batch_dot 'bd'.*N >= 3.*\(2, 3\)"):
        S.batch_dot(a, b, name="bd").infer_shape(a=(2, 3), b=(3, 2))
    with pytest.raises(ShapeError, match=r"batch_dot 'bd'.*leading batch dimensions"):
        S.batch_dot(a, b, name="bd").infer_shape(a=(2, 2, 3), b=(3, 3, 2))
    with pytest.raises(ShapeError, match=r"batch_dot 'bd'.*transpose_a=True\) has 3 columns.*has 2 rows"):
        S.batch_dot(a, b, transpose_a=True, name="bd").infer_shape(a=(2, 3, 2), b=(2, 2, 2))
    with pytest.raises(ShapeError, match=r"_linalg_gemm2 'g'.*incompatible matrix dimensions"):
        S.linalg_gemm2(a, b, name="g").infer_shape(a=(2, 3), b=(2, 3))
    with pytest.raises(ShapeError, match=r"_linalg_gemm2 'g'.*must agree except on the row axis"):
        S.linalg_gemm2(a, b, name="g").infer_shape(a=(2, 2, 3), b=(3, 3, 2))


def test_gemm2_alpha_and_row_axis_match_swapaxes_formulation():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 5, 4, 3))
    A, B = S.Variable("a"), S.Variable("b")
    out = _run(S.linalg_gemm2(A, B, axis=1, alpha=0.5), a=a, b=b)[0]
    # MXNet's documentation: swapaxes(dim1=axis, dim2=ndim-2), gemm2, swap back
    want = 0.5 * np.swapaxes(np.swapaxes(a, 1, 2) @ np.swapaxes(b, 1, 2), 1, 2)
    assert out.shape == (2, 3, 4, 3)
    np.testing.assert_allclose(out, want, rtol=1e-12)


def test_fully_connected_accepts_a_column_bias_and_checks_shapes():
    x, w, b = S.Variable("x"), S.Variable("w"), S.Variable("b")
    fc = S.FullyConnected(x, w, b, num_hidden=3, name="fc")
    assert fc.infer_shape(x=(2, 4), b=(3, 1))[0] == [(2, 4), (3, 4), (3, 1)]
    with pytest.raises(ShapeError, match=r"FullyConnected 'fc'.*'bias' has shape \(3, 2\)"):
        fc.infer_shape(x=(2, 4), b=(3, 2))
    with pytest.raises(ParamError, match=r"FullyConnected 'fc'.*num_hidden must be positive"):
        S.FullyConnected(x, num_hidden=0, name="fc")
