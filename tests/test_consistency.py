"""check_consistency (MXNet 1.9 semantics): one symbol over several devices and dtypes.

cpu float16/32/64 entries of FullyConnected, Convolution, BatchNorm and SoftmaxOutput must agree; the
values the most precise entry returns are checked against plain numpy derivations; a custom op whose
backward is wrong only for one dtype is caught and the report names the entry, the argument and the
factor. The gpu-marked tests run the same on gpu(0) (skipped without CuPy and a GPU).
"""

import re

import numpy as np
import pytest

import symgrad as sg
import symgrad.test_utils as tu
from symgrad.test_utils import with_seed
from symgrad.test_utils.consistency import check_consistency
from symgrad.test_utils.report import GradientCheckError

S = sg.sym
DTYPES = (np.float64, np.float32, np.float16)


def _entries(ctxs, dtypes, type_key="data", **shapes):
    return [{"ctx": c, **shapes, "type_dict": {type_key: dt}} for c in ctxs for dt in dtypes]


def _fc():
    return S.FullyConnected(S.Variable("data"), num_hidden=5, name="fc")


def _conv():
    return S.Convolution(S.Variable("data"), num_filter=3, kernel=(3, 3), pad=(1, 1), name="conv")


def _bn():
    return S.BatchNorm(S.Variable("data"), fix_gamma=False, name="bn")


def _softmax():
    return S.SoftmaxOutput(S.FullyConnected(S.Variable("data"), num_hidden=4, name="fc"), name="sm")


def _softmax_labels(n=5, k=4):
    return {"sm_label": np.random.randint(0, k, size=n).astype(np.float64)}


# -- a custom op whose backward is scaled by a per-dtype factor: y = x^2, dx = f[dtype] * 2 x dy -------------


class _DtypeBug(sg.operator.CustomOp):
    def __init__(self, factors):
        super().__init__()
        self.factors = factors

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        k = self.factors.get(np.dtype(in_data[0].dtype).name, 1.0)
        self.assign(in_grad[0], req[0], k * 2.0 * in_data[0] * out_grad[0])


@sg.operator.register("tc_dtype_bug")
class _DtypeBugProp(sg.operator.CustomOpProp):
    def __init__(self, f16="1", f32="1", f64="1"):
        super().__init__()
        self.factors = {"float16": float(f16), "float32": float(f32), "float64": float(f64)}

    def create_operator(self, ctx, shapes, dtypes):
        return _DtypeBug(self.factors)


def _square(**factors):
    return S.Custom(S.Variable("x"), op_type="tc_dtype_bug", name="sq", **{k: str(v) for k, v in factors.items()})


CPU = (sg.cpu(0),)


def _square_entries(ctxs=CPU, dtypes=DTYPES, shape=(3, 4)):
    return _entries(ctxs, dtypes, type_key="x", x=shape)


def _factor(diagnosis):
    return float(re.search(r"scaled by (-?[\d.]+)", diagnosis).group(1))


# == agreement on correct ops ===============================================================================


@pytest.mark.parametrize(
    "make, shapes",
    [(_fc, {"data": (3, 6)}), (_conv, {"data": (2, 2, 5, 5)}), (_bn, {"data": (4, 3, 3, 3)})],
    ids=["fc", "conv", "bn"],
)
@with_seed()
def test_cpu_float16_32_64_agree(make, shapes):
    # BatchNorm's float16 entry keeps float32 gamma/beta: their gradients get float16's tolerance (MXNet)
    for _ in range(5):
        gt = check_consistency(make(), _entries([sg.cpu(0)], DTYPES, **shapes))
        assert all(v.dtype == np.float64 for v in gt.values())


@with_seed()
def test_fully_connected_ground_truth_is_the_float64_entry():
    params = {}
    gt = check_consistency(
        _fc(), _entries([sg.cpu(0)], (np.float16, np.float32, np.float64), data=(3, 6)), arg_params=params
    )
    x, w, b = params["data"], params["fc_weight"], params["fc_bias"]
    assert sorted(gt) == ["data", "fc_bias", "fc_output", "fc_weight"]
    np.testing.assert_allclose(gt["fc_output"], x @ w.T + b, rtol=1e-12)


@with_seed()
def test_softmax_output_loss_head_gets_no_head_gradient():
    sym = _softmax()
    for dtype_order in (DTYPES, DTYPES[::-1]):
        params = _softmax_labels()
        gt = check_consistency(sym, _entries([sg.cpu(0)], dtype_order, data=(5, 6)), arg_params=params)
        x, w, b, label = params["data"], params["fc_weight"], params["fc_bias"], params["sm_label"]
        z = x @ w.T + b
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        d = p - np.eye(4)[label.astype(int)]  # dL/dz of the softmax cross-entropy, head gradient ignored
        np.testing.assert_allclose(gt["sm_output"], p, rtol=1e-10)
        np.testing.assert_allclose(gt["data"], d @ w, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gt["fc_weight"], d.T @ x, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(gt["fc_bias"], d.sum(axis=0), rtol=1e-10, atol=1e-12)


@with_seed()
def test_batchnorm_aux_states_are_compared_and_returned():
    params = {}
    gt = check_consistency(
        _bn(),
        _entries([sg.cpu(0)], DTYPES, data=(4, 3, 3, 3)),
        arg_params=params,
        aux_params={"bn_moving_var": np.ones(3)},
    )
    x = params["data"]
    # one training forward from mean 0 / var 1 with momentum 0.9: moving = 0.9 * old + 0.1 * batch statistic
    np.testing.assert_allclose(gt["bn_moving_mean"], 0.1 * x.mean(axis=(0, 2, 3)), rtol=1e-10)
    np.testing.assert_allclose(gt["bn_moving_var"], 0.9 + 0.1 * x.var(axis=(0, 2, 3)), rtol=1e-10)


# == MXNet's input semantics ================================================================================


def test_random_arguments_are_drawn_in_sorted_name_order_and_filled_in(monkeypatch, outside_a_seeded_test):
    monkeypatch.delenv("SYMGRAD_TEST_SEED", raising=False)  # (--symgrad-seed sets it for the session)
    # inside a seeded test (as MXNet's tests are) the draws come straight from numpy's global RNG
    params = {"fc_weight": np.full((5, 6), 0.5)}
    with_seed(42)(check_consistency)(_fc(), _entries([sg.cpu(0)], DTYPES, data=(3, 6)), arg_params=params, scale=2.0)
    np.random.seed(42)
    data = np.random.normal(size=(3, 6), scale=2.0)  # sorted: data, fc_bias (fc_weight given)
    bias = np.random.normal(size=(5,), scale=2.0)
    np.testing.assert_array_equal(params["data"], data)
    np.testing.assert_array_equal(params["fc_bias"], bias)
    np.testing.assert_array_equal(params["fc_weight"], 0.5)
    # outside one, the checker seeds its own draws from the global RNG: np.random.seed still reproduces them
    again = []
    for _ in range(2):
        np.random.seed(42)
        again.append({})
        check_consistency(_fc(), _entries([sg.cpu(0)], DTYPES, data=(3, 6)), arg_params=again[-1])
        after = np.random.rand()
        np.random.seed(42)
        np.random.randint(0, 2**31 - 1)
        assert after == np.random.rand()  # the caller's RNG moved by one draw only
    for k in again[0]:
        np.testing.assert_array_equal(again[0][k], again[1][k])


@with_seed()
def test_use_uniform_and_rand_type():
    params = {}
    check_consistency(
        _fc(),
        _entries([sg.cpu(0)], DTYPES, data=(30, 6)),
        arg_params=params,
        scale=0.5,
        use_uniform=True,
        rand_type=np.float32,
    )
    assert all(v.dtype == np.float32 for v in params.values())
    assert max(float(np.abs(v).max()) for v in params.values()) <= 0.92 * 0.5
    assert float(np.abs(params["data"]).max()) > 0.3  # uniform over the whole range, not normal(0.5)


@pytest.mark.parametrize("grad_req", ["write", "add", ["write", "null", "add"], {"data": "write", "fc_bias": "add"}])
@with_seed()
def test_grad_req_forms(grad_req):
    gt = check_consistency(_fc(), _entries([sg.cpu(0)], DTYPES, data=(3, 6)), grad_req=grad_req)
    names = ["data", "fc_weight", "fc_bias"]
    if isinstance(grad_req, list):
        expected = {n for n, r in zip(names, grad_req) if r != "null"}
    elif isinstance(grad_req, dict):
        expected = set(grad_req)
    else:
        expected = set(names)
    assert set(gt) == expected | {"fc_output"}


@with_seed()
def test_grad_req_null_compares_inference_outputs_only():
    params = {}
    gt = check_consistency(
        _bn(),
        _entries([sg.cpu(0)], DTYPES, data=(4, 3, 3, 3)),
        grad_req="null",
        arg_params=params,
        aux_params={"bn_moving_var": np.full(3, 4.0)},
    )
    x, gamma, beta = params["data"], params["bn_gamma"], params["bn_beta"]
    eps = 1e-3  # MXNet's BatchNorm default
    c = (1, 3, 1, 1)  # inference uses the moving statistics: mean 0, var 4
    np.testing.assert_allclose(gt["bn_output"], gamma.reshape(c) * x / np.sqrt(4.0 + eps) + beta.reshape(c), rtol=1e-10)
    assert set(gt) == {"bn_output", "bn_moving_mean", "bn_moving_var"}
    np.testing.assert_array_equal(gt["bn_moving_mean"], 0.0)  # untouched by inference


@with_seed()
def test_ground_truth_replaces_the_most_precise_entry():
    params = {}
    cpu = _square_entries()
    gt = check_consistency(_square(), cpu, arg_params=params)
    # one entry against a ground truth is enough; the same values pass, a planted bug does not
    assert check_consistency(_square(), cpu[1:2], arg_params=dict(params), ground_truth=gt) is gt
    with pytest.raises(GradientCheckError) as info:
        check_consistency(_square(f32=1.1), cpu[1:2], arg_params=dict(params), ground_truth=gt)
    assert info.value.reference == "ground_truth" and info.value.arg_name == "x"
    assert "differs from the ground truth" in str(info.value)
    with pytest.raises(ValueError, match=r"ground_truth has no array for \['x'\]"):
        check_consistency(_square(), cpu[1:2], ground_truth={"sq_output": gt["sq_output"]})


def test_list_of_symbols():
    x = S.Variable("x")
    syms = [S.Activation(x, act_type="tanh", name="a"), S.tanh(x, name="a"), S.Activation(x, act_type="tanh", name="a")]
    np.random.seed(0)
    check_consistency(syms, _square_entries())
    syms[1] = S.Activation(x, act_type="relu", name="a")
    with pytest.raises(GradientCheckError) as info:
        check_consistency(syms, _square_entries())
    assert info.value.entry == 1 and info.value.arg_name == "a_output"
    with pytest.raises(ValueError, match="symbol 1 has arguments"):
        check_consistency([syms[0], S.tanh(S.Variable("y"), name="a")], _square_entries(dtypes=DTYPES[:2]))


# == planted inconsistencies =================================================================================


@with_seed()
def test_float16_only_backward_bug_is_caught_and_named():
    with pytest.raises(GradientCheckError) as info:
        check_consistency(_square(f16=1.5), _square_entries(dtypes=(np.float16, np.float32, np.float64)))
    err = info.value
    assert err.arg_name == "x" and err.kind == "gradient" and err.grad_req == "write"
    assert err.entry == 0 and err.ctx == sg.cpu(0) and err.dtype == np.float16 and err.reference == 2
    assert abs(_factor(err.diagnosis) - 1.5) < 0.01
    msg = str(err)
    assert "gradient of 'x' on entry 0 (cpu(0), float16) differs from entry 2 (cpu(0), float64)" in msg
    assert "at the tolerance of float16" in msg
    assert err.others == []  # the forward and the float32 entry agree


@with_seed()
def test_tolerance_is_the_less_precise_dtype_of_the_pair():
    # 1% off in float32 is far outside float32's tolerance; 0.5% off in float16 is inside float16's
    with pytest.raises(GradientCheckError) as info:
        check_consistency(_square(f32=1.01, f16=1.005), _square_entries(shape=(4, 6)), scale=3.0)
    err = info.value
    assert (err.entry, err.dtype, err.rtol, err.atol) == (1, np.float32, 1e-4, 1e-3)
    assert err.others == []
    # overrides: a {dtype: tol} dict loosens float32 only, a number applies to every pair
    check_consistency(_square(f32=1.01), _square_entries(shape=(4, 6)), rtol={np.float32: 0.02})
    check_consistency(_square(f32=1.01), _square_entries(shape=(4, 6)), rtol=0.02)


@with_seed()
def test_raise_on_err_false_prints_every_failure_and_returns(capsys):
    gt = check_consistency(_square(f16=2.0, f32=-1.0), _square_entries(), raise_on_err=False)
    out = capsys.readouterr().out
    assert "gradient of 'x' on entry 1 (cpu(0), float32) is inconsistent (raise_on_err=False" in out
    assert "gradient of 'x' on entry 2 (cpu(0), float16) is inconsistent" in out
    assert "sign flipped" in out and "counted twice" in out
    assert set(gt) == {"sq_output", "x"}


@with_seed()
def test_all_failures_are_collected_before_raising():
    with pytest.raises(GradientCheckError) as info:
        check_consistency(_square(f16=2.0, f32=-1.0), _square_entries())
    assert info.value.entry == 1 and [e.entry for e in info.value.others] == [2]


# == bad input ============================================================================================


def test_bad_input_is_a_clear_error():
    entries = _square_entries()
    with pytest.raises(ValueError, match="at least two"):
        check_consistency(_square(), entries[:1])
    with pytest.raises(ValueError, match=r"ctx_list\[1\] has no 'ctx' key"):
        check_consistency(_square(), [entries[0], {"x": (3, 4)}])
    with pytest.raises(TypeError, match=r"ctx_list\[1\]\['ctx'\] must be a Context"):
        check_consistency(_square(), [entries[0], {"ctx": "cpu", "x": (3, 4)}])
    with pytest.raises(ValueError, match=r"argument 'x' has shape \(2, 4\) in ctx_list\[1\] but \(3, 4\)"):
        check_consistency(_square(), [entries[0], {**entries[1], "x": (2, 4)}])
    with pytest.raises(ValueError, match=r"arg_params names \['y'\], which are not arguments"):
        check_consistency(_square(), entries, arg_params={"y": np.ones(2)})
    with pytest.raises(ValueError, match=r"arg_params\['x'\] has shape \(4, 3\), expected \(3, 4\)"):
        check_consistency(_square(), entries, arg_params={"x": np.ones((4, 3))})
    with pytest.raises(ValueError, match="grad_req for argument 'x' must be"):
        check_consistency(_square(), entries, grad_req="sometimes")
    with pytest.raises(NotImplementedError, match="sparse"):
        check_consistency(_square(), [entries[0], {**entries[1], "stype_dict": {"x": "csr"}}])
    with pytest.raises(ValueError, match="2 symbols for 3 ctx_list entries"):
        check_consistency([_square(), _square()], entries)
    with pytest.raises(ValueError, match=r"arg_params 'x' is complex"):
        check_consistency(_square(), entries, arg_params={"x": np.ones((3, 4)) + 1j})
    with pytest.raises(TypeError, match=r"arg_params 'x' has dtype <U1"):
        check_consistency(_square(), entries, arg_params={"x": np.full((3, 4), "a")})


# == gpu ====================================================================================================


GPU_CASES = [
    (_fc, {"data": (3, 6)}, None),
    (_conv, {"data": (2, 2, 5, 5)}, None),
    (_bn, {"data": (4, 3, 3, 3)}, None),
    (_softmax, {"data": (5, 6)}, _softmax_labels),
]


@pytest.mark.gpu
@pytest.mark.parametrize("make, shapes, params", GPU_CASES, ids=["fc", "conv", "bn", "softmax"])
@with_seed()
def test_gpu_entries_agree_with_cpu_float64(make, shapes, params):
    entries = _entries([sg.cpu(0)], (np.float64,), **shapes) + _entries([sg.gpu(0)], DTYPES, **shapes)
    gt = check_consistency(make(), entries, arg_params=params() if params else None)
    assert all(isinstance(v, np.ndarray) and v.dtype == np.float64 for v in gt.values())  # cpu float64 is first


@pytest.mark.gpu
@with_seed()
def test_gpu_float16_backward_bug_is_caught_and_named():
    entries = _square_entries(ctxs=(sg.cpu(0), sg.gpu(0)), dtypes=(np.float64, np.float16))
    with pytest.raises(GradientCheckError) as info:
        check_consistency(_square(f16=1.5), entries)
    err = info.value
    assert err.arg_name == "x" and err.ctx == sg.cpu(0) and err.dtype == np.float16 and err.entry == 1
    assert [(e.ctx, e.entry) for e in err.others] == [(sg.gpu(0), 3)]
    assert "entry 3 (gpu(0), float16)" in str(err.others[0])
    assert abs(_factor(err.diagnosis) - 1.5) < 0.01


def test_exported_from_test_utils():
    assert tu.check_consistency is check_consistency and "check_consistency" in tu.__all__
