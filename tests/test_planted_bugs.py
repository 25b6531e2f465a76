"""Planted wrong gradients: every checker must catch each one, and its diagnosis must name the bug.

Custom ops (``sg.operator``) with a ``bug`` switch: the same forward, a correct backward, or a
backward with one classic mistake (scaled by 1.5, doubled, sign flipped, zero, transposed weight
gradient, a product-rule term missing, one slice instead of the sum over a broadcast axis, one element
of 1 000 off by 25%, a 1% error). Each bug runs through the MXNet-style ``check_numeric_gradient``
(float32 and float64) and ``check_symbolic_backward`` (expected gradients derived here in numpy), the
Chainer-style ``check_backward`` and the PyTorch-style ``gradcheck``; the correct version must pass
every one of them. Then the diagnosis rules one by one, on hand-made arrays.
"""

from __future__ import annotations

import os
import pickle
import shlex
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest

import symgrad as sg
import symgrad.test_utils as tu
from symgrad.test_utils.diagnose import RULES, Diagnosis, analyze, diagnose
from symgrad.test_utils.report import GradientCheckError, Kink

S = sg.sym


# == custom ops with a bug switch ========================================================================


class _Square(sg.operator.CustomOp):
    """y = x^2; backward k * 2x * g, element ``index`` (flat) further times ``elem_k``."""

    def __init__(self, k, index, elem_k):
        super().__init__()
        self.k, self.index, self.elem_k = k, index, elem_k

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        g = np.array(self.k * 2.0 * in_data[0] * out_grad[0])
        if self.index >= 0:
            g.reshape(-1)[self.index] *= self.elem_k
        self.assign(in_grad[0], req[0], g)


@sg.operator.register("pb_square")
class _SquareProp(sg.operator.CustomOpProp):
    def __init__(self, k="1", index="-1", elem_k="1"):
        super().__init__()
        self.k, self.index, self.elem_k = float(k), int(index), float(elem_k)

    def create_operator(self, ctx, shapes, dtypes):
        return _Square(self.k, self.index, self.elem_k)


class _MatMul(sg.operator.CustomOp):
    """y = x @ w; the bug returns the weight gradient transposed."""

    def __init__(self, bug):
        super().__init__()
        self.bug = bug

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] @ in_data[1])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x, w = in_data
        g = out_grad[0]
        self.assign(in_grad[0], req[0], g @ w.T)
        gw = x.T @ g
        self.assign(in_grad[1], req[1], gw.T if self.bug else gw)


@sg.operator.register("pb_matmul")
class _MatMulProp(sg.operator.CustomOpProp):
    def __init__(self, bug="0"):
        super().__init__()
        self.bug = bug == "1"

    def list_arguments(self):
        return ["data", "weight"]

    def infer_shape(self, in_shape):
        return in_shape, [[in_shape[0][0], in_shape[1][1]]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _MatMul(self.bug)


class _XSinX(sg.operator.CustomOp):
    """y = x sin x; dy/dx = sin x + x cos x, the bug forgets the product rule's second term."""

    def __init__(self, bug):
        super().__init__()
        self.bug = bug

    def forward(self, is_train, req, in_data, out_data, aux):
        x = in_data[0]
        self.assign(out_data[0], req[0], x * np.sin(x))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x = in_data[0]
        d = np.sin(x) if self.bug else np.sin(x) + x * np.cos(x)
        self.assign(in_grad[0], req[0], d * out_grad[0])


@sg.operator.register("pb_xsinx")
class _XSinXProp(sg.operator.CustomOpProp):
    def __init__(self, bug="0"):
        super().__init__()
        self.bug = bug == "1"

    def create_operator(self, ctx, shapes, dtypes):
        return _XSinX(self.bug)


class _AddBias(sg.operator.CustomOp):
    """y = data + bias (bias broadcast over rows); bug "row": the bias gradient is g[0] instead of g.sum(0),
    bug "mean": g.mean(0)."""

    def __init__(self, bug):
        super().__init__()
        self.bug = bug

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] + in_data[1])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        g = out_grad[0]
        self.assign(in_grad[0], req[0], g)
        gb = {"row": lambda: g[0], "mean": lambda: g.mean(0)}.get(self.bug, lambda: g.sum(0))()
        self.assign(in_grad[1], req[1], gb)


@sg.operator.register("pb_addbias")
class _AddBiasProp(sg.operator.CustomOpProp):
    def __init__(self, bug="none"):
        super().__init__()
        self.bug = bug

    def list_arguments(self):
        return ["data", "bias"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return _AddBias(self.bug)


class _Abs(sg.operator.CustomOp):
    """y = |x|; backward ``slope_at_zero`` at x == 0 (any value in [-1, 1] is a valid subgradient)."""

    def __init__(self, slope_at_zero, k):
        super().__init__()
        self.slope, self.k = slope_at_zero, k

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], np.abs(in_data[0]))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        x = in_data[0]
        d = np.where(x == 0, self.slope, self.k * np.sign(x))
        self.assign(in_grad[0], req[0], d * out_grad[0])


@sg.operator.register("pb_abs")
class _AbsProp(sg.operator.CustomOpProp):
    def __init__(self, slope_at_zero="1", k="1"):
        super().__init__()
        self.slope, self.k = float(slope_at_zero), float(k)

    def create_operator(self, ctx, shapes, dtypes):
        return _Abs(self.slope, self.k)


# == the bug matrix ===================================================================================


def _signed(shape, lo, hi):
    return np.random.uniform(lo, hi, shape) * np.where(np.random.rand(*shape) < 0.5, -1.0, 1.0)


@dataclass
class Bug:
    """A planted bug: ``func(bug)`` maps input Symbols to the output; ``inputs()`` draws the values;
    ``expected(inputs, og)`` derives the correct gradients in numpy."""

    name: str
    func: object
    inputs: object
    expected: object
    buggy: int  # position of the input whose gradient is wrong
    words: str  # must appear in the diagnosis
    pattern: str
    factor: float | None = None
    more: dict = field(default_factory=dict)


def _square(**kw):
    return lambda bug: lambda x: S.Custom(x, op_type="pb_square", **({k: str(v) for k, v in kw.items()} if bug else {}))


def _square_expected(inputs, og):
    return [2.0 * inputs[0] * og]


def _x34():
    return [_signed((3, 4), 1.0, 2.0)]


def _addbias(bug_kind):
    """x + b, b broadcast over the rows; planted: the bias gradient reduced the ``bug_kind`` way."""
    return lambda bug: lambda x, b: S.Custom(x, b, op_type="pb_addbias", bug=bug_kind if bug else "none")


def _addbias_expected(inputs, og):
    return [og, og.sum(0)]


def _x34_b4():
    return [np.random.standard_normal((3, 4)), np.random.standard_normal(4)]


BUGS = [
    Bug("scaled by 1.5", _square(k=1.5), _x34, _square_expected, 0, "scaled by 1.5", "scaled", 1.5),
    Bug(
        "doubled",
        _square(k=2),
        _x34,
        _square_expected,
        0,
        "counted twice / accumulated over two backward calls",
        "doubled",
        2.0,
    ),
    Bug("sign flipped", _square(k=-1), _x34, _square_expected, 0, "sign flipped", "sign", -1.0),
    Bug("zero", _square(k=0), _x34, _square_expected, 0, "gradient missing / not connected", "missing", 0.0),
    Bug(
        "transposed weight gradient",
        lambda bug: lambda x, w: S.Custom(x, w, op_type="pb_matmul", bug="1" if bug else "0"),
        lambda: [np.random.standard_normal((2, 3)), np.random.standard_normal((3, 3))],
        lambda inputs, og: [og @ inputs[1].T, inputs[0].T @ og],
        1,
        "transposed",
        "transposed",
    ),
    Bug(
        "product-rule term missing",
        lambda bug: lambda x: S.Custom(x, op_type="pb_xsinx", bug="1" if bug else "0"),
        lambda: [np.random.uniform(0.3, 3.0, (3, 4))],
        lambda inputs, og: [og * (np.sin(inputs[0]) + inputs[0] * np.cos(inputs[0]))],
        0,
        "no simple pattern",
        "spread",
        more={"text": "product rule"},
    ),
    Bug(
        "wrong broadcast reduction",
        _addbias("row"),
        _x34_b4,
        _addbias_expected,
        1,
        "1 of 3 terms of the sum",
        "broadcast",
        more={"text": "(g.sum(0))"},
    ),
    Bug(
        "broadcast mean instead of sum",
        _addbias("mean"),
        _x34_b4,
        _addbias_expected,
        1,
        "averaged over axis 0",
        "broadcast",
        1 / 3,
    ),
    Bug(
        "one element of 1000 off by 25%",
        _square(index=417, elem_k=1.25),
        lambda: [_signed((1000,), 0.5, 1.5)],
        _square_expected,
        0,
        "error confined to 1 of 1000 elements",
        "confined",
        more={"indices": [(417,)]},
    ),
    Bug("1% error", _square(k=1.01), _x34, _square_expected, 0, "off by ~1% everywhere", "small", 1.01),
]

CHECKERS = [
    "check_numeric_gradient[float32]",
    "check_numeric_gradient[float64]",
    "check_symbolic_backward",
    "check_backward",  # Chainer-style
    "gradcheck",  # PyTorch-style
]


def _run(checker, bug: Bug, planted: bool):
    """Run ``checker`` on the bug's op (``planted`` False: the correct op); returns the checked names."""
    func = bug.func(planted)
    inputs = bug.inputs()
    if checker.startswith("check_numeric_gradient") or checker == "check_symbolic_backward":
        names = [f"x{i}" for i in range(len(inputs))]
        sym = func(*[S.Variable(n) for n in names])
        if checker == "check_symbolic_backward":
            out_shape = sym.infer_shape(**{n: v.shape for n, v in zip(names, inputs)})[1][0]
            og = _signed(out_shape, 0.5, 1.5)  # away from zero: a bug must not hide behind a tiny head gradient
            compared = tu.check_symbolic_backward(sym, inputs, [og], bug.expected(inputs, og))
        else:
            dtype = np.float32 if "float32" in checker else np.float64
            compared = tu.check_numeric_gradient(sym, inputs, dtype=dtype)
        return sorted(compared)  # the names the checker compared
    if checker == "check_backward":
        out_shape = func(*[S.Variable(f"x{i}") for i in range(len(inputs))]).infer_shape(
            **{f"x{i}": v.shape for i, v in enumerate(inputs)}
        )[1][0]
        tu.check_backward(func, tuple(inputs), _signed(out_shape, 0.5, 1.5))
        return [f"x{i}" for i in range(len(inputs))]
    assert checker == "gradcheck"
    assert tu.gradcheck(func, tuple(inputs)) is True
    return [f"input{i}" for i in range(len(inputs))]


@pytest.mark.parametrize("checker", CHECKERS)
@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.name)
@tu.with_seed()
def test_the_correct_op_passes(bug, checker):
    # a failure raises GradientCheckError; on success every input's gradient was compared
    assert _run(checker, bug, planted=False) == [
        f"{'input' if checker == 'gradcheck' else 'x'}{i}" for i in range(len(bug.inputs()))
    ]


@pytest.mark.parametrize("checker", CHECKERS)
@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.name)
@tu.with_seed()
def test_planted_bug_is_caught_and_named(bug, checker):
    with pytest.raises(GradientCheckError) as info:
        _run(checker, bug, planted=True)
    err = info.value
    assert isinstance(err, AssertionError)
    assert err.diagnosis is not None, str(err)
    assert bug.words in err.diagnosis, str(err)
    assert f"diagnosis: {err.diagnosis}" in str(err)
    assert err.pattern == bug.pattern, str(err)
    if bug.factor is not None:
        assert err.factor == pytest.approx(bug.factor, rel=1e-3, abs=1e-6)
    if "text" in bug.more:
        assert bug.more["text"] in err.diagnosis
    if "indices" in bug.more:
        assert err.indices == bug.more["indices"]
    if checker.startswith("check_"):
        assert err.arg_name == f"x{bug.buggy}"


@tu.with_seed()
def test_report_of_a_planted_bug_has_every_fact():
    x = np.random.uniform(1.0, 2.0, (2, 3))
    with pytest.raises(GradientCheckError) as info:
        tu.check_numeric_gradient(S.Custom(S.Variable("x"), op_type="pb_square", k="2"), [x])
    err = info.value
    text = str(err)
    for piece in (
        "'x'",
        "6 of 6 elements (100%)",
        "rtol=0.0001",
        "atol=",
        "h = 6.06e-06 * max(|x|, 1)",
        "float32 rounding",
        "index",
        "analytic",
        "numeric",
        "|error|",
        "tolerance",
        "diagnosis: analytic = 2 x numeric",
    ):
        assert piece in text, piece
    # atol=None: rtol times the largest |numeric| entry of the argument (issue 8: no fixed 1e-3 hiding 1% errors)
    assert err.atol == pytest.approx(1e-4 * np.abs(err.expected).max())
    assert (err.check, err.arg_name, err.pattern, err.n_mismatch, err.size) == (
        "check_numeric_gradient",
        "x",
        "doubled",
        6,
        6,
    )
    assert err.seed is not None  # with_seed puts the seed on the error
    np.testing.assert_allclose(err.actual, 2 * err.expected, rtol=1e-5)
    again = pickle.loads(pickle.dumps(err))
    assert (again.pattern, again.factor, again.diagnosis) == (err.pattern, err.factor, err.diagnosis)


@tu.with_seed()
def test_kink_with_a_wrong_subgradient_is_an_error():
    # |x|' at 0 given as 2: outside the one-sided derivatives [-1, 1] (times the projection weight)
    x = np.random.standard_normal((3, 4))
    x[0, 1] = x[2, 3] = 0.0
    sym = S.Custom(S.Variable("x"), op_type="pb_abs", slope_at_zero="2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is re-drawn: there is no valid kink to excuse
        with pytest.raises(GradientCheckError) as info:
            tu.check_numeric_gradient(sym, [x])
    err = info.value
    assert err.pattern == "kink"
    assert "non-differentiable point at x[0, 1] = 0" in err.diagnosis
    assert "lies outside the one-sided derivatives" in err.diagnosis
    assert [k.index for k in err.kinks] == [(0, 1), (2, 3)] and not any(k.subgradient for k in err.kinks)


@tu.with_seed()
def test_wrong_gradient_away_from_kinks_still_fails():
    # a correct subgradient at the zeros, but doubled everywhere else
    x = np.random.standard_normal((3, 4))
    x[1, 1] = 0.0
    sym = S.Custom(S.Variable("x"), op_type="pb_abs", slope_at_zero="1", k="2")
    for mode in ("redraw", "exclude", "error"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(GradientCheckError) as info:
                tu.check_numeric_gradient(sym, [x], kinks=mode)
        assert info.value.pattern == "doubled", (mode, str(info.value))


@tu.with_seed()
def test_accumulated_gradient_of_reference_004_is_named():
    # reference 004: an input gradient read after several backward calls without zeroing it
    x = np.random.uniform(1.0, 2.0, (3, 4))
    og = np.random.standard_normal((3, 4))
    sym = S.Custom(S.Variable("x"), op_type="pb_square")
    for req, k in (("add", 1), ("write", 1)):
        tu.check_symbolic_backward(sym, [x], [og], [2 * x * og * k], grad_req=req)
    with pytest.raises(GradientCheckError) as info:
        tu.check_symbolic_backward(sym, [x], [og], [2 * x * og / 3])
    assert info.value.pattern == "accumulated" and info.value.factor == pytest.approx(3)
    assert "accumulated over 3 backward calls" in info.value.diagnosis


# == diagnosis rules on hand-made arrays ===========================================================================


def _rng(seed):
    return np.random.default_rng(seed)


@pytest.mark.parametrize(
    "k, pattern",
    [
        (2.0, "doubled"),
        (-1.0, "sign"),
        (0.0, "missing"),
        (3.0, "accumulated"),
        (1.5, "scaled"),
        (-2.0, "scaled"),
        (0.5, "scaled"),
        (1.01, "small"),
        (0.995, "small"),
    ],
    ids=str,
)
def test_constant_factor_patterns_carry_the_factor(k, pattern):
    e = _rng(1).standard_normal((4, 5))
    d = diagnose(k * e, e)
    assert isinstance(d, Diagnosis) and isinstance(d, str)
    assert d.pattern == pattern and d.factor == pytest.approx(k, abs=1e-12)


def test_small_error_texts():
    e = _rng(2).standard_normal(50)
    assert "off by ~1% everywhere" in diagnose(1.01 * e, e)
    # an approximation: 0.5% to 1.5% off, not a constant factor
    wobble = 1.0 + 0.01 * (1.0 + 0.5 * np.cos(np.arange(50.0)))
    d = diagnose(e * wobble, e)
    assert d.pattern == "small" and d.factor is None and "not by a constant factor" in d
    assert "off by ~1" in d
    assert diagnose(e * (1 + 1e-8), e) is None  # equal up to rounding


def test_transposed_variants():
    m = _rng(3).standard_normal((4, 4))
    assert diagnose(m.T, m).pattern == "transposed"
    r = _rng(4).standard_normal((3, 5))
    d = diagnose(r.T.reshape(3, 5), r)
    assert d.pattern == "transposed" and "reshaped" in d
    t = _rng(5).standard_normal((2, 3, 3))
    d = diagnose(np.swapaxes(t, 1, 2), t)
    assert d.pattern == "transposed" and d.facts["axes"] == (1, 2)
    sym = _rng(6).standard_normal((3, 3))
    assert diagnose((sym + sym.T).T, sym + sym.T) is None  # symmetric: transposing changes nothing


def test_confined_error_indices():
    e = _rng(7).standard_normal((10, 30))
    a = e.copy()
    a[3, 7] *= 1.25
    a[9, 0] -= 1.0
    d = diagnose(a, e)
    assert d.pattern == "confined" and d.facts["indices"] == [(3, 7), (9, 0)]
    assert "error confined to 2 of 300 elements: indices (3, 7), (9, 0)" in d
    # the checker's tolerance mask decides what is wrong when given
    mask = np.zeros(e.shape, bool)
    mask[3, 7] = True
    assert diagnose(a, e, context={"mismatch": mask}).facts["indices"] == [(3, 7)]
    # too many wrong elements, or too small an array: not "confined"
    b = e.copy()
    b[:, 0] += 1.0  # a whole column (10 of 300) is still a few elements
    assert diagnose(b, e).pattern == "confined"
    b[:, 1] += 1.0  # 20 of 300: more than 5%
    assert diagnose(b, e) is None
    assert diagnose(np.array([1.0, 2.0, 3.5]), np.array([1.0, 2.0, 3.0])) is None


def test_broadcast_rules_need_their_context():
    g = _rng(8).standard_normal((3, 4))
    expected, actual = g.sum(0), g[0]
    assert diagnose(actual, expected) is None or diagnose(actual, expected).pattern != "broadcast"
    terms = [("output 'y' slice [0, :]", g[0], 3), ("output 'y' slice [:, 0]", np.array([g[0, 0], 0, 0, 0]), 4)]
    d = diagnose(actual, expected, context={"slice_terms": terms})
    assert d.pattern == "broadcast" and d.facts["slice"] == "output 'y' slice [0, :]" and "1 of 3 terms" in d
    # averaged instead of summed: 1/k equals the size of a broadcast axis
    d = diagnose(expected / 3, expected, context={"broadcast_axes": [("axis 0 of output 'y'", 3)]})
    assert d.pattern == "broadcast" and d.factor == pytest.approx(1 / 3) and "averaged over axis 0" in d
    assert diagnose(expected / 3, expected).pattern == "scaled"


def test_analyze_describes_unstructured_errors_and_diagnose_does_not():
    e = _rng(9).standard_normal(40)
    a = e + _rng(10).standard_normal(40)
    assert diagnose(a, e) is None
    d = analyze(a, e, ("analytic", "numeric"))
    assert d.pattern == "spread" and "no simple pattern" in d and "analytic/numeric" in d
    assert analyze(e, e) is None
    few = e.copy()
    few[:4] += 1.0  # 10% wrong: neither confined nor spread
    assert analyze(few, e) is None


def test_kink_context():
    e = np.array([0.5, 0.0, -1.0, 2.0])
    a = np.array([0.5, 1.0, -1.0, 2.0])
    ok = Kink("x", (1,), 0.0, 0.0, 1.0, 1.0, True)
    d = diagnose(a, e, ("analytic", "numeric"), context={"kinks": [ok], "arg_name": "x"})
    assert d.pattern == "kink" and d.facts["subgradient"] is True
    assert d.startswith("non-differentiable point at x[1] = 0 (left derivative 0, right derivative 1, analytic 1)")
    bad = Kink("x", (1,), 0.0, -1.0, 1.0, 3.0, False)
    d = diagnose(np.array([0.5, 3.0, -1.0, 2.0]), e, context={"kinks": [bad], "arg_name": "x"})
    assert d.pattern == "kink" and "outside the one-sided derivatives [-1, 1]" in d
    # a kink plus a doubled gradient elsewhere: the bug is named, the kink mentioned
    e2 = _rng(11).standard_normal(30)
    a2 = 2 * e2
    a2[4] = e2[4] + 1.0
    d = diagnose(a2, e2, context={"kinks": [Kink("w", (4,), 0.0, 0.0, 1.0, a2[4], True)], "arg_name": "w"})
    assert d.pattern == "doubled" and "non-differentiable points (non-differentiable point at w[4]" in d


def test_custom_rules_and_names():
    def planted(a, e, context):
        return "see context" if context.get("flag") else None

    planted.uses_context = True
    tu.register_rule(planted, first=True)
    try:
        d = diagnose(np.ones(3), np.zeros(3), context={"flag": True})
        assert d == "see context" and d.pattern == "custom"
    finally:
        RULES.remove(planted)
    d = diagnose(-np.ones(3), np.ones(3), ("backprop", "finite differences"))
    assert d == "backprop = -finite differences: sign flipped" and d.pattern == "sign"
    assert pickle.loads(pickle.dumps(d)).pattern == "sign"


# == every checker: the report's last line (seed + one-line reproduction), and the caller's arrays ==================


def _node_command():
    nodeid = os.environ["PYTEST_CURRENT_TEST"].rsplit(" (", 1)[0]
    return f"python -m pytest {shlex.quote(nodeid)}"


def _sq(k, name="sq"):
    return S.Custom(S.Variable("x"), op_type="pb_square", k=str(k), name=name)


def _failing_calls():
    """``checker -> (call, random)``: a call that fails (a doubled gradient or a wrong value) on fixed inputs;
    ``random`` says whether the checker draws random numbers (the others need no seed)."""
    from test_chainer_checks import planted_cube

    x = np.random.default_rng(0).uniform(1.0, 2.0, (3, 4))
    og = np.random.default_rng(1).uniform(0.5, 1.5, (3, 4))
    entries = [{"ctx": sg.cpu(0), "x": (3, 4), "type_dict": {"x": dt}} for dt in (np.float64, np.float32)]
    return {
        "assert_almost_equal": (lambda: tu.assert_almost_equal(2 * x, x), False),
        "check_symbolic_forward": (lambda: tu.check_symbolic_forward(S.square(S.Variable("x")), [x], [x]), False),
        "check_symbolic_backward": (lambda: tu.check_symbolic_backward(_sq(2), [x], [og], [2 * x * og]), True),
        "check_numeric_gradient": (lambda: tu.check_numeric_gradient(_sq(2), [x]), True),
        "check_consistency": (lambda: tu.check_consistency([_sq(1), _sq(2)], entries, arg_params={"x": x}), True),
        "check_backward": (lambda: tu.check_backward(lambda v: S.Custom(v, op_type="pb_square", k="2"), x, og), True),
        "check_double_backward": (lambda: tu.check_double_backward(planted_cube(2.0), x, og, og), True),
        "gradcheck": (lambda: tu.gradcheck(lambda v: S.Custom(v, op_type="pb_square", k="2"), (x,)), True),
        "gradgradcheck": (lambda: tu.gradgradcheck(planted_cube(2.0), (x,)), True),
    }


@pytest.mark.parametrize("checker", list(_failing_calls()))
def test_every_report_ends_with_the_seed_and_a_one_line_reproduction(checker, monkeypatch, outside_a_seeded_test):
    monkeypatch.delenv("SYMGRAD_TEST_SEED", raising=False)
    call, random_draws = _failing_calls()[checker]
    np.random.seed(11)
    with pytest.raises(GradientCheckError) as info:
        call()
    err = info.value
    last = str(err).split("\n")[-1]
    assert str(err).count("-- reproduce: ") == 1
    if not random_draws:  # outside a seeded test a deterministic check needs no seed
        assert err.seed is None and last == f"  no random seed involved -- reproduce: {_node_command()}"
    else:  # the checker seeded its own draws: the printed seed alone reproduces the failure
        assert isinstance(err.seed, int)
        assert last == f"  seed {err.seed} -- reproduce: SYMGRAD_TEST_SEED={err.seed} {_node_command()}"
        assert err.reproduce == f"SYMGRAD_TEST_SEED={err.seed} {_node_command()}"
        monkeypatch.setenv("SYMGRAD_TEST_SEED", str(err.seed))
        np.random.seed(12)  # another global RNG state: the seed from the environment wins
        with pytest.raises(GradientCheckError) as again:
            call()
        assert again.value.seed == err.seed and again.value.worst == err.worst  # the very same numbers
        assert again.value.diagnosis == err.diagnosis and str(again.value).split("\n")[-1] == last
        np.testing.assert_array_equal(again.value.actual, err.actual)
    # inside a seeded test the test's seed is the one printed
    monkeypatch.delenv("SYMGRAD_TEST_SEED", raising=False)
    with pytest.raises(GradientCheckError) as info:
        tu.with_seed(1234)(call)()
    assert info.value.seed == 1234
    assert str(info.value).split("\n")[-1] == (f"  seed 1234 -- reproduce: SYMGRAD_TEST_SEED=1234 {_node_command()}")


def _snapshot(obj):
    if isinstance(obj, np.ndarray):
        return obj.copy()
    if isinstance(obj, dict):
        return {k: _snapshot(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_snapshot(v) for v in obj)
    return obj


def _assert_same(before, after, where):
    if isinstance(before, np.ndarray):
        assert after.dtype == before.dtype and np.array_equal(after, before, equal_nan=True), where
    elif isinstance(before, dict):
        for k in before:
            _assert_same(before[k], after[k], f"{where}[{k!r}]")
    elif isinstance(before, (list, tuple)):
        for i, (b, a) in enumerate(zip(before, after)):
            _assert_same(b, a, f"{where}[{i}]")


@pytest.mark.parametrize("bug", [1, 2], ids=["passing", "failing"])
@tu.with_seed()
def test_no_checker_changes_the_callers_arrays(bug):
    f32 = np.float32
    x = np.random.uniform(1.0, 2.0, (3, 4)).astype(f32)
    og = np.random.uniform(0.5, 1.5, (3, 4)).astype(f32)
    d = np.random.standard_normal((4, 3))
    bn = {"data": d, "bn_gamma": np.random.uniform(0.5, 1.5, 3), "bn_beta": np.random.standard_normal(3)}
    aux = {"bn_moving_mean": 0.1 * np.random.standard_normal(3), "bn_moving_var": np.random.uniform(0.5, 1.5, 3)}
    bn_sym = S.BatchNorm(S.Custom(S.Variable("data"), op_type="pb_square", k=str(bug)), fix_gamma=False, name="bn")
    exe = _sq(1).simple_bind(sg.cpu(), x=(3, 4))
    entries = [{"ctx": sg.cpu(0), "x": (3, 4), "type_dict": {"x": dt}} for dt in (np.float64, np.float32)]
    calls = {
        "check_symbolic_forward": ([x], [x * x]),
        "check_symbolic_backward": ([x], [og], [2 * x * og]),
        "check_numeric_gradient": (bn, aux),
        "numeric_grad": ({"x": x},),
        "check_consistency": ({"x": x.astype(np.float64)},),
        "check_backward": ((x,), og, {"g": np.random.uniform(0.5, 1.5, (3, 4)).astype(f32)}),
        "gradcheck": ((x, og),),
    }
    arrays = {name: _snapshot(args) for name, args in calls.items()}
    runs = {
        "check_symbolic_forward": lambda a: tu.check_symbolic_forward(_sq(bug), a[0], a[1]),
        "check_symbolic_backward": lambda a: tu.check_symbolic_backward(_sq(bug), a[0], a[1], a[2], grad_req="add"),
        "check_numeric_gradient": lambda a: tu.check_numeric_gradient(bn_sym, a[0], aux_states=a[1]),
        "numeric_grad": lambda a: tu.numeric_grad(exe, a[0], eps=1e-2),
        "check_consistency": lambda a: tu.check_consistency([_sq(1), _sq(bug)], entries, arg_params=a[0]),
        "check_backward": lambda a: tu.check_backward(
            lambda v: S.Custom(v, op_type="pb_square", k=str(bug)) * S.Variable("g"), a[0], a[1], params=a[2]
        ),
        "gradcheck": lambda a: tu.gradcheck(lambda v, w: S.Custom(v, op_type="pb_square", k=str(bug)) * w, a[0]),
    }
    for name, run in runs.items():
        try:
            run(calls[name])
            failed = False
        except GradientCheckError:
            failed = True
        # the planted bug (a doubled gradient) fails every gradient check; the forward is right either way
        assert failed == (bug == 2 and name not in ("check_symbolic_forward", "numeric_grad")), name
        _assert_same(arrays[name], calls[name], name)
