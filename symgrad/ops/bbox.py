"""Bounding-box operators of ``mx.sym.contrib``: ``box_nms``, ``box_iou``, ``bipartite_matching``,
``box_encode`` and ``box_decode`` (MXNet 1.9.1's ``src/operator/contrib/bounding_box-inl.h``).

Boxes are ``corner`` [xmin, ymin, xmax, ymax] or ``center`` [x, y, width, height]. These are detection
post-processing ops run in numpy loops over small box counts; gradients:

- ``box_nms`` routes each kept row's head gradient back to the input row it was copied from (MXNet's
  ``_backward_contrib_box_nms``); when ``in_format != out_format`` symgrad also applies the transpose of the
  format conversion, which MXNet's backward leaves out;
- ``bipartite_matching`` outputs indices: its gradient is zero, its true derivative almost everywhere;
- ``box_iou``, ``box_encode``, ``box_decode``: MXNet defines their gradients as zeros, which are not their
  derivatives; symgrad refuses to differentiate them (with that reason) rather than return a wrong zero.
"""

from __future__ import annotations

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import Param, host_array, output_like, register, wait_for_first_input, wait_for_inputs

_FORMATS = ("corner", "center")


def _to_corner(boxes, fmt):
    """[..., 4] boxes as corners."""
    if fmt == "corner":
        return boxes
    half = boxes[..., 2:4] / 2
    return np.concatenate([boxes[..., 0:2] - half, boxes[..., 0:2] + half], axis=-1)


def _iou_matrix(a, b, fmt):
    """IoU of every box of ``a`` [n, 4] with every box of ``b`` [m, 4] (MXNet's Intersect/BoxArea: negative
    widths give area 0, no overlap gives 0)."""
    ca, cb = _to_corner(a, fmt), _to_corner(b, fmt)
    w = np.minimum(ca[:, None, 2], cb[None, :, 2]) - np.maximum(ca[:, None, 0], cb[None, :, 0])
    h = np.minimum(ca[:, None, 3], cb[None, :, 3]) - np.maximum(ca[:, None, 1], cb[None, :, 1])
    inter = np.maximum(w, 0) * np.maximum(h, 0)

    def area(c, boxes):
        bw, bh = (c[:, 2] - c[:, 0], c[:, 3] - c[:, 1]) if fmt == "corner" else (boxes[:, 2], boxes[:, 3])
        return np.where((bw < 0) | (bh < 0), 0, bw * bh)

    union = area(ca, a)[:, None] + area(cb, b)[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(inter > 0, inter / union, 0)


_NO_GRAD = (
    "MXNet 1.9.1 defines its gradient as zero, which is not its derivative; wrap its inputs in "
    "BlockGrad to use it inside a differentiated graph"
)


# -- box_iou ----------------------------------------------------------------------------------------------


@wait_for_inputs(0, 1)
def _box_iou_shape(params, in_shapes, out_shapes, where):
    lhs, rhs = in_shapes
    for name, s in (("lhs", lhs), ("rhs", rhs)):
        if len(s) < 2 or s[-1] != 4:
            raise ShapeError(f"{where}: input {name!r} must be (..., 4) boxes, got {tuple(s)}")
    return in_shapes, [tuple(lhs[:-1]) + tuple(rhs[:-1])]


def _box_iou_fwd(xp, lhs, rhs, format):  # noqa: A002 - MXNet's parameter name
    a, b = host_array(lhs).reshape(-1, 4), host_array(rhs).reshape(-1, 4)
    out = _iou_matrix(a.astype(np.float64), b.astype(np.float64), format).astype(lhs.dtype)
    return xp.asarray(out.reshape(lhs.shape[:-1] + rhs.shape[:-1]))


register(
    "_contrib_box_iou",
    inputs=("lhs", "rhs"),
    params={"format": Param("str", "corner", choices=_FORMATS)},
    forward=_box_iou_fwd,
    infer_shape=_box_iou_shape,
    grad_undefined_reason=_NO_GRAD,
    doc="Intersection over union of every lhs box with every rhs box.",
)


# -- bipartite_matching --------------------------------------------------------------------------------


@wait_for_first_input
def _matching_shape(params, in_shapes, out_shapes, where):
    (s,) = in_shapes
    if len(s) < 2:
        raise ShapeError(f"{where}: input 'data' must be a (..., rows, cols) score matrix, got {tuple(s)}")
    return in_shapes, [tuple(s[:-1]), tuple(s[:-2]) + (s[-1],)]


def _matching_fwd(xp, data, is_ascend, threshold, topk):
    """Greedy matching in score order (stable sort, descending unless is_ascend): take (r, c) while both are
    free and the score passes the threshold; stop at the first score that fails, or after topk + 1 matches
    (MXNet's loop checks the count after adding)."""
    scores = host_array(data)
    rows, cols = scores.shape[-2:]
    flat = scores.reshape(-1, rows * cols)
    row_marker = -np.ones((flat.shape[0], rows))
    col_marker = -np.ones((flat.shape[0], cols))
    for b, s in enumerate(flat):
        order = np.argsort(s if is_ascend else -s, kind="stable")
        count = 0
        for idx in order:
            r, c = divmod(int(idx), cols)
            if row_marker[b, r] != -1 or col_marker[b, c] != -1:
                continue
            if (s[idx] > threshold) if not is_ascend else (s[idx] < threshold):
                row_marker[b, r], col_marker[b, c] = c, r
                count += 1
                if 0 < topk < count:
                    break
            else:
                break
    return (
        xp.asarray(row_marker.reshape(scores.shape[:-1]).astype(data.dtype)),
        xp.asarray(col_marker.reshape(scores.shape[:-2] + (cols,)).astype(data.dtype)),
    )


register(
    "_contrib_bipartite_matching",
    params={"is_ascend": Param("bool", False), "threshold": Param("float"), "topk": Param("int", -1)},
    num_outputs=2,
    forward=_matching_fwd,
    infer_shape=_matching_shape,
    # the outputs are indices, piecewise constant in the scores: zero is the derivative
    gradient=lambda F, n, g: [F.zeros_like(n.inputs[0])],
    doc="Greedy bipartite matching of a (rows, cols) score matrix: (row -> col, col -> row), -1 unmatched.",
)


# -- box_encode / box_decode ---------------------------------------------------------------------------


@wait_for_inputs(2)
def _box_encode_shape(params, in_shapes, out_shapes, where):
    samples, matches, anchors, refs, means, stds = in_shapes
    if len(anchors) != 3 or anchors[-1] != 4:
        raise ShapeError(f"{where}: input 'anchors' must be (B, N, 4), got {tuple(anchors)}")
    if refs is not None and (len(refs) != 3 or refs[-1] != 4):
        raise ShapeError(f"{where}: input 'refs' must be (B, M, 4), got {tuple(refs)}")
    b, n = anchors[:2]
    return [(b, n), (b, n), tuple(anchors), refs, (4,), (4,)], [tuple(anchors), tuple(anchors)]


def _center(c):
    w, h = c[..., 2] - c[..., 0], c[..., 3] - c[..., 1]
    return c[..., 0] + w * 0.5, c[..., 1] + h * 0.5, w, h


def _box_encode_fwd(xp, samples, matches, anchors, refs, means, stds):
    """Regression targets of each anchor towards its matched reference box (corner boxes in, SSD/Faster-RCNN
    encoding out), zero where the anchor is not a positive sample (samples <= 0.5)."""
    s, m, a, r = (host_array(v) for v in (samples, matches, anchors, refs))
    mu, sd = host_array(means), host_array(stds)
    ref = np.take_along_axis(r, m.astype(np.int64)[..., None].repeat(4, axis=-1), axis=1)
    rx, ry, rw, rh = _center(ref)
    ax, ay, aw, ah = _center(a)
    valid = (s > 0.5).astype(a.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.stack(
            [
                ((rx - ax) / aw - mu[0]) / sd[0],
                ((ry - ay) / ah - mu[1]) / sd[1],
                (np.log(rw / aw) - mu[2]) / sd[2],
                (np.log(rh / ah) - mu[3]) / sd[3],
            ],
            axis=-1,
        )
    targets = np.where(valid[..., None] > 0.5, t, 0).astype(anchors.dtype)
    return xp.asarray(targets), xp.asarray(np.repeat(valid[..., None], 4, axis=-1).astype(anchors.dtype))


register(
    "_contrib_box_encode",
    inputs=("samples", "matches", "anchors", "refs", "means", "stds"),
    num_outputs=2,
    forward=_box_encode_fwd,
    infer_shape=_box_encode_shape,
    grad_undefined_reason=_NO_GRAD,
    doc="Encode matched reference boxes relative to anchors: (targets, masks).",
)


@wait_for_first_input
def _box_decode_shape(params, in_shapes, out_shapes, where):
    data, anchors = in_shapes
    if len(data) != 3 or data[-1] != 4:
        raise ShapeError(f"{where}: input 'data' must be (B, N, 4), got {tuple(data)}")
    if anchors is not None and (len(anchors) != 3 or anchors[-1] != 4 or anchors[1] != data[1]):
        raise ShapeError(f"{where}: input 'anchors' must be (1, {data[1]}, 4), got {tuple(anchors)}")
    return in_shapes, [tuple(data)]


def _box_decode_fwd(xp, data, anchors, std0, std1, std2, std3, clip, format):  # noqa: A002
    x, a = host_array(data), host_array(anchors)[0]
    if format == "corner":
        ax, ay, aw, ah = _center(a)
    else:
        ax, ay, aw, ah = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    dt = data.dtype.type

    def param(v):  # MXNet holds these parameters as float32
        return dt(np.float32(v))

    ox = x[..., 0] * param(std0) * aw + ax
    oy = x[..., 1] * param(std1) * ah + ay
    dw, dh = x[..., 2] * param(std2), x[..., 3] * param(std3)
    if clip > 0:
        dw, dh = np.minimum(dw, param(clip)), np.minimum(dh, param(clip))
    hw, hh = np.exp(dw) * aw * 0.5, np.exp(dh) * ah * 0.5
    return xp.asarray(np.stack([ox - hw, oy - hh, ox + hw, oy + hh], axis=-1).astype(data.dtype))


register(
    "_contrib_box_decode",
    inputs=("data", "anchors"),
    params={
        "std0": Param("float", 1.0),
        "std1": Param("float", 1.0),
        "std2": Param("float", 1.0),
        "std3": Param("float", 1.0),
        "clip": Param("float", -1.0),
        "format": Param("str", "center", choices=_FORMATS),
    },
    forward=_box_decode_fwd,
    infer_shape=_box_decode_shape,
    grad_undefined_reason=_NO_GRAD,
    doc="Decode regression outputs against anchors (anchors in ``format``) into corner boxes.",
)


# -- box_nms --------------------------------------------------------------------------------------------


def _nms_check(params, width, where):
    cs, si, ii = params["coord_start"], params["score_index"], params["id_index"]
    need = 6 if ii >= 0 else 5
    if width < need:
        raise ShapeError(
            f"{where}: the last axis of 'data' must hold at least {need} values (score, 4 coordinates"
            f"{', class id' if ii >= 0 else ''}), got {width}"
        )
    if not 0 <= cs <= width - 4:
        raise ParamError(f"{where}: parameter 'coord_start'={cs} leaves the last axis of size {width}")
    if not 0 <= si < width or cs <= si <= cs + 3:
        raise ParamError(f"{where}: parameter 'score_index'={si} is out of range or overlaps the coordinates")
    if ii >= 0 and (ii >= width or cs <= ii <= cs + 3 or ii == si):
        raise ParamError(f"{where}: parameter 'id_index'={ii} is out of range or overlaps score or coordinates")


@wait_for_first_input
def _nms_shape(params, in_shapes, out_shapes, where):
    (s,) = in_shapes
    if len(s) < 2:
        raise ShapeError(f"{where}: input 'data' must be (..., boxes, values), got {tuple(s)}")
    _nms_check(params, s[-1], where)
    return in_shapes, [tuple(s), tuple(s[:-1]) + (1,)]


def _nms_keep(rows, p):
    """Input row indices kept, in output order, for one batch of [n, width] rows."""
    score = rows[:, p["score_index"]]
    valid = score > p["valid_thresh"]
    if p["id_index"] >= 0:
        valid &= rows[:, p["id_index"]] != p["background_id"]
    cand = np.flatnonzero(valid)
    cand = cand[np.argsort(-score[cand], kind="stable")]
    topk = len(rows) if p["topk"] < 0 else min(len(rows), p["topk"])
    cand = list(cand[:topk])
    boxes = rows[:, p["coord_start"] : p["coord_start"] + 4]
    alive = [True] * len(cand)
    for i, ref in enumerate(cand):
        if not alive[i]:
            continue
        for j in range(i + 1, len(cand)):
            pos = cand[j]
            if not alive[j]:
                continue
            if (
                not p["force_suppress"]
                and p["id_index"] >= 0
                and int(rows[ref, p["id_index"]]) != int(rows[pos, p["id_index"]])
            ):
                continue
            if _iou_matrix(boxes[ref : ref + 1], boxes[pos : pos + 1], p["in_format"])[0, 0] > p["overlap_thresh"]:
                alive[j] = False
    return [c for c, keep in zip(cand, alive) if keep]


def _convert(coords, src, dst):
    """MXNet's in-place format conversion of output rows; rows whose first coordinate is negative (the -1
    rows, or any box left of 0) are left alone, as MXNet does."""
    if src == dst:
        return coords
    out = coords.copy()
    live = coords[:, 0] >= 0
    c = coords[live]
    if dst == "center":
        out[live] = np.stack(
            [(c[:, 0] + c[:, 2]) / 2, (c[:, 1] + c[:, 3]) / 2, c[:, 2] - c[:, 0], c[:, 3] - c[:, 1]], axis=-1
        )
    else:
        out[live] = np.stack(
            [c[:, 0] - c[:, 2] / 2, c[:, 1] - c[:, 3] / 2, c[:, 0] + c[:, 2] / 2, c[:, 1] + c[:, 3] / 2], axis=-1
        )
    return out


def _nms_fwd(xp, data, **p):
    x = host_array(data)
    rows = x.reshape(-1, x.shape[-2], x.shape[-1])
    out = -np.ones_like(rows)
    record = -np.ones(rows.shape[:2] + (1,), dtype=x.dtype)
    cs = p["coord_start"]
    for b in range(rows.shape[0]):
        keep = _nms_keep(rows[b], p)
        out[b, : len(keep)] = rows[b, keep]
        record[b, : len(keep), 0] = keep
        out[b, :, cs : cs + 4] = _convert(out[b, :, cs : cs + 4], p["in_format"], p["out_format"])
    return xp.asarray(out.reshape(x.shape)), xp.asarray(record.reshape(x.shape[:-1] + (1,)))


_NMS_PARAMS = {
    "overlap_thresh": Param("float", 0.5),
    "valid_thresh": Param("float", 0.0),
    "topk": Param("int", -1),
    "coord_start": Param("int", 2),
    "score_index": Param("int", 1),
    "id_index": Param("int", -1),
    "background_id": Param("int", -1),
    "force_suppress": Param("bool", False),
    "in_format": Param("str", "corner", choices=_FORMATS),
    "out_format": Param("str", "corner", choices=_FORMATS),
}


def _nms_grad(F, n, g):
    # out[b, k] = T(data[b, record[b, k]]) with T the format conversion on the coordinates (or the identity):
    # d data[b, record[b, k]] = T^T g[b, k]; rows never kept get 0
    conv = {k: n.params[k] for k in ("coord_start", "in_format", "out_format")}
    return [F._box_nms_scatter(g[0], n.outputs[1], n.inputs[0], **conv)]


register(
    "_contrib_box_nms",
    aliases=("_contrib_box_non_maximum_suppression",),
    params=_NMS_PARAMS,
    num_outputs=2,
    num_visible=1,
    forward=_nms_fwd,
    infer_shape=_nms_shape,
    gradient=_nms_grad,
    doc="Non-maximum suppression per batch: kept rows first in score order, the rest -1.",
)


def _conv_adjoint(g, live, src, dst):
    """T^T g for the conversion T of one output row (T is linear; MXNet converts only rows whose first
    coordinate is >= 0 before the conversion, ``live``)."""
    if src == dst or not live:
        return g
    gx, gy, gw, gh = g
    if dst == "center":  # y = ((l + r)/2, (t + b)/2, r - l, b - t)
        return np.array([gx / 2 - gw, gy / 2 - gh, gx / 2 + gw, gy / 2 + gh])
    return np.array([gx + gw, gy + gh, (gw - gx) / 2, (gh - gy) / 2])  # y = (x - w/2, y - h/2, x + w/2, y + h/2)


def _nms_scatter_fwd(xp, g, record, data, coord_start, in_format, out_format):
    gh, rec, x = host_array(g), host_array(record), host_array(data)
    rows, recs, xs = (a.reshape(-1, gh.shape[-2], a.shape[-1]) for a in (gh, rec, x))
    dx = np.zeros_like(rows)
    cs = coord_start
    for b in range(rows.shape[0]):
        for k, loc in enumerate(recs[b, :, 0]):
            if loc < 0:
                continue
            loc = int(loc)
            dx[b, loc] = rows[b, k]
            dx[b, loc, cs : cs + 4] = _conv_adjoint(rows[b, k, cs : cs + 4], xs[b, loc, cs] >= 0, in_format, out_format)
    return xp.asarray(dx.reshape(gh.shape))


register(
    "_box_nms_scatter",
    inputs=("ograd", "record", "data"),
    params={k: _NMS_PARAMS[k] for k in ("coord_start", "in_format", "out_format")},
    forward=_nms_scatter_fwd,
    infer_shape=output_like(0),
    infer_type=output_like(0),
    no_grad_inputs=("record", "data"),
    grad_undefined_reason="box_nms's gradient routing is first-order only in symgrad",
    doc="box_nms's gradient: each kept row's head gradient back to its input row (hidden).",
)


# -- MultiBoxPrior ------------------------------------------------------------------------------------------


def _prior_prepare(params, node):
    p = params  # sizes, ratios, steps, offsets: non-empty tuples of floats (the schema's kind)
    if len(p["steps"]) != 2 or len(p["offsets"]) != 2 or not all(0 <= o <= 1 for o in p["offsets"]):
        raise ParamError(
            f"_contrib_MultiBoxPrior {node!r}: 'steps' must be (step_y, step_x) and 'offsets' two "
            f"values in [0, 1], got {p['steps']} and {p['offsets']}"
        )
    return p


@wait_for_first_input
def _prior_shape(params, in_shapes, out_shapes, where):
    (d,) = in_shapes
    if len(d) != 4:
        raise ShapeError(f"{where}: input 'data' must be (N, C, H, W), got {tuple(d)}")
    per_cell = len(params["sizes"]) + len(params["ratios"]) - 1
    return in_shapes, [(1, d[2] * d[3] * per_cell, 4)]


def _prior_fwd(xp, data, sizes, ratios, clip, steps, offsets):
    """SSD anchors per feature-map cell, in float32 arithmetic in MXNet's order: every size at the first
    ratio, then every further ratio at the first size; centres at (cell + offset) * step (step 1/H, 1/W by
    default)."""
    f = np.float32
    h, w = data.shape[2:4]
    step_y, step_x = (f(steps[0]), f(steps[1])) if steps[0] > 0 and steps[1] > 0 else (f(1) / f(h), f(1) / f(w))
    shapes = [(f(s), np.sqrt(f(ratios[0]))) for s in sizes] + [(f(sizes[0]), np.sqrt(f(r))) for r in ratios[1:]]
    half = [(s * f(h) / f(w) * r / f(2), s / r / f(2)) for s, r in shapes]
    out = []
    for r in range(h):
        cy = (f(r) + f(offsets[0])) * step_y
        for c in range(w):
            cx = (f(c) + f(offsets[1])) * step_x
            out.extend([cx - hw, cy - hh, cx + hw, cy + hh] for hw, hh in half)
    anchors = np.asarray(out, dtype=np.float32)
    if clip:
        anchors = np.clip(anchors, 0, 1)
    return xp.asarray(anchors.astype(data.dtype).reshape(1, -1, 4))


register(
    "_contrib_MultiBoxPrior",
    params={
        "sizes": Param("floats", (1.0,)),
        "ratios": Param("floats", (1.0,)),
        "clip": Param("bool", False),
        "steps": Param("floats", (-1.0, -1.0)),
        "offsets": Param("floats", (0.5, 0.5)),
    },
    prepare=_prior_prepare,
    forward=_prior_fwd,
    infer_shape=_prior_shape,
    # data only lends its spatial shape: the anchors do not depend on its values
    gradient=lambda F, n, g: [F.zeros_like(n.inputs[0])],
    doc="SSD prior (anchor) boxes for every cell of an (N, C, H, W) feature map, as corners in [0, 1].",
)
