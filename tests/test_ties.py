"""Exact ties at a node no pinned reference reaches (``test_utils.ties``): a zero-biased convolution over a
zero-bordered image puts many units of the relu after it on their kink at once. Moving one border pixel moves
several of them off it together, so a difference's one-sided derivatives need not bracket the backward's value
(relu'(0) = 0 at each unit): a correct Python relu there failed ``check_backward`` and fast ``gradcheck`` (and
``check_model``, tests/test_model_check.py), and a correct built-in relu failed fast ``gradcheck``. The checkers
now compare with the forward's own pieces where they can, and otherwise take the check again at a point moved
off the ties, with a warning. A wrong backward is still caught."""

import warnings

import numpy as np
import pytest
from custom_unary import python_relu, python_scale, register_unary

import symgrad as sg
from symgrad.test_utils import GradientCheckError, check_backward, check_numeric_gradient, gradcheck, ties
from symgrad.test_utils.report import NondifferentiablePointWarning
from symgrad.test_utils.seed import with_seed

S = sg.sym


register_unary("ties_relu", python_relu())
register_unary("ties_relu_1pct", python_relu(1.01))


def _relu(kind):
    if kind == "builtin":
        return lambda h: S.relu(h, name="r")
    return lambda h: S.Custom(h, op_type=kind, name="r")


def _case(dtype):
    rng = np.random.default_rng(0)
    x = np.zeros((1, 2, 8, 8))
    x[:, :, 2:6, 2:6] = rng.standard_normal((1, 2, 4, 4))
    w, b = rng.standard_normal((4, 2, 3, 3)), np.zeros(4)  # the zero bias keeps the border's outputs exactly 0
    return x.astype(dtype), w.astype(dtype), b.astype(dtype)


def _conv_relu(kind):
    return lambda d, w, b: _relu(kind)(S.Convolution(d, w, b, kernel=(3, 3), num_filter=4, pad=(1, 1), name="c"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fast_mode", [False, True])
@pytest.mark.parametrize("kind", ["builtin", "ties_relu"])
def test_gradcheck_passes_a_correct_relu_on_exact_ties(kind, fast_mode, dtype):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert gradcheck(_conv_relu(kind), _case(dtype), fast_mode=fast_mode, progress=False) is True
    moved = [w for w in seen if issubclass(w.category, NondifferentiablePointWarning) and "moved off" in str(w.message)]
    if kind == "builtin":  # pinned: nothing to move
        assert not moved
    else:  # when the first take failed it says where and why it moved
        assert all("'r'" in str(w.message) for w in moved)


@pytest.mark.parametrize("fast_mode", [False, True])
def test_gradcheck_catches_a_wrong_relu_on_exact_ties(fast_mode):
    with pytest.raises(GradientCheckError):
        gradcheck(_conv_relu("ties_relu_1pct"), _case(np.float64), fast_mode=fast_mode, progress=False)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_check_backward_passes_a_correct_python_relu_on_exact_ties(seed, dtype):
    x, w, b = _case(dtype)
    net = lambda d: S.FullyConnected(
        _conv_relu("ties_relu")(d, S.Variable("c_weight"), S.Variable("c_bias")), num_hidden=3, name="fc"
    )
    rng = np.random.default_rng(seed)
    params = {
        "c_weight": w,
        "c_bias": b,
        "fc_weight": rng.standard_normal((3, 256)).astype(dtype),
        "fc_bias": np.zeros(3, dtype),
    }
    given = [a.copy() for a in (x, *params.values())]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NondifferentiablePointWarning)
        assert check_backward(net, x, rng.standard_normal((1, 3)).astype(dtype), params=params, progress=False) is None
    for before, after in zip(given, (x, *params.values())):  # the user's arrays are not the ones moved
        np.testing.assert_array_equal(after, before)


def test_check_backward_catches_a_wrong_python_relu_on_exact_ties():
    x, w, b = _case(np.float64)
    net = lambda d: _conv_relu("ties_relu_1pct")(d, S.Variable("c_weight"), S.Variable("c_bias"))
    head = np.random.default_rng(3).standard_normal((1, 4, 8, 8))
    with pytest.raises(GradientCheckError), warnings.catch_warnings():
        warnings.simplefilter("ignore", NondifferentiablePointWarning)
        check_backward(net, x, head, params={"c_weight": w, "c_bias": b}, progress=False)


def test_tied_nodes_and_the_moved_point():
    """``tied_nodes`` names a node reading exactly equal values, not one reading generic values; the moved
    point changes every float array but the kept ones, by at most 1e-3 of its RMS (1 for an all-zero one)."""
    x, w, b = _case(np.float64)
    sym = _conv_relu("ties_relu")(S.Variable("d"), S.Variable("w"), S.Variable("b"))
    args = {"d": x, "w": w, "b": b}
    assert ties.tied_nodes(sym, args, {}, ties.unpinned()) == ["r"]
    generic = {k: v + 0.1 * np.random.default_rng(1).standard_normal(v.shape) for k, v in args.items()}
    assert ties.tied_nodes(sym, generic, {}, ties.unpinned()) == []
    moved = ties.moved_off_ties({**args, "idx": np.array([0.0, 2.0])}, {"idx"}, seed=0)
    np.testing.assert_array_equal(moved["idx"], [0.0, 2.0])
    for k, v in args.items():
        rms = float(np.sqrt(np.mean(v**2))) or 1.0
        assert 0 < np.max(np.abs(moved[k] - v)) <= 1e-3 * rms
    assert ties.tied_nodes(sym, {k: moved[k] for k in args}, {}, ties.unpinned()) == []


class _RowMax(sg.operator.CustomOp):
    """``max`` along axis 1; the backward hands the gradient to the first maximum, or (``every_tie``, Theano's
    max-pool bug) to every tied maximum."""

    every_tie = False

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], np.max(np.asarray(in_data[0]), axis=1))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x, g = np.asarray(in_data[0]), np.asarray(out_grad[0])
        if self.every_tie:
            pick = (x == x.max(axis=1, keepdims=True)).astype(x.dtype)
        else:
            pick = np.zeros_like(x)
            pick[np.arange(x.shape[0]), np.argmax(x, axis=1)] = 1.0
        self.assign(in_grad[0], req[0], pick * g[:, None])


class _RowMaxEveryTie(_RowMax):
    every_tie = True


register_unary("ties_rowmax", _RowMax, out_shape=lambda shape: shape[:1])
register_unary("ties_rowmax_every_tie", _RowMaxEveryTie, out_shape=lambda shape: shape[:1])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_bug_only_at_ties_is_not_moved_away_from(dtype):
    """Every row's maximum is tied. A backward handing every tied maximum the whole gradient fails the model
    check at the given point, and the tie-keeping check of the node (the tied maxima moved together) confirms
    it: the failure stands, with the node named, instead of a retake off the ties that would hide it. The
    correct op passes."""
    from symgrad.test_utils import check_model

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6))
    x[:, 1] = x[:, 4] = np.max(np.abs(x), axis=1) + 1.0  # two equal maxima per row
    args = {"data": x, "fc_weight": rng.standard_normal((3, 1)), "fc_bias": np.zeros(3)}  # (4,) reads as (4, 1)

    def net(op_type):
        return S.FullyConnected(S.Custom(S.Variable("data"), op_type=op_type, name="m"), num_hidden=3, name="fc")

    assert check_model(net("ties_rowmax"), args, dtype=dtype, seed=0).ok
    result = check_model(net("ties_rowmax_every_tie"), args, dtype=dtype, seed=0, raise_on_failure=False)
    assert not result.ok and result.header.get("wrong_at_ties") == ["m"]
    assert "wrong at ties: node(s) m disagree" in str(result)
    assert "moved_off_ties" not in result.header


def test_tie_faults_names_a_node_wrong_at_its_ties_only():
    x = np.zeros((3, 5))
    x[:, 0] = x[:, 2] = 1.0  # tied maxima (and tied zeros)
    for op_type, wrong in (("ties_rowmax", []), ("ties_rowmax_every_tie", ["m"])):
        sym = S.Custom(S.Variable("data"), op_type=op_type, name="m")
        assert ties.tie_faults(sym, ["m"], {"data": x}, {}) == wrong


# -- sort and top-k at exact ties ---------------------------------------------------------------------------
# Sorting np.ones (or integer data with repeats) puts every row on a tie: moving one tied element sends it to
# either end of its group, so a central difference mixes two permutations and matches neither, while backprop
# follows the forward's own (a stable argsort). sort and topk now declare their order as a decision with a
# pinned rule (``decisions.pinned_symbol``), and gradcheck's slow mode compares a failing Jacobian with the
# pinned reference's, as its fast mode and check_backward already did: a correct sort of ones failed 240 of
# 9216 Jacobian entries before (and check_backward, fast gradcheck), in float32 and float64.

_ORDER_OPS = {
    "sort": lambda x: S.sort(x, axis=-1),
    "topk": lambda x: S.topk(x, axis=-1, k=2, ret_typ="value"),
    "sort_flat": lambda x: S.sort(x, axis=None, is_ascend=False),
}


def _tied(kind, dtype):
    if kind == "ones":
        return np.ones((2, 3, 4), dtype)
    return (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)  # repeats in every row


@pytest.mark.parametrize("kind", ["ones", "repeats"])
@pytest.mark.parametrize("op", list(_ORDER_OPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_checker_passes_a_correct_sort_at_ties(op, kind, dtype):
    f, x = _ORDER_OPS[op], _tied(kind, dtype)
    given = x.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NondifferentiablePointWarning)
        assert gradcheck(f, (x,), progress=False) is True
        assert gradcheck(f, (x,), fast_mode=True, progress=False) is True
        y_grad = np.random.default_rng(1).standard_normal(f(S.Variable("x")).infer_shape(x=x.shape)[1][0])
        check_backward(f, (x,), y_grad.astype(dtype))
        result = check_numeric_gradient(f(S.Variable("x")), {"x": x}, dtype=dtype)
    analytic, numeric = result["x"]
    assert np.abs(analytic).max() > 0.1  # the gradient flowed
    np.testing.assert_array_equal(x, given)


register_unary("ties_scale_1pct", python_scale(1.01))


@pytest.mark.parametrize("op", list(_ORDER_OPS))
@with_seed(1)  # fast mode's random projection: a 1% error can hide in an unlucky one
def test_a_wrong_gradient_through_a_tied_sort_is_still_caught(op):
    wrong = lambda x: S.Custom(_ORDER_OPS[op](x), op_type="ties_scale_1pct")
    x = _tied("repeats", np.float64)
    with pytest.raises(GradientCheckError):
        gradcheck(wrong, (x,), progress=False)
    with pytest.raises(GradientCheckError):
        gradcheck(wrong, (x,), fast_mode=True, progress=False)


def test_sort_and_topk_pin_their_recorded_order():
    from symgrad.test_utils.decisions import pinned_symbol, record_decisions

    x = S.Variable("x")
    a = np.array([[3.0, 1.0, 1.0, 2.0], [0.0, 0.0, 5.0, 0.0]])
    moved = a + np.array([[0.0, 0.1, -0.1, 0.0], [0.2, -0.1, 0.0, 0.3]])
    for sym, expected in [
        (S.sort(x, axis=-1, name="s"), [[1.1, 0.9, 2.0, 3.0], [0.2, -0.1, 0.3, 5.0]]),
        (S.topk(x, axis=-1, k=2, ret_typ="value", name="t"), [[3.0, 2.0], [5.0, 0.2]]),
    ]:
        pinned, how = pinned_symbol(sym, record_decisions(sym.bind(sg.cpu(), {"x": a})))
        assert how.pinned == [sym.name]
        np.testing.assert_allclose(pinned.bind(sg.cpu(), {"x": moved}).forward()[0], expected)
