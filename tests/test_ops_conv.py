"""Convolution / Deconvolution / Pooling / UpSampling / Pad: bad input, MXNet-specific semantics,
second-order behaviour and float16 accumulation. The generic checks are the rows of op_db_conv.py
(symgrad/ops/conv.py) and op_db_pool.py (symgrad/ops/pool.py)."""

import re

import numpy as np
import pytest
from op_db_conv import conv_ref, deconv_ref
from op_db_pool import pool_ref

import symgrad as sg
from symgrad.base import ParamError, ShapeError, SymgradError
from symgrad.test_utils import check_numeric_gradient

S = sg.sym


def _run(sym, grads=False, **arrays):
    args = {n: arrays[n] for n in sym.list_arguments()}
    g = {n: np.zeros_like(a) for n, a in args.items()} if grads else None
    exe = sym.bind(sg.cpu(), args, args_grad=g)
    outs = exe.forward(is_train=True)
    return exe, outs, g


# -- bad input: every error names the op instance, the parameter/input, expected vs got ---------


def test_kernel_rank_does_not_match_data():
    x = S.Variable("x")
    c = S.Convolution(x, kernel=(3,), num_filter=2, name="c1")
    with pytest.raises(ShapeError, match=r"Convolution 'c1'.*'data' has shape \(1, 2, 5, 5\).*kernel=\(3,\).*3-d"):
        c.infer_shape(x=(1, 2, 5, 5))


def test_num_group_must_divide_channels():
    x = S.Variable("x")
    c = S.Convolution(x, kernel=(3, 3), num_filter=4, num_group=2, name="c2")
    with pytest.raises(ShapeError, match=r"Convolution 'c2'.*'num_group'=2.*\(1, 3, 5, 5\) has 3 channels"):
        c.infer_shape(x=(1, 3, 5, 5))
    d = S.Deconvolution(x, kernel=(2, 2), num_filter=4, num_group=2, name="d2")
    with pytest.raises(ShapeError, match=r"Deconvolution 'd2'.*'num_group'=2.*3 channels"):
        d.infer_shape(x=(1, 3, 5, 5))


def test_num_filter_must_divide_by_num_group():
    with pytest.raises(ParamError, match=r"Convolution 'c3'.*'num_filter'=3.*'num_group'=2"):
        S.Convolution(S.Variable("x"), kernel=(3, 3), num_filter=3, num_group=2, name="c3")


@pytest.mark.parametrize(
    "op, name, given, expected",
    [
        ("Convolution", "c4", (4, 2, 2, 2), (4, 2, 3, 3)),  # (num_filter, channels, kh, kw)
        ("Deconvolution", "d4", (4, 2, 3, 3), (2, 4, 3, 3)),  # (channels, num_filter, kh, kw)
    ],
)
def test_weight_shape_conflict(op, name, given, expected):
    x, w = S.Variable("x"), S.Variable("w")
    c = getattr(S, op)(x, w, kernel=(3, 3), num_filter=4, name=name)
    message = f"{op} '{name}'.*'weight' has shape {re.escape(str(given))}, expected {re.escape(str(expected))}"
    with pytest.raises(ShapeError, match=message):
        c.infer_shape(x=(1, 2, 5, 5), w=given)


def test_bias_shape_conflict():
    x, b = S.Variable("x"), S.Variable("b")
    c = S.Convolution(x, bias=b, kernel=(1, 1), num_filter=4, name="c5")
    with pytest.raises(ShapeError, match=r"Convolution 'c5'.*'bias' has shape \(3,\), expected \(4,\)"):
        c.infer_shape(x=(1, 2, 5, 5), b=(3,))


def test_pad_width_of_wrong_length():
    p = S.Pad(S.Variable("x"), mode="constant", pad_width=(0, 0, 0, 0, 1, 1), name="p1")
    with pytest.raises(ShapeError, match=r"Pad 'p1'.*'pad_width' has 6 entries, expected 8"):
        p.infer_shape(x=(1, 2, 3, 3))


def test_pad_rejects_padding_n_and_c_and_big_reflect():
    x = S.Variable("x")
    with pytest.raises(ShapeError, match=r"Pad 'p2'.*first two axes"):
        S.Pad(x, mode="edge", pad_width=(0, 0, 1, 1, 1, 1, 1, 1), name="p2").infer_shape(x=(1, 2, 3, 3))
    with pytest.raises(ShapeError, match=r"Pad 'p3'.*reflect padding \(3, 0\) on axis 2.*input size 3"):
        S.Pad(x, mode="reflect", pad_width=(0, 0, 0, 0, 3, 0, 1, 1), name="p3").infer_shape(x=(1, 2, 3, 3))
    with pytest.raises(ShapeError, match=r"Pad 'p4'.*4-d or 5-d"):
        S.Pad(x, mode="edge", pad_width=(0, 0, 0, 0, 1, 1), name="p4").infer_shape(x=(1, 2, 3))


def test_stride_rank_and_values_are_checked_at_creation():
    x = S.Variable("x")
    with pytest.raises(ParamError, match=r"Convolution 'c6'.*'stride'=\(1, 1, 1\).*kernel=\(3, 3\) \(2\)"):
        S.Convolution(x, kernel=(3, 3), stride=(1, 1, 1), num_filter=2, name="c6")
    with pytest.raises(ParamError, match=r"Convolution 'c7'.*'dilate'.*>= 1"):
        S.Convolution(x, kernel=(3, 3), dilate=(0, 1), num_filter=2, name="c7")
    with pytest.raises(ParamError, match=r"Pooling 'p5'.*'pad'=\(1,\)"):
        S.Pooling(x, kernel=(2, 2), pad=(1,), name="p5")
    with pytest.raises(ParamError, match=r"Convolution 'c8'.*'kernel'"):
        S.Convolution(x, kernel=(1, 1, 1, 1), num_filter=2, name="c8")


def test_kernel_larger_than_padded_input():
    x = S.Variable("x")
    with pytest.raises(ShapeError, match=r"Convolution 'c9'.*kernel 5.*exceeds input size 3 padded to 3"):
        S.Convolution(x, kernel=(5, 1), num_filter=2, name="c9").infer_shape(x=(1, 1, 3, 3))
    with pytest.raises(ShapeError, match=r"Pooling 'p6'.*kernel size 4 exceeds input size 3"):
        S.Pooling(x, kernel=(4, 1), name="p6").infer_shape(x=(1, 1, 3, 3))


def test_unsupported_layouts_raise_not_implemented():
    x = S.Variable("x")
    with pytest.raises(NotImplementedError, match=r"Convolution 'c10'.*layout='NHWC'"):
        S.Convolution(x, kernel=(3, 3), num_filter=2, layout="NHWC", name="c10")
    with pytest.raises(NotImplementedError, match=r"Pooling 'p7'.*layout='NWC'"):
        S.Pooling(x, kernel=(3,), layout="NWC", name="p7")
    with pytest.raises(ParamError, match=r"Deconvolution 'd5'.*layout='NCW' does not fit a 2-d kernel"):
        S.Deconvolution(x, kernel=(3, 3), num_filter=2, layout="NCW", name="d5")
    # the matching channel-first layout is accepted
    S.Convolution(x, kernel=(3, 3), num_filter=2, layout="NCHW", name="c11").infer_shape(x=(1, 1, 4, 4))


def test_pooling_parameter_errors():
    x = S.Variable("x")
    with pytest.raises(ParamError, match=r"Pooling 'p8'.*'p_value'"):
        S.Pooling(x, kernel=(2, 2), pool_type="lp", name="p8")
    with pytest.raises(ParamError, match=r"Pooling 'p9'.*'kernel' is required"):
        S.Pooling(x, name="p9")
    with pytest.raises(ShapeError, match=r"Pooling 'p10'.*'same' supports 1-D"):
        S.Pooling(x, kernel=(2, 2), pooling_convention="same", name="p10").infer_shape(x=(1, 1, 4, 4))
    with pytest.raises(ShapeError, match=r"Pooling 'p11'.*kernel=\(2, 2\).*4-d input"):
        S.Pooling(x, kernel=(2, 2), name="p11").infer_shape(x=(1, 1, 4))


def test_deconvolution_target_shape_and_adj_errors():
    x = S.Variable("x")
    with pytest.raises(ShapeError, match=r"Deconvolution 'd6'.*'adj'=\(2, 0\) must be smaller than stride"):
        S.Deconvolution(x, kernel=(3, 3), stride=(2, 2), adj=(2, 0), num_filter=1, name="d6").infer_shape(
            x=(1, 1, 3, 3)
        )
    with pytest.raises(ShapeError, match=r"Deconvolution 'd7'.*target_shape=\(20, 6\) is too big"):
        S.Deconvolution(x, kernel=(3, 3), stride=(2, 2), target_shape=(20, 6), num_filter=1, name="d7").infer_shape(
            x=(1, 1, 3, 3)
        )
    # an odd remainder needs adj = 1, impossible with stride 1 (MXNet's check)
    with pytest.raises(ShapeError, match=r"Deconvolution 'd8'.*needs adj=1"):
        S.Deconvolution(x, kernel=(3, 3), target_shape=(4, 4), num_filter=1, name="d8").infer_shape(x=(1, 1, 3, 3))


def test_upsampling_errors():
    a, b = S.Variable("a"), S.Variable("b")
    with pytest.raises(ShapeError, match=r"UpSampling 'u1'.*'arg1' of shape \(1, 1, 3, 3\) cannot be upsampled"):
        S.UpSampling(a, b, scale=2, sample_type="nearest", name="u1").infer_shape(a=(1, 1, 2, 2), b=(1, 1, 3, 3))
    with pytest.raises(ShapeError, match=r"UpSampling 'u2'.*multi_input_mode='sum' needs equal channels"):
        S.UpSampling(a, b, scale=2, sample_type="nearest", multi_input_mode="sum", name="u2").infer_shape(
            a=(1, 1, 2, 2), b=(1, 2, 4, 4)
        )
    with pytest.raises(ShapeError, match=r"UpSampling 'u3'.*num_filter equal to the input channels 2"):
        S.UpSampling(a, scale=2, sample_type="bilinear", num_filter=3, name="u3").infer_shape(a=(1, 2, 2, 2))


# -- MXNet semantics ---------------------------------------------------------------


def test_deconvolution_no_bias_defaults_to_true_and_convolution_to_false():
    x = S.Variable("x")
    assert S.Deconvolution(x, kernel=(2, 2), num_filter=2, name="d").list_arguments() == ["x", "d_weight"]
    assert S.Convolution(x, kernel=(2, 2), num_filter=2, name="c").list_arguments() == ["x", "c_weight", "c_bias"]
    # parameter strings as MXNet writes them into JSON
    d = S.Deconvolution(x, kernel="(2, 2)", num_filter="2", no_bias="False", name="d2")
    assert d.list_arguments() == ["x", "d2_weight", "d2_bias"]


def test_shapes_infer_weight_and_output_like_mxnet():
    x = S.Variable("x")
    c = S.Convolution(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), dilate=(2, 1), num_filter=6, num_group=3, name="c")
    args, outs, _ = c.infer_shape(x=(2, 6, 11, 8))
    assert args == [(2, 6, 11, 8), (6, 2, 3, 3), (6,)]
    # floor((x + 2p - d(k-1) - 1)/s) + 1
    assert outs == [(2, 6, (11 + 2 - 4 - 1) // 2 + 1, (8 + 2 - 2 - 1) // 2 + 1)]
    d = S.Deconvolution(x, kernel=(4, 3), stride=(2, 3), pad=(1, 0), adj=(1, 2), num_filter=4, num_group=2, name="d")
    args, outs, _ = d.infer_shape(x=(1, 6, 5, 4))
    assert args == [(1, 6, 5, 4), (6, 2, 4, 3)]
    # s(x - 1) + d(k - 1) + 1 - 2p + adj
    assert outs == [(1, 4, 2 * 4 + 4 - 2 + 1, 3 * 3 + 3 + 2)]
    t = S.Deconvolution(x, kernel=(3, 3), stride=(2, 2), pad=(5, 5), target_shape=(9, 10), num_filter=1, name="t")
    assert t.infer_shape(x=(1, 1, 5, 5))[1] == [(1, 1, 9, 10)]  # target_shape overrides pad


def test_deconvolution_is_the_data_gradient_of_convolution():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((6, 2, 3, 2))
    params = dict(kernel=(3, 2), stride=(2, 2), pad=(1, 0), dilate=(1, 2), num_group=2)
    c = S.Convolution(S.Variable("x"), S.Variable("w"), num_filter=6, no_bias=True, **params)
    exe, outs, grads = _run(c, grads=True, x=x, w=w)
    gy = rng.standard_normal(outs[0].shape)
    exe.backward([gy])
    # conv output 4 x 2 from 7 x 6: adj = (7 + 2 - 3) % 2 = 0, (6 - 3) % 2 = 1 recovers the input size
    d = S.Deconvolution(S.Variable("g"), S.Variable("w"), num_filter=4, adj=(0, 1), **params)
    _, (dx,), _ = _run(d, g=gy, w=w)
    np.testing.assert_allclose(dx, grads["x"], rtol=1e-12, atol=1e-12)


def test_max_pooling_padding_never_wins_and_first_max_takes_the_gradient():
    x = -np.arange(1.0, 17.0).reshape(1, 1, 4, 4)  # all negative: zero padding would win
    p = S.Pooling(S.Variable("x"), kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max")
    _, (y,), _ = _run(p, x=x)
    np.testing.assert_array_equal(y, pool_ref(x, (3, 3), (2, 2), (1, 1)))
    assert y.max() < 0
    # ties: the whole window is equal, the gradient goes to its first element in row-major order
    x = np.zeros((1, 1, 4, 4))
    exe, outs, grads = _run(S.Pooling(S.Variable("x"), kernel=(2, 2), stride=(2, 2)), grads=True, x=x)
    exe.backward([np.ones((1, 1, 2, 2))])
    want = np.zeros((4, 4))
    want[::2, ::2] = 1.0
    np.testing.assert_array_equal(grads["x"][0, 0], want)
    # overlapping windows with a shared maximum accumulate into it
    x = np.zeros((1, 1, 3, 3))
    x[0, 0, 1, 1] = 5.0
    exe, _, grads = _run(S.Pooling(S.Variable("x"), kernel=(2, 2), stride=(1, 1)), grads=True, x=x)
    exe.backward([np.ones((1, 1, 2, 2))])
    assert grads["x"][0, 0, 1, 1] == 4.0 and grads["x"].sum() == 4.0


def test_avg_pooling_divisors_match_mxnet():
    x = np.ones((1, 1, 5, 5))
    inc = S.Pooling(S.Variable("x"), kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg")
    exc = S.Pooling(S.Variable("x"), kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg", count_include_pad=False)
    _, (yi,), _ = _run(inc, x=x)
    _, (ye,), _ = _run(exc, x=x)
    # corners see 4 of 9 elements, edges 6, the centre 9
    np.testing.assert_allclose(yi[0, 0], [[4 / 9, 6 / 9, 4 / 9], [6 / 9, 1, 6 / 9], [4 / 9, 6 / 9, 4 / 9]])
    np.testing.assert_allclose(ye, 1.0)
    # 'full': the last window runs past the padded input; MXNet's divisor stops at x + pad
    x = np.ones((1, 1, 4, 4))
    full = S.Pooling(S.Variable("x"), kernel=(3, 3), stride=(2, 2), pool_type="avg", pooling_convention="full")
    _, (yf,), _ = _run(full, x=x)
    assert yf.shape == (1, 1, 2, 2)
    np.testing.assert_allclose(yf[0, 0], [[1, 1], [1, 1]])


def test_deconvolution_matches_reference_for_several_configs():
    rng = np.random.default_rng(1)
    for stride, pad, adj, dil, groups in [((3, 2), (2, 1), (2, 1), (1, 1), 1), ((1, 2), (0, 2), (0, 1), (2, 1), 3)]:
        x = rng.standard_normal((2, 3, 4, 3))
        w = rng.standard_normal((3, 2, 3, 4))
        d = S.Deconvolution(
            S.Variable("x"),
            S.Variable("w"),
            kernel=(3, 4),
            stride=stride,
            pad=pad,
            adj=adj,
            dilate=dil,
            num_filter=2 * groups,
            num_group=groups,
        )
        _, (y,), _ = _run(d, x=x, w=w)
        np.testing.assert_allclose(
            y, deconv_ref(x, w, stride=stride, pad=pad, adj=adj, dilate=dil, groups=groups), rtol=1e-12, atol=1e-12
        )


def test_float16_accumulates_in_float32():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, (1, 64, 6, 6))
    w = rng.uniform(0, 1, (4, 64, 3, 3))
    c = S.Convolution(S.Variable("x"), S.Variable("w"), kernel=(3, 3), num_filter=4, no_bias=True)
    _, (y16,), _ = _run(c, x=x.astype(np.float16), w=w.astype(np.float16))
    assert y16.dtype == np.float16
    ref = conv_ref(x.astype(np.float16).astype(np.float64), w.astype(np.float16).astype(np.float64))
    # 576-term sums around 144: float16 accumulation would be off by several units, float32 only by rounding
    np.testing.assert_allclose(y16.astype(np.float64), ref, rtol=1e-3)
    p = S.Pooling(S.Variable("x"), kernel=(6, 6), pool_type="sum")
    _, (s16,), _ = _run(p, x=x.astype(np.float16))
    np.testing.assert_allclose(
        s16.astype(np.float64), x.astype(np.float16).astype(np.float64).sum((2, 3), keepdims=True), rtol=1e-3
    )


def test_third_order_through_convolution_is_defined():
    # the hidden trio is closed under differentiation: a third derivative is again a graph of it
    x, w = S.Variable("x"), S.Variable("w")
    y = S.Convolution(x, w, kernel=(2, 2), stride=(2, 1), pad=(1, 0), num_filter=2, no_bias=True)
    (gx,) = sg.grad(S.sum(S.square(y)), [x])
    (gw,) = sg.grad(S.sum(S.square(gx)), [w])
    rng = np.random.default_rng(3)
    xv, wv = rng.standard_normal((1, 2, 4, 3)), rng.standard_normal((2, 2, 2, 2))
    # the backward of sum(gw * gw) w.r.t. x is the third-order term, against finite differences of gw
    res = check_numeric_gradient(
        S.sum(gw * gw), {"x": xv, "w": wv}, grad_nodes=["x"], dtype=np.float64, rtol=1e-5, atol=1e-6, progress=False
    )
    assert list(res) == ["x"] and not res.excluded and np.abs(res["x"][0]).max() > 0  # a nonzero term, checked


_WORKSPACE_CASES = [
    (dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1)), (2, 3, 9, 8)),
    (dict(kernel=(3, 3), stride=(1, 1), pad=(1, 1)), (1, 2, 6, 7)),
    (dict(kernel=(2, 3), stride=(2, 1), pad=(1, 1), pooling_convention="full"), (1, 2, 5, 6)),
    (dict(kernel=(3,), stride=(2,), pad=(1,)), (2, 2, 9)),
    (dict(kernel=(3,), stride=(2,), pooling_convention="same"), (1, 2, 8)),
    (dict(kernel=(2, 2, 2), stride=(1, 2, 1), pad=(1, 0, 1)), (1, 2, 3, 4, 3)),
    (dict(kernel=(1, 1), global_pool=True), (2, 3, 4, 5)),
]


def _tied_with_specials(shape, dtype, rng):
    """Values on a coarse grid (many ties) with -inf, the lowest finite value and NaN sprinkled in."""
    x = np.round(rng.standard_normal(shape) * 2) / 2
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=(3, max(flat.size // 20, 1)), replace=False)
    flat[picks[0]] = -np.inf
    flat[picks[1]] = np.finfo(dtype).min
    flat[picks[2][:1]] = np.nan
    return x.astype(dtype)


@pytest.mark.parametrize("params, shape", _WORKSPACE_CASES, ids=str)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_max_pooling_workspace_gives_the_recomputed_argmax_gradient_bit_for_bit(params, shape, dtype):
    """Max pooling keeps each window's first maximum in its hidden workspace; the gradient read from
    it equals the one that recomputes the argmax from the data (_pool_max_scatter), ties, -inf, the
    lowest value (which ties with padding) and NaN included; so does the adjoint (second order)."""
    rng = np.random.default_rng(12)
    x, g, v = S.Variable("x"), S.Variable("g"), S.Variable("v")
    pooled = S.Pooling(x, pool_type="max", name="pool", **params)
    recomputed = S._pool_max_scatter(g, x, pool_type="max", **params)
    adjoint = S._pool_max_gather(v, x, pool_type="max", **params)
    lowest = np.full(shape, np.finfo(dtype).min, dtype=dtype)  # every window with padding picks the padding
    lowest.reshape(-1)[::3] = -np.inf
    for data in (rng.standard_normal(shape).astype(dtype), _tied_with_specials(shape, dtype, rng), lowest):
        exe, (y,), grads = _run(pooled, grads=True, x=data)
        kept = {}
        exe.set_monitor_callback(lambda name, arr: kept.setdefault(name, arr.copy()))
        exe.forward(is_train=True)
        gy = rng.standard_normal(y.shape).astype(dtype)
        exe.backward([gy])
        vv = rng.standard_normal(shape).astype(dtype)
        with np.errstate(invalid="ignore"):
            want = recomputed.bind(sg.cpu(), {"g": gy, "x": data}).forward()[0]
            want_adjoint = adjoint.bind(sg.cpu(), {"v": vv, "x": data}).forward()[0]
        assert grads["x"].dtype == want.dtype
        np.testing.assert_array_equal(grads["x"], want)
        ws = kept["pool_workspace"]
        assert ws.dtype == np.int64 and ws.shape == y.shape
        gathered = S._pool_max_gather_at(v, S.Variable("ws")).bind(sg.cpu(), {"v": vv, "ws": ws}).forward()[0]
        np.testing.assert_array_equal(gathered, want_adjoint)


def test_max_pooling_workspace_is_hidden_as_mxnet_does():
    """list_outputs / infer_shape / infer_type show one output; the JSON counts the hidden workspace in
    node_row_ptr exactly where MXNet 1.9.1 does (max pooling with a kernel; not global_pool without one,
    avg, lp or Pooling_v1), and the monitor names it as MXNet's does (``<name>_workspace``)."""
    import json

    x = S.Variable("x")
    cases = [
        (S.Pooling(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), name="pool"), 2),
        (S.Pooling(x, kernel=(1, 1), global_pool=True, name="pool"), 2),
        (S.Pooling(x, global_pool=True, name="pool"), 1),
        (S.Pooling(x, kernel=(2, 2), pool_type="avg", name="pool"), 1),
        (S.Pooling(x, kernel=(2, 2), pool_type="lp", p_value=2, name="pool"), 1),
        (S.Pooling_v1(x, kernel=(2, 2), name="pool"), 1),
    ]
    for sym, n_outputs in cases:
        assert sym.list_outputs() == ["pool_output"]
        assert sym.get_internals().list_outputs() == ["x", "pool_output"]
        _, outs, _ = sym.infer_shape(x=(2, 3, 8, 8))
        assert len(outs) == 1 and len(outs[0]) == 4
        assert sym.infer_type(x="float32")[1] == [np.float32]
        assert json.loads(sym.tojson())["node_row_ptr"] == [0, 1, 1 + n_outputs]
        exe = sym.simple_bind(sg.cpu(), x=(2, 3, 8, 8))
        seen = []
        exe.set_monitor_callback(lambda name, arr: seen.append(name))
        assert len(exe.forward(is_train=True)) == 1
        assert seen == ["pool_output", "pool_workspace"][:n_outputs]


def test_second_order_through_lp_pooling_raises_a_clear_error():
    x = S.Variable("x")
    y = S.Pooling(x, kernel=(2, 2), pool_type="lp", p_value=2, name="lp")
    (gx,) = sg.grad(S.sum(y), [x])
    with pytest.raises(SymgradError, match=r"_backward_Pooling.*second-order gradients through it are not defined"):
        sg.grad(S.sum(gx), [x])


def test_second_order_through_max_pooling_is_zero():
    x = S.Variable("x")
    (gx,) = sg.grad(S.sum(S.square(S.Pooling(x, kernel=(2, 2), stride=(1, 1)))), [x])
    (gxx,) = sg.grad(S.sum(gx), [x])
    xv = np.random.default_rng(4).standard_normal((1, 1, 3, 3))
    # d/dx sum(2 * y scattered) = 2 * (number of windows whose max each element is): constant-in-x piecewise
    got = gxx.bind(sg.cpu(), {"x": xv}).forward()[0]
    exe, _, grads = _run(S.Pooling(S.Variable("x"), kernel=(2, 2), stride=(1, 1)), grads=True, x=xv)
    exe.backward([np.ones((1, 1, 2, 2))])
    np.testing.assert_allclose(got, 2 * grads["x"])


def test_upsampling_bilinear_with_mxnet_bilinear_weights_interpolates():
    # MXNet's Bilinear initializer: w[i, j] = (1 - |i/f - c|) (1 - |j/f - c|), f = ceil(k/2), c = (2f - 1 - f%2)/(2f)
    scale, k = 2, 4
    f = np.ceil(k / 2)
    c = (2 * f - 1 - f % 2) / (2.0 * f)
    ax = 1 - np.abs(np.arange(k) / f - c)
    w = np.outer(ax, ax).reshape(1, 1, k, k)
    x = np.arange(9.0).reshape(1, 1, 3, 3)
    up = S.UpSampling(S.Variable("x"), S.Variable("w"), scale=scale, sample_type="bilinear", num_filter=1)
    _, (y,), _ = _run(up, x=x, w=w)
    assert y.shape == (1, 1, 6, 6)
    # away from the border the result is the linear interpolation of a linear ramp: equally spaced steps
    np.testing.assert_allclose(np.diff(y[0, 0, 2, 1:5]), 0.5)
    np.testing.assert_allclose(np.diff(y[0, 0, 1:5, 2]), 1.5)


def test_attributes_keep_mxnet_parameter_strings():
    x = S.Variable("data")
    y = S.Pooling(
        S.Convolution(x, kernel=(3, 3), num_filter=2, pad=(1, 1), name="c"),
        kernel=(2, 2),
        stride=(2, 2),
        pool_type="avg",
        count_include_pad=False,
        name="p",
    )
    attrs = y.attr_dict()
    assert attrs["c"] == {"kernel": "(3, 3)", "num_filter": "2", "pad": "(1, 1)"}
    assert attrs["p"]["count_include_pad"] == "False"
    # the parsed values: MXNet's kernel-dependent defaults filled in
    node = y._outputs[0][0].inputs[0][0]
    assert (node.params["stride"], node.params["dilate"], node.params["pad"]) == ((1, 1), (1, 1), (1, 1))
