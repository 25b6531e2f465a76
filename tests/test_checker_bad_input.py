"""Every checker refuses a bad option or a bad input with a named built-in error, and changes nothing (issue 9).

A bad option (``rtol=-1``, ``atol=nan``, ``dtype="float33"``, ``ctx="cpu"``, ``sym=None``, ``eps=0``,
``grad_req="wrte"``, ``method="forward"``, ``kinks="skip"``, a ``func`` that is not callable, ...) or a bad input
(wrong type, shape or dtype, strings, objects, complex, NaN where finite differences need finite values) must raise
a ``ValueError`` / ``TypeError`` (never a ``GradientCheckError``: a bad input is not a failed gradient) whose message
names the option or argument at fault, before anything is computed, and leave every array the caller handed in
byte-identical. The first part pins one case per (checker, option) as a plain regression test; the second feeds
random bad options and inputs to every checker with hypothesis (derandomized, so CI is reproducible).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.test_utils import (
    GradientCheckError,
    almost_equal,
    assert_almost_equal,
    check_backward,
    check_consistency,
    check_double_backward,
    check_numeric_gradient,
    check_speed,
    check_symbolic_backward,
    check_symbolic_forward,
    gradcheck,
    gradgradcheck,
    numeric_grad,
    numerical_grad,
    simple_forward,
)

S = sg.sym
SHAPE = (2, 2)


# == the baseline calls: a tiny symbol, tanh(x) * y, and valid arguments for every checker ======================


def _sym():
    return S.tanh(S.Variable("x")) * S.Variable("y")


def _func(a, b):
    return S.tanh(a) * b


def _xy():
    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1, SHAPE), rng.uniform(0.5, 1.5, SHAPE)


def _grads(x, y):
    return [(1 - np.tanh(x) ** 2) * y, np.tanh(x)]


def _exe():
    return _sym().simple_bind(sg.cpu(), x=SHAPE, y=SHAPE, type_dict={"x": np.float64, "y": np.float64})


def _ctx_list():
    return [
        {"ctx": sg.cpu(), "x": SHAPE, "y": SHAPE, "type_dict": {"x": np.float64, "y": np.float64}},
        {"ctx": sg.cpu(), "x": SHAPE, "y": SHAPE, "type_dict": {"x": np.float32, "y": np.float32}},
    ]


def _numerical_grad_kwargs():
    x, y = _xy()
    return dict(f=lambda: (np.tanh(x) * y,), inputs=(x, y), grad_outputs=(np.ones(SHAPE),))


#: checker -> (the function, a factory of valid keyword arguments: fresh arrays every call)
BASELINES = {
    "check_symbolic_forward": (
        check_symbolic_forward,
        lambda x, y: dict(sym=_sym(), location=[x, y], expected=[np.tanh(x) * y], dtype=np.float64),
    ),
    "check_symbolic_backward": (
        check_symbolic_backward,
        lambda x, y: dict(
            sym=_sym(), location=[x, y], out_grads=[np.ones(SHAPE)], expected=_grads(x, y), dtype=np.float64
        ),
    ),
    "check_numeric_gradient": (
        check_numeric_gradient,
        lambda x, y: dict(sym=_sym(), location=[x, y], dtype=np.float64),
    ),
    "numeric_grad": (
        numeric_grad,
        lambda x, y: dict(executor=_exe(), location={"x": x, "y": y}, eps=None, dtype=np.float64),
    ),
    "check_consistency": (
        check_consistency,
        lambda x, y: dict(sym=_sym(), ctx_list=_ctx_list(), arg_params={"x": x, "y": y}),
    ),
    "check_speed": (check_speed, lambda x, y: dict(sym=_sym(), location={"x": x, "y": y}, N=1)),
    "simple_forward": (simple_forward, lambda x, y: dict(sym=_sym(), x=x, y=y)),
    "assert_almost_equal": (assert_almost_equal, lambda x, y: dict(a=x, b=x.copy())),
    "almost_equal": (almost_equal, lambda x, y: dict(a=x, b=x.copy())),
    "check_backward": (check_backward, lambda x, y: dict(func=_func, x_data=(x, y), y_grad=np.ones(SHAPE))),
    "check_double_backward": (
        check_double_backward,
        lambda x, y: dict(
            func=_func, x_data=(x, y), y_grad=np.ones(SHAPE), x_grad_grad=(np.ones(SHAPE), np.ones(SHAPE))
        ),
    ),
    "numerical_grad": (numerical_grad, lambda x, y: _numerical_grad_kwargs()),
    "gradcheck": (gradcheck, lambda x, y: dict(func=_func, inputs=(x, y))),
    "gradgradcheck": (gradgradcheck, lambda x, y: dict(func=_func, inputs=(x, y))),
}


def _baseline(checker):
    fn, make = BASELINES[checker]
    return fn, make(*_xy())


# == what "nothing changed" means: every array reachable from the arguments, byte for byte ========================


def _arrays(value, seen=None):
    """Every numpy array reachable from ``value`` (containers, executors' bound arrays, ctx_list entries)."""
    seen = {} if seen is None else seen
    if isinstance(value, np.ndarray):
        seen.setdefault(id(value), value)
    elif isinstance(value, dict):
        for v in value.values():
            _arrays(v, seen)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _arrays(v, seen)
    elif isinstance(value, sg.Executor):
        for d in (value.arg_dict, value.grad_dict, value.aux_dict):
            _arrays(dict(d), seen)
    return seen


def _snapshot(kwargs):
    return {k: (a, a.dtype, a.shape, a.flags.writeable, a.tobytes()) for k, a in _arrays(kwargs).items()}


def _assert_unchanged(snap):
    for a, dtype, shape, writeable, data in snap.values():
        assert a.dtype == dtype and a.shape == shape and a.flags.writeable == writeable
        assert a.tobytes() == data, "a caller's array was changed by a call that raised"


def _assert_named_error(fn, kwargs, tokens):
    """``fn(**kwargs)`` raises a ValueError / TypeError (not a GradientCheckError) whose message contains one of
    ``tokens``; every array in ``kwargs`` is unchanged. Returns the exception."""
    snap = _snapshot(kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn(**kwargs)
        except GradientCheckError as err:  # an AssertionError: a bad input reported as a failed gradient
            pytest.fail(f"a bad input was reported as a gradient failure: {str(err).splitlines()[0]}")
        except (ValueError, TypeError) as err:
            msg = str(err)
            assert any(t in msg for t in tokens), f"the message does not name any of {tokens}: {msg}"
            _assert_unchanged(snap)
            return err
    pytest.fail(f"no error for a bad input (culprit {tokens})")


# == part 1: plain tests, one per (checker, option) ================================================================
#
# ``_cases`` covers every (checker, option) pair of the issue (about half already raised a named error before this
# change and are kept as guards); ``REGRESSIONS`` below are the ones that did not.

NAN, INF = float("nan"), float("inf")
_NOT_SYMBOLS = [None, "x", np.ones(2), lambda v: v]
_SYM_CHECKERS = [
    "check_symbolic_forward",
    "check_symbolic_backward",
    "check_numeric_gradient",
    "check_consistency",
    "check_speed",
    "simple_forward",
]
_TOL_CHECKERS = [
    "check_symbolic_forward",
    "check_symbolic_backward",
    "check_numeric_gradient",
    "check_consistency",
    "assert_almost_equal",
    "almost_equal",
    "check_backward",
    "check_double_backward",
    "gradcheck",
    "gradgradcheck",
]
_DTYPE_CHECKERS = [
    "check_symbolic_forward",
    "check_symbolic_backward",
    "check_numeric_gradient",
    "numeric_grad",
    "check_backward",
    "check_double_backward",
]
_EPS_CHECKERS = [
    "numeric_grad",
    "check_backward",
    "check_double_backward",
    "numerical_grad",
    "gradcheck",
    "gradgradcheck",
]
_FUNC_CHECKERS = ["check_backward", "check_double_backward", "gradcheck", "gradgradcheck"]


def _cases():
    cases = []
    for c in _TOL_CHECKERS:
        for opt, value in (("rtol", -1), ("atol", NAN), ("rtol", "a"), ("atol", [1e-3]), ("rtol", True), ("atol", INF)):
            cases.append((c, opt, value))
    for c in _DTYPE_CHECKERS:
        for value in ("float33", np.int32, [1]):
            cases.append((c, "dtype", value))
    for c in (
        "check_symbolic_forward",
        "check_symbolic_backward",
        "check_numeric_gradient",
        "check_speed",
        "simple_forward",
        "check_consistency",
    ):
        cases.append((c, "ctx", "cpu"))
    for c in _SYM_CHECKERS:
        for value in _NOT_SYMBOLS:
            cases.append((c, "sym", value))
    for c in _EPS_CHECKERS:
        for value in (0, -1, NAN, "a", INF):
            cases.append((c, "eps", value))
    for c in ("check_symbolic_backward", "check_consistency", "check_speed"):
        cases.append((c, "grad_req", "wrte"))
    cases += [("check_numeric_gradient", "numeric_eps", v) for v in (-1, NAN, "a", True)]
    cases += [(c, "method", "forward") for c in ("check_numeric_gradient", "numeric_grad")]
    cases += [("check_numeric_gradient", "kinks", "skip")]
    for c, opt in (
        ("check_symbolic_forward", "location"),
        ("check_symbolic_backward", "location"),
        ("check_numeric_gradient", "location"),
        ("numeric_grad", "location"),
        ("check_speed", "location"),
    ):
        for value in (5, "x", {1, 2}):
            cases.append((c, opt, value))
    for c in _FUNC_CHECKERS:
        for value in (None, "tanh", np.ones(2)):
            cases.append((c, "func", value))
    cases += [("numerical_grad", "f", v) for v in (None, "f")]
    # options next to the listed ones that were also unchecked
    cases += [("numeric_grad", "executor", v) for v in (None, "exe")]
    cases += [
        ("check_numeric_gradient", "numeric_dtype", "float33"),
        ("check_consistency", "rand_type", "float33"),
        ("check_consistency", "scale", -1),
        ("check_consistency", "scale", NAN),
        ("check_speed", "N", -1),
        ("check_speed", "N", "a"),
        ("numerical_grad", "diff_atol", -1),
        ("numerical_grad", "diff_rtol", NAN),
        ("assert_almost_equal", "names", 5),
        ("assert_almost_equal", "mismatches", 5),
        ("gradcheck", "nondet_tol", -1),
    ]
    for c, opt in (
        ("check_symbolic_forward", "equal_nan"),
        ("check_numeric_gradient", "use_forward_train"),
        ("numeric_grad", "use_forward_train"),
        ("simple_forward", "is_train"),
        ("check_consistency", "raise_on_err"),
        ("almost_equal", "use_broadcast"),
        ("check_backward", "detect_nondifferentiable"),
        ("gradcheck", "fast_mode"),
    ):
        cases.append((c, opt, "no"))
    return cases


def _apply(checker, kwargs, opt, value):
    if checker == "check_consistency" and opt == "ctx":
        kwargs["ctx_list"][0]["ctx"] = value
    else:
        kwargs[opt] = value
    return kwargs


@pytest.mark.parametrize(("checker", "opt", "value"), _cases(), ids=lambda v: v if isinstance(v, str) else repr(v)[:20])
def test_a_bad_option_is_a_named_error_before_anything_runs(checker, opt, value):
    fn, kwargs = _baseline(checker)
    err = _assert_named_error(fn, _apply(checker, kwargs, opt, value), [opt])
    assert checker in str(err), f"the message does not name the checker: {err}"


#: one case per option of the issue, each failing before this change (what happened then on the right)
REGRESSIONS = [
    ("check_symbolic_forward", "rtol", -1),  # a false "output does not match expected"
    ("check_symbolic_backward", "rtol", -1),  # a false "gradient of 'x' does not match expected"
    ("assert_almost_equal", "rtol", -1),  # a false "a and b are not almost equal"
    ("almost_equal", "rtol", -1),  # False for equal arrays
    ("check_symbolic_forward", "atol", NAN),  # accepted: a NaN tolerance allows nothing, or anything
    ("almost_equal", "atol", NAN),  # accepted
    ("assert_almost_equal", "rtol", "a"),  # TypeError "a tolerance must be ..." naming neither rtol nor the checker
    ("check_symbolic_backward", "atol", [1e-3]),  # the same, for atol
    ("gradcheck", "rtol", True),  # accepted as 1.0
    ("check_backward", "rtol", True),  # accepted as 1.0
    ("check_symbolic_forward", "dtype", "float33"),  # ran in float64 (np.dtype(None) == float64 is True)
    ("check_numeric_gradient", "dtype", "float33"),  # AttributeError: 'NoneType' object has no attribute 'name'
    ("check_backward", "dtype", "float33"),  # accepted (float64 reference)
    ("numeric_grad", "dtype", [1]),  # accepted
    ("check_symbolic_forward", "ctx", "cpu"),  # AttributeError: 'str' object has no attribute 'device_type'
    ("simple_forward", "ctx", "cpu"),  # the same
    ("check_symbolic_forward", "sym", None),  # AttributeError: 'NoneType' object has no attribute 'list_arguments'
    ("check_symbolic_backward", "sym", "x"),  # AttributeError on str
    ("check_speed", "sym", np.ones(2)),  # AttributeError: 'numpy.ndarray' object has no attribute 'simple_bind'
    ("simple_forward", "sym", lambda v: v),  # AttributeError: 'function' object has no attribute 'bind'
    ("numeric_grad", "eps", 0),  # refused only after the location was written into the executor's arrays
    ("numeric_grad", "eps", -1),  # the same
    ("numeric_grad", "eps", NAN),  # the same
    ("numerical_grad", "eps", "a"),  # ValueError "could not convert string to float" naming no option
    ("numerical_grad", "eps", INF),  # accepted
    ("check_speed", "grad_req", "wrte"),  # an error from simple_bind, not naming check_speed
    ("check_numeric_gradient", "numeric_eps", True),  # accepted as 1.0
    ("numeric_grad", "method", np.array(["central", "x"])),  # "truth value of an array is ambiguous"
    ("check_numeric_gradient", "kinks", np.array(["redraw", "x"])),  # the same
    ("check_speed", "location", {"x": np.ones(SHAPE), "y": "abc"}),  # ShapeError of elemwise_mul, not naming 'y'
    ("check_double_backward", "func", None),  # TypeError "'NoneType' object is not callable"
    ("numerical_grad", "f", None),  # the same
]

_REGRESSION_TOKENS = {("check_speed", "location"): ["'y'"]}


@pytest.mark.parametrize(
    ("checker", "opt", "value"), REGRESSIONS, ids=lambda v: v if isinstance(v, str) else repr(v)[:20]
)
def test_regression_bad_option_named(checker, opt, value):
    fn, kwargs = _baseline(checker)
    err = _assert_named_error(fn, _apply(checker, kwargs, opt, value), _REGRESSION_TOKENS.get((checker, opt), [opt]))
    assert checker in str(err), f"the message does not name the checker: {err}"


@pytest.mark.parametrize("checker", sorted(BASELINES))
def test_the_baselines_pass(checker):
    """The valid calls the bad cases start from pass, so every error above is about the one bad option."""
    fn, kwargs = _baseline(checker)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn(**kwargs)
    if checker == "almost_equal":
        assert out is True


def test_dtype_none_is_not_float64_for_the_mxnet_checkers():
    # np.dtype(None) is float64 and a float64 dtype compares equal to None: dtype=None slipped through as float64
    fn, kwargs = _baseline("check_symbolic_forward")
    _assert_named_error(fn, {**kwargs, "dtype": None}, ["dtype"])
    fn, kwargs = _baseline("check_backward")  # Chainer's dtype=None means "keep the inputs' dtypes": valid
    fn(**{**kwargs, "dtype": None})


def test_numeric_grad_writes_no_executor_array_before_every_check_passed():
    exe = _exe()
    x, y = _xy()
    before = {k: a.copy() for k, a in exe.arg_dict.items()}
    for eps in (-1, 1e-12):  # the sign, then the floor for the executor's dtype
        with pytest.raises(ValueError, match="eps"):
            numeric_grad(exe, {"x": x, "y": y}, eps=eps, dtype=np.float64)
        for k, a in exe.arg_dict.items():
            np.testing.assert_array_equal(a, before[k])


def test_numerical_grad_refuses_a_read_only_input_it_would_perturb_in_place():
    kwargs = _numerical_grad_kwargs()
    x, y = kwargs["inputs"]
    y.flags.writeable = False
    _assert_named_error(numerical_grad, kwargs, ["inputs[1]"])


def test_tolerance_dicts_are_checked_key_by_key():
    fn, kwargs = _baseline("check_symbolic_forward")
    _assert_named_error(fn, {**kwargs, "rtol": {np.float64: -1.0}}, ["rtol"])
    _assert_named_error(fn, {**kwargs, "atol": {"float33": 1e-3}}, ["atol"])
    fn(**{**kwargs, "rtol": {np.float64: 1e-5}, "atol": {np.float64: 1e-8}})


# == part 2: hypothesis, random bad options and inputs to every checker ==========================================


@dataclass
class Mut:
    """One way to break a valid call: ``apply(kwargs, draw)`` changes ``kwargs`` in place; ``tokens``: one of them
    must be in the message; ``must_raise``: False where the changed call is still valid (read-only arrays)."""

    label: str
    apply: object
    tokens: list
    must_raise: bool = True


def _set(opt, strategy, tokens=None):
    def apply(kwargs, draw, checker):
        _apply(checker, kwargs, opt, draw(strategy))

    return Mut(opt, apply, tokens or [opt])


def _text_not(choices):
    return st.text(max_size=6).filter(lambda s: s not in choices)


_objects = st.sampled_from([object(), type, print, Ellipsis, 1j])
_bad_tol = st.one_of(
    st.floats(max_value=-1e-300, allow_nan=False),
    st.sampled_from([NAN, INF, -INF]),
    st.text(max_size=4),
    st.booleans(),
    st.lists(st.floats(0, 1), min_size=1, max_size=2),
    st.complex_numbers(min_magnitude=1e-3),
    _objects,
    st.sampled_from([{"float33": 1e-3}, {np.float64: -1.0}, {np.float64: NAN}, {np.float64: "a"}]),
)
_bad_num_tol = st.one_of(
    st.floats(max_value=-1e-300, allow_nan=False),
    st.sampled_from([NAN, INF]),
    st.text(max_size=4),
    st.booleans(),
    st.lists(st.floats(0, 1), max_size=2),
    _objects,
)
_bad_eps = st.one_of(
    st.floats(max_value=0.0, allow_nan=False),
    st.sampled_from([NAN, INF, -INF]),
    st.text(max_size=4),
    st.booleans(),
    st.lists(st.floats(1e-3, 1), min_size=1, max_size=2),
    _objects,
)


def _is_float_dtype(value) -> bool:
    try:
        return np.dtype(value) in (np.float16, np.float32, np.float64) and value is not None
    except (TypeError, ValueError, SyntaxError):
        return False


_bad_dtype = st.one_of(
    st.sampled_from(
        [
            "float33",
            "int32",
            np.int32,
            np.int64,
            np.uint8,
            bool,
            np.bool_,
            np.complex64,
            "complex128",
            object,
            str,
            "S3",
            "longdouble",
            3,
            [1],
            (np.float32, 2),
        ]
    ),
    st.text(min_size=1, max_size=5).filter(lambda s: s != "asnumpy" and not _is_float_dtype(s)),
)
_bad_ctx = st.sampled_from(["cpu", "gpu(0)", 0, 1.5, object(), [sg.cpu()], sg.cpu, {"ctx": sg.cpu()}])
_bad_sym = st.sampled_from([None, "x", "tanh(x)", np.ones(2), lambda v: v, 3, [None], {"x": 1}, S.tanh])
_bad_flag = st.one_of(st.text(max_size=4), st.sampled_from([None, 2, -1, 0.5, [True], NAN]))
_bad_func = st.sampled_from([None, "tanh", np.ones(2), 3, [S.tanh], {"f": S.tanh}])
_bad_method = st.one_of(_text_not(("central", "richardson", "complex_step")), st.sampled_from([None, 1, ["central"]]))
_bad_kinks = st.one_of(_text_not(("redraw", "exclude", "error")), st.sampled_from([None, 1, ["redraw"]]))
_bad_grad_req = st.one_of(
    _text_not(("write", "add", "null", "inplace")),  # check_speed: None means "write"
    st.sampled_from([1, ["write"], ["write", "wrte"], {"z": "write"}, {"x": "wrte"}]),
)


def _bad_array(good, kind):
    """A bad replacement for the array ``good``."""
    return {
        "str": "abc",
        "none": None,
        "object": object(),
        "obj_array": np.array([object(), object()], dtype=object),
        "str_array": np.array([["a", "b"], ["c", "d"]]),
        "complex": good.astype(np.complex128) + 1j,
        "shape": np.ones((3,) + good.shape[1:]),
        "nan": np.where(np.arange(good.size).reshape(good.shape) == 1, np.nan, good),
        "inf": np.where(np.arange(good.size).reshape(good.shape) == 0, -np.inf, good),
    }[kind]


_ARRAY_KINDS = ("str", "none", "object", "obj_array", "str_array", "complex", "shape")
_NONFINITE = ("nan", "inf")


def _element(container, index, kinds, tokens):
    """Replace ``kwargs[container][index]`` with a bad array of one of ``kinds``."""

    def apply(kwargs, draw, checker):
        kind = draw(st.sampled_from(kinds))
        holder = kwargs[container]
        if isinstance(holder, tuple):
            holder = list(holder)
            holder[index] = _bad_array(holder[index], kind)
            kwargs[container] = tuple(holder)
        elif isinstance(holder, (list, dict)):
            holder[index] = _bad_array(holder[index], kind)
        else:
            kwargs[container] = _bad_array(holder, kind)

    return Mut(f"{container}[{index!r}]", apply, tokens)


def _read_only(container, index, must_raise=False, tokens=()):
    """Make ``kwargs[container][index]`` read-only: valid (the checkers copy; no token, so any error fails), except
    where the array is perturbed in place (``must_raise``)."""

    def apply(kwargs, draw, checker):
        holder = kwargs[container]
        arr = holder[index] if isinstance(holder, (list, tuple, dict)) else holder
        arr.flags.writeable = False

    return Mut(f"read-only {container}[{index!r}]", apply, list(tokens), must_raise)


def _whole(container, strategy, tokens=None):
    return _set(container, strategy, tokens or [container])


_not_a_container = st.one_of(st.integers(), st.text(max_size=3), st.sampled_from([{1, 2}, object(), 1.5]))


def _location_muts(container, names=("x", "y"), refuse_nonfinite=False, as_dict=False):
    kinds = _ARRAY_KINDS + (_NONFINITE if refuse_nonfinite else ())
    idx = names[1] if as_dict else 1
    muts = [
        _element(container, idx, kinds, [f"'{names[1]}'", container]),
        _whole(container, _not_a_container, [container]),
        _read_only(container, idx),
    ]
    if not as_dict:
        muts.append(_set(container, st.sampled_from([[np.ones(SHAPE)], [np.ones(SHAPE)] * 3]), [container]))
    muts.append(
        _set(
            container,
            st.sampled_from([{"x": np.ones(SHAPE), "z": np.ones(SHAPE)}, {"q": np.ones(SHAPE)}]),
            [container, "'z'", "'q'"],
        )
    )
    return muts


_TOL = [_set("rtol", _bad_tol), _set("atol", _bad_tol)]
_NUM_TOL = [_set("rtol", _bad_num_tol), _set("atol", _bad_num_tol)]
#: the bad elements _element plants in a list of arrays
_BAD_ELEMENTS = ("str", "object", "obj_array", "str_array", "complex", "shape")


def _symbolic_muts():
    """What check_symbolic_forward and check_symbolic_backward share: tolerances, location, dtype, ctx, sym,
    equal_nan."""
    return (
        _TOL
        + _location_muts("location")
        + [_set("dtype", _bad_dtype), _set("ctx", _bad_ctx), _set("sym", _bad_sym), _set("equal_nan", _bad_flag)]
    )


def _chainer_muts():
    """What Chainer's check_backward and check_double_backward share: tolerances, eps, dtype, func,
    detect_nondifferentiable, progress."""
    return _NUM_TOL + [
        _set("eps", _bad_eps),
        _set("dtype", _bad_dtype),
        _set("func", _bad_func),
        _set("detect_nondifferentiable", _bad_flag),
        _set("progress", _bad_flag),
    ]


MUTATIONS = {
    "check_symbolic_forward": _symbolic_muts()
    + [
        _element("expected", 0, _BAD_ELEMENTS, ["expected", "output"]),
        _set(
            "expected", st.sampled_from([[np.ones(SHAPE)] * 2, {"nope": np.ones(SHAPE)}, "abc", object()]), ["expected"]
        ),
        _set("aux_states", st.sampled_from([[np.ones(SHAPE)], {"m": np.ones(SHAPE)}, 5]), ["aux_states"]),
    ],
    "check_symbolic_backward": _symbolic_muts()
    + [
        _set("grad_req", _bad_grad_req),
        _element("expected", 1, _BAD_ELEMENTS, ["expected", "gradient", "'y'"]),
        _element("out_grads", 0, _BAD_ELEMENTS, ["out_grads"]),
        # too few arrays (more than the outputs are ignored with a warning, as MXNet: test_mxnet_leniency.py)
        _set("out_grads", st.sampled_from([[], {"nope": np.ones(SHAPE)}]), ["out_grads"]),
        _set("grad_stypes", st.sampled_from([5, "row_sparse", {"x": "row_sparse"}]), ["grad_stypes", "sparse"]),
    ],
    "check_numeric_gradient": _TOL
    + _location_muts("location", refuse_nonfinite=True)
    + [
        _set("dtype", _bad_dtype),
        _set("numeric_dtype", _bad_dtype),
        _set("ctx", _bad_ctx),
        _set("sym", _bad_sym),
        _set("numeric_eps", st.one_of(_bad_eps, st.just(1e-12), st.just({np.float64: -1.0}))),
        _set("method", _bad_method),
        _set("kinks", _bad_kinks),
        _set("use_forward_train", _bad_flag),
        _set("progress", _bad_flag),
        _set("grad_nodes", st.sampled_from([["z"], {"x": "wrte"}, 5, {"q": "write"}]), ["grad_nodes", "grad_req"]),
    ],
    "numeric_grad": _location_muts("location", refuse_nonfinite=True, as_dict=True)
    + [
        _set("dtype", _bad_dtype),
        _set("eps", st.one_of(_bad_eps, st.just(1e-12))),
        _set("method", _bad_method),
        _set("use_forward_train", _bad_flag),
        _set("progress", _bad_flag),
        _set("executor", st.sampled_from([None, "exe", _sym(), {"x": np.ones(2)}])),
        _set("aux_states", st.sampled_from([[np.ones(SHAPE)], {"m": np.ones(SHAPE)}, 5]), ["aux_states"]),
    ],
    "check_consistency": _TOL
    + [
        _set("sym", _bad_sym),
        _set("ctx", _bad_ctx, ["ctx"]),
        _set("grad_req", _bad_grad_req),
        _set("equal_nan", _bad_flag),
        _set("raise_on_err", _bad_flag),
        _set("use_uniform", _bad_flag),
        _set("scale", st.one_of(st.floats(max_value=-1e-300, allow_nan=False), st.sampled_from([NAN, INF, "a"]))),
        _set("rand_type", _bad_dtype),
        _element("arg_params", "y", _BAD_ELEMENTS, ["arg_params"]),
        _set("arg_params", st.sampled_from([5, "x", {"z": np.ones(SHAPE)}]), ["arg_params"]),
        _set("ground_truth", st.sampled_from([5, {"x": np.ones(SHAPE)}]), ["ground_truth"]),
        _set(
            "ctx_list",
            st.sampled_from(
                [
                    5,
                    "cpu",
                    [],
                    [5, 6],
                    [{"x": SHAPE}, {"x": SHAPE}],
                    [{"ctx": sg.cpu(), "x": "23"}, {"ctx": sg.cpu(), "x": SHAPE}],
                ]
            ),
            ["ctx_list"],
        ),
        _read_only("arg_params", "x"),
    ],
    "check_speed": [
        _set("sym", _bad_sym),
        _set("ctx", _bad_ctx),
        _set("grad_req", _bad_grad_req),
        _set("N", st.one_of(st.integers(max_value=0), st.sampled_from([1.5, "a", True, None]))),
        _set("typ", _text_not(("whole", "forward"))),
        _element("location", "y", ("str", "object", "obj_array", "str_array", "complex", "none"), ["'y'", "location"]),
        _set("location", st.one_of(_not_a_container, st.just({"z": np.ones(SHAPE)})), ["location"]),
        _read_only("location", "y"),
    ],
    "simple_forward": [
        _set("sym", _bad_sym),
        _set("ctx", _bad_ctx),
        _set("is_train", _bad_flag),
        _set("y", st.sampled_from(["abc", None, object(), np.array(["a", "b"]), np.ones(3)]), ["'y'"]),
        _set("z", st.just(np.ones(SHAPE)), ["'z'"]),
        _read_only("y", None),
    ],
    "assert_almost_equal": _TOL
    + [
        _set("equal_nan", _bad_flag),
        _set("use_broadcast", _bad_flag),
        _set("names", st.sampled_from([5, "ab", ("a",), ("a", 1), None])),
        _set("mismatches", st.sampled_from([5, (10,), (0, 10), ("a", 1), None])),
        _set(
            "b",
            st.sampled_from(["abc", None, object(), np.array(["a", "b"]), np.array([object()], dtype=object)]),
            ["'b'"],
        ),
        _read_only("a", None),
    ],
    "almost_equal": _TOL
    + [
        _set("equal_nan", _bad_flag),
        _set("use_broadcast", _bad_flag),
        _set("a", st.sampled_from(["abc", None, object(), np.array(["a", "b"])]), ["'a'"]),
        _read_only("b", None),
    ],
    "check_backward": _chainer_muts()
    + [
        _set("float64_reference", _bad_flag),
        _element("x_data", 1, _ARRAY_KINDS + _NONFINITE, ["x_data[1]", "'x1'"]),
        _element("y_grad", 0, _BAD_ELEMENTS + ("nan",), ["y_grad"]),
        _set("params", st.sampled_from([5, "w", {"w": np.ones(2)}]), ["params"]),
        _set("no_grads", st.sampled_from([[True], [False, False, False]]), ["no_grads"]),
        _read_only("x_data", 0),
    ],
    "check_double_backward": _chainer_muts()
    + [
        _element("x_data", 1, _ARRAY_KINDS + _NONFINITE, ["x_data[1]", "'x1'"]),
        _element("y_grad", 0, _BAD_ELEMENTS + ("nan",), ["'gy0'", "y_grad"]),
        _set("x_grad_grad", st.sampled_from([(np.ones(SHAPE),), (np.ones(SHAPE),) * 3]), ["x_grad_grad"]),
        _read_only("x_data", 1),
    ],
    "numerical_grad": [
        _set("eps", _bad_eps),
        _set("f", _bad_func),
        _set("detect_nondifferentiable", _bad_flag),
        _set("diff_atol", _bad_num_tol),
        _set("diff_rtol", _bad_num_tol),
        _element("inputs", 1, ("str", "none", "object", "obj_array", "str_array", "complex"), ["inputs[1]"]),
        _set("inputs", st.one_of(st.integers(), st.text(max_size=3), st.just(np.ones(SHAPE))), ["inputs"]),
        _read_only("inputs", 1, must_raise=True, tokens=("inputs[1]",)),
    ],
    "gradcheck": _NUM_TOL
    + [
        _set("eps", _bad_eps),
        _set("func", _bad_func),
        _set("nondet_tol", _bad_num_tol),
        _set("fast_mode", _bad_flag),
        _set("check_undefined_grad", _bad_flag),
        _set("progress", _bad_flag),
        _set("raise_exception", _bad_flag),
        _set("float64_reference", _bad_flag),
        _element("inputs", 1, ("obj_array", "str_array", "complex", "shape", "nan", "inf"), ["'input1'"]),
        _read_only("inputs", 0),
    ],
    "gradgradcheck": _NUM_TOL
    + [
        _set("eps", _bad_eps),
        _set("func", _bad_func),
        _set("nondet_tol", _bad_num_tol),
        _set("fast_mode", _bad_flag),
        _set("raise_exception", _bad_flag),
        _set("gen_non_contig_grad_outputs", _bad_flag),
        _element("inputs", 1, ("obj_array", "str_array", "complex", "shape", "nan", "inf"), ["'input1'"]),
        _set("grad_outputs", st.sampled_from([(np.ones(SHAPE),) * 2, (np.ones(3),)]), ["grad_output"]),
        _read_only("inputs", 1),
    ],
}


def _check_one(checker, mut, draw):
    fn, kwargs = _baseline(checker)
    mut.apply(kwargs, draw, checker)
    snap = _snapshot(kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn(**kwargs)
        except GradientCheckError as err:
            raise AssertionError(
                f"{checker}, {mut.label}: a bad input was reported as a gradient failure: {str(err).splitlines()[0]}"
            ) from err
        except (ValueError, TypeError, NotImplementedError) as err:  # NotImplementedError: sparse storage asked
            msg = str(err)
            assert any(t in msg for t in mut.tokens), f"{checker}, {mut.label}: no culprit {mut.tokens} in: {msg}"
            _assert_unchanged(snap)
            return True
        except Exception as err:
            raise AssertionError(
                f"{checker}, {mut.label}: {type(err).__name__} is neither ValueError nor TypeError: {err}"
            ) from err
    assert not mut.must_raise, f"{checker}, {mut.label}: the bad input was accepted: {kwargs!r:.300}"
    if checker not in ("numeric_grad",):  # numeric_grad writes location into the executor (as documented)
        _assert_unchanged(snap)
    return False


EXAMPLES_PER_CHECKER = 160
COUNTER = {"examples": 0, "raised": 0}


@pytest.mark.parametrize("checker", sorted(MUTATIONS))
@settings(
    max_examples=EXAMPLES_PER_CHECKER,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_random_bad_options_and_inputs_are_named_errors_and_change_nothing(checker, data):
    muts = MUTATIONS[checker]
    mut = data.draw(st.sampled_from(muts), label="mutation")
    raised = _check_one(checker, mut, data.draw)  # asserts the error type, the culprit and unchanged arrays
    assert raised or not mut.must_raise
    COUNTER["examples"] += 1
    COUNTER["raised"] += int(raised)


def test_every_checker_is_fuzzed():
    assert set(MUTATIONS) == set(BASELINES)
    assert len(BASELINES) == 14
    assert EXAMPLES_PER_CHECKER * len(MUTATIONS) >= 2000
