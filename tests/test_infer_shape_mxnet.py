"""Shape inference as MXNet 1.9.1 does it: unknown dimensions filled backwards through the ops, unknown shapes
reported as ``()`` (legacy) or None (NumPy shape mode), and ``symgrad.util``'s np_shape switch.

Each test names the MXNet test (tests/python/unittest/test_infer_shape.py, test_symbol.py, test_operator.py)
whose behaviour it pins; the expected values were read off real MXNet 1.9.1 runs of the same graphs.
"""

import json
import threading
import warnings

import pytest

import symgrad as sg
from symgrad import util

S = sg.sym


def _args(sym, res):
    return dict(zip(sym.list_arguments(), res[0]))


# -- backward inference (test_infer_shape.py) --------------------------------------------------------------


def test_backward_infer_through_identity_like_rhs():  # test_backward_infer
    w, wshift, data = S.Variable("weight"), S.Variable("wshift", shape=(1,)), S.Variable("data")
    wt = S._internal._identity_with_attr_like_rhs(S.broadcast_add(w, wshift), w)
    net = S.FullyConnected(data=data, weight=wt, num_hidden=11, no_bias=True)
    assert _args(net, net.infer_shape(data=(7, 100)))["weight"] == (11, 100)


def test_incomplete_infer_elewise():
    c = S.Variable("a", shape=(0, 10)) + S.Variable("b", shape=(12, 0))
    assert _args(c, c.infer_shape()) == {"a": (12, 10), "b": (12, 10)}


def test_incomplete_infer_mlp():  # FullyConnected's batch size from its known output
    b = S.FullyConnected(data=S.Variable("a", shape=(0, 10)), num_hidden=21, name="fc")
    d = b + S.Variable("c", shape=(5, 0))
    shapes = _args(d, d.infer_shape())
    assert shapes["a"] == (5, 10) and shapes["c"] == (5, 21) and shapes["fc_weight"] == (21, 10)


def test_incomplete_infer_slicechannel():
    b = S.SliceChannel(data=S.Variable("a", shape=(0, 10)), num_outputs=10, axis=1, squeeze_axis=True)
    d = b[1] + S.Variable("c", shape=(5,))
    assert _args(d, d.infer_shape())["a"] == (5, 10)
    b = S.SliceChannel(data=S.Variable("a", shape=(0, 15, 0)), num_outputs=3, squeeze_axis=False)
    d = b[1] + S.Variable("c", shape=(3, 5, 2))
    assert _args(d, d.infer_shape())["a"] == (3, 15, 2)


def test_incomplete_infer_convolution():
    # stride 1: x = y + (k - 1) d - 2 pad = 32 + 2 - 2
    b = S.Convolution(data=S.Variable("a", shape=(0, 10, 0, 0)), num_filter=21, kernel=(3, 3), pad=(1, 1))
    d = b + S.Variable("c", shape=(5, 21, 32, 32))
    assert _args(d, d.infer_shape())["a"] == (5, 10, 32, 32)


def test_incomplete_infer_convolution_strided_stays_unknown():
    # stride 2 does not determine the input size: MXNet leaves it unknown too
    b = S.Convolution(data=S.Variable("a", shape=(0, 10, 0, 0)), num_filter=4, kernel=(3, 3), stride=(2, 2))
    d = b + S.Variable("c", shape=(5, 4, 8, 8))
    assert _args(d, d.infer_shape_partial())["a"] == (5, 10, 0, 0)


def test_incomplete_infer_concat():
    c = S.Concat(S.Variable("a", shape=(0, 10)), S.Variable("b", shape=(0, 5)), num_args=2, dim=1)
    d = S.Variable("d", shape=(2, 0)) + c
    assert _args(d, d.infer_shape()) == {"a": (2, 10), "b": (2, 5), "d": (2, 15)}


def test_concat_fills_the_one_unknown_axis():
    c = S.Concat(S.Variable("a", shape=(2, 0)), S.Variable("b", shape=(2, 5)), num_args=2, dim=1)
    d = S.Variable("d", shape=(2, 12)) + c
    assert _args(d, d.infer_shape())["a"] == (2, 7)


# -- unknown shapes reported as MXNet does --------------------------------------------------------------------


def test_shape_completely_unknown():
    ret = S.sin(S.var("data"))
    assert ret.infer_shape_partial() == ([()], [()], [])
    with util.np_shape():
        assert ret.infer_shape_partial() == ([None], [None], [])


def test_symbol_infer_shape():
    data, prev = S.Variable("data"), S.Variable("prevstate")
    x2h = S.FullyConnected(data=data, name="x2h", num_hidden=128)
    h2h = S.FullyConnected(data=prev, name="h2h", num_hidden=128)
    out = S.Activation(data=S.elemwise_add(x2h, h2h), name="out", act_type="relu")
    with pytest.warns(UserWarning, match="(?s)Cannot decide shape .*prevstate"):
        assert out.infer_shape(data=(10, 64)) == (None, None, None)
    arg, outs, _ = out.infer_shape_partial(data=(10, 64))
    assert _args(out, (arg,))["h2h_weight"] == () and _args(out, (arg,))["x2h_weight"] == (128, 64)
    arg, _, _ = out.infer_shape(data=(10, 64), prevstate=outs[0])
    assert _args(out, (arg,))["h2h_weight"] == (128, 128)
    # through cast: the weight's channels stay unknown while the data's are
    d = S.cast(S.Variable("data", shape=(1, 0, 0, 0)), dtype="float16")
    w = S.cast(S.Variable("weight"), dtype="float16")
    conv = S.Convolution(data=d, weight=w, pad=(3, 3), num_filter=64, stride=(2, 2), no_bias=True, kernel=(7, 7))
    assert _args(conv, conv.infer_shape_partial()) == {"data": (1, 0, 0, 0), "weight": (64, 0, 7, 7)}


def test_batch_dot_partial_shape():
    z = S.batch_dot(S.Variable("x"), S.Variable("y"))
    assert z.infer_shape_partial(x=(0, 3, 4), y=(0, 4, 5))[1] == [(0, 3, 5)]
    assert z.infer_shape_partial(x=(0, 3, 4), y=(0, 0, 5))[1] == [()]
    with util.np_shape(True):
        assert z.infer_shape_partial(x=(-1, 3, 4), y=(-1, 4, 5))[1] == [(-1, 3, 5)]
        assert z.infer_shape_partial(x=(-1, 3, 4), y=(-1, -1, 5))[1] == [None]


def test_where_partial_shape():  # the condition must be fully known
    w = S.where(S.Variable("cond"), S.Variable("x"), S.Variable("y"))
    assert w.infer_shape_partial(cond=(0, 2), x=(0, 2), y=(0, 2))[1] == [()]
    assert w.infer_shape_partial(cond=(0,), x=(2, 2), y=(2, 2))[1] == [()]
    with util.np_shape(True):
        assert w.infer_shape_partial(cond=(-1, 2), x=(-1, 2), y=(-1, 2))[1] == [None]
        assert w.infer_shape_partial(cond=(-1,), x=(2, 2), y=(2, 2))[1] == [None]


# -- NumPy shape mode --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, legacy, numpy, expected",
    [
        (lambda: S.dot(S.Variable("x"), S.Variable("y")), {"x": (0, 3, 4), "y": (4, 5)}, None, (0, 3, 5)),
        (
            lambda: S.Embedding(data=S.Variable("x"), weight=S.Variable("w"), input_dim=100, output_dim=10),
            {"x": (0, 5), "w": (100, 10)},
            None,
            (0, 5, 10),
        ),
        (lambda: S.transpose(S.Variable("x"), axes=[0, 3, 2, 1]), {"x": (0, 3, 224, 224)}, None, (0, 224, 224, 3)),
        (lambda: S.pick(S.Variable("x"), S.Variable("index"), axis=1), {"x": (0, 3, 3), "index": (0, 3)}, None, (0, 3)),
    ],
    ids=["dot", "embedding", "transpose", "pick"],
)
def test_partial_shapes_in_both_modes(make, legacy, numpy, expected):
    # test_dot_partial_shape, test_embedding_partial_shape, test_transpose_partial_shape, test_pick_partial_shape
    sym = make()
    assert sym.infer_shape_partial(**legacy)[1] == [expected]
    as_np = {k: tuple(-1 if d == 0 else d for d in v) for k, v in legacy.items()}
    with util.np_shape(True):
        assert sym.infer_shape_partial(**as_np)[1] == [tuple(-1 if d == 0 else d for d in expected)]


def test_np_shape_zero_is_a_size():
    x = S.Variable("x")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert S.sin(x).infer_shape(x=(0, 2)) == (None, None, None)
    with util.np_shape():
        assert S.sin(x).infer_shape(x=(0, 2)) == ([(0, 2)], [(0, 2)], [])
        assert S.sin(x).infer_shape_partial(x=(-1, 2)) == ([(-1, 2)], [(-1, 2)], [])


def test_np_shape_real_zero_fills_a_partial_input_backwards():
    # A known (0, ...) output (from the fully known 'e' / 'z') fills the partial input (-1, ...) of the node that
    # makes it: the 0 is a size, not an unknown dimension. Expected values: MXNet 1.9.1, same graphs, under
    # mx.util.np_shape(True) (the real 0 used to come back as -1 for 'a', 'b' and 'x').
    a, b, e = S.Variable("a"), S.Variable("b"), S.Variable("e")
    d = S.elemwise_add(S.elemwise_add(a, b, name="c"), e, name="d")
    fc = S.FullyConnected(S.Variable("x"), num_hidden=4, name="fc")
    out = S.elemwise_add(fc, S.Variable("z"), name="o")
    with util.np_shape(True):
        assert d.infer_shape_partial(a=(-1, 3), e=(0, 3)) == ([(0, 3), (0, 3), (0, 3)], [(0, 3)], [])
        assert d.get_internals().infer_shape_partial(a=(-1, 3), e=(0, 3))[1] == [(0, 3)] * 5
        assert out.infer_shape_partial(x=(-1, 2), z=(0, 4)) == ([(0, 2), (4, 2), (4,), (0, 4)], [(0, 4)], [])
        # and forwards: a known (0, 3) beside a partial (-1, 3) (MXNet: every shape (0, 3))
        assert S.elemwise_add(a, b).infer_shape_partial(a=(0, 3), b=(-1, 3)) == ([(0, 3), (0, 3)], [(0, 3)], [])
        # a size computed from a real 0 and an unknown one is found once the unknown one is (MXNet: (0, 5))
        cat = S.concat(a, b, dim=1)
        assert cat.infer_shape_partial(a=(0, 2), b=(-1, 3)) == ([(0, 2), (0, 3)], [(0, 5)], [])


def test_slice_partial_infer():
    data = S.var("data", shape=(0, 20))
    cases = [
        ((None, None), (None, 10), [], 10),
        ((None, None), (None, 10), (None, 2), 5),
        ((None, 3), (5, 10), [], 7),
        ((2, 3), (None, 10), (3, 3), 3),
    ]
    for begin, end, step, n in cases:
        assert S.slice(data, begin=begin, end=end, step=step).infer_shape_partial()[1] == [(0, n)]
    data = S.var("data", shape=(10, 0))
    assert S.slice_axis(data, axis=0, begin=0, end=5).infer_shape_partial()[1] == [(5, 0)]
    assert S.slice_axis(data, axis=1, begin=0, end=5).infer_shape_partial()[1] == [(10, 0)]
    with util.np_shape():
        data = S.var("data", shape=(-1, 20))
        for begin, end, step, n in cases:
            assert S.slice(data, begin=begin, end=end, step=step).infer_shape_partial()[1] == [(-1, n)]
        data = S.var("data", shape=(10, -1))
        assert S.slice_axis(data, axis=1, begin=0, end=5).infer_shape_partial()[1] == [(10, -1)]


def test_load_save_symbol_np_shape_marker(tmp_path):  # test_symbol.py::test_load_save_symbol
    def net():
        return S.FullyConnected(S.var("data"), S.var("weight", shape=(128, 0)), num_hidden=128)

    with util.np_shape(True):
        assert json.loads(net().tojson())["attrs"]["is_np_shape"] == ["int", 1]
    legacy = json.loads(net().tojson())
    assert "is_np_shape" not in legacy["attrs"]
    fname = tmp_path / "net-symbol.json"
    fname.write_text(json.dumps(legacy))
    for flag in (False, True):  # a legacy file's 0 stays unknown, whichever mode loads it
        with util.np_shape(flag):
            loaded = S.load(str(fname))
            arg, out, aux = loaded.infer_shape(data=(10, 784))
            assert arg == [(10, 784), (128, 784), (128,)] and out == [(10, 128)] and aux == []


def test_np_shape_switch():
    assert util.is_np_shape() is False
    assert util.set_np_shape(True) is False
    try:
        assert util.is_np_shape() is True
        with util.np_shape(False):
            assert not util.is_np_shape()
        assert util.is_np_shape()
    finally:
        util.set_np_shape(False)

    @util.use_np_shape
    def inside():
        """doc"""
        return util.is_np_shape()

    assert inside() is True and inside.__name__ == "inside" and inside.__doc__ == "doc"
    assert util.is_np_shape() is False
    seen = []
    with util.np_shape():  # per thread, as MXNet's
        t = threading.Thread(target=lambda: seen.append(util.is_np_shape()))
        t.start()
        t.join()
    assert seen == [False]


def test_shape_checks():
    with pytest.raises(TypeError, match="set_np_shape"):
        util.set_np_shape("yes")
    with pytest.raises(ValueError, match="negative"):
        S.sin(S.Variable("x")).infer_shape_partial(x=(-2, 3))
    # legacy: -1 is unknown too, reported as 0 (MXNet)
    assert S.sin(S.Variable("x")).infer_shape_partial(x=(-1, 3)) == ([(0, 3)], [(0, 3)], [])


def test_broadcast_of_partial_shapes_keeps_what_is_known():
    """MXNet 1.9.1 (run in its venv): broadcast_add of (2, 0) and (1, 3) infers (2, 0) -- the known pair
    broadcasts, a dimension either side does not know stays unknown -- and with np_shape, (0, -1) + (1, 3) gives
    (0, -1) and (2, -1) + (1, 3) gives (2, -1). symgrad answered () and None."""
    from symgrad.util import np_shape

    c = sg.sym.broadcast_add(sg.sym.Variable("a"), sg.sym.Variable("b"))
    assert c.infer_shape_partial(a=(2, 0), b=(1, 3)) == ([(2, 0), (1, 3)], [(2, 0)], [])
    with np_shape(True):
        assert c.infer_shape_partial(a=(0, -1), b=(1, 3)) == ([(0, -1), (1, 3)], [(0, -1)], [])
        assert c.infer_shape_partial(a=(2, -1), b=(1, 3)) == ([(2, -1), (1, 3)], [(2, -1)], [])
        assert c.infer_shape_partial(a=(0, 3), b=(1, 3)) == ([(0, 3), (1, 3)], [(0, 3)], [])
