"""Validation and normalisation of the checkers' inputs (locations, aux states, grad_req, dtype).

Every problem is a ``ValueError`` (``TypeError`` for a wrong kind of object) naming the argument,
what was expected and what arrived.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from symgrad.base import BindError, SymgradError
from symgrad.executor import normalize_grad_req as _normalize_grad_req

from .context import to_numpy

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from numpy.typing import ArrayLike

#: values by argument (or auxiliary state) as the checkers take them: a list or tuple in the symbol's order, or a
#: dict by name (the annotation says Sequence / Mapping so that ``list[np.ndarray]`` and ``dict[str, np.ndarray]``
#: type-check: both are invariant in their items; other sequences and mappings are refused at run time)
NamedArrays: TypeAlias = "Sequence[ArrayLike] | Mapping[str, ArrayLike]"
#: a ``grad_req``: one of 'write' / 'add' / 'null' for every argument, a list in argument order or a dict by name
GradReqLike: TypeAlias = "str | list[str] | tuple[str, ...] | dict[str, str]"

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def check_dtype(dtype, who, allow_asnumpy=False, name="dtype"):
    """``dtype`` as a numpy dtype (float16/32/64), or the string ``"asnumpy"`` where allowed; else ValueError
    naming the option ``name``."""
    if allow_asnumpy and isinstance(dtype, str) and dtype == "asnumpy":
        return "asnumpy"
    try:
        dt = None if dtype is None else np.dtype(dtype)  # np.dtype(None) is float64; a float64 == None test is True
    except (TypeError, ValueError):
        dt = None
    if dt is None or dt not in _FLOATS:
        allowed = "np.float16, np.float32, np.float64" + (' or "asnumpy"' if allow_asnumpy else "")
        raise ValueError(f"{who}: {name} must be one of {allowed}, got {dtype!r}")
    return dt


def _sorted_names(names):
    return sorted(names, key=str)


def check_kind(arr, who, what, name, allow_complex=True):
    """``arr`` (numpy) itself when its dtype is numeric (bool, int, float; complex if allowed), else TypeError /
    ValueError naming ``what`` ``name`` and the dtype."""
    kind = arr.dtype.kind
    if kind not in "biufc":
        raise TypeError(f"{who}: {what} {name!r} has dtype {arr.dtype}; give a numeric (bool, integer or float) array")
    if kind == "c" and not allow_complex:
        raise ValueError(
            f"{who}: {what} {name!r} is complex ({arr.dtype}) but the checked values are real; "
            "casting would drop the imaginary part silently -- give a real array"
        )
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
            raise ValueError(
                f"{who}: shapes do not fit the symbol: {detail} (expected = inferred from the other "
                f"inputs' shapes); symgrad said: {exc}"
            ) from exc
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
        notes.append(
            f"note: {what} {name!r} contains {int(np.isnan(a).sum())} NaN and {int(np.isinf(a).sum())} "
            f"Inf values (first at index {idx}); they propagate into the values compared"
        )
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
    """grad_req (str / list / dict) as ``{name: 'write'|'add'|'null'}``: the executor's rule, but stricter on a
    dict naming a non-argument: the executor ignores that request with a warning (as MXNet's bind), while a
    checker asked for an argument the symbol does not have would silently check less -- an error here."""
    names = list(names)
    unknown = [k for k in grad_req if k not in names] if isinstance(grad_req, dict) else []
    if unknown:
        raise BindError(f"{who}: grad_req names {unknown[0]!r}, which is not an argument; arguments are {names}")
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


def _is_number(value) -> bool:
    import numbers

    return not isinstance(value, (bool, np.bool_)) and isinstance(value, (numbers.Real, np.floating, np.integer))


def _check_tol(value, who, name):
    if value is None:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            try:
                np.dtype(k)
            except (TypeError, ValueError):
                raise TypeError(f"{who}: {name} dict keys must be dtypes (e.g. np.float32), got key {k!r}") from None
            if v is None:
                raise TypeError(f"{who}: {name}[{k!r}] must be a number, got None")
            _check_tol(v, who, f"{name}[{k!r}]")
        return
    if not _is_number(value):
        raise TypeError(f"{who}: {name} must be a number, a {{dtype: number}} dict or None, got {value!r}")
    if not (np.isfinite(value) and value >= 0):
        raise ValueError(f"{who}: {name} must be a finite number >= 0, got {value!r}")


def check_tolerances(rtol, atol, who):
    """Refuse tolerances that are not finite non-negative numbers (or None, or ``{dtype: number}`` dicts)."""
    _check_tol(rtol, who, "rtol")
    _check_tol(atol, who, "atol")


def check_number(value, who, name, *, positive=False, allow_none=False):
    """``float(value)`` for a finite real number (> 0 when ``positive``, else >= 0); TypeError / ValueError naming
    ``name`` otherwise. Booleans are not numbers here (``rtol=True`` is a mistake, not 1.0)."""
    if value is None and allow_none:
        return None
    if not _is_number(value):
        expected = "a number" + (" or None" if allow_none else "")
        raise TypeError(f"{who}: {name} must be {expected}, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not (np.isfinite(v) and (v > 0 if positive else v >= 0)):
        expected = "positive (a finite number > 0)" if positive else "a finite number >= 0"
        raise ValueError(f"{who}: {name} must be {expected}, got {value!r}")
    return v


def check_count(value, who, name, minimum=1):
    """``int(value)`` for an integer >= ``minimum`` (not a bool), else TypeError / ValueError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{who}: {name} must be an integer >= {minimum}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{who}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_flag(value, who, name):
    """``bool(value)`` for True / False (numpy bools and the integers 0 and 1 too), else TypeError naming ``name``:
    a string such as ``"no"`` is truthy and would silently mean True."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"{who}: {name} must be True or False, got {value!r} ({type(value).__name__})")


def check_choice(value, choices, who, name):
    """``value`` when it is one of ``choices`` (strings), else ValueError naming ``name`` and the choices."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{who}: {name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_callable(func, who, name="func", what="a function of Symbols"):
    """``func`` when callable, else TypeError naming ``name``."""
    if not callable(func):
        raise TypeError(f"{who}: {name} must be callable ({what}), got {func!r} ({type(func).__name__})")
    return func


def check_executor(executor, who):
    """``executor`` when it is a symgrad Executor (from ``bind`` / ``simple_bind``), else TypeError."""
    from symgrad.executor import Executor

    if not isinstance(executor, Executor):
        raise TypeError(
            f"{who}: executor must be a symgrad Executor (from sym.bind or sym.simple_bind), got "
            f"{type(executor).__name__}"
        )
    return executor


def host_array(value, who, what, name, allow_complex=True):
    """A numeric host (numpy) array of ``value``: TypeError / ValueError naming ``what`` ``name`` otherwise."""
    arr = _to_host(value, who, what, name)
    return check_kind(arr, who, what, name, allow_complex=allow_complex)
