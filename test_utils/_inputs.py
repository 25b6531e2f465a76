"""Validation and normalisation of the checkers' inputs (locations, aux states, grad_req, dtype).

Every problem is a ``ValueError`` (``TypeError`` for a wrong kind of object) naming the argument,
what was expected and what arrived.
"""

from __future__ import annotations

import numpy as np

from symgrad.base import SymgradError
from symgrad.executor import normalize_grad_req as _normalize_grad_req

from .context import to_numpy

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def check_dtype(dtype, who, allow_asnumpy=False):
    """``dtype`` as a numpy dtype (float16/32/64), or the string ``"asnumpy"`` where allowed."""
    if allow_asnumpy and isinstance(dtype, str) and dtype == "asnumpy":
        return "asnumpy"
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in _FLOATS:
        allowed = "np.float16, np.float32, np.float64" + (' or "asnumpy"' if allow_asnumpy else "")
        raise ValueError(f"{who}: dtype must be one of {allowed}, got {dtype!r}")
    return dt


def _sorted_names(names):
    return sorted(names, key=str)


def check_kind(arr, who, what, name, allow_complex=True):
    """``arr`` (numpy) itself when its dtype is numeric (bool, int, float; complex if allowed), else TypeError /
    ValueError naming ``what`` ``name`` and the dtype."""
    kind = arr.dtype.kind
    if kind not in "biufc":
        raise TypeError(f"{who}: {what} {name!r} has dtype {arr.dtype}; give a numeric (bool, integer or float) "
                        "array")
    if kind == "c" and not allow_complex:
        raise ValueError(f"{who}: {what} {name!r} is complex ({arr.dtype}) but the checked values are real; "
                         "casting would drop the imaginary part silently -- give a real array")
    return arr


def _to_host(value, who, what, name):
    if value is None:
        raise ValueError(f"{who}: {what} {name!r} is None; give an array")
    try:
        arr = np.asarray(to_numpy(value))
    except Exception as exc:  # anything that is not array-like
        raise TypeError(f"{who}: {what} {name!r} must be an array, got {type(value).__name__}") from exc
    return check_kind(arr, who, what, name)


def named_arrays(given, names, who, what, kind="location"):
    """A ``{name: numpy array}`` dict from a list (in ``names`` order) or a dict with exactly ``names`` as keys."""
    if isinstance(given, dict):
        keys = set(given)
        if keys != set(names):
            missing = [n for n in names if n not in keys]
            extra = _sorted_names(keys - set(names))
            parts = []
            if missing:
                parts.append(f"missing {missing}")
            if extra:
                parts.append(f"unexpected {extra}")
            raise ValueError(
                f"{who}: the keys of {kind} do not match the symbol's {what}s ({'; '.join(parts)}): "
                f"symbol {what}s {list(names)}, {kind} keys {_sorted_names(keys)}"
            )
        items = [(n, given[n]) for n in names]
    elif isinstance(given, (list, tuple)):
        if len(given) != len(names):
            raise ValueError(
                f"{who}: {kind} is a list of {len(given)} arrays but the symbol has {len(names)} {what}s "
                f"{list(names)}; give one array per {what} in that order, or a dict"
            )
        items = list(zip(names, given))
    else:
        raise TypeError(f"{who}: {kind} must be a list or a dict of arrays, got {type(given).__name__}")
    return {n: _to_host(v, who, what, n) for n, v in items}


def parse_location(sym, location, who):
    return named_arrays(location, sym.list_arguments(), who, "argument", "location")


def parse_aux(sym, aux_states, who):
    """Aux states as a dict; ``None`` gives zeros of the inferred shapes (as ``simple_bind``)."""
    names = sym.list_auxiliary_states()
    if aux_states is None:
        return None
    return named_arrays(aux_states, names, who, "auxiliary state", "aux_states")


def check_shapes(sym, arrays: dict, who):
    """Infer every shape from the given arrays; on conflict name the argument, its shape and the expected one.

    Returns ``(arg_shapes, out_shapes, aux_shapes)``.
    """
    shapes = {n: tuple(a.shape) for n, a in arrays.items()}
    try:
        res = sym.infer_shape(**shapes)
    except SymgradError as exc:
        culprits = []
        arg_names, aux_names = sym.list_arguments(), sym.list_auxiliary_states()
        for name in shapes:
            others = {k: v for k, v in shapes.items() if k != name}
            try:
                args, _, aux = sym.infer_shape_partial(**others)
            except SymgradError:
                continue
            inferred = dict(zip(arg_names, args)) | dict(zip(aux_names, aux))
            want = inferred.get(name)
            if want is not None and tuple(want) != shapes[name]:
                culprits.append(f"{name!r} has shape {shapes[name]}, expected {tuple(want)}")
        if culprits:
            detail = "; or ".join(culprits)
            raise ValueError(f"{who}: shapes do not fit the symbol: {detail} (expected = inferred from the other "
                             f"inputs' shapes); symgrad said: {exc}") from exc
        raise ValueError(f"{who}: shapes do not fit the symbol: {exc}") from exc
    if res[0] is None:
        raise ValueError(f"{who}: cannot infer every shape from {shapes}")
    return res


def nonfinite_notes(arrays: dict, what="argument") -> list[str]:
    """One line per array holding NaN or Inf (for a report whose comparison failed)."""
    notes = []
    for name, a in arrays.items():
        a = np.asarray(to_numpy(a)) if a is not None else None
        if a is None or a.dtype.kind not in "fc" or np.isfinite(a).all():
            continue
        idx = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
        notes.append(f"note: {what} {name!r} contains {int(np.isnan(a).sum())} NaN and {int(np.isinf(a).sum())} "
                     f"Inf values (first at index {idx}); they propagate into the values compared")
    return notes


def check_finite(arrays: dict, who, what="argument"):
    for name, a in arrays.items():
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            bad = ~np.isfinite(a)
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"{who}: {what} {name!r} contains {int(np.isnan(a).sum())} NaN and {int(np.isinf(a).sum())} Inf "
                f"values (first at index {idx}); finite differences need finite inputs"
            )


def normalize_grad_req(grad_req, names, who):
    """grad_req (str / list / dict) as ``{name: 'write'|'add'|'null'}``: the executor's rule."""
    return _normalize_grad_req(grad_req, names, who)


def check_stypes(stypes, who, what):
    if stypes is None:
        return
    if not isinstance(stypes, dict):
        raise TypeError(f"{who}: {what} must be None or a dict of argument name -> storage type")
    sparse = {k: v for k, v in stypes.items() if v not in (None, "default")}
    if sparse:
        raise NotImplementedError(
            f"{who}: {what} asks for sparse gradient storage {sparse}; symgrad arrays are dense, only 'default' "
            "is supported"
        )


def check_symbol(sym, who):
    """``sym`` itself when it is a Symbol, else TypeError naming what arrived."""
    from symgrad.symbol import Symbol

    if not isinstance(sym, Symbol):
        raise TypeError(f"{who}: sym must be a symgrad Symbol, got {type(sym).__name__}")
    return sym


def check_context(ctx, who):
    """``ctx`` itself when it is a Context (``sg.cpu()``, ``sg.gpu(0)``), else TypeError."""
    from symgrad.context import Context

    if not isinstance(ctx, Context):
        raise TypeError(f"{who}: ctx must be a Context such as sg.cpu() or sg.gpu(0), got {ctx!r}")
    return ctx


def _check_tol(value, who, name):
    import numbers

    if value is None:
        return
    if isinstance(value, dict):
        for v in value.values():
            _check_tol(v, who, name)
        return
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{who}: {name} must be a number, a {{dtype: number}} dict or None, got {value!r}")
    if not (np.isfinite(value) and value >= 0):
        raise ValueError(f"{who}: {name} must be a finite number >= 0, got {value!r}")


def check_tolerances(rtol, atol, who):
    """Refuse tolerances that are not finite non-negative numbers (or None, or ``{dtype: number}`` dicts)."""
    _check_tol(rtol, who, "rtol")
    _check_tol(atol, who, "atol")
