"""RNN: MXNet 1.9.1's fused recurrent layers (vanilla relu/tanh, LSTM with optional projection, GRU).

Layout (as MXNet's ``rnn-inl.h`` / ``rnn_impl.h`` and cuDNN):

- ``data`` is (T, N, I) (time major); ``state`` (L*D, N, O) and ``state_cell`` (L*D, N, H) hold layer
  ``l``, direction ``d`` at ``l*D + d`` (D = 2 when bidirectional, O = projection_size or state_size H).
- ``parameters`` is one flat vector: first every weight, per layer and per direction ``W_x`` (G*H, I_l),
  ``W_h`` (G*H, O) and, for LSTMP, ``W_r`` (P, H); then every bias, per layer and direction ``b_x`` (G*H)
  and ``b_h`` (G*H). G = 1, 4 (gates i, f, g, o) or 3 (gates r, z, n); I_l = I for layer 0, else D*O.
- a layer's output is its forward direction's h next to its reverse direction's (which runs t = T-1 ... 0);
  layer l + 1 reads it, through dropout (keep / (1 - p), training only) between layers, never after the
  last one.

Cells (x_t's projections ``a = W_x x_t + b_x``, the state's ``b = W_h h + b_h``, sigma the logistic):

- rnn_tanh / rnn_relu: ``h' = act(a + b)``;
- lstm: ``i, f, g, o = sigma, sigma, tanh, sigma (a + b)``, ``c' = f c + i g`` (clipped to
  ``[lstm_state_clip_min, lstm_state_clip_max]`` when given), ``h' = o tanh(c')``, LSTMP ``h' = W_r (o tanh c')``;
- gru (cuDNN's form): ``r, z = sigma(a_r + b_r), sigma(a_z + b_z)``, ``n = tanh(a_n + r * b_n)``,
  ``h' = (1 - z) n + z h``.

With ``use_sequence_length`` each batch element b only runs its first ``len_b`` steps: outputs past them
are 0, the final states are those after the last valid step, and the reverse direction starts at step
``len_b - 1``. MXNet 1.9.1 runs that (and state clipping) on cuDNN only; this follows cuDNN's semantics:
the clipped cell state is the one carried on and returned (its derivative is 1 inside the range and 0
outside), and with ``lstm_state_clip_nan`` a NaN cell state is clipped like ``fmin(fmax(c, min), max)``
does (to min). MXNet 1.9.1's CPU kernels cannot train LSTMP (their inference forward matches this one).

One MXNet quirk is not copied: its CPU relu cell returns ``static_cast<float>(x)``, so float64 rnn_relu
activations are rounded to float32 there; here they stay float64.

The gradient is one fused BPTT, the hidden ``_backward_RNN`` (numpy/cupy), which recomputes the forward
and returns the gradients of data, parameters, state and state_cell at once; it has no gradient rule, so
second-order gradients through RNN raise an error naming it.
"""

from __future__ import annotations

import numpy as np

from ..base import ParamError, ShapeError
from ..opdef import Param, acc_dtype, check_at_least, check_float, expect_input_shape, register, wait_for_first_input

_GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}

_RNN_PARAMS = {
    "state_size": Param("int"),
    "num_layers": Param("int"),
    "bidirectional": Param("bool", False),
    "mode": Param("str", choices=tuple(_GATES)),
    "p": Param("float", 0.0),
    "state_outputs": Param("bool", False),
    "projection_size": Param("int", None),
    "lstm_state_clip_min": Param("float", None),
    "lstm_state_clip_max": Param("float", None),
    "lstm_state_clip_nan": Param("bool", False),
    "use_sequence_length": Param("bool", False),
}


# ----------------------------------------------------------------------------
# Parameters, inputs and the packed layout
# ----------------------------------------------------------------------------


def _prepare(params, node_name):
    where = f"RNN {node_name!r}"
    mode = params["mode"]
    check_at_least(params, "state_size", 1, where)
    check_at_least(params, "num_layers", 1, where)
    if not 0.0 <= params["p"] < 1.0:
        raise ParamError(f"{where}: parameter 'p' (dropout between layers) must be in [0, 1), got {params['p']}")
    proj = params["projection_size"]
    if proj is not None:
        if mode != "lstm":
            raise ParamError(
                f"{where}: parameter 'projection_size' is only supported for mode='lstm', got mode={mode!r}"
            )
        if not 1 <= proj <= params["state_size"]:
            raise ParamError(
                f"{where}: parameter 'projection_size' must be in [1, state_size={params['state_size']}], got {proj}"
            )
    lo, hi = params["lstm_state_clip_min"], params["lstm_state_clip_max"]
    if lo is not None or hi is not None:
        if mode != "lstm":
            raise ParamError(
                f"{where}: parameters 'lstm_state_clip_min'/'lstm_state_clip_max' are only supported "
                f"for mode='lstm', got mode={mode!r}"
            )
        if lo is None or hi is None:
            raise ParamError(
                f"{where}: parameters 'lstm_state_clip_min' and 'lstm_state_clip_max' must be given "
                f"together, got min={lo} and max={hi}"
            )
        if hi < lo:
            raise ParamError(f"{where}: parameter 'lstm_state_clip_max'={hi} must be >= 'lstm_state_clip_min'={lo}")
    return params


def _input_names(params):
    names = ["data", "parameters", "state"]
    if params["mode"] == "lstm":
        names.append("state_cell")
    if params["use_sequence_length"]:
        names.append("sequence_length")
    return names


def _n_visible(params):
    if not params["state_outputs"]:
        return 1
    return 3 if params["mode"] == "lstm" else 2


def _output_names(params):
    names = ["output"]
    if params["state_outputs"]:
        names.append("state_output")
        if params["mode"] == "lstm":
            names.append("statecell_output")
    return names + ["dropout_mask"]


def _dims(params):
    """(L, D, H, O, G): layers, directions, state size, recurrent (output) size, gates."""
    H = params["state_size"]
    O = params["projection_size"] or H  # noqa: E741 (MXNet's P-or-H)
    return params["num_layers"], 2 if params["bidirectional"] else 1, H, O, _GATES[params["mode"]]


def _param_size(params, input_size: int) -> int:
    """Length of the packed ``parameters`` vector (MXNet's GetRnnParamSize)."""
    L, D, H, O, G = _dims(params)
    total = 0
    for layer in range(L):
        i_l = input_size if layer == 0 else D * O
        total += D * (G * H * (i_l + O) + (O * H if params["projection_size"] else 0) + 2 * G * H)
    return total


def _unpack(w, params, input_size):
    """Views into the flat vector ``w``: one dict (wx, wh, wr or None, bx, bh) per (layer, direction)."""
    L, D, H, O, G = _dims(params)
    P = params["projection_size"]
    cells, off = [], 0
    for layer in range(L):
        i_l = input_size if layer == 0 else D * O
        for _ in range(D):
            cell = {"wx": w[off : off + G * H * i_l].reshape(G * H, i_l)}
            off += G * H * i_l
            cell["wh"] = w[off : off + G * H * O].reshape(G * H, O)
            off += G * H * O
            cell["wr"] = None
            if P:
                cell["wr"] = w[off : off + P * H].reshape(P, H)
                off += P * H
            cells.append(cell)
    for cell in cells:
        cell["bx"] = w[off : off + G * H]
        cell["bh"] = w[off + G * H : off + 2 * G * H]
        off += 2 * G * H
    return cells


@wait_for_first_input
def _rnn_shape(params, in_shapes, out_shapes, where):
    names = _input_names(params)
    x = in_shapes[0]
    if len(x) != 3:
        raise ShapeError(
            f"{where}: input 'data' has shape {tuple(x)}; RNN needs 3-d data (sequence length, batch, input size)"
        )
    T, N, I = x  # noqa: E741
    L, D, H, O, G = _dims(params)
    want = {
        "data": tuple(x),
        "parameters": (_param_size(params, I),),
        "state": (L * D, N, O),
        "state_cell": (L * D, N, H),
        "sequence_length": (N,),
    }
    last = "projection_size" if params["projection_size"] else "state_size"
    details = {
        "parameters": f"the packed weights and biases of {L} layer(s) of mode={params['mode']!r}, "
        f"state_size={H}, input size {I}",
        "state": f"(num_layers*directions, batch, {last})",
        "state_cell": "(num_layers*directions, batch, state_size)",
        "sequence_length": "(batch,)",
    }
    ins = list(in_shapes)
    for k, name in enumerate(names):
        note = f" ({details[name]})" if name in details else ""
        expect_input_shape(ins, k, name, want[name], where, note)
    outs = [(T, N, D * O)]
    if params["state_outputs"]:
        outs.append((L * D, N, O))
        if params["mode"] == "lstm":
            outs.append((L * D, N, H))
    outs.append((L - 1, T, N, D * O))  # the hidden dropout mask between layers
    return ins, outs


def _rnn_type(params, in_types, out_types, where):
    names = _input_names(params)
    dt = in_types[0]
    if dt is None:
        return in_types, out_types
    check_float(where, "data", dt)
    dt = np.dtype(dt)
    ins = []
    for name, t in zip(names, in_types):
        if name == "sequence_length":  # its own index type (int or float), as MXNet's IType
            ins.append(t if t is not None else dt)
            continue
        if t is not None and np.dtype(t) != dt:
            raise TypeError(f"{where}: input {name!r} has dtype {np.dtype(t)}, expected {dt} (the dtype of 'data')")
        ins.append(dt)
    return ins, [dt] * (_n_visible(params) + 1)


# ----------------------------------------------------------------------------
# Cells: one step forward (with what its backward needs) and one step backward
# ----------------------------------------------------------------------------


def _sigmoid(xp, a):
    return 0.5 * (xp.tanh(0.5 * a) + 1.0)  # = 1 / (1 + exp(-a)), without overflow


def _step(xp, mode, ax, h, c, cell, clip):
    """One step: ``ax`` = W_x x_t + b_x (N, G*H); returns (h', c', cache)."""
    b = h @ cell["wh"].T + cell["bh"]
    if mode in ("rnn_tanh", "rnn_relu"):
        pre = ax + b
        hn = xp.tanh(pre) if mode == "rnn_tanh" else xp.maximum(pre, 0)
        return hn, None, (h, pre, hn)
    H = b.shape[1] // _GATES[mode]
    if mode == "gru":
        r = _sigmoid(xp, ax[:, :H] + b[:, :H])
        z = _sigmoid(xp, ax[:, H : 2 * H] + b[:, H : 2 * H])
        n = xp.tanh(ax[:, 2 * H :] + r * b[:, 2 * H :])
        return (1 - z) * n + z * h, None, (h, r, z, n, b[:, 2 * H :])
    pre = ax + b
    i, f, o = (_sigmoid(xp, pre[:, k * H : (k + 1) * H]) for k in (0, 1, 3))
    g = xp.tanh(pre[:, 2 * H : 3 * H])
    craw = f * c + i * g
    cn = craw
    if clip is not None:
        lo, hi, nan = clip
        cn = xp.clip(craw, lo, hi)
        if nan:  # stop NaN: clipped like fmin(fmax(c, lo), hi) clips it (to lo)
            cn = xp.where(xp.isnan(craw), craw.dtype.type(lo), cn)
    tc = xp.tanh(cn)
    hc = o * tc
    hn = hc if cell["wr"] is None else hc @ cell["wr"].T
    return hn, cn, (h, c, i, f, g, o, craw, tc, hc)


def _step_back(xp, mode, dhn, dcn, cache, cell, grads, clip):
    """Backward of one step. ``dhn``/``dcn``: gradients of h'/c'. Accumulates into ``grads`` (views of the
    flat parameter gradient) the W_h, b_h (and W_r) terms; returns (d ax, dh, dc)."""
    if mode in ("rnn_tanh", "rnn_relu"):
        h, pre, hn = cache
        # h' = act(pre): tanh' = 1 - h'^2, relu' = [pre > 0]
        da = dhn * (1 - hn * hn) if mode == "rnn_tanh" else dhn * (pre > 0)
        dax = dab = da
        dh, dc = 0, None
    elif mode == "gru":
        h, r, z, n, bn = cache
        # h' = (1 - z) n + z h;  n = tanh(a_n + r b_n);  r = sigma(a_r + b_r), z = sigma(a_z + b_z)
        dn = dhn * (1 - z)
        dz = dhn * (h - n)
        dh, dc = dhn * z, None
        dan = dn * (1 - n * n)  # d(a_n + r b_n)
        dr = dan * bn
        dar = dr * r * (1 - r)
        daz = dz * z * (1 - z)
        dax = xp.concatenate([dar, daz, dan], axis=1)
        dab = xp.concatenate([dar, daz, dan * r], axis=1)  # b_n enters scaled by r
    else:
        h, c, i, f, g, o, craw, tc, hc = cache
        # LSTMP: h' = W_r hc  ->  dW_r += dh' hc^T, dhc = W_r^T dh'
        if cell["wr"] is not None:
            grads["wr"] += dhn.T @ hc
            dhc = dhn @ cell["wr"]
        else:
            dhc = dhn
        # hc = o tanh(c');  c' = clip(f c + i g)  (derivative 1 inside [lo, hi], 0 outside)
        do = dhc * tc
        dc_ = dcn + dhc * o * (1 - tc * tc)
        if clip is not None:
            dc_ = dc_ * ((craw >= clip[0]) & (craw <= clip[1]))
        dax = xp.concatenate(
            [dc_ * g * i * (1 - i), dc_ * c * f * (1 - f), dc_ * i * (1 - g * g), do * o * (1 - o)], axis=1
        )
        dab = dax
        dh, dc = 0, dc_ * f
    # b = W_h h + b_h  ->  dW_h += db h^T, db_h += db, dh += W_h^T db
    grads["wh"] += dab.T @ h
    grads["bh"] += dab.sum(axis=0)
    return dax, dh + dab @ cell["wh"], dc


# ----------------------------------------------------------------------------
# The whole network, forward (with caches) and backward
# ----------------------------------------------------------------------------


def _lengths_mask(xp, lens, T, N):
    """(T, N, 1) bool: step t of batch element b is valid (t < len_b); None without sequence lengths."""
    if lens is None:
        return None
    lens_i = lens.astype(np.int64) if lens.dtype.kind != "f" else xp.floor(lens).astype(np.int64)
    if bool(((lens_i < 0) | (lens_i > T)).any()):
        raise ValueError(
            f"RNN: every entry of input 'sequence_length' must be in [0, {T}] (the sequence length of "
            f"'data'), got {lens.tolist() if hasattr(lens, 'tolist') else lens}"
        )
    return (xp.arange(T).reshape(T, 1) < lens_i.reshape(1, N)).reshape(T, N, 1)


def _clip(params):
    if params["lstm_state_clip_min"] is None:
        return None
    return params["lstm_state_clip_min"], params["lstm_state_clip_max"], params["lstm_state_clip_nan"]


def _split_inputs(params, inputs):
    data, w, hx = inputs[:3]
    rest = list(inputs[3:])
    cx = rest.pop(0) if params["mode"] == "lstm" else None
    lens = rest.pop(0) if params["use_sequence_length"] else None
    return data, w, hx, cx, lens, rest


def _run(xp, params, data, w, hx, cx, lens, drop, keep):
    """Forward of every layer. ``drop``: (L-1, T, N, D*O) dropout masks or None. With ``keep`` also returns
    the per-layer inputs and per-step caches for ``_backprop``."""
    mode = params["mode"]
    L, D, H, O, G = _dims(params)
    T, N, I = data.shape  # noqa: E741
    acc = acc_dtype(data.dtype)
    cells = _unpack(w.astype(acc, copy=False), params, I)
    valid = _lengths_mask(xp, lens, T, N)
    clip = _clip(params)
    x = data.astype(acc, copy=False)
    hy = xp.zeros((L * D, N, O), dtype=acc)
    cy = xp.zeros((L * D, N, H), dtype=acc)
    tape = []
    for layer in range(L):
        if layer > 0 and drop is not None:
            x = x * drop[layer - 1].astype(acc, copy=False)
        y = xp.zeros((T, N, D * O), dtype=acc)
        layer_tape = {"x": x, "dirs": []}
        for d in range(D):
            k = layer * D + d
            cell = cells[k]
            ax = x @ cell["wx"].T + cell["bx"]  # (T, N, G*H): every step's input projection at once
            h = hx[k].astype(acc, copy=False)
            c = cx[k].astype(acc, copy=False) if cx is not None else None
            caches = [None] * T
            for t in range(T - 1, -1, -1) if d else range(T):
                hn, cn, cache = _step(xp, mode, ax[t], h, c, cell, clip)
                if valid is None:
                    y[t, :, d * O : (d + 1) * O] = hn
                    h, c = hn, cn
                else:  # steps past a sequence's length leave its state as it was and output 0
                    m = valid[t]
                    y[t, :, d * O : (d + 1) * O] = xp.where(m, hn, 0)
                    h = xp.where(m, hn, h)
                    c = None if c is None else xp.where(m, cn, c)
                caches[t] = cache
            hy[k] = h
            if c is not None:
                cy[k] = c
            layer_tape["dirs"].append(caches)
        if keep:
            tape.append(layer_tape)
        x = y
    return x, hy, cy, (tape, cells, valid, clip)


def _backprop(xp, params, w, dy, dhy, dcy, drop, saved, in_shape):
    """BPTT through the tape of ``_run``: (d data, d parameters, d state, d state_cell) in the compute dtype."""
    tape, _, valid, clip = saved
    mode = params["mode"]
    L, D, H, O, G = _dims(params)
    T, N, I = in_shape  # noqa: E741
    acc = dy.dtype
    cells = _unpack(w.astype(acc, copy=False), params, I)
    dw = xp.zeros(w.shape, dtype=acc)
    dcells = _unpack(dw, params, I)
    dhx = xp.zeros((L * D, N, O), dtype=acc)
    dcx = xp.zeros((L * D, N, H), dtype=acc)
    for layer in range(L - 1, -1, -1):
        x = tape[layer]["x"]
        dx = xp.zeros(x.shape, dtype=acc)
        for d in range(D):
            k = layer * D + d
            cell, grads, caches = cells[k], dcells[k], tape[layer]["dirs"][d]
            dh = dhy[k] if dhy is not None else xp.zeros((N, O), dtype=acc)
            dc = (
                dcy[k]
                if (dcy is not None and mode == "lstm")
                else (xp.zeros((N, H), dtype=acc) if mode == "lstm" else None)
            )
            dax = xp.zeros((T, N, G * H), dtype=acc)
            for t in range(T) if d else range(T - 1, -1, -1):
                dyt = dy[t, :, d * O : (d + 1) * O]
                if valid is None:
                    dhn, dcn, dh_skip, dc_skip = dh + dyt, dc, 0, 0
                else:  # h_t = where(m, h', h_{t-1}), y_t = where(m, h', 0)
                    m = valid[t]
                    dhn, dh_skip = xp.where(m, dh + dyt, 0), xp.where(m, 0, dh)
                    dcn = None if dc is None else xp.where(m, dc, 0)
                    dc_skip = None if dc is None else xp.where(m, 0, dc)
                dax[t], dh, dc_new = _step_back(xp, mode, dhn, dcn, caches[t], cell, grads, clip)
                dh = dh + dh_skip
                if dc is not None:
                    dc = dc_new + dc_skip
            dhx[k] = dh
            if dc is not None:
                dcx[k] = dc
            # ax = x W_x^T + b_x for every step
            grads["wx"] += xp.tensordot(dax, x, axes=([0, 1], [0, 1]))
            grads["bx"] += dax.sum(axis=(0, 1))
            dx += dax @ cell["wx"]
        if layer > 0:
            if drop is not None:
                dx = dx * drop[layer - 1].astype(acc, copy=False)
            dy = dx
    return dx, dw, dhx, dcx


# ----------------------------------------------------------------------------
# RNN and its fused backward
# ----------------------------------------------------------------------------


def _rnn_fwd(xp, *inputs, is_train, **params):
    data, w, hx, cx, lens, _ = _split_inputs(params, inputs)
    L, D, H, O, G = _dims(params)
    T, N, _ = data.shape
    p = params["p"]
    mshape = (L - 1, T, N, D * O)
    if is_train and p > 0 and L > 1:
        keep = xp.random.random_sample(mshape) < 1.0 - p
        drop = keep.astype(data.dtype) * data.dtype.type(1.0 / (1.0 - p))
    else:
        drop = xp.ones(mshape, dtype=data.dtype)
    y, hy, cy, _ = _run(xp, params, data, w, hx, cx, lens, drop, keep=False)
    dt = data.dtype
    outs = [y.astype(dt, copy=False)]
    if params["state_outputs"]:
        outs.append(hy.astype(dt, copy=False))
        if params["mode"] == "lstm":
            outs.append(cy.astype(dt, copy=False))
    return tuple(outs) + (drop,)


def _rnn_grad(F, n, g):
    p = n.params
    nv = _n_visible(p)
    # every visible output's head gradient (zeros where none arrives) and the forward's dropout mask
    heads = [g[k] for k in range(nv)]
    ins = n.inputs
    grads = F._backward_RNN(*ins, n.outputs[nv], *heads, **p)
    out = [grads[0], grads[1], grads[2]]
    if p["mode"] == "lstm":
        out.append(grads[3])
    if p["use_sequence_length"]:
        out.append(None)  # integer lengths: no gradient
    return out


register(
    "RNN",
    aliases=("_npx_rnn",),
    inputs=_input_names,
    params=dict(_RNN_PARAMS),
    prepare=_prepare,
    num_outputs=lambda p: _n_visible(p) + 1,
    num_visible=_n_visible,
    output_names=_output_names,
    forward=_rnn_fwd,
    infer_shape=_rnn_shape,
    infer_type=_rnn_type,
    gradient=_rnn_grad,
    no_grad_inputs=("sequence_length",),
    needs_is_train=True,
    doc="Fused multi-layer (optionally bidirectional) vanilla RNN, LSTM (with projection and state clipping) or "
    "GRU over time-major data, with MXNet's packed parameter layout; dropout p between layers in training.",
)


def _backward_inputs(params):
    names = _input_names(params) + ["dropout_mask", "ograd_output"]
    if params["state_outputs"]:
        names.append("ograd_state")
        if params["mode"] == "lstm":
            names.append("ograd_statecell")
    return names


def _rnn_backward_fwd(xp, *inputs, **params):
    """Fused BPTT: recompute the forward (with the recorded dropout masks), then run it backward."""
    data, w, hx, cx, lens, rest = _split_inputs(params, inputs)
    drop, dy = rest[0], rest[1]
    dhy = rest[2] if params["state_outputs"] else None
    dcy = rest[3] if params["state_outputs"] and params["mode"] == "lstm" else None
    _, _, _, saved = _run(xp, params, data, w, hx, cx, lens, drop, keep=True)
    acc = acc_dtype(data.dtype)
    dy, dhy, dcy = (None if a is None else a.astype(acc, copy=False) for a in (dy, dhy, dcy))
    dx, dw, dhx, dcx = _backprop(xp, params, w, dy, dhy, dcy, drop, saved, data.shape)
    outs = (dx.astype(data.dtype, copy=False), dw.astype(w.dtype, copy=False), dhx.astype(hx.dtype, copy=False))
    if params["mode"] == "lstm":
        outs += (dcx.astype(cx.dtype, copy=False),)
    return outs


def _backward_shape(params, in_shapes, out_shapes, where):
    k = 4 if params["mode"] == "lstm" else 3
    return in_shapes, list(in_shapes[:k])


def _backward_type(params, in_types, out_types, where):
    k = 4 if params["mode"] == "lstm" else 3
    return in_types, list(in_types[:k])


register(
    "_backward_RNN",
    inputs=_backward_inputs,
    params=dict(_RNN_PARAMS),
    num_outputs=lambda p: 4 if p["mode"] == "lstm" else 3,
    output_names=lambda p: ["data", "parameters", "state", "state_cell"][: 4 if p["mode"] == "lstm" else 3],
    forward=_rnn_backward_fwd,
    infer_shape=_backward_shape,
    infer_type=_backward_type,
    gradient=None,
    grad_undefined_reason="RNN's backward is the fused hidden op _backward_RNN (BPTT in numpy), which has no "
    "gradient rule: second-order gradients through RNN are not defined",
    doc="Fused BPTT gradient of RNN: d data, d parameters, d state (and d state_cell for LSTM) (hidden).",
)
