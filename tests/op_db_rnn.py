"""OpInfo rows for MXNet's fused ``RNN`` (symgrad/ops/rnn.py): the four modes, stacked and bidirectional
layers, state outputs, LSTMP (projection_size), LSTM state clipping and use_sequence_length.

The reference below is written independently of the op: it walks MXNet's packed ``parameters`` vector
with a cursor (all weights per layer and direction: W_x, W_h[, W_r]; then all biases: b_x, b_h; gates
i, f, g, o for LSTM and r, z, n for GRU) and runs every batch element on its own with matrix-vector
products, each only over its own length. The gradient is the fused ``_backward_RNN`` (no second order).
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}
F3264 = (np.float32, np.float64)


def _sig(a):
    return 1.0 / (1.0 + np.exp(-a))


def _n_params(mode, L, D, I, H, P=None):  # noqa: E741
    G, O = GATES[mode], P or H  # noqa: E741
    n = 0
    for layer in range(L):
        il = I if layer == 0 else D * O
        n += D * (G * H * il + G * H * O + (P * H if P else 0) + 2 * G * H)
    return n


def reference(mode, L, D, H, P=None, state_outputs=False, clip=None, seq=False):
    """numpy RNN over MXNet's layout: returns f(data, parameters, state[, state_cell][, sequence_length])."""
    G, O = GATES[mode], P or H  # noqa: E741

    def run(data, w, h0, *rest):
        rest = list(rest)
        c0 = rest.pop(0) if mode == "lstm" else None
        lens = [int(v) for v in rest.pop(0)] if seq else None
        T, N, I = data.shape  # noqa: E741
        pos = 0

        def take(*shape):
            nonlocal pos
            size = int(np.prod(shape))
            out = w[pos : pos + size].reshape(shape)
            pos += size
            return out

        cells = []
        for layer in range(L):
            il = I if layer == 0 else D * O
            for _ in range(D):
                cells.append({"Wx": take(G * H, il), "Wh": take(G * H, O), "Wr": take(P, H) if P else None})
        for cell in cells:
            cell["bx"], cell["bh"] = take(G * H), take(G * H)
        assert pos == w.size, (pos, w.size)

        x = data
        hy = np.zeros((L * D, N, O))
        cy = np.zeros((L * D, N, H))
        for layer in range(L):
            y = np.zeros((T, N, D * O))
            for d in range(D):
                k = layer * D + d
                cl = cells[k]
                for b in range(N):
                    n_steps = lens[b] if seq else T
                    h = h0[k, b].copy()
                    c = c0[k, b].copy() if mode == "lstm" else None
                    for t in range(n_steps) if d == 0 else range(n_steps - 1, -1, -1):
                        gx = cl["Wx"] @ x[t, b] + cl["bx"]
                        gh = cl["Wh"] @ h + cl["bh"]
                        if mode == "rnn_tanh":
                            h = np.tanh(gx + gh)
                        elif mode == "rnn_relu":
                            h = np.maximum(gx + gh, 0.0)
                        elif mode == "gru":
                            r = _sig(gx[:H] + gh[:H])
                            z = _sig(gx[H : 2 * H] + gh[H : 2 * H])
                            n = np.tanh(gx[2 * H :] + r * gh[2 * H :])
                            h = (1 - z) * n + z * h
                        else:
                            a = gx + gh
                            i, f, g, o = _sig(a[:H]), _sig(a[H : 2 * H]), np.tanh(a[2 * H : 3 * H]), _sig(a[3 * H :])
                            c = f * c + i * g
                            if clip is not None:
                                c = np.clip(c, *clip)
                            h = o * np.tanh(c)
                            if P:
                                h = cl["Wr"] @ h
                        y[t, b, d * O : (d + 1) * O] = h
                    hy[k, b] = h
                    if mode == "lstm":
                        cy[k, b] = c
            x = y
        if not state_outputs:
            return x
        return (x, hy, cy) if mode == "lstm" else (x, hy)

    return run


def _row(
    name,
    mode,
    *,
    L=1,
    bidirectional=False,
    state_outputs=True,
    T=3,
    N=2,
    I=2,
    H=2,
    P=None,  # noqa: E741
    clip=None,
    lens=None,
    grad_rtol=1e-6,
    grad_atol=1e-8,
):
    D = 2 if bidirectional else 1
    O = P or H  # noqa: E741
    params = dict(state_size=H, num_layers=L, mode=mode, bidirectional=bidirectional, state_outputs=state_outputs)
    if P:
        params["projection_size"] = P
    if clip is not None:
        params.update(lstm_state_clip_min=clip[0], lstm_state_clip_max=clip[1])
    if lens is not None:
        params["use_sequence_length"] = True
    inputs = {
        "data": In((T, N, I)),
        "parameters": In((_n_params(mode, L, D, I, H, P),), low=-0.7, high=0.7),
        "state": In((L * D, N, O)),
    }
    if mode == "lstm":
        inputs["state_cell"] = In((L * D, N, H))
    if lens is not None:
        inputs["sequence_length"] = In((N,), grad=False, integer=True, sample=lambda rng: np.array(lens))

    def make(*xs):
        return S.RNN(*xs, **params)

    return OpInfo(
        f"RNN_{name}",
        make,
        inputs,
        reference(mode, L, D, H, P, state_outputs, clip, lens is not None),
        dtypes=F3264,
        second_order=False,
        grad_rtol=grad_rtol,
        grad_atol=grad_atol,
    )


OPS = [
    _row("rnn_tanh", "rnn_tanh", I=3),
    _row("rnn_tanh_2layer_no_states", "rnn_tanh", L=2, state_outputs=False),
    _row("rnn_relu_bidirectional", "rnn_relu", bidirectional=True),
    _row("rnn_relu_2layer", "rnn_relu", L=2, H=3),
    _row("lstm", "lstm", H=3, state_outputs=False),
    _row("lstm_states", "lstm", I=3, H=3),
    _row("lstm_2layer_bidirectional", "lstm", L=2, bidirectional=True),
    _row("gru", "gru", H=3),
    _row("gru_2layer_bidirectional", "gru", L=2, bidirectional=True),
    # LSTMP: the recurrent state and the output are W_r (o * tanh(c)), of size projection_size
    _row("lstm_projection", "lstm", H=3, P=2),
    _row("lstm_projection_2layer_bidirectional", "lstm", L=2, bidirectional=True, H=3, P=1),
    # cell states clipped to [-0.3, 0.3] (several are; the sample keeps every one off the edges)
    _row("lstm_state_clip", "lstm", H=3, clip=(-0.3, 0.3)),
    # variable lengths: batch element 1 runs 1 step (forward and reverse), element 0 all 3
    _row("lstm_sequence_length_bidirectional", "lstm", bidirectional=True, lens=(3, 1)),
    _row("gru_sequence_length_2layer", "gru", L=2, lens=(2, 3)),
    _row("rnn_tanh_sequence_length_bidirectional", "rnn_tanh", bidirectional=True, N=3, lens=(1, 3, 2)),
]
