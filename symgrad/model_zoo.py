"""Small example models shipped with symgrad (used by ``python -m symgrad`` and the docs)."""

from __future__ import annotations

import numpy as np

from . import sym as S

__all__ = ["mlp", "MODELS", "example_inputs"]


def mlp(num_hidden=(16, 16), num_classes=4):
    """data -> [FullyConnected -> tanh] * k -> FullyConnected -> SoftmaxOutput."""
    x = S.Variable("data")
    for i, h in enumerate(num_hidden):
        x = S.Activation(S.FullyConnected(x, num_hidden=h, name=f"fc{i + 1}"), act_type="tanh", name=f"tanh{i + 1}")
    x = S.FullyConnected(x, num_hidden=num_classes, name="out")
    return S.SoftmaxOutput(x, name="softmax")


def bn_mlp(num_hidden=8, num_classes=3):
    """data -> FullyConnected -> BatchNorm -> relu -> FullyConnected -> SoftmaxOutput."""
    x = S.Variable("data")
    x = S.FullyConnected(x, num_hidden=num_hidden, name="fc1")
    x = S.BatchNorm(x, fix_gamma=False, name="bn1")
    x = S.Activation(x, act_type="relu", name="relu1")
    x = S.FullyConnected(x, num_hidden=num_classes, name="out")
    return S.SoftmaxOutput(x, name="softmax")


MODELS = {"mlp": mlp, "bn_mlp": bn_mlp}
DATA_SHAPES = {"mlp": (4, 8), "bn_mlp": (6, 5)}


def example_inputs(sym, data_shape, seed=0, dtype=np.float64):
    """Random arguments (labels drawn as valid class indices) and auxiliary states for ``sym``."""
    rng = np.random.default_rng(seed)
    arg_shapes, out_shapes, aux_shapes = sym.infer_shape(data=data_shape)
    args = {}
    for name, shape in zip(sym.list_arguments(), arg_shapes):
        if name.endswith("_label"):
            args[name] = rng.integers(0, out_shapes[0][-1], size=shape).astype(dtype)
        else:
            args[name] = rng.uniform(-1, 1, size=shape).astype(dtype)
    aux = {}
    for name, shape in zip(sym.list_auxiliary_states(), aux_shapes):
        aux[name] = (np.ones(shape) if name.endswith("_var") else np.zeros(shape)).astype(dtype)
    return args, aux
