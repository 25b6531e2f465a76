"""The operator registry: one ``OpDef`` per operator, one registration per op, below the graph.

An ``OpDef`` holds everything symgrad knows about an operator, a few lines
apart: its MXNet name, input/aux/output names, a typed parameter schema that
also parses the strings MXNet writes into symbol JSON, shape and dtype rules,
a pure ``forward(xp, *inputs, **params)`` and a ``gradient(F, node, out_grads)``
that returns Symbols built through ``F`` (the symbol-level op namespace), so
this package never imports ``symgrad.symbol``.
"""

from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import ParamError, ShapeError

__all__ = [
    "Param",
    "OpDef",
    "Decision",
    "register",
    "get_op",
    "adjoint_shape",
    "wait_for_first_input",
    "literal",
    "list_ops",
    "REQUIRED",
    "acc_dtype",
    "host_array",
    "check_float",
    "float_inputs",
    "as_shape",
    "parse_shape",
    "parse_dtype_attr",
    "DTYPE_TO_MX",
]


class _Required:
    def __repr__(self):
        return "REQUIRED"


REQUIRED = _Required()

_DTYPES = {
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "uint8": np.uint8,
    "int8": np.int8,
    "int32": np.int32,
    "int64": np.int64,
    "bool": np.bool_,
}


#: Bounds on an attribute string handed to ``ast.literal_eval``: the parser recurses once per bracket and
#: per unary sign, so ``"-" * 3000 + "1"`` would raise RecursionError (or MemoryError) instead of a
#: ParamError. No MXNet attribute comes near these.
_MAX_LITERAL_CHARS = 100_000
_MAX_LITERAL_DEPTH = 32


def _literal_too_deep(text: str) -> bool:
    depth = run = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            if depth > _MAX_LITERAL_DEPTH:
                return True
        elif ch in ")]}":
            depth -= 1
        if ch in "+-~":
            run += 1
            if run > _MAX_LITERAL_DEPTH:
                return True
        elif not ch.isspace():
            run = 0
    return False


#: parsed attribute strings whose value is immutable ("(3, 3)", "1e-05"): a model file repeats a few dozen
#: strings thousands of times, and ``ast.literal_eval`` compiles each one
_LITERALS: dict[str, Any] = {}
_LITERALS_MAX = 4096
_IMMUTABLE = (int, float, bool, str, type(None))


def literal(text: str) -> Any:
    """A Python literal parsed from ``text``, or ``text`` itself when it is none (the caller then
    reports the parameter). Over-long or deeply nested text is never handed to the parser."""
    try:
        return _LITERALS[text]
    except KeyError:
        pass
    value = _parse_literal(text)
    if len(_LITERALS) < _LITERALS_MAX and (
        isinstance(value, _IMMUTABLE) or (type(value) is tuple and all(isinstance(e, _IMMUTABLE) for e in value))
    ):
        _LITERALS[text] = value
    return value


def _parse_literal(text: str):
    if len(text) > _MAX_LITERAL_CHARS or _literal_too_deep(text):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _short(value) -> str:
    """``repr(value)``, cut to 80 characters for error messages."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Param:
    """A typed operator parameter.

    ``kind`` is one of ``int``, ``float``, ``bool``, ``str``, ``shape`` (tuple of
    ints), ``axis`` (int, tuple of ints or None), ``floats`` (a non-empty tuple of
    numbers; one number is a 1-tuple: MXNet's ``Tuple<float>``), ``dtype`` and ``any``.
    ``optional=True`` admits ``None`` (MXNet's ``dmlc::optional``). Values may
    be Python values or the strings MXNet writes into symbol JSON.
    """

    __slots__ = ("kind", "default", "optional", "choices", "doc")

    def __init__(self, kind: str, default: Any = REQUIRED, *, optional: bool = False, choices=None, doc=""):
        self.kind = kind
        self.default = default
        self.optional = optional or default is None
        self.choices = tuple(choices) if choices else None
        self.doc = doc

    def parse(self, value, where: str, pname: str):
        """``value`` (a Python value or MXNet's attribute string) as this parameter's type, in three phases:
        text to a Python value, None for optional parameters, then the parser of ``kind`` (``_PARSERS``)."""

        def bad(expected):
            return ParamError(f"{where}: parameter {pname!r} expects {expected}, got {_short(value)}")

        v = self._from_text(value)
        if v is None:
            if self.optional:
                return None
            raise bad(f"a {self.kind}")
        parser = _PARSERS.get(self.kind)
        v = v if parser is None else parser(v, bad)
        if self.kind == "str":
            self._check_choice(v, where, pname)
        return v

    def _from_text(self, value):
        """An attribute string as a Python value: ``"None"`` and ``""`` are None, the numeric and tuple kinds
        (``_LITERAL_KINDS``) read a Python literal; ``str`` keeps every string, other kinds keep it for their
        parser (``"True"``, ``"float32"``)."""
        if not isinstance(value, str) or self.kind == "str":
            return value
        text = value.strip()
        if text in ("None", ""):
            return None
        return literal(text) if self.kind in _LITERAL_KINDS else value

    def _check_choice(self, v, where: str, pname: str) -> None:
        """``choices`` restrict ``str`` parameters (an enum such as ``act_type``); other kinds ignore them."""
        if self.choices and v not in self.choices:
            raise ParamError(f"{where}: parameter {pname!r} must be one of {list(self.choices)}, got {v!r}")


# -- Param.parse: one parser per kind ---------------------------------------------------------------------
# Each takes the value after ``Param._from_text`` (never None) and ``bad(expected)``, which builds the
# ParamError naming the op, the parameter and the value as given; it returns the parsed value or raises.

#: kinds whose attribute strings are Python literals (``"(3, 3)"``, ``"1e-05"``); ``bool`` and ``dtype``
#: read their own spellings (``"True"``, ``"float32"``) and ``str`` keeps the text
_LITERAL_KINDS = frozenset(("shape", "axis", "int", "float", "floats", "any"))


def _is_int(v) -> bool:
    """A Python/numpy int, not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_number(v) -> bool:
    """A Python/numpy int or float, not a bool."""
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _parse_int(v, bad) -> int:
    # an integral float (``2.0``, ``"2.0"``) counts as its int; a bool is no int
    if _is_int(v) or (isinstance(v, (float, np.floating)) and float(v).is_integer()):
        return int(v)
    raise bad("an int")


def _parse_float(v, bad) -> float:
    if isinstance(v, str) and v.strip().lower().lstrip("+-") in ("inf", "infinity", "nan"):
        return float(v)  # how MXNet (and param_to_str) write non-finite values: "-inf", "nan"
    if not _is_number(v):
        raise bad("a number")
    return float(v)


def _parse_bool(v, bad) -> bool:
    if isinstance(v, str):
        low = v.strip().lower()
        if low in ("true", "1"):
            return True
        if low in ("false", "0"):
            return False
        raise bad("a bool ('True'/'False')")
    if isinstance(v, (bool, np.bool_, int, np.integer)) and int(v) in (0, 1):
        return bool(v)
    raise bad("a bool")


def _parse_str(v, bad) -> str:
    if not isinstance(v, str):
        raise bad("a string")
    return v


def _int_tuple(v) -> tuple | None:
    """A list or tuple of ints as a tuple of Python ints, else None."""
    if isinstance(v, (list, tuple)) and all(_is_int(i) for i in v):
        return tuple(int(i) for i in v)
    return None


def _parse_shape(v, bad) -> tuple:
    # one int is a 1-d shape
    shape = (int(v),) if _is_int(v) else _int_tuple(v)
    if shape is None:
        raise bad("a tuple of ints")
    return shape


def _parse_axis(v, bad):
    # one int stays an int (one axis); a tuple names several
    axis = int(v) if _is_int(v) else _int_tuple(v)
    if axis is None:
        raise bad("an int or a tuple of ints")
    return axis


def _parse_floats(v, bad) -> tuple:
    v = (v,) if _is_number(v) else v  # MXNet's Tuple<float> takes one number as a 1-tuple
    if not isinstance(v, (list, tuple)) or not v or not all(_is_number(e) for e in v):
        raise bad("a number or a non-empty tuple of numbers")
    return tuple(float(e) for e in v)


def _parse_dtype(v, bad) -> np.dtype:
    if isinstance(v, str) and v in _DTYPES:
        return np.dtype(_DTYPES[v])
    try:
        dt = np.dtype(v)
    except TypeError:
        dt = None
    if dt is None or dt.name not in _DTYPES:
        raise bad(f"a dtype name (one of {sorted(_DTYPES)})")
    return dt


#: the parser of each kind; ``any`` (and a kind not listed) passes the value through
_PARSERS: dict[str, Callable[[Any, Callable], Any]] = {
    "int": _parse_int,
    "float": _parse_float,
    "bool": _parse_bool,
    "str": _parse_str,
    "shape": _parse_shape,
    "axis": _parse_axis,
    "floats": _parse_floats,
    "dtype": _parse_dtype,
}


_PLAIN = (str, int, bool, type(None))


def params_key(kwargs: dict):
    """A hashable key that tells every distinct set of plain parameter values apart (strings, ints, bools,
    None, floats by their bits -- -0.0 is not 0.0 --, tuples of ints), or None when a value is anything else."""
    key = []
    for k, v in kwargs.items():
        t = type(v)
        if t in _PLAIN or (t is tuple and all(type(e) is int for e in v)):
            key.append((k, t, v))
        elif t is float:
            key.append((k, t, v.hex()))
        else:
            return None
    return tuple(key)


def param_to_str(value) -> str:
    """How MXNet writes a parameter value into attributes / JSON."""
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, type) and issubclass(value, np.generic):
        return np.dtype(value).name
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(str(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)


@dataclass(frozen=True)
class Decision:
    """A discrete choice an op's forward makes from its inputs, one per *site* (element of ``choice``).

    A relu input within rounding of 0, or a max-pool window whose two largest values nearly tie, can be
    decided differently in float32 and float64; the outputs (and, more so, the gradients: a flipped relu
    mask moves a whole gradient row) then differ by far more than rounding. ``test_utils.decisions``
    compares the choices of two runs and pins the differing sites by value through these records.

    Attributes:
        inputs: the input positions the choice is made from; pinning a site overwrites their elements in
            its support.
        choice: array of discrete choices (bool or int), e.g. ``x > 0`` or a window's argmax tap.
        value: array of the shape of ``choice``: the quantity compared with the switch point, for reports
            (relu's ``x``, ``a - b`` for maximum, the gap between a window's two largest values).
        support: ``support(site) -> tuple of index expressions``, one per entry of ``inputs``, selecting the
            input elements site ``site`` (an index tuple of ``choice``) reads; None means elementwise: the
            element of each input broadcast to ``choice``'s shape (``broadcast_support``).
    """

    inputs: tuple
    choice: Any
    value: Any
    support: Callable | None = None

    def sites_of(self, shapes) -> Callable:
        """``support`` or, for elementwise choices, ``broadcast_support`` over the given input shapes."""
        if self.support is not None:
            return self.support
        picked = [tuple(shapes[i]) for i in self.inputs]
        return lambda site: tuple(broadcast_support(site, s) for s in picked)


def broadcast_support(site, shape) -> tuple:
    """The element of an input of ``shape`` that numpy broadcasting reads at output index ``site``."""
    site = tuple(site)[len(site) - len(shape) :] if shape else ()
    return tuple(0 if d == 1 else int(i) for i, d in zip(site, shape))


def elementwise(*inputs: int, choice, value) -> list:
    """The one-``Decision`` list of an elementwise op (helper for ``decisions`` rules)."""
    return [Decision(tuple(inputs), choice, value)]


def masked(xp, x, mask):
    """``x`` where ``mask``, else 0, NaN passing everywhere: a relu on a recorded mask (helper for ``pinned``
    rules). ``x * mask`` takes a third of the time of ``where(mask | isnan(x), x, 0)`` on large arrays (a
    pinned relu runs in every evaluation of a whole-model check); ``+ 0.0`` turns ``-0.0`` into forward's
    ``0.0``; only +-inf where the mask is off (inf * 0 = NaN) need the fix, found by one read."""
    with np.errstate(invalid="ignore"):
        y = xp.multiply(x, mask, dtype=x.dtype)
    y += 0.0
    if not bool(xp.isfinite(y).all()):
        y[xp.isinf(x) & ~mask] = 0
    return y


@dataclass
class OpDef:
    """Everything about one operator. See module docstring."""

    name: str
    forward: Callable
    infer_shape: Callable
    gradient: Callable | None = None
    inputs: Sequence[str] | Callable = ("data",)
    aux: Sequence[str] = ()
    params: dict = field(default_factory=dict)
    num_outputs: int | Callable = 1
    num_visible: int | Callable | None = None
    output_names: Sequence[str] | Callable | None = None
    infer_type: Callable | None = None
    needs_is_train: bool = False
    mutates_aux: bool = False
    is_loss: bool | Callable = False  # backward ignores the head gradient
    variadic: str | None = None  # name of the param holding the input count (num_args)
    no_grad_inputs: Sequence[str] = ()  # integer/index inputs: never differentiated
    grad_undefined_reason: str | None = None
    extra_params: bool = False  # accept any further keyword as a string parameter (Custom)
    prepare: Callable | None = None  # prepare(params, node_name) -> params, at symbol creation
    # forward also takes ``out=``: an array to write its single output into and return (it may
    # return a fresh array instead when it cannot use ``out``)
    accepts_out: bool = False
    # decisions(xp, *inputs, **params) -> list of Decision: the discrete choices forward makes from its
    # inputs (relu's mask, a max-pool window's argmax); None for ops without any (see ``Decision``)
    decisions: Callable | None = None
    # pinned(xp, choices, *inputs, **params) -> forward's outputs on the piece that ``choices`` (the ``choice``
    # arrays of ``decisions``, recorded at a base point) selects: relu's ``where(mask, x, 0)``, max pooling's
    # value at the recorded tap. That piece is the smooth function the backward differentiates at the base
    # point, so the numeric checkers evaluate it (``test_utils.decisions.pinned_symbol``) and a finite
    # difference never crosses a kink the forward did not choose. None: the decisions cannot be pinned.
    pinned: Callable | None = None
    # specialize(xp, in_types, **params) -> None or ``(fn, pre, post)``: a cheaper exact equivalent of forward for
    # the input dtypes inferred at bind, ``forward(xp, *inputs, **params) == fn(*pre, *inputs, *post)`` (``fn``
    # None: the first input itself); the executor's plan calls it (``executor.plan._kernel``). None: none.
    specialize: Callable | None = None
    # implied_loss(params, inputs, output) -> loss(inputs, output) -> (value, magnitude): for a loss head
    # (``is_loss``), the scalar whose gradient its backward returns whatever the head gradient (SoftmaxOutput's
    # cross-entropy). The numeric checkers differentiate it in place of a projection of the head's output
    # (``test_utils.objectives``). The factory gets the node's parsed params and its inputs and output at the
    # base point (float64 numpy) and freezes there what the loss holds constant (targets, counts, active
    # hinge terms); ``loss`` gets the perturbed inputs and output, ``magnitude`` is the sum of the absolute
    # terms (the rounding scale). None: the checkers refuse to differentiate through the head.
    implied_loss: Callable | None = None
    # a sampling op (its output is a fresh random draw): the numeric gradient checkers refuse symbols holding one
    is_random: bool = False
    # ``needs_out_shape(params) -> bool`` (or a bool): the parameters leave the output shape open, to be filled
    # by inference from the op's consumers (a creation op's unknown dimensions, ``_arange(infer_range=True)``);
    # forward then also takes ``out_shape=``, the tuple of its output shapes inferred at bind, which the
    # executor's plan binds with the parameters (it refuses to bind such a node whose shape stays unknown)
    needs_out_shape: bool | Callable = False
    doc: str = ""

    # -- parameters ---------------------------------------------------------
    def parse_params(self, kwargs: dict, where: str) -> dict:
        unknown = [k for k in kwargs if k not in self.params]
        if unknown and self.extra_params:
            extra = {k: kwargs[k] if isinstance(kwargs[k], str) else param_to_str(kwargs[k]) for k in unknown}
            known = {k: v for k, v in kwargs.items() if k in self.params}
            return {**self.parse_params(known, where), **extra}
        if unknown:
            raise ParamError(
                f"{where}: unknown parameter {unknown[0]!r} for operator {self.name}; "
                f"valid parameters: {sorted(self.params) or 'none'}"
            )
        out = {}
        for pname, spec in self.params.items():
            if pname in kwargs:
                out[pname] = spec.parse(kwargs[pname], where, pname)
            elif spec.default is REQUIRED:
                raise ParamError(f"{where}: required parameter {pname!r} of {self.name} is missing")
            else:
                out[pname] = spec.default
        return out

    def parse_params_and_strings(self, kwargs: dict, where: str) -> tuple[dict, dict]:
        """``(parse_params(kwargs), the attribute strings of the given values)``, fresh dicts, remembered per op
        for plain values (``params_key``): gradient rules hand every node's parsed parameters to the nodes
        they make (a convolution's eleven, for each of its gradient nodes)."""
        key = params_key(kwargs) if self.prepare is None and not self.extra_params else None
        cache = self.__dict__.setdefault("_parsed", {}) if key is not None else None
        hit = cache.get(key) if cache is not None else None
        if hit is None:
            strings = {k: v if isinstance(v, str) else param_to_str(v) for k, v in kwargs.items()}
            hit = (self.parse_params(kwargs, where), strings)
            if cache is not None and len(cache) < 512:
                cache[key] = hit
        return dict(hit[0]), dict(hit[1])

    # -- structure ----------------------------------------------------------
    def list_inputs(self, params: dict) -> list[str]:
        if self.variadic and not callable(self.inputs):
            return [f"arg{i}" for i in range(params[self.variadic])]
        names = self.inputs(params) if callable(self.inputs) else self.inputs
        return list(names)

    def fixed_input_names(self) -> tuple | None:
        """Input and auxiliary names when no parameter changes them (``list_inputs + list_aux`` for any
        params), else None; computed once."""
        names = self.__dict__.get("_fixed_names", False)
        if names is False:
            inputs, aux = self.inputs, self.aux
            if callable(inputs) or callable(aux) or self.variadic or self.extra_params:
                names = None
            else:
                names = (*inputs, *aux)
            self.__dict__["_fixed_names"] = names
        return names

    def list_aux(self, params: dict) -> list[str]:
        return list(self.aux(params) if callable(self.aux) else self.aux)

    def loss_head(self, params: dict) -> bool:
        return bool(self.is_loss(params) if callable(self.is_loss) else self.is_loss)

    def n_outputs(self, params: dict) -> int:
        return self.num_outputs(params) if callable(self.num_outputs) else self.num_outputs

    def n_visible(self, params: dict) -> int:
        nv = self.num_visible
        if nv is None:
            return self.n_outputs(params)
        return nv(params) if callable(nv) else nv

    def list_output_names(self, params: dict, visible_only: bool = True) -> list[str]:
        """Output suffixes: ``output`` alone, the op's own names, or ``output<i>``."""
        n = self.n_visible(params) if visible_only else self.n_outputs(params)
        names = self.output_names
        if names is not None:
            names = names(params) if callable(names) else names
            return list(names)[:n]
        if self.n_outputs(params) == 1:
            return ["output"]
        return [f"output{i}" for i in range(n)]


_REGISTRY: dict[str, OpDef] = {}


def register(name: str, *, aliases: Sequence[str] = (), **spec) -> OpDef:
    """Register one operator; returns its OpDef. Each name is registered once."""
    op = OpDef(name=name, **spec)
    for n in (name, *aliases):
        if n in _REGISTRY:
            raise RuntimeError(f"operator {n!r} registered twice")
        _REGISTRY[n] = op
    return op


#: The modules whose import registers symgrad's own operators: the op families and ``Custom``. The registry
#: sits below them (they import it), so it loads them by name on the first lookup, as a plugin table loads
#: its entry points: ``Variable("x") + 1`` works however little of symgrad was imported before.
BUILTIN_OPS = ("symgrad.ops", "symgrad.operator", "symgrad.control_flow")
_builtins_loaded = False


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True  # set first: the families look ops up while they register
        for module in BUILTIN_OPS:
            importlib.import_module(module)


def get_op(name: str) -> OpDef:
    op = _REGISTRY.get(name)
    if op is None:
        _load_builtins()
        op = _REGISTRY.get(name)
    if op is None:
        raise ParamError(f"unknown operator {name!r}")
    return op


def list_ops() -> dict[str, OpDef]:
    _load_builtins()
    return dict(_REGISTRY)


# -- shared shape and dtype rules ---------------------------------------------


def check_at_least(params, pname: str, low: int, where: str) -> None:
    """Parameter ``pname`` (a count or a size) must be at least ``low``: else a ParamError naming it."""
    if params[pname] < low:
        raise ParamError(f"{where}: parameter {pname!r} must be >= {low}, got {params[pname]}")


def shape_conflict(where: str, what: str, a, b) -> ShapeError:
    return ShapeError(f"{where}: shape mismatch for {what}: {tuple(a)} vs {tuple(b)}")


def same_shape(params, in_shapes, out_shapes, where="op"):
    """All inputs and outputs share one shape; fills any unknown one from a known one."""
    known = None
    for s in (*in_shapes, *out_shapes):
        if s is None or s is known:
            continue
        if known is None:
            known = s
        elif tuple(s) != tuple(known):
            raise ShapeError(f"{where}: inputs must have the same shape, got {tuple(known)} and {tuple(s)}")
    if known is None:
        return in_shapes, out_shapes
    s = tuple(known)
    return [s] * len(in_shapes), [s] * len(out_shapes)


def like_input(k: int) -> Callable:
    """Shape rule: the output has the shape of input ``k`` (a hidden gradient op's ``like`` or ``data``), once
    that is known."""

    def rule(params, in_shapes, out_shapes, where):
        like = in_shapes[k]
        return in_shapes, [like] if like is not None else out_shapes

    return rule


#: the output has the shape of input 1, once that is known
like_input1 = like_input(1)


def output_like(k: int) -> Callable:
    """Shape or dtype rule of a one-output op whose output is shaped (or typed) as its input ``k`` is: the
    inputs come back unchanged and the output is input ``k``'s entry as it stands (None while unknown)."""

    def rule(params, ins, outs, where):
        return ins, [ins[k]]

    return rule


def wait_for_inputs(*positions: int) -> Callable[[Callable], Callable]:
    """Decorator for a shape rule ``rule(params, in_shapes, out_shapes, where)`` that starts from the shapes of
    its inputs at ``positions`` (all its inputs when none are named): while one of them is unknown (None) the
    rule infers nothing and the shapes come back unchanged; once all are known, ``rule`` runs (with the same
    arguments and the same name)."""

    def decorate(rule: Callable) -> Callable:
        @functools.wraps(rule)
        def infer_shape(params, in_shapes, out_shapes, where):
            if any(in_shapes[k] is None for k in positions or range(len(in_shapes))):
                return in_shapes, out_shapes
            return rule(params, in_shapes, out_shapes, where)

        return infer_shape

    return decorate


def wait_for_first_input(rule: Callable) -> Callable:
    """``wait_for_inputs(0)``: a shape rule that starts from its first input's shape runs once that is known."""
    return wait_for_inputs(0)(rule)


def expect_input_shape(ins: list, k: int, name: str, want, where: str, note: str = "") -> None:
    """Input ``k`` (``name``) of a shape rule must have the shape ``want``: a known other shape is a ShapeError
    (``note`` follows the expected shape in it), an unknown one is filled in (``ins`` is changed in place)."""
    want = tuple(want)
    if ins[k] is not None and tuple(ins[k]) != want:
        raise ShapeError(f"{where}: input {name!r} has shape {tuple(ins[k])}, expected {want}{note}")
    ins[k] = want


def adjoint_shape(primal: str, primal_inputs: Sequence[int], like: int) -> Callable:
    """Shape rule of a hidden adjoint op ``(ograd, ...) -> an array shaped like input ``like```` whose input 0,
    ``ograd``, is a cotangent of ``primal``'s output at its inputs ``primal_inputs`` (taking the adjoint's own
    parameters): ``ograd`` must have that output's shape (filled in when unknown), so a mis-shaped one is a
    ShapeError naming the op, not a numpy error or a wrong result (``_take_scatter`` is take's adjoint)."""

    def rule(params, in_shapes, out_shapes, where):
        ins = list(in_shapes)
        args = [ins[k] for k in primal_inputs]
        if all(a is not None for a in args):
            op = get_op(primal)
            full = {k: spec.default for k, spec in op.params.items()} | dict(params)
            want = op.infer_shape(full, args, [None] * op.n_outputs(full), where)[1][0]
            if want is not None:
                inputs = ", ".join(str(tuple(a)) for a in args)
                expect_input_shape(
                    ins, 0, "ograd", want, where, f" (the shape of {primal}'s output for inputs {inputs})"
                )
        return ins, [ins[like]] if ins[like] is not None else out_shapes

    return rule


def same_type(params, in_types, out_types, where="op"):
    """All inputs and outputs share one dtype."""
    known = None
    for t in (*in_types, *out_types):
        if t is not None:
            known = t
            break
    if known is None:
        return in_types, out_types
    for t in in_types:
        if t is not None and t is not known and t != known:  # identity first: dtype equality is slow
            raise TypeError(f"{where}: inputs must have the same dtype, got {np.dtype(known)} and {np.dtype(t)}")
    return [known] * len(in_types), [known] * len(out_types)


def host_array(a) -> np.ndarray:
    """``a`` as a numpy array on the host (a CuPy array is copied over): for ops whose kernels are numpy loops
    (box and ROI bookkeeping, NMS)."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def acc_dtype(dtype) -> np.dtype:
    """The dtype an op computes and accumulates in: float16 works in float32 (as MXNet's kernels and cuDNN
    do), every other dtype in itself."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def check_float(where: str, name: str, dtype) -> None:
    """Raise a TypeError naming the op and input for integer/bool data (MXNet: "This operation only
    support floating point types"). Complex passes: test_utils' complex-step differences run the
    float kernels on complex arrays."""
    if dtype is not None and np.dtype(dtype).kind not in "fc":
        raise TypeError(f"{where}: input {name!r} must be float16, float32 or float64, got {np.dtype(dtype)}")


def float_inputs(*names: str, rule: Callable | None = None) -> Callable:
    """dtype rule of an op that only computes in floating point (MXNet: "This operation only
    support floating point types"): the leading inputs ``names`` must be float, then ``rule``
    (default ``same_type``) runs."""

    def infer(params, in_types, out_types, where="op"):
        for name, t in zip(names, in_types):
            check_float(where, name, t)
        return (rule or same_type)(params, in_types, out_types, where)

    return infer


def broadcast_shapes(a, b, where: str):
    """numpy broadcasting of two shapes, with an error naming the op."""
    try:
        return tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    except ValueError:
        raise ShapeError(f"{where}: shapes {tuple(a)} and {tuple(b)} cannot be broadcast together") from None


def normalize_axis(axis, ndim: int, where: str, pname: str = "axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f"{where}: parameter {pname!r}={axis} is out of range for a {ndim}-d input")
    return axis % max(ndim, 1)


def data_axis(x, axis, where: str) -> int:
    """Parameter ``axis`` normalised against the shape ``x`` of input 'data', which must be at least 1-d."""
    if len(x) == 0:
        raise ShapeError(f"{where}: input 'data' must be at least 1-d")
    return normalize_axis(axis, len(x), where)


# -- shape and dtype attributes (``__shape__``, ``__dtype__``) -------------------------------------------


def _is_dim(d) -> bool:
    """An int dimension: Python/numpy ints, not bools (``True`` is no size) and not floats."""
    return isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_))


def as_shape(value, what):
    """``value`` as a shape tuple: an int or a tuple/list of ints, nothing else.

    Strings (``"23"``, ``"(2,3)"``), floats (``2.7``) and bools are refused rather than coerced.
    """
    if _is_dim(value):
        shape = (int(value),)
    elif isinstance(value, (tuple, list)) and all(_is_dim(d) for d in value):
        shape = tuple(int(d) for d in value)
    else:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise TypeError(f"{what}: a shape must be an int or a tuple of ints, got {shown}")
    if any(d < 0 for d in shape):
        raise ShapeError(f"{what}: shape {shape} has a negative dimension")
    return shape


def parse_shape(text):
    """A ``__shape__`` attribute (``"(2, 3)"``) as a shape tuple."""
    value = literal(text) if isinstance(text, str) else text
    return as_shape(value, "__shape__ attribute")


# MXNet's dtype codes, as ``mx.sym.Variable`` writes them into ``__dtype__`` (``_DTYPE_NP_TO_MX``)
DTYPE_TO_MX = {
    "float32": 0,
    "float64": 1,
    "float16": 2,
    "uint8": 3,
    "int32": 4,
    "int8": 5,
    "int64": 6,
    "bool": 7,
    "int16": 8,
    "uint16": 9,
    "uint32": 10,
    "uint64": 11,
}
_MX_TO_DTYPE = {str(v): k for k, v in DTYPE_TO_MX.items()}


def parse_dtype_attr(text) -> np.dtype:
    """A ``__dtype__`` attribute as a numpy dtype: MXNet's code (``"0"``) or a dtype name (``"float32"``)."""
    text = str(text).strip()
    try:
        return np.dtype(_MX_TO_DTYPE.get(text, text))
    except TypeError:
        raise TypeError(f"__dtype__ attribute {text!r} is neither an MXNet dtype code nor a numpy dtype name") from None
