"""The Executor: bound arrays + a compiled plan (MXNet's ``Executor``).

Arrays are plain numpy (cpu) or CuPy (gpu) arrays used by reference: a write
into ``exe.arg_dict["x"]`` is seen by the next forward, and gradients land in
the caller's ``args_grad`` arrays. Every input is validated before anything
is written, and gradients are applied only after the whole backward ran, so a
call that raises leaves every bound and user array as it was.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import gc
import math
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import numpy as np

from ..base import AllocationError, BindError, DTypeError, ShapeError, SymgradError
from ..context import Array, Context, array_context, current_context, to_numpy
from ..graph import Node
from ..infer import infer_shapes, infer_types, where
from ..opdef import as_shape, parse_dtype_attr
from ..symbol import BindArrays, GradReq, OutGrads, Shape, ShapeLike, Symbol
from .placement import Placement, check_group2ctx, ctx_group, forward_owners, place
from .plan import Plan, annotate, failing_instr, run_instrs
from .report import cse_enabled, debug_listing, optimized_symbol, peak_bytes, slot_sizes

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..symbol import BoundExecutor

__all__ = ["Executor", "simple_bind", "normalize_grad_req"]

_REQS = ("write", "add", "null", "inplace")

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _gc_paused(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``fn`` with the cyclic garbage collector paused.

    Binding allocates many small objects that all stay alive; collections triggered
    meanwhile only rescan them (about a quarter of the bind time of a 10 000-node chain).
    """

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return run


class _NamedDict(dict):
    """A dict whose missing-key error lists the valid keys (``grad_dict['fc_wieght']``)."""

    def __init__(self, items, what):
        super().__init__(items)
        self._what = what

    def __missing__(self, key):
        raise KeyError(f"{key!r} is not {self._what}; valid names: {sorted(self)}{_nearest(key, self)}")


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _warn_user(text: str) -> None:
    """A UserWarning attributed to the first caller outside symgrad (bind is reached by several paths)."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 2  # stacklevel 1 is this function, 2 its caller
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    warnings.warn(text, UserWarning, stacklevel=level)


def normalize_grad_req(grad_req: GradReq, names: Iterable[str], who: str = "bind") -> dict[str, str]:
    """grad_req as str / list / dict -> ``{name: 'write'|'add'|'null'}`` ('inplace' counts as 'write').

    Names missing from a dict get 'null'; unknown names, wrong lengths and unknown values are errors.
    """
    names = list(names)
    if isinstance(grad_req, str):
        reqs = {n: grad_req for n in names}
    elif isinstance(grad_req, (list, tuple)):
        if len(grad_req) != len(names):
            raise BindError(
                f"{who}: grad_req has {len(grad_req)} entries but the symbol has {len(names)} arguments {names}"
            )
        reqs = dict(zip(names, grad_req))
    elif isinstance(grad_req, dict):
        unknown = [k for k in grad_req if k not in names]
        if unknown:  # MXNet ignores them (its tests give a request for an absent bias)
            _warn_user(
                f"{who}: grad_req names {unknown}, which are not arguments{_nearest(unknown[0], names)}; ignored, "
                f"as MXNet does (arguments: {names})"
            )
        reqs = {n: grad_req.get(n, "null") for n in names}
    else:
        raise TypeError(f"{who}: grad_req must be a str, list or dict, got {type(grad_req).__name__}")
    for n, r in reqs.items():
        if r not in _REQS:
            raise BindError(f"{who}: grad_req for argument {n!r} must be one of 'write', 'add', 'null', got {r!r}")
    return {n: ("write" if r == "inplace" else r) for n, r in reqs.items()}


#: dtype kinds an executor computes with: bool, signed/unsigned int, float, complex (complex-step checks)
_NUMERIC_KINDS = "biufc"


def _nearest(name, valid) -> str:
    """`` (did you mean 'fc_weight'?)`` for the closest valid name, or ``''``."""
    close = difflib.get_close_matches(str(name), [str(v) for v in valid], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _unknown_name_error(what, name, valid, kind="an argument"):
    return BindError(
        f"{what}: {name!r} is not {kind} of this symbol{_nearest(name, valid)}; valid names: {list(valid)}"
    )


def _check_numeric(dtype, name, what):
    """TypeError naming ``name`` unless ``dtype`` is bool, int, float or complex."""
    dtype = np.dtype(dtype)
    if dtype.kind not in _NUMERIC_KINDS:
        raise DTypeError(f"{what}: {name!r} has dtype {dtype}; expected a numeric (bool, int, float or complex) array")


def _writable(arr) -> bool:
    """Whether ``arr`` may be written (CuPy arrays have no read-only flag)."""
    return bool(getattr(getattr(arr, "flags", None), "writeable", True))


def _check_writable(arr, name, what):
    if not _writable(arr):
        raise BindError(
            f"{what}: the array for {name!r} is read-only (flags.writeable is False), but this call "
            "writes into it; pass a writeable array"
        )


def _check_array(arr, name, what, ctx, allow_none=False):
    if arr is None:
        if allow_none:
            return None
        raise BindError(f"{what}: argument {name!r} is missing")
    dev = array_context(arr)
    if dev is None:
        raise TypeError(f"{what}: {name!r} must be a numpy (cpu) or CuPy (gpu) array, got {type(arr).__name__}")
    if not _on(dev, ctx):
        raise BindError(f"{what}: array for {name!r} lives on {dev}, but the executor is bound to {ctx}")
    _check_numeric(arr.dtype, name, what)
    return arr


def _on(dev: Context, ctx: Context) -> bool:
    """Whether an array on ``dev`` can be used as it is by an executor on ``ctx`` (any cpu id is host memory)."""
    return dev == ctx or dev.device_type == ctx.device_type == "cpu"


def _arrays(given, names, what, ctx, required):
    """Normalise a list (in ``names`` order) or dict of arrays to a list aligned with names."""
    if given is None:
        if required and names:
            raise BindError(f"{what}: arrays are required for {names}")
        return [None] * len(names)
    if isinstance(given, dict):
        for k, v in given.items():
            # ``{'b': None}`` for an input the symbol does not have (``Convolution(x, w, None, no_bias=True)``):
            # absent, as MXNet reads it; an array for a name the symbol lacks stays an error (a misspelling)
            if k not in names and v is not None:
                raise _unknown_name_error(what, k, names, "an auxiliary state" if "aux" in what else "an argument")
        out = []
        for n in names:
            if n not in given and required:
                raise BindError(f"{what}: argument {n!r} is missing (got {sorted(given)})")
            out.append(_check_array(given.get(n), n, what, ctx, allow_none=not required))
        return out
    if isinstance(given, (list, tuple)):
        if len(given) != len(names):
            raise BindError(f"{what}: got a list of {len(given)} arrays, but the symbol has {len(names)}: {names}")
        return [_check_array(a, n, what, ctx, allow_none=not required) for a, n in zip(given, names)]
    raise TypeError(f"{what} must be a list or a dict of arrays, got {type(given).__name__}")


class _naming_bound_inputs:
    """Context manager: a shape/dtype error raised while binding also names the bound arrays that feed
    the op it names (``... ; bound inputs: 'x' (2, 4) float64``), so the message points at the argument
    to fix and not only at the op. The exception keeps its type."""

    def __init__(self, nodes, bound):
        self._nodes, self._bound = nodes, bound

    def __enter__(self):
        return self

    def __exit__(self, typ, exc, tb):
        if exc is None or not isinstance(exc, (ShapeError, TypeError)) or not exc.args:
            return False
        msg = str(exc.args[0])
        culprit = next((n for n in self._nodes if n.op is not None and msg.startswith(where(n))), None)
        feeding = [src for src, _ in culprit.inputs if src in self._bound] if culprit is not None else []
        if feeding:
            names = ", ".join(
                f"{src.name!r} {tuple(self._bound[src].shape)} {self._bound[src].dtype}" for src in feeding
            )
            exc.args = (f"{msg}; bound inputs: {names}",) + exc.args[1:]
        return False


@dataclasses.dataclass
class Binding:
    """What an Executor runs, built once by ``bind`` (``bind_arrays``) or ``simple_bind``: the symbol's nodes, the
    arrays (the caller's, by reference; a gradient array is None where none is computed), the gradient requests
    normalised once, and the shape and dtype of every forward value."""

    symbol: Symbol
    ctx: Context
    nodes: list[Node]
    arg_nodes: list[Node]
    aux_nodes: list[Node]
    args: list[Array]
    grads: list[Array | None]
    aux: list[Array]
    reqs: dict[str, str]
    shapes: dict[tuple[int, int], Shape | None]
    types: dict[tuple[int, int], np.dtype]
    #: ``group2ctx`` validated (None: the whole graph on ``ctx``), and the contexts of inputs known beforehand
    group2ctx: dict[str, Context] | None = None
    input_contexts: dict[int, Context] | None = None


def bind_arrays(symbol, ctx, args, args_grad=None, grad_req="write", aux_states=None, group2ctx=None) -> Binding:
    """``bind``'s Binding: the given arrays validated against each other and the graph, then every forward value's
    shape and dtype inferred from them."""
    if not isinstance(symbol, Symbol):
        raise TypeError(f"bind: expected a Symbol, got {type(symbol).__name__}")
    ctx = current_context() if ctx is None else ctx
    if not isinstance(ctx, Context):
        raise TypeError(f"bind: ctx must be a Context such as sg.cpu(), got {ctx!r}")
    groups = check_group2ctx(group2ctx, ctx, "bind")
    nodes, arg_nodes, aux_nodes = symbol.arg_and_aux_nodes()
    arg_names, aux_names = [n.name for n in arg_nodes], [n.name for n in aux_nodes]
    arg_arrays = _arrays(args, arg_names, "bind args", ctx, required=True)
    grad_arrays = _arrays(args_grad, arg_names, "bind args_grad", ctx, required=False)
    aux_arrays = _arrays(aux_states, aux_names, "bind aux_states", ctx, required=True)
    reqs = normalize_grad_req(grad_req, arg_names)
    _check_grad_arrays(arg_names, arg_arrays, grad_arrays, reqs, isinstance(grad_req, dict) and args_grad is not None)
    for n, a in zip(aux_names, aux_arrays):  # training forwards write the auxiliary states
        _check_writable(a, n, "bind aux_states")
    known, types = _infer_bound(nodes, arg_nodes + aux_nodes, arg_arrays + aux_arrays)
    return Binding(
        symbol, ctx, nodes, arg_nodes, aux_nodes, arg_arrays, grad_arrays, aux_arrays, reqs, known, types, groups
    )


def _infer_bound(nodes, inputs, arrays):
    """Every forward value's shape and dtype from the arrays bound to ``inputs``; an error names the bound arrays
    that feed the op it names."""
    known: dict[tuple[int, int], Shape | None] = {(n.id, 0): tuple(a.shape) for n, a in zip(inputs, arrays)}
    bound = dict(zip(inputs, arrays))
    with _naming_bound_inputs(nodes, bound):
        infer_shapes(nodes, known)
        # and dtypes: an op that only computes in floating point names itself when bound to integer arrays
        types = infer_types(nodes, {(n.id, 0): np.dtype(a.dtype) for n, a in bound.items()})
    return known, types


def _check_grad_arrays(names, arg_arrays, grad_arrays, reqs, strict) -> None:
    """Gradient arrays against the requests (in place: 'null' where no array is given; with ``strict``, a grad_req
    dict next to args_grad, a missing array is an error) and their arguments. An array given for a 'null' request
    is kept and never written (MXNet 1.9.1's ``grad_dict`` holds it too)."""
    for i, n in enumerate(names):
        if reqs[n] == "null":
            continue
        elif grad_arrays[i] is None:
            if strict:
                raise BindError(f"bind: grad_req[{n!r}] is {reqs[n]!r} but args_grad has no array for {n!r}")
            reqs[n] = "null"
        elif grad_arrays[i].shape != arg_arrays[i].shape:
            raise ShapeError(
                f"bind: gradient array for {n!r} has shape {grad_arrays[i].shape}, "
                f"argument has shape {arg_arrays[i].shape}"
            )
        elif grad_arrays[i].dtype != arg_arrays[i].dtype:
            # a float gradient would be truncated into an int buffer, a complex one lose its imaginary part
            raise DTypeError(
                f"bind: gradient array for {n!r} has dtype {grad_arrays[i].dtype}, "
                f"argument has dtype {arg_arrays[i].dtype}"
            )
        else:
            _check_writable(grad_arrays[i], n, "bind args_grad")


class Executor:
    """Runs a bound symbol. Create it with ``Symbol.bind`` or ``Symbol.simple_bind``."""

    #: the bound arguments, in ``list_arguments()`` order (the caller's arrays, by reference)
    arg_arrays: list[Array]
    #: the gradient arrays, in ``list_arguments()`` order; None where no gradient is computed
    grad_arrays: list[Array | None]
    #: the bound auxiliary states, in ``list_auxiliary_states()`` order
    aux_arrays: list[Array]
    #: the outputs of the last forward (allocated at bind; an output whose shape depends on the data is None
    #: until the first forward)
    outputs: list[Array]

    @_gc_paused
    def __init__(
        self,
        symbol: Symbol,
        ctx: Context | None,
        args: BindArrays,
        args_grad: BindArrays | None = None,
        grad_req: GradReq = "write",
        aux_states: BindArrays | None = None,
        group2ctx: Mapping[str, Context] | None = None,
    ) -> None:
        self._start(bind_arrays(symbol, ctx, args, args_grad, grad_req, aux_states, group2ctx))

    @classmethod
    def from_binding(cls, binding: Binding) -> Executor:
        """The executor of a Binding already made (``simple_bind``'s)."""
        exe = cls.__new__(cls)
        exe._start(binding)
        return exe

    def _start(self, b: Binding) -> None:
        """Compile the plan of ``b`` and allocate the outputs."""
        symbol, ctx, nodes, arg_nodes, aux_nodes = b.symbol, b.ctx, b.nodes, b.arg_nodes, b.aux_nodes
        self._symbol = symbol
        self._ctx = ctx
        self._xp = ctx.xp  # imports CuPy only for gpu contexts
        self._arg_names = [n.name for n in arg_nodes]
        self._arg_positions = {n: k for k, n in enumerate(self._arg_names)}
        self._rerun_memo: dict = {}  # argument names -> (plan, positions, runner) of rerun_downstream
        self._aux_names = [n.name for n in aux_nodes]
        self._output_names = symbol.list_outputs()
        reqs, grad_arrays = b.reqs, b.grads
        self._reqs = reqs
        self.arg_arrays = b.args
        self.grad_arrays = grad_arrays
        self.aux_arrays = b.aux
        known, types = dict(b.shapes), b.types
        heads = list(symbol.output_entries())
        self._head_shapes = [known.get((n.id, i)) for n, i in heads]
        self._head_types = [types.get((n.id, i)) for n, i in heads]
        self._pending_aux: dict = {}
        with ctx.device_scope():  # the plan allocates its gradient buffers
            self._plan = Plan(
                heads,
                arg_nodes,
                aux_nodes,
                [reqs[n] != "null" for n in self._arg_names],
                self._xp,
                self._pending_aux,
                grad_like=grad_arrays,
                types=types,
                nodes=nodes,
                shapes=known,
            )
        # check the gradient graph's shapes too (errors here are bugs in a rule, named by node)
        for v, s in zip(self._plan.head_grad_nodes, self._head_shapes):
            known[(v.id, 0)] = s
        infer_shapes(self._plan.backward_nodes, known)  # forward nodes are already known
        self._shapes, self._types = known, types  # (debug_str's memory summary)
        self._arg_nodes, self._aux_nodes = arg_nodes, aux_nodes
        self._cse = cse_enabled()  # MXNET_ELIMINATE_COMMON_EXPR when bound (get_optimized_symbol)
        self._group2ctx = b.group2ctx
        self._placement = None if b.group2ctx is None else self._place(b.input_contexts or {})
        self._head_losses = [n.op is not None and n.op.loss_head(n.params) for n, _ in heads]
        self._vals: list[Any] | None = None
        self._last_is_train = False
        self._monitor: Callable[[str, Array], object] | None = None
        self._monitor_all = False
        self._value_hook: Callable[[Node, int, Array, str], Array] | None = None
        # set only while forward_with_hook runs
        self._input_hook: Callable[[Node, list[Array]], Sequence[Array | None] | None] | None = None
        # MXNet allocates the outputs at bind: ``exe.outputs`` may be read before the first forward (zeros
        # here), and every forward writes into these same arrays (a reference taken earlier sees new values).
        # An output whose shape depends on the data (boolean_mask) is None until the first forward.
        with ctx.device_scope():
            self.outputs = [
                None if s is None or t is None else self._xp.zeros(s, t)
                for s, t in zip(self._head_shapes, self._head_types)
            ]

    # -- views ------------------------------------------------------------------
    @property
    def arg_dict(self) -> dict[str, Array]:
        """``{argument name: bound array}`` (the arrays themselves: a write into one is seen by the next forward;
        ``arg_dict["x"][:] = v`` follows numpy's broadcasting, ``copy_params_from`` and ``forward(x=v)`` check
        shapes)."""
        return _NamedDict(zip(self._arg_names, self.arg_arrays), "an argument")

    @property
    def grad_dict(self) -> dict[str, Array | None]:
        """``{argument name: gradient array}`` (None where grad_req is 'null' or no buffer was given)."""
        return _NamedDict(zip(self._arg_names, self.grad_arrays), "an argument")

    @property
    def aux_dict(self) -> dict[str, Array]:
        """``{auxiliary state name: bound array}``."""
        return _NamedDict(zip(self._aux_names, self.aux_arrays), "an auxiliary state")

    @property
    def output_dict(self) -> dict[str, Array]:
        """``{output name: array of the last forward}``."""
        return _NamedDict(zip(self._output_names, self.outputs), "an output")

    @property
    def plan(self) -> Plan:
        """The compiled plan; ``print(exe.plan)`` shows its instructions."""
        return self._plan

    def debug_str(self) -> str:
        """MXNet's listing of the bound graph: its outputs (forward outputs, then the gradients computed), every
        node with its inputs and attributes (with its context and the copies between contexts when parts of the
        graph are placed with ``group2ctx``), then ``Total <n> MB allocated``: the most memory the values the plan
        computes hold at once in a forward followed by a backward (the bound arrays excluded), from the plan's
        liveness. ``print(exe.plan)`` shows the instructions themselves."""
        plan = self._plan
        by_id = {n.id: n for n in plan.nodes}
        slots = {s: key for key, s in plan.slot_of.items()}
        grads = [None if s is None else (by_id[slots[s][0]], slots[s][1]) for s in plan.grad_slots]
        total = peak_bytes(plan, slot_sizes(plan, self._shapes, plan.value_types or self._types))
        return debug_listing(plan.heads, grads, plan.nodes, self._placement, total)

    def get_optimized_symbol(self) -> Symbol:
        """The forward graph as MXNet 1.9.1's executor runs it on CPU: common expressions merged unless
        ``MXNET_ELIMINATE_COMMON_EXPR=0`` was set when this executor was bound (equal ops on equal inputs; random
        and stateful ops never), an output merged into an earlier one isolated by a ``_copy`` node, and with
        ``group2ctx`` a copy node wherever a value crosses contexts. (symgrad's own plan evaluates the graph as
        given: merging changes no value. MXNet's oneDNN operator fusion is a kernel choice and not shown.)"""
        plan = self._plan
        forward = plan.nodes[: len(plan.nodes) - len(plan.backward_nodes)]
        return optimized_symbol(plan.heads, forward, self._cse, self._placement)

    # -- contexts (group2ctx) -------------------------------------------------------
    def _place(self, input_contexts: Mapping[int, Context]) -> Placement:
        """Every node's context under ``group2ctx`` (``placement.place``)."""
        plan = self._plan
        forward = plan.nodes[: len(plan.nodes) - len(plan.backward_nodes)]
        owners = forward_owners(forward, plan.backward_nodes)
        for (node, _), v in zip(plan.heads, plan.head_grad_nodes):
            owners[v.id] = node  # a head gradient arrives where its output is
        by_id = {n.id: n for n in plan.nodes}
        slots = {s: key for key, s in plan.slot_of.items()}
        targets = [
            ((by_id[slots[s][0]], slots[s][1]), arg)
            for s, arg in zip(plan.grad_slots, self._arg_nodes)
            if s is not None
        ]
        assert self._group2ctx is not None
        return place(plan.nodes, self._group2ctx, self._ctx, input_contexts, owners, targets)

    def _context_of(self, node: Node) -> Context:
        return self._ctx if self._placement is None else self._placement.of(node)

    @property
    def arg_contexts(self) -> list[Context]:
        """The context of each argument (and of its gradient), in ``list_arguments()`` order; the executor's, or
        with ``group2ctx`` its group's (MXNet's ``exe.arg_arrays[i].context``; a numpy array carries none)."""
        return [self._context_of(n) for n in self._arg_nodes]

    @property
    def aux_contexts(self) -> list[Context]:
        """The context of each auxiliary state, in ``list_auxiliary_states()`` order."""
        return [self._context_of(n) for n in self._aux_nodes]

    @property
    def output_contexts(self) -> list[Context]:
        """The context each output is computed on (MXNet's ``exe.outputs[i].context``)."""
        return [self._context_of(n) for n, _ in self._plan.heads]

    # -- running ------------------------------------------------------------------
    def _initial_vals(self):
        """A fresh value list holding the bound arguments and auxiliary states (by reference)."""
        vals = [None] * self._plan.n_slots
        for slots, arrays in ((self._plan.arg_slots, self.arg_arrays), (self._plan.aux_slots, self.aux_arrays)):
            for s, a in zip(slots, arrays):
                if s is not None:
                    vals[s] = a
        return vals

    def forward(self, is_train: bool = False, **kwargs: npt.ArrayLike) -> list[Array]:
        """Copy keyword arrays into the bound arguments, run forward, return ``outputs``.

        Atomic: the keyword values run the forward from staged copies, and only once every check
        passed and the whole forward ran are they copied into the bound arguments (and, in
        training, the new auxiliary states into theirs). A call that raises changes nothing.
        """
        staged = []  # (position, converted value)
        for name, value in kwargs.items():
            if name not in self._arg_names:
                raise _unknown_name_error("forward", name, self._arg_names)
            i = self._arg_names.index(name)
            dst = self.arg_arrays[i]
            _check_writable(dst, name, "forward")
            staged.append((i, self._staged(value, dst, name, "forward")))
        if is_train and self._plan.mutates_aux:
            for name, a in zip(self._aux_names, self.aux_arrays):
                _check_writable(a, name, "forward(is_train=True): auxiliary state")
        plan = self._plan
        with self._ctx.device_scope():
            vals = self._initial_vals()
            for i, src in staged:
                if plan.arg_slots[i] is not None:
                    vals[plan.arg_slots[i]] = src
            self._pending_aux.clear()
            try:
                self._run("forward", vals, is_train)
                outs = [vals[s] for s in plan.head_slots]
            finally:
                pending = dict(self._pending_aux)
                self._pending_aux.clear()
            # every check passed and the forward ran: only now write into the user's arrays;
            # these copies cannot fail (values checked and converted, destinations writeable)
            outs = self._store_outputs(outs, [src for _, src in staged])
            for i, src in staged:
                self.arg_arrays[i][...] = src
                if plan.arg_slots[i] is not None:
                    vals[plan.arg_slots[i]] = self.arg_arrays[i]  # backward reads the bound array
            if is_train:  # auxiliary states change only once the whole forward has run
                for i, new in pending.items():
                    self.aux_arrays[i][...] = new
            self._vals = vals
            self._last_is_train = bool(is_train)
            self.outputs = outs
        return self.outputs

    def _staged(self, value, dst, name, what):
        """``value`` converted to ``dst``'s device and dtype, ready to be copied into ``dst``.

        Raises (naming ``name``) before anything is written when the value does not fit.
        """
        src = self._on_device(value, name, what)
        if tuple(src.shape) != tuple(dst.shape):
            raise ShapeError(f"{what}: {name!r} has shape {tuple(src.shape)}, expected {tuple(dst.shape)}")
        skind, dkind = np.dtype(src.dtype).kind, np.dtype(dst.dtype).kind
        if skind == "c" and dkind != "c":
            raise DTypeError(
                f"{what}: {name!r} is complex ({src.dtype}) but the bound array is {dst.dtype}: "
                "the imaginary part would be dropped"
            )
        if skind in "fc" and dkind in "iub" and src.size and not bool(self._xp.isfinite(src).all()):
            raise BindError(
                f"{what}: {name!r} holds NaN or infinity, which the {dst.dtype} array bound to it cannot represent"
            )
        try:
            with self._ctx.device_scope():
                return src.astype(dst.dtype, copy=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{what}: {name!r} of dtype {src.dtype} cannot be cast to {dst.dtype}: {exc}") from None

    def _on_device(self, value, name, what):
        """``value`` as an array on this executor's device (copied there when it lives elsewhere)."""
        dev = array_context(value)
        if dev is None:
            if value is None or isinstance(value, (str, bytes)):
                raise DTypeError(f"{what}: {name!r} must be a numeric array, got {value!r}")
            try:
                value = np.asarray(value)
            except Exception as exc:
                raise TypeError(f"{what}: {name!r} must be an array, got {type(value).__name__}: {exc}") from None
            dev = Context("cpu", 0)
        _check_numeric(value.dtype, name, what)
        if _on(dev, self._ctx):
            return value
        if self._ctx.device_type == "cpu":
            return to_numpy(value)
        with self._ctx.device_scope():  # host -> this gpu, or another gpu -> this one
            return self._xp.asarray(value) if dev.device_type == "cpu" else value.copy()

    def _store_outputs(self, outs, others=()):
        """Copy freshly computed outputs into the arrays ``exe.outputs`` holds since bind (MXNet keeps its
        output arrays); an output whose shape or dtype differs from its array's (a data-dependent shape)
        replaces that array instead. Returns the new ``exe.outputs`` list."""
        xp = self._xp
        stored = []
        for buf, out in zip(self.outputs, outs):
            if not isinstance(out, xp.ndarray):
                out = xp.asarray(out)
            if buf is not None and buf.shape == out.shape and buf.dtype == out.dtype:
                buf[...] = out  # a copy: never a view of an argument or of a value the plan keeps
            else:
                buf = self._detached(out, others)
            stored.append(buf)
        return stored

    def _detached(self, out, others=()):
        """The output itself, or a copy if it is a view of a bound array (reshape, slice, BlockGrad...)
        or of one of ``others`` (the caller's own arrays given to ``forward``).

        As in MXNet, writing into an output never changes an argument. A numpy scalar (what numpy
        returns for some operations on 0-d arrays) comes back as a 0-d array.
        """
        xp = self._xp
        if not isinstance(out, xp.ndarray):
            return xp.asarray(out)
        may_share = xp.may_share_memory
        for group in (self.arg_arrays, self.aux_arrays, others):
            for a in group:
                if may_share(out, a):
                    return out.copy()
        return out

    def _scalar_free(self, out):
        """A numpy scalar (numpy's result for some operations on 0-d arrays) as a 0-d array."""
        return out if isinstance(out, self._xp.ndarray) else self._xp.asarray(out)

    def backward(self, out_grads: OutGrads = None, is_train: bool = True) -> None:
        """Back-propagate head gradients; write/add into the gradient arrays.

        ``out_grads``: one array (one output), a list in output order or a dict by output name; None entries
        (and ``None``) are allowed for loss outputs (SoftmaxOutput, MakeLoss), which need no head gradient.
        Each argument's ``grad_req`` decides what happens to its gradient array: ``"write"`` overwrites it,
        ``"add"`` adds the gradient to what it holds, ``"null"`` never touches it. The gradients are computed
        into temporaries and applied only after the whole backward ran, so a backward that raises leaves
        every gradient array as it was. A ``Custom`` op gets (a copy of) its argument's gradient buffer, dirty as
        the caller left it, and ``req``, as in MXNet: it must apply ``req`` itself (``CustomOp.assign``).
        """
        plan = self._plan
        base, was_train = self._vals, self._last_is_train
        if base is None:
            if plan.backward_reads_forward:
                raise SymgradError(
                    "backward: call forward(is_train=True) first (the gradient reads values the forward computes)"
                )
            # MXNet runs such a backward (repeat's, tile's: only the head gradient is read) before any forward
            base, was_train = self._initial_vals(), bool(is_train)
        heads = self._normalize_out_grads(out_grads)
        for name, arr in zip(self._arg_names, self.grad_arrays):  # checked before anything is computed
            if arr is not None and self._reqs[name] != "null":
                _check_writable(arr, name, "backward: gradient array")
        vals = list(base)
        for slot, g in zip(plan.head_grad_slots, heads):
            if slot is not None:
                vals[slot] = g
        own = self._hand_buffers_to_custom_ops()
        try:
            self._run("backward", vals, was_train, plan.run_backward_for(heads))
        finally:
            for state in own.values():
                state.grad_targets = {}
        # only now, with the whole backward done, touch the user's gradient arrays
        xp = self._xp
        with self._ctx.device_scope():
            for name, arr, slot in zip(self._arg_names, self.grad_arrays, plan.grad_slots):
                req = self._reqs[name]
                if req == "null" or arr is None:
                    continue
                if slot is None:
                    if req == "write":
                        arr[...] = 0
                    continue
                g = vals[slot]
                if req == "write" or name in own:  # a custom op given the buffer has applied req itself
                    arr[...] = g
                else:
                    xp.add(arr, g, out=arr, casting="unsafe")

    def _hand_buffers_to_custom_ops(self) -> dict:
        """Give each CustomOp whose ``in_grad[j]`` is an argument's whole gradient that argument's grad_req and a
        copy of its gradient buffer, dirty as the caller left it (MXNet hands the op the buffer itself: an op
        must honour ``req``, ``self.assign(in_grad[j], req[j], g)``; one that overwrites under 'add' or adds
        into a 'write' buffer is wrong there and is wrong here). The copy keeps the caller's array untouched
        until the whole backward has run. Returns ``{argument name: state}`` of the arguments handed over."""
        own = {}
        for a, (state, j) in self._plan.stateful_grad_outputs().items():
            name, arr = self._arg_names[a], self.grad_arrays[a]
            req = self._reqs[name]
            if arr is None or req not in ("write", "add"):
                continue
            state.grad_targets[j] = (arr.copy(), req)
            own[name] = state
        return own

    def _normalize_out_grads(self, out_grads):
        plan = self._plan
        n = len(plan.head_slots)
        names = self._output_names
        if out_grads is None:
            given = [None] * n
        elif isinstance(out_grads, dict):
            unknown = [k for k in out_grads if k not in names]
            if unknown:
                raise BindError(
                    f"backward: out_grads names {unknown[0]!r}, which is not an output; outputs are {names}"
                )
            given = [out_grads.get(k) for k in names]
        elif isinstance(out_grads, (list, tuple)):
            if len(out_grads) < n:
                raise BindError(f"backward: got {len(out_grads)} out_grads for {n} outputs {names}")
            given = list(out_grads[:n])  # more are ignored, as MXNet does (a warning once these are checked)
        else:
            if n != 1:
                raise BindError(f"backward: got one out_grad array for {n} outputs {names}; pass a list or dict")
            given = [out_grads]
        result = []
        for i, g in enumerate(given):
            needed = plan.head_grad_slots[i] is not None
            if g is None:
                if needed and not self._head_losses[i]:
                    raise BindError(
                        f"backward: a head gradient is required for output {names[i]!r} "
                        "(it is not a loss op such as MakeLoss/SoftmaxOutput); pass out_grads"
                    )
                result.append(None)
                continue
            g = self._on_device(g, names[i], "backward: out_grad for output")
            head_type = self._head_types[i]
            if np.dtype(g.dtype).kind == "c" and head_type is not None and np.dtype(head_type).kind != "c":
                raise DTypeError(
                    f"backward: out_grad for {names[i]!r} is complex ({g.dtype}) but the output is "
                    f"{np.dtype(head_type)}: the imaginary part would be dropped"
                )
            want = self._head_shapes[i]
            if want is None:  # a data-dependent output shape (boolean_mask): known from the last forward
                want = self.outputs[i].shape
            if tuple(g.shape) != tuple(want):
                if not needed:  # MXNet's test_shape_array passes one shaped like the input: it is never read
                    _warn_user(
                        f"backward: out_grad for {names[i]!r} has shape {tuple(g.shape)}, expected "
                        f"{tuple(want)}; ignored, as the backward does not read it (MXNet accepts it)"
                    )
                    result.append(None)
                    continue
                raise ShapeError(
                    f"backward: out_grad for {names[i]!r} has shape {tuple(g.shape)}, expected {tuple(want)}"
                )
            if head_type is not None and np.dtype(head_type).kind in "iu" and g.dtype != head_type:
                # MXNet: the head gradient of an integer output is an array of that dtype, so a float one is
                # truncated toward zero (0.75 -> 0, -2.5 -> -2) before it flows back
                if np.dtype(g.dtype).kind in "fc" and g.size and not bool(self._xp.isfinite(g).all()):
                    raise BindError(
                        f"backward: out_grad for {names[i]!r} holds NaN or infinity, which the "
                        f"{np.dtype(head_type)} output cannot represent"
                    )
                with self._ctx.device_scope():
                    g = g.astype(head_type)
            result.append(g if needed else None)
        if isinstance(out_grads, (list, tuple)) and len(out_grads) > n:
            _warn_user(
                f"backward: got {len(out_grads)} out_grads for {n} outputs {names}; the extra "
                f"{len(out_grads) - n} are ignored, as MXNet does"
            )
        return result

    def _run(self, phase, vals, is_train, run=None):
        """Run a phase's generated code (``run``: the backward's, from ``Plan.run_backward_for``), or interpret
        it when a monitor or hook is set."""
        plan = self._plan
        if run is None:
            run = plan.run_forward if phase == "forward" else plan.run_backward
        if self._monitor is not None or self._value_hook is not None or self._input_hook is not None:
            return self._run_monitored(phase, vals, is_train, kernels=run.kernels)
        try:
            with self._ctx.device_scope():
                run(vals, is_train)
        except Exception as exc:
            k = failing_instr(exc, run)
            if k is not None:
                annotate(exc, plan.instr_at(phase, k).node, phase)
            raise

    def _run_monitored(self, phase, vals, is_train, kernels=True):
        plan = self._plan
        instrs = plan.forward_instrs if phase == "forward" else plan.backward_instrs
        with self._ctx.device_scope():
            run_instrs(
                instrs,
                vals,
                is_train,
                phase,
                self._monitor,
                self._monitor_all,
                self._value_hook,
                input_hook=self._input_hook if phase == "forward" else None,
                kernels=kernels,
            )

    # -- partial re-runs (numeric differentiation) -------------------------------
    def forward_all(self, is_train: bool = False) -> list[Array]:
        """A forward that keeps every intermediate value, as the base for ``rerun_downstream``.

        Built-in ops do not update auxiliary states here (their new values are dropped); a custom op
        that writes its ``aux`` arrays in place does change them, as it would in MXNet, so callers that
        evaluate repeatedly (the numeric checkers) write the aux states back first. Returns the outputs.
        """
        vals = self._initial_vals()
        with self._ctx.device_scope():
            run_instrs(self._plan.forward_instrs, vals, is_train, "forward")
        self._pending_aux.clear()
        self._base = (vals, bool(is_train))
        # a backward() after forward_all() uses these values, as after forward()
        self._vals = list(vals)
        self._last_is_train = bool(is_train)
        outs = [self._scalar_free(vals[s]) for s in self._plan.head_slots]
        with self._ctx.device_scope():
            self.outputs = self._store_outputs(outs)
        return outs  # the computed values themselves: a later forward() does not overwrite them

    def rerun_downstream(self, names: Iterable[str]) -> list[Array]:
        """Outputs after re-running only the instructions that depend on the arguments ``names``.

        The bound arrays of ``names`` may have been changed in place since ``forward_all``;
        every other argument must be as it was then. The stored base values are not modified.
        """
        if getattr(self, "_base", None) is None:
            raise SymgradError("rerun_downstream: call forward_all() first")
        base, is_train = self._base
        # a numeric check calls this once per perturbation (thousands of times, ~10 us of work each): the
        # runner of each argument set is looked up once per plan, by the names as given
        plan = self._plan
        memo = self._rerun_memo
        key = tuple(names)
        hit = memo.get(key)
        if hit is None or hit[0] is not plan:
            positions = self._arg_positions
            try:
                pos = [positions[n] for n in key]
            except KeyError:
                bad = [n for n in key if n not in positions]
                raise BindError(
                    f"rerun_downstream: {bad[0]!r} is not an argument; arguments are {self._arg_names}"
                ) from None
            hit = memo[key] = (plan, pos, plan.run_downstream(pos))
        _, pos, run = hit
        vals = list(base)
        try:
            if self._ctx.device_type == "cpu":  # no device to make current
                run(vals, is_train)
            else:
                with self._ctx.device_scope():
                    run(vals, is_train)
        except Exception as exc:
            k = failing_instr(exc, run)
            if k is not None:
                annotate(exc, plan.downstream(pos)[k].node, "forward")
            raise
        finally:
            self._pending_aux.clear()
        xp = self._xp
        outs = [vals[s] for s in plan.head_slots]
        return [o if isinstance(o, xp.ndarray) else xp.asarray(o) for o in outs]  # _scalar_free, inlined

    def forward_with_hook(
        self, hook: Callable[[Node, list[Array]], Sequence[Array | None] | None], is_train: bool = False
    ) -> list[Array]:
        """``forward`` run instruction by instruction, with ``hook(node, inputs)`` before each instruction.

        ``hook`` gets the operator's graph node (``node.op``, ``node.name``, ``node.params``) and the list
        of its input arrays (on this executor's device); it returns None to leave them as they are, or one
        entry per input: None keeps that input, an array of the same shape and dtype replaces it. A
        replacement is stored in the value slot it replaces, so every later reader of that value in this
        forward *and in the backward that follows* reads it (relu's backward reads its forward input); the
        bound argument and auxiliary arrays themselves are never written. The test_utils decision pinning
        (``test_utils.decisions``) records and pins ReLU masks and max-pool choices through it.

        Otherwise it is ``forward`` (auxiliary states updated in training, ``outputs`` set, ``backward``
        may follow), only slower: no generated code, nothing freed early. Returns the outputs.

        >>> import numpy as np, symgrad as sg
        >>> exe = sg.sym.relu(sg.sym.Variable("x"), name="r").bind(sg.cpu(), {"x": np.array([-1e-9, 2.0])})
        >>> pin = lambda node, ins: [np.abs(ins[0])] if node.name == "r" else None
        >>> exe.forward_with_hook(pin, is_train=True)[0].tolist()
        [1e-09, 2.0]
        """
        if not callable(hook):
            raise TypeError(f"forward_with_hook: hook must be callable, got {type(hook).__name__}")
        self._input_hook = hook
        try:
            return self.forward(is_train=is_train)
        finally:
            self._input_hook = None

    # -- management ---------------------------------------------------------------
    def set_monitor_callback(self, callback: Callable[[str, Array], object] | None, monitor_all: bool = False) -> None:
        """Call ``callback(name, array)`` for every intermediate output (inputs too with monitor_all)."""
        if callback is not None and not callable(callback):
            raise TypeError("set_monitor_callback: callback must be callable")
        self._monitor = callback
        self._monitor_all = bool(monitor_all)

    def set_value_hook(self, hook: Callable[[Node, int, Array, str], Array] | None) -> None:
        """Pass every intermediate value through ``hook(node, k, value, phase) -> value`` (None removes it).

        While a hook is set, ``forward`` and ``backward`` interpret the plan instruction by instruction and store
        what ``hook`` returns for output ``k`` of ``node`` (``phase``: ``"forward"`` or ``"backward"``) in place
        of the value computed, so every later instruction -- the backward's included -- reads it. The checkers
        use it to emulate the rounding of a lower precision on a float64 graph (``test_utils.harness``). The
        hook must return an array of the same shape and dtype; it never sees the bound arrays themselves.
        """
        if hook is not None and not callable(hook):
            raise TypeError(f"set_value_hook: hook must be callable or None, got {type(hook).__name__}")
        self._value_hook = hook

    def copy_params_from(
        self,
        arg_params: Mapping[str, npt.ArrayLike],
        aux_params: Mapping[str, npt.ArrayLike] | None = None,
        allow_extra_params: bool = False,
    ) -> None:
        """Copy values into the bound arguments / auxiliary states (validated first)."""
        staged = []
        for params, names, arrays, what in (
            (arg_params, self._arg_names, self.arg_arrays, "argument"),
            (aux_params or {}, self._aux_names, self.aux_arrays, "auxiliary state"),
        ):
            for name, value in params.items():
                if name not in names:
                    if allow_extra_params:
                        continue
                    raise BindError(f"copy_params_from: {name!r} is not an {what} of this executor; {what}s: {names}")
                dst = arrays[names.index(name)]
                _check_writable(dst, name, "copy_params_from")
                staged.append((dst, self._staged(value, dst, name, "copy_params_from")))
        with self._ctx.device_scope():
            for dst, value in staged:  # all checked and converted first: nothing is half-copied
                dst[...] = value

    def reshape(self, partial_shaping: bool = False, allow_up_sizing: bool = False, **kwargs: ShapeLike) -> Executor:
        """A new executor for new input shapes, sharing memory with this one (MXNet semantics).

        Arrays whose shape is unchanged are the same arrays; a smaller one (arguments, gradients, auxiliary
        states and outputs alike) is a view of the front of the old one, so a forward of the new executor
        writes into this one's outputs; a larger one is newly allocated (zeros) and needs
        ``allow_up_sizing=True``. An argument not named in ``kwargs`` may change shape only with
        ``partial_shaping=True``. A 0 in a new shape is a zero size, as in ``bind`` (MXNet's legacy shape
        mode refuses it). The two executors share state: do not run them in parallel.
        """
        unknown = [k for k in kwargs if k not in self._arg_names]
        if unknown:
            raise _unknown_name_error("reshape", unknown[0], self._arg_names)
        given = {k: as_shape(v, f"reshape: {k!r}") for k, v in kwargs.items()}
        arg_shapes, aux_shapes = self._reshaped(given)
        for name, old, shape in zip(self._arg_names, self.arg_arrays, arg_shapes):
            if tuple(old.shape) != shape and name not in given and not partial_shaping:
                raise ShapeError(
                    f"reshape: argument {name!r} would change shape from {tuple(old.shape)} to {shape}; "
                    "pass its new shape or partial_shaping=True"
                )
        resized = functools.partial(self._resized, allow_up_sizing=allow_up_sizing)
        new_args = [resized(a, s, n, "argument") for n, a, s in zip(self._arg_names, self.arg_arrays, arg_shapes)]
        new_grads = [resized(g, s, n, "gradient of") for n, g, s in zip(self._arg_names, self.grad_arrays, arg_shapes)]
        new_aux = [resized(a, s, n, "auxiliary state") for n, a, s in zip(self._aux_names, self.aux_arrays, aux_shapes)]
        args_grad = dict(zip(self._arg_names, new_grads))
        new = Executor(self._symbol, self._ctx, new_args, args_grad, dict(self._reqs), new_aux, self._group2ctx)
        # the outputs too: MXNet's reshaped executor writes into the front of the old output arrays
        new.outputs = [self._shared_front(old, out) for old, out in zip(self.outputs, new.outputs)]
        return new

    def _reshaped(self, given: Mapping[str, Shape]) -> tuple[list[Shape], list[Shape]]:
        """The arguments' and auxiliary states' shapes after ``reshape(**given)``: given, inferred from the given
        ones (a 0 is a zero size here: these are the shapes of arrays to bind), else as they are now."""
        nodes, arg_nodes, aux_nodes = self._symbol.arg_and_aux_nodes()
        known: dict = {(n.id, 0): given[n.name] for n in arg_nodes if n.name in given}
        infer_shapes(nodes, known)
        arg_shapes = [tuple(known.get((n.id, 0)) or a.shape) for n, a in zip(arg_nodes, self.arg_arrays)]
        aux_shapes = [tuple(known.get((n.id, 0)) or a.shape) for n, a in zip(aux_nodes, self.aux_arrays)]
        return arg_shapes, aux_shapes

    def _resized(self, old, shape, name, what, allow_up_sizing):
        """``old`` itself (same shape), a view of its front (fewer elements) or a new zeroed array (more elements,
        only with ``allow_up_sizing``)."""
        if old is None or tuple(old.shape) == shape:
            return old
        n = math.prod(shape)
        if n > old.size and not allow_up_sizing:
            raise ShapeError(
                f"reshape: {what} {name!r} grows from {tuple(old.shape)} to {shape}; pass allow_up_sizing=True"
            )
        if n <= old.size and old.flags.c_contiguous:
            return old.reshape(-1)[:n].reshape(shape)  # a view: memory shared with this executor
        with self._ctx.device_scope():
            return self._xp.zeros(shape, old.dtype)

    @staticmethod
    def _shared_front(old, new):
        """A view of the front of ``old`` shaped like ``new`` where it fits (same dtype, no more elements), else
        ``new``."""
        if old is None or new is None or old.dtype != new.dtype or new.size > old.size or not old.flags.c_contiguous:
            return new
        return old.reshape(-1)[: new.size].reshape(new.shape)


@_gc_paused
def simple_bind(
    symbol: Symbol,
    ctx: Context | None,
    grad_req: GradReq = "write",
    type_dict: Mapping[str, npt.DTypeLike] | None = None,
    shapes: Mapping[str, ShapeLike | None] | None = None,
    group2ctx: Mapping[str, Context] | None = None,
    **_: object,
) -> Executor:
    """Infer every shape from ``shapes``, allocate zeroed arrays on ``ctx`` and bind.

    With ``group2ctx``, an input created under ``AttrScope(ctx_group=g)`` is allocated on ``group2ctx[g]``, any
    other on ``ctx`` (MXNet's rule); on cpu contexts that is the same host memory (``Executor.arg_contexts``).
    """
    ctx = current_context() if ctx is None else ctx
    if not isinstance(ctx, Context):
        raise TypeError(f"simple_bind: ctx must be a Context such as sg.cpu(), got {ctx!r}")
    groups = check_group2ctx(group2ctx, ctx, "simple_bind")
    nodes, arg_nodes, aux_nodes = symbol.arg_and_aux_nodes()
    shapes = _bind_shapes(shapes or {}, [n.name for n in arg_nodes + aux_nodes])  # (warns at the caller's line)
    arg_shapes, aux_shapes, shape_map = _simple_bind_shapes(symbol, shapes, arg_nodes, aux_nodes)
    known = _simple_bind_types(nodes, arg_nodes + aux_nodes, type_dict)
    reqs = normalize_grad_req(grad_req, [n.name for n in arg_nodes], "simple_bind")
    grad_nodes = [n for n in arg_nodes if reqs[n.name] != "null"]
    arg_dt, aux_dt = ([known[(n.id, 0)] for n in group] for group in (arg_nodes, aux_nodes))
    wanted = [(n.name, s, dt) for n, s, dt in zip(arg_nodes, arg_shapes, arg_dt)]
    wanted += [
        (f"gradient of {n.name}", s, dt) for n, s, dt in zip(arg_nodes, arg_shapes, arg_dt) if reqs[n.name] != "null"
    ]
    wanted += [(n.name, s, dt) for n, s, dt in zip(aux_nodes, aux_shapes, aux_dt)]
    arrays = _allocate(ctx, wanted)
    n_arg, n_grad = len(arg_nodes), len(grad_nodes)
    grads = dict(zip([n.name for n in grad_nodes], arrays[n_arg : n_arg + n_grad]))
    args, aux = arrays[:n_arg], arrays[n_arg + n_grad :]
    # every shape known and none with a 0 (an unknown dimension to inference here, a zero-size one to bind):
    # these are the maps inference from the arrays would give; else infer again from the arrays, as bind does
    if not all(0 not in v for v in shape_map.values()):
        shape_map, known = _infer_bound(nodes, arg_nodes + aux_nodes, args + aux)
    binding = Binding(
        symbol,
        ctx,
        nodes,
        arg_nodes,
        aux_nodes,
        args,
        [grads.get(n.name) for n in arg_nodes],
        aux,
        reqs,
        dict(shape_map),
        known,
        groups,
        None if groups is None else {n.id: groups.get(ctx_group(n) or "", ctx) for n in arg_nodes + aux_nodes},
    )
    return Executor.from_binding(binding)


def _simple_bind_shapes(symbol, shapes, arg_nodes, aux_nodes):
    """``(argument shapes, auxiliary shapes, every value's shape)`` inferred from ``shapes``; each input's must be
    determined (a 0 dimension is unknown in MXNet's legacy shape mode: inference must determine it)."""
    (arg_shapes, _, aux_shapes), shape_map = symbol.shape_map((), shapes)
    unknown = [
        n.name for n, s in zip(arg_nodes + aux_nodes, list(arg_shapes) + list(aux_shapes)) if s is None or 0 in s
    ]
    if unknown:
        raise ShapeError(
            f"simple_bind: cannot infer the shapes of {unknown} from the given shapes {shapes} (a 0 dimension "
            "is unknown); pass them as keyword arguments (name=shape)"
        )
    return arg_shapes, aux_shapes, shape_map


def _simple_bind_types(nodes, inputs, type_dict) -> dict:
    """Every value's dtype: ``type_dict`` and the inputs' ``__dtype__`` first decide the others' (a weight takes
    its data's dtype); an input still unknown defaults to float32 (MXNet). A conflict with a ``__dtype__``
    attribute (a Gluon export's float32 weights under ``type_dict={'data': np.float64}``) names the variables
    that pin it and the fix (``serialization.cast_pinned_dtypes``)."""
    names = [n.name for n in inputs]
    type_dict = dict(type_dict or {})
    bad = [k for k in type_dict if k not in names]
    if bad:
        raise BindError(f"simple_bind: type_dict names {bad[0]!r}, which is not an input; inputs are {names}")
    known = {}
    for n in inputs:
        if n.name in type_dict:
            known[(n.id, 0)] = np.dtype(type_dict[n.name])
        elif "__dtype__" in n.attrs:
            known[(n.id, 0)] = parse_dtype_attr(n.attrs["__dtype__"])
    if known:
        infer_types(nodes, known, pins=True)
    defaulted = [n for n in inputs if (n.id, 0) not in known]
    for n in defaulted:
        known[(n.id, 0)] = np.dtype(np.float32)
    if defaulted or not known:  # (nothing defaulted: the first pass already settled every value)
        infer_types(nodes, known, pins=True)
    return known


def _allocate(ctx, wanted) -> list:
    """Zeroed arrays of ``wanted`` (``(name, shape, dtype)``) on ``ctx``, refused before anything is allocated when
    they cannot fit."""
    _check_allocation(wanted, ctx)
    with ctx.device_scope():
        try:
            return _zeroed_arrays(ctx.xp, [(s, dt) for _, s, dt in wanted])
        except MemoryError:
            shapes_wanted = {name: tuple(s) for name, s, _ in wanted}
            raise AllocationError(f"simple_bind: out of memory allocating the arrays {shapes_wanted}") from None


#: arrays carved from one allocation start at multiples of this many bytes (a cache line, SIMD-aligned)
_ALIGN = 64


def _zeroed_arrays(xp, wanted) -> list:
    """Zeroed C-contiguous arrays of the given ``(shape, dtype)``s, carved from one zeroed allocation per
    dtype (each array ``_ALIGN``-aligned within it): one allocation instead of one per array (DenseNet-121
    asks for ~970, two thirds of them 128 KiB-1 MiB, which the allocator would take from its heap and zero
    one by one); a large zeroed block comes from fresh pages the kernel zeroes on first touch."""
    spans: list[tuple[np.dtype, int, int]]
    totals: dict[np.dtype, int]
    spans, totals = [], {}
    for shape, dt in wanted:
        dt = np.dtype(dt)
        start = totals.get(dt, 0)
        nbytes = math.prod(shape) * dt.itemsize
        spans.append((dt, start, nbytes))
        totals[dt] = start + -(-nbytes // _ALIGN) * _ALIGN
    blocks = {dt: _aligned_zeros(xp, total) for dt, total in totals.items()}
    return [
        blocks[dt][start : start + nbytes].view(dt).reshape(shape)
        for (shape, _), (dt, start, nbytes) in zip(wanted, spans)
    ]


def _aligned_zeros(xp, nbytes: int):
    """``nbytes`` zeroed bytes starting at a multiple of ``_ALIGN`` (numpy's own alignment is 16)."""
    block = xp.zeros(nbytes + _ALIGN, dtype=np.uint8)
    address = block.ctypes.data if isinstance(block, np.ndarray) else block.data.ptr
    shift = -address % _ALIGN
    return block[shift : shift + nbytes]


def _bind_shapes(given: Mapping[str, object], names: list[str]) -> dict[str, Shape | None]:
    """``simple_bind``'s keyword shapes, validated: each input's shape must be a tuple of ints.

    MXNet ignores keywords that are neither an input nor a shape (``mode='clip'``): they get a warning
    naming them. A shape for a name that is no input (``fc_wieght=(4, 3)``) is a misspelling: an error
    naming the nearest input.
    """
    shapes = {}
    for key, value in given.items():
        if key in names:
            shapes[key] = None if value is None else as_shape(value, f"simple_bind: shape of {key!r}")
            continue
        # a tuple of ints for a name that is no input is a misspelt shape; a lone int is a parameter-like
        # keyword (MXNet's test_take passes the op's axis=0) and is ignored with the warning below
        looks_like_shape = isinstance(value, (tuple, list)) and all(isinstance(d, (int, np.integer)) for d in value)
        if looks_like_shape:
            raise BindError(
                f"simple_bind: a shape is given for {key!r}, which is not an input of this symbol"
                f"{_nearest(key, names)}; inputs: {names}"
            )
        warnings.warn(
            f"simple_bind: ignoring keyword {key}={value!r}: it is neither an input of the symbol "
            f"nor a shape (inputs: {names})",
            stacklevel=5,
        )
    return shapes


def _check_allocation(wanted, ctx):
    """Refuse, before allocating anything, arrays whose total size is more than the device has.

    ``wanted`` lists ``(name, shape, dtype)``; the error names the largest array.
    """
    sizes = []
    for name, shape, dtype in wanted:
        n = 1
        for d in shape:
            n *= int(d)  # Python ints: no overflow for absurd shapes
        sizes.append((n * np.dtype(dtype).itemsize, name, tuple(shape), np.dtype(dtype)))
    total = sum(b for b, *_ in sizes)
    limit = _memory_limit(ctx)
    if sizes and (total > limit or total >= 2**63):
        nbytes, name, shape, dtype = max(sizes, key=lambda t: t[0])
        raise AllocationError(
            f"simple_bind: the arrays need {_human(total)} but the {ctx} device has {_human(limit)}; the largest is "
            f"{name!r} of shape {shape} ({dtype}, {_human(nbytes)})"
        )


def _memory_limit(ctx) -> int:
    """Bytes the device could hold at most: physical memory (cpu) or the GPU's total memory."""
    try:
        if ctx.device_type == "gpu":
            return int(ctx.xp.cuda.Device(ctx.device_id).mem_info[1])
        import os

        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 2**62


def _human(nbytes: int) -> str:
    """``1.5 GiB`` style."""
    value = float(nbytes)
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    k = 0
    while value >= 1024 and k < len(units) - 1:
        value /= 1024
        k += 1
    return f"{value:.1f} {units[k]}"


if TYPE_CHECKING:

    def _is_bound_executor(exe: Executor) -> BoundExecutor:
        """(mypy only) Executor has the interface ``Symbol.bind`` promises (``symbol.BoundExecutor``)."""
        return exe
