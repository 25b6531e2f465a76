"""Op-specific tests for CTCLoss and the loss heads added with it (SVMOutput, softmax_cross_entropy) that
the OpInfo table cannot express: CTC against an independent brute-force reference (every alignment of a
tiny problem enumerated) for loss *and* gradient over many random cases, head-gradient scaling, numerical
stability, the missing second order, MXNet names and wiring, and bad input.
"""

import itertools

import numpy as np
import pytest
from np_refs import softmax

import symgrad as sg
from symgrad.base import ParamError, ShapeError, SymgradError
from symgrad.ops import get_op

S = sg.sym


def _brute(x, label, blank):
    """(loss, d loss / d x) of one sample x (T, A) by enumerating every alignment that collapses to ``label``.

    p(path) = prod_t y_t(path_t), P = sum over the paths; loss = -log P and, with y = softmax(x),
    d loss / d x_t(k) = y_t(k) - sum_paths p(path) [path_t = k] / P. No path: (0, zeros), MXNet's convention.
    """
    y = softmax(x, 1)
    total, occupancy = 0.0, np.zeros_like(x)
    for path in itertools.product(range(x.shape[1]), repeat=x.shape[0]):
        merged = [k for t, k in enumerate(path) if t == 0 or path[t - 1] != k]
        if [k for k in merged if k != blank] != list(label):
            continue
        p = np.prod([y[t, k] for t, k in enumerate(path)])
        total += p
        for t, k in enumerate(path):
            occupancy[t, k] += p
    if total == 0:
        return 0.0, np.zeros_like(x)
    return -np.log(total), y - occupancy / total


def _run(sym, args, heads=None, grad=("data",), is_train=True):
    grads = {n: np.zeros_like(args[n]) for n in grad}
    exe = sym.bind(sg.cpu(), dict(args), args_grad=grads, grad_req={n: "write" for n in grad})
    outs = [o.copy() for o in exe.forward(is_train=is_train)]
    exe.backward(heads)
    return outs, grads


def _ctc_sym(**params):
    names = (
        ["data", "label"]
        + (["data_lengths"] if params.get("use_data_lengths") else [])
        + (["label_lengths"] if params.get("use_label_lengths") else [])
    )
    return S.CTCLoss(*[S.Variable(n) for n in names], **params)


# ----------------------------------------------------------------------------
# CTCLoss against brute force
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("blank_label", ["first", "last"])
@pytest.mark.parametrize("seed", range(6))
def test_ctc_loss_and_gradient_match_brute_force_enumeration(seed, blank_label):
    """Random tiny problems (T <= 4, alphabet <= 3, label length <= 2, random data and label lengths, padding
    as MXNet's): losses and gradients (head gradient h) match the enumeration in float64."""
    rng = np.random.default_rng(seed)
    T, N, A = int(rng.integers(1, 5)), 3, int(rng.integers(2, 4))
    blank = 0 if blank_label == "first" else A - 1
    classes = [k for k in range(A) if k != blank]
    pad = 0 if blank_label == "first" else -1
    x = rng.normal(0, 1.5, (T, N, A))
    dl = rng.integers(0, T + 1, N)
    Lmax = min(2, T)
    lengths = rng.integers(0, Lmax + 1, N)
    label = np.full((N, Lmax), pad)
    for b in range(N):
        label[b, : lengths[b]] = rng.choice(classes, lengths[b])
    h = rng.standard_normal(N)
    sym = _ctc_sym(use_data_lengths=True, blank_label=blank_label)
    (loss,), g = _run(sym, {"data": x, "label": label, "data_lengths": dl}, [h])
    for b in range(N):
        want_loss, want_grad = _brute(x[: dl[b], b], label[b, : lengths[b]], blank)
        np.testing.assert_allclose(loss[b], want_loss, rtol=1e-12, atol=1e-12, err_msg=f"sample {b}")
        full = np.zeros((T, A))
        full[: dl[b]] = want_grad
        np.testing.assert_allclose(g["data"][:, b], h[b] * full, rtol=1e-10, atol=1e-12, err_msg=f"sample {b}")


def test_ctc_label_lengths_ignore_entries_beyond_each_length():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 2, 3))
    label = np.array([[1, 2, 2], [2, 0, 1]])  # a 0 beyond the length is not padding, just ignored
    args = {"data": x, "label": label, "label_lengths": np.array([2, 1])}
    (loss,), _ = _run(_ctc_sym(use_label_lengths=True), args, [np.ones(2)])
    np.testing.assert_allclose(loss, [_brute(x[:, 0], [1, 2], 0)[0], _brute(x[:, 1], [2], 0)[0]], rtol=1e-12)


def test_ctc_float32_matches_float64_and_stays_finite_for_long_sequences_and_large_activations():
    """Log-space recursions: T = 40 with activations up to +-40 neither underflow nor overflow; the gradient
    rows sum to 0 (softmax and the state occupancies both sum to 1 at every active step)."""
    rng = np.random.default_rng(4)
    x = rng.normal(0, 15, (40, 3, 6))
    label = np.array([[1, 2, 2, 3, 4, 5, 1, 1], [5, 4, 0, 0, 0, 0, 0, 0], [3, 3, 3, 3, 3, 3, 3, 3]])
    (l64,), g64 = _run(_ctc_sym(), {"data": x, "label": label}, [np.ones(3)])
    (l32,), g32 = _run(_ctc_sym(), {"data": x.astype(np.float32), "label": label}, [np.ones(3, np.float32)])
    assert np.isfinite(l64).all() and np.isfinite(g64["data"]).all() and (l64 > 0).all()
    np.testing.assert_allclose(g64["data"].sum(axis=2), 0, atol=1e-12)
    assert l32.dtype == np.float32 and g32["data"].dtype == np.float32
    np.testing.assert_allclose(l32, l64, rtol=1e-5)
    np.testing.assert_allclose(g32["data"], g64["data"], atol=1e-5)


def test_ctc_gradient_scales_with_the_head_gradient_per_sample():
    rng = np.random.default_rng(5)
    args = {"data": rng.normal(size=(4, 3, 3)), "label": np.array([[1, 2], [2, 0], [1, 1]])}
    _, g1 = _run(_ctc_sym(), args, [np.ones(3)])
    h = np.array([0.5, -2.0, 0.0])
    _, gh = _run(_ctc_sym(), args, [h])
    np.testing.assert_allclose(gh["data"], g1["data"] * h[None, :, None], rtol=1e-14)


def test_ctc_inference_forward_gives_the_same_loss_and_inputs_are_not_modified():
    rng = np.random.default_rng(6)
    args = {"data": rng.normal(size=(3, 2, 4)), "label": np.array([[1, 3], [2, 0]])}
    keep = {n: v.copy() for n, v in args.items()}
    exe = _ctc_sym().bind(sg.cpu(), args)
    a = exe.forward(is_train=False)[0].copy()
    b = exe.forward(is_train=True)[0]
    np.testing.assert_array_equal(a, b)
    for n in args:
        np.testing.assert_array_equal(args[n], keep[n])


def test_ctc_second_order_gradient_is_a_clear_error():
    x = S.Variable("data")
    loss = S.CTCLoss(x, S.Variable("label"))
    (gx,) = sg.grad(loss, [x])
    with pytest.raises(SymgradError, match="_backward_ctc_loss.*second-order"):
        sg.grad(S.sum(gx), [x])


# ----------------------------------------------------------------------------
# CTCLoss: MXNet names and wiring
# ----------------------------------------------------------------------------


def test_ctc_aliases_are_the_same_operator():
    op = get_op("CTCLoss")
    assert all(get_op(n) is op for n in ("ctc_loss", "_contrib_CTCLoss", "_contrib_ctc_loss"))


@pytest.mark.parametrize(
    ("params", "args"),
    [
        ({}, ["data", "label"]),
        ({"use_data_lengths": True}, ["data", "label", "data_lengths"]),
        ({"use_label_lengths": True}, ["data", "label", "label_lengths"]),
        ({"use_data_lengths": True, "use_label_lengths": True}, ["data", "label", "data_lengths", "label_lengths"]),
    ],
)
def test_ctc_inputs_outputs_and_shapes_as_mxnet(params, args):
    sym = S.CTCLoss(*[S.Variable(n) for n in args], name="op", **params)
    assert sym.list_arguments() == args
    assert sym.list_outputs() == ["op_output0"]  # MXNet 1.9.1: 2 outputs, 1 visible, default names
    shapes, outs, _ = sym.infer_shape(data=(5, 3, 4), label=(3, 2))
    assert outs == [(3,)] and shapes[2:] == [(3,)] * (len(args) - 2)
    again = S.load_json(sym.tojson())
    assert again.list_arguments() == args


def test_ctc_mxnet_attribute_strings_parse():
    sym = S.CTCLoss(
        S.Variable("d"),
        S.Variable("l"),
        S.Variable("dl"),
        use_data_lengths="True",
        use_label_lengths="False",
        blank_label="last",
    )
    assert sym.list_arguments() == ["d", "l", "dl"]


# ----------------------------------------------------------------------------
# CTCLoss: bad input
# ----------------------------------------------------------------------------


def _forward(sym, **args):
    return sym.bind(sg.cpu(), args).forward()


@pytest.mark.parametrize(
    ("label", "blank_label", "match"),
    [
        (np.array([[1, 3]]), "first", r"classes in \[0, 3\)"),
        (np.array([[2, 1]]), "last", "other than the blank 2"),  # the blank inside a label (MXNet: undefined)
        (np.array([[-2, 1]]), "last", r"classes in \[0, 3\)"),
    ],
)
def test_ctc_bad_label_values_raise(label, blank_label, match):
    with pytest.raises(ValueError, match=match):
        _forward(_ctc_sym(blank_label=blank_label), data=np.zeros((3, 1, 3)), label=label)


def test_ctc_bad_lengths_raise():
    x, label = np.zeros((3, 2, 3)), np.array([[1, 2], [1, 0]])
    with pytest.raises(ValueError, match="data_lengths.*0, 3"):
        _forward(_ctc_sym(use_data_lengths=True), data=x, label=label, data_lengths=np.array([4, 1]))
    with pytest.raises(ValueError, match="label_lengths.*0, 2"):
        _forward(_ctc_sym(use_label_lengths=True), data=x, label=label, label_lengths=np.array([-1, 1]))


@pytest.mark.parametrize(
    ("shapes", "match"),
    [
        ({"data": (3, 4), "label": (3, 2)}, "3-d"),
        ({"data": (3, 2, 4), "label": (3, 2)}, "input 'label' has shape"),
        ({"data": (3, 2, 4), "label": (2, 4)}, "label length 4 exceeds the sequence length 3"),
    ],
)
def test_ctc_bad_shapes_raise(shapes, match):
    with pytest.raises(ShapeError, match=match):
        _ctc_sym().infer_shape(**shapes)


def test_ctc_bad_blank_label_and_integer_data_raise():
    with pytest.raises(ParamError, match="blank_label"):
        S.CTCLoss(S.Variable("d"), S.Variable("l"), blank_label="middle")
    with pytest.raises(TypeError, match="'data' must be float"):
        _ctc_sym().infer_type(data=np.int32, label=np.int32)


# ----------------------------------------------------------------------------
# SVMOutput and softmax_cross_entropy
# ----------------------------------------------------------------------------


def test_svm_output_ignores_the_head_gradient_and_has_no_second_order():
    x = np.array([[0.5, -0.2, 2.0], [-1.5, 0.3, 0.9]])
    label = np.array([2.0, 0.0])
    sym = S.SVMOutput(S.Variable("data"), S.Variable("label"), use_linear=True)
    (y,), g = _run(sym, {"data": x, "label": label}, [np.full(x.shape, 7.0)])
    np.testing.assert_array_equal(y, x)
    # L1: -1 on the true class below the margin (1 > o_k), +1 on the others above -margin (1 > -o_j)
    np.testing.assert_array_equal(g["data"], [[1.0, 1.0, 0.0], [-1.0, 1.0, 1.0]])
    v = S.Variable("data")
    (gx,) = sg.grad(S.SVMOutput(v, S.Variable("label")), [v])
    with pytest.raises(SymgradError, match="_backward_SVMOutput"):
        sg.grad(S.sum(gx), [v])


def test_svm_output_label_shape():
    sym = S.SVMOutput(S.Variable("data"), S.Variable("label"))
    assert sym.infer_shape(data=(2, 3, 4))[0] == [(2, 3, 4), (2, 3)]
    with pytest.raises(ShapeError, match="expected \\(2, 3\\)"):
        sym.infer_shape(data=(2, 3, 4), label=(2, 4))


def test_softmax_cross_entropy_matches_mxnet_doc_example_and_clamps_at_1e_8():
    sym = S.softmax_cross_entropy(S.Variable("data"), S.Variable("label"))
    x = np.array([[1.0, 2, 3], [11, 7, 5]])
    (y,), _ = _run(sym, {"data": x, "label": np.array([2.0, 0.0])}, [np.ones(1)])
    assert y.shape == (1,)
    np.testing.assert_allclose(y, [0.4281871], rtol=1e-6)  # MXNet's docstring
    # a probability below 1e-8 counts as 1e-8 in the loss; the gradient stays softmax - one_hot
    x = np.array([[0.0, 40.0]])
    (y,), g = _run(sym, {"data": x, "label": np.array([0.0])}, [np.array([2.0])])
    np.testing.assert_allclose(y, [-np.log(1e-8)])
    np.testing.assert_allclose(g["data"], 2.0 * (softmax(x) - [[1.0, 0.0]]))


def test_softmax_cross_entropy_bad_input_raises():
    sym = S.softmax_cross_entropy(S.Variable("data"), S.Variable("label"))
    with pytest.raises(ShapeError, match="2-d"):
        sym.infer_shape(data=(2, 3, 4))
    with pytest.raises(ShapeError, match="'label' has shape"):
        sym.infer_shape(data=(2, 3), label=(3,))
    with pytest.raises(ValueError, match=r"classes in \[0, 3\)"):
        _forward(sym, data=np.zeros((2, 3)), label=np.array([1.0, 3.0]))
