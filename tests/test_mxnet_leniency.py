"""What MXNet 1.9.1's own tests rely on that symgrad used to refuse (issue 20's "leniency" list).

Each test names the MXNet test (tests/python/unittest/test_operator.py, tag 1.9.1) whose use it covers; the
expected behaviour was read off real MXNet 1.9.1 (run in its own virtual environment) before it was written.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import symgrad as sg
import symgrad.test_utils as tu

S = sg.sym


def _prelu_case():
    x, gamma = S.Variable("x"), S.Variable("gamma")
    y = S.LeakyReLU(data=x, gamma=gamma, act_type="prelu")
    r = np.random.default_rng(0)
    xa = r.uniform(0.1, 1.0, (3, 4)) * np.where(r.random((3, 4)) < 0.5, -1.0, 1.0)
    gam = np.array([0.1, 0.2, 0.3, 0.4])
    # prelu(x) = x (x > 0), gamma x (x <= 0), gamma broadcast along the last axis here:
    # d/dx = 1 or gamma; d/dgamma = sum over rows of x where x <= 0
    g_x = np.where(xa > 0, 1.0, np.broadcast_to(gam, xa.shape))
    g_gam = np.where(xa > 0, 0.0, xa).sum(axis=0)
    return y, [xa, gam], [g_x, g_gam]


def test_extra_head_gradients_are_ignored_with_a_warning():
    """``test_prelu`` passes one head gradient per *input* to check_symbolic_backward; MXNet ignores the extras."""
    y, loc, expected = _prelu_case()
    heads = [np.ones((3, 4)), np.ones(4)]  # the second is beyond y's one output
    with pytest.warns(UserWarning, match="1 extra ones are ignored, as MXNet does") as record:
        tu.check_symbolic_backward(y, loc, heads, expected, dtype=np.float64)
    assert record[0].filename == __file__  # the warning points at the user's call
    # the extra head changes nothing: a wrong expectation still fails
    with pytest.raises(tu.GradientCheckError), pytest.warns(UserWarning, match="extra"):
        tu.check_symbolic_backward(y, loc, heads, [expected[0], expected[1] + 0.1], dtype=np.float64)


def test_too_few_head_gradients_stay_an_error():
    x = S.Variable("x")
    y = S.Group([S.sin(x), S.cos(x)])
    with pytest.raises(ValueError, match="out_grads has 1 arrays for 2 outputs"):
        tu.check_symbolic_backward(y, [np.ones(2)], [np.ones(2)], [np.zeros(2)])


def test_an_input_keyword_given_none_is_absent():
    """``test_sequence_reverse``: ``SequenceReverse(data=seq, sequence_length=None)`` is the op without the input."""
    seq = S.Variable("seq")
    assert S.SequenceReverse(data=seq, sequence_length=None).list_arguments() == ["seq"]
    with_len = S.SequenceReverse(data=seq, sequence_length=S.Variable("seq_len"), use_sequence_length=True)
    assert with_len.list_arguments() == ["seq", "seq_len"]
    # left out with use_sequence_length=True: created as MXNet names it, <node>_sequence_length
    auto = S.SequenceReverse(data=seq, use_sequence_length=True, name="rev")
    assert auto.list_arguments() == ["seq", "rev_sequence_length"]
    arr = np.arange(12.0).reshape(3, 2, 2)
    exe = with_len.bind(sg.cpu(), {"seq": arr, "seq_len": np.array([2.0, 3.0])})
    out = exe.forward()[0]
    expected = arr.copy()
    expected[:2, 0] = arr[1::-1, 0]  # the first 2 steps of sequence 0 reversed
    expected[:, 1] = arr[::-1, 1]  # all 3 of sequence 1
    np.testing.assert_array_equal(out, expected)


def test_a_parameter_given_none_is_parsed_as_before():
    """Only a keyword that is no parameter of the op means "absent"; a parameter given None is parsed as before."""
    with pytest.raises(sg.base.ParamError, match="axis"):
        S.SequenceReverse(data=S.Variable("seq"), axis=None)


def test_sumlogdiag_shapes_as_mxnet():
    """``test_laop``: sumlogdiag of (4, 4, 1, 1) matrices is (4, 4); of one 1x1 matrix (1,); of (3, 4, 4), (3,)."""
    a = S.Variable("a")
    s = S.linalg.sumlogdiag(a)
    for shape, want in (((4, 4, 1, 1), (4, 4)), ((1, 1), (1,)), ((3, 4, 4), (3,))):
        assert s.infer_shape(a=shape)[1] == [want]
    d = np.random.default_rng(1).uniform(1, 10, (3, 4, 4))
    ref = np.log(np.diagonal(d, axis1=-2, axis2=-1)).sum(axis=-1)
    tu.check_symbolic_forward(s, [d], [ref], dtype=np.float64)


@pytest.mark.parametrize("op, size", [("shape_array", lambda s: (len(s),)), ("size_array", lambda s: (1,))])
def test_shape_and_size_array_outputs_as_mxnet(op, size):
    """``test_shape_array`` / ``test_size_array``: int64 outputs of shape (ndim,) and (1,)."""
    x = S.var("x")
    y = getattr(S, op)(x)
    for shape in ((3,), (2, 3), (2, 1, 4, 2)):
        _, outs, _ = y.infer_shape(x=shape)
        assert outs == [size(shape)]
        exe = y.bind(sg.cpu(), {"x": np.random.rand(*shape)})
        out = exe.forward()[0]
        assert out.dtype == np.int64
        np.testing.assert_array_equal(out, np.array(shape if op == "shape_array" else [np.prod(shape)]))


# -- errors MXNet raises ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad, value", [([[0, 1, 0], [0, 1, 3]], "3"), ([[0, 1, 0], [0, 1, -5]], "-5")])
def test_gather_nd_out_of_bounds_is_an_index_error(bad, value):
    """``test_gather_nd_check_bound``: an index outside [-dim, dim - 1] raises IndexError naming it."""
    d, i = S.Variable("d"), S.Variable("i")
    data = np.array([[0.0, 1, 2], [3, 4, 5]])
    indices = np.array(bad, dtype=np.float64)
    before = indices.copy()
    exe = S.gather_nd(d, i).bind(sg.cpu(), {"d": data, "i": indices})
    with pytest.raises(IndexError, match=f"index {value} is out of bounds for axis 1 with size 3"):
        exe.forward()
    np.testing.assert_array_equal(indices, before)


def test_gather_nd_negative_indices_count_from_the_end():
    d, i = S.Variable("d"), S.Variable("i")
    data = np.array([[0.0, 1, 2], [3, 4, 5]])
    g = S.gather_nd(d, i)
    neg = g.bind(sg.cpu(), {"d": data, "i": np.array([[0.0, 1, -1], [0, 1, -2]])}).forward()[0]
    np.testing.assert_array_equal(neg, data[[0, 1, -1], [0, 1, -2]])


@pytest.mark.parametrize(
    "op, shape, block, words",
    [
        ("depth_to_space", (1, 3, 2, 2), 2, "not a multiple of block_size"),  # test_invalid_depth_dim
        ("depth_to_space", (1, 4, 0, 3), 2, "zero-size axis 2"),  # test_invalid_space_dim
        ("space_to_depth", (1, 1, 3, 2), 2, "multiples of block_size"),  # test_invalid_space_dim
        ("space_to_depth", (1, 0, 2, 2), 2, "zero-size axis 1"),  # test_invalid_depth_dim
    ],
)
def test_depth_space_invalid_shapes(op, shape, block, words):
    """``test_depthtospace`` / ``test_spacetodepth``: the shapes MXNet refuses are errors here too."""
    x = S.Variable("x")
    y = getattr(S, op)(x, block_size=block)
    with pytest.raises(sg.base.ShapeError, match=words):
        y.bind(sg.cpu(), {"x": np.zeros(shape)}).forward()


@pytest.mark.parametrize("op", ["depth_to_space", "space_to_depth"])
def test_depth_space_block_size_zero(op):
    with pytest.raises(sg.base.ParamError, match="'block_size' must be a positive integer, got 0"):
        getattr(S, op)(S.Variable("x"), block_size=0)


# -- small defects found by fuzzing -------------------------------------------------------------------------


def _activation_doc(*fields):
    """Symbol JSON of x -> Activation whose node carries ``fields`` ((key, attributes) in file order)."""
    node = {"op": "Activation", "name": "act", **dict(fields), "inputs": [[0, 0, 0]]}
    variable = {"op": "null", "name": "x", "inputs": []}
    return json.dumps(
        {
            "nodes": [variable, node],
            "arg_nodes": [0],
            "node_row_ptr": [0, 1, 2],
            "heads": [[1, 0, 0]],
            "attrs": {"mxnet_version": ["int", 10901]},
        }
    )


@pytest.mark.parametrize("first, second", [("attr", "attrs"), ("attrs", "attr")])
def test_attr_and_attrs_the_later_one_in_the_file_wins_whole(first, second):
    """MXNet 1.9.1 reads "attr" and "attrs" into one field: the later key replaces the earlier one whole."""
    doc = _activation_doc((first, {"act_type": "relu", "__lr_mult__": "2"}), (second, {"act_type": "tanh"}))
    act = S.load_json(doc).attr_dict()["act"]
    assert act["act_type"] == "tanh" and "__lr_mult__" not in act
    with pytest.raises(sg.base.SerializationError, match="required parameter 'act_type' of Activation is missing"):
        S.load_json(_activation_doc((first, {"act_type": "relu"}), (second, {"__wd_mult__": "3"})))


@pytest.mark.parametrize("order", [("param", "attrs"), ("attrs", "param")])
def test_param_is_merged_under_attrs(order):
    """MXNet 0.x's "param" is read apart and merged under "attrs" (attrs wins a conflict, in either order)."""
    fields = {"param": {"act_type": "relu", "__lr_mult__": "2"}, "attrs": {"act_type": "tanh", "__wd_mult__": "3"}}
    act = S.load_json(_activation_doc(*[(k, fields[k]) for k in order])).attr_dict()["act"]
    assert act["act_type"] == "tanh" and act["__lr_mult__"] == "2" and act["__wd_mult__"] == "3"


# the hidden helper ops reachable through sg.sym._internal and symbol files check what they are given
_HIDDEN_BAD = [
    (
        "_dot_grad_lhs",
        ("g", "a", "b"),
        {},
        dict(g=(2, 5), a=(2, 3), b=(3, 4)),
        "'ograd' has shape (2, 5), expected (2, 4)",
    ),
    ("_take_scatter", ("g", "i", "d"), dict(axis=0), dict(g=(3, 7), i=(2,), d=(4, 5)), "expected (2, 5)"),
    ("_pick_scatter", ("g", "i", "d"), dict(axis=1), dict(g=(5,), i=(3,), d=(3, 4)), "expected (3,)"),
    ("_bilinear_resize_adjoint", ("g", "l"), {}, dict(g=(2, 3, 4, 4), l=(1, 1, 2, 2)), "differ in batch or channels"),
    ("_bilinear_resize_adjoint", ("g", "l"), {}, dict(g=(4, 4), l=(1, 1, 2, 2)), "'ograd' must be 4-d"),
    ("_image_grey_adjoint", ("g", "d"), {}, dict(g=(4, 1), d=(4, 3)), "must be an (H, W, C) image, got (4, 3)"),
    ("_image_grey_adjoint", ("g", "d"), {}, dict(g=(4, 4, 2), d=(4, 4, 3)), "expected (4, 4, 1)"),
]


@pytest.mark.parametrize("op, names, params, shapes, words", _HIDDEN_BAD, ids=lambda v: v if isinstance(v, str) else "")
def test_hidden_helper_ops_check_their_inputs(op, names, params, shapes, words):
    sym = getattr(S._internal, op)(*[S.Variable(n) for n in names], **params)
    arrays = {k: np.ones(s) for k, s in shapes.items()}
    with pytest.raises(sg.base.ShapeError, match=re.escape(words)) as info:
        sym.bind(sg.cpu(), arrays).forward()
    assert op in str(info.value)


def test_hidden_take_scatter_is_take_adjoint():
    """The same op given the right shapes still computes take's adjoint: <take(x, i), g> = <x, scatter(g)>."""
    r = np.random.default_rng(3)
    x, g, idx = r.standard_normal((4, 5)), r.standard_normal((3, 5)), np.array([2.0, 0.0, 2.0])
    sym = S._internal._take_scatter(S.Variable("g"), S.Variable("i"), S.Variable("d"), axis=0)
    scattered = sym.bind(sg.cpu(), {"g": g, "i": idx, "d": x}).forward()[0]
    np.testing.assert_allclose((x[idx.astype(int)] * g).sum(), (x * scattered).sum(), rtol=1e-12)


@pytest.mark.parametrize("maxidx", [[0.0, 9.0, -1.0], [0.5, 1.0, -1.0], [-2.0, 0.0, 1.0]])
def test_roi_pool_gather_checks_its_indices(maxidx):
    sym = S._internal._roi_pool_gather(S.Variable("v"), S.Variable("m"))
    with pytest.raises(IndexError, match=r"_roi_pool_gather: input 'maxidx' must hold whole numbers in \[-1, 3\]"):
        sym.bind(sg.cpu(), {"v": np.ones((2, 2)), "m": np.array(maxidx)}).forward()
    good = sym.bind(sg.cpu(), {"v": np.arange(4.0).reshape(2, 2), "m": np.array([3.0, 0.0, -1.0])}).forward()[0]
    np.testing.assert_array_equal(good, [3.0, 0.0, 0.0])


# -- binding as MXNet's tests do ----------------------------------------------------------------------------


def _conv_without_bias():
    x, w = S.Variable("x"), S.Variable("w")
    return S.Convolution(x, w, None, num_filter=2, kernel=(3,), no_bias=True)


@pytest.mark.parametrize("req", ["null", "write", "add"])
def test_absent_bias_given_as_none_binds(req):
    """``test_convolution_independent_gradients``: args, args_grad and grad_req name the absent bias 'b' (None)."""
    conv = _conv_without_bias()
    assert conv.list_arguments() == ["x", "w"]
    r = np.random.default_rng(5)
    x, w, head = r.standard_normal((2, 1, 7)), r.standard_normal((2, 1, 3)), r.standard_normal((2, 2, 5))
    # reference: the correlation and its gradients written out in numpy
    out = np.stack([[np.correlate(x[n, 0], w[f, 0], "valid") for f in range(2)] for n in range(2)])
    gw = np.stack([[np.correlate(x[n, 0], head[n, f], "valid") for n in range(2)] for f in range(2)]).sum(1)
    gx = np.stack([sum(np.convolve(head[n, f], w[f, 0], "full") for f in range(2)) for n in range(2)])[:, None]
    start = {"x": np.full(x.shape, 0.5), "w": np.full(w.shape, 0.5)}
    grads = {"x": start["x"].copy(), "w": start["w"].copy(), "b": None}
    with pytest.warns(UserWarning, match=r"grad_req names \['b'\], which are not arguments; ignored"):
        exe = conv.bind(sg.cpu(), {"x": x, "w": w, "b": None}, args_grad=grads, grad_req={"x": req, "w": req, "b": req})
    np.testing.assert_allclose(exe.forward(is_train=True)[0], out, rtol=1e-12)
    exe.backward(head)
    for name, exact in (("x", gx), ("w", gw[:, None])):
        want = {"null": start[name], "write": exact, "add": start[name] + exact}[req]
        np.testing.assert_allclose(grads[name], want, rtol=1e-12, atol=1e-12)


def test_an_array_for_a_name_the_symbol_lacks_is_still_an_error():
    conv = _conv_without_bias()
    with pytest.raises(sg.base.BindError, match="'b' is not an argument of this symbol"):
        conv.bind(sg.cpu(), {"x": np.ones((2, 1, 7)), "w": np.ones((2, 1, 3)), "b": np.ones(2)})


def test_simple_bind_ignores_keywords_that_are_not_shapes():
    """``test_take`` passes the op's own ``axis`` and ``mode`` to simple_bind; MXNet ignores them."""
    a, i = S.Variable("a"), S.BlockGrad(S.Variable("indices"))
    y = S.take(a=a, indices=i, axis=0, mode="clip")
    with pytest.warns(UserWarning) as record:
        exe = y.simple_bind(sg.cpu(), a=(3, 4), indices=(2,), axis=0, mode="clip")
    ignored = sorted(str(w.message).split(":")[1].split("=")[0].strip() for w in record)
    assert ignored == ["ignoring keyword axis", "ignoring keyword mode"]
    assert exe.arg_dict["a"].shape == (3, 4)
    with pytest.raises(sg.base.BindError, match="a shape is given for 'ax', which is not an input"):
        y.simple_bind(sg.cpu(), a=(3, 4), indices=(2,), ax=(3, 4))


def test_backward_ignores_extra_head_gradients_with_a_warning():
    y, loc, expected = _prelu_case()
    grads = {"x": np.zeros((3, 4)), "gamma": np.zeros(4)}
    exe = y.bind(sg.cpu(), {"x": loc[0], "gamma": loc[1]}, args_grad=grads)
    exe.forward(is_train=True)
    with pytest.warns(UserWarning, match="got 2 out_grads for 1 outputs") as record:
        exe.backward([np.ones((3, 4)), np.ones(4)])
    assert record[0].filename == __file__
    np.testing.assert_allclose(grads["x"], expected[0], rtol=1e-12)
    np.testing.assert_allclose(grads["gamma"], expected[1], rtol=1e-12)


@pytest.mark.parametrize("op", ["shape_array", "size_array"])
def test_a_head_gradient_the_backward_never_reads_may_have_any_shape(op):
    """``test_shape_array`` / ``test_size_array`` pass a head gradient shaped like the *input*; MXNet never
    reads it (the gradient of a shape is zero), so it is ignored with a warning; x's gradient is written zero."""
    x = S.var("x")
    exe = getattr(S, op)(x).bind(sg.cpu(), {"x": np.random.rand(3, 4)}, args_grad={"x": np.full((3, 4), 7.0)})
    exe.forward(is_train=True)
    with pytest.warns(UserWarning, match="ignored, as the backward does not read it"):
        exe.backward([np.ones((3, 4))])
    np.testing.assert_array_equal(exe.grad_dict["x"], np.zeros((3, 4)))


def test_a_mis_shaped_head_gradient_that_is_read_is_still_an_error():
    x = S.var("x")
    exe = S.sin(x).bind(sg.cpu(), {"x": np.ones((3, 4))}, args_grad={"x": np.zeros((3, 4))})
    exe.forward(is_train=True)
    with pytest.raises(sg.base.ShapeError, match=r"has shape \(4, 3\), expected \(3, 4\)"):
        exe.backward([np.ones((4, 3))])


def test_multi_proposal_is_proposal_per_image():
    """``test_multi_proposal_op``: MultiProposal of a batch gives (batch * post_n, 5) rois and (batch * post_n, 1)
    scores, image k's rows are Proposal of image k alone, with k in the rois' first column."""
    rng = np.random.default_rng(0)
    batch, anchors, h, w, post_n = 3, 9, 6, 6, 10
    cls = rng.random((batch, 2 * anchors, h, w))
    bbox = rng.random((batch, 4 * anchors, h, w)) * 0.1
    info = np.array([[90.0, 80, 1.0], [70, 95, 0.8], [96, 96, 0.9]])
    params = dict(
        feature_stride=16,
        scales=(8, 16, 32),
        ratios=(0.5, 1, 2),
        rpn_pre_nms_top_n=50,
        rpn_post_nms_top_n=post_n,
        threshold=0.7,
        rpn_min_size=16,
        output_score=True,
    )
    c, b, i = S.Variable("c"), S.Variable("b"), S.Variable("i")
    multi = S.contrib.MultiProposal(cls_prob=c, bbox_pred=b, im_info=i, **params)
    assert multi.infer_shape(c=cls.shape, b=bbox.shape, i=info.shape)[1] == [(batch * post_n, 5), (batch * post_n, 1)]
    rois, scores = multi.bind(sg.cpu(), {"c": cls, "b": bbox, "i": info}).forward()
    single = S.contrib.Proposal(cls_prob=c, bbox_pred=b, im_info=i, **params)
    for k in range(batch):
        one = single.bind(sg.cpu(), {"c": cls[k : k + 1], "b": bbox[k : k + 1], "i": info[k : k + 1]}).forward()
        rows = slice(k * post_n, (k + 1) * post_n)
        np.testing.assert_array_equal(rois[rows, 0], k)
        np.testing.assert_allclose(rois[rows, 1:], one[0][:, 1:], rtol=1e-12)
        np.testing.assert_allclose(scores[rows], one[1], rtol=1e-12)
