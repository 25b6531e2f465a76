"""Op-specific tests for ``RNN`` that the OpInfo rows (tests/op_db_rnn.py) cannot express: MXNet's names and
inferred shapes, LSTMP against MXNet's own inference forward, dropout between layers, gradients from the
state outputs alone, state clipping of NaN, second order through the fused backward, and bad input."""

import numpy as np
import pytest
from op_db_rnn import reference

import symgrad as sg
from symgrad.base import ParamError, ShapeError, SymgradError
from symgrad.test_utils import check_numeric_gradient

S = sg.sym


def _rnn(mode, **params):
    names = ["data", "parameters", "state"] + (["state_cell"] if mode == "lstm" else [])
    if params.get("use_sequence_length"):
        names.append("sequence_length")
    return S.RNN(*[S.Variable(n) for n in names], mode=mode, name="rnn", **params)


def _random_args(sym, rng, **shapes):
    arg_shapes = sym.infer_shape(**shapes)[0]
    return {n: rng.uniform(-0.7, 0.7, s) for n, s in zip(sym.list_arguments(), arg_shapes)}


# ----------------------------------------------------------------------------
# Names and shapes (as MXNet 1.9.1's list_arguments / list_outputs / infer_shape)
# ----------------------------------------------------------------------------


def test_names_and_inferred_shapes_match_mxnet():
    sym = _rnn("lstm", state_size=3, num_layers=2, bidirectional=True, state_outputs=True)
    assert sym.list_arguments() == ["data", "parameters", "state", "state_cell"]
    assert sym.list_outputs() == ["rnn_output", "rnn_state_output", "rnn_statecell_output"]
    # MXNet 1.9.1: ([(4, 2, 3), (456,), (4, 2, 3), (4, 2, 3)], [(4, 2, 6), (4, 2, 3), (4, 2, 3)], [])
    assert sym.infer_shape(data=(4, 2, 3)) == (
        [(4, 2, 3), (456,), (4, 2, 3), (4, 2, 3)],
        [(4, 2, 6), (4, 2, 3), (4, 2, 3)],
        [],
    )
    gru = _rnn("gru", state_size=3, num_layers=1, use_sequence_length=True)
    assert gru.list_arguments() == ["data", "parameters", "state", "sequence_length"]
    assert gru.list_outputs() == ["rnn_output"]
    assert gru.infer_shape(data=(4, 2, 3))[0] == [(4, 2, 3), (72,), (1, 2, 3), (2,)]
    lstmp = _rnn("lstm", state_size=3, num_layers=2, bidirectional=True, state_outputs=True, projection_size=2)
    assert lstmp.infer_shape(data=(4, 2, 3)) == (
        [(4, 2, 3), (384,), (4, 2, 2), (4, 2, 3)],
        [(4, 2, 4), (4, 2, 2), (4, 2, 3)],
        [],
    )


def test_sequence_length_keeps_its_own_integer_type():
    sym = _rnn("gru", state_size=2, num_layers=1, use_sequence_length=True)
    _, out_types, _ = sym.infer_type(data=np.float64, sequence_length=np.int32)
    assert [np.dtype(t) for t in out_types] == [np.float64]
    with pytest.raises(TypeError, match="'parameters'.*float32.*float64"):
        sym.infer_type(data=np.float64, parameters=np.float32)


def test_parameters_may_follow_the_inputs_positionally():
    d, w, s = (S.Variable(n) for n in ("data", "parameters", "state"))
    sym = S.RNN(d, w, s, 2, 1, False, "gru")  # state_size, num_layers, bidirectional, mode
    assert sym.infer_shape(data=(3, 1, 2))[0][1] == (3 * 2 * (2 + 2 + 2),)


# ----------------------------------------------------------------------------
# LSTMP against MXNet (its CPU kernel only runs LSTMP inference, so the case recorder cannot record it)
# ----------------------------------------------------------------------------

# MXNet 1.9.1, CPU, float64, forward(is_train=False) of RNN(mode='lstm', state_size=2, num_layers=2,
# bidirectional=True, projection_size=1, state_outputs=True) on the inputs drawn in the test below (its
# LSTMP kernel crashes there without state_outputs: it keeps the projected state in the hy buffer)
_MXNET_LSTMP = (
    [0.15182638625799785, 0.03097325414244323, 0.18305489304706946, 0.0403237786940303],
    [-0.02882677941789452, -0.006576270221970489, 0.18305489304706946, 0.03097325414244323],
    [
        -0.4948185943500415,
        0.6124068262520477,
        0.31464332414677676,
        -0.13444635559511306,
        0.1987599599956903,
        0.8495944778610734,
        -0.216284385683077,
        0.5228960768941634,
    ],
)


def test_lstm_projection_matches_mxnet_inference():
    sym = _rnn("lstm", state_size=2, num_layers=2, bidirectional=True, projection_size=1, state_outputs=True)
    shapes = sym.infer_shape(data=(2, 1, 2))[0]
    rng = np.random.default_rng(7)
    lows = (-1.0, -0.6, -1.0, -1.0)
    args = {n: rng.uniform(lo, -lo, s) for n, s, lo in zip(sym.list_arguments(), shapes, lows)}
    outs = sym.bind(sg.cpu(), args).forward()
    for got, want in zip(outs, _MXNET_LSTMP):
        np.testing.assert_allclose(got.ravel(), want, rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------
# Dropout between layers (training only, never after the last layer)
# ----------------------------------------------------------------------------


def test_dropout_only_in_training_and_only_between_layers():
    rng = np.random.default_rng(0)
    sym = _rnn("gru", state_size=3, num_layers=2, p=0.5)
    args = _random_args(sym, rng, data=(4, 2, 3))
    no_drop = _rnn("gru", state_size=3, num_layers=2)
    want = no_drop.bind(sg.cpu(), args).forward()[0]
    exe = sym.bind(sg.cpu(), args)
    np.testing.assert_allclose(exe.forward(is_train=False)[0], want, rtol=1e-13)
    np.random.seed(0)
    assert not np.allclose(exe.forward(is_train=True)[0], want)
    # one layer: nothing to drop between
    one = _rnn("lstm", state_size=2, num_layers=1, p=0.5)
    args1 = _random_args(one, rng, data=(3, 2, 2))
    exe1 = one.bind(sg.cpu(), args1)
    np.testing.assert_array_equal(exe1.forward(is_train=True)[0], exe1.forward(is_train=False)[0])


def test_dropout_draws_from_xp_random_and_backward_reuses_the_forward_mask():
    rng = np.random.default_rng(1)
    sym = _rnn("lstm", state_size=2, num_layers=2, bidirectional=True, p=0.4, state_outputs=True)
    args = _random_args(sym, rng, data=(3, 2, 2))
    heads = [rng.standard_normal(s) for s in sym.infer_shape(data=(3, 2, 2))[1]]
    grads = {n: np.zeros_like(a) for n, a in args.items()}
    exe = sym.bind(sg.cpu(), {n: a.copy() for n, a in args.items()}, args_grad=grads)

    def loss():
        np.random.seed(5)  # the same draw every time: finite differences of one fixed mask
        return sum(float((o * h).sum()) for o, h in zip(exe.forward(is_train=True), heads))

    base = loss()
    np.random.seed(5)
    exe.forward(is_train=True)
    np.random.seed(5)
    assert loss() == base  # the mask comes from numpy's global RNG, as Dropout's
    exe.backward(heads)
    for name in ("data", "parameters", "state"):
        a = exe.arg_dict[name]
        for i in rng.choice(a.size, 6, replace=False):
            old = a.flat[i]
            a.flat[i] = old + 1e-6
            up = loss()
            a.flat[i] = old - 1e-6
            down = loss()
            a.flat[i] = old
            assert abs((up - down) / 2e-6 - grads[name].flat[i]) < 1e-7 * (1 + abs(grads[name].flat[i])), name


# ----------------------------------------------------------------------------
# Gradients from the state outputs alone; second order
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2])
def test_gradient_flows_from_the_final_states_alone(k):
    sym = _rnn("lstm", state_size=2, num_layers=2, bidirectional=True, state_outputs=True)
    rng = np.random.default_rng(2)
    args = _random_args(sym, rng, data=(3, 2, 2))
    result = check_numeric_gradient(
        S.sum(sym[k] * sym[k]), args, dtype=np.float64, rtol=1e-6, atol=1e-8, progress=False
    )
    analytic, _ = result["data"]
    assert not result.excluded and np.abs(analytic).max() > 0  # the final state alone reaches the data


def test_second_order_raises_a_clear_error_naming_backward_rnn():
    x = S.Variable("data")
    y = S.RNN(x, S.Variable("parameters"), S.Variable("state"), state_size=2, num_layers=1, mode="gru")
    (gx,) = sg.grad(S.sum(y), [x])
    with pytest.raises(SymgradError, match=r"_backward_RNN.*second-order gradients through RNN are not defined"):
        sg.grad(S.sum(gx), [x])


# ----------------------------------------------------------------------------
# Semantics MXNet's CPU kernels do not run (cuDNN only): clipping NaN, sequence lengths
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("clip_nan", [False, True])
def test_lstm_state_clip_nan(clip_nan):
    sym = _rnn(
        "lstm",
        state_size=2,
        num_layers=1,
        state_outputs=True,
        lstm_state_clip_min=-0.25,
        lstm_state_clip_max=0.5,
        lstm_state_clip_nan=clip_nan,
    )
    args = _random_args(sym, np.random.default_rng(3), data=(2, 1, 2))
    args["state_cell"][0, 0, 0] = np.nan
    _, _, cy = sym.bind(sg.cpu(), args).forward()
    if clip_nan:  # NaN never reaches the state: clipped (as fmin(fmax(c, min), max)) to min
        assert np.isfinite(cy).all() and (cy >= -0.25).all() and (cy <= 0.5).all()
    else:
        assert np.isnan(cy[0, 0, 0])


def test_zero_length_sequence_keeps_the_initial_state():
    sym = _rnn("rnn_tanh", state_size=2, num_layers=1, bidirectional=True, state_outputs=True, use_sequence_length=True)
    args = _random_args(sym, np.random.default_rng(4), data=(3, 2, 2))
    args["sequence_length"] = np.array([0, 2], dtype=np.int32)
    y, hy = sym.bind(sg.cpu(), args).forward()
    want_y, want_hy = reference("rnn_tanh", 1, 2, 2, state_outputs=True, seq=True)(*args.values())
    np.testing.assert_allclose(y, want_y, rtol=1e-13)
    np.testing.assert_allclose(hy, want_hy, rtol=1e-13)
    np.testing.assert_array_equal(y[:, 0], 0)
    np.testing.assert_array_equal(hy[:, 0], args["state"][:, 0])


def test_sequence_length_out_of_range_is_an_error():
    sym = _rnn("gru", state_size=2, num_layers=1, use_sequence_length=True)
    args = _random_args(sym, np.random.default_rng(5), data=(3, 2, 2))
    args["sequence_length"] = np.array([1, 4])
    with pytest.raises(ValueError, match="'sequence_length'.*\\[0, 3\\]"):
        sym.bind(sg.cpu(), args).forward()


# ----------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        ({"parameters": (5,)}, r"input 'parameters' has shape \(5,\), expected \(72,\)"),
        ({"state": (1, 2, 4)}, r"input 'state' has shape \(1, 2, 4\), expected \(1, 2, 3\)"),
    ],
)
def test_wrong_shapes_name_the_input(shapes, match):
    sym = _rnn("gru", state_size=3, num_layers=1)
    with pytest.raises(ShapeError, match=match):
        sym.infer_shape(data=(4, 2, 3), **shapes)


def test_wrong_state_cell_and_data_rank_name_the_input():
    sym = _rnn("lstm", state_size=3, num_layers=2)
    with pytest.raises(ShapeError, match=r"'state_cell' has shape \(1, 2, 3\), expected \(2, 2, 3\)"):
        sym.infer_shape(data=(4, 2, 3), state_cell=(1, 2, 3))
    with pytest.raises(ShapeError, match=r"'data' has shape \(4, 3\).*3-d"):
        sym.infer_shape(data=(4, 3))


@pytest.mark.parametrize(
    ("mode", "params", "match"),
    [
        ("gru", {"projection_size": 2}, "'projection_size' is only supported for mode='lstm'"),
        ("lstm", {"projection_size": 4}, r"'projection_size' must be in \[1, state_size=3\]"),
        ("rnn_tanh", {"lstm_state_clip_min": -1.0, "lstm_state_clip_max": 1.0}, "only supported for mode='lstm'"),
        ("lstm", {"lstm_state_clip_min": -1.0}, "must be given together"),
        ("lstm", {"lstm_state_clip_min": 1.0, "lstm_state_clip_max": -1.0}, "must be >= 'lstm_state_clip_min'"),
        ("lstm", {"p": 1.0}, r"'p'.*\[0, 1\)"),
        ("lstm", {"num_layers": 0}, "'num_layers' must be >= 1"),
        ("relu", {}, "'mode' must be one of"),
    ],
)
def test_bad_parameters_are_param_errors(mode, params, match):
    kwargs = {"state_size": 3, "num_layers": 1, **params}
    with pytest.raises(ParamError, match=match):
        S.RNN(S.Variable("data"), mode=mode, **kwargs)
