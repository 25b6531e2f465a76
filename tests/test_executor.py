"""Executor: bind/simple_bind, grad_req write/add/null, loss heads, aux states, plan."""

import numpy as np
import pytest

import symgrad as sg

S = sg.sym


def _fc_net():
    x = S.Variable("x")
    y = S.FullyConnected(x, num_hidden=4, name="fc")
    return S.MakeLoss(S.sum(S.square(y - 1.0)), name="loss")


def _fc_grads(x, w, b):
    """d/dW, d/db, d/dx of sum((x W^T + b - 1)^2), derived by hand."""
    r = x @ w.T + b - 1.0
    g = 2.0 * r
    return g.T @ x, g.sum(0), g @ w


def test_quick_start_snippet():
    rng = np.random.default_rng(0)
    loss = _fc_net()
    exe = loss.simple_bind(sg.cpu(), grad_req={"x": "null", "fc_weight": "write", "fc_bias": "add"}, x=(8, 3))
    assert exe.grad_dict["x"] is None
    exe.arg_dict["x"][:] = rng.random((8, 3))
    exe.arg_dict["fc_weight"][:] = rng.random((4, 3))
    exe.forward(is_train=True)
    exe.backward()
    dw, db, _ = _fc_grads(exe.arg_dict["x"].astype(np.float64), exe.arg_dict["fc_weight"].astype(np.float64), 0.0)
    np.testing.assert_allclose(exe.grad_dict["fc_weight"], dw, rtol=1e-5)
    np.testing.assert_allclose(exe.grad_dict["fc_bias"], db, rtol=1e-5)
    exe.forward(is_train=True)
    exe.backward()
    np.testing.assert_allclose(exe.grad_dict["fc_weight"], dw, rtol=1e-5)  # write: overwritten
    np.testing.assert_allclose(exe.grad_dict["fc_bias"], 2 * db, rtol=1e-5)  # add: accumulated


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_write_add_null_from_dirty_buffers(dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 3)).astype(dtype)
    w = rng.standard_normal((4, 3)).astype(dtype)
    b = rng.standard_normal(4).astype(dtype)
    dw_ref, db_ref, dx_ref = _fc_grads(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64))
    dirty = {n: rng.standard_normal(a.shape).astype(dtype) for n, a in (("x", x), ("fc_weight", w), ("fc_bias", b))}
    bufs = {n: a.copy() for n, a in dirty.items()}
    exe = _fc_net().bind(
        sg.cpu(),
        {"x": x, "fc_weight": w, "fc_bias": b},
        args_grad=bufs,
        grad_req={"x": "null", "fc_weight": "write", "fc_bias": "add"},
    )
    exe.forward(is_train=True)
    exe.backward()
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_array_equal(bufs["x"], dirty["x"])  # null: untouched
    np.testing.assert_allclose(bufs["fc_weight"], dw_ref, rtol=tol, atol=tol)  # write
    np.testing.assert_allclose(bufs["fc_bias"], dirty["fc_bias"] + db_ref, rtol=tol, atol=tol)  # add
    assert exe.grad_dict["fc_weight"] is bufs["fc_weight"]  # gradients land in the caller's arrays
    # the same with the list forms and a string grad_req
    bufs2 = [dirty["x"].copy(), dirty["fc_weight"].copy(), dirty["fc_bias"].copy()]
    exe2 = _fc_net().bind(sg.cpu(), [x, w, b], args_grad=bufs2, grad_req="write")
    exe2.forward(is_train=True)
    exe2.backward()
    np.testing.assert_allclose(bufs2[0], dx_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(bufs2[1], dw_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(bufs2[2], db_ref, rtol=tol, atol=tol)


def test_add_accumulates_over_three_backward_calls():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((3, 4))
    start = rng.standard_normal((3, 4))
    ga, gb = start.copy(), start.copy()
    A, B = S.Variable("a"), S.Variable("b")
    exe = (A * B).bind(sg.cpu(), {"a": a, "b": b}, args_grad={"a": ga, "b": gb}, grad_req=["add", "write"])
    head = rng.standard_normal((3, 4))
    exe.forward(is_train=True)
    for _ in range(3):
        exe.backward(head)
    np.testing.assert_allclose(ga, start + 3 * head * b, rtol=1e-12)
    np.testing.assert_allclose(gb, head * a, rtol=1e-12)


def test_null_arguments_leave_no_work_in_the_backward_plan():
    x = S.Variable("x")
    h = S.Activation(S.FullyConnected(x, num_hidden=5, name="fc1"), act_type="tanh", name="t")
    out = S.FullyConnected(h, num_hidden=2, name="fc2")
    full = out.simple_bind(sg.cpu(), grad_req="write", x=(4, 3))
    only_fc2 = out.simple_bind(sg.cpu(), grad_req={"fc2_weight": "write", "fc2_bias": "write"}, x=(4, 3))

    def ops(exe):
        return [ins.node.op_name for ins in exe.plan.backward_instrs]

    # fc2's weight and bias gradients need nothing that flows back into the tanh or fc1
    assert len(ops(only_fc2)) < len(ops(full))
    assert "_dot_grad_lhs" not in ops(only_fc2)
    assert all("fc1" not in ins.node.name and "t_" not in ins.node.name for ins in only_fc2.plan.backward_instrs)
    assert only_fc2.plan.grad_slots[0] is None
    # and the gradients that are computed are still right
    rng = np.random.default_rng(3)
    for exe in (full, only_fc2):
        for arr in exe.arg_dict.values():
            arr[...] = np.random.default_rng(4).standard_normal(arr.shape)
    head = rng.standard_normal((4, 2)).astype(np.float32)
    for exe in (full, only_fc2):
        exe.forward(is_train=True)
        exe.backward(head)
    np.testing.assert_allclose(only_fc2.grad_dict["fc2_weight"], full.grad_dict["fc2_weight"], rtol=1e-6)
    hv = np.tanh(full.arg_dict["x"] @ full.arg_dict["fc1_weight"].T + full.arg_dict["fc1_bias"])
    np.testing.assert_allclose(full.grad_dict["fc2_weight"], head.T @ hv, rtol=1e-5)


def test_loss_heads_ignore_out_grads():
    rng = np.random.default_rng(5)
    data = rng.standard_normal((4, 3))
    label = np.array([0, 2, 1, 2], dtype=np.float64)
    d = S.Variable("data")
    so = S.SoftmaxOutput(d, name="softmax")
    exe = so.bind(
        sg.cpu(),
        {"data": data, "softmax_label": label},
        args_grad={"data": np.zeros_like(data)},
        grad_req={"data": "write", "softmax_label": "null"},
    )
    p = exe.forward(is_train=True)[0]
    e = np.exp(data - data.max(1, keepdims=True))
    np.testing.assert_allclose(p, e / e.sum(1, keepdims=True), rtol=1e-12)
    want = p - np.eye(3)[label.astype(int)]
    exe.backward()
    np.testing.assert_allclose(exe.grad_dict["data"], want, rtol=1e-12)
    exe.backward(rng.standard_normal((4, 3)) * 100)  # ignored
    np.testing.assert_allclose(exe.grad_dict["data"], want, rtol=1e-12)
    # MakeLoss too: d/dx of MakeLoss(x * 3) is 3 whatever the head gradient
    x = S.Variable("x")
    ml = S.MakeLoss(x * 3.0, grad_scale=2.0)
    exe = ml.simple_bind(sg.cpu(), x=(2, 2))
    exe.forward(is_train=True)
    exe.backward(np.full((2, 2), 7.0, np.float32))
    np.testing.assert_allclose(exe.grad_dict["x"], np.full((2, 2), 6.0))


def test_batchnorm_aux_updated_by_forward_train_only():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 3, 2)).astype(np.float64)
    gamma = rng.random(3) + 0.5
    beta = rng.standard_normal(3)
    mm = rng.standard_normal(3)
    mv = rng.random(3) + 0.5
    bn = S.BatchNorm(S.Variable("x"), fix_gamma=False, momentum=0.8, eps=1e-3, name="bn")
    aux = {"bn_moving_mean": mm.copy(), "bn_moving_var": mv.copy()}
    exe = bn.bind(
        sg.cpu(),
        {"x": x, "bn_gamma": gamma, "bn_beta": beta},
        aux_states=aux,
        args_grad={"x": np.zeros_like(x), "bn_gamma": np.zeros(3), "bn_beta": np.zeros(3)},
    )
    # inference: moving statistics used, nothing updated
    out = exe.forward(is_train=False)[0]
    want = (x - mm[None, :, None]) / np.sqrt(mv[None, :, None] + 1e-3) * gamma[None, :, None] + beta[None, :, None]
    np.testing.assert_allclose(out, want, rtol=1e-12)
    np.testing.assert_array_equal(aux["bn_moving_mean"], mm)
    # training: batch statistics, and the moving averages move
    out = exe.forward(is_train=True)[0]
    mu = x.mean(axis=(0, 2))
    var = x.var(axis=(0, 2))
    want = (x - mu[None, :, None]) / np.sqrt(var[None, :, None] + 1e-3) * gamma[None, :, None] + beta[None, :, None]
    np.testing.assert_allclose(out, want, rtol=1e-10)
    np.testing.assert_allclose(aux["bn_moving_mean"], 0.8 * mm + 0.2 * mu, rtol=1e-12)
    np.testing.assert_allclose(aux["bn_moving_var"], 0.8 * mv + 0.2 * var, rtol=1e-12)
    assert exe.aux_dict["bn_moving_mean"] is aux["bn_moving_mean"]
    # gradient of sum(out * h) against central finite differences in float64
    h = rng.standard_normal(x.shape)
    exe.backward(h)
    gx = exe.grad_dict["x"].copy()

    def f(xv):
        m, v = xv.mean(axis=(0, 2)), xv.var(axis=(0, 2))
        y = (xv - m[None, :, None]) / np.sqrt(v[None, :, None] + 1e-3) * gamma[None, :, None]
        return float((y * h).sum())

    num = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = 1e-6
        num[i] = (f(x + e) - f(x - e)) / 2e-6
    np.testing.assert_allclose(gx, num, rtol=1e-5, atol=1e-7)
    xhat = (x - mu[None, :, None]) / np.sqrt(var[None, :, None] + 1e-3)
    np.testing.assert_allclose(exe.grad_dict["bn_gamma"], (h * xhat).sum(axis=(0, 2)), rtol=1e-10)
    np.testing.assert_allclose(exe.grad_dict["bn_beta"], h.sum(axis=(0, 2)), rtol=1e-10)


def test_batchnorm_fix_gamma_default_ignores_gamma():
    x = np.random.default_rng(7).standard_normal((4, 2))
    bn = S.BatchNorm(S.Variable("x"), name="bn")  # fix_gamma=True by default, as MXNet
    exe = bn.simple_bind(sg.cpu(), x=(4, 2), type_dict={"x": np.float64})
    exe.arg_dict["bn_gamma"][:] = 5.0
    out = exe.forward(is_train=True, x=x)[0]
    np.testing.assert_allclose(out, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-3), rtol=1e-10)
    exe.backward(np.ones((4, 2)))
    np.testing.assert_array_equal(exe.grad_dict["bn_gamma"], 0.0)


def test_forward_kwargs_and_by_reference_arrays():
    x = S.Variable("x")
    exe = S.exp(x).simple_bind(sg.cpu(), x=(3,))
    assert exe.arg_dict["x"].dtype == np.float32
    v = np.array([0.0, 1.0, 2.0], np.float32)
    np.testing.assert_allclose(exe.forward(x=v)[0], np.exp(v))
    exe.arg_dict["x"][:] = 1.0  # a write into the bound array is seen by the next forward
    np.testing.assert_allclose(exe.forward()[0], np.full(3, np.e, np.float32), rtol=1e-6)
    assert list(exe.output_dict) == exe._symbol.list_outputs()
    assert exe.output_dict[exe._symbol.list_outputs()[0]] is exe.outputs[0]
    src = np.array([1.0, 2.0], np.float64)
    exe2 = (x * 2.0).bind(sg.cpu(), {"x": src})
    src[0] = 10.0
    np.testing.assert_allclose(exe2.forward()[0], [20.0, 4.0])


def test_backward_out_grads_forms():
    a, b = S.Variable("a"), S.Variable("b")
    g = S.Group([a * 2.0, S.sum(b, axis=1, name="s")])
    av, bv = np.ones((2, 3)), np.ones((2, 3))
    exe = g.bind(sg.cpu(), {"a": av, "b": bv}, args_grad={"a": np.zeros((2, 3)), "b": np.zeros((2, 3))})
    exe.forward(is_train=True)
    h0, h1 = np.full((2, 3), 3.0), np.array([1.0, 2.0])
    exe.backward([h0, h1])
    np.testing.assert_allclose(exe.grad_dict["a"], 6.0)
    np.testing.assert_allclose(exe.grad_dict["b"], [[1, 1, 1], [2, 2, 2]])
    names = g.list_outputs()
    exe.backward({names[0]: h0 * 2, names[1]: h1 * 2})
    np.testing.assert_allclose(exe.grad_dict["a"], 12.0)
    np.testing.assert_allclose(exe.grad_dict["b"], [[2, 2, 2], [4, 4, 4]])


def test_unconnected_argument_gets_zero_gradient_on_write():
    a, b = S.Variable("a"), S.Variable("b")
    net = a * 2.0 + S.BlockGrad(b)
    gb = np.full((2,), 9.0)
    exe = net.bind(sg.cpu(), {"a": np.ones(2), "b": np.ones(2)}, args_grad={"a": np.zeros(2), "b": gb})
    exe.forward(is_train=True)
    exe.backward(np.ones(2))
    np.testing.assert_array_equal(gb, 0.0)
    np.testing.assert_array_equal(exe.grad_dict["a"], 2.0)


def test_slicechannel_multi_output_gradient():
    x = S.Variable("x")
    parts = S.SliceChannel(x, num_outputs=3, axis=1, squeeze_axis=True, name="sl")
    net = S.Group([parts[0] * 2.0, parts[2]])
    xv = np.arange(12.0).reshape(2, 3, 2)
    exe = net.bind(sg.cpu(), {"x": xv}, args_grad={"x": np.zeros_like(xv)})
    o = exe.forward(is_train=True)
    np.testing.assert_array_equal(o[0], xv[:, 0] * 2)
    np.testing.assert_array_equal(o[1], xv[:, 2])
    h0, h1 = np.ones((2, 2)), np.full((2, 2), 5.0)
    exe.backward([h0, h1])
    want = np.zeros_like(xv)
    want[:, 0] = 2.0
    want[:, 2] = 5.0
    np.testing.assert_array_equal(exe.grad_dict["x"], want)


def test_monitor_callback_sees_every_intermediate():
    x = S.Variable("x")
    net = S.sum(S.tanh(S.FullyConnected(x, num_hidden=2, name="fc"), name="t"), name="s")
    exe = net.simple_bind(sg.cpu(), x=(3, 4))
    rng = np.random.default_rng(11)
    w = rng.standard_normal((2, 4)).astype(np.float32)
    exe.arg_dict["fc_weight"][:] = w
    xv = rng.standard_normal((3, 4)).astype(np.float32)
    seen = {}
    exe.set_monitor_callback(lambda name, arr: seen.__setitem__(name, arr.copy()))
    out = exe.forward(x=xv)[0]
    assert set(seen) == {"fc_output", "t_output", "s_output"}
    fc = xv @ w.T
    np.testing.assert_allclose(seen["fc_output"], fc, rtol=1e-5)
    np.testing.assert_allclose(seen["t_output"], np.tanh(fc), rtol=1e-5)
    np.testing.assert_array_equal(seen["s_output"], out)
    # monitor_all: inputs too, under MXNet's names: a variable under its own name and <node>_<input name>
    seen.clear()
    exe.set_monitor_callback(lambda name, arr: seen.__setitem__(name, arr.copy()), monitor_all=True)
    exe.forward()
    assert set(seen) == {
        "x",
        "fc_weight",
        "fc_bias",
        "fc_data",
        "fc_output",
        "t_input0",  # tanh and sum register no input names in MXNet: input<i> (test_executor_mxnet.py)
        "t_output",
        "s_input0",
        "s_output",
    }
    np.testing.assert_array_equal(seen["fc_data"], xv)
    np.testing.assert_array_equal(seen["x"], xv)
    np.testing.assert_allclose(seen["t_input0"], fc, rtol=1e-5)
    # backward instructions are monitored as well; None switches the monitor off
    seen.clear()
    exe.forward(is_train=True)
    exe.backward(np.ones(1, np.float32))
    assert any("backward" in name for name in seen)
    exe.set_monitor_callback(None)
    seen.clear()
    exe.forward()
    assert seen == {}
    with pytest.raises(TypeError, match="callable"):
        exe.set_monitor_callback(3)


def test_reshape_and_copy_params_from():
    x = S.Variable("x")
    net = S.FullyConnected(x, num_hidden=3, name="fc")
    exe = net.simple_bind(sg.cpu(), x=(4, 5))
    w = np.random.default_rng(8).standard_normal((3, 5)).astype(np.float32)
    exe.copy_params_from({"fc_weight": w, "fc_bias": np.ones(3, np.float32)})
    np.testing.assert_array_equal(exe.arg_dict["fc_weight"], w)
    small = exe.reshape(x=(2, 5))
    assert small.arg_dict["x"].shape == (2, 5)
    assert small.arg_dict["fc_weight"] is exe.arg_dict["fc_weight"]  # unchanged shapes are shared
    out = small.forward(x=np.ones((2, 5), np.float32))[0]
    np.testing.assert_allclose(out, np.ones((2, 5)) @ w.T + 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="nope"):
        exe.copy_params_from({"nope": w})
    exe.copy_params_from({"nope": w}, allow_extra_params=True)
    with pytest.raises(ValueError, match="allow_up_sizing"):
        exe.reshape(x=(40, 5))
    assert exe.reshape(x=(40, 5), allow_up_sizing=True).arg_dict["x"].shape == (40, 5)


def test_plan_frees_intermediates_and_has_a_readable_repr():
    x = S.Variable("x")
    y = x
    for _ in range(5):
        y = S.tanh(y)
    exe = y.simple_bind(sg.cpu(), grad_req="null", x=(3,))
    exe.forward()
    live = [v for v in exe._vals if v is not None]
    assert len(live) == 2  # the input and the output; every intermediate was freed
    text = repr(exe.plan)
    assert "forward:" in text and "tanh[" in text


def test_second_derivative_through_an_executor():
    x = S.Variable("x")
    y = S.sum(x * x * x)  # y = sum x^3, dy/dx = 3x^2, d2 = 6x
    (g,) = sg.grad(y, [x])
    (gg,) = sg.grad(S.sum(g), [x])
    xv = np.array([1.0, -2.0, 0.5])
    exe = S.Group([g, gg]).bind(sg.cpu(), {"x": xv})
    gv, ggv = exe.forward()
    np.testing.assert_allclose(gv, 3 * xv**2)
    np.testing.assert_allclose(ggv, 6 * xv)


def test_executor_on_default_context():
    x = S.Variable("x")
    exe = (x + 1.0).bind(None, {"x": np.zeros(2)})
    assert exe.forward()[0].tolist() == [1.0, 1.0]


def test_rerun_downstream_recomputes_only_dependent_instructions():
    a, b = S.Variable("a"), S.Variable("b")
    left = S.tanh(S.tanh(a, name="ta"), name="tb")
    right = S.exp(b, name="eb")
    net = S.Group([left * 2.0, right + left])
    rng = np.random.default_rng(9)
    exe = net.bind(sg.cpu(), {"a": rng.standard_normal(3), "b": rng.standard_normal(3)})
    exe.forward_all()
    assert [i.node.name for i in exe.plan.downstream([1])] == ["eb", exe.plan.downstream([1])[-1].node.name]
    assert len(exe.plan.downstream([1])) == 2
    exe.arg_dict["b"][1] += 0.5
    outs = exe.rerun_downstream(["b"])
    av, bv = exe.arg_dict["a"], exe.arg_dict["b"]
    np.testing.assert_allclose(outs[1], np.exp(bv) + np.tanh(np.tanh(av)))
    np.testing.assert_allclose(outs[0], 2 * np.tanh(np.tanh(av)))
    exe.arg_dict["b"][1] -= 0.5
    np.testing.assert_allclose(exe.rerun_downstream(["b"])[1], np.exp(bv) + np.tanh(np.tanh(av)))


def test_outputs_never_alias_bound_arguments():
    x = S.Variable("x")
    v = np.arange(6.0)
    exe = S.Group([S.Reshape(x, shape=(2, 3)), S.BlockGrad(x), x * 2.0]).bind(sg.cpu(), {"x": v})
    r, b, d = exe.forward()
    r[0, 0] = 100.0
    b[1] = 100.0
    np.testing.assert_array_equal(v, np.arange(6.0))
    np.testing.assert_array_equal(exe.forward()[0], np.arange(6.0).reshape(2, 3))


def test_reused_gradient_buffers_never_leak_into_user_arrays():
    # dot-produced weight gradients are computed into buffers the plan reuses on every backward
    rng = np.random.default_rng(10)
    x = S.Variable("x")
    net = S.FullyConnected(x, num_hidden=3, name="fc")
    exe = net.simple_bind(sg.cpu(), grad_req={"fc_weight": "write", "fc_bias": "add"}, x=(4, 5))
    assert exe.plan.out_buffers, "the weight gradient should use a reusable buffer"
    xv = rng.standard_normal((4, 5)).astype(np.float32)
    exe.forward(is_train=True, x=xv)
    h1, h2 = rng.standard_normal((2, 4, 3)).astype(np.float32)
    exe.backward(h1)
    first = exe.grad_dict["fc_weight"].copy()
    exe.backward(h2)
    assert all(exe.grad_dict["fc_weight"] is not b for b in exe.plan.out_buffers.values())
    np.testing.assert_allclose(first, h1.T @ xv, rtol=1e-5)
    np.testing.assert_allclose(exe.grad_dict["fc_weight"], h2.T @ xv, rtol=1e-5)
    np.testing.assert_allclose(exe.grad_dict["fc_bias"], h1.sum(0) + h2.sum(0), rtol=1e-5)


def test_bind_with_partial_args_grad_and_list_forms():
    rng = np.random.default_rng(12)
    av, bv, cv = rng.standard_normal((3, 2, 2))
    A, B, C = S.Variable("a"), S.Variable("b"), S.Variable("c")
    net = A * B + C  # d/da = h*b, d/db = h*a, d/dc = h
    h = rng.standard_normal((2, 2))
    # args_grad dict naming only 'a' with a string grad_req: the others get no gradient (MXNet)
    ga = np.full((2, 2), 9.0)
    exe = net.bind(sg.cpu(), [av, bv, cv], args_grad={"a": ga})
    assert exe.grad_dict == {"a": ga, "b": None, "c": None} and exe.grad_arrays[1:] == [None, None]
    assert all(e is None for e in exe.plan.grad_slots[1:])
    exe.forward(is_train=True)
    exe.backward(h)
    np.testing.assert_allclose(ga, h * bv)
    # list args_grad with None entries
    gc = np.full((2, 2), 9.0)
    exe = net.bind(sg.cpu(), {"a": av, "b": bv, "c": cv}, args_grad=[None, None, gc])
    exe.forward(is_train=True)
    exe.backward(h)
    np.testing.assert_allclose(gc, h)
    # no args_grad at all: nothing is differentiated, and backward has nothing to do
    exe = net.bind(sg.cpu(), {"a": av, "b": bv, "c": cv})
    assert exe.grad_arrays == [None, None, None] and exe.plan.backward_instrs == []
    # a dict grad_req that asks for a gradient args_grad has no array for is an error
    with pytest.raises(ValueError, match="'b'"):
        net.bind(sg.cpu(), [av, bv, cv], args_grad={"a": ga}, grad_req={"a": "write", "b": "add"})


def test_simple_bind_allocates_zeros_with_dtypes_and_grad_req_forms():
    x = S.Variable("x")
    net = S.BatchNorm(S.FullyConnected(x, num_hidden=3, name="fc"), name="bn")
    exe = net.simple_bind(
        sg.cpu(), grad_req={"fc_weight": "write", "bn_beta": "add"}, type_dict={"x": np.float64}, x=(4, 5)
    )
    want_shapes = {"x": (4, 5), "fc_weight": (3, 5), "fc_bias": (3,), "bn_gamma": (3,), "bn_beta": (3,)}
    assert list(exe.arg_dict) == net.list_arguments() == list(want_shapes)
    for name, arr in exe.arg_dict.items():
        assert arr.shape == want_shapes[name] and arr.dtype == np.float64, name  # float64 inferred from x
        assert not arr.any(), name
    assert list(exe.aux_dict) == ["bn_moving_mean", "bn_moving_var"]
    assert all(a.shape == (3,) and a.dtype == np.float64 and not a.any() for a in exe.aux_arrays)
    # names missing from a grad_req dict get 'null': no array, no gradient slot
    assert [n for n, g in exe.grad_dict.items() if g is not None] == ["fc_weight", "bn_beta"]
    assert exe.grad_dict["fc_weight"].shape == (3, 5) and not exe.grad_dict["fc_weight"].any()
    assert [s is not None for s in exe.plan.grad_slots] == [False, True, False, False, True]
    # a list grad_req, and float32 by default
    exe = net.simple_bind(sg.cpu(), grad_req=["null", "write", "write", "null", "add"], x=(4, 5))
    assert exe.arg_dict["x"].dtype == np.float32 and exe.grad_dict["x"] is None
    assert exe.grad_dict["fc_bias"].dtype == np.float32


def _needed_backward(plan):
    """Backward instructions whose outputs reach some computed argument gradient."""
    needed = {s for s in plan.grad_slots if s is not None}
    used = []
    for ins in reversed(plan.backward_instrs):
        if any(s in needed for s in ins.outs):
            needed.update(ins.ins)
            used.append(ins)
    return used


@pytest.mark.parametrize(
    "req",
    [
        "write",
        {"x": "write"},
        {"fc1_weight": "write"},
        {"fc2_weight": "write", "fc2_bias": "add"},
        {"fc1_bias": "write", "fc2_bias": "write"},
    ],
)
def test_backward_plan_holds_only_work_the_requested_gradients_need(req):
    x = S.Variable("x")
    h = S.Activation(S.FullyConnected(x, num_hidden=5, name="fc1"), act_type="tanh", name="t")
    loss = S.MakeLoss(S.sum(S.square(S.FullyConnected(h, num_hidden=2, name="fc2"))), name="loss")
    exe = loss.simple_bind(sg.cpu(), grad_req=req, x=(4, 3))
    plan = exe.plan
    wanted = {n for n in loss.list_arguments() if req == "write" or n in req}
    assert {n for n, s in zip(loss.list_arguments(), plan.grad_slots) if s is not None} == wanted
    # every backward instruction feeds a requested gradient: nothing is computed for a 'null' argument
    assert len(_needed_backward(plan)) == len(plan.backward_instrs)
    names = " ".join(ins.node.name for ins in plan.backward_instrs)
    if "x" not in wanted and "fc1_weight" not in wanted and "fc1_bias" not in wanted:
        assert "t_backward" not in names and "fc1_backward" not in names  # nothing flows below fc2
    if "x" not in wanted:
        # no gradient with respect to fc1's data: no dot with fc1's weight
        w1 = exe.plan.arg_slots[1]
        assert not any(ins.node.op_name == "dot" and w1 in ins.ins for ins in plan.backward_instrs)
    # and the gradients that are computed are right (plain numpy derivation)
    rng = np.random.default_rng(13)
    vals = {n: rng.standard_normal(a.shape).astype(np.float32) for n, a in exe.arg_dict.items()}
    exe.forward(is_train=True, **vals)
    exe.backward()
    v = {k: a.astype(np.float64) for k, a in vals.items()}
    z1 = v["x"] @ v["fc1_weight"].T + v["fc1_bias"]
    hv = np.tanh(z1)
    y = hv @ v["fc2_weight"].T + v["fc2_bias"]
    gy = 2 * y  # d sum(y^2) / dy
    gz1 = (gy @ v["fc2_weight"]) * (1 - hv**2)
    ref = {
        "fc2_weight": gy.T @ hv,
        "fc2_bias": gy.sum(0),
        "fc1_weight": gz1.T @ v["x"],
        "fc1_bias": gz1.sum(0),
        "x": gz1 @ v["fc1_weight"],
    }
    for n in loss.list_arguments():
        if n in wanted:
            np.testing.assert_allclose(exe.grad_dict[n], ref[n], rtol=1e-4, atol=1e-5, err_msg=n)
        else:
            assert exe.grad_dict[n] is None


def test_forward_kwargs_are_copied_into_the_bound_arrays():
    x = S.Variable("x")
    exe = (x * 3.0).simple_bind(sg.cpu(), x=(2, 2))
    bound = exe.arg_dict["x"]
    src = np.arange(4.0).reshape(2, 2)  # float64 into a float32 argument
    out = exe.forward(x=src)[0]
    assert exe.arg_dict["x"] is bound and bound.dtype == np.float32  # copied, not rebound
    np.testing.assert_array_equal(bound, src)
    src[...] = -1.0  # later changes to the source are not seen
    np.testing.assert_array_equal(exe.forward()[0], np.arange(4.0).reshape(2, 2) * 3)
    np.testing.assert_array_equal(out, np.arange(4.0).reshape(2, 2) * 3)
    exe.forward(x=[[1, 2], [3, 4]])  # nested lists are accepted too
    np.testing.assert_array_equal(bound, [[1, 2], [3, 4]])


def test_backward_without_out_grads_needs_every_differentiated_head_to_be_a_loss():
    x, y = S.Variable("x"), S.Variable("y")
    g = S.Group([S.MakeLoss(S.sum(x * x), name="l"), y * 2.0])
    xv, yv = np.array([1.0, -2.0]), np.array([3.0, 4.0])
    gx, gy = np.full(2, 5.0), np.full(2, 5.0)
    exe = g.bind(sg.cpu(), {"x": xv, "y": yv}, args_grad={"x": gx, "y": gy})
    exe.forward(is_train=True)
    with pytest.raises(ValueError, match=f"head gradient is required for output '{g.list_outputs()[1]}'"):
        exe.backward()
    np.testing.assert_array_equal(gx, 5.0)
    np.testing.assert_array_equal(gy, 5.0)
    # giving the non-loss head by name is enough; the loss head's gradient is ignored anyway
    exe.backward({g.list_outputs()[1]: np.array([1.0, 10.0])})
    np.testing.assert_array_equal(gx, 2 * xv)
    np.testing.assert_array_equal(gy, [2.0, 20.0])
    # with y's gradient not requested, None is fine: the only differentiated head is a loss
    exe = g.bind(sg.cpu(), {"x": xv, "y": yv}, args_grad={"x": np.zeros(2)})
    exe.forward(is_train=True)
    exe.backward()
    np.testing.assert_array_equal(exe.grad_dict["x"], 2 * xv)


def test_array_properties_follow_list_order():
    x = S.Variable("x")
    net = S.Group([S.BatchNorm(x, name="bn"), S.sum(x, name="s")])
    exe = net.simple_bind(sg.cpu(), grad_req={"x": "write", "bn_beta": "write"}, x=(2, 3))
    assert exe.arg_arrays == [exe.arg_dict[n] for n in net.list_arguments()]
    assert exe.grad_arrays == [exe.grad_dict[n] for n in net.list_arguments()]
    assert exe.aux_arrays == [exe.aux_dict[n] for n in net.list_auxiliary_states()]
    assert exe.grad_arrays[1] is None and exe.grad_arrays[2] is exe.grad_dict["bn_beta"]
    # MXNet allocates the outputs at bind: zeros until the first forward
    assert [(o.shape, float(abs(o).sum())) for o in exe.outputs] == [((2, 3), 0.0), ((1,), 0.0)]
    xv = np.arange(6.0).reshape(2, 3)
    outs = exe.forward(x=xv)
    assert outs is exe.outputs and list(exe.output_dict) == ["bn_output", "s_output"]
    assert exe.output_dict["s_output"] is outs[1]
    np.testing.assert_allclose(outs[1], [xv.sum()])


def test_reshape_shares_memory_and_checks_its_arguments():
    x = S.Variable("x")
    net = S.FullyConnected(x, num_hidden=3, name="fc")
    exe = net.simple_bind(sg.cpu(), x=(4, 5))
    small = exe.reshape(x=(2, 5))
    # as MXNet: the smaller array is a view of the front of the old one, the same gradient arrays
    small.arg_dict["x"][:] = 7.0
    np.testing.assert_array_equal(exe.arg_dict["x"][:2], 7.0)
    np.testing.assert_array_equal(exe.arg_dict["x"][2:], 0.0)
    assert small.grad_dict["fc_weight"] is exe.grad_dict["fc_weight"]
    assert small.grad_dict["x"].shape == (2, 5)
    exe.forward(is_train=True)
    small.forward(is_train=True)
    small.backward(np.ones((2, 3), np.float32))
    np.testing.assert_allclose(exe.grad_dict["fc_weight"], np.full((3, 5), 14.0))  # sum over 2 rows of 7
    # a change of num_hidden-dependent shapes must be asked for
    y = S.Variable("y")
    two = S.elemwise_add(x, y, name="p").simple_bind(sg.cpu(), x=(4,), y=(4,))
    with pytest.raises(ValueError, match="'y'.*partial_shaping"):
        two.reshape(x=(2,))
    assert two.reshape(partial_shaping=True, x=(2,)).arg_dict["y"].shape == (2,)
    with pytest.raises(ValueError, match="'x'.*allow_up_sizing"):
        exe.reshape(x=(40, 5))
    with pytest.raises(ValueError, match="'nope'"):
        exe.reshape(nope=(1,))


def test_copy_params_from_converts_and_validates_before_copying():
    x = S.Variable("x")
    net = S.BatchNorm(S.FullyConnected(x, num_hidden=2, name="fc"), name="bn")
    exe = net.simple_bind(sg.cpu(), x=(3, 4))
    w = np.arange(8.0).reshape(2, 4)  # float64 into float32
    exe.copy_params_from({"fc_weight": w, "fc_bias": [1.0, 2.0]}, {"bn_moving_var": np.full(2, 3.0)})
    np.testing.assert_array_equal(exe.arg_dict["fc_weight"], w)
    assert exe.arg_dict["fc_weight"].dtype == np.float32
    np.testing.assert_array_equal(exe.arg_dict["fc_bias"], [1.0, 2.0])
    np.testing.assert_array_equal(exe.aux_dict["bn_moving_var"], 3.0)
    before = {k: v.copy() for k, v in exe.arg_dict.items()}
    with pytest.raises(ValueError, match="'fc_bias' has shape \\(3,\\), expected \\(2,\\)"):
        exe.copy_params_from({"fc_weight": w * 0, "fc_bias": np.ones(3)})
    with pytest.raises(ValueError, match="'bn_nope'.*auxiliary"):
        exe.copy_params_from({"fc_weight": w * 0}, {"bn_nope": np.ones(2)})
    for k, v in before.items():  # the valid fc_weight given alongside was not copied either
        np.testing.assert_array_equal(exe.arg_dict[k], v, err_msg=k)
    exe.copy_params_from({"fc_weight": w * 2, "other": np.ones(1)}, {"bn_nope": np.ones(2)}, allow_extra_params=True)
    np.testing.assert_array_equal(exe.arg_dict["fc_weight"], w * 2)


def test_bind_on_any_cpu_id_takes_numpy_arrays():
    x = S.Variable("x")
    exe = (x + 1.0).bind(sg.cpu(1), {"x": np.zeros(2)}, args_grad={"x": np.zeros(2)})
    np.testing.assert_array_equal(exe.forward(is_train=True)[0], [1.0, 1.0])
    exe.backward(np.array([2.0, 3.0]))
    np.testing.assert_array_equal(exe.grad_dict["x"], [2.0, 3.0])


def test_forward_that_raises_leaves_auxiliary_states_alone():
    x = S.Variable("x")
    net = S.sqrt(S.BatchNorm(x, momentum=0.5, name="bn"))
    mm, mv = np.full(2, 0.25), np.full(2, 4.0)
    exe = net.bind(
        sg.cpu(),
        {"x": np.arange(6.0).reshape(3, 2), "bn_gamma": np.ones(2), "bn_beta": np.zeros(2)},
        aux_states=[mm, mv],
    )
    with np.errstate(invalid="raise"), pytest.raises(FloatingPointError):
        exe.forward(is_train=True)  # sqrt of the negative half of the normalised batch
    np.testing.assert_array_equal(mm, 0.25)
    np.testing.assert_array_equal(mv, 4.0)


def test_mxnet_bind_keywords_are_accepted_when_they_ask_for_nothing_missing():
    x = S.Variable("x")
    net = x * 2.0
    exe = net.simple_bind(
        sg.cpu(), "write", None, stype_dict={"x": "default"}, group2ctx=None, shared_exec=None, x=(2,)
    )
    exe2 = net.bind(sg.cpu(), {"x": np.ones(2)}, group2ctx=None, shared_exec=exe)
    np.testing.assert_array_equal(exe2.forward()[0], [2.0, 2.0])
    with pytest.raises(NotImplementedError, match="group2ctx"):  # one device per executor (cpu contexts aside)
        net.bind(sg.cpu(), {"x": np.ones(2)}, group2ctx={"dev1": sg.gpu(1)})
    with pytest.raises(NotImplementedError, match="sparse"):
        net.simple_bind(sg.cpu(), stype_dict={"x": "csr"}, x=(2,))
    with pytest.raises(NotImplementedError, match="shared_buffer"):
        net.simple_bind(sg.cpu(), shared_buffer={}, shared_arg_names=["x"], x=(2,))
    with pytest.raises(TypeError, match="nope"):
        net.bind(sg.cpu(), {"x": np.ones(2)}, nope=1)


def test_simple_bind_arrays_are_zero_aligned_and_independent():
    # simple_bind carves its arrays from one allocation per dtype: each must still be its own zeroed,
    # C-contiguous, writable, 64-byte-aligned array that no other array overlaps
    x, w, e = sg.sym.Variable("x"), sg.sym.Variable("w", dtype="float64"), sg.sym.Variable("e")
    y = sg.sym.Group([sg.sym.FullyConnected(x, num_hidden=3, name="fc"), sg.sym.sum(w), sg.sym.sum(e)])
    exe = y.simple_bind(sg.cpu(), x=(5, 7), w=(2, 3), e=(1, 4))
    arrays = [a for a in exe.arg_arrays + exe.grad_arrays if a is not None]
    assert len(arrays) == 10 and {a.dtype for a in arrays} == {np.dtype("float32"), np.dtype("float64")}
    for a in arrays:
        assert a.flags.c_contiguous and a.flags.writeable and not a.any()
        assert a.size == 0 or a.ctypes.data % 64 == 0
    for k, a in enumerate(arrays):
        a[...] = k + 1
    assert all((a == k + 1).all() for k, a in enumerate(arrays))  # no array wrote into another
