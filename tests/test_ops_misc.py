"""Ops whose gradient is defined rather than derived (straight-through estimators, gradientmultiplier) and the
mixed-precision casts, against values written here; the other small ops added with them (cumsum, khatri_rao,
_slice_assign, Crop, amp_multicast, ...) are rows of their families' tables, tests/op_db_<family>.py."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ShapeError
from symgrad.test_utils import check_symbolic_backward, check_symbolic_forward

S = sg.sym


@pytest.mark.parametrize(
    ("op", "ref"),
    [
        ("_contrib_round_ste", lambda x: np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5))),
        ("_contrib_sign_ste", np.sign),
    ],
)
def test_straight_through_estimators_pass_the_head_gradient(op, ref):
    x = np.array([[-1.5, -0.4, 0.0], [0.5, 1.49, 2.5]])
    head = np.array([[1.0, -2.0, 3.0], [0.25, 5.0, -1.0]])
    sym = getattr(S, op)(S.Variable("x"))
    check_symbolic_forward(sym, {"x": x}, [ref(x)], dtype=np.float64)
    grads = check_symbolic_backward(sym, {"x": x}, [head], {"x": head}, dtype=np.float64)
    np.testing.assert_array_equal(grads["x"], head)  # exactly the head gradient, not the derivative (0)


def test_gradientmultiplier_scales_the_gradient_only():
    x = np.array([1.0, -2.0, 3.0])
    sym = S._contrib_gradientmultiplier(S.Variable("x"), scalar=-0.5)
    check_symbolic_forward(sym, {"x": x}, [x], dtype=np.float64)
    grads = check_symbolic_backward(
        sym, {"x": x}, [np.array([2.0, 4.0, -6.0])], {"x": np.array([-1.0, -2.0, 3.0])}, dtype=np.float64
    )
    np.testing.assert_array_equal(grads["x"], [-1.0, -2.0, 3.0])


def test_amp_cast_casts_float16_and_float32_and_casts_the_gradient_back():
    x = np.array([0.1, 2.5], np.float32)
    exe = S.amp_cast(S.Variable("x"), dtype="float16").simple_bind(sg.cpu(), x=(2,), type_dict={"x": np.float32})
    (out,) = exe.forward(is_train=True, x=x)
    assert out.dtype == np.float16 and np.array_equal(out, x.astype(np.float16))
    exe.backward(np.array([1.0, -3.0], np.float16))
    assert exe.grad_dict["x"].dtype == np.float32
    np.testing.assert_array_equal(exe.grad_dict["x"], [1.0, -3.0])
    for dtype in (np.float64, np.int32):  # MXNet's AMP leaves every other dtype alone
        exe = S.amp_cast(S.Variable("i"), dtype="float16").simple_bind(
            sg.cpu(), i=(2,), type_dict={"i": dtype}, grad_req="null"
        )
        assert exe.forward(i=np.array([1, 2], dtype))[0].dtype == dtype


@pytest.mark.parametrize(("narrow", "want"), [(False, np.float32), (True, np.float16)])
def test_amp_multicast_to_float32_or_narrow_to_float16(narrow, want):
    a, b, c, d = (S.Variable(n) for n in "abcd")
    sym = S.amp_multicast(a, b, c, d, num_outputs=4, cast_narrow=narrow)
    types = {"a": np.float16, "b": np.float32, "c": np.int32, "d": np.float64}
    exe = sym.simple_bind(
        sg.cpu(),
        a=(2,),
        b=(2,),
        c=(2,),
        d=(2,),
        type_dict=types,
        grad_req={"a": "write", "b": "write", "c": "null", "d": "write"},
    )
    outs = exe.forward(
        is_train=True,
        a=np.ones(2, np.float16),
        b=np.full(2, 2.0, np.float32),
        c=np.array([1, 2], np.int32),
        d=np.zeros(2),
    )
    assert [o.dtype for o in outs] == [want, want, np.int32, np.float64]
    exe.backward([np.ones(2, want), np.full(2, 3.0, want), np.zeros(2, np.int32), np.ones(2)])
    assert exe.grad_dict["a"].dtype == np.float16 and exe.grad_dict["b"].dtype == np.float32
    np.testing.assert_array_equal(exe.grad_dict["b"], [3.0, 3.0])


def test_crop_and_slice_assign_name_what_does_not_fit():
    x = S.Variable("x")
    with pytest.raises(ShapeError, match="Crop.*larger"):
        S.Crop(x, h_w=(5, 5)).infer_shape(x=(1, 1, 4, 4))
    with pytest.raises(ShapeError, match="offset"):
        S.Crop(x, h_w=(2, 2), offset=(3, 0)).infer_shape(x=(1, 1, 4, 4))
    with pytest.raises(ShapeError, match="'rhs'"):
        S._slice_assign(x, S.Variable("v"), begin=(0,), end=(2,)).infer_shape(x=(4, 3), v=(3, 3))
    with pytest.raises(ShapeError, match="'arg1'"):
        S.khatri_rao(x, S.Variable("y")).infer_shape(x=(2, 3), y=(2, 4))


def test_floats_parameters_take_a_number_a_tuple_or_mxnets_string():
    # the schema kind behind image.normalize's mean/std, MultiBox variances, Proposal scales, MultiBoxPrior sizes
    from symgrad.base import ParamError
    from symgrad.opdef import Param

    p = Param("floats", (1.0,))
    assert p.parse(0.5, "op", "v") == (0.5,)
    assert p.parse((1, 2.5), "op", "v") == (1.0, 2.5)
    assert p.parse("(0.1, 0.2)", "op", "v") == (0.1, 0.2)  # as MXNet writes it into symbol JSON
    for bad in ((), "x", (1.0, "a"), True):
        with pytest.raises(ParamError, match="parameter 'v' expects a number or a non-empty tuple of numbers"):
            p.parse(bad, "op", "v")
