"""Op-specific tests for SequenceReverse and SequenceLast that the OpInfo table cannot express: MXNet's
wiring and attribute strings, float lengths truncated as MXNet, second order through SequenceLast's hidden
adjoint, lengths that get no gradient, and bad input."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ParamError, ShapeError
from symgrad.test_utils import check_numeric_gradient

S = sg.sym


def _forward(sym, **args):
    return sym.bind(sg.cpu(), args).forward()[0]


def test_inputs_follow_use_sequence_length():
    for op in (S.SequenceReverse, S.SequenceLast):
        assert op(S.Variable("x")).list_arguments() == ["x"]
        assert op(S.Variable("x"), S.Variable("n"), use_sequence_length=True).list_arguments() == ["x", "n"]


def test_shapes_and_mxnet_attribute_strings():
    x, n = S.Variable("x"), S.Variable("n")
    last = S.SequenceLast(x, n, use_sequence_length="True", axis="1")
    assert last.infer_shape(x=(3, 5, 2, 4)) == ([(3, 5, 2, 4), (3,)], [(3, 2, 4)], [])
    assert S.SequenceLast(x).infer_shape(x=(3, 5, 2)) == ([(3, 5, 2)], [(5, 2)], [])
    rev = S.load_json(S.SequenceReverse(x, n, use_sequence_length=True).tojson())
    assert rev.infer_shape(x=(4, 2)) == ([(4, 2), (2,)], [(4, 2)], [])


@pytest.mark.parametrize("axis", [0, 1])
def test_sequence_last_hidden_adjoint_fills_the_length_shape(axis):
    """The adjoint ``_sequence_last_scatter(ograd, data, sequence_length)`` fills an unknown ``sequence_length``
    shape with the batch size (it checked a copy and left it unknown), and still refuses a wrong one."""
    g, x, n = S.Variable("g"), S.Variable("x"), S.Variable("n")
    y = S._internal._sequence_last_scatter(g, x, n, use_sequence_length=True, axis=axis)
    data = (5, 3, 2) if axis == 0 else (3, 5, 2)
    assert y.infer_shape_partial(x=data) == ([(3, 2), data, (3,)], [data], [])
    with pytest.raises(ShapeError, match="'sequence_length'"):
        y.infer_shape(x=data, n=(4,))


def test_float_lengths_are_truncated_as_mxnet():
    x = np.arange(12.0).reshape(4, 3)
    last = _forward(
        S.SequenceLast(S.Variable("x"), S.Variable("n"), use_sequence_length=True), x=x, n=np.array([2.9, 1.0, 4.0])
    )
    np.testing.assert_array_equal(last, [x[1, 0], x[0, 1], x[3, 2]])
    rev = _forward(
        S.SequenceReverse(S.Variable("x"), S.Variable("n"), use_sequence_length=True), x=x, n=np.array([2.5, 0.0, 3.99])
    )
    np.testing.assert_array_equal(rev[:, 0], [3.0, 0.0, 6.0, 9.0])
    np.testing.assert_array_equal(rev[:, 1], x[:, 1])
    np.testing.assert_array_equal(rev[:, 2], [8.0, 5.0, 2.0, 11.0])


@pytest.mark.parametrize("axis", [0, 1])
def test_sequence_last_second_order_through_its_hidden_adjoint(axis):
    """phi = <dL/dx, v> with L = sum(SequenceLast(x)^3): the Hessian-vector product needs the gradient of
    _sequence_last_scatter (SequenceLast again)."""
    rng = np.random.default_rng(0)
    x, n = S.Variable("x"), S.Variable("n")
    y = S.SequenceLast(x, n, use_sequence_length=True, axis=axis)
    (gx,) = sg.grad(S.sum(y * y * y), [x])
    phi = S.sum(gx * S.Variable("v"))
    loc = {
        "x": rng.uniform(-1, 1, (3, 4, 2)),
        "n": np.array([1.0, 3.0, 2.0, 3.0] if axis == 0 else [2.0, 4.0, 1.0]),
        "v": rng.standard_normal((3, 4, 2)),
    }
    result = check_numeric_gradient(phi, loc, grad_nodes=["x"], dtype=np.float64, progress=False)
    assert set(result) == {"x"} and not result.excluded


def test_sequence_length_gets_no_gradient():
    x, n = S.Variable("x"), S.Variable("n")
    for op in (S.SequenceReverse, S.SequenceLast):
        gx, gn = sg.grad(S.sum(op(x, n, use_sequence_length=True)), [x, n])
        assert gx is not None and gn is None


def test_bad_axis_rank_and_length_shape_raise():
    x, n = S.Variable("x"), S.Variable("n")
    with pytest.raises(ParamError, match="'axis' must be 0"):
        S.SequenceReverse(x, axis=1)
    with pytest.raises(ParamError, match="'axis' must be 0 or 1"):
        S.SequenceLast(x, axis=2)
    with pytest.raises(ShapeError, match="rank >= 2"):
        S.SequenceLast(x).infer_shape(x=(4,))
    with pytest.raises(ShapeError, match=r"'sequence_length' has shape \(4,\), expected \(3,\)"):
        S.SequenceReverse(x, n, use_sequence_length=True).infer_shape(x=(4, 3), n=(4,))
    with pytest.raises(ShapeError, match=r"expected \(4,\)"):
        S.SequenceLast(x, n, use_sequence_length=True, axis=1).infer_shape(x=(4, 3), n=(3,))


def test_lengths_out_of_range_raise():
    x = np.zeros((3, 2))
    rev = S.SequenceReverse(S.Variable("x"), S.Variable("n"), use_sequence_length=True)
    last = S.SequenceLast(S.Variable("x"), S.Variable("n"), use_sequence_length=True)
    with pytest.raises(ValueError, match=r"SequenceReverse.*\[0, 3\]"):
        _forward(rev, x=x, n=np.array([4.0, 1.0]))
    with pytest.raises(ValueError, match=r"SequenceReverse.*\[0, 3\]"):
        _forward(rev, x=x, n=np.array([-1.0, 1.0]))
    with pytest.raises(ValueError, match=r"SequenceLast.*\[1, 3\]"):  # length 0 has no last step
        _forward(last, x=x, n=np.array([0.0, 1.0]))
