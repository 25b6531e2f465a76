"""A custom op with a planted gradient bug, and what symgrad's checkers say about it.

``AddBias`` computes ``y = x + b`` with ``b`` broadcast over the batch axis. Its backward takes the bias
gradient from the first row of the head gradient (``g[0]``) where it must sum over the batch
(``g.sum(0)``): the classic wrong broadcast reduction. Run it:

    python examples/wrong_bias_gradient.py

Each checker fails with a ``GradientCheckError`` whose report names the argument, shows the worst
elements and diagnoses the bug ("only the output slice [0, :] term ... wrong broadcast reduction").
"""

import numpy as np

import symgrad as sg
from symgrad.test_utils import GradientCheckError, check_backward, check_numeric_gradient, gradcheck


class AddBias(sg.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        x, b = in_data
        self.assign(out_data[0], req[0], x + b)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        g = out_grad[0]
        self.assign(in_grad[0], req[0], g)
        self.assign(in_grad[1], req[1], g[0])  # BUG: should be g.sum(axis=0)


@sg.operator.register("add_bias_buggy")
class AddBiasProp(sg.operator.CustomOpProp):
    def list_arguments(self):
        return ["data", "bias"]

    def infer_shape(self, in_shape):
        data, _ = in_shape
        return [data, (data[1],)], [data], []

    def create_operator(self, ctx, shapes, dtypes):
        return AddBias()


def main():
    rng = np.random.default_rng(0)
    x, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    data, bias = sg.sym.Variable("data"), sg.sym.Variable("bias")
    sym = sg.sym.Custom(data, bias, op_type="add_bias_buggy", name="add_bias")

    checks = {
        "check_numeric_gradient (MXNet style)": lambda: check_numeric_gradient(sym, {"data": x, "bias": b}),
        "check_backward (Chainer style)": lambda: check_backward(
            lambda d, w: sg.sym.Custom(d, w, op_type="add_bias_buggy"), (x, b), rng.standard_normal((3, 4))
        ),
        "gradcheck (PyTorch style)": lambda: gradcheck(
            lambda d, w: sg.sym.Custom(d, w, op_type="add_bias_buggy"), (x, b)
        ),
    }
    for title, run in checks.items():
        print(f"== {title}")
        try:
            run()
        except GradientCheckError as err:
            print(err)
            print(f"-> err.arg_name={err.arg_name!r}, err.pattern={err.pattern!r}\n")
        else:
            raise SystemExit(f"{title} passed a wrong gradient")


if __name__ == "__main__":
    main()
