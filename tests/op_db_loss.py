"""OpInfo rows for the loss heads (symgrad/ops/loss.py).

A loss head's gradient is defined, not the derivative of its output, and ignores
the head gradient: each row's ``grad_ref`` writes that definition in numpy,
following MXNet 1.9's softmax_output-inl.h / mshadow SoftmaxGrad,
regression_output-inl.h and make_loss-inl.h.
"""

import numpy as np
from np_refs import sigmoid, softmax
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym


def _so_grad_rows(p, label, scale=1.0, alpha=0.0, ignore=None):
    """Per row r of p (rows, k): p - target(label[r]); rows whose label == ignore are zero."""
    rows, k = p.shape
    g = p.copy()
    for r in range(rows):
        c = int(label[r])
        if ignore is not None and c == ignore:
            g[r] = 0
            continue
        for j in range(k):
            target = (1 - alpha if j == c else alpha / (k - 1)) if alpha else float(j == c)
            g[r, j] -= target
    return g * scale


def _so_multi(x, label, scale, ignore=None):
    """multi_output: softmax over axis 1; each (sample, position) column like a row above."""
    p = softmax(x, 1)
    n, k = x.shape[:2]
    p3 = p.reshape(n, k, -1)
    lab = label.reshape(n, -1)
    g = np.zeros_like(p3)
    for s in range(p3.shape[2]):
        g[:, :, s] = _so_grad_rows(p3[:, :, s], lab[:, s], ignore=ignore)
    return (g * scale).reshape(x.shape)


def _lab(values):
    return lambda r: np.array(values)


def _so_label(values, integer=False):
    return In((len(values),), sample=_lab(values), grad=False, integer=integer)


def _row(name, make, x, label, ref, grad_ref):
    return OpInfo(name, make, {"x": x, "label": label}, ref, grad_ref=grad_ref)


OPS = [
    # -- SoftmaxOutput: every normalisation / ignore / layout branch ------------------------
    OpInfo(
        "SoftmaxOutput",
        lambda x, label: S.SoftmaxOutput(x, label),
        {"x": In((3, 4)), "label": In((3,), sample=lambda r: r.integers(0, 4, 3), grad=False)},
        lambda x, label: softmax(x, 1),
        grad_ref=lambda x, label: {"x": softmax(x, 1) - np.eye(4)[label.astype(int)]},
    ),
    _row(
        "SoftmaxOutput_batch_grad_scale",
        lambda x, label: S.SoftmaxOutput(x, label, normalization="batch", grad_scale=2.0),
        In((4, 3)),
        _so_label([2, 0, 1, 1], integer=True),
        lambda x, label: softmax(x, 1),
        lambda x, label: {"x": _so_grad_rows(softmax(x, 1), label, 2.0 / 4)},
    ),
    _row(
        "SoftmaxOutput_ignore_null",
        lambda x, label: S.SoftmaxOutput(x, label, use_ignore=True, ignore_label=1),
        In((5, 4)),
        _so_label([1, 0, 2, 1, 3]),
        lambda x, label: softmax(x, 1),
        lambda x, label: {"x": _so_grad_rows(softmax(x, 1), label, ignore=1)},
    ),
    _row(
        "SoftmaxOutput_ignore_valid",
        lambda x, label: S.SoftmaxOutput(x, label, use_ignore=True, ignore_label=1, normalization="valid"),
        In((5, 4)),
        _so_label([1, 0, 2, 1, 3], integer=True),
        lambda x, label: softmax(x, 1),
        lambda x, label: {"x": _so_grad_rows(softmax(x, 1), label, 1 / 3, ignore=1)},
    ),
    # 'valid' counts labels != ignore_label even without use_ignore; label -1 matches no class
    _row(
        "SoftmaxOutput_valid_without_use_ignore",
        lambda x, label: S.SoftmaxOutput(x, label, normalization="valid"),
        In((4, 3)),
        _so_label([-1, 0, 2, -1]),
        lambda x, label: softmax(x, 1),
        lambda x, label: {"x": _so_grad_rows(softmax(x, 1), label, 1 / 2)},
    ),
    _row(
        "SoftmaxOutput_smooth_alpha",
        lambda x, label: S.SoftmaxOutput(x, label, smooth_alpha=0.2),
        In((3, 5)),
        _so_label([4, 0, 2]),
        lambda x, label: softmax(x, 1),
        lambda x, label: {"x": _so_grad_rows(softmax(x, 1), label, alpha=0.2)},
    ),
    _row(
        "SoftmaxOutput_smooth_alpha_ignore",
        lambda x, label: S.SoftmaxOutput(
            x, label, smooth_alpha=0.3, use_ignore=True, ignore_label=2, normalization="batch"
        ),
        In((3, 4)),
        _so_label([2, 0, 3]),
        lambda x, label: softmax(x, 1),
        lambda x, label: {"x": _so_grad_rows(softmax(x, 1), label, 1 / 3, alpha=0.3, ignore=2)},
    ),
    _row(
        "SoftmaxOutput_multi_output",
        lambda x, label: S.SoftmaxOutput(x, label, multi_output=True),
        In((2, 3, 4)),
        In((2, 4), sample=lambda r: r.integers(0, 3, (2, 4)), grad=False),
        lambda x, label: softmax(x, 1),
        lambda x, label: {"x": _so_multi(x, label, 1 / 4)},
    ),
    # multi_output ignores smooth_alpha (MXNet 1.9); 'batch' divides by n and by the positions
    _row(
        "SoftmaxOutput_multi_output_batch_smooth_ignored",
        lambda x, label: S.SoftmaxOutput(x, label, multi_output=True, normalization="batch", smooth_alpha=0.4),
        In((2, 3, 4)),
        In((2, 4), sample=lambda r: r.integers(0, 3, (2, 4)), grad=False, integer=True),
        lambda x, label: softmax(x, 1),
        lambda x, label: {"x": _so_multi(x, label, 1 / 4 / 2)},
    ),
    _row(
        "SoftmaxOutput_multi_output_4d_valid",
        lambda x, label: S.SoftmaxOutput(
            x, label, multi_output=True, use_ignore=True, ignore_label=0, normalization="valid"
        ),
        In((2, 3, 2, 2)),
        In((2, 2, 2), sample=_lab([[[0, 1], [2, 0]], [[1, 1], [0, 2]]]), grad=False),
        lambda x, label: softmax(x, 1),
        lambda x, label: {"x": _so_multi(x, label, 1 / 5, ignore=0)},
    ),
    _row(
        "SoftmaxOutput_preserve_shape",
        lambda x, label: S.SoftmaxOutput(x, label, preserve_shape=True),
        In((2, 3, 4)),
        In((2, 3), sample=lambda r: r.integers(0, 4, (2, 3)), grad=False),
        lambda x, label: softmax(x, -1),
        lambda x, label: {"x": _so_grad_rows(softmax(x, -1).reshape(6, 4), label.reshape(-1)).reshape(x.shape)},
    ),
    # probability labels (label shape == data shape): (p - label) * grad_scale, no normalisation
    _row(
        "SoftmaxOutput_probability_label",
        lambda x, label: S.SoftmaxOutput(x, label, grad_scale=0.5, normalization="batch", use_ignore=True),
        In((3, 4)),
        In((3, 4), sample=lambda r: softmax(r.normal(size=(3, 4)), 1), grad=False),
        lambda x, label: softmax(x, 1),
        lambda x, label: {"x": (softmax(x, 1) - label) * 0.5},
    ),
    # >2-d data without multi_output/preserve_shape: softmax over everything but axis 0; MXNet wants
    # a (2, 3) label and row r uses label.flat[r]; 'batch' divides by the label count (6)
    _row(
        "SoftmaxOutput_flattened_3d",
        lambda x, label: S.SoftmaxOutput(x, label, normalization="batch"),
        In((2, 3, 2)),
        In((2, 3), sample=_lab([[5, 1, 0], [3, 2, 2]]), grad=False),
        lambda x, label: softmax(x.reshape(2, -1), 1).reshape(x.shape),
        lambda x, label: {
            "x": _so_grad_rows(softmax(x.reshape(2, -1), 1), label.reshape(-1)[:2], 1 / 6).reshape(x.shape)
        },
    ),
    # -- regression outputs: (out - label) * grad_scale / (outputs per sample) ---------------
    _row(
        "LinearRegressionOutput",
        lambda x, label: S.LinearRegressionOutput(x, label, grad_scale=3.0),
        In((3, 2)),
        In((3, 2), grad=False),
        lambda x, label: x,
        lambda x, label: {"x": (x - label) * 3.0 / 2},
    ),
    _row(
        "LinearRegressionOutput_column_label",
        lambda x, label: S.LinearRegressionOutput(x, label),
        In((4, 1)),
        In((4,), grad=False),
        lambda x, label: x,
        lambda x, label: {"x": x - label[:, None]},
    ),
    _row(
        "LogisticRegressionOutput",
        lambda x, label: S.LogisticRegressionOutput(x, label),
        In((2, 3), -2, 2),
        In((2, 3), sample=lambda r: r.integers(0, 2, (2, 3)), grad=False),
        lambda x, label: sigmoid(x),
        lambda x, label: {"x": (sigmoid(x) - label) / 3},
    ),
    _row(
        "MAERegressionOutput",
        lambda x, label: S.MAERegressionOutput(x, label, grad_scale=2.0),
        In((2, 3)),
        In((2, 3), grad=False),
        lambda x, label: x,
        lambda x, label: {"x": np.where(x - label > 0, 1.0, -1.0) * 2.0 / 3},
    ),
    # -- MakeLoss normalisations ----------------------------------------------------------
    OpInfo(
        "MakeLoss",
        lambda x: S.MakeLoss(x * x, grad_scale=0.5),
        {"x": In((2, 3))},
        lambda x: x * x,
        grad_ref=lambda x: {"x": 0.5 * 2 * x},
    ),
    OpInfo(
        "MakeLoss_batch",
        lambda x: S.MakeLoss(S.square(x), normalization="batch", grad_scale=3.0),
        {"x": In((4, 2))},
        np.square,
        grad_ref=lambda x: {"x": 2 * x * 3.0 / 4},
    ),
    # 'valid': grad_scale / #(loss > valid_thresh), at least 1
    OpInfo(
        "MakeLoss_valid",
        lambda x: S.MakeLoss(S.square(x), normalization="valid", valid_thresh=0.25),
        {"x": In((2, 3), sample=_lab([[0.1, -0.9, 0.7], [0.3, 0.2, -0.6]]))},
        np.square,
        grad_ref=lambda x: {"x": 2 * x / 3},
    ),
]


# -- SVMOutput, softmax_cross_entropy, CTCLoss ----------------------------------------------------------------


def _svm_grad(x, label, margin=1.0, reg=1.0, linear=False):
    """MXNet's SVMOutput gradient, element by element: the hinge derivative of the true class k (pushed above
    margin) and of every other class j (pushed below -margin); L2 squares the hinge."""
    o = x.reshape(-1, x.shape[-1])
    lab = label.reshape(-1)
    g = np.zeros_like(o)
    for r in range(o.shape[0]):
        k = int(lab[r])
        for j in range(o.shape[1]):
            if j == k:
                if margin > o[r, j]:
                    g[r, j] = -reg if linear else -2 * reg * (margin - o[r, j])
            elif margin > -o[r, j]:
                g[r, j] = reg if linear else 2 * reg * (margin + o[r, j])
    return g.reshape(x.shape)


def _sce(x, label):
    p = softmax(x, 1)
    return np.array([-sum(np.log(p[r, int(label[r])]) for r in range(x.shape[0]))])


def _ctc_brute(x, label, blank):
    """-log of the total probability of every alignment (one class per step of x (T, A), softmax over A) that
    collapses to ``label`` (merge repeats, then drop blanks); 0 when none does (MXNet's convention)."""
    import itertools

    p = softmax(x, 1)
    total = 0.0
    for path in itertools.product(range(x.shape[1]), repeat=x.shape[0]):
        merged = [k for t, k in enumerate(path) if t == 0 or path[t - 1] != k]
        if [k for k in merged if k != blank] == list(label):
            total += np.prod([p[t, k] for t, k in enumerate(path)])
    return -np.log(total) if total > 0 else 0.0


def _ctc_ref(blank="first", data_lengths=False, label_lengths=False):
    """Reference of a CTCLoss row: per sample, the label cut at its length (or its first padding value: 0 with
    blank 'first', -1 with 'last') and the data cut at its length, scored by ``_ctc_brute``."""

    def ref(x, label, *lengths):
        lengths = list(lengths)
        dl = lengths.pop(0) if data_lengths else [x.shape[0]] * x.shape[1]
        b_id = 0 if blank == "first" else x.shape[2] - 1
        out = []
        for b in range(x.shape[1]):
            row = [int(v) for v in label[b]]
            if label_lengths:
                row = row[: int(lengths[0][b])]
            else:
                pad = 0 if blank == "first" else -1
                row = row[: row.index(pad)] if pad in row else row
            out.append(_ctc_brute(x[: int(dl[b]), b], row, b_id))
        return np.array(out)

    return ref


def _int_in(values):
    values = np.array(values)
    return In(values.shape, sample=_lab(values), grad=False, integer=True)


def _ctc_row(name, make, x_shape, label, ref, **lengths):
    inputs = {"x": In(x_shape, -1.5, 1.5), "label": _int_in(label)}
    inputs.update({n: _int_in(v) for n, v in lengths.items()})
    return OpInfo(name, make, inputs, ref, second_order=False)


_SVM_IN = In((4, 3), -2, 2, away=0.05, kinks=(1.0, -1.0))

OPS += [
    # -- SVMOutput: identity forward, hinge gradient (head gradient ignored) --------------------------------------
    _row(
        "SVMOutput_l2",
        lambda x, label: S.SVMOutput(x, label),
        _SVM_IN,
        _so_label([2, 0, 1, 1], integer=True),
        lambda x, label: x,
        lambda x, label: {"x": _svm_grad(x, label)},
    ),
    _row(
        "SVMOutput_l1_margin_reg",
        lambda x, label: S.SVMOutput(x, label, margin=0.5, regularization_coefficient=2.5, use_linear=True),
        In((4, 3), -2, 2, away=0.05, kinks=(0.5, -0.5)),
        _so_label([1, 2, 0, 2]),
        lambda x, label: x,
        lambda x, label: {"x": _svm_grad(x, label, 0.5, 2.5, linear=True)},
    ),
    # rows = every position but the last (class) axis: label (2, 3) for data (2, 3, 4)
    _row(
        "SVMOutput_l2_3d_margin",
        lambda x, label: S.SVMOutput(x, label, margin=1.5, regularization_coefficient=0.5),
        In((2, 3, 4), -2.5, 2.5, away=0.05, kinks=(1.5, -1.5)),
        In((2, 3), sample=_lab([[3, 0, 1], [2, 2, 0]]), grad=False, integer=True),
        lambda x, label: x,
        lambda x, label: {"x": _svm_grad(x, label, 1.5, 0.5)},
    ),
    # -- softmax_cross_entropy: an ordinary op (gradient (softmax - one_hot) * head, twice differentiable) --------
    OpInfo("softmax_cross_entropy", S.softmax_cross_entropy, {"x": In((3, 4)), "label": _int_in([2, 0, 3])}, _sce),
    OpInfo(
        "softmax_cross_entropy_float_label",
        S.softmax_cross_entropy,
        {"x": In((4, 2), -2, 2), "label": In((4,), sample=_lab([1.0, 0.0, 0.0, 1.0]), grad=False)},
        _sce,
    ),
    # -- CTCLoss: loss per sample, gradient fused in the forward (no second order) -------------------------------
    _ctc_row(
        "CTCLoss_blank_first_padded",
        lambda x, label: S.CTCLoss(x, label),
        (4, 3, 3),
        [[1, 2], [1, 0], [2, 2]],
        _ctc_ref(),
    ),
    _ctc_row(
        "CTCLoss_blank_last_padded",
        lambda x, label: S.ctc_loss(x, label, blank_label="last"),
        (4, 3, 3),
        [[1, 0], [0, -1], [-1, -1]],
        _ctc_ref("last"),
    ),
    _ctc_row(
        "CTCLoss_data_lengths",
        lambda x, label, dl: S._contrib_CTCLoss(x, label, dl, use_data_lengths=True),
        (4, 2, 3),
        [[1, 2], [2, 0]],
        _ctc_ref(data_lengths=True),
        dl=[2, 3],
    ),
    _ctc_row(
        "CTCLoss_label_lengths",
        lambda x, label, ll: S._contrib_ctc_loss(x, label, ll, use_label_lengths=True, blank_label="last"),
        (3, 2, 3),
        [[1, 1], [0, 1]],
        _ctc_ref("last", label_lengths=True),
        ll=[1, 2],
    ),
    _ctc_row(
        "CTCLoss_both_lengths",
        lambda x, label, dl, ll: S.CTCLoss(x, label, dl, ll, use_data_lengths=True, use_label_lengths=True),
        (4, 2, 3),
        [[2, 2], [1, 2]],
        _ctc_ref(data_lengths=True, label_lengths=True),
        dl=[4, 3],
        ll=[2, 0],
    ),
    # sample 0 (1, 1 needs 3 steps) has 2: loss 0 and gradient 0, as MXNet
    _ctc_row(
        "CTCLoss_infeasible_sample", lambda x, label: S.CTCLoss(x, label), (2, 2, 3), [[1, 1], [2, 1]], _ctc_ref()
    ),
]
