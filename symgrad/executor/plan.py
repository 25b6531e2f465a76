"""Compile a symbol (plus its gradient graph) once into a flat plan.

Steps (DESIGN "Executor plan"): build the backward graph only for arguments
whose grad_req is not ``null``; order the combined DAG topologically with
the forward prefix first (``Plan.graph``: its networkx view, built on demand); give every value an
integer slot; emit instructions pre-bound to ``xp`` and the parsed params;
free each value after its last use (forward values that backward reads are
kept); generate one straight-line Python function per phase so the hot loop
touches no networkx, no registry and no dict lookup by name.

Kernels: where every input dtype of an instruction is known at bind (dtype inference over the forward
and the gradient graph), an op may offer a cheaper exact equivalent of its forward for exactly those
dtypes: ``op.specialize(xp, in_types, **params)`` returns None or ``(fn, pre, post)``, meaning
``forward(xp, *inputs, **params) == fn(*pre, *inputs, *post)`` (``fn`` None: the first input itself).
The generated code calls ``fn`` directly (``operator.mul`` and friends become infix operators), so a
small elementwise instruction costs about one numpy call. A kernel must be exact for the inferred dtypes (a
scalar op's constant is a 0-d array of its input's dtype: numpy resolves a weak Python float for every call,
which on a small array costs as much as the op). Every value has its inferred dtype at run time (the op
table tests forward dtypes against inference; value hooks must keep dtypes); where that cannot be promised --
a head gradient given in another float dtype than its output's -- the backward runs the ops' own forwards.
"""

from __future__ import annotations

import functools
import operator
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..base import ShapeError
from ..context import Array, ArrayModule
from ..gradient import build_gradients
from ..graph import Entry, Node, to_networkx, topo_order_split
from ..infer import infer_types, where
from .monitor_names import monitor_input_names

if TYPE_CHECKING:
    import networkx as nx
    import numpy as np

__all__ = ["Plan", "Instr"]


class Instr:
    """One pre-bound operator call: ``outs = fn(*[v[i] for i in ins])``.

    ``generic`` is the op's own forward with its parameters bound; ``kernel`` is None or the op's
    ``(fn, pre, post)`` specialisation for the inferred input dtypes (see the module docstring), and
    ``fn`` is then that kernel as one callable. Assigning ``fn`` (a profiler wrapping it) drops the kernel
    and the generic form, so every path runs the new callable.
    """

    __slots__ = ("_fn", "generic", "kernel", "ins", "outs", "node", "train", "tuple_out")

    def __init__(self, fn, ins, outs, node, train, tuple_out, kernel=None):
        self.generic = fn
        self.kernel = kernel
        self._fn = fn if kernel is None else _kernel_callable(kernel)
        self.ins = tuple(ins)
        self.outs = tuple(outs)
        self.node = node
        self.train = train
        self.tuple_out = tuple_out

    @property
    def fn(self):
        return self._fn

    @fn.setter
    def fn(self, fn):
        self._fn = self.generic = fn
        self.kernel = None

    def __repr__(self):
        lhs = ", ".join(f"%{s}" for s in self.outs)
        rhs = ", ".join(f"%{s}" for s in self.ins)
        return f"{lhs} = {self.node.op_name}[{self.node.name}]({rhs})"


class Plan:
    """Forward and backward instruction lists over integer slots.

    Attributes:
        n_slots: size of the value list.
        arg_slots / aux_slots: slot of each argument / auxiliary state.
        head_slots: slot of each output.
        head_grad_slots: slot of each head gradient, or None where backward never reads it.
        grad_slots: slot holding each argument's gradient, None when not computed.
        forward_instrs / backward_instrs: the two phases.
    """

    def __init__(
        self,
        heads: Sequence[Entry],
        arg_nodes: Sequence[Node],
        aux_nodes: Sequence[Node],
        grad_args: Sequence[bool],
        xp: ArrayModule,
        pending_aux: dict[int, Array],
        grad_like: Sequence[Array | None] | None = None,
        types: Mapping[tuple[int, int], np.dtype] | None = None,
        nodes: Sequence[Node] | None = None,
        shapes: Mapping[tuple[int, int], tuple | None] | None = None,
    ) -> None:
        """``types``: the dtypes inferred for the forward values (``(node id, output) -> dtype``), or None;
        where known (and completed over the gradient graph) they select the ops' kernels. ``nodes``:
        ``topo_order(heads)``, when the caller has it (then the forward graph is not walked again). ``shapes``:
        the shapes inferred for the forward values, read only by ops whose parameters leave their output
        shape open (``OpDef.needs_out_shape``)."""
        self.heads = list(heads)
        self._forward_order = nodes
        grad_entries = self._gradient_graph(arg_nodes, grad_args)
        fwd_nodes, bwd_nodes = self._split(grad_entries)
        self._assign_slots(arg_nodes, aux_nodes, grad_entries)
        types = self.value_types = self._value_types(types)  # (node id, output) -> dtype, where inferred
        # per-plan copies of stateful parameters (a CustomOp's operator instances): every executor
        # gets its own, shared by the forward node and its backward node (MXNet creates the
        # operator per executor), so two executors of one symbol never see each other's state
        self._states: dict[int, object] = {}
        aux_index = {n.id: i for i, n in enumerate(aux_nodes)}
        make = functools.partial(
            self._instr,
            slot=self.slot_of,
            xp=xp,
            aux_index=aux_index,
            pending_aux=pending_aux,
            types=types,
            kernels={},
            shapes=shapes or {},
        )
        self.forward_instrs = [make(n) for n in fwd_nodes if n.op]
        self.backward_instrs = [make(n) for n in bwd_nodes if n.op]
        self.mutates_aux = any(ins.node.op.mutates_aux for ins in self.forward_instrs)
        self._liveness()
        self._downstream_cache: dict = {}
        self._gradient_buffers(xp, grad_like)
        self.run_forward = Runner(self.forward_instrs, self.forward_frees, "forward")
        self.run_backward = Runner(self.backward_instrs, self.backward_frees, "backward", self.out_buffers)
        self._run_backward_generic = None

    # -- phases of __init__ --------------------------------------------------------------------------------
    def _gradient_graph(self, arg_nodes, grad_args):
        """The symbolic gradient of every argument that wants one (None for the others), w.r.t. head-gradient
        variables ``__head_grad{i}__``."""
        self.head_grad_nodes = [Node(None, f"__head_grad{i}__", {}, {}, (), 1) for i in range(len(self.heads))]
        wrt = [n for n, g in zip(arg_nodes, grad_args) if g]
        grads = (
            build_gradients(self.heads, [(v, 0) for v in self.head_grad_nodes], wrt, order=self._forward_order)
            if wrt
            else []
        )
        grad_of = dict(zip([n.id for n in wrt], grads))
        return [grad_of.get(n.id) for n in arg_nodes]

    def _split(self, grad_entries):
        """Deterministic topological order of the combined graph, split into the forward (the ancestors of the
        outputs) and the backward (the rest)."""
        # the outputs and everything they read come first, in one walk
        nodes, n_fwd = topo_order_split(self.heads, [e for e in grad_entries if e is not None], self._forward_order)
        self.nodes = nodes
        self.backward_nodes = nodes[n_fwd:]
        return nodes[:n_fwd], self.backward_nodes

    @functools.cached_property
    def graph(self) -> nx.MultiDiGraph:
        """The combined forward + gradient DAG as a networkx graph (built on first use: binding needs none)."""
        return to_networkx(self.nodes)

    def _value_types(self, types):
        """Dtypes of every value of the plan: the forward's as given, the head gradients as their outputs
        (``head_grad_types``; ``run_backward_for`` checks the given ones), the gradient graph's inferred.
        A gradient node whose rule cannot type it leaves the gradient graph untyped (no kernels there)."""
        self.head_grad_types = [None] * len(self.heads)
        if types is None:
            return {}
        known = dict(types)
        for k, ((node, i), v) in enumerate(zip(self.heads, self.head_grad_nodes)):
            t = known.get((node.id, i))
            self.head_grad_types[k] = t
            if t is not None:
                known[(v.id, 0)] = t
        try:
            return infer_types(self.backward_nodes, dict(known))
        except Exception:  # an optimisation only: the plan stays correct without kernels
            return known

    def _assign_slots(self, arg_nodes, aux_nodes, grad_entries):
        """One integer slot per value; where the arguments, outputs, head gradients and gradients live."""
        slot: dict[tuple, int] = {}
        for n in self.nodes:
            for k in range(n.num_outputs):
                slot[(n.id, k)] = len(slot)
        self.slot_of = slot
        self.n_slots = len(slot)
        self.arg_slots = [slot.get((n.id, 0)) for n in arg_nodes]
        self.aux_slots = [slot.get((n.id, 0)) for n in aux_nodes]
        self.head_slots = [slot[(n.id, i)] for n, i in self.heads]
        self.head_grad_slots = [slot.get((v.id, 0)) for v in self.head_grad_nodes]
        self.grad_slots = [None if e is None else slot[(e[0].id, e[1])] for e in grad_entries]

    def _liveness(self):
        """Free every value after its last use, except what the backward or the caller reads."""
        var_slots = {self.slot_of[(n.id, 0)] for n in self.nodes if n.op is None}
        keep_fwd = set(self.head_slots) | var_slots
        for ins in self.backward_instrs:
            keep_fwd.update(ins.ins)
        keep_fwd.update(s for s in self.grad_slots if s is not None)
        self.forward_frees = _frees(self.forward_instrs, keep_fwd)
        fwd_slots = {s for ins in self.forward_instrs for s in ins.outs}
        # a backward that reads no value a forward computes may run before any forward (MXNet allows it:
        # the gradient of repeat or tile needs only the head gradient)
        bwd_reads = {s for ins in self.backward_instrs for s in ins.ins}
        bwd_reads.update(s for s in self.grad_slots if s is not None)
        self.backward_reads_forward = not fwd_slots.isdisjoint(bwd_reads)
        keep_bwd = var_slots | fwd_slots | {s for s in self.grad_slots if s is not None}
        self.backward_frees = _frees(self.backward_instrs, keep_bwd)

    def _gradient_buffers(self, xp, grad_like):
        """Persistent gradient buffers: an argument's gradient computed by an op that accepts ``out=`` (dot) is
        written into a buffer the plan owns and reuses on every backward, instead of a fresh gradient-sized
        temporary per call (with glibc those large temporaries go back to the OS and are page-faulted in
        again on every step). The executor still copies the buffer into the caller's array once the whole
        backward has run."""
        self.out_buffers: dict[int, object] = {}  # backward instruction index -> buffer
        if grad_like is None:
            return
        producer = {ins.outs[0]: k for k, ins in enumerate(self.backward_instrs) if len(ins.outs) == 1}
        for s, like in zip(self.grad_slots, grad_like):
            k = producer.get(s)
            if like is not None and k is not None and self.backward_instrs[k].node.op.accepts_out:
                self.out_buffers.setdefault(k, xp.empty_like(like))

    def _instr(self, node, slot, xp, aux_index, pending_aux, types, kernels, shapes):
        op = node.op
        params = node.params
        state = params.get("__state__")
        if state is not None and hasattr(state, "per_executor"):
            own = self._states.get(id(state))
            if own is None:
                own = self._states[id(state)] = state.per_executor()
            params = {**params, "__state__": own}
        if op.needs_out_shape and (not callable(op.needs_out_shape) or op.needs_out_shape(params)):
            params = {**params, "out_shape": _inferred_out_shapes(node, shapes)}
        fn = functools.partial(op.forward, xp, **params)
        if op.mutates_aux:
            n_args = node.num_args()
            targets = [aux_index.get(src.id) for src, _ in node.inputs[n_args:]]
            fn = _aux_writer(fn, targets, pending_aux)
        ins = [slot[key] for key in node.input_keys]
        outs = [slot[(node.id, k)] for k in range(node.num_outputs)]
        tuple_out = callable(op.num_outputs) or node.num_outputs > 1
        kernel = None
        if not (tuple_out or op.mutates_aux or op.needs_is_train or state is not None):
            kernel = _kernel(node, xp, types, kernels)
        return Instr(fn, ins, outs, node, op.needs_is_train, tuple_out, kernel)

    def stateful_grad_outputs(self) -> dict:
        """``{argument position: (state, j)}`` for the arguments whose gradient is output ``j`` of a backward
        node with per-executor state (a CustomOp's ``_backward_Custom``) and nothing else: no sum with other
        contributions, read by no later instruction. The executor hands those ops the argument's own gradient
        buffer and grad_req, as MXNet's executor does (``CustomOp.backward``'s ``req`` and ``in_grad``)."""
        producer, read = {}, set()
        for ins in self.backward_instrs:
            read.update(ins.ins)
            state = ins.node.params.get("__state__")
            own = self._states.get(id(state)) if state is not None else None
            if own is not None and ins.node.op.name == "_backward_Custom":
                for j, s in enumerate(ins.outs):
                    producer[s] = (own, j)
        return {
            a: producer[s] for a, s in enumerate(self.grad_slots) if s is not None and s in producer and s not in read
        }

    def run_backward_for(self, head_grads):
        """The backward function for these head gradients: the generated one with kernels when each given
        head gradient has its output's dtype, else (another float dtype: the kernels' dtypes may not
        hold) one that runs every op's own forward, generated on first use."""
        for g, t in zip(head_grads, self.head_grad_types):
            if g is not None and (t is None or g.dtype != t):
                if self._run_backward_generic is None:
                    self._run_backward_generic = Runner(
                        self.backward_instrs, self.backward_frees, "backward", self.out_buffers, kernels=False
                    )
                return self._run_backward_generic
        return self.run_backward

    def downstream(self, arg_positions) -> list[Instr]:
        """Forward instructions that (transitively) read one of the given arguments, in order."""
        return self._downstream(arg_positions)[0]

    def run_downstream(self, arg_positions):
        """A ``Runner`` of ``downstream(arg_positions)`` (frees nothing; ``.instrs`` lists them)."""
        return self._downstream(arg_positions)[1]

    def _downstream(self, arg_positions):
        key = tuple(sorted(arg_positions))
        cached = self._downstream_cache.get(key)
        if cached is None:
            dirty = {self.arg_slots[i] for i in key if self.arg_slots[i] is not None}
            instrs = []
            for ins in self.forward_instrs:
                if any(s in dirty for s in ins.ins):
                    instrs.append(ins)
                    dirty.update(ins.outs)
            run = Runner(instrs, [()] * len(instrs), "downstream forward")
            cached = self._downstream_cache[key] = (instrs, run)
        return cached

    def instr_at(self, phase: str, index: int) -> Instr:
        return (self.forward_instrs if phase == "forward" else self.backward_instrs)[index]

    def __repr__(self):
        lines = ["forward:"]
        lines += [f"  {ins!r}" for ins in self.forward_instrs]
        lines.append("backward:")
        lines += [f"  {ins!r}" for ins in self.backward_instrs]
        return "\n".join(lines)


def run_instrs(
    instrs, vals, is_train, phase, callback=None, monitor_all=False, transform=None, input_hook=None, kernels=True
):
    """Interpret instructions one by one (monitoring, value hooks); frees nothing.

    ``transform(node, k, value, phase) -> value``, when given, replaces output ``k`` of every instruction
    before it is stored (and before ``callback`` sees it). ``input_hook(node, inputs)``, when given, sees the input
    arrays of every instruction before it runs and may return replacements (see ``hooked_inputs``).
    ``kernels=False`` runs every op's own forward (``Instr.generic``).
    """
    for ins in instrs:
        args = [vals[s] for s in ins.ins]
        node = ins.node
        if input_hook is not None:
            args = hooked_inputs(input_hook, ins, args, vals)
        if callback is not None and monitor_all:
            # MXNet's names: a variable input under its own name too, then ``<node>_<input name>``
            for (src, _), name, a in zip(node.inputs, monitor_input_names(node), args):
                if src.op is None:
                    callback(src.name, a)
                callback(f"{node.name}_{name}", a)
        fn = ins.fn if kernels else ins.generic
        try:
            res = fn(*args, is_train=is_train) if ins.train else fn(*args)
        except Exception as exc:
            annotate(exc, node, phase)
            raise
        outs = res if ins.tuple_out else (res,)
        if transform is not None:
            outs = tuple(transform(node, k, r, phase) for k, r in enumerate(outs))
        for s, r in zip(ins.outs, outs):
            vals[s] = r
        if callback is not None:
            for k, r in enumerate(outs):
                callback(node.output_name(k), r)


def hooked_inputs(hook, ins, args, vals):
    """The inputs of ``ins`` after ``hook(node, inputs)``; replacements go back into their value slots.

    ``hook`` returns None (keep every input) or one entry per input: None keeps that input, an array of
    the same shape and dtype replaces it. The replacement is stored in the slot the input came from, so
    every later reader of that value -- the backward's instructions included -- reads it too.
    """
    node = ins.node
    new = hook(node, list(args))
    if new is None:
        return args
    new = list(new)
    if len(new) != len(args):
        raise ValueError(f"input hook returned {len(new)} arrays for the {len(args)} inputs of {where(node)}")
    names = node.input_names()
    for k, (s, old, rep) in enumerate(zip(ins.ins, args, new)):
        if rep is None:
            new[k] = old
            continue
        name = names[k] if k < len(names) else f"input {k}"
        if tuple(rep.shape) != tuple(old.shape):
            raise ValueError(
                f"input hook: replacement for {name!r} of {where(node)} has shape {tuple(rep.shape)}, "
                f"expected {tuple(old.shape)}"
            )
        if rep.dtype != old.dtype:
            raise TypeError(
                f"input hook: replacement for {name!r} of {where(node)} has dtype {rep.dtype}, expected {old.dtype}"
            )
        vals[s] = rep
    return new


def _aux_writer(fn, targets, pending):
    """Wrap a forward returning ``(outputs, aux_updates)``: park updates in ``pending``."""

    def run(*args, **kwargs):
        outs, updates = fn(*args, **kwargs)
        for t, u in zip(targets, updates):
            if t is not None and u is not None:
                pending[t] = u
        return outs

    return run


def _frees(instrs, keep):
    """For each instruction, the slots whose last reader (or writer) it is."""
    last = {}
    for k, ins in enumerate(instrs):
        for s in ins.outs:
            last[s] = k
        for s in ins.ins:
            last[s] = k
    frees = [[] for _ in instrs]
    for s, k in last.items():
        if s not in keep:
            frees[k].append(s)
    return [tuple(sorted(f)) for f in frees]


#: instructions per generated function: CPython's compile() grows faster than linearly with the size
#: of one function (10 000 lines took 1 s, 30 000 took 5 s), so long plans become a chain of chunks
_CHUNK = 400

#: kernels whose ``fn`` is a binary operator: emitted as the infix expression (no call at all)
_INFIX = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/"}


def _inferred_out_shapes(node, shapes) -> tuple:
    """The output shapes of ``node`` inferred at bind, for an op whose parameters leave them open
    (``OpDef.needs_out_shape``); a ShapeError names the node where inference determines none (MXNet's bind
    fails there too: ``zeros(shape=())`` in legacy mode, no consumer fixing ``ones(shape=(-1, 3))``)."""
    found = tuple(shapes.get((node.id, k)) for k in range(node.num_outputs))
    for s in found:
        if s is None or min(s, default=0) < 0:
            raise ShapeError(
                f"{where(node)}: cannot bind: its parameters leave its output shape open and shape inference "
                "determines it from no consumer (in MXNet's legacy shape mode, the default, a 0 dimension and "
                "shape () are unknown; symgrad.util.np_shape() reads them as sizes)"
            )
    return found


def _kernel(node, xp, types, cache):
    """``node``'s ``(fn, pre, post)`` kernel for its inferred input dtypes, or None. ``cache`` keeps the kernels
    of ops without parameters by op and input dtypes (a chain of 5 000 tanh asks for one kernel 5 000 times)."""
    specialize = node.op.specialize
    if specialize is None:
        return None
    in_types = [types.get(key) for key in node.input_keys]
    for t in in_types:  # an identity test: ``None in in_types`` would compare dtypes with None (float64)
        if t is None:
            return None
    if node.params:
        return specialize(xp, in_types, **node.params)
    key = (node.op.name, *in_types)
    kernel = cache.get(key, cache)
    if kernel is cache:
        kernel = cache[key] = specialize(xp, in_types)
    return kernel


def _kernel_callable(kernel):
    """A kernel ``(fn, pre, post)`` as one callable of the instruction's inputs."""
    fn, pre, post = kernel
    if fn is None:
        return _first
    if not post:
        return functools.partial(fn, *pre) if pre else fn
    if not pre and len(post) == 1:
        c = post[0]
        return lambda x: fn(x, c)
    return lambda *args: fn(*pre, *args, *post)


def _first(x, *_):
    return x


def _call_source(k, ins, ns, kernels, out_buffer):
    """The right-hand side of instruction ``k``'s line; names it needs go into ``ns``."""
    args = [f"v[{s}]" for s in ins.ins]
    if kernels and ins.kernel is not None and out_buffer is None:
        fn, pre, post = ins.kernel
        consts = []
        for j, c in enumerate((*pre, *post)):
            ns[f"c{k}_{j}"] = c
            consts.append(f"c{k}_{j}")
        args = consts[: len(pre)] + args + consts[len(pre) :]
        if fn is None:
            return args[len(pre)]
        if fn in _INFIX and len(args) == 2:
            return f"{args[0]} {_INFIX[fn]} {args[1]}"
        ns[f"f{k}"] = fn
        return f"f{k}({', '.join(args)})"
    ns[f"f{k}"] = ins.fn if kernels else ins.generic
    if ins.train:
        args.append("is_train=is_train")
    if out_buffer is not None:
        ns[f"o{k}"] = out_buffer
        args.append(f"out=o{k}")
    return f"f{k}({', '.join(args)})"


def _generate(instrs, frees, phase, out_buffers=None, kernels=True):
    """Straight-line code ``run(v, is_train)`` for a phase (``out=`` buffers by instruction index).

    ``kernels=False``: every instruction calls its op's own forward. Plans longer than ``_CHUNK``
    instructions are split into functions of ``_CHUNK`` instructions that ``run`` calls in turn.
    """
    ns = {}
    out_buffers = out_buffers or {}
    lines, line_instr = [], []  # source lines and, for each, the instruction it runs (or None)
    chunks = [range(a, min(a + _CHUNK, len(instrs))) for a in range(0, len(instrs), _CHUNK)] or [range(0)]
    for c, chunk in enumerate(chunks):
        lines.append(f"def run{c}(v, is_train):")
        line_instr.append(None)
        for k in chunk:
            ins = instrs[k]
            if ins.tuple_out:
                lhs = ", ".join(f"v[{s}]" for s in ins.outs) + ","
            else:
                lhs = f"v[{ins.outs[0]}]"
            lines.append(f"    {lhs} = {_call_source(k, ins, ns, kernels, out_buffers.get(k))}")
            line_instr.append(k)
            if frees[k]:
                lines.append("    " + "; ".join(f"v[{s}] = None" for s in frees[k]))
                line_instr.append(k)
        if not chunk:
            lines.append("    pass")
            line_instr.append(None)
    if len(chunks) > 1:
        lines.append("def run(v, is_train):")
        lines += [f"    run{c}(v, is_train)" for c in range(len(chunks))]
    else:
        lines.append("run = run0")
    filename = f"<symgrad {phase} plan>"
    code = compile("\n".join(lines), filename, "exec")
    exec(code, ns)
    run = ns["run"]
    # line numbers start at 1; a line that frees values maps to its instruction too (errors name the op)
    run.line_to_instr = {i + 1: k for i, k in enumerate(line_instr) if k is not None}
    run.filename = filename
    run.kernels = kernels
    return run


def _compile_after(n_instrs: int) -> int:
    """On which call a phase of ``n_instrs`` instructions switches to generated code.

    Compiling costs about 10-20 us per instruction (CPython's compile(); more than everything else a bind
    does), interpreting about 0.2 us per instruction more than the generated code on every run: a small
    phase compiles on its second run, a large one once it has run often enough to pay for it, and a
    graph bound to run once or twice (a 100 000-node chain) never pays for compiling at all.
    """
    return min(2 + n_instrs // 1000, 50)


class Runner:
    """``run(v, is_train)`` for one phase: interpreted from a flat step table for its first runs, then the
    generated straight-line code of ``_generate`` (see ``_compile_after``).

    ``kernels=False`` runs every op's own forward (``Instr.generic``); ``failing_instr`` finds the
    instruction that raised in either form. ``compiled`` is the generated function once it exists.
    """

    def __init__(self, instrs, frees, phase, out_buffers=None, kernels=True):
        self.instrs, self.frees, self.phase = instrs, frees, phase
        self.out_buffers = out_buffers or {}
        self.kernels = kernels
        self.compiled = None
        self._steps = None
        self._calls = 0
        self._compile_at = _compile_after(len(instrs))

    def __call__(self, v, is_train):
        if self.compiled is None:
            self._calls += 1
            if self._calls < self._compile_at:
                if self._steps is None:
                    self._steps = self._step_table()
                return _interpret(self._steps, v, is_train)
            self.compiled = _generate(self.instrs, self.frees, self.phase, self.out_buffers, self.kernels)
            self._steps = None
        return self.compiled(v, is_train)

    def _step_table(self):
        """One ``(k, mode, fn, ins, outs, frees)`` per instruction; mode 1 / 2: ``v[outs] = fn(v[a])`` /
        ``fn(v[a], v[b])``, mode 0 the general call (``is_train``, ``out=``, several outputs)."""
        steps = []
        for k, ins in enumerate(self.instrs):
            fn = ins.fn if self.kernels else ins.generic
            buf = self.out_buffers.get(k)
            if ins.train or ins.tuple_out or buf is not None or len(ins.ins) not in (1, 2):
                steps.append((k, 0, (fn, ins.train, buf, ins.tuple_out), ins.ins, ins.outs, self.frees[k]))
            elif len(ins.ins) == 1:
                steps.append((k, 1, fn, ins.ins[0], ins.outs[0], self.frees[k]))
            else:
                steps.append((k, 2, fn, ins.ins, ins.outs[0], self.frees[k]))
        return steps

    def failing(self, exc: BaseException):
        """The index of the instruction that raised ``exc`` during the last call, or None."""
        if self.compiled is not None:
            return failing_instr(exc, self.compiled)
        tb = exc.__traceback__
        found = None
        while tb is not None:
            if tb.tb_frame.f_code is _interpret.__code__:
                found = tb.tb_frame.f_locals.get("_k")
            tb = tb.tb_next
        return found


def _interpret(steps, v, is_train):
    for _k, mode, fn, ins, outs, frees in steps:  # _k: read by Runner.failing from the frame
        if mode == 1:
            v[outs] = fn(v[ins])
        elif mode == 2:
            v[outs] = fn(v[ins[0]], v[ins[1]])
        else:
            fn, train, buf, tuple_out = fn
            args = [v[s] for s in ins]
            kwargs = {}
            if train:
                kwargs["is_train"] = is_train
            if buf is not None:
                kwargs["out"] = buf
            res = fn(*args, **kwargs)
            if tuple_out:
                for s, r in zip(outs, res):
                    v[s] = r
            else:
                v[outs[0]] = res
        if frees:
            for s in frees:
                v[s] = None


def failing_instr(exc: BaseException, run):
    """The instruction index that raised ``exc`` inside ``run`` (a ``Runner`` or generated code), or None."""
    if isinstance(run, Runner):
        return run.failing(exc)
    tb = exc.__traceback__
    found = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == run.filename:
            found = run.line_to_instr.get(tb.tb_lineno)
        tb = tb.tb_next
    return found


def annotate(exc: BaseException, node: Node, phase: str):
    """Attach the failing operator instance to an exception without changing its type.

    The innermost node is also kept as ``exc.symgrad_node`` (a ``graph.Node``: ``.op.name``, ``.name``).
    """
    if getattr(exc, "symgrad_node", None) is None:
        try:
            exc.symgrad_node = node  # type: ignore[attr-defined]  # (an attribute of our own on any exception)
        except AttributeError:  # an exception type without a __dict__
            pass
    msg = f"(raised by {where(node)} during {phase})"
    if sys.version_info >= (3, 11):
        exc.add_note(msg)
    elif exc.args and isinstance(exc.args[0], str):
        exc.args = (f"{exc.args[0]} {msg}",) + exc.args[1:]
