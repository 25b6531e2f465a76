"""MultiBoxTarget and MultiBoxDetection (symgrad/ops/multibox.py) against numpy written here, by-hand cases, bad
input and the refused gradients. Both are replayed against MXNet in tests/fixtures/mxnet_cases/multibox.json."""

import numpy as np
import pytest

import symgrad as sg
from symgrad.base import ParamError, ShapeError, SymgradError

S = sg.sym
V = S.Variable


# -- references -----------------------------------------------------------------------------------------------


def _f32(*values):
    """MXNet holds the thresholds and variances as C floats."""
    return [float(np.float32(v)) for v in values]


def _iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return 0.0 if union == 0 else w * h / union


def ref_target(
    anchor,
    label,
    cls_pred,
    overlap_threshold=0.5,
    ignore_label=-1.0,
    negative_mining_ratio=-1.0,
    negative_mining_thresh=0.5,
    variances=(0.1, 0.1, 0.2, 0.2),
):
    variances = _f32(*variances)
    overlap_threshold, negative_mining_thresh = _f32(overlap_threshold, negative_mining_thresh)
    anchors = anchor[0]
    n = len(anchors)
    batch = len(label)
    loc, mask = np.zeros((batch, n, 4)), np.zeros((batch, n, 4))
    cls = np.full((batch, n), float(ignore_label))
    for b in range(batch):
        gts = []
        for row in label[b]:
            if row[0] == -1:
                break
            gts.append(row)
        if not gts:
            continue
        ious = [[_iou(a, g[1:5]) for g in gts] for a in anchors]
        state = [None] * n  # "pos", "neg" or None (ignored)
        matched = [None] * n
        best_iou = [None] * n
        gt_done = [False] * len(gts)
        # bipartite stage: the globally best free (anchor, gt) pair, first one scanning anchors then gts
        while not all(gt_done):
            best = (1e-6, None, None)
            for j in range(n):
                for k in range(len(gts)):
                    if state[j] != "pos" and not gt_done[k] and ious[j][k] > best[0]:
                        best = (ious[j][k], j, k)
            if best[1] is None:
                break
            _, j, k = best
            state[j], matched[j], best_iou[j], gt_done[k] = "pos", k, ious[j][k], True
        n_pos = state.count("pos")
        if overlap_threshold > 0:
            for j in range(n):
                if state[j] != "pos":
                    k = int(np.argmax(ious[j]))
                    matched[j], best_iou[j] = k, ious[j][k]
                    if ious[j][k] > overlap_threshold:
                        state[j] = "pos"
                        n_pos += 1
        if negative_mining_ratio > 0:
            n_neg = min(int(n_pos * negative_mining_ratio), n - n_pos)
            if n_neg > 0:
                cands = []
                for j in range(n):
                    if state[j] == "pos":
                        continue
                    if best_iou[j] is None:
                        best_iou[j] = max(ious[j])
                    if best_iou[j] < negative_mining_thresh:
                        e = np.exp(cls_pred[b, :, j] - cls_pred[b, :, j].max())
                        cands.append((e[0] / e.sum(), j))
                cands.sort(key=lambda t: t[0])  # stable: equal probabilities keep anchor order
                for _, j in cands[:n_neg]:
                    state[j] = "neg"
        else:
            state = ["pos" if s == "pos" else "neg" for s in state]
        for j in range(n):
            if state[j] == "pos":
                g, a = gts[matched[j]][1:5], anchors[j]
                aw, ah, gw, gh = a[2] - a[0], a[3] - a[1], g[2] - g[0], g[3] - g[1]
                loc[b, j] = [
                    ((g[0] + g[2]) - (a[0] + a[2])) / 2 / aw / variances[0],
                    ((g[1] + g[3]) - (a[1] + a[3])) / 2 / ah / variances[1],
                    np.log(gw / aw) / variances[2],
                    np.log(gh / ah) / variances[3],
                ]
                mask[b, j] = 1
                cls[b, j] = gts[matched[j]][0] + 1
            elif state[j] == "neg":
                cls[b, j] = 0
    return loc.reshape(batch, -1), mask.reshape(batch, -1), cls


def ref_detection(
    cls_prob,
    loc_pred,
    anchor,
    clip=True,
    threshold=0.01,
    nms_threshold=0.5,
    force_suppress=False,
    variances=(0.1, 0.1, 0.2, 0.2),
    nms_topk=-1,
):
    variances = _f32(*variances)
    threshold, nms_threshold = _f32(threshold, nms_threshold)
    batch, _, n = cls_prob.shape
    out = -np.ones((batch, n, 6))
    for b in range(batch):
        rows = []
        for i in range(n):
            probs = cls_prob[b, 1:, i]
            k = int(np.argmax(probs))
            if probs[k] < threshold:
                continue
            a, p = anchor[0, i], loc_pred[b, 4 * i : 4 * i + 4]
            aw, ah = a[2] - a[0], a[3] - a[1]
            cx, cy = p[0] * variances[0] * aw + (a[0] + a[2]) / 2, p[1] * variances[1] * ah + (a[1] + a[3]) / 2
            hw, hh = np.exp(p[2] * variances[2]) * aw / 2, np.exp(p[3] * variances[3]) * ah / 2
            box = np.array([cx - hw, cy - hh, cx + hw, cy + hh])
            rows.append([k, probs[k], *(np.clip(box, 0, 1) if clip else box)])
        rows = np.array(rows).reshape(-1, 6)
        out[b, : len(rows)] = rows
        if not len(rows) or not 0 < nms_threshold <= 1:
            continue
        order = sorted(range(len(rows)), key=lambda i: -rows[i][1])
        keep = len(rows) if not 0 < nms_topk < len(rows) else nms_topk
        out[b, keep : len(rows), 0] = -1  # dropped by nms_topk: only the class is reset
        out[b, :keep] = rows[order[:keep]]
        for i in range(keep):
            for j in range(i + 1, keep):
                if (
                    out[b, i, 0] >= 0
                    and out[b, j, 0] >= 0
                    and (force_suppress or out[b, i, 0] == out[b, j, 0])
                    and _iou(out[b, i, 2:], out[b, j, 2:]) >= nms_threshold
                ):
                    out[b, j, 0] = -1
    return out


def _target(**params):
    return S._contrib_MultiBoxTarget(V("anchor"), V("label"), V("cls_pred"), **params)


def _detection(**params):
    return S._contrib_MultiBoxDetection(V("cls_prob"), V("loc_pred"), V("anchor"), **params)


# -- MultiBoxTarget ---------------------------------------------------------------------------------------------

_ANCHOR = np.array(
    [
        [
            [0.0, 0.0, 0.5, 0.5],
            [0.4, 0.4, 1.0, 1.0],
            [0.1, 0.1, 0.45, 0.55],
            [0.6, 0.0, 1.0, 0.3],
            [0.0, 0.7, 0.3, 1.0],
            [0.45, 0.35, 0.95, 0.9],
        ]
    ]
)
_LABEL = np.array(
    [
        [[2, 0.05, 0.0, 0.5, 0.5], [0, 0.5, 0.4, 1.0, 0.95], [-1, -1, -1, -1, -1]],
        [[1, 0.62, 0.02, 0.98, 0.33], [-1, -1, -1, -1, -1], [-1, -1, -1, -1, -1]],
    ]
)
_PRED = np.random.default_rng(0).standard_normal((2, 3, 6))


@pytest.mark.parametrize(
    "params",
    [
        {},
        dict(overlap_threshold=0.3, ignore_label=-3.0),
        dict(negative_mining_ratio=1.0, negative_mining_thresh=0.2),
        dict(overlap_threshold=0.0, negative_mining_ratio=1.5, negative_mining_thresh=0.6),
        dict(variances=(0.5, 0.25, 1.0, 2.0)),
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_multibox_target_against_reference(params, dtype):
    got = _target(**params).eval(anchor=_ANCHOR.astype(dtype), label=_LABEL.astype(dtype), cls_pred=_PRED.astype(dtype))
    want = ref_target(_ANCHOR, _LABEL, _PRED, **params)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-5)
    for g, w in zip(got, want):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, **tol)


def test_multibox_target_by_hand():
    anchor = np.array([[[0.0, 0.0, 0.5, 0.5], [0.5, 0.0, 1.0, 0.5], [0.0, 0.5, 0.5, 1.0], [0.5, 0.5, 1.0, 1.0]]])
    # one box over the left half: IoU 0.5 with anchors 0 and 2 (a tie: the bipartite stage takes anchor 0;
    # anchor 2's 0.5 is not > overlap_threshold 0.5), 0 with anchors 1 and 3
    label = np.array([[[6, 0.0, 0.0, 0.5, 1.0], [-1, -1, -1, -1, -1]]])
    pred = np.zeros((1, 2, 4))
    loc, mask, cls = _target().eval(anchor=anchor, label=label, cls_pred=pred)
    np.testing.assert_array_equal(cls, [[7, 0, 0, 0]])  # class 6 + 1 (0 is the background); the rest negative
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1] + [0] * 12])
    # centre (0.25, 0.5) vs anchor centre (0.25, 0.25), size 0.5 x 1 vs 0.5 x 0.5
    np.testing.assert_allclose(loc[0, :4], [0.0, 0.25 / 0.5 / 0.1, 0.0, np.log(2.0) / 0.2], atol=1e-12)
    np.testing.assert_array_equal(loc[0, 4:], 0)
    # with a lower threshold anchor 2 matches too
    _, _, cls = _target(overlap_threshold=0.4).eval(anchor=anchor, label=label, cls_pred=pred)
    np.testing.assert_array_equal(cls, [[7, 0, 7, 0]])


def test_multibox_target_hard_negative_mining_picks_lowest_background_probability():
    anchor = np.array([[[0.0, 0.0, 0.5, 0.5], [0.5, 0.0, 1.0, 0.5], [0.0, 0.5, 0.5, 1.0], [0.5, 0.5, 1.0, 1.0]]])
    label = np.array([[[0, 0.0, 0.0, 0.5, 0.5]]])  # exactly anchor 0: one positive
    # background logit (class 0) vs class 1: anchors 1, 2, 3 have background probability high, low, low (tied)
    pred = np.array([[[0.0, 3.0, -1.0, -1.0], [0.0, 0.0, 0.0, 0.0]]])
    _, _, cls = _target(negative_mining_ratio=1.0).eval(anchor=anchor, label=label, cls_pred=pred)
    np.testing.assert_array_equal(cls, [[1, -1, 0, -1]])  # one negative: the first of the tied hardest two
    _, _, cls = _target(negative_mining_ratio=2.0, ignore_label=-5).eval(anchor=anchor, label=label, cls_pred=pred)
    np.testing.assert_array_equal(cls, [[1, -5, 0, 0]])
    # ratio 2.5 x 1 positive truncates to 2 negatives
    _, _, cls = _target(negative_mining_ratio=2.5).eval(anchor=anchor, label=label, cls_pred=pred)
    np.testing.assert_array_equal(cls, [[1, -1, 0, 0]])


def test_multibox_target_padding_rows_and_empty_batches():
    # padding is class -1 whatever ignore_label says; rows after the first padding row are not read
    anchor = _ANCHOR
    label = np.array([[[-1, -1, -1, -1, -1], [0, 0.0, 0.0, 0.5, 0.5]]])
    loc, mask, cls = _target(ignore_label=-2).eval(anchor=anchor, label=label, cls_pred=np.zeros((1, 2, 6)))
    np.testing.assert_array_equal(cls, -2)  # no ground truth: every anchor is ignored, even without mining
    np.testing.assert_array_equal(loc, 0)
    np.testing.assert_array_equal(mask, 0)


def test_multibox_target_keeps_inputs_and_float16():
    args = dict(anchor=_ANCHOR.copy(), label=_LABEL.copy(), cls_pred=_PRED.copy())
    _target(negative_mining_ratio=1).eval(**args)
    for k, v in args.items():
        np.testing.assert_array_equal(v, {"anchor": _ANCHOR, "label": _LABEL, "cls_pred": _PRED}[k])
    got = _target().eval(
        anchor=_ANCHOR.astype(np.float16), label=_LABEL.astype(np.float16), cls_pred=_PRED.astype(np.float16)
    )
    assert [g.dtype for g in got] == [np.float16] * 3
    np.testing.assert_array_equal(got[2], ref_target(_ANCHOR, _LABEL, _PRED)[2])


# -- MultiBoxDetection ------------------------------------------------------------------------------------------


def _det_inputs(seed, batch=2, classes=3, n=8):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.2, 0.8, (n, 2))
    sizes = rng.uniform(0.2, 0.5, (n, 2))
    anchor = np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=1)[None]
    logits = 2 * rng.standard_normal((batch, classes, n))
    prob = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return prob, rng.normal(0, 1.0, (batch, 4 * n)), anchor


@pytest.mark.parametrize(
    "params",
    [
        {},
        dict(force_suppress=True, nms_threshold=0.2),
        dict(nms_topk=3, threshold=0.3),
        dict(clip=False, nms_threshold=0.3),
        dict(nms_threshold=0.0),
        dict(variances=(0.3, 0.2, 0.5, 0.4), threshold=0.5),
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_multibox_detection_against_reference(params, dtype):
    prob, loc, anchor = _det_inputs(1)
    (got,) = _detection(**params).eval(
        cls_prob=prob.astype(dtype), loc_pred=loc.astype(dtype), anchor=anchor.astype(dtype)
    )
    assert got.dtype == dtype and got.shape == (2, 8, 6)
    want = ref_detection(prob, loc, anchor, **params)
    np.testing.assert_allclose(
        got, want, **(dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-5, atol=1e-6))
    )


def test_multibox_detection_by_hand():
    anchor = np.array([[[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.5, 0.6], [0.5, 0.5, 1.0, 1.0], [0.0, 0.5, 0.5, 1.0]]])
    # classes: background, a, b. anchor 0: a 0.6; anchor 1: a 0.7 (overlaps anchor 0 by 0.25/0.3);
    # anchor 2: b 0.5; anchor 3: background wins but a 0.3 still counts (best non-background class)
    prob = np.array([[[0.2, 0.1, 0.3, 0.5], [0.6, 0.7, 0.2, 0.3], [0.2, 0.2, 0.5, 0.2]]])
    loc = np.zeros((1, 16))  # boxes are the anchors
    (out,) = _detection().eval(cls_prob=prob, loc_pred=loc, anchor=anchor)
    np.testing.assert_allclose(
        out[0],
        [
            [0, 0.7, 0.0, 0.0, 0.5, 0.6],
            [-1, 0.6, 0.0, 0.0, 0.5, 0.5],  # suppressed: IoU 0.25 / 0.3 >= 0.5
            [1, 0.5, 0.5, 0.5, 1.0, 1.0],
            [0, 0.3, 0.0, 0.5, 0.5, 1.0],
        ],
    )
    (out,) = _detection(threshold=0.45, nms_threshold=0.9).eval(cls_prob=prob, loc_pred=loc, anchor=anchor)
    np.testing.assert_allclose(
        out[0], [[0, 0.7, 0.0, 0.0, 0.5, 0.6], [0, 0.6, 0.0, 0.0, 0.5, 0.5], [1, 0.5, 0.5, 0.5, 1.0, 1.0], [-1] * 6]
    )
    # nms_topk=1: the rows after the first keep their pre-sorting contents, only their class becomes -1
    (out,) = _detection(nms_topk=1).eval(cls_prob=prob, loc_pred=loc, anchor=anchor)
    np.testing.assert_allclose(
        out[0],
        [
            [0, 0.7, 0.0, 0.0, 0.5, 0.6],
            [-1, 0.7, 0.0, 0.0, 0.5, 0.6],
            [-1, 0.5, 0.5, 0.5, 1.0, 1.0],
            [-1, 0.3, 0.0, 0.5, 0.5, 1.0],
        ],
    )


def test_multibox_detection_equal_scores_keep_anchor_order_and_one_class_is_all_background():
    anchor = np.array([[[0.0, 0.0, 0.2, 0.2], [0.5, 0.5, 0.7, 0.7], [0.8, 0.0, 1.0, 0.2]]])
    prob = np.array([[[0.5, 0.5, 0.2], [0.5, 0.5, 0.8]]])
    (out,) = _detection().eval(cls_prob=prob, loc_pred=np.zeros((1, 12)), anchor=anchor)
    np.testing.assert_allclose(out[0, :, :2], [[0, 0.8], [0, 0.5], [0, 0.5]])
    np.testing.assert_allclose(out[0, 1:, 2:], anchor[0, :2])  # the tied rows in anchor order
    (out,) = _detection().eval(cls_prob=prob[:, :1], loc_pred=np.zeros((1, 12)), anchor=anchor)
    np.testing.assert_array_equal(out, -1)


# -- bad input and gradients -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shapes", "name"),
    [
        (dict(anchor=(2, 6, 4), label=(2, 3, 5), cls_pred=(2, 3, 6)), "'anchor'"),
        (dict(anchor=(1, 6, 3), label=(2, 3, 5), cls_pred=(2, 3, 6)), "'anchor'"),
        (dict(anchor=(1, 6, 4), label=(2, 3, 4), cls_pred=(2, 3, 6)), "'label'"),
        (dict(anchor=(1, 6, 4), label=(2, 3), cls_pred=(2, 3, 6)), "'label'"),
        (dict(anchor=(1, 6, 4), label=(2, 3, 5), cls_pred=(2, 3, 5)), "'cls_pred'"),
        (dict(anchor=(1, 6, 4), label=(2, 3, 5), cls_pred=(1, 3, 6)), "'cls_pred'"),
    ],
)
def test_multibox_target_bad_shapes(shapes, name):
    with pytest.raises(ShapeError, match=name):
        _target().infer_shape(**shapes)


@pytest.mark.parametrize(
    ("shapes", "name"),
    [
        (dict(cls_prob=(2, 3, 6), loc_pred=(2, 24), anchor=(1, 5, 4)), "'cls_prob'"),
        (dict(cls_prob=(2, 3, 6), loc_pred=(2, 20), anchor=(1, 6, 4)), "'loc_pred'"),
        (dict(cls_prob=(2, 3, 6), loc_pred=(1, 24), anchor=(1, 6, 4)), "'loc_pred'"),
        (dict(cls_prob=(2, 3, 6), loc_pred=(2, 24), anchor=(6, 4)), "'anchor'"),
        (dict(cls_prob=(2, 3, 6), loc_pred=(2, 24), anchor=(1, 6, 5)), "'anchor'"),
    ],
)
def test_multibox_detection_bad_shapes(shapes, name):
    with pytest.raises(ShapeError, match=name):
        _detection().infer_shape(**shapes)


def test_multibox_bad_params_and_dtypes():
    with pytest.raises(ParamError, match="'variances'"):
        _target(variances=(0.1, 0.2))
    with pytest.raises(ParamError, match="'variances'"):
        _detection(variances="(0.1, 0.1, 0.2)")
    with pytest.raises(ParamError, match="'negative_mining_thresh'"):
        _target(negative_mining_ratio=3, negative_mining_thresh=0)
    with pytest.raises(TypeError, match="'label'"):
        _target().infer_type(anchor=np.float32, label=np.int32, cls_pred=np.float32)
    with pytest.raises(TypeError, match="'cls_prob'"):
        _detection().infer_type(cls_prob=np.int64)


def test_multibox_target_bad_label_values():
    label = np.array([[[0, 0.0, 0.0, 0.5, 0.5], [-1, 0.2, -1, -1, -1]]])
    with pytest.raises(SymgradError, match="'label' batch 0 row 1 is padding"):
        _target().eval(anchor=_ANCHOR, label=label, cls_pred=np.zeros((1, 2, 6)))
    # a box covering everything: one positive (bipartite), 3 negatives wanted, none below IoU 0.01
    with pytest.raises(SymgradError, match="negative mining wants 3 negatives but only 0"):
        _target(overlap_threshold=0.9, negative_mining_ratio=3, negative_mining_thresh=0.01).eval(
            anchor=_ANCHOR, label=np.array([[[0, 0.0, 0.0, 1.0, 1.0]]]), cls_pred=np.zeros((1, 2, 6))
        )


def test_multibox_target_gradient_is_refused_except_for_cls_pred():
    out = _target()
    loss = S.sum(out[0]) + S.sum(out[2])
    shapes = dict(anchor=(1, 6, 4), label=(2, 3, 5), cls_pred=(2, 3, 6))
    with pytest.raises(SymgradError, match="zero, which is not its derivative"):
        loss.simple_bind(sg.cpu(), grad_req={"anchor": "write", "label": "null", "cls_pred": "null"}, **shapes)
    with pytest.raises(SymgradError, match="BlockGrad"):
        loss.simple_bind(sg.cpu(), grad_req={"anchor": "null", "label": "write", "cls_pred": "null"}, **shapes)
    # cls_pred only picks the hard negatives: the outputs are piecewise constant in it, the gradient is 0
    exe = loss.simple_bind(sg.cpu(), grad_req={"anchor": "null", "label": "null", "cls_pred": "write"}, **shapes)
    exe.forward(is_train=True, anchor=_ANCHOR, label=_LABEL, cls_pred=_PRED)
    exe.backward()
    np.testing.assert_array_equal(exe.grad_dict["cls_pred"], 0)


def test_multibox_detection_gradient_is_refused():
    shapes = dict(cls_prob=(1, 3, 4), loc_pred=(1, 16), anchor=(1, 4, 4))
    for arg in shapes:
        req = {n: "write" if n == arg else "null" for n in shapes}
        with pytest.raises(SymgradError, match="zero, which is not its derivative"):
            _detection().simple_bind(sg.cpu(), grad_req=req, **shapes)
    _detection().simple_bind(sg.cpu(), grad_req="null", **shapes).forward()
