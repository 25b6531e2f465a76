"""MXNet's attribute keywords, AttrScope/NameManager/Context as thread-local class properties, and the small
Symbol API around them (``bool(sym)``, ``_set_attr``, ``_gen_atomic_symbol``).

Each test names the MXNet 1.9.1 test (tests/python/unittest/) whose behaviour it checks; the expected values
were read off real MXNet 1.9.1 runs of the same calls.
"""

import json
import pickle
import threading

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import NotImplementedForSymbol
from symgrad.context import Context, set_default_context

S = sg.sym
mx = sg  # MXNet code ported to symgrad changes only its import


def _contains(small, big):
    """Every key of ``small`` is in ``big`` with the same value (recursively for dicts)."""
    return all(k in big and (_contains(v, big[k]) if isinstance(v, dict) else big[k] == v) for k, v in small.items())


# -- test_attr.py ---------------------------------------------------------------------------------------


def test_attr_basic():
    with mx.AttrScope(group="4", data="great"):
        data = mx.sym.Variable("data", attr={"dtype": "data", "group": "1", "force_mirroring": "True"}, lr_mult=1)
        gdata = mx.sym.Variable("data2")
    assert gdata.attr("group") == "4" and gdata.attr("data") == "great"
    assert data.attr("group") == "1"  # attr overrides the scope
    # lr_mult & co. are stored as __lr_mult__ and answer to both spellings
    assert data.attr("lr_mult") == "1" and data.attr("__lr_mult__") == "1"
    assert data.attr("force_mirroring") == "True" and data.attr("__force_mirroring__") == "True"
    stored = json.loads(data.tojson())["nodes"][0]["attrs"]
    assert stored == {
        "__force_mirroring__": "True",
        "__lr_mult__": "1",
        "data": "great",
        "dtype": "data",
        "group": "1",
    }  # MXNet 1.9.1 writes exactly these
    again = pickle.loads(pickle.dumps(data))
    assert again.attr("dtype") == data.attr("dtype") == "data"
    assert again.list_attr() == data.list_attr()


def test_operator_attributes_in_nested_scopes():
    # MXNet: test_attr.py::test_operator
    data = mx.sym.Variable("data")
    with mx.AttrScope(__group__="4", __data__="great"):
        fc1 = mx.sym.Activation(data, act_type="relu")
        with mx.AttrScope(__init_bias__="0.0"):
            fc2 = mx.sym.FullyConnected(fc1, num_hidden=10, name="fc2")
    assert fc1.attr("__data__") == "great"
    assert fc2.attr("__data__") == "great" and fc2.attr("__init_bias__") == "0.0"
    copy = pickle.loads(pickle.dumps(fc2))
    assert copy.tojson() == fc2.tojson()
    weight = fc2.get_internals()["fc2_weight"]
    assert weight.list_attr() == {"__group__": "4", "__data__": "great", "__init_bias__": "0.0"}
    assert data.list_attr() == {}  # made outside the scopes


def test_list_attr():
    data = mx.sym.Variable("data", attr={"mood": "angry"})
    op = mx.sym.Convolution(
        data=data, name="conv", kernel=(1, 1), num_filter=1, attr={"__mood__": "so so", "wd_mult": "x"}
    )
    assert op.list_attr() == {
        "__mood__": "so so",
        "__wd_mult__": "x",
        "wd_mult": "x",
        "kernel": "(1, 1)",
        "num_filter": "1",
    }


def test_attr_dict():
    data = mx.sym.Variable("data", attr={"mood": "angry"})
    op = mx.sym.Convolution(data=data, name="conv", kernel=(1, 1), num_filter=1, attr={"__mood__": "so so"}, lr_mult=1)
    mxnet_says = {
        "data": {"mood": "angry"},
        "conv_weight": {"__mood__": "so so"},
        "conv": {"kernel": "(1, 1)", "__mood__": "so so", "num_filter": "1", "lr_mult": "1", "__lr_mult__": "1"},
        "conv_bias": {"__mood__": "so so"},
    }
    got = op.attr_dict()
    assert _contains(mxnet_says, got)
    # the automatic weight and bias carry the op's attributes (not its parameters: see the README)
    assert got["conv_weight"] == got["conv_bias"] == {"__mood__": "so so", "__lr_mult__": "1", "lr_mult": "1"}
    # the file holds only the stored (__x__) spelling, as MXNet's
    nodes = {n["name"]: n.get("attrs", {}) for n in json.loads(op.tojson())["nodes"]}
    assert nodes["conv"] == {"__lr_mult__": "1", "__mood__": "so so", "kernel": "(1, 1)", "num_filter": "1"}
    assert nodes["conv_weight"] == {"__lr_mult__": "1", "__mood__": "so so"}
    assert sg.sym.load_json(op.tojson()).attr_dict() == got


def test_attribute_keywords_of_op_creators():
    x = S.Variable("x")
    with sg.AttrScope(ctx_group="dev1"):
        fc = S.FullyConnected(x, num_hidden=3, name="fc", wd_mult=0.5, force_mirroring="True", __note__="n")
        e = S.exp(fc, name="e")  # a creator's fast path (every input given) honours the scope too
    assert fc.attr("wd_mult") == "0.5" and fc.attr("ctx_group") == "dev1" and fc.attr("__note__") == "n"
    assert fc.attr("force_mirroring") == "True"
    assert e.list_attr() == {"__ctx_group__": "dev1", "ctx_group": "dev1"}
    weight = fc.get_internals()["fc_weight"]
    assert weight.attr("__wd_mult__") == "0.5" and weight.attr("__ctx_group__") == "dev1"
    assert x.attr("ctx_group") is None
    # parameters are unaffected: the op computes what it computed
    assert fc.list_arguments() == ["x", "fc_weight", "fc_bias"]
    assert fc.infer_shape(x=(2, 4))[0] == [(2, 4), (3, 4), (3,)]
    # MXNet's creators order: keyword < AttrScope < attr
    with sg.AttrScope(lr_mult="2"):
        assert S.exp(x, lr_mult=1).attr("lr_mult") == "2"
    assert S.exp(x, lr_mult=1, attr={"lr_mult": "3"}).attr("lr_mult") == "3"


def test_input_attributes_spelled_as_mxnet_0x_are_refused():
    # MXNet 1.x refuses ``weight_lr_mult`` (the weight input's lr_mult in MXNet 0.x), naming the way out
    with pytest.raises(ValueError, match=r"'weight_lr_mult'.*Variable\(\.\.\., lr_mult="):
        S.FullyConnected(S.Variable("x"), num_hidden=3, weight_lr_mult=2)
    with pytest.raises(ValueError, match="'weight_lr_mult'"):
        S.Variable("w", attr={"weight_lr_mult": "2"})
    with pytest.raises(ValueError, match="double underscores"):
        S.Variable("w", mood="x")  # Variable keywords must be __dunder__ (MXNet's rule)


def test_set_attr_changes_the_node_in_place():
    x = S.Variable("x")
    fc = S.FullyConnected(x, num_hidden=3, name="fc")
    same = fc.get_internals()["fc_output"]
    fc._set_attr(lr_mult="5", foo="bar")
    assert same.attr("lr_mult") == "5" and same.attr("foo") == "bar"  # every Symbol of the node sees it
    assert fc.list_attr() == {"num_hidden": "3", "__lr_mult__": "5", "lr_mult": "5", "foo": "bar"}
    with pytest.raises(ValueError, match="strings"):
        fc._set_attr(x=1)
    with pytest.raises(ValueError, match="'num_hidden' is a parameter of FullyConnected"):
        fc._set_attr(num_hidden="5")
    assert fc.attr("num_hidden") == "3" and fc.infer_shape(x=(2, 4))[1] == [(2, 3)]
    with pytest.raises(ValueError, match="one node"):
        S.Group([fc, x])._set_attr(a="1")
    fc._set_attr(name="dense")
    assert fc.name == "dense" and fc.list_outputs() == ["dense_output"]


def test_gen_atomic_symbol_multiple_outputs():
    data, p, h0, h1 = (S.Variable(n) for n in ("data", "param", "h0", "h1"))
    s = S.RNN(data, p, h0, h1, state_size=10, num_layers=2, bidirectional=True, state_outputs=True, mode="lstm")
    atomic = s._gen_atomic_symbol()
    assert atomic.list_outputs() == s.list_outputs() and len(atomic) == 3
    assert atomic.list_arguments() == ["data", "parameters", "state", "state_cell"]
    assert atomic.attr_dict()[s[0].name] == s.list_attr()


def test_gen_atomic_symbol_applies_the_same_op_to_new_inputs():
    x = S.Variable("x")
    with sg.AttrScope(__group__="g"):
        fc = S.FullyConnected(x, num_hidden=2, name="fc", lr_mult=2)
    atomic = fc._gen_atomic_symbol()
    a, w, b = S.Variable("a"), S.Variable("w"), S.Variable("b")
    y = atomic(a, w, b)  # as MXNet's amp wraps an op: the atomic symbol called on the new inputs
    assert y.list_arguments() == ["a", "w", "b"] and y.list_attr() == fc.list_attr()
    rng = np.random.default_rng(0)
    av, wv, bv = rng.standard_normal((3, 4)), rng.standard_normal((2, 4)), rng.standard_normal(2)
    (out,) = y.bind(sg.cpu(), {"a": av, "w": wv, "b": bv}).forward()
    np.testing.assert_allclose(out, av @ wv.T + bv, rtol=1e-12)
    atomic._set_attr(foo="1")
    assert fc.attr("foo") is None  # the atomic symbol holds a copy of the attributes
    with pytest.raises(ValueError, match="'x' is a Variable"):
        x._gen_atomic_symbol()  # (MXNet 1.9.1 crashes here)
    with pytest.raises(ValueError, match="one node"):
        S.Group([fc, S.exp(x)])._gen_atomic_symbol()


def test_bool_of_a_symbol_is_mxnets_error():
    with pytest.raises(NotImplementedForSymbol) as info:
        bool(S.Variable("x"))
    assert str(info.value) == (
        'Function __bool__ (namely operator "bool") is not implemented for Symbol and only available in NDArray.'
    )
    assert isinstance(info.value, TypeError) and isinstance(info.value, sg.MXNetError)
    with pytest.raises(TypeError):
        if S.Variable("x") > 0:  # the usual slip: comparing symbols in Python control flow
            pass


# -- test_thread_local.py ----------------------------------------------------------------------------------


@pytest.fixture
def fresh_scopes():
    yield
    set_default_context(None)
    Context.default_ctx = sg.cpu()
    sg.AttrScope.current = sg.AttrScope()
    sg.NameManager.current = sg.NameManager()


def test_context(fresh_scopes):
    from symgrad.test_utils import set_default_context as tu_set_default_context

    seen = [Context.default_ctx]

    def f():
        tu_set_default_context(sg.gpu(11))  # bookkeeping only: no GPU needed
        seen.append(Context.default_ctx)

    t = threading.Thread(target=f)
    t.start()
    t.join()
    assert Context.devtype2str[seen[0].device_typeid] == "cpu" and seen[0].device_id == 0
    assert Context.devtype2str[seen[1].device_typeid] == "gpu" and seen[1].device_id == 11
    set_default_context(None)

    event, status = threading.Event(), [False]

    def g():
        with sg.cpu(10):
            event.wait()
            status[0] = Context.default_ctx.device_id == 10

    t = threading.Thread(target=g)
    t.start()
    Context.default_ctx = Context("cpu", 11)  # this thread only
    event.set()
    t.join()
    assert status[0], "the spawned thread's with-block was overridden by another thread's default_ctx"
    assert sg.current_context() == Context.default_ctx == sg.cpu(11)
    seen = []
    t = threading.Thread(target=lambda: seen.append(Context.default_ctx))
    t.start()
    t.join()
    assert seen == [sg.cpu(0)]  # a new thread starts from the process default


def test_default_ctx_inside_a_with_block_lasts_until_the_block_ends(fresh_scopes):
    with sg.cpu(3):
        Context.default_ctx = sg.cpu(4)
        assert sg.current_context() == sg.cpu(4)
    assert sg.current_context() == sg.cpu(0)  # the block restores what it replaced, as MXNet's
    with pytest.raises(TypeError, match="must be a Context"):
        Context.default_ctx = "cpu"


def test_attrscope(fresh_scopes):
    scopes = []
    sg.AttrScope.current = sg.AttrScope(y="hi", z="hey")
    scopes.append(sg.AttrScope.current)

    def f():
        sg.AttrScope.current = sg.AttrScope(x="hello")
        scopes.append(sg.AttrScope.current)

    t = threading.Thread(target=f)
    t.start()
    t.join()
    assert len(scopes[0]._attr) == 2 and scopes[1]._attr["x"] == "hello"
    assert S.Variable("v").list_attr() == {"y": "hi", "z": "hey"}  # the assigned scope is used

    event, status = threading.Event(), [False]

    def g():
        with sg.AttrScope(x="hello"):
            event.wait()
            status[0] = "hello" in sg.AttrScope.current._attr.values()

    t = threading.Thread(target=g)
    t.start()
    sg.AttrScope.current = sg.AttrScope(x="hi")
    event.set()
    t.join()
    assert status[0], "the spawned thread's AttrScope was replaced by another thread's"
    with pytest.raises(TypeError, match="AttrScope.current must be a AttrScope"):
        sg.AttrScope.current = {"x": "1"}


def test_attr_scope_nesting_and_values():
    with sg.AttrScope(a="1", b="2") as outer:
        with sg.AttrScope(b="3") as inner:
            assert sg.AttrScope.current is inner and inner._attr == {"a": "1", "b": "3"}
        assert sg.AttrScope.current is outer
    assert sg.AttrScope.current._attr == {}
    with pytest.raises(ValueError, match="'lr'.*string"):
        sg.AttrScope(lr=0.1)  # MXNet: ValueError("Attributes need to be string")


def test_name(fresh_scopes):
    managers = []
    sg.NameManager.current = sg.NameManager()
    sg.NameManager.current.get(None, "main_thread")
    managers.append(sg.NameManager.current)

    def f():
        sg.NameManager.current = sg.NameManager()
        sg.NameManager.current.get(None, "spawned_thread")
        managers.append(sg.NameManager.current)

    t = threading.Thread(target=f)
    t.start()
    t.join()
    assert "main_thread" in managers[0]._counter and "spawned_thread" in managers[1]._counter
    assert "spawned_thread" not in managers[0]._counter

    status = [False]

    def g():
        with sg.NameManager():
            status[0] = "main_thread" not in sg.NameManager.current._counter

    t = threading.Thread(target=g)
    t.start()
    t.join()
    assert status[0], "the spawned thread used another thread's NameManager"
    # creators name with the current manager, assigned or entered
    sg.NameManager.current = sg.NameManager()
    assert S.exp(S.Variable("x")).name == "exp0" and S.exp(S.Variable("x")).name == "exp1"
    with sg.Prefix("p_"):
        assert sg.NameManager.current.get(None, "exp") == "p_exp0"
    assert S.exp(S.Variable("x")).name == "exp2"
