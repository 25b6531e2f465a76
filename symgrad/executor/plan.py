"""Compile a symbol (plus its gradient graph) once into a flat plan.

Steps (DESIGN "Executor plan"): build the backward graph only for arguments
whose grad_req is not ``null``; take the combined DAG as a networkx graph;
order it topologically with the forward prefix first; give every value an
integer slot; emit instructions pre-bound to ``xp`` and the parsed params;
free each value after its last use (forward values that backward reads are
kept); generate one straight-line Python function per phase so the hot loop
touches no networkx, no registry and no dict lookup by name.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence

import networkx as nx

from ..gradient import build_gradients
from ..graph import Node, to_networkx, topo_order
from ..infer import where

__all__ = ["Plan", "Instr"]


class Instr:
    """One pre-bound operator call: ``outs = fn(*[v[i] for i in ins])``."""

    __slots__ = ("fn", "ins", "outs", "node", "train", "tuple_out")

    def __init__(self, fn, ins, outs, node, train, tuple_out):
        self.fn = fn
        self.ins = tuple(ins)
        self.outs = tuple(outs)
        self.node = node
        self.train = train
        self.tuple_out = tuple_out

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

    def __init__(self, heads: Sequence, arg_nodes: Sequence[Node], aux_nodes: Sequence[Node],
                 grad_args: Sequence[bool], xp, pending_aux: dict, grad_like: Sequence | None = None):
        self.heads = list(heads)
        grad_entries = self._gradient_graph(arg_nodes, grad_args)
        fwd_nodes, bwd_nodes = self._split(grad_entries)
        self._assign_slots(arg_nodes, aux_nodes, grad_entries)
        # per-plan copies of stateful parameters (a CustomOp's operator instances): every executor
        # gets its own, shared by the forward node and its backward node (MXNet creates the
        # operator per executor), so two executors of one symbol never see each other's state
        self._states: dict[int, object] = {}
        aux_index = {n.id: i for i, n in enumerate(aux_nodes)}
        self.forward_instrs = [self._instr(n, self.slot_of, xp, aux_index, pending_aux) for n in fwd_nodes if n.op]
        self.backward_instrs = [self._instr(n, self.slot_of, xp, aux_index, pending_aux) for n in bwd_nodes if n.op]
        self.mutates_aux = any(ins.node.op.mutates_aux for ins in self.forward_instrs)
        self._liveness()
        self._downstream_cache: dict = {}
        self._gradient_buffers(xp, grad_like)
        self.run_forward = _generate(self.forward_instrs, self.forward_frees, "forward")
        self.run_backward = _generate(self.backward_instrs, self.backward_frees, "backward", self.out_buffers)

    # -- phases of __init__ --------------------------------------------------------------------------------
    def _gradient_graph(self, arg_nodes, grad_args):
        """The symbolic gradient of every argument that wants one (None for the others), w.r.t. head-gradient
        variables ``__head_grad{i}__``."""
        self.head_grad_nodes = [Node(None, f"__head_grad{i}__", {}, {}, (), 1) for i in range(len(self.heads))]
        wrt = [n for n, g in zip(arg_nodes, grad_args) if g]
        grads = build_gradients(self.heads, [(v, 0) for v in self.head_grad_nodes], wrt) if wrt else []
        grad_of = dict(zip([n.id for n in wrt], grads))
        return [grad_of.get(n.id) for n in arg_nodes]

    def _split(self, grad_entries):
        """Deterministic topological order of the combined graph, split into the forward (the ancestors of the
        outputs) and the backward (the rest)."""
        nodes = topo_order(self.heads + [e for e in grad_entries if e is not None])
        self.graph = to_networkx(nodes)
        fwd_ids = set()
        for node, _ in self.heads:
            fwd_ids.add(node.id)
            fwd_ids |= nx.ancestors(self.graph, node.id)
        self.nodes = nodes
        self.backward_nodes = [n for n in nodes if n.id not in fwd_ids]
        return [n for n in nodes if n.id in fwd_ids], self.backward_nodes

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

    def _instr(self, node, slot, xp, aux_index, pending_aux):
        op = node.op
        params = node.params
        state = params.get("__state__")
        if state is not None and hasattr(state, "per_executor"):
            own = self._states.get(id(state))
            if own is None:
                own = self._states[id(state)] = state.per_executor()
            params = {**params, "__state__": own}
        fn = functools.partial(op.forward, xp, **params)
        if op.mutates_aux:
            n_args = node.num_args()
            targets = [aux_index.get(src.id) for src, _ in node.inputs[n_args:]]
            fn = _aux_writer(fn, targets, pending_aux)
        ins = [slot[(src.id, i)] for src, i in node.inputs]
        outs = [slot[(node.id, k)] for k in range(node.num_outputs)]
        tuple_out = callable(op.num_outputs) or node.num_outputs > 1
        return Instr(fn, ins, outs, node, op.needs_is_train, tuple_out)

    def downstream(self, arg_positions) -> list[Instr]:
        """Forward instructions that (transitively) read one of the given arguments, in order."""
        key = tuple(sorted(arg_positions))
        cached = self._downstream_cache.get(key)
        if cached is None:
            dirty = {self.arg_slots[i] for i in key if self.arg_slots[i] is not None}
            cached = []
            for ins in self.forward_instrs:
                if any(s in dirty for s in ins.ins):
                    cached.append(ins)
                    dirty.update(ins.outs)
            self._downstream_cache[key] = cached
        return cached

    def instr_at(self, phase: str, index: int) -> Instr:
        return (self.forward_instrs if phase == "forward" else self.backward_instrs)[index]

    def __repr__(self):
        lines = ["forward:"]
        lines += [f"  {ins!r}" for ins in self.forward_instrs]
        lines.append("backward:")
        lines += [f"  {ins!r}" for ins in self.backward_instrs]
        return "\n".join(lines)


def run_instrs(instrs, vals, is_train, phase, callback=None, monitor_all=False, transform=None, input_hook=None):
    """Interpret instructions one by one (monitoring, partial re-runs, value hooks); frees nothing.

    ``transform(node, k, value, phase) -> value``, when given, replaces output ``k`` of every instruction
    before it is stored (and before ``callback`` sees it). ``input_hook(node, inputs)``, when given, sees the input
    arrays of every instruction before it runs and may return replacements (see ``hooked_inputs``).
    """
    for ins in instrs:
        args = [vals[s] for s in ins.ins]
        node = ins.node
        if input_hook is not None:
            args = hooked_inputs(input_hook, ins, args, vals)
        if callback is not None and monitor_all:
            # MXNet's names: a variable input under its own name too, then ``<node>_<input name>``
            for (src, _), name, a in zip(node.inputs, node.input_names(), args):
                if src.op is None:
                    callback(src.name, a)
                callback(f"{node.name}_{name}", a)
        try:
            res = ins.fn(*args, is_train=is_train) if ins.train else ins.fn(*args)
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
            raise ValueError(f"input hook: replacement for {name!r} of {where(node)} has shape {tuple(rep.shape)}, "
                             f"expected {tuple(old.shape)}")
        if rep.dtype != old.dtype:
            raise TypeError(f"input hook: replacement for {name!r} of {where(node)} has dtype {rep.dtype}, "
                            f"expected {old.dtype}")
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


def _generate(instrs, frees, phase, out_buffers=None):
    """One straight-line function ``run(v, is_train)`` for a phase (``out=`` buffers by instruction)."""
    ns = {}
    lines = ["def run(v, is_train):"]
    for k, ins in enumerate(instrs):
        ns[f"f{k}"] = ins.fn
        args = [f"v[{s}]" for s in ins.ins]
        if ins.train:
            args.append("is_train=is_train")
        if out_buffers and k in out_buffers:
            ns[f"o{k}"] = out_buffers[k]
            args.append(f"out=o{k}")
        call = f"f{k}({', '.join(args)})"
        if ins.tuple_out:
            lhs = ", ".join(f"v[{s}]" for s in ins.outs) + ","
        else:
            lhs = f"v[{ins.outs[0]}]"
        lines.append(f"    {lhs} = {call}")
        if frees[k]:
            lines.append("    " + "; ".join(f"v[{s}] = None" for s in frees[k]))
    if len(lines) == 1:
        lines.append("    pass")
    filename = f"<symgrad {phase} plan>"
    # Line k+2 of the source runs instruction k (used to name the failing op in errors).
    line_to_instr = {}
    lineno = 1
    for k in range(len(instrs)):
        lineno += 1
        line_to_instr[lineno] = k
        if frees[k]:
            lineno += 1
    code = compile("\n".join(lines), filename, "exec")
    exec(code, ns)
    run = ns["run"]
    run.line_to_instr = line_to_instr
    run.filename = filename
    return run


def failing_instr(exc: BaseException, run):
    """The instruction index that raised ``exc`` inside generated ``run``, or None."""
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
            exc.symgrad_node = node
        except AttributeError:  # an exception type without a __dict__
            pass
    msg = f"(raised by {where(node)} during {phase})"
    if sys.version_info >= (3, 11):
        exc.add_note(msg)
    elif exc.args and isinstance(exc.args[0], str):
        exc.args = (f"{exc.args[0]} {msg}",) + exc.args[1:]
