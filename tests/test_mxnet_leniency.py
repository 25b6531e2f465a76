"""What MXNet 1.9.1's own tests rely on that symgrad used to refuse (issue 20's "leniency" list).

Each test names the MXNet test (tests/python/unittest/test_operator.py, tag 1.9.1) whose use it covers; the
expected behaviour was read off real MXNet 1.9.1 (run in its own virtual environment) before it was written.
"""

from __future__ import annotations

import json

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
