"""Executor behaviours MXNet 1.9.1's own tests pin down (symgrad's tests of the same behaviour; the MXNet test each
one follows is named in the test's name or docstring). References are numpy written here, or what MXNet 1.9.1
printed for the same graph (quoted where used; ``tests/fixtures/mxnet_monitor_names.json`` for the monitor)."""

import json
import os
import re

import numpy as np
import pytest

import symgrad as sg
from symgrad.executor.monitor_names import monitor_input_names
from symgrad.opdef import get_op, list_ops

S = sg.sym
HERE = os.path.dirname(os.path.abspath(__file__))


# -- backward() before any forward (test_operator.py::test_repeat, ::test_tile) ----------------------------------
@pytest.mark.parametrize("axis", [0, 1])
def test_repeat_backward_runs_before_any_forward(axis):
    rng = np.random.default_rng(axis)
    data = rng.integers(0, 10, (3, 4)).astype(np.float64)
    grad = np.empty((3, 4))
    exe = S.repeat(S.Variable("data"), repeats=2, axis=axis).bind(sg.cpu(), args=[data], args_grad=[grad])
    head = rng.integers(0, 10, (6, 4) if axis == 0 else (3, 8)).astype(np.float64)
    exe.backward(head)  # no forward: the gradient reads only the head gradient
    # each input element was repeated twice along ``axis``: its gradient sums those two head entries
    expected = head.reshape(3, 2, 4).sum(axis=1) if axis == 0 else head.reshape(3, 4, 2).sum(axis=2)
    np.testing.assert_array_equal(grad, expected)


def test_tile_backward_runs_before_any_forward():
    head = np.arange(24.0).reshape(4, 6)
    grad = np.empty((2, 2))
    exe = S.tile(S.Variable("data"), reps=(2, 3)).bind(sg.cpu(), args=[np.ones((2, 2))], args_grad=[grad])
    exe.backward(head)
    # element (i, j) was copied to (i + 2a, j + 2b) for a < 2, b < 3
    expected = sum(head[2 * a : 2 * a + 2, 2 * b : 2 * b + 2] for a in range(2) for b in range(3))
    np.testing.assert_array_equal(grad, expected)


def test_backward_before_forward_is_refused_when_it_reads_forward_values():
    grad = np.zeros(2)
    exe = S.exp(S.Variable("x")).bind(sg.cpu(), args=[np.ones(2)], args_grad=[grad])
    with pytest.raises(sg.base.SymgradError, match="forward"):
        exe.backward(np.ones(2))  # exp's gradient reads exp(x), which no forward has computed
    np.testing.assert_array_equal(grad, 0.0)


# -- Executor.reshape (test_executor.py::test_reshape) ------------------------------------------------------------
def test_reshape_shares_memory_with_the_original():
    y = S.FullyConnected(S.Variable("x"), num_hidden=4)
    exe = y.simple_bind(sg.cpu(), x=(5, 4), grad_req="null")
    exe.arg_arrays[0][:] = 1
    exe.arg_arrays[1][:] = np.ones((4, 4))
    exe.arg_arrays[2][:] = 0
    small = exe.reshape(x=(3, 4))
    small.forward(is_train=False)
    np.testing.assert_array_equal(small.outputs[0], 4.0)  # 1 * 1 summed over 4 inputs
    np.testing.assert_array_equal(exe.outputs[0][:3], 4.0)  # written into the original's output memory
    np.testing.assert_array_equal(exe.outputs[0][3:], 0.0)
    exe.forward(is_train=False)
    np.testing.assert_array_equal(exe.outputs[0], 4.0)
    big = exe.reshape(allow_up_sizing=True, x=(6, 4))
    big.arg_arrays[0][:] = 0  # a larger data array is new memory
    np.testing.assert_array_equal(exe.arg_arrays[0], 1.0)
    assert big.arg_arrays[1] is exe.arg_arrays[1]  # the weight keeps its shape: the same array


def test_reshape_to_a_zero_size_dimension():
    """Was a TypeError; a 0 in the new shape is a zero size, as in bind (MXNet 1.9.1 refuses it in both shape
    modes: 'Shape dim size cannot be a negative value -1' / 'target shape must have the same size')."""
    exe = S.relu(S.Variable("x")).simple_bind(sg.cpu(), x=(5, 4))
    empty = exe.reshape(x=(0, 4))
    assert empty.arg_arrays[0].shape == (0, 4)
    assert empty.forward(is_train=True)[0].shape == (0, 4)
    empty.backward(np.zeros((0, 4)))
    assert empty.grad_arrays[0].shape == (0, 4)


# -- debug_str's memory summary (test_symbol.py / test_operator.py::test_zero_prop) -------------------------------
def _allocated_mb(exe):
    return int(re.search(r"Total (\d+) MB allocated", exe.debug_str()).group(1))


def test_debug_str_memory_summary_shrinks_without_gradients():
    data = S.Variable("data")
    for _ in range(10):
        data = data * data
    shape = (10, 3, 256, 256)  # 7.5 MiB a float32 value
    big = _allocated_mb(data.simple_bind(sg.cpu(), data=shape))
    small1 = _allocated_mb(data.simple_bind(sg.cpu(), data=shape, grad_req="null"))
    small2 = _allocated_mb(S.stop_gradient(data).simple_bind(sg.cpu(), data=shape))
    # without a backward, a forward value is freed after its one reader: at most two 7.5 MiB values live at once
    # (MXNet 1.9.1 prints 15 for both); with one, every product is kept for the backward (MXNet: 90)
    assert small1 == small2 == 15
    assert big >= 10 * 7.5


# -- get_optimized_symbol (test_symbol.py::test_eliminate_common_expr) --------------------------------------------
def _cse_cases():
    a, b, c = S.Variable("a"), S.Variable("b"), S.Variable("c")
    d = a + 1
    # (symbol, internals saved by merging), as MXNet 1.9.1 reports them
    return [
        ((a + 1) + (a + 2), 0),
        ((a + b) + (a + b), 1),
        (((a + b) + c) + ((a + b) + c), 2),
        (S.Group([a * d, a * d]), 0),  # merged, then a _copy isolates the second output
        (S.Group([a * d + b, a * d + b]), 1),
        (S.Dropout(a, p=0.5) + S.Dropout(a, p=0.5), 0),  # random: never merged
    ]


@pytest.mark.parametrize("case", range(6))
def test_get_optimized_symbol_eliminates_common_expressions(case, monkeypatch):
    sym, saved = _cse_cases()[case]
    rng = np.random.default_rng(case)
    data = {n: rng.uniform(size=(3, 4)) for n in sym.list_inputs()}
    shapes = {n: (3, 4) for n in data}
    types = {n: np.float64 for n in data}
    monkeypatch.setenv("MXNET_ELIMINATE_COMMON_EXPR", "0")
    orig = sym.simple_bind(sg.cpu(), grad_req="write", type_dict=types, **shapes)
    monkeypatch.setenv("MXNET_ELIMINATE_COMMON_EXPR", "1")
    cse = sym.simple_bind(sg.cpu(), grad_req="write", type_dict=types, **shapes)
    monkeypatch.delenv("MXNET_ELIMINATE_COMMON_EXPR")  # read at bind: the executors keep what they saw
    n_orig = len(orig.get_optimized_symbol().get_internals().list_outputs())
    n_cse = len(cse.get_optimized_symbol().get_internals().list_outputs())
    assert n_cse + saved == n_orig
    if case != 5:  # (dropout draws random masks)
        for out_o, out_c in zip(orig.forward(is_train=True, **data), cse.forward(is_train=True, **data)):
            np.testing.assert_array_equal(out_o, out_c)


def test_get_optimized_symbol_names_the_isolating_copy_as_mxnet():
    a = S.Variable("a")
    d = a + 1
    m1, m2 = S.elemwise_mul(a, d, name="m"), S.elemwise_mul(a, d, name="m")
    opt = S.Group([m1, m2]).simple_bind(sg.cpu(), a=(2,)).get_optimized_symbol()
    # MXNet 1.9.1: ['_mul0_output', '_mul0_0_copy_output'] for its automatic name _mul0
    assert opt.list_outputs() == ["m_output", "m_0_copy_output"]
    again = S.Group([m1, m1]).simple_bind(sg.cpu(), a=(2,)).get_optimized_symbol()
    assert again.list_outputs() == ["m_output", "m_output"]  # one output given twice: no copy (as MXNet)


# -- monitor names (test_operator.py::test_op_all_names_monitor) --------------------------------------------------
def _monitored(sym, **shapes):
    names = []
    exe = sym.simple_bind(sg.cpu(), grad_req="null", **shapes)
    exe.set_monitor_callback(lambda name, arr: names.append(name), monitor_all=True)
    exe.forward()
    return names


def test_op_all_names_monitor():
    data = S.Variable("data")
    shape = {"data": (10, 3, 10, 10)}
    conv = S.Convolution(data, kernel=(2, 2), num_filter=1, name="conv")
    assert _monitored(conv, **shape) == [
        "data",
        "conv_data",
        "conv_weight",
        "conv_weight",
        "conv_bias",
        "conv_bias",
        "conv_output",
    ]
    act = S.Activation(data, act_type="relu", name="act")
    assert _monitored(act, **shape) == ["data", "act_input0", "act_output"]  # (was 'act_data')
    concat = S.concat(data, data, dim=0, name="concat")
    assert _monitored(concat, **shape) == ["data", "concat_arg0", "data", "concat_arg1", "concat_output"]
    sa = S.SoftmaxActivation(data, name="softmax")
    assert _monitored(sa, **shape) == ["data", "softmax_input0", "softmax_output"]
    up = S.UpSampling(data, scale=2, sample_type="nearest", num_args=1, name="upsampling")
    assert _monitored(up, **shape) == ["data", "upsampling_arg0", "upsampling_output"]
    length = S.Variable("length")
    sm = S.softmax(data, length, axis=1, use_length=True, name="softmax")
    assert _monitored(sm, data=(10, 3, 10, 10), length=(10, 10, 10)) == [
        "data",
        "softmax_data",
        "length",
        "softmax_length",
        "softmax_output",
    ]


#: parameters that decide some operators' input names (as the recording built them)
_PARAMS = {
    "no_bias": False,
    "use_data_lengths": False,
    "use_label_lengths": False,
    "use_sequence_length": False,
    "state_outputs": False,
    "no_trans": False,
}


def _naming_params(op, op_name, want):
    params = {k: v for k, v in _PARAMS.items() if k in op.params}
    if op_name == "RNN":
        params["mode"] = "lstm"
    if "use_length" in op.params:
        params["use_length"] = "length" in want
    if op.variadic:
        params[op.variadic] = len(want)
    if op_name == "amp_multicast":
        params["num_outputs"] = len(want)
    # the parameters' defaults underneath (a required one: None); names depend only on the ones above
    return {**{k: getattr(p, "default", None) for k, p in op.params.items()}, **params}


def _mxnet_recorded():
    with open(os.path.join(HERE, "fixtures", "mxnet_monitor_names.json")) as f:
        return json.load(f)["inputs"]


@pytest.mark.parametrize("op_name", sorted(n for n in _mxnet_recorded() if n in list_ops()))
def test_monitor_input_names_match_mxnet(op_name):
    """Every operator MXNet 1.9.1 ran in the recording that symgrad has (the recording also holds MXNet's own
    backward ops): symgrad's monitor names its inputs as MXNet did."""
    want = _mxnet_recorded()[op_name]
    op = get_op(op_name)
    parsed = _naming_params(op, op_name, want)
    inputs = tuple((sg.graph.Node(None, f"in{k}", {}, {}, (), 1), 0) for k in range(len(want)))
    node = sg.graph.Node(op, "op", parsed, {}, inputs, 1)
    got = monitor_input_names(node)
    assert got[: len(want)] == want


# -- group2ctx (test_model_parallel.py::test_chain, ::test_chain_type_device; test_multi_device_exec.py) -----------
def _chain(dtype):
    d1, d2, d3 = (S.Variable(n, dtype=dtype) for n in ("data1", "data2", "data3"))
    with sg.AttrScope(ctx_group="dev1"):
        net = (d1 + d2) * dtype(3)
    with sg.AttrScope(ctx_group="dev2"):
        net = net + d3
    return net


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_chain_on_two_cpu_contexts(dtype):
    net = _chain(dtype)
    shape = (4, 5)
    arr = [np.full(shape, k + 1, dtype) for k in range(3)]
    grads = [np.empty(shape, dtype) for _ in range(3)]
    exe = net.bind(sg.cpu(0), args=arr, args_grad=grads, group2ctx={"dev1": sg.cpu(0), "dev2": sg.cpu(1)})
    out = exe.forward(is_train=True)[0]
    np.testing.assert_array_equal(out, (1 + 2) * 3 + 3)
    exe.backward([np.ones(shape, dtype)])
    for g, want in zip(grads, (3, 3, 1)):  # d/d data1 = d/d data2 = 3, d/d data3 = 1
        np.testing.assert_array_equal(g, want)
    assert exe.arg_contexts == [sg.cpu(0), sg.cpu(0), sg.cpu(1)]
    assert exe.output_contexts == [sg.cpu(1)]  # MXNet: exe.outputs[0].context is cpu(1)


def test_chain_copies_are_the_ones_mxnet_inserts():
    with sg.NameManager():  # automatic names from 0, as in a fresh MXNet process
        net = _chain(np.float64)
    exe = net.bind(
        sg.cpu(0), args=[np.ones((2, 2))] * 3, args_grad=[np.zeros((2, 2)) for _ in range(3)],
        group2ctx={"dev1": sg.cpu(0), "dev2": sg.cpu(1)},
    )  # fmt: skip
    text = exe.debug_str()
    # MXNet 1.9.1 inserts _mulscalar0_0_copy (forward, dev1 -> dev2) and one copy of the head gradient
    # (dev2 -> dev1) for the backward of _mulscalar0; data3 is read where it lives
    assert "Op:_CrossDeviceCopy, Name=_mulscalar0_0_copy" in text
    assert text.count("Op:_CrossDeviceCopy") == 2
    opt = exe.get_optimized_symbol()
    internals = opt.get_internals().list_outputs()
    assert internals == [
        "data1",
        "data2",
        "_plus0_output",
        "_mulscalar0_output",
        "_mulscalar0_0_copy_output",
        "data3",
        "_plus1_output",
    ]  # MXNet 1.9.1's, with _copy for its _CrossDeviceCopy
    same = S.load_json(opt.tojson()).bind(sg.cpu(), args=[np.ones((2, 2))] * 3)
    np.testing.assert_array_equal(same.forward()[0], exe.forward()[0])


def test_ctx_group_places_simple_bind_arrays():
    with sg.AttrScope(ctx_group="stage1"):
        data = S.Variable("data")
        act1 = S.Activation(S.FullyConnected(data=data, name="fc1", num_hidden=8), name="relu1", act_type="relu")
    stage1 = set(act1.list_arguments())
    with sg.AttrScope(ctx_group="stage2"):
        fc3 = S.BatchNorm(S.FullyConnected(data=act1, name="fc2", num_hidden=4))
        mlp = S.SoftmaxOutput(data=fc3, name="softmax")
    group2ctx = {"stage1": sg.cpu(1), "stage2": sg.cpu(2)}
    null_data = {a: "null" if a == "data" else "write" for a in mlp.list_arguments()}
    for grad_req in ("write", null_data):
        exe = mlp.simple_bind(sg.cpu(0), group2ctx=group2ctx, data=(1, 20), grad_req=grad_req)
        for name, ctx in zip(mlp.list_arguments(), exe.arg_contexts):
            assert ctx == group2ctx["stage1" if name in stage1 else "stage2"], name
        assert exe.aux_contexts == [sg.cpu(2), sg.cpu(2)]
        exe.forward(is_train=True)
        exe.backward()


def test_group2ctx_errors_name_the_group():
    net = _chain(np.float64)
    args = [np.ones(2)] * 3
    with pytest.raises(sg.base.BindError, match="dev2"):  # MXNet: 'The device assignment not found for group'
        net.bind(sg.cpu(), args=args, group2ctx={"dev1": sg.cpu(1)})
    with pytest.raises(TypeError, match="dev1"):
        net.bind(sg.cpu(), args=args, group2ctx={"dev1": "cpu(1)", "dev2": sg.cpu(0)})
    with pytest.raises(NotImplementedError, match="dev1"):
        net.bind(sg.cpu(), args=args, group2ctx={"dev1": sg.gpu(0), "dev2": sg.cpu(0)})


def test_gradient_computed_on_another_context_is_copied_to_its_argument():
    """MXNet 1.9.1 refuses this graph ('Trying to save gradient to cpu(0) while its source node
    "_mulscalar0_backward" computes it on cpu(1)'); symgrad copies the gradient to the argument's context."""
    a = S.Variable("a")
    with sg.AttrScope(ctx_group="g1"):
        b = a * 2
    with sg.AttrScope(ctx_group="g2"):
        c = b + 1
    exe = c.simple_bind(sg.cpu(0), a=(2,), group2ctx={"g1": sg.cpu(1), "g2": sg.cpu(2)})
    exe.forward(is_train=True, a=np.array([1.0, 2.0]))
    exe.backward(np.ones(2))
    np.testing.assert_array_equal(exe.grad_arrays[0], [2.0, 2.0])
    assert exe.arg_contexts == [sg.cpu(0)]
    assert "to cpu(0)" in exe.debug_str() or "-> cpu(0)" in exe.debug_str()


# -- a buffer given for a 'null' argument (MXNet 1.9.1: bind(args_grad={'x': a, ...}, grad_req={'x': 'null', ...})
# keeps ``a`` in grad_dict['x'] and never writes it; simple_bind allocates none: grad_dict['x'] is None) ---------
def test_bind_keeps_the_buffer_given_for_a_null_argument_untouched():
    x, w = S.Variable("x"), S.Variable("w")
    given = np.full(2, 7.0)
    exe = (x * w).bind(
        sg.cpu(),
        {"x": np.ones(2), "w": np.full(2, 3.0)},
        args_grad={"x": given, "w": np.zeros(2)},
        grad_req={"x": "null", "w": "write"},
    )
    exe.forward(is_train=True)
    exe.backward(np.ones(2))
    assert exe.grad_dict["x"] is given and np.array_equal(given, [7.0, 7.0])  # MXNet printed [7. 7.]
    np.testing.assert_array_equal(exe.grad_dict["w"], [1.0, 1.0])  # d(x*w)/dw = x = 1
    assert (x * w).simple_bind(sg.cpu(), x=(2,), w=(2,), grad_req={"x": "null", "w": "write"}).grad_dict["x"] is None
