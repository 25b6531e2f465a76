"""MXNet 1.9.1 API details symgrad users rely on (issue 11): op namespaces, ``mx.operator``'s registry queries,
outputs allocated at bind, positional parameters, fluent methods, ``simple_bind``'s ignored keywords, partial
shape inference with unknown (0) dimensions, integer dtypes in gradients, and custom-op arrays and errors.

Every expected value below was printed by MXNet 1.9.1 (``/work/mxvenv``) for the same call.
"""

import sys
import warnings

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ParamError, SymgradError

S = sg.sym


# == 1. namespaces and mx.operator's registry queries ============================================================


def test_prefixed_ops_live_in_their_namespace_modules_as_mxnet_spells_them():
    import symgrad.sym.linalg as linalg  # a real module: the import statement works

    assert linalg is S.linalg is sys.modules["symgrad.sym.linalg"]
    a, b = S.Variable("a"), S.Variable("b")
    with sg.NameManager():
        g = S.linalg.gemm2(a, b)
    assert g.name == "gemm20"  # MXNet: mx.sym.linalg.gemm2(a, b).name == 'gemm20'
    assert g.heads()[0].op_name == "_linalg_gemm2"
    from symgrad.sym import contrib, image

    assert contrib is S.contrib and image is S.image


def test_mx_symbol_is_the_same_namespace_as_mx_sym():
    """MXNet code spells the namespace both ways (``mx.symbol.FullyConnected``, ``mx.symbol.load``,
    ``mx.symbol.contrib.foreach``): ``sg.symbol`` answers every name of ``sg.sym`` with the same object, lists
    them in ``dir``, and a name neither has is an AttributeError naming it."""
    mx = sg
    for name in ("FullyConnected", "Convolution", "relu", "load", "load_json", "Group", "contrib", "linalg"):
        assert getattr(mx.symbol, name) is getattr(mx.sym, name), name
    assert mx.symbol.contrib.foreach is mx.sym.contrib.foreach
    assert {"FullyConnected", "Symbol", "Variable"} <= set(dir(mx.symbol))
    net = mx.symbol.FullyConnected(mx.symbol.Variable("x"), num_hidden=3, name="fc")
    assert net.list_arguments() == ["x", "fc_weight", "fc_bias"]
    with pytest.raises(AttributeError, match="'NoSuchOp'"):
        getattr(mx.symbol, "NoSuchOp")  # noqa: B009  (the attribute access itself is under test)


def test_every_prefixed_registered_op_is_in_its_namespace():
    from symgrad.opdef import list_ops

    for opname, op in list_ops().items():
        for prefix, sub in (
            ("_contrib_", "contrib"),
            ("_linalg_", "linalg"),
            ("_image_", "image"),
            ("_random_", "random"),
        ):
            if opname.startswith(prefix):
                func = getattr(getattr(S, sub), opname[len(prefix) :])
                assert callable(func), opname
                if sub != "random":  # random's Python wrappers may stand in for the raw creator
                    assert func._op is op, opname


def test_random_namespace_has_mxnet_names():
    assert {"uniform", "normal", "uniform_like"} <= set(dir(S.random))
    x = S.Variable("x")
    with sg.NameManager():
        u = S.random.uniform_like(x)
    assert u.name == "uniform_like0"  # MXNet's automatic name
    assert u.infer_shape(x=(2, 3))[1] == [(2, 3)]
    assert callable(S.random.uniform)


def test_get_all_registered_operators():
    names = sg.operator.get_all_registered_operators()
    assert names == sorted(names) and isinstance(names, list)
    assert {"FullyConnected", "Convolution", "_linalg_gemm2", "Custom", "elemwise_add"} <= set(names)


@pytest.mark.parametrize(
    "op, names, types",
    [
        # MXNet 1.9.1's exact answers
        (
            "repeat",
            ["data", "repeats", "axis"],
            ["NDArray-or-Symbol", "int, required", "int or None, optional, default='None'"],
        ),
        (
            "Dropout",
            ["data", "p", "mode", "axes", "cudnn_off"],
            [
                "NDArray-or-Symbol",
                "float, optional, default=0.5",
                "{'always', 'training'},optional, default='training'",
                "Shape(tuple), optional, default=[]",
                "boolean or None, optional, default=0",
            ],
        ),
        ("tile", ["data", "reps"], ["NDArray-or-Symbol", "Shape(tuple), required"]),
        ("elemwise_add", ["lhs", "rhs"], ["NDArray-or-Symbol", "NDArray-or-Symbol"]),
        (
            "Activation",
            ["data", "act_type"],
            ["NDArray-or-Symbol", "{'relu', 'sigmoid', 'softrelu', 'softsign', 'tanh'}, required"],
        ),
    ],
)
def test_get_operator_arguments_matches_mxnet(op, names, types):
    got = sg.operator.get_operator_arguments(op)
    assert got == (len(names), names, types)
    assert (got.narg, got.names, got.types) == (len(names), names, types)
    assert type(got).__name__ == "OperatorArguments"


def test_get_operator_arguments_names_in_mxnet_order():
    # names only (MXNet's C type names -- double, long, int (non-negative) -- are not reproduced)
    want = {
        "Convolution": (
            "data weight bias kernel stride dilate pad "
            "num_filter num_group workspace no_bias cudnn_tune cudnn_off layout"
        ).split(),
        "Deconvolution": (
            "data weight bias kernel stride dilate pad adj target_shape "
            "num_filter num_group workspace no_bias cudnn_tune cudnn_off layout"
        ).split(),
        "Concat": ["data", "num_args", "dim"],
        "Cast": ["data", "dtype"],
        "FullyConnected": ["data", "weight", "bias", "num_hidden", "no_bias", "flatten"],
    }
    for op, names in want.items():
        assert sg.operator.get_operator_arguments(op).names == names, op
    assert sg.operator.get_operator_arguments("Concat").types[0] == "NDArray-or-Symbol[]"
    with pytest.raises(ValueError, match="unknown operator 'NoSuchOp'"):
        sg.operator.get_operator_arguments("NoSuchOp")


# == 2. Executor.outputs allocated at bind ========================================================================


def test_outputs_exist_before_forward_and_forward_writes_into_them():
    x = S.Variable("x")
    net = S.Group([S.FullyConnected(x, num_hidden=3, name="fc"), S.Cast(x, dtype="int32", name="c")])
    exe = net.simple_bind(sg.cpu(), x=(2, 4))
    before = exe.outputs
    assert [(o.shape, o.dtype) for o in before] == [((2, 3), np.float32), ((2, 4), np.int32)]
    assert all(not o.any() for o in before)
    first = before[0]
    out = exe.forward(x=np.ones((2, 4)))
    assert out is exe.outputs and out[0] is first  # the same arrays, updated
    exe.arg_dict["fc_weight"][:] = 1.0
    exe.forward()
    np.testing.assert_array_equal(first, np.full((2, 3), 4.0))  # a reference taken before forward sees it
    np.testing.assert_array_equal(exe.output_dict["c_output"], np.ones((2, 4)))


def test_outputs_never_alias_the_arguments():
    x = S.Variable("x")
    exe = S.reshape(x, shape=(4,)).bind(sg.cpu(), {"x": np.arange(4.0).reshape(2, 2)})
    y = exe.forward()[0]
    y[:] = -1.0
    np.testing.assert_array_equal(exe.arg_dict["x"], np.arange(4.0).reshape(2, 2))


# == 3. positional parameters after the inputs ===================================================================


def test_parameters_given_positionally_in_mxnet_order():
    x, w = S.Variable("x"), S.Variable("w")
    assert S.repeat(x, 2).list_attr() == {"repeats": "2"}  # MXNet: {'repeats': '2'}
    assert S.tile(x, (2, 3)).list_attr() == {"reps": "(2, 3)"}
    assert S.depth_to_space(x, 2).list_attr() == {"block_size": "2"}
    assert S.repeat(x, 2, 1).infer_shape(x=(2, 3))[1] == [(2, 6)]
    conv = S.Convolution(x, w, None, (3, 3), num_filter=2, no_bias=True, name="c")
    assert conv.list_arguments() == ["x", "w"]  # MXNet: ['a', 'b'] for the same call
    assert conv.infer_shape(x=(1, 1, 5, 5))[1] == [(1, 2, 3, 3)]
    # None is an absent input: the variable is created as if it were not given
    assert S.Convolution(x, None, None, kernel=(3, 3), num_filter=2, name="c2").list_arguments() == [
        "x",
        "c2_weight",
        "c2_bias",
    ]
    d = S.Deconvolution(x, w, None, (2, 2), (2, 2), (), (0, 0), (1, 1), num_filter=1, no_bias=True)
    assert d.infer_shape(x=(1, 1, 3, 3), w=(1, 1, 2, 2))[1] == [(1, 1, 7, 7)]  # adj=(1, 1) after pad


def test_bad_positional_parameters_name_the_op():
    x = S.Variable("x")
    with pytest.raises(ParamError, match=r"repeat 'rp'.*positional input 3.*\['repeats', 'axis'\]"):
        S.repeat(x, 2, 0, 5, name="rp")
    with pytest.raises(ParamError, match=r"repeat 'rq'.*'repeats' given both positionally and by keyword"):
        S.repeat(x, 2, repeats=3, name="rq")
    with pytest.raises(ParamError, match=r"repeat 'rs'.*Symbol after the parameter values"):
        S.repeat(x, 2, x, name="rs")
    with pytest.raises(ParamError, match=r"add_n 'an'.*positional input 1 must be a Symbol.*no parameters"):
        S.add_n(x, 2, name="an")
    with pytest.raises(ParamError, match=r"exp 'e'.*positional input 1 must be a Symbol"):
        S.exp(x, 3, name="e")


# == 4. fluent methods and eval ==================================================================================

_MXNET_FLUENT = (
    "reshape reshape_like astype zeros_like ones_like broadcast_axes repeat pad swapaxes split split_v2 slice "
    "slice_axis slice_like take one_hot pick sort topk argsort argmax argmax_channel argmin clip abs sign flatten "
    "shape_array size_array expand_dims broadcast_to broadcast_like tile transpose flip depth_to_space "
    "space_to_depth diag sum nansum prod nanprod mean max min norm round rint fix floor ceil trunc sin cos tan "
    "arcsin arccos arctan degrees radians sinh cosh tanh arcsinh arccosh arctanh exp expm1 log log10 log2 log1p "
    "sqrt rsqrt cbrt rcbrt square reciprocal relu sigmoid softmax log_softmax softmin squeeze"
).split()


def test_every_mxnet_fluent_method_exists():
    from symgrad.symbol import FLUENT_METHODS

    assert set(_MXNET_FLUENT) == set(FLUENT_METHODS)
    for name in _MXNET_FLUENT:
        assert callable(getattr(S.Symbol, name)), name


def test_fluent_methods_build_the_op_with_this_symbol_as_data():
    x = S.Variable("x")
    assert x.sum(1).list_attr() == {"axis": "1"}  # MXNet: {'axis': '1'}
    with sg.NameManager():
        assert x.softmax(axis=1).name == "softmax0"  # hint as mx.sym.softmax's
    assert x.reshape((2, -1)).infer_shape(x=(4, 3))[1] == [(2, 6)]
    assert x.expand_dims(1).infer_shape(x=(4, 3))[1] == [(4, 1, 3)]
    assert x.astype("float64").infer_type(x="float32")[1] == [np.float64]
    assert x.transpose().infer_shape(x=(4, 3))[1] == [(3, 4)]
    v = np.array([[1.0, -2.0], [3.0, 0.5]])
    np.testing.assert_allclose(x.abs().max(axis=0).eval(x=v)[0], [3.0, 2.0])
    np.testing.assert_allclose(x.square().sum().eval(x=v)[0], [14.25])


def test_fluent_method_of_a_missing_op_names_it():
    # MXNet's Symbol.split_v2 calls an op symgrad does not register (split_v2; its SliceChannel form is there)
    assert "split_v2" not in sg.operator.get_all_registered_operators()
    with pytest.raises(NotImplementedError, match=r"Symbol.split_v2.*'split_v2'"):
        S.Variable("x").split_v2(2)


def test_eval_binds_and_returns_the_outputs():
    a, b = S.Variable("a"), S.Variable("b")
    out = (a + b).eval(ctx=sg.cpu(), a=np.ones((2, 3)), b=np.ones((2, 3)))
    assert isinstance(out, list) and len(out) == 1
    np.testing.assert_array_equal(out[0], np.full((2, 3), 2.0))
    with pytest.raises(ValueError, match="'b' is missing"):
        (a + b).eval(a=np.ones(2))


# == 5. simple_bind ignores unknown non-shape keywords =============================================================


@pytest.mark.parametrize("value", [1.0, "bar", None, {"k": 1}])
def test_simple_bind_warns_about_a_keyword_that_is_no_input_and_no_shape(value):
    x = S.Variable("x")
    with pytest.warns(UserWarning, match=r"simple_bind: ignoring keyword foo="):
        exe = (x * 2.0).simple_bind(sg.cpu(), x=(2, 3), foo=value)
    assert exe.arg_dict["x"].shape == (2, 3)


def test_simple_bind_still_rejects_a_shape_for_a_misspelled_argument():
    x = S.Variable("x")
    net = S.FullyConnected(x, num_hidden=4, name="fc")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"'fc_wieght'.*did you mean 'fc_weight'"):
            net.simple_bind(sg.cpu(), x=(2, 3), fc_wieght=(4, 3))


# == 6. partial shape inference, 0 = unknown dimension ===========================================================


def test_infer_shape_partial_with_unknown_dimensions_matches_mxnet():
    d = S.Variable("data")
    fc = S.FullyConnected(d, num_hidden=5, name="fc")
    assert fc.infer_shape_partial(data=(0, 3)) == ([(0, 3), (5, 3), (5,)], [(0, 5)], [])
    with pytest.warns(UserWarning, match="Cannot decide shape"):  # MXNet's warning
        assert fc.infer_shape(data=(0, 3)) == (None, None, None)
    conv = S.Convolution(d, kernel=(3, 3), num_filter=4, name="c")
    assert conv.infer_shape_partial(data=(0, 3, 8, 8)) == ([(0, 3, 8, 8), (4, 3, 3, 3), (4,)], [(0, 4, 6, 6)], [])
    assert conv.infer_shape_partial(data=(2, 0, 8, 8)) == ([(2, 0, 8, 8), (4, 0, 3, 3), (4,)], [(2, 4, 6, 6)], [])
    e = d + S.Variable("b")
    assert e.infer_shape_partial(data=(0, 3)) == ([(0, 3), (0, 3)], [(0, 3)], [])
    # the two partial shapes complete each other
    assert e.infer_shape_partial(data=(0, 3), b=(2, 0)) == ([(2, 3), (2, 3)], [(2, 3)], [])
    assert e.infer_shape(data=(0, 3), b=(2, 0)) == ([(2, 3), (2, 3)], [(2, 3)], [])


def test_unknown_batch_through_reshape_and_fully_connected():
    d = S.Variable("data")
    net = S.FullyConnected(S.Reshape(d, shape=(0, -1)), num_hidden=3, name="f")
    # MXNet leaves Reshape's output (0, 0); the copied batch dimension cancels, so -1 is 12 here
    assert net.infer_shape_partial(data=(0, 3, 4)) == ([(0, 3, 4), (3, 12), (3,)], [(0, 3)], [])
    assert net.infer_shape(data=(5, 3, 4))[1] == [(5, 3)]


def test_unknown_shapes_and_variable_attributes():
    d = S.Variable("data")
    fc = S.FullyConnected(d, num_hidden=5, name="fc")
    # a shape nothing determines is () in MXNet's legacy reading, None under util.np_shape()
    assert fc.infer_shape_partial() == ([(), (), (5,)], [()], [])
    # a __shape__ attribute with a 0 (Gluon's deferred init) is partial knowledge
    w = S.Variable("w", shape=(4, 0))
    assert S.FullyConnected(d, w, num_hidden=4, no_bias=True).infer_shape(data=(2, 7))[0] == [(2, 7), (4, 7)]


def test_simple_bind_refuses_a_dimension_that_stays_unknown():
    d = S.Variable("data")
    with pytest.raises(ValueError, match=r"simple_bind: cannot infer the shapes of \['data'\].*0 dimension"):
        S.FullyConnected(d, num_hidden=5, name="fc").simple_bind(sg.cpu(), data=(0, 3))
    # ... but zero-size arrays bind: bind() reads actual shapes
    assert (d * 2.0).bind(sg.cpu(), {"data": np.ones((0, 3))}).forward()[0].shape == (0, 3)


# == 7. integer dtypes in gradients ==============================================================================


def _grads(sym, args, head):
    exe = sym.bind(
        sg.cpu(),
        {k: v.copy() for k, v in args.items()},
        args_grad={k: np.zeros(v.shape, v.dtype) for k, v in args.items()},
    )
    exe.forward(is_train=True)
    exe.backward([head])
    return {k: v.copy() for k, v in exe.grad_dict.items()}


_XF = np.array([1.7, -2.3, 3.5], np.float32)
_YF = np.array([0.7, 1.5, -2.0], np.float32)
_XI = np.array([1, -2, 3], np.int32)
_YI = np.array([2, 3, -2], np.int32)


def test_a_float_head_gradient_into_an_integer_output_is_truncated():
    x = S.Variable("x")
    g = _grads(S.Cast(x, dtype="int32"), {"x": _XF}, np.array([0.75, 1.5, -2.5]))
    np.testing.assert_array_equal(g["x"], [0.0, 1.0, -2.0])  # MXNet 1.9.1
    g = _grads(S.Cast(x, dtype="int32") * 3, {"x": _XF}, np.array([0.75, 1.5, -2.5], np.float32))
    np.testing.assert_array_equal(g["x"], [0.0, 3.0, -6.0])  # MXNet 1.9.1
    # through an int cast and back: the head gradient 0.75 truncates to 0 inside the graph
    g = _grads(S.Cast(S.Cast(x, dtype="int32"), dtype="float32"), {"x": _XF}, np.full(3, 0.75, np.float32))
    np.testing.assert_array_equal(g["x"], [0.0, 0.0, 0.0])
    g = _grads(S.Cast(S.Cast(x * 2.0, dtype="int32"), dtype="float32") * x, {"x": _XF}, np.ones(3, np.float32))
    np.testing.assert_array_equal(g["x"], [5.0, -8.0, 13.0])
    with pytest.raises(ValueError, match="NaN or infinity.*int32"):
        _grads(S.Cast(x, dtype="int32"), {"x": _XF}, np.array([np.nan, 1.0, 1.0]))


@pytest.mark.parametrize(
    "make, args, want",
    [
        # MXNet 1.9.1: integer-valued ops of integer operands have zero gradient
        (lambda x, y: x % y, {"x": _XI, "y": _YI}, {"x": [0, 0, 0], "y": [0, 0, 0]}),
        (lambda x, y: S.broadcast_mod(x, y), {"x": _XI, "y": _YI}, {"x": [0, 0, 0], "y": [0, 0, 0]}),
        (lambda x, y: x % 2, {"x": _XI}, {"x": [0, 0, 0]}),
        (lambda x, y: 5 % x, {"x": _XI}, {"x": [0, 0, 0]}),
        (lambda x, y: x > y, {"x": _XI, "y": _YI}, {"x": [0, 0, 0], "y": [0, 0, 0]}),
        (lambda x, y: S.floor(x), {"x": _XI}, {"x": [0, 0, 0]}),
        (lambda x, y: S.sqrt(x), {"x": np.array([1, 4, 9], np.int32)}, {"x": [0, 0, 0]}),
        # ... while integer arithmetic differentiates in integers
        (lambda x, y: x * y, {"x": _XI, "y": _YI}, {"x": [2, 3, -2], "y": [1, -2, 3]}),
        (lambda x, y: S.square(x), {"x": _XI}, {"x": [2, -4, 6]}),
        # float mod: (1, -floor(a/b)); comparisons, floor and round: zero
        (lambda x, y: x % y, {"x": _XF, "y": _YF}, {"x": [1, 1, 1], "y": [-2, 2, 2]}),
        (lambda x, y: 5.0 % x, {"x": _XF}, {"x": [-2, 3, -1]}),
        (lambda x, y: x > y, {"x": _XF, "y": _YF}, {"x": [0, 0, 0], "y": [0, 0, 0]}),
        (lambda x, y: S.floor(x), {"x": _XF}, {"x": [0, 0, 0]}),
        (lambda x, y: S.round(x), {"x": _XF}, {"x": [0, 0, 0]}),
    ],
)
def test_gradients_of_integer_valued_ops_match_mxnet(make, args, want):
    x, y = S.Variable("x"), S.Variable("y")
    sym = make(x, y)
    dtype = next(iter(args.values())).dtype
    g = _grads(sym, args, np.ones(3, dtype))
    for k, v in want.items():
        assert g[k].dtype == dtype
        np.testing.assert_array_equal(g[k], np.array(v, dtype))


# == 8. custom-op arrays and errors ==============================================================================


class _Probe(sg.operator.CustomOp):
    seen: list = []

    def forward(self, is_train, req, in_data, out_data, aux):
        _Probe.seen = [(a.stype, str(a.context), type(a.asnumpy()) is np.ndarray) for a in (*in_data, *out_data)]
        out_data[0][...] = in_data[0] * 2  # writes go through to symgrad's output array

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        _Probe.seen += [(a.stype, str(a.context)) for a in (*out_grad, *in_grad)]
        self.assign(in_grad[0], req[0], 2 * out_grad[0])


@sg.operator.register("mxapi_probe")
class _ProbeProp(sg.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return _Probe()


class _Failing(sg.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        if not is_train:
            raise KeyError("kaboom")
        self.assign(out_data[0], req[0], in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        raise ZeroDivisionError("backward kaboom")


@sg.operator.register("mxapi_failing")
class _FailingProp(sg.operator.CustomOpProp):
    def create_operator(self, ctx, shapes, dtypes):
        return _Failing()


def test_custom_op_arrays_are_dense_and_writable():
    x = S.Variable("x")
    exe = S.Custom(x, op_type="mxapi_probe", name="p").simple_bind(sg.cpu(), x=(2,))
    out = exe.forward(is_train=True, x=np.array([1.0, 2.0]))[0]
    np.testing.assert_array_equal(out, [2.0, 4.0])
    assert type(out) is np.ndarray  # what comes back out of the executor is a plain numpy array
    exe.backward(np.ones(2, np.float32))
    np.testing.assert_array_equal(exe.grad_dict["x"], [2.0, 2.0])
    assert _Probe.seen == [("default", "cpu(0)", True)] * 2 + [("default", "cpu(0)")] * 2


def test_an_exception_inside_a_custom_op_is_a_symgrad_error_naming_it():
    x = S.Variable("x")
    exe = S.Custom(x, op_type="mxapi_failing", name="bad").simple_bind(sg.cpu(), x=(2,))
    with pytest.raises(sg.operator.CustomOpError) as info:
        exe.forward()
    err = info.value
    assert isinstance(err, SymgradError) and isinstance(err, KeyError)  # still caught by `except KeyError`
    assert "Custom 'bad' (op_type 'mxapi_failing'): error in forward: KeyError: 'kaboom'" in str(err)
    assert isinstance(err.__cause__, KeyError) and err.__cause__.args == ("kaboom",)
    assert err.symgrad_node.name == "bad"
    exe.forward(is_train=True)
    with pytest.raises(ZeroDivisionError, match=r"Custom 'bad'.*error in backward: ZeroDivisionError") as info:
        exe.backward(np.ones(2, np.float32))
    assert isinstance(info.value, sg.operator.CustomOpError) and info.value.symgrad_node.name.startswith("bad_backward")
