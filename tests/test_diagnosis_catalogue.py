"""Diagnoses of shipped bug classes that need more than the two arrays: a backward that ignores its head
gradient, and one that returns the wrong array (its input, its output, the head gradient). Before, both were
called "one slice of the head gradient was used ... wrong broadcast reduction" or "no simple pattern"."""

import numpy as np
import pytest

import symgrad as sg
import symgrad.test_utils as tu

BACKWARDS = {
    "correct": lambda x, y, g: g * (1 - y * y),
    "ignores the head gradient": lambda x, y, g: 1 - y * y,
    "returns its input": lambda x, y, g: x,
    "returns its output": lambda x, y, g: y,
    "returns the head gradient": lambda x, y, g: g,
}
NAMED = {
    "ignores the head gradient": "the backward ignores the head gradient",
    "returns its input": "the value of argument 'x' itself: the backward returns the wrong array",
    "returns its output": "the value of output 'dc_output' itself: the backward returns the wrong array",
    "returns the head gradient": "the head gradient of 'dc_output' itself: the backward returns the wrong array",
}


def _register(kind):
    class _Tanh(sg.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], np.tanh(in_data[0]))

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            self.assign(in_grad[0], req[0], BACKWARDS[kind](in_data[0], out_data[0], out_grad[0]))

    @sg.operator.register(f"dc_{kind}")
    class _Prop(sg.operator.CustomOpProp):
        def infer_shape(self, in_shape):
            return in_shape, [in_shape[0]], []

        def create_operator(self, ctx, shapes, dtypes):
            return _Tanh()


for _kind in BACKWARDS:
    _register(_kind)


def _sym(kind):
    return sg.sym.Custom(sg.sym.Variable("x"), op_type=f"dc_{kind}", name="dc")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", sorted(NAMED))
def test_check_numeric_gradient_names_the_bug(kind, dtype):
    x = np.random.default_rng(0).standard_normal((3, 4))
    with pytest.raises(tu.GradientCheckError) as info:
        tu.check_numeric_gradient(_sym(kind), {"x": x}, dtype=dtype, progress=False)
    assert NAMED[kind] in info.value.diagnosis
    assert "broadcast" not in info.value.diagnosis


@pytest.mark.parametrize("kind", sorted(NAMED))
def test_check_symbolic_backward_names_the_bug(kind):
    x = np.random.default_rng(1).standard_normal((3, 4))
    head = np.random.default_rng(2).standard_normal((3, 4))
    with pytest.raises(tu.GradientCheckError) as info:
        tu.check_symbolic_backward(_sym(kind), {"x": x}, [head], {"x": head * (1 - np.tanh(x) ** 2)}, dtype=np.float64)
    assert NAMED[kind] in info.value.diagnosis


def test_the_correct_twin_passes():
    x = np.random.default_rng(0).standard_normal((3, 4))
    for dtype in (np.float32, np.float64):
        result = tu.check_numeric_gradient(_sym("correct"), {"x": x}, dtype=dtype, progress=False)
        analytic, numeric = result["x"]
        np.testing.assert_allclose(analytic, numeric, rtol=1e-3, atol=1e-6)


def test_a_wrong_reduction_is_still_named_as_such():
    # the gradient of a broadcast bias taken from one slice: it scales with the head gradient, so it is not
    # "ignores the head gradient"; and it is no input or output
    from symgrad.test_utils.diagnose import diagnose

    g = np.random.default_rng(3).standard_normal((5, 4))
    context = {
        "slice_terms": [("output 'y' slice [0, :]", g[0], 5)],
        "head_doubled": 2 * g[0],
        "arrays": [("the value of argument 'b'", np.ones(4))],
    }
    assert "wrong broadcast reduction" in diagnose(g[0], g.sum(0), context=context)


class _Mul(sg.operator.CustomOp):
    """y = a * b with the two gradients exchanged (d/da = g * a instead of g * b): a shipped class of bug."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * in_data[1])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        a, b, g = in_data[0], in_data[1], out_grad[0]
        self.assign(in_grad[0], req[0], g * a)
        self.assign(in_grad[1], req[1], g * b)


@sg.operator.register("dc_swapped_mul")
class _MulProp(sg.operator.CustomOpProp):
    def list_arguments(self):
        return ["a", "b"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _Mul()


@pytest.mark.parametrize("checker", ["check_numeric_gradient", "check_symbolic_backward"])
def test_swapped_gradients_of_two_arguments_are_named(checker):
    a, b = sg.sym.Variable("a"), sg.sym.Variable("b")
    sym = sg.sym.Custom(a, b, op_type="dc_swapped_mul", name="mul")
    rng = np.random.default_rng(4)
    va, vb = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    with pytest.raises(tu.GradientCheckError) as info:
        if checker == "check_numeric_gradient":
            tu.check_numeric_gradient(sym, {"a": va, "b": vb}, dtype=np.float64, progress=False)
        else:
            tu.check_symbolic_backward(sym, {"a": va, "b": vb}, [np.ones((3, 4))], {"a": vb, "b": va}, dtype=np.float64)
    assert "the gradients of two arguments are swapped" in info.value.diagnosis


def test_the_derivative_taken_at_the_output_is_named():
    # the shipped class f'(f(x)) for f'(x): tanh's backward written as 1 - tanh(y)^2 with y the output
    BACKWARDS["at the output"] = lambda x, y, g: g * (1 - np.tanh(y) ** 2)
    _register("at the output")
    x = np.random.default_rng(5).standard_normal((3, 4))
    for dtype in (np.float32, np.float64):
        with pytest.raises(tu.GradientCheckError) as info:
            tu.check_numeric_gradient(_sym("at the output"), {"x": x}, dtype=dtype, progress=False)
        assert "the derivative evaluated at the output 'dc_output' instead of the input" in info.value.diagnosis


def test_check_model_names_the_derivative_taken_at_the_output_on_the_faulty_node():
    # tests/planted_network.py's planted_at_output (softplus' derivative at the output) in a small conv net: the
    # node check compares a sample of the node's elements, re-differentiated at the output for the diagnosis
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import planted_network  # noqa: F401  (registers the planted ops)

    S = sg.sym
    y = S.Convolution(S.Variable("data"), kernel=(3, 3), num_filter=4, name="conv")
    y = S.Custom(S.BatchNorm(y, fix_gamma=False, name="bn"), op_type="planted_at_output", name="planted_fwd")
    y = S.FullyConnected(S.Activation(y, act_type="relu", name="relu"), num_hidden=3, name="fc")
    res = tu.check_model(y, shapes={"data": (2, 3, 12, 12)}, dtype="float32", raise_on_failure=False, seed=1)
    (fault,) = res.faults
    assert fault.name == "planted_fwd" and "evaluated at the output" in fault.diagnosis


class _HardSigmoid(sg.operator.CustomOp):
    """hardsigmoid(x) = clip(x / 6 + 1/2, 0, 1); ``wrong`` gives slope 1/6 below -3 too (a shipped region bug)."""

    def __init__(self, wrong):
        self.wrong = wrong

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], np.clip(in_data[0] / 6 + 0.5, 0, 1))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x = in_data[0]
        inside = (x > -3) & (x < 3) if not self.wrong else (x < 3)
        self.assign(in_grad[0], req[0], out_grad[0] * inside / 6)


for _wrong in (False, True):

    def _reg_hs(wrong=_wrong):
        @sg.operator.register(f"dc_hardsigmoid_{'wrong' if wrong else 'ok'}")
        class _P(sg.operator.CustomOpProp):
            def infer_shape(self, in_shape):
                return in_shape, [in_shape[0]], []

            def create_operator(self, ctx, shapes, dtypes):
                return _HardSigmoid(wrong)

    _reg_hs()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_error_in_one_region_of_the_input_is_named_with_its_range(dtype):
    x = np.linspace(-5.3, 2.7, 24).reshape(4, 6)  # 7 elements below -3, none at the kinks
    sym = lambda kind: sg.sym.Custom(sg.sym.Variable("x"), op_type=f"dc_hardsigmoid_{kind}", name="hs")
    tu.check_numeric_gradient(sym("ok"), {"x": x}, dtype=dtype, progress=False)
    with pytest.raises(tu.GradientCheckError) as info:
        tu.check_numeric_gradient(sym("wrong"), {"x": x}, dtype=dtype, progress=False)
    assert "error confined to the 7 of 24 elements whose 'x' value lies below -3" in info.value.diagnosis


def test_a_region_is_not_claimed_where_chance_explains_it():
    # two wrong elements of six that happen to be the two smallest: 2 / C(6, 2) = 13% by chance: no claim
    from symgrad.test_utils.diagnose import diagnose

    x = np.array([-2.0, -1.0, 0.5, 1.0, 2.0, 3.0])
    e = np.ones(6)
    a = e.copy()
    a[:2] = 5.0
    assert "region" not in str(diagnose(a, e, context={"values": x, "mismatch": a != e}))


def test_rows_selected_more_than_once_are_named_as_repeated_indices():
    from symgrad.test_utils.diagnose import diagnose

    # a gather backward that wrote (=) where it had to add (+=): row 2, selected twice, gets one g; row 0 once
    idx = np.array([2, 0, 2])
    g = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    expected = np.zeros((4, 2))
    np.add.at(expected, idx, g)
    actual = np.zeros((4, 2))
    actual[idx] = g
    found = diagnose(actual, expected, context={"indices": [("idx", idx)]})
    assert found.pattern == "repeated_indices" and "row 2 along axis 0" in found
    # a wrong row that is selected once is not this pattern
    actual[0] += 1.0
    assert (
        getattr(diagnose(actual, expected, context={"indices": [("idx", idx)]}), "pattern", None) != "repeated_indices"
    )


def test_rows_the_forward_ignores_that_receive_gradient_are_named():
    from symgrad.test_utils.diagnose import diagnose

    # an embedding whose padding row 0 is zeroed in the forward but still receives its gradient
    idx = np.array([0, 1, 0])
    g = np.ones((3, 2))
    expected = np.zeros((3, 2))
    np.add.at(expected, idx[idx != 0], g[idx != 0])
    actual = np.zeros((3, 2))
    np.add.at(actual, idx, g)
    found = diagnose(actual, expected, context={"indices": [("idx", idx)]})
    assert found.pattern == "ignored_index" and "the forward ignores" in found


def test_a_gradient_through_the_inverted_mask_is_named():
    from symgrad.test_utils.diagnose import diagnose

    cond = np.array([1, 0, 1, 1, 0, 0], bool)
    g = np.arange(1.0, 7.0)
    found = diagnose(g * ~cond, g * cond)  # where(cond, x, c): the backward masked with the else branch
    assert found.pattern == "inverted_mask" and "branches of a condition swapped" in found
    assert getattr(diagnose(g * cond * 2, g * cond), "pattern", None) != "inverted_mask"


def test_rows_the_forward_does_not_read_are_named_when_they_get_gradient():
    from symgrad.test_utils.diagnose import diagnose

    # a cross-entropy whose ignored rows (labels 0 here) get softmax - onehot and are counted in the normaliser
    t = np.array([0, 3, 0, 1])
    expected = np.zeros((4, 5))
    expected[[1, 3]] = 0.1
    actual = np.full((4, 5), 0.05)
    found = diagnose(actual, expected, context={"indices": [("t", t)]})
    assert found.pattern == "ignored_index" and "the rows 0, 2 receive gradient" in found
    assert getattr(diagnose(actual, expected), "pattern", None) != "ignored_index"  # no index input: no claim


@pytest.mark.parametrize(
    ("k", "pattern", "says"),
    [
        (180 / np.pi, "scaled", "scaled by 57.29"),  # degrees for radians: not "accumulated over 57 calls"
        (57.0, "accumulated", "accumulated over 57 backward calls"),
        (3.02, "accumulated", "accumulated over 3 backward calls"),  # a count with a little fit error
        (1 / 25.4, "scaled", "scaled by 0.03937"),  # inches for mm: not "scaled by 1/25"
        (1 / 4, "scaled", "scaled by 1/4"),
    ],
)
def test_a_factor_reads_as_a_count_only_when_it_is_close_to_an_integer(k, pattern, says):
    from symgrad.test_utils.diagnose import diagnose

    expected = np.random.default_rng(0).standard_normal((4, 5))
    found = diagnose(k * expected, expected)
    assert found.pattern == pattern and says in found, found


@pytest.mark.parametrize(
    ("lo", "hi", "says"),
    [
        (2.0, 2.0000001, "is about 2"),
        (2.96, 3.05, "varies from 2.96 to 3.05"),
        (-0.283, 1.43, "varies from -0.283 to 1.43"),
    ],
)
def test_a_ratio_range_whose_ends_print_alike_reads_as_one_value(lo, hi, says):
    """Reports said "the ratio varies from 2 to 2" where both ends round to the same three digits."""
    from symgrad.test_utils.diagnose import _ratio_span

    assert _ratio_span(lo, hi) == says


def test_a_float_parameter_holding_integers_is_not_taken_for_an_index():
    """A bias initialised to 0 (integers by chance) fed a "repeated indices ... rows that 'c1_bias' selects"
    diagnosis; only variables read through an index slot (``take``'s indices) or by a Custom op count."""
    from symgrad.test_utils.mxnet_checks import diagnosis_context

    S = sg.sym
    data, idx = S.Variable("data"), S.Variable("idx")
    net = S.take(S.FullyConnected(data, num_hidden=4, name="fc"), idx)
    rng = np.random.default_rng(0)
    loc = {
        "data": rng.standard_normal((3, 5)),
        "fc_weight": rng.standard_normal((4, 5)),
        "fc_bias": np.zeros(4),
        "idx": np.array([0.0, 2.0, 2.0]),
    }
    heads = [rng.standard_normal((3, 4))]
    found = diagnosis_context(net, sg.cpu(), loc, {}, heads, "data", [(3, 4)])
    assert [name for name, _ in found["indices"]] == ["idx"]
