"""OpInfo rows for the ROI operators (symgrad/ops/roi.py).

References are plain-numpy loops over ROIs, channels, bins and sample points written from MXNet
1.9.1's kernels (roi_pooling.cc, contrib/roi_align.cc, contrib/psroi_pooling.cc, contrib/rroi_align.cc,
contrib/proposal.cc, contrib/deformable_psroi_pooling.cc). ROI coordinates are multiples of 1/4 (exact
in float16), so every dtype sees the same bins (DeformablePSROIPooling rounds its ROI corners to integers
first). ROIPooling's data are distinct, well separated values, so its maxima (and the gradient's
argmax) do not depend on the dtype or a finite-difference step. RROIAlign (no gradient in MXNet) and
Proposal/MultiProposal (zero gradient in MXNet, see test_ops_roi.py) are forward-only rows.

DeformablePSROIPooling's bilinear kernel has kinks at integer sample positions, and its sample count jumps
where a point crosses -0.5 or size - 0.5: the ``trans`` of its rows is redrawn until every sample point is
at least 0.04 pixel from any integer and from those validity borders.
"""

import math

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

F32_64 = (np.float32, np.float64)
F16 = {np.float16: (2e-2, 2e-2)}


def _c_round(v):
    return math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1)


def _distinct(shape):
    def draw(rng):
        n = int(np.prod(shape))
        return (rng.permutation(n) * (2.0 / n) - 1.0).reshape(shape)

    return In(shape, sample=draw)


def _fixed(a):
    a = np.asarray(a, dtype=np.float64)
    return In(a.shape, sample=lambda rng: a, grad=False)


# -- ROIPooling ----------------------------------------------------------------------------------------------


def _roi_pool(data, rois, pooled, scale):
    N, C, H, W = data.shape
    PH, PW = pooled
    out = np.zeros((len(rois), C, PH, PW))
    for r, roi in enumerate(rois):
        b = int(roi[0])
        if not 0 <= b < N:
            continue
        sw, sh, ew, eh = (_c_round(v * scale) for v in roi[1:])
        rh, rw = max(eh - sh + 1, 1), max(ew - sw + 1, 1)
        for ph in range(PH):
            h0 = min(max(math.floor(ph * rh / PH) + sh, 0), H)
            h1 = min(max(math.ceil((ph + 1) * rh / PH) + sh, 0), H)
            for pw in range(PW):
                w0 = min(max(math.floor(pw * rw / PW) + sw, 0), W)
                w1 = min(max(math.ceil((pw + 1) * rw / PW) + sw, 0), W)
                if h1 > h0 and w1 > w0:
                    out[r, :, ph, pw] = data[b, :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


# -- ROIAlign / RROIAlign: one bilinear sample ----------------------------------------------------------------


def _bilinear(img, y, x):
    """MXNet's bilinear_interpolate on one (H, W) plane."""
    H, W = img.shape
    if y < -1.0 or y > H or x < -1.0 or x > W:
        return 0.0
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    if yl >= H - 1:
        yl = yh = H - 1
        y = float(yl)
    else:
        yh = yl + 1
    if xl >= W - 1:
        xl = xh = W - 1
        x = float(xl)
    else:
        xh = xl + 1
    ly, lx = y - yl, x - xl
    hy, hx = 1 - ly, 1 - lx
    return hy * hx * img[yl, xl] + hy * lx * img[yl, xh] + ly * hx * img[yh, xl] + ly * lx * img[yh, xh]


def _bin_points(y0, x0, rh, rw, pooled, ratio, ph, pw):
    """The sampling points of bin (ph, pw) of an rh x rw region with corner (y0, x0), split into ``pooled``
    bins: the centres of a gh x gw grid over the bin, gh = ``ratio`` if ratio > 0 else ceil(bin height) (gw
    likewise), row by row."""
    PH, PW = pooled
    bh, bw = rh / PH, rw / PW
    gh = ratio if ratio > 0 else math.ceil(rh / PH)
    gw = ratio if ratio > 0 else math.ceil(rw / PW)
    return [
        (y0 + ph * bh + (iy + 0.5) * bh / gh, x0 + pw * bw + (ix + 0.5) * bw / gw)
        for iy in range(gh)
        for ix in range(gw)
    ]


def _bin_mean(plane, points):
    """The mean of ``plane`` sampled bilinearly at ``points`` ((y, x) pairs), summed in order."""
    acc = 0.0
    for y, x in points:
        acc += _bilinear(plane, y, x)
    return acc / len(points)


def _roi_align(data, rois, pooled, scale, ratio=-1, ps=False, aligned=False):
    N, C, H, W = data.shape
    PH, PW = pooled
    co = C // (PH * PW) if ps else C
    out = np.zeros((len(rois), co, PH, PW))
    off = 0.5 if aligned else 0.0
    for r, roi in enumerate(rois):
        b = int(roi[0])
        sw, sh, ew, eh = (v * scale - off for v in roi[1:])
        rw, rh = ew - sw, eh - sh
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        for c in range(co):
            for ph in range(PH):
                for pw in range(PW):
                    plane = data[b, c * PH * PW + ph * PW + pw] if ps else data[b, c]
                    out[r, c, ph, pw] = _bin_mean(plane, _bin_points(sh, sw, rh, rw, pooled, ratio, ph, pw))
    return out


def _rroi_align(data, rois, pooled, scale, ratio=-1):
    N, C, H, W = data.shape
    PH, PW = pooled
    out = np.zeros((len(rois), C, PH, PW))
    for r, roi in enumerate(rois):
        b = int(roi[0])
        cx, cy = roi[1] * scale, roi[2] * scale
        rw, rh = max(roi[3] * scale, 1.0), max(roi[4] * scale, 1.0)
        t = roi[5] * math.pi / 180
        for c in range(C):
            for ph in range(PH):
                for pw in range(PW):
                    # the grid of the region centred at 0, rotated by t about (cx, cy)
                    points = [
                        (yy * math.cos(t) - xx * math.sin(t) + cy, xx * math.cos(t) + yy * math.sin(t) + cx)
                        for yy, xx in _bin_points(-rh / 2, -rw / 2, rh, rw, pooled, ratio, ph, pw)
                    ]
                    out[r, c, ph, pw] = _bin_mean(data[b, c], points)
    return out


# -- PSROIPooling ---------------------------------------------------------------------------------------------


def _psroi_pool(data, rois, scale, od, P, gs=0):
    gs = gs or P
    N, C, H, W = data.shape
    out = np.zeros((len(rois), od, P, P))
    for r, roi in enumerate(rois):
        b = int(roi[0])
        sw, sh = _c_round(roi[1]) * scale, _c_round(roi[2]) * scale
        ew, eh = (_c_round(roi[3]) + 1) * scale, (_c_round(roi[4]) + 1) * scale
        rw, rh = max(ew - sw, 0.1), max(eh - sh, 0.1)
        for ct in range(od):
            for ph in range(P):
                h0 = min(max(math.floor(ph * rh / P + sh), 0), H)
                h1 = min(max(math.ceil((ph + 1) * rh / P + sh), 0), H)
                gh = min(max(math.floor(ph * gs / P), 0), gs - 1)
                for pw in range(P):
                    w0 = min(max(math.floor(pw * rw / P + sw), 0), W)
                    w1 = min(max(math.ceil((pw + 1) * rw / P + sw), 0), W)
                    gw = min(max(math.floor(pw * gs / P), 0), gs - 1)
                    if h1 > h0 and w1 > w0:
                        out[r, ct, ph, pw] = data[b, (ct * gs + gh) * gs + gw, h0:h1, w0:w1].mean()
    return out


# -- Proposal -------------------------------------------------------------------------------------------------


def _anchors(stride, ratios, scales):
    w = h = float(stride)
    xc = yc = 0.5 * (w - 1)
    out = []
    for ratio in ratios:
        for scale in scales:
            nw = math.floor(math.sqrt(math.floor(w * h / ratio)) + 0.5) * scale
            nh = math.floor(nw / scale * ratio + 0.5) * scale
            out.append([xc - 0.5 * (nw - 1), yc - 0.5 * (nh - 1), xc + 0.5 * (nw - 1), yc + 0.5 * (nh - 1)])
    return out


def _proposal(cls, deltas, info, pre, post, thresh, min_size, scales, ratios, stride, iou=False):
    rows, scores = [], []
    for b in range(cls.shape[0]):
        A, H, W = cls.shape[1] // 2, cls.shape[2], cls.shape[3]
        anchors = _anchors(stride, ratios, scales)
        im_h, im_w, im_s = info[b]
        real_h, real_w = int(im_h / stride), int(im_w / stride)
        boxes = []  # in MXNet's order: h, then w, then anchor
        for h in range(H):
            for w in range(W):
                for a in range(A):
                    x1, y1, x2, y2 = (v + s for v, s in zip(anchors[a], (w * stride, h * stride) * 2))
                    d = deltas[b, 4 * a : 4 * a + 4, h, w]
                    if iou:
                        p = [x1 + d[0], y1 + d[1], x2 + d[2], y2 + d[3]]
                    else:
                        bw, bh = x2 - x1 + 1, y2 - y1 + 1
                        cx, cy = x1 + 0.5 * (bw - 1) + d[0] * bw, y1 + 0.5 * (bh - 1) + d[1] * bh
                        pw, ph = math.exp(d[2]) * bw, math.exp(d[3]) * bh
                        p = [cx - 0.5 * (pw - 1), cy - 0.5 * (ph - 1), cx + 0.5 * (pw - 1), cy + 0.5 * (ph - 1)]
                    p = [
                        min(max(p[0], 0), im_w - 1),
                        min(max(p[1], 0), im_h - 1),
                        min(max(p[2], 0), im_w - 1),
                        min(max(p[3], 0), im_h - 1),
                    ]
                    score = -1.0 if h >= real_h or w >= real_w else cls[b, A + a, h, w]
                    ms = min_size * im_s
                    if p[2] - p[0] + 1 < ms or p[3] - p[1] + 1 < ms:
                        p = [p[0] - ms / 2, p[1] - ms / 2, p[2] + ms / 2, p[3] + ms / 2]
                        score = -1.0
                    boxes.append((p, score))
        n_pre = min(pre if pre > 0 else len(boxes), len(boxes))
        ranked = sorted(boxes, key=lambda t: -t[1])[:n_pre]  # sorted() is stable
        keep, dead = [], [False] * n_pre
        for i in range(n_pre):
            if len(keep) >= min(post, n_pre):
                break
            if dead[i]:
                continue
            keep.append(i)
            a = ranked[i][0]
            area_a = (a[2] - a[0] + 1) * (a[3] - a[1] + 1)
            for j in range(i + 1, n_pre):
                if dead[j]:
                    continue
                c = ranked[j][0]
                iw = max(0.0, min(a[2], c[2]) - max(a[0], c[0]) + 1)
                ih = max(0.0, min(a[3], c[3]) - max(a[1], c[1]) + 1)
                inter = iw * ih
                if inter / (area_a + (c[2] - c[0] + 1) * (c[3] - c[1] + 1) - inter) > thresh:
                    dead[j] = True
        for i in range(post):
            p, s = ranked[keep[i % len(keep)]]
            rows.append([b] + list(p))
            scores.append([s])
    return np.array(rows), np.array(scores)


def _rpn_inputs(n, a, h, w, info):
    return {
        "cls": In((n, 2 * a, h, w), 0.0, 1.0, grad=False),
        "bbox": In((n, 4 * a, h, w), -0.4, 0.4, grad=False),
        "info": _fixed(info),
    }


ROIS = [[0, 0.5, 1.0, 4.0, 3.5], [1, 2.5, 0.0, 5.0, 4.25], [1, 1.0, 2.0, 1.0, 2.0]]
ROIS_ODD = [[0, 1.5, 0.5, 9.0, 7.0], [5, 0.0, 0.0, 3.0, 3.0], [-1, 0.0, 0.0, 3.0, 3.0], [1, 6.0, 4.0, 2.0, 1.0]]
ALIGN_ROIS = [[0, 0.5, 1.25, 4.0, 3.5], [1, 1.25, 0.25, 3.75, 3.25], [1, -0.75, 2.25, 5.5, 7.5]]
RPN = dict(
    scales=(2.0, 4.0),
    ratios=(0.5, 1.0),
    feature_stride=4,
    rpn_pre_nms_top_n=10,
    rpn_post_nms_top_n=5,
    threshold=0.5,
    rpn_min_size=3,
)


def _rpn_ref(iou=False, **kw):
    p = {**RPN, **kw}
    return lambda c, b, i: _proposal(
        c,
        b,
        i,
        p["rpn_pre_nms_top_n"],
        p["rpn_post_nms_top_n"],
        p["threshold"],
        p["rpn_min_size"],
        p["scales"],
        p["ratios"],
        p["feature_stride"],
        iou,
    )


# -- DeformablePSROIPooling ------------------------------------------------------------------------------------


def _dpsroi_bins(rois, trans, H, W, scale, od, gs, P, part, spp, tstd):
    """Yield (r, b, ctop, ph, pw, channel, [(h, w) sample points]) as MXNet's kernel visits them."""
    ncls = 1 if trans is None else trans.shape[1] // 2
    each = od // ncls
    for r, roi in enumerate(rois):
        b = int(roi[0])
        sw, sh = _c_round(roi[1]) * scale - 0.5, _c_round(roi[2]) * scale - 0.5
        ew, eh = (_c_round(roi[3]) + 1) * scale - 0.5, (_c_round(roi[4]) + 1) * scale - 0.5
        rw, rh = max(ew - sw, 0.1), max(eh - sh, 0.1)
        bw, bh = rw / P, rh / P
        for ct in range(od):
            cls = ct // each
            for ph in range(P):
                for pw in range(P):
                    parth, partw = math.floor(ph / P * part), math.floor(pw / P * part)
                    tx = 0.0 if trans is None else trans[r, 2 * cls, parth, partw] * tstd
                    ty = 0.0 if trans is None else trans[r, 2 * cls + 1, parth, partw] * tstd
                    w0 = pw * bw + sw + tx * rw
                    h0 = ph * bh + sh + ty * rh
                    gw = min(max(math.floor(pw * gs / P), 0), gs - 1)
                    gh = min(max(math.floor(ph * gs / P), 0), gs - 1)
                    pts = [(h0 + ih * bh / spp, w0 + iw * bw / spp) for ih in range(spp) for iw in range(spp)]
                    yield r, b, ct, ph, pw, (ct * gs + gh) * gs + gw, pts


def ref_deformable_psroi(data, rois, trans=None, scale=1.0, od=1, gs=1, P=1, part=0, spp=1, tstd=0.0):
    part = part or P
    scale, tstd = float(np.float32(scale)), float(np.float32(tstd))  # MXNet holds both as C floats
    N, C, H, W = data.shape
    out = np.zeros((len(rois), od, P, P))
    for r, b, ct, ph, pw, c, pts in _dpsroi_bins(rois, trans, H, W, scale, od, gs, P, part, spp, tstd):
        total, count = 0.0, 0
        for h, w in pts:
            if w < -0.5 or w > W - 0.5 or h < -0.5 or h > H - 0.5:
                continue
            h, w = min(max(h, 0.0), H - 1.0), min(max(w, 0.0), W - 1.0)
            y0, x0, y1, x1 = math.floor(h), math.floor(w), math.ceil(h), math.ceil(w)
            dy, dx = h - y0, w - x0
            img = data[b, c]
            total += (
                (1 - dx) * (1 - dy) * img[y0, x0]
                + (1 - dx) * dy * img[y1, x0]
                + dx * (1 - dy) * img[y0, x1]
                + dx * dy * img[y1, x1]
            )
            count += 1
        out[r, ct, ph, pw] = total / count if count else 0.0
    return out


def _roi_geometry(roi, scale, P):
    sw, sh = _c_round(roi[1]) * scale - 0.5, _c_round(roi[2]) * scale - 0.5
    ew, eh = (_c_round(roi[3]) + 1) * scale - 0.5, (_c_round(roi[4]) + 1) * scale - 0.5
    rw, rh = max(ew - sw, 0.1), max(eh - sh, 0.1)
    return (sw, rw, rw / P), (sh, rh, rh / P)


def _trans_away(rois, H, W, scale, P, part, spp, tstd, ncls, margin=0.04):
    """A trans sampler: each entry is redrawn until every coordinate it moves is >= margin from the kinks
    (the integers in [0, size - 1], where the bilinear weights bend, and -0.5 / size - 0.5, where the
    sample count jumps)."""
    rois = np.asarray(rois, dtype=np.float64)
    part = part or P
    tstd = float(np.float32(tstd))
    scale = float(np.float32(scale))

    def far(v, size):
        kinks = np.concatenate([np.arange(size), [-0.5, size - 0.5]])
        return np.abs(v - kinks).min() >= margin

    def draw(rng):
        t = np.zeros((len(rois), 2 * ncls, part, part))
        for r, roi in enumerate(rois):
            geo = _roi_geometry(roi, scale, P)
            for idx in np.ndindex(2 * ncls, part, part):
                axis = idx[0] % 2  # 0: x moves w, 1: y moves h
                start, size, binsz = geo[axis]
                cell = idx[2] if axis == 0 else idx[1]
                bins = [p for p in range(P) if math.floor(p / P * part) == cell]
                for _ in range(1000):
                    v = rng.uniform(-1.0, 1.0)
                    pos = [p * binsz + start + v * tstd * size + i * binsz / spp for p in bins for i in range(spp)]
                    if all(far(x, W if axis == 0 else H) for x in pos):
                        break
                else:
                    raise AssertionError("no trans value keeps its sample points off the kinks")
                t[(r,) + idx] = v
        return t

    return In((len(rois), 2 * ncls, part, part), sample=draw)


_ROIS_A = [[0, 1.0, 0.6, 7.0, 6.2], [0, 2.0, 2.0, 6.0, 7.0]]
_ROIS_B = [[0, 0.0, 1.0, 3.0, 4.0], [0, 2.4, -1.0, 6.0, 2.0], [0, -2.0, 1.0, 1.0, 3.0]]


def _roi_pool_row(name, d_shape, rois, pooled, scale):
    """ROIPooling on distinct data values (a unique argmax per bin) and the fixed ``rois``."""
    return OpInfo(
        name,
        lambda d, r: S.ROIPooling(d, r, pooled_size=pooled, spatial_scale=scale),
        {"d": _distinct(d_shape), "r": _fixed(rois)},
        lambda d, r: _roi_pool(d, r, pooled, scale),
    )


def _dpsroi(no_trans=False, **p):
    def make(d, r, t=None):
        args = (d, r) if no_trans else (d, r, t)
        return S._contrib_DeformablePSROIPooling(*args, no_trans=no_trans, **p)

    return make


OPS = [
    # -- ROIPooling: max over rounded integer bins; gradient to the argmax (symbolic, second order) -----------
    _roi_pool_row("ROIPooling_basic", (2, 2, 5, 6), ROIS, (2, 2), 1.0),
    # scale 0.5, a ROI past the map, batch indices 5 and -1 (outputs 0), a malformed ROI (1 x 1)
    _roi_pool_row("ROIPooling_scale_odd_rois", (2, 2, 4, 5), ROIS_ODD, (3, 2), 0.5),
    # -- ROIAlign: linear in data; adjoint _roi_align_adjoint ---------------------------------------------------
    OpInfo(
        "ROIAlign_adaptive",
        lambda d, r: S._contrib_ROIAlign(d, r, pooled_size=(2, 2), spatial_scale=1.0),
        {"d": In((2, 2, 5, 5)), "r": _fixed(ALIGN_ROIS)},
        lambda d, r: _roi_align(d, r, (2, 2), 1.0),
    ),
    OpInfo(
        "ROIAlign_sample_ratio_aligned",
        lambda d, r: S._contrib_ROIAlign(d, r, pooled_size=(3, 2), spatial_scale=0.5, sample_ratio=2, aligned=True),
        {"d": In((2, 1, 4, 4)), "r": _fixed(np.array(ALIGN_ROIS) * [1, 2, 2, 2, 2])},
        lambda d, r: _roi_align(d, r, (3, 2), 0.5, 2, aligned=True),
    ),
    OpInfo(
        "ROIAlign_position_sensitive",
        lambda d, r: S._contrib_ROIAlign(d, r, pooled_size=(2, 2), spatial_scale=1.0, position_sensitive=True),
        {"d": In((2, 8, 4, 4)), "r": _fixed(ALIGN_ROIS[:2])},
        lambda d, r: _roi_align(d, r, (2, 2), 1.0, ps=True),
    ),
    # -- PSROIPooling: linear in data; adjoint _psroi_pool_adjoint ---------------------------------------------
    OpInfo(
        "PSROIPooling_basic",
        lambda d, r: S._contrib_PSROIPooling(d, r, spatial_scale=0.5, output_dim=2, pooled_size=2),
        {"d": In((2, 8, 4, 4)), "r": _fixed([[0, 0.5, 1.5, 7.25, 6.5], [1, 3.0, 2.0, 5.0, 3.0]])},
        lambda d, r: _psroi_pool(d, r, 0.5, 2, 2),
    ),
    OpInfo(
        "PSROIPooling_group1",
        lambda d, r: S._contrib_PSROIPooling(d, r, spatial_scale=1.0, output_dim=2, pooled_size=3, group_size=1),
        {"d": In((1, 2, 5, 4)), "r": _fixed([[0, 0.0, 0.5, 3.0, 4.0], [0, 3.0, 3.0, 1.0, 1.0]])},
        lambda d, r: _psroi_pool(d, r, 1.0, 2, 3, 1),
    ),
    # -- RROIAlign: forward only (MXNet has no backward) -------------------------------------------------------
    OpInfo(
        "RROIAlign",
        lambda d, r: S._contrib_RROIAlign(d, r, pooled_size=(2, 3), spatial_scale=1.0),
        {"d": In((2, 2, 5, 5)), "r": _fixed([[0, 2.5, 2.0, 3.0, 2.0, 30.0], [1, 2.0, 2.5, 4.5, 3.5, -60.0]])},
        lambda d, r: _rroi_align(d, r, (2, 3), 1.0),
        grad=False,
    ),
    OpInfo(
        "RROIAlign_sampling_ratio",
        lambda d, r: S._contrib_RROIAlign(d, r, pooled_size=(2, 2), spatial_scale=0.5, sampling_ratio=2),
        {"d": In((1, 2, 4, 5)), "r": _fixed([[0, 4.0, 4.0, 5.0, 3.0, 45.0]])},
        lambda d, r: _rroi_align(d, r, (2, 2), 0.5, 2),
        grad=False,
    ),
    # -- Proposal / MultiProposal: forward only (MXNet's gradient is zeros: test_ops_roi.py) --------------------
    OpInfo(
        "Proposal",
        lambda c, b, i: S._contrib_Proposal(c, b, i, output_score=True, **RPN),
        _rpn_inputs(1, 4, 3, 4, [[11.0, 16.0, 1.0]]),
        _rpn_ref(),
        grad=False,
        dtypes=F32_64,
    ),
    OpInfo(
        "Proposal_iou_loss_all_boxes",
        lambda c, b, i: S._contrib_Proposal(c, b, i, iou_loss=True, **{**RPN, "rpn_pre_nms_top_n": -1}),
        _rpn_inputs(1, 4, 3, 3, [[12.0, 12.0, 0.5]]),
        lambda c, b, i: _rpn_ref(True, rpn_pre_nms_top_n=-1)(c, b, i)[0],
        grad=False,
        dtypes=F32_64,
    ),
    OpInfo(
        "MultiProposal",
        lambda c, b, i: S._contrib_MultiProposal(c, b, i, output_score=True, **RPN),
        _rpn_inputs(2, 4, 3, 3, [[12.0, 12.0, 1.0], [8.0, 10.0, 1.0]]),
        _rpn_ref(),
        grad=False,
        dtypes=F32_64,
    ),
    # -- DeformablePSROIPooling: symbolic gradients for data and trans ------------------------------------------
    OpInfo(
        "DeformablePSROIPooling",
        _dpsroi(spatial_scale=0.5, output_dim=2, group_size=2, pooled_size=2, sample_per_part=2, trans_std=0.1),
        {"d": In((1, 8, 4, 4)), "r": _fixed(_ROIS_A), "t": _trans_away(_ROIS_A, 4, 4, 0.5, 2, 0, 2, 0.1, 1)},
        lambda d, r, t: ref_deformable_psroi(d, r, t, 0.5, 2, 2, 2, 0, 2, 0.1),
        fwd_tol=F16,
    ),
    # two classes, part_size < pooled_size (part cells shared by neighbouring bins), ROIs partly outside
    OpInfo(
        "DeformablePSROIPooling_classes_part2",
        _dpsroi(
            spatial_scale=1.0, output_dim=2, group_size=1, pooled_size=3, part_size=2, sample_per_part=2, trans_std=0.2
        ),
        {"d": In((1, 2, 4, 5)), "r": _fixed(_ROIS_B), "t": _trans_away(_ROIS_B, 4, 5, 1.0, 3, 2, 2, 0.2, 2)},
        lambda d, r, t: ref_deformable_psroi(d, r, t, 1.0, 2, 1, 3, 2, 2, 0.2),
        fwd_tol=F16,
    ),
    OpInfo(
        "DeformablePSROIPooling_no_trans",
        _dpsroi(no_trans=True, spatial_scale=1.0, output_dim=2, group_size=2, pooled_size=2, sample_per_part=3),
        {"d": In((1, 8, 4, 4)), "r": _fixed(_ROIS_B)},
        lambda d, r: ref_deformable_psroi(d, r, None, 1.0, 2, 2, 2, 0, 3),
        fwd_tol=F16,
    ),
]
