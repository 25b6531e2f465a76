"""``register_unary(op_type, make_op)``: register a one-input, one-output, same-shape Python ``CustomOp`` (made by
``make_op()``) under ``op_type``, as the tests' planted gradient bugs need."""

import symgrad as sg


def register_unary(op_type, make_op):
    @sg.operator.register(op_type)
    class _Prop(sg.operator.CustomOpProp):
        def __init__(self):
            super().__init__(need_top_grad=True)

        def infer_shape(self, in_shape):
            return in_shape, [in_shape[0]], []

        def create_operator(self, ctx, shapes, dtypes):
            return make_op()

    return _Prop
