"""A NaN gradient at one point (the norm of a zero row, a shipped bug in several frameworks) is reported as
that: the NaN elements only, listed first, and never as non-determinism or as float32 noise everywhere."""

import numpy as np
import pytest

import symgrad as sg
import symgrad.test_utils as tu


class _RowNorm(sg.operator.CustomOp):
    """y = ||x_i|| per row; backward x / ||x||: NaN on a zero row (the one-sided derivatives are finite)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        self.assign(out_data[0], req[0], np.sqrt((x * x).sum(axis=1, keepdims=True)))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        with np.errstate(invalid="ignore"):
            self.assign(in_grad[0], req[0], out_grad[0] * in_data[0] / out_data[0])


@sg.operator.register("nan_rownorm")
class _RowNormProp(sg.operator.CustomOpProp):
    def list_arguments(self):
        return ["data"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        return in_shape, [(in_shape[0][0], 1)], []

    def create_operator(self, ctx, shapes, dtypes):
        return _RowNorm()


def _x():
    x = np.random.default_rng(0).standard_normal((4, 3))
    x[2] = 0.0
    return x


def _f(v):
    return sg.sym.Custom(v, op_type="nan_rownorm")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numeric_gradient_names_only_the_nan_row(dtype):
    # before: in float32 the NaN made the noise estimate NaN everywhere, "12 of 12 elements" failed with a
    # tolerance of 0 and correct elements were listed first
    with pytest.raises(tu.GradientCheckError) as info:
        tu.check_numeric_gradient(_f(sg.sym.Variable("x")), {"x": _x()}, dtype=dtype, progress=False)
    err = info.value
    assert err.n_mismatch == 3
    assert [row[0] for row in err.worst] == [(2, 0), (2, 1), (2, 2)]
    assert "nan" not in str(err).split("\n")[1].split("rounding of analytic <=")[-1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gradcheck_calls_a_nan_gradient_non_finite_not_non_reentrant(dtype):
    with pytest.raises(tu.GradientCheckError) as info:
        tu.gradcheck(_f, (_x().astype(dtype),), progress=False)
    text = str(info.value)
    assert "not reentrant" not in text
    assert "non-finite values" in text and "12 of 48" in text
