"""MXNet 1.9's symbol checkers: ``check_symbolic_forward``, ``check_symbolic_backward``,
``check_numeric_gradient``, ``check_speed`` and ``simple_forward``.

Same names, signatures and semantics as ``mxnet.test_utils``, on plain numpy arrays, with one error
class for every failure (``GradientCheckError``) and a float64 finite-difference reference. Differences
from MXNet are listed in each docstring. Random draws (dirty gradient buffers, projection weights) come
from numpy's global RNG as in MXNet; outside a seeded test the checker seeds it for the call and
restores it (``seed.check_seed``), so every report ends with the seed that reproduces it.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ._inputs import (
    GradReqLike,
    NamedArrays,
    check_choice,
    check_context,
    check_count,
    check_dtype,
    check_finite,
    check_flag,
    check_kind,
    check_shapes,
    check_stypes,
    check_symbol,
    check_tolerances,
    host_array,
    nonfinite_notes,
    normalize_grad_req,
    parse_aux,
    parse_location,
)
from .buffers import probe
from .compare import compare
from .context import default_context, synchronize, to_device, to_numpy
from .differencer import COMPLEX_STEP, METHODS, default_steps, gradient
from .frames import hide_from_pytest as _hide_from_pytest
from .harness import Harness, as_array_like, assert_deterministic, refuse_random_ops, rescaled_rounding
from .harness import analytic_noise as harness_analytic_noise
from .numeric import (
    MAX_REDRAWS,
    KinkRedraws,
    check_complex_support,
    element_kinks,
    kink_warning,
    resolve_numeric_eps,
)
from .objectives import complex_objective, projected_objective
from .report import GradientCheckError, NondifferentiablePointWarning
from .scaleout import Recipe, Spread, check_pool
from .seed import seeded_check
from .tolerance import Real, Tolerance, get_tols, scaled_atol, violations

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from numpy.typing import ArrayLike, DTypeLike

    from symgrad.context import Context
    from symgrad.symbol import Symbol

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

__all__ = [
    "check_symbolic_forward",
    "check_symbolic_backward",
    "check_numeric_gradient",
    "check_speed",
    "simple_forward",
    "NumericGradientResult",
    "KINK_MODES",
    "raise_first",
]


_NULL_HINT = "with grad_req 'null' the executor must never write the gradient buffer (compared exactly)"


# -- shared -------------------------------------------------------------------------------------------


def _cast(v, dtype):
    """Host array in the dtype under test (``"asnumpy"`` keeps the array's own dtype)."""
    return np.array(v, copy=True) if isinstance(dtype, str) else np.asarray(v).astype(dtype)


def _prepare(sym, location, aux_states, ctx, dtype, who):
    """Validated, cast host copies of the arguments and aux states (aux default: zeros)."""
    loc = parse_location(sym, location, who)
    aux = parse_aux(sym, aux_states, who)
    if not isinstance(dtype, str):  # cast to a real float dtype: complex values would lose their imaginary part
        for what, arrays in (("argument", loc), ("auxiliary state", aux or {})):
            for k, v in arrays.items():
                check_kind(v, who, what, k, allow_complex=False)
    _, out_shapes, aux_shapes = check_shapes(sym, {**loc, **(aux or {})}, who)
    if aux is None:
        aux = {n: np.zeros(s, np.float32) for n, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    loc = {k: _cast(v, dtype) for k, v in loc.items()}
    aux = {k: _cast(v, dtype) for k, v in aux.items()}
    return loc, aux, out_shapes


def _on(ctx, arrays, dtype=None):
    return {k: to_device(v, ctx, dtype) for k, v in arrays.items()}


def _expected_like(value, shape, who, what, name, allow_complex=False):
    """The expected array (host) that broadcasts to ``shape``, or a ValueError / TypeError naming it."""
    try:
        e = np.asarray(to_numpy(value))
    except Exception as exc:
        raise TypeError(f"{who}: expected {what} for {name!r} must be an array, got {type(value).__name__}") from exc
    check_kind(e, who, f"expected {what} for", name, allow_complex=allow_complex)
    try:
        if np.broadcast_shapes(e.shape, tuple(shape)) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ValueError(f"{who}: expected {what} for {name!r} has shape {e.shape}, expected {tuple(shape)}") from None
    return e


def raise_first(failures: list[Any]) -> None:
    """Raise the first ``GradientCheckError`` of ``failures`` (none: return), the others kept on its ``others``
    and named in a note."""
    if not failures:
        return
    first = failures[0]
    first.others = failures[1:]
    if len(failures) > 1:
        more = ", ".join(f"{f.arg_name!r} ({100 * (f.mismatch_fraction or 1):.3g}% mismatch)" for f in failures[1:])
        note = f"also failing: {more}"
        if hasattr(first, "add_note"):
            first.add_note(note)
        else:  # Python 3.10
            first.args = (f"{first.args[0]}\n{note}",)
    raise first


def _write(arr, host):
    """Copy host values into a bound (numpy or CuPy) array in place."""
    arr[...] = as_array_like(arr, np.asarray(host).astype(arr.dtype, copy=False))


def _broadcast_axes(arg_shape, out_shapes, out_names):
    """``[(label, size)]``: output axes an argument of ``arg_shape`` is broadcast over (numpy alignment)."""
    axes = []
    arg_shape = tuple(arg_shape)
    for oname, oshape in zip(out_names, out_shapes):
        oshape = tuple(oshape)
        if len(arg_shape) > len(oshape):
            continue
        try:
            if np.broadcast_shapes(arg_shape, oshape) != oshape:
                continue
        except ValueError:
            continue
        padded = (1,) * (len(oshape) - len(arg_shape)) + arg_shape
        axes += [
            (f"axis {a} of output {oname!r}", size)
            for a, (d, size) in enumerate(zip(padded, oshape))
            if d == 1 and size > 1
        ]
    return axes


def _backward_probes(sym, ctx, loc, aux, heads, name) -> dict:
    """What the backward gives for ``name`` under other head gradients, and the arrays it could have returned by
    mistake: ``diagnose``'s context keys ``slice_terms``, ``head_doubled`` and ``arrays``.

    ``slice_terms``: ``[(label, gradient, n_slices)]``, the gradient with the head gradient kept on one slice
    only (for every output and every axis of length > 1, zeroed outside index 0 of that axis and on every other
    output). A rule whose gradient equals that of the full head gradient ignores the other slices: ``g[0]``
    where ``g.sum(0)`` was due. ``head_doubled``: the gradient for twice the head gradients -- a backward
    linear in its head gradient doubles; one that ignores it does not change (and then equals every slice term
    too, which is not a wrong reduction). ``arrays``: ``[(label, array)]`` of the arguments and outputs of the
    gradient's shape (a backward returning one of them returned the wrong array). Nothing for loss heads (their
    gradient does not depend on a head gradient). Cost: one forward and one backward per (output, axis), and one.
    """
    from .probes import index_inputs, index_like

    maybe_index = index_inputs(sym)
    found: dict[str, Any] = {
        "arrays": [
            (f"the value of argument {k!r}", np.asarray(to_numpy(v), np.float64))
            for k, v in loc.items()
            if np.shape(v) == np.shape(loc[name])
        ],
        "values": np.asarray(to_numpy(loc[name]), np.float64),
        "indices": [
            (k, np.rint(np.asarray(to_numpy(v), np.float64)).astype(np.int64))
            for k, v in loc.items()
            if k != name and index_like(to_numpy(v)) and (k in maybe_index or np.asarray(v).dtype.kind in "iu")
        ],
    }
    if any(h is None for h in heads):
        return found
    heads = [np.asarray(to_numpy(h)) for h in heads]
    grad = to_device(np.zeros(loc[name].shape), ctx, loc[name].dtype)
    exe = sym.bind(ctx, _on(ctx, loc), args_grad={name: grad}, grad_req={name: "write"}, aux_states=_on(ctx, aux))
    outs = exe.forward(is_train=True)
    out_names = sym.list_outputs()
    found["arrays"] += [
        (f"the value of output {n!r}", np.asarray(to_numpy(o), np.float64))
        for n, o in zip(out_names, outs)
        if np.shape(o) == np.shape(loc[name])
    ]
    found["arrays"] += [
        (f"the head gradient of {n!r}", h.astype(np.float64))
        for n, h in zip(out_names, heads)
        if h.shape == np.shape(loc[name])
    ]
    terms = []
    for k, h in enumerate(heads):
        for axis in range(h.ndim):
            if h.shape[axis] < 2:
                continue
            masked = [np.zeros_like(x) for x in heads]
            sl: list[slice | int] = [slice(None)] * h.ndim
            sl[axis] = 0
            masked[k][tuple(sl)] = h[tuple(sl)]
            exe.backward([to_device(m, ctx) for m in masked])
            label = f"output {out_names[k]!r} slice [{', '.join('0' if a == axis else ':' for a in range(h.ndim))}]"
            terms.append((label, np.array(to_numpy(grad), np.float64), h.shape[axis]))
    exe.backward([to_device(2 * h, ctx) for h in heads])
    found.update(slice_terms=terms, head_doubled=np.array(to_numpy(grad), np.float64))
    at_output = [(n, o) for n, o in zip(out_names, outs) if np.shape(o) == np.shape(loc[name])]
    if at_output and np.size(loc[name]) <= AT_OUTPUT_MAX:
        n, out = at_output[0]
        moved = dict(loc, **{name: np.asarray(to_numpy(out)).astype(np.asarray(loc[name]).dtype)})
        found["at_output"] = (n, numeric_at(sym, moved, aux, heads, name, ctx))
    return found


#: ``_backward_probes`` re-differentiates at the output value for arguments up to this size (2 forwards each)
AT_OUTPUT_MAX = 4096


def numeric_at(sym, values, aux, heads, name, ctx) -> np.ndarray:
    """The float64 central-difference gradient of ``sum(heads * outputs)`` w.r.t. ``name`` at ``values``
    (``diagnose``'s ``at_output``: the derivative a backward evaluated at the output would give)."""
    weights = [np.asarray(to_numpy(h), np.float64) for h in heads]
    ref_sym, _, make_objective = projected_objective(sym, weights, "diagnosis")
    ref = Harness.bind(ref_sym, values, aux, ctx=ctx, dtype=np.float64, is_train=True)
    objective = make_objective([np.asarray(b, np.float64) for b in ref.base()])
    steps = {name: default_steps(np.asarray(values[name], np.float64), np.float64, "central")}
    numeric, _ = gradient(ref, [name], lambda outs: objective(outs)[0], steps, progress=False)
    return numeric[name]


def diagnosis_context(sym, ctx, loc, aux, heads, name, out_shapes, kinks=(), noise=None):
    """What ``diagnose`` may use beyond the two arrays, for argument ``name`` (computed on failure only).

    ``noise``: the estimated rounding noise of the gradient (an array) when the checker has it; otherwise it is
    estimated here for float16/float32 gradients (``harness.analytic_noise``), so a report can say that an
    error is accumulation noise rather than a wrong formula.
    """
    context = {"broadcast_axes": _broadcast_axes(loc[name].shape, out_shapes, sym.list_outputs()), "kinks": list(kinks)}
    dtype = np.asarray(loc[name]).dtype
    try:
        context.update(_backward_probes(sym, ctx, loc, aux, heads, name))
        if noise is None and dtype.kind == "f" and dtype.itemsize < 8:
            noise = harness_analytic_noise(sym, loc, aux, heads, [name], dtype)[1][name]
    except Exception as exc:  # the probes must never hide the real failure
        warnings.warn(f"diagnosis: the probes for {name!r} failed ({type(exc).__name__}: {exc})", stacklevel=3)
    if noise is not None:
        context["noise"] = (noise, dtype)
    return context


# -- forward --------------------------------------------------------------------------------------------


def check_symbolic_forward(
    sym: Symbol,
    location: NamedArrays,
    expected: ArrayLike | Sequence[ArrayLike | None] | Mapping[str, ArrayLike | None],
    rtol: Tolerance = None,
    atol: Tolerance = None,
    aux_states: NamedArrays | None = None,
    ctx: Context | None = None,
    equal_nan: bool = False,
    dtype: DTypeLike = np.float32,
) -> list[np.ndarray]:
    """Compare the outputs of ``forward(is_train=False)`` with expected arrays.

    Method:
        One bind (grad_req 'null') and one ``forward(is_train=False)`` in ``dtype``; each output is compared
        with its expected array (broadcast to the output's shape). ``expected`` is the reference: nothing
        else is computed.

    Cost:
        One bind and one forward pass.

    Tolerance:
        Per element ``|output - expected| <= atol + rtol * |expected|`` (``tolerance.violations``, no noise
        term). ``None`` takes the looser table entry of the two arrays' dtypes (a float32 output against a
        float64 expected array: float32's rtol 1e-4, atol 1e-3); a number is used as is; a ``{dtype: tol}``
        dict overrides the table for those dtypes. NaN never equals NaN unless ``equal_nan``; equal
        infinities are equal.

    Args:
        sym: the symbol.
        location: argument values, a list in ``sym.list_arguments()`` order or a dict with exactly the
            arguments as keys.
        expected: a list (zipped with the outputs; it may be shorter) or a dict by output name.
        rtol, atol: None (the looser default of the two dtypes), a number or a ``{dtype: tol}`` dict.
        aux_states: list or dict of auxiliary states (default: zeros).
        ctx: device (default ``default_context()``).
        equal_nan: NaN == NaN.
        dtype: float16/32/64 for every bound array, or ``"asnumpy"`` to keep each array's dtype.

    Returns:
        The outputs as numpy arrays.

    Raises:
        GradientCheckError: an output differs (tolerance ``atol + rtol * |expected|``).
        ValueError: bad location / aux_states / expected.

    >>> import numpy as np, symgrad as sg
    >>> a, b = sg.sym.Variable("a"), sg.sym.Variable("b")
    >>> out = check_symbolic_forward(sg.sym.dot(a, b), [np.eye(2), np.ones((2, 2))], [np.ones((2, 2))])
    """
    who = "check_symbolic_forward"
    check_symbol(sym, who)
    dtype = check_dtype(dtype, who, allow_asnumpy=True)
    ctx = check_context(default_context() if ctx is None else ctx, who)
    check_tolerances(rtol, atol, who)
    equal_nan = check_flag(equal_nan, who, "equal_nan")
    loc, aux, out_shapes = _prepare(sym, location, aux_states, ctx, dtype, who)
    names = sym.list_outputs()
    if isinstance(expected, dict):
        unknown = [k for k in expected if k not in names]
        if unknown:
            raise ValueError(f"{who}: expected names {unknown}, which are not outputs; outputs are {names}")
        pairs = [(i, expected[n]) for i, n in enumerate(names) if n in expected]
    elif isinstance(expected, (list, tuple)):
        if len(expected) > len(names):
            raise ValueError(f"{who}: {len(expected)} expected arrays for {len(names)} outputs {names}")
        pairs = list(enumerate(expected))
    else:
        pairs = [(0, expected)]
    cplx = isinstance(dtype, str)
    pairs = [(i, _expected_like(e, out_shapes[i], who, "output", names[i], cplx)) for i, e in pairs if e is not None]
    exe = sym.bind(ctx, _on(ctx, loc), grad_req="null", aux_states=_on(ctx, aux))
    outputs = [to_numpy(o) for o in exe.forward(is_train=False)]
    notes = nonfinite_notes(loc) + nonfinite_notes(aux, "auxiliary state")
    failures = []
    for i, e in pairs:
        r, a = get_tols(e, outputs[i], rtol, atol)
        try:
            compare(
                outputs[i],
                e,
                r,
                a,
                check=who,
                arg_name=names[i],
                names=("forward", "expected"),
                what=f"output {names[i]!r} does not match expected",
                equal_nan=equal_nan,
                broadcast="expected",
                extra_lines=notes,
            )
        except GradientCheckError as err:
            failures.append(err)
    raise_first(failures)
    return outputs


# -- backward -------------------------------------------------------------------------------------------


@seeded_check
def check_symbolic_backward(
    sym: Symbol,
    location: NamedArrays,
    out_grads: ArrayLike | Sequence[ArrayLike | None] | Mapping[str, ArrayLike | None] | None,
    expected: Sequence[ArrayLike | None] | Mapping[str, ArrayLike | None],
    rtol: Tolerance = None,
    atol: Tolerance = None,
    aux_states: NamedArrays | None = None,
    grad_req: GradReqLike = "write",
    ctx: Context | None = None,
    grad_stypes: Mapping[str, str | None] | None = None,
    equal_nan: bool = False,
    dtype: DTypeLike = np.float32,
    *,
    probes: bool | None = None,
) -> dict[str, np.ndarray]:
    """Compare the gradients of one forward(is_train=True) + backward with expected arrays.

    Gradient buffers exist only for the arguments in ``expected`` and start *dirty* (standard-normal
    values), so the check also proves ``grad_req``: ``write`` must overwrite the buffer with the expected
    gradient, ``add`` must add it (buffer - initial == expected), ``null`` must leave the buffer exactly as
    it was.

    Method:
        The dirty buffers are drawn from numpy's global RNG in sorted name order (a seed reproduces them);
        one bind, ``forward(is_train=True)`` and ``backward(out_grads)`` in ``dtype``; each buffer is compared
        with its expected array (``write``), buffer minus initial value with it (``add``), or with its
        initial value (``null``). ``expected`` is the reference. On a graph with ``Custom`` nodes the
        backward then runs twice under 'add' and twice under 'write' on random buffers (``buffers.probe``:
        an op that ignores ``req``, reads a stale buffer or accumulates across calls), and the special-point
        probes compare the gradient with float64 finite differences at derived points (``probes``).

    Cost:
        One bind, one forward and one backward pass. With ``Custom`` nodes (or ``probes=True``): 2 binds,
        4 forwards and 4 backwards for the buffer probe, and per special point one forward and backward,
        a float64 bind and 5 forwards.

    Tolerance:
        ``write``/``add``: per element ``|gradient - expected| <= atol + rtol * |expected|``, no noise term
        (the expected arrays count as exact); ``None`` takes the looser table entry of the two dtypes, a
        number is used as is, a ``{dtype: tol}`` dict overrides the table. ``null``: exact equality with
        the initial buffer (rtol = atol = 0, NaN equal to NaN). The special points are judged by
        ``check_numeric_gradient``'s model.

    Args:
        sym: the symbol.
        location: argument values, a list in ``sym.list_arguments()`` order or a dict whose keys are exactly
            the arguments.
        out_grads: head gradients: None (loss heads only), a list in output order, or a dict by output name.
        expected: expected gradients, a list in argument order (it may be shorter; None entries are skipped)
            or a dict by argument name.
        rtol, atol: None (the looser default of the two dtypes), a number or a ``{dtype: tol}`` dict.
        aux_states: list or dict of auxiliary states (default: zeros).
        grad_req: 'write' / 'add' / 'null', a list in argument order or a dict (which must name every
            argument of ``expected``).
        ctx: device (default ``default_context()``).
        grad_stypes: None or a dict of ``'default'`` storage types (sparse: NotImplementedError).
        equal_nan: NaN == NaN.
        dtype: float16/32/64 for every bound array, or ``"asnumpy"`` to keep each array's dtype.
        probes: (keyword-only) the special-point probes against finite differences (``test_utils.probes``):
            None (default) where the graph has Custom nodes, True everywhere, False never.

    Returns:
        ``{name: gradient buffer}`` (numpy) after backward, as MXNet (with ``add`` the buffer holds
        initial value + gradient).

    Raises:
        GradientCheckError: a gradient differs (tolerance ``atol + rtol * |expected|``); its diagnosis
            names a doubled, sign-flipped, missing or scaled gradient; NaN/Inf inputs or head gradients are
            named in a note.
        ValueError / TypeError: bad location / aux_states / out_grads / expected (keys, lengths, shapes,
            non-numeric or complex arrays), unknown grad_req.

    >>> import numpy as np, symgrad as sg
    >>> lhs, rhs = sg.sym.Variable("lhs"), sg.sym.Variable("rhs")
    >>> mat1, mat2 = np.array([[1., 2], [3, 4]]), np.array([[5., 6], [7, 8]])
    >>> ograd = np.ones((2, 2))
    >>> _ = check_symbolic_backward(lhs + rhs, [mat1, mat2], [ograd], [ograd, ograd])
    """
    check = _BackwardCheck.validate(
        sym, location, out_grads, expected, rtol, atol, aux_states, grad_req, ctx, grad_stypes, equal_nan, dtype
    )
    grads = check.backward()
    check.compare(grads)
    check.probe(grads, probes)
    return grads


def _expected_grads(expected, arg_names, loc, dtype, who):
    """``expected`` (a list in argument order or a dict by name) as ``{name: host array}``, None entries dropped,
    each validated against its argument's shape."""
    if isinstance(expected, dict):
        unknown = [k for k in expected if k not in arg_names]
        if unknown:
            raise ValueError(f"{who}: expected names {unknown}, which are not arguments; arguments are {arg_names}")
        exp = {k: expected[k] for k in arg_names if k in expected and expected[k] is not None}
    elif isinstance(expected, (list, tuple)):
        if len(expected) > len(arg_names):
            raise ValueError(f"{who}: {len(expected)} expected gradients for {len(arg_names)} arguments {arg_names}")
        exp = {k: v for k, v in zip(arg_names, expected) if v is not None}
    else:
        raise TypeError(f"{who}: expected must be a list or a dict of arrays, got {type(expected).__name__}")
    return {k: _expected_like(v, loc[k].shape, who, "gradient", k, isinstance(dtype, str)) for k, v in exp.items()}


def _backward_reqs(grad_req, exp, arg_names, who):
    """``{name: req}`` for every argument; a dict ``grad_req`` must name every argument of ``exp``."""
    if isinstance(grad_req, dict):
        missing = [k for k in exp if k not in grad_req]
        if missing:
            raise ValueError(
                f"{who}: grad_req has no entry for {missing}, which have expected gradients; grad_req is {grad_req}"
            )
    return normalize_grad_req(grad_req, arg_names, who)


class _BackwardCheck:
    """One ``check_symbolic_backward`` call: validate, bind (dirty buffers, forward + backward), compare with the
    expected arrays and report, then probe the buffers and the special points."""

    # -- phase 1: validate --------------------------------------------------------------------------------
    @classmethod
    def validate(
        cls, sym, location, out_grads, expected, rtol, atol, aux_states, grad_req, ctx, grad_stypes, equal_nan, dtype
    ):
        s = cls()
        s.who = who = "check_symbolic_backward"
        check_symbol(sym, who)
        s.sym = sym
        s.dtype = check_dtype(dtype, who, allow_asnumpy=True)
        s.ctx = check_context(default_context() if ctx is None else ctx, who)
        check_tolerances(rtol, atol, who)
        s.rtol, s.atol = rtol, atol
        s.equal_nan = check_flag(equal_nan, who, "equal_nan")
        check_stypes(grad_stypes, who, "grad_stypes")
        if isinstance(grad_req, str):  # a list / dict is checked against the argument names below
            check_choice(grad_req, ("write", "add", "null", "inplace"), who, "grad_req")
        s.arg_names = sym.list_arguments()
        s.loc, s.aux, s.out_shapes = _prepare(sym, location, aux_states, s.ctx, s.dtype, who)
        s.exp = _expected_grads(expected, s.arg_names, s.loc, s.dtype, who)
        s.heads = _head_list(out_grads, sym.list_outputs(), s.out_shapes, s.dtype, who)
        s.reqs = _backward_reqs(grad_req, s.exp, s.arg_names, who)
        return s

    # -- phase 2: bind ------------------------------------------------------------------------------------
    def backward(self):
        """One forward(is_train=True) + backward into dirty buffers; the buffers after it (host copies)."""
        # dirty buffers, drawn in sorted name order (as MXNet) so a seed reproduces them
        self.initial = {}
        for k in sorted(self.exp):
            self.initial[k] = _cast(
                np.random.normal(size=self.loc[k].shape),
                self.loc[k].dtype if isinstance(self.dtype, str) else self.dtype,
            )
        buffers = _on(self.ctx, self.initial)
        exe_reqs = {k: (self.reqs[k] if k in self.exp else "null") for k in self.arg_names}
        exe = self.sym.bind(
            self.ctx, _on(self.ctx, self.loc), args_grad=buffers, grad_req=exe_reqs, aux_states=_on(self.ctx, self.aux)
        )
        exe.forward(is_train=True)
        exe.backward([None if h is None else to_device(h, self.ctx) for h in self.heads])
        return {k: np.array(to_numpy(buffers[k]), copy=True) for k in self.arg_names if k in self.exp}

    # -- phase 3: compare and report -----------------------------------------------------------------------
    def compare(self, grads):
        """Every buffer against its expected gradient (or, grad_req 'null', its initial value); the first failure
        is raised, naming the others."""
        heads = dict(zip(self.sym.list_outputs(), self.heads))
        notes = (
            nonfinite_notes(self.loc)
            + nonfinite_notes(self.aux, "auxiliary state")
            + nonfinite_notes(heads, "head gradient (out_grads) of output")
        )
        failures = []
        for name, g in grads.items():
            try:
                self._compare_one(name, g, notes)
            except GradientCheckError as err:
                failures.append(err)
        raise_first(failures)

    def _compare_one(self, name, g, notes):
        req = self.reqs[name]
        facts = {"grad_req": req}

        def context(name=name, req=req):
            found = diagnosis_context(self.sym, self.ctx, self.loc, self.aux, self.heads, name, self.out_shapes)
            found["other_expected"] = [(n, e) for n, e in self.exp.items() if n != name]
            if req == "write":
                found["initial_buffer"] = self.initial[name]
            elif req == "add":
                found["added_to_buffer"] = self.initial[name]
            return found

        if req == "null":
            compare(
                g,
                self.initial[name],
                0.0,
                0.0,
                check=self.who,
                arg_name=name,
                names=("buffer", "initial"),
                what=f"gradient buffer of {name!r} changed although grad_req is 'null'",
                extra_lines=[_NULL_HINT],
                equal_nan=True,
                facts=facts,
                broadcast="expected",
            )
            return
        r, a = get_tols(self.exp[name], g, self.rtol, self.atol)
        if req == "add":  # what backward added: buffer - initial
            actual = g.astype(np.float64) - self.initial[name].astype(np.float64)
            label = "added"
            what = (
                f"gradient of {name!r} added to its buffer (buffer - initial) does not match expected (grad_req 'add')"
            )
        else:
            actual, label = g, "backward"
            what = f"gradient of {name!r} does not match expected (grad_req 'write')"
        compare(
            actual,
            self.exp[name],
            r,
            a,
            check=self.who,
            arg_name=name,
            names=(label, "expected"),
            what=what,
            equal_nan=self.equal_nan,
            facts=facts,
            broadcast="expected",
            context=context,
            extra_lines=notes,
        )

    # -- phase 4: probes ------------------------------------------------------------------------------------
    def probe(self, grads, probes):
        """Custom ops under grad_req 'add' and repeated backward calls (``buffers.probe``), then the special-point
        probes (``probes.run``), against the gradients this check accepted."""
        live = {
            k: (
                g.astype(np.float64) - self.initial[k].astype(np.float64)
                if self.reqs[k] == "add"
                else g.astype(np.float64)
            )
            for k, g in grads.items()
            if self.reqs[k] != "null"
        }
        dt = next(iter(grads.values())).dtype if grads else np.dtype(np.float64)
        probe(self.sym, self.loc, self.aux, self.heads, live, dt, self.ctx, self.who)
        from . import probes as special

        if live and special.wanted(probes, self.sym) and all(h is not None for h in self.heads):
            # the expected arrays hold at the given location only: at the derived points the probes compare with
            # finite differences (tolerances of the dtype, as check_numeric_gradient's)
            r, a = get_tols(np.empty(0, dt), np.empty(0, dt), self.rtol, self.atol)
            special.run(self.sym, self.loc, self.aux, self.heads, list(live), dt, self.ctx, self.who, r, a)


def _head_list(out_grads, out_names, out_shapes, dtype, who):
    """Head gradients as a validated host list in output order (None entries for missing ones).

    ``out_grads`` is None, one array (one output), a list in output order or a dict by output name; every
    array must be numeric and have its output's shape exactly (named in the error otherwise).
    """
    n = len(out_names)
    if out_grads is None:
        return [None] * n
    if isinstance(out_grads, dict):
        unknown = [k for k in out_grads if k not in out_names]
        if unknown:
            raise ValueError(f"{who}: out_grads names {unknown}, which are not outputs; outputs are {out_names}")
        given = [out_grads.get(k) for k in out_names]
    elif isinstance(out_grads, (list, tuple)):
        if len(out_grads) < n:
            raise ValueError(
                f"{who}: out_grads has {len(out_grads)} arrays for {n} outputs {out_names}; give one "
                "per output in that order (None for a loss head), or a dict"
            )
        if len(out_grads) > n:  # MXNet's executor ignores them (its test_prelu passes one per input)
            warnings.warn(
                f"{who}: out_grads has {len(out_grads)} arrays for {n} outputs {out_names}; the "
                f"{len(out_grads) - n} extra ones are ignored, as MXNet does",
                UserWarning,
                stacklevel=5,  # past _head_list, validate, the check and seeded_check's wrapper
            )
        given = list(out_grads[:n])
    else:
        if n != 1:
            raise ValueError(f"{who}: one out_grads array for {n} outputs {out_names}; give a list or a dict")
        given = [out_grads]
    heads = []
    for name, shape, v in zip(out_names, out_shapes, given):
        if v is None:
            heads.append(None)
            continue
        try:
            h = np.asarray(to_numpy(v))
        except Exception as exc:
            raise TypeError(f"{who}: out_grads for output {name!r} must be an array, got {type(v).__name__}") from exc
        check_kind(h, who, "out_grads for output", name, allow_complex=isinstance(dtype, str))
        if tuple(h.shape) != tuple(shape):
            raise ValueError(
                f"{who}: out_grads for output {name!r} has shape {tuple(h.shape)}, expected {tuple(shape)}"
            )
        heads.append(_cast(h, dtype))
    return heads


# -- numeric gradient ---------------------------------------------------------------------------------------


def _grad_nodes(grad_nodes, arg_names, who):
    """MXNet's grad_nodes (None / list / dict of grad_req) as ``{name: req}`` of the checked arguments."""
    if grad_nodes is None:
        return {k: "write" for k in arg_names}
    if isinstance(grad_nodes, str):
        grad_nodes = [grad_nodes]
    if isinstance(grad_nodes, dict):
        unknown = [k for k in grad_nodes if k not in arg_names]
        if unknown:
            raise ValueError(f"{who}: grad_nodes names {unknown}, which are not arguments; arguments are {arg_names}")
        reqs = normalize_grad_req(dict(grad_nodes), arg_names, who)
        return {k: reqs[k] for k in arg_names if k in grad_nodes}
    if isinstance(grad_nodes, (list, tuple)):
        unknown = [k for k in grad_nodes if k not in arg_names]
        if unknown:
            raise ValueError(f"{who}: grad_nodes names {unknown}, which are not arguments; arguments are {arg_names}")
        return {k: "write" for k in arg_names if k in grad_nodes}
    raise TypeError(
        f"{who}: grad_nodes must be None, a list of names or a dict name -> grad_req, got {type(grad_nodes).__name__}"
    )


#: what ``check_numeric_gradient`` does with a mismatch at a non-differentiable point
KINK_MODES = ("redraw", "exclude", "error")


class NumericGradientResult(dict):
    """``{name: (analytic, numeric)}`` from ``check_numeric_gradient``, plus what happened at kinks.

    Attributes:
        kinks: ``report.Kink`` facts of the mismatching elements found at non-differentiable points of
            the given location (before any re-draw).
        redrawn: ``{name: [index, ...]}``: elements moved off a kink; the check ran at ``location``.
        excluded: ``{name: [index, ...]}``: elements left out of the comparison.
        retaken: ``{name: [index, ...]}``: elements whose difference failed at the first step and was retaken
            at shorter steps (``differencer.settle``); the comparison used the settled value.
        pinned: names whose comparison used the reference on the forward's own pieces (relu masks, sort
            orders, ...: ``decisions.pinned_symbol``), where the plain differences crossed kinks or ties.
        measured: names (float64) that passed once the analytic side's rounding was measured by rerunning the
            backward with rescaled head gradients, where the rounding model allowed too little (an exactly-zero
            gradient computed with cancellation).
        location: ``{name: array}``: the point finally checked (dtype under test).
        method: the numeric method.
    """

    kinks: list
    redrawn: dict
    excluded: dict
    retaken: dict
    pinned: list
    measured: list
    location: dict
    method: str


@seeded_check
def check_numeric_gradient(
    sym: Symbol,
    location: NamedArrays,
    aux_states: NamedArrays | None = None,
    numeric_eps: Tolerance = None,
    rtol: Tolerance = None,
    atol: Tolerance = None,
    grad_nodes: GradReqLike | None = None,
    use_forward_train: bool = True,
    ctx: Context | None = None,
    grad_stype_dict: Mapping[str, str | None] | None = None,
    dtype: DTypeLike = np.float32,
    *,
    numeric_dtype: DTypeLike = np.float64,
    method: Literal["central", "richardson", "complex_step"] = "central",
    kinks: Literal["redraw", "exclude", "error"] = "redraw",
    progress: bool = True,
    executor: Executor | None = None,
    probes: bool | None = None,
) -> NumericGradientResult:
    """Check the backward pass against finite differences (MXNet's ``check_numeric_gradient``).

    Method:
        The scalar checked is ``f = sum_k sum(w_k * out_k)`` over every output ``k``, with random weights
        ``w_k`` uniform in [0.1, 1.1) (a loss head such as SoftmaxOutput or MakeLoss, whose backward ignores
        its head gradient, contributes its implied loss instead). The analytic gradient is one
        ``forward(is_train=True)`` + ``backward(w)`` in ``dtype``, into dirty buffers (checked as
        ``check_symbolic_backward`` does for write / add / null). The reference is central differences of a
        second executor in ``numeric_dtype`` (float64 by default, whatever ``dtype`` is) at the same point
        (the location rounded to ``dtype``), one element at a time (``x +- h``, ``h = cbrt(eps_64) *
        max(|x|, 1)``, about ``6.1e-6 * max(|x|, 1)``, unless ``numeric_eps`` is given), re-running only
        what depends on the perturbed argument, with auxiliary states reset before every evaluation.

        Non-differentiable points: where analytic and numeric disagree, ``numeric.element_kinks`` compares the
        one-sided differences at three step sizes (``h/4``, ``h``, ``4h``: the one kink test of
        ``differencer``). An element at a kink (relu/abs at 0, max ties) whose analytic value lies between
        the one-sided derivatives is not a gradient error: by default it is re-drawn (moved a few steps off
        the kink towards the side its analytic value belongs to, then the whole check runs again there, up
        to ``numeric.MAX_REDRAWS`` = 3 rounds before such elements are left out), and a
        ``NondifferentiablePointWarning`` says so; the result's ``kinks``/``redrawn``/``excluded``/``location``
        attributes carry the facts. A wrong gradient elsewhere still fails, and so does an analytic value
        outside the one-sided derivatives.

    Cost:
        Per checked float element, 2 partial forward passes of the reference (4 with ``"richardson"``, 1 with
        ``"complex_step"``), each re-running only the instructions downstream of the perturbed argument:
        this dominates for all but tiny arguments (``executor`` spreads it over workers). Fixed part: one
        forward and backward in ``dtype``, 2 forwards proving the forward deterministic, the rounding-noise
        estimates (8 forwards of the reference; 7 float64 forward and backward passes for the analytic side
        when ``dtype`` is float16/float32, 1 for float64), 3 forwards testing complex support with
        ``"complex_step"``. A mismatch adds the kink test (6 partial forwards per mismatching element, at
        most 64 examined when none is a kink), and each re-draw round repeats the check at the moved point.
        Graphs with ``Custom`` nodes add the buffer probe and the special points (see
        ``check_symbolic_backward``).

    Tolerance:
        Per element ``|analytic - numeric| <= atol + rtol * |numeric| + numeric noise + analytic noise``.
        ``rtol``: the table entry of ``dtype`` (float16 1e-2, float32 1e-4, float64 1e-5) unless given.
        ``atol``: when None, ``rtol`` times the largest ``|numeric|`` entry of that argument
        (``tolerance.scaled_atol``: an error below that share of the gradient's own scale is rounding in
        ``dtype``, where MXNet's fixed 1e-3 for float32 hides 1% errors of gradients below 0.1). Numeric
        noise: the rounding noise of one evaluation of ``f`` in ``numeric_dtype`` (the larger of
        ``4 eps |f|`` and 12 times the RMS deviation of 6 forwards with emulated rounding) divided by the
        width of the difference, ~1e-10 relative with float64. Analytic noise: the rounding the gradient
        has in ``dtype``, emulated on float64 runs (``harness.analytic_noise``: 12 times the RMS deviation of
        6 runs), raised to twice the measured ``|g_dtype - g_float64|`` up to 1e-3 of the largest gradient
        entry; it lets an exactly-zero float32 gradient pass and never excuses a 1% error of a gradient that
        is not tiny. Both noises are shown in the report. ``null`` arguments: the buffer must stay exactly
        as it was.

    Args:
        sym: the symbol.
        location: argument values, a list in ``list_arguments()`` order or a dict with exactly the arguments.
        aux_states: list or dict of auxiliary states (default: zeros).
        numeric_eps: None (default) for a step per element, ``x +- h`` with
            ``h = cbrt(eps_64) * max(|x|, 1)``; or a fixed width (``x +- eps/2``, as MXNet), a number or
            ``{dtype: eps}``. Too small for ``dtype`` with differences in ``numeric_dtype``
            (``tolerance.min_numeric_eps``, the rule ``numeric_grad`` applies too): ValueError.
        rtol, atol: None (rtol: ``dtype``'s table entry; atol: scaled to each argument's gradient, see
            Tolerance), a number or a ``{dtype: tol}`` dict. An estimate of the reference's rounding noise
            (``numeric.rounding_noise``, ~1e-10 relative with float64) is added to the allowed error and shown
            in the report; with a low-precision ``numeric_dtype`` it grows as ``eps / step`` and small errors
            go unseen, which is why float64 is the default.
        grad_nodes: arguments to check: None (all, 'write'), a list ('write') or a dict name -> grad_req.
        use_forward_train: ``is_train`` of the numeric evaluations.
        ctx: device of both executors (default ``default_context()``).
        grad_stype_dict: None or ``'default'`` storage types only.
        dtype: float16/32/64, the dtype under test.
        numeric_dtype: dtype of the finite differences (None: ``dtype``, like MXNet).
        method: (keyword-only) ``"central"``; ``"richardson"`` (two central differences extrapolated:
            error O(h^4), twice the evaluations); ``"complex_step"`` (``Im f(x + ih) / h`` on a complex copy of
            the symbol: exact to rounding, one evaluation per element; every op must be complex-analytic,
            else a ``numeric.ComplexStepError`` names the op; loss heads are not supported).
        kinks: (keyword-only) ``"redraw"`` (default), ``"exclude"`` (leave kink elements out of the
            comparison, with a warning) or ``"error"`` (fail; the report names the non-differentiable point).
        progress: (keyword-only) a tqdm progress bar when the numeric pass runs longer than ~2 s (tqdm is
            optional); False turns it off.
        executor: (keyword-only) a ``concurrent.futures.Executor`` (a process pool, a Dask client's
            ``get_executor()``) over whose workers the perturbed evaluations are spread
            (``scaleout.Spread``; the symbol travels as its JSON, custom ops must be registered in the
            workers); the result and the report are those of the serial run. Every round of re-draws is
            spread; the kink tests of mismatching elements and the analytic side stay here.
        probes: (keyword-only) the special-point probes (``test_utils.probes``: the arguments zeroed, a row zero
            or constant, scaled far out, two arguments equal; each judged for a finite gradient and for the
            one-sided derivatives): None (default) runs them where the graph has Custom nodes, True everywhere,
            False never.

    Returns:
        A ``NumericGradientResult``: ``{name: (analytic, numeric)}`` float64 arrays for every checked
        argument whose grad_req is not null.

    Raises:
        GradientCheckError: analytic and numeric gradients differ (or a 'null' buffer was written).
        ValueError: bad location / aux_states / grad_nodes / method / kinks, NaN or Inf inputs (naming the
            argument), numeric_eps too small, a forward that is not deterministic (Dropout in training: the
            op is named); ``numeric.ComplexStepError`` for an op that cannot be complex-stepped.
        NotImplementedError: sparse storage types; a loss head whose implied loss is unknown.

    >>> import numpy as np, symgrad as sg
    >>> x = sg.sym.Variable("x")
    >>> res = check_numeric_gradient(sg.sym.tanh(x), [np.array([0.1, -0.5, 2.0])])
    """
    opts = _NumericOptions(
        numeric_eps=numeric_eps,
        rtol=rtol,
        atol=atol,
        grad_nodes=grad_nodes,
        use_forward_train=use_forward_train,
        ctx=ctx,
        grad_stype_dict=grad_stype_dict,
        dtype=dtype,
        numeric_dtype=numeric_dtype,
        method=method,
        kinks=kinks,
    )
    setup = _NumericSetup.validate(sym, location, aux_states, opts)
    if executor is not None:
        check_pool(executor, setup.who)
    run = _NumericRun(setup, check_flag(progress, setup.who, "progress"), executor)
    rounds = run.until_no_kinks()
    if run.kinks.redrawn or run.kinks.excluded:
        text = kink_warning(
            setup.who,
            run.first_kinks,
            run.kinks.redrawn,
            run.kinks.excluded,
            redrawn_note=" (result.redrawn, result.location)",
            excluded_note="; result.excluded",
        )
        warnings.warn(NondifferentiablePointWarning(text), stacklevel=2)
    run.settle_truncation(rounds)
    run.pinned_second_look(rounds)
    run.measured_rounding(rounds)
    result = run.compare(rounds)
    run.probe_buffers(rounds)
    run.probe_points(probes)
    return result


@dataclasses.dataclass(frozen=True)
class _NumericOptions:
    """How ``check_numeric_gradient`` was asked to check, as the user gave them (``_NumericSetup.validate``
    checks them): MXNet's positional settings and symgrad's keyword-only ones that shape the comparison."""

    numeric_eps: Tolerance
    rtol: Tolerance
    atol: Tolerance
    grad_nodes: GradReqLike | None
    use_forward_train: bool
    ctx: Context | None
    grad_stype_dict: Mapping[str, str | None] | None
    dtype: DTypeLike
    numeric_dtype: DTypeLike
    method: str
    kinks: str


class _NumericSetup:
    """The validated arguments of one ``check_numeric_gradient`` call (phase 1: validate)."""

    who: str
    sym: Symbol
    dtype: np.dtype[Any]
    ndtype: np.dtype[Any]
    method: str
    kinks: str
    ctx: Context
    arg_names: list[str]
    loc: dict[str, np.ndarray]
    aux: dict[str, np.ndarray]
    out_shapes: list[tuple[int, ...]]
    reqs: dict[str, str]
    complex_step: bool
    eps: float | None
    rtol: Real
    atol: Real | None
    is_train: bool
    checked: list[str]

    @classmethod
    def validate(cls, sym, location, aux_states, opts: _NumericOptions):
        s = cls()
        s.who = who = "check_numeric_gradient"
        check_symbol(sym, who)
        refuse_random_ops(sym, who)
        s.sym = sym
        s.dtype = check_dtype(opts.dtype, who)
        ndt = opts.numeric_dtype
        s.ndtype = s.dtype if ndt is None else check_dtype(ndt, who, name="numeric_dtype")
        s.method = check_choice(opts.method, METHODS, who, "method")
        s.kinks = check_choice(opts.kinks, KINK_MODES, who, "kinks")
        s.ctx = check_context(default_context() if opts.ctx is None else opts.ctx, who)
        rtol, atol = opts.rtol, opts.atol
        check_tolerances(rtol, atol, who)
        check_flag(opts.use_forward_train, who, "use_forward_train")
        check_stypes(opts.grad_stype_dict, who, "grad_stype_dict")
        s.arg_names = sym.list_arguments()
        raw_loc = parse_location(sym, location, who)
        check_finite(raw_loc, who)
        if aux_states is not None:
            check_finite(parse_aux(sym, aux_states, who), who, "auxiliary state")
        s.loc, s.aux, s.out_shapes = _prepare(sym, raw_loc, aux_states, s.ctx, s.dtype, who)
        s.reqs = _grad_nodes(opts.grad_nodes, s.arg_names, who)
        s.complex_step = s.method == "complex_step"
        numeric_eps = opts.numeric_eps
        if s.complex_step and numeric_eps is not None:
            raise ValueError(
                f"{who}: numeric_eps does not apply to method='complex_step' (its step is "
                f"{COMPLEX_STEP:g} * max(|x|, 1)); leave numeric_eps=None"
            )
        s.eps = None if s.complex_step else resolve_numeric_eps(numeric_eps, s.dtype, s.ndtype, who)
        s.rtol, s.atol = get_tols(np.empty(0, s.dtype), np.empty(0, s.dtype), rtol, atol if atol is not None else 0.0)
        s.atol = None if atol is None else s.atol  # None: scaled to each argument's gradient (_NumericRun._atol)
        s.is_train = bool(opts.use_forward_train)
        s.checked = [k for k in s.arg_names if s.reqs.get(k, "null") != "null"]
        return s

    @property
    def eps_desc(self) -> str:
        if self.complex_step:
            text = f"complex step x + i h, h = {COMPLEX_STEP:g} * max(|x|, 1)"
        elif self.eps is None:
            text = f"per element x +- h, h = {float(default_steps(0.0, self.ndtype, self.method)):.3g} * max(|x|, 1)"
        else:
            text = f"{self.eps:g} (x +- eps/2)"
        return text + (", Richardson-extrapolated with h/2" if self.method == "richardson" else "")


class _NumericRun:
    """Phases 2-5 of ``check_numeric_gradient``: bind, reference, kinks, compare."""

    def __init__(self, s, progress, executor=None):
        self.s, self.progress, self.executor = s, progress, executor
        # random projection (quantised to dtype: both executors see the same weights) and dirty buffers
        self.weights = [np.asarray(np.random.rand(*shape) + 0.1).astype(s.dtype) for shape in s.out_shapes]
        self.initial = {
            k: np.random.normal(0, 0.01, size=s.loc[k].shape).astype(s.dtype) for k in s.arg_names if k in s.reqs
        }
        self.weights64 = [w.astype(np.float64) for w in self.weights]
        ref_sym, self.loss_heads, self.make_objective = projected_objective(s.sym, self.weights64, s.who)
        self.ref_sym = ref_sym
        self.heads = [None if loss else w for w, loss in zip(self.weights, self.loss_heads)]
        self._bind(ref_sym)
        self.first_kinks = None
        self.retaken: dict = {}
        self.pinned: list = []  # the arguments compared with the reference on the forward's own pieces
        self.measured: list = []  # the arguments judged with their analytic rounding measured

    # -- phase 2: bind ------------------------------------------------------------------------------------
    def _bind(self, ref_sym):
        s = self.s
        if s.complex_step:
            losses = [n for n, loss in zip(s.sym.list_outputs(), self.loss_heads) if loss]
            if losses:
                raise NotImplementedError(
                    f"{s.who}: method='complex_step' cannot differentiate the implied loss of "
                    f"the loss head output(s) {losses}; use method='central' or 'richardson'"
                )
            check_complex_support(
                s.sym, s.loc, s.aux, names=s.checked, ctx=s.ctx, is_train=s.is_train, numeric_dtype=s.ndtype, who=s.who
            )
        self.buffers = _on(s.ctx, self.initial)
        self.exe = s.sym.bind(
            s.ctx,
            _on(s.ctx, s.loc),
            args_grad=self.buffers,
            grad_req={k: s.reqs.get(k, "null") for k in s.arg_names},
            aux_states=_on(s.ctx, s.aux),
        )
        self.ref = Harness.bind(ref_sym, s.loc, s.aux, ctx=s.ctx, dtype=s.ndtype, is_train=s.is_train)
        assert_deterministic(
            self.exe, True, s.aux, s.who, "the forward with is_train=True (that of the analytic gradient)"
        )
        if not s.is_train:
            self.ref.assert_deterministic(s.who, "the forward with is_train=False (use_forward_train=False)")
        if s.complex_step:
            self.cref = Harness.bind(
                s.sym, s.loc, s.aux, ctx=s.ctx, dtype=s.ndtype, is_train=s.is_train, complex_names=s.checked
            )
        self.spread = self.cspread = None
        if self.executor is not None:  # the workers rebuild each harness from the symbol's JSON
            self.spread = Spread(self.executor, self.ref, Recipe(s.sym, self.weights64, s.who), s.who)
            if s.complex_step:
                self.cspread = Spread(self.executor, self.cref, Recipe(s.sym, self.weights64, s.who, "complex"), s.who)

    # -- phase 3: the two sides at a point --------------------------------------------------------------
    def analytic_at(self, point):
        s = self.s
        got, analytic = self._backward(point, self.heads)
        _, noise = harness_analytic_noise(s.sym, point, s.aux, self.heads, s.checked, s.dtype, actual=analytic)
        return got, analytic, noise

    def _backward(self, point, heads):
        """``(buffers as written, {checked name: analytic gradient in float64})`` of one forward and backward at
        ``point`` with the head gradients ``heads``."""
        s = self.s
        for k in s.arg_names:
            _write(self.exe.arg_dict[k], point[k])
        for k, b in self.buffers.items():
            _write(b, self.initial[k])
        for k, a in self.exe.aux_dict.items():
            _write(a, s.aux[k])
        self.exe.forward(is_train=True)
        self.exe.backward([None if h is None else to_device(h, s.ctx) for h in heads])
        got = {k: np.array(to_numpy(b), copy=True) for k, b in self.buffers.items()}
        analytic = {}
        for k in s.checked:
            analytic[k] = got[k].astype(np.float64)
            if s.reqs[k] == "add":
                analytic[k] = analytic[k] - self.initial[k].astype(np.float64)
        return got, analytic

    def numeric_at(self, point):
        s = self.s
        self.ref.set_values(point)
        base = self.ref.base()
        objective = self.make_objective([np.asarray(b, np.float64) for b in base])
        scalar = objective.value  # objective(outs)[0]
        f_noise = self.ref.evaluation_noise(objective, s.ndtype)
        kind = "central" if s.complex_step else s.method
        if s.eps is None:
            steps = {k: default_steps(point[k], s.ndtype, kind) for k in s.checked}
        else:
            steps = {k: np.full(point[k].shape, s.eps / 2.0) for k in s.checked}
        if s.complex_step:
            self.cref.set_values(point)
            numeric, widths = gradient(
                self.cref,
                s.checked,
                complex_objective(self.weights64),
                {k: default_steps(point[k], s.ndtype, "complex_step") for k in s.checked},
                method="complex_step",
                progress=self.progress,
                desc="numeric gradient (complex step)",
                spread=self.cspread,
            )
        else:
            numeric, widths = gradient(
                self.ref, s.checked, scalar, steps, method=s.method, progress=self.progress, spread=self.spread
            )
        noise = {k: f_noise / widths[k] for k in s.checked}
        return numeric, noise, f_noise, scalar, steps

    # -- phase 4: kinks ----------------------------------------------------------------------------------
    def until_no_kinks(self):
        """Evaluate both sides; elements at kinks are re-drawn (up to MAX_REDRAWS rounds) or excluded."""
        s = self.s
        self.point = {k: v.copy() for k, v in s.loc.items()}
        taken: dict = {}  # the steps of the latest numeric pass: a kink moves by its own step
        self.kinks = KinkRedraws(s.who, self.point, lambda arg, index: taken[arg][index])
        for round_ in range(MAX_REDRAWS + 1):
            got, analytic, a_noise = self.analytic_at(self.point)
            numeric, n_noise, f_noise, scalar, steps = self.numeric_at(self.point)
            taken.update(steps)
            atol = {k: self._atol(numeric[k]) for k in s.checked}
            found = {}
            for k in s.checked:
                bad, _, allowed = violations(analytic[k], numeric[k], s.rtol, atol[k], False, n_noise[k] + a_noise[k])
                if bad.any():
                    ks = element_kinks(
                        self.ref, k, scalar, np.argwhere(bad), steps[k], analytic[k], allowed, f_noise=f_noise
                    )
                    if ks:
                        found[k] = ks
            if self.first_kinks is None:
                self.first_kinks = [kk for ks in found.values() for kk in ks]
            valid = {k: [kk for kk in ks if kk.subgradient] for k, ks in found.items()}
            valid = {k: ks for k, ks in valid.items() if ks}
            if not valid or s.kinks == "error":
                break
            flat = [kk for ks in valid.values() for kk in ks]
            if s.kinks == "exclude":
                self.kinks.exclude(flat)
                break
            self.kinks.handle(flat)  # its MAX_REDRAWS + 1st round (the last here) excludes them
            if round_ == MAX_REDRAWS:
                break
        return dict(
            got=got,
            analytic=analytic,
            numeric=numeric,
            n_noise=n_noise,
            a_noise=a_noise,
            found=found,
            atol=atol,
            steps=steps,
            f_noise=f_noise,
            scalar=scalar,
        )

    # -- phase 4b: truncation ----------------------------------------------------------------------------
    def settle_truncation(self, r):
        """Mismatches off the kinks, retaken at shorter steps until the difference settles
        (``differencer.settle_entries``). The default step balances truncation and rounding for a typical
        curvature; where the objective turns on a much smaller scale the difference errs by truncation. Measured:
        a convolution with zero weights before a BatchNorm puts ``x_hat = d / sqrt(var + eps)`` at ``var = 0``,
        where it turns on a scale of ``sqrt(eps)`` / |data| in the weights, and every correct weight gradient
        failed by 0.01-0.1% (float64, data of unit scale up to 255). A settled value replaces the first
        difference (its truncation and rounding join the allowance); a wrong gradient settles at once at its
        wrong value and still fails, reported as first measured. Cost: 4+ partial forwards per failing element, on
        the failure path only."""
        s = self.s
        if s.complex_step:  # exact to rounding: nothing to settle
            return
        for k in s.checked:
            self._settle_argument(k, r)
        if any(self.retaken.values()):
            n = sum(len(v) for v in self.retaken.values())
            warnings.warn(
                f"{s.who}: the central differences of {n} element(s) ({', '.join(map(repr, self.retaken))}) erred "
                f"by truncation at the step {s.eps_desc}; retaken at shorter steps they settle at values the "
                "analytic gradient matches (result.retaken)",
                RuntimeWarning,
                stacklevel=4,
            )

    # -- phase 4c: the forward's own pieces --------------------------------------------------------------------
    def pinned_second_look(self, r):
        """Arguments that still fail, compared with the numeric gradient of the reference evaluated on the
        forward's own pieces (``decisions.pinned_symbol``: relu masks, pooling windows, sort orders of the forward
        under test), as check_backward and gradcheck do: at exact ties (24 equal values sorted) the re-draws run
        out before every element is off its tie, and a difference moving a tied element sends it to either end
        of its group, a mix of two permutations that matches none. An argument whose analytic gradient matches
        the pinned one everywhere passes with that reference; a wrong rule fails both. Cost: one more numeric
        gradient of each such argument, on the failure path only."""
        from .decisions import pinned_symbol, record_decisions

        s = self.s
        failing = [k for k in s.checked if self._failing(k, r)[0].any()]
        if not failing or s.complex_step or s.kinks != "redraw":  # kinks="error" / "exclude": as asked
            return
        for k in s.arg_names:
            _write(self.exe.arg_dict[k], self.point[k])
        for k, a in self.exe.aux_dict.items():
            _write(a, s.aux[k])
        sym, pinning = pinned_symbol(self.ref_sym, record_decisions(self.exe, is_train=True))
        if not pinning.pinned:
            return
        ref = Harness.bind(sym, self.point, s.aux, ctx=s.ctx, dtype=s.ndtype, is_train=s.is_train)
        objective = self.make_objective([np.asarray(b, np.float64) for b in ref.base()])
        f_noise = ref.evaluation_noise(objective, s.ndtype)
        numeric, widths = gradient(ref, failing, objective.value, {k: r["steps"][k] for k in failing}, progress=False)
        for k in failing:
            pinned = {"numeric": numeric[k], "n_noise": f_noise / widths[k], "atol": self._atol(numeric[k])}
            if not self._failing(k, {**r, **{key: {**r[key], k: v} for key, v in pinned.items()}})[0].any():
                for key, v in pinned.items():
                    r[key][k] = v
                self.pinned.append(k)
        if self.pinned:
            warnings.warn(
                NondifferentiablePointWarning(
                    f"{s.who}: {', '.join(map(repr, self.pinned))} compared with the numeric gradient of the reference "
                    f"on the forward's own pieces ({', '.join(map(repr, pinning.pinned))} pinned): the plain "
                    "differences cross kinks or ties the re-draws did not leave (result.pinned)"
                ),
                stacklevel=4,
            )

    # -- phase 4d: the analytic side's own rounding, measured ----------------------------------------------------
    def measured_rounding(self, r):
        """float64 arguments that still fail, judged once more with the analytic side's rounding measured
        (``harness.rescaled_rounding``) instead of modelled. The model counts a float64 gradient's rounding as
        ``4 eps |g|``; where the exact gradient is 0 and the objective is exactly constant in the argument, the
        numeric side is exactly 0, atol=None allows 0 (``rtol`` times the argument's largest numeric entry), and
        the backward's own rounding fails a correct op. Measured: a convolution with zero weights and bias before
        a BatchNorm (a constant channel): BatchNorm's backward subtracts the mean of its head gradient and the
        convolution sums the result over the channel, so the bias gradient is 2.5e-13 instead of 0, and a correct
        layer failed in 60 of 60 draws. An argument that passes with the measured rounding added is listed in
        ``result.measured``. Cost: ``EMULATION_RUNS + 1`` forwards and backwards, on the failure path only."""
        s = self.s
        if s.dtype.itemsize < 8 or s.complex_step or all(h is None for h in self.heads):
            return
        failing = [k for k in s.checked if self._failing(k, r)[0].any()]
        if not failing:
            return
        scaled = lambda c: self._backward(self.point, [None if h is None else h * c for h in self.heads])[1]
        measured = rescaled_rounding(scaled, {k: r["analytic"][k] for k in failing})
        if measured is None:  # not reproducible at the same point: not rounding
            return
        for k in failing:
            noise = np.maximum(r["a_noise"][k], measured[k])
            if not self._failing(k, {**r, "a_noise": {**r["a_noise"], k: noise}})[0].any():
                r["a_noise"][k] = noise
                self.measured.append(k)

    def _failing(self, k, r):
        """``(bad mask, |error|, allowed)`` of argument ``k`` as the comparison will judge it, kinks left out."""
        s = self.s
        bad, err, allowed = violations(
            r["analytic"][k], r["numeric"][k], s.rtol, r["atol"][k], False, r["n_noise"][k] + r["a_noise"][k]
        )
        for i in self.kinks.excluded.get(k, ()):
            bad[i] = False
        return bad, err, allowed

    def _settle_argument(self, k, r):
        from .differencer import ElementDifferences, settle_entries

        s = self.s
        analytic, numeric, a_noise = r["analytic"][k], r["numeric"][k], r["a_noise"][k]
        bad, err, allowed = self._failing(k, r)
        failing = [tuple(map(int, i)) for i in np.argwhere(bad & np.isfinite(numeric) & np.isfinite(analytic))]
        failing.sort(key=lambda i: -err[i] / max(allowed[i], 1e-300))
        if not failing:
            return
        scalar = r["scalar"]
        differences = ElementDifferences(self.ref, k, lambda: [scalar(self.ref.outputs([k]))])
        taken = settle_entries(
            differences,
            [(0, 0, i) for i in failing],
            r["steps"][k],
            [numeric[i] for i in failing],
            [analytic[i] for i in failing],
            [r["atol"][k] + a_noise[i] for i in failing],
            [r["f_noise"]] * len(failing),
            s.rtol,
        )
        for i, got in zip(failing, taken):
            if got.settled and got.ok:  # a failure is reported as first measured
                numeric[i] = got.value
                r["n_noise"][k][i] = got.allowed - (r["atol"][k] + a_noise[i]) - s.rtol * abs(got.value)
                self.retaken.setdefault(k, []).append(i)

    def probe_buffers(self, r):
        """Phase 6: custom ops given grad_req 'add' and called twice (``buffers.probe``), against this pass's
        gradients."""
        s = self.s
        live = [k for k in s.checked]
        probe(
            s.sym,
            self.point,
            s.aux,
            self.heads,
            {k: r["analytic"][k] for k in live},
            s.dtype,
            s.ctx,
            s.who,
            noise={k: r["a_noise"][k] for k in live},
        )

    def probe_points(self, probes):
        """Phase 7: the special-point probes (``probes.run``; None: where the graph has Custom nodes)."""
        from . import probes as special

        s = self.s
        if s.complex_step or not special.wanted(probes, s.sym):
            return
        special.run(
            s.sym,
            self.point,
            s.aux,
            self.heads,
            s.checked,
            s.dtype,
            s.ctx,
            s.who,
            s.rtol,
            s.atol if s.atol is not None else 0.0,
        )

    def _atol(self, numeric):
        """The given atol, or (atol=None) the dtype's rtol times the largest |numeric| entry of the argument: an
        error below that share of the gradient's own scale is at rounding level in the dtype under test."""
        s = self.s
        return s.atol if s.atol is not None else scaled_atol(s.rtol, numeric)

    # -- phase 5: compare and report -------------------------------------------------------------------
    def compare(self, r):
        s = self.s
        results = NumericGradientResult()
        results.kinks, results.redrawn, results.excluded = (
            self.first_kinks or [],
            self.kinks.redrawn,
            self.kinks.excluded,
        )
        results.location, results.method = self.point, s.method
        results.retaken, results.pinned, results.measured = self.retaken, self.pinned, self.measured
        context_line = (
            f"dtype under test {s.dtype.name}, numeric reference in {np.dtype(s.ndtype).name} "
            f"({s.method}), forward is_train={s.is_train}"
        )
        failures = []
        for name in s.arg_names:
            if name not in s.reqs:
                continue
            try:
                if s.reqs[name] == "null":
                    self._compare_null(name, r["got"][name])
                    continue
                results[name] = (r["analytic"][name], r["numeric"][name])
                self._compare_one(name, r, context_line)
            except GradientCheckError as err:
                failures.append(err)
        raise_first(failures)
        return results

    def _compare_null(self, name, got):
        compare(
            got,
            self.initial[name],
            0.0,
            0.0,
            check=self.s.who,
            arg_name=name,
            names=("buffer", "initial"),
            what=f"gradient buffer of {name!r} changed although grad_req is 'null'",
            extra_lines=[_NULL_HINT],
            equal_nan=True,
            facts=self._facts(name),
            broadcast="expected",
        )

    def _facts(self, name):
        return {
            "grad_req": self.s.reqs[name],
            "dtype": self.s.dtype,
            "redrawn": self.kinks.redrawn,
            "excluded": self.kinks.excluded,
        }

    def _compare_one(self, name, r, context_line):
        s = self.s
        extra = [context_line]
        if self.kinks.redrawn:
            extra.append(
                f"checked after re-drawing {sum(len(v) for v in self.kinks.redrawn.values())} element(s) off "
                "non-differentiable points (see .redrawn)"
            )
        exclude = None
        if name in self.kinks.excluded:
            exclude = np.zeros(r["analytic"][name].shape, bool)
            for i in self.kinks.excluded[name]:
                exclude[i] = True
        left = [kk for kk in r["found"].get(name, []) if kk.index not in set(self.kinks.excluded.get(name, ()))]

        def context(name=name, left=left):
            found = diagnosis_context(
                s.sym,
                s.ctx,
                self.point,
                s.aux,
                self.heads,
                name,
                s.out_shapes,
                left,
                noise=r["n_noise"][name] + r["a_noise"][name],
            )
            found["other_expected"] = [(n, r["numeric"][n]) for n in s.checked if n != name]
            if s.reqs[name] == "write":
                found["initial_buffer"] = self.initial[name]
            return found

        compare(
            r["analytic"][name],
            r["numeric"][name],
            s.rtol,
            r["atol"][name],
            check=s.who,
            arg_name=name,
            what=f"analytic gradient of {name!r} does not match the numeric gradient (grad_req {s.reqs[name]!r})",
            names=("analytic", "numeric"),
            eps=s.eps_desc,
            noise=r["n_noise"][name],
            analytic_noise=r["a_noise"][name],
            noise_dtype=s.dtype,
            extra_lines=extra,
            facts=self._facts(name),
            broadcast="expected",
            context=context,
            exclude=exclude,
        )


# -- speed / convenience ------------------------------------------------------------------------------------


def check_speed(
    sym: Symbol,
    location: Mapping[str, ArrayLike] | None = None,
    ctx: Context | None = None,
    N: int = 20,
    grad_req: GradReqLike | None = None,
    typ: Literal["whole", "forward"] = "whole",
    **kwargs: Any,
) -> float:
    """Seconds per forward+backward (``typ="whole"``) or per inference forward (``typ="forward"``).

    ``location`` is a dict of argument values (their shapes bind the symbol); without it the shapes come
    from ``kwargs`` and the values are standard normal. One warm-up run is not timed.
    """
    who = "check_speed"
    check_symbol(sym, who)
    ctx = check_context(default_context() if ctx is None else ctx, who)
    N = check_count(N, who, "N")
    grad_req = "write" if grad_req is None else grad_req
    normalize_grad_req(grad_req, sym.list_arguments(), who)
    check_choice(typ, ("whole", "forward"), who, "typ")
    if location is None:
        exe = sym.simple_bind(ctx, grad_req=grad_req, **kwargs)
        location = {k: np.random.normal(size=a.shape, scale=1.0) for k, a in exe.arg_dict.items()}
    else:
        if not isinstance(location, dict):
            raise TypeError(f"check_speed: location must be a dict of arrays, got {type(location).__name__}")
        arg_names = sym.list_arguments()
        unknown = [k for k in location if k not in arg_names]
        if unknown:
            raise ValueError(f"{who}: location names {unknown}, which are not arguments; arguments are {arg_names}")
        location = {k: host_array(v, who, "argument", k, allow_complex=False) for k, v in location.items()}
        shapes: dict[str, Any] = {k: np.shape(v) for k, v in location.items()}
        exe = sym.simple_bind(ctx, grad_req=grad_req, **shapes)
    for name, value in location.items():
        exe.arg_dict[name][...] = to_device(value, ctx, exe.arg_dict[name].dtype)
    if typ == "whole":
        exe.forward(is_train=True)
        exe.backward(out_grads=exe.outputs)
        synchronize(ctx)
        tic = time.perf_counter()
        for _ in range(N):
            exe.forward(is_train=True)
            exe.backward(out_grads=exe.outputs)
        synchronize(ctx)
        return (time.perf_counter() - tic) / N
    exe.forward(is_train=False)
    synchronize(ctx)
    tic = time.perf_counter()
    for _ in range(N):
        exe.forward(is_train=False)
    synchronize(ctx)
    return (time.perf_counter() - tic) / N


def simple_forward(
    sym: Symbol, ctx: Context | None = None, is_train: bool = False, **inputs: ArrayLike
) -> np.ndarray | list[np.ndarray]:
    """Outputs of one forward with the given argument arrays (one array, or a list for several outputs)."""
    who = "simple_forward"
    check_symbol(sym, who)
    ctx = check_context(default_context() if ctx is None else ctx, who)
    is_train = check_flag(is_train, who, "is_train")
    arg_names = sym.list_arguments()
    unknown = [k for k in inputs if k not in arg_names]
    if unknown:
        raise ValueError(f"{who}: inputs {unknown} are not arguments of the symbol; arguments are {arg_names}")
    args = {k: to_device(host_array(v, who, "argument", k), ctx) for k, v in inputs.items()}
    exe = sym.bind(ctx, args)
    outputs = [to_numpy(o) for o in exe.forward(is_train=is_train)]
    return outputs[0] if len(outputs) == 1 else outputs
