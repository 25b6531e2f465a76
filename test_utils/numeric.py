"""MXNet's ``numeric_grad`` and the kink and complex-step helpers.

The numeric machinery itself is in ``differencer`` (one perturb-evaluate-restore loop, the derivative
rules and the one kink test), evaluated through ``harness.Harness`` (re-running only the instructions
downstream of the perturbed argument); the tolerance model is in ``tolerance``, the objectives in
``objectives``. This module holds what
the MXNet-style checkers add on top:

- ``numeric_grad``: MXNet's function (objective: the sum of every output);
- ``element_kinks``: which mismatching elements sit at a non-differentiable point (relu/abs at 0, max ties),
  by the one kink test, and whether the analytic value is a subgradient there;
- ``check_complex_support``: names the op through which complex steps do not give derivatives;
- the step rules of explicit ``numeric_eps``/``eps`` values (``resolve_numeric_eps``, ``check_step``;
  ``refuse_small_eps``: the one rule of ``numeric_grad`` and ``check_numeric_gradient``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import numpy as np

from ._inputs import (
    NamedArrays,
    check_choice,
    check_dtype,
    check_executor,
    check_finite,
    check_flag,
    check_kind,
    check_number,
    named_arrays,
)
from .context import to_device, to_numpy
from .differencer import (
    COMPLEX_STEP,
    METHODS,
    ElementProbe,
    default_steps,
    gradient,
    kink_test,
    min_step,
)
from .frames import hide_from_pytest as _hide_from_pytest
from .harness import Harness, as_array_like, assert_deterministic, refuse_random_ops, trace_values
from .report import Kink, format_index
from .tolerance import min_numeric_eps, numeric_noise

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from symgrad.symbol import BoundExecutor

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

__all__ = [
    "numeric_grad",
    "KinkRedraws",
    "relative_step",
    "element_kinks",
    "kink_side",
    "move_off_kink",
    "kink_warning",
    "MAX_REDRAWS",
    "KINK_NUDGE",
    "check_complex_support",
    "ComplexStepError",
    "default_steps",
    "resolve_numeric_eps",
    "refuse_small_eps",
    "min_step",
    "check_step",
    "assert_deterministic",
    "rounding_noise",
    "METHODS",
    "COMPLEX_STEP",
]

CBRT_EPS64 = float(np.cbrt(np.finfo(np.float64).eps))

#: the rounding noise of a difference quotient (the tolerance model's numeric term)
rounding_noise = numeric_noise

#: share of the jump an analytic value may lie beyond the one-sided quotients and still count as a subgradient
KINK_SLACK = 0.1
#: mismatching elements examined for kinks before giving up when none of them is one
KINK_PROBE = 64

#: ``ndarray.sum()`` without its Python wrapper (``numpy._core._methods._sum`` calls exactly this)
_add_reduce = np.add.reduce


# -- explicit steps ----------------------------------------------------------------------------------------


def resolve_numeric_eps(numeric_eps, dtype, numeric_dtype, who):
    """The fixed finite-difference width for ``dtype`` under test, or None for per-element steps.

    ``numeric_eps`` may be None, a number or a ``{dtype: eps}`` dict (MXNet). A width below
    ``tolerance.min_numeric_eps`` raises ``ValueError``.
    """
    if numeric_eps is None:
        return None
    if isinstance(numeric_eps, dict):
        for k, v in numeric_eps.items():
            try:
                np.dtype(k)
            except (TypeError, ValueError):
                raise TypeError(
                    f"{who}: numeric_eps dict keys must be dtypes (e.g. np.float32), got key {k!r}"
                ) from None
            if v is not None:
                check_number(v, who, f"numeric_eps[{k!r}]", positive=True)
        table = {np.dtype(k): v for k, v in numeric_eps.items()}
        numeric_eps = table.get(np.dtype(dtype))
        if numeric_eps is None:
            return None
    if isinstance(numeric_eps, (bool, np.bool_, str, bytes)):
        eps = None
    else:
        try:
            eps = float(numeric_eps)
        except (TypeError, ValueError):
            eps = None
    if eps is None:
        raise TypeError(f"{who}: numeric_eps must be a number, a {{dtype: eps}} dict or None, got {numeric_eps!r}")
    if not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"{who}: numeric_eps must be a positive number, got {numeric_eps!r}")
    refuse_small_eps(eps, dtype, numeric_dtype, who, "numeric_eps")
    return eps


def refuse_small_eps(eps, dtype, numeric_dtype, who, name, argument=None) -> None:
    """The one step rule of ``numeric_grad`` and ``check_numeric_gradient``: a full-width step ``eps``
    (``x +- eps/2``) below ``tolerance.min_numeric_eps(dtype, numeric_dtype)`` -- ``dtype`` under test, the
    differences taken in ``numeric_dtype`` -- raises ValueError; both say it in the same words (naming ``who``,
    the parameter ``name``, the step, the minimum and where the differences are taken).

    The minimum is set by the dtype the differences are taken in, because below it the difference quotient is
    rounding noise: ``numeric_grad`` takes them in its executor's dtype, ``check_numeric_gradient`` in
    ``numeric_dtype`` (float64 by default). So eps=1e-5 is refused for a float32 executor (noise ~1% of |f|)
    and accepted for float64 differences, in either function.
    """
    floor = min_numeric_eps(dtype, numeric_dtype)
    if eps >= floor:
        return
    at = "" if argument is None else f"argument {argument!r}: "
    raise ValueError(
        f"{who}: {at}{step_too_small(eps, dtype, numeric_dtype, floor, True, name)}. {_eps_rule(dtype)} Use a "
        f"larger {name}, or {name}=None for a step chosen per element."
    )


def _eps_rule(dtype) -> str:
    """The sentence of ``refuse_small_eps`` that states the rule, with its minima for ``dtype`` under test."""
    dt = np.dtype(dtype)
    text = (
        "numeric_grad and check_numeric_gradient share this rule: the minimum is set by the dtype the "
        f"differences are taken in (for {dt.name} under test: {min_numeric_eps(dt, dt):.3g} in {dt.name}, as "
        f"numeric_grad on a {dt.name} executor or check_numeric_gradient(numeric_dtype=np.{dt.name}) takes them"
    )
    if dt != np.float64:
        text += f"; {min_numeric_eps(dt, np.float64):.3g} in float64, as check_numeric_gradient does by default"
    return text + ")."


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
        text += (
            f": the finite differences are taken in {numeric_dtype.name}, where the numbers near 1 are "
            f"{ulp:.3g} apart, so the step x +- {half:.3g} is stored with an error of up to "
            f"{100 * min(ulp / (2 * half), 1.0):.3g}% and the rounding error of the difference quotient, about "
            f"eps_{numeric_dtype.name} * |f| / {width} = {noise:.2g} * |f|, swamps the derivative "
            f"(minimum {floor:.3g})"
        )
    else:
        text += (
            f" (minimum {floor:.3g}, MXNet's floor for float16/float32: MXNet takes its differences in "
            f"the dtype under test, where a smaller step is swamped by rounding; here they are taken in "
            f"{numeric_dtype.name})"
        )
    return text


def check_step(eps, numeric_dtype, dtype, who, hint=""):
    """Refuse an explicit half-width ``eps`` below ``differencer.min_step(numeric_dtype)`` (ValueError)."""
    floor = min_step(numeric_dtype)
    if eps is not None and eps < floor:
        raise ValueError(f"{who}: {step_too_small(eps, dtype, numeric_dtype, floor, full_width=False)}.{hint}")


# -- MXNet's numeric_grad --------------------------------------------------------------------------------


def _sum_objective(outputs):
    return float(sum(np.sum(np.asarray(o, np.float64)) for o in outputs))


def _fixed_steps(executor, names, eps, who):
    """``x +- eps/2`` for every element (MXNet's full width), refused below ``min_numeric_eps``."""
    eps = check_number(eps, who, "eps", positive=True, allow_none=True)
    args = executor.arg_dict
    for k in names:  # the differences are taken in the executor's dtype
        dt = np.dtype(args[k].dtype)
        if dt.kind == "f":
            refuse_small_eps(eps, dt, dt, who, "eps", argument=k)
    return {k: np.full(np.shape(args[k]), eps / 2.0) for k in names}


def _numeric_grad_inputs(executor, location, aux_states, dtype, who):
    """Validated host arrays of ``location`` (written into the executor) and of ``aux_states`` (or None)."""
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
    aux = None
    if aux_states is not None:
        aux_names = list(executor.aux_dict)
        if isinstance(aux_states, dict):
            unknown = [k for k in aux_states if k not in aux_names]
            if unknown:
                raise ValueError(
                    f"{who}: aux_states names {unknown}, which are not auxiliary states; "
                    f"auxiliary states are {aux_names}"
                )
            aux_names = list(aux_states)
        aux = named_arrays(aux_states, aux_names, who, "auxiliary state", "aux_states")
        for k, v in aux.items():
            check_kind(v, who, "auxiliary state", k, allow_complex=False)
        check_finite(aux, who, "auxiliary state")
    return loc, aux


def _write_location(executor, loc, dtype):
    args = executor.arg_dict
    for k, v in loc.items():
        args[k][...] = as_array_like(args[k], v.astype(dtype) if v.dtype.kind == "f" else v)


def numeric_grad(
    executor: BoundExecutor,
    location: NamedArrays,
    aux_states: NamedArrays | None = None,
    eps: float | None = 1e-4,
    use_forward_train: bool = True,
    dtype: DTypeLike = np.float32,
    *,
    method: Literal["central", "richardson"] = "central",
    progress: bool = True,
) -> dict[str, np.ndarray]:
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
    a tqdm bar after ``differencer.PROGRESS_DELAY`` seconds.

    Differences from MXNet: the objective is the sum of *every* output (MXNet sums ``outputs[0]`` only;
    the two agree for single-output executors); a dict ``location`` may name only some arguments; the
    caller's ``location`` arrays are never modified.

    Method:
        Central differences of ``sum(every output)``, one element at a time, evaluated by ``executor`` itself
        in its own dtype (the quotient divides by the distance between the two values actually stored and is
        accumulated in float64); only the instructions downstream of the perturbed argument run again.
        ``richardson``: two central differences at ``h`` and ``h/2``, extrapolated (error O(h^4)).

    Cost:
        2 partial forward passes per element of every argument in ``location`` (4 with ``richardson``), plus
        2 forwards proving the forward deterministic.

    Tolerance:
        None: the gradient is returned, not judged. Its rounding error is about ``eps_dtype * |f| / eps``
        (``eps_dtype`` the machine epsilon of the executor's dtype), which is why ``eps`` below
        ``tolerance.min_numeric_eps(dtype, dtype)`` (8.63e-5 for a float32 executor) is refused, by the same
        rule as ``check_numeric_gradient``'s ``numeric_eps``.

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
    check_executor(executor, who)
    refuse_random_ops(executor, who)
    dtype = check_dtype(dtype, who)
    if check_choice(method, METHODS, who, "method") == "complex_step":
        raise ValueError(
            f"{who}: method='complex_step' needs a complex copy of the symbol; use "
            "check_numeric_gradient(sym, location, method='complex_step')"
        )
    check_number(eps, who, "eps", positive=True, allow_none=True)
    use_forward_train = check_flag(use_forward_train, who, "use_forward_train")
    progress = check_flag(progress, who, "progress")
    loc, aux = _numeric_grad_inputs(executor, location, aux_states, dtype, who)
    # every check passed before the executor's arrays are written
    fixed = None if eps is None else _fixed_steps(executor, list(loc), eps, who)
    _write_location(executor, loc, dtype)
    args = executor.arg_dict
    if eps is None:
        steps = {k: default_steps(to_numpy(args[k]), args[k].dtype, method) for k in loc}
    else:
        assert fixed is not None  # eps is not None
        steps = fixed
    harness = Harness(executor, is_train=use_forward_train, aux_initial=aux or {})
    harness.assert_deterministic(who)
    grads, _ = gradient(harness, list(loc), _sum_objective, steps, method=method, progress=progress)
    return {k: g.astype(dtype) for k, g in grads.items()}


# -- kinks ----------------------------------------------------------------------------------------------


def element_kinks(
    harness, name, objective: Callable, indices, steps, analytic, tol, *, f_noise, probe=KINK_PROBE
) -> list[Kink]:
    """The elements of ``indices`` that sit at a non-differentiable point of ``objective``.

    The one kink test (``differencer.kink_test``) per element: one-sided quotients at ``h/4``, ``h`` and ``4h``
    (``h = steps[index]``). The element is a kink when the jump ``R - L`` at ``h`` exceeds its rounding noise
    (x ``KINK_NOISE``) and half the tolerance, and does not grow like ``h``. Its ``Kink.subgradient`` says
    whether ``analytic[index]`` lies between ``L`` and ``R`` (up to ``tol[index]`` + ``KINK_SLACK`` x the
    jump): a correct rule picks one side or a value between them.

    Args:
        harness: the numeric reference (float64), bound at the point checked.
        name: the argument; ``objective(outputs) -> float`` the scalar differentiated.
        indices: candidate elements (usually the mismatching ones).
        steps: half-step array ``h`` of the argument.
        analytic: the analytic gradient of the argument (float64 array).
        tol: allowed error per element (array).
        f_noise: the rounding noise of one evaluation of the objective.
        probe: when the first ``probe`` candidates hold no kink, stop looking (a wrong formula, not kinks).

    Returns:
        ``Kink`` facts, in the order of ``indices``. Cost: 6 partial forward passes per element examined.
    """
    f0 = objective(harness.base())
    arr = harness.array(name)
    steps = np.broadcast_to(np.asarray(steps, np.float64), arr.shape)
    tol = np.broadcast_to(np.asarray(tol, np.float64), arr.shape)
    evaluate = lambda: objective(harness.outputs([name]))
    found: list[Kink] = []
    for n_seen, idx in enumerate(indices):
        if n_seen >= probe and not found:
            break
        idx = tuple(int(i) for i in idx)
        h = float(steps[idx])
        p = ElementProbe(arr, idx)
        test = kink_test(p, h, evaluate, f0, 2.0 * f_noise / h, 0.5 * tol[idx])
        if not bool(test.kink):
            continue
        # a kink a little off x (the dtype under test may round the point to the other side) mixes both slopes
        # into the quotients: allow KINK_SLACK of the jump beyond them
        left, right, a = float(test.left), float(test.right), float(analytic[idx])
        slack = tol[idx] + KINK_SLACK * abs(float(test.jump))
        lo, hi = min(left, right), max(left, right)
        # where the function jumps there is no derivative to check: any analytic value is as good as another
        valid = bool(test.discontinuous) or bool(lo - slack <= a <= hi + slack)
        found.append(Kink(name, idx, p.x, left, right, a, valid))
    harness.reset_aux()
    return found


def kink_side(kink) -> float:
    """The side to move an element off its kink: the side whose one-sided derivative the analytic value matches.

    Every element sharing one kink (the inputs and weights of one ReLU, ``z = sum_j w_j x_j = 0``) has its analytic
    gradient computed with the *same* decision there (relu'(0) = 0: the ReLU off), so moving each element to the
    side its analytic value belongs to moves all of them into the region where that decision holds: they push the
    shared ``z`` the same way and never cancel, and the analytic value stays right where the check then runs.
    (Neither the sign of ``right - left`` -- the sign of the factor downstream of the kink -- nor the steeper
    side -- other units add the same slope to both sides -- tells which way an element moves ``z``.) An analytic
    value as far from both sides (``abs`` at 0 with slope 0): a random side.
    """
    to_right, to_left = abs(kink.analytic - kink.right), abs(kink.analytic - kink.left)
    if to_right != to_left:
        return 1.0 if to_right < to_left else -1.0
    return 1.0 if np.random.rand() < 0.5 else -1.0


#: re-draw rounds of kink elements before the kinks still left are excluded
MAX_REDRAWS = 3
#: the j-th re-drawn element moves by KINK_NUDGE + 3 j of its step (or float ulps)
KINK_NUDGE = 8.0


def move_off_kink(values, kink, j, step) -> None:
    """Move element ``kink.index`` of ``values`` (in place, in its dtype) ``KINK_NUDGE + 3 j`` times ``step`` (at
    least one ulp) to ``kink_side(kink)``. Distinct distances keep tied elements moved together >= 3 steps apart,
    so no later difference straddles their kink again."""
    dt = values.dtype
    x = float(values[kink.index])
    h = max(float(step), float(np.spacing(dt.type(abs(x)))))
    values[kink.index] = dt.type(x + (KINK_NUDGE + 3.0 * j) * h * kink_side(kink))


def kink_warning(
    who, kinks, redrawn, excluded, *, redrawn_note="", excluded_as="the comparison", excluded_note=""
) -> str:
    """The text of the ``NondifferentiablePointWarning`` of a check that re-drew or excluded kink elements."""
    per_arg: dict[str, int] = {}
    for k in kinks:
        per_arg[k.arg] = per_arg.get(k.arg, 0) + 1
    where = ", ".join(f"{a!r}: {c}" for a, c in per_arg.items())
    more = f" and {len(kinks) - 1} more ({where})" if len(kinks) > 1 else ""
    done = []
    if redrawn:
        m = sum(len(v) for v in redrawn.values())
        done.append(
            f"re-drew {m} element{'s' if m != 1 else ''} {KINK_NUDGE:g} or more finite-difference steps away "
            f"from the kink and checked the gradient there{redrawn_note}"
        )
    if excluded:
        m = sum(len(v) for v in excluded.values())
        spots = "; ".join(
            f"{a}[{', '.join(format_index(i) for i in v[:4])}{', ...' if len(v) > 4 else ''}]"
            for a, v in excluded.items()
        )
        done.append(f"left {m} element{'s' if m != 1 else ''} out of {excluded_as} ({spots}{excluded_note})")
    return (
        f"{who}: {kinks[0]}{more}: not a gradient error -- the one-sided derivatives differ there and the "
        f"analytic value lies between them, so finite differences cannot check it; {' and '.join(done)}"
    )


class KinkRedraws:
    """The one kink re-draw of every checker: moves elements at kinks off them (``move_off_kink``: ``KINK_NUDGE +
    3 j`` steps to the side their analytic value belongs to, so elements sharing one kink -- the inputs of one ReLU
    -- all push it the same way), or, after ``MAX_REDRAWS`` rounds, records them as excluded; ``warn`` says what
    was done, naming the elements (``NondifferentiablePointWarning``).

    ``values``: ``{argument: array}``, moved in place; ``step(arg, index)``: that element's finite-difference
    step (``relative_step``: ``eps^(1/3) max(|x|, 1)`` of a reference dtype; MXNet's checker: the steps it took).
    """

    def __init__(self, who: str, values: dict, step: Callable[[str, tuple], float]):
        self.who, self.values, self.step = who, values, step
        self.rounds = 0
        self.first: list = []
        self.redrawn: dict[str, list] = {}
        self.excluded: dict[str, list] = {}

    def handle(self, kinks, excursion=None):
        """Move ``kinks`` off (or exclude them after MAX_REDRAWS rounds). ``excursion(arg, index)``: how far the
        check itself moves that element (a directional check: ``eps |r_i|``); the move is measured in the larger
        of it and the element's finite-difference step, so no later difference straddles the kink again."""
        self.first = self.first or list(kinks)
        self.rounds += 1
        kinks = self.new(kinks)
        if self.rounds > MAX_REDRAWS:
            for k in kinks:
                self.excluded.setdefault(k.arg, []).append(k.index)
            return
        for j, k in enumerate(kinks):
            values = self.values[k.arg]
            step = self.step(k.arg, k.index)
            if excursion is not None:
                step = max(step, float(excursion(k.arg, k.index)))
            move_off_kink(values, k, j, step)
            self.redrawn.setdefault(k.arg, []).append(k.index)

    def exclude(self, kinks) -> None:
        """Leave ``kinks`` out of the check without moving them (MXNet's ``kinks='exclude'``)."""
        for k in self.new(kinks):
            self.excluded.setdefault(k.arg, []).append(k.index)

    def new(self, kinks) -> list:
        """The kinks not left out already (an element left out cannot explain a mismatch any more)."""
        return [k for k in kinks if k.index not in self.excluded.get(k.arg, ())]

    @property
    def exhausted(self) -> bool:
        """No more rounds: every kink has had its re-draws and its exclusion."""
        return self.rounds > 2 * MAX_REDRAWS + 2

    def exclude_redrawn(self):
        """Leave every element moved so far out of the check (the check's own excursion still meets a kink)."""
        for arg, indices in self.redrawn.items():
            self.excluded.setdefault(arg, []).extend(i for i in indices if i not in self.excluded.get(arg, []))
        self.redrawn = {}

    def warn(self, stacklevel=4):
        if not (self.redrawn or self.excluded):
            return
        import warnings

        from .report import NondifferentiablePointWarning

        text = kink_warning(self.who, self.first, self.redrawn, self.excluded, excluded_as="the check")
        warnings.warn(NondifferentiablePointWarning(text), stacklevel=stacklevel)


def relative_step(ref_dtype, values: dict) -> Callable[[str, tuple], float]:
    """``step(arg, index) = eps^(1/3) max(|x|, 1)`` of ``values[arg][index]``: the central-difference step of that
    element in ``ref_dtype`` (``KinkRedraws`` of the Chainer- and PyTorch-style checkers)."""
    h = float(np.cbrt(np.finfo(np.dtype(ref_dtype)).eps))
    return lambda arg, index: h * max(abs(float(values[arg][index])), 1.0)


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


def complex_dtype(numeric_dtype):
    return np.dtype(np.complex128) if np.dtype(numeric_dtype).itemsize >= 8 else np.dtype(np.complex64)


def _test_points(arrays, names, numeric_dtype):
    """A complex point ``x + i t d`` and the real points ``x +- s d`` near ``arrays`` (each float entry moved by
    ~1e-3 relative, off any exact kink or tie), along a random direction ``d``."""
    rng = np.random.default_rng(20240601)
    cdt = complex_dtype(numeric_dtype)
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
        points["complex"][k] = (xt + 1j * COMPLEX_STEP * d).astype(cdt)
        points["plus"][k] = xt + CBRT_EPS64 * d
        points["minus"][k] = xt - CBRT_EPS64 * d
    return points


def _complex_trace(sym, point, aux, ctx, is_train, who):
    cdt = complex_dtype(np.float64)
    exe = sym.bind(
        ctx,
        {k: to_device(v, ctx) for k, v in point.items()},
        grad_req="null",
        aux_states={k: to_device(v.astype(cdt), ctx) for k, v in aux.items()},
    )
    try:
        with np.errstate(all="ignore"):
            return trace_values(exe, is_train)
    except Exception as exc:
        node = getattr(exc, "symgrad_node", None)
        if node is None:
            raise
        raise ComplexStepError(
            f"{who}: method='complex_step' needs every op to accept complex input, but op {node.op.name} (node "
            f"{node.name!r}) refuses it: {type(exc).__name__}: {exc}. Use method='central' or 'richardson'.",
            node.op.name,
            node.name,
        ) from exc


def _compare_complex(node, c, p, m, in_complex, who):
    """Raise ``ComplexStepError`` when the complex-step derivative ``Im c / t`` of one value differs from the
    real central difference ``(p - m) / 2s``."""
    where = f"op {node.op.name} (node {node.name!r})"
    if p.dtype.kind not in "fc":
        return  # integer outputs (argmax, indices) carry no derivative
    with np.errstate(all="ignore"):
        real_dd = (p.astype(np.float64) - m.astype(np.float64)) / (2 * CBRT_EPS64)
        if not np.iscomplexobj(c):
            if in_complex and _absmax(real_dd) > 0:
                raise ComplexStepError(
                    f"{who}: method='complex_step' needs complex-analytic ops, but {where} returns real values "
                    f"for complex input (it drops the imaginary part, as abs or a comparison does). Use "
                    "method='central' or 'richardson'.",
                    node.op.name,
                    node.name,
                )
            return
        cs_dd = np.imag(c).astype(np.float64) / COMPLEX_STEP
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
            node.op.name,
            node.name,
        )


def check_complex_support(
    sym,
    arrays: dict,
    aux: dict | None = None,
    *,
    names=None,
    ctx=None,
    is_train=True,
    numeric_dtype=np.float64,
    who="check_numeric_gradient",
):
    """Raise ``ComplexStepError`` naming the first op through which complex steps do not give derivatives.

    Runs a complex forward and two real ones at a point near ``arrays`` (each float entry moved by ~1e-3
    relative, off any exact kink or tie) along a random direction ``d`` and compares them value by value
    (``Executor.set_value_hook`` traces every op's outputs): every op must accept complex input, keep the
    imaginary part, and give ``Im op(x + i t d) / t`` equal to the real central difference of the op
    along ``d`` (a non-analytic op such as ``abs`` or ``|x|^2``-based variance fails that). Only the float
    arguments in ``names`` (default: all) are made complex. Cost: 3 forward passes.
    """
    from symgrad.context import cpu

    ctx = cpu() if ctx is None else ctx
    points = _test_points(arrays, names, numeric_dtype)
    aux = {k: np.asarray(v, np.float64) for k, v in (aux or {}).items()}
    complex_trace = _complex_trace(sym, points["complex"], aux, ctx, is_train, who)
    real = {}
    for key in ("plus", "minus"):
        exe = sym.bind(
            ctx,
            {k: to_device(v, ctx) for k, v in points[key].items()},
            grad_req="null",
            aux_states={k: to_device(v, ctx) for k, v in aux.items()},
        )
        with np.errstate(all="ignore"):
            real[key] = trace_values(exe, is_train)
    complex_ids = set()
    for (node, _k, c), (_, _, p), (_, _, m) in zip(complex_trace, real["plus"], real["minus"]):
        in_complex = any(
            src.id in complex_ids
            or (src.op is None and (src.name in aux or np.iscomplexobj(points["complex"].get(src.name))))
            for src, _ in node.inputs
        )
        if np.iscomplexobj(c):
            complex_ids.add(node.id)
        _compare_complex(node, c, p, m, in_complex, who)
