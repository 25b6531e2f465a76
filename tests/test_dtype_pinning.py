"""Float64 on a model whose variables pin float32 through ``__dtype__`` (as Gluon's ``export`` writes them).

``simple_bind(ctx, data=shape, type_dict={'data': np.float64})`` on such a file fails, in MXNet 1.9.1 too: the
error names the node, the variables whose ``__dtype__`` attributes pin the other dtype and the fix, and the fix
exists: ``sg.sym.load(fname, dtype=...)`` / ``load_json(text, dtype=...)`` /
``serialization.cast_pinned_dtypes(sym, dtype)`` recast the pinned float dtypes (integer pins stay), after which
``simple_bind(ctx, data=shape)`` binds every value in that dtype.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import symgrad as sg
from symgrad.serialization import cast_pinned_dtypes

S = sg.sym
FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: written by MXNet 1.9.1 (tests/fixtures/make_zoo.py): a Gluon model-zoo export, float32 pinned on every parameter
RESNET = FIXTURES / "zoo" / "resnet18_v1-symbol.json"
#: written by MXNet 1.9.1 (tests/fixtures/make_mxnet_models.py): a Gluon net cast to float64, then exported
GLUON64 = FIXTURES / "mxnet_models" / "gluon-symbol.json"


def _pinned_fc():
    """``data`` free; weight and bias pinned float32, as Gluon writes them."""
    w = S.Variable("w", dtype="float32")
    b = S.Variable("b", dtype="float32")
    return S.FullyConnected(S.Variable("data"), w, b, num_hidden=2, name="fc")


def _pins(sym):
    return {name: attrs["__dtype__"] for name, attrs in sym.attr_dict().items() if "__dtype__" in attrs}


# -- the error ----------------------------------------------------------------------------------------------


def test_simple_bind_names_the_node_the_pinning_variables_and_the_fix():
    with pytest.raises(TypeError) as info:
        _pinned_fc().simple_bind(sg.cpu(), data=(3, 4), type_dict={"data": np.float64})
    text = str(info.value)
    assert text.startswith("FullyConnected 'fc': ")
    assert "The __dtype__ attributes of 'b' and 'w' pin float32" in text
    assert "2 variables of this graph pin float32" in text and "while 'data' is float64" in text
    assert "symgrad.sym.load(fname, dtype='float64')" in text
    assert "symgrad.serialization.cast_pinned_dtypes(sym, 'float64')" in text
    assert "type_dict={name: np.float64 for name in sym.list_inputs()}" in text


def test_infer_type_says_the_same():
    with pytest.raises(TypeError, match=r"FullyConnected 'fc': .*'b' and 'w' pin float32.*dtype='float64'"):
        _pinned_fc().infer_type(data=np.float64)


def test_a_conflict_without_pins_is_not_blamed_on_them():
    net = S.FullyConnected(S.Variable("data"), S.Variable("w"), num_hidden=2, no_bias=True, name="fc")
    with pytest.raises(TypeError) as info:
        net.simple_bind(sg.cpu(), data=(3, 4), w=(2, 4), type_dict={"data": np.float64, "w": np.float32})
    assert "__dtype__" not in str(info.value)


def test_bind_with_arrays_of_two_dtypes_is_not_blamed_on_the_pins():
    # bind takes the arrays' dtypes: what the caller passed decides, not the attributes
    args = {"data": np.ones((3, 4)), "w": np.ones((2, 4), np.float32), "b": np.ones(2, np.float32)}
    with pytest.raises(TypeError) as info:
        _pinned_fc().bind(sg.cpu(), args)
    assert "__dtype__" not in str(info.value)


def test_a_real_gluon_export_names_its_pinned_weight():
    sym = S.load(RESNET)
    with pytest.raises(TypeError) as info:
        sym.simple_bind(sg.cpu(), data=(1, 3, 32, 32), type_dict={"data": np.float64})
    text = str(info.value)
    assert text.startswith("Convolution 'resnetv10_conv0_fwd': inputs must have the same dtype")
    pinned = sum(1 for attrs in sym.attr_dict().values() if attrs.get("__dtype__") == "0")
    assert pinned > 60
    assert "The __dtype__ attribute of 'resnetv10_conv0_weight' pins float32 (Gluon's export writes one on " in text
    assert f"{pinned} variables of this graph pin float32), while 'data' is float64" in text
    assert "dtype='float64'" in text


def test_the_aux_states_a_type_dict_of_the_arguments_leaves_pinned_are_named():
    sym = S.load(RESNET)
    with pytest.raises(TypeError) as info:
        sym.simple_bind(sg.cpu(), data=(1, 3, 32, 32), type_dict=dict.fromkeys(sym.list_arguments(), np.float64))
    text = str(info.value)
    assert text.startswith("BatchNorm 'resnetv10_batchnorm0_fwd'")
    assert "'resnetv10_batchnorm0_running_mean' and 'resnetv10_batchnorm0_running_var' pin float32" in text


# -- the fix --------------------------------------------------------------------------------------------------


def test_cast_pinned_dtypes_binds_every_value_in_the_dtype_and_leaves_the_symbol_alone():
    net = _pinned_fc()
    before = _pins(net)
    net64 = cast_pinned_dtypes(net, np.float64)
    assert _pins(net) == before == {"w": "0", "b": "0"}
    assert _pins(net64) == {"w": "1", "b": "1"}
    exe = net64.simple_bind(sg.cpu(), data=(3, 4))
    assert {a.dtype for a in exe.arg_arrays} == {np.dtype(np.float64)}
    x, w, b = np.arange(12.0).reshape(3, 4) / 7, np.arange(8.0).reshape(2, 4) / 3, np.array([0.5, -1.0])
    out = exe.forward(data=x, w=w, b=b)[0]
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, x @ w.T + b)


def test_integer_pins_stay():
    label = S.Variable("label", dtype="int32")
    net = S.Group([_pinned_fc(), S.BlockGrad(label)])
    assert _pins(cast_pinned_dtypes(net, "float64")) == {"w": "1", "b": "1", "label": "4"}


def test_the_fix_matches_a_type_dict_of_every_input_on_a_real_export():
    # the route MXNet 1.9.1 also accepts (type_dict for every input, aux states included) and the recast file
    # bind the same float64 arrays and compute the same outputs
    by_load = S.load(RESNET, dtype="float64").simple_bind(sg.cpu(), data=(1, 3, 32, 32), grad_req="null")
    sym = S.load(RESNET)
    by_type_dict = sym.simple_bind(
        sg.cpu(), data=(1, 3, 32, 32), grad_req="null", type_dict=dict.fromkeys(sym.list_inputs(), np.float64)
    )
    rng = np.random.default_rng(0)
    for exe in (by_load, by_type_dict):
        assert {a.dtype for a in [*exe.arg_arrays, *exe.aux_arrays]} == {np.dtype(np.float64)}
    for name, arr in by_load.arg_dict.items():
        arr[:] = by_type_dict.arg_dict[name][:] = rng.standard_normal(arr.shape) * 0.1
    for name, arr in by_load.aux_dict.items():
        arr[:] = by_type_dict.aux_dict[name][:] = rng.uniform(0.5, 1.5, arr.shape)
    a, b = by_load.forward()[0], by_type_dict.forward()[0]
    assert a.dtype == np.float64
    np.testing.assert_array_equal(a, b)


def test_a_float64_export_recast_to_float32():
    # this MXNet-written file pins float64 (net.cast('float64') before export): float32 data meets float64 pins
    with pytest.raises(TypeError, match=r"pin float64.*while 'data' is float32.*dtype='float32'"):
        S.load(GLUON64).simple_bind(sg.cpu(), data=(2, 3, 6, 6), type_dict={"data": np.float32})
    exe = S.load(GLUON64, dtype=np.float32).simple_bind(sg.cpu(), data=(2, 3, 6, 6))
    assert {a.dtype for a in [*exe.arg_arrays, *exe.aux_arrays]} == {np.dtype(np.float32)}


def test_load_json_takes_the_keyword_too():
    text = _pinned_fc().tojson()
    assert _pins(S.load_json(text, dtype="float16")) == {"w": "2", "b": "2"}
    assert _pins(S.load_json(text)) == {"w": "0", "b": "0"}


@pytest.mark.parametrize("bad", ["int32", "bogus", None, bool])
def test_a_dtype_that_is_not_a_float_is_refused(bad, tmp_path):
    with pytest.raises(TypeError, match=r"cast_pinned_dtypes: dtype=.* cannot recast the pinned dtypes; give one of"):
        cast_pinned_dtypes(_pinned_fc(), bad)
    if bad is not None:  # None is the keyword's default: no recast
        path = tmp_path / "m-symbol.json"
        path.write_text(_pinned_fc().tojson())
        with pytest.raises(TypeError, match=r"^load: dtype="):
            S.load(path, dtype=bad)
        with pytest.raises(TypeError, match=r"^load_json: dtype="):
            S.load_json(path.read_text(), dtype=bad)


def test_cast_pinned_dtypes_wants_a_symbol():
    with pytest.raises(TypeError, match=r"cast_pinned_dtypes: expected a Symbol, got dict"):
        cast_pinned_dtypes(json.loads(_pinned_fc().tojson()), "float64")


def test_a_control_flow_subgraph_is_recast_too():
    w = S.Variable("w", dtype="float32")

    def body(x, states):
        inner = S.Variable("k", dtype="float32")  # a variable of the subgraph itself
        return x * w, [states[0] + x * inner]

    out, states = S.contrib.foreach(body, S.Variable("data"), [S.Variable("s")])
    loop = S.Group([out, *states])
    with pytest.raises(TypeError, match=r"'w' pins float32"):
        loop.infer_type(data=np.float64, s=np.float64, k=np.float64)
    recast = cast_pinned_dtypes(loop, "float64")
    doc = json.loads(recast.tojson())
    sub = doc["nodes"][-1]["subgraphs"][0]["nodes"]
    pinned_in = [
        [n["attrs"]["__dtype__"] for n in part if "__dtype__" in n.get("attrs", {})] for part in (doc["nodes"], sub)
    ]
    assert pinned_in == [["1", "1"], ["1"]]  # w and k outside, k inside the subgraph
    arg_types, _, _ = recast.infer_type(data=np.float64, s=np.float64)
    assert set(arg_types) == {np.float64}
