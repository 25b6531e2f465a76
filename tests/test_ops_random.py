"""The random sampling operators (symgrad/ops/random.py), ``sg.random.seed`` and ``sg.sym_random``.

Samples are random, so they have no OpInfo rows: this file checks shapes and dtypes, parameter validation,
seeding (same seed -> same draws), the moments of every distribution over 20000 draws (seeded, so every run
draws the same numbers: a pass is deterministic), the zero gradients MXNet gives, and that every numeric
gradient checker refuses a symbol holding a sampling op. The densities ``_random_pdf_*`` are deterministic and
have OpInfo rows in tests/op_db_random.py.
"""

import math

import numpy as np
import pytest

import symgrad as sg
from symgrad import sym_random
from symgrad.base import ParamError, ShapeError, SymgradError
from symgrad.ops import get_op, list_ops
from symgrad.test_utils import (
    check_backward,
    check_consistency,
    check_double_backward,
    check_numeric_gradient,
    gradcheck,
    gradgradcheck,
    numeric_grad,
)
from symgrad.test_utils.harness import RandomOpError, refuse_random_ops

S = sg.sym
N = 20000


def run(sym, **arrays):
    """Outputs of one inference forward of ``sym`` bound to ``arrays``."""
    return sym.bind(sg.cpu(), arrays).forward()


@pytest.fixture(autouse=True)
def _seeded():
    sg.random.seed(1234)
    yield
    sg.random.seed(0)


# -- registration: MXNet's names and aliases --------------------------------------------------------------------

ALIASES = {
    "_random_uniform": ("uniform", "random_uniform"),
    "_random_normal": ("normal", "random_normal"),
    "_random_gamma": ("random_gamma",),
    "_random_exponential": ("random_exponential",),
    "_random_poisson": ("random_poisson",),
    "_random_negative_binomial": ("random_negative_binomial",),
    "_random_generalized_negative_binomial": ("random_generalized_negative_binomial",),
    "_random_randint": ("random_randint", "_npi_random_randint"),
    "_sample_uniform": ("sample_uniform",),
    "_sample_normal": ("sample_normal",),
    "_sample_gamma": ("sample_gamma",),
    "_sample_exponential": ("sample_exponential",),
    "_sample_poisson": ("sample_poisson",),
    "_sample_negative_binomial": ("sample_negative_binomial",),
    "_sample_generalized_negative_binomial": ("sample_generalized_negative_binomial",),
    "_sample_multinomial": ("sample_multinomial",),
    "_shuffle": ("shuffle", "_npi_shuffle"),
    "_random_pdf_normal": ("random_pdf_normal",),
}


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_mxnet_aliases_name_the_same_op(name):
    for alias in ALIASES[name]:
        assert get_op(alias) is get_op(name), alias


def test_every_sampling_op_is_marked_random_and_the_densities_are_not():
    ops = list_ops()
    for name, op in ops.items():
        sampling = name.startswith(("_random_", "_sample_")) and not name.startswith("_random_pdf_")
        if sampling:
            assert op.is_random, name
    assert ops["_shuffle"].is_random
    assert not ops["_random_pdf_normal"].is_random
    assert not ops["Dropout"].is_random  # deterministic in inference; the checkers catch it at run time


def test_parameter_and_input_names_follow_mxnet():
    assert list(get_op("_random_normal").params) == ["loc", "scale", "shape", "ctx", "dtype"]
    assert list(get_op("_random_negative_binomial").params) == ["k", "p", "shape", "ctx", "dtype"]
    assert list(get_op("_random_randint").params) == ["low", "high", "shape", "ctx", "dtype"]
    assert list(get_op("_random_gamma_like").params) == ["alpha", "beta"]
    mu, sigma = S.Variable("mu"), S.Variable("sigma")
    assert S._sample_normal(mu, sigma).list_arguments() == ["mu", "sigma"]
    assert S._sample_generalized_negative_binomial(name="g").list_arguments() == ["g_mu", "g_alpha"]
    with sg.NameManager():  # automatic names count from 0 in a fresh manager, whatever ran before
        outputs = S._sample_multinomial(S.Variable("p"), get_prob=True).list_outputs()
    assert outputs == [
        "_sample_multinomial0_output0",
        "_sample_multinomial0_output1",
    ]


# -- shapes and dtypes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, params",
    [
        ("_random_uniform", {}),
        ("_random_normal", {}),
        ("_random_gamma", {"alpha": 2.0}),
        ("_random_exponential", {"lam": 2.0}),
        ("_random_poisson", {"lam": 3.0}),
        ("_random_negative_binomial", {"k": 3, "p": 0.5}),
        ("_random_generalized_negative_binomial", {"mu": 2.0}),
    ],
)
def test_random_ops_shape_and_dtype(op, params):
    sym = getattr(S, op)(shape=(2, 3), **params)
    (out,) = run(sym)
    assert out.shape == (2, 3) and out.dtype == np.float32  # MXNet's default dtype
    assert sym.infer_shape()[1] == [(2, 3)] and sym.infer_type()[1] == [np.float32]
    (out,) = run(getattr(S, op)(shape=(4,), dtype="float64", **params))
    assert out.dtype == np.float64 and out.shape == (4,)


def test_like_ops_take_shape_and_dtype_of_data():
    x = S.Variable("x")
    for dist in (
        "uniform",
        "normal",
        "gamma",
        "exponential",
        "poisson",
        "negative_binomial",
        "generalized_negative_binomial",
    ):
        (out,) = run(getattr(S, f"_random_{dist}_like")(x), x=np.zeros((3, 2), np.float64))
        assert out.shape == (3, 2) and out.dtype == np.float64, dist


def test_sample_ops_shape_is_param_shape_then_sample_shape_and_dtype_float32_by_default():
    mu, sigma = S.Variable("mu"), S.Variable("sigma")
    sym = S._sample_normal(mu, sigma, shape=(4, 5))
    (out,) = run(sym, mu=np.zeros((2, 3)), sigma=np.ones((2, 3)))
    assert out.shape == (2, 3, 4, 5) and out.dtype == np.float32  # float64 parameters, float32 samples (MXNet)
    assert sym.infer_shape(mu=(2, 3))[1] == [(2, 3, 4, 5)]
    (out,) = run(S._sample_exponential(S.Variable("lam"), dtype="float16"), lam=np.ones(3))
    assert out.shape == (3,) and out.dtype == np.float16


def test_randint_is_int32_by_default_and_stays_in_range():
    (out,) = run(S._random_randint(low=-2, high=5, shape=(1000,)))
    assert out.dtype == np.int32 and out.min() >= -2 and out.max() <= 4
    assert set(np.unique(out)) == set(range(-2, 5))
    (out,) = run(S.random_randint(low=0, high=3, shape=(5,), dtype="int64"))
    assert out.dtype == np.int64


def test_multinomial_shapes_and_log_probabilities():
    p = np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]])
    idx, logp = run(S._sample_multinomial(S.Variable("p"), shape=(4,), get_prob=True), p=p)
    assert idx.shape == (2, 4) and idx.dtype == np.int32 and logp.shape == (2, 4) and logp.dtype == np.float64
    np.testing.assert_array_equal(logp, np.log(np.take_along_axis(p, idx.astype(int), axis=1)))
    assert (idx[1] < 2).all()  # a zero-probability outcome is never drawn
    (one,) = run(S._sample_multinomial(S.Variable("p")), p=np.array([0.2, 0.8]))
    assert one.shape == (1,)  # 1-d data, no shape: one draw (MXNet)
    (one,) = run(S._sample_multinomial(S.Variable("p"), shape=(2, 3), dtype="float32"), p=np.array([0.2, 0.8]))
    assert one.shape == (2, 3) and one.dtype == np.float32


def test_shuffle_permutes_the_first_axis_only():
    x = np.arange(40.0).reshape(10, 4)
    (out,) = run(S._shuffle(S.Variable("x")), x=x)
    assert not np.array_equal(out, x)
    np.testing.assert_array_equal(np.sort(out[:, 0]), x[:, 0])
    np.testing.assert_array_equal(out - out[:, :1], x - x[:, :1])  # rows move whole
    assert x[3, 2] == 14.0  # the input is untouched


def test_unique_zipfian_draws_distinct_classes():
    samples, tries = run(S._sample_unique_zipfian(range_max=50, shape=(3, 10)))
    assert samples.shape == (3, 10) and tries.shape == (3,) and samples.dtype == tries.dtype == np.int64
    for row, t in zip(samples, tries):
        assert len(set(row.tolist())) == 10 and row.min() >= 0 and row.max() < 50 and t >= 10


# -- parameter validation --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, what",
    [
        (lambda: S._random_normal(scale=0.0, shape=(2,)), "scale"),
        (lambda: S._random_uniform(low=2.0, high=1.0, shape=(2,)), "high"),
        (lambda: S._random_gamma(alpha=-1.0, shape=(2,)), "alpha"),
        (lambda: S._random_exponential(lam=0.0, shape=(2,)), "lam"),
        (lambda: S._random_poisson(lam=-0.5, shape=(2,)), "lam"),
        (lambda: S._random_negative_binomial(k=2, p=1.5, shape=(2,)), "'p'"),
        (lambda: S._random_generalized_negative_binomial(alpha=-1.0, shape=(2,)), "alpha"),
        (lambda: S._random_randint(low=3, high=3, shape=(2,)), "high"),
        (lambda: S._random_uniform(shape=(2,), dtype="int32"), "dtype"),
        (lambda: S._random_randint(0, 4, shape=(2,), dtype="float32"), "dtype"),
        (lambda: S._random_uniform(shape=(2, 0)), "shape"),
        (lambda: S._random_normal_like(S.Variable("x"), scale=-1.0), "scale"),
        (lambda: S._sample_normal(S.Variable("m"), S.Variable("s"), dtype="int8"), "dtype"),
        (lambda: S._sample_multinomial(S.Variable("p"), dtype="int64"), "dtype"),
        (lambda: S._sample_unique_zipfian(range_max=5, shape=(2, 6)), "range_max"),
        (lambda: S._sample_unique_zipfian(range_max=5, shape=(6,)), "shape"),
        (lambda: S._random_randint(low=0, shape=(2,)), "high"),
    ],
)
def test_bad_parameters_raise_param_error_naming_op_and_parameter(make, what):
    with pytest.raises(ParamError, match=what):
        make()


def test_unset_shape_taken_from_consumers_is_refused_with_a_hint():
    x = S.Variable("x")
    with pytest.raises(ShapeError, match=r"pass shape=\(2, 3\)"):
        (S._random_uniform(name="u") + x).infer_shape(x=(2, 3))


def test_sample_op_with_out_of_domain_array_parameters_names_the_op():
    with pytest.raises(ValueError, match="_sample_poisson"):
        run(S._sample_poisson(S.Variable("lam")), lam=np.array([1.0, -2.0]))


def test_sample_parameter_inputs_must_share_shape_and_dtype():
    mu, sigma = S.Variable("mu"), S.Variable("sigma")
    with pytest.raises(ShapeError, match="same shape"):
        S._sample_normal(mu, sigma).infer_shape(mu=(2,), sigma=(3,))
    with pytest.raises(TypeError, match="same dtype"):
        S._sample_normal(mu, sigma).infer_type(mu=np.float32, sigma=np.float64)


# -- seeding -----------------------------------------------------------------------------------------------------


def _draw_all():
    mu = S.Variable("mu")
    graph = S.Group(
        [
            S._random_normal(shape=(5,)),
            S._sample_gamma(mu, mu, shape=(3,)),
            S._shuffle(S.Variable("x")),
            S._random_randint(0, 100, shape=(4,)),
        ]
    )
    return run(graph, mu=np.array([1.0, 2.0]), x=np.arange(8.0))


def test_same_seed_same_draws_and_another_seed_other_draws():
    sg.random.seed(7)
    first = _draw_all()
    sg.random.seed(7)
    again = _draw_all()
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    sg.random.seed(8)
    other = _draw_all()
    assert not np.array_equal(first[0], other[0])


def test_two_forwards_draw_anew():
    exe = S._random_uniform(shape=(6,)).bind(sg.cpu(), {})
    a = exe.forward()[0].copy()
    assert not np.array_equal(a, exe.forward()[0])


def test_seed_of_another_device_leaves_the_cpu_stream_alone():
    sg.random.seed(3)
    (a,) = run(S._random_normal(shape=(4,)))
    sg.random.seed(3, ctx=sg.cpu())
    sg.random.seed(99, ctx=sg.gpu(0))  # only CuPy's generator; no GPU is touched
    (b,) = run(S._random_normal(shape=(4,)))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad", [-1, 1.5, "7", None, True])
def test_bad_seed_raises(bad):
    with pytest.raises(ParamError, match="seed_state"):
        sg.random.seed(bad)
    with pytest.raises(ParamError, match="ctx"):
        sg.random.seed(1, ctx="cpu")


# -- moments (seeded: deterministic) ----------------------------------------------------------------------------


def _assert_moments(x, mean, var, what):
    x = np.asarray(x, np.float64).ravel()
    se = math.sqrt(var / x.size)
    assert abs(x.mean() - mean) < 5 * se, f"{what}: mean {x.mean():.4f}, expected {mean} +- {5 * se:.4f}"
    assert abs(x.var() - var) < 0.1 * var, f"{what}: variance {x.var():.4f}, expected {var} +- 10%"


MOMENTS = [  # (op, params, mean, variance)
    ("_random_uniform", {"low": -1.0, "high": 3.0}, 1.0, 16 / 12),
    ("_random_normal", {"loc": 1.0, "scale": 2.0}, 1.0, 4.0),
    ("_random_gamma", {"alpha": 2.0, "beta": 1.5}, 3.0, 4.5),  # beta: scale
    ("_random_gamma", {"alpha": 0.5, "beta": 2.0}, 1.0, 2.0),
    ("_random_exponential", {"lam": 2.0}, 0.5, 0.25),  # lam: rate
    ("_random_poisson", {"lam": 3.5}, 3.5, 3.5),
    ("_random_negative_binomial", {"k": 3, "p": 0.4}, 4.5, 11.25),  # failures before the k-th success
    ("_random_generalized_negative_binomial", {"mu": 2.0, "alpha": 0.3}, 2.0, 3.2),  # var mu + alpha mu^2
    ("_random_generalized_negative_binomial", {"mu": 2.0, "alpha": 0.0}, 2.0, 2.0),  # alpha 0: Poisson
    ("_random_randint", {"low": -2, "high": 5}, 1.0, 4.0),
]


@pytest.mark.parametrize("op, params, mean, var", MOMENTS, ids=[f"{m[0]}-{i}" for i, m in enumerate(MOMENTS)])
def test_random_op_moments(op, params, mean, var):
    (x,) = run(getattr(S, op)(shape=(N,), dtype="float64" if op != "_random_randint" else None, **params))
    _assert_moments(x, mean, var, op)


def test_like_op_moments():
    (x,) = run(S._random_exponential_like(S.Variable("x"), lam=4.0), x=np.zeros((N,)))
    _assert_moments(x, 0.25, 1 / 16, "_random_exponential_like")


SAMPLE_MOMENTS = [  # (op, inputs, per-distribution (mean, var))
    ("_sample_uniform", {"low": [0.0, 2.5], "high": [1.0, 3.7]}, [(0.5, 1 / 12), (3.1, 1.2**2 / 12)]),
    ("_sample_normal", {"mu": [0.0, 10.0], "sigma": [1.0, 0.5]}, [(0.0, 1.0), (10.0, 0.25)]),
    ("_sample_gamma", {"alpha": [1.0, 4.0], "beta": [2.0, 0.5]}, [(2.0, 4.0), (2.0, 1.0)]),
    ("_sample_exponential", {"lam": [1.0, 8.5]}, [(1.0, 1.0), (1 / 8.5, 1 / 8.5**2)]),
    ("_sample_poisson", {"lam": [1.0, 8.5]}, [(1.0, 1.0), (8.5, 8.5)]),
    (
        "_sample_negative_binomial",
        {"k": [20.0, 49.0], "p": [0.4, 0.77]},
        [(30.0, 75.0), (49 * 0.23 / 0.77, 49 * 0.23 / 0.77**2)],
    ),
    ("_sample_generalized_negative_binomial", {"mu": [2.0, 2.5], "alpha": [1.0, 0.1]}, [(2.0, 6.0), (2.5, 3.125)]),
]


@pytest.mark.parametrize("op, inputs, moments", SAMPLE_MOMENTS, ids=[m[0] for m in SAMPLE_MOMENTS])
def test_sample_op_moments_per_distribution(op, inputs, moments):
    arrays = {k: np.array(v) for k, v in inputs.items()}
    sym = getattr(S, op)(*[S.Variable(k) for k in inputs], shape=(N // 2,), dtype="float64")
    (x,) = run(sym, **arrays)
    assert x.shape == (2, N // 2)
    for row, (mean, var) in zip(x, moments):
        _assert_moments(row, mean, var, op)


def test_multinomial_frequencies():
    p = np.array([0.1, 0.2, 0.7])
    (idx,) = run(S._sample_multinomial(S.Variable("p"), shape=(N,)), p=p)
    freq = np.bincount(idx, minlength=3) / N
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / N)), freq


def test_shuffle_is_uniform_over_positions():
    x = S.Variable("x")
    exe = S._shuffle(x).bind(sg.cpu(), {"x": np.arange(4.0)})
    first = np.array([exe.forward()[0][0] for _ in range(4000)])
    freq = np.bincount(first.astype(int), minlength=4) / 4000
    assert np.all(np.abs(freq - 0.25) < 5 * math.sqrt(0.25 * 0.75 / 4000)), freq


# -- gradients (MXNet: zeros for _sample_* and _like, none for _shuffle) -------------------------------------------


def test_sample_and_like_ops_give_zero_gradients():
    mu, sigma = S.Variable("mu"), S.Variable("sigma")
    for sym, args in [
        (S._sample_normal(mu, sigma, shape=(3,)), {"mu": np.zeros(2), "sigma": np.ones(2)}),
        (S._random_normal_like(mu) * mu, {"mu": np.ones(2)}),
    ]:
        grads = {k: np.full(v.shape, 7.0) for k, v in args.items()}
        exe = sym.bind(sg.cpu(), args, args_grad=grads)
        out = exe.forward(is_train=True)[0]
        exe.backward(np.ones_like(out))
        if len(args) == 2:
            assert all(not g.any() for g in grads.values())
        else:  # d(mu * r)/dmu = r (the sample, a constant), + 0 through the sample
            np.testing.assert_allclose(grads["mu"], exe.outputs[0] / args["mu"])


def test_shuffle_has_no_gradient():
    x = S.Variable("x")
    with pytest.raises(SymgradError, match="not differentiable"):
        sg.grad(S._shuffle(x), [x])


def test_multinomial_log_probability_gradient_goes_to_the_sampled_outcomes():
    p = np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]])
    sym = S._sample_multinomial(S.Variable("p"), shape=(5,), get_prob=True)
    grad = np.zeros_like(p)
    exe = sym.bind(sg.cpu(), {"p": p}, args_grad={"p": grad})
    idx, _ = exe.forward(is_train=True)
    g1 = np.arange(10.0).reshape(2, 5)
    exe.backward([np.zeros(idx.shape, np.int32), g1])
    want = np.zeros_like(p)
    for r in range(2):
        for j in range(5):
            want[r, idx[r, j]] += g1[r, j] / p[r, idx[r, j]]
    np.testing.assert_allclose(grad, want)
    (second,) = run(S._sample_multinomial(S.Variable("p"), get_prob=False), p=p)
    assert second.shape == (2,)
    with pytest.raises(SymgradError, match="_backward_sample_multinomial"):
        q = S.Variable("q")
        first = sg.grad(S._sample_multinomial(q, get_prob=True)[1], [q])[0]
        sg.grad(S.sum(first), [q])


# -- the checkers refuse random graphs --------------------------------------------------------------------------


def _noisy(x):
    return x * S._random_normal_like(x, name="noise")


CHECKS = {
    "check_numeric_gradient": lambda: check_numeric_gradient(_noisy(S.Variable("x")), {"x": np.ones(3)}),
    "numeric_grad": lambda: numeric_grad(_noisy(S.Variable("x")).simple_bind(sg.cpu(), x=(3,)), {"x": np.ones(3)}),
    "check_backward": lambda: check_backward(_noisy, np.ones(3), np.ones(3)),
    "gradcheck": lambda: gradcheck(_noisy, (np.ones(3),)),
    "gradgradcheck": lambda: gradgradcheck(_noisy, (np.ones(3),)),
    "check_double_backward": lambda: check_double_backward(_noisy, np.ones(3), np.ones(3), np.ones(3)),
    "check_consistency": lambda: check_consistency(
        _noisy(S.Variable("x")), [{"ctx": sg.cpu(), "x": (3,)}, {"ctx": sg.cpu(), "x": (3,)}]
    ),
}


@pytest.mark.parametrize("checker", sorted(CHECKS))
def test_every_numeric_checker_refuses_a_random_op_naming_it(checker):
    with pytest.raises(RandomOpError, match=r"random sampling op _random_normal_like 'noise'.*meaningless") as info:
        CHECKS[checker]()
    assert isinstance(info.value, ValueError)
    assert info.value.op_name == "_random_normal_like" and info.value.node_name == "noise"
    assert str(info.value).startswith(checker)


def test_refusal_sees_random_ops_anywhere_in_the_graph_but_not_dropout_or_densities():
    x = S.Variable("x")
    deep = S.sum(S.tanh(x) + S._sample_uniform(x, x + 1.0, name="deep"))
    with pytest.raises(RandomOpError, match="'deep'"):
        refuse_random_ops(deep, "who")
    refuse_random_ops(S.Dropout(x, p=0.5), "who")
    refuse_random_ops(S._random_pdf_normal(x, S.Variable("m"), S.Variable("s")), "who")


# -- sg.sym_random: MXNet's mx.sym.random helpers --------------------------------------------------------------


def _op_of(sym):
    return sym.heads()[0].op_name


def test_sym_random_picks_the_random_or_the_sample_op():
    assert _op_of(sym_random.uniform(0, 2, shape=(3,))) == "_random_uniform"
    mu, sigma = S.Variable("mu"), S.Variable("sigma")
    assert _op_of(sym_random.normal(mu, sigma, shape=(2,))) == "_sample_normal"
    assert _op_of(sym_random.gamma(2.0, 1.0, shape=(2,))) == "_random_gamma"
    assert _op_of(sym_random.negative_binomial(mu, sigma)) == "_sample_negative_binomial"
    assert (
        _op_of(sym_random.generalized_negative_binomial(1.0, 0.5, shape=(2,)))
        == "_random_generalized_negative_binomial"
    )
    assert _op_of(sym_random.poisson(mu)) == "_sample_poisson"
    assert _op_of(sym_random.randint(0, 5, shape=(2,))) == "_random_randint"
    assert _op_of(sym_random.shuffle(mu)) == "_shuffle"
    assert sym_random.randn(2, 3, loc=1.0).infer_shape()[1] == [(2, 3)]
    # exponential takes a scale and passes the rate 1 / scale, as MXNet
    assert sym_random.exponential(4.0, shape=(2,)).heads()[0].params["lam"] == 0.25
    # MXNet's Python multinomial defaults to get_prob=True: two outputs
    assert len(sym_random.multinomial(mu).list_outputs()) == 2
    with pytest.raises(TypeError, match="all numbers or all Symbols"):
        sym_random.normal(mu, 1.0)
    with pytest.raises(TypeError, match="must be numbers"):
        sym_random.randint(mu, sigma)


# -- serialization: MXNet's own JSON loads and replays with the same seed ----------------------------------------

MXNET_JSON = """{"nodes": [{"op": "_random_uniform", "name": "_random_uniform0",
 "attrs": {"high": "1", "low": "0", "shape": "(2, 3)"}, "inputs": []},
 {"op": "null", "name": "mu", "inputs": []}, {"op": "null", "name": "sigma", "inputs": []},
 {"op": "_sample_normal", "name": "_sample_normal0", "attrs": {"shape": "(2,)", "dtype": "float64"},
  "inputs": [[1, 0, 0], [2, 0, 0]]}],
 "arg_nodes": [1, 2], "node_row_ptr": [0, 1, 2, 3, 4], "heads": [[0, 0, 0], [3, 0, 0]],
 "attrs": {"mxnet_version": ["int", 10901]}}"""


def test_mxnet_json_loads_and_round_trips():
    sym = S.load_json(MXNET_JSON)
    assert sym.infer_shape(mu=(4,), sigma=(4,))[1] == [(2, 3), (4, 2)]
    assert sym.infer_type(mu=np.float32, sigma=np.float32)[1] == [np.float32, np.float64]
    again = S.load_json(sym.tojson())
    sg.random.seed(5)
    a = run(sym, mu=np.zeros(4), sigma=np.ones(4))
    sg.random.seed(5)
    b = run(again, mu=np.zeros(4), sigma=np.ones(4))
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
