"""Control flow (``sg.sym.contrib.foreach``, ``while_loop``, ``cond``) against MXNet 1.9.1.

The cases live in ``tests/fixtures/control_flow_cases.py`` and are recorded in float64 by
``tests/fixtures/make_control_flow_fixtures.py`` under ``tests/fixtures/control_flow/`` (MXNet's JSON, inputs,
head gradients, outputs, gradients). Each test names the MXNet test of
tests/python/unittest/test_contrib_control_flow.py whose behaviour it checks.
"""

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import SerializationError
from symgrad.test_utils import check_numeric_gradient

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
import control_flow_cases as cases  # noqa: E402

RUNS = [(name, seed) for name in cases.CASES for seed in cases.SEEDS.get(name, (0,))]


def _fixture(name, seed):
    data = np.load(FIXTURES / "control_flow" / f"{name}_{seed}.npz")
    pick = lambda prefix: {k[len(prefix) :]: data[k] for k in data.files if k.startswith(prefix)}  # noqa: E731
    args, grads = pick("arg:"), pick("grad:")
    heads = [data[f"head:{k}"] for k in range(len(pick("head:")))]
    outs = [data[f"out:{k}"] for k in range(len(pick("out:")))]
    return args, heads, outs, grads


def _mxnet_json(name):
    return (FIXTURES / "control_flow" / f"{name}.json").read_text()


def _build(name):
    """The case built with symgrad, names counted afresh as the fixture script does for MXNet."""
    sg.sym.AttrScope._subgraph_names.clear()
    with sg.sym.NameManager():
        return cases.CASES[name](sg.sym)


def _run(sym, args, heads, backward=True):
    grads = {k: np.zeros_like(v) for k, v in args.items()} if backward else None
    ex = sym.bind(None, {k: v.copy() for k, v in args.items()}, args_grad=grads)
    outs = [np.array(o) for o in ex.forward(is_train=backward)]
    if backward:
        ex.backward(heads)
    return outs, {k: np.array(v) for k, v in ex.grad_dict.items() if v is not None}


def _valid_rows(name, outs):
    """MXNet leaves the step-output rows of a while_loop past its trip count uninitialised (symgrad zeros them):
    compare the rows of the steps taken (the trip count is the loop counter output ``fi``)."""
    if name != "while_loop_sum":
        return outs
    n = int(outs[1][0])
    return [outs[0][:n], *outs[1:]]


def _compare(name, got, want):
    for k, (g, w) in enumerate(zip(_valid_rows(name, got), _valid_rows(name, want))):
        assert g.shape == w.shape, f"{name} output {k}: shape {g.shape} vs MXNet's {w.shape}"
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=f"{name} output {k}")


@pytest.mark.parametrize(("name", "seed"), RUNS)
@pytest.mark.parametrize("source", ["mxnet_json", "symgrad_api"])
def test_forward_and_gradients_match_mxnet(name, seed, source):
    """test_foreach / test_foreach_nested / test_while_loop_for_foreach / test_cond / test_while_loop_nested /
    test_while_loop_rnn / test_cut_subgraph_* / test_uniq_name: forward and backward of the same network in
    MXNet and symgrad, from MXNet's own JSON and from symgrad's ``sym.contrib`` API (forward only where MXNet
    1.9.1 cannot bind the backward, ``control_flow_cases.FORWARD_ONLY``)."""
    args, heads, want_outs, want_grads = _fixture(name, seed)
    sym = sg.sym.load_json(_mxnet_json(name)) if source == "mxnet_json" else _build(name)
    outs, grads = _run(sym, args, heads, backward=bool(want_grads))
    _compare(name, outs, want_outs)
    for k, want in want_grads.items():
        np.testing.assert_allclose(grads[k], want, rtol=1e-10, atol=1e-12, err_msg=f"{name} gradient of {k}")


@pytest.mark.parametrize("name", list(cases.CASES))
def test_symgrad_json_is_mxnets(name):
    """symgrad's ``sym.contrib`` builds the graph MXNet builds: the same nodes, attributes, subgraphs and
    ``*_locs`` (so MXNet loads symgrad's JSON as its own)."""
    ours = json.loads(_build(name).tojson())
    theirs = json.loads(_mxnet_json(name))
    assert ours == theirs


@pytest.mark.parametrize("name", list(cases.CASES))
def test_json_round_trip(name):
    """test_foreach's ``js_1 == js_2``: loading MXNet's JSON and writing it again gives the same document."""
    text = _mxnet_json(name)
    again = sg.sym.load_json(text).tojson()
    assert json.loads(again) == json.loads(text)
    assert sg.sym.load_json(again).tojson() == again


def test_foreach_with_unknown_dim():
    """test_foreach_with_unkown_dim: a 0 (unknown) batch dimension flows through the loop body."""
    data = sg.sym.var("data", shape=(0, 3, 32, 32))
    outs, states = sg.sym.contrib.foreach(lambda d, s: (d + s[0], [s[0] * 2]), data, [sg.sym.var("state")])
    _, out_shapes, _ = outs.infer_shape_partial()
    assert out_shapes[0] == (0, 3, 32, 32)
    # the state's shape is the slice's: given the length, everything is inferred
    arg_shapes, out_shapes, _ = sg.sym.Group([outs, states[0]]).infer_shape(data=(5, 3, 32, 32))
    assert arg_shapes == [(5, 3, 32, 32), (3, 32, 32)]
    assert out_shapes == [(5, 3, 32, 32), (3, 32, 32)]


def test_shape_and_type_inference_through_subgraphs():
    """Shapes and dtypes flow through foreach (1-d data slices to (1,)), while_loop (outputs padded to
    max_iterations rows) and cond, forwards and backwards (the RNN's weights from the data)."""
    rnn = _build("foreach_rnn")
    arg_shapes, out_shapes, _ = rnn.infer_shape(data=(3, 2, 5), h0=(2, 4))
    assert dict(zip(rnn.list_arguments(), arg_shapes))["h2h_weight"] == (4, 4)
    assert out_shapes == [(3, 2, 4), (2, 4)]
    _, out_types, _ = rnn.infer_type(data=np.float64)
    assert out_types == [np.float64, np.float64]
    one_d = _build("foreach_1d")
    assert one_d.infer_shape(v0=(3, 1), v1=(3,), v2=(1,))[1] == [(3, 1), (1,)]
    loop = _build("while_loop_sum")
    assert loop.infer_shape(i=(1,), s=(3,), f=(3,))[1] == [(8, 3), (1,), (3,)]
    assert loop.infer_type(i=np.float32, s=np.float32, f=np.float32)[1] == [np.float32] * 3
    branch = _build("cond_nested")
    assert branch.infer_shape(a=(2, 3))[0] == [(2, 3), (2, 3)]
    assert branch.infer_type(a=np.float16)[1] == [np.float16]


def test_shape_conflict_in_a_body_names_the_loop():
    w = sg.sym.var("w")
    outs, _ = sg.sym.contrib.foreach(lambda x, s: (sg.sym.dot(x, w), s), sg.sym.var("x"), [sg.sym.var("s")])
    with pytest.raises(sg.base.ShapeError, match=r"_foreach '_foreach\d+': in its subgraph: dot 'dot\d+'"):
        outs.infer_shape(x=(4, 3), w=(2, 2))


def test_while_loop_pads_with_zeros_and_reports_trip_count():
    """test_while_loop_simple_forward: sum(1..5) with a data-dependent trip count; the stacked step outputs have
    max_iterations rows, those past the trip count zero (MXNet leaves them uninitialised)."""
    i, s = sg.sym.var("i"), sg.sym.var("s")
    outs, (fi, fs) = sg.sym.contrib.while_loop(
        lambda i, s: i <= 5, lambda i, s: (i, (i + 1, s + i)), [i, s], max_iterations=10
    )
    got = sg.sym.Group([outs, fi, fs]).eval(i=np.array([1], np.int64), s=np.array([0], np.int64))
    np.testing.assert_array_equal(got[0][:, 0], [1, 2, 3, 4, 5, 0, 0, 0, 0, 0])
    assert got[1].tolist() == [6] and got[2].tolist() == [15]
    assert got[0].dtype == np.int64
    never = sg.sym.Group([outs, fs]).eval(i=np.array([7], np.int64), s=np.array([3], np.int64))
    assert never[0].shape == (10, 1) and not never[0].any() and never[1].tolist() == [3]


def _rnn_location(seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s) * 0.5 for k, s in cases.SHAPES["foreach_rnn"].items()}


def test_check_numeric_gradient_foreach_rnn_cell():
    sym = _build("foreach_rnn")
    checked = check_numeric_gradient(sym, _rnn_location(), dtype=np.float64, progress=False)
    assert set(checked) == set(sym.list_arguments())  # every argument was compared (a mismatch raises)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_check_numeric_gradient_cond(seed):
    args = cases.inputs("cond_simple", seed)
    checked = check_numeric_gradient(_build("cond_simple"), args, dtype=np.float64, progress=False)
    assert set(checked) == set(args)  # every argument was compared (a mismatch raises)


@pytest.mark.parametrize(
    ("name", "seed"),
    [(n, seed) for n in sorted(cases.FORWARD_ONLY - {"cond_nested"}) for seed in cases.SEEDS.get(n, (0,))],
)
def test_forward_only_cases_gradient_against_finite_differences(name, seed):
    """The chained loops of test_cut_subgraph_* / test_uniq_name, whose backward MXNet 1.9.1 cannot bind."""
    args = cases.inputs(name, seed)
    checked = check_numeric_gradient(_build(name), args, dtype=np.float64, progress=False)
    assert set(checked) == set(args)  # every argument was compared (a mismatch raises)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_nested_cond_gradient_against_finite_differences(seed):
    """MXNet 1.9.1 cannot bind the backward of a nested cond (see control_flow_cases.FORWARD_ONLY)."""
    args = cases.inputs("cond_nested", seed)
    checked = check_numeric_gradient(_build("cond_nested"), args, dtype=np.float64, progress=False)
    assert set(checked) == set(args)  # every argument was compared (a mismatch raises)


@pytest.mark.parametrize("seed", [0, 1])
def test_check_numeric_gradient_while_loop(seed):
    args = cases.inputs("while_loop_sum", seed)
    checked = check_numeric_gradient(_build("while_loop_sum"), args, dtype=np.float64, progress=False)
    assert set(checked) == set(args)  # every argument was compared (a mismatch raises)


def _second_order(sym, wrt_names, location):
    """``sg.grad`` of a scalar of ``sym`` w.r.t. ``wrt_names``; the gradient symbols are then checked against
    finite differences (their own gradients are second derivatives of ``sym``); returns the names checked."""
    wrt = {n.name: n for n in _variables(sym)}
    loss = sg.sym.add_n(*[sg.sym.sum(o * o) for o in sym])
    grads = sg.grad(loss, [wrt[n] for n in wrt_names])
    result = check_numeric_gradient(sg.sym.Group(grads), location, dtype=np.float64, progress=False)
    return sorted(result)


def _variables(sym):
    return [s for s in sym.get_internals() if s.name in sym.list_arguments() and s.get_children() is None]


def test_second_order_foreach():
    sym = _build("foreach_rnn")
    assert _second_order(sym, ["data", "h0", "h2h_weight"], _rnn_location(1))  # raises on a mismatch


def test_second_order_cond_and_while_loop():
    assert _second_order(_build("cond_simple"), ["a", "b", "c"], cases.inputs("cond_simple", 1))
    assert _second_order(_build("while_loop_sum"), ["s", "f"], cases.inputs("while_loop_sum", 0))


def test_second_order_foreach_gradient_is_a_foreach():
    """The gradient of a loop is a loop (no unrolling: the trip count is only known at run time)."""
    x, s = sg.sym.var("x"), sg.sym.var("s")
    outs, _ = sg.sym.contrib.foreach(lambda d, st: (sg.sym.sin(d * st[0]), [st[0] + d]), x, [s])
    (gx,) = sg.grad(sg.sym.sum(outs), [x])
    ops = {n["op"] for n in json.loads(gx.tojson())["nodes"]}
    assert "_foreach" in ops
    for length in (1, 4, 7):
        loc = {"x": np.linspace(-1, 1, length * 2).reshape(length, 2), "s": np.array([0.3, -0.2])}
        check_numeric_gradient(gx, loc, dtype=np.float64, progress=False)


def test_plan_and_executor_run_subgraph_nodes_repeatedly():
    """The executor's plan calls control-flow nodes like any op (is_train passed down): forward/backward many
    times (interpreted, then generated code) give the same answers."""
    args, heads, want_outs, want_grads = _fixture("foreach_rnn", 0)
    ex = _build("foreach_rnn").bind(None, dict(args), args_grad={k: np.zeros_like(v) for k, v in args.items()})
    for _ in range(5):
        outs = ex.forward(is_train=True)
        ex.backward(heads)
    _compare("foreach_rnn", [np.array(o) for o in outs], want_outs)
    for k, want in want_grads.items():
        np.testing.assert_allclose(ex.grad_dict[k], want, rtol=1e-10, atol=1e-12)


def test_bad_json_subgraphs_are_reported():
    doc = json.loads(_mxnet_json("foreach_free_op"))
    node = next(n for n in doc["nodes"] if n["op"] == "_foreach")
    del node["subgraphs"]
    with pytest.raises(SerializationError, match="_foreach holds 1 subgraphs, the file gives 0"):
        sg.sym.load_json(json.dumps(doc))
    node["subgraphs"] = "nope"
    with pytest.raises(SerializationError, match="'subgraphs' must be a list"):
        sg.sym.load_json(json.dumps(doc))
    doc = json.loads(_mxnet_json("foreach_free_op"))
    doc["nodes"][0]["subgraphs"] = [json.loads(_mxnet_json("foreach_free_op"))]
    with pytest.raises(SerializationError, match="holds 0 subgraphs, the file gives 1"):
        sg.sym.load_json(json.dumps(doc))


def test_api_errors():
    x, s = sg.sym.var("x"), sg.sym.var("s")
    with pytest.raises(ValueError, match="state input 's-0' is not used"):
        sg.sym.contrib.foreach(lambda d, st: (d * 2, [d + 1]), x, [s])
    with pytest.raises(ValueError, match="max_iterations should be specified"):
        sg.sym.contrib.while_loop(lambda a: a < 1, lambda a: (a, a + 1), [x])
    with pytest.raises(ValueError, match="number of outputs differs"):
        sg.sym.contrib.cond(x < 1, lambda: [x, x], lambda: x)
    with pytest.raises(TypeError, match="foreach input must be a Symbol"):
        sg.sym.contrib.foreach(lambda d, st: (d, st), 3, [s])


def test_condition_must_be_one_element():
    x = sg.sym.var("x")
    out = sg.sym.contrib.cond(x > 0, lambda: x * 2, lambda: x * 3)
    with pytest.raises(sg.base.ShapeError, match="must hold one element"):
        out.eval(x=np.ones(3))
    np.testing.assert_array_equal(out.eval(x=np.array([-2.0]))[0], [-6.0])


# -- the remaining symbolic tests of test_contrib_control_flow ---------------------------------------------------


def _eval(name, seed=0):
    return [np.array(o) for o in _build(name).eval(**cases.inputs(name, seed))]


def test_while_loop_nested():
    """test_while_loop_nested: a while_loop in a while_loop's body (MXNet's fixture compared above); here the
    forward and backward against numpy: two outer steps of two inner steps each stack sc[0], sc[1] (and twice
    that), j returns to 0, x_sum is scaled by 1.5 per outer step."""
    args, heads, _, _ = _fixture("while_loop_nested", 0)
    outs, grads = _run(_build("while_loop_nested"), args, heads)
    sc, x_sum = args["sc"], args["x_sum"]
    stacked = np.stack([sc[:2], sc[:2]])  # [outer step, inner step] -> sc[inner step]
    want = [np.array([2.0]), np.array([0.0]), x_sum * 2.25, sc * 3, stacked, stacked * 2]
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w, rtol=1e-12)
    np.testing.assert_allclose(grads["x_sum"], heads[2] * 2.25, rtol=1e-12)
    d_sc = heads[3] * 3
    d_sc[:2] += (heads[4] + heads[5] * 2).sum(axis=0)
    np.testing.assert_allclose(grads["sc"], d_sc, rtol=1e-12)


def test_while_loop_rnn():
    """test_while_loop_rnn: an LSTM cell run by while_loop over ``data.take(i)`` equals the unrolled LSTM, outputs
    and gradients of every input but the counter (MXNet's test, with mx.rnn.LSTMCell written out)."""
    args, heads, want_outs, _ = _fixture("while_loop_lstm", 0)
    loop_outs, loop_grads = _run(_build("while_loop_lstm"), args, heads)
    unrolled = cases.REFERENCES["while_loop_lstm"](sg.sym)
    flat_args = {k: v for k, v in args.items() if k != "i"}
    flat_outs, flat_grads = _run(unrolled, flat_args, heads)
    for a, b, w in zip(loop_outs, flat_outs, want_outs):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(a, w, rtol=1e-10, atol=1e-12)
    for k in flat_args:
        np.testing.assert_allclose(loop_grads[k], flat_grads[k], rtol=1e-10, atol=1e-12, err_msg=k)


def test_cut_subgraph_foreach():
    """test_cut_subgraph_foreach: the third body returns the first loop's final states as its own; every step's
    state is then the initial one, so out = data + 2 + states."""
    args = cases.inputs("foreach_cut", 0)
    np.testing.assert_allclose(_eval("foreach_cut")[0], args["data"] + 2 + args["states"], rtol=1e-14)


@pytest.mark.parametrize("seed", [0, 1])
def test_cut_subgraph_while_loop(seed):
    """test_cut_subgraph_while_loop: the second loop's condition is the first loop's result (a free input):
    data steps by 1 until it passes 5, then 10 more steps."""
    d = float(cases.inputs("while_loop_cut", seed)["data"][0])
    first = d + max(0, int(np.floor(5 - d)) + 1)
    np.testing.assert_allclose(_eval("while_loop_cut", seed)[0], [(first + 10) * 2], rtol=1e-14)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_cut_subgraph_cond(seed):
    """test_cut_subgraph_cond: the second cond reads the first's result in its predicate and branches."""
    d = cases.inputs("cond_cut", seed)["data"]
    d1 = d * 2 if d[0] > 0.5 else d * 3
    np.testing.assert_allclose(_eval("cond_cut", seed)[0], d1 * 2 if d1[0] > 0.5 else d1 * 3, rtol=1e-14)


def _subgraph_inputs(sym, op):
    """The input names of each subgraph of the last ``op`` node in ``sym``'s JSON."""
    node = [n for n in json.loads(sym.tojson())["nodes"] if n["op"] == op][-1]
    return [[n["name"] for n in g["nodes"] if n["op"] == "null"] for g in node["subgraphs"]]


def test_uniq_name():
    """test_uniq_name: a loop over another loop's outputs names its placeholders after the outputs they stand
    for (``_foreach0-0``, ``_foreach0-1``: MXNet's ``<name>-<output index>``), so two outputs of one loop are
    two inputs; the free inputs of the same outputs are more (the JSON is MXNet's: test_symgrad_json_is_mxnets)."""
    assert _subgraph_inputs(_build("foreach_uniq1"), "_foreach") == [["_foreach0-0", "_foreach0-1"]]
    assert _subgraph_inputs(_build("foreach_uniq2"), "_foreach") == [
        ["_foreach0-0", "_foreach0-1", "_foreach0_output1", "_foreach0_output0"]
    ]
    assert _subgraph_inputs(_build("while_uniq1"), "_while_loop") == [
        ["_while_loop0-1"],
        ["_while_loop0-1", "_while_loop0-2"],
    ]
    arg = lambda name, key: cases.inputs(name, 0)[key]  # noqa: E731
    np.testing.assert_allclose(_eval("foreach_uniq1")[0], arg("foreach_uniq1", "data") + 2, rtol=1e-14)
    x, s = arg("foreach_uniq2", "data"), arg("foreach_uniq2", "states")
    out, state = _eval("foreach_uniq2")
    np.testing.assert_allclose(out, x + 1, rtol=1e-14)
    np.testing.assert_allclose(state, s + 2 * (s + x[0] + 1), rtol=1e-14)
    s = arg("while_uniq1", "states")
    np.testing.assert_allclose(_eval("while_uniq1")[0], np.tile(s + 1, (5, 1)), rtol=1e-14)
    s = arg("while_uniq2", "states")
    np.testing.assert_allclose(_eval("while_uniq2")[0], np.arange(1, 6)[:, None] * s + 1, rtol=1e-14)


def test_scope(monkeypatch):
    """test_scope: subgraph names are counted in ``AttrScope._subgraph_names`` (reassignable, as MXNet's test
    does); two conds named ``my_cond`` count each of their three subgraph names twice."""
    from collections import defaultdict

    monkeypatch.setattr(sg.sym.AttrScope, "_subgraph_names", defaultdict(int))
    data = sg.sym.var("data")
    made = [sg.sym.contrib.cond(data > 0.5, lambda: data * 2, lambda: data * 3, name="my_cond") for _ in range(2)]
    assert dict(sg.sym.AttrScope._subgraph_names) == {"my_cond_pred": 2, "my_cond_then": 2, "my_cond_else": 2}
    node = json.loads(made[1].tojson())["nodes"][-1]
    names = [
        {n.get("attrs", {}).get("__subgraph_name__") for n in g["nodes"] if n["op"] != "null"}
        for g in node["subgraphs"]
    ]
    assert names == [{"my_cond_pred1"}, {"my_cond_then1"}, {"my_cond_else1"}]


def _kinds(x):
    return [_kinds(a) for a in x] if isinstance(x, list) else type(x).__name__


def _format_steps():
    def step1(data, state):
        return data, state

    def step2(data, state):
        return [data], state

    def step3(data, state):
        return ([], [state[0] + data]) if isinstance(state, list) else ([], state + data)

    def step4(data, state):
        return ([data, state[0]], state) if isinstance(state, list) else ([data, state], state)

    return step1, step2, step3, step4


def test_output_format_foreach():
    """test_output_format_foreach: foreach returns its outputs and states in the formats the body returned them
    and init_states was given (a Symbol, a list, nested lists), with the step's values (MXNet 1.9.1's formats)."""
    step1, step2, step3, step4 = _format_steps()
    data_v, st_v = np.arange(6.0).reshape(3, 2), np.array([0.5, -1.0])
    data, st = sg.sym.var("data"), sg.sym.var("st")
    want = {
        (step1, 0): ("Symbol", ["Symbol"]), (step1, 1): ("Symbol", "Symbol"),
        (step1, 2): ("Symbol", ["Symbol", ["Symbol"]]), (step2, 0): (["Symbol"], ["Symbol"]),
        (step2, 1): (["Symbol"], "Symbol"), (step2, 2): (["Symbol"], ["Symbol", ["Symbol"]]),
        (step3, 0): ([], ["Symbol"]), (step3, 1): ([], "Symbol"),
        (step4, 0): (["Symbol", "Symbol"], ["Symbol"]), (step4, 1): (["Symbol", "Symbol"], "Symbol"),
        (step4, 2): (["Symbol", "Symbol"], ["Symbol", ["Symbol"]]),
    }  # fmt: skip
    for (step, k), (out_kind, state_kind) in want.items():
        init = ([st], st, [st, [st + 1]])[k]
        out, states = sg.sym.contrib.foreach(step, data, init)
        assert (_kinds(out), _kinds(states)) == (out_kind, state_kind), (step.__name__, k)
        flat_states = states if isinstance(states, sg.sym.Symbol) else states[0]
        got = sg.sym.Group([flat_states]).eval(data=data_v, st=st_v)[0]
        # step3 adds every row to the state; the others carry it unchanged
        np.testing.assert_allclose(got, st_v + data_v.sum(axis=0) if step is step3 else st_v)
        if step is not step3:
            first = out if isinstance(out, sg.sym.Symbol) else out[0]
            np.testing.assert_allclose(first.eval(data=data_v, st=st_v)[0], data_v)


def test_output_format_while():
    """test_output_format_while: while_loop's outputs keep the step's format and its loop variables the format
    they were given (MXNet 1.9.1's)."""

    def cond(s1, *rest):
        first = sg.sym.slice_axis(s1, axis=0, begin=0, end=1)
        return first == first

    def w1(state):
        return state, state

    def w2(state):
        return (state, state) if isinstance(state, list) else ([state], state)

    def w3(state):
        return [], state

    def w4(state, state2):
        return state, [state, state2]

    def w6(state, state2):
        return [], [state, state2]

    st = sg.sym.var("st")
    cases_ = [
        (w1, st, "Symbol", "Symbol"), (w1, [st], "Symbol", ["Symbol"]), (w2, st, ["Symbol"], "Symbol"),
        (w2, [st], ["Symbol"], ["Symbol"]), (w3, st, [], "Symbol"), (w3, [st], [], ["Symbol"]),
        (w4, [st, [st + 1]], "Symbol", ["Symbol", ["Symbol"]]), (w6, [st, [st + 1]], [], ["Symbol", ["Symbol"]]),
    ]  # fmt: skip
    st_v = np.array([0.5, -1.0])
    for step, init, out_kind, var_kind in cases_:
        out, final = sg.sym.contrib.while_loop(cond, step, init, max_iterations=5)
        assert (_kinds(out), _kinds(final)) == (out_kind, var_kind), step.__name__
        if out_kind == "Symbol":  # five steps of the unchanged state, stacked
            np.testing.assert_allclose(out.eval(st=st_v)[0], np.tile(st_v, (5, 1)))


def test_output_format_cond():
    """test_output_format_cond: cond returns what the branches return, a Symbol or a list."""
    data = sg.sym.var("data")
    pred = sg.sym.slice_axis(data, axis=0, begin=0, end=1)
    for func, kind in ((lambda d: d, "Symbol"), (lambda d: [d], ["Symbol"]), (lambda d: [d, d], ["Symbol"] * 2)):
        out = sg.sym.contrib.cond(pred, lambda: func(data), lambda: func(data))
        assert _kinds(out) == kind
        first = out if isinstance(out, sg.sym.Symbol) else out[0]
        np.testing.assert_allclose(first.eval(data=np.array([2.0, 3.0]))[0], [2.0, 3.0])


def test_a_sampling_op_inside_a_loop_body_is_refused_by_name():
    """The numeric checkers refuse a random op inside a subgraph as they do outside one, naming it (before, only
    the determinism check caught it, naming the loop)."""
    from symgrad.test_utils.harness import RandomOpError

    data, init = sg.sym.Variable("data"), sg.sym.Variable("init")

    def body(x, states):
        noisy = sg.sym.broadcast_mul(x, sg.sym.random.uniform(shape=(2,), dtype="float64", name="noise"))
        return noisy + states[0], [states[0]]

    outs, _ = sg.sym.contrib.foreach(body, data, [init])
    with pytest.raises(RandomOpError, match="random sampling op _random_uniform 'noise'"):
        check_numeric_gradient(outs, [np.ones((3, 2)), np.zeros(2)], dtype=np.float64)


def test_auxiliary_updates_inside_a_subgraph_are_dropped_with_a_warning():
    """A BatchNorm in a loop body (or a branch) computes new moving statistics in training, which MXNet 1.9.1
    drops: they are plain arguments of the control-flow node and no forward writes them back. symgrad drops them
    as MXNet does and says so. MXNet's values, measured on the same graphs (with ``autograd.train_mode()``, the
    body runs BatchNorm on batch statistics as symgrad does): arguments ['data', 'init', 'bn_gamma', 'bn_beta',
    'bn_moving_mean', 'bn_moving_var'], no auxiliary states, moving mean [0 0 0 0] and variance [1 1 1 1]
    unchanged after forward(is_train=True); the cond's 'bn2_moving_mean' stays [0 0 0 0] likewise."""
    S = sg.sym
    data, init = S.var("data"), S.var("init")

    def body(x, states):
        out = S.BatchNorm(x, name="bn", fix_gamma=False, momentum=0.5) + states[0]
        return out, [out]

    outs, _ = S.contrib.foreach(body, data, [init])
    assert outs.list_arguments() == ["data", "init", "bn_gamma", "bn_beta", "bn_moving_mean", "bn_moving_var"]
    assert outs.list_auxiliary_states() == []
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    args = {"data": x, "init": np.zeros((3, 4), np.float32)}
    args |= {f"bn_{k}": np.full(4, v, np.float32) for k, v in (("gamma", 1), ("beta", 0))}
    args |= {"bn_moving_mean": np.zeros(4, np.float32), "bn_moving_var": np.ones(4, np.float32)}
    exe = outs.bind(sg.cpu(), dict(args))
    with pytest.warns(UserWarning, match=r"_foreach: BatchNorm 'bn' .*'bn_moving_mean', 'bn_moving_var'.*dropped"):
        (y,) = exe.forward(is_train=True)
    np.testing.assert_array_equal(exe.arg_dict["bn_moving_mean"], np.zeros(4))
    np.testing.assert_array_equal(exe.arg_dict["bn_moving_var"], np.ones(4))
    # numpy: step t normalises x[t] over axis 0 with its batch statistics (eps 1e-3) and adds the last output
    norm = (x - x.mean(axis=1, keepdims=True)) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(y, np.cumsum(norm, axis=0), rtol=1e-5, atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inference reads the moving statistics and updates nothing: no warning
        exe.forward(is_train=False)

    x2 = S.var("x")
    branch = S.contrib.cond(S.sum(x2) > 0, lambda: S.BatchNorm(x2, name="bn2", fix_gamma=False), lambda: x2)
    exe = branch.bind(
        sg.cpu(),
        {
            "x": x[0],
            "bn2_gamma": np.ones(4, np.float32),
            "bn2_beta": np.zeros(4, np.float32),
            "bn2_moving_mean": np.zeros(4, np.float32),
            "bn2_moving_var": np.ones(4, np.float32),
        },
    )
    with pytest.warns(UserWarning, match=r"_cond: BatchNorm 'bn2' .*dropped"):
        exe.forward(is_train=True)
    np.testing.assert_array_equal(exe.arg_dict["bn2_moving_mean"], np.zeros(4))
