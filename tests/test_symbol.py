"""Symbol API: MXNet 1.x names, ordering, attributes, inference, composition."""

import networkx as nx
import numpy as np
import pytest

import symgrad as sg

S = sg.sym


def test_fully_connected_creates_named_inputs():
    x = S.Variable("x")
    y = S.FullyConnected(x, num_hidden=4, name="fc")
    assert y.list_arguments() == ["x", "fc_weight", "fc_bias"]
    assert y.list_outputs() == ["fc_output"]
    assert y.name == "fc"
    assert S.FullyConnected(x, num_hidden=4, no_bias=True, name="f2").list_arguments() == ["x", "f2_weight"]
    assert S.SoftmaxOutput(y, name="softmax").list_arguments()[-1] == "softmax_label"


def test_automatic_names_use_a_name_manager():
    with sg.NameManager():
        x = S.Variable("x")
        a = S.FullyConnected(x, num_hidden=2)
        b = S.FullyConnected(a, num_hidden=2)
        c = S.exp(b)
    assert (a.name, b.name, c.name) == ("fullyconnected0", "fullyconnected1", "exp0")
    assert b.list_arguments() == [
        "x",
        "fullyconnected0_weight",
        "fullyconnected0_bias",
        "fullyconnected1_weight",
        "fullyconnected1_bias",
    ]


def test_prefix_applies_to_given_and_automatic_names():
    x = S.Variable("x")
    with sg.Prefix("net_"):
        a = S.FullyConnected(x, num_hidden=2)
        b = S.FullyConnected(a, num_hidden=2, name="out")
    assert a.name == "net_fullyconnected0"
    assert b.name == "net_out"
    assert "net_out_weight" in b.list_arguments()


def test_attr_scope_and_attributes():
    with sg.AttrScope(ctx_group="dev1", lr="0.1"):
        v = S.Variable("v", lr_mult=2.0, shape=(2, 3), dtype="float64")
        w = S.exp(v, name="e")
        with sg.AttrScope(lr="0.5"):
            u = S.Variable("u")
    assert v.attr("ctx_group") == "dev1"
    assert v.attr("__lr_mult__") == "2.0"
    assert v.attr("__shape__") == "(2, 3)"
    # MXNet stores ctx_group as __ctx_group__ and lists it under both names
    assert w.list_attr() == {"__ctx_group__": "dev1", "ctx_group": "dev1", "lr": "0.1"}
    assert u.list_attr() == {"__ctx_group__": "dev1", "ctx_group": "dev1", "lr": "0.5"}
    fc = S.FullyConnected(S.Variable("x"), num_hidden=4, name="fc")
    assert fc.attr("num_hidden") == "4"
    assert fc.attr_dict() == {"fc": {"num_hidden": "4"}}
    assert fc.attr("nope") is None
    assert fc.name == "fc" and v.name == "v"
    # a group: attr() is None (several nodes), list_attr() is the first head's, name is None
    g = S.Group([fc, v])
    assert g.attr("num_hidden") is None and g.name is None
    assert g.list_attr() == {"num_hidden": "4"}
    assert g.attr_dict()["v"]["__shape__"] == "(2, 3)"
    assert S.SliceChannel(v, num_outputs=2, name="sl").attr("num_outputs") == "2"
    with pytest.raises(ValueError, match="attr_dict"):
        fc.list_attr(recursive=True)


def test_variable_extra_attributes_must_be_dunder():
    assert S.Variable("x", __foo__="bar").attr("__foo__") == "bar"
    with pytest.raises(ValueError, match="double underscores"):
        S.Variable("x", foo="bar")


class _Init:
    def dumps(self):
        return '["uniform", {"scale": 0.07}]'


def test_variable_signature_and_attributes_match_mxnet():
    # mx.sym.Variable(name, attr, shape, lr_mult, wd_mult, dtype, init, stype, **kwargs), same order
    v = S.Variable("v", {"mood": "calm"}, (2, 3), 0.5, 0.0, "float16", _Init())
    assert v.list_attr() == {
        "mood": "calm",
        "__shape__": "(2, 3)",
        "__lr_mult__": "0.5",
        "lr_mult": "0.5",
        "__wd_mult__": "0.0",
        "wd_mult": "0.0",
        "__dtype__": "2",
        "__init__": '["uniform", {"scale": 0.07}]',
    }  # 2: MXNet's float16 code; lr_mult/wd_mult listed under both names, as MXNet lists them
    assert S.var is S.Variable
    assert S.Variable("s", shape=5).attr("__shape__") == "(5,)"
    assert S.Variable("i", init="zeros").attr("__init__") == "zeros"
    assert S.Variable("d", dtype=np.float64).infer_type()[0] == [np.float64]
    # the __shape__ / __dtype__ attributes feed inference and simple_bind
    w = S.Variable("w", shape=(3, 2), dtype="float64")
    exe = (w * 2).simple_bind(sg.cpu())
    assert exe.arg_dict["w"].shape == (3, 2) and exe.arg_dict["w"].dtype == np.float64
    with pytest.raises(TypeError, match="name"):
        S.Variable(3)
    with pytest.raises(NotImplementedError, match="csr"):
        S.Variable("sp", stype="csr")


def test_operator_auto_names_are_mxnets():
    with sg.NameManager():
        a, b = S.Variable("a"), S.Variable("b")
        got = [
            (a + b).name,
            (a - b).name,
            (a * b).name,
            (a / b).name,
            (a**b).name,
            (a + 1).name,
            (1 - a).name,
            (a * 2).name,
            (-a).name,
            (2 / a).name,
            (a**2).name,
            (2**a).name,
            abs(a).name,
            (a == b).name,
            (a > 1).name,
            S.elemwise_add(a, b).name,
            S._internal._plus_scalar(a, scalar=1).name,
        ]
    assert got == [
        "_plus0",
        "_minus0",
        "_mul0",
        "_div0",
        "_power0",
        "_plusscalar0",
        "_rminusscalar0",
        "_mulscalar0",
        "_mulscalar1",
        "_rdivscalar0",
        "_powerscalar0",
        "_rpowerscalar0",
        "abs0",
        "_equal0",
        "_greater_scalar0",
        "elemwise_add0",
        "_plus_scalar0",
    ]
    assert (a - 2).attr("scalar") == "2" and (-a).attr("scalar") == "-1.0"


def test_numpy_scalars_combine_with_symbols_and_arrays_are_refused():
    a = S.Variable("a")
    av = np.array([1.0, 2.0])
    e = S.Group([np.float32(2) * a, np.float64(1) - a, np.int64(3) + a, a / np.float32(4)])
    outs = e.bind(sg.cpu(), {"a": av}).forward()
    for got, ref in zip(outs, [2 * av, 1 - av, 3 + av, av / 4]):
        np.testing.assert_allclose(got, ref)
    with pytest.raises(TypeError, match=r"\+.*ndarray"):
        a + np.ones(2)
    with pytest.raises(TypeError, match=r"\*.*ndarray"):
        np.ones(2) * a
    with pytest.raises(TypeError, match=r"-.*str"):
        a - "1"
    assert (a == None) is False  # noqa: E711 - comparisons with other objects fall back to identity


@pytest.mark.parametrize(
    "make, op",
    [
        (lambda a, b: a + b, "elemwise_add"),
        (lambda a, b: a - b, "elemwise_sub"),
        (lambda a, b: a * b, "elemwise_mul"),
        (lambda a, b: a / b, "elemwise_div"),
        (lambda a, b: a**b, "_power"),
        (lambda a, b: a + 2, "_plus_scalar"),
        (lambda a, b: 2 + a, "_plus_scalar"),
        (lambda a, b: a - 2, "_minus_scalar"),
        (lambda a, b: 2 - a, "_rminus_scalar"),
        (lambda a, b: 2 * a, "_mul_scalar"),
        (lambda a, b: a / 2, "_div_scalar"),
        (lambda a, b: 2 / a, "_rdiv_scalar"),
        (lambda a, b: a**2, "_power_scalar"),
        (lambda a, b: 2**a, "_rpower_scalar"),
        (lambda a, b: -a, "_mul_scalar"),  # MXNet 1.x: -x is x * -1.0
        (lambda a, b: abs(a), "abs"),
        (lambda a, b: a > 1, "_greater_scalar"),
        (lambda a, b: a <= b, "_lesser_equal"),
        (lambda a, b: a == b, "_equal"),
        (lambda a, b: a != 0, "_not_equal_scalar"),
        (lambda a, b: a != b, "_not_equal"),
        (lambda a, b: a >= b, "_greater_equal"),
        (lambda a, b: a >= 2, "_greater_equal_scalar"),
        (lambda a, b: a < b, "_lesser"),
        (lambda a, b: a < 2, "_lesser_scalar"),
        (lambda a, b: a <= 2, "_lesser_equal_scalar"),
        (lambda a, b: a > b, "_greater"),
        (lambda a, b: 1 < a, "_greater_scalar"),  # Python reflects it to a > 1
        (lambda a, b: a == 3, "_equal_scalar"),
        (lambda a, b: a % b, "_mod"),
        (lambda a, b: a % 2, "_mod_scalar"),
        (lambda a, b: 2 % a, "_rmod_scalar"),
    ],
)
def test_operator_overloads_map_to_mxnet_ops(make, op):
    a, b = S.Variable("a"), S.Variable("b")
    s = make(a, b)
    g = s.to_networkx()
    ((head_id, _),) = g.graph["heads"]
    assert g.nodes[head_id]["op"] == op


def test_overloads_compute_the_right_values():
    a, b = S.Variable("a"), S.Variable("b")
    av = np.array([1.0, 2.0, 4.0], np.float32)
    bv = np.array([3.0, 0.5, 2.0], np.float32)
    expr = S.Group(
        [
            a + b,
            a - 1,
            3 - a,
            a * b,
            a / b,
            2 / a,
            a**2,
            2**a,
            -a,
            abs(-a),
            a > 1.5,
            a < b,
            a - b,
            1 + a,
            a * 0.5,
            a**b,
            a % 1.5,
            5 % a,
            a >= 2,
            a == b * 2,
            a != 2,
            2 >= a,
        ]
    )
    exe = expr.bind(sg.cpu(), {"a": av, "b": bv})
    outs = exe.forward()
    f32 = np.float32
    want = [
        av + bv,
        av - 1,
        3 - av,
        av * bv,
        av / bv,
        2 / av,
        av**2,
        2**av,
        -av,
        av,
        (av > 1.5).astype(f32),
        (av < bv).astype(f32),
        av - bv,
        1 + av,
        av * 0.5,
        av**bv,
        np.mod(av, 1.5),
        np.mod(5, av),
        (av >= 2).astype(f32),
        (av == bv * 2).astype(f32),
        (av != 2).astype(f32),
        (av <= 2).astype(f32),
    ]
    assert len(outs) == len(want)
    for got, ref in zip(outs, want):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_outputs_indexing_group_and_iteration():
    a = S.Variable("a")
    s = S.SliceChannel(a, num_outputs=3, name="sl")
    assert len(s) == 3
    assert s.list_outputs() == ["sl_output0", "sl_output1", "sl_output2"]
    assert s[1].list_outputs() == ["sl_output1"]
    assert s["sl_output2"].list_outputs() == ["sl_output2"]
    assert s[-1].list_outputs() == ["sl_output2"]
    assert s[1:].list_outputs() == ["sl_output1", "sl_output2"]
    assert [p.list_outputs()[0] for p in s] == s.list_outputs()
    g = S.Group([s[0], a * 2])
    assert g.list_outputs() == ["sl_output0", g[1].name + "_output"]
    assert g.name is None
    with pytest.raises(IndexError):
        s[3]
    with pytest.raises(KeyError, match="sl_output0"):
        s["nope"]
    with pytest.raises(ValueError, match="'nope'"):  # MXNet raises ValueError
        s["nope"]
    with pytest.raises(TypeError, match="int, str or slice"):
        s[1.0]
    assert s[::2].list_outputs() == ["sl_output0", "sl_output2"]
    with pytest.raises(TypeError, match="non-empty"):
        S.Group([])


def test_list_arguments_follows_mxnet_dfs_order():
    a, b, c = S.Variable("a"), S.Variable("b"), S.Variable("c")
    net = (c * b) + S.FullyConnected(a, num_hidden=2, name="fc")
    assert net.list_arguments() == ["c", "b", "a", "fc_weight", "fc_bias"]
    assert S.Group([a, c, b]).list_arguments() == ["a", "c", "b"]
    # a variable used twice is listed once
    assert (a * a + a).list_arguments() == ["a"]


def test_auxiliary_states_internals_and_children():
    x = S.Variable("x")
    bn = S.BatchNorm(x, name="bn")
    assert bn.list_arguments() == ["x", "bn_gamma", "bn_beta"]
    assert bn.list_auxiliary_states() == ["bn_moving_mean", "bn_moving_var"]
    assert bn.list_inputs() == ["x", "bn_gamma", "bn_beta", "bn_moving_mean", "bn_moving_var"]
    assert bn.list_outputs() == ["bn_output"]
    assert S.BatchNorm(x, output_mean_var=True, name="b2").list_outputs() == ["b2_output", "b2_mean", "b2_var"]
    fc = S.FullyConnected(bn, num_hidden=3, name="fc")
    internals = fc.get_internals()
    assert "bn_output" in internals.list_outputs()
    assert internals["bn_output"].list_outputs() == ["bn_output"]
    assert internals.list_outputs()[:5] == ["x", "bn_gamma", "bn_beta", "bn_moving_mean", "bn_moving_var"]
    assert internals.list_outputs()[-1] == "fc_output"
    assert fc.get_children().list_outputs() == ["bn_output", "fc_weight", "fc_bias"]
    assert x.get_children() is None
    # NNVM's GetChildren: a group gives the inputs of each of its head nodes in turn
    a, b, c = S.Variable("a"), S.Variable("b"), S.Variable("c")
    plus = S.elemwise_add(a, b, name="p")
    assert S.Group([plus, S.exp(c, name="e"), plus]).get_children().list_outputs() == ["a", "b", "c"]
    assert S.Group([a, b]).get_children() is None
    sl = S.SliceChannel(x, num_outputs=2, name="sl")
    assert sl.get_children().list_outputs() == ["x"]


def test_infer_shape_full_partial_and_none():
    x = S.Variable("x")
    fc = S.FullyConnected(x, num_hidden=4, name="fc")
    args, outs, aux = fc.infer_shape(x=(8, 3, 2))
    assert args == [(8, 3, 2), (4, 6), (4,)]
    assert outs == [(8, 4)]
    assert aux == []
    # positional form, in list_arguments order
    assert fc.infer_shape((8, 6))[1] == [(8, 4)]
    a, b = S.Variable("a"), S.Variable("b")
    # given a, a + b infers b (and the other way round)
    assert (a + b).infer_shape(a=(2, 3))[0] == [(2, 3), (2, 3)]
    assert (a + b).infer_shape(b=(5,))[0] == [(5,), (5,)]
    # not enough information: infer_shape returns Nones, infer_shape_partial what it knows
    net = a * S.FullyConnected(b, num_hidden=2, name="f")
    with pytest.warns(UserWarning, match="Cannot decide shape"):
        assert net.infer_shape(a=(3, 2)) == (None, None, None)
    args, outs, _ = net.infer_shape_partial(a=(3, 2))
    assert args == [(3, 2), (), (), (2,)]  # MXNet's legacy reading: () is unknown
    assert outs == [(3, 2)]
    # variable shape attribute counts as known
    v = S.Variable("v", shape=(4, 5))
    assert S.exp(v).infer_shape()[1] == [(4, 5)]


def test_infer_type():
    x = S.Variable("x")
    fc = S.FullyConnected(x, num_hidden=2)
    args, outs, aux = fc.infer_type(x=np.float64)
    assert args == [np.float64] * 3 and outs == [np.float64]
    assert fc.infer_type() == (None, None, None)
    assert fc.infer_type("float16")[1] == [np.float16]  # positional, as a string
    bn = S.BatchNorm(x, name="bn")
    assert bn.infer_type(x="float64") == ([np.float64] * 3, [np.float64], [np.float64] * 2)
    # partial: what is known, None for the rest
    a, b = S.Variable("a"), S.Variable("b")
    net = a + S.Cast(b, dtype="float32")
    assert net.infer_type(a="float32") == (None, None, None)
    assert net.infer_type_partial(a="float32") == ([np.float32, None], [np.float32], [])
    assert net.infer_type(a="float32", b="float16")[0] == [np.float32, np.float16]
    with pytest.raises(TypeError, match=r"elemwise_add.*float32.*float64|elemwise_add.*float64.*float32"):
        S.elemwise_add(a, b).infer_type(a="float32", b="float64")


def test_composition_substitutes_variables():
    data = S.Variable("data")
    net1 = S.FullyConnected(data, num_hidden=4, name="fc1")
    net2 = S.Activation(S.Variable("data"), act_type="relu", name="act")
    composed = net2(data=net1)
    assert composed.list_arguments() == ["data", "fc1_weight", "fc1_bias"]
    assert net2.list_arguments() == ["data"]  # immutable: the original is unchanged
    pos = net2(net1)
    assert pos.list_arguments() == composed.list_arguments()
    xv = np.random.rand(2, 3).astype(np.float32)
    wv = np.random.rand(4, 3).astype(np.float32)
    bv = np.random.rand(4).astype(np.float32) - 0.5
    out = composed.bind(sg.cpu(), {"data": xv, "fc1_weight": wv, "fc1_bias": bv}).forward()[0]
    np.testing.assert_allclose(out, np.maximum(xv @ wv.T + bv, 0), rtol=1e-6)
    with pytest.raises(ValueError, match="not an argument"):
        net2(nope=net1)
    # a name for the head, and a composition in the middle of a graph keeps everything else
    named = net2(data=net1, name="composed")
    assert named.name == "composed" and net2.name == "act"
    a, b = S.Variable("a"), S.Variable("b")
    body = S.exp(a, name="e") + S.tanh(b, name="t")
    sub = body(b=S.sqrt(S.Variable("z"), name="r"))
    assert sub.list_arguments() == ["a", "z"]
    av, zv = np.array([0.5, 1.0]), np.array([4.0, 9.0])
    np.testing.assert_allclose(sub.bind(sg.cpu(), {"a": av, "z": zv}).forward()[0], np.exp(av) + np.tanh(np.sqrt(zv)))
    assert body.list_arguments() == ["a", "b"]  # unchanged
    with pytest.raises(TypeError, match="single-output"):
        body(a=S.Group([a, b]))
    with pytest.raises(ValueError, match="2 positional symbols for 1 arguments"):
        net2(net1, net1)


def test_symbols_are_immutable_and_hashable():
    x = S.Variable("x")
    with pytest.raises(AttributeError):
        x._outputs = ()
    assert len({x, x}) == 1
    with pytest.raises(TypeError):
        bool(x)


def test_to_networkx_carries_ops_params_and_edges():
    x = S.Variable("x")
    y = S.FullyConnected(x, num_hidden=4, name="fc")
    z = S.SliceChannel(y, num_outputs=2, name="sl")
    g = z[1].to_networkx()
    assert isinstance(g, nx.MultiDiGraph)
    by_name = {d["name"]: (n, d) for n, d in g.nodes(data=True)}
    assert set(by_name) == {"x", "fc_weight", "fc_bias", "fc", "sl"}
    fc_id, fc = by_name["fc"]
    assert fc["op"] == "FullyConnected" and fc["params"]["num_hidden"] == 4
    assert by_name["x"][1]["op"] == "null"
    slots = sorted((g.nodes[u]["name"], d["slot"], d["output"]) for u, v, d in g.in_edges(fc_id, data=True))
    assert slots == [("fc_bias", 2, 0), ("fc_weight", 1, 0), ("x", 0, 0)]
    assert g.graph["heads"] == [(by_name["sl"][0], 1)]
    assert nx.is_directed_acyclic_graph(g)
    # the output index of a multi-output op and the input slot travel on each edge (parallel edges too)
    w = S.elemwise_mul(z[1], z[1], name="m")
    g2 = w.to_networkx()
    ids = {d["name"]: n for n, d in g2.nodes(data=True)}
    edges = sorted((d["output"], d["slot"]) for _, _, d in g2.edges(ids["sl"], data=True))
    assert edges == [(1, 0), (1, 1)] and g2.number_of_edges(ids["sl"], ids["m"]) == 2
    assert g2.nodes[ids["sl"]]["num_outputs"] == 2 and g2.nodes[ids["m"]]["node"].name == "m"


def test_list_arguments_is_a_post_order_dfs_not_creation_order():
    a, b, c = S.Variable("a"), S.Variable("b"), S.Variable("c")
    d = a * b
    e = S.elemwise_mul(b + c, d)  # DFS from e: (b + c) first -> b, c; then d -> a (b already seen)
    assert e.list_arguments() == ["b", "c", "a"]
    assert S.Group([d, e]).list_arguments() == ["a", "b", "c"]
    assert e.list_inputs() == ["b", "c", "a"] and e.list_auxiliary_states() == []
    # an auxiliary state is listed as such wherever else the variable appears
    bn = S.BatchNorm(S.Variable("x"), name="bn")
    mm = bn.get_children()[3]
    assert mm.name == "bn_moving_mean"
    both = S.Group([mm * 1.0, bn])
    assert both.list_arguments() == ["x", "bn_gamma", "bn_beta"]
    assert both.list_auxiliary_states() == ["bn_moving_mean", "bn_moving_var"]
    assert both.list_inputs() == ["bn_moving_mean", "x", "bn_gamma", "bn_beta", "bn_moving_var"]


def test_params_accept_mxnet_attribute_strings():
    x = S.Variable("x")
    a = S.FullyConnected(x, num_hidden="4", no_bias="True", flatten="False", name="a")
    assert a.list_arguments() == ["x", "a_weight"]
    assert a.infer_shape(x=(2, 5, 3))[1] == [(2, 5, 4)]
    r = S.Reshape(x, shape="(0, -1)")
    assert r.infer_shape(x=(2, 3, 4))[1] == [(2, 12)]
    assert S.Activation(x, act_type="tanh").infer_shape(x=(2,))[1] == [(2,)]


@pytest.mark.parametrize(
    "shape, spec, reverse, want",
    [
        ((2, 3, 4), (4, 0, 2), False, (4, 3, 2)),
        ((2, 3, 4), (2, 0, 0), False, (2, 3, 4)),
        ((2, 3, 4), (6, 1, -1), False, (6, 1, 4)),
        ((2, 3, 4), (3, -1, 8), False, (3, 1, 8)),
        ((2, 3, 4), (-1,), False, (24,)),
        ((2, 3, 4), (-2,), False, (2, 3, 4)),
        ((2, 3, 4), (2, -2), False, (2, 3, 4)),
        ((2, 3, 4), (-2, 1, 1), False, (2, 3, 4, 1, 1)),
        ((2, 3, 4), (-3, 4), False, (6, 4)),
        ((2, 3, 4, 5), (-3, -3), False, (6, 20)),
        ((2, 3, 4), (0, -3), False, (2, 12)),
        ((2, 3, 4), (-3, -2), False, (6, 4)),
        ((2, 3, 4), (-4, 1, 2, -2), False, (1, 2, 3, 4)),
        ((2, 3, 4), (2, -4, -1, 3, -2), False, (2, 1, 3, 4)),
        ((10, 5, 4), (-1, 0), False, (40, 5)),
        ((10, 5, 4), (-1, 0), True, (50, 4)),
    ],
)
def test_reshape_special_values_match_mxnet_docs(shape, spec, reverse, want):
    # the cases are the examples of MXNet's Reshape documentation
    x = S.Variable("x")
    r = S.Reshape(x, shape=spec, reverse=reverse)
    assert r.infer_shape(x=shape)[1] == [want]
    v = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    out = r.bind(sg.cpu(), {"x": v}).forward()[0]
    np.testing.assert_array_equal(out, v.reshape(want))


def test_python_level_helpers_pick_symbol_or_scalar_forms():
    x, y = S.Variable("x"), S.Variable("y")
    assert S.maximum(1, 3) == 3 and S.minimum(1, 3) == 1 and S.pow(2, 3) == 8 and S.hypot(3, 4) == 5.0
    xv, yv = np.array([1.0, 3.0]), np.array([2.0, 1.0])
    e = S.Group([S.maximum(x, y), S.maximum(2.0, x), S.minimum(x, 2.0), S.pow(2.0, x), S.power(x, y), S.hypot(x, y)])
    outs = e.bind(sg.cpu(), {"x": xv, "y": yv}).forward()
    want = [np.maximum(xv, yv), np.maximum(2.0, xv), np.minimum(xv, 2.0), 2.0**xv, xv**yv, np.hypot(xv, yv)]
    for got, ref in zip(outs, want):
        np.testing.assert_allclose(got, ref)
    with pytest.raises(TypeError, match="maximum"):
        S.maximum("a", x)


def test_naming_scopes_are_thread_local_and_attr_merges_over_the_scope():
    import threading

    names = []
    with sg.NameManager():
        S.exp(S.Variable("x"))  # exp0 in this thread's manager

        def other():
            with sg.NameManager():
                names.append(S.exp(S.Variable("x")).name)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        names.append(S.exp(S.Variable("x")).name)
    assert names == ["exp0", "exp1"]  # the other thread's counter did not move this one
    with sg.AttrScope(group="g1", mood="calm"):
        e = S.exp(S.Variable("v"), name="e", attr={"mood": "angry"})
        fc = S.FullyConnected(S.Variable("d"), num_hidden=2, name="fc")
    assert e.list_attr() == {"group": "g1", "mood": "angry"}
    assert fc.list_attr() == {"group": "g1", "mood": "calm", "num_hidden": "2"}
    assert fc.get_children()[1].attr("group") == "g1"  # the automatic fc_weight was made in the scope
    with pytest.raises(TypeError, match="'lr'.*string"):
        sg.AttrScope(lr=0.1)


def test_deep_chains_need_no_recursion():
    # 3 000 nodes, three times Python's default recursion limit: every graph walk is iterative
    x = S.Variable("x")
    y = x
    for _ in range(1500):
        y = y * 1.001 + 0.001  # y_{k+1} = 1.001 y_k + 0.001, dy_n/dx = 1.001^n
    assert y.list_arguments() == ["x"] and len(y.get_internals()) == 3001
    assert y.infer_shape(x=(4,))[1] == [(4,)]
    assert y.to_networkx().number_of_nodes() == 3001
    (g,) = sg.grad(S.sum(y), [x])
    composed = y(x=S.exp(S.Variable("z")))
    assert composed.list_arguments() == ["z"]
    xv = np.array([0.1, -0.2, 0.3, 0.4])
    exe = S.Group([y, g]).bind(sg.cpu(), {"x": xv})
    out, gx = exe.forward()
    ref = xv.copy()
    for _ in range(1500):
        ref = ref * 1.001 + 0.001
    np.testing.assert_allclose(out, ref, rtol=1e-12)
    np.testing.assert_allclose(gx, np.full(4, 1.001**1500), rtol=1e-12)


def test_output_entries_is_the_public_read_of_the_outputs():
    """``output_entries()``: the ``(node, output index)`` entries in ``list_outputs()`` order, as a tuple (what
    control_flow, the executor, serialization and viz read instead of the private ``_outputs``)."""
    fc = S.FullyConnected(S.Variable("x"), num_hidden=2, name="fc")
    bn = S.BatchNorm(fc, name="bn", output_mean_var=True)
    group = S.Group([bn[2], fc, bn[0]])
    entries = group.output_entries()
    assert isinstance(entries, tuple)
    assert [(node.name, k) for node, k in entries] == [("bn", 2), ("fc", 0), ("bn", 0)]
    assert [node.output_name(k) for node, k in entries] == group.list_outputs()
    assert S.Group([S.Symbol(list(entries))]).list_outputs() == group.list_outputs()  # rebuilds the same outputs
