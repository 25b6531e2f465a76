"""What an Executor tells about itself: ``debug_str`` (MXNet's listing and memory summary) and
``get_optimized_symbol`` (the graph MXNet 1.9.1's executor would run)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..graph import Entry, Node
from ..opdef import get_op
from ..symbol import Symbol
from .placement import Placement

__all__ = ["debug_listing", "optimized_symbol", "cse_enabled"]


def cse_enabled() -> bool:
    """MXNet's ``MXNET_ELIMINATE_COMMON_EXPR`` (on unless set to 0), read when an executor is bound."""
    return os.environ.get("MXNET_ELIMINATE_COMMON_EXPR", "1").strip() not in ("0", "false", "False")


def _mergeable(node: Node) -> bool:
    """Whether common-expression elimination may merge ``node`` with an equal one (MXNet's ``NodeEqual``: not a
    variable, an op that mutates no input, keeps no state and draws no random numbers; an op that behaves
    otherwise in training, Dropout's masks among them, is never merged either)."""
    op = node.op
    if op is None or op.is_random or op.mutates_aux or op.extra_params or op.needs_is_train:
        return False
    return "__state__" not in node.params


def optimized_symbol(heads: Sequence[Entry], nodes: Sequence[Node], cse: bool, placement: Placement | None) -> Symbol:
    """The forward graph as MXNet's executor runs it: equal nodes merged when ``cse`` (same op, same attributes,
    same inputs), an output merged into an earlier different output isolated by a ``_copy`` node
    ``<node>_<i>_copy`` (as MXNet does), and with ``placement`` a copy ``<node>_<i>_copy`` wherever a node reads
    a value computed on another context (MXNet's ``_CrossDeviceCopy``; a ``_copy`` here, the op symgrad has)."""
    rep: dict[int, Node] = {}  # node id -> its node in the new graph
    seen: dict[tuple, Node] = {}
    copies = {(e[0].id, e[1], dst): name for e, dst, name in placement.copies} if placement else {}
    made: dict[tuple, Entry] = {}

    def read(entry: Entry, dst) -> Entry:
        src, i = entry
        new = (rep[src.id], i)
        name = copies.get((src.id, i, dst)) if dst is not None else None
        if name is None:
            return new
        if (name, dst) not in made:
            made[(name, dst)] = (_copy_node(new, name), 0)
        return made[(name, dst)]

    for node in nodes:
        if node.op is None:
            rep[node.id] = node
            continue
        dst = placement.of(node) if placement else None
        inputs = tuple(read(e, dst) for e in node.inputs)
        key = (node.op.name, tuple(sorted(node.attrs.items())), tuple((n.id, i) for n, i in inputs))
        if cse and _mergeable(node) and key in seen:
            rep[node.id] = seen[key]
            continue
        new = Node(node.op, node.name, node.params, node.attrs, inputs, node.num_outputs)
        rep[node.id] = seen[key] = new
    return Symbol(_isolated_heads(heads, rep))


def _copy_node(entry: Entry, name: str) -> Node:
    return Node(get_op("_copy"), name, {}, {}, (entry,), 1)


def _isolated_heads(heads, rep) -> list[Entry]:
    """The outputs in the new graph; one that merging made equal to an earlier, different output reads a copy."""
    out: list[Entry] = []
    claimed: dict[tuple[int, int], tuple[int, int]] = {}
    for node, i in heads:
        new = (rep[node.id], i)
        key = (new[0].id, i)
        first = claimed.setdefault(key, (node.id, i))
        if first != (node.id, i):
            new = (_copy_node(new, f"{new[0].name}_{i}_copy"), 0)
        out.append(new)
    return out


def debug_listing(
    heads: Sequence[Entry],
    grads: Sequence[Entry | None],
    nodes: Sequence[Node],
    placement: Placement | None,
    total_bytes: int,
) -> str:
    """MXNet's ``Executor.debug_str`` layout: the outputs (forward outputs, then the gradients), every node with its
    inputs and attributes (and its context when parts of the graph are placed on several), the copies between
    contexts, and ``Total <n> MB allocated``: the most memory the plan's computed values hold at once."""
    lines = ["Symbol Outputs:"]
    outs = [e for e in list(heads) + list(grads) if e is not None]
    lines += [f"\toutput[{k}]={n.name}({i})" for k, (n, i) in enumerate(outs)]
    copies_into: dict[int, list] = {}
    if placement is not None:
        for entry, dst, name in placement.copies:
            copies_into.setdefault(entry[0].id, []).append((entry, dst, name))
    for node in nodes:
        lines += _node_lines(node, placement)
        for entry, dst, name in copies_into.get(node.id, ()):
            lines += [
                "--------------------",
                f"Op:_CrossDeviceCopy, Name={name}",
                "Inputs:",
                f"\targ[0]={entry[0].name}({entry[1]})",
                f"Context: {placement.of(entry[0]) if placement else ''} -> {dst} (cpu contexts share host memory)",
            ]
    lines.append(f"Total {total_bytes >> 20} MB allocated")
    return "\n".join(lines) + "\n"


def _node_lines(node: Node, placement: Placement | None) -> list[str]:
    if node.op is None:
        ctx = f" ({placement.of(node)})" if placement is not None else ""
        return [f"Variable:{node.name}{ctx}"]
    lines = ["--------------------", f"Op:{node.op.name}, Name={node.name}", "Inputs:"]
    lines += [f"\targ[{k}]={src.name}({i})" for k, (src, i) in enumerate(node.inputs)]
    if node.attrs:
        lines.append("Attrs:")
        lines += [f"\t{k}={v}" for k, v in sorted(node.attrs.items())]
    if placement is not None:
        lines.append(f"Context: {placement.of(node)}")
    return lines


def peak_bytes(plan, size: Callable[[int], int]) -> int:
    """The most bytes the values computed by ``plan`` hold at once in a forward followed by a backward, each
    value's size given by ``size(slot)``: what each instruction makes is live from then until the instruction
    that frees it (the plan's liveness); the bound arrays and the head gradients belong to the caller."""
    live = peak = 0
    for instrs, frees in ((plan.forward_instrs, plan.forward_frees), (plan.backward_instrs, plan.backward_frees)):
        for ins, freed in zip(instrs, frees):
            live += sum(size(s) for s in ins.outs)
            peak = max(peak, live)
            live -= sum(size(s) for s in freed)
    return peak


def slot_sizes(plan, shapes: Mapping, types: Mapping) -> Callable[[int], int]:
    """``size(slot)`` in bytes from the inferred shapes and dtypes (an unknown shape counts 0, an unknown dtype
    4 bytes an element: MXNet's default float32)."""
    by_slot = {}
    for key, s in plan.slot_of.items():
        shape = shapes.get(key)
        if shape is None:
            continue
        t = types.get(key)
        item = np.dtype(t).itemsize if t is not None else 4
        by_slot[s] = int(np.prod(shape, dtype=np.int64)) * item
    return lambda s: by_slot.get(s, 0)
