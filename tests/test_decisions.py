"""Decision flips: check_consistency explains float32-vs-float64 differences caused by relu masks and max-pool
choices that rounding decided differently, and still fails on real differences.

The ResNet-style block's arguments are *constructed*: mirror-symmetric data and kernels make every middle
max-pool window hold an exact tie (in exact arithmetic) that rounding breaks, and BatchNorm betas put one
pre-activation per channel within rounding of 0, on opposite sides in float32 and float64. The test first
shows (with its own executors and numpy) that float32 and float64 gradients then differ by tens of percent,
far outside the default tolerances. Each op's decision rule is checked against plain numpy; the executor
seam (``forward_with_hook``) is checked to feed the replacement values to the backward.
"""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import symgrad as sg
import symgrad.test_utils as tu
from symgrad.opdef import broadcast_support, get_op
from symgrad.test_utils.consistency import check_consistency
from symgrad.test_utils.decisions import DecisionFlipWarning, Flip, pin_decisions, record_decisions
from symgrad.test_utils.report import GradientCheckError
from symgrad.test_utils.tolerance import get_tols

S = sg.sym
N, C, H, W = 2, 4, 6, 6
SHAPE = (N, C, H, W)


# == the ResNet-style block and its constructed arguments ==================================================


def _block(skip_scale=1.0):
    """conv -> BN -> relu -> conv -> BN, + skip, -> relu -> 2x2 max-pool -> FC (``skip_scale``: a planted bug)."""
    data = S.Variable("data")
    c1 = S.Convolution(data, num_filter=C, kernel=(3, 3), pad=(1, 1), name="conv1")
    b1 = S.BatchNorm(c1, fix_gamma=False, name="bn1")
    r1 = S.Activation(b1, act_type="relu", name="relu1")
    c2 = S.Convolution(r1, num_filter=C, kernel=(3, 3), pad=(1, 1), name="conv2")
    b2 = S.BatchNorm(c2, fix_gamma=False, name="bn2")
    s = b2 + (data if skip_scale == 1.0 else data * skip_scale)
    r2 = S.relu(s, name="relu2")
    p = S.Pooling(r2, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    return S.FullyConnected(p, num_hidden=3, name="fc"), b1, s


def _mirror(a):
    """Symmetric under flipping the last axis: conv of mirrored data with mirrored kernels is mirrored, so
    columns 2 and 3 (one 2x2 pooling window, W = 6) tie exactly in exact arithmetic."""
    return (a + a[..., ::-1]) / 2


def _train_forward(sym, args, dtype):
    exe = sym.simple_bind(sg.cpu(), grad_req="null", type_dict={"data": dtype}, data=SHAPE)
    for k, a in exe.arg_dict.items():
        a[...] = args[k]
    return exe.forward(is_train=True)[0].astype(np.float64)


def _near_zero(pre, args, beta, at):
    """Set the per-channel BatchNorm ``beta`` so the pre-activation at ``at`` (one element per channel) is within
    rounding of 0 and on opposite sides of 0 in float32 and float64: betas a fraction of a float32 ulp apart
    around the one that zeroes it in float64 are tried, nearest first."""
    args[beta] = np.zeros(C)
    t = _train_forward(pre, args, np.float64)[at]
    ulp = np.spacing(np.abs(t).astype(np.float32)).astype(np.float64)
    chosen = np.full(C, np.nan)
    for k in sorted(range(-16, 17), key=abs):
        args[beta] = -t + k * ulp / 8
        o64, o32 = _train_forward(pre, args, np.float64)[at], _train_forward(pre, args, np.float32)[at]
        chosen = np.where(np.isnan(chosen) & ((o64 > 0) != (o32 > 0)), args[beta], chosen)
    assert not np.isnan(chosen).any(), f"no beta puts {beta}'s pre-activation on both sides of 0"
    args[beta] = chosen
    return _train_forward(pre, args, np.float64)[at]


@pytest.fixture(scope="module")
def block_args():
    rng = np.random.default_rng(20240611)
    net, b1, s = _block()
    shapes = dict(zip(net.list_arguments(), net.infer_shape(data=SHAPE)[0]))
    args = {k: rng.standard_normal(v) for k, v in shapes.items()}
    for k in ("data", "conv1_weight", "conv2_weight"):
        args[k] = _mirror(args[k])
    args["bn1_gamma"] = 1 + 0.1 * args["bn1_gamma"]
    args["bn2_gamma"] = 1 + 0.1 * args["bn2_gamma"]
    pre1 = _near_zero(b1, args, "bn1_beta", (0, slice(None), 1, 4))
    pre2 = _near_zero(s, args, "bn2_beta", (1, slice(None), 4, 1))
    assert np.abs(pre1).max() < 1e-7 and np.abs(pre2).max() < 1e-7
    return args


def _ctx_list(dtypes=(np.float64, np.float32)):
    return [{"ctx": sg.cpu(), "data": SHAPE, "type_dict": {"data": dt}} for dt in dtypes]


def _grads(net, args, dtype, heads):
    exe = net.simple_bind(sg.cpu(), type_dict={"data": dtype}, data=SHAPE)
    for k, a in exe.arg_dict.items():
        a[...] = args[k]
    exe.forward(is_train=True)
    exe.backward([heads.astype(dtype)])
    return {k: g.astype(np.float64) for k, g in exe.grad_dict.items()}


def test_constructed_block_really_differs_by_percents_between_float32_and_float64(block_args):
    # independent of check_consistency: plain executors, the same float16 head gradient
    net = _block()[0]
    heads = np.random.default_rng(1).standard_normal((N, 3)).astype(np.float16)
    g64, g32 = _grads(net, block_args, np.float64, heads), _grads(net, block_args, np.float32, heads)
    rtol, atol = get_tols(np.empty(0, np.float32), np.empty(0, np.float64), None, None)
    failing = [k for k in g64 if not np.allclose(g32[k], g64[k], rtol=rtol, atol=atol)]
    assert {"data", "conv1_weight", "conv2_weight", "bn1_beta", "bn2_gamma"} <= set(failing)
    for k in ("data", "conv1_weight", "conv2_weight"):
        rel = np.abs(g32[k] - g64[k]).max() / np.abs(g64[k]).max()
        assert rel > 0.05, (k, rel)  # tens of percent of the largest gradient element, not rounding


def test_block_passes_with_a_warning_naming_the_flips(block_args):
    net = _block()[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        truth = check_consistency(net, _ctx_list(), arg_params=dict(block_args))
    flips = [w for w in caught if issubclass(w.category, DecisionFlipWarning)]
    assert len(flips) == 1, [str(w.message) for w in caught]
    text = str(flips[0].message)
    assert "not an error:" in text and "decision(s) flipped between entry 1 (cpu(0), float32) and entry 0" in text
    # op, node, element index, the two decided-on values
    assert "Activation 'relu1'[0, " in text and "Pooling 'pool'[" in text
    assert "flips per node:" in text and "relu 'relu2' " in text
    assert "decided on " in text and " vs " in text
    nodes = {f.node for f in flips[0].message.flips}
    assert nodes == {"relu1", "relu2", "pool"}, nodes
    assert set(truth) >= {"fc_output", "data", "conv1_weight", "bn1_moving_mean"}


def test_block_pinning_leaves_only_rounding(block_args):
    # the same measurement the check makes, by hand: float64 pinned to float32's decisions
    net = _block()[0]
    heads = np.random.default_rng(1).standard_normal((N, 3)).astype(np.float16)
    e32 = net.simple_bind(sg.cpu(), type_dict={"data": np.float32}, data=SHAPE)
    e64 = net.simple_bind(sg.cpu(), type_dict={"data": np.float64}, data=SHAPE)
    for exe in (e32, e64):
        for k, a in exe.arg_dict.items():
            a[...] = block_args[k]
    record = record_decisions(e32, is_train=True)
    e32.backward([heads.astype(np.float32)])
    flips = pin_decisions(e64, record)
    e64.backward([heads.astype(np.float64)])
    ops = {(f.op, f.node) for f in flips}
    assert ("Activation", "relu1") in ops and ("relu", "relu2") in ops
    assert all(f.pinned and f.is_train for f in flips)
    for f in flips:
        if f.op != "Pooling":  # relu: the two inputs straddle 0 within a few float32 ulps
            assert abs(f.value_precise) < 1e-6 and abs(f.value_other) < 1e-6
            assert f.choice_precise != f.choice_other
    for k, g in e64.grad_dict.items():
        np.testing.assert_allclose(e32.grad_dict[k], g, rtol=1e-4, atol=1e-5, err_msg=k)


def test_planted_difference_still_fails_and_lists_the_flips(block_args):
    syms = [_block()[0], _block(skip_scale=1.01)[0]]  # the float32 entry's skip connection is scaled
    with pytest.raises(GradientCheckError) as info:
        check_consistency(syms, _ctx_list(), arg_params=dict(block_args))
    err = info.value
    text = str(err)
    assert err.entry == 1 and "re-run with entry 1 (cpu(0), float32)'s decisions pinned" in text
    assert "decision(s) pinned to entry 1" in text and "Activation 'relu1'[0, " in text
    assert err.flips and all(isinstance(f, Flip) for f in err.flips)


def test_same_dtype_failure_is_not_rechecked(block_args):
    # two float64 entries: a difference there is never rounding, so nothing is pinned
    syms = [_block()[0], _block(skip_scale=1.01)[0]]
    with pytest.raises(GradientCheckError) as info:
        check_consistency(syms, _ctx_list((np.float64, np.float64)), arg_params=dict(block_args))
    assert "pinned" not in str(info.value) and not hasattr(info.value, "flips")


# == the executor seam =====================================================================================


def test_forward_with_hook_replacements_are_read_by_backward_and_later_readers():
    x = S.Variable("x")
    a = S.identity(x, name="a")
    y = S.relu(a, name="r") + a * 2.0
    xv = np.array([-1e-9, 2.0, -3.0])
    exe = y.bind(sg.cpu(), {"x": xv.copy()}, args_grad={"x": np.zeros(3)})
    seen = []

    def hook(node, inputs):
        seen.append(node.name)
        if node.name == "r":
            return [np.array([1e-9, 2.0, -3.0])]
        return None

    out = exe.forward_with_hook(hook, is_train=True)[0]
    # relu reads 1e-9; the later ``a * 2`` reads the same replaced slot
    np.testing.assert_array_equal(out, [1e-9 + 2e-9, 6.0, -6.0])
    exe.backward([np.ones(3)])
    # d/dx = relu mask of the replaced value (1, 1, 0) + 2
    np.testing.assert_array_equal(exe.grad_dict["x"], [3.0, 3.0, 2.0])
    np.testing.assert_array_equal(exe.arg_dict["x"], xv)  # the bound array is never written
    assert "r" in seen and "a" in seen


def test_forward_with_hook_keeps_inputs_on_none_and_rejects_bad_replacements():
    x = S.Variable("x")
    exe = S.relu(x, name="r").bind(sg.cpu(), {"x": np.array([-1.0, 1.0])})
    np.testing.assert_array_equal(exe.forward_with_hook(lambda n, ins: [None])[0], [0.0, 1.0])
    with pytest.raises(ValueError, match="replacement for 'data' of relu 'r' has shape"):
        exe.forward_with_hook(lambda n, ins: [np.zeros(3)])
    with pytest.raises(TypeError, match="replacement for 'data' of relu 'r' has dtype float32"):
        exe.forward_with_hook(lambda n, ins: [ins[0].astype(np.float32)])
    with pytest.raises(ValueError, match="returned 2 arrays for the 1 inputs of relu 'r'"):
        exe.forward_with_hook(lambda n, ins: [ins[0], ins[0]])
    with pytest.raises(TypeError, match="hook must be callable"):
        exe.forward_with_hook(3)


def test_forward_with_hook_updates_aux_states_in_training_like_forward():
    sym = S.BatchNorm(S.Variable("x"), fix_gamma=False, name="bn")
    xv = np.random.default_rng(3).standard_normal((4, 2))

    def bound():
        exe = sym.simple_bind(sg.cpu(), x=(4, 2))
        exe.arg_dict["x"][...] = xv
        exe.arg_dict["bn_gamma"][...] = 1.0
        return exe

    plain, hooked = bound(), bound()
    plain.forward(is_train=True)
    hooked.forward_with_hook(lambda n, ins: None, is_train=True)
    for k in plain.aux_dict:
        np.testing.assert_array_equal(hooked.aux_dict[k], plain.aux_dict[k])


# == pinning ===============================================================================================


def test_relu_flip_is_pinned_by_value_and_reported():
    x = S.Variable("x")
    sym = S.relu(x, name="r") * 3.0
    e32 = sym.bind(sg.cpu(), {"x": np.array([-2e-8, 1.0], np.float32)}, args_grad={"x": np.zeros(2, np.float32)})
    e64 = sym.bind(sg.cpu(), {"x": np.array([3e-8, 1.0])}, args_grad={"x": np.zeros(2)})
    flips = pin_decisions(e64, record_decisions(e32, is_train=True))
    assert flips == [Flip("relu", "r", (0,), (0,), 3e-8, float(np.float32(-2e-8)), True, False, True)]
    np.testing.assert_array_equal(e64.outputs[0], [0.0, 3.0])  # float32's side of 0
    e64.backward([np.ones(2)])
    np.testing.assert_array_equal(e64.grad_dict["x"], [0.0, 3.0])  # the mask read the pinned value


def test_max_pool_flip_pins_the_whole_window():
    x = S.Variable("x")
    sym = S.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="p")
    win64 = np.array([[1.0, 1.0 + 1e-11], [0.5, 0.25]])
    win32 = np.array([[1.0, 1.0 - 1e-7], [0.5, 0.25]], np.float32)  # float32 picks tap 0, float64 tap 1
    e32 = sym.bind(sg.cpu(), {"x": win32.reshape(1, 1, 2, 2)})
    e64 = sym.bind(sg.cpu(), {"x": win64.reshape(1, 1, 2, 2)}, args_grad={"x": np.zeros((1, 1, 2, 2))})
    (flip,) = pin_decisions(e64, record_decisions(e32, is_train=True))
    assert (flip.op, flip.node, flip.index, flip.choice_precise, flip.choice_other) == (
        "Pooling",
        "p",
        (0, 0, 0, 0),
        1,
        0,
    )
    assert flip.value_precise == pytest.approx(1e-11, rel=1e-3)  # the float64 window's near tie
    e64.backward([np.ones((1, 1, 1, 1))])
    np.testing.assert_array_equal(e64.grad_dict["x"][0, 0], [[1.0, 0.0], [0.0, 0.0]])


def _chain():
    x, y = S.Variable("x"), S.Variable("y")
    h = S.broadcast_maximum(S.relu(x, name="r"), y, name="mx")
    h = S.clip(h, a_min=-0.5, a_max=0.7, name="cl")
    h = S.Pooling(S.reshape(h, shape=(1, 1, 4, 4)), kernel=(3, 3), stride=(1, 1), pool_type="max", name="p")
    return S.max(S.abs(h, name="ab") * S.Variable("w"), axis=(1, 2), name="mr")


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), is_train=st.booleans())
def test_pinning_identical_decisions_changes_nothing(seed, is_train):
    rng = np.random.default_rng(seed)
    sym = _chain()
    args = {"x": rng.standard_normal(16), "y": rng.standard_normal(16), "w": rng.standard_normal((1, 1, 2, 2))}
    heads = [rng.standard_normal((1, 2))]

    def bound():
        return sym.bind(
            sg.cpu(), {k: v.copy() for k, v in args.items()}, args_grad={k: np.zeros_like(v) for k, v in args.items()}
        )

    plain, recorded, pinned = bound(), bound(), bound()
    plain.forward(is_train=is_train)
    plain.backward(heads)
    record = record_decisions(recorded, is_train=is_train)
    assert {"r", "mx", "cl", "p", "ab", "mr"} <= set(record.nodes)
    assert pin_decisions(pinned, record) == []
    pinned.backward(heads)
    np.testing.assert_array_equal(pinned.outputs[0], plain.outputs[0])
    for k in args:
        np.testing.assert_array_equal(pinned.grad_dict[k], plain.grad_dict[k])


# == each op's decisions against plain numpy ===============================================================


def _decide(name, *inputs, **kw):
    op = get_op(name)
    params = op.parse_params(kw, name)
    if op.prepare is not None:
        params = op.prepare(params, "n")
    return op.decisions(np, *inputs, **params)


X = np.array([-2.0, -0.5, 0.0, 1e-9, 0.3, 1.5, 4.0])


@pytest.mark.parametrize(
    "name, kw, choice",
    [
        ("relu", {}, X > 0),
        ("Activation", {"act_type": "relu"}, X > 0),
        ("LeakyReLU", {"act_type": "leaky"}, X > 0),
        ("LeakyReLU", {"act_type": "elu"}, X > 0),
        ("abs", {}, np.sign(X)),
        ("sign", {}, np.sign(X)),
        ("floor", {}, np.floor(X)),
        ("clip", {"a_min": -0.5, "a_max": 1.5}, np.select([X < -0.5, X > 1.5], [0, 2], 1)),
        ("hard_sigmoid", {}, np.select([0.2 * X + 0.5 <= 0, 0.2 * X + 0.5 >= 1], [0, 2], 1)),
        ("_maximum_scalar", {"scalar": 0.3}, X >= 0.3),
        ("_minimum_scalar", {"scalar": 0.3}, X <= 0.3),
        ("_greater_scalar", {"scalar": 0.3}, X > 0.3),
        ("smooth_l1", {"scalar": 2.0}, np.abs(X) > 0.25),
    ],
)
def test_unary_decisions_match_numpy(name, kw, choice):
    (d,) = _decide(name, X, **kw)
    assert d.inputs == (0,) and d.support is None
    np.testing.assert_array_equal(d.choice, choice)
    assert d.value.shape == X.shape


def test_unary_decision_values():
    np.testing.assert_array_equal(_decide("relu", X)[0].value, X)
    np.testing.assert_allclose(_decide("hard_sigmoid", X, alpha=0.5, beta=0.1)[0].value, 0.5 * X + 0.1)
    np.testing.assert_allclose(_decide("smooth_l1", X, scalar=2.0)[0].value, np.abs(X) - 0.25)
    np.testing.assert_allclose(_decide("_maximum_scalar", X, scalar=0.3)[0].value, X - 0.3)


@pytest.mark.parametrize(
    "name, kw",
    [
        ("Activation", {"act_type": "tanh"}),
        ("LeakyReLU", {"act_type": "gelu"}),
        ("Pooling", {"kernel": (2, 2), "pool_type": "avg"}),
    ],
)
def test_smooth_variants_decide_nothing(name, kw):
    assert _decide(name, np.ones((1, 1, 2, 2)), **kw) == []


def test_binary_decisions_broadcast_and_map_sites_back():
    a = np.array([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5]])
    b = np.array([0.5, 1.0, -2.0])
    (d,) = _decide("broadcast_maximum", a, b)
    np.testing.assert_array_equal(d.choice, a >= b)
    np.testing.assert_array_equal(d.value, a - b)
    assert d.inputs == (0, 1)
    assert d.sites_of([a.shape, b.shape])((1, 2)) == ((1, 2), (2,))
    (d,) = _decide("_minimum", a, a[::-1])
    np.testing.assert_array_equal(d.choice, a <= a[::-1])
    (d,) = _decide("_lesser_equal", a, a[::-1])
    np.testing.assert_array_equal(d.choice, a <= a[::-1])
    assert broadcast_support((4, 1, 2), (3, 1)) == (1, 0)
    assert broadcast_support((4, 1, 2), ()) == ()


@pytest.mark.parametrize("name, sign", [("max", 1), ("min", -1)])
def test_reduction_decisions_mark_the_extreme_and_its_slice(name, sign):
    x = np.array([[[5.0, 1.0], [5.0 - 1e-9, 2.0], [0.0, 7.0]], [[3.0, 3.0], [1.0, 0.0], [2.0, 2.5]]]) * sign
    (d,) = _decide(name, x, axis=1)
    ext = (x * sign).max(axis=1, keepdims=True)
    np.testing.assert_array_equal(d.choice, x * sign == ext)
    # the winner's lead over the runner-up; the others' distance below the winner
    srt = np.sort(x * sign, axis=1)
    lead = (srt[:, -1] - srt[:, -2])[:, None, :]
    np.testing.assert_allclose(d.value, np.where(x * sign == ext, lead, x * sign - ext))
    assert d.value[0, 0, 0] == pytest.approx(1e-9, abs=1e-15)
    assert d.support((1, 2, 0)) == ((1, slice(None), 0),)


def test_pooling_decision_is_the_window_argmax_with_its_gap_and_window():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 5, 5))
    (d,) = _decide("Pooling", x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max")
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    for c in range(2):
        for i in range(3):
            for j in range(3):
                win = xp[0, c, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].ravel()
                top2 = np.sort(win)[-2:]
                assert d.choice[0, c, i, j] == np.argmax(win)
                assert d.value[0, c, i, j] == pytest.approx(top2[1] - top2[0])
    # the window of output (0, 1, 0, 2) without its padding: rows 0..1, columns 3..4
    assert d.support((0, 1, 0, 2)) == ((0, 1, slice(0, 2), slice(3, 5)),)
    (g,) = _decide("Pooling", x, kernel=(1, 1), global_pool=True, pool_type="max")
    assert g.choice[0, 1, 0, 0] == np.argmax(x[0, 1]) and g.support((0, 1, 0, 0)) == ((0, 1, slice(0, 5), slice(0, 5)),)


def test_decision_flip_warning_is_exported():
    assert tu.DecisionFlipWarning is DecisionFlipWarning and issubclass(DecisionFlipWarning, UserWarning)
