"""Gradient bugs planted in a real network: a Python CustomOp spliced between a BatchNorm and its ReLU.

The op is softplus, ``y = log(1 + e^x)`` (``y' = sigmoid(x)``), with a correct backward (``planted_ok``) and
backwards wrong the way shipped ones were (softplus is positive, so the ReLU after it passes every element and
hides no error; swish, negative below 0, made the ReLU zero the head gradient exactly where ``x < -1``):

- ``planted_scaled``: 1% too large everywhere (a constant folded wrongly);
- ``planted_sign``: the sign flipped only where ``x < -1`` (a branch written for one region);
- ``planted_channel``: channel 0 ignores the head gradient (uses 1 instead of ``dy``);
- ``planted_at_output``: the derivative evaluated at the output instead of the input (``f'(f(x))``).

``splice(json_text, op_type)`` inserts the op between a BatchNorm and the ReLU (``Activation`` relu) it feeds in
an MXNet symbol JSON; importing this module registers the ops (``symgrad check ... --import
tests/planted_network.py``).
"""

from __future__ import annotations

import json

import numpy as np

import symgrad as sg

VARIANTS = ("planted_ok", "planted_scaled", "planted_sign", "planted_channel", "planted_at_output")
BUGGY = VARIANTS[1:]
NODE = "planted_fwd"


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus_grad(x):
    return _sigmoid(x)  # d/dx log(1 + e^x) = e^x / (1 + e^x)


class _Softplus(sg.operator.CustomOp):
    def __init__(self, variant):
        super().__init__()
        self.variant = variant

    def forward(self, is_train, req, in_data, out_data, aux):
        x = np.asarray(in_data[0])
        self.assign(out_data[0], req[0], np.logaddexp(0.0, x).astype(x.dtype))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x, g, y = np.asarray(in_data[0]), np.asarray(out_grad[0]), np.asarray(out_data[0])
        d = _softplus_grad(x)
        if self.variant == "planted_scaled":
            dx = 1.01 * g * d
        elif self.variant == "planted_sign":
            dx = np.where(x < -1.0, -1.0, 1.0) * g * d
        elif self.variant == "planted_channel":
            dx = g * d
            dx[:, 0] = d[:, 0]
        elif self.variant == "planted_at_output":
            dx = g * _softplus_grad(y)
        else:
            dx = g * d
        self.assign(in_grad[0], req[0], dx.astype(x.dtype))


def _prop(variant):
    class Prop(sg.operator.CustomOpProp):
        def __init__(self):
            super().__init__(need_top_grad=True)

        def list_arguments(self):
            return ["data"]

        def list_outputs(self):
            return ["output"]

        def infer_shape(self, in_shape):
            return [in_shape[0]], [in_shape[0]], []

        def create_operator(self, ctx, shapes, dtypes):
            return _Softplus(variant)

    Prop.__name__ = f"{variant}_prop"
    return Prop


for _variant in VARIANTS:
    sg.operator.register(_variant)(_prop(_variant))


def splice(json_text: str, op_type: str, occurrence: int = 1) -> str:
    """The symbol JSON with a ``Custom`` node of ``op_type`` (named ``planted_fwd``) between a BatchNorm feeding a
    relu ``Activation`` and that activation: the pair number ``occurrence`` (0-based). The default, 1, is the first
    residual block's in ResNet-18; the stem's pair (0) is followed by a max pooling, which passes no head gradient
    to the small values where ``planted_sign``'s bug lives, so no check of the whole model can see that one."""
    doc = json.loads(json_text)
    nodes = doc["nodes"]
    seen = 0
    for act in nodes:
        if act["op"] != "Activation" or act.get("attrs", {}).get("act_type") != "relu":
            continue
        src = act["inputs"][0][0]
        if nodes[src]["op"] == "BatchNorm":
            if seen == occurrence:
                break
            seen += 1
    else:
        raise ValueError(f"this model has no BatchNorm -> relu pair number {occurrence}")
    at = src + 1

    def shift(i):
        return i + 1 if i >= at else i

    for node in nodes:
        node["inputs"] = [[shift(e[0]), *e[1:]] for e in node["inputs"]]
    act["inputs"] = [[at, 0, 0]]  # the activation now reads the planted op
    planted = {"op": "Custom", "name": NODE, "attrs": {"op_type": op_type}, "inputs": [[src, 0, 0]]}
    nodes.insert(at, planted)
    doc["arg_nodes"] = [shift(i) for i in doc["arg_nodes"]]
    doc["heads"] = [[shift(h[0]), *h[1:]] for h in doc["heads"]]
    doc.pop("node_row_ptr", None)
    return json.dumps(doc)


def spliced_symbol(json_text: str, op_type: str, occurrence: int = 1):
    return sg.sym.load_json(splice(json_text, op_type, occurrence))
