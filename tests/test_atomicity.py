"""State and atomicity: a call that raises changes no user array; executors keep their own state.

Issue 9, "State and atomicity": destination arrays are checked at bind, every write of one call
happens after every check passed, CustomOp instances are per executor, BatchNorm keeps its moving
statistics on an empty batch, prod/nanprod gradients are exact at zeros, 0-d arguments give 0-d arrays.
"""

import threading
import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import BindError, DTypeError

S = sg.sym


def _read_only(a):
    a = np.array(a, copy=True)
    a.flags.writeable = False
    return a


# -- destination arrays are checked at bind, and again before any write ---------------------------


def test_read_only_gradient_buffer_is_rejected_at_bind_naming_the_argument():
    x, y = S.Variable("x"), S.Variable("y")
    gx, gy = np.zeros(3), _read_only(np.zeros(3))
    with pytest.raises(BindError, match="'y'.*read-only"):
        (x * y).bind(sg.cpu(), {"x": np.ones(3), "y": np.ones(3)}, args_grad={"x": gx, "y": gy}, grad_req="add")


def test_backward_that_raises_leaves_every_add_buffer_as_it_was():
    # a buffer made read-only after bind: backward raises before adding into x's gradient
    x, y = S.Variable("x"), S.Variable("y")
    gx, gy = np.full(3, 7.0), np.full(3, 7.0)
    exe = (x * y).bind(sg.cpu(), {"x": np.ones(3), "y": np.full(3, 2.0)}, args_grad={"x": gx, "y": gy}, grad_req="add")
    exe.forward(is_train=True)
    gy.flags.writeable = False
    with pytest.raises(BindError, match="'y'"):
        exe.backward(np.ones(3))
    np.testing.assert_array_equal(gx, np.full(3, 7.0))


def test_forward_with_a_read_only_bound_argument_overwrites_nothing():
    x, y = S.Variable("x"), S.Variable("y")
    xa, ya = np.ones(3), _read_only(np.ones(3))
    exe = (x * y).bind(sg.cpu(), {"x": xa, "y": ya})
    with pytest.raises(BindError, match="'y'.*read-only"):
        exe.forward(x=np.full(3, 5.0), y=np.full(3, 2.0))
    np.testing.assert_array_equal(xa, np.ones(3))


def test_forward_whose_op_raises_overwrites_no_bound_argument():
    x, y = S.Variable("x"), S.Variable("y")
    xa, ya = np.ones((2, 3)), np.ones((2, 3))
    exe = (x + S.Custom(y, op_type="atom_fail_t")).bind(sg.cpu(), {"x": xa, "y": ya})
    with pytest.raises(RuntimeError, match="kaboom"):
        exe.forward(x=np.full((2, 3), 5.0), y=np.full((2, 3), 2.0))
    np.testing.assert_array_equal(xa, np.ones((2, 3)))
    np.testing.assert_array_equal(ya, np.ones((2, 3)))


def _two_batchnorms():
    d = S.Variable("data")
    return S.BatchNorm(S.BatchNorm(d, name="bn1", fix_gamma=False), name="bn2", fix_gamma=False)


def test_read_only_moving_var_of_a_second_batchnorm_is_rejected_at_bind():
    net = _two_batchnorms()
    shapes = dict(zip(net.list_auxiliary_states(), net.infer_shape(data=(4, 3))[2]))
    aux = {k: np.zeros(s) for k, s in shapes.items()}
    aux["bn2_moving_var"] = _read_only(np.ones(3))
    args = {k: np.ones(s) for k, s in zip(net.list_arguments(), net.infer_shape(data=(4, 3))[0])}
    with pytest.raises(BindError, match="'bn2_moving_var'"):
        net.bind(sg.cpu(), args, aux_states=aux)


def test_training_forward_that_raises_changes_no_moving_statistic():
    exe = _two_batchnorms().simple_bind(sg.cpu(), data=(4, 3))
    exe.arg_dict["data"][...] = np.random.default_rng(0).random((4, 3))
    data = exe.arg_dict["data"].copy()
    before = {k: v.copy() for k, v in exe.aux_dict.items()}
    exe.aux_dict["bn2_moving_var"].flags.writeable = False
    with pytest.raises(BindError, match="'bn2_moving_var'"):
        exe.forward(is_train=True, data=np.ones((4, 3)))
    for k, v in exe.aux_dict.items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    np.testing.assert_array_equal(exe.arg_dict["data"], data)  # the input was not copied in either


def test_copy_params_from_a_read_only_destination_copies_nothing():
    x, y = S.Variable("x"), S.Variable("y")
    xa, ya = np.zeros(2), _read_only(np.zeros(2))
    exe = (x + y).bind(sg.cpu(), {"x": xa, "y": ya})
    with pytest.raises(BindError, match="'y'"):
        exe.copy_params_from({"x": np.ones(2), "y": np.ones(2)})
    np.testing.assert_array_equal(xa, np.zeros(2))


def test_gradient_buffer_of_another_dtype_is_a_bind_error():
    x = S.Variable("x")
    with pytest.raises(DTypeError, match=r"'x'.*int64.*float64") as info:
        (x * 2.5).bind(sg.cpu(), {"x": np.ones(3)}, args_grad={"x": np.zeros(3, np.int64)})
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("which", ["args", "args_grad", "aux_states"])
def test_unknown_names_in_bind_dicts_are_errors_naming_the_nearest(which):
    data = S.Variable("data")
    net = S.BatchNorm(S.FullyConnected(data, num_hidden=3, name="fc"), name="bn")
    arg_shapes, _, aux_shapes = net.infer_shape(data=(2, 4))
    args = {k: np.ones(s) for k, s in zip(net.list_arguments(), arg_shapes)}
    grads = {k: np.zeros(s) for k, s in zip(net.list_arguments(), arg_shapes)}
    aux = {k: np.ones(s) for k, s in zip(net.list_auxiliary_states(), aux_shapes)}
    typo, nearest = {
        "args": ("fc_wieght", "fc_weight"),
        "args_grad": ("fc_wieght", "fc_weight"),
        "aux_states": ("bn_moving_vra", "bn_moving_var"),
    }[which]
    given = {"args": args, "args_grad": grads, "aux_states": aux}[which]
    given[typo] = given[nearest]
    with pytest.raises(BindError, match=f"'{typo}'.*did you mean '{nearest}'"):
        net.bind(sg.cpu(), args, args_grad=grads, aux_states=aux)


# -- CustomOp instances are per executor -------------------------------------------------------------


class _Dropish(sg.operator.CustomOp):
    """Keeps a mask from forward for backward: y = x * (x > threshold)."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.mask = np.asarray(in_data[0]) > 0.5
        self.assign(out_data[0], req[0], in_data[0] * self.mask)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * self.mask)


@sg.operator.register("atom_mask_t")
class _DropishProp(sg.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return _Dropish()


class _Fail(sg.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        raise RuntimeError("kaboom")


@sg.operator.register("atom_fail_t")
class _FailProp(sg.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return _Fail()


def _mask_exe(xv):
    x = S.Variable("x")
    net = S.Custom(x, op_type="atom_mask_t", name="m")
    g = np.zeros_like(xv)
    return net, net.bind(sg.cpu(), {"x": xv}, args_grad={"x": g}), g


def test_stateful_custom_op_bound_twice_keeps_one_state_per_executor():
    a = np.array([0.9, 0.1, 0.9])
    b = np.array([0.1, 0.9, 0.1])
    net, ea, ga = _mask_exe(a)
    eb = net.bind(sg.cpu(), {"x": b}, args_grad={"x": np.zeros(3)})
    ea.forward(is_train=True)
    eb.forward(is_train=True)  # used to overwrite the mask ea's backward reads
    ea.backward(np.ones(3))
    np.testing.assert_array_equal(ga, [1.0, 0.0, 1.0])


def test_executors_of_one_symbol_in_threads_give_the_right_gradients():
    rng = np.random.default_rng(0)
    x = S.Variable("x")
    net = S.Custom(x, op_type="atom_mask_t", name="m")
    errors = []
    seeds = [int(s) for s in rng.integers(0, 1000, 4)]
    # every thread runs its forward before any runs its backward: with one operator instance shared
    # by all executors, each backward would read the mask of whichever forward ran last
    barrier = threading.Barrier(len(seeds), timeout=30)

    def work(seed):
        xv = np.random.default_rng(seed).random(64)
        g = np.zeros(64)
        exe = net.bind(sg.cpu(), {"x": xv}, args_grad={"x": g})
        try:
            for _ in range(20):
                exe.forward(is_train=True)
                barrier.wait()
                exe.backward(np.ones(64))
                barrier.wait()
                if not np.array_equal(g, (xv > 0.5).astype(float)):
                    errors.append(seed)
                    barrier.abort()  # a thread that stops early releases the others
                    return
        except threading.BrokenBarrierError:
            pass  # another thread stopped early and is reported
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# -- BatchNorm on an empty batch -----------------------------------------------------------------


def test_batchnorm_training_on_an_empty_batch_keeps_the_moving_statistics():
    net = S.BatchNorm(S.Variable("data"), name="bn", fix_gamma=False)
    mm, mv = np.array([0.5, -1.0, 2.0]), np.array([1.5, 2.0, 0.25])
    exe = net.bind(
        sg.cpu(),
        {"data": np.zeros((0, 3)), "bn_gamma": np.ones(3), "bn_beta": np.zeros(3)},
        args_grad={"data": np.zeros((0, 3)), "bn_gamma": np.zeros(3), "bn_beta": np.zeros(3)},
        aux_states={"bn_moving_mean": mm.copy(), "bn_moving_var": mv.copy()},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "mean of empty slice"
        (y,) = exe.forward(is_train=True)
        exe.backward(np.zeros((0, 3)))
    assert y.shape == (0, 3)
    np.testing.assert_array_equal(exe.aux_dict["bn_moving_mean"], mm)
    np.testing.assert_array_equal(exe.aux_dict["bn_moving_var"], mv)
    np.testing.assert_array_equal(exe.grad_dict["bn_gamma"], np.zeros(3))


# -- prod / nanprod gradients at exact zeros -------------------------------------------------------


def _prod_others(a, axis):
    """Reference: d prod / dx_i = product of the other elements of i's group (no division)."""
    out = np.empty_like(a)
    for idx in np.ndindex(a.shape):
        group = [j for j in np.ndindex(a.shape) if all(j[k] == idx[k] for k in range(a.ndim) if k not in axis)]
        out[idx] = np.prod([1.0 if np.isnan(a[j]) else a[j] for j in group if j != idx])
    return out


@pytest.mark.parametrize("op", ["prod", "nanprod"])
@pytest.mark.parametrize("axis", [None, 1, 0])
def test_prod_gradient_is_finite_and_exact_at_zeros(op, axis):
    a = np.array([[0.0, 2.0, 3.0], [1.0, 0.0, 0.0], [1.5, -2.0, 0.5]])
    if op == "nanprod":
        a[2, 0] = np.nan
    x = S.Variable("x")
    kw = {} if axis is None else {"axis": axis}
    g = np.zeros_like(a)
    exe = getattr(S, op)(x, **kw).bind(sg.cpu(), {"x": a}, args_grad={"x": g})
    (y,) = exe.forward(is_train=True)
    exe.backward(np.ones(y.shape))
    want = _prod_others(a, tuple(range(a.ndim)) if axis is None else (axis,))
    if op == "nanprod":
        want[np.isnan(a)] = 0.0
    np.testing.assert_allclose(g, want)


@pytest.mark.parametrize("op", ["prod", "nanprod"])
def test_prod_second_order_is_exact_at_zeros(op):
    # f = sum_rows w_r prod_j x_rj; Hessian-vector product at points with one and two zeros per row,
    # against the multilinear closed form d2f/dx_ri dx_rk = w_r prod_(j != i, k) x_rj
    a = np.array([[0.0, 2.0, 3.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    w = np.array([1.5, -0.5, 2.0])
    v = np.random.default_rng(3).random(a.shape)
    x, wv, vv = S.Variable("x"), S.Variable("w"), S.Variable("v")
    (gx,) = sg.grad(S.sum(getattr(S, op)(x, axis=1) * wv), [x])
    (hv,) = sg.grad(S.sum(gx * vv), [x])
    out = hv.bind(sg.cpu(), {"x": a, "w": w, "v": v}, grad_req="null").forward()[0]
    want = np.zeros_like(a)
    for r in range(3):
        for i in range(3):
            want[r, i] = sum(
                w[r] * np.prod([a[r, j] for j in range(3) if j not in (i, k)]) * v[r, k] for k in range(3) if k != i
            )
    np.testing.assert_allclose(out, want)


# -- 0-d arguments give 0-d arrays -----------------------------------------------------------------


def test_zero_d_argument_gives_zero_d_ndarray_outputs():
    x = S.Variable("x")
    net = S.Group([x * 2.0, S.exp(x), x + x])
    exe = net.bind(sg.cpu(), {"x": np.array(3.0)}, args_grad={"x": np.array(0.0)})
    outs = exe.forward(is_train=True)
    for o in outs:
        assert type(o) is np.ndarray and o.shape == ()
    assert type(exe.forward_all()[0]) is np.ndarray
    assert type(exe.rerun_downstream(["x"])[0]) is np.ndarray
    exe.backward([np.array(1.0)] * 3)
    np.testing.assert_allclose(exe.grad_dict["x"], 2.0 + np.exp(3.0) + 2.0)
