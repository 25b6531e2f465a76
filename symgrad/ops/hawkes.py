"""Log-likelihood of marked Hawkes processes with exponential kernels: MXNet 1.9.1's ``_contrib_hawkesll``
(src/operator/contrib/hawkes_ll.cc, hawkes_ll-inl.h).

Sample ``i`` observes K independent self-exciting processes on ``(0, max_time[i]]``. Its events are the
first ``valid_length[i]`` columns of ``lags[i]`` (inter-arrival times: event ``j`` happens at
``t_j = lags[i, 0] + ... + lags[i, j]``) and ``marks[i]`` (which process, 0 ... K-1). Process ``k`` has
the conditional intensity

    lambda_k(t) = lda[i, k] + alpha[k] * beta[k] * s_k(t),
    s_k(t)      = state[i, k] * exp(-beta[k] t) + sum_{events j of k before t} exp(-beta[k] (t - t_j)),

(``state`` is the memory ``s_k(0)`` carried in from earlier observations) and the output is

    output[i]    = sum_j log lambda_{c_j}(t_j) - sum_k integral_0^max_time lambda_k(t) dt,
    out_state[i] = s_k(max_time[i])  (the memory to carry on to the next window).

The forward keeps, per mark, S = s_k just after its last event and that event's time ``last`` (0 at the
start), so each event costs O(1) (d = t - last, e = exp(-beta d), u = S e = s_k(t-)):

    ll += log(lda + alpha beta u) - (lda d + alpha (S - u)),     S <- 1 + u,  last <- t

and at the end every mark pays the rest of its integral, lda d + alpha (S - u) with d = max_time - last,
and ``out_state = u``.

MXNet rules kept: ``marks`` is int32 (assigned when unknown); every other input has ``lda``'s dtype and
the outputs too; event ``j`` counts while ``j < valid_length[i]`` (so a fractional length counts its
partial event, a length <= 0 none).

Where symgrad differs on purpose:

- MXNet calls ``expf``/``logf`` whatever the dtype, so its float64 results carry float32 rounding
  (about 1e-7 relative); symgrad computes in the data's dtype (float16 in float32).
- MXNet's backward ignores the head gradient of ``out_state`` and never writes the gradient of ``state``
  (it keeps whatever its buffer held). symgrad differentiates the math: ``out_state`` depends on ``beta``
  and ``state``, ``output`` on ``state`` too, and both head gradients flow.
- A ``valid_length`` beyond the number of columns, or a valid event's mark outside 0 ... K-1, reads
  out of bounds in MXNet; symgrad raises a ValueError.
"""

from __future__ import annotations

import numpy as np

from ..base import ShapeError
from ..opdef import acc_dtype, register

_NAME = "_contrib_hawkesll"
_INPUTS = ("lda", "alpha", "beta", "state", "lags", "marks", "valid_length", "max_time")
_MARKS = _INPUTS.index("marks")
# axes of each input in terms of N (samples), K (marks), T (columns)
_LAYOUT = {
    "lda": "NK",
    "alpha": "K",
    "beta": "K",
    "state": "NK",
    "lags": "NT",
    "marks": "NT",
    "valid_length": "N",
    "max_time": "N",
}
_OUT_LAYOUT = ("N", "NK")


# -- shape and dtype rules ---------------------------------------------------------------------------------


def _hawkes_shape(params, in_shapes, out_shapes, where, first=0):
    """N, K, T from whichever inputs (and outputs) are known; fills the rest, with errors naming inputs.

    ``first``: leading inputs that are not the op's (the backward's head gradients), passed through."""
    dims: dict = {}
    known = [(n, s, _LAYOUT[n]) for n, s in zip(_INPUTS, in_shapes[first:])]
    known += [(f"output {k}", s, lay) for k, (s, lay) in enumerate(zip(out_shapes, _OUT_LAYOUT))]
    for name, s, lay in known:
        if s is None:
            continue
        s = tuple(s)
        what = name if name.startswith("output") else f"input {name!r}"
        if len(s) != len(lay):
            raise ShapeError(f"{where}: {what} must be {len(lay)}-d ({', '.join(lay)}), got shape {s}")
        for letter, v in zip(lay, s):
            if letter not in dims:
                dims[letter] = (v, what)
            elif dims[letter][0] != v:
                raise ShapeError(
                    f"{where}: {what} has shape {s}, so {letter}={v}, but {dims[letter][1]} "
                    f"has {letter}={dims[letter][0]}"
                )

    def fill(s, lay):
        if s is not None or any(c not in dims for c in lay):
            return s
        return tuple(dims[c][0] for c in lay)

    ins = list(in_shapes[:first]) + [fill(s, _LAYOUT[n]) for n, s in zip(_INPUTS, in_shapes[first:])]
    outs = [fill(s, lay) for s, lay in zip(out_shapes, _OUT_LAYOUT)]
    return ins, outs


def _hawkes_type(params, in_types, out_types, where, first=0, n_out=2):
    """Every input but ``marks`` has one float dtype (``lda``'s, as MXNet's rule), the outputs too;
    ``marks`` is int32 when unknown. symgrad also takes other integer (or whole-valued float) marks, as
    its other index inputs: MXNet insists on int32."""
    float_slots = [k for k in range(first, len(in_types)) if k != _MARKS + first]
    known = [(f"input {_INPUTS[k - first]!r}", in_types[k]) for k in float_slots]
    known += [(f"output {k}", t) for k, t in enumerate(out_types)]
    known = [(what, np.dtype(t)) for what, t in known if t is not None]
    if not known:
        return in_types, out_types
    what, dt = known[0]
    if dt.kind not in "fc":
        raise TypeError(f"{where}: {what} must be float16, float32 or float64, got {dt}")
    for other, t in known[1:]:
        if t != dt:
            raise TypeError(
                f"{where}: {other} has dtype {t}, but {what} has {dt} (every input but 'marks' "
                f"shares one float dtype, as do the outputs)"
            )
    for t in in_types[:first]:
        if t is not None and np.dtype(t) != dt:
            raise TypeError(f"{where}: head gradients have dtype {np.dtype(t)}, expected {dt}")
    mk = in_types[_MARKS + first]
    if mk is None:
        mk = np.dtype(np.int32)
    elif np.dtype(mk).kind not in "iuf":
        raise TypeError(f"{where}: input 'marks' must hold integers (MXNet: int32), got {np.dtype(mk)}")
    ins = [dt if k != _MARKS + first else mk for k in range(len(in_types))]
    return ins, [dt] * n_out


# -- the pass over the events ------------------------------------------------------------------------------


def _event_steps(xp, marks, valid_length, K):
    """Per column j: the rows with an event there (``j < valid_length``) and their marks (intp).

    Checks what MXNet would read out of bounds: a length beyond T, a valid mark outside 0 ... K-1."""
    N, T = marks.shape
    if xp.iscomplexobj(valid_length):  # complex-step differences: lengths are data, compare their real part
        valid_length = valid_length.real
    if bool(xp.any(valid_length > T)):
        bad = float(xp.max(valid_length))
        raise ValueError(
            f"{_NAME}: input 'valid_length' must be at most T={T} (the columns of 'lags' and 'marks'), got {bad:g}"
        )
    valid = xp.arange(T)[None, :] < valid_length[:, None]
    m = marks[valid]
    if m.size:
        whole = m == xp.floor(m) if marks.dtype.kind == "f" else xp.ones(m.shape, dtype=bool)
        ok = whole & (m >= 0) & (m < K)
        if not bool(xp.all(ok)):
            bad = m[~ok][0]
            raise ValueError(
                f"{_NAME}: input 'marks' must hold whole numbers in [0, {K}) (K, the columns of "
                f"'lda') at every valid event, got {bad.item()!r}"
            )
    steps = []
    for j in range(T):
        rows = xp.nonzero(valid[:, j])[0]
        if rows.size == 0:
            break  # valid is a prefix of each row: no later column has events either
        steps.append((rows, marks[rows, j].astype(np.intp)))
    return steps


def _hawkes_pass(xp, lda, alpha, beta, state, lags, marks, valid_length, max_time, tangents=False):
    """The forward recurrence (module docstring); with ``tangents`` also the forward-mode derivatives.

    Returns ``(ll, out_state)`` or ``(ll, out_state, D)``, D a dict of (N, K) arrays:
    ``lda``/``alpha``/``beta``/``state``: d ll_i / d theta_ik of sample i (alpha, beta not yet summed over
    samples); ``out_beta``/``out_state``: d out_state_ik / d beta_k and / d state_ik.

    Derivation. Only the memory chain S of mark k depends on beta_k and state_ik; carry its derivatives
    Sb = dS/dbeta (0 at the start) and Ss = dS/dstate (1 at the start). At an event (d, e = exp(-beta d)):

        u = S e:        du/dbeta = e (Sb - d S) =: ub,         du/dstate = e Ss =: us
        I = lda + alpha beta u:
            d log I/dlda = 1/I,  /dalpha = beta u / I,  /dbeta = alpha (u + beta ub) / I,
            /dstate = alpha beta us / I
        C = lda d + alpha (S - u)   (the integral of the intensity since the mark's last event):
            dC/dlda = d,  /dalpha = S - u,  /dbeta = alpha (Sb - ub),  /dstate = alpha (Ss - us)
        S <- 1 + u:     Sb <- ub,   Ss <- us

    and the end of the window is a C with d = max_time - last, where out_state = u gives
    d out_state/dbeta = ub and d out_state/dstate = us. (Ss telescopes to exp(-beta last); MXNet's
    backward carries the same Sb recurrence, but not Ss.)
    """
    acc = acc_dtype(lda.dtype)
    lda, alpha, beta, state, lags, valid_length, max_time = (
        a.astype(acc, copy=False) for a in (lda, alpha, beta, state, lags, valid_length, max_time)
    )
    N, K = lda.shape
    steps = _event_steps(xp, marks, valid_length, K)
    S = state.copy()  # memory just after each mark's last event
    last = xp.zeros((N, K), dtype=acc)
    t = xp.zeros((N,), dtype=acc)
    ll = xp.zeros((N,), dtype=acc)
    if tangents:
        D = {k: xp.zeros((N, K), dtype=acc) for k in ("lda", "alpha", "beta", "state")}
        Sb = xp.zeros((N, K), dtype=acc)
        Ss = xp.ones((N, K), dtype=acc)
    for j, (r, c) in enumerate(steps):
        t[r] += lags[r, j]
        tr = t[r]
        d = tr - last[r, c]
        a, b, lam, s = alpha[c], beta[c], lda[r, c], S[r, c]
        e = xp.exp(-b * d)
        u = s * e
        inten = lam + a * b * u
        ll[r] += xp.log(inten) - (lam * d + a * (s - u))
        if tangents:
            sb, ss = Sb[r, c], Ss[r, c]
            ub, us = e * (sb - d * s), e * ss
            D["lda"][r, c] += 1 / inten - d
            D["alpha"][r, c] += b * u / inten - (s - u)
            D["beta"][r, c] += a * (u + b * ub) / inten - a * (sb - ub)
            D["state"][r, c] += a * b * us / inten - a * (ss - us)
            Sb[r, c], Ss[r, c] = ub, us
        S[r, c] = 1 + u
        last[r, c] = tr
    d = max_time[:, None] - last
    e = xp.exp(-beta * d)
    u = S * e
    ll = ll - (lda * d + alpha * (S - u)).sum(axis=1)
    if not tangents:
        return ll, u
    ub, us = e * (Sb - d * S), e * Ss
    D["lda"] -= d
    D["alpha"] -= S - u
    D["beta"] -= alpha * (Sb - ub)
    D["state"] -= alpha * (Ss - us)
    D["out_beta"], D["out_state"] = ub, us
    return ll, u, D


def _hawkes_fwd(xp, lda, alpha, beta, state, lags, marks, valid_length, max_time):
    ll, out_state = _hawkes_pass(xp, lda, alpha, beta, state, lags, marks, valid_length, max_time)
    return ll.astype(lda.dtype, copy=False), out_state.astype(lda.dtype, copy=False)


def _hawkes_grad(F, n, g):
    # one fused VJP for lda, alpha, beta and state from both head gradients (derivation in _hawkes_pass);
    # lags, marks, valid_length and max_time are data: no gradient (as MXNet)
    dlda, dalpha, dbeta, dstate = F._backward_hawkesll(g[0], g[1], *n.inputs)
    return [dlda, dalpha, dbeta, dstate, None, None, None, None]


register(
    _NAME,
    inputs=_INPUTS,
    num_outputs=2,
    output_names=("output", "out_state"),
    forward=_hawkes_fwd,
    infer_shape=_hawkes_shape,
    infer_type=_hawkes_type,
    gradient=_hawkes_grad,
    no_grad_inputs=("lags", "marks", "valid_length", "max_time"),
    doc="Log-likelihood (N,) of N samples of K marked Hawkes processes with exponential kernels, and the "
    "decayed memory (N, K) at max_time (MXNet's contrib.hawkesll).",
)


# -- the fused gradient ------------------------------------------------------------------------------------


def _backward_fwd(xp, g_out, g_state, lda, alpha, beta, state, lags, marks, valid_length, max_time):
    # VJP: with D the forward-mode derivatives of sample i (_hawkes_pass),
    #   dlda_ik = g_i D_lda,   dalpha_k = sum_i g_i D_alpha,   dstate_ik = g_i D_state + G_ik D_out_state,
    #   dbeta_k = sum_i (g_i D_beta + G_ik D_out_beta)     (g: head of output, G: head of out_state)
    _, _, D = _hawkes_pass(xp, lda, alpha, beta, state, lags, marks, valid_length, max_time, tangents=True)
    acc = D["lda"].dtype
    g = g_out.astype(acc, copy=False)[:, None]
    G = g_state.astype(acc, copy=False)
    dt = lda.dtype
    return (
        (g * D["lda"]).astype(dt, copy=False),
        (g * D["alpha"]).sum(axis=0).astype(dt, copy=False),
        (g * D["beta"] + G * D["out_beta"]).sum(axis=0).astype(dt, copy=False),
        (g * D["state"] + G * D["out_state"]).astype(dt, copy=False),
    )


_BACKWARD_INPUTS = ("ograd_output", "ograd_out_state") + _INPUTS


def _backward_shape(params, in_shapes, out_shapes, where):
    # the head gradients have the shapes of the forward's outputs: checked and filled as those
    ins, heads = _hawkes_shape(params, in_shapes, list(in_shapes[:2]), where, first=2)
    ins[:2] = heads
    return ins, ins[2:6]


register(
    "_backward_hawkesll",
    inputs=_BACKWARD_INPUTS,
    num_outputs=4,
    output_names=("lda_grad", "alpha_grad", "beta_grad", "state_grad"),
    forward=_backward_fwd,
    infer_shape=_backward_shape,
    infer_type=lambda p, i, o, w: _hawkes_type(p, i, o, w, first=2, n_out=4),
    gradient=None,
    grad_undefined_reason="the gradient of _contrib_hawkesll is the fused hidden op _backward_hawkesll, which has "
    "no gradient rule: second-order gradients through _contrib_hawkesll are not defined",
    doc="Fused gradient of _contrib_hawkesll w.r.t. lda, alpha, beta and state from both head gradients (hidden).",
)
