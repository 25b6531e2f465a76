"""OpInfo rows: _contrib_ModulatedDeformableConvolution (DCNv2) and _contrib_DeformablePSROIPooling.

References are plain-numpy loops written from MXNet 1.9.1's cpu kernels
(contrib/nn/modulated_deformable_im2col.h, contrib/deformable_psroi_pooling.cc).

The bilinear kernel has kinks at integer sample positions, and DeformablePSROIPooling's sample count jumps
where a point crosses -0.5 or size - 0.5: deformable offsets are drawn a fraction 0.15..0.85 off the
integers, and the ``trans`` of DeformablePSROIPooling rows is redrawn until every sample point is at least
0.05 pixel from any integer and from the validity borders.
"""

import math

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

F16 = {np.float16: (2e-2, 2e-2)}


def _c_round(v):
    return math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1)


def _frac(rng, shape, span=1):
    """Integer parts in [-span, span] plus a fraction in [0.15, 0.85]: never within 0.15 of an integer."""
    return rng.integers(-span, span + 1, shape) + rng.uniform(0.15, 0.85, shape)


def _fixed(a):
    a = np.asarray(a, dtype=np.float64)
    return In(a.shape, sample=lambda rng: a, grad=False)


# -- ModulatedDeformableConvolution ----------------------------------------------------------------------------


def _zero_border_sample(img, y, x):
    """MXNet's modulated sample: 0 unless -1 < y < H and -1 < x < W; corner pixels outside read 0."""
    H, W = img.shape
    if not (-1 < y < H and -1 < x < W):
        return 0.0
    y0, x0 = math.floor(y), math.floor(x)
    ly, lx = y - y0, x - x0
    total = 0.0
    for yy, wy in ((y0, 1 - ly), (y0 + 1, ly)):
        for xx, wx in ((x0, 1 - lx), (x0 + 1, lx)):
            if 0 <= yy <= H - 1 and 0 <= xx <= W - 1:
                total += wy * wx * img[yy, xx]
    return total


def ref_modulated_deformable_conv(data, offset, mask, weight, bias=None, kernel=(2, 2), stride=(1, 1),
                                  dilate=(1, 1), pad=(0, 0), num_group=1, dg=1):
    N, C, H, W = data.shape
    F = weight.shape[0]
    kh, kw = kernel
    Ho, Wo = offset.shape[2:]
    cols = np.zeros((N, C, kh, kw, Ho, Wo))
    for n in range(N):
        for c in range(C):
            g = c // (C // dg)
            for i in range(kh):
                for j in range(kw):
                    t = i * kw + j
                    for ho in range(Ho):
                        for wo in range(Wo):
                            y = ho * stride[0] - pad[0] + i * dilate[0] + offset[n, g * 2 * kh * kw + 2 * t, ho, wo]
                            x = wo * stride[1] - pad[1] + j * dilate[1] + offset[n, g * 2 * kh * kw + 2 * t + 1, ho,
                                                                                 wo]
                            m = mask[n, g * kh * kw + t, ho, wo]
                            cols[n, c, i, j, ho, wo] = m * _zero_border_sample(data[n, c], y, x)
    out = np.zeros((N, F, Ho, Wo))
    cg, fg = C // num_group, F // num_group
    for n in range(N):
        for f in range(F):
            grp = f // fg
            for cc in range(cg):
                c = grp * cg + cc
                for i in range(kh):
                    for j in range(kw):
                        out[n, f] += weight[f, cc, i, j] * cols[n, c, i, j]
            if bias is not None:
                out[n, f] += bias[f]
    return out


def _mdcn_inputs(N, C, H, W, F, kernel, Ho, Wo, num_group=1, dg=1, bias=True, span=1):
    K = kernel[0] * kernel[1]
    ins = {"data": In((N, C, H, W)),
           "offset": In((N, 2 * K * dg, Ho, Wo), sample=lambda r: _frac(r, (N, 2 * K * dg, Ho, Wo), span)),
           "mask": In((N, K * dg, Ho, Wo), low=0.0, high=1.0),
           "weight": In((F, C // num_group) + tuple(kernel))}
    if bias:
        ins["bias"] = In((F,))
    return ins


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
            total += ((1 - dx) * (1 - dy) * img[y0, x0] + (1 - dx) * dy * img[y1, x0] + dx * (1 - dy) * img[y0, x1]
                      + dx * dy * img[y1, x1])
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


def _dpsroi(no_trans=False, **p):
    def make(d, r, t=None):
        args = (d, r) if no_trans else (d, r, t)
        return S._contrib_DeformablePSROIPooling(*args, no_trans=no_trans, **p)
    return make


OPS = [
    # -- ModulatedDeformableConvolution: symbolic gradients for data, offset, mask, weight, bias ----------------
    OpInfo("ModulatedDeformableConvolution",
           lambda d, o, m, w, b: S._contrib_ModulatedDeformableConvolution(d, o, m, w, b, kernel=(2, 2),
                                                                           num_filter=2),
           _mdcn_inputs(1, 2, 4, 4, 2, (2, 2), 3, 3),
           lambda d, o, m, w, b: ref_modulated_deformable_conv(d, o, m, w, b), fwd_tol=F16),
    OpInfo("ModulatedDeformableConvolution_groups_pad_stride",
           lambda d, o, m, w: S._contrib_ModulatedDeformableConvolution(
               d, o, m, w, kernel=(2, 2), stride=(2, 1), pad=(1, 1), dilate=(1, 2), num_filter=2, num_group=2,
               num_deformable_group=2, no_bias=True),
           _mdcn_inputs(1, 4, 3, 3, 2, (2, 2), 2, 3, num_group=2, dg=2, bias=False),
           lambda d, o, m, w: ref_modulated_deformable_conv(d, o, m, w, None, stride=(2, 1), pad=(1, 1),
                                                            dilate=(1, 2), num_group=2, dg=2), fwd_tol=F16),
    # offsets up to +-3 pixels: many samples fade out past the border or fall outside entirely
    OpInfo("ModulatedDeformableConvolution_far_offsets_batch2",
           lambda d, o, m, w, b: S._contrib_ModulatedDeformableConvolution(d, o, m, w, b, kernel=(1, 2),
                                                                           num_filter=3, im2col_step=1),
           _mdcn_inputs(2, 1, 3, 3, 3, (1, 2), 3, 2, span=3),
           lambda d, o, m, w, b: ref_modulated_deformable_conv(d, o, m, w, b, kernel=(1, 2)), fwd_tol=F16),
    # -- DeformablePSROIPooling: symbolic gradients for data and trans ------------------------------------------
    OpInfo("DeformablePSROIPooling",
           _dpsroi(spatial_scale=0.5, output_dim=2, group_size=2, pooled_size=2, sample_per_part=2, trans_std=0.1),
           {"d": In((1, 8, 4, 4)), "r": _fixed(_ROIS_A),
            "t": _trans_away(_ROIS_A, 4, 4, 0.5, 2, 0, 2, 0.1, 1)},
           lambda d, r, t: ref_deformable_psroi(d, r, t, 0.5, 2, 2, 2, 0, 2, 0.1), fwd_tol=F16),
    # two classes, part_size < pooled_size (part cells shared by neighbouring bins), ROIs partly outside
    OpInfo("DeformablePSROIPooling_classes_part2",
           _dpsroi(spatial_scale=1.0, output_dim=2, group_size=1, pooled_size=3, part_size=2, sample_per_part=2,
                   trans_std=0.2),
           {"d": In((1, 2, 4, 5)), "r": _fixed(_ROIS_B),
            "t": _trans_away(_ROIS_B, 4, 5, 1.0, 3, 2, 2, 0.2, 2)},
           lambda d, r, t: ref_deformable_psroi(d, r, t, 1.0, 2, 1, 3, 2, 2, 0.2), fwd_tol=F16),
    OpInfo("DeformablePSROIPooling_no_trans",
           _dpsroi(no_trans=True, spatial_scale=1.0, output_dim=2, group_size=2, pooled_size=2, sample_per_part=3),
           {"d": In((1, 8, 4, 4)), "r": _fixed(_ROIS_B)},
           lambda d, r: ref_deformable_psroi(d, r, None, 1.0, 2, 2, 2, 0, 3), fwd_tol=F16),
]
