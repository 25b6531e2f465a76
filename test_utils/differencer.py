"""Numeric differentiation: one perturb-evaluate-restore loop, its derivative rules and the one kink test.

Everything numeric in ``test_utils`` goes through ``sweep``: a *probe* moves one input coordinate (an
element of an argument, or every checked argument at once along a direction ``r``) by a few multiples
of its step, ``evaluate()`` gives the outputs there (a list of arrays: the projected objective, or every
output for a Jacobian column), and the probe restores the point. A *rule* turns the samples into a
derivative:

- ``"central"``: ``(f(x+h) - f(x-h)) / (x+ - x-)``, the denominator being the distance between the two
  points actually stored (so rounding of the perturbed value does not bias the quotient). Error
  O(h^2) + O(eps/h). Cost: 2 evaluations.
- ``"richardson"``: central differences at ``h`` and ``h/2`` combined so the h^2 terms cancel
  (``(4 D(h/2) - D(h)) / 3`` with the exact widths). Error O(h^4) + O(eps/h). Cost: 4 evaluations.
- ``"complex_step"``: ``Im f(x + i h) / h`` on a complex copy of the graph: no subtraction, no
  cancellation, exact to rounding with a tiny ``h``. Cost: 1 evaluation; every op must be complex-analytic.
- ``"kink"``: samples at ``x +- s/4``, ``x +- s`` and ``x +- 4s`` around the base point give one-sided
  quotients ``L = (f(x) - f(x-s)) / s`` and ``R = (f(x+s) - f(x)) / s`` at three sizes (``kink_test``); Chainer's
  ``detect_nondifferentiable`` uses ``"kink2"``, ``x +- s`` and ``x +- 2s``, and a Richardson derivative from the
  same samples. Cost: 6 (4).

Default steps (``default_steps``): ``h = eps^(1/3) * max(|x|, 1)`` (~6.1e-6 for a float64 reference) for
central differences, ``eps^(1/5) * max(|x|, 1)`` (~7.4e-4) for Richardson, which balance truncation and
rounding; ``1e-20 * max(|x|, 1)`` for complex steps.

A sweep that runs longer than ``PROGRESS_DELAY`` seconds shows a tqdm progress bar (``progress=False``
turns it off).

Scale out (``scaleout``, the module above this one): a ``spread`` given to ``sweep`` takes its samples
instead, from the workers of a process pool or a Dask cluster, with this same loop.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Iterable

import numpy as np

from .context import to_numpy
from .frames import hide_from_pytest as _hide_from_pytest
from .harness import as_array_like

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

__all__ = [
    "METHODS",
    "COMPLEX_STEP",
    "PROGRESS_DELAY",
    "PROGRESS_EVERY",
    "default_steps",
    "min_step",
    "ElementProbe",
    "DirectionProbe",
    "sweep",
    "derivative",
    "kink_test",
    "KinkTest",
    "ElementDifferences",
    "settle_entries",
    "gradient",
    "jacobian",
    "directional",
    "Progress",
]

#: numeric differentiation methods
METHODS = ("central", "richardson", "complex_step")

#: half-step of complex-step differentiation, relative to max(|x|, 1)
COMPLEX_STEP = 1e-20

#: seconds a numeric sweep runs before it shows a progress bar
PROGRESS_DELAY = 2.0
#: seconds between progress lines on a non-terminal (``Progress(lines=True)``)
PROGRESS_EVERY = 5.0

#: sample offsets (multiples of the step) of each rule; the kink rule's base point is given, not sampled
OFFSETS = {
    "central": (-1.0, 1.0),
    "richardson": (-1.0, -0.5, 0.5, 1.0),
    "complex_step": (1.0,),
    "kink": (-4.0, -1.0, -0.25, 0.25, 1.0, 4.0),
    "kink2": (-2.0, -1.0, 1.0, 2.0),
}

#: ... and the jump at s must exceed this multiple of its rounding noise
KINK_NOISE = 10.0


def check_method(method, who="numeric gradient"):
    if method not in METHODS:
        raise ValueError(f"{who}: method must be one of {METHODS}, got {method!r}")
    return method


def default_steps(x, numeric_dtype=np.float64, method="central") -> np.ndarray:
    """Half-steps per element, ``eps`` the machine epsilon of the dtype the differences are taken in.

    ``"central"``: ``h = eps^(1/3) * max(|x|, 1)`` (~6.1e-6 for float64) minimises truncation (h^2) plus
    rounding (eps/h) error; ``"richardson"``: ``eps^(1/5) * max(|x|, 1)`` (truncation h^4);
    ``"complex_step"``: ``1e-20 * max(|x|, 1)`` (no rounding term).
    """
    x = np.asarray(x)
    x = np.abs(x.real if np.iscomplexobj(x) else x).astype(np.float64)
    eps = float(np.finfo(np.dtype(numeric_dtype)).eps)
    rel = {"central": eps ** (1.0 / 3.0), "richardson": eps**0.2, "complex_step": COMPLEX_STEP}[check_method(method)]
    return rel * np.maximum(x, 1.0)


def min_step(numeric_dtype) -> float:
    """The smallest half-width ``h`` (``x +- h``) accepted for differences taken in ``numeric_dtype``:
    ``sqrt(machine eps) / 8`` (3.7e-9 for float64, 4.3e-5 for float32, 3.9e-3 for float16); below it
    rounding swamps the quotient."""
    return float(np.sqrt(np.finfo(np.dtype(numeric_dtype)).eps)) / 8


# == probes: what moves ===================================================================================


class ElementProbe:
    """Moves element ``index`` of the array of argument ``name`` (numpy or CuPy): ``x -> cast(x + delta)``."""

    def __init__(self, array, index, name="the input"):
        self.array, self.index, self.name = array, tuple(map(int, index)), name
        self.label = f"{name}[{', '.join(map(str, self.index))}]"
        value = array[self.index]  # numpy: a scalar copy; CuPy: a 0-d array, copied
        self.orig = value if isinstance(value, np.generic) else value.copy()
        self.x = complex(value).real if value.dtype.kind == "c" else float(value)  # np.iscomplexobj, inlined
        self._cast = value.dtype.type

    def set(self, delta) -> float:
        """Store ``x + delta`` (complex ``delta``: the imaginary step); return the real step actually stored."""
        if isinstance(delta, complex):
            self.array[self.index] = self._cast(complex(self.x, delta.imag))
            return delta.imag
        stored = self._cast(self.x + delta)
        self.array[self.index] = stored
        return float(stored) - self.x

    def restore(self):
        self.array[self.index] = self.orig


class DirectionProbe:
    """Moves every array of ``arrays`` (a dict name -> bound array) along ``r``: ``x -> x0 + delta * r``."""

    def __init__(self, arrays: dict, base: dict, r: dict, name="direction"):
        self.arrays, self.base, self.r, self.name, self.label = arrays, base, r, name, name
        self.index, self.x = None, None

    def set(self, delta) -> float:
        for n, arr in self.arrays.items():
            base, r = self.base[n], self.r[n]
            if _in_place(arr, base, r):  # the same two roundings, no temporaries (VGG's fc6: 3 x 0.8 GB)
                np.multiply(r, float(delta), out=arr)
                arr += base
            else:
                arr[...] = as_array_like(arr, (base + float(delta) * r).astype(arr.dtype))
        return float(delta)

    def restore(self):
        for n, arr in self.arrays.items():
            if isinstance(arr, np.ndarray):
                arr[...] = self.base[n]
            else:
                arr[...] = as_array_like(arr, self.base[n].astype(arr.dtype))


def _in_place(arr, base, r) -> bool:
    """Whether ``arr = base + delta * r`` can be computed in ``arr`` itself: host arrays of one float dtype."""
    return (
        isinstance(arr, np.ndarray)
        and isinstance(base, np.ndarray)
        and isinstance(r, np.ndarray)
        and arr.dtype == base.dtype == r.dtype
        and arr.dtype.kind == "f"
        and arr.shape == base.shape == r.shape
    )


# == the loop ===============================================================================================


def _host64(values) -> list:
    out: list[float | np.ndarray | None] = []
    for v in values:
        if v is None or isinstance(v, float):  # a projected objective: already a float64 number
            out.append(v)
        else:
            v = np.asarray(to_numpy(v))  # a copy: outputs may be views of buffers the next evaluation reuses
            out.append(v.astype(np.complex128 if v.dtype.kind == "c" else np.float64, copy=True))
    return out


def sweep(probes: Iterable, steps: Iterable, evaluate: Callable | None, rule: str, progress=None, spread=None):
    """For each probe and its step ``h``: ``(probe, deltas, samples)`` at ``rule``'s offsets.

    ``evaluate()`` returns the outputs (a list of arrays or numbers) with the probe applied; ``deltas``
    are the steps actually stored, ``samples`` one float64 list per offset. The probe is restored after
    its samples (also when ``evaluate`` raises). With a ``spread`` (``ElementProbe``s only) the workers of
    its executor take the samples instead (``scaleout.Spread.sweep``) and ``evaluate`` is not called.
    """
    if spread is not None:
        yield from spread.sweep(probes, steps, rule, progress)
        return
    assert evaluate is not None  # None only with a spread
    offsets = OFFSETS[rule]
    imaginary = rule == "complex_step"
    for probe, h in zip(probes, steps):
        deltas, samples = [], []
        try:
            for c in offsets:
                deltas.append(probe.set(complex(0.0, c * h) if imaginary else c * h))
                samples.append(_host64(evaluate()))
        finally:
            probe.restore()
        if progress is not None:
            progress.update()
        yield probe, deltas, samples


def _quotient(deltas, samples, a, b, label):
    width = deltas[b] - deltas[a]
    if not width > 0:
        raise ValueError(
            f"numeric gradient: the step vanishes for {label} in its dtype (x + h == x - h); use a larger step"
        )
    return [None if ya is None else (yb - ya) / width for ya, yb in zip(samples[a], samples[b])], width


def _extrapolate(full, w_full, part, w_part):
    """Richardson: ``D = c2 D(part) - c1 D(full)`` with the exact widths, so the h^2 terms cancel; and the
    width whose rounding noise equals that of the extrapolated value."""
    a2, b2 = (w_full / 2.0) ** 2, (w_part / 2.0) ** 2
    c2, c1 = a2 / (a2 - b2), b2 / (a2 - b2)
    d = [None if f is None else c2 * p - c1 * f for f, p in zip(full, part)]
    return d, 1.0 / (c2 / w_part + c1 / w_full)


def derivative(rule, deltas, samples, label="the input"):
    """``(per-output derivatives, width)`` of one probe's samples under ``rule``.

    The width is that of the difference (for extrapolations, the width with the same rounding noise),
    ``numeric_noise`` turns it into the rounding noise of the derivative.
    """
    if rule == "central":
        return _quotient(deltas, samples, 0, 1, label)
    if rule == "complex_step":
        h = deltas[0]
        return [None if y is None else np.imag(y) / h for y in samples[0]], 1.0
    full, w_full = _quotient(deltas, samples, 0, len(deltas) - 1, label)
    part, w_part = _quotient(deltas, samples, 1, 2, label)
    return _extrapolate(full, w_full, part, w_part)


# == the kink test ============================================================================================


class KinkTest:
    """One-sided quotients of one probe at two or three step sizes, per output element, and the verdict.

    Samples come in symmetric pairs ``x +- s_i`` (``s_0 < s_1 < ...``, each ``c`` times the last: ``c`` = 4, or 2
    for Chainer's layout). ``left``/``right`` are the one-sided quotients at the *reference* step (``s_1`` with
    three sizes, else ``s_0``), ``jump = right - left`` there and ``jump4`` at the largest step. For a smooth
    function the jump is ``f'' s``: it grows *linearly* with the step (``c`` times per size). ``kink`` (bool
    array) where a significant jump does not: it stays flat from one size to the next (a kink at the point:
    growth below ``(1 + c) / 2``), or grows super-linearly (a kink between two sizes -- off the point by less
    than the larger step, where a central difference still straddles it: growth above ``1.6 c``);
    ``discontinuous`` where a one-sided quotient shrinks like ``1/s`` (the function jumps: no derivative at all);
    ``nonfinite`` where the samples change between finite and non-finite values.
    """

    def __init__(self, deltas, samples, center, noise, floor=0.0):
        # deltas/samples at offsets (-s_k, ..., -s_0, +s_0, ..., +s_k); center at 0; noise is that of a
        # one-sided quotient at the reference step (it scales like 1/s)
        k = len(deltas) // 2
        y0 = np.asarray(center, np.float64)
        ys = [np.asarray(v, np.float64) for v in samples]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            lefts = [(y0 - ys[k - 1 - i]) / -deltas[k - 1 - i] for i in range(k)]
            rights = [(ys[k + i] - y0) / deltas[k + i] for i in range(k)]
            jumps = [r - l for l, r in zip(lefts, rights)]
            ref = 1 if k == 3 else 0
            self.left, self.right, self.jump, self.jump4 = lefts[ref], rights[ref], jumps[ref], jumps[-1]
            finite = np.isfinite(np.stack(ys + [y0]))
            self.nonfinite = finite.any(axis=0) & ~finite.all(axis=0)
            self.threshold = np.maximum(KINK_NOISE * np.asarray(noise, np.float64), floor)
            c = deltas[k + 1] / deltas[k]
            scale = [deltas[k + ref] / deltas[k + i] for i in range(k)]  # noise of size i relative to the reference
            self.kink = np.zeros(np.shape(self.jump), bool)
            self.discontinuous = np.zeros(np.shape(self.jump), bool)
            for i in range(k - 1):
                small, large = np.abs(jumps[i]), np.abs(jumps[i + 1])
                big = large > self.threshold * scale[i + 1]
                flat = (small > self.threshold * scale[i]) & (large < (1.0 + c) / 2.0 * small)
                self.kink |= flat | (big & (large > 1.6 * c * small))
                # a jump of the function itself (the first-order gradient of abs at 0, seen by a second-order
                # check): a one-sided quotient shrinks like 1/s, where a smooth function's stays (f') or grows
                for q, q4 in ((lefts[i], lefts[i + 1]), (rights[i], rights[i + 1])):
                    self.discontinuous |= (np.abs(q) > self.threshold * scale[i]) & (
                        np.abs(q4) * (1.0 + c) / 2.0 < np.abs(q)
                    )
        self.kink = self.kink | self.nonfinite | self.discontinuous


def kink_test(probe, h, evaluate, center, noise, floor=0.0, rule="kink") -> KinkTest:
    """The one kink test: samples ``x +- h/4``, ``x +- h`` and ``x +- 4h`` (``rule="kink2"``: ``x +- h``,
    ``x +- 2h``) of ``probe`` (outputs of ``evaluate``: one array), one-sided quotients and the verdict
    (``KinkTest``). ``center`` is the output at ``x``; ``noise`` the rounding noise of a one-sided quotient at
    ``h``; ``floor`` a jump any kink must exceed. Cost: 6 (4) evaluations -- always serial: it runs on the few
    mismatching elements only, one after the other (``numeric.element_kinks`` stops after ``KINK_PROBE`` of them
    when none is a kink), far less work than a worker's bind of the graph."""
    ((_, deltas, samples),) = list(sweep([probe], [h], lambda: [evaluate()], rule))
    return KinkTest(deltas, [s[0] for s in samples], center, noise, floor)


# == front-ends over a harness ==================================================================================


class Progress:
    """Progress of ``total`` work units, in one of two forms.

    - a tqdm bar (tqdm imported lazily; without tqdm, nothing), once the work has run ``delay`` seconds
      (default ``PROGRESS_DELAY``: a check of milliseconds shows nothing);
    - with ``lines=True`` and ``stream`` not a terminal (a CI log file): one line every ``PROGRESS_EVERY`` seconds,
      "done/total, rate, time so far, time left", that a log keeps (no carriage-return redraws), and ``note``
      lines between phases.
    """

    def __init__(
        self, total, enabled=True, desc="numeric gradient", *, delay=None, lines=False, stream=None, unit="elem"
    ):
        self.total, self.enabled, self.desc, self.unit = int(total), bool(enabled), desc, unit
        self.stream = stream
        self.delay = PROGRESS_DELAY if delay is None else float(delay)
        self.lines = bool(lines) and not _isatty(sys.stderr if stream is None else stream)
        self.start = self.last = time.perf_counter()
        self.done = 0
        self.bar = None

    def update(self, n=1):
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        if not self.enabled or self.total <= 0:
            return
        now = time.perf_counter()
        if self.lines:
            if now - self.last >= PROGRESS_EVERY or self.done == self.total:
                self.last = now
                self.line(now)
        elif now - self.start > self.delay:
            self._open()

    def _open(self):
        try:
            from tqdm.auto import tqdm
        except ImportError:  # optional dependency: no bar, no complaint
            self.enabled = False
            return
        self.bar = tqdm(
            total=self.total, initial=self.done, desc=self.desc, unit=self.unit, leave=False, file=self.stream
        )

    def line(self, now=None, what="checked"):
        elapsed = (now or time.perf_counter()) - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else math.inf
        eta = f"about {left:.0f} s left" if math.isfinite(left) else "time left unknown"
        print(
            f"{self.desc}: {self.done}/{self.total} {what}, {rate:.2f}/s, {elapsed:.0f} s so far, {eta}",
            file=self.stream or sys.stderr,
            flush=True,
        )

    def note(self, text):
        """A line between phases (line mode only)."""
        if self.enabled and self.lines and self.total > 0:
            print(f"{self.desc}: {text}", file=self.stream or sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _element_probes(harness, name, indices=None):
    arr = harness.array(name)
    idx = np.ndindex(*arr.shape) if indices is None else indices
    return (ElementProbe(arr, i, name) for i in idx)


def gradient(
    harness,
    names,
    objective: Callable,
    steps: dict,
    *,
    method="central",
    progress=True,
    desc="numeric gradient",
    spread=None,
):
    """Numeric gradients of ``objective(outputs) -> float`` w.r.t. the arguments ``names``, element by element.

    ``steps[name]`` holds the half-steps (broadcast to the argument's shape; complex steps need a complex
    argument). Arguments of integer dtype get zero gradients. Returns ``({name: float64 gradient},
    {name: float64 width})``; ``numeric_noise`` turns the widths into the rounding noise of the gradient.
    Cost: 2 (central), 4 (Richardson) or 1 (complex step) partial forward passes per element. With a
    ``spread`` (a ``Spread`` over ``harness`` whose recipe gives ``objective``) the elements of every name go
    to its executor in one sweep; the result is the same.
    """
    rule = check_method(method)
    base = harness.base()
    grads, widths = {}, {}
    total = sum(harness.array(n).size for n in names if np.dtype(harness.array(n).dtype).kind in "fc")
    with Progress(total, progress, desc) as bar:
        work = []
        for name in names:
            arr = harness.array(name)
            g, w = np.zeros(arr.shape, np.float64), np.ones(arr.shape, np.float64)
            grads[name], widths[name] = g, w
            if np.dtype(arr.dtype).kind not in ("c" if rule == "complex_step" else "f"):
                if rule == "complex_step":
                    w[...] = np.maximum(np.abs(harness.host(name).real.astype(np.float64)), 1.0)
                continue
            h = np.broadcast_to(np.asarray(steps[name], np.float64), arr.shape)
            work.append((name, h))
        if spread is None:
            for name, h in work:
                evaluate = lambda name=name, names=[name]: [objective(harness.outputs(names))]
                probes = list(_element_probes(harness, name))
                # the half-steps as Python floats in probe (C) order: the same doubles, cheaper arithmetic
                hs = h.ravel().tolist()
                for probe, deltas, samples in sweep(probes, hs, evaluate, rule, bar):
                    _store(rule, probe, deltas, samples, grads[name], widths[name])
        else:  # one sweep over the elements of every name
            probes = [p for name, _ in work for p in _element_probes(harness, name)]
            half = dict(work)
            hs = [half[p.name][p.index] for p in probes]
            for probe, deltas, samples in sweep(probes, hs, None, rule, bar, spread):
                _store(rule, probe, deltas, samples, grads[probe.name], widths[probe.name])
    harness.reset_aux()
    del base
    return grads, widths


def _store(rule, probe, deltas, samples, g, w):
    """One element's derivative and width into the gradient ``g`` and widths ``w``."""
    (d,), width = derivative(rule, deltas, samples, probe.label)
    g[probe.index] = float(d.real)  # float(np.real(d)) for a number or numpy scalar, without the call
    w[probe.index] = width if rule != "complex_step" else max(abs(probe.x), 1.0)


def jacobian(harness, name, steps, n_out, *, progress=True, desc="numeric Jacobian", spread=None):
    """Numeric Jacobian of the first ``n_out`` outputs w.r.t. ``name`` by central differences.

    Returns ``(blocks, widths)``: one float64 ``(output size, input size)`` matrix per output and the width
    of each difference (input size). Cost: 2 partial forwards per element of ``name``. ``spread``: a
    ``Spread`` over ``harness`` (recipe kind ``"outputs"``) takes the columns to its executor.
    """
    base = harness.base()
    arr = harness.array(name)
    blocks = [np.zeros((int(np.size(b)), arr.size)) for b in base[:n_out]]
    widths = np.ones(arr.size)
    h = np.broadcast_to(np.asarray(steps, np.float64), arr.shape)
    evaluate = lambda: harness.outputs([name])[:n_out]
    probes = list(_element_probes(harness, name))
    with Progress(arr.size, progress, desc) as bar:
        for probe, deltas, samples in sweep(probes, (h[p.index] for p in probes), evaluate, "central", bar, spread):
            m = int(np.ravel_multi_index(probe.index, arr.shape)) if arr.ndim else 0
            ds, widths[m] = derivative("central", deltas, samples, probe.label)
            for k, d in enumerate(ds):
                blocks[k][:, m] = d.ravel()
    harness.reset_aux()
    return blocks, widths


def directional(harness, r: dict, eps, objective: Callable, *, at_base=None):
    """Derivative of ``delta -> objective(outputs at x + delta r)`` at 0 by central differences (the arguments of
    ``r`` move along it). Returns ``(value, width)``. Cost: 2 partial forward passes -- always serial: two
    evaluations are less than a worker's bind. With ``at_base`` (the objective at ``x``, evaluated the same
    way) a forward difference instead: 1 pass, width ``eps`` (truncation ``eps/2 r'Hr``: take ``eps`` near
    ``sqrt(machine eps)``)."""
    harness.ensure_base()  # taken before the probe moves anything (a stale base is retaken, a fresh one kept)
    names = list(r)
    arrays = {n: harness.array(n) for n in names}
    base = {n: harness.host(n).astype(np.float64, copy=False) for n in names}  # host() is a copy already
    probe = DirectionProbe(arrays, base, r)
    evaluate = lambda: [objective(harness.outputs(names))]
    if at_base is not None:
        try:
            h = probe.set(eps)
            value = float(evaluate()[0])
        finally:
            probe.restore()
            harness.reset_aux()
        return (value - float(at_base)) / h, h
    ((_, deltas, samples),) = list(sweep([probe], [eps], evaluate, "central"))
    harness.reset_aux()
    (d,), width = derivative("central", deltas, samples)
    return float(d), width


@dataclasses.dataclass
class Settled:
    """A difference retaken at shorter steps (``settle``): ``value`` (Richardson-extrapolated), what the comparison
    with the analytic value allows, whether the truncation had settled within the gradient's own tolerance, the
    last step and the rounding part of ``allowed``."""

    value: float
    allowed: float
    settled: bool
    step: float
    noise: float
    analytic: float

    @property
    def ok(self) -> bool:
        return bool(abs(self.analytic - self.value) <= self.allowed)


def settle(
    difference: Callable,
    h: float,
    first: float,
    analytic: float,
    bound: float,
    f_noise: float,
    rtol: float,
    max_refine: int = 8,
) -> Settled:
    """Retake a central difference that failed at step ``h`` at ``h/4, h/16, ...`` until it settles.

    ``difference(step) -> (value, width)`` is the central difference at ``step`` (``first``: its value at ``h``);
    ``bound``: the gradient's own tolerance along the direction (the comparison also allows ``rtol`` of the
    numeric value and the rounding ``f_noise / width``). A central difference errs by its truncation, ``c h^2``
    (the objective's curvature along the direction), plus rounding, ``f_noise / h``. With ``D`` and ``D'`` at
    ``h`` and ``h/4``, ``D' - D = 15 c (h/4)^2``: Richardson's ``R = D' + (D' - D) / 15`` removes the ``h^2``
    term, and ``|D' - D|`` (15x the error left in ``D'``) bounds what is left in ``R`` while the ``h^2`` law
    holds. The comparison is judged at the first level whose truncation bound is within ``bound`` (settled)
    when it passes, and at the second settled level in a row when it fails (two steps agreeing once can be a
    coincidence before the ``h^2`` law holds: measured on MobileNetV2 at 64x64 in float32, 1.45e6, 1.22e6,
    1.79e6, 1.867e6, 1.872e6 as the step shrinks); a wrong gradient settles at once. When the rounding (17/15
    of ``D'``'s) grows past a quarter of ``bound`` first, the numeric side cannot decide: the result has
    ``settled=False`` (callers report it as undecided, never as a failure). Cost: 2 evaluations per level.
    """
    best, failed_before = None, False
    for _ in range(max_refine):
        h /= 4.0
        d, width = difference(h)
        noise, trunc, rich = f_noise / width * 17.0 / 15.0, abs(d - first), d + (d - first) / 15.0
        got = Settled(rich, bound + rtol * abs(rich) + noise + trunc, trunc <= bound, h, noise, analytic)
        if got.settled and (got.ok or failed_before):
            return got
        failed_before = got.settled
        if best is None or got.allowed < best.allowed:
            best = got
        if noise > bound / 4.0:
            break
        first = d
    assert best is not None  # max_refine >= 1
    best.settled = False
    return best


def settled_note(who: str, what: str, first: float, analytic: float, got: Settled, where: str = "") -> str:
    """The warning of a difference along one direction that passed once ``settle`` retook it: ``what`` names the
    difference (``"the central difference with eps=0.001 along r"``), ``where`` the reference if not the first."""
    return (
        f"{who}: {what} erred by truncation (numeric {first:.10g}, backward {analytic:.10g}); retaken down to "
        f"eps={got.step:.3g}{where} it settles at {got.value:.10g}, which the backward matches: pass (use a "
        "smaller eps near steep points)"
    )


class ElementDifferences:
    """Central differences along single elements of argument ``name`` at any step, each taken once.

    ``evaluate()`` gives the outputs at the moved point (a list: the projected objective, or every output of
    a Jacobian column); ``(index, step)`` returns ``(per-output derivatives, width)``. The entries of one
    Jacobian column share their element and its steps, so retaking them at shorter steps (``settle_entries``)
    costs 2 partial forwards per column and level, not per entry.
    """

    def __init__(self, harness, name: str, evaluate: Callable):
        self.harness, self.name, self.evaluate = harness, name, evaluate
        self._taken: dict = {}

    def __call__(self, index: tuple, step: float):
        key = (tuple(index), float(step))
        if key not in self._taken:
            probe = ElementProbe(self.harness.array(self.name), index, self.name)
            ((_, deltas, samples),) = list(sweep([probe], [step], self.evaluate, "central"))
            self.harness.reset_aux()
            self._taken[key] = derivative("central", deltas, samples, probe.label)
        return self._taken[key]


def settle_entries(differences: ElementDifferences, entries, steps, first, analytic, bound, f_noise, rtol):
    """``settle`` each failing entry ``(output k, output element i, input element index)``; stop at the first
    that settles and still fails (the check fails whatever the others show).

    ``steps`` (per input element), ``first``, ``analytic``, ``bound`` and ``f_noise`` (per entry) are those of
    the failed comparison. Returns the ``Settled`` of the entries taken, in order: a shorter step helps where
    the objective curves on a scale near the default step (a BatchNorm over a nearly constant channel:
    ``x_hat = d / sqrt(var + eps)`` turns on a scale of ``sqrt(eps)``). A wrong gradient settles at once at its
    wrong value, after 2 levels.
    """
    taken = []
    for j, (k, i, index) in enumerate(entries):

        def difference(step, k=k, i=i, index=index):
            ds, width = differences(index, step)
            return float(np.real(np.ravel(ds[k])[i])), width

        got = settle(
            difference,
            float(steps[index]),
            float(first[j]),
            float(analytic[j]),
            float(bound[j]),
            float(f_noise[j]),
            rtol,
        )
        taken.append(got)
        if got.settled and not got.ok:
            break
    return taken
