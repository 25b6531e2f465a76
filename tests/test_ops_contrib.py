"""``_contrib_`` operators beyond the OpInfo rows (tests/op_db_contrib.py): the quantization ops against numbers
worked out by hand from MXNet's reference kernels (quantize-inl.h, dequantize-inl.h; the pip build's MKLDNN
kernels use other conventions, see tests/fixtures/mxnet_cases/contrib.py), their zero gradients, allclose's
special values, and bad input."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ParamError, ShapeError, SymgradError

S = sg.sym
F32 = np.float32


def run(sym, **arrays):
    return sym.bind(sg.cpu(), arrays).forward()


def _q(data, lo, hi, **params):
    sym = S._contrib_quantize(S.Variable("d"), S.Variable("lo"), S.Variable("hi"), **params)
    return run(sym, d=np.asarray(data, F32), lo=np.array([lo], F32), hi=np.array([hi], F32))


def _dq(data, lo, hi):
    sym = S._contrib_dequantize(S.Variable("d"), S.Variable("lo"), S.Variable("hi"))
    return run(sym, d=data, lo=np.array([lo], F32), hi=np.array([hi], F32))[0]


# -- quantize / dequantize ----------------------------------------------------------------------------------------


def test_quantize_uint8_by_hand():
    # (x + 1) * 255 / 2 + 0.5, truncated
    out, lo, hi = _q([-1.0, -0.31, 0.0, 0.2, 0.77, 1.0], -1.0, 1.0)
    np.testing.assert_array_equal(out, [0, 88, 128, 153, 226, 255])
    assert out.dtype == np.uint8 and lo.tolist() == [-1.0] and hi.tolist() == [1.0]


def test_quantize_int8_is_zero_centred_by_hand():
    # sign(x) min(|x| 127 / 2 + 0.5, 127), truncated; the range becomes +-max(|lo|, |hi|)
    out, lo, hi = _q([-1.5, -0.31, 0.0, 0.2, 0.77, 2.0, 3.0], -1.5, 2.0, out_type="int8")
    np.testing.assert_array_equal(out, [-95, -20, 0, 13, 49, 127, 127])
    assert out.dtype == np.int8 and lo.tolist() == [-2.0] and hi.tolist() == [2.0]


def test_dequantize_by_hand():
    # uint8: q (hi - lo) / 255 + lo (the kernel's offset, which MXNet's docstring omits); int8: q max|.| / 127
    got = _dq(np.array([0, 51, 255], np.uint8), -1.0, 1.0)
    np.testing.assert_allclose(got, [-1.0, -0.6, 1.0], rtol=1e-6)
    got = _dq(np.array([-127, 0, 127], np.int8), -1.5, 2.0)
    np.testing.assert_allclose(got, [-2.0, 0.0, 2.0], rtol=1e-6)
    assert got.dtype == np.float32


def test_quantize_dequantize_round_trip_within_a_step():
    x = np.linspace(-1.0, 1.0, 41, dtype=F32)
    for out_type, step in (("uint8", 2 / 255), ("int8", 1 / 127)):
        q, lo, hi = _q(x, -1.0, 1.0, out_type=out_type)
        back = _dq(q, float(lo[0]), float(hi[0]))
        assert np.abs(back - x).max() <= step, out_type


def test_quantize_v2_calibrated_uncalibrated_and_passthrough():
    x = np.array([[-0.8, -0.1, 0.0, 0.3, 0.9]], F32)
    out, lo, hi = run(S._contrib_quantize_v2(S.Variable("d")), d=x)  # int8 over the data's own range
    np.testing.assert_array_equal(out, [[-113, -14, 0, 42, 127]])
    assert (lo.tolist(), hi.tolist()) == ([-0.8999999761581421], [0.8999999761581421])
    auto = S._contrib_quantize_v2(S.Variable("d"), out_type="auto", min_calib_range=0.0, max_calib_range=1.0)
    assert auto.infer_type(d=F32)[1][0] == np.uint8  # auto: a non-negative calibrated range gives uint8
    q = np.array([3, 200], np.uint8)
    out, lo, hi = run(S._contrib_quantize_v2(S.Variable("d"), out_type="uint8"), d=q)
    np.testing.assert_array_equal(out, q)
    assert (lo.tolist(), hi.tolist()) == ([0.0], [255.0])


def test_quantization_ops_give_zero_gradients_as_mxnet():
    d, lo, hi = S.Variable("d"), S.Variable("lo"), S.Variable("hi")
    args = {"d": np.array([0.1, 0.5], F32), "lo": np.array([-1.0], F32), "hi": np.array([1.0], F32)}
    grads = {k: np.full(v.shape, 3.0, F32) for k, v in args.items()}
    exe = S._contrib_quantize(d, lo, hi).bind(sg.cpu(), args, args_grad=grads)
    outs = exe.forward(is_train=True)
    exe.backward([np.ones(o.shape, o.dtype) for o in outs])
    assert all(not g.any() for g in grads.values())
    grads = {k: np.full((1,), 3.0, F32) for k in ("lo", "hi")}
    exe = S._contrib_dequantize(d, lo, hi).bind(
        sg.cpu(),
        {**args, "d": np.array([1, 2], np.uint8)},
        args_grad=grads,
        grad_req={"d": "null", "lo": "write", "hi": "write"},
    )
    exe.forward(is_train=True)
    exe.backward(np.ones(2, F32))
    assert all(not g.any() for g in grads.values())


def test_quantization_dtypes_and_shapes_are_checked():
    d, lo, hi = S.Variable("d"), S.Variable("lo"), S.Variable("hi")
    with pytest.raises(TypeError, match="'data' must be float32"):
        S._contrib_quantize(d, lo, hi).infer_type(d=np.float64)
    with pytest.raises(TypeError, match="'data' must be uint8 or int8"):
        S._contrib_dequantize(d, lo, hi).infer_type(d=np.float32)
    with pytest.raises(ShapeError, match="'min_range' must have shape"):
        S._contrib_quantize(d, lo, hi).infer_shape(d=(3,), lo=(2,))
    with pytest.raises(ParamError, match="out_type"):
        S._contrib_quantize(d, lo, hi, out_type="int32")
    assert S._contrib_quantize(d, lo, hi, name="q").list_outputs() == ["q_output0", "q_output1", "q_output2"]


# -- allclose -----------------------------------------------------------------------------------------------------


def test_allclose_nan_handling_and_output():
    a, b = S.Variable("a"), S.Variable("b")
    x = np.array([1.0, np.nan])
    (out,) = run(S._contrib_allclose(a, b), a=x, b=x.copy())
    assert out.shape == () and out.dtype == np.uint8 and out == 1
    (out,) = run(S._contrib_allclose(a, b, equal_nan=False), a=x, b=x.copy())
    assert out == 0
    (out,) = run(S._contrib_allclose(a, b), a=np.array([1.0, np.nan]), b=np.array([1.0, 2.0]))
    assert out == 0
    (out,) = run(S._contrib_allclose(a, b, atol=0.1), a=np.array([3, 5]), b=np.array([3, 5]))
    assert out == 1  # integer inputs compare too


def test_allclose_has_no_gradient_and_needs_equal_shapes():
    a, b = S.Variable("a"), S.Variable("b")
    with pytest.raises(SymgradError, match="no gradient"):
        sg.grad(S._contrib_allclose(a, b), [a])
    with pytest.raises(ShapeError, match="same shape"):
        S._contrib_allclose(a, b).infer_shape(a=(2,), b=(3,))


# -- interleaved attention: bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, shapes, what",
    [
        (
            lambda: S._contrib_interleaved_matmul_selfatt_qk(S.Variable("x"), heads=2),
            {"x": (3, 2, 10)},
            "multiple of 3 \\* heads",
        ),
        (lambda: S._contrib_interleaved_matmul_selfatt_qk(S.Variable("x"), heads=2), {"x": (3, 12)}, "must be 3-d"),
        (
            lambda: S._contrib_interleaved_matmul_selfatt_valatt(S.Variable("x"), S.Variable("a"), heads=2),
            {"x": (3, 2, 12), "a": (4, 3, 2)},
            "'attention' must have shape",
        ),
        (
            lambda: S._contrib_interleaved_matmul_encdec_qk(S.Variable("q"), S.Variable("kv"), heads=2),
            {"q": (3, 2, 4), "kv": (5, 3, 8)},
            "batch of 'queries'",
        ),
        (
            lambda: S._contrib_interleaved_matmul_encdec_valatt(S.Variable("kv"), S.Variable("a"), heads=2),
            {"kv": (5, 2, 8), "a": (4, 3, 6)},
            "'attention' must have shape",
        ),
    ],
)
def test_interleaved_shape_errors_name_the_input(make, shapes, what):
    with pytest.raises(ShapeError, match=what):
        make().infer_shape(**shapes)


def test_interleaved_heads_and_dtype_checks():
    with pytest.raises(ParamError, match="'heads' must be >= 1"):
        S._contrib_interleaved_matmul_selfatt_qk(S.Variable("x"), heads=0)
    with pytest.raises(ParamError, match="heads"):
        S._contrib_interleaved_matmul_selfatt_qk(S.Variable("x"))
    sym = S._contrib_interleaved_matmul_encdec_qk(S.Variable("q"), S.Variable("kv"), heads=1)
    with pytest.raises(TypeError, match="'keys_values' has dtype float64, expected float32"):
        sym.infer_type(q=np.float32, kv=np.float64)
    with pytest.raises(TypeError, match="float16, float32 or float64"):
        sym.infer_type(q=np.int32, kv=np.int32)


def test_div_sqrt_dim_needs_an_axis():
    # () is a scalar under NumPy shape semantics (legacy mode reads it as "unknown", as MXNet)
    with sg.util.np_shape(True), pytest.raises(ShapeError, match="at least one axis"):
        S._contrib_div_sqrt_dim(S.Variable("x")).infer_shape(x=())


def test_selfatt_equals_the_composition_in_mxnets_docstring():
    """MXNet documents selfatt_qk as reshape(0, 0, heads, 3, -1) -> pick q, k -> transpose(1, 2, 0, 3) ->
    batch_dot(q / sqrt(D), k^T); the op must agree with that composition built from symgrad's own ops."""
    heads, L, B, D = 2, 3, 2, 4
    x = S.Variable("x")
    tmp = S.reshape(x, shape=(0, 0, heads, 3, -1))

    def proj(i):
        p = S.transpose(S.squeeze(S.slice_axis(tmp, axis=3, begin=i, end=i + 1), axis=3), axes=(1, 2, 0, 3))
        return S.reshape(p, shape=(-1, 0, 0), reverse=True)

    composed = S.batch_dot(S._contrib_div_sqrt_dim(proj(0)), proj(1), transpose_b=True)
    value = np.random.default_rng(0).standard_normal((L, B, 3 * heads * D))
    (want,) = run(composed, x=value)
    (got,) = run(S._contrib_interleaved_matmul_selfatt_qk(x, heads=heads), x=value)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
