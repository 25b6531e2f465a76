"""A ResNet basic block (conv 3x3 - BatchNorm - ReLU - conv 3x3 - BatchNorm - add - ReLU) at 56 x 56, the stage-1
shape of ResNet-18/34, with ``C`` channels (few: the element-wise checkers difference every input element).

``block(x, w1, g1, b1, w2, g2, b2)`` builds it from Symbols (the Chainer/PyTorch-style checkers take it as
``func``); ``inputs(rng, dtype)`` draws He-initialised weights and standard normal data, so every ReLU input is
spread around 0 and a step along a direction over all inputs crosses many of them.
"""

import numpy as np

import symgrad as sg

S = sg.sym
C = 4
NAMES = ("x", "w1", "g1", "b1", "w2", "g2", "b2")


def block(x, w1, g1, b1, w2, g2, b2, relu=lambda y: S.Activation(y, act_type="relu")):
    y = S.Convolution(x, weight=w1, kernel=(3, 3), pad=(1, 1), num_filter=C, no_bias=True)
    y = relu(S.BatchNorm(y, gamma=g1, beta=b1, fix_gamma=False))
    y = S.Convolution(y, weight=w2, kernel=(3, 3), pad=(1, 1), num_filter=C, no_bias=True)
    return S.Activation(S.BatchNorm(y, gamma=g2, beta=b2, fix_gamma=False) + x, act_type="relu")


def inputs(rng, dtype):
    normal = lambda *shape: rng.standard_normal(shape).astype(dtype)
    he = np.sqrt(2.0 / (9 * C))
    return (
        normal(1, C, 56, 56),
        (normal(C, C, 3, 3) * he).astype(dtype),
        rng.uniform(0.5, 1.5, C).astype(dtype),
        (normal(C) * 0.1).astype(dtype),
        (normal(C, C, 3, 3) * he).astype(dtype),
        rng.uniform(0.5, 1.5, C).astype(dtype),
        (normal(C) * 0.1).astype(dtype),
    )


def symbol():
    return block(*[S.Variable(n) for n in NAMES])
