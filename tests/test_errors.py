"""Bad input: a clear error naming the culprit, a built-in exception type, and no array changed."""

import sys

import numpy as np
import pytest

import symgrad as sg

S = sg.sym


def _net():
    x = S.Variable("x")
    return S.FullyConnected(x, num_hidden=2, name="fc")


def _arrays():
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((3, 4)), "fc_weight": rng.standard_normal((2, 4)), "fc_bias": np.zeros(2)}


def _snapshot(d):
    return {k: v.copy() for k, v in d.items()}


def _unchanged(d, snap):
    for k in snap:
        np.testing.assert_array_equal(d[k], snap[k], err_msg=k)


def test_missing_argument_is_named():
    args = _arrays()
    del args["fc_weight"]
    with pytest.raises(ValueError, match="'fc_weight' is missing"):
        _net().bind(sg.cpu(), args)


def test_list_of_wrong_length():
    a = _arrays()
    with pytest.raises(ValueError, match=r"2 arrays.*3.*\['x', 'fc_weight', 'fc_bias'\]"):
        _net().bind(sg.cpu(), [a["x"], a["fc_weight"]])


def test_non_array_argument():
    a = _arrays()
    a["x"] = [[1.0] * 4] * 3
    with pytest.raises(TypeError, match="'x'.*numpy"):
        _net().bind(sg.cpu(), a)


def test_unknown_forward_keyword_and_wrong_shape_change_nothing():
    a = _arrays()
    snap = _snapshot(a)
    exe = _net().bind(sg.cpu(), a)
    with pytest.raises(ValueError, match="'y' is not an argument.*'x'"):
        exe.forward(x=np.ones((3, 4)), y=np.ones(2))
    with pytest.raises(ValueError, match=r"'fc_bias' has shape \(3,\), expected \(2,\)"):
        exe.forward(x=np.ones((3, 4)), fc_bias=np.ones(3))
    _unchanged(a, snap)  # the valid 'x' given alongside was not copied either


def test_wrong_out_grad_shape_and_count_and_missing_head_gradient():
    a = _arrays()
    grads = {k: np.full_like(v, 7.0) for k, v in a.items()}
    exe = _net().bind(sg.cpu(), a, args_grad=grads, grad_req="add")
    exe.forward(is_train=True)
    snap = _snapshot(grads)
    with pytest.raises(ValueError, match=r"'fc_output' has shape \(2, 3\), expected \(3, 2\)"):
        exe.backward(np.ones((2, 3)))
    with pytest.raises(ValueError, match="0 out_grads for 1 outputs"):
        exe.backward([])  # (more than one per output are ignored with a warning, as MXNet: test_mxnet_leniency)
    with pytest.raises(ValueError, match="head gradient is required for output 'fc_output'"):
        exe.backward()
    with pytest.raises(ValueError, match="'nope'.*not an output"):
        exe.backward({"nope": np.ones((3, 2))})
    _unchanged(grads, snap)


def test_backward_before_forward_that_reads_a_forward_value():
    # (a backward that reads only arguments and head gradients runs, as in MXNet: test_executor_mxnet.py)
    x = S.Variable("x")
    exe = S.exp(x).bind(sg.cpu(), {"x": np.ones(3)}, args_grad={"x": np.zeros(3)})
    with pytest.raises(ValueError, match="forward"):
        exe.backward(np.ones(3))


def test_shape_conflict_names_node_input_and_both_shapes():
    x = S.Variable("x")
    w = S.Variable("w", shape=(5, 7))
    net = S.FullyConnected(x, weight=w, num_hidden=5, name="fc")
    with pytest.raises(ValueError, match=r"FullyConnected 'fc'.*'weight'.*\(5, 7\).*\(5, 4\)"):
        net.infer_shape(x=(3, 4))
    a, b = S.Variable("a"), S.Variable("b")
    with pytest.raises(ValueError, match=r"elemwise_add 'plus'.*\(2, 3\).*\(3, 2\)"):
        S.elemwise_add(a, b, name="plus").infer_shape(a=(2, 3), b=(3, 2))
    with pytest.raises(ValueError, match=r"broadcast_add 'bc'.*\(2, 3\) and \(4,\)"):
        S.broadcast_add(a, b, name="bc").infer_shape(a=(2, 3), b=(4,))
    # at bind time too, before anything runs
    with pytest.raises(ValueError, match="elemwise_add"):
        (a + b).bind(sg.cpu(), {"a": np.ones((2, 3)), "b": np.ones((3, 2))})


@pytest.mark.parametrize(
    "make, pattern",
    [
        (lambda x: S.FullyConnected(x, num_hidden="x", name="fc"), r"FullyConnected 'fc'.*'num_hidden'.*int.*'x'"),
        (lambda x: S.FullyConnected(x, num_hiden=3, name="fc"), r"FullyConnected 'fc'.*unknown parameter 'num_hiden'"),
        (lambda x: S.FullyConnected(x, name="fc"), r"required parameter 'num_hidden'"),
        (lambda x: S.Activation(x, act_type="swish", name="a"), r"Activation 'a'.*'act_type'.*relu.*'swish'"),
        (lambda x: S.FullyConnected(x, num_hidden=2, no_bias="maybe", name="fc"), r"'no_bias'.*bool"),
        (lambda x: S.Reshape(x, shape="(2, x)", name="r"), r"Reshape 'r'.*'shape'"),
        (lambda x: S.exp(x, 3), r"exp.*positional input 1 must be a Symbol"),
    ],
)
def test_bad_op_parameters(make, pattern):
    with pytest.raises((TypeError, ValueError), match=pattern):
        make(S.Variable("x"))


def test_axis_out_of_range():
    x = S.Variable("x")
    with pytest.raises(ValueError, match=r"sum 's'.*'axis'=3.*2-d"):
        S.sum(x, axis=3, name="s").infer_shape(x=(2, 3))


@pytest.mark.parametrize("req", ["wirte", {"x": "sometimes"}, ["write", "write", "nope"]])
def test_unknown_grad_req(req):
    with pytest.raises(ValueError, match="grad_req.*'write', 'add', 'null'"):
        _net().simple_bind(sg.cpu(), grad_req=req, x=(3, 4))


def test_grad_req_dict_with_unknown_name_and_list_of_wrong_length():
    # MXNet ignores a request for a name that is no argument: a warning naming the nearest one
    with pytest.warns(UserWarning, match=r"\['fc_wieght'\], which are not arguments \(did you mean 'fc_weight'\?\)"):
        _net().simple_bind(sg.cpu(), grad_req={"fc_wieght": "write"}, x=(3, 4))
    with pytest.raises(ValueError, match="grad_req has 2 entries"):
        _net().simple_bind(sg.cpu(), grad_req=["write", "null"], x=(3, 4))


def test_grad_dict_typo_is_a_key_error_listing_names():
    exe = _net().simple_bind(sg.cpu(), x=(3, 4))
    with pytest.raises(KeyError, match="fc_wieght.*fc_weight"):
        exe.grad_dict["fc_wieght"]


def test_two_variables_with_the_same_name():
    a1, a2 = S.Variable("a"), S.Variable("a")
    with pytest.raises(ValueError, match="two different Variables are named 'a'"):
        (a1 + a2).list_arguments()
    with pytest.raises(ValueError, match="named 'a'"):
        (a1 * a2).simple_bind(sg.cpu(), a=(2,))


def test_simple_bind_lists_arguments_whose_shapes_cannot_be_inferred():
    a, b, c = S.Variable("a"), S.Variable("b"), S.Variable("c")
    net = a + S.FullyConnected(b, num_hidden=2, name="fc") * S.exp(c)
    with pytest.raises(ValueError, match=r"cannot infer the shapes of \['b', 'fc_weight'\]"):
        net.simple_bind(sg.cpu(), a=(3, 2))


def test_infer_shape_unknown_name():
    with pytest.raises(ValueError, match="'y' is not an input"):
        _net().infer_shape(y=(2,))


def test_bind_rejects_arrays_on_another_device():
    class FakeCupyArray:  # looks like a CuPy array living on gpu(1)
        __module__ = "cupy._core.core"

        class device:
            id = 1

        shape = (3, 4)

    a = _arrays()
    a["x"] = FakeCupyArray()
    with pytest.raises(ValueError, match=r"'x' lives on gpu\(1\).*bound to cpu\(0\)"):
        _net().bind(sg.cpu(), a)


def test_gpu_without_cupy_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    with pytest.raises(ImportError, match=r"gpu\(0\) needs CuPy: pip install symgrad\[gpu\]"):
        _net().simple_bind(sg.gpu(0), x=(3, 4))


def test_failing_operator_is_named_and_add_buffers_stay_unchanged():
    # a gradient failing half way through backward must not have touched any 'add' buffer
    x, y = S.Variable("x"), S.Variable("y")
    net = S.sum(x * 2.0) + S.sum(S.sqrt(y))
    gx, gy = np.full(3, 5.0), np.full(3, 5.0)
    exe = S.MakeLoss(net).bind(
        sg.cpu(), {"x": np.ones(3), "y": np.ones(3)}, args_grad={"x": gx, "y": gy}, grad_req="add"
    )
    exe.forward(is_train=True)
    with np.errstate(all="raise"):
        exe.arg_dict["y"][:] = 0.0  # forward values are stale now; backward divides by sqrt(0)
        exe.forward(is_train=True)
        with pytest.raises(FloatingPointError) as info:
            exe.backward()
    assert "sqrt" in "".join(getattr(info.value, "__notes__", [])) or "sqrt" in str(info.value)
    np.testing.assert_array_equal(gx, 5.0)
    np.testing.assert_array_equal(gy, 5.0)


# == every bad input of the issue: a built-in exception naming the culprit, and no array changed ==========


def _bn_net():
    x = S.Variable("x")
    return S.BatchNorm(S.FullyConnected(x, num_hidden=2, name="fc"), fix_gamma=False, name="bn")


_REQ = {"x": "null", "fc_weight": "write", "fc_bias": "add", "bn_gamma": "add", "bn_beta": "write"}


class _World:
    """User-owned arrays (arguments, dirty gradient buffers, auxiliary states) and an executor on them."""

    def __init__(self):
        rng = np.random.default_rng(42)
        self.net = _bn_net()
        self.args = {
            "x": rng.standard_normal((3, 4)),
            "fc_weight": rng.standard_normal((2, 4)),
            "fc_bias": rng.standard_normal(2),
            "bn_gamma": rng.random(2) + 0.5,
            "bn_beta": rng.standard_normal(2),
        }
        self.grads = {k: rng.standard_normal(v.shape) for k, v in self.args.items() if _REQ[k] != "null"}
        self.aux = {"bn_moving_mean": rng.standard_normal(2), "bn_moving_var": rng.random(2) + 0.5}
        self.exe = self.net.bind(sg.cpu(), self.args, args_grad=self.grads, grad_req=_REQ, aux_states=self.aux)
        self.exe.forward(is_train=True)  # a valid step first: the failing call comes after real state
        self.snap = {
            f"{kind}:{k}": v.copy()
            for kind, d in (("arg", self.args), ("grad", self.grads), ("aux", self.aux))
            for k, v in d.items()
        }

    def unchanged(self):
        for key, v in self.snap.items():
            kind, name = key.split(":")
            d = {"arg": self.args, "grad": self.grads, "aux": self.aux}[kind]
            np.testing.assert_array_equal(d[name], v, err_msg=f"{key} was modified")


def _without(d, key):
    return {k: v for k, v in d.items() if k != key}


class _FakeGpuArray:  # looks like a CuPy array living on gpu(0)
    __module__ = "cupy._core.core"

    class device:
        id = 0

    shape = (3, 4)


BAD_INPUTS = [
    (
        "missing argument",
        ValueError,
        r"'fc_weight' is missing",
        lambda w: w.net.bind(
            sg.cpu(), _without(w.args, "fc_weight"), args_grad=w.grads, grad_req=_REQ, aux_states=w.aux
        ),
    ),
    (
        "missing auxiliary state",
        ValueError,
        r"'bn_moving_var' is missing",
        lambda w: w.net.bind(sg.cpu(), w.args, args_grad=w.grads, aux_states=_without(w.aux, "bn_moving_var")),
    ),
    (
        "args list of wrong length",
        ValueError,
        r"list of 4 arrays.*5.*'bn_beta'",
        lambda w: w.net.bind(sg.cpu(), list(w.args.values())[:4], args_grad=w.grads, aux_states=w.aux),
    ),
    (
        "args_grad list of wrong length",
        ValueError,
        r"args_grad: got a list of 2 arrays",
        lambda w: w.net.bind(sg.cpu(), w.args, args_grad=list(w.grads.values())[:2], aux_states=w.aux),
    ),
    (
        "array on another device",
        ValueError,
        r"'x' lives on gpu\(0\).*bound to cpu\(0\)",
        lambda w: w.net.bind(sg.cpu(), {**w.args, "x": _FakeGpuArray()}, args_grad=w.grads, aux_states=w.aux),
    ),
    (
        "unknown keyword in forward",
        ValueError,
        r"'fc_wieght' is not an argument.*'fc_weight'",
        lambda w: w.exe.forward(is_train=True, x=np.zeros((3, 4)), fc_wieght=np.zeros((2, 4))),
    ),
    (
        "wrong shape in forward",
        ValueError,
        r"forward: 'fc_bias' has shape \(3,\), expected \(2,\)",
        lambda w: w.exe.forward(is_train=True, x=np.zeros((3, 4)), fc_bias=np.zeros(3)),
    ),
    (
        "non-numeric value in forward",
        TypeError,
        r"forward: 'x'",
        lambda w: w.exe.forward(is_train=True, x=np.full((3, 4), "a", dtype=object)),
    ),
    (
        "wrong out_grad shape",
        ValueError,
        r"out_grad for 'bn_output' has shape \(2, 3\), expected \(3, 2\)",
        lambda w: w.exe.backward(np.ones((2, 3))),
    ),
    (
        "wrong out_grad shape in a dict",
        ValueError,
        r"'bn_output' has shape \(3,\), expected \(3, 2\)",
        lambda w: w.exe.backward({"bn_output": np.ones(3)}),
    ),
    (
        "out_grads count mismatch",
        ValueError,
        r"got 0 out_grads for 1 outputs \['bn_output'\]",
        lambda w: w.exe.backward([]),
    ),
    (
        "out_grads names an unknown output",
        ValueError,
        r"'bn_out'.*not an output.*'bn_output'",
        lambda w: w.exe.backward({"bn_out": np.ones((3, 2))}),
    ),
    (
        "head gradient missing for a non-loss head",
        ValueError,
        r"head gradient is required for output 'bn_output'",
        lambda w: w.exe.backward(),
    ),
    (
        "shape conflict at bind",
        ValueError,
        r"FullyConnected 'fc'.*'weight'.*\(2, 4\).*\(2, 5\)",
        lambda w: w.net.bind(
            sg.cpu(), {**w.args, "x": np.zeros((3, 5))}, args_grad=w.grads, grad_req=_REQ, aux_states=w.aux
        ),
    ),
    (
        "gradient array of the wrong shape",
        ValueError,
        r"gradient array for 'fc_bias' has shape \(3,\)",
        lambda w: w.net.bind(sg.cpu(), w.args, args_grad={**w.grads, "fc_bias": np.zeros(3)}, aux_states=w.aux),
    ),
    (
        "unknown grad_req value",
        ValueError,
        r"grad_req for argument 'fc_bias'.*'write', 'add', 'null'.*'addd'",
        lambda w: w.net.bind(
            sg.cpu(), w.args, args_grad=w.grads, grad_req={**_REQ, "fc_bias": "addd"}, aux_states=w.aux
        ),
    ),
    (
        "grad_dict key typo",
        KeyError,
        r"'fc_wieght' is not an argument; valid names: \['bn_beta'",
        lambda w: w.exe.grad_dict["fc_wieght"],
    ),
    ("arg_dict key typo", KeyError, r"'xx' is not an argument", lambda w: w.exe.arg_dict["xx"]),
    (
        "two Variables with one name",
        ValueError,
        r"two different Variables are named 'x'",
        lambda w: S.Group([w.net, S.Variable("x") * 2.0]).bind(sg.cpu(), w.args, args_grad=w.grads, aux_states=w.aux),
    ),
    (
        "shapes that cannot be inferred",
        ValueError,
        r"cannot infer the shapes of \['x', 'fc_weight', 'bn_gamma', 'bn_beta', 'bn_moving_mean', 'bn_moving_var'\]",
        lambda w: w.net.simple_bind(sg.cpu()),
    ),
    (
        "unknown op parameter",
        TypeError,
        r"FullyConnected 'f2'.*unknown parameter 'num_hiden'",
        lambda w: S.FullyConnected(w.net, num_hiden=3, name="f2"),
    ),
    (
        "bad op parameter value",
        ValueError,
        r"FullyConnected 'f2'.*'num_hidden'.*'x'",
        lambda w: S.FullyConnected(w.net, num_hidden="x", name="f2"),
    ),
    (
        "copy_params_from with a wrong shape",
        ValueError,
        r"'fc_bias' has shape \(4,\), expected \(2,\)",
        lambda w: w.exe.copy_params_from({"fc_weight": np.zeros((2, 4)), "fc_bias": np.zeros(4)}),
    ),
]


@pytest.mark.parametrize("what, exc, pattern, act", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_raises_a_clear_builtin_error_and_changes_nothing(what, exc, pattern, act):
    w = _World()
    with pytest.raises(exc, match=pattern) as info:
        act(w)
    assert type(info.value).__module__ in ("builtins", "symgrad.base", "symgrad.symbol")
    w.unchanged()
    # and the executor still works afterwards: one more valid step is exactly as it would have been
    ref = _World()
    for e in (w.exe, ref.exe):
        e.forward(is_train=True)
        e.backward(np.ones((3, 2)))
    for k in w.grads:
        np.testing.assert_array_equal(w.grads[k], ref.grads[k], err_msg=k)
