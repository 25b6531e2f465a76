"""``register_unary(op_type, make_op)``: register a one-input, one-output, same-shape Python ``CustomOp`` (made by
``make_op()``) under ``op_type``, as the tests' planted gradient bugs need; ``arguments`` and ``out_shape`` give
other input names and another output shape."""

import numpy as np

import symgrad as sg


def register_unary(op_type, make_op, arguments=("data",), out_shape=lambda shape: shape):
    @sg.operator.register(op_type)
    class _Prop(sg.operator.CustomOpProp):
        def __init__(self):
            super().__init__(need_top_grad=True)

        def list_arguments(self):
            return list(arguments)

        def infer_shape(self, in_shape):
            return in_shape, [out_shape(in_shape[0])], []

        def create_operator(self, ctx, shapes, dtypes):
            return make_op()

    return _Prop


def python_relu(factor=1.0):
    """A ``CustomOp`` class: ``max(x, 0)`` with ``relu'(0) = 0``, its backward scaled by ``factor`` (1: correct) --
    an opaque relu, which no pinned reference reaches."""

    class PythonRelu(sg.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], np.maximum(np.asarray(in_data[0]), 0.0))

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            x = np.asarray(in_data[0])
            self.assign(in_grad[0], req[0], (factor * np.asarray(out_grad[0]) * (x > 0)).astype(x.dtype))

    return PythonRelu


def python_scale(factor=1.0):
    """A ``CustomOp`` class: the identity, its backward scaled by ``factor`` (1: correct)."""

    class PythonScale(sg.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], np.asarray(in_data[0]))

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            self.assign(in_grad[0], req[0], (factor * np.asarray(out_grad[0])).astype(np.asarray(in_data[0]).dtype))

    return PythonScale
