"""Numeric differentiation: central differences (optionally Richardson-extrapolated) or complex steps over a
bound executor, with per-element kink detection.

Methods (``central_differences``, ``complex_step_differences``), for every element ``x_i`` of a checked
argument:

- ``"central"`` (default): evaluate the scalar objective at ``x_i + h_i`` and ``x_i - h_i`` and take
  ``(f+ - f-) / (x_i+ - x_i-)``, the denominator being the distance between the two points actually stored
  (so rounding of the perturbed value does not bias the quotient). Error O(h^2) + O(eps/h). Cost: 2
  partial forward passes per element.
- ``"richardson"``: central differences at ``h`` and ``h/2`` combined so the O(h^2) terms cancel
  (``(4 D(h/2) - D(h)) / 3``, weighted by the exact widths). Error O(h^4) + O(eps/h). Cost: 4 passes.
- ``"complex_step"``: ``Im f(x_i + i h) / h`` on a complex copy of the graph. No subtraction, so no
  cancellation: accurate to rounding with a tiny ``h``. Cost: 1 pass per element, but every op on the
  path must be complex-analytic; ``check_complex_support`` tries a complex forward op by op first and
  names the op that refuses. Cost of that check: 3 forward passes.

Only the instructions downstream of the perturbed argument are re-run (``Executor.rerun_downstream``).

Default steps (``default_steps``): ``h_i = eps^(1/3) * max(|x_i|, 1)`` (~6.1e-6 for a float64
reference) for central differences, ``eps^(1/5) * max(|x_i|, 1)`` (~7.4e-4) for Richardson, which
balance truncation and rounding error; ``1e-20 * max(|x_i|, 1)`` for complex steps.

Kinks (``find_kinks``): where analytic and numeric disagree, the one-sided quotients
``R = (f(x+s) - f(x)) / s`` and ``L = (f(x) - f(x-s)) / s`` at ``s = h`` and ``s = 4h`` tell a
non-differentiable point (relu/abs at 0, max ties) from a wrong gradient: at a kink the jump ``R - L``
stays as large at ``4h`` as at ``h``; on a smooth function it grows like ``s`` (``f'' s``). Cost: 4
passes per examined element, only for mismatching elements.

A check that runs longer than ``PROGRESS_DELAY`` seconds shows a tqdm progress bar (when tqdm is
installed; ``progress=False`` turns it off).

``numeric_grad`` is MXNet's function (objective: the sum of every output); ``check_numeric_gradient``
(in ``mxnet_checks``) evaluates a float64 copy of the symbol with a random projection of its outputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from symgrad.symbol import Group, Symbol

from ._inputs import check_dtype, check_finite, check_kind, named_arrays
from .context import to_device, to_numpy
from .report import Kink
from .tolerance import min_numeric_eps

__all__ = [
    "numeric_grad",
    "central_differences",
    "complex_step_differences",
    "check_complex_support",
    "ComplexStepError",
    "find_kinks",
    "default_steps",
    "resolve_numeric_eps",
    "min_step",
    "check_step",
    "assert_deterministic",
    "rounding_noise",
    "register_loss_objective",
    "LOSS_OBJECTIVES",
    "projected_objective",
    "METHODS",
    "PROGRESS_DELAY",
]

CBRT_EPS64 = float(np.cbrt(np.finfo(np.float64).eps))

#: numeric differentiation methods
METHODS = ("central", "richardson", "complex_step")

#: half-step of complex-step differentiation, relative to max(|x|, 1)
COMPLEX_STEP = 1e-20

#: seconds a numeric gradient runs before it shows a progress bar
PROGRESS_DELAY = 2.0

#: safety factor of the rounding-noise estimate (rounding in the forward ops, not only in the final
#: sum); 1 already removed every false failure of 900 random float64 checks (6 ops x 150 seeds),
#: 0 left one (a softmax gradient of 4e-7 off by 2e-11, against float64's atol 1e-20)
NOISE_FACTOR = 4.0

#: kink test: the jump R - L at step 4h must stay below this multiple of the jump at h (smooth: ~4)
KINK_GROWTH = 2.5
#: ... and the jump at h must exceed this multiple of its rounding noise
KINK_NOISE = 10.0
#: share of the jump an analytic value may lie beyond the one-sided quotients and still count as a subgradient
KINK_SLACK = 0.1
#: mismatching elements examined for kinks before giving up when none of them is one
KINK_PROBE = 64


def _check_method(method, who="numeric gradient"):
    if method not in METHODS:
        raise ValueError(f"{who}: method must be one of {METHODS}, got {method!r}")
    return method


def default_steps(x, numeric_dtype=np.float64, method="central") -> np.ndarray:
    """Half-steps per element, ``eps`` the machine epsilon of the dtype the differences are taken in.

    ``"central"``: ``h = eps^(1/3) * max(|x|, 1)`` (~6.1e-6 for float64) minimises truncation (h^2) plus
    rounding (eps/h) error; ``"richardson"``: ``eps^(1/5) * max(|x|, 1)`` (truncation h^4);
    ``"complex_step"``: ``1e-20 * max(|x|, 1)`` (no rounding term).
    """
    x = np.asarray(x, dtype=np.float64)
    eps = float(np.finfo(np.dtype(numeric_dtype)).eps)
    rel = {"central": eps ** (1.0 / 3.0), "richardson": eps ** 0.2, "complex_step": COMPLEX_STEP}[_check_method(method)]
    return rel * np.maximum(np.abs(x), 1.0)


def resolve_numeric_eps(numeric_eps, dtype, numeric_dtype, who):
    """The fixed finite-difference width for ``dtype`` under test, or None for per-element steps.

    ``numeric_eps`` may be None, a number or a ``{dtype: eps}`` dict (MXNet). A width below
    ``tolerance.min_numeric_eps`` raises ``ValueError``.
    """
    if numeric_eps is None:
        return None
    if isinstance(numeric_eps, dict):
        table = {np.dtype(k): v for k, v in numeric_eps.items()}
        numeric_eps = table.get(np.dtype(dtype))
        if numeric_eps is None:
            return None
    try:
        eps = float(numeric_eps)
    except (TypeError, ValueError):
        raise TypeError(f"{who}: numeric_eps must be a number, a {{dtype: eps}} dict or None, "
                        f"got {numeric_eps!r}") from None
    if not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"{who}: numeric_eps must be a positive number, got {numeric_eps!r}")
    floor = min_numeric_eps(dtype, numeric_dtype)
    if eps < floor:
        raise ValueError(f"{who}: {step_too_small(eps, dtype, numeric_dtype, floor, full_width=True)}. Leave "
                         "numeric_eps=None to get a step chosen per element for a float64 reference.")
    return eps


def step_too_small(step, dtype, numeric_dtype, floor, full_width=True, name=None) -> str:
    """Why a finite-difference step below ``floor`` is refused, in one sentence (no trailing period).

    ``step`` is the full width (``x +- step/2``) or, with ``full_width=False``, the half-width
    (``x +- step``) of the differences taken in ``numeric_dtype`` for ``dtype`` under test.
    """
    dtype, numeric_dtype = np.dtype(dtype), np.dtype(numeric_dtype)
    ulp = float(np.finfo(numeric_dtype).eps)
    half = step / 2.0 if full_width else step
    name = name or ("numeric_eps" if full_width else "eps")
    text = f"{name}={step:g} is too small for {dtype.name} under test"
    rounding_floor = float(np.sqrt(ulp)) / (4.0 if full_width else 8.0)
    if step < rounding_floor:
        noise = ulp / (2.0 * half)
        width = name if full_width else f"(2 * {name})"
        text += (f": the finite differences are taken in {numeric_dtype.name}, where the numbers near 1 are "
                 f"{ulp:.3g} apart, so the step x +- {half:.3g} is stored with an error of up to "
                 f"{100 * min(ulp / (2 * half), 1.0):.3g}% and the rounding error of the difference quotient, about "
                 f"eps_{numeric_dtype.name} * |f| / {width} = {noise:.2g} * |f|, swamps the derivative "
                 f"(minimum {floor:.3g})")
    else:
        text += (f" (minimum {floor:.3g}, MXNet's floor for float16/float32: MXNet takes its differences in "
                 f"the dtype under test, where a smaller step is swamped by rounding; here they are taken in "
                 f"{numeric_dtype.name})")
    return text


def min_step(numeric_dtype) -> float:
    """The smallest half-width ``h`` (``x +- h``) accepted for differences taken in ``numeric_dtype``:
    ``sqrt(machine eps) / 8`` (3.7e-9 for float64, 4.3e-5 for float32, 3.9e-3 for float16), half of
    ``tolerance.min_numeric_eps``'s full width; below it rounding swamps the quotient."""
    return float(np.sqrt(np.finfo(np.dtype(numeric_dtype)).eps)) / 8


def check_step(eps, numeric_dtype, dtype, who, hint=""):
    """Refuse an explicit half-width ``eps`` below ``min_step(numeric_dtype)`` (ValueError)."""
    floor = min_step(numeric_dtype)
    if eps is not None and eps < floor:
        raise ValueError(f"{who}: {step_too_small(eps, dtype, numeric_dtype, floor, full_width=False)}.{hint}")


def rounding_noise(magnitude, widths, numeric_dtype=np.float64) -> np.ndarray:
    """Estimated rounding noise of a difference quotient: ``NOISE_FACTOR * eps * |f| / width``."""
    eps = float(np.finfo(np.dtype(numeric_dtype)).eps)
    return NOISE_FACTOR * eps * float(magnitude) / np.asarray(widths, dtype=np.float64)


class _Evaluator:
    """Evaluates ``objective(outputs)`` at the executor's bound values, resetting aux states each time."""

    def __init__(self, exe, objective, is_train, aux_initial=None):
        self.exe = exe
        self.objective = objective
        self.is_train = bool(is_train)
        self.aux_initial = {k: as_array_like(exe.aux_dict[k], np.asarray(to_numpy(v)))
                            for k, v in (aux_initial or {}).items()}
        self.fast = hasattr(exe, "forward_all") and hasattr(exe, "rerun_downstream")

    def _reset_aux(self):
        aux = self.exe.aux_dict
        for name, value in self.aux_initial.items():
            aux[name][...] = value

    def base(self):
        self._reset_aux()
        outs = self.exe.forward_all(self.is_train) if self.fast else self.exe.forward(is_train=self.is_train)
        return [to_numpy(o) for o in outs]

    def at(self, name):
        self._reset_aux()
        if self.fast:
            outs = self.exe.rerun_downstream([name])
        else:
            outs = self.exe.forward(is_train=self.is_train)
        return self.objective([to_numpy(o) for o in outs])


def _same(a, b) -> bool:
    a, b = np.asarray(to_numpy(a)), np.asarray(to_numpy(b))
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def _random_node(exe, is_train):
    """The first node of ``exe``'s plan whose forward gives different results for the same inputs, or None.

    Each instruction runs twice on copies of the values of a first pass (so no bound array or auxiliary
    state changes).
    """
    plan = getattr(exe, "plan", None)
    if plan is None:
        return None
    vals = [None] * plan.n_slots
    for slots, arrays in ((plan.arg_slots, exe.arg_arrays), (plan.aux_slots, exe.aux_arrays)):
        for s, a in zip(slots, arrays):
            if s is not None:
                vals[s] = a.copy()
    with np.errstate(all="ignore"):
        for ins in plan.forward_instrs:
            results = []
            for _ in range(2):
                args = [vals[s].copy() if hasattr(vals[s], "copy") else vals[s] for s in ins.ins]
                res = ins.fn(*args, is_train=is_train) if ins.train else ins.fn(*args)
                results.append(res if ins.tuple_out else (res,))
            if not all(_same(a, b) for a, b in zip(*results)):
                return ins.node
            for s, r in zip(ins.outs, results[0]):
                vals[s] = r
    return None


def assert_deterministic(exe, is_train, aux_initial=None, who="numeric gradient", what="the forward"):
    """Raise ValueError naming the op when two forwards of ``exe`` at the same point differ.

    Finite differences (and an analytic gradient compared with them) need a deterministic function; a
    random op such as Dropout in training mode draws new values on every run. Auxiliary states are reset
    to ``aux_initial`` before each forward. Cost: two forwards (more to name the op when they differ).
    """
    ev = _Evaluator(exe, None, is_train, aux_initial)
    first = [np.array(o, copy=True) for o in ev.base()]
    second = ev.base()
    if all(_same(a, b) for a, b in zip(first, second)):
        return
    culprit = "an output"
    try:
        node = _random_node(exe, bool(is_train))
    except Exception:  # naming the op is a courtesy: never hide the real problem behind it
        node = None
    if node is not None:
        culprit = f"op {node.op.name} {node.name!r}"
    ev._reset_aux()
    aux_hint = ""
    if node is None and list(getattr(exe, "aux_dict", {}) or ()) and not aux_initial:
        aux_hint = ("; or the forward reads an auxiliary state it updates: give the auxiliary states (aux_states) "
                    "so that they are reset before every evaluation")
    raise ValueError(
        f"{who}: {what} is not deterministic: {culprit} gives different values in two evaluations at the same "
        f"point (is_train={bool(is_train)}); finite differences need a deterministic function -- a random op "
        "such as Dropout in training mode draws new values on every run (use p=0, is_train=False where the "
        f"check allows it, or take the op out of the checked symbol){aux_hint}")


class _Progress:
    """A tqdm bar that appears only once the work has run ``PROGRESS_DELAY`` seconds (tqdm imported lazily)."""

    def __init__(self, total, enabled=True, desc="numeric gradient"):
        self.total, self.enabled, self.desc = int(total), bool(enabled), desc
        self.start = time.perf_counter()
        self.done = 0
        self.bar = None

    def update(self, n=1):
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled and time.perf_counter() - self.start > PROGRESS_DELAY:
            self._open()

    def _open(self):
        try:
            from tqdm.auto import tqdm
        except ImportError:  # optional dependency: no bar, no complaint
            self.enabled = False
            return
        self.bar = tqdm(total=self.total, initial=self.done, desc=self.desc, unit="elem", leave=False)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _float_size(exe, names):
    args = exe.arg_dict
    return sum(int(np.prod(args[n].shape)) for n in names if np.dtype(args[n].dtype).kind in "fc")


def _perturbed(exe, name, x_new, idx, ev):
    """Objective with element ``idx`` of argument ``name`` set to ``x_new`` (then restored)."""
    arr = exe.arg_dict[name]
    old = arr[idx]
    arr[idx] = x_new
    try:
        return ev.at(name)
    finally:
        arr[idx] = old


def central_differences(exe, names, objective: Callable, steps: dict, *, is_train=True, aux_initial=None,
                        method="central", progress=True, desc="numeric gradient"):
    """Central-difference gradients of ``objective(outputs) -> float`` w.r.t. the bound arguments ``names``.

    Args:
        exe: a bound executor; its argument arrays are perturbed in place and restored.
        names: arguments to differentiate.
        objective: maps the list of outputs (numpy arrays) to a float.
        steps: ``{name: half-step array}`` (float64, the argument's shape).
        is_train: forward mode of every evaluation.
        aux_initial: ``{aux name: array}`` written back into the executor before every evaluation.
        method: ``"central"`` (2 evaluations per element) or ``"richardson"`` (4: steps ``h`` and ``h/2``,
            extrapolated so the O(h^2) error cancels).
        progress: show a tqdm bar when the loop runs longer than ``PROGRESS_DELAY`` seconds.
        desc: label of the progress bar.

    Returns:
        ``({name: float64 gradient}, {name: float64 width})``: the width of each difference (for Richardson
        the width whose rounding noise equals that of the extrapolated value; ``rounding_noise`` uses it).
        Arguments of integer dtype get zero gradients.

    Raises:
        ValueError: when a step vanishes in the argument's dtype (``x + h == x - h``).
    """
    if _check_method(method, "central_differences") == "complex_step":
        raise ValueError("central_differences: use complex_step_differences for method='complex_step'")
    ev = _Evaluator(exe, objective, is_train, aux_initial)
    ev.base()
    grads, widths = {}, {}
    args = exe.arg_dict
    bar = _Progress(_float_size(exe, names), progress, desc)
    try:
        for name in names:
            arr = args[name]
            g = np.zeros(arr.shape, np.float64)
            w = np.ones(arr.shape, np.float64)
            grads[name], widths[name] = g, w
            if np.dtype(arr.dtype).kind != "f":
                continue
            orig = np.array(to_numpy(arr), copy=True)
            x64 = orig.astype(np.float64)
            h = np.broadcast_to(np.asarray(steps[name], np.float64), arr.shape)
            cast = np.dtype(arr.dtype).type

            def quotient(idx, half):
                x_plus, x_minus = cast(x64[idx] + half), cast(x64[idx] - half)
                width = float(x_plus) - float(x_minus)
                if width <= 0:
                    raise ValueError(
                        f"numeric gradient: the step {half:.3g} vanishes for argument {name!r} at index {idx} "
                        f"(value {x64[idx]:.8g}) in {np.dtype(arr.dtype).name}; use a larger eps"
                    )
                arr[idx] = x_plus
                f_plus = ev.at(name)
                arr[idx] = x_minus
                f_minus = ev.at(name)
                arr[idx] = orig[idx]
                return (f_plus - f_minus) / width, width

            try:
                for idx in np.ndindex(*arr.shape):
                    d1, w1 = quotient(idx, h[idx])
                    if method == "central":
                        g[idx], w[idx] = d1, w1
                    else:
                        d2, w2 = quotient(idx, h[idx] / 2.0)
                        a2, b2 = (w1 / 2.0) ** 2, (w2 / 2.0) ** 2
                        c2, c1 = a2 / (a2 - b2), b2 / (a2 - b2)  # D = c2 D(h/2) - c1 D(h): the h^2 terms cancel
                        g[idx] = c2 * d2 - c1 * d1
                        w[idx] = 1.0 / (c2 / w2 + c1 / w1)
                    bar.update()
            finally:
                arr[...] = as_array_like(arr, orig)
    finally:
        bar.close()
    ev._reset_aux()
    return grads, widths


def complex_step_differences(exe, names, objective: Callable, steps: dict, *, is_train=True, aux_initial=None,
                             progress=True, desc="numeric gradient (complex step)"):
    """Complex-step gradients ``Im objective(x + i h e_i) / h`` w.r.t. the bound arguments ``names``.

    ``exe`` must be bound with complex arrays and ``objective`` must keep the imaginary part (a sum of
    ``w * output`` over the outputs); every op on the way must be complex-analytic
    (``check_complex_support``). Arguments and steps as ``central_differences``.

    Returns:
        ``({name: float64 gradient}, {name: float64 width})``; the widths (``max(|x|, 1)``) make
        ``rounding_noise`` an estimate of the rounding error of the derivative itself.
    """
    ev = _Evaluator(exe, objective, is_train, aux_initial)
    ev.base()
    grads, widths = {}, {}
    args = exe.arg_dict
    bar = _Progress(_float_size(exe, names), progress, desc)
    try:
        for name in names:
            arr = args[name]
            g = np.zeros(arr.shape, np.float64)
            grads[name] = g
            widths[name] = np.maximum(np.abs(np.asarray(to_numpy(arr)).real.astype(np.float64)), 1.0)
            if np.dtype(arr.dtype).kind != "c":
                continue
            orig = np.array(to_numpy(arr), copy=True)
            h = np.broadcast_to(np.asarray(steps[name], np.float64), arr.shape)
            try:
                for idx in np.ndindex(*arr.shape):
                    arr[idx] = orig[idx].real + 1j * h[idx]
                    g[idx] = float(np.imag(ev.at(name))) / h[idx]
                    arr[idx] = orig[idx]
                    bar.update()
            finally:
                arr[...] = as_array_like(arr, orig)
    finally:
        bar.close()
    ev._reset_aux()
    return grads, widths


def as_array_like(like, host):
    """``host`` moved to the array module of ``like`` (numpy or CuPy)."""
    mod = type(like).__module__.split(".")[0]
    if mod == "numpy":
        return host
    import importlib

    return importlib.import_module(mod).asarray(host)


# -- objectives -------------------------------------------------------------------------------------


def _sum_objective(outputs):
    return float(sum(np.sum(np.asarray(o, np.float64)) for o in outputs))


def numeric_grad(executor, location, aux_states=None, eps=1e-4, use_forward_train=True, dtype=np.float32, *,
                 method="central", progress=True):
    """Numeric gradient of the sum of every output of ``executor`` by central differences (MXNet's ``numeric_grad``).

    The values of ``location`` (a dict name -> array, or a list in ``list_arguments()`` order; a dict may
    name only some arguments) are cast to ``dtype`` and written into the executor's arguments; the
    gradient is computed for each of them (zeros for integer arrays). ``eps`` is the full width of the
    difference (``x +- eps/2``, as MXNet), ``None`` picks ``h = cbrt(eps) * max(|x|, 1)`` per element
    (``x +- h``, ``eps`` the machine epsilon of the executor's dtype). Auxiliary states are reset to
    ``aux_states`` before every evaluation. Differences are accumulated in float64; the executor
    computes in its own dtype. Keyword-only (symgrad): ``method="richardson"`` extrapolates two central
    differences (``eps=None`` then picks ``h = eps^(1/5) * max(|x|, 1)``); complex steps need a complex
    copy of the graph, which ``check_numeric_gradient(..., method="complex_step")`` builds. ``progress``:
    a tqdm bar after ``PROGRESS_DELAY`` seconds.

    Differences from MXNet: the objective is the sum of *every* output (MXNet sums ``outputs[0]`` only;
    the two agree for single-output executors); a dict ``location`` may name only some arguments; the
    caller's ``location`` arrays are never modified.

    Returns:
        ``{name: gradient}`` in ``dtype``.

    Raises:
        ValueError: NaN/Inf in ``location`` (naming the argument), a shape that differs from the bound
            array, ``eps`` too small for the executor's dtype (``tolerance.min_numeric_eps``), a forward
            that is not deterministic (Dropout in training: the op is named).

    >>> import numpy as np, symgrad as sg
    >>> x = sg.sym.Variable("x")
    >>> exe = sg.sym.square(x).simple_bind(sg.cpu(), x=(3,), type_dict={"x": np.float64})
    >>> numeric_grad(exe, {"x": np.array([1.0, 2.0, 3.0])}, eps=None, dtype=np.float64)["x"].round(6)
    array([2., 4., 6.])
    """
    who = "numeric_grad"
    dtype = check_dtype(dtype, who)
    if _check_method(method, who) == "complex_step":
        raise ValueError(f"{who}: method='complex_step' needs a complex copy of the symbol; use "
                         "check_numeric_gradient(sym, location, method='complex_step')")
    arg_names = list(executor.arg_dict)
    if isinstance(location, dict):
        unknown = [k for k in location if k not in arg_names]
        if unknown:
            raise ValueError(f"{who}: location names {unknown}, which are not arguments; arguments are {arg_names}")
        loc = named_arrays(location, list(location), who, "argument")
    else:
        loc = named_arrays(location, arg_names, who, "argument")
    for k, v in loc.items():
        check_kind(v, who, "argument", k, allow_complex=False)
    check_finite(loc, who)
    args = executor.arg_dict
    for k, v in loc.items():
        if tuple(v.shape) != tuple(args[k].shape):
            raise ValueError(f"{who}: argument {k!r} has shape {tuple(v.shape)}, expected {tuple(args[k].shape)}")
    for k, v in loc.items():
        args[k][...] = as_array_like(args[k], v.astype(dtype) if v.dtype.kind == "f" else v)
    aux = None
    if aux_states is not None:
        aux_names = list(executor.aux_dict)
        if isinstance(aux_states, dict):
            unknown = [k for k in aux_states if k not in aux_names]
            if unknown:
                raise ValueError(f"{who}: aux_states names {unknown}, which are not auxiliary states; "
                                 f"auxiliary states are {aux_names}")
            aux_names = list(aux_states)
        aux = named_arrays(aux_states, aux_names, who, "auxiliary state", "aux_states")
        for k, v in aux.items():
            check_kind(v, who, "auxiliary state", k, allow_complex=False)
        check_finite(aux, who, "auxiliary state")
        aux = {k: as_array_like(executor.aux_dict[k], v.astype(executor.aux_dict[k].dtype)) for k, v in aux.items()}
    if eps is None:
        steps = {k: default_steps(to_numpy(args[k]), args[k].dtype, method) for k in loc}
    else:
        try:
            eps = float(eps)
        except (TypeError, ValueError):
            raise TypeError(f"{who}: eps must be a number or None, got {eps!r}") from None
        if not eps > 0:
            raise ValueError(f"{who}: eps must be positive, got {eps!r}")
        for k in loc:  # the differences are taken in the executor's dtype
            dt = np.dtype(args[k].dtype)
            if dt.kind == "f" and eps < min_numeric_eps(dt, dt):
                raise ValueError(f"{who}: argument {k!r}: "
                                 f"{step_too_small(eps, dt, dt, min_numeric_eps(dt, dt), True, 'eps')}; "
                                 "use a larger eps, or eps=None for a step chosen per element")
        steps = {k: np.full(np.shape(args[k]), eps / 2.0) for k in loc}
    assert_deterministic(executor, use_forward_train, aux, who)
    grads, _ = central_differences(executor, list(loc), _sum_objective, steps, is_train=use_forward_train,
                                   aux_initial=aux, method=method, progress=progress)
    return {k: g.astype(dtype) for k, g in grads.items()}


# -- loss heads ---------------------------------------------------------------------------------------
#
# A loss head (SoftmaxOutput, MakeLoss) ignores its head gradient: its backward is the gradient of an
# implied scalar loss. To check it numerically the objective must contain that loss, not a projection
# of the head's output. A factory gets the node's params, its inputs and output at the base point (float64
# numpy) and returns ``loss(inputs, output) -> (value, magnitude)``; constants (targets, masks, counts)
# are frozen at the base point.

LOSS_OBJECTIVES: dict[str, Callable] = {}


def register_loss_objective(op_name: str, factory: Callable | None = None):
    """Register the implied loss of a loss-head op (an op name, or a Custom op's ``op_type``).

    Usable as a decorator. ``factory(params, inputs, output) -> loss(inputs, output) -> (value, magnitude)``.
    """
    def do(f):
        LOSS_OBJECTIVES[op_name] = f
        return f

    return do(factory) if factory is not None else do


def _rows3(x, params):
    """Softmax layout of SoftmaxOutput as (A, classes, B), softmax over axis 1."""
    if params.get("multi_output"):
        return x.reshape(x.shape[0], x.shape[1], -1)
    if params.get("preserve_shape"):
        return x.reshape(-1, x.shape[-1])[:, :, None]
    return x.reshape(x.shape[0], -1)[:, :, None]


@register_loss_objective("SoftmaxOutput")
def _softmax_output_loss(params, inputs, output):
    """L = sum_rows c * (logsumexp(z) - t . z), so dL/dz = c * (softmax(z) - t) (MXNet's backward).

    t is the (smoothed) one-hot label or the probability label, c folds grad_scale, use_ignore and
    normalization exactly as MXNet's SoftmaxOutput backward.
    """
    z, label = inputs[0], inputs[1]
    gs = float(params.get("grad_scale", 1.0))
    z3 = _rows3(z, params)
    if label.shape == z.shape:  # probability labels: grad = (p - label) * grad_scale
        t = _rows3(label, params)
        c = np.full((z3.shape[0], 1, z3.shape[2]), gs)
    else:
        multi = bool(params.get("multi_output"))
        k = z3.shape[1]
        lab = label.reshape(z.shape[0], -1) if multi else label.reshape(-1, 1)
        lab_int = lab.astype(np.int64)
        t = (np.arange(k).reshape(1, k, 1) == lab_int[:, None, :]).astype(np.float64)
        alpha = float(params.get("smooth_alpha", 0.0))
        if alpha:
            t = t * (1.0 - alpha - alpha / (k - 1)) + alpha / (k - 1)
        ignored = lab_int == int(params.get("ignore_label", -1.0))
        spatial = z3.shape[2] if multi else 1
        norm = params.get("normalization", "null")
        if norm == "batch":
            scale = gs / lab.shape[0] / spatial
        elif norm == "valid":
            scale = gs / max(int(lab.size - int(ignored.sum())), 1)
        else:
            scale = gs / spatial
        mask = (~ignored).astype(np.float64) if params.get("use_ignore") else np.ones(lab.shape)
        c = scale * mask[:, None, :]

    def loss(ins, out):
        zz = _rows3(np.asarray(ins[0], np.float64), params)
        m = zz.max(axis=1, keepdims=True)
        lse = m + np.log(np.exp(zz - m).sum(axis=1, keepdims=True))
        terms = c * (lse - (t * zz).sum(axis=1, keepdims=True))
        return float(terms.sum()), float(np.abs(c * lse).sum() + np.abs(c * t * zz).sum())

    return loss


@register_loss_objective("MakeLoss")
def _make_loss_loss(params, inputs, output):
    """L = scale * sum(data), scale = grad_scale (/ batch size, / count(data > valid_thresh) at the base point)."""
    data = inputs[0]
    gs = float(params.get("grad_scale", 1.0))
    norm = params.get("normalization", "null")
    if norm == "batch":
        scale = gs / data.shape[0]
    elif norm == "valid":
        scale = gs / max(int((data > float(params.get("valid_thresh", 0.0))).sum()), 1)
    else:
        scale = gs

    def loss(ins, out):
        d = np.asarray(ins[0], np.float64)
        return float(scale * d.sum()), float(abs(scale) * np.abs(d).sum())

    return loss


def _loss_key(node):
    op_type = node.params.get("op_type") if isinstance(node.params, dict) else None
    if op_type is not None and op_type in LOSS_OBJECTIVES:
        return op_type
    return node.op.name


def projected_objective(sym, weights, who="check_numeric_gradient"):
    """The symbol to evaluate and the objective of a numeric gradient check.

    Every output ``k`` that is not a loss head contributes ``sum(w_k * out_k)`` (``weights[k]``); a loss
    head contributes its implied loss (``LOSS_OBJECTIVES``), which needs the head's inputs: they are
    appended as extra outputs of the returned symbol.

    Returns:
        ``(ref_sym, loss_heads, make_objective)``: ``loss_heads[k]`` is True for loss-head outputs;
        ``make_objective(base_outputs)`` freezes the loss constants at the base point and returns
        ``objective(outputs) -> (value, magnitude)``.
    """
    heads = list(sym._outputs)
    n = len(heads)
    extras, plan = [], []
    loss_heads = []
    for k, (node, _) in enumerate(heads):
        is_loss = node.op is not None and node.op.loss_head(node.params)
        loss_heads.append(is_loss)
        if not is_loss:
            plan.append(None)
            continue
        key = _loss_key(node)
        if key not in LOSS_OBJECTIVES:
            raise NotImplementedError(
                f"{who}: output {sym.list_outputs()[k]!r} comes from the loss head {node.op.name} {node.name!r}, "
                f"whose backward ignores the head gradient, and its implied loss is unknown; register it with "
                f"test_utils.numeric.register_loss_objective({key!r}, factory) (known: {sorted(LOSS_OBJECTIVES)})"
            )
        start = n + len(extras)
        extras.extend(node.inputs)
        plan.append((key, node.params, slice(start, start + len(node.inputs))))
    ref_sym = sym if not extras else Group([sym, Symbol(extras)])

    def make_objective(base_outputs):
        losses = []
        for k, p in enumerate(plan):
            if p is None:
                losses.append(None)
                continue
            key, params, sl = p
            losses.append((LOSS_OBJECTIVES[key](params, base_outputs[sl], base_outputs[k]), sl))

        def objective(outputs):
            total, mag = 0.0, 0.0
            for k in range(n):
                out = np.asarray(outputs[k], np.float64)
                if losses[k] is None:
                    terms = weights[k] * out
                    total += float(terms.sum())
                    mag += float(np.abs(terms).sum())
                else:
                    fn, sl = losses[k]
                    v, m = fn(outputs[sl], out)
                    total += v
                    mag += m
            return total, mag

        return objective

    return ref_sym, loss_heads, make_objective


def complex_objective(weights):
    """``objective(outputs) = sum_k sum(w_k * out_k)`` keeping the imaginary part (complex steps)."""

    def objective(outputs):
        return complex(sum(np.sum(w * np.asarray(o)) for w, o in zip(weights, outputs)))

    return objective


# -- kinks ----------------------------------------------------------------------------------------------


def find_kinks(exe, name, objective: Callable, indices, steps, analytic, tol, *, magnitude, numeric_dtype=np.float64,
               is_train=True, aux_initial=None, probe=KINK_PROBE) -> list[Kink]:
    """The elements of ``indices`` that sit at a non-differentiable point of ``objective``.

    For each element, the one-sided quotients ``L = (f(x) - f(x-s)) / s`` and ``R = (f(x+s) - f(x)) / s``
    at ``s = h`` and ``s = 4h`` (``h = steps[index]``). The element is a kink when the jump ``R - L`` at
    ``h`` exceeds its rounding noise (x ``KINK_NOISE``) and half the tolerance, and does not grow like
    ``s`` (at ``4h`` it stays below ``KINK_GROWTH`` x the jump at ``h``; a smooth function's jump is
    ``f'' s``). Its ``Kink.subgradient`` says whether ``analytic[index]`` lies between ``L`` and ``R``
    (up to ``tol[index]`` + ``KINK_SLACK`` x the jump): a correct rule picks one side or a value between them.

    Args:
        exe: executor of the numeric reference (float64), bound at the point checked.
        name: the argument; ``objective(outputs) -> float`` the scalar differentiated.
        indices: candidate elements (usually the mismatching ones).
        steps: half-step array ``h`` of the argument.
        analytic: the analytic gradient of the argument (float64 array).
        tol: allowed error per element (array), e.g. ``atol + rtol * |numeric| + noise``.
        magnitude: ``sum |terms|`` of the objective, for the rounding-noise estimate.
        numeric_dtype, is_train, aux_initial: as for ``central_differences``.
        probe: when the first ``probe`` candidates hold no kink, stop looking (a wrong formula, not kinks).

    Returns:
        ``Kink`` facts, in the order of ``indices``. Cost: 4 partial forward passes per element examined.
    """
    ev = _Evaluator(exe, objective, is_train, aux_initial)
    ev.base()
    arr = exe.arg_dict[name]
    host = np.asarray(to_numpy(arr))
    cast = np.dtype(arr.dtype).type
    eps = float(np.finfo(np.dtype(numeric_dtype)).eps)
    steps = np.broadcast_to(np.asarray(steps, np.float64), host.shape)
    tol = np.broadcast_to(np.asarray(tol, np.float64), host.shape)
    f0 = ev.at(name)
    found = []
    for n_seen, idx in enumerate(indices):
        if n_seen >= probe and not found:
            break
        idx = tuple(int(i) for i in idx)
        x, h = float(host[idx]), float(steps[idx])
        sides = []
        for s in (h, 4.0 * h):
            x_plus, x_minus = cast(x + s), cast(x - s)
            f_plus = _perturbed(exe, name, x_plus, idx, ev)
            f_minus = _perturbed(exe, name, x_minus, idx, ev)
            sides.append(((f0 - f_minus) / (x - float(x_minus)), (f_plus - f0) / (float(x_plus) - x)))
        (left, right), (left4, right4) = sides
        jump, jump4 = right - left, right4 - left4
        noise = 2.0 * NOISE_FACTOR * eps * float(magnitude) / h
        if not (abs(jump) > max(KINK_NOISE * noise, 0.5 * tol[idx]) and abs(jump4) < KINK_GROWTH * abs(jump)):
            continue
        # a kink a little off x (the dtype under test may round the point to the other side) mixes both slopes
        # into the quotients: allow KINK_SLACK of the jump beyond them
        a = float(analytic[idx])
        slack = tol[idx] + KINK_SLACK * abs(jump)
        lo, hi = min(left, right), max(left, right)
        found.append(Kink(name, idx, x, float(left), float(right), a, bool(lo - slack <= a <= hi + slack)))
    ev._reset_aux()
    return found


# -- complex steps ----------------------------------------------------------------------------------------


class ComplexStepError(ValueError):
    """An op on the path cannot be complex-stepped (it refuses complex input or is not complex-analytic).

    Attributes: ``op`` (the operator's name) and ``node`` (the node's name).
    """

    def __init__(self, message, op=None, node=None):
        super().__init__(message)
        self.op, self.node = op, node


def _absmax(a) -> float:
    return float(np.nanmax(np.abs(a), initial=0.0))


def _complex_dtype(numeric_dtype):
    return np.dtype(np.complex128) if np.dtype(numeric_dtype).itemsize >= 8 else np.dtype(np.complex64)


def check_complex_support(sym, arrays: dict, aux: dict | None = None, *, names=None, ctx=None, is_train=True,
                          numeric_dtype=np.float64, who="check_numeric_gradient"):
    """Raise ``ComplexStepError`` naming the first op through which complex steps do not give derivatives.

    Tries a complex forward op by op, at a point near ``arrays`` (each float entry moved by ~1e-3
    relative, off any exact kink or tie) along a random direction ``d``: every op must accept complex
    input, keep the imaginary part, and give ``Im op(x + i t d) / t`` equal to the real central
    difference of the op along ``d`` (a non-analytic op such as ``abs`` or ``|x|^2``-based variance
    fails that). Only the float arguments in ``names`` (default: all) are made complex. Cost: 3 forward
    passes.
    """
    from symgrad.context import cpu

    ctx = cpu() if ctx is None else ctx
    rng = np.random.default_rng(20240601)
    cdt = _complex_dtype(numeric_dtype)
    hc, hr = COMPLEX_STEP, CBRT_EPS64
    points = {"complex": {}, "plus": {}, "minus": {}}
    for k, v in arrays.items():
        v = np.asarray(v)
        if v.dtype.kind != "f" or (names is not None and k not in names):
            for p in points.values():
                p[k] = v
            continue
        v64 = v.astype(np.float64)
        u = rng.standard_normal(v.shape)
        xt = np.where(v64 != 0, v64 * (1 + 1e-3 * u), 1e-3 * u)
        d = rng.standard_normal(v.shape) * np.maximum(np.abs(xt), 1.0)
        points["complex"][k] = (xt + 1j * hc * d).astype(cdt)
        points["plus"][k] = xt + hr * d
        points["minus"][k] = xt - hr * d
    aux = {k: np.asarray(v, np.float64) for k, v in (aux or {}).items()}
    exe = sym.bind(ctx, {k: to_device(v, ctx) for k, v in points["complex"].items()}, grad_req="null",
                   aux_states={k: to_device(v.astype(cdt), ctx) for k, v in aux.items()})
    plan = exe.plan
    arg_names, aux_names = list(exe.arg_dict), list(exe.aux_dict)
    tables = {}
    for key, point in points.items():
        vals = [None] * plan.n_slots
        for s, n in zip(plan.arg_slots, arg_names):
            if s is not None:
                vals[s] = to_device(point[n], ctx)
        for s, n in zip(plan.aux_slots, aux_names):
            if s is not None:
                vals[s] = to_device(aux[n].astype(cdt) if key == "complex" else aux[n], ctx)
        tables[key] = vals
    for ins in plan.forward_instrs:
        node = ins.node
        op = node.op.name
        where = f"op {op} (node {node.name!r})"
        for key, vals in tables.items():
            args = [vals[s] for s in ins.ins]
            try:
                with np.errstate(all="ignore"):
                    res = ins.fn(*args, is_train=is_train) if ins.train else ins.fn(*args)
            except Exception as exc:
                if key != "complex":
                    raise
                raise ComplexStepError(
                    f"{who}: method='complex_step' needs every op to accept complex input, but {where} refuses it: "
                    f"{type(exc).__name__}: {exc}. Use method='central' or 'richardson'.", op, node.name) from exc
            for s, r in zip(ins.outs, res if ins.tuple_out else (res,)):
                vals[s] = r
        in_complex = any(np.iscomplexobj(tables["complex"][s]) for s in ins.ins)
        for s in ins.outs:
            c, p, m = (np.asarray(to_numpy(tables[key][s])) for key in ("complex", "plus", "minus"))
            if p.dtype.kind not in "fc":
                continue  # integer outputs (argmax, indices) carry no derivative
            with np.errstate(all="ignore"):
                real_dd = (p.astype(np.float64) - m.astype(np.float64)) / (2 * hr)
                if not np.iscomplexobj(c):
                    if in_complex and _absmax(real_dd) > 0:
                        raise ComplexStepError(
                            f"{who}: method='complex_step' needs complex-analytic ops, but {where} returns real values "
                            f"for complex input (it drops the imaginary part, as abs or a comparison does). Use "
                            "method='central' or 'richardson'.", op, node.name)
                    continue
                cs_dd = np.imag(c).astype(np.float64) / hc
                err = np.abs(cs_dd - real_dd)
                scale = max(_absmax(real_dd), _absmax(cs_dd))
                tol = 1e-5 * (np.abs(real_dd) + np.abs(cs_dd)) + 1e-6 * scale + 1e-8 * _absmax(p) + 1e-300
            bad = err > tol
            if bad.any():
                i = int(np.argmax(np.where(bad, err, -1.0)))
                raise ComplexStepError(
                    f"{who}: method='complex_step' needs complex-analytic ops, but {where} is not: along a test "
                    f"direction its complex-step derivative is {cs_dd.flat[i]:.6g} where the real central difference "
                    f"gives {real_dd.flat[i]:.6g} (output element {i}). Use method='central' or 'richardson'.",
                    op, node.name)
