"""Special-point probes (``symgrad.test_utils.probes``): the checkers visit derived points a user's draw never hits
(zeros, constant rows, far-out values, two equal inputs) and judge soundness and agreement there. Before, every
checker passed the shipped "NaN at an exact zero" bugs at a user's draw (0 of 18 in benchmarks/shipped_bugs)."""

import numpy as np
import pytest

import symgrad as sg
import symgrad.test_utils as tu
from symgrad.test_utils import probes

S = sg.sym

RULES = {
    # y = ||x_i|| per row; x / ||x|| is NaN on a zero row (PyTorch #2421 shipped it); the fix returns 0 there
    "norm_nan": (lambda x: np.sqrt((x * x).sum(axis=1)), lambda g, y, x: g[:, None] * x / y[:, None]),
    "norm_ok": (
        lambda x: np.sqrt((x * x).sum(axis=1)),
        lambda g, y, x: g[:, None] * np.divide(x, y[:, None], out=np.zeros_like(x), where=y[:, None] > 0),
    ),
    # hardsigmoid with the slope 1/6 kept below -3 (a wrong region): a standard normal draw never goes there
    "hs_wrong": (lambda x: np.clip(x / 6 + 0.5, 0, 1), lambda g, y, x: g * (x < 3) / 6),
    "hs_ok": (lambda x: np.clip(x / 6 + 0.5, 0, 1), lambda g, y, x: g * ((x > -3) & (x < 3)) / 6),
    # sqrt(|x|): its derivative really is infinite at 0 (a singularity, not a bug)
    "sqrt_abs": (lambda x: np.sqrt(np.abs(x)), lambda g, y, x: g * np.sign(x) / (2 * np.sqrt(np.abs(x)))),
}


def _register(name, rowwise):
    fwd, bwd = RULES[name]

    class _Op(sg.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], fwd(in_data[0]))

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            with np.errstate(all="ignore"):
                self.assign(in_grad[0], req[0], bwd(out_grad[0], out_data[0], in_data[0]))

    @sg.operator.register(f"pr_{name}")
    class _Prop(sg.operator.CustomOpProp):
        def infer_shape(self, in_shape):
            return in_shape, [(in_shape[0][0],) if rowwise else in_shape[0]], []

        def create_operator(self, ctx, shapes, dtypes):
            return _Op()


for _name in RULES:
    _register(_name, _name.startswith("norm"))


def _check(checker, name, x, **kw):
    f = lambda v: S.Custom(v, op_type=f"pr_{name}")
    if checker == "check_numeric_gradient":
        return tu.check_numeric_gradient(f(S.Variable("x")), {"x": x}, dtype=x.dtype, progress=False, **kw)
    if checker == "check_backward":
        y = f(S.Variable("x")).infer_shape(x=x.shape)[1][0]
        return tu.check_backward(
            f, x, np.random.default_rng(1).standard_normal(y).astype(x.dtype), progress=False, **kw
        )
    return tu.gradcheck(f, (x,), progress=False, **kw)


CHECKERS = ["check_numeric_gradient", "check_backward", "gradcheck"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("checker", CHECKERS)
def test_a_nan_at_a_zero_row_is_found_from_a_users_draw(checker, dtype):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(dtype)
    with pytest.raises(
        tu.GradientCheckError,
        match=r"at the probe \w+ = 0 \(every element\).* is nan at .*"
        r"one-sided derivatives are -[\d.]+ \(left\) and [\d.]+ \(right\)",
    ):
        _check(checker, "norm_nan", x)
    _check(checker, "norm_ok", x)  # the fix passes


@pytest.mark.parametrize("checker", CHECKERS)
def test_a_formula_wrong_far_out_is_found_from_a_users_draw(checker):
    x = np.random.default_rng(2).standard_normal((3, 4))
    with pytest.raises(tu.GradientCheckError, match="scaled by 10.*outside the one-sided numeric derivatives"):
        _check(checker, "hs_wrong", x)
    _check(checker, "hs_ok", x)


def test_check_symbolic_backward_probes_against_finite_differences():
    # the user's expected arrays hold at the given location only; at the derived points the probes compare with
    # finite differences
    x = np.random.default_rng(0).standard_normal((3, 4))
    expected = {"x": x / np.sqrt((x * x).sum(axis=1, keepdims=True))}
    with pytest.raises(tu.GradientCheckError, match="at the probe x = 0 .* is nan"):
        tu.check_symbolic_backward(
            S.Custom(S.Variable("x"), op_type="pr_norm_nan"), {"x": x}, [np.ones(3)], expected, dtype=np.float64
        )
    tu.check_symbolic_backward(
        S.Custom(S.Variable("x"), op_type="pr_norm_ok"), {"x": x}, [np.ones(3)], expected, dtype=np.float64
    )


def test_a_true_singularity_is_not_a_failure():
    # at x = 0 the analytic gradient of sqrt(|x|) is infinite and so are the one-sided derivatives (they grow as
    # the step shrinks): a property of the function, not a bug
    x = np.random.default_rng(3).standard_normal((3, 4))
    assert set(_check("check_numeric_gradient", "sqrt_abs", x)) == {"x"}
    assert _check("check_backward", "sqrt_abs", x) is None
    assert _check("gradcheck", "sqrt_abs", x) is True


def test_probes_false_turns_them_off_and_true_asks_for_them_on_builtin_graphs(monkeypatch):
    x = np.random.default_rng(0).standard_normal((3, 4))
    _check("check_numeric_gradient", "norm_nan", x, probes=False)  # the bug passes without the probes
    calls = []
    monkeypatch.setattr(probes, "run", lambda *a, **k: calls.append(a[0]))
    tu.check_numeric_gradient(S.tanh(S.Variable("x")), {"x": x}, progress=False)
    assert calls == []  # symgrad's own ops: covered by the op database, not probed unless asked
    tu.check_numeric_gradient(S.tanh(S.Variable("x")), {"x": x}, progress=False, probes=True)
    assert len(calls) == 1


def test_the_probe_points_are_bounded_and_name_what_they_change():
    values = {"a": np.ones((3, 4)), "b": np.ones((3, 4)), "c": np.ones(5)}
    labels = [p.label for p in probes.points(values, ["a", "b", "c"], seed=0)]
    # zero, a zero row, a constant row, far out twice per 2-d argument; zero, a zero row, far twice for c; a = b
    assert len(labels) == 5 + 5 + 4 + 1
    assert "b = a (the same values fed to both)" in labels and "c = 0 (every element)" in labels
    assert "a scaled by 1000" in labels
    # an argument that is not differentiated and holds integers (an index): every entry repeats the first, and
    # every other entry is a padding / ignored value
    with_index = probes.points({**values, "i": np.array([2.0, 0.0, 1.0])}, ["a", "b", "c"], seed=0)
    index_points = {p.label: p.values["i"].tolist() for p in with_index if p.label.startswith("every")}
    assert index_points == {
        "every i = 2 (repeated indices)": [2.0, 2.0, 2.0],
        "every other i = 0 (a padding / ignored index value)": [0.0, 0.0, 0.0],
        "every other i = -100 (a padding / ignored index value)": [-100.0, 0.0, -100.0],
    }
    # rows of one length in arguments of different sizes: one shared row
    shared = probes.points({"x": np.ones((2, 3)), "y": np.zeros((4, 3))}, ["x", "y"], seed=0)
    (row,) = [p for p in shared if "shared" in p.label]
    assert row.label == "y[0, :] = x[0, :] (a row shared between them)"
    assert row.values["y"][0].tolist() == [1.0] * 3 and not row.values["y"][1:].any()
    # the elements a zero or constant probe set are its region (the direction keeping their ties)
    zero_row = next(p for p in probes.points(values, ["a"], seed=0) if p.label.endswith("= 0") and "[" in p.label)
    assert zero_row.region["a"].sum() == 4 and not zero_row.values["a"][zero_row.region["a"]].any()
