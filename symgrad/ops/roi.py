"""Region-of-interest operators with MXNet 1.9.1 semantics: ROIPooling, _contrib_ROIAlign,
_contrib_PSROIPooling, _contrib_RROIAlign, _contrib_Proposal, _contrib_MultiProposal and
_contrib_DeformablePSROIPooling (its rules and gradients are described in its own section below).

The geometry of every ROI (bins, sampling points, interpolation weights) is computed on the host in
numpy from the small ``rois`` array, in the data's dtype (float32 for float16), with MXNet's
arithmetic and rounding (src/operator/roi_pooling.cc, contrib/roi_align.cc, contrib/psroi_pooling.cc,
contrib/rroi_align.cc, contrib/proposal.cc, contrib/multi_proposal.cc):

- ROIPooling: ROI corners ``round(x * spatial_scale)`` (half away from zero), size ``max(end - start + 1,
  1)``, bin ``[floor(p * size / pooled), ceil((p + 1) * size / pooled))`` offset and clipped to the map;
  max pooling (first maximum in row-major order); an empty bin, or a batch index outside [0, N), gives 0.
  Its hidden second output ``maxidx`` holds the flat index into ``data`` of each maximum (-1: none).
- ROIAlign: continuous coordinates (``- 0.5`` when ``aligned``), ``sample_ratio`` (or ``ceil(bin)``)
  points per bin axis, bilinear interpolation (points beyond one pixel outside the map count 0), the
  mean of the points; ``position_sensitive`` reads channel ``c * ph * pw + bin``. Negative batch index:
  output 0 (MXNet's documented behaviour; its CPU kernel zeroes one element only).
- PSROIPooling: rounded ROI corners, ``end + 1``, size ``max(., 0.1)``, average pooling of each bin from
  channel ``(ctop * group_size + gh) * group_size + gw``.
- RROIAlign: ROIs (batch, cx, cy, w, h, angle in degrees), ROIAlign's sampling on the rotated grid.
- Proposal / MultiProposal: anchors, box regression (or IoU deltas), clipping, min-size filtering,
  stable descending sort, greedy NMS, and the kept boxes repeated cyclically to fill
  ``rpn_post_nms_top_n`` rows.

Gradients: ROIPooling's is ``_roi_pool_scatter`` (each output gradient added at its ``maxidx``) whose
adjoint is ``_roi_pool_gather``; ROIAlign and PSROIPooling are linear in ``data`` with adjoints
``_roi_align_adjoint`` / ``_psroi_pool_adjoint`` whose own gradients are the forward ops, so second order
works for all three. ``rois`` gets no gradient (MXNet writes zeros for it). RROIAlign has no gradient in
MXNet 1.9.1 (its backward is a fatal "not supported"), so none here. Proposal and MultiProposal have a
zero gradient for every input, exactly what MXNet's backward writes (not the derivative: the box
coordinates do depend on bbox_pred).
"""

from __future__ import annotations

import math

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import (
    Param,
    acc_dtype,
    check_at_least,
    check_float,
    host_array,
    output_like,
    register,
    wait_for_first_input,
)

# MXNet's kernels compute ROI geometry in acc_dtype: the data's dtype, float32 for float16


def _round_half_away(v):
    """C's round(): halves away from zero (numpy's round is half to even)."""
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _batch_index(v):
    """static_cast<int> of the ROI's batch entry: truncation toward zero."""
    return int(np.trunc(v))


def _check_pooled(where, params, key="pooled_size"):
    ps = tuple(params[key])
    if len(ps) != 2 or any(v < 1 for v in ps):
        raise ParamError(f"{where}: parameter {key!r} must be (h, w) with positive entries, got {ps}")


def _check_scale(where, params):
    s = params["spatial_scale"]
    if not 0.0 <= s <= 1.0:
        raise ParamError(f"{where}: parameter 'spatial_scale' must be in [0, 1] (as MXNet), got {s}")


def _pooled_prepare(op):
    """``prepare`` of the ROI op ``op``: checks its ``pooled_size`` and ``spatial_scale``."""

    def prepare(params, name):
        where = f"{op} {name!r}"
        _check_pooled(where, params)
        _check_scale(where, params)
        return params

    return prepare


def _roi_shapes(where, in_shapes, cols=5):
    """(data, rois) shapes checked: data 4-d, rois (R, cols); None when either is unknown."""
    data, rois = in_shapes[0], in_shapes[1]
    if data is not None and len(data) != 4:
        raise ShapeError(f"{where}: input 'data' has shape {tuple(data)}; expected 4-d (N, C, H, W)")
    if rois is not None and (len(rois) != 2 or rois[1] != cols):
        what = "[batch_index, x1, y1, x2, y2]" if cols == 5 else "[batch_index, cx, cy, w, h, angle]"
        raise ShapeError(f"{where}: input 'rois' has shape {tuple(rois)}; expected (num_rois, {cols}), rows {what}")
    if data is None or rois is None:
        return None
    return tuple(data), tuple(rois)


def _roi_types(*out_int):
    """dtype rule: float data, rois of the data's dtype (as MXNet); outputs data's dtype or int32."""

    def infer(params, in_types, out_types, where="op"):
        t = in_types[0] if in_types[0] is not None else in_types[1]
        if t is None:
            return in_types, out_types
        check_float(where, "data", in_types[0])
        check_float(where, "rois", in_types[1])
        if in_types[0] is not None and in_types[1] is not None and np.dtype(in_types[0]) != np.dtype(in_types[1]):
            raise TypeError(
                f"{where}: input 'rois' has dtype {np.dtype(in_types[1])}, expected the data's dtype "
                f"{np.dtype(in_types[0])} (as MXNet)"
            )
        outs = [np.dtype(np.int32) if i in out_int else np.dtype(t) for i in range(len(out_types))]
        return [t, t], outs

    return infer


def _scale(params, T):
    """spatial_scale as MXNet holds it (a C float), in dtype T."""
    return T.type(np.float32(params["spatial_scale"]))


# ----------------------------------------------------------------------------
# ROIPooling
# ----------------------------------------------------------------------------


def _roi_pool_shape(params, in_shapes, out_shapes, where):
    known = _roi_shapes(where, in_shapes)
    if known is None:
        return in_shapes, out_shapes
    (_, c, _, _), (r, _) = known
    out = (r, c) + tuple(params["pooled_size"])
    return in_shapes, [out, out]


def _roi_pool_bins(roi, H, W, PH, PW, scale, T):
    """Batch index and the [start, end) rows and columns of every bin of one ROI (MXNet's rounding)."""
    b = _batch_index(roi[0])
    sw, sh, ew, eh = (int(_round_half_away(T.type(v) * scale)) for v in roi[1:5])
    rh, rw = max(eh - sh + 1, 1), max(ew - sw + 1, 1)
    bh, bw = T.type(rh) / T.type(PH), T.type(rw) / T.type(PW)

    def span(p, size, start, limit):
        lo = int(np.floor(T.type(p) * size)) + start
        hi = int(np.ceil(T.type(p + 1) * size)) + start
        return min(max(lo, 0), limit), min(max(hi, 0), limit)

    return b, [span(p, bh, sh, H) for p in range(PH)], [span(p, bw, sw, W) for p in range(PW)]


def _roi_pool_argmax(xp, data, rois, pooled_size, spatial_scale):
    """Flat index into ``data`` of every bin's first maximum (R, C, PH, PW), -1 for none."""
    N, C, H, W = data.shape
    PH, PW = pooled_size
    T = acc_dtype(data.dtype)
    scale = _scale({"spatial_scale": spatial_scale}, T)
    R = rois.shape[0]
    idx = np.full((R, C, PH, PW), -1, dtype=np.int64)
    chan = np.arange(C, dtype=np.int64) * (H * W)
    for r, roi in enumerate(host_array(rois).astype(T)):
        b, rows, cols = _roi_pool_bins(roi, H, W, PH, PW, scale, T)
        if not 0 <= b < N:
            continue
        for ph, (h0, h1) in enumerate(rows):
            for pw, (w0, w1) in enumerate(cols):
                if h1 <= h0 or w1 <= w0:
                    continue
                k = host_array(data[b, :, h0:h1, w0:w1].reshape(C, -1).argmax(axis=1))
                hh, ww = np.divmod(k, w1 - w0)
                idx[r, :, ph, pw] = b * C * H * W + chan + (h0 + hh) * W + (w0 + ww)
    return xp.asarray(idx.astype(np.int32))


def _gather_flat(xp, values, idx):
    """values.ravel()[idx], 0 where idx < 0."""
    flat = values.reshape(-1)
    # ROIPooling's own maxidx is always valid; one read from a file is checked (numpy would raise bare or wrap)
    whole = idx.dtype.kind == "i" or not bool((idx != xp.floor(idx)).any())
    if idx.size and (not whole or float(idx.max()) >= flat.size or float(idx.min()) < -1):
        raise IndexError(
            f"_roi_pool_gather: input 'maxidx' must hold whole numbers in [-1, {flat.size - 1}] (flat positions "
            f"into 'value' of shape {tuple(values.shape)}, -1 for none), got values in "
            f"[{float(idx.min()):g}, {float(idx.max()):g}]"
        )
    idx = idx.astype(np.int64, copy=False)
    got = flat[xp.maximum(idx, 0)]
    return xp.where(idx >= 0, got, xp.zeros((), dtype=values.dtype))


def _roi_pool_fwd(xp, data, rois, *, pooled_size, spatial_scale):
    idx = _roi_pool_argmax(xp, data, rois, pooled_size, spatial_scale)
    return _gather_flat(xp, data, idx), idx


def _roi_pool_grad(F, n, g):
    # y[o] = x[maxidx[o]]  ->  dx = scatter of g to each bin's maximum (maxidx fixed: piecewise constant in x)
    return [F._roi_pool_scatter(g[0], n.outputs[1], n.inputs[0]), None]


register(
    "ROIPooling",
    inputs=("data", "rois"),
    params={"pooled_size": Param("shape"), "spatial_scale": Param("float")},
    prepare=_pooled_prepare("ROIPooling"),
    num_outputs=2,
    num_visible=1,
    output_names=("output", "maxidx"),
    forward=_roi_pool_fwd,
    infer_shape=_roi_pool_shape,
    infer_type=_roi_types(1),
    gradient=_roi_pool_grad,
    no_grad_inputs=("rois",),
    doc="Max pooling of each ROI [batch, x1, y1, x2, y2] of a 4-d map into pooled_size bins (MXNet's rounded "
    "integer bins); hidden output maxidx (int32 flat index of each maximum, -1 for an empty bin).",
)


def _scatter_flat(xp, g, idx, like):
    """zeros(like.shape) with each g[o] added at flat index idx[o] (idx < 0 skipped)."""
    acc = acc_dtype(g.dtype)
    ok = idx.reshape(-1) >= 0
    where = idx.reshape(-1)[ok]
    vals = g.reshape(-1)[ok].astype(acc, copy=False)
    out = xp.zeros(like.size, dtype=acc)
    xp.add.at(out, where, vals)
    return out.reshape(like.shape).astype(g.dtype, copy=False)


# scatter(G; idx) is linear in G: <H, scatter(G)> = <gather(H), G>, so each is the other's gradient
register(
    "_roi_pool_scatter",
    inputs=("ograd", "maxidx", "like"),
    forward=lambda xp, g, idx, like: _scatter_flat(xp, g, idx, like),
    infer_shape=output_like(2),
    infer_type=output_like(0),
    gradient=lambda F, n, g: [F._roi_pool_gather(g[0], n.inputs[1]), None, None],
    no_grad_inputs=("maxidx", "like"),
    doc="ROIPooling's gradient: ograd added at the flat indices maxidx of an array shaped like ``like`` (hidden).",
)
register(
    "_roi_pool_gather",
    inputs=("value", "maxidx"),
    forward=lambda xp, v, idx: _gather_flat(xp, v, idx),
    infer_shape=output_like(1),
    infer_type=output_like(0),
    gradient=lambda F, n, g: [F._roi_pool_scatter(g[0], n.inputs[1], n.inputs[0]), None],
    no_grad_inputs=("maxidx",),
    doc="``value`` read at the flat indices maxidx (0 where -1): adjoint of _roi_pool_scatter (hidden).",
)


# ----------------------------------------------------------------------------
# ROIAlign (separable bilinear sampling)
# ----------------------------------------------------------------------------

_ALIGN_PARAMS = {
    "pooled_size": Param("shape"),
    "spatial_scale": Param("float"),
    "sample_ratio": Param("int", -1),
    "position_sensitive": Param("bool", False),
    "aligned": Param("bool", False),
}


def _align_shape(params, in_shapes, out_shapes, where):
    known = _roi_shapes(where, in_shapes)
    if known is None:
        return in_shapes, out_shapes
    (_, c, _, _), (r, _) = known
    ph, pw = params["pooled_size"]
    if params["position_sensitive"]:
        if c % (ph * pw):
            raise ShapeError(
                f"{where}: with position_sensitive=True the {c} channels of data must be divisible by "
                f"pooled_size[0] * pooled_size[1] = {ph * pw}"
            )
        c //= ph * pw
    return in_shapes, [(r, c, ph, pw)]


def _interp_rows(coords, size, T):
    """(K, size) bilinear weights of the K points ``coords`` on an axis of ``size`` pixels (MXNet's rule:
    a point below -1 or beyond ``size`` weighs nothing; below 0 it is read at 0; at or past the last
    pixel it is read there), and their validity (K,) bool."""
    valid = (coords >= -1.0) & (coords <= size)
    c = np.maximum(coords, T.type(0))
    low = c.astype(np.int64)
    last = low >= size - 1
    low = np.where(last, size - 1, low)
    high = np.where(last, size - 1, low + 1)
    c = np.where(last, low.astype(T), c)
    lw = (c - low).astype(T)
    hw = (T.type(1) - lw).astype(T)
    out = np.zeros((coords.size, size), dtype=T)
    k = np.arange(coords.size)
    np.add.at(out, (k, low), hw)
    np.add.at(out, (k, high), lw)
    return out, valid


def _align_axis(start, bin_size, grid, pooled, size, T):
    """(pooled, size) weights along one axis: the sum over the grid points of each bin, and (pooled, grid)
    validity of each point."""
    p = np.arange(pooled, dtype=T)[:, None]
    i = (np.arange(grid, dtype=T) + T.type(0.5))[None, :]
    pts = (start + p * bin_size) + i * bin_size / T.type(grid)
    w, valid = _interp_rows(pts.reshape(-1).astype(T), size, T)
    return w.reshape(pooled, grid, size), valid.reshape(pooled, grid)


def _align_weights(rois, H, W, params, T):
    """Per ROI: (batch index, Ay (PH, H), Ax (PW, W)) with out = Ay data Ax^T, or (-1, None, None)."""
    PH, PW = params["pooled_size"]
    scale = _scale(params, T)
    off = T.type(0.5) if params["aligned"] else T.type(0)
    out = []
    for roi in rois.astype(T):
        b = _batch_index(roi[0])
        if b < 0:
            out.append((-1, None, None))
            continue
        sw, sh, ew, eh = (roi[k] * scale - off for k in range(1, 5))
        rw, rh = ew - sw, eh - sh
        if params["aligned"]:
            if not (rw > 0 and rh > 0):
                raise ValueError(
                    f"_contrib_ROIAlign: with aligned=True every ROI needs positive width and height "
                    f"after scaling, got {rw} x {rh} for ROI {roi.tolist()} (MXNet aborts here)"
                )
        else:
            rw, rh = max(rw, T.type(1)), max(rh, T.type(1))
        bh, bw = T.type(rh / T.type(PH)), T.type(rw / T.type(PW))
        sr = params["sample_ratio"]
        gh = sr if sr > 0 else int(np.ceil(T.type(rh / T.type(PH))))
        gw = sr if sr > 0 else int(np.ceil(T.type(rw / T.type(PW))))
        wy, vy = _align_axis(sh, bh, gh, PH, H, T)  # (PH, gh, H)
        wx, vx = _align_axis(sw, bw, gw, PW, W, T)
        # a point weighs nothing unless both its coordinates are in range; within a bin the validity of
        # its y and its x are independent, so the mean over the gh x gw points factorises
        ay = (wy * vy[:, :, None]).sum(axis=1)
        ax = (wx * vx[:, :, None]).sum(axis=1) / T.type(gh * gw)
        out.append((b, ay, ax))
    return out


def _check_batch(where, b, n):
    if b >= n:
        raise ValueError(
            f"{where}: an ROI has batch index {b}, but data has only {n} images (MXNet reads out of bounds here)"
        )


def _align_rois(xp, rois, N, H, W, params, T):
    """(ROI index, batch index, Ay, Ax) of every ROI that has a batch index (MXNet skips the others: their
    output rows stay 0), its weights (``_align_weights``) on ``xp``'s device."""
    for r, (b, ay, ax) in enumerate(_align_weights(host_array(rois), H, W, params, T)):
        if b < 0:
            continue
        _check_batch("_contrib_ROIAlign", b, N)
        yield r, b, xp.asarray(ay), xp.asarray(ax)


def _align_fwd(xp, data, rois, **params):
    N, C, H, W = data.shape
    T = acc_dtype(data.dtype)
    PH, PW = params["pooled_size"]
    ps = params["position_sensitive"]
    co = C // (PH * PW) if ps else C
    out = xp.zeros((rois.shape[0], co, PH, PW), dtype=T)
    for r, b, ay, ax in _align_rois(xp, rois, N, H, W, params, T):
        x = data[b].astype(T, copy=False)
        if ps:
            out[r] = xp.einsum("ph,cpqhw,qw->cpq", ay, x.reshape(co, PH, PW, H, W), ax)
        else:
            out[r] = xp.einsum("ph,chw,qw->cpq", ay, x, ax)
    return out.astype(data.dtype, copy=False)


def _align_adjoint_fwd(xp, g, rois, like, **params):
    N, C, H, W = like.shape
    T = acc_dtype(g.dtype)
    PH, PW = params["pooled_size"]
    ps = params["position_sensitive"]
    dx = xp.zeros((N, C, H, W), dtype=T)
    for r, b, ay, ax in _align_rois(xp, rois, N, H, W, params, T):
        gr = g[r].astype(T, copy=False)
        if ps:
            dx[b] += xp.einsum("ph,cpq,qw->cpqhw", ay, gr, ax).reshape(C, H, W)
        else:
            dx[b] += xp.einsum("ph,cpq,qw->chw", ay, gr, ax)
    return dx.astype(g.dtype, copy=False)


def _register_linear_in_data(name, adjoint, params, prepare, forward, adjoint_forward, infer_shape, doc):
    """Register an ROI op linear in ``data`` and its hidden adjoint in data, each the other's gradient."""
    register(
        name,
        inputs=("data", "rois"),
        params=dict(params),
        prepare=prepare,
        forward=forward,
        infer_shape=infer_shape,
        infer_type=_roi_types(),
        # linear in data: y = A(rois) x  ->  dx = A^T g
        gradient=lambda F, n, g: [getattr(F, adjoint)(g[0], n.inputs[1], n.inputs[0], **n.params), None],
        no_grad_inputs=("rois",),
        doc=doc,
    )
    register(
        adjoint,
        inputs=("ograd", "rois", "like"),
        params=dict(params),
        forward=adjoint_forward,
        infer_shape=output_like(2),
        infer_type=output_like(0),
        # A^T is linear; its adjoint is A, i.e. the op itself
        gradient=lambda F, n, g: [getattr(F, name)(g[0], n.inputs[1], **n.params), None, None],
        no_grad_inputs=("rois", "like"),
        doc=f"Adjoint of {name.removeprefix('_contrib_')} in data (hidden).",
    )


_register_linear_in_data(
    "_contrib_ROIAlign",
    "_roi_align_adjoint",
    _ALIGN_PARAMS,
    _pooled_prepare("_contrib_ROIAlign"),
    _align_fwd,
    _align_adjoint_fwd,
    _align_shape,
    "ROI Align (Mask R-CNN): bilinear sampling of each ROI bin, averaged; optional position-sensitive "
    "channels and Detectron2's aligned (-0.5 pixel) coordinates.",
)


# ----------------------------------------------------------------------------
# PSROIPooling (position-sensitive average pooling)
# ----------------------------------------------------------------------------

_PSROI_PARAMS = {
    "spatial_scale": Param("float"),
    "output_dim": Param("int"),
    "pooled_size": Param("int"),
    "group_size": Param("int", 0),
}


def _psroi_prepare(params, name):
    where = f"_contrib_PSROIPooling {name!r}"
    _check_scale(where, params)
    for k in ("output_dim", "pooled_size"):
        if params[k] < 1:
            raise ParamError(f"{where}: parameter {k!r} must be >= 1, got {params[k]}")
    if params["group_size"] < 0:
        raise ParamError(f"{where}: parameter 'group_size' must be >= 0 (0: pooled_size), got {params['group_size']}")
    return params


def _group(params):
    return params["group_size"] or params["pooled_size"]


def _psroi_shape(params, in_shapes, out_shapes, where):
    known = _roi_shapes(where, in_shapes)
    if known is None:
        return in_shapes, out_shapes
    (_, c, _, _), (r, _) = known
    gs, od, p = _group(params), params["output_dim"], params["pooled_size"]
    if c < od * gs * gs:
        raise ShapeError(
            f"{where}: data has {c} channels; output_dim * group_size^2 = {od} * {gs}^2 = {od * gs * gs} are needed"
        )
    return in_shapes, [(r, od, p, p)]


def _psroi_weights(rois, H, W, params, T):
    """Per ROI: (batch index, Ay (P, H), Ax (P, W)) of the bin averages; empty bins are zero rows."""
    P = params["pooled_size"]
    scale = _scale(params, T)

    def axis(start, end, size):
        length = max(end - start, T.type(0.1))
        b = T.type(length / T.type(P))
        w = np.zeros((P, size), dtype=T)
        for p in range(P):
            lo = min(max(int(np.floor(T.type(T.type(p) * b + start))), 0), size)
            hi = min(max(int(np.ceil(T.type(T.type(p + 1) * b + start))), 0), size)
            if hi > lo:
                w[p, lo:hi] = T.type(1) / T.type(hi - lo)
        return w

    out = []
    for roi in rois.astype(T):
        r = _round_half_away(roi[1:5])
        sw, sh = T.type(r[0]) * scale, T.type(r[1]) * scale
        ew, eh = T.type(r[2] + 1.0) * scale, T.type(r[3] + 1.0) * scale
        out.append((_batch_index(roi[0]), axis(sh, eh, H), axis(sw, ew, W)))
    return out


def _psroi_channels(params, T):
    """(output_dim, P, P) data channel read by each output (ctop, ph, pw)."""
    P, gs, od = params["pooled_size"], _group(params), params["output_dim"]
    g = np.clip(np.floor(np.arange(P, dtype=T) * T.type(gs) / T.type(P)).astype(np.int64), 0, gs - 1)
    return (np.arange(od)[:, None, None] * gs + g[None, :, None]) * gs + g[None, None, :]


def _psroi_fwd(xp, data, rois, **params):
    N, C, H, W = data.shape
    T = acc_dtype(data.dtype)
    chan = xp.asarray(_psroi_channels(params, T))
    P, od = params["pooled_size"], params["output_dim"]
    out = xp.zeros((rois.shape[0], od, P, P), dtype=T)
    for r, (b, ay, ax) in enumerate(_psroi_weights(host_array(rois), H, W, params, T)):
        if not 0 <= b < N:
            raise ValueError(
                f"_contrib_PSROIPooling: an ROI has batch index {b}, outside [0, {N}) (MXNet reads out of bounds here)"
            )
        x = data[b].astype(T, copy=False)[chan]  # (od, P, P, H, W)
        out[r] = xp.einsum("ph,cpqhw,qw->cpq", xp.asarray(ay), x, xp.asarray(ax))
    return out.astype(data.dtype, copy=False)


def _psroi_adjoint_fwd(xp, g, rois, like, **params):
    N, C, H, W = like.shape
    T = acc_dtype(g.dtype)
    chan = xp.asarray(_psroi_channels(params, T).reshape(-1))
    dx = xp.zeros((N, C, H, W), dtype=T)
    for r, (b, ay, ax) in enumerate(_psroi_weights(host_array(rois), H, W, params, T)):
        if not 0 <= b < N:
            raise ValueError(f"_contrib_PSROIPooling: an ROI has batch index {b}, outside [0, {N})")
        contrib = xp.einsum("ph,cpq,qw->cpqhw", xp.asarray(ay), g[r].astype(T, copy=False), xp.asarray(ax))
        xp.add.at(dx[b], chan, contrib.reshape(-1, H, W))  # channels repeat when group_size < pooled_size
    return dx.astype(g.dtype, copy=False)


_register_linear_in_data(
    "_contrib_PSROIPooling",
    "_psroi_pool_adjoint",
    _PSROI_PARAMS,
    _psroi_prepare,
    _psroi_fwd,
    _psroi_adjoint_fwd,
    _psroi_shape,
    "Position-sensitive ROI pooling (R-FCN): the average of each bin of output channel ctop read from "
    "data channel (ctop * group_size + gh) * group_size + gw.",
)


# ----------------------------------------------------------------------------
# RROIAlign (rotated; forward only, as MXNet)
# ----------------------------------------------------------------------------


def _rroi_shape(params, in_shapes, out_shapes, where):
    known = _roi_shapes(where, in_shapes, cols=6)
    if known is None:
        return in_shapes, out_shapes
    (_, c, _, _), (r, _) = known
    return in_shapes, [(r, c) + tuple(params["pooled_size"])]


def _rroi_matrix(roi, H, W, params, T):
    """(PH * PW, H * W) sampling matrix of one rotated ROI (the mean of its bilinear samples per bin)."""
    PH, PW = params["pooled_size"]
    scale = np.float32(params["spatial_scale"])
    cx, cy = T.type(roi[1] * scale), T.type(roi[2] * scale)
    rw, rh = max(T.type(roi[3] * scale), T.type(1)), max(T.type(roi[4] * scale), T.type(1))
    theta = T.type(float(roi[5]) * math.pi / 180.0)
    cos, sin = np.cos(theta), np.sin(theta)
    sh, sw = T.type(-rh / 2.0), T.type(-rw / 2.0)
    bh, bw = T.type(rh / T.type(PH)), T.type(rw / T.type(PW))
    sr = params["sampling_ratio"]
    gh = sr if sr > 0 else int(np.ceil(T.type(rh / T.type(PH))))
    gw = sr if sr > 0 else int(np.ceil(T.type(rw / T.type(PW))))
    ph = np.arange(PH, dtype=T)[:, None, None, None]
    pw = np.arange(PW, dtype=T)[None, :, None, None]
    iy = (np.arange(gh, dtype=T) + T.type(0.5))[None, None, :, None]
    ix = (np.arange(gw, dtype=T) + T.type(0.5))[None, None, None, :]
    yy = (sh + ph * bh) + iy * bh / T.type(gh)
    xx = (sw + pw * bw) + ix * bw / T.type(gw)
    yy, xx = np.broadcast_arrays(yy, xx)
    x = (xx * cos + yy * sin + cx).astype(T)
    y = (yy * cos - xx * sin + cy).astype(T)
    valid = ~((y < -1.0) | (y > H) | (x < -1.0) | (x > W))
    wy, _ = _interp_rows(y.reshape(-1), H, T)  # (K, H)
    wx, _ = _interp_rows(x.reshape(-1), W, T)
    per_point = (wy[:, :, None] * wx[:, None, :]) * valid.reshape(-1, 1, 1)  # (K, H, W)
    m = per_point.reshape(PH * PW, gh * gw, H * W).sum(axis=1) / T.type(gh * gw)
    return m.astype(T)


def _rroi_fwd(xp, data, rois, **params):
    N, C, H, W = data.shape
    T = acc_dtype(data.dtype)
    PH, PW = params["pooled_size"]
    out = xp.zeros((rois.shape[0], C, PH, PW), dtype=T)
    for r, roi in enumerate(host_array(rois).astype(T)):
        b = _batch_index(roi[0])
        if not 0 <= b < N:
            raise ValueError(
                f"_contrib_RROIAlign: an ROI has batch index {b}, outside [0, {N}) (MXNet reads out of bounds here)"
            )
        m = xp.asarray(_rroi_matrix(roi, H, W, params, T))
        out[r] = (data[b].astype(T, copy=False).reshape(C, H * W) @ m.T).reshape(C, PH, PW)
    return out.astype(data.dtype, copy=False)


register(
    "_contrib_RROIAlign",
    inputs=("data", "rois"),
    params={"pooled_size": Param("shape"), "spatial_scale": Param("float"), "sampling_ratio": Param("int", -1)},
    prepare=_pooled_prepare("_contrib_RROIAlign"),
    forward=_rroi_fwd,
    infer_shape=_rroi_shape,
    infer_type=_roi_types(),
    gradient=None,
    grad_undefined_reason="MXNet 1.9.1 defines no gradient for _contrib_RROIAlign (its _backward_RROIAlign aborts "
    "with 'RROIAlign: Backward is not supported'); symgrad follows it",
    no_grad_inputs=("rois",),
    doc="Rotated ROI Align: ROIs [batch, cx, cy, w, h, angle (degrees)], ROIAlign's bilinear sampling on the "
    "rotated bin grid. Forward only.",
)


# ----------------------------------------------------------------------------
# Proposal / MultiProposal (forward only; zero gradient, as MXNet's backward)
# ----------------------------------------------------------------------------

_PROPOSAL_PARAMS = {
    "rpn_pre_nms_top_n": Param("int", 6000),
    "rpn_post_nms_top_n": Param("int", 300),
    "threshold": Param("float", 0.7),
    "rpn_min_size": Param("int", 16),
    "scales": Param("floats", (4.0, 8.0, 16.0, 32.0)),
    "ratios": Param("floats", (0.5, 1.0, 2.0)),
    "feature_stride": Param("int", 16),
    "output_score": Param("bool", False),
    "iou_loss": Param("bool", False),
}


def _proposal_prepare(opname):
    def prepare(params, name):
        where = f"{opname} {name!r}"
        out = dict(params)
        check_at_least(params, "rpn_post_nms_top_n", 1, where)
        check_at_least(params, "feature_stride", 1, where)
        return out

    return prepare


def _proposal_shape(single):
    @wait_for_first_input
    def infer(params, in_shapes, out_shapes, where):
        cls = in_shapes[0]
        if len(cls) != 4 or cls[1] % 2:
            raise ShapeError(f"{where}: input 'cls_prob' has shape {tuple(cls)}; expected (N, 2 * num_anchors, H, W)")
        n, a2, h, w = cls
        a = len(params["scales"]) * len(params["ratios"])
        if a2 // 2 != a:
            raise ShapeError(
                f"{where}: input 'cls_prob' has {a2} channels = 2 * {a2 // 2} anchors, but "
                f"len(scales) * len(ratios) = {a} anchors are generated"
            )
        if single and n != 1:
            raise ShapeError(
                f"{where}: _contrib_Proposal takes one image (cls_prob batch size 1, as MXNet), got "
                f"{n}; use _contrib_MultiProposal"
            )
        want = [tuple(cls), (n, 2 * a2, h, w), (n, 3)]
        for i, name in ((1, "bbox_pred"), (2, "im_info")):
            if in_shapes[i] is not None and tuple(in_shapes[i]) != want[i]:
                raise ShapeError(f"{where}: input {name!r} has shape {tuple(in_shapes[i])}, expected {want[i]}")
        rows = n * params["rpn_post_nms_top_n"]
        return want, [(rows, 5), (rows, 1)]

    return infer


def _proposal_type(params, in_types, out_types, where):
    t = next((x for x in in_types if x is not None), None)
    if t is None:
        return in_types, out_types
    for name, x in zip(("cls_prob", "bbox_pred", "im_info"), in_types):
        check_float(where, name, x)
        if x is not None and np.dtype(x) != np.dtype(t):
            raise TypeError(
                f"{where}: input {name!r} has dtype {np.dtype(x)}, expected {np.dtype(t)} (all inputs share one dtype)"
            )
    return [t] * 3, [t, t]


def _anchors(params):
    """(A, 4) anchors of the cell at the origin, ratios outer and scales inner (MXNet's float math)."""
    f = np.float32
    base = [f(0), f(0), f(params["feature_stride"] - 1.0), f(params["feature_stride"] - 1.0)]
    w, h = base[2] - base[0] + f(1), base[3] - base[1] + f(1)
    xc, yc = f(base[0] + 0.5 * (w - 1.0)), f(base[1] + 0.5 * (h - 1.0))
    out = []
    for ratio in params["ratios"]:
        for scale in params["scales"]:
            ratio, scale = f(ratio), f(scale)
            size_ratios = np.floor(w * h / ratio)
            nw = np.floor(np.sqrt(size_ratios) + f(0.5)) * scale
            nh = np.floor(nw / scale * ratio + f(0.5)) * scale
            out.append(
                [
                    xc - f(0.5) * (nw - f(1)),
                    yc - f(0.5) * (nh - f(1)),
                    xc + f(0.5) * (nw - f(1)),
                    yc + f(0.5) * (nh - f(1)),
                ]
            )
    return np.array(out, dtype=np.float32)


def _nms(dets, thresh, limit):
    """Greedy NMS over score-sorted boxes (x1, y1, x2, y2): the kept row indices, at most ``limit``."""
    T = dets.dtype.type
    x1, y1, x2, y2 = dets.T
    area = (x2 - x1 + T(1)) * (y2 - y1 + T(1))
    suppressed = np.zeros(len(dets), dtype=bool)
    keep = []
    for i in range(len(dets)):
        if len(keep) >= limit:
            break
        if suppressed[i]:
            continue
        keep.append(i)
        j = np.arange(i + 1, len(dets))
        j = j[~suppressed[j]]
        w = np.maximum(T(0), np.minimum(x2[i], x2[j]) - np.maximum(x1[i], x1[j]) + T(1))
        h = np.maximum(T(0), np.minimum(y2[i], y2[j]) - np.maximum(y1[i], y1[j]) + T(1))
        inter = w * h
        suppressed[j[inter / (area[i] + area[j] - inter) > thresh]] = True
    return keep


def _proposals_one(fg, deltas, info, params, T):
    """(post, 4) boxes and (post,) scores of one image: fg (A, H, W), deltas (4A, H, W), info (3,)."""
    A, H, W = fg.shape
    fs = params["feature_stride"]
    shift_x = (np.arange(W) * fs)[None, :, None]
    shift_y = (np.arange(H) * fs)[:, None, None]
    anc = _anchors(params).astype(T)  # (A, 4); row index h * (W * A) + w * A + a below
    x1 = (anc[None, None, :, 0] + shift_x).astype(T)
    y1 = (anc[None, None, :, 1] + shift_y).astype(T)
    x2 = (anc[None, None, :, 2] + shift_x).astype(T)
    y2 = (anc[None, None, :, 3] + shift_y).astype(T)
    score = fg.transpose(1, 2, 0).astype(T)  # (H, W, A)
    d = deltas.reshape(A, 4, H, W).transpose(2, 3, 0, 1).astype(T)  # (H, W, A, 4)
    im_h, im_w, im_scale = (T.type(v) for v in info)
    real_h, real_w = int(im_h / T.type(fs)), int(im_w / T.type(fs))
    if real_h > H or real_w > W:
        raise ValueError(
            f"Proposal: im_info {info.tolist()} needs a {real_h} x {real_w} feature map at stride {fs}, "
            f"larger than the {H} x {W} given"
        )
    half = T.type(0.5)
    if params["iou_loss"]:
        px1, py1, px2, py2 = x1 + d[..., 0], y1 + d[..., 1], x2 + d[..., 2], y2 + d[..., 3]
    else:
        bw = x2 - x1 + T.type(1)
        bh = y2 - y1 + T.type(1)
        cx = x1 + half * (bw - T.type(1))
        cy = y1 + half * (bh - T.type(1))
        pcx, pcy = d[..., 0] * bw + cx, d[..., 1] * bh + cy
        pw, ph = np.exp(d[..., 2]) * bw, np.exp(d[..., 3]) * bh
        px1, px2 = pcx - half * (pw - T.type(1)), pcx + half * (pw - T.type(1))
        py1, py2 = pcy - half * (ph - T.type(1)), pcy + half * (ph - T.type(1))
    one = T.type(1)
    px1, px2 = (np.maximum(np.minimum(v, im_w - one), T.type(0)) for v in (px1, px2))
    py1, py2 = (np.maximum(np.minimum(v, im_h - one), T.type(0)) for v in (py1, py2))
    hh, ww = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
    padded = ((hh >= real_h) | (ww >= real_w))[:, :, None]
    score = np.where(padded, T.type(-1), score)
    boxes = np.stack([px1, py1, px2, py2], axis=-1).reshape(-1, 4).astype(T)
    score = score.reshape(-1).astype(T)
    # FilterBox: a box narrower or lower than rpn_min_size * im_scale is grown by it and scored -1
    min_size = T.type(np.float32(params["rpn_min_size"]) * np.float32(im_scale))
    small = ((boxes[:, 2] - boxes[:, 0] + one) < min_size) | ((boxes[:, 3] - boxes[:, 1] + one) < min_size)
    boxes[small] += np.array([-1, -1, 1, 1], dtype=T) * (min_size / T.type(2))
    score = np.where(small, T.type(-1), score)
    count = len(score)
    pre = params["rpn_pre_nms_top_n"]
    pre = min(pre if pre > 0 else count, count)
    post = min(params["rpn_post_nms_top_n"], pre)
    order = np.argsort(-score, kind="stable")[:pre]
    dets, sc = boxes[order], score[order]
    keep = _nms(dets, T.type(np.float32(params["threshold"])), post)
    rows = [keep[i % len(keep)] for i in range(params["rpn_post_nms_top_n"])]
    return dets[rows], sc[rows]


def _proposal_fwd(xp, cls_prob, bbox_pred, im_info, **params):
    T = acc_dtype(cls_prob.dtype)
    cls, deltas, info = host_array(cls_prob), host_array(bbox_pred), host_array(im_info)
    A = cls.shape[1] // 2
    outs, scores = [], []
    for b in range(cls.shape[0]):
        boxes, sc = _proposals_one(cls[b, A:], deltas[b], info[b], params, T)
        outs.append(np.concatenate([np.full((len(sc), 1), b, dtype=T), boxes], axis=1))
        scores.append(sc[:, None])
    dt = cls_prob.dtype
    return xp.asarray(np.concatenate(outs).astype(dt)), xp.asarray(np.concatenate(scores).astype(dt))


def _proposal_grad(F, n, g):
    # MXNet's backward writes zeros into all three input gradients (not the derivative: the boxes do
    # depend on bbox_pred); symgrad gives the same zeros
    return [F.zeros_like(x) for x in n.inputs]


for _name, _single in (("_contrib_Proposal", True), ("_contrib_MultiProposal", False)):
    register(
        _name,
        inputs=("cls_prob", "bbox_pred", "im_info"),
        params=dict(_PROPOSAL_PARAMS),
        prepare=_proposal_prepare(_name),
        num_outputs=2,
        num_visible=lambda p: 2 if p["output_score"] else 1,
        output_names=("output", "score"),
        forward=_proposal_fwd,
        infer_shape=_proposal_shape(_single),
        infer_type=_proposal_type,
        gradient=_proposal_grad,
        doc=(
            "Region proposals of an RPN for one image"
            if _single
            else "Region proposals of an RPN, per image of a batch"
        )
        + ": anchors regressed by bbox_pred, clipped, small ones filtered, sorted by foreground "
        "score, NMS; rows [batch, x1, y1, x2, y2] (and scores with output_score). Gradient: zeros, as MXNet.",
    )


# ----------------------------------------------------------------------------
# DeformablePSROIPooling (deformable position-sensitive average pooling)
# ----------------------------------------------------------------------------
#
# MXNet 1.9.1 (contrib/deformable_psroi_pooling.cc): ROI corners rounded, ``* spatial_scale - 0.5``
# (``end + 1``), size ``max(., 0.1)``; bin (ph, pw) of output channel ctop starts at ``p * bin +
# start + trans * trans_std * roi_size`` (trans (R, 2 * num_classes, part, part): channel 2 * class is x,
# 2 * class + 1 is y, class = ctop // (output_dim / num_classes), part cell floor(p / pooled * part));
# sample_per_part^2 points per bin spaced bin / sample_per_part; a point outside [-0.5, size - 0.5] on
# either axis is skipped, the others are clamped to [0, size - 1] and read bilinearly from data channel
# (ctop * group_size + gh) * group_size + gw; the output is the mean of the points read (0 if none) and
# the hidden second output ``top_count`` their number.
#
# The points form a grid (h depends on ih, w on iw only), so the valid count is n_h * n_w and every output
# is separable: out = Ay data_c Ax^T, Ay (H,) = (1/n_h) sum over valid ih of the bilinear weights of h_ih.
# In trans the output is piecewise smooth (the count is piecewise constant; kinks at integer positions):
#     d out / d trans_y = trans_std * roi_h * (Ay' data_c Ax^T),  Ay' = (1/n_h) sum k'(h_ih - i)
# (the clamped points have lo == hi, so their k' weights cancel to 0: MXNet's derivative, exactly). So one
# hidden sampling op with derivative orders (order_y, order_x) in {0, 1}^2, its adjoint in data (a
# scatter), and a linear "pack" of per-output values into the trans layout (adjoint: "unpack") close every
# order of differentiation, as for DeformableConvolution (symgrad/ops/vision.py):
#     d data   <G, S_ab> = scatter_ab(G)
#     d trans  <G, S_ab> = pack_x(G * S_a(b+1)) + pack_y(G * S_(a+1)b)     (orders > 1 vanish)
#     <H, scatter_ab(G)> = <S_ab(H), G>  -> d G = S_ab(H), d trans as above with data -> H, head -> G.

_DPSROI_PARAMS = {
    "spatial_scale": Param("float"),
    "output_dim": Param("int"),
    "group_size": Param("int"),
    "pooled_size": Param("int"),
    "part_size": Param("int", 0),
    "sample_per_part": Param("int", 1),
    "trans_std": Param("float", 0.0),
    "no_trans": Param("bool", False),
}


def _dpsroi_prepare(opname):
    def prepare(params, name):
        where = f"{opname} {name!r}"
        _check_scale(where, params)
        for k in ("output_dim", "group_size", "pooled_size", "sample_per_part"):
            if params[k] < 1:
                raise ParamError(f"{where}: parameter {k!r} must be >= 1, got {params[k]}")
        if params["part_size"] < 0:
            raise ParamError(f"{where}: parameter 'part_size' must be >= 0 (0: pooled_size), got {params['part_size']}")
        if not 0.0 <= params["trans_std"] <= 1.0:
            raise ParamError(f"{where}: parameter 'trans_std' must be in [0, 1] (as MXNet), got {params['trans_std']}")
        for k in ("order_y", "order_x"):
            if k in params and params[k] not in (0, 1):
                raise ParamError(f"{where}: parameter {k!r} must be 0 or 1, got {params[k]}")
        if "direction" in params and params["direction"] not in (0, 1):
            raise ParamError(f"{where}: parameter 'direction' must be 0 (x) or 1 (y), got {params['direction']}")
        return params

    return prepare


def _dpsroi_inputs(params):
    return ["data", "rois"] if params["no_trans"] else ["data", "rois", "trans"]


def _part(params):
    return params["part_size"] or params["pooled_size"]


def _dpsroi_shape(params, in_shapes, out_shapes, where):
    known = _roi_shapes(where, in_shapes)
    trans = None if params["no_trans"] else in_shapes[2]
    od, gs, P, part = params["output_dim"], params["group_size"], params["pooled_size"], _part(params)
    if trans is not None:
        if len(trans) != 4 or trans[1] % 2 or trans[1] == 0 or tuple(trans[2:]) != (part, part):
            raise ShapeError(
                f"{where}: input 'trans' has shape {tuple(trans)}; expected (num_rois, 2 * num_classes, "
                f"part_size, part_size) with part_size {part}"
            )
        if od % (trans[1] // 2):
            raise ShapeError(
                f"{where}: input 'trans' {tuple(trans)} has {trans[1] // 2} classes, which must divide output_dim={od}"
            )
    if known is None:
        return in_shapes, out_shapes
    (_, c, _, _), (r, _) = known
    if c < od * gs * gs:
        raise ShapeError(
            f"{where}: data has {c} channels; output_dim * group_size^2 = {od} * {gs}^2 = {od * gs * gs} are needed"
        )
    if trans is not None and trans[0] != r:
        raise ShapeError(f"{where}: input 'trans' has shape {tuple(trans)}; its first axis must be the {r} ROIs")
    return in_shapes, [(r, od, P, P), (r, od, P, P)]


def _dpsroi_types(params, in_types, out_types, where="op"):
    ins, outs = _roi_types()(params, in_types[:2], out_types[:1], where)
    t = ins[0]
    if t is None:
        return in_types, out_types
    if len(in_types) > 2:
        check_float(where, "trans", in_types[2])
        if in_types[2] is not None and np.dtype(in_types[2]) != np.dtype(t):
            raise TypeError(
                f"{where}: input 'trans' has dtype {np.dtype(in_types[2])}, expected the data's dtype {np.dtype(t)}"
            )
        ins = ins + [t]
    return ins, [outs[0]] * len(out_types)


def _dpsroi_axis(pos, size, order, T):
    """(..., size) weights of the points ``pos`` (..., S) on one axis: the mean over the valid points of
    their bilinear weights (order 0) or of the kernel's derivative (order 1), and the valid count (...)."""
    valid = (pos >= T.type(-0.5)) & (pos <= T.type(size - 0.5))
    c = np.clip(pos, T.type(0), T.type(size - 1))
    lo, hi = np.floor(c), np.ceil(c)
    if order == 0:
        w_lo, w_hi = T.type(1) - (c - lo), c - lo
    else:
        w_lo, w_hi = np.full(c.shape, T.type(-1)), np.full(c.shape, T.type(1))
    w_lo, w_hi = w_lo * valid, w_hi * valid
    lead = pos.shape[:-1]
    out = np.zeros((math.prod(lead), size), dtype=T)
    rows = np.repeat(np.arange(math.prod(lead)), pos.shape[-1])
    np.add.at(out, (rows, lo.astype(np.int64).reshape(-1)), w_lo.reshape(-1).astype(T))
    np.add.at(out, (rows, hi.astype(np.int64).reshape(-1)), w_hi.reshape(-1).astype(T))
    count = valid.sum(axis=-1)
    out = out.reshape(lead + (size,)) / np.maximum(count, 1)[..., None].astype(T)
    return out.astype(T), count


def _part_index(params, T):
    """(P,) part cell of each bin row / column: floor(p / pooled_size * part_size) in dtype T (as MXNet)."""
    P = params["pooled_size"]
    return np.floor(np.arange(P, dtype=T) / T.type(P) * T.type(_part(params))).astype(np.int64)


def _dpsroi_geometry(rois, trans, H, W, params, T, order_y=0, order_x=0):
    """Per ROI: (batch index, Ay (od, P, P, H), Ax (od, P, P, W), count (od, P, P)); Ay / Ax carry the
    chain factors (trans_std * roi size)^order of a derivative in trans."""
    P, od, part, spp = params["pooled_size"], params["output_dim"], _part(params), params["sample_per_part"]
    scale = _scale(params, T)
    tstd = T.type(np.float32(params["trans_std"]))
    ncls = 1 if trans is None else trans.shape[1] // 2
    cls = np.arange(od) // (od // ncls)
    p = np.arange(P, dtype=T)
    part_idx = _part_index(params, T)
    half = T.type(0.5)
    out = []
    for r, roi in enumerate(rois.astype(T)):
        c = _round_half_away(roi[1:5]).astype(T)
        sw, sh = c[0] * scale - half, c[1] * scale - half
        ew, eh = (c[2] + T.type(1)) * scale - half, (c[3] + T.type(1)) * scale - half
        rw, rh = max(ew - sw, T.type(0.1)), max(eh - sh, T.type(0.1))
        bw, bh = T.type(rw / T.type(P)), T.type(rh / T.type(P))
        subw, subh = T.type(bw / T.type(spp)), T.type(bh / T.type(spp))
        if trans is None:
            tx = ty = np.zeros((od, P, P), dtype=T)
        else:
            tr = trans[r].astype(T).reshape(ncls, 2, part, part)[:, :, part_idx[:, None], part_idx[None, :]]
            tx, ty = tr[cls, 0] * tstd, tr[cls, 1] * tstd  # (od, P, P)
        ws = (p[None, None, :] * bw + sw + tx * rw).astype(T)
        hs = (p[None, :, None] * bh + sh + ty * rh).astype(T)
        i = np.arange(spp, dtype=T)
        ay, ny = _dpsroi_axis((hs[..., None] + i * subh).astype(T), H, order_y, T)
        ax, nx = _dpsroi_axis((ws[..., None] + i * subw).astype(T), W, order_x, T)
        if order_y:
            ay = ay * (tstd * rh)
        if order_x:
            ax = ax * (tstd * rw)
        out.append((_batch_index(roi[0]), ay, ax, (ny * nx).astype(T)))
    return out


def _dpsroi_channels(params, T):
    """(output_dim, P, P) data channel read by each output (ctop, ph, pw)."""
    P, gs, od = params["pooled_size"], params["group_size"], params["output_dim"]
    g = np.clip(np.floor(np.arange(P, dtype=T) * T.type(gs) / T.type(P)).astype(np.int64), 0, gs - 1)
    return (np.arange(od)[:, None, None] * gs + g[None, :, None]) * gs + g[None, None, :]


def _dpsroi_check_batch(b, N):
    if not 0 <= b < N:
        raise ValueError(
            f"_contrib_DeformablePSROIPooling: an ROI has batch index {b}, outside [0, {N}) (MXNet "
            f"reads out of bounds here)"
        )


def _dpsroi_split(args, params):
    """(rois, trans or None, rest) of a hidden op's inputs after its first one."""
    if params["no_trans"]:
        return args[0], None, args[1:]
    return args[0], args[1], args[2:]


def _dpsroi_sample(xp, data, rois, trans, params, order_y=0, order_x=0):
    N, C, H, W = data.shape
    T = acc_dtype(data.dtype)
    chan = xp.asarray(_dpsroi_channels(params, T))
    P, od = params["pooled_size"], params["output_dim"]
    out = xp.zeros((rois.shape[0], od, P, P), dtype=T)
    counts = np.zeros((rois.shape[0], od, P, P), dtype=T)
    tr = None if trans is None else host_array(trans)
    for r, (b, ay, ax, cnt) in enumerate(_dpsroi_geometry(host_array(rois), tr, H, W, params, T, order_y, order_x)):
        _dpsroi_check_batch(b, N)
        x = data[b].astype(T, copy=False)[chan]  # (od, P, P, H, W)
        out[r] = xp.einsum("cpqh,cpqhw,cpqw->cpq", xp.asarray(ay), x, xp.asarray(ax))
        counts[r] = cnt
    return out.astype(data.dtype, copy=False), xp.asarray(counts.astype(data.dtype))


def _dpsroi_scatter(xp, g, rois, trans, like, params, order_y=0, order_x=0):
    N, C, H, W = like.shape
    T = acc_dtype(g.dtype)
    chan = xp.asarray(_dpsroi_channels(params, T).reshape(-1))
    dx = xp.zeros((N, C, H, W), dtype=T)
    tr = None if trans is None else host_array(trans)
    for r, (b, ay, ax, _) in enumerate(_dpsroi_geometry(host_array(rois), tr, H, W, params, T, order_y, order_x)):
        _dpsroi_check_batch(b, N)
        contrib = xp.einsum("cpqh,cpq,cpqw->cpqhw", xp.asarray(ay), g[r].astype(T, copy=False), xp.asarray(ax))
        xp.add.at(dx[b], chan, contrib.reshape(-1, H, W))  # channels repeat when group_size < pooled_size
    return dx.astype(g.dtype, copy=False)


def _dpsroi_fwd(xp, data, rois, trans=None, **params):
    return _dpsroi_sample(xp, data, rois, trans, params)


def _dpsroi_trans_gradient(F, head, data, rois, trans, a, b, params):
    """Gradient in trans of <head, S_ab(data)>: x (direction 0) from order (a, b+1), y from (a+1, b)."""
    p = {k: params[k] for k in _DPSROI_PARAMS}
    terms = []
    for direction, (oy, ox) in enumerate(((a, b + 1), (a + 1, b))):
        if oy > 1 or ox > 1:  # k'' = 0 away from the kinks
            continue
        deriv = F._deformable_psroi_sample(data, rois, trans, order_y=oy, order_x=ox, **p)
        terms.append(F._deformable_psroi_trans_pack(head * deriv, trans, direction=direction, **p))
    if not terms:
        return F.zeros_like(trans)
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _dpsroi_node(n):
    """(geometry parameters, trans or None, trans as the 0 or 1 extra call arguments) of a node of the
    DeformablePSROIPooling family (inputs data/ograd, rois[, trans], ...)."""
    p = {k: n.params[k] for k in _DPSROI_PARAMS}
    trans = None if p["no_trans"] else n.inputs[2]
    return p, trans, () if trans is None else (trans,)


def _sample_grads(F, n, g, a, b):
    """Gradients of S_ab(data; rois, trans) (the rule at ``_dpsroi_grad``) with head ``g[0]``."""
    p, trans, tin = _dpsroi_node(n)
    data, rois = n.inputs[:2]
    out = [F._deformable_psroi_scatter(g[0], rois, *tin, data, order_y=a, order_x=b, **p) if n.needs[0] else None, None]
    if trans is not None:
        out.append(_dpsroi_trans_gradient(F, g[0], data, rois, trans, a, b, p) if n.needs[2] else None)
    return out


def _dpsroi_grad(F, n, g):
    # out = S_00(data; rois, trans): linear in data (adjoint: scatter), trans via the next derivative order;
    # top_count is piecewise constant (its head gradient is ignored); rois get none (MXNet writes zeros)
    return _sample_grads(F, n, g, 0, 0)


register(
    "_contrib_DeformablePSROIPooling",
    inputs=_dpsroi_inputs,
    params=dict(_DPSROI_PARAMS),
    prepare=_dpsroi_prepare("_contrib_DeformablePSROIPooling"),
    num_outputs=2,
    num_visible=1,
    output_names=("output", "top_count"),
    forward=_dpsroi_fwd,
    infer_shape=_dpsroi_shape,
    infer_type=_dpsroi_types,
    gradient=_dpsroi_grad,
    no_grad_inputs=("rois",),
    doc="Deformable position-sensitive ROI pooling (Deformable ConvNets): PSROIPooling's bins shifted by "
    "trans * trans_std * roi size per part cell and class, each the mean of sample_per_part^2 bilinear "
    "samples; hidden output top_count (number of samples read).",
)


def _dpsroi_order_params():
    return {**_DPSROI_PARAMS, "order_y": Param("int", 0), "order_x": Param("int", 0)}


def _dpsroi_sample_shape(params, in_shapes, out_shapes, where):
    ins, outs = _dpsroi_shape(params, in_shapes, out_shapes, where)
    return ins, outs[:1]


def _dpsroi_sample_fwd(xp, data, *args, order_y=0, order_x=0, **params):
    rois, trans, _ = _dpsroi_split(args, params)
    return _dpsroi_sample(xp, data, rois, trans, params, order_y, order_x)[0]


def _dpsroi_sample_grad(F, n, g):
    return _sample_grads(F, n, g, n.params["order_y"], n.params["order_x"])


register(
    "_deformable_psroi_sample",
    inputs=_dpsroi_inputs,
    params=_dpsroi_order_params(),
    prepare=_dpsroi_prepare("_deformable_psroi_sample"),
    forward=_dpsroi_sample_fwd,
    infer_shape=_dpsroi_sample_shape,
    infer_type=_dpsroi_types,
    gradient=_dpsroi_sample_grad,
    no_grad_inputs=("rois",),
    doc="DeformablePSROIPooling's output, or its derivative of order (order_y, order_x) in the bin positions "
    "times (trans_std * roi size)^order (hidden).",
)


def _dpsroi_scatter_fwd(xp, g, *args, order_y=0, order_x=0, **params):
    rois, trans, (like,) = _dpsroi_split(args, params)
    return _dpsroi_scatter(xp, g, rois, trans, like, params, order_y, order_x)


def _dpsroi_scatter_grad(F, n, g):
    # <H, scatter_ab(G)> = <S_ab(H), G>: d G = S_ab(H); d trans as S_ab's with data -> H and head -> G
    p, trans, tin = _dpsroi_node(n)
    a, b = n.params["order_y"], n.params["order_x"]
    gin, rois = n.inputs[:2]
    out = [F._deformable_psroi_sample(g[0], rois, *tin, order_y=a, order_x=b, **p) if n.needs[0] else None, None]
    if trans is not None:
        out.append(_dpsroi_trans_gradient(F, gin, g[0], rois, trans, a, b, p) if n.needs[2] else None)
    return out + [None]


register(
    "_deformable_psroi_scatter",
    inputs=lambda p: ["ograd", "rois"] + ([] if p["no_trans"] else ["trans"]) + ["like"],
    params=_dpsroi_order_params(),
    prepare=_dpsroi_prepare("_deformable_psroi_scatter"),
    forward=_dpsroi_scatter_fwd,
    infer_shape=lambda p, i, o, w: (i, [i[-1]]),
    infer_type=output_like(0),
    gradient=_dpsroi_scatter_grad,
    no_grad_inputs=("rois", "like"),
    doc="Adjoint of _deformable_psroi_sample in data (hidden; ``like`` gives the data shape).",
)


def _trans_index(params, trans_shape, T):
    """(od, P, P) flat index into one ROI's trans (2 * num_classes, part, part) of each output's x entry
    (the y entry is part^2 further)."""
    od, part = params["output_dim"], _part(params)
    ncls = trans_shape[1] // 2
    cls = np.arange(od) // (od // ncls)
    part_idx = _part_index(params, T)
    return ((cls[:, None, None] * 2) * part + part_idx[None, :, None]) * part + part_idx[None, None, :]


def _trans_pack_fwd(xp, vals, like, *, direction, **params):
    R = vals.shape[0]
    size = math.prod(like.shape[1:])
    idx = _trans_index(params, like.shape, acc_dtype(vals.dtype)).reshape(-1) + direction * _part(params) ** 2
    flat = (np.arange(R)[:, None] * size + idx[None, :]).reshape(-1)
    out = xp.zeros(R * size, dtype=vals.dtype)
    xp.add.at(out, xp.asarray(flat), vals.reshape(-1))
    return out.reshape(like.shape)


def _trans_unpack_fwd(xp, g, like, *, direction, **params):
    R = g.shape[0]
    idx = _trans_index(params, g.shape, acc_dtype(g.dtype)).reshape(-1) + direction * _part(params) ** 2
    return g.reshape(R, -1)[:, xp.asarray(idx)].reshape(like.shape)


_TRANS_PACK_PARAMS = {**_DPSROI_PARAMS, "direction": Param("int", 0)}

register(
    "_deformable_psroi_trans_pack",
    inputs=("data", "like"),
    params=dict(_TRANS_PACK_PARAMS),
    prepare=_dpsroi_prepare("_deformable_psroi_trans_pack"),
    forward=_trans_pack_fwd,
    infer_shape=output_like(1),
    infer_type=output_like(0),
    # linear; adjoint: read each output's trans entry back (unpack)
    gradient=lambda F, n, g: [F._deformable_psroi_trans_unpack(g[0], n.inputs[0], **n.params), None],
    no_grad_inputs=("like",),
    doc="Per-output values (R, od, P, P) summed into one direction (0: x, 1: y) of the trans layout (hidden).",
)
register(
    "_deformable_psroi_trans_unpack",
    inputs=("ograd", "like"),
    params=dict(_TRANS_PACK_PARAMS),
    prepare=_dpsroi_prepare("_deformable_psroi_trans_unpack"),
    forward=_trans_unpack_fwd,
    infer_shape=output_like(1),
    infer_type=output_like(0),
    gradient=lambda F, n, g: [F._deformable_psroi_trans_pack(g[0], n.inputs[0], **n.params), None],
    no_grad_inputs=("like",),
    doc="Adjoint of _deformable_psroi_trans_pack (hidden).",
)
