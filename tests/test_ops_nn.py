"""Op-specific tests for the nn / softmax / loss families that the OpInfo table cannot express:
random ops (Dropout, rrelu), BatchNorm's auxiliary updates and outputs, gradients blocked
through statistics outputs, SoftmaxOutput's out_grad and label handling, dtype rules and
bad input. Expected values are hand-written numpy."""

import math

import numpy as np
import pytest

import symgrad as sg

S = sg.sym


def _run(sym, args, heads=None, is_train=True, aux=None, grad_names=None):
    """Bind, forward, backward; returns (outputs, gradients by name, executor)."""
    grad_names = [n for n in sym.list_arguments() if n in args] if grad_names is None else grad_names
    grads = {n: np.zeros_like(args[n]) for n in grad_names}
    exe = sym.bind(sg.cpu(), dict(args), args_grad=grads, grad_req={n: "write" for n in grad_names}, aux_states=aux)
    outs = [o.copy() for o in exe.forward(is_train=is_train)]
    exe.backward(heads)
    return outs, grads, exe


# ----------------------------------------------------------------------------
# Dropout
# ----------------------------------------------------------------------------


def test_dropout_mask_is_scaled_and_reused_in_backward():
    np.random.seed(0)
    x = np.random.uniform(0.5, 1.5, (8, 50))
    h = np.random.standard_normal(x.shape)
    (y,), g, _ = _run(S.Dropout(S.Variable("x"), p=0.3), {"x": x}, [h])
    mask = y / x
    kept = mask != 0
    np.testing.assert_allclose(mask[kept], 1 / 0.7)
    assert 0.55 < kept.mean() < 0.85  # about 1 - p of 400 elements survive
    np.testing.assert_allclose(g["x"], h * mask)  # the forward's mask, not a new draw


def test_dropout_draws_a_new_mask_each_training_forward():
    np.random.seed(1)
    x = np.ones((10, 20))
    exe = S.Dropout(S.Variable("x"), p=0.5).bind(sg.cpu(), {"x": x})
    a = exe.forward(is_train=True)[0].copy()
    b = exe.forward(is_train=True)[0].copy()
    assert set(np.unique(a)) <= {0.0, 2.0} and not np.array_equal(a, b)


def test_dropout_is_the_identity_in_inference_forward_and_backward():
    x = np.random.default_rng(2).standard_normal((3, 4))
    h = np.arange(12.0).reshape(3, 4)
    (y,), g, _ = _run(S.Dropout(S.Variable("x"), p=0.9), {"x": x}, [h], is_train=False)
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(g["x"], h)


def test_dropout_p0_is_the_identity_in_training():
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    h = np.ones_like(x)
    (y,), g, _ = _run(S.Dropout(S.Variable("x"), p=0.0), {"x": x}, [h])
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(g["x"], h)


def test_dropout_axes_share_the_mask_along_those_axes():
    np.random.seed(4)
    x = np.random.uniform(1, 2, (4, 6, 5))
    h = np.random.standard_normal(x.shape)
    sym = S.Dropout(S.Variable("x"), p=0.5, axes=(1,))
    assert sym.infer_shape(x=x.shape)[1] == [x.shape]
    (y,), g, _ = _run(sym, {"x": x}, [h])
    mask = y / x
    np.testing.assert_allclose(mask, np.broadcast_to(mask[:, :1, :], x.shape))  # constant along axis 1
    assert set(np.round(np.unique(mask), 12)) <= {0.0, 2.0} and 0 < (mask == 0).mean() < 1
    np.testing.assert_allclose(g["x"], h * mask)


def test_dropout_mode_always_drops_in_inference_too():
    np.random.seed(5)
    x = np.ones((20, 20), np.float32)
    (y,), g, _ = _run(S.Dropout(S.Variable("x"), p=0.25, mode="always"), {"x": x}, [np.ones_like(x)], is_train=False)
    assert y.dtype == np.float32
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)}
    np.testing.assert_array_equal(g["x"], y)  # head gradient of ones times the mask


def test_dropout_p1_drops_everything_and_mask_is_hidden():
    sym = S.Dropout(S.Variable("x"), p=1.0, name="drop")
    assert sym.list_outputs() == ["drop_output"]
    (y,), g, _ = _run(sym, {"x": np.ones((2, 3))}, [np.ones((2, 3))])
    np.testing.assert_array_equal(y, 0)
    np.testing.assert_array_equal(g["x"], 0)


def test_dropout_rejects_p_outside_unit_interval_and_bad_axes():
    with pytest.raises(sg.ParamError, match=r"Dropout 'd'.*'p'"):
        S.Dropout(S.Variable("x"), p=1.5, name="d")
    with pytest.raises(sg.ShapeError, match=r"Dropout 'd'.*axes"):
        S.Dropout(S.Variable("x"), axes=(3,), name="d").infer_shape(x=(2, 3))


# ----------------------------------------------------------------------------
# LeakyReLU / Activation
# ----------------------------------------------------------------------------


def test_rrelu_training_draws_slopes_in_bounds_and_backward_uses_them():
    np.random.seed(6)
    x = -np.random.uniform(0.5, 1.0, (6, 40))
    x[0] = 1.0
    h = np.random.standard_normal(x.shape)
    sym = S.LeakyReLU(S.Variable("x"), act_type="rrelu", lower_bound=0.2, upper_bound=0.4, name="rr")
    assert sym.list_outputs() == ["rr_output", "rr_mask"]  # both visible, as MXNet's
    (y, mask), g, _ = _run(sym, {"x": x}, [h, np.zeros_like(x)])
    np.testing.assert_array_equal(y[0], 1.0)
    slopes = y[1:] / x[1:]
    assert slopes.min() >= 0.2 and slopes.max() < 0.4 and slopes.std() > 0.03
    np.testing.assert_allclose(mask[1:], slopes)
    np.testing.assert_allclose(g["x"], h * np.where(x > 0, 1.0, mask))


def test_gelu_is_the_erf_form_not_the_tanh_approximation():
    (y,), g, _ = _run(S.LeakyReLU(S.Variable("x"), act_type="gelu"), {"x": np.array([1.0, -2.0])}, [np.ones(2)])
    phi = [0.5 * (1 + math.erf(v / math.sqrt(2))) for v in (1.0, -2.0)]
    np.testing.assert_allclose(y, [1.0 * phi[0], -2.0 * phi[1]], rtol=1e-12)
    pdf = [math.exp(-v * v / 2) / math.sqrt(2 * math.pi) for v in (1.0, -2.0)]
    np.testing.assert_allclose(g["x"], [phi[0] + pdf[0], phi[1] - 2 * pdf[1]], rtol=1e-12)
    assert abs(y[0] - 0.8411919906082768) > 1e-4  # the tanh approximation's value at 1


def test_unknown_act_type_names_the_op_instance():
    with pytest.raises(sg.ParamError, match=r"Activation 'act1'.*act_type.*'swish'"):
        S.Activation(S.Variable("x"), act_type="swish", name="act1")
    with pytest.raises(sg.ParamError, match=r"LeakyReLU 'lr'.*act_type.*'mish'"):
        S.LeakyReLU(S.Variable("x"), act_type="mish", name="lr")


def test_prelu_gamma_of_the_wrong_shape_is_a_shape_error():
    sym = S.LeakyReLU(S.Variable("x"), act_type="prelu", name="pr")
    assert sym.list_arguments() == ["x", "pr_gamma"]
    assert sym.infer_shape(x=(2, 5, 3))[0] == [(2, 5, 3), (5,)]
    with pytest.raises(sg.ShapeError, match=r"LeakyReLU 'pr'.*'gamma'.*\(4,\)"):
        sym.infer_shape(x=(2, 5, 3), pr_gamma=(4,))


# ----------------------------------------------------------------------------
# BatchNorm
# ----------------------------------------------------------------------------


def _bn_data(shape=(5, 3, 2), seed=7):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(shape), "bn_gamma": rng.uniform(0.5, 1.5, 3), "bn_beta": rng.standard_normal(3)}


def _bn_aux(seed=8):
    rng = np.random.default_rng(seed)
    return {"bn_moving_mean": rng.standard_normal(3), "bn_moving_var": rng.uniform(0.5, 1.5, 3)}


def test_batchnorm_training_updates_moving_stats_in_forward_with_biased_variance():
    args, aux = _bn_data(), _bn_aux()
    sym = S.BatchNorm(S.Variable("x"), fix_gamma=False, momentum=0.7, name="bn")
    exe = sym.bind(sg.cpu(), args, aux_states={k: v.copy() for k, v in aux.items()})
    exe.forward(is_train=False)
    np.testing.assert_array_equal(exe.aux_dict["bn_moving_mean"], aux["bn_moving_mean"])
    exe.forward(is_train=True)
    x = args["x"]
    np.testing.assert_allclose(exe.aux_dict["bn_moving_mean"], 0.7 * aux["bn_moving_mean"] + 0.3 * x.mean((0, 2)))
    np.testing.assert_allclose(
        exe.aux_dict["bn_moving_var"], 0.7 * aux["bn_moving_var"] + 0.3 * x.var((0, 2))
    )  # ddof=0


def test_batchnorm_global_stats_never_updates_and_uses_moving_stats():
    args, aux = _bn_data(), _bn_aux()
    sym = S.BatchNorm(S.Variable("x"), use_global_stats=True, output_mean_var=True, name="bn")
    exe = sym.bind(sg.cpu(), args, aux_states={k: v.copy() for k, v in aux.items()})
    y, mean, var = exe.forward(is_train=True)
    np.testing.assert_array_equal(exe.aux_dict["bn_moving_var"], aux["bn_moving_var"])
    np.testing.assert_allclose(mean, aux["bn_moving_mean"])
    np.testing.assert_allclose(var, 1 / np.sqrt(aux["bn_moving_var"] + 1e-3))  # MXNet's 'var' is 1/std
    want = (args["x"] - aux["bn_moving_mean"][:, None]) / np.sqrt(aux["bn_moving_var"][:, None] + 1e-3)
    np.testing.assert_allclose(y, want + args["bn_beta"][:, None])  # fix_gamma: gamma taken as 1


def test_batchnorm_gradients_through_mean_and_var_outputs_are_blocked():
    args = _bn_data()
    sym = S.BatchNorm(S.Variable("x"), fix_gamma=False, output_mean_var=True, name="bn")
    rng = np.random.default_rng(9)
    h = [rng.standard_normal((5, 3, 2)), rng.standard_normal(3), rng.standard_normal(3)]
    _, g1, _ = _run(sym, args, h, aux=_bn_aux())
    _, g2, _ = _run(sym, args, [h[0], np.zeros(3), np.zeros(3)], aux=_bn_aux())
    for n in g1:
        np.testing.assert_array_equal(g1[n], g2[n])
    assert np.abs(g1["x"]).max() > 0


def test_batchnorm_fix_gamma_gives_zero_gamma_gradient():
    _, g, _ = _run(S.BatchNorm(S.Variable("x"), name="bn"), _bn_data(), [np.ones((5, 3, 2))], aux=_bn_aux())
    np.testing.assert_array_equal(g["bn_gamma"], 0)
    np.testing.assert_allclose(g["bn_beta"], 10.0)


def test_batchnorm_float16_keeps_parameters_and_statistics_in_float32():
    sym = S.BatchNorm(S.Variable("x"), output_mean_var=True, name="bn")
    arg_t, out_t, aux_t = sym.infer_type(x=np.float16)
    assert [np.dtype(t) for t in arg_t] == [np.float16, np.float32, np.float32]
    assert [np.dtype(t) for t in out_t] == [np.float16, np.float32, np.float32]
    assert [np.dtype(t) for t in aux_t] == [np.float32, np.float32]
    exe = sym.simple_bind(sg.cpu(), x=(4, 3), type_dict={"x": np.float16})
    exe.arg_dict["x"][:] = np.arange(12).reshape(4, 3)
    exe.aux_dict["bn_moving_var"][:] = 1
    y, mean, var = exe.forward(is_train=True)
    assert (y.dtype, mean.dtype, var.dtype) == (np.float16, np.float32, np.float32)
    np.testing.assert_allclose(mean, [4.5, 5.5, 6.5])
    exe.backward([np.ones((4, 3), np.float16), np.zeros(3, np.float32), np.zeros(3, np.float32)])
    assert exe.grad_dict["x"].dtype == np.float16 and exe.grad_dict["bn_beta"].dtype == np.float32


def test_batchnorm_bad_input():
    with pytest.raises(TypeError, match=r"BatchNorm 'bn'.*'data'.*int32"):
        S.BatchNorm(S.Variable("x"), name="bn").infer_type(x=np.int32)
    with pytest.raises(sg.ShapeError, match=r"BatchNorm 'bn'.*'axis'=3"):
        S.BatchNorm(S.Variable("x"), axis=3, name="bn").infer_shape(x=(2, 3, 4))
    with pytest.raises(sg.ShapeError, match=r"BatchNorm 'bn'.*'gamma'.*\(4,\)"):
        S.BatchNorm(S.Variable("x"), name="bn").infer_shape(x=(2, 3), bn_gamma=(4,))


def test_batchnorm_accepts_every_mxnet_parameter():
    sym = S.BatchNorm(
        S.Variable("x"),
        eps="1e-5",
        momentum="0.99",
        fix_gamma="False",
        use_global_stats="False",
        output_mean_var="False",
        axis="-1",
        cudnn_off="True",
        min_calib_range="-2.0",
        max_calib_range=2.0,
        name="bn",
    )
    assert sym.list_auxiliary_states() == ["bn_moving_mean", "bn_moving_var"]
    assert sym.infer_shape(x=(2, 3, 5))[0] == [(2, 3, 5), (5,), (5,)]


def test_batchnorm_second_order_is_a_clear_error():
    x = S.Variable("x")
    (g,) = sg.grad(S.sum(S.BatchNorm(x, fix_gamma=False, name="bn") * x), [x])
    with pytest.raises(ValueError, match=r"_backward_BatchNorm.*second-order"):
        sg.grad(S.sum(g), [x])


# ----------------------------------------------------------------------------
# LayerNorm / InstanceNorm / L2Normalization
# ----------------------------------------------------------------------------


def test_layernorm_gradients_through_mean_and_std_outputs_are_blocked():
    rng = np.random.default_rng(10)
    args = {"x": rng.standard_normal((3, 4)), "ln_gamma": rng.uniform(0.5, 1.5, 4), "ln_beta": np.zeros(4)}
    sym = S.LayerNorm(S.Variable("x"), output_mean_var=True, name="ln")
    assert sym.list_outputs() == ["ln_output", "ln_mean", "ln_std"]
    h = rng.standard_normal((3, 4))
    (_, mean, std), g1, _ = _run(sym, args, [h, np.ones((3, 1)), np.ones((3, 1))])
    _, g2, _ = _run(S.LayerNorm(S.Variable("x"), name="ln"), args, [h])
    np.testing.assert_allclose(std, np.sqrt(args["x"].var(1, keepdims=True) + 1e-5))
    for n in g1:
        np.testing.assert_allclose(g1[n], g2[n], rtol=1e-12, atol=1e-14)


def test_normalisation_layers_reject_too_few_dimensions():
    with pytest.raises(sg.ShapeError, match=r"InstanceNorm 'inorm'.*rank >= 3"):
        S.InstanceNorm(S.Variable("x"), name="inorm").infer_shape(x=(2, 3))
    with pytest.raises(sg.ShapeError, match=r"L2Normalization 'l2'.*'channel'.*rank >= 3"):
        S.L2Normalization(S.Variable("x"), mode="channel", name="l2").infer_shape(x=(2, 3))
    with pytest.raises(sg.ShapeError, match=r"LayerNorm 'ln'.*'axis'"):
        S.LayerNorm(S.Variable("x"), axis=2, name="ln").infer_shape(x=(2, 3))


def test_l2normalization_hidden_norm_output():
    sym = S.L2Normalization(S.Variable("x"), mode="channel", name="l2")
    assert sym.list_outputs() == ["l2_output"]
    # hidden outputs stay hidden in get_internals, as in MXNet (FNumVisibleOutputs)
    assert sym.get_internals().list_outputs() == ["x", "l2_output"]
    node = sym._outputs[0][0]
    norm = sg.Symbol([(node, 1)])
    assert norm.list_outputs() == ["l2_norm"]
    assert norm.infer_shape(x=(2, 3, 4, 5))[1] == [(2, 1, 4, 5)]
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5))
    got = norm.bind(sg.cpu(), {"x": x}).forward()[0]
    np.testing.assert_allclose(got, np.sqrt((x * x).sum(axis=1, keepdims=True) + 1e-10), rtol=1e-6)


# ----------------------------------------------------------------------------
# Embedding
# ----------------------------------------------------------------------------


def test_embedding_weight_gradient_accumulates_repeated_and_clipped_indices():
    w = np.arange(12.0).reshape(4, 3).astype(np.float16)
    d = np.array([[1, 1], [9, -3]], dtype=np.int32)  # 9 -> row 3, -3 -> row 0
    h = np.ones((2, 2, 3), np.float16)
    sym = S.Embedding(S.Variable("d"), S.Variable("w"), input_dim=4, output_dim=3)
    (y,), g, _ = _run(sym, {"d": d, "w": w}, [h], grad_names=["w"])
    np.testing.assert_array_equal(y, w[[[1, 1], [3, 0]]])
    np.testing.assert_array_equal(g["w"], [[1] * 3, [2] * 3, [0] * 3, [1] * 3])
    assert g["w"].dtype == np.float16


def test_embedding_types_shapes_and_bad_parameters():
    sym = S.Embedding(S.Variable("d"), input_dim=10, output_dim=4, name="emb")
    assert sym.list_arguments() == ["d", "emb_weight"]
    assert sym.infer_shape(d=(2, 5))[0:2] == ([(2, 5), (10, 4)], [(2, 5, 4)])
    arg_t, out_t, _ = sym.infer_type(d=np.int64)
    assert [np.dtype(t) for t in arg_t] == [np.int64, np.float32] and np.dtype(out_t[0]) == np.float32
    assert (
        np.dtype(S.Embedding(S.Variable("d"), input_dim=2, output_dim=2, dtype="float16").infer_type(d=np.int32)[1][0])
        == np.float16
    )
    with pytest.raises(sg.ShapeError, match=r"Embedding 'emb'.*'weight'.*\(10, 4\)"):
        sym.infer_shape(d=(2,), emb_weight=(4, 10))
    with pytest.raises(sg.ParamError, match=r"Embedding 'e2'.*sparse_grad"):
        S.Embedding(S.Variable("d"), input_dim=3, output_dim=2, sparse_grad=True, name="e2")


# ----------------------------------------------------------------------------
# softmax family, SequenceMask
# ----------------------------------------------------------------------------


def test_softmax_dtype_sets_the_output_dtype_and_the_gradient_keeps_the_input_dtype():
    x = np.array([[0.5, -1.0, 2.0]], np.float16)
    h = np.array([[1.0, 0.0, -1.0]])
    (y,), g, _ = _run(S.softmax(S.Variable("x"), dtype="float64"), {"x": x}, [h])
    e = np.exp(x.astype(np.float64) - 2.0)
    p = e / e.sum()
    assert y.dtype == np.float64 and g["x"].dtype == np.float16
    np.testing.assert_allclose(y, p, rtol=1e-3)
    np.testing.assert_allclose(g["x"], p * (h - (h * p).sum()), rtol=2e-3, atol=1e-3)
    with pytest.raises(sg.ParamError, match=r"softmax 'sm'.*dtype"):
        S.softmax(S.Variable("x"), dtype="int32", name="sm")


def test_softmax_length_input_shape_and_fully_masked_rows():
    sym = S.log_softmax(S.Variable("x"), S.Variable("n"), axis=1, use_length=True, name="ls")
    assert sym.list_arguments() == ["x", "n"]
    assert sym.infer_shape(x=(2, 5, 3))[0] == [(2, 5, 3), (2, 3)]
    (y,), g, _ = _run(
        S.softmax(S.Variable("x"), S.Variable("n"), use_length=True),
        {"x": np.ones((2, 3)), "n": np.array([0, 3])},
        [np.ones((2, 3))],
        grad_names=["x"],
    )
    np.testing.assert_allclose(y, [[0, 0, 0], [1 / 3] * 3])
    np.testing.assert_allclose(g["x"], 0, atol=1e-15)


def test_sequence_mask_bad_input():
    with pytest.raises(sg.ParamError, match=r"SequenceMask 'sq'.*'axis'.*0 or 1"):
        S.SequenceMask(S.Variable("x"), axis=2, name="sq")
    with pytest.raises(sg.ShapeError, match=r"SequenceMask 'sq'.*rank >= 2"):
        S.SequenceMask(S.Variable("x"), name="sq").infer_shape(x=(4,))
    sym = S.SequenceMask(S.Variable("x"), use_sequence_length=True, axis=1, name="sq")
    assert sym.infer_shape(x=(3, 7, 2))[0] == [(3, 7, 2), (3,)]


# ----------------------------------------------------------------------------
# Loss heads
# ----------------------------------------------------------------------------


def _softmax_rows(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_softmax_output_out_grad_multiplies_by_the_output_as_mxnet_1_9():
    # MXNet 1.9.1's _backward_SoftmaxOutput gets (output, label) only and multiplies by the output
    # where the legacy op read the head gradient; the head gradient is ignored (fixture so_out_grad)
    rng = np.random.default_rng(11)
    x, label, h = rng.standard_normal((3, 4)), np.array([0.0, 3.0, 1.0]), rng.standard_normal((3, 4))
    sym = S.SoftmaxOutput(S.Variable("x"), S.Variable("label"), out_grad=True, grad_scale=2.0)
    (y,), g, exe = _run(sym, {"x": x, "label": label}, [h], grad_names=["x"])
    p = _softmax_rows(x)
    np.testing.assert_allclose(g["x"], (p - np.eye(4)[[0, 3, 1]]) * 2.0 * p)
    _, g2, _ = _run(sym, {"x": x, "label": label}, None, grad_names=["x"])
    np.testing.assert_array_equal(g2["x"], g["x"])


def test_softmax_output_ignores_the_head_gradient_and_takes_integer_labels():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 4)).astype(np.float16)
    label = np.array([2, 0, 2], np.int64)
    sym = S.SoftmaxOutput(S.Variable("x"), S.Variable("label"))
    assert [np.dtype(t) for t in sym.infer_type(x=np.float16, label=np.int64)[0]] == [np.float16, np.int64]
    (y,), g1, _ = _run(sym, {"x": x, "label": label}, None, grad_names=["x"])
    _, g2, _ = _run(sym, {"x": x, "label": label}, [np.full((3, 4), 7.0, np.float16)], grad_names=["x"])
    want = _softmax_rows(x.astype(np.float64)) - np.eye(4)[label]
    assert g1["x"].dtype == np.float16
    np.testing.assert_allclose(g1["x"], want, atol=2e-3)
    np.testing.assert_array_equal(g1["x"], g2["x"])


def test_softmax_output_valid_normalisation_with_every_label_ignored_divides_by_one():
    x = np.zeros((2, 2))
    sym = S.SoftmaxOutput(S.Variable("x"), S.Variable("label"), use_ignore=True, normalization="valid")
    _, g, _ = _run(sym, {"x": x, "label": np.array([-1.0, -1.0])}, None, grad_names=["x"])
    np.testing.assert_array_equal(g["x"], 0)


def test_softmax_output_label_shapes():
    data, label = S.Variable("data"), S.Variable("label")
    assert S.SoftmaxOutput(data, label).infer_shape(data=(4, 5))[0][1] == (4,)
    assert S.SoftmaxOutput(data, label).infer_shape(data=(4, 5, 6))[0][1] == (4, 5)
    multi = S.SoftmaxOutput(data, label, multi_output=True)
    assert multi.infer_shape(data=(2, 3, 4, 5))[0][1] == (2, 20)  # MXNet's default
    for ok in [(2, 4, 5), (2, 1, 4, 5), (2, 3, 4, 5)]:
        assert multi.infer_shape(data=(2, 3, 4, 5), label=ok)[0][1] == ok
    with pytest.raises(sg.ShapeError, match=r"SoftmaxOutput 'so'.*'label'.*\(4, 2\)"):
        S.SoftmaxOutput(data, label, name="so").infer_shape(data=(4, 5), label=(4, 2))
    with pytest.raises(sg.ParamError, match=r"SoftmaxOutput 'so'.*smooth_alpha"):
        S.SoftmaxOutput(data, label, smooth_alpha=1.5, name="so")


def test_regression_outputs_label_shape_and_second_order_error():
    sym = S.LinearRegressionOutput(S.Variable("data"), name="lro")
    assert sym.list_arguments() == ["data", "lro_label"]
    assert sym.infer_shape(data=(5, 1))[0] == [(5, 1), (5,)]
    assert sym.infer_shape(data=(5, 2))[0] == [(5, 2), (5, 2)]
    assert sym.infer_shape(data=(5, 2), lro_label=(5, 2, 1))[0][1] == (5, 2, 1)
    with pytest.raises(sg.ShapeError, match=r"LinearRegressionOutput 'lro'.*'label'.*\(4, 2\)"):
        sym.infer_shape(data=(5, 2), lro_label=(4, 2))
    x = S.Variable("x")
    (g,) = sg.grad(S.MAERegressionOutput(x * x, name="mae"), [x])
    with pytest.raises(ValueError, match=r"_backward_mae_reg_out.*second-order"):
        sg.grad(S.sum(g), [x])
    (g,) = sg.grad(S.SoftmaxOutput(x, name="sm"), [x])
    with pytest.raises(ValueError, match=r"_backward_SoftmaxOutput"):
        sg.grad(S.sum(g), [x])


# ----------------------------------------------------------------------------
# Integer data where MXNet 1.9 only computes in floating point
# ----------------------------------------------------------------------------

_X, _W = S.Variable("x"), S.Variable("w")
# every op here fails in MXNet 1.9.1 with "This operation only support floating point types, not
# int32" (or "dot only supports float32/float64"); elementwise math (log, exp, ...) accepts ints
_FLOAT_ONLY = {
    "Activation": (S.Activation(_X, act_type="relu", name="n"), "data"),
    "LeakyReLU": (S.LeakyReLU(_X, name="n"), "data"),
    "Convolution": (S.Convolution(_X, kernel=(1,), num_filter=1, name="n"), "data"),
    "Deconvolution": (S.Deconvolution(_X, kernel=(1,), num_filter=1, name="n"), "data"),
    "Pooling": (S.Pooling(_X, kernel=(1,), name="n"), "data"),
    "FullyConnected": (S.FullyConnected(_X, num_hidden=2, name="n"), "data"),
    "BatchNorm": (S.BatchNorm(_X, name="n"), "data"),
    "LayerNorm": (S.LayerNorm(_X, name="n"), "data"),
    "InstanceNorm": (S.InstanceNorm(_X, name="n"), "data"),
    "L2Normalization": (S.L2Normalization(_X, name="n"), "data"),
    "Dropout": (S.Dropout(_X, name="n"), "data"),
    "softmax": (S.softmax(_X, name="n"), "data"),
    "softmin": (S.softmin(_X, name="n"), "data"),
    "SoftmaxActivation": (S.SoftmaxActivation(_X, name="n"), "data"),
    "UpSampling": (S.UpSampling(_X, scale=2, sample_type="nearest", num_args=1, name="n"), "arg0"),
    "Pad": (S.Pad(_X, mode="edge", pad_width=(0, 0, 0, 0, 1, 1, 1, 1), name="n"), "data"),
    "hard_sigmoid": (S.hard_sigmoid(_X, name="n"), "data"),
    "MakeLoss": (S.MakeLoss(_X, name="n"), "data"),
    "SoftmaxOutput": (S.SoftmaxOutput(_X, name="n"), "data"),
    "LinearRegressionOutput": (S.LinearRegressionOutput(_X, name="n"), "data"),
    "dot": (S.dot(_W, _X, name="n"), "rhs"),
    "batch_dot": (S.batch_dot(_W, _X, name="n"), "rhs"),
    "linalg_gemm2": (S.linalg_gemm2(_W, _X, name="n"), "B"),
}


@pytest.mark.parametrize("op", sorted(_FLOAT_ONLY))
def test_float_only_ops_reject_integer_data_naming_the_op_and_input(op):
    sym, inp = _FLOAT_ONLY[op]
    types = {"x": np.int32, "w": np.float32} if "w" in sym.list_arguments() else {"x": np.int32}
    want = rf"'n': input '{inp}' must be float16, float32 or float64, got int32"
    with pytest.raises(TypeError, match=want):
        sym.infer_type(**types)
    assert [np.dtype(t) for t in sym.infer_type(**{k: np.float64 for k in types})[1][:1]] == [np.float64]


def test_bind_with_integer_arrays_names_the_float_only_op():
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    before = data.copy()
    with pytest.raises(TypeError, match=r"softmax 'n': input 'data' must be float16, float32 or float64, got int32"):
        S.softmax(_X, name="n").bind(sg.cpu(), {"x": data})
    np.testing.assert_array_equal(data, before)
    w = np.ones((2, 3), np.float32)
    with pytest.raises(TypeError, match=r"FullyConnected 'n': input 'data' .* got int32"):
        S.FullyConnected(_X, num_hidden=2, no_bias=True, name="n").bind(sg.cpu(), {"x": data, "n_weight": w})


def test_elementwise_math_keeps_integer_inputs_as_mxnet():
    # MXNet 1.9 computes in float and casts back: log([1, 2, 3, 4]) -> [0, 0, 1, 1] for int32
    x = np.array([1, 2, 3, 4], np.int32)
    out = S.log(_X).bind(sg.cpu(), {"x": x}).forward()[0]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [0, 0, 1, 1])
