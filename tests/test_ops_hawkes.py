"""``_contrib_hawkesll`` beyond the OpInfo rows (tests/op_db_hawkes.py): the reference's integral against
quadrature, chaining windows through ``out_state``, closed-form gradients of ``out_state``, shape and dtype
rules, bad input, and the missing second order of the fused ``_backward_hawkesll``."""

import numpy as np
import pytest
from op_db_hawkes import hawkes_ref

import symgrad as sg
from symgrad.base import ShapeError
from symgrad.test_utils import check_numeric_gradient

S = sg.sym
NAMES = ("lda", "alpha", "beta", "state", "lags", "marks", "valid_length", "max_time")


def _symbol():
    return S._contrib_hawkesll(*[S.Variable(n) for n in NAMES])


def _data(seed=0, N=2, K=3, T=4, lengths=(4, 2)):
    rng = np.random.default_rng(seed)
    return {
        "lda": rng.uniform(0.5, 2.0, (N, K)),
        "alpha": rng.uniform(0.1, 0.9, K),
        "beta": rng.uniform(0.5, 2.0, K),
        "state": rng.uniform(0.0, 1.0, (N, K)),
        "lags": rng.uniform(0.1, 1.0, (N, T)),
        "marks": rng.integers(0, K, (N, T)).astype(np.int32),
        "valid_length": np.array(lengths, dtype=float),
        "max_time": T + rng.uniform(0.5, 1.0, N),
    }


def _run(args, heads=None, dtype=np.float64):
    args = {n: (v if n == "marks" else np.asarray(v, dtype=dtype)) for n, v in args.items()}
    sym = _symbol()
    grads = {n: np.zeros_like(args[n]) for n in NAMES[:4]}
    exe = sym.bind(sg.cpu(), args, args_grad=grads, grad_req={n: "write" if n in grads else "null" for n in NAMES})
    outs = [o.copy() for o in exe.forward(is_train=True)]
    if heads is not None:
        exe.backward(heads)
    return outs, grads


def test_reference_integral_matches_quadrature():
    """The reference's closed-form compensator is the integral of the intensity it evaluates at events."""
    d = _data(1)
    i, T = 0, d["max_time"][0]
    times = np.cumsum(d["lags"][i])
    trapezoid = getattr(np, "trapezoid", None) or np.trapz
    edges = np.concatenate([[0.0], times[times < T], [T]])
    total = 0.0
    for a, b in zip(edges[:-1], edges[1:]):  # the intensity is smooth between events: trapezoids per piece
        grid = np.linspace(a, b, 20_001)
        for k in range(3):
            past = times[(d["marks"][i] == k) & (times <= a)]
            lam = d["lda"][i, k] + d["alpha"][k] * d["beta"][k] * (
                d["state"][i, k] * np.exp(-d["beta"][k] * grid)
                + sum(np.exp(-d["beta"][k] * (grid - tj)) for tj in past)
            )
            total += trapezoid(lam, grid)
    log_terms = 0.0
    for j, (tj, k) in enumerate(zip(times, d["marks"][i])):
        earlier = times[:j][d["marks"][i][:j] == k]
        log_terms += np.log(
            d["lda"][i, k]
            + d["alpha"][k]
            * d["beta"][k]
            * (d["state"][i, k] * np.exp(-d["beta"][k] * tj) + np.exp(-d["beta"][k] * (tj - earlier)).sum())
        )
    ll, _ = hawkes_ref(*[d[n] for n in NAMES])
    np.testing.assert_allclose(ll[0], log_terms - total, rtol=1e-7)
    (out, _), _ = _run(d)
    np.testing.assert_allclose(out, ll, rtol=1e-12)


def test_out_state_chains_windows():
    """Splitting one observation at time W and carrying ``out_state`` gives the same log-likelihood: the
    exponential memory is all the process needs of its past."""
    d = _data(2, N=1, K=2, T=6, lengths=(6,))
    times = np.cumsum(d["lags"][0])
    W = (times[2] + times[3]) / 2  # between the third and the fourth event
    (whole, _), _ = _run(d)
    first = dict(d, valid_length=np.array([3.0]), max_time=np.array([W]))
    (ll1, s1), _ = _run(first)
    second = dict(
        d,
        state=s1,
        lags=np.concatenate([[times[3] - W], d["lags"][0, 4:], [0, 0, 0]])[None],
        marks=np.concatenate([d["marks"][0, 3:], [0, 0, 0]])[None].astype(np.int32),
        valid_length=np.array([3.0]),
        max_time=d["max_time"] - W,
    )
    (ll2, s2), _ = _run(second)
    (_, s_whole), _ = _run(d)
    np.testing.assert_allclose(ll1 + ll2, whole, rtol=1e-12)
    np.testing.assert_allclose(s2, s_whole, rtol=1e-12)


def test_out_state_head_gradient_in_closed_form():
    """A mark with no event keeps only its decayed memory, out_state = state exp(-beta T): its head gradient
    G reaches state (G exp(-beta T)) and beta (-G T state exp(-beta T)). MXNet 1.9.1 drops this head gradient
    (and writes no gradient for state); symgrad follows the math."""
    d = _data(3, N=2, K=2, T=3, lengths=(0, 0))
    G = np.array([[0.5, -1.0], [2.0, 0.25]])
    _, grads = _run(d, heads=[np.zeros(2), G])
    decay = np.exp(-d["beta"] * d["max_time"][:, None])
    np.testing.assert_allclose(grads["state"], G * decay, rtol=1e-12)
    np.testing.assert_allclose(grads["beta"], (-G * d["max_time"][:, None] * d["state"] * decay).sum(0), rtol=1e-12)
    np.testing.assert_array_equal(grads["lda"], 0.0)
    np.testing.assert_array_equal(grads["alpha"], 0.0)


def test_gradients_from_both_heads_match_finite_differences():
    d = _data(4, N=3, K=2, T=5, lengths=(5, 3, 1))
    result = check_numeric_gradient(
        _symbol(), d, grad_nodes=list(NAMES[:4]), dtype=np.float64, rtol=1e-6, atol=1e-8, progress=False
    )
    assert set(result) == set(NAMES[:4]) and not result.excluded


def test_inputs_are_not_modified():
    d = _data(5)
    before = {n: v.copy() for n, v in d.items()}
    _run(d, heads=[np.ones(2), np.ones((2, 3))])
    for n in NAMES:
        np.testing.assert_array_equal(d[n], before[n], err_msg=n)


def test_second_order_is_a_clear_error():
    lda = S.Variable("lda")
    out = S._contrib_hawkesll(lda, *[S.Variable(n) for n in NAMES[1:]])
    (g,) = sg.grad(S.sum(out[0]), [lda])
    with pytest.raises(ValueError, match=r"_backward_hawkesll.*second-order"):
        sg.grad(S.sum(g), [lda])


# -- shape and dtype rules ------------------------------------------------------------------------------


def test_shapes_filled_from_partial_information():
    sym = _symbol()
    args, outs, _ = sym.infer_shape(lda=(3, 2), lags=(3, 5))
    assert args == [(3, 2), (2,), (2,), (3, 2), (3, 5), (3, 5), (3,), (3,)]
    assert outs == [(3,), (3, 2)]
    out_names = sym.list_outputs()
    assert out_names[0].endswith("_output") and out_names[1].endswith("_out_state"), out_names


def test_marks_default_to_int32_and_outputs_follow_lda():
    sym = _symbol()
    args, outs, _ = sym.infer_type(lda=np.float32)
    assert args == [np.float32] * 5 + [np.int32] + [np.float32] * 2
    assert outs == [np.float32, np.float32]


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_low_precision_forward_follows_the_float64_one(dtype):
    d = _data(6)
    (out64, st64), _ = _run(d)
    (out, st), _ = _run(d, dtype=dtype)
    assert out.dtype == dtype and st.dtype == dtype
    tol = 2e-2 if dtype == np.float16 else 1e-5
    ref, ref_state = hawkes_ref(*[d[n] if n == "marks" else d[n].astype(dtype).astype(np.float64) for n in NAMES])
    np.testing.assert_allclose(out, ref, rtol=tol)
    np.testing.assert_allclose(st, ref_state, rtol=tol)


@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        ({"lda": (3,)}, r"input 'lda' must be 2-d \(N, K\), got shape \(3,\)"),
        ({"lda": (3, 2), "alpha": (3,)}, r"input 'alpha' has shape \(3,\), so K=3, but input 'lda' has K=2"),
        ({"lda": (3, 2), "lags": (4, 5)}, r"input 'lags' has shape \(4, 5\), so N=4, but input 'lda' has N=3"),
        ({"lags": (3, 5), "marks": (3, 4)}, r"input 'marks' has shape \(3, 4\), so T=4, but input 'lags' has T=5"),
        ({"lda": (3, 2), "max_time": (3, 1)}, r"input 'max_time' must be 1-d \(N\)"),
    ],
)
def test_bad_shapes_name_the_input(shapes, match):
    with pytest.raises(ShapeError, match=r"_contrib_hawkesll.*" + match):
        _symbol().infer_shape(**shapes)


def test_bad_dtypes_name_the_input():
    with pytest.raises(TypeError, match=r"input 'lda' must be float16, float32 or float64, got int32"):
        _symbol().infer_type(lda=np.int32)
    with pytest.raises(TypeError, match=r"input 'max_time' has dtype float32, but input 'lda' has float64"):
        _symbol().infer_type(lda=np.float64, max_time=np.float32)
    with pytest.raises(TypeError, match=r"input 'marks' must hold integers \(MXNet: int32\), got bool"):
        _symbol().infer_type(lda=np.float64, marks=np.bool_)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"valid_length": np.array([5.0, 2.0])}, r"'valid_length' must be at most T=4.*got 5"),
        (
            {"marks": np.array([[0, 1, 3, 0], [0, 0, 0, 0]], dtype=np.int32)},
            r"'marks' must hold whole numbers in \[0, 3\)",
        ),
        ({"marks": np.array([[0, 1, 2, 0], [-1, 0, 0, 0]], dtype=np.int32)}, r"in \[0, 3\).*got -1"),
        ({"marks": np.array([[0, 1, 2, 0.5], [0, 0, 0, 0]])}, r"got 0\.5"),
    ],
)
def test_bad_values_raise(change, match):
    with pytest.raises(ValueError, match=r"_contrib_hawkesll: input .*" + match):
        _run({**_data(7), **change})


def test_marks_past_valid_length_are_not_read():
    """Columns at and beyond valid_length are padding: any mark there (even out of range) is ignored."""
    d = _data(8)
    (out, st), _ = _run(d)
    padded = {**d, "marks": d["marks"].copy()}
    padded["marks"][1, 2:] = 99
    (out2, st2), _ = _run(padded)
    np.testing.assert_array_equal(out, out2)
    np.testing.assert_array_equal(st, st2)
