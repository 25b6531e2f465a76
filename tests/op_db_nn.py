"""OpInfo rows for the neural-network layers (symgrad/ops/nn.py): Activation, LeakyReLU, BatchNorm (and
_contrib_SyncBatchNorm, _contrib_BatchNormWithReLU), LayerNorm, InstanceNorm, L2Normalization, Dropout,
Embedding and SequenceMask.

References are plain numpy (math.erf for GELU), written from MXNet 1.9's definitions.
Random ops (Dropout with p > 0, rrelu in training) cannot be checked by finite
differences; their rows here are the deterministic cases, the rest is in test_ops_nn.py.
"""

import math

import numpy as np
from np_refs import sigmoid
from op_info import In, OpInfo, norm_inputs

import symgrad as sg

S = sg.sym

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_LAMBDA = 1.0507009873554804934193349852946
F32_64 = (np.float32, np.float64)


def _gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _bn_ref(x, g, b, axis, eps, fix_gamma=False, mean=None, var=None):
    ax = axis % x.ndim
    red = tuple(i for i in range(x.ndim) if i != ax)
    shape = [1] * x.ndim
    shape[ax] = x.shape[ax]
    if mean is None:
        mean, var = x.mean(red), x.var(red)
    gamma = np.ones_like(g) if fix_gamma else g
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * gamma.reshape(shape) + b.reshape(shape)
    return y, mean, 1 / np.sqrt(var + eps)


def _bn_train(x, g, b, mm, mv):
    """Training-mode BatchNorm over axes (0, 2), eps 1e-3."""
    return (x - x.mean((0, 2), keepdims=True)) / np.sqrt(x.var((0, 2), keepdims=True) + 1e-3) * g[None, :, None] + b[
        None, :, None
    ]


def _layer_norm(x, g, b, axis, eps=1e-5):
    mean = x.mean(axis, keepdims=True)
    std = np.sqrt(x.var(axis, keepdims=True) + eps)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return (x - mean) / std * g.reshape(shape) + b.reshape(shape), mean, std


def _instance_norm(x, g, b, eps):
    sp = tuple(range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    mean, var = x.mean(sp, keepdims=True), x.var(sp, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g.reshape(shape) + b.reshape(shape)


def _l2(x, axes, eps=1e-10):
    return x / np.sqrt((x * x).sum(axes, keepdims=True) + eps)


def _seq_mask(x, lengths, axis, value):
    out = x.copy()
    for b, n in enumerate(np.asarray(lengths).astype(int)):
        if axis == 0:
            out[n:, b] = value
        else:
            out[b, n:] = value
    return out


def _labels(low, high, shape):
    return lambda r: r.integers(low, high, shape)


SH = (2, 3)
X3 = (2, 3, 2)
BN_AUX = {"bn_moving_mean": In((3,)), "bn_moving_var": In((3,), 0.5, 1.5)}
F16 = {np.float16: (2e-2, 2e-2)}


_BN_IN = norm_inputs((4, 3, 2), 3)


def _bn_row(name, make, inputs, ref, aux=BN_AUX, **kw):
    """A BatchNorm row: moving statistics as aux, training mode, fused backward (no second order), F16."""
    kw = {"is_train": True, "second_order": False, "fwd_tol": F16, **kw}
    return OpInfo(name, make, inputs, ref, aux=aux, **kw)


OPS = [
    # -- Activation ---------------------------------------------------------------------
    OpInfo(
        "Activation_relu",
        lambda x: S.Activation(x, act_type="relu"),
        {"x": In(X3, away=0.1)},
        lambda x: np.maximum(x, 0),
    ),
    OpInfo("Activation_sigmoid", lambda x: S.Activation(x, act_type="sigmoid"), {"x": In(X3, -3, 3)}, sigmoid),
    OpInfo("Activation_tanh", lambda x: S.Activation(x, act_type="tanh"), {"x": In(X3, -2, 2)}, np.tanh),
    OpInfo(
        "Activation_softrelu",
        lambda x: S.Activation(x, act_type="softrelu"),
        {"x": In(SH, -2, 2)},
        lambda x: np.log1p(np.exp(x)),
    ),
    OpInfo(
        "Activation_softsign",
        lambda x: S.Activation(x, act_type="softsign"),
        {"x": In(SH, away=0.1)},
        lambda x: x / (1 + np.abs(x)),
    ),
    # -- LeakyReLU --------------------------------------------------------------------------
    OpInfo(
        "LeakyReLU_leaky", lambda x: S.LeakyReLU(x), {"x": In(X3, away=0.1)}, lambda x: np.where(x > 0, x, 0.25 * x)
    ),
    OpInfo(
        "LeakyReLU_leaky_slope_string",
        lambda x: S.LeakyReLU(x, act_type="leaky", slope="0.1"),
        {"x": In(X3, away=0.1)},
        lambda x: np.where(x > 0, x, 0.1 * x),
    ),
    OpInfo(
        "LeakyReLU_elu",
        lambda x: S.LeakyReLU(x, act_type="elu", slope=0.5),
        {"x": In(X3, -2, 2, away=0.1)},
        lambda x: np.where(x > 0, x, 0.5 * (np.exp(x) - 1)),
    ),
    OpInfo(
        "LeakyReLU_selu",
        lambda x: S.LeakyReLU(x, act_type="selu"),
        {"x": In(X3, -2, 2, away=0.1)},
        lambda x: SELU_LAMBDA * np.where(x > 0, x, SELU_ALPHA * (np.exp(x) - 1)),
    ),
    OpInfo("LeakyReLU_gelu", lambda x: S.LeakyReLU(x, act_type="gelu"), {"x": In((3, 4), -4, 4)}, _gelu),
    OpInfo(
        "LeakyReLU_gelu_tails",
        lambda x: S.LeakyReLU(x, act_type="gelu"),
        {"x": In((2, 3), sample=lambda r: np.array([[-9.0, -6.5, -3.2], [2.7, 5.5, 11.0]]))},
        _gelu,
        dtypes=F32_64,
    ),
    OpInfo(
        "LeakyReLU_prelu",
        lambda x, g: S.LeakyReLU(x, g, act_type="prelu"),
        {"x": In((2, 3, 2), away=0.1), "g": In((3,), 0.1, 0.5)},
        lambda x, g: np.where(x > 0, x, g[None, :, None] * x),
    ),
    OpInfo(
        "LeakyReLU_prelu_2d",
        lambda x, g: S.LeakyReLU(x, g, act_type="prelu"),
        {"x": In((4, 3), away=0.1), "g": In((3,), 0.1, 0.5)},
        lambda x, g: np.where(x > 0, x, g * x),
    ),
    OpInfo(
        "LeakyReLU_prelu_shared_gamma",
        lambda x, g: S.LeakyReLU(x, g, act_type="prelu"),
        {"x": In((2, 3, 2), away=0.1), "g": In((1,), 0.1, 0.5)},
        lambda x, g: np.where(x > 0, x, g[0] * x),
    ),
    # rrelu in inference: the mean slope; the 'mask' output (visible, as MXNet's) holds it
    OpInfo(
        "LeakyReLU_rrelu_inference",
        lambda x: S.LeakyReLU(x, act_type="rrelu", lower_bound=0.1, upper_bound=0.3),
        {"x": In(X3, away=0.1)},
        lambda x: (np.where(x > 0, x, 0.2 * x), np.full(x.shape, 0.2)),
        grad=False,
    ),
    # -- BatchNorm (fused backward: no second order) -------------------------------------
    _bn_row("BatchNorm_train", lambda x, g, b: S.BatchNorm(x, g, b, fix_gamma=False, name="bn"), _BN_IN, _bn_train),
    _bn_row(
        "_contrib_SyncBatchNorm",
        lambda x, g, b: S._contrib_SyncBatchNorm(x, g, b, key="k", fix_gamma=False, name="bn"),
        _BN_IN,
        _bn_train,
    ),
    # relu at exact zeros cannot happen: the normalised values are continuous draws
    _bn_row(
        "_contrib_BatchNormWithReLU",
        lambda x, g, b: S._contrib_BatchNormWithReLU(x, g, b, fix_gamma=False, name="bn"),
        _BN_IN,
        lambda *a: np.maximum(_bn_train(*a), 0),
    ),
    _bn_row(
        "BatchNorm_fix_gamma_default",
        lambda x, g, b: S.BatchNorm(x, g, b, name="bn"),
        _BN_IN,
        lambda x, g, b, mm, mv: _bn_ref(x, g, b, 1, 1e-3, fix_gamma=True)[0],
    ),
    _bn_row(
        "BatchNorm_global_stats",
        lambda x, g, b: S.BatchNorm(x, g, b, fix_gamma=False, use_global_stats=True, name="bn"),
        _BN_IN,
        lambda x, g, b, mm, mv: _bn_ref(x, g, b, 1, 1e-3, mean=mm, var=mv)[0],
    ),
    _bn_row(
        "BatchNorm_inference",
        lambda x, g, b: S.BatchNorm(x, g, b, fix_gamma="False", name="bn"),
        _BN_IN,
        lambda x, g, b, mm, mv: _bn_ref(x, g, b, 1, 1e-3, mean=mm, var=mv)[0],
        is_train=False,
    ),
    _bn_row(
        "BatchNorm_channels_last",
        lambda x, g, b: S.BatchNorm(x, g, b, fix_gamma=False, axis=-1, eps=1e-5, name="bn"),
        norm_inputs((3, 2, 4), 4),
        lambda x, g, b, mm, mv: _bn_ref(x, g, b, -1, 1e-5)[0],
        aux={"bn_moving_mean": In((4,)), "bn_moving_var": In((4,), 0.5, 1.5)},
    ),
    _bn_row(
        "BatchNorm_4d_momentum_string",
        lambda x, g, b: S.BatchNorm(x, g, b, fix_gamma=False, momentum="0.5", eps="1e-4", name="bn"),
        norm_inputs((2, 3, 2, 2), 3),
        lambda x, g, b, mm, mv: _bn_ref(x, g, b, 1, 1e-4)[0],
    ),
    # the 'var' output is 1/sqrt(var + eps), as MXNet's; gradients through mean/var are blocked (test_ops_nn)
    OpInfo(
        "BatchNorm_output_mean_var",
        lambda x, g, b: S.BatchNorm(x, g, b, fix_gamma=False, output_mean_var=True, name="bn"),
        norm_inputs((4, 3), 3),
        lambda x, g, b, mm, mv: _bn_ref(x, g, b, 1, 1e-3),
        aux=BN_AUX,
        is_train=True,
        grad=False,
        dtypes=F32_64,
    ),
    # -- LayerNorm, InstanceNorm, L2Normalization ------------------------------------------
    OpInfo(
        "LayerNorm",
        lambda x, g, b: S.LayerNorm(x, g, b),
        norm_inputs((2, 3, 4), 4),
        lambda x, g, b: _layer_norm(x, g, b, -1)[0],
        fwd_tol=F16,
    ),
    OpInfo(
        "LayerNorm_axis1",
        lambda x, g, b: S.LayerNorm(x, g, b, axis=1, eps=1e-3),
        norm_inputs((2, 3, 2), 3),
        lambda x, g, b: _layer_norm(x, g, b, 1, 1e-3)[0],
        fwd_tol=F16,
    ),
    OpInfo(
        "LayerNorm_output_mean_var",
        lambda x, g, b: S.LayerNorm(x, g, b, output_mean_var=True),
        norm_inputs((3, 4), 4),
        lambda x, g, b: _layer_norm(x, g, b, -1),
        grad=False,
        fwd_tol=F16,
    ),
    OpInfo(
        "InstanceNorm",
        lambda x, g, b: S.InstanceNorm(x, g, b),
        norm_inputs((2, 3, 4), 3),
        lambda x, g, b: _instance_norm(x, g, b, 1e-3),
        fwd_tol=F16,
    ),
    OpInfo(
        "InstanceNorm_4d",
        lambda x, g, b: S.InstanceNorm(x, g, b, eps=1e-5),
        norm_inputs((2, 2, 2, 3), 2),
        lambda x, g, b: _instance_norm(x, g, b, 1e-5),
        fwd_tol=F16,
    ),
    OpInfo("L2Normalization_instance", lambda x: S.L2Normalization(x), {"x": In((2, 3, 2))}, lambda x: _l2(x, (1, 2))),
    OpInfo(
        "L2Normalization_channel",
        lambda x: S.L2Normalization(x, mode="channel"),
        {"x": In((2, 3, 2))},
        lambda x: _l2(x, (1,)),
    ),
    OpInfo(
        "L2Normalization_spatial",
        lambda x: S.L2Normalization(x, mode="spatial", eps=1e-3),
        {"x": In((2, 2, 3))},
        lambda x: _l2(x, (2,), 1e-3),
    ),
    # -- Dropout: the deterministic cases (random masks are tested in test_ops_nn.py) ------------
    OpInfo("Dropout_p0_training", lambda x: S.Dropout(x, p=0.0) * x, {"x": In(X3)}, lambda x: x * x, is_train=True),
    OpInfo("Dropout_inference_identity", lambda x: S.Dropout(x, p=0.5), {"x": In(X3)}, lambda x: x, grad=False),
    # -- Embedding -----------------------------------------------------------------------
    OpInfo(
        "Embedding",
        lambda d, w: S.Embedding(d, w, input_dim=5, output_dim=4),
        {"d": In((2, 3), sample=_labels(0, 5, (2, 3)), grad=False, integer=True), "w": In((5, 4))},
        lambda d, w: w[d],
    ),
    # float indices are truncated, then clipped to [0, input_dim - 1] (MXNet)
    OpInfo(
        "Embedding_float_indices_clipped",
        lambda d, w: S.Embedding(d, w, input_dim=5, output_dim=3),
        {
            "d": In((7,), sample=lambda r: np.array([-1.75, 0.25, 4.25, 7.25, 2.5, 2.25, 1.75]), grad=False),
            "w": In((5, 3)),
        },
        lambda d, w: w[np.clip(np.trunc(d).astype(int), 0, 4)],
    ),
    # a squared lookup: the weight gradient depends on the weight, so second order runs through
    # the scatter's own rule (its adjoint is Embedding again)
    OpInfo(
        "Embedding_squared",
        lambda d, w: S.square(S.Embedding(d, w, input_dim=4, output_dim=2)),
        {"d": In((5,), sample=lambda r: np.array([1, 3, 1, 0, 1]), grad=False, integer=True), "w": In((4, 2))},
        lambda d, w: w[d] ** 2,
    ),
    # -- SequenceMask ----------------------------------------------------------------------
    OpInfo("SequenceMask_no_length", lambda x: S.SequenceMask(x) * x, {"x": In((3, 2))}, lambda x: x * x),
    OpInfo(
        "SequenceMask_axis0",
        lambda x, n: S.SequenceMask(x, n, use_sequence_length=True, value=-1.0),
        {"x": In((4, 3, 2)), "n": In((3,), sample=lambda r: np.array([1.0, 4.0, 2.0]), grad=False)},
        lambda x, n: _seq_mask(x, n, 0, -1.0),
    ),
    OpInfo(
        "SequenceMask_axis1",
        lambda x, n: S.SequenceMask(x, n, use_sequence_length="True", axis=1),
        {"x": In((3, 4)), "n": In((3,), sample=lambda r: np.array([0, 2, 4]), grad=False, integer=True)},
        lambda x, n: _seq_mask(x, n, 1, 0.0),
    ),
]
