"""A bound symbol seen as a function ``f(arguments) -> outputs``: the one place numeric checks evaluate.

Every checker differentiates through a ``Harness``: it binds (or wraps) an executor with ``grad_req``
null, takes one full forward as the base (``Executor.forward_all``), and afterwards re-runs only the
instructions downstream of the arguments that changed (``Executor.rerun_downstream``), resetting the
auxiliary states before each evaluation so a BatchNorm in training mode evaluates the same function
every time. It also names the op of a forward that is not deterministic (Dropout in training) through
the executor's public value hook (``Executor.set_value_hook``), never through the plan's internals.
"""

from __future__ import annotations

import numpy as np

from symgrad.graph import subgraphs
from symgrad.opdef import acc_dtype

from .context import to_device, to_numpy
from .frames import hide_from_pytest as _hide_from_pytest
from .tolerance import NOISE_FACTOR

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

__all__ = [
    "Harness",
    "as_array_like",
    "trace_values",
    "assert_deterministic",
    "RoundingEmulator",
    "analytic_noise",
    "with_measured",
    "RandomOpError",
    "refuse_random_ops",
]


class RandomOpError(ValueError):
    """A numeric checker was handed a graph holding a random sampling op (``_random_uniform``, ``_sample_normal``,
    ``_shuffle``, ... -- every op whose ``OpDef.is_random`` is set). Its output is a fresh draw on every
    evaluation, so finite differences of it (and of anything computed from it) are meaningless; the checker
    refuses it up front instead of reporting noise as a gradient error. A ``ValueError``: the input, not the
    gradient, is wrong for the check. Dropout is not flagged: it is deterministic in inference, and the
    checkers detect a non-deterministic forward at run time (``assert_deterministic``).

    Attributes:
        op_name: the registered name of the random op.
        node_name: the name of its node in the graph.
    """

    def __init__(self, message, op_name=None, node_name=None):
        super().__init__(message)
        self.op_name = op_name
        self.node_name = node_name


def _graph_nodes(graph) -> list:
    """The operator nodes of a Symbol (or list of Symbols) or of a bound Executor (forward and backward)."""
    if isinstance(graph, (list, tuple)):
        return [n for g in graph for n in _graph_nodes(g)]
    plan = getattr(graph, "plan", None)
    if plan is not None:
        return [ins.node for ins in list(plan.forward_instrs) + list(plan.backward_instrs)]
    if hasattr(graph, "to_networkx"):
        return [node for _, node in graph.to_networkx().nodes(data="node")]
    return []


def _with_subgraph_nodes(nodes) -> list:
    """``nodes`` and, depth first, the nodes of the subgraphs a control-flow node holds (a loop body's
    sampling op draws afresh on every evaluation as much as one outside it)."""
    out = []
    for node in nodes:
        out.append(node)
        if getattr(node, "op", None) is not None:
            out.extend(_with_subgraph_nodes(n for g in subgraphs(node) for n in _graph_nodes(g)))
    return out


def refuse_random_ops(graph, who) -> None:
    """Raise ``RandomOpError`` naming the first random sampling op node of ``graph`` (a Symbol, a list of
    Symbols or an Executor; the bodies of its control-flow nodes included), if it holds one; see
    ``RandomOpError``."""
    for node in _with_subgraph_nodes(_graph_nodes(graph)):
        op = getattr(node, "op", None)
        if op is not None and getattr(op, "is_random", False):
            raise RandomOpError(
                f"{who}: the graph holds the random sampling op {op.name} {node.name!r}: its output is a fresh "
                "random draw on every evaluation, so finite differences of it (and of anything computed from it) "
                "are meaningless and cannot prove a gradient. Check the deterministic part of the graph: replace "
                f"the sample by a Variable and feed it a fixed array (e.g. one drawn once by {op.name})",
                op_name=op.name,
                node_name=node.name,
            )


def as_array_like(like, host):
    """``host`` moved to the array module of ``like`` (numpy or CuPy)."""
    mod = type(like).__module__.split(".")[0]
    if mod == "numpy":
        return host
    import importlib

    return importlib.import_module(mod).asarray(host)


def _same(a, b) -> bool:
    a, b = np.asarray(to_numpy(a)), np.asarray(to_numpy(b))
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


class Harness:
    """Evaluations of a bound executor at its bound argument values.

    Args:
        exe: the executor (its argument arrays are perturbed in place by the differencer and restored).
        is_train: ``is_train`` of every evaluation.
        aux_initial: ``{aux name: array}`` written back into the executor before every evaluation
            (None: the executor's auxiliary states as they are now; ``{}``: none).
    """

    def __init__(self, exe, *, is_train=True, aux_initial=None):
        refuse_random_ops(exe, "numeric differentiation")  # the entry points refuse earlier, naming themselves
        self.exe = exe
        self.is_train = bool(is_train)
        if aux_initial is None:
            aux_initial = {k: np.array(to_numpy(v), copy=True) for k, v in exe.aux_dict.items()}
        self.aux_initial = {
            k: as_array_like(exe.aux_dict[k], np.asarray(to_numpy(v)).astype(exe.aux_dict[k].dtype))
            for k, v in aux_initial.items()
        }
        self._based = False

    @classmethod
    def bind(cls, sym, values: dict, aux: dict, *, ctx, dtype=None, is_train=True, complex_names=()):
        """Bind ``sym`` on copies of ``values``/``aux`` (float arrays cast to ``dtype`` when given; the
        arguments in ``complex_names`` to its complex counterpart, for complex steps)."""

        def cast(v, to_complex):
            v = np.asarray(v)
            if dtype is None or v.dtype.kind != "f":
                return np.array(v, copy=True)
            if to_complex:
                return v.astype(np.complex128 if np.dtype(dtype).itemsize >= 8 else np.complex64)
            return v.astype(dtype)

        args = {k: to_device(cast(v, k in complex_names), ctx) for k, v in values.items()}
        # a complex graph keeps its auxiliary states complex too (they share a dtype with the data)
        auxs = {k: to_device(cast(v, bool(complex_names)), ctx) for k, v in aux.items()}
        exe = sym.bind(ctx, args, grad_req="null", aux_states=auxs)
        return cls(exe, is_train=is_train, aux_initial={k: v.copy() for k, v in auxs.items()})

    # -- values -----------------------------------------------------------------------------------------
    def array(self, name):
        """The bound array of argument ``name`` (changed in place by perturbations)."""
        return self.exe.arg_dict[name]

    def host(self, name) -> np.ndarray:
        """A host copy of argument ``name``."""
        return np.array(to_numpy(self.exe.arg_dict[name]), copy=True)

    def set_values(self, values: dict):
        """Write host values into the bound arguments (cast to their dtypes); the next ``base`` sees them."""
        for k, v in values.items():
            arr = self.exe.arg_dict[k]
            arr[...] = as_array_like(arr, np.asarray(v).astype(arr.dtype, copy=False))
        self._based = False

    def reset_aux(self):
        if not self.aux_initial:
            return
        aux = self.exe.aux_dict
        for name, value in self.aux_initial.items():
            aux[name][...] = value

    # -- evaluations ------------------------------------------------------------------------------------
    def base(self) -> list:
        """Every output at the bound values (one full forward, kept as the base of partial re-runs)."""
        self.reset_aux()
        outs = self.exe.forward_all(self.is_train)
        self._based = True
        return [np.array(to_numpy(o), copy=True) for o in outs]

    def ensure_base(self):
        """Take the base of the partial re-runs unless the current one is still valid (every argument as it was)."""
        if not self._based:
            self.base()

    def outputs(self, names) -> list:
        """Every output after the bound arrays of ``names`` were changed in place (a partial re-run)."""
        if not self._based:
            self.base()
        self.reset_aux()
        return [to_numpy(o) for o in self.exe.rerun_downstream(names)]

    def assert_deterministic(self, who, what="the forward"):
        assert_deterministic(self.exe, self.is_train, self.aux_initial, who, what)
        self._based = False

    def evaluation_noise(self, objective, dtype, runs=None, base=None) -> float:
        """The rounding noise of one evaluation of ``objective(outputs) -> (value, magnitude)`` in ``dtype`` --
        divided by a difference's width, the numeric noise of the tolerance model: the larger of ``NOISE_FACTOR *
        eps * magnitude`` (the final sum) and ``objective_noise`` (cancellation inside the forward). ``base``:
        ``base()``'s outputs when the caller has them (one forward fewer)."""
        eps = float(np.finfo(np.dtype(dtype)).eps)
        magnitude = objective(self.base() if base is None else base)[1]
        return max(
            NOISE_FACTOR * eps * magnitude, self.objective_noise(lambda outs: objective(outs)[0], dtype, runs=runs)
        )

    def objective_noise(self, objective, dtype, runs=None) -> float:
        """Rounding noise of ``objective(outputs)`` evaluated in ``dtype``.

        ``EMULATION_SIGMAS`` times the root-mean-square deviation of ``EMULATION_RUNS`` forwards whose every
        intermediate value is multiplied by ``1 + eps * u`` (``u`` uniform in [-1, 1], independent per element)
        from the exact one: it sees cancellation inside the forward (``x - mean(x)`` with ``|x| >> |x -
        mean(x)|``, the sums inside an op) that ``eps * sum|terms|`` of the final sum does not. Capped at
        ``NOISE_FACTOR * eps * sum |v|`` over every value the forward computes -- the magnitude of all that was
        summed: a decision the noise flips (a max tie inside a second-order graph) moves the objective by a
        jump, not by rounding. Cost: ``runs + 2`` forwards (``runs``: default ``EMULATION_RUNS``)."""
        dt = np.dtype(dtype)
        if dt.kind != "f":
            return 0.0
        eps = float(np.finfo(dt).eps)
        rng = np.random.default_rng(1)
        total = [0.0]

        def eps_of(v):
            # a value the graph itself holds in a lower precision (a Cast to float32, an op with a float32
            # output such as image.to_tensor) rounds to its own grid even in a float64 evaluation
            return max(eps, float(np.finfo(v.dtype).eps))

        def magnitude(node, k, v, phase):
            if getattr(v, "dtype", None) is not None and v.dtype.kind == "f":
                total[0] += eps_of(v) * float(np.sum(np.abs(np.asarray(to_numpy(v), np.float64))))
            return v

        def noisy(node, k, v, phase):
            if getattr(v, "dtype", None) is None or v.dtype.kind != "f":
                return v
            return perturb_relative(v, eps_of(v), rng)

        def run(hook):
            self.reset_aux()
            self.exe.set_value_hook(hook)
            try:
                return objective([np.asarray(to_numpy(o)) for o in self.exe.forward(is_train=self.is_train)])
            finally:
                self.exe.set_value_hook(None)

        runs = EMULATION_RUNS if runs is None else int(runs)
        exact = run(magnitude)
        square = sum((run(noisy) - exact) ** 2 for _ in range(runs))
        self.reset_aux()
        self._based = False
        return min(EMULATION_SIGMAS * float(np.sqrt(square / runs)), NOISE_FACTOR * total[0])


def trace_values(exe, is_train, aux_initial=None) -> list:
    """``[(node, k, host copy)]`` of every value one ``forward`` of ``exe`` computes, in execution order.

    Uses the executor's value hook (an identity that records); auxiliary states are reset to
    ``aux_initial`` before and after.
    """
    record = []

    def hook(node, k, value, phase):
        record.append((node, k, np.array(to_numpy(value), copy=True)))
        return value

    def reset():
        for name, value in (aux_initial or {}).items():
            exe.aux_dict[name][...] = value

    reset()
    exe.set_value_hook(hook)
    try:
        exe.forward(is_train=is_train)
    finally:
        exe.set_value_hook(None)
        reset()
    return record


def _random_node(exe, is_train, aux_initial):
    """The first node whose output differs between two forwards at the same point, or None."""
    first, second = (trace_values(exe, is_train, aux_initial) for _ in range(2))
    for (node, _, a), (_, _, b) in zip(first, second):
        if not _same(a, b):
            return node
    return None


def assert_deterministic(exe, is_train, aux_initial=None, who="numeric gradient", what="the forward"):
    """Raise ValueError naming the op when two forwards of ``exe`` at the same point differ.

    Finite differences (and an analytic gradient compared with them) need a deterministic function; a
    random op such as Dropout in training mode draws new values on every run. Auxiliary states are reset
    to ``aux_initial`` before each forward. Cost: two forwards (two more to name the op when they differ).
    """
    snapshot = {k: np.array(to_numpy(v), copy=True) for k, v in exe.aux_dict.items()}
    h = Harness(exe, is_train=is_train, aux_initial=aux_initial or {})  # {}: no reset, as given
    first = h.base()
    second = h.base()
    if all(_same(a, b) for a, b in zip(first, second)):
        return
    culprit = "an output"
    try:
        # from the same auxiliary states each time: an op that updates a state it reads is not random
        node = _random_node(exe, bool(is_train), h.aux_initial or snapshot)
    except Exception:  # naming the op is a courtesy: never hide the real problem behind it
        node = None
    if node is not None:
        culprit = f"op {node.op.name} {node.name!r}"
    h.reset_aux()
    aux_hint = ""
    if node is None and list(getattr(exe, "aux_dict", {}) or ()) and not aux_initial:
        aux_hint = (
            "; or the forward reads an auxiliary state it updates: give the auxiliary states (aux_states) "
            "so that they are reset before every evaluation"
        )
    raise ValueError(
        f"{who}: {what} is not deterministic: {culprit} gives different values in two evaluations at the same "
        f"point (is_train={bool(is_train)}); finite differences need a deterministic function -- a random op "
        "such as Dropout in training mode draws new values on every run (use p=0, is_train=False where the "
        f"check allows it, or take the op out of the checked symbol){aux_hint}"
    )


# == rounding emulation: the analytic side's noise ========================================================

#: float64 evaluations with emulated rounding behind one noise estimate
EMULATION_RUNS = 6
#: the estimate is this many root-mean-square deviations of the emulated runs. Measured: the real float32 error
#: of exactly-zero gradients (InstanceNorm's shift, a softmax shift through an opaque custom op) reached 3.5
#: RMS of 4 runs; a 6-run RMS is itself below 0.5 of the true deviation in ~3% of elements
EMULATION_SIGMAS = 12.0


def _hashed_uniform(v, run):
    """Uniform draws in [0, 1), one per element of the float64 array ``v``: a splitmix64 hash of the element's
    bits and of ``run``, so equal values draw alike."""
    with np.errstate(over="ignore"):
        h = v.view(np.uint64) + np.uint64(run) * np.uint64(0x9E3779B97F4A7C15)
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = h ^ (h >> np.uint64(31))
    return (h >> np.uint64(11)).astype(np.float64) / 2.0**53


def round_to_grid(value, bits, run=0):
    """``value`` rounded to ``bits`` significant bits, up or down at random (stochastic rounding: up with
    probability equal to the distance from the lower grid point, so the rounding is unbiased and at most one
    ulp). The random draw is a hash of the value's bits and of ``run``: equal values round alike, values on
    the grid (constants, float32 inputs, clip bounds) stay exactly where they are, signs and zeros are kept.
    """
    if getattr(value, "dtype", None) is None or value.dtype.kind != "f":
        return value
    v = np.ascontiguousarray(value, np.float64)
    m, e = np.frexp(v)
    q = 2.0 ** (bits + 1)  # m in [0.5, 1): spacing 2^-(bits+1) is the ulp there
    t = np.abs(m) * q
    lo = np.floor(t)
    u = _hashed_uniform(v, run)
    rounded = np.copysign(lo + (u < t - lo), m) / q
    return np.where(np.isfinite(v), np.ldexp(rounded, e), v).astype(value.dtype, copy=False)


def perturb_relative(value, eps, rng):
    """``value * (1 + eps * u)``, ``u`` uniform in [-1, 1] independently per element (float values only)."""
    if getattr(value, "dtype", None) is None or value.dtype.kind != "f":
        return value
    u = rng.uniform(-1.0, 1.0, np.shape(value))
    return (np.asarray(value, np.float64) * (1.0 + eps * u)).astype(value.dtype, copy=False)


#: convolutions and their data adjoints: an output element sums a window of the input over the channels
_CONVOLUTIONS = frozenset(
    {
        "Convolution",
        "Convolution_v1",
        "_npx_convolution",
        "Deconvolution",
        "_npx_deconvolution",
        "_conv_forward_like",
        "_conv_transpose_like",
    }
)


#: ops every output element of which is a sum of K terms accumulated in one op (a GEMM's K loop, a reduction), so
#: that the rounding of its partial sums, not only that of its result, is in its error: unscaled bilinear
#: contractions of two tensor inputs (convolutions and their adjoints, dot and its adjoints, FullyConnected; a
#: further input is a bias added as one more term, or is read for its shape only) and plain sums over axes.
#: Applied to the squares of its inputs such an op gives ``sum t^2`` of its terms ``t``; applied to ones, K.
ACCUMULATING_OPS = frozenset(
    {
        *_CONVOLUTIONS,
        "_conv_weight_grad",
        "FullyConnected",
        "dot",
        "_dot_grad_lhs",
        "_dot_grad_rhs",
        "batch_dot",
        "sum",
        "sum_axis",
        "nansum",
        "_sum_to_like",
    }
)


def accumulation_noise(terms, total, squares, eps) -> np.ndarray:
    """Root-mean-square rounding error a sum of ``terms`` (K, per element) committed in a float of machine epsilon
    ``eps`` has beyond the rounding of its result -- what an emulation that rounds an op's output alone misses.

    The sum runs term by term in an order unrelated to the terms (a GEMM's K loop, FMA: one rounding per
    partial sum ``s_i``, uniform within half an ulp <= ``eps |s_i| / 2``, RMS ``eps |s_i| / (2 sqrt 3)``), so its
    error has variance ``(eps^2 / 12) sum_{i<K} s_i^2``. Over the orders of the terms, a partial sum of ``i`` of
    them has mean ``(i / K) S`` and variance ``i (K - i) / (K - 1)`` times theirs, which gives
    ``sum_{i<=K} E[s_i^2] = (K + 1) (2 S^2 + Q) / 6``, ``S`` the sum (``total``), ``Q`` the sum of the squared terms
    (``squares``); the last partial sum is the result, rounded by the emulation itself. A sum done pairwise or in
    blocks has smaller partial sums, so this is the upper end of what a correct implementation commits in any
    order: a sequential float32 sum shows 0.66 to 0.83 of it (tests/test_consistency_noise.py), ResNet-18's
    float32 convolutions (OpenBLAS; im2col and Winograd F(2x2, 3x3), forward and both adjoints) and dense layer
    0.15 to 0.7.
    """
    k = np.asarray(terms, np.float64)
    s2 = np.square(np.asarray(total, np.float64))
    partial = (k + 1.0) * (2.0 * s2 + np.asarray(squares, np.float64)) / 6.0 - s2
    return eps / (2.0 * np.sqrt(3.0)) * np.sqrt(np.maximum(partial, 0.0))


def tile_noise(op_name, sigma) -> np.ndarray:
    """``accumulation_noise`` of a convolution's output (channel-first) as a tiled algorithm spreads it: for a
    weight gradient the largest over the kernel taps of each filter-channel pair; for an output or a data
    gradient the largest over each element's spatial neighbours within one step (every 2x2 tile that holds the
    element, whatever the tiles' alignment). Other ops: ``sigma`` unchanged.

    A fast convolution computes neighbouring elements together, so one element's rounding carries its tile's
    terms: Winograd F(2x2, 3x3) (symgrad's kernels, cuDNN, oneDNN) forms a 2x2 tile of outputs (or of the data
    gradient) from one 4x4 transform, and all 3x3 taps of a filter-channel pair's weight gradient from one. An
    element whose own terms all vanish (a tap that reads only zeros: dead ReLU outputs) is exact in a direct sum
    but off by its neighbours' rounding in a transformed one (measured: float64 1e-13, float32 1e-4 beside 1)."""
    sigma = np.asarray(sigma)
    weight_grad = op_name == "_conv_weight_grad"
    if sigma.ndim < 3 or not (weight_grad or op_name in _CONVOLUTIONS):
        return sigma
    spatial = tuple(range(2, sigma.ndim))
    if weight_grad:
        return np.broadcast_to(sigma.max(axis=spatial, keepdims=True), sigma.shape).copy()
    spread = sigma.copy()
    for axis in spatial:  # a separable max filter of width 3: the max over the box is the max of the maxes
        step = spread.copy()
        lo, hi = [slice(None)] * sigma.ndim, [slice(None)] * sigma.ndim
        lo[axis], hi[axis] = slice(None, -1), slice(1, None)
        np.maximum(step[tuple(lo)], spread[tuple(hi)], out=step[tuple(lo)])
        np.maximum(step[tuple(hi)], spread[tuple(lo)], out=step[tuple(hi)])
        spread = step
    return spread


def emulation_bits(dtype):
    """Significant bits whose rounding emulates ``dtype``'s on float64 values (float64 itself: all of them, so
    rounding leaves every float64 value where it is -- its forward rounding is already in the float64 run)."""
    dt = np.dtype(dtype)
    return int(np.finfo(dt).nmant) if dt.kind == "f" else None


class RoundingEmulator:
    """The graph in float64, run exactly or with the rounding of a lower precision emulated.

    Emulated rounding: every intermediate value of the forward is rounded stochastically to ``dtype``'s grid
    (``round_to_grid``), with a different draw per run, so each run commits errors of the size ``dtype``
    commits at each operation, at different places. Equal values round
    alike and values on the grid stay put: signs, exact zeros, exact ties, ``x == max(x)`` and ``x == clip
    bound`` relations are kept, so a ReLU decision, a max-pool tie or a clip at its bound never flips between
    runs (where the noise of its inputs would flip it, the pinning of ``gradients`` keeps it), as it would not
    between two correct implementations in ``dtype``. Every value of the backward that
    carries head gradients is multiplied by ``1 + eps * u`` (``u`` uniform in [-1, 1], independent per
    element): the backward's sums then show the accumulation noise a ``dtype`` sum has, even over terms that
    are on the grid.

    Rounding inside one op is seen from outside only, through its inputs and its one rounded output, except in
    the ops that accumulate long sums (``ACCUMULATING_OPS``: convolutions and their adjoints, dot,
    FullyConnected, sums over axes): a float32 GEMM over K terms rounds every partial sum, up to ~``sqrt(K)``
    times the rounding of its result, and far more where the result cancels (measured on ResNet-18 at 64x64:
    the convolutions' own float32 error 2 to 13 times one rounding of their output; emulating that one rounding
    alone, every emulated value's error fell 3.5 to 5.5 times short of the real one). Their outputs also get
    ``accumulation_noise`` -- from K (the op on ones), the sum and the sum of squared terms (the op on the
    squares of its inputs), computed once on the exact run's values and spread over a convolution's tile
    (``tile_noise``: Winograd forms neighbouring elements from one transform) -- times a draw of unit variance, hashed
    from the value like the rounding (so equal values still move alike), in the accumulation dtype (float16
    ops accumulate in float32). Other fused ops (a hidden ``_backward_X`` op's internal sums) are not modelled.
    """

    def __init__(self, sym, values: dict, aux: dict, names, dtype, *, is_train=True, seed=0, outputs=False):
        from symgrad.context import cpu

        self.sym = sym
        self.out_names = sym.list_outputs() if outputs else []
        self.bits = emulation_bits(dtype)
        self.dtype = np.dtype(dtype)
        host = {k: np.asarray(to_numpy(v)) for k, v in values.items()}
        self.args = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v.copy()) for k, v in host.items()}
        self.aux = {k: np.asarray(to_numpy(v)).astype(np.float64) for k, v in aux.items()}
        self.names = list(names)
        self.bufs = {k: np.zeros(self.args[k].shape, np.float64) for k in self.names}
        self.exe = sym.bind(
            cpu(),
            {k: v.copy() for k, v in self.args.items()},
            args_grad=self.bufs,
            grad_req={k: ("write" if k in self.bufs else "null") for k in self.args},
            aux_states={k: v.copy() for k, v in self.aux.items()},
        )
        self.is_train = bool(is_train)
        self.run = int(seed) * 1000
        self.rng = np.random.default_rng(seed)
        self.eps = float(np.finfo(self.dtype).eps) if self.dtype.kind == "f" else 0.0
        self.bound = set(self.args) | set(self.aux)  # any other variable of the plan is a head gradient
        self._carry: dict[int, bool] = {}  # node id -> whether it computes from a head gradient
        self.acc_eps = float(np.finfo(acc_dtype(self.dtype)).eps) if self.dtype.kind == "f" else 0.0
        self._decisions = None  # the exact forward's (test_utils.decisions.DecisionRecord), pinned when emulating
        self._sigma: dict = {}  # (row or None for the forward, node id) -> accumulation noise, from the exact run
        self._values: dict = {}  # the exact run's values by (node id, output), while it runs
        self._heads: dict = {}  # the head gradients of the backward running, by variable name
        self._row = None  # the row whose backward runs (None: the forward)
        self._terms: dict = {}  # (node id, input shapes) -> the number of terms each output element sums

    def _round(self, value):
        return round_to_grid(value, self.bits, self.run)

    def _carries(self, node) -> bool:
        """Whether ``node`` computes from a head gradient (nodes come in execution order, so inputs are known)."""
        found = self._carry.get(node.id)
        if found is None:
            found = any(
                (src.op is None and src.name not in self.bound) or self._carry.get(src.id, False)
                for src, _ in node.inputs
            )
            self._carry[node.id] = found
        return found

    # -- rounding inside the accumulating ops --------------------------------------------------------------
    def _input(self, src, idx):
        """The value of input ``(src, idx)`` in the exact run, or None where it is not known."""
        if src.op is not None:
            return self._values.get((src.id, idx))
        for arrays in (self.exe.arg_dict, self.exe.aux_dict):
            if src.name in arrays:
                return np.asarray(to_numpy(arrays[src.name]))
        return self._heads.get(src.name)

    def _op(self, node, inputs):
        params = dict(node.params)
        if node.op.needs_is_train:
            params["is_train"] = self.is_train
        return np.asarray(node.op.forward(np, *inputs, **params), np.float64)

    def _exact(self, node, k, value, phase):
        """The exact run's hook (before emulated runs): keeps every value while the run lasts, and the
        ``accumulation_noise`` of each ``ACCUMULATING_OPS`` output -- K from the op on ones, the sum of squared
        terms from the op on the squares of its inputs."""
        self._values[(node.id, k)] = value
        if node.op is None or node.op.name not in ACCUMULATING_OPS or k != 0 or not self.acc_eps:
            return value
        inputs = [self._input(src, idx) for src, idx in node.inputs]
        if all(x is not None and x.dtype.kind == "f" for x in inputs) and value.dtype.kind == "f":
            key = (node.id, tuple(x.shape for x in inputs))
            terms = self._terms.get(key)
            if terms is None:  # the count of terms depends on the shapes alone
                terms = self._terms[key] = self._op(node, [np.ones(x.shape) for x in inputs])
            squares = self._op(node, [np.square(x, dtype=np.float64) for x in inputs])
            sigma = accumulation_noise(terms, value, squares, self.acc_eps)
            self._sigma[(self._row, node.id)] = tile_noise(node.op.name, sigma)
        return value

    def _emulate(self, node, k, value, phase):
        """Values computed from forward values only (the forward, and the backward's masks such as
        ``x == broadcast(max)``): rounded, so decisions, ties and bounds are kept. Values that carry head
        gradients -- the terms the gradient's sums accumulate, read by no decision -- get an independent
        relative error of up to ``eps`` each, which also stands for the rounding inside the ops that sum them
        a few terms at a time. The outputs of ``ACCUMULATING_OPS`` first get the rounding of their long sums:
        the exact run's ``accumulation_noise`` times a draw of unit variance (uniform, hashed from the value like
        the rounding, with another key)."""
        sigma = self._sigma.get((self._row, node.id)) if k == 0 else None
        if sigma is not None:
            v = np.ascontiguousarray(value, np.float64)
            u = _hashed_uniform(v, self.run + 0x5EED)
            value = (v + sigma * np.sqrt(3.0) * (2.0 * u - 1.0)).astype(value.dtype, copy=False)
        if phase == "forward" or not self._carries(node):
            return self._round(value)
        return perturb_relative(value, self.eps, self.rng)

    # -- runs ----------------------------------------------------------------------------------------------
    def gradients(self, rows, rounding: bool) -> list[dict]:
        """One forward, then one backward per entry of ``rows`` (a list of head-gradient lists); each row's dict
        also holds the outputs when the emulator was made with ``outputs=True`` (no rows: the outputs alone).

        An emulated run (``rounding``) takes the decisions (relu masks, max-pool choices: ``test_utils.decisions``)
        of the exact run before it, pinned by value where its rounding would flip one: a flip is a jump, not
        rounding, and two correct implementations whose rounding differs decide alike (``check_consistency``
        pins the flips between its entries the same way). Without it, the accumulation noise of a ReLU input
        within rounding of 0 (a small batch's normalisation) flipped its mask in some runs, and every gradient
        upstream took the jump for noise (ResNet-18: hundreds of times its real float32 error). The exact run
        that ``noise`` makes first records them, and the accumulation noise of its values (for its rows); without
        one, an emulated run makes it first."""
        if rounding and self._decisions is None:
            self._measured_run(rows)
        return self._run(rows, rounding)

    def _measured_run(self, rows):
        """The exact run that records the decisions and the accumulation noise the emulated runs use."""
        self._sigma.clear()
        try:
            return self._run(rows, False, measure=True)
        finally:
            self._values.clear()

    def _run(self, rows, rounding, measure=False):
        from .decisions import pin_decisions, record_decisions

        exe = self.exe
        self.run += 1
        for k, v in self.aux.items():
            exe.aux_dict[k][...] = v
        # the arguments and head gradients are given exactly in the dtype under test: only what is computed rounds
        exe.set_value_hook(self._emulate if rounding else self._exact if measure else None)
        self._row = None
        try:
            if rounding:
                pin_decisions(exe, self._decisions, is_train=self.is_train)
                outs = exe.outputs
            elif measure:
                self._decisions = record_decisions(exe, is_train=self.is_train)
                outs = exe.outputs
            else:
                outs = exe.forward(is_train=self.is_train)
            values = {n: np.array(to_numpy(o), np.float64, copy=True) for n, o in zip(self.out_names, outs)}
            out = [] if rows else [dict(values)]
            for i, heads in enumerate(rows):
                heads = [None if h is None else np.asarray(to_numpy(h), np.float64) for h in heads]
                self._row, self._heads = i, {f"__head_grad{j}__": h for j, h in enumerate(heads) if h is not None}
                # clean buffers for every run: a custom op that adds where it should write (a stale-buffer bug)
                # must not make the runs differ, or the "noise" measures the bug and excuses it (it did: float32
                # check_numeric_gradient passed such an op); the checkers' own dirty-buffer passes catch it
                for b in self.bufs.values():
                    b[...] = 0.0
                exe.backward(heads)
                out.append({**values, **{k: b.copy() for k, b in self.bufs.items()}})
        finally:
            exe.set_value_hook(None)
            self._row, self._heads = None, {}
            for k, v in self.aux.items():
                exe.aux_dict[k][...] = v
        return out

    def _stateful(self, rows, exact) -> bool:
        """Whether an exact rerun differs from the first exact run ``exact``: a ``Custom`` op whose backward depends
        on earlier calls (symgrad's own ops are pure, so only graphs with Custom nodes are rerun). Cost there: one
        more forward and backward per row."""
        from .buffers import custom_nodes

        if not custom_nodes(self.sym):
            return False
        for again, ex in zip(self._run(rows, False), exact):
            for k, g in ex.items():
                scale = float(np.max(np.abs(g), where=np.isfinite(g), initial=0.0))
                if not np.allclose(again[k], g, rtol=0.0, atol=1e-12 * scale, equal_nan=True):
                    return True
        return False

    def noise(self, rows) -> tuple[list, list]:
        """``(exact, noise)``: per row, ``{name: float64 gradient}`` and ``{name: EMULATION_SIGMAS x the RMS
        deviation of EMULATION_RUNS emulated runs}``. Cost: ``EMULATION_RUNS + 1`` forwards and that many
        backwards per row, and one more evaluation of each accumulating op per row."""
        eps = float(np.finfo(self.dtype).eps) if self.dtype.kind == "f" else 0.0
        if self.bits is None or not (self.names or self.out_names) or self.dtype.itemsize >= 8:
            # float64 under test: its forward rounding is the run itself, and its backward's (~1e-16 relative)
            # is far below the numeric reference's noise; only the rounding of the result is counted
            exact = self.gradients(rows, False)
            return exact, [{k: NOISE_FACTOR * eps * np.abs(g) for k, g in e.items()} for e in exact]
        exact = self._measured_run(rows)
        square = [{k: np.zeros_like(g) for k, g in e.items()} for e in exact]
        for _ in range(EMULATION_RUNS):
            for sq, run, ex in zip(square, self.gradients(rows, True), exact):
                for k in sq:
                    sq[k] += (run[k] - ex[k]) ** 2
        if self._stateful(rows, exact):
            # the runs differ by a custom op's memory (a gradient it keeps and never resets), not by rounding:
            # counted as noise it excused that bug in float32; only the rounding of the result is counted, and the
            # checkers' repeated-backward probe names the bug
            return exact, [{k: NOISE_FACTOR * eps * np.abs(g) for k, g in e.items()} for e in exact]
        # plus the rounding of the result itself, which a value already on the grid does not show
        return exact, [
            {
                k: EMULATION_SIGMAS * np.sqrt(v / EMULATION_RUNS) + NOISE_FACTOR * eps * np.abs(ex[k])
                for k, v in sq.items()
            }
            for sq, ex in zip(square, exact)
        ]


#: the measured difference of a gradient in the dtype under test from float64 is excused up to this share of the
#: largest gradient entry of the check (rounding inside an opaque op: a custom op's own float32 arithmetic);
#: a precision bug larger than that is never taken for noise
MEASURED_CAP = 1e-3


def analytic_noise(sym, values: dict, aux: dict, heads: list, names, dtype, *, is_train=True, seed=0, actual=None):
    """``({name: float64 gradient}, {name: noise})``: the gradient of ``sum(heads * outputs)`` computed in
    float64, and the rounding noise the same computation has in ``dtype``.

    The noise is estimated by emulation (``RoundingEmulator``): ``EMULATION_SIGMAS`` times the
    root-mean-square deviation of ``EMULATION_RUNS`` float64 runs with ``dtype``'s rounding emulated from the
    exact one. This is the magnitude of what was summed times ``eps``, as a running error analysis would
    give it, including cancellation in the forward and in the backward: a gradient that is exactly zero in
    exact arithmetic (a mean subtracted before a normalisation) gets the noise its float32 computation
    really shows, a well-conditioned one gets ``~eps |g|``. Emulation sees an op from outside only; a custom
    op doing its own float32 arithmetic can round more inside. So with ``actual`` (``{name: the gradient
    computed in dtype}``), twice the measured ``|actual - float64 gradient|`` counts as noise too, up to
    ``MEASURED_CAP`` times the largest float64 gradient entry of the check. Cost: ``EMULATION_RUNS + 1``
    forward and backward passes in float64.
    """
    rows_exact, rows_noise = RoundingEmulator(sym, values, aux, names, dtype, is_train=is_train, seed=seed).noise(
        [heads]
    )
    exact, noise = rows_exact[0], rows_noise[0]
    if actual is not None:
        noise = with_measured(noise, exact, actual, dtype)
    return exact, noise


def rescaled_rounding(backward, base: dict) -> dict | None:
    """``{name: noise}``: the rounding of the gradients ``base``, measured by running the same backward again with
    every head gradient scaled by ``c = 1 + j 2^-20`` (j = 1 .. ``EMULATION_RUNS``; ``backward(c)`` returns the
    gradients of that run): a backward is linear in its head gradient, so ``g_c / c`` is the same gradient with
    its arithmetic rounded differently, and ``EMULATION_SIGMAS`` times the RMS of ``g_c / c - g`` bounds the
    rounding of ``g``. A wrong value that is not rounding scales with ``c`` and does not move; one that ignores
    the head gradient moves by ``j 2^-20`` of itself: neither is taken for rounding. None where ``backward(1.0)``
    does not give ``base`` bit for bit (state kept between calls, fresh random numbers, another device): not
    this run's arithmetic, nothing to measure it by. For float64, whose rounding the model only counts as
    ``4 eps |g|``: an exactly-zero gradient computed with cancellation. Cost: ``EMULATION_RUNS + 1`` backwards."""
    again = backward(1.0)
    if any(not np.array_equal(again[k], g, equal_nan=True) for k, g in base.items()):
        return None
    square = {k: np.zeros(np.shape(g)) for k, g in base.items()}
    for j in range(1, EMULATION_RUNS + 1):
        c = 1.0 + j * 2.0**-20
        got = backward(c)
        for k, g in base.items():
            square[k] += (got[k] / c - g) ** 2
    return {k: EMULATION_SIGMAS * np.sqrt(v / EMULATION_RUNS) for k, v in square.items()}


def largest_finite(arrays: dict) -> float:
    """The largest ``|entry|`` of the finite entries of ``arrays`` (one NaN gradient must not make every element's
    noise NaN); 0.0 for none."""
    return max((float(np.max(np.abs(g), where=np.isfinite(g), initial=0.0)) for g in arrays.values()), default=0.0)


def with_measured(noise: dict, exact: dict, actual: dict, dtype, scale=None) -> dict:
    """``noise`` raised to twice the measured ``|actual - exact|``, capped at ``MEASURED_CAP`` times ``scale``
    (default: the largest ``|exact|`` entry of all the arrays); float64 under test: ``noise`` unchanged."""
    if np.dtype(dtype).itemsize >= 8:
        return noise
    if scale is None:
        scale = largest_finite(exact)
    out = {}
    for k, v in noise.items():
        with np.errstate(invalid="ignore"):
            measured = 2.0 * np.abs(np.asarray(to_numpy(actual[k]), np.float64) - exact[k])
        measured[np.isnan(measured)] = 0.0  # a NaN gradient is judged as NaN, not excused as noise
        out[k] = np.maximum(v, np.minimum(measured, MEASURED_CAP * scale))
    return out
