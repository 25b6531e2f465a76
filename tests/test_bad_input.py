"""Bad input gets a clear error naming the culprit, and nothing changes (issue 9).

Each case used to be silently accepted, coerced, or to fail deep inside an op. Every error here is a
built-in exception subclass whose message names the argument (or op attribute) at fault, and every
array the caller handed in is byte-identical afterwards. The hypothesis test at the end throws random
bad inputs at bind, simple_bind, forward, backward and copy_params_from.
"""

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symgrad as sg
from symgrad.base import AllocationError, BindError, DTypeError, ParamError, SymgradError

S = sg.sym


# -- shapes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["23", "(2,3)", (2.7, 3), (2.0, 3), (True, 3), (2, "3"), (2, None), 2.5, [[2], 3]])
def test_simple_bind_refuses_a_shape_that_is_not_ints_naming_the_argument(shape):
    x = S.Variable("x")
    with pytest.raises(TypeError, match="'x'.*shape must be an int or a tuple of ints"):
        (x * 2.0).simple_bind(sg.cpu(), x=shape)


@pytest.mark.parametrize("shape", [(True, 3), "23", (2.7, 3)])
def test_variable_shape_must_be_ints(shape):
    with pytest.raises(TypeError, match="'v'"):
        S.Variable("v", shape=shape)


def test_huge_shape_is_a_memory_error_naming_the_argument_before_allocating():
    x = S.Variable("x")
    net = S.FullyConnected(x, num_hidden=4, name="fc")
    with pytest.raises(AllocationError, match=r"'x' of shape \(1000000, 10000000\)") as info:
        net.simple_bind(sg.cpu(), x=(10**6, 10**7))
    assert isinstance(info.value, MemoryError)
    with pytest.raises(AllocationError, match="'x'"):  # more elements than an int64 can count
        net.simple_bind(sg.cpu(), x=(2**40, 2**40))


def test_simple_bind_ignores_a_keyword_that_is_neither_input_nor_shape_with_a_warning():
    x = S.Variable("x")
    with pytest.warns(UserWarning, match="mode='clip'"):
        exe = (x * 2.0).simple_bind(sg.cpu(), x=(2, 3), mode="clip")
    assert exe.arg_dict["x"].shape == (2, 3)


def test_simple_bind_shape_for_a_misspelled_argument_names_the_nearest():
    x = S.Variable("x")
    net = S.FullyConnected(x, num_hidden=4, name="fc")
    with pytest.raises(BindError, match="'fc_wieght'.*did you mean 'fc_weight'"):
        net.simple_bind(sg.cpu(), x=(2, 3), fc_wieght=(4, 3))


# -- arrays -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.array([1, "a"], dtype=object), np.array(["a", "b"]), np.array([b"a", b"b"])])
def test_bind_refuses_object_and_string_arrays(bad):
    x = S.Variable("x")
    with pytest.raises(DTypeError, match="'x'"):
        (x * 2.0).bind(sg.cpu(), {"x": bad})
    with pytest.raises(DTypeError, match="'x'"):
        (x * 2.0).bind(sg.cpu(), {"x": np.ones(2)}, args_grad={"x": bad})


@pytest.mark.parametrize(
    "value, error, words",
    [
        ([1 + 2j, 3.0], DTypeError, "imaginary"),
        (None, DTypeError, "None"),
        ([None, 1.0], DTypeError, "object"),
        (["1", "2"], DTypeError, "<U1"),
        ("12", DTypeError, "'12'"),
    ],
)
def test_forward_keyword_values_are_not_coerced(value, error, words):
    x = S.Variable("x")
    xa = np.array([5.0, 6.0])
    exe = (x * 2.0).bind(sg.cpu(), {"x": xa})
    with pytest.raises(error, match=f"'x'.*{words}"):
        exe.forward(x=value)
    np.testing.assert_array_equal(xa, [5.0, 6.0])


def test_forward_nan_into_an_integer_argument_is_an_error():
    x = S.Variable("x")
    xa = np.array([5, 6])
    exe = (x * 2).bind(sg.cpu(), {"x": xa})
    with pytest.raises(BindError, match="'x'.*NaN"):
        exe.forward(x=np.array([1.0, np.nan]))
    np.testing.assert_array_equal(xa, [5, 6])
    exe.forward(x=np.array([1.0, 3.0]))  # finite floats still cast, as MXNet's copyto
    np.testing.assert_array_equal(xa, [1, 3])


def test_string_head_gradient_is_named_before_the_backward_runs():
    x = S.Variable("x")
    g = np.full(2, 4.0)
    exe = (x * 2.0).bind(sg.cpu(), {"x": np.ones(2)}, args_grad={"x": g}, grad_req="add")
    exe.forward(is_train=True)
    with pytest.raises(DTypeError, match="out_grad.*'_mulscalar.*_output'.*<U1"):
        exe.backward(np.array(["a", "b"]))
    with pytest.raises(DTypeError, match="out_grad.*complex"):
        exe.backward(np.array([1j, 2j]))
    np.testing.assert_array_equal(g, [4.0, 4.0])


# -- integer inputs to float-only unary ops ----------------------------------------------------------


@pytest.mark.parametrize("op", ["tanh", "sigmoid", "log", "exp", "sqrt", "sin", "erf", "gammaln", "softsign"])
def test_gradient_with_respect_to_an_integer_input_of_float_math_is_zero(op):
    # the value follows MXNet's dtype rule (computed in float, truncated to the input's int dtype);
    # trunc(f(x)) is piecewise constant, so its gradient is 0 (it was f' computed in ints: 1 for tanh)
    x = S.Variable("x")
    xv = np.array([1, 2, 3], np.int32)
    g = np.full(3, 7, np.int32)
    exe = getattr(S, op)(x).bind(sg.cpu(), {"x": xv}, args_grad={"x": g})
    (y,) = exe.forward(is_train=True)
    assert y.dtype == np.int32
    if hasattr(np, op):
        np.testing.assert_array_equal(y, getattr(np, op)(xv.astype(np.float64)).astype(np.int32))
    exe.backward(np.ones(3, np.int32))
    np.testing.assert_array_equal(g, [0, 0, 0])


def test_float_gradient_of_float_math_is_unchanged_and_second_order_works():
    x = S.Variable("x")
    (gx,) = sg.grad(S.sum(S.tanh(x)), [x])
    (ggx,) = sg.grad(S.sum(gx), [x])
    xv = np.array([0.3, -1.2])
    out = S.Group([gx, ggx]).bind(sg.cpu(), {"x": xv}, grad_req="null").forward()
    t = np.tanh(xv)
    np.testing.assert_allclose(out[0], 1 - t**2)
    np.testing.assert_allclose(out[1], -2 * t * (1 - t**2))


# -- op attributes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["-" * 3000 + "1", "(" * 3000 + "1" + ")" * 3000, "[" * 100 + "]" * 100, "~" * 5000 + "1", "1" * 200_000]
)
def test_deeply_nested_attribute_is_a_param_error(text):
    x = S.Variable("x")
    with pytest.raises(ParamError, match="'shape'") as info:
        S.Reshape(x, shape=text)
    assert len(str(info.value)) < 400  # the value is cut in the message


def test_attribute_strings_that_are_literals_still_parse():
    x = S.Variable("x")
    assert S.Reshape(x, shape="(2, -3)").list_attr()["shape"] == "(2, -3)"
    exe = S.Reshape(x, shape="(-1,)").bind(sg.cpu(), {"x": np.ones((2, 3))})
    assert exe.forward()[0].shape == (6,)


# == hypothesis: random bad inputs to bind / simple_bind / forward / backward ===============================

_ARGS = ("x", "y", "bn_gamma", "bn_beta")
_AUX = ("bn_moving_mean", "bn_moving_var")
_SHAPES = {"x": (2, 3), "y": (2, 3), "bn_gamma": (3,), "bn_beta": (3,), "bn_moving_mean": (3,), "bn_moving_var": (3,)}
_NET = S.BatchNorm(S.Variable("x") * S.Variable("y"), name="bn", fix_gamma=False)
_INT_NET = S.Variable("x") * S.Variable("y") + 1
_BUILTIN = (ValueError, TypeError, MemoryError, KeyError)


def _good(name, rng):
    return rng.random(_SHAPES[name]) + 0.5


def _bad_array(kind, like, rng):
    """A value for a slot holding an array like ``like`` that is wrong in the way ``kind`` says."""
    shape = like.shape
    if kind == "shape":
        return rng.random(shape[:-1] + (shape[-1] + 1,))
    if kind == "rank":
        return rng.random(shape + (1,))
    if kind == "object":
        return np.array(list(rng.random(like.size)), dtype=object).reshape(shape)
    if kind == "string":
        return np.full(shape, "1.5")
    if kind == "bytes":
        return np.full(shape, b"1")
    if kind == "datetime":
        return np.zeros(shape, "datetime64[s]")
    if kind == "none":
        return None
    if kind == "str":
        return "1.5"
    if kind == "list_of_str":
        return [["a"] * shape[-1]] * (shape[0] if len(shape) > 1 else 1)
    raise AssertionError(kind)


_ARRAY_KINDS = ("shape", "rank", "object", "string", "bytes", "datetime", "str", "list_of_str")


def _snapshot(arrays):
    return [(a, a.copy(), a.tobytes(), a.dtype) for a in arrays if isinstance(a, np.ndarray)]


def _assert_unchanged(snap):
    for a, copy, raw, dtype in snap:
        assert a.dtype == dtype and a.tobytes() == raw, "a user array changed"
        np.testing.assert_array_equal(a, copy)


def _assert_named(exc, culprit):
    assert isinstance(exc, _BUILTIN), f"{type(exc).__name__} is not a ValueError/TypeError/MemoryError: {exc}"
    assert not isinstance(exc, (RecursionError, AssertionError, AttributeError)), exc
    assert culprit in str(exc), f"message does not name {culprit!r}: {exc}"


def _bound(rng, req="add", readonly_arg=None):
    args = {k: _good(k, rng) for k in _ARGS}
    grads = {k: rng.random(_SHAPES[k]) for k in _ARGS}
    aux = {k: _good(k, rng) for k in _AUX}
    if readonly_arg is not None:
        args[readonly_arg].flags.writeable = False
    exe = _NET.bind(sg.cpu(), args, args_grad=grads, grad_req=req, aux_states=aux)
    return exe, args, grads, aux


@st.composite
def _scenario(draw):
    where = draw(
        st.sampled_from(
            [
                "bind_args",
                "bind_grad",
                "bind_aux",
                "bind_unknown",
                "simple_bind",
                "forward",
                "forward_readonly",
                "forward_unknown",
                "forward_nan_int",
                "backward",
                "backward_readonly",
                "copy_params",
            ]
        )
    )
    seed = draw(st.integers(0, 2**16))
    name = draw(st.sampled_from(_ARGS))
    aux_name = draw(st.sampled_from(_AUX))
    kind = draw(st.sampled_from(_ARRAY_KINDS))
    extra = draw(st.sampled_from(["dtype", "readonly", "none_required", "not_array"]))
    return where, seed, name, aux_name, kind, extra


@settings(max_examples=2000, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(_scenario())
def test_random_bad_inputs_raise_a_named_builtin_error_and_change_nothing(scenario):
    where, seed, name, aux_name, kind, extra = scenario
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning / RuntimeWarning on the way to the error
        err = _run_scenario(where, rng, name, aux_name, kind, extra)
    assert isinstance(err, _BUILTIN) and str(err)


def _run_scenario(where, rng, name, aux_name, kind, extra):
    """Run one bad-input scenario; returns the named built-in exception it raised (checked here)."""
    if where.startswith("bind"):
        args = {k: _good(k, rng) for k in _ARGS}
        grads = {k: rng.random(_SHAPES[k]) for k in _ARGS}
        aux = {k: _good(k, rng) for k in _AUX}
        target, culprit = {
            "bind_args": (args, name),
            "bind_grad": (grads, name),
            "bind_aux": (aux, aux_name),
            "bind_unknown": (args, name),
        }[where]
        if where == "bind_unknown":
            culprit = name + "_typo"
            target[culprit] = target[name]
        elif where == "bind_grad" and extra == "dtype":
            target[culprit] = rng.random(_SHAPES[culprit]).astype(rng.choice([np.float32, np.int64, np.complex128]))
        elif where in ("bind_grad", "bind_aux") and extra == "readonly":
            target[culprit].flags.writeable = False
        elif where == "bind_args" and extra == "none_required":
            target[culprit] = None
        else:
            target[culprit] = _bad_array(kind, target[culprit], rng)
        snap = _snapshot(list(args.values()) + list(grads.values()) + list(aux.values()))
        with pytest.raises(_BUILTIN) as info:
            _NET.bind(sg.cpu(), args, args_grad=grads, grad_req="add", aux_states=aux)
        _assert_named(info.value, culprit)
        _assert_unchanged(snap)
        return info.value
    if where == "simple_bind":
        value = {
            "shape": "(2, 3)",
            "rank": (2.0, 3),
            "object": (True, 3),
            "string": "23",
            "bytes": (2, -3),
            "datetime": (2, 3.5),
            "str": "x",
            "list_of_str": ("2", "3"),
        }[kind]
        with pytest.raises(_BUILTIN) as info:
            _NET.simple_bind(sg.cpu(), **{"x": value})
        _assert_named(info.value, "x")
        return info.value
    if where == "forward_nan_int":
        # NaN / inf cannot be stored in an integer argument: an error, not INT_MIN
        xi, yi = rng.integers(-5, 5, (2, 3)), rng.integers(-5, 5, (2, 3))
        exe = _INT_NET.bind(sg.cpu(), {"x": xi, "y": yi})
        snap = _snapshot([xi, yi])
        value = rng.random((2, 3))
        value[rng.integers(0, 2), rng.integers(0, 3)] = rng.choice([np.nan, np.inf, -np.inf])
        snap += _snapshot([value])
        with pytest.raises(_BUILTIN) as info:
            exe.forward(**{name if name in ("x", "y") else "x": value})
        _assert_named(info.value, name if name in ("x", "y") else "x")
        _assert_unchanged(snap)
        return info.value
    if where == "forward_readonly":
        readonly = name
        other = next(k for k in _ARGS if k != name)
        exe, args, grads, aux = _bound(rng, readonly_arg=readonly)
        snap = _snapshot(list(args.values()) + list(grads.values()) + list(aux.values()))
        new = {other: _good(other, rng), readonly: _good(readonly, rng)}
        snap += _snapshot(new.values())
        with pytest.raises(_BUILTIN) as info:
            exe.forward(is_train=True, **new)
        _assert_named(info.value, readonly)
        _assert_unchanged(snap)
        return info.value
    exe, args, grads, aux = _bound(rng)
    exe.forward(is_train=True)
    snap = _snapshot(list(args.values()) + list(grads.values()) + list(aux.values()))
    if where == "forward":
        value = _bad_array(kind, args[name], rng)
        if extra == "dtype":
            value = args[name] + 1j
        elif extra == "none_required":
            value = None
        snap += _snapshot([value])
        ok = {k: _good(k, rng) for k in _ARGS if k != name}
        with pytest.raises(_BUILTIN) as info:
            exe.forward(is_train=True, **ok, **{name: value})
        _assert_named(info.value, name)
    elif where == "forward_unknown":
        with pytest.raises(_BUILTIN) as info:
            exe.forward(is_train=True, **{name + "_typo": _good(name, rng)})
        _assert_named(info.value, name + "_typo")
    elif where == "backward":
        out = list(exe.output_dict)[0]
        value = _bad_array(kind, np.zeros((2, 3)), rng)
        if extra == "dtype":
            value = np.ones((2, 3)) * 1j
        elif extra == "none_required":
            value = None
        snap += _snapshot([value])
        with pytest.raises(_BUILTIN) as info:
            exe.backward(value)
        _assert_named(info.value, out)
    elif where == "backward_readonly":
        grads[name].flags.writeable = False
        with pytest.raises(_BUILTIN) as info:
            exe.backward(np.ones((2, 3)))
        _assert_named(info.value, name)
    elif where == "copy_params":
        params = {k: _good(k, rng) for k in _ARGS}
        culprit = name
        if extra == "readonly":
            args[name].flags.writeable = False
        elif extra == "not_array":
            culprit = name + "_typo"
            params[culprit] = params.pop(name)
        else:
            params[name] = _bad_array(kind, args[name], rng)
        snap += _snapshot(params.values())
        with pytest.raises(_BUILTIN) as info:
            exe.copy_params_from(params)
        _assert_named(info.value, culprit)
    else:
        raise AssertionError(where)
    _assert_unchanged(snap)
    return info.value


def test_symgrad_errors_are_builtin_subclasses():
    for cls in (SymgradError, BindError, DTypeError, AllocationError, ParamError):
        assert issubclass(cls, Exception) and any(issubclass(cls, b) for b in _BUILTIN)
