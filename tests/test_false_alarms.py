"""No false alarms: correct ops pass ``check_numeric_gradient`` at default settings, kinks are named, not failed.

- smooth correct ops (tanh, sigmoid, exp, log on positive inputs, FullyConnected, softmax, BatchNorm,
  Convolution, dot) in float32 and float64, over many seeds each;
- kinked ops (relu, LeakyReLU, a relu inside a graph, |x| with slope 1 at 0, max and maximum with ties,
  clip at its bounds) at exact zeros/ties: they pass, and a ``NondifferentiablePointWarning`` says
  "non-differentiable point"; with ``kinks="error"`` the report names the point;
- trustworthy numbers: Richardson extrapolation and complex steps beat plain central differences,
  complex steps refuse ops that are not complex-analytic (naming them);
- the progress bar appears only for long checks and never without tqdm; small checks take milliseconds.

``benchmarks/false_alarms.py`` measures the float32 false-alarm rate over 100 seeds against a
PyTorch-gradcheck-like float32 finite difference.
"""

from __future__ import annotations

import sys
import types
import warnings

import numpy as np
import pytest

import symgrad as sg
import symgrad.test_utils as tu
import symgrad.test_utils.differencer as differencer
from symgrad.test_utils.numeric import ComplexStepError
from symgrad.test_utils.report import GradientCheckError, NondifferentiablePointWarning

S = sg.sym

#: seeds per (op, dtype) of the no-false-alarm test (the whole file stays well under 15 s on 2 cores)
SEEDS = 40


def _smooth_cases():
    x = S.Variable("x")

    def normal(sym, **shapes):
        def build(rng):
            arg_shapes = sym.infer_shape(**shapes)[0]
            return sym, {n: rng.standard_normal(s) for n, s in zip(sym.list_arguments(), arg_shapes)}, None

        return build

    def log(rng):
        return S.log(x), {"x": rng.uniform(0.2, 3.0, (3, 4))}, None

    def batchnorm(rng):
        loc = {
            "x": rng.standard_normal((4, 3)),
            "bn_gamma": rng.uniform(0.5, 1.5, 3),
            "bn_beta": rng.standard_normal(3),
        }
        aux = {"bn_moving_mean": 0.1 * rng.standard_normal(3), "bn_moving_var": rng.uniform(0.5, 1.5, 3)}
        return S.BatchNorm(x, fix_gamma=False, name="bn"), loc, aux

    return {
        "tanh": normal(S.tanh(x), x=(3, 4)),
        "sigmoid": normal(S.sigmoid(x), x=(3, 4)),
        "exp": normal(S.exp(x), x=(3, 4)),
        "log": log,
        "FullyConnected": normal(S.FullyConnected(x, num_hidden=4, name="fc"), x=(2, 3)),
        "softmax": normal(S.softmax(x), x=(3, 4)),
        "BatchNorm": batchnorm,
        "Convolution": normal(S.Convolution(x, kernel=(3, 3), num_filter=2, name="conv"), x=(1, 2, 4, 4)),
        "dot": normal(S.dot(x, S.Variable("w")), x=(3, 4), w=(4, 2)),
    }


SMOOTH = _smooth_cases()


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("op", list(SMOOTH))
def test_correct_smooth_ops_never_fail(op, dtype):
    failures = []
    for seed in range(SEEDS):
        sym, loc, aux = SMOOTH[op](np.random.default_rng(seed))
        np.random.seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a smooth op has no kink to warn about
            try:
                tu.check_numeric_gradient(sym, loc, aux_states=aux, dtype=dtype)
            except GradientCheckError as err:
                failures.append((seed, str(err)))
    assert not failures, f"{len(failures)} false alarms of {SEEDS}; first: {failures[0]}"


# == kinks ===============================================================================================


class _AbsGe(sg.operator.CustomOp):
    """|x| whose backward takes sign(x) with +1 at 0 (``x >= 0``), a valid subgradient."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], np.abs(in_data[0]))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], np.where(in_data[0] >= 0, 1.0, -1.0) * out_grad[0])


@sg.operator.register("fa_abs_ge")
class _AbsGeProp(sg.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return _AbsGe()


def _with_zeros(rng, shape, n_zeros):
    v = rng.standard_normal(shape)
    flat = v.reshape(-1)
    spots = rng.choice(flat.size, n_zeros, replace=False)
    flat[spots] = 0.0
    return v, sorted(tuple(int(i) for i in np.unravel_index(s, shape)) for s in spots)


def _kink_cases(rng):
    """``name -> (symbol, location, {argument: kink indices})``: kinked ops at exact zeros / ties."""
    x, y = S.Variable("x"), S.Variable("y")
    cases = {}
    v, z = _with_zeros(rng, (3, 4), 3)
    cases["relu"] = (S.relu(x), {"x": v}, {"x": z})
    v, z = _with_zeros(rng, (3, 4), 2)
    cases["Activation(relu)"] = (S.Activation(x, act_type="relu"), {"x": v}, {"x": z})
    v, z = _with_zeros(rng, (2, 5), 2)
    cases["LeakyReLU"] = (S.LeakyReLU(x, act_type="leaky", slope=0.25), {"x": v}, {"x": z})
    v, z = _with_zeros(rng, (3, 4), 3)
    cases["|x| (x >= 0 rule)"] = (S.Custom(x, op_type="fa_abs_ge"), {"x": v}, {"x": z})
    m = rng.standard_normal((2, 5))
    m[0, 3] = m[0, 1] = m[0].max() + 0.5  # a tie for the maximum of row 0
    m[1, 0] = m[1, 4] = m[1].max() + 0.5
    cases["max (ties)"] = (S.max(x, axis=1), {"x": m}, {"x": [(0, 1), (0, 3), (1, 0), (1, 4)]})
    a, b = rng.standard_normal(6), rng.standard_normal(6)
    b[[1, 4]] = a[[1, 4]]
    cases["maximum (ties)"] = (S.maximum(x, y), {"x": a, "y": b}, {"x": [(1,), (4,)], "y": [(1,), (4,)]})
    c = rng.uniform(-0.4, 0.4, 5)
    c[[0, 3]] = [-0.5, 0.5]
    cases["clip (at the bounds)"] = (S.clip(x, a_min=-0.5, a_max=0.5), {"x": c}, {"x": [(0,), (3,)]})
    w = rng.standard_normal((3, 2))
    d = rng.standard_normal((1, 2))
    d[0, 1] = -w[1, 0] * d[0, 0] / w[1, 1]  # pre-activation of hidden unit 1 exactly 0 (up to rounding)
    d64 = d.copy()
    cases["relu(FullyConnected) at 0"] = (
        S.relu(S.FullyConnected(x, num_hidden=3, no_bias=True, name="fc")),
        {"x": d64, "fc_weight": w},
        None,
    )
    return cases


KINK_NAMES = list(_kink_cases(np.random.default_rng(0)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", KINK_NAMES)
@tu.with_seed()
def test_kinked_ops_at_kinks_pass_and_say_so(case, dtype):
    res = check_kinked_case(case, dtype)  # asserts the warning, the kinks found and the re-drawn points
    assert res.kinks and not res.excluded


def check_kinked_case(case, dtype):
    """``check_numeric_gradient`` at an exact kink of ``case`` (drawn from numpy's global RNG): it passes, warns
    "non-differentiable point", re-draws only the kinked elements and excludes none. Returns the result."""
    sym, loc, kinks = _kink_cases(np.random.default_rng(np.random.randint(1 << 30)))[case]
    with pytest.warns(NondifferentiablePointWarning, match="non-differentiable point at") as record:
        res = tu.check_numeric_gradient(sym, loc, dtype=dtype)
    text = str(record[0].message)
    assert "not a gradient error" in text and "re-drew" in text
    assert res.kinks and res.redrawn and not res.excluded and res.method == "central"
    if kinks is not None:  # every kink found sits where one was planted (and, for ties/zeros, all of them)
        assert {(k.arg, k.index) for k in res.kinks} <= {(a, i) for a, idx in kinks.items() for i in idx}
        if case != "clip (at the bounds)":  # clip at a bound: the analytic side may match the central one
            assert {(k.arg, k.index) for k in res.kinks} == {(a, i) for a, idx in kinks.items() for i in idx}
    for k in res.kinks:  # the analytic value is one of the sides or between them (a point just off the kink
        # mixes both slopes into the quotients: allow a little beyond them)
        slack = 1e-3 + 0.15 * abs(k.right - k.left)
        assert k.subgradient and min(k.left, k.right) - slack <= k.analytic <= max(k.left, k.right) + slack
    for name, indices in res.redrawn.items():  # the point checked moved off each kink, and only there
        moved = np.argwhere(res.location[name] != np.asarray(loc[name]).astype(dtype))
        assert sorted(map(tuple, moved.tolist())) == sorted(set(indices))
    return res


@pytest.mark.parametrize("case", ["relu", "max (ties)", "maximum (ties)"])
@tu.with_seed()
def test_kinks_can_be_excluded_or_reported(case):
    sym, loc, kinks = _kink_cases(np.random.default_rng(np.random.randint(1 << 30)))[case]
    with pytest.warns(NondifferentiablePointWarning, match="left .* out of the comparison"):
        res = tu.check_numeric_gradient(sym, loc, kinks="exclude")
    assert res.excluded == kinks and not res.redrawn
    with pytest.raises(GradientCheckError) as info:
        tu.check_numeric_gradient(sym, loc, kinks="error")
    err = info.value
    index = ", ".join(str(i) for i in kinks["x"][0])  # the first kink of the first argument
    assert err.pattern == "kink" and err.arg_name == "x"
    assert err.diagnosis.startswith(f"non-differentiable point at x[{index}]")
    assert "not a gradient error" in err.diagnosis and all(k.subgradient for k in err.kinks)
    assert [k.index for k in err.kinks] == kinks["x"]
    with pytest.raises(ValueError, match="kinks must be one of"):
        tu.check_numeric_gradient(sym, loc, kinks="ignore")


def test_symgrad_abs_at_zero_needs_no_excuse():
    # sign(0) = 0 is the symmetric difference quotient itself: nothing disagrees, nothing to re-draw
    v = np.array([0.0, -1.5, 0.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = tu.check_numeric_gradient(S.abs(S.Variable("x")), [v], kinks="error")
    assert res.kinks == [] and res.redrawn == {}


# == trustworthy numbers ==================================================================================


def _numeric_error(sym, loc, method):
    np.random.seed(3)
    ((analytic, num),) = tu.check_numeric_gradient(sym, loc, dtype=np.float64, method=method).values()
    return float(np.max(np.abs(analytic - num) / np.maximum(np.abs(analytic), 1e-300)))


@pytest.mark.parametrize("low", ["float32", "float16"])
def test_lower_precision_values_inside_a_float64_check_are_counted_as_noise(low):
    """A float64 check of a graph that holds a value in float32/float16 (a Cast, an op with a float32 output
    such as image.to_tensor): its finite differences carry that dtype's rounding, which the numeric noise
    must count (before: 6 of 6 elements "wrong" by ~0.7% for Cast(x, float32) * 3). The default step (sized
    for float64) then leaves a wide tolerance (~20% here); a step sized for the float32 values (numeric_eps=1,
    for values up to 255) catches a 10% error."""
    x = S.Variable("x")
    y = S.Cast(x, dtype=low) * 3.0
    for seed in range(10):
        values = {"x": np.random.default_rng(seed).uniform(0, 255, (2, 3))}
        tu.check_numeric_gradient(y, values, dtype=np.float64)
        tu.check_numeric_gradient(y, values, dtype=np.float64, numeric_eps=1.0)
    if low == "float32":
        wrong = S.Custom(x, op_type="lower_precision_scaled_copy")
        with pytest.raises(GradientCheckError):
            tu.check_numeric_gradient(
                S.Cast(wrong, dtype=low) * 3.0,
                {"x": np.linspace(1, 255, 6).reshape(2, 3)},
                dtype=np.float64,
                numeric_eps=1.0,
            )


class _ScaledCopy(sg.operator.CustomOp):
    """Identity forward with a gradient 10% too large (a planted bug)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * 1.1)


@sg.operator.register("lower_precision_scaled_copy")
class _ScaledCopyProp(sg.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def infer_shape(self, in_shape):
        return in_shape, in_shape, []

    def create_operator(self, ctx, shapes, dtypes):
        return _ScaledCopy()


def test_richardson_and_complex_step_beat_central_differences():
    x = S.Variable("x")
    v = np.random.default_rng(4).uniform(-2, 2, (3, 4))
    for sym in (S.exp(S.sin(x) * 2.0), S.tanh(x) * S.exp(x)):
        central = _numeric_error(sym, [v], "central")
        richardson = _numeric_error(sym, [v], "richardson")
        cstep = _numeric_error(sym, [v], "complex_step")
        assert central < 1e-7  # already good: float64 reference, per-element step
        assert richardson < central / 10
        assert cstep < 1e-13


def test_numeric_grad_richardson_and_default_steps():
    x = S.Variable("x")
    v = np.array([0.5, -1.0, 3.0])
    exe = S.exp(x).simple_bind(sg.cpu(), x=(3,), type_dict={"x": np.float64})
    g = tu.numeric_grad(exe, [v], eps=None, dtype=np.float64, method="richardson")["x"]
    np.testing.assert_allclose(g, np.exp(v), rtol=1e-10)  # central differences: ~1e-9
    np.testing.assert_allclose(
        differencer.default_steps(np.array([0.5, -4.0]), np.float64, "richardson"),
        np.finfo(np.float64).eps ** 0.2 * np.array([1.0, 4.0]),
    )
    with pytest.raises(ValueError, match="complex copy"):
        tu.numeric_grad(exe, [v], method="complex_step")
    with pytest.raises(ValueError, match="method must be one of"):
        tu.numeric_grad(exe, [v], method="forward")


def test_complex_step_names_the_op_that_refuses():
    x = S.Variable("x")
    v = np.random.default_rng(5).standard_normal((2, 3))
    for sym, op in ((S.abs(x), "abs"), (S.tanh(S.sigmoid(x)), "sigmoid")):  # sigmoid: its stable form uses |x|
        with pytest.raises(ComplexStepError, match=f"op {op} .*Use method='central' or 'richardson'") as info:
            tu.check_numeric_gradient(sym, [v], method="complex_step")
        assert info.value.op == op and isinstance(info.value, ValueError)
    d, lab = S.Variable("data"), S.Variable("label")
    with pytest.raises(NotImplementedError, match="loss head"):
        tu.check_numeric_gradient(S.SoftmaxOutput(d, lab), [v, np.array([0.0, 2.0])], method="complex_step")
    with pytest.raises(ValueError, match="numeric_eps does not apply"):
        tu.check_numeric_gradient(S.tanh(x), [v], method="complex_step", numeric_eps=1e-3)
    with pytest.raises(ValueError, match="method must be one of"):
        tu.check_numeric_gradient(S.tanh(x), [v], method="five_point")


def test_complex_step_through_a_model_with_aux_states_and_a_custom_op():
    x = S.Variable("x")
    net = S.softmax(S.BatchNorm(S.FullyConnected(x, num_hidden=3, name="fc"), fix_gamma=False, name="bn"))
    shapes = dict(zip(net.list_arguments(), net.infer_shape(x=(4, 2))[0]))
    rng = np.random.default_rng(6)
    loc = {n: rng.standard_normal(s) for n, s in shapes.items()}
    loc["bn_gamma"] = rng.uniform(0.5, 1.5, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning: aux states are complex too
        res = tu.check_numeric_gradient(net, loc, dtype=np.float64, method="complex_step")
    for analytic, num in res.values():
        np.testing.assert_allclose(analytic, num, rtol=1e-9, atol=1e-12)


def test_float32_check_catches_what_a_float32_difference_cannot():
    # the reference is float64 whatever the dtype under test: a 0.5% error in a float32 rule is seen
    x = S.Variable("x")
    v = np.random.default_rng(7).uniform(1, 2, (4, 4))
    with pytest.raises(GradientCheckError, match=r"off by ~0\.5% everywhere"):
        tu.check_numeric_gradient(S.Custom(x, op_type="fa_scaled_exp", k="1.005"), [v])
    tu.check_numeric_gradient(S.Custom(x, op_type="fa_scaled_exp", k="1"), [v])


class _ScaledExp(sg.operator.CustomOp):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], np.exp(in_data[0]))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], self.k * out_data[0] * out_grad[0])


@sg.operator.register("fa_scaled_exp")
class _ScaledExpProp(sg.operator.CustomOpProp):
    def __init__(self, k="1"):
        super().__init__()
        self.k = float(k)

    def create_operator(self, ctx, shapes, dtypes):
        return _ScaledExp(self.k)


# == progress bar and speed ==============================================================================


class _FakeBar:
    instances: list = []

    def __init__(self, total, initial=0, **kwargs):
        self.total, self.n, self.kwargs, self.closed = total, initial, kwargs, False
        _FakeBar.instances.append(self)

    def update(self, n=1):
        self.n += n

    def close(self):
        self.closed = True


@pytest.fixture
def fake_tqdm(monkeypatch):
    pkg, auto = types.ModuleType("tqdm"), types.ModuleType("tqdm.auto")
    auto.tqdm = pkg.tqdm = _FakeBar
    pkg.auto = auto
    monkeypatch.setitem(sys.modules, "tqdm", pkg)
    monkeypatch.setitem(sys.modules, "tqdm.auto", auto)
    _FakeBar.instances = []
    return _FakeBar


def test_progress_bar_only_for_long_checks(fake_tqdm, monkeypatch):
    x = S.Variable("x")
    v = np.random.default_rng(8).standard_normal(50)
    tu.check_numeric_gradient(S.tanh(x), [v])  # milliseconds: no bar
    assert fake_tqdm.instances == []
    monkeypatch.setattr(differencer, "PROGRESS_DELAY", 0.0)  # every check is "long" now
    tu.check_numeric_gradient(S.tanh(x), [v])
    (bar,) = fake_tqdm.instances
    assert bar.total == 50 and bar.n == 50 and bar.closed and bar.kwargs["desc"] == "numeric gradient"
    fake_tqdm.instances.clear()
    tu.check_numeric_gradient(S.tanh(x), [v], progress=False)
    tu.check_numeric_gradient(S.tanh(x), [v], method="complex_step", progress=False)
    assert fake_tqdm.instances == []


def test_progress_bar_without_tqdm_is_silent(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    monkeypatch.setattr(differencer, "PROGRESS_DELAY", 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = tu.check_numeric_gradient(S.tanh(S.Variable("x")), [np.ones(5)])
    assert list(res) == ["x"] and not res.excluded


def test_small_checks_cost_two_evaluations_per_element_and_three_binds(monkeypatch):
    # what keeps a small check in the milliseconds (~1-2 ms on one core: benchmarks/, not timed here): central
    # differences on the partial re-runs and nothing more -- no retry, no kink test, no re-bind per element
    from symgrad.executor import Executor
    from symgrad.test_utils.harness import Harness

    counts = {"evaluations": 0, "binds": 0}

    def counting(method, key):
        def wrapper(*args, **kwargs):
            counts[key] += 1
            return method(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(Harness, "outputs", counting(Harness.outputs, "evaluations"))
    monkeypatch.setattr(Executor, "__init__", counting(Executor.__init__, "binds"))
    x = S.Variable("x")
    rng = np.random.default_rng(9)
    cases = [
        (S.tanh(x), [rng.standard_normal((3, 4))]),
        (S.FullyConnected(x, num_hidden=4, name="fc"), [rng.standard_normal(s) for s in ((2, 3), (4, 3), (4,))]),
    ]
    for sym, loc in cases:
        counts.update(evaluations=0, binds=0)
        tu.check_numeric_gradient(sym, loc)
        # one bind each: the analytic run, the float64 reference (the harness) and the analytic-noise estimate
        assert counts == {"evaluations": 2 * sum(a.size for a in loc), "binds": 3}
