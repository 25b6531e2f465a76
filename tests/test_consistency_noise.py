"""The rounding noise the checkers allow a float32 computation (``harness.RoundingEmulator``) for ops that sum many
terms inside: convolutions (im2col and Winograd), GEMMs, reductions.

The emulation rounds every value an op outputs; a float32 GEMM over K terms also rounds each of its partial sums,
whose error, when the result cancels, is far larger than one rounding of the result. Emulated from outside only,
a single Winograd convolution's real float32 error reached 10 000 times the noise allowed (12 emulated sigmas),
and ResNet-18's float32 entry failed ``check_consistency`` against its float64 entry on every run
(tests/test_zoo.py). These tests pin the model of that rounding (``harness.accumulation_noise``) to a real
sequential float32 sum, check that the emulated noise covers the real float32 error of those ops element by element
without being loose by orders of magnitude, that emulated runs keep the exact run's decisions, and that a 0.1%
error of a float32 conv net is still caught at tolerances that leave everything to the noise model.
"""

import numpy as np
import pytest

import symgrad as sg
from symgrad.test_utils import check_consistency, with_seed
from symgrad.test_utils import harness as H
from symgrad.test_utils.report import GradientCheckError

S = sg.sym
EPS32 = float(np.finfo(np.float32).eps)


@pytest.mark.parametrize("k", [16, 256, 2048])
@pytest.mark.parametrize("signs", ["mixed", "positive"])
def test_accumulation_noise_is_that_of_a_sequential_float32_sum(k, signs):
    """``accumulation_noise`` (plus one rounding of the result) against the error of ``np.add.accumulate`` in float32
    -- one rounding per partial sum, the order of a GEMM's K loop -- over 400 sums of ``k`` float32 terms: the model
    is the upper end (it takes the ulp bound ``eps |s|``), 0.66 to 0.83 of it measured, never below half of it."""
    rng = np.random.default_rng(k)
    terms = rng.standard_normal((400, k)).astype(np.float32)
    if signs == "positive":
        terms = np.abs(terms)
    exact = terms.astype(np.float64).sum(axis=1)
    got = np.add.accumulate(terms, axis=1, dtype=np.float32)[:, -1].astype(np.float64)
    sigma = H.accumulation_noise(np.full(400, k), exact, np.square(terms, dtype=np.float64).sum(axis=1), EPS32)
    ulp = np.ldexp(1.0, np.frexp(exact)[1] - 24)  # float32's, at the result
    model = np.sqrt(sigma**2 + ulp**2 / 12)
    ratio = np.sqrt(np.mean((got - exact) ** 2) / np.mean(model**2))
    assert 0.5 <= ratio <= 1.0, ratio


def test_accumulation_noise_of_one_term_is_nothing():
    """A "sum" of one term is the term: its one rounding is the result's, which the emulation makes itself."""
    s = np.array([3.0, -1e-3, 0.0])
    assert np.array_equal(H.accumulation_noise(np.ones(3), s, s**2, EPS32), np.zeros(3))


def _cases():
    d = S.Variable("data")
    yield "FullyConnected K=4096", S.FullyConnected(d, num_hidden=32, name="fc"), {"data": (4, 4096)}
    # 3x3, stride 1, 16x16 output: Winograd F(2x2, 3x3); its bias gradient is a `sum` over 256 positions
    yield (
        "Winograd conv",
        S.Convolution(d, num_filter=64, kernel=(3, 3), pad=(1, 1), name="c"),
        {"data": (1, 64, 16, 16)},
    )
    # ResNet's stem: im2col, the weight gradient sums over every output position (K = 1024)
    yield (
        "7x7 stride-2 conv",
        S.Convolution(d, num_filter=16, kernel=(7, 7), stride=(2, 2), pad=(3, 3), name="c"),
        {"data": (1, 3, 64, 64)},
    )
    yield "dot", S.dot(d, S.Variable("w")), {"data": (8, 2048), "w": (2048, 16)}


CASES = list(_cases())


def _run(sym, values, heads, dtype):
    exe = sym.simple_bind(
        sg.cpu(), grad_req="write", type_dict=dict.fromkeys(values, dtype), **{k: v.shape for k, v in values.items()}
    )
    for k, v in values.items():
        exe.arg_dict[k][...] = v.astype(dtype)
    outs = exe.forward(is_train=True)
    exe.backward([h.astype(dtype) for h in heads])
    return {
        **{n: np.asarray(o, np.float64) for n, o in zip(sym.list_outputs(), outs)},
        **{k: np.asarray(g, np.float64) for k, g in exe.grad_dict.items()},
    }


@pytest.mark.parametrize("name, sym, shapes", CASES, ids=[c[0] for c in CASES])
def test_emulated_noise_covers_the_float32_error_of_accumulating_ops(name, sym, shapes):
    """Every output and gradient element's real float32 error is within the noise the emulation allows, and the
    emulated sigma is no more than 20 times the real root-mean-square error (measured 1.6 to 7 times: the model is
    a sequential sum's, OpenBLAS blocks its GEMMs). Emulating only the rounding of each op's output, the real error
    reached 60 to 10 000 times the noise allowed, on outputs near zero by cancellation."""
    rng = np.random.default_rng(0)
    arg_shapes, out_shapes, _ = sym.infer_shape(**shapes)
    values = {k: rng.standard_normal(s).astype(np.float32) for k, s in zip(sym.list_arguments(), arg_shapes)}
    heads = [rng.standard_normal(s).astype(np.float32) for s in out_shapes]
    real32, real64 = _run(sym, values, heads, np.float32), _run(sym, values, heads, np.float64)
    _, (noise,) = H.RoundingEmulator(sym, values, {}, list(values), np.float32, outputs=True).noise([heads])
    assert sorted(noise) == sorted(real32)
    for key, allowed in noise.items():
        err = np.abs(real32[key] - real64[key])
        assert np.all(err <= allowed), (key, float(np.max(err / allowed)))
        sigma = allowed / H.EMULATION_SIGMAS
        assert np.sqrt(np.mean(err**2)) >= np.sqrt(np.mean(sigma**2)) / 20, key


def test_emulated_runs_keep_the_exact_runs_decisions():
    """A relu input within the accumulation noise of 0 (a K = 4096 dot product cancelled to ~1e-8 by construction)
    would flip its mask in some emulated runs, and its jump -- a whole weight row in the data gradient -- would be
    taken for rounding noise. The emulated runs are pinned to the exact run's decisions: the data gradient's noise
    stays at rounding level."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4096)).astype(np.float32)
    w = rng.standard_normal((2, 4096)).astype(np.float32)
    x64 = x.astype(np.float64)
    w[0, 0] -= np.float32((w[0].astype(np.float64) @ x64[0]) / x64[0, 0])  # row 0's product: rounding of w[0, 0]
    z = w.astype(np.float64) @ x64[0]
    sym = S.relu(S.FullyConnected(S.Variable("data"), S.Variable("weight"), num_hidden=2, no_bias=True, name="fc"))
    emulator = H.RoundingEmulator(sym, {"data": x, "weight": w}, {}, ["data"], np.float32)
    exact = emulator.gradients([[np.ones((1, 2))]], False)[0]
    sigma = H.accumulation_noise(4096, z, (w.astype(np.float64) ** 2) @ x64[0] ** 2, EPS32)
    assert abs(z[0]) < 0.1 * sigma[0]  # the emulated runs move it across 0 (it starts on one side of it)
    _, (noise,) = emulator.noise([[np.ones((1, 2))]])
    scale = np.max(np.abs(exact["data"]))
    assert np.max(noise["data"]) < 1e-4 * scale, np.max(noise["data"]) / scale


def _net():
    d = S.Variable("data")
    h = S.relu(S.Convolution(d, num_filter=8, kernel=(7, 7), stride=(2, 2), pad=(3, 3), name="conv0"))
    h = S.relu(S.Convolution(h, num_filter=32, kernel=(3, 3), pad=(1, 1), name="conv1"))  # 16x16: Winograd
    h = S.Convolution(h, num_filter=32, kernel=(3, 3), pad=(1, 1), name="conv2")
    return S.FullyConnected(h, num_hidden=10, name="fc")


@with_seed()
def test_check_consistency_float32_conv_net_rests_on_the_noise_model():
    """float32 vs float64 of a small conv net (a 7x7 stride-2 stem, Winograd 3x3 convolutions, a dense layer) at
    rtol 1e-7, atol 1e-9 -- far below float32's table, so the allowed difference is the emulated rounding noise
    alone: the correct float32 entry passes (with output rounding alone emulated, conv2's weight gradient failed),
    and an entry whose conv1 weights are 0.1% too large fails."""
    sym = _net()
    ctx_list = [
        {"ctx": sg.cpu(0), "data": (2, 3, 32, 32), "type_dict": dict.fromkeys(sym.list_arguments(), dt)}
        for dt in (np.float64, np.float32)
    ]
    args = {}
    check_consistency(sym, ctx_list, arg_params=args, rtol=1e-7, atol=1e-9)
    planted = sym(conv1_weight=S.Variable("conv1_weight") * 1.001)
    with pytest.raises(GradientCheckError):
        check_consistency([sym, planted], ctx_list, arg_params=dict(args), rtol=1e-7, atol=1e-9)


def test_tile_noise_spreads_over_the_kernel_taps_and_the_neighbouring_outputs():
    """``tile_noise``: a weight gradient's noise is the largest of its filter-channel pair's taps; an output's the
    largest within one step in every spatial direction (a box max computed here with explicit loops); other ops
    keep theirs."""
    rng = np.random.default_rng(0)
    sigma = rng.random((2, 3, 5, 4))
    wgrad = H.tile_noise("_conv_weight_grad", sigma)
    for f in range(2):
        for c in range(3):
            assert np.all(wgrad[f, c] == sigma[f, c].max())
    out = H.tile_noise("Convolution", sigma)
    for i in range(5):
        for j in range(4):
            box = sigma[:, :, max(i - 1, 0) : i + 2, max(j - 1, 0) : j + 2]
            assert np.array_equal(out[:, :, i, j], box.max(axis=(2, 3)))
    assert np.array_equal(H.tile_noise("FullyConnected", sigma), sigma)


def test_a_winograd_weight_gradient_tap_that_reads_only_zeros_is_allowed_its_tiles_rounding():
    """The input is nonzero only on its first row and column, so the weight gradient's tap (2, 2), which (pad 1)
    reads rows and columns 1..16, sums only zeros: exact in float64, but symgrad's float32 Winograd F(2x2, 3x3)
    forms it from one 4x4 transform with the other taps and is off by ~1e-6 there (real rounding, not a bug:
    failed before the noise of a tiled convolution was spread over its tile). A 0.1% error of the weight is
    still caught at the same tolerances."""
    rng = np.random.default_rng(0)
    x = np.zeros((2, 4, 16, 16))
    x[:, :, 0, :] = rng.standard_normal((2, 4, 16))
    x[:, :, :, 0] = rng.standard_normal((2, 4, 16))
    sym = S.Convolution(S.Variable("data"), num_filter=4, kernel=(3, 3), pad=(1, 1), name="c")
    ctx_list = [
        {"ctx": sg.cpu(0), "data": x.shape, "type_dict": dict.fromkeys(sym.list_arguments(), dt)}
        for dt in (np.float64, np.float32)
    ]
    args = {"data": x, "c_weight": rng.standard_normal((4, 4, 3, 3)), "c_bias": rng.standard_normal(4)}
    truth = check_consistency(sym, ctx_list, arg_params=dict(args), rtol=1e-7, atol=1e-9)
    exe = sym.simple_bind(sg.cpu(), data=x.shape, type_dict=dict.fromkeys(sym.list_arguments(), np.float32))
    for name, value in args.items():
        exe.arg_dict[name][:] = value.astype(np.float32)
    exe.forward(is_train=True)
    exe.backward([np.ones((2, 4, 16, 16), np.float32)])
    tap32 = np.asarray(exe.grad_dict["c_weight"])[:, :, 2, 2]
    scale = np.max(np.abs(truth["c_weight"]))
    assert np.max(np.abs(truth["c_weight"][:, :, 2, 2])) < 1e-12 * scale  # float64: zero to its own rounding
    assert np.max(np.abs(tap32)) > 1e-9 * scale  # float32: the tile's rounding, far above the 1e-9 atol
    planted = sym(c_weight=S.Variable("c_weight") * 1.001)
    with pytest.raises(GradientCheckError, match="c_weight|data"):
        check_consistency([sym, planted], ctx_list, arg_params=dict(args), rtol=1e-7, atol=1e-9)
