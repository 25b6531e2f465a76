"""OpInfo rows for ``_contrib_hawkesll`` (symgrad/ops/hawkes.py).

The reference is written from the definition of the process, not from the op's recurrence: for each mark k
the conditional intensity

    lambda_k(t) = lda_k + alpha_k beta_k (state_k exp(-beta_k t) + sum_{earlier events i of k} exp(-beta_k (t - t_i)))

is evaluated at every event directly (a sum over all earlier events), and its integral over (0, max_time] is
the integral of each exponential term on its own: lda_k T + alpha_k state_k (1 - exp(-beta_k T)) +
alpha_k sum_i (1 - exp(-beta_k (T - t_i))). The returned memory is s_k(T), the same sum at T.

Gradients (lda, alpha, beta, state; from both head gradients) are proved by the generic tests against finite
differences; they go through the fused ``_backward_hawkesll``, so second order is off.
"""

import numpy as np
from op_info import In, OpInfo

import symgrad as sg

S = sg.sym

# float16 inputs are rounded before the float64 reference sees them; the log-likelihood (tens) is then
# rounded to float16 once
F16 = {np.float16: (2e-2, 2e-2)}


def hawkes_ref(lda, alpha, beta, state, lags, marks, valid_length, max_time):
    """(log-likelihood (N,), memory at max_time (N, K)) from the definition (see the module docstring)."""
    N, K = lda.shape
    ll = np.zeros(N)
    memory = np.zeros((N, K))
    for i in range(N):
        n = int(np.ceil(valid_length[i])) if valid_length[i] > 0 else 0  # events j < valid_length
        times = np.cumsum(lags[i, :n])
        kinds = marks[i, :n].astype(int)
        T = max_time[i]

        def excitation(k, t, before, i=i, times=times, kinds=kinds):
            """state_k exp(-beta_k t) + sum of exp(-beta_k (t - t_j)) over events j < before of mark k."""
            past = [times[j] for j in range(before) if kinds[j] == k]
            return state[i, k] * np.exp(-beta[k] * t) + sum(np.exp(-beta[k] * (t - tj)) for tj in past)

        for j in range(n):
            k = kinds[j]
            ll[i] += np.log(lda[i, k] + alpha[k] * beta[k] * excitation(k, times[j], j))
        for k in range(K):
            integral = lda[i, k] * T + alpha[k] * state[i, k] * (1 - np.exp(-beta[k] * T))
            integral += alpha[k] * sum(1 - np.exp(-beta[k] * (T - tj)) for tj, kj in zip(times, kinds) if kj == k)
            ll[i] -= integral
            memory[i, k] = excitation(k, T, n)
    return ll, memory


def _inputs(N, K, T, lengths, marks=None, state=(0.0, 1.0), slack=(0.5, 2.0)):
    """Positive rates, branching ratios < 1, decays, memories; lags in (0.1, 1) and max_time past the last
    column's event time (``slack`` after T lags of at most 1)."""
    mark_sample = marks if marks is not None else (lambda rng: rng.integers(0, K, (N, T)))
    return {
        "lda": In((N, K), 0.5, 2.0),
        "alpha": In((K,), 0.1, 0.9),
        "beta": In((K,), 0.5, 2.0),
        "state": In((N, K), *state),
        "lags": In((N, T), 0.1, 1.0, grad=False),
        "marks": In((N, T), grad=False, integer=True, sample=mark_sample),
        "valid_length": In((N,), grad=False, sample=lambda rng: np.array(lengths, dtype=float)),
        "max_time": In((N,), grad=False, sample=lambda rng: T + rng.uniform(*slack, N)),
    }


# second_order=False: the gradient is the fused _backward_hawkesll (tests/test_ops_hawkes.py checks the error)
OPS = [
    # three marks, ragged lengths (a full row, a short one, an empty one), memory carried in
    OpInfo(
        "hawkesll_ragged", S._contrib_hawkesll, _inputs(3, 3, 5, [5, 2, 0]), hawkes_ref, fwd_tol=F16, second_order=False
    ),
    # one mark, every column valid, no memory carried in
    OpInfo(
        "hawkesll_single_mark",
        S._contrib_hawkesll,
        _inputs(2, 1, 4, [4, 3], state=(0.0, 0.0)),
        hawkes_ref,
        fwd_tol=F16,
        second_order=False,
    ),
    # two marks in alternation (each mark's memory decays across the other's events), a fractional length
    # (MXNet counts event j while j < valid_length: 2.5 keeps 3 events) and a window ending before the last
    # event of the first sample (the remaining integral and the memory then run backwards, as MXNet's)
    OpInfo(
        "hawkesll_alternating_marks",
        S._contrib_hawkesll,
        {
            **_inputs(2, 2, 4, [4, 2.5], marks=lambda rng: np.array([[0, 1, 0, 1], [1, 1, 0, 0]])),
            "max_time": In((2,), grad=False, sample=lambda rng: np.array([1.5, 6.0])),
        },
        hawkes_ref,
        fwd_tol=F16,
        second_order=False,
    ),
    # four marks, one never seen (its memory only decays, it pays lda T + alpha state (1 - exp(-beta T)))
    OpInfo(
        "hawkesll_unused_marks",
        S._contrib_hawkesll,
        _inputs(2, 4, 3, [3, 1], marks=lambda rng: np.array([[2, 2, 0], [3, 0, 1]])),
        hawkes_ref,
        fwd_tol=F16,
        second_order=False,
    ),
]
