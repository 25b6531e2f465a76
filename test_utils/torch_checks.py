"""PyTorch's ``gradcheck`` and ``gradgradcheck`` on symgrad graphs.

Names, keyword-only options and semantics are those of ``torch.autograd.gradcheck`` (2.x): ``func``
receives one input Variable per array of ``inputs`` (named ``input0``, ``input1``, ...; anything that
is not an array is passed as it is) and returns a Symbol or a tuple of Symbols. Only float inputs are
checked (PyTorch checks the tensors with ``requires_grad``) and only float outputs are differentiated.
The result is True, or a ``GradientCheckError`` (False with ``raise_exception=False``).

Method (slow mode, the default): for every differentiable output ``i`` and checked input ``j`` the
analytic Jacobian is built row by row, one backward per output element with a one-hot head gradient,
twice (the two results must agree within ``nondet_tol``: backward must be deterministic), and compared
with the numeric Jacobian (central differences ``x +- eps``, one column per input element) by
``torch.allclose``'s rule ``|analytic - numeric| <= atol + rtol * |numeric|``. Cost: 2 backward per
output element, 2 partial forwards per input element. ``fast_mode`` compares ``u^T J v`` for random
unit vectors instead (two backward passes per output, two forwards per input and output), allowing
``atol * min(sum|u| sum|v|, 16 |u| |v|) + rtol * |numeric|`` (PyTorch: ``atol * sum(u) * sum(v)`` for its
positive vectors; see ``fast_atol_scale``). ``check_undefined_grad``: zero head gradients must give zero gradients.

Differences from PyTorch (trustworthy numbers):

- the numeric Jacobian is taken on a float64 copy of the graph and inputs whatever dtype is under test
  (``float64_reference=True``, keyword-only). An explicit ``eps`` is the caller's step and is used as
  is, on the float64 copy; that is why a correct float32 op passes here with the default
  ``eps=1e-6`` where PyTorch's float32 differences (``x +- 1e-6`` rounded to float32) fail it.
  ``eps=None`` picks a step per element, ``h = cbrt(eps_64) * max(|x|, 1)``;
- the allowed error also holds the estimated rounding noise of the reference and of the backward in
  the dtype under test (tiny against rtol/atol for float32 and float64);
- ``u`` and ``v`` of fast mode have random signs (PyTorch: entries in [0, 1)), so the projection cancels
  instead of summing and a wrong element is diluted less, and the ``atol`` it allows grows with the
  standard deviation of an allowed error (``16 |u| |v|``), not with its worst case (``sum|u| sum|v|``,
  ~sqrt(output size * input size)): one element of 1 000 off by 25% is caught in most seeds, where the
  worst-case bound never catches it (the full Jacobian always does);
- the report names the worst Jacobian entries, then the failing pair as a gradient: backward with random
  head weights ``u`` against per-element central differences (``test_utils.numeric``), in the input's
  shape, whose diagnosis names the bug (scaled, doubled, sign flipped, missing, transposed, wrong
  broadcast reduction, confined to a few elements, a non-differentiable point, ...); inputs of at most
  5 000 elements.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import symgrad as sg
from symgrad.context import array_context

from ._inputs import check_callable, check_flag, check_number
from .compare import compare
from .differencer import default_steps
from .frames import hide_from_pytest as _hide_from_pytest
from .funcgraph import MAX_LOCALISE, FuncGraph, OnlyKinks, Reference, as_tuple, only_kinks, symbols_of
from .harness import RoundingEmulator, analytic_noise, largest_finite, with_measured
from .numeric import KinkRedraws, check_step, relative_step
from .report import GradientCheckError, Report
from .scaleout import check_pool
from .seed import seeded_check
from .ties import off_ties, retaking
from .tolerance import numeric_noise, violations

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from symgrad.symbol import Symbol

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

__all__ = ["gradcheck", "gradgradcheck"]


@seeded_check
def gradcheck(
    func: Callable[..., Symbol | Sequence[Symbol]],
    inputs: np.ndarray | Sequence[Any],
    *,
    eps: float | None = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    fast_mode: bool = False,
    float64_reference: bool = True,
    progress: bool = True,
    executor: Executor | None = None,
    probes: bool | None = None,
) -> bool:
    """Check the gradients of ``func`` at ``inputs`` against finite differences (PyTorch's ``gradcheck``).

    Method:
        Slow mode (the default): for every float output ``i`` and float input ``j`` the analytic Jacobian is
        built row by row, one backward per output element with a one-hot head gradient, twice (the two must
        agree within ``nondet_tol``: backward must be deterministic), and compared with the numeric Jacobian,
        one column per input element by central differences ``x +- eps`` on a float64 copy of the graph and
        inputs (``float64_reference``). ``fast_mode`` compares ``u^T J v`` for random unit vectors ``u``
        (output) and ``v`` (input) with random signs instead. ``check_undefined_grad``: zero head gradients
        must give exactly zero gradients. A failure is reported with the worst Jacobian entries and the
        failing pair as a gradient (backward with random head weights against per-element differences),
        whose diagnosis names the bug; mismatches at kinks are re-drawn as in ``check_numeric_gradient``.

    Cost:
        Slow mode: 2 backward passes per output element and 2 partial forwards per input element (one
        Jacobian column each, all outputs at once), plus the analytic rounding-noise estimate per Jacobian
        row (7 float64 forward and backward passes per output element for float16/float32 inputs, 1 for
        float64): quadratic in the sizes, meant for small inputs (``executor`` spreads the columns). Fast
        mode: 2 backward passes per output and 2 forwards per (output, input) pair, plus the noise estimates.

    Tolerance:
        Slow mode, per Jacobian entry: ``|analytic - numeric| <= atol + rtol * |numeric| + numeric noise +
        analytic noise`` (``torch.allclose``'s rule plus the two rounding noises: ``4 eps_64 |y_i| / width``
        of the float64 difference, and the emulated rounding of the row in the dtype under test; both tiny
        against PyTorch's defaults ``atol=1e-5``, ``rtol=1e-3``). Fast mode: ``|analytic u^T J v - numeric
        u^T J v| <= atol * min(sum|u| sum|v|, 16 |u| |v|) + rtol * |numeric| + noise`` (``fast_atol_scale``:
        the spread of an allowed error under random signs, not PyTorch's worst case). Re-entrance: the two
        backward passes may differ by ``nondet_tol`` (absolute). ``check_undefined_grad``: exact zeros.

    Args:
        func: takes one Symbol per array of ``inputs`` and returns a Symbol or a tuple of Symbols.
        inputs: an array or a tuple (arrays become Variables ``input0``, ...; other values pass through).
        eps: half-width of the central differences (used as given, on the float64 reference); None for a
            step per element, ``cbrt(eps_64) * max(|x|, 1)``.
        atol, rtol: ``|analytic - numeric| <= atol + rtol * |numeric|`` (+ rounding noise).
        raise_exception: False returns False instead of raising ``GradientCheckError``.
        nondet_tol: allowed difference between two backward passes with the same head gradient.
        check_undefined_grad: zero head gradients must give zero input gradients.
        fast_mode: compare ``u^T J v`` for random unit vectors ``u``, ``v`` instead of full Jacobians.
        float64_reference: take the finite differences on float64 copies (default True).
        progress: a tqdm bar when a numeric Jacobian runs longer than 2 seconds.
        probes: the special-point probes (``test_utils.probes``): None (default) where the graph has Custom
            nodes, True everywhere, False never.
        executor: a ``concurrent.futures.Executor`` (a process pool, a Dask client's ``get_executor()``) over
            whose workers the columns of the numeric Jacobians (and a failure's per-element view) are spread;
            the graph travels as its JSON, and the result and report are those of the serial run. Fast mode's
            directional derivatives (two evaluations each) stay serial.

    Returns:
        True (or False with ``raise_exception=False`` when a check fails).

    Raises:
        GradientCheckError: a Jacobian mismatch, a non-deterministic backward, a non-zero gradient for
            zero head gradients.
        ValueError / TypeError / NotImplementedError: no float input, arguments without values, loss heads,
            complex or NaN/Inf inputs (named), a forward that is not deterministic (Dropout in training: the op
            is named), an ``eps`` below ``numeric.min_step`` of the reference's dtype (PyTorch's eps=1e-6 with
            ``float64_reference=False`` on float32 inputs: rounding would swamp the differences and hide
            errors in the noise allowance).

    >>> import numpy as np, symgrad as sg
    >>> x = np.random.uniform(-1, 1, (2, 3)).astype(np.float32)  # float32 passes: float64 reference
    >>> gradcheck(lambda x: sg.sym.tanh(x) * x, (x,))
    True
    """
    check_flag(raise_exception, "gradcheck", "raise_exception")
    try:
        opts = _Options(eps, atol, rtol, nondet_tol, check_undefined_grad, fast_mode, float64_reference, progress)
        return _gradcheck("gradcheck", func, inputs, None, opts, executor=executor, probes=probes)
    except GradientCheckError:
        if raise_exception:
            raise
        return False


@seeded_check
def gradgradcheck(
    func: Callable[..., Symbol | Sequence[Symbol]],
    inputs: np.ndarray | Sequence[Any],
    grad_outputs: np.ndarray | Sequence[np.ndarray] | None = None,
    *,
    eps: float | None = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    gen_non_contig_grad_outputs: bool = False,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    fast_mode: bool = False,
    float64_reference: bool = True,
    progress: bool = True,
    executor: Executor | None = None,
) -> bool:
    """Check the second-order gradients of ``func`` (PyTorch's ``gradgradcheck``).

    ``gradcheck`` is applied to the vector-Jacobian product ``(inputs, grad_outputs) -> symgrad.grad(
    outputs, float inputs, grad_outputs)``, built as Symbols, so its backward runs the gradient rules of
    the gradient graph. ``grad_outputs`` (one array per float output) default to uniform values in
    [-1, 1) drawn from numpy's global RNG; ``gen_non_contig_grad_outputs`` makes them non-contiguous views.
    Other arguments (``executor`` too: the gradient graph travels as its JSON) as ``gradcheck``.

    Method:
        ``gradcheck``'s, on the vector-Jacobian product: its inputs are ``inputs`` and ``grad_outputs`` (both
        differentiated), its outputs the input gradients.

    Cost:
        ``gradcheck``'s on the gradient graph: the Jacobians have one row per element of the input gradients
        and one column per element of ``inputs`` and ``grad_outputs``.

    Tolerance:
        ``gradcheck``'s model, with the same defaults (``atol=1e-5``, ``rtol=1e-3``).

    >>> import numpy as np, symgrad as sg
    >>> x = np.random.uniform(-1, 1, (2, 3))
    >>> gradgradcheck(lambda x: sg.sym.sin(x) * x, (x,))
    True
    """
    who = "gradgradcheck"
    _check_options(
        who,
        func,
        eps,
        atol,
        rtol,
        nondet_tol,
        {"gen_non_contig_grad_outputs": gen_non_contig_grad_outputs, "raise_exception": raise_exception},
    )
    try:
        tupled = as_tuple(inputs)
        names = _names(tupled, "input")
        probe = FuncGraph(who, func, _entries(tupled, names), {}, allow_params=False)
        diff_out = [k for k, dt in enumerate(probe.out_dtypes) if dt.kind == "f"]
        if grad_outputs is None:
            gos = tuple(
                _random_grad(probe.out_shapes[k], probe.out_dtypes[k], gen_non_contig_grad_outputs) for k in diff_out
            )
        else:
            gos = as_tuple(grad_outputs)
            if len(gos) != len(diff_out):
                raise ValueError(
                    f"{who}: {len(gos)} grad_outputs for {len(diff_out)} differentiable outputs "
                    f"{[probe.out_names[k] for k in diff_out]}"
                )
            for g, k in zip(gos, diff_out):
                if tuple(np.shape(g)) != probe.out_shapes[k]:
                    raise ValueError(
                        f"{who}: grad_output for {probe.out_names[k]!r} has shape {tuple(np.shape(g))}, "
                        f"expected {probe.out_shapes[k]}"
                    )
        n_in = len(tupled)
        diff_in = [i for i, v in enumerate(tupled) if array_context(v) is not None and np.dtype(v.dtype).kind == "f"]

        def vjp(*args):
            outs = symbols_of(func(*args[:n_in]), who)
            gs = sg.grad([outs[k] for k in diff_out], [args[i] for i in diff_in], grad_outputs=list(args[n_in:]))
            gs = [g for g in gs if g is not None]
            if not gs:
                raise ValueError(f"{who}: no input gradient flows from the outputs of func: nothing to check")
            return tuple(gs)

        go_names = [f"grad_output{k}" for k in range(len(gos))]
        opts = _Options(eps, atol, rtol, nondet_tol, check_undefined_grad, fast_mode, float64_reference, progress)
        return _gradcheck(
            who,
            vjp,
            tupled + tuple(gos),
            names + go_names,
            opts,
            executor=executor,
            wrap="second order: the backward of the vector-Jacobian product (inputs, grad_outputs) -> "
            "grad(outputs, inputs, grad_outputs) disagrees with its finite differences",
        )
    except GradientCheckError:
        if raise_exception:
            raise
        return False


# == implementation ======================================================================================


def _names(tupled, prefix):
    return [f"{prefix}{i}" for i in range(len(tupled))]


def _entries(tupled, names):
    return [(n, v) if array_context(v) is not None else (None, v) for n, v in zip(names, tupled)]


def _random_grad(shape, dtype, non_contiguous):
    values = np.random.uniform(-1.0, 1.0, size=shape).astype(dtype)
    if not non_contiguous or values.size == 0:
        return values
    holder = np.zeros(tuple(shape) + (2,), dtype)
    view = holder[..., 0]
    view[...] = values
    return view


#: fast mode allows ``atol * FAST_ATOL_SIGMAS * |u| |v|`` (at most PyTorch's ``atol * sum|u| * sum|v|``)
FAST_ATOL_SIGMAS = 16.0


def fast_atol_scale(u, v) -> float:
    """The factor of ``atol`` that fast mode allows on ``u^T J v``.

    PyTorch's ``sum|u| * sum|v|`` is the worst case of an error of ``atol`` on every Jacobian entry with
    signs lined up with ``u`` and ``v``; for unit vectors of n and m entries that is ~sqrt(n m), so one
    wrong entry among many goes unseen (0 of 100 seeds for one of 1 000 elements off by 25%). With random
    signs, an error ``E`` with ``|E_ij| <= atol`` (what the full Jacobian allows) gives ``u^T E v`` of
    standard deviation at most ``atol |u| |v|``; ``FAST_ATOL_SIGMAS`` of those is what is allowed here.
    """
    u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
    worst = float(np.abs(u).sum()) * float(np.abs(v).sum())
    return min(worst, FAST_ATOL_SIGMAS * float(np.linalg.norm(u)) * float(np.linalg.norm(v)))


def _unit(size):
    """A random unit vector: random signs, magnitudes uniform in [0.5, 1.5) before normalisation.

    PyTorch draws entries in [0, 1): all positive, so an error in one element is diluted by the sum of
    all the others; random signs make the projection cancel instead, and one wrong element stands out.
    """
    v = np.random.uniform(0.5, 1.5, size=size) * np.where(np.random.random_sample(size) < 0.5, -1.0, 1.0)
    return v / float(np.linalg.norm(v)) if size else v


def _check_options(who, func, eps, atol, rtol, nondet_tol, flags=None):
    """The options of gradcheck / gradgradcheck, checked before ``func`` is called (``flags``: the boolean ones)."""
    check_callable(func, who)
    check_number(eps, who, "eps", positive=True, allow_none=True)
    for label, v in (("atol", atol), ("rtol", rtol), ("nondet_tol", nondet_tol)):
        check_number(v, who, label)
    for label, v in (flags or {}).items():
        check_flag(v, who, label)


def _validate(who, func, inputs, names, eps, atol, rtol, nondet_tol, flags=None):
    """Phase 1: the graph of ``func`` at ``inputs``, the checked inputs and the validated options."""
    _check_options(who, func, eps, atol, rtol, nondet_tol, flags)
    tupled = as_tuple(inputs)
    names = names or _names(tupled, "input")
    graph = FuncGraph(who, func, _entries(tupled, names), {}, allow_params=False)
    if any(graph.loss_heads):
        heads = [n for n, loss in zip(graph.out_names, graph.loss_heads) if loss]
        raise NotImplementedError(
            f"{who}: outputs {heads} come from loss heads, whose backward ignores the head "
            "gradient, so they have no Jacobian to check; use check_numeric_gradient or "
            "check_backward(y_grad=None)"
        )
    diff = [n for n, v in zip(names, tupled) if array_context(v) is not None and np.dtype(v.dtype).kind == "f"]
    if not diff:
        dtypes = [getattr(v, "dtype", type(v).__name__) for v in tupled]
        raise ValueError(
            f"{who} expects at least one float input array to check (PyTorch: requires_grad=True); "
            f"the inputs have dtypes {dtypes}"
        )
    return graph, diff


@dataclasses.dataclass(frozen=True)
class _Options:
    """The settings gradcheck and gradgradcheck share, as the user gave them (``_validate`` checks them)."""

    eps: Any
    atol: Any
    rtol: Any
    nondet_tol: Any
    check_undefined_grad: Any
    fast_mode: Any
    float64_reference: Any
    progress: Any


def _gradcheck(who, func, inputs, names, opts: _Options, wrap=None, executor=None, probes=False):
    eps, atol, rtol, nondet_tol = opts.eps, opts.atol, opts.rtol, opts.nondet_tol
    check_undefined_grad, fast_mode = opts.check_undefined_grad, opts.fast_mode
    float64_reference, progress = opts.float64_reference, opts.progress
    flags = {
        "check_undefined_grad": check_undefined_grad,
        "fast_mode": fast_mode,
        "float64_reference": float64_reference,
        "progress": progress,
    }
    if executor is not None:
        check_pool(executor, who)
    graph, diff = _validate(who, func, inputs, names, eps, atol, rtol, nondet_tol, flags)
    eps = None if eps is None else float(eps)
    atol, rtol, nondet_tol = float(atol), float(rtol), float(nondet_tol)
    used = [n for n in diff if n in graph.arg_names]
    out_diff = [k for k, dt in enumerate(graph.out_dtypes) if dt.kind == "f"]
    ndtype = np.float64 if float64_reference else None
    kinks = None
    while True:
        ref = Reference(graph, ndtype, graph.weights([None] * len(graph.out_shapes)), progress, executor)
        check_step(
            eps,
            ref.dtype,
            ref.dtype,
            who,
            " PyTorch's default eps=1e-6 is meant for float64 differences: "
            "keep float64_reference=True (the default), or give a larger eps (or eps=None for a step per "
            "element).",
        )
        kinks = kinks or KinkRedraws(who, graph.values, relative_step(ref.dtype, graph.values))
        under_test = ", ".join(sorted({np.dtype(graph.values[n].dtype).name for n in used} or {"-"}))
        eps_desc = f"{eps:g} (x +- eps)" if eps is not None else f"per element, {ref.step_description}"
        context = [
            f"dtype under test {under_test}, numeric reference in {ref.dtype.name}"
            f"{'' if float64_reference else ' (float64_reference=False)'}, forward is_train=True"
        ]
        if wrap:
            context.append(wrap)
        check = _Check(who, graph, ref, used, eps, eps_desc, rtol, atol, nondet_tol, context, kinks)
        if not out_diff:
            check.numeric_is_zero()
            return True
        exe, bufs = graph.executor(used)
        try:
            check.fast(exe, bufs, out_diff) if fast_mode else check.slow(exe, bufs, out_diff)
        except OnlyKinks as only:
            kinks.handle(only.kinks, (lambda arg, i: eps) if eps is not None else None)
            continue
        except GradientCheckError as err:
            moved = off_ties(graph, who, f"the Jacobian of {err.arg_name!r}")
            if moved is None:
                raise
            tupled = as_tuple(inputs)
            names = names or _names(tupled, "input")
            with retaking():
                return _gradcheck(
                    who,
                    func,
                    tuple(moved.get(n, v) for n, v in zip(names, tupled)),
                    names,
                    opts,
                    wrap,
                    executor,
                    probes,
                )
        break
    if check_undefined_grad:
        check.undefined_grad(exe, bufs)
    if out_diff:
        graph.probe_buffers(used, check.probe_heads(out_diff), who)
        graph.probe_points(probes, used, check.probe_heads(out_diff), who, rtol, atol)
    kinks.warn(stacklevel=5)
    return True


#: rows of a Jacobian whose rounding noise one emulator call estimates (``_Check._rows_noise``): memory in
#: proportion to it, not to the output's size
NOISE_BLOCK = 512


def _jacobian_noise(ref, widths, k):
    """The rounding noise of a numeric Jacobian block of output ``k``: per entry, the output element's rounding
    over its column's width."""
    return numeric_noise(1.0, widths, ref.dtype)[None, :] * np.abs(ref.base[k]).reshape(-1, 1)


class _Check:
    """One gradcheck: the graph, its float64 reference and the settings (phases 3-5)."""

    def __init__(self, who, graph, ref, used, eps, eps_desc, rtol, atol, nondet_tol, context, kinks):
        self.who, self.graph, self.ref, self.used = who, graph, ref, used
        self.eps, self.eps_desc, self.rtol, self.atol, self.nondet_tol = eps, eps_desc, rtol, atol, nondet_tol
        self.context, self.kinks, self.excluded = context, kinks, kinks.excluded
        self._pinned = None  # the reference on the forward's pieces, made when first needed (False: nothing to pin)

    # -- helpers ---------------------------------------------------------------------------------------
    def _steps(self, name):
        if self.eps is None:
            return default_steps(self.ref.args[name], self.ref.dtype)
        return np.full(self.ref.args[name].shape, self.eps)

    def _dir_step(self, name):
        if self.eps is not None:
            return self.eps
        x = np.abs(self.ref.args[name].astype(np.float64))
        return float(np.cbrt(np.finfo(self.ref.dtype).eps)) * max(float(x.max()) if x.size else 0.0, 1.0)

    def _weights(self, k, u):
        """Weights of the outputs in a gradient view: ``u`` on output ``k`` (in its shape), zeros elsewhere."""
        weights = [np.zeros(s) for s in self.graph.out_shapes]
        weights[k] = np.reshape(u, self.graph.out_shapes[k])
        return weights

    def _heads(self, k=None, value=None):
        """Head gradients: zeros everywhere, ``value`` on output ``k``."""
        heads = [
            np.zeros(s, dt if dt.kind == "f" else np.float64)
            for s, dt in zip(self.graph.out_shapes, self.graph.out_dtypes)
        ]
        if k is not None:
            heads[k] = np.asarray(value).reshape(self.graph.out_shapes[k]).astype(heads[k].dtype)
        return heads

    def probe_heads(self, out_diff):
        """Seeded random head gradients on the float outputs, zeros elsewhere (``buffers.probe``)."""
        rng = np.random.default_rng(21)
        heads = self._heads()
        for k in out_diff:
            heads[k] = rng.standard_normal(heads[k].shape).astype(heads[k].dtype)
        return heads

    def _oname(self, k):
        return f"output {k} ({self.graph.out_names[k]!r})"

    def _iname(self, n):
        return f"input {self.graph.input_names.index(n)} ({n!r})"

    def _excluded_mask(self, n):
        mask = np.zeros(self.graph.values[n].shape, bool)
        for i in self.excluded.get(n, ()):
            mask[i] = True
        return mask

    def _reentrant(self, first, second, k):
        for n in self.used:
            try:
                # NaN in the same places both times is deterministic: the NaN itself is judged against the numeric
                # side (a NaN gradient where the function is finite), not called non-reentrant
                compare(
                    second[n],
                    first[n],
                    0.0,
                    self.nondet_tol,
                    check=self.who,
                    arg_name=n,
                    equal_nan=True,
                    names=("backward 2", "backward 1"),
                    what=(
                        f"backward is not reentrant: running backward twice with the same input and head "
                        f"gradient of {self._oname(k)} gives different gradients of {n!r} (the tolerance for "
                        f"nondeterminism, nondet_tol, is {self.nondet_tol:g})"
                    ),
                    extra_lines=[
                        "a backward that draws random numbers, reads uninitialised memory or "
                        "accumulates in a non-deterministic order; raise nondet_tol if that is "
                        "intended"
                    ],
                    broadcast=False,
                    facts={"output_index": k},
                )
            except GradientCheckError as err:
                err.diagnosis = err.diagnosis or "non-deterministic backward"
                raise

    def _rows_noise(self, k, size, analytic):
        """The rounding noise of the analytic Jacobian rows of output ``k`` in the dtypes under test
        (``harness.RoundingEmulator``, one backward per row; ``harness.with_measured`` against ``analytic``, the
        rows computed in those dtypes), ``NOISE_BLOCK`` rows at a time: the emulator keeps every row of a call
        (the exact gradients, the runs' squared deviations, the accumulation noise of each row's convolutions),
        about 8 Jacobians' worth for the 12 544 rows of a ResNet block at 56x56 when it took them all at once."""
        dtype = max((self.graph.values[n].dtype for n in self.used), key=lambda d: np.finfo(d).eps)
        exact, noise = self._emulated_rows(k, size, dtype)
        # the measured part is element by element, capped by the largest exact entry of the whole Jacobian
        scale = largest_finite(exact)
        for start in range(0, size, NOISE_BLOCK):
            part = slice(start, start + NOISE_BLOCK)
            got = with_measured(*({n: m[n][part] for n in self.used} for m in (noise, exact, analytic)), dtype, scale)
            for n in self.used:
                noise[n][part] = got[n]
        return noise

    def _emulated_rows(self, k, size, dtype):
        """``(exact, noise)`` Jacobian rows of output ``k`` (``RoundingEmulator.noise``). Each block is one exact
        forward and its emulated runs, with the exact run's decisions, as one call over every row would take
        them; only the random draws differ from such a call (float64 draws none)."""
        emulator = RoundingEmulator(self.graph.sym, self.graph.values, self.graph.aux, self.used, dtype)
        exact = {n: np.empty((size, self.graph.values[n].size)) for n in self.used}
        noise = {n: np.empty((size, self.graph.values[n].size)) for n in self.used}
        for start in range(0, size, NOISE_BLOCK):
            block = range(start, min(start + NOISE_BLOCK, size))
            heads = [self._heads(k, np.eye(1, size, e).ravel()) for e in block]
            for e, row_exact, row_noise in zip(block, *emulator.noise(heads)):
                for n in self.used:
                    exact[n][e] = row_exact[n].ravel()
                    noise[n][e] = row_noise[n].ravel()
        return exact, noise

    # -- slow mode -------------------------------------------------------------------------------------
    def slow(self, exe, bufs, out_diff):
        numeric, widths = {}, {}
        for n in self.used:
            numeric[n], widths[n] = self.ref.jacobian(n, self._steps(n))
        for k in out_diff:
            size = int(np.prod(self.graph.out_shapes[k]))
            rows = [{n: np.zeros((size, self.graph.values[n].size)) for n in self.used} for _ in range(2)]
            for run in rows:
                for e in range(size):
                    onehot = np.zeros(size)
                    onehot[e] = 1.0
                    g = self.graph.vjp(exe, bufs, self._heads(k, onehot))
                    for n in self.used:
                        run[n][e] = g[n].astype(np.float64).ravel()
            self._reentrant(rows[0], rows[1], k)
            analytic = rows[0]
            del rows, run  # the second run only showed that backward is reentrant: a Jacobian's memory less from here
            a_noise = self._rows_noise(k, size, analytic)
            for n in self.used:
                a, num = analytic[n], numeric[n][k]
                n_noise = _jacobian_noise(self.ref, widths[n], k)
                try:
                    compare(
                        a,
                        num,
                        self.rtol,
                        self.atol,
                        check=self.who,
                        arg_name=n,
                        names=("analytic", "numeric"),
                        what=f"Jacobian mismatch for {self._oname(k)} with respect to {self._iname(n)}",
                        eps=self.eps_desc,
                        noise=n_noise,
                        analytic_noise=a_noise[n],
                        noise_dtype=self.graph.values[n].dtype,
                        broadcast=False,
                        max_rows=5,
                        exclude=np.broadcast_to(self._excluded_mask(n).ravel()[None, :], a.shape),
                        extra_lines=self.context
                        + ["Jacobian entries: index = (output element, input element), both flattened"],
                    )
                except GradientCheckError as err:
                    # exact kinks the per-element view finds are re-drawn (OnlyKinks) and named first
                    failure = self._jacobian_failure(err, exe, bufs, k, n, a, num)
                    if self._pinned_jacobian_agrees(k, n, a, a_noise[n]) or self._settles(
                        k, n, a, num, n_noise, a_noise[n], widths[n]
                    ):
                        continue
                    raise failure from None

    def _settles(self, k, n, a, num, n_noise, a_noise, widths) -> bool:
        """Whether every failing Jacobian entry passes once its column is retaken at shorter steps
        (``differencer.settle_entries``): where the function turns on a scale near the step, the central
        difference errs by truncation (measured: a zero-weight convolution before a BatchNorm over data of scale
        255 failed correct float64 Jacobians by 0.02-0.1%). A wrong entry settles at once at its wrong value.
        A pass warns (RuntimeWarning) that the step was too long there."""
        from .differencer import ElementDifferences, settle_entries

        fails, err, allowed = violations(a, num, self.rtol, self.atol, False, n_noise + a_noise)
        fails &= ~self._excluded_mask(n).ravel()[None, :]
        if not fails.any() or not np.all(np.isfinite(a[fails]) & np.isfinite(num[fails])):
            return False  # a NaN or an infinity fails as it was
        order = sorted(map(tuple, np.argwhere(fails)), key=lambda e: -err[e] / max(allowed[e], 1e-300))
        harness, shape, n_out = self.ref.harness, self.graph.values[n].shape, self.ref.n_out
        differences = ElementDifferences(harness, n, lambda: harness.outputs([n])[:n_out])
        steps = np.asarray(self._steps(n), np.float64).reshape(shape)
        entries = [(k, int(i), np.unravel_index(int(j), shape)) for i, j in order]
        taken = settle_entries(
            differences,
            entries,
            steps,
            [num[e] for e in order],
            [a[e] for e in order],
            [self.atol + a_noise[e] for e in order],
            [n_noise[e] * widths[e[1]] for e in order],
            self.rtol,
        )
        harness.reset_aux()
        if len(taken) < len(order) or not all(got.settled and got.ok for got in taken):
            return False
        warnings.warn(
            f"{self.who}: {len(order)} entries of the numeric Jacobian of {self._oname(k)} with respect to "
            f"{self._iname(n)} erred by truncation at eps={self.eps_desc}; retaken at shorter steps they settle at "
            "values the backward matches: pass (use a smaller eps near steep points)",
            RuntimeWarning,
            stacklevel=5,
        )
        return True

    def _gradient_view(self, exe, bufs, k, n, u):
        """The failing pair as a gradient: backward with head weights ``u`` on output ``k`` against per-element
        central differences, as ``(error or None, kinks)``; ``OnlyKinks`` when every mismatch is a kink."""
        if self.graph.values[n].size > MAX_LOCALISE:
            return None, []
        weights = self._weights(k, u)
        g = self.graph.vjp(exe, bufs, self._heads(k, u))[n]
        err, kinks = self.ref.element_view(self.who, n, g, weights, self.rtol, self.atol)
        if err is not None and only_kinks([(err, kinks)]) and not self.kinks.exhausted and self.kinks.new(kinks):
            raise OnlyKinks(kinks)
        return err, kinks

    def _jacobian_failure(self, err, exe, bufs, k, n, a, num):
        """The Jacobian mismatch with the gradient view as a child report (its diagnosis names the bug)."""
        u = np.random.uniform(0.5, 1.5, size=int(np.prod(self.graph.out_shapes[k])))
        gerr, _ = self._gradient_view(exe, bufs, k, n, u)
        report = err.report
        primary = err
        if gerr is not None:
            report.children.append(
                (
                    f"as a gradient: sum(u * {self.graph.out_names[k]}) w.r.t. {n!r}, u uniform in "
                    f"[0.5, 1.5), in the input's shape (central differences "
                    f"{self.ref.step_description}):",
                    gerr.report,
                )
            )
            primary = gerr
        facts = primary.facts()
        facts.update(
            check=self.who,
            output_index=k,
            input_index=self.graph.input_names.index(n),
            jacobian_analytic=a,
            jacobian_numeric=num,
            jacobian_mismatch_fraction=err.mismatch_fraction,
        )
        return GradientCheckError(report, **facts)

    # -- fast mode -------------------------------------------------------------------------------------
    def fast(self, exe, bufs, out_diff):
        v = {n: _unit(self.graph.values[n].size).reshape(self.graph.values[n].shape) for n in self.used}
        for n in self.used:
            v[n][self._excluded_mask(n)] = 0.0
        for k in out_diff:
            u = _unit(int(np.prod(self.graph.out_shapes[k])))
            heads = self._heads(k, u)
            first = self.graph.vjp(exe, bufs, heads)
            second = self.graph.vjp(exe, bufs, heads)
            self._reentrant(first, second, k)
            weights = self._weights(k, u)
            f_noise = self.ref.evaluation_noise(weights)
            dtype = max((self.graph.values[n].dtype for n in self.used), key=lambda d: np.finfo(d).eps)
            _, a_noise = analytic_noise(
                self.graph.sym, self.graph.values, self.graph.aux, heads, self.used, dtype, actual=first
            )
            for n in self.used:
                g = first[n]
                analytic = float(np.sum(g.astype(np.float64) * v[n]))
                numeric, width = self.ref.directional({n: v[n]}, self._dir_step(n), weights=weights)
                noise = f_noise / width + float(np.sum(a_noise[n] * np.abs(v[n])))
                atol = self.atol * fast_atol_scale(u, v[n])
                try:
                    compare(
                        analytic,
                        numeric,
                        self.rtol,
                        atol,
                        check=self.who,
                        arg_name=n,
                        names=("analytic u^T J v", "numeric u^T J v"),
                        what=f"Jacobian mismatch for {self._oname(k)} with respect to {self._iname(n)} (fast mode)",
                        eps=self.eps_desc,
                        noise=noise,
                        extra_lines=self.context,
                    )
                except GradientCheckError as err:
                    # exact kinks the per-element view finds are re-drawn (OnlyKinks) and named first
                    failure = self._fast_failure(err, exe, bufs, k, n, u, analytic, numeric, atol)
                    a_noise_v = noise - f_noise / width
                    if self._pinned_agrees(analytic, {n: v[n]}, weights, a_noise_v, atol):
                        continue
                    if self._settles_along({n: v[n]}, numeric, analytic, atol + a_noise_v, f_noise, weights):
                        continue
                    raise failure from None

    def _settles_along(self, r, first, analytic, bound, f_noise, weights) -> bool:
        """Whether the directional difference along ``r`` matches ``analytic`` once retaken at shorter steps
        (``differencer.settle``), its truncation settled within what the comparison allows (atol is absolute, so
        the bound also scales with the derivative). Measured: L2Normalization at x = 0 turns on a scale of
        sqrt(eps) = 1e-5, and eps=1e-6 erred by 0.25% (17383 against the backward's 17427). A pass warns
        (RuntimeWarning) that the step was too long there."""
        from .differencer import settle, settled_note

        (name,) = r
        h = self._dir_step(name)
        got = settle(
            lambda step: self.ref.directional(r, step, weights=weights),
            h,
            first,
            analytic,
            bound + self.rtol * max(abs(first), abs(analytic)),
            f_noise,
            self.rtol,
        )
        if not (got.settled and got.ok):
            return False
        what = f"the difference along v with respect to {self._iname(name)} at eps={self.eps_desc}"
        warnings.warn(settled_note(self.who, what, first, analytic, got), RuntimeWarning, stacklevel=5)
        return True

    def _pinned_reference(self):
        """The reference evaluated on the forward's own pieces (``decisions.pinned_symbol``), made when first
        needed; None where the graph has nothing to pin."""
        if self._pinned is None:
            record = self.graph.decisions()
            self._pinned = (
                Reference(self.graph, self.ref.dtype, self.ref.objective_weights, False, record=record)
                if record.nodes
                else False
            )
        return self._pinned or None

    def _pinned_jacobian_agrees(self, k, n, a, a_noise) -> bool:
        """Whether the analytic Jacobian ``a`` (output ``k``, input ``n``) matches the numeric one of the reference
        on the forward's own pieces, as fast mode's ``_pinned_agrees`` does for a direction: at exact ties of a
        sort or top-k (``np.ones`` sorted), a difference moves a tied element to either end of its group, so its
        columns mix two permutations and match none, while backprop follows the forward's own (measured: a
        correct sort of ones failed 240 of 9216 entries). A wrong rule fails both. Cost: the Jacobian of ``n``
        once more, on the failure path only."""
        pinned = self._pinned_reference()
        if pinned is None:
            return False
        blocks, widths = pinned.jacobian(n, self._steps(n))
        n_noise = _jacobian_noise(pinned, widths, k)
        try:
            compare(
                a,
                blocks[k],
                self.rtol,
                self.atol,
                check=self.who,
                noise=n_noise,
                analytic_noise=a_noise,
                broadcast=False,
                exclude=np.broadcast_to(self._excluded_mask(n).ravel()[None, :], a.shape),
            )
        except GradientCheckError:
            return False
        return True

    def _pinned_agrees(self, analytic, r, weights, a_noise, atol) -> bool:
        """Whether ``analytic`` matches the directional derivative along ``r`` of a reference evaluated on the
        forward's own pieces (``decisions.pinned_symbol``: relu masks, pooling windows of the forward under
        test) -- what backprop differentiates, whatever kinks the step crosses. Taken only when the plain
        reference fails beyond the kinks it re-draws, as ``check_backward`` does: a random direction through a
        zero-biased convolution over a zero border moves many relu units off 0 at once, and the difference's
        one-sided mix is no derivative (measured: a correct conv + relu failed fast mode there). A wrong rule
        fails both."""
        pinned = self._pinned_reference()
        if pinned is None:
            return False
        (name,) = r
        numeric, width = pinned.directional(r, self._dir_step(name), weights=weights)
        noise = pinned.evaluation_noise(weights) / width + a_noise
        try:
            compare(analytic, numeric, self.rtol, atol, check=self.who, noise=noise)
        except GradientCheckError:
            return False
        return True

    def _fast_failure(self, err, exe, bufs, k, n, u, analytic, numeric, atol):
        primary, _ = self._gradient_view(exe, bufs, k, n, u)
        report = Report(
            self.who, f"Jacobian mismatch for {self._oname(k)} with respect to {self._iname(n)} (fast mode)"
        )
        report.summary += [
            f"numerical: {numeric:.10g}",
            f"analytical: {analytic:.10g}",
            f"|error| = {abs(analytic - numeric):.3g}, allowed atol * min(sum|u| sum|v|, 16 |u| |v|) + rtol * "
            f"|numerical| = {atol + self.rtol * abs(numeric):.3g} (atol={self.atol:.3g}, rtol={self.rtol:.3g}, "
            f"eps={self.eps_desc})",
            "the quantities above are u^T J v for random unit vectors u (over the output) and v (over the input) "
            "-- fast mode; rerun with fast_mode=False for the full Jacobians",
        ]
        report.context += self.context
        size = self.graph.values[n].size
        if primary is not None:
            report.children.append(
                (
                    f"per-element check of {n!r} (gradient of sum(u * {self.graph.out_names[k]}), "
                    f"central differences {self.ref.step_description}):",
                    primary.report,
                )
            )
        elif size > MAX_LOCALISE:
            report.notes.append(f"{n!r} has {size} elements (> {MAX_LOCALISE}): no per-element comparison")
        else:
            report.notes.append(
                f"the per-element comparison of {n!r} passes: the error is too small to show per element"
            )
        facts = (primary or err).facts()
        facts.update(
            check=self.who, output_index=k, input_index=self.graph.input_names.index(n), fast=(analytic, numeric)
        )
        return GradientCheckError(report, **facts)

    # -- other checks ----------------------------------------------------------------------------------
    def undefined_grad(self, exe, bufs):
        grads = self.graph.vjp(exe, bufs, self._heads())
        for n in self.used:
            compare(
                grads[n],
                np.zeros_like(grads[n]),
                0.0,
                0.0,
                check=self.who,
                arg_name=n,
                names=("backward", "expected"),
                broadcast=False,
                what=(
                    f"expected all input grads to be undefined or zero when all output grads are undefined or "
                    f"zero (check_undefined_grad): the gradient of {n!r} is not zero for zero head gradients"
                ),
                extra_lines=[
                    "the backward adds a term that does not scale with the head gradient (a constant, "
                    "a regulariser, a stale buffer)"
                ],
            )

    def numeric_is_zero(self):
        """No float output: the numeric Jacobian must vanish (PyTorch's check for non-differentiable outputs)."""
        for n in self.used:
            blocks, _ = self.ref.jacobian(n, self._steps(n))
            for k, b in enumerate(blocks):
                compare(
                    b,
                    np.zeros_like(b),
                    0.0,
                    0.0,
                    check=self.who,
                    arg_name=n,
                    names=("numeric", "expected"),
                    broadcast=False,
                    what=f"numerical gradient of {self._oname(k)} w.r.t. {n!r} expected to be zero "
                    "(func has no float output)",
                )
