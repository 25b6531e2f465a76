"""Op-specific tests for the ``_linalg_*`` family that the OpInfo table cannot express: which triangle each
op reads, MXNet's symmetric gradient convention for potrf/syevd against the derivative w.r.t. the read
triangle, the sign conventions of gelqf/syevd, aliases, parameter order, output names, MXNet's symbol
JSON, and bad input. Expected values are hand-written numpy (or MXNet's documented examples)."""

import json

import numpy as np
import pytest
from fd_oracle import central_gradient

import symgrad as sg
from symgrad.opdef import get_op
from symgrad.test_utils import check_numeric_gradient

S = sg.sym


def _run(sym, args, heads=None):
    """Bind, forward(is_train), backward; returns (outputs, gradients by name)."""
    grads = {n: np.zeros_like(v) for n, v in args.items()}
    exe = sym.bind(sg.cpu(), dict(args), args_grad=grads)
    outs = [o.copy() for o in exe.forward(is_train=True)]
    exe.backward(heads)
    return outs, grads


def _forward(sym, **args):
    return [o.copy() for o in sym.bind(sg.cpu(), args).forward()]


def _spd(rng, n=3):
    m = rng.uniform(-1, 1, (n, n))
    return m @ m.T + n * np.eye(n)


A = S.Variable("A")
B = S.Variable("B")


# -- MXNet's documented examples ----------------------------------------------------------------------------


def test_documented_examples():
    (l_,) = _forward(S._linalg_potrf(A), A=np.array([[4.0, 1.0], [1.0, 4.25]]))
    np.testing.assert_allclose(l_, [[2.0, 0.0], [0.5, 2.0]])
    (inv,) = _forward(S._linalg_potri(A), A=np.array([[2.0, 0.0], [0.5, 2.0]]))
    np.testing.assert_allclose(inv, [[0.265625, -0.0625], [-0.0625, 0.25]])
    q, l_ = _forward(S._linalg_gelqf(A), A=np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    np.testing.assert_allclose(
        q, [[-0.26726124, -0.53452248, -0.80178373], [0.87287156, 0.21821789, -0.43643578]], rtol=1e-7
    )
    np.testing.assert_allclose(l_, [[-3.74165739, 0.0], [-8.55235974, 1.96396101]], rtol=1e-7)
    u, lam = _forward(S._linalg_syevd(A), A=np.array([[1.0, 2.0], [2.0, 5.0]]))
    np.testing.assert_allclose(u, [[0.92387953, -0.38268343], [0.38268343, 0.92387953]], rtol=1e-7)
    np.testing.assert_allclose(lam, [0.17157288, 5.82842712], rtol=1e-7)
    (d,) = _forward(S._linalg_det(A), A=np.array([[1.0, 4.0], [2.0, 3.0]]))
    np.testing.assert_allclose(d, [-5.0])
    sign, logabs = _forward(
        S._linalg_slogdet(A), A=np.array([[[2.0, 3.0], [1.0, 4.0]], [[1.0, 2.0], [2.0, 4.0]], [[1.0, 2.0], [4.0, 3.0]]])
    )
    np.testing.assert_allclose(sign, [1.0, 0.0, -1.0])
    np.testing.assert_allclose(logabs, [np.log(5.0), -np.inf, np.log(5.0)])
    (y,) = _forward(S._linalg_syrk(A, alpha=1.0, transpose=True), A=np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    np.testing.assert_allclose(y, [[17.0, 22.0, 27.0], [22.0, 29.0, 36.0], [27.0, 36.0, 45.0]])
    (y,) = _forward(S._linalg_trmm(A, B, alpha=2.0), A=np.array([[1.0, 0.0], [1.0, 1.0]]), B=np.ones((2, 3)))
    np.testing.assert_allclose(y, [[2.0] * 3, [4.0] * 3])
    (y,) = _forward(
        S._linalg_gemm(A, B, S.Variable("C"), transpose_b=True, alpha=2.0, beta=10.0),
        A=np.ones((2, 2)),
        B=np.ones((3, 2)),
        C=np.ones((2, 3)),
    )
    np.testing.assert_allclose(y, np.full((2, 3), 14.0))


# -- triangles ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lower", [True, False])
def test_potrf_and_syevd_read_one_triangle(lower):
    rng = np.random.default_rng(0)
    a = _spd(rng)
    junk = a + (np.triu if lower else np.tril)(rng.uniform(-9, 9, (3, 3)), 1 if lower else -1)
    f = S._linalg_potrf(A, lower=lower)
    np.testing.assert_allclose(_forward(f, A=junk)[0], _forward(f, A=a)[0], rtol=1e-12)
    if lower:  # syevd always reads the lower triangle
        for got, want in zip(_forward(S._linalg_syevd(A), A=junk), _forward(S._linalg_syevd(A), A=a)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("op", ["_linalg_potri", "_linalg_trmm", "_linalg_trsm"])
@pytest.mark.parametrize("lower", [True, False])
def test_triangular_inputs_ignore_the_other_triangle(op, lower):
    rng = np.random.default_rng(1)
    t = (np.tril if lower else np.triu)(rng.uniform(-0.5, 0.5, (3, 3))) + 2 * np.eye(3)
    junk = t + (np.triu if lower else np.tril)(rng.uniform(-9, 9, (3, 3)), 1 if lower else -1)
    args = {"B": rng.uniform(-1, 1, (3, 2))}
    sym = S._linalg_potri(A, lower=lower) if op == "_linalg_potri" else getattr(S, op)(A, B, lower=lower)
    args = {n: v for n, v in args.items() if n in sym.list_arguments()}
    heads = [rng.standard_normal(_forward(sym, A=t, **args)[0].shape)]
    (want,), gwant = _run(sym, {"A": t, **args}, heads)
    (got,), ggot = _run(sym, {"A": junk, **args}, heads)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    for n in gwant:
        np.testing.assert_allclose(ggot[n], gwant[n], rtol=1e-12, atol=1e-14)
    unread = (np.triu if lower else np.tril)(np.ones((3, 3)), 1 if lower else -1).astype(bool)
    assert np.all(gwant["A"][unread] == 0), "the gradient must vanish on the unread triangle"


def test_potrf_gradient_is_mxnets_symmetric_one():
    """MXNet returns the symmetric gradient G (the derivative along symmetric perturbations). The op alone
    reads the lower triangle, so its finite-difference gradient is tril(G + G^T) - diag(G): twice G below
    the diagonal, G on it, 0 above."""
    rng = np.random.default_rng(2)
    a = _spd(rng)
    head = rng.standard_normal((3, 3))
    _, grads = _run(S._linalg_potrf(A), {"A": a}, [head])
    g = grads["A"]
    np.testing.assert_allclose(g, g.T, rtol=1e-12, atol=1e-14)
    loss = S.sum(S._linalg_potrf(A) * S.Variable("H"))
    read = np.tril(g + g.T) - np.diag(np.diag(g))
    # the derivative w.r.t. each element of A by central differences: the read (lower) triangle's, zero above
    exe = loss.bind(sg.cpu(), {"A": a.copy(), "H": head})

    def f(v):
        exe.arg_dict["A"][...] = v
        return exe.forward()[0].item()

    np.testing.assert_allclose(central_gradient(f, a), read, rtol=1e-6, atol=1e-8)


def test_syevd_sign_convention_largest_entry_of_each_row_positive():
    rng = np.random.default_rng(3)
    m = rng.uniform(-1, 1, (2, 4, 4))
    u, lam = _forward(S._linalg_syevd(A), A=m + np.swapaxes(m, -1, -2))
    assert np.all(np.diff(lam, axis=-1) > 0)
    rows = u.reshape(-1, 4)
    assert np.all(rows[np.arange(8), np.argmax(np.abs(rows), axis=1)] > 0)
    np.testing.assert_allclose(u @ np.swapaxes(u, -1, -2), np.broadcast_to(np.eye(4), (2, 4, 4)), atol=1e-12)


def test_gelqf_factors_reconstruct_and_q_is_row_orthonormal():
    a = np.random.default_rng(4).uniform(-1, 1, (2, 2, 5))
    q, l_ = _forward(S._linalg_gelqf(A), A=a)
    np.testing.assert_allclose(l_ @ q, a, atol=1e-12)
    np.testing.assert_allclose(q @ np.swapaxes(q, -1, -2), np.broadcast_to(np.eye(2), (2, 2, 2)), atol=1e-12)
    assert np.all(np.triu(l_, 1) == 0)


def test_extracttrian_packing_order_matches_mxnet():
    x = np.arange(16.0).reshape(4, 4)
    cases = {
        (0, True): [0, 4, 5, 8, 9, 10, 12, 13, 14, 15],
        (0, False): [0, 1, 5, 2, 6, 10, 3, 7, 11, 15],
        (1, True): [1, 2, 6, 3, 7, 11],
        (-1, True): [4, 8, 9, 12, 13, 14],
        (2, False): [2, 3, 7],
    }
    for (offset, lower), want in cases.items():
        (got,) = _forward(S._linalg_extracttrian(A, offset=offset, lower=lower), A=x)
        np.testing.assert_array_equal(got, want)
        (back,) = _forward(S._linalg_maketrian(A, offset=offset, lower=lower), A=got)
        np.testing.assert_array_equal(back[back != 0], np.sort(want)[np.sort(want) != 0])


# -- second order through the decompositions --------------------------------------------------------------


def test_second_order_of_a_cholesky_log_likelihood():
    """A Gaussian log-likelihood through potrf, trsm and sumlogdiag: its Hessian-vector product against
    finite differences of the gradient (all rules are Symbols, so ``grad`` of ``grad`` works)."""
    rng = np.random.default_rng(5)
    x = S.Variable("x")
    sym_a = (A + S.swapaxes(A, dim1=0, dim2=1)) * 0.5
    chol = S._linalg_potrf(sym_a)
    z = S._linalg_trsm(chol, x)
    nll = S.sum(S.square(z)) * 0.5 + S._linalg_sumlogdiag(chol)
    (ga,) = sg.grad(nll, [A])
    phi = S.sum(ga * S.Variable("v"))
    result = check_numeric_gradient(
        phi,
        {"A": _spd(rng), "x": rng.uniform(-1, 1, (3, 2)), "v": rng.standard_normal((3, 3))},
        grad_nodes=["A", "x"],
        dtype=np.float64,
        rtol=1e-5,
        atol=1e-7,
        progress=False,
    )
    assert set(result) == {"A", "x"} and not result.excluded  # every element of both checked


# -- registration ------------------------------------------------------------------------------------------


ALIASES = {
    "_linalg_gemm": ["linalg_gemm"],
    "_linalg_potrf": ["linalg_potrf"],
    "_linalg_potri": ["linalg_potri"],
    "_linalg_trmm": ["linalg_trmm"],
    "_linalg_trsm": ["linalg_trsm"],
    "_linalg_syrk": ["linalg_syrk"],
    "_linalg_gelqf": ["linalg_gelqf"],
    "_linalg_syevd": [],
    "_linalg_sumlogdiag": ["linalg_sumlogdiag"],
    "_linalg_extractdiag": ["linalg_extractdiag"],
    "_linalg_makediag": ["linalg_makediag"],
    "_linalg_extracttrian": ["linalg_extracttrian"],
    "_linalg_maketrian": ["linalg_maketrian"],
    "_linalg_inverse": ["linalg_inverse", "_npi_inv"],
    "_linalg_det": ["linalg_det", "_npi_det"],
    "_linalg_slogdet": ["linalg_slogdet", "_npi_slogdet"],
}


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_aliases_are_exactly_mxnets(name):
    op = get_op(name)
    for alias in ALIASES[name]:
        assert get_op(alias) is op
    if not ALIASES[name]:  # MXNet 1.9.1 registers no linalg_syevd
        with pytest.raises(sg.ParamError, match="unknown operator"):
            get_op("linalg_" + name[len("_linalg_") :])


def test_parameter_order_matches_mxnet():
    # DMLC_DECLARE_FIELD order (users may pass parameters positionally after the inputs)
    assert list(get_op("_linalg_gemm").params) == ["transpose_a", "transpose_b", "alpha", "beta", "axis"]
    assert list(get_op("_linalg_trmm").params) == ["transpose", "rightside", "lower", "alpha"]
    assert list(get_op("_linalg_trsm").params) == ["transpose", "rightside", "lower", "alpha"]
    assert list(get_op("_linalg_syrk").params) == ["transpose", "alpha"]
    assert list(get_op("_linalg_extracttrian").params) == ["offset", "lower"]
    assert list(get_op("_linalg_potrf").params) == ["lower"]
    assert list(get_op("_linalg_gelqf").params) == []


def test_input_and_output_names():
    assert S._linalg_gemm(A, B, S.Variable("C")).list_arguments() == ["A", "B", "C"]
    assert S._linalg_det(A, name="d").list_outputs() == ["d_output0"]  # MXNet's det has 2 hidden outputs
    assert S._linalg_slogdet(A, name="s").list_outputs() == ["s_output0", "s_output1"]
    assert S._linalg_gelqf(A, name="q").list_outputs() == ["q_output0", "q_output1"]
    assert S._linalg_syevd(A, name="e").list_outputs() == ["e_output0", "e_output1"]
    assert S._linalg_potrf(A, name="p").list_outputs() == ["p_output"]


def test_loads_mxnet_json_with_alias_names_and_string_params():
    graph = {
        "nodes": [
            {"op": "null", "name": "A", "inputs": []},
            {
                "op": "linalg_trsm",
                "name": "t",
                "attrs": {"rightside": "True", "alpha": "2.0"},
                "inputs": [[0, 0, 0], [0, 0, 0]],
            },
            {"op": "linalg_sumlogdiag", "name": "s", "inputs": [[1, 0, 0]]},
        ],
        "arg_nodes": [0],
        "heads": [[2, 0, 0]],
        "attrs": {"mxnet_version": ["int", 10901]},
    }
    sym = S.load_json(json.dumps(graph))
    a = np.array([[2.0, 0.0], [1.0, 4.0]])
    (y,) = _forward(sym, A=a)
    np.testing.assert_allclose(y, [np.log(2.0) + np.log(2.0)])  # A A^-1 * 2 = 2 I


# -- shapes, dtypes and bad input -----------------------------------------------------------------------------


def test_shape_inference():
    assert S._linalg_gelqf(A).infer_shape(A=(2, 3, 5))[1] == [(2, 3, 5), (2, 3, 3)]
    assert S._linalg_syevd(A).infer_shape(A=(4, 3, 3))[1] == [(4, 3, 3), (4, 3)]
    assert S._linalg_det(A).infer_shape(A=(3, 3))[1] == [(1,)]
    assert S._linalg_slogdet(A).infer_shape(A=(2, 5, 3, 3))[1] == [(2, 5), (2, 5)]
    assert S._linalg_sumlogdiag(A).infer_shape(A=(2, 3, 3))[1] == [(2,)]
    assert S._linalg_maketrian(A, offset=-2).infer_shape(A=(4, 10))[1] == [(4, 6, 6)]
    assert S._linalg_extracttrian(A, offset=1).infer_shape(A=(4, 4))[1] == [(6,)]
    assert S._linalg_makediag(A, offset=1).infer_shape(A=(2, 3))[1] == [(2, 4, 4)]
    assert S._linalg_syrk(A, transpose=True).infer_shape(A=(2, 3))[1] == [(3, 3)]
    assert S._linalg_trsm(A, B, rightside=True).infer_shape(A=(3, 3), B=(5, 3))[1] == [(5, 3)]
    assert S._linalg_gemm(A, B, S.Variable("C"), axis=0).infer_shape(A=(2, 3, 4), B=(4, 3, 5))[0][2] == (2, 3, 5)


@pytest.mark.parametrize(
    ("sym", "shapes", "match"),
    [
        (lambda: S._linalg_potrf(A, name="p"), {"A": (2, 3)}, r"'p'.*'A'.*square"),
        (lambda: S._linalg_inverse(A, name="i"), {"A": (3,)}, r"'i'.*'A'.*ndim >= 2"),
        (lambda: S._linalg_trmm(A, B, name="t"), {"A": (3, 3), "B": (2, 2)}, r"'t'.*incompatible"),
        (lambda: S._linalg_trsm(A, B, rightside=True, name="t"), {"A": (3, 3), "B": (3, 2)}, r"'t'.*rightside=True"),
        (lambda: S._linalg_trsm(A, B, name="t"), {"A": (2, 3, 3), "B": (3, 3, 2)}, r"'t'.*last two axes"),
        (lambda: S._linalg_gelqf(A, name="q"), {"A": (3, 2)}, r"'q'.*at most as many rows"),
        (lambda: S._linalg_extracttrian(A, offset=3, name="e"), {"A": (3, 3)}, r"'e'.*offset=3"),
        (lambda: S._linalg_maketrian(A, name="m"), {"A": (4,)}, r"'m'.*triangular number"),
        (
            lambda: S._linalg_gemm(A, B, S.Variable("C"), name="g"),
            {"A": (2, 3), "B": (3, 4), "C": (2, 3)},
            r"'g'.*'C'.*\(2, 4\)",
        ),
    ],
)
def test_bad_shapes_name_the_op_and_input(sym, shapes, match):
    with pytest.raises(sg.ShapeError, match=match):
        sym().infer_shape(**shapes)


def test_float16_and_integers_are_rejected_as_in_mxnet():
    with pytest.raises(TypeError, match=r"'p'.*float32 or float64.*float16"):
        S._linalg_potrf(A, name="p").infer_type(A=np.float16)
    with pytest.raises(TypeError, match="int32"):
        S._linalg_det(A).infer_type(A=np.int32)
    assert S._linalg_slogdet(A).infer_type(A=np.float32)[1] == [np.float32, np.float32]


@pytest.mark.parametrize(
    ("sym", "value", "match"),
    [
        (lambda: S._linalg_potrf(A), np.array([[1.0, 2.0], [2.0, 1.0]]), "_linalg_potrf.*positive-definite"),
        (lambda: S._linalg_inverse(A), np.ones((2, 2)), "_linalg_inverse.*singular"),
        (lambda: S._linalg_trsm(A, A), np.array([[1.0, 0.0], [1.0, 0.0]]), "_linalg_trsm.*singular"),
    ],
)
def test_numerically_bad_input_is_a_clear_error(sym, value, match):
    with pytest.raises(ValueError, match=match):
        _forward(sym(), A=value)


def test_inputs_are_not_modified():
    rng = np.random.default_rng(6)
    a = _spd(rng) + np.triu(np.ones((3, 3)), 1)
    keep = a.copy()
    for sym in (
        S._linalg_potrf(A),
        S._linalg_syevd(A),
        S._linalg_gelqf(A),
        S._linalg_potri(A),
        S._linalg_slogdet(A),
        S._linalg_extracttrian(A),
    ):
        _run(sym, {"A": a}, [np.ones(s) for s in sym.infer_shape(A=a.shape)[1]])
        np.testing.assert_array_equal(a, keep)
