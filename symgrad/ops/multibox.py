"""SSD training targets and detection decoding of ``mx.sym.contrib``: ``MultiBoxTarget`` and
``MultiBoxDetection`` (MXNet 1.9.1's ``src/operator/contrib/multibox_target*`` and ``multibox_detection*``;
``MultiBoxPrior`` lives in ``bbox.py``).

Both follow MXNet's CPU kernels step by step (order of matching, ``>`` versus ``>=``, stable sorts, which
fields of a suppressed row are overwritten), in numpy loops over small box counts. MXNet runs them in float32
only; symgrad computes float32 inputs in float32 the way MXNet does, float64 inputs in float64 (and float16
inputs in float32, returned as float16). Parameters are MXNet ``float``s: thresholds and variances enter the
arithmetic rounded to float32.

Gradients: MXNet defines both gradients as zeros. They are not the derivatives (``loc_target`` moves with the
anchor and label coordinates; a detection's score and box move with ``cls_prob``, ``loc_pred`` and the
anchors), so symgrad refuses to differentiate them, as it does ``box_encode``. The one exception is
MultiBoxTarget's ``cls_pred``: it only picks the hard negatives, so every output is piecewise constant in it
and its zero gradient is the derivative almost everywhere (it is declared a no-gradient input).
"""

from __future__ import annotations

import numpy as np

from ..base import ParamError, ShapeError, SymgradError
from ..opdef import Param, float_inputs, host_array, register, wait_for_inputs

_NO_GRAD = (
    "MXNet 1.9.1 defines its gradient as zero, which is not its derivative (its outputs move "
    "continuously with the box coordinates); wrap its inputs in BlockGrad to use it inside a "
    "differentiated graph"
)


def _work_dtype(dtype) -> np.dtype:
    """float64 stays float64; float32 and float16 compute in float32 (MXNet's only dtype)."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def _f32(dt, v):
    """An MXNet ``float`` parameter as a value of the working dtype."""
    return dt.type(np.float32(v))


def _log(x, dt):
    # float32: the correctly rounded logf (through float64), as C's std::log(float)
    return np.log(x.astype(np.float64)).astype(dt)


def _exp(x, dt):
    return np.exp(x.astype(np.float64)).astype(dt)


def _variances(params, where):
    v = params["variances"]  # a tuple of floats (the schema's kind)
    if len(v) != 4:
        raise ParamError(f"{where}: parameter 'variances' expects 4 numbers (x, y, w, h), got {v!r}")
    return v


def _check_ndim(where, name, shape, ndim, layout):
    if len(shape) != ndim:
        raise ShapeError(f"{where}: input {name!r} must be {layout}, got {tuple(shape)}")


# -- MultiBoxTarget -------------------------------------------------------------------------------------------


def _target_prepare(params, node):
    where = f"_contrib_MultiBoxTarget {node!r}"
    p = dict(params)
    p["variances"] = _variances(params, where)
    if p["negative_mining_ratio"] > 0 and not p["negative_mining_thresh"] > 0:
        raise ParamError(
            f"{where}: parameter 'negative_mining_thresh' must be > 0 when negative mining is on "
            f"(negative_mining_ratio={p['negative_mining_ratio']}), got {p['negative_mining_thresh']}"
        )
    return p


@wait_for_inputs(0, 1, 2)
def _target_shape(params, in_shapes, out_shapes, where):
    anchor, label, cls_pred = in_shapes
    _check_ndim(where, "anchor", anchor, 3, "(1, num_anchors, 4)")
    if anchor[0] != 1 or anchor[1] < 1 or anchor[2] != 4:
        raise ShapeError(
            f"{where}: input 'anchor' must be (1, num_anchors, 4) corner boxes shared by the batch "
            f"(num_anchors >= 1), got {tuple(anchor)}"
        )
    _check_ndim(where, "label", label, 3, "(batch, num_labels, label_width)")
    if label[1] < 1 or label[2] < 5:
        raise ShapeError(
            f"{where}: input 'label' must be (batch, num_labels >= 1, label_width >= 5) rows "
            f"[class, xmin, ymin, xmax, ymax, ...], got {tuple(label)}"
        )
    _check_ndim(where, "cls_pred", cls_pred, 3, "(batch, num_classes, num_anchors)")
    want = (label[0], max(cls_pred[1], 1), anchor[1])
    if cls_pred[1] < 1 or cls_pred[0] != label[0] or cls_pred[2] != anchor[1]:
        raise ShapeError(
            f"{where}: input 'cls_pred' must be (batch, num_classes, num_anchors) = "
            f"({want[0]}, num_classes >= 1, {want[2]}), got {tuple(cls_pred)}"
        )
    b, n = label[0], anchor[1]
    return in_shapes, [(b, n * 4), (b, n * 4), (b, n)]


def _valid_labels(rows, where, batch):
    """The leading ground-truth rows: MXNet stops at the first row whose class is -1 (padding), and that row's
    four coordinates must be -1 as well."""
    for i, row in enumerate(rows):
        if row[0] == -1:
            if not np.all(row[1:5] == -1):
                raise SymgradError(
                    f"{where}: input 'label' batch {batch} row {i} is padding (class -1) but its "
                    f"coordinates are {row[1:5].tolist()}, expected all -1"
                )
            return rows[:i]
    return rows


def _overlaps(anchors, boxes):
    """IoU [num_anchors, num_gt] in the working dtype, as MXNet's temp-space expression computes it
    (clamped intersection, areas without clamping, 0 where the union is 0)."""
    al, at, ar, ab = (anchors[:, None, k] for k in range(4))
    gl, gt, gr, gb = (boxes[None, :, k] for k in range(4))
    zero = anchors.dtype.type(0)
    inter = np.maximum(zero, np.minimum(ar, gr) - np.maximum(al, gl)) * np.maximum(
        zero, np.minimum(ab, gb) - np.maximum(at, gt)
    )
    union = (ar - al) * (ab - at) + (gr - gl) * (gb - gt) - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union == 0, zero, inter / np.where(union == 0, 1, union))


def _best_gt(iou):
    """(best iou, best gt) per anchor: first maximum over the ground truths; NaN never wins (-1, -1 if all are
    NaN), as MXNet's ``iou > max_iou`` scan from -1."""
    clean = np.where(np.isnan(iou), -np.inf, iou)
    best = np.argmax(clean, axis=1)
    val = clean[np.arange(len(iou)), best]
    found = val > -1
    return np.where(found, val, -1), np.where(found, best, -1)


def _encode(anchor, box, var, dt):
    """SSD regression target of one anchor towards one ground-truth box (MXNet's AssignLocTargets)."""
    half = dt.type(0.5)
    aw, ah = anchor[2] - anchor[0], anchor[3] - anchor[1]
    ax, ay = (anchor[0] + anchor[2]) * half, (anchor[1] + anchor[3]) * half
    gw, gh = box[2] - box[0], box[3] - box[1]
    gx, gy = (box[0] + box[2]) * half, (box[1] + box[3]) * half
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.array(
            [
                (gx - ax) / aw / var[0],
                (gy - ay) / ah / var[1],
                _log(np.asarray(gw / aw), dt) / var[2],
                _log(np.asarray(gh / ah), dt) / var[3],
            ],
            dtype=dt,
        )


def _background_prob(pred, dt):
    """softmax(pred)[0] per anchor for pred [num_classes, num_anchors], summed class by class as MXNet does."""
    top = pred.max(axis=0)
    total = np.zeros(pred.shape[1], dtype=dt)
    for k in range(pred.shape[0]):
        total = total + _exp(pred[k] - top, dt)
    return _exp(pred[0] - top, dt) / total


def _target_batch(anchors, gt, pred, p, dt, where):
    """anchor_flags (1 positive, 0 negative, -1 ignored) and the matched ground truth per anchor."""
    n, g = len(anchors), len(gt)
    iou = _overlaps(anchors, gt[:, 1:5])
    flags = np.full(n, -1, dtype=np.int8)
    match_iou = np.full(n, -1, dtype=dt)
    match_gt = np.full(n, -1, dtype=np.int64)
    # 1. bipartite: repeatedly the largest overlap (> 1e-6) between a free anchor and a free ground truth;
    #    ties go to the first in (anchor, gt) row-major order
    free = iou.copy()
    free[np.isnan(free)] = -np.inf
    floor = _f32(dt, 1e-6)
    for _ in range(g):
        j, k = divmod(int(np.argmax(free)), g)
        if not free[j, k] > floor:
            break
        match_iou[j], match_gt[j], flags[j] = free[j, k], k, 1
        free[j, :] = -np.inf
        free[:, k] = -np.inf
    num_pos = int((flags == 1).sum())
    # 2. every other anchor takes its best ground truth; above overlap_threshold it is positive too
    rest = flags != 1
    if p["overlap_threshold"] > 0:
        best_iou, best = _best_gt(iou[rest])
        match_iou[rest], match_gt[rest] = best_iou, best
        pos = np.flatnonzero(rest)[(best >= 0) & (best_iou > _f32(dt, p["overlap_threshold"]))]
        flags[pos] = 1
        num_pos += len(pos)
    # 3. negatives: all the rest, or the hardest ones (lowest background probability) among those whose
    #    best overlap is below negative_mining_thresh, num_pos * ratio of them (MXNet ignores
    #    minimum_negative_samples on the CPU)
    if p["negative_mining_ratio"] > 0:
        num_neg = int(np.float32(num_pos) * np.float32(p["negative_mining_ratio"]))
        num_neg = min(num_neg, n - num_pos)
        if num_neg > 0:
            todo = np.flatnonzero((flags != 1) & (match_iou < 0))
            if len(todo):
                best_iou, best = _best_gt(iou[todo])
                match_iou[todo], match_gt[todo] = best_iou, best
            cand = np.flatnonzero((flags == -1) & (match_iou < _f32(dt, p["negative_mining_thresh"])))
            if len(cand) < num_neg:
                raise SymgradError(
                    f"{where}: negative mining wants {num_neg} negatives but only {len(cand)} anchors "
                    f"overlap every ground truth by less than negative_mining_thresh="
                    f"{p['negative_mining_thresh']} (MXNet fails the same check)"
                )
            prob = _background_prob(pred, dt)[cand]
            flags[cand[np.argsort(prob, kind="stable")[:num_neg]]] = 0
    else:
        flags[flags != 1] = 0
    return flags, match_gt


def _target_fwd(xp, anchor, label, cls_pred, **p):
    where = "_contrib_MultiBoxTarget"
    dt = _work_dtype(anchor.dtype)
    anchors = host_array(anchor).astype(dt).reshape(-1, 4)
    labels, preds = host_array(label).astype(dt), host_array(cls_pred).astype(dt)
    var = [_f32(dt, v) for v in p["variances"]]
    b, n = labels.shape[0], anchors.shape[0]
    loc = np.zeros((b, n, 4), dtype=dt)
    mask = np.zeros((b, n, 4), dtype=dt)
    cls = np.full((b, n), _f32(dt, p["ignore_label"]), dtype=dt)
    for i in range(b):
        gt = _valid_labels(labels[i], where, i)
        if not len(gt):
            continue  # no ground truth: every anchor keeps ignore_label
        flags, match = _target_batch(anchors, gt, preds[i], p, dt, where)
        for j in np.flatnonzero(flags == 1):
            row = gt[match[j]]
            cls[i, j] = row[0] + 1  # class 0 is the background
            mask[i, j] = 1
            loc[i, j] = _encode(anchors[j], row[1:5], var, dt)
        cls[i, flags == 0] = 0
    out_dt = anchor.dtype
    return (
        xp.asarray(loc.reshape(b, n * 4).astype(out_dt)),
        xp.asarray(mask.reshape(b, n * 4).astype(out_dt)),
        xp.asarray(cls.astype(out_dt)),
    )


register(
    "_contrib_MultiBoxTarget",
    inputs=("anchor", "label", "cls_pred"),
    params={
        "overlap_threshold": Param("float", 0.5),
        "ignore_label": Param("float", -1.0),
        "negative_mining_ratio": Param("float", -1.0),
        "negative_mining_thresh": Param("float", 0.5),
        "minimum_negative_samples": Param("int", 0),
        "variances": Param("floats", (0.1, 0.1, 0.2, 0.2)),
    },
    num_outputs=3,
    output_names=("loc_target", "loc_mask", "cls_target"),
    prepare=_target_prepare,
    forward=_target_fwd,
    infer_shape=_target_shape,
    infer_type=float_inputs("anchor", "label", "cls_pred"),
    # cls_pred only chooses the hard negatives: the outputs are piecewise constant in it (zero derivative)
    no_grad_inputs=("cls_pred",),
    grad_undefined_reason=_NO_GRAD,
    doc="SSD training targets: (loc_target, loc_mask, cls_target) of every anchor for the labelled boxes.",
)


# -- MultiBoxDetection ----------------------------------------------------------------------------------------


def _detection_prepare(params, node):
    p = dict(params)
    p["variances"] = _variances(params, f"_contrib_MultiBoxDetection {node!r}")
    return p


@wait_for_inputs(0, 1, 2)
def _detection_shape(params, in_shapes, out_shapes, where):
    cls_prob, loc_pred, anchor = in_shapes
    _check_ndim(where, "cls_prob", cls_prob, 3, "(batch, num_classes, num_anchors)")
    _check_ndim(where, "loc_pred", loc_pred, 2, "(batch, num_anchors * 4)")
    _check_ndim(where, "anchor", anchor, 3, "(1, num_anchors, 4)")
    if anchor[1] < 1 or anchor[2] != 4:
        raise ShapeError(f"{where}: input 'anchor' must be (1, num_anchors >= 1, 4), got {tuple(anchor)}")
    if cls_prob[2] != anchor[1]:
        raise ShapeError(
            f"{where}: input 'cls_prob' must be (batch, num_classes, {anchor[1]}) for {anchor[1]} "
            f"anchors, got {tuple(cls_prob)}"
        )
    if tuple(loc_pred) != (cls_prob[0], anchor[1] * 4):
        raise ShapeError(
            f"{where}: input 'loc_pred' must be (batch, num_anchors * 4) = "
            f"({cls_prob[0]}, {anchor[1] * 4}), got {tuple(loc_pred)}"
        )
    return in_shapes, [(cls_prob[0], anchor[1], 6)]


def _decode(anchors, pred, var, clip, dt):
    """Corner boxes from SSD regression outputs (MXNet's TransformLocations), [num_anchors, 4]."""
    two = dt.type(2)
    al, at, ar, ab = (anchors[:, k] for k in range(4))
    aw, ah = ar - al, ab - at
    ax, ay = (al + ar) / two, (at + ab) / two
    ox = pred[:, 0] * var[0] * aw + ax
    oy = pred[:, 1] * var[1] * ah + ay
    ow = _exp(pred[:, 2] * var[2], dt) * aw / two
    oh = _exp(pred[:, 3] * var[3], dt) * ah / two
    boxes = np.stack([ox - ow, oy - oh, ox + ow, oy + oh], axis=-1)
    return np.clip(boxes, 0, 1) if clip else boxes


def _iou_row(box, boxes):
    """IoU of one corner box with each of ``boxes`` (MXNet's CalculateOverlap: 0 where the union is <= 0)."""
    zero = boxes.dtype.type(0)
    w = np.maximum(zero, np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]))
    h = np.maximum(zero, np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]))
    inter = w * h
    union = (box[2] - box[0]) * (box[3] - box[1]) + (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union <= 0, zero, inter / np.where(union <= 0, 1, union))


def _detection_fwd(
    xp, cls_prob, loc_pred, anchor, clip, threshold, background_id, nms_threshold, force_suppress, variances, nms_topk
):
    """Per batch: decode every anchor's box; its class is the first most probable of classes 1.. (class 0 is
    the background whatever ``background_id`` says, as in MXNet), dropped below ``threshold``; the kept rows
    [class - 1, score, box] move to the front in anchor order, the rest are -1. Unless nms_threshold is
    outside (0, 1]: stable sort by score (descending), keep nms_topk (the rows after it only get class -1,
    their other fields stay as they were before sorting), then greedy NMS (IoU >= nms_threshold, same class
    unless force_suppress) marks suppressed rows with class -1, leaving their other fields."""
    dt = _work_dtype(cls_prob.dtype)
    probs, locs = host_array(cls_prob).astype(dt), host_array(loc_pred).astype(dt)
    b, c, n = probs.shape
    anchors = host_array(anchor).astype(dt).reshape(-1)[: n * 4].reshape(n, 4)
    var = [_f32(dt, v) for v in variances]
    thresh, nms = _f32(dt, threshold), _f32(dt, nms_threshold)
    out = np.full((b, n, 6), -1, dtype=dt)
    for i in range(b):
        boxes = _decode(anchors, locs[i].reshape(n, 4), var, clip, dt)
        if c > 1:
            fg = np.where(np.isnan(probs[i, 1:]), -np.inf, probs[i, 1:])
            cls_id = np.argmax(fg, axis=0) + 1
            score = fg[cls_id - 1, np.arange(n)]
            cls_id = np.where(score > -1, cls_id, 0)
            keep = (cls_id > 0) & ~(score < thresh)
        else:
            keep = np.zeros(n, dtype=bool)
        rows = (
            np.concatenate([(cls_id - 1)[keep, None].astype(dt), score[keep, None], boxes[keep]], axis=1)
            if keep.any()
            else np.zeros((0, 6), dtype=dt)
        )
        valid = len(rows)
        out[i, :valid] = rows
        if valid < 1 or not 0 < nms <= 1:
            continue
        order = np.argsort(-rows[:, 1], kind="stable")
        nkeep = valid
        if 0 < nms_topk < valid:
            nkeep = nms_topk
            out[i, nkeep:valid, 0] = -1
        out[i, :nkeep] = rows[order[:nkeep]]
        det = out[i, :nkeep]  # a view: suppression writes through
        for j in range(nkeep):
            if det[j, 0] < 0:
                continue
            later = det[j + 1 :]
            hit = (later[:, 0] >= 0) & (_iou_row(det[j, 2:6], later[:, 2:6]) >= nms)
            if not force_suppress:
                hit &= later[:, 0] == det[j, 0]
            later[hit, 0] = -1
    return xp.asarray(out.astype(cls_prob.dtype))


register(
    "_contrib_MultiBoxDetection",
    inputs=("cls_prob", "loc_pred", "anchor"),
    params={
        "clip": Param("bool", True),
        "threshold": Param("float", 0.01),
        "background_id": Param("int", 0),
        "nms_threshold": Param("float", 0.5),
        "force_suppress": Param("bool", False),
        "variances": Param("floats", (0.1, 0.1, 0.2, 0.2)),
        "nms_topk": Param("int", -1),
    },
    prepare=_detection_prepare,
    forward=_detection_fwd,
    infer_shape=_detection_shape,
    infer_type=float_inputs("cls_prob", "loc_pred", "anchor"),
    grad_undefined_reason=_NO_GRAD,
    doc="SSD detections [class_id, score, xmin, ymin, xmax, ymax] per anchor after thresholding and NMS; "
    "-1 rows for none.",
)
