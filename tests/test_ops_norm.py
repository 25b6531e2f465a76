"""Op-specific tests for LRN, GroupNorm and BatchNorm_v1 (symgrad/ops/norm.py) that the OpInfo table
cannot express: bad input, auxiliary updates, hidden outputs, blocked gradients, inputs never modified.
Expected values are hand-written numpy."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ParamError, ShapeError
from symgrad.ops import get_op

S = sg.sym


def _bn_v1(**kw):
    return S.BatchNorm_v1(S.Variable("x"), S.Variable("g"), S.Variable("b"), name="bn", **kw)


def _bn_args(shape=(4, 3), seed=0):
    rng = np.random.default_rng(seed)
    c = shape[1]
    args = {"x": rng.uniform(-1, 1, shape), "g": rng.uniform(0.5, 1.5, c), "b": rng.uniform(-1, 1, c)}
    aux = {"bn_moving_mean": rng.uniform(-0.5, 0.5, c), "bn_moving_var": rng.uniform(0.5, 1.5, c)}
    return args, aux


# -- LRN ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nsize", [0, 2, 4])
def test_lrn_needs_a_positive_odd_nsize(nsize):
    with pytest.raises(ParamError, match="nsize"):
        S.LRN(S.Variable("x"), nsize=nsize)


def test_lrn_requires_nsize_and_4d_data():
    with pytest.raises(ParamError, match="nsize"):
        S.LRN(S.Variable("x"))
    with pytest.raises(ShapeError, match="4-d"):
        S.LRN(S.Variable("x"), nsize=3).infer_shape(x=(2, 3, 4))


def test_lrn_hidden_tmp_norm_output():
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 1, 2))
    sym = S.LRN(S.Variable("x"), alpha=0.3, knorm=1.0, nsize=3, name="lrn")
    assert sym.list_outputs() == ["lrn_output"]  # tmp_norm is hidden, as in MXNet
    op = get_op("LRN")
    assert op.list_output_names(op.parse_params({"nsize": 3}, "t"), visible_only=False) == ["output", "tmp_norm"]
    y, norm = op.forward(np, x, alpha=0.3, beta=0.75, knorm=1.0, nsize=3)
    np.testing.assert_allclose(y, x * norm**-0.75, rtol=1e-12)
    # alpha is divided by nsize; channel 0 sees channels 0-1, channel 2 sees 1-2
    sq = x**2
    want = 1.0 + 0.1 * np.stack([sq[:, 0] + sq[:, 1], sq.sum(axis=1), sq[:, 1] + sq[:, 2]], axis=1)
    np.testing.assert_allclose(norm, want, rtol=1e-12)


# -- GroupNorm ------------------------------------------------------------------------------------------------


def test_groupnorm_gamma_is_per_group_as_mxnet_191():
    sym = S.GroupNorm(S.Variable("x"), S.Variable("g"), S.Variable("b"), num_groups=2)
    arg_shapes, out_shapes, _ = sym.infer_shape(x=(2, 4, 3))
    assert arg_shapes == [(2, 4, 3), (2,), (2,)]
    with pytest.raises(ShapeError, match="one per group"):
        sym.infer_shape(x=(2, 4, 3), g=(4,))


def test_groupnorm_bad_input():
    sym = S.GroupNorm(S.Variable("x"), S.Variable("g"), S.Variable("b"), num_groups=3)
    with pytest.raises(ShapeError, match="divisible"):
        sym.infer_shape(x=(2, 4, 3))
    with pytest.raises(ShapeError, match="rank >= 3"):
        sym.infer_shape(x=(2, 6))
    with pytest.raises(ParamError, match="num_groups"):
        S.GroupNorm(S.Variable("x"), num_groups=0)


def test_groupnorm_mean_and_std_outputs_get_no_gradient():
    rng = np.random.default_rng(1)
    args = {"x": rng.uniform(-1, 1, (2, 4, 3)), "g": rng.uniform(0.5, 1.5, 2), "b": rng.uniform(-1, 1, 2)}
    sym = S.GroupNorm(S.Variable("x"), S.Variable("g"), S.Variable("b"), num_groups=2, output_mean_var=True)
    heads = [rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 2)), rng.standard_normal((2, 2))]
    grads = {n: np.zeros_like(v) for n, v in args.items()}
    exe = sym.bind(sg.cpu(), args, args_grad=grads)
    exe.forward(is_train=True)
    exe.backward(heads)
    only_y = {n: np.zeros_like(v) for n, v in args.items()}
    exe2 = sym.bind(sg.cpu(), args, args_grad=only_y)
    exe2.forward(is_train=True)
    exe2.backward([heads[0], np.zeros((2, 2)), np.zeros((2, 2))])
    for n in args:  # as MXNet: the mean/std head gradients are ignored
        np.testing.assert_allclose(grads[n], only_y[n], rtol=1e-12)


# -- BatchNorm_v1 ---------------------------------------------------------------------------------------------


def test_batchnorm_v1_training_updates_moving_stats_and_outputs_variance():
    args, aux = _bn_args((5, 3, 2, 2))
    mm, mv = aux["bn_moving_mean"].copy(), aux["bn_moving_var"].copy()
    sym = _bn_v1(fix_gamma=False, momentum=0.8, output_mean_var=True)
    exe = sym.bind(sg.cpu(), args, aux_states=aux)
    y, mean, var = exe.forward(is_train=True)
    red = (0, 2, 3)
    np.testing.assert_allclose(mean, args["x"].mean(red), rtol=1e-12)
    np.testing.assert_allclose(var, args["x"].var(red), rtol=1e-12)  # the variance, not 1/sqrt(var + eps)
    np.testing.assert_allclose(exe.aux_dict["bn_moving_mean"], 0.8 * mm + 0.2 * mean, rtol=1e-12)
    np.testing.assert_allclose(exe.aux_dict["bn_moving_var"], 0.8 * mv + 0.2 * var, rtol=1e-12)


def test_batchnorm_v1_inference_uses_and_outputs_moving_stats():
    args, aux = _bn_args()
    sym = _bn_v1(fix_gamma=False, output_mean_var=True)
    before = {n: a.copy() for n, a in aux.items()}
    y, mean, var = sym.bind(sg.cpu(), args, aux_states=aux).forward(is_train=False)
    np.testing.assert_array_equal(mean, before["bn_moving_mean"])
    np.testing.assert_array_equal(var, before["bn_moving_var"])
    want = (args["x"] - mean) / np.sqrt(var + 1e-3) * args["g"] + args["b"]
    np.testing.assert_allclose(y, want, rtol=1e-12)
    for n in aux:
        np.testing.assert_array_equal(aux[n], before[n])


def test_batchnorm_v1_fix_gamma_ignores_gamma_and_leaves_it_alone():
    args, aux = _bn_args()
    gamma = args["g"].copy()
    grads = {n: np.full_like(v, 7.0) for n, v in args.items()}
    exe = _bn_v1().bind(sg.cpu(), args, args_grad=grads, aux_states=aux)
    (y,) = exe.forward(is_train=True)
    x = args["x"]
    np.testing.assert_allclose(y, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-3) + args["b"], rtol=1e-12)
    exe.backward([np.ones_like(y)])
    np.testing.assert_array_equal(grads["g"], 0.0)  # MXNet: gradient 0 with fix_gamma
    np.testing.assert_array_equal(args["g"], gamma)  # MXNet writes 1 into gamma here; symgrad never does


def test_batchnorm_v1_bad_input():
    sym = _bn_v1()
    with pytest.raises(ShapeError, match="2-d .* or 4-d"):
        sym.infer_shape(x=(2, 3, 4))
    with pytest.raises(ShapeError, match="gamma"):
        sym.infer_shape(x=(2, 3), g=(4,))


def test_batchnorm_v1_float16_keeps_statistics_in_float32():
    sym = _bn_v1(output_mean_var=True)
    _, out_types, aux_types = sym.infer_type(x=np.float16)
    assert [np.dtype(t) for t in out_types] == [np.float16, np.float32, np.float32]
    assert [np.dtype(t) for t in aux_types] == [np.float32, np.float32]
