"""Writing values into a bound executor: which paths check the shape and which follow numpy's broadcasting.

``exe.arg_dict['x']`` is the bound array itself, so ``exe.arg_dict['x'][:] = value`` is numpy's (CuPy's)
assignment: a value whose shape broadcasts to the argument's fills it silently (a row repeated over the batch,
a scalar everywhere). ``exe.forward(x=value)`` and ``exe.copy_params_from({'x': value})`` are the checked
paths: a value of any other shape than the argument's, broadcastable or not, is a ``ShapeError`` (a
``ValueError``) naming the argument and both shapes, raised before anything is written.
"""

import re

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ShapeError
from symgrad.context import to_numpy

# (8, 3) argument: values numpy would broadcast into it, and ones it would not
BROADCASTS = [(3,), (1, 3), (8, 1), (1, 1), ()]
MISFITS = [(3, 8), (8, 3, 1), (24,), (0, 3)]


def _executor(ctx):
    x = sg.sym.Variable("x")
    net = sg.sym.BatchNorm(sg.sym.FullyConnected(x, num_hidden=4, name="fc"), name="bn")
    exe = net.simple_bind(ctx, x=(8, 3))
    exe.copy_params_from(
        {"x": np.arange(24.0).reshape(8, 3), "fc_weight": np.ones((4, 3)), "fc_bias": np.zeros(4)},
        {"bn_moving_var": np.full(4, 2.0)},
    )
    return exe


def _snapshot(exe):
    arrays = {**exe.arg_dict, **exe.aux_dict}
    arrays.update({f"output {i}": out for i, out in enumerate(exe.outputs)})
    return {k: to_numpy(v).copy() for k, v in arrays.items()}


def _assert_unchanged(exe, before):
    for k, v in _snapshot(exe).items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)


def _message(name, shape, want):
    return re.escape(f"{name!r} has shape {shape}, expected {want}")


@pytest.mark.parametrize("shape", BROADCASTS, ids=str)
def test_arg_dict_assignment_follows_numpys_broadcasting(ctx, shape):
    # the documented behaviour, not a check: the view is the bound array, and numpy's rule applies to it
    exe = _executor(ctx)
    value = np.full(shape, 5.0)
    if ctx.device_type == "gpu":  # CuPy's assignment takes only a scalar from the host
        import cupy

        value = cupy.asarray(value)
    exe.arg_dict["x"][:] = value
    np.testing.assert_array_equal(to_numpy(exe.arg_dict["x"]), np.full((8, 3), 5.0))


@pytest.mark.parametrize("shape", BROADCASTS + MISFITS, ids=str)
def test_forward_refuses_a_wrong_shape_naming_the_argument(ctx, shape):
    exe = _executor(ctx)
    exe.forward(is_train=True)
    before = _snapshot(exe)
    with pytest.raises(ShapeError, match=f"^forward: {_message('x', shape, (8, 3))}$") as info:
        exe.forward(is_train=True, x=np.full(shape, 5.0))
    assert isinstance(info.value, ValueError)
    _assert_unchanged(exe, before)  # the argument, the aux states BatchNorm updates in training, the outputs


@pytest.mark.parametrize("shape", BROADCASTS + MISFITS, ids=str)
def test_copy_params_from_refuses_a_wrong_shape_naming_the_argument(ctx, shape):
    exe = _executor(ctx)
    before = _snapshot(exe)
    # a valid value given alongside is not copied either
    good = {"fc_bias": np.ones(4)}
    with pytest.raises(ShapeError, match=f"^copy_params_from: {_message('fc_weight', shape, (4, 3))}$"):
        exe.copy_params_from({**good, "fc_weight": np.full(shape, 5.0)})
    with pytest.raises(ShapeError, match=f"^copy_params_from: {_message('bn_moving_mean', shape, (4,))}$"):
        exe.copy_params_from(good, {"bn_moving_mean": np.full(shape, 5.0)})
    _assert_unchanged(exe, before)


def test_the_checked_paths_write_a_value_of_the_right_shape(ctx):
    exe = _executor(ctx)
    x = np.linspace(-1.0, 1.0, 24).reshape(8, 3)
    out = to_numpy(exe.forward(x=x)[0])
    np.testing.assert_allclose(to_numpy(exe.arg_dict["x"]), x, rtol=1e-6)
    exe.copy_params_from({"x": np.zeros((8, 3)), "fc_bias": np.ones(4)})
    np.testing.assert_array_equal(to_numpy(exe.arg_dict["x"]), 0.0)
    np.testing.assert_array_equal(to_numpy(exe.arg_dict["fc_bias"]), 1.0)
    assert out.shape == (8, 4)
