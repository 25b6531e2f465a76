"""Shape and dtype inference over a topologically ordered node list.

Each operator rule sees the shapes (or dtypes) known so far for its inputs and
outputs, ``None`` meaning unknown, and returns both lists with whatever it can
fill in, so knowledge flows forwards (data -> output) and backwards (output ->
input, ``a + b`` given ``a`` infers ``b``, FullyConnected fills its weight).
Passes repeat, alternating direction, until nothing changes: a chain settles
in one O(n) pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import ShapeError
from .graph import Node
from .ops.registry import same_type

__all__ = ["infer_shapes", "infer_types", "where"]


def where(node: Node) -> str:
    """How errors name an operator instance: ``FullyConnected 'fc'``."""
    return f"{node.op_name} {node.name!r}"


def _describe(value, kind):
    if value is None:
        return "unknown"
    return str(tuple(value)) if kind == "shape" else str(np.dtype(value))


def _run(nodes: Sequence[Node], known: dict, kind: str) -> dict:
    """Fill ``known`` ((node id, output index) -> value) in place and return it."""
    done: set[int] = set()
    ops = [n for n in nodes if n.op is not None]
    for pass_no in range(len(ops) + 2):
        changed = False
        seq = ops if pass_no % 2 == 0 else reversed(ops)
        for node in seq:
            if node.id in done:
                continue
            ins = [known.get((s.id, i)) for s, i in node.inputs]
            outs = [known.get((node.id, k)) for k in range(node.num_outputs)]
            rule = node.op.infer_shape if kind == "shape" else (node.op.infer_type or same_type)
            try:
                new_ins, new_outs = rule(node.params, list(ins), list(outs), where(node))
            except (ShapeError, TypeError, ValueError):
                raise
            except Exception as exc:  # a rule crashing on odd input is still the op's error
                raise ShapeError(f"{where(node)}: {kind} inference failed: {exc}") from exc
            for slot, (old, new) in enumerate(zip(ins, new_ins)):
                if new is None:
                    continue
                if kind == "shape":
                    new = tuple(int(d) for d in new)
                if old is not None and _differs(old, new, kind):
                    src, idx = node.inputs[slot]
                    names = node.input_names()
                    what = names[slot] if slot < len(names) else f"input {slot}"
                    raise _conflict(node, f"input {what!r} (from {src.output_name(idx)!r})", old, new, kind)
                if old is None:
                    src, idx = node.inputs[slot]
                    known[(src.id, idx)] = new
                    changed = True
            for k, (old, new) in enumerate(zip(outs, new_outs)):
                if new is None:
                    continue
                if kind == "shape":
                    new = tuple(int(d) for d in new)
                if old is not None and _differs(old, new, kind):
                    raise _conflict(node, f"output {k}", old, new, kind)
                if old is None:
                    known[(node.id, k)] = new
                    changed = True
            if all(v is not None for v in new_ins) and all(v is not None for v in new_outs):
                done.add(node.id)
        if not changed or len(done) == len(ops):
            break
    return known


def _differs(a, b, kind):
    if kind == "shape":
        return tuple(a) != tuple(b)
    return np.dtype(a) != np.dtype(b)


def _conflict(node, what, old, new, kind):
    exc = ShapeError if kind == "shape" else TypeError
    return exc(
        f"{where(node)}: {kind} conflict for {what}: "
        f"known {_describe(old, kind)}, but the operator requires {_describe(new, kind)}"
    )


def infer_shapes(nodes: Sequence[Node], known: dict) -> dict:
    return _run(nodes, known, "shape")


def infer_types(nodes: Sequence[Node], known: dict) -> dict:
    return _run(nodes, known, "dtype")
