"""Example models shipped with symgrad: ``symgrad check --example NAME`` and the docs.

Each example is a symbol JSON file in ``symgrad/models/`` whose input variables carry ``__shape__``, so
``symgrad check``, ``info`` and ``plot`` need no ``--shape``:

- ``mlp``: data (4, 8) -> [FullyConnected -> tanh] x 2 -> FullyConnected -> SoftmaxOutput;
- ``lenet``: LeNet on (2, 1, 20, 20) images: [Convolution 5x5 -> tanh -> max Pooling 2x2] x 2 ->
  FullyConnected -> tanh -> FullyConnected -> SoftmaxOutput;
- ``resblock``: a residual block with BatchNorm: [Convolution 3x3 -> BatchNorm -> relu] -> Convolution 3x3
  -> BatchNorm -> + data -> relu -> global average Pooling -> FullyConnected -> SoftmaxOutput;
- ``mobilenet0.25``: Gluon's MobileNet 0.25 (1000 classes) exported by MXNet 1.9.1 (graph only, no weights),
  on (2, 3, 64, 64) inputs.

The first three are written by symgrad from the builders below (``python -m symgrad.model_zoo`` rewrites
them); the zoo network by real MXNet (``tests/fixtures/make_example_models.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from . import sym as S
from .base import StrPath

if TYPE_CHECKING:
    from .symbol import Shape, Symbol

__all__ = [
    "EXAMPLES",
    "DEFAULT_EXAMPLE",
    "EXAMPLE_SAMPLES",
    "example_path",
    "load_example",
    "mlp",
    "lenet",
    "resblock",
    "write_examples",
    "MODELS",
    "DATA_SHAPES",
    "example_inputs",
]

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")


def mlp(num_hidden=(16, 16), num_classes=4, data_shape=(4, 8)):
    """data -> [FullyConnected -> tanh] * k -> FullyConnected -> SoftmaxOutput."""
    x = S.Variable("data", shape=data_shape)
    for i, h in enumerate(num_hidden):
        x = S.Activation(S.FullyConnected(x, num_hidden=h, name=f"fc{i + 1}"), act_type="tanh", name=f"tanh{i + 1}")
    x = S.FullyConnected(x, num_hidden=num_classes, name="out")
    return S.SoftmaxOutput(x, name="softmax")


def lenet(num_classes=10, data_shape=(2, 1, 20, 20)):
    """LeNet (MXNet's example layout, narrowed): two conv/tanh/max-pool stages and two dense layers."""
    x = S.Variable("data", shape=data_shape)
    for i, filters in enumerate((6, 16)):
        x = S.Convolution(x, kernel=(5, 5), num_filter=filters, name=f"conv{i + 1}")
        x = S.Activation(x, act_type="tanh", name=f"tanh{i + 1}")
        x = S.Pooling(x, pool_type="max", kernel=(2, 2), stride=(2, 2), name=f"pool{i + 1}")
    x = S.Flatten(x, name="flatten")
    x = S.Activation(S.FullyConnected(x, num_hidden=32, name="fc1"), act_type="tanh", name="tanh3")
    x = S.FullyConnected(x, num_hidden=num_classes, name="fc2")
    return S.SoftmaxOutput(x, name="softmax")


def resblock(channels=4, num_classes=3, data_shape=(2, 4, 6, 6)):
    """A ResNet basic block with BatchNorm (identity shortcut), pooled into a classifier."""
    data = S.Variable("data", shape=data_shape)
    x = S.Convolution(data, kernel=(3, 3), pad=(1, 1), num_filter=channels, no_bias=True, name="conv1")
    x = S.BatchNorm(x, fix_gamma=False, name="bn1")
    x = S.Activation(x, act_type="relu", name="relu1")
    x = S.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=channels, no_bias=True, name="conv2")
    x = S.BatchNorm(x, fix_gamma=False, name="bn2")
    x = S.Activation(S.elemwise_add(x, data, name="add"), act_type="relu", name="relu2")
    x = S.Pooling(x, pool_type="avg", global_pool=True, kernel=(1, 1), name="pool")
    x = S.FullyConnected(S.Flatten(x, name="flatten"), num_hidden=num_classes, name="fc")
    return S.SoftmaxOutput(x, name="softmax")


#: name -> (file in symgrad/models, one-line description, builder or None for a file written by MXNet)
EXAMPLES: dict[str, tuple[str, str, Callable[[], Symbol] | None]] = {
    "mlp": ("mlp.json", "multilayer perceptron: 3 FullyConnected + tanh, SoftmaxOutput", mlp),
    "lenet": ("lenet.json", "LeNet: 2 x (Convolution 5x5, tanh, max Pooling), 2 FullyConnected, SoftmaxOutput", lenet),
    "resblock": (
        "resblock.json",
        "residual block: 2 x (Convolution 3x3, BatchNorm), identity shortcut, relu, global Pooling, SoftmaxOutput",
        resblock,
    ),
    "mobilenet0.25": (
        "mobilenet0.25.json",
        "Gluon model zoo MobileNet 0.25 (exported by MXNet 1.9.1, 84 arguments, 54 auxiliary states)",
        None,
    ),
}
#: the example ``symgrad check`` runs without a model (``python -m symgrad``)
DEFAULT_EXAMPLE = "lenet"
#: sample-mode elements per argument where the default (``cli.DEFAULT_SAMPLES``) would take minutes
EXAMPLE_SAMPLES = {"mobilenet0.25": 16}


def example_path(name: str) -> str:
    """The JSON file of the shipped example ``name`` (KeyError naming the known ones)."""
    if name not in EXAMPLES:
        raise KeyError(f"unknown example {name!r}; known examples: {', '.join(EXAMPLES)}")
    return os.path.join(MODELS_DIR, EXAMPLES[name][0])


def load_example(name: str) -> Symbol:
    """The Symbol of the shipped example ``name``, loaded from its JSON file."""
    from .serialization import load

    return load(example_path(name))


def write_examples(directory: StrPath = MODELS_DIR) -> list[str]:
    """Write the symgrad-built examples' JSON files into ``directory``; returns the paths written."""
    paths = []
    for file, _, build in EXAMPLES.values():
        if build is not None:
            path = os.path.join(directory, file)
            build().save(path)
            paths.append(path)
    return paths


# -- kept for scripts written against the first version of this module ---------------------------------

#: name -> builder of the first version's models
MODELS: dict[str, Callable[..., Symbol]] = {"mlp": mlp}
#: name -> the data shape of each model of ``MODELS``
DATA_SHAPES: dict[str, Shape] = {"mlp": (4, 8)}


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


if __name__ == "__main__":
    for p in write_examples():
        print("wrote", p)
