"""Placing the parts of a graph on several contexts (``bind(..., group2ctx=...)``, MXNet's model parallelism).

A node created under ``AttrScope(ctx_group="dev1")`` carries the group in its attributes; ``group2ctx`` maps
groups to contexts. The placement follows MXNet's ``PlaceDevice`` pass:

1. a node whose group is mapped runs on that group's context (a group the map lacks is an error, as in MXNet);
   an input whose context is known beforehand (``simple_bind`` allocates an argument on its group's context,
   else on the executor's) keeps it; a gradient node runs where the forward node it belongs to runs (MXNet's
   backward nodes carry their forward node's attributes; symgrad's are named ``<node>_backward_...``) and a
   head gradient arrives where its output is;
2. forward: a node still unplaced runs where its first placed input is;
3. backward: a node still unplaced (an argument bound with ``bind``: a numpy array carries no device number)
   goes where a node that reads it runs -- the last such reader in topological order, as MXNet's pass;
4. what is left runs on the executor's context.

Wherever a node reads a value computed on another context, MXNet inserts a copy node named
``<producer>_<output index>_copy`` (one per value and destination); a gradient computed away from its
argument's context is copied there too. ``Placement.copies`` lists those copies in graph order.

On cpu contexts every ``cpu(i)`` is the same host memory and the plan never writes a value in place, so a copy
between them changes no number: the executor runs the plan as it is and reports the placement (``debug_str``,
``get_optimized_symbol``, ``Executor.arg_contexts``). Contexts on other devices than the executor's are refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from ..base import BindError
from ..context import Context
from ..graph import Entry, Node

__all__ = ["Placement", "check_group2ctx", "ctx_group", "place"]


def ctx_group(node: Node) -> str | None:
    """The ``ctx_group`` a node was created under (stored as ``__ctx_group__``, or as given)."""
    attrs = node.attrs
    return attrs.get("__ctx_group__", attrs.get("ctx_group"))


def check_group2ctx(group2ctx: object, ctx: Context, who: str) -> dict[str, Context] | None:
    """``group2ctx`` validated: a mapping of group names to Contexts that this executor can serve (cpu contexts,
    or the executor's own context); None or empty means no placement."""
    if not group2ctx:
        return None
    if not isinstance(group2ctx, Mapping):
        raise TypeError(f"{who}: group2ctx must be a dict of group name -> Context, got {type(group2ctx).__name__}")
    out = {}
    for group, c in group2ctx.items():
        if not isinstance(group, str):
            raise TypeError(f"{who}: group2ctx keys must be ctx_group names (str), got {group!r}")
        if not isinstance(c, Context):
            raise TypeError(f"{who}: group2ctx[{group!r}] must be a Context such as sg.cpu(1), got {c!r}")
        if c != ctx and not (c.device_type == ctx.device_type == "cpu"):
            raise NotImplementedError(
                f"{who}: group2ctx places group {group!r} on {c} while binding to {ctx}; symgrad runs an executor "
                "on one device: groups may go to cpu contexts (cpu(0), cpu(1), ...) or to the executor's own"
            )
        out[group] = c
    return out


@dataclasses.dataclass
class Placement:
    """Where every node of a plan runs (``contexts``: node id -> Context) and the copies MXNet inserts
    (``copies``: ``(value, destination, copy name)``, in graph order)."""

    contexts: dict[int, Context]
    copies: list[tuple[Entry, Context, str]]

    def of(self, node: Node) -> Context:
        return self.contexts[node.id]


def place(
    nodes: Sequence[Node],
    group2ctx: Mapping[str, Context],
    default: Context,
    fixed: Mapping[int, Context],
    forward_of: Mapping[int, Node],
    grad_targets: Sequence[tuple[Entry, Node]] = (),
) -> Placement:
    """Place ``nodes`` (topologically ordered: the forward graph, then the gradient graph).

    ``fixed``: node id -> context known beforehand (inputs); ``forward_of``: gradient node id -> the forward node
    it belongs to, and head gradient id -> the node of its output; ``grad_targets``: each computed gradient and
    its argument (where the gradient array lives).
    """
    where: dict[int, Context] = dict(fixed)
    for node in nodes:  # 1. groups, gradient nodes with their forward node; 2. else the first placed input
        if node.id in where:
            continue
        owner = forward_of.get(node.id, node)
        group = ctx_group(owner)
        if group is not None and (group in group2ctx or owner.op is not None):
            if group not in group2ctx:
                raise BindError(
                    f"group2ctx has no context for ctx_group {group!r} of node {owner.name!r}; "
                    f"groups given: {sorted(group2ctx)}"
                )
            where[node.id] = group2ctx[group]
        elif owner is not node and owner.id in where:
            where[node.id] = where[owner.id]
        else:
            placed = next((where[src.id] for src, _ in node.inputs if src.id in where), None)
            if placed is not None:
                where[node.id] = placed
    for node in reversed(nodes):  # 3. an unplaced input goes where its (last) reader runs
        if node.id in where:
            for src, _ in node.inputs:
                where.setdefault(src.id, where[node.id])
    for node in nodes:  # 4. the rest on the executor's context
        where.setdefault(node.id, default)
    return Placement(where, _copies(nodes, where, grad_targets))


def _copies(nodes, where, grad_targets) -> list[tuple[Entry, Context, str]]:
    """Every value read on another context than the one it is computed on, once per destination."""
    seen, copies = set(), []

    def need(entry, dst):
        src, i = entry
        key = (src.id, i, dst)
        if where[src.id] != dst and key not in seen:
            seen.add(key)
            copies.append((entry, dst, f"{src.name}_{i}_copy"))

    for node in nodes:
        if node.op is not None:
            for entry in node.inputs:
                need(entry, where[node.id])
    for entry, arg in grad_targets:
        need(entry, where[arg.id])
    return copies


def forward_owners(forward: Sequence[Node], backward: Sequence[Node]) -> dict[int, Node]:
    """Gradient node id -> the forward node it was made for: the gradient pass names every node it makes for
    ``n`` ``<n.name>_backward_...``; where names nest, the longest forward name wins."""
    by_name = {n.name: n for n in forward if n.op is not None}
    owners = {}
    for node in backward:
        name = node.name
        k = name.rfind("_backward_")
        while k > 0:
            owner = by_name.get(name[:k])
            if owner is not None:
                owners[node.id] = owner
                break
            k = name.rfind("_backward_", 0, k)
    return owners
