"""The Executor: bound arrays + a compiled plan (MXNet's ``Executor``).

Arrays are plain numpy (cpu) or CuPy (gpu) arrays used by reference: a write
into ``exe.arg_dict["x"]`` is seen by the next forward, and gradients land in
the caller's ``args_grad`` arrays. Every input is validated before anything
is written, and gradients are applied only after the whole backward ran, so a
call that raises leaves every bound and user array as it was.
"""

from __future__ import annotations

import functools
import gc

import numpy as np

from ..base import BindError, ShapeError, SymgradError
from ..context import Context, array_context, current_context, to_numpy
from ..infer import infer_shapes, infer_types
from .plan import Plan, annotate, failing_instr, run_instrs

__all__ = ["Executor", "simple_bind", "normalize_grad_req"]

_REQS = ("write", "add", "null", "inplace")


def _gc_paused(fn):
    """Run ``fn`` with the cyclic garbage collector paused.

    Binding allocates many small objects that all stay alive; collections triggered
    meanwhile only rescan them (about a quarter of the bind time of a 10 000-node chain).
    """

    @functools.wraps(fn)
    def run(*args, **kwargs):
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
        raise KeyError(f"{key!r} is not {self._what}; valid names: {sorted(self)}")


def normalize_grad_req(grad_req, names, who="bind"):
    """grad_req as str / list / dict -> ``{name: 'write'|'add'|'null'}`` ('inplace' counts as 'write').

    Names missing from a dict get 'null'; unknown names, wrong lengths and unknown values are errors.
    """
    names = list(names)
    if isinstance(grad_req, str):
        reqs = {n: grad_req for n in names}
    elif isinstance(grad_req, (list, tuple)):
        if len(grad_req) != len(names):
            raise BindError(f"{who}: grad_req has {len(grad_req)} entries but the symbol has {len(names)} "
                            f"arguments {names}")
        reqs = dict(zip(names, grad_req))
    elif isinstance(grad_req, dict):
        unknown = [k for k in grad_req if k not in names]
        if unknown:
            raise BindError(f"{who}: grad_req names {unknown[0]!r}, which is not an argument; arguments are {names}")
        reqs = {n: grad_req.get(n, "null") for n in names}
    else:
        raise TypeError(f"{who}: grad_req must be a str, list or dict, got {type(grad_req).__name__}")
    for n, r in reqs.items():
        if r not in _REQS:
            raise BindError(f"{who}: grad_req for argument {n!r} must be one of 'write', 'add', 'null', got {r!r}")
    return {n: ("write" if r == "inplace" else r) for n, r in reqs.items()}


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


class Executor:
    """Runs a bound symbol. Create it with ``Symbol.bind`` or ``Symbol.simple_bind``."""

    @_gc_paused
    def __init__(self, symbol, ctx, args, args_grad=None, grad_req="write", aux_states=None):
        from ..symbol import Symbol

        if not isinstance(symbol, Symbol):
            raise TypeError(f"bind: expected a Symbol, got {type(symbol).__name__}")
        ctx = current_context() if ctx is None else ctx
        if not isinstance(ctx, Context):
            raise TypeError(f"bind: ctx must be a Context such as sg.cpu(), got {ctx!r}")
        self._symbol = symbol
        self._ctx = ctx
        self._xp = ctx.xp  # imports CuPy only for gpu contexts
        nodes, arg_nodes, aux_nodes = symbol._arg_and_aux_nodes()
        self._arg_names = [n.name for n in arg_nodes]
        self._aux_names = [n.name for n in aux_nodes]
        self._output_names = symbol.list_outputs()
        arg_arrays = _arrays(args, self._arg_names, "bind args", ctx, required=True)
        grad_arrays = _arrays(args_grad, self._arg_names, "bind args_grad", ctx, required=False)
        aux_arrays = _arrays(aux_states, self._aux_names, "bind aux_states", ctx, required=True)
        reqs = normalize_grad_req(grad_req, self._arg_names)
        for i, n in enumerate(self._arg_names):
            if reqs[n] == "null":
                grad_arrays[i] = None
            elif grad_arrays[i] is None:
                if isinstance(grad_req, dict) and args_grad is not None:
                    raise BindError(f"bind: grad_req[{n!r}] is {reqs[n]!r} but args_grad has no array for {n!r}")
                reqs[n] = "null"
            elif grad_arrays[i].shape != arg_arrays[i].shape:
                raise ShapeError(
                    f"bind: gradient array for {n!r} has shape {grad_arrays[i].shape}, "
                    f"argument has shape {arg_arrays[i].shape}"
                )
        self._reqs = reqs
        self.arg_arrays = arg_arrays
        self.grad_arrays = grad_arrays
        self.aux_arrays = aux_arrays

        # validate shapes over the forward graph before compiling
        known = {(n.id, 0): tuple(a.shape) for n, a in zip(arg_nodes + aux_nodes, arg_arrays + aux_arrays)}
        infer_shapes(nodes, known)
        # and dtypes: an op that only computes in floating point names itself when bound to integer arrays
        infer_types(nodes, {(n.id, 0): np.dtype(a.dtype)
                            for n, a in zip(arg_nodes + aux_nodes, arg_arrays + aux_arrays)})
        heads = list(symbol._outputs)
        self._head_shapes = [known.get((n.id, i)) for n, i in heads]
        self._pending_aux: dict = {}
        with ctx.device_scope():  # the plan allocates its gradient buffers
            self._plan = Plan(heads, arg_nodes, aux_nodes, [reqs[n] != "null" for n in self._arg_names],
                              self._xp, self._pending_aux, grad_like=grad_arrays)
        # check the gradient graph's shapes too (errors here are bugs in a rule, named by node)
        for v, s in zip(self._plan.head_grad_nodes, self._head_shapes):
            known[(v.id, 0)] = s
        infer_shapes(self._plan.backward_nodes, known)  # forward nodes are already known
        self._head_losses = [n.op is not None and n.op.loss_head(n.params) for n, _ in heads]
        self._vals = None
        self._last_is_train = False
        self._monitor = None
        self._monitor_all = False
        self.outputs = []

    # -- views ------------------------------------------------------------------
    @property
    def arg_dict(self):
        return _NamedDict(zip(self._arg_names, self.arg_arrays), "an argument")

    @property
    def grad_dict(self):
        return _NamedDict(zip(self._arg_names, self.grad_arrays), "an argument")

    @property
    def aux_dict(self):
        return _NamedDict(zip(self._aux_names, self.aux_arrays), "an auxiliary state")

    @property
    def output_dict(self):
        return _NamedDict(zip(self._output_names, self.outputs), "an output")

    @property
    def plan(self) -> Plan:
        """The compiled plan; ``print(exe.plan)`` shows its instructions."""
        return self._plan

    def debug_str(self) -> str:
        return repr(self._plan)

    # -- running ------------------------------------------------------------------
    def _initial_vals(self):
        """A fresh value list holding the bound arguments and auxiliary states (by reference)."""
        vals = [None] * self._plan.n_slots
        for slots, arrays in ((self._plan.arg_slots, self.arg_arrays), (self._plan.aux_slots, self.aux_arrays)):
            for s, a in zip(slots, arrays):
                if s is not None:
                    vals[s] = a
        return vals

    def forward(self, is_train=False, **kwargs):
        """Copy keyword arrays into the bound arguments, run forward, return ``outputs``."""
        staged = []
        for name, value in kwargs.items():
            if name not in self._arg_names:
                raise BindError(f"forward: {name!r} is not an argument; arguments are {self._arg_names}")
            dst = self.arg_arrays[self._arg_names.index(name)]
            staged.append((dst, self._staged(value, dst, name, "forward")))
        with self._ctx.device_scope():
            for dst, src in staged:  # every value was checked and converted: these copies cannot fail
                dst[...] = src
            vals = self._initial_vals()
            self._pending_aux.clear()
            self._run("forward", vals, is_train)
            if is_train:  # auxiliary states change only once the whole forward has run
                for i, new in self._pending_aux.items():
                    self.aux_arrays[i][...] = new
            self._pending_aux.clear()
            self._vals = vals
            self._last_is_train = bool(is_train)
            self.outputs = [self._detached(vals[s]) for s in self._plan.head_slots]
        return self.outputs

    def _staged(self, value, dst, name, what):
        """``value`` converted to ``dst``'s device and dtype, ready to be copied into ``dst``.

        Raises (naming ``name``) before anything is written when the value does not fit.
        """
        src = self._on_device(value, name, what)
        if tuple(src.shape) != tuple(dst.shape):
            raise ShapeError(f"{what}: {name!r} has shape {tuple(src.shape)}, expected {tuple(dst.shape)}")
        try:
            with self._ctx.device_scope():
                return src.astype(dst.dtype, copy=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{what}: {name!r} of dtype {src.dtype} cannot be cast to {dst.dtype}: {exc}") from None

    def _on_device(self, value, name, what):
        """``value`` as an array on this executor's device (copied there when it lives elsewhere)."""
        dev = array_context(value)
        if dev is None:
            try:
                value = np.asarray(value)
            except Exception as exc:
                raise TypeError(f"{what}: {name!r} must be an array, got {type(value).__name__}: {exc}") from None
            if value.dtype == object:
                raise TypeError(f"{what}: {name!r} must be a numeric array, got an object array")
            dev = Context("cpu", 0)
        if _on(dev, self._ctx):
            return value
        if self._ctx.device_type == "cpu":
            return to_numpy(value)
        with self._ctx.device_scope():  # host -> this gpu, or another gpu -> this one
            return self._xp.asarray(value) if dev.device_type == "cpu" else value.copy()

    def _detached(self, out):
        """The output itself, or a copy if it is a view of a bound array (reshape, slice, BlockGrad...).

        As in MXNet, writing into an output never changes an argument.
        """
        may_share = self._xp.may_share_memory
        for a in self.arg_arrays:
            if may_share(out, a):
                return out.copy()
        for a in self.aux_arrays:
            if may_share(out, a):
                return out.copy()
        return out

    def backward(self, out_grads=None, is_train=True):
        """Back-propagate head gradients; write/add into the gradient arrays."""
        if self._vals is None:
            raise SymgradError("backward: call forward(is_train=True) first")
        plan = self._plan
        heads = self._normalize_out_grads(out_grads)
        vals = list(self._vals)
        for slot, g in zip(plan.head_grad_slots, heads):
            if slot is not None:
                vals[slot] = g
        self._run("backward", vals, self._last_is_train)
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
                if req == "write":
                    arr[...] = g
                else:
                    xp.add(arr, g, out=arr, casting="unsafe")

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
            if len(out_grads) != n:
                raise BindError(f"backward: got {len(out_grads)} out_grads for {n} outputs {names}")
            given = list(out_grads)
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
            g = self._on_device(g, names[i], "backward: out_grad for")
            if tuple(g.shape) != tuple(self._head_shapes[i]):
                raise ShapeError(
                    f"backward: out_grad for {names[i]!r} has shape {tuple(g.shape)}, "
                    f"expected {tuple(self._head_shapes[i])}"
                )
            result.append(g if needed else None)
        return result

    def _run(self, phase, vals, is_train):
        plan = self._plan
        if self._monitor is not None:
            return self._run_monitored(phase, vals, is_train)
        run = plan.run_forward if phase == "forward" else plan.run_backward
        try:
            with self._ctx.device_scope():
                run(vals, is_train)
        except Exception as exc:
            k = failing_instr(exc, run)
            if k is not None:
                annotate(exc, plan.instr_at(phase, k).node, phase)
            raise

    def _run_monitored(self, phase, vals, is_train):
        plan = self._plan
        instrs = plan.forward_instrs if phase == "forward" else plan.backward_instrs
        with self._ctx.device_scope():
            run_instrs(instrs, vals, is_train, phase, self._monitor, self._monitor_all)

    # -- partial re-runs (numeric differentiation) -------------------------------
    def forward_all(self, is_train=False):
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
        self.outputs = [vals[s] for s in self._plan.head_slots]
        return self.outputs

    def rerun_downstream(self, names):
        """Outputs after re-running only the instructions that depend on the arguments ``names``.

        The bound arrays of ``names`` may have been changed in place since ``forward_all``;
        every other argument must be as it was then. The stored base values are not modified.
        """
        if getattr(self, "_base", None) is None:
            raise SymgradError("rerun_downstream: call forward_all() first")
        base, is_train = self._base
        try:
            pos = [self._arg_names.index(n) for n in names]
        except ValueError:
            bad = [n for n in names if n not in self._arg_names]
            raise BindError(
                f"rerun_downstream: {bad[0]!r} is not an argument; arguments are {self._arg_names}"
            ) from None
        vals = list(base)
        with self._ctx.device_scope():
            run_instrs(self._plan.downstream(pos), vals, is_train, "forward")
        self._pending_aux.clear()
        return [vals[s] for s in self._plan.head_slots]

    # -- management ---------------------------------------------------------------
    def set_monitor_callback(self, callback, monitor_all=False):
        """Call ``callback(name, array)`` for every intermediate output (inputs too with monitor_all)."""
        if callback is not None and not callable(callback):
            raise TypeError("set_monitor_callback: callback must be callable")
        self._monitor = callback
        self._monitor_all = bool(monitor_all)

    def copy_params_from(self, arg_params, aux_params=None, allow_extra_params=False):
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
                staged.append((dst, self._staged(value, dst, name, "copy_params_from")))
        with self._ctx.device_scope():
            for dst, value in staged:  # all checked and converted first: nothing is half-copied
                dst[...] = value

    def reshape(self, partial_shaping=False, allow_up_sizing=False, **kwargs):
        """A new executor for new input shapes, sharing memory with this one (MXNet semantics).

        Arrays whose shape is unchanged are the same arrays; a smaller array is a view of the
        front of the old one; a larger one is newly allocated (zeros) and needs
        ``allow_up_sizing=True``. An argument not named in ``kwargs`` may change shape only
        with ``partial_shaping=True``. The two executors share state: do not run them in parallel.
        """
        unknown = [k for k in kwargs if k not in self._arg_names]
        if unknown:
            raise BindError(f"reshape: {unknown[0]!r} is not an argument; arguments are {self._arg_names}")
        shapes = {k: _shape_of(v, f"reshape: {k!r}") for k, v in kwargs.items()}
        partial_shapes = self._symbol.infer_shape_partial(**shapes)[0]
        for name, s, old in zip(self._arg_names, partial_shapes, self.arg_arrays):
            if s is None:
                shapes[name] = tuple(old.shape)  # not determined by the new shapes: keep it
        arg_shapes, _, aux_shapes = self._symbol.infer_shape(**shapes)

        def resized(old, shape, name, what):
            shape = tuple(shape)
            if old is None or tuple(old.shape) == shape:
                return old
            n = int(np.prod(shape))
            if n > old.size and not allow_up_sizing:
                raise ShapeError(
                    f"reshape: {what} {name!r} grows from {tuple(old.shape)} to {shape}; pass allow_up_sizing=True"
                )
            if n <= old.size and old.flags.c_contiguous:
                return old.reshape(-1)[:n].reshape(shape)  # a view: memory shared with this executor
            with self._ctx.device_scope():
                return self._xp.zeros(shape, old.dtype)

        for name, old, shape in zip(self._arg_names, self.arg_arrays, arg_shapes):
            if tuple(old.shape) != tuple(shape) and name not in kwargs and not partial_shaping:
                raise ShapeError(
                    f"reshape: argument {name!r} would change shape from {tuple(old.shape)} to {tuple(shape)}; "
                    "pass its new shape or partial_shaping=True"
                )
        new_args = [resized(a, s, n, "argument") for n, a, s in zip(self._arg_names, self.arg_arrays, arg_shapes)]
        new_grads = [resized(g, s, n, "gradient of") for n, g, s in zip(self._arg_names, self.grad_arrays, arg_shapes)]
        new_aux = [resized(a, s, n, "auxiliary state") for n, a, s in zip(self._aux_names, self.aux_arrays, aux_shapes)]
        args_grad = dict(zip(self._arg_names, new_grads))
        return Executor(self._symbol, self._ctx, new_args, args_grad, dict(self._reqs), new_aux)


def _shape_of(value, what):
    try:
        return (int(value),) if isinstance(value, (int, np.integer)) else tuple(int(d) for d in value)
    except (TypeError, ValueError):
        raise TypeError(f"{what}: a shape must be a tuple of ints, got {value!r}") from None


@_gc_paused
def simple_bind(symbol, ctx, grad_req="write", type_dict=None, shapes=None, **_):
    """Infer every shape from ``shapes``, allocate zeroed arrays on ``ctx`` and bind."""
    from ..symbol import parse_dtype_attr

    ctx = current_context() if ctx is None else ctx
    if not isinstance(ctx, Context):
        raise TypeError(f"simple_bind: ctx must be a Context such as sg.cpu(), got {ctx!r}")
    shapes = shapes or {}
    nodes, arg_nodes, aux_nodes = symbol._arg_and_aux_nodes()
    arg_shapes, _, aux_shapes = symbol.infer_shape_partial(**shapes)
    unknown = [n.name for n, s in zip(arg_nodes + aux_nodes, list(arg_shapes) + list(aux_shapes)) if s is None]
    if unknown:
        raise ShapeError(
            f"simple_bind: cannot infer the shapes of {unknown} from the given shapes {shapes}; "
            "pass them as keyword arguments (name=shape)"
        )
    names = [n.name for n in arg_nodes + aux_nodes]
    type_dict = dict(type_dict or {})
    bad = [k for k in type_dict if k not in names]
    if bad:
        raise BindError(f"simple_bind: type_dict names {bad[0]!r}, which is not an input; inputs are {names}")
    known = {}
    for n in arg_nodes + aux_nodes:
        if n.name in type_dict:
            known[(n.id, 0)] = np.dtype(type_dict[n.name])
        elif "__dtype__" in n.attrs:
            known[(n.id, 0)] = parse_dtype_attr(n.attrs["__dtype__"])
    infer_types(nodes, known)
    for n in arg_nodes + aux_nodes:  # anything still unknown defaults to float32 (MXNet)
        known.setdefault((n.id, 0), np.dtype(np.float32))
    infer_types(nodes, known)
    xp = ctx.xp
    reqs = normalize_grad_req(grad_req, [n.name for n in arg_nodes], "simple_bind")
    with ctx.device_scope():
        args = [xp.zeros(s, known[(n.id, 0)]) for n, s in zip(arg_nodes, arg_shapes)]
        grads = {n.name: xp.zeros(s, known[(n.id, 0)]) for n, s in zip(arg_nodes, arg_shapes)
                 if reqs[n.name] != "null"}
        aux = [xp.zeros(s, known[(n.id, 0)]) for n, s in zip(aux_nodes, aux_shapes)]
    return Executor(symbol, ctx, args, grads, reqs, aux)
