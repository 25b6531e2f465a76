"""The DAG behind Symbols: nodes, MXNet-order traversal and the networkx view.

A ``Node`` is an operator application or a variable. Edges are ``(node, index)``
output entries held in ``Node.inputs``. Nodes are immutable once built, so
Symbols that share nodes share structure. Building a node is O(1); every walk
here is iterative (no recursion limit on long chains) and O(n).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from .base import SymgradError

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Node", "topo_order", "topo_order_split", "to_networkx", "check_unique_names", "SUBGRAPHS", "subgraphs"]

_ids = itertools.count()

#: The parameter key under which a control-flow node (``_foreach``, ``_while_loop``, ``_cond``) holds its subgraphs:
#: a tuple of Symbols, MXNet's ``NodeAttrs::subgraphs`` (written to symbol JSON as the node's ``subgraphs``). The
#: graph walks here never enter them: a subgraph's variables are bound to the node's inputs by its parameters.
SUBGRAPHS = "__subgraphs__"


def subgraphs(node) -> tuple:
    """The subgraphs (Symbols) a node holds; empty for every node but a control-flow one."""
    return node.params.get(SUBGRAPHS, ()) if node.op is not None else ()


class Node:
    """One operator application (``op`` set) or one variable (``op`` None)."""

    __slots__ = ("op", "name", "params", "attrs", "inputs", "num_outputs", "id", "input_keys")

    def __init__(self, op, name: str, params: dict, attrs: dict, inputs: Sequence, num_outputs: int):
        self.op = op
        self.name = name
        self.params = params
        self.attrs = attrs
        self.inputs = tuple(inputs)
        self.num_outputs = num_outputs
        self.id = next(_ids)
        # the ``(node id, output)`` keys of the inputs' values (inference maps, slots, dtypes are keyed so)
        self.input_keys = tuple([(src.id, i) for src, i in self.inputs])

    @property
    def is_variable(self) -> bool:
        return self.op is None

    @property
    def op_name(self) -> str:
        return "null" if self.op is None else self.op.name

    def input_names(self) -> list[str]:
        if self.op is None:
            return []
        return self.op.list_inputs(self.params) + self.op.list_aux(self.params)

    def num_args(self) -> int:
        """How many of ``inputs`` are arguments (the rest are auxiliary states)."""
        if self.op is None:
            return 0
        return len(self.inputs) - len(self.op.list_aux(self.params))

    def output_name(self, index: int) -> str:
        """MXNet's output naming: ``x`` for a variable, ``fc_output``, ``slice_output1``."""
        if self.op is None:
            return self.name
        return f"{self.name}_{self.op.list_output_names(self.params, visible_only=False)[index]}"

    def __repr__(self) -> str:
        return f"<Node {self.op_name} {self.name!r}>"


#: An output entry of the DAG: ``(node, index of its output)``.
Entry: TypeAlias = "tuple[Node, int]"


def topo_order(heads: Iterable) -> list[Node]:
    """Nodes reachable from ``heads`` (entries or nodes) in MXNet's DFS post-order.

    Inputs are visited in input order, heads in the given order, so variables
    appear in the order ``list_arguments()`` reports them.
    """
    return topo_order_split(heads, ())[0]


def topo_order_split(
    heads: Iterable, more: Iterable, heads_order: Sequence[Node] | None = None
) -> tuple[list[Node], int]:
    """``topo_order(heads + more)`` and how many of its nodes ``topo_order(heads)`` holds: one walk.

    The DFS emits everything reachable from ``heads`` before it starts on ``more``, so those nodes are
    exactly the first ones, in ``topo_order(heads)``'s order (``heads_order``: that order, when the caller
    already has it; then only ``more`` is walked).
    """
    order: list[Node] = []
    seen: set[int] = set()
    if heads_order is None:
        _dfs(heads, order, seen)
    else:
        order.extend(heads_order)
        seen.update(n.id for n in heads_order)
    n_heads = len(order)
    _dfs(more, order, seen)
    return order, n_heads


def _dfs(heads, order, seen) -> None:
    """Append to ``order`` the DFS post-order of the nodes reachable from ``heads`` not yet ``seen``."""
    for head in heads:
        node = head[0] if isinstance(head, tuple) else head
        if node.id in seen:
            continue
        seen.add(node.id)
        stack = [(node, iter(node.inputs))]
        while stack:
            cur, it = stack[-1]
            for src, _ in it:
                if src.id not in seen:
                    seen.add(src.id)
                    stack.append((src, iter(src.inputs)))
                    break
            else:
                stack.pop()
                order.append(cur)


def check_unique_names(nodes: Iterable[Node]) -> dict[str, Node]:
    """Variables by name; two different variables sharing a name is an error."""
    by_name: dict[str, Node] = {}
    for node in nodes:
        if node.op is not None:
            continue
        other = by_name.get(node.name)
        if other is not None and other is not node:
            raise SymgradError(
                f"two different Variables are named {node.name!r} in one graph; "
                "give them distinct names or reuse the same Variable"
            )
        by_name[node.name] = node
    return by_name


def aux_variable_ids(nodes: Iterable[Node]) -> set[int]:
    """Ids of variables that feed an auxiliary-state slot of some operator."""
    aux = set()
    for node in nodes:
        if node.op is None:
            continue
        k = node.num_args()
        for src, _ in node.inputs[k:]:
            if src.op is None:
                aux.add(src.id)
    return aux


def to_networkx(nodes: Sequence[Node]) -> nx.MultiDiGraph:
    """A ``networkx.MultiDiGraph`` of ``nodes`` (usually a ``topo_order``).

    Nodes are keyed by the ``Node`` id and carry ``op``, ``name``, ``params``,
    ``attrs`` and the ``node`` itself; each edge ``src -> dst`` carries
    ``output`` (the index of src's output) and ``slot`` (the input position at dst).
    """
    import networkx as nx  # on first use: networkx is a large import that binding and running never need

    g = nx.MultiDiGraph()
    for node in nodes:
        g.add_node(
            node.id,
            op=node.op_name,
            name=node.name,
            params=dict(node.params),
            attrs=dict(node.attrs),
            num_outputs=node.num_outputs,
            node=node,
        )
    for node in nodes:
        for slot, (src, idx) in enumerate(node.inputs):
            g.add_edge(src.id, node.id, output=idx, slot=slot)
    return g
