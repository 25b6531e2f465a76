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
from .opdef import same_type

__all__ = ["infer_shapes", "infer_types", "where"]


def where(node: Node) -> str:
    """How errors name an operator instance: ``FullyConnected 'fc'``."""
    return f"{node.op_name} {node.name!r}"


def _describe(value, kind):
    if value is None:
        return "unknown"
    return str(tuple(value)) if kind == "shape" else str(np.dtype(value))


def _retry(node, rule, ins, outs, kind, unknown_dims, first):
    """``rule``'s answer for ``node`` after it raised ``first`` on the values known.

    With unknown dimensions, a rule that fails on shapes holding a 0 (an unknown dimension: ``(0, 3) + (2, 0)``,
    a Reshape of an unknown size) is asked again with those shapes unknown altogether, and once more with
    each of them alone kept; the answers that do not fail are merged (dimension by dimension), so the rule
    still fills in what the known parts determine. If every retry fails, the first error stands (a rule
    crashing with anything but a ShapeError/TypeError/ValueError is reported as the op's inference failure).
    """
    try:
        values = list(ins) + list(outs)
        partial = [j for j, v in enumerate(values) if _partial(v)] if unknown_dims else []
        answers = []
        for keep in [None, *partial] if len(partial) > 1 else [None] if partial else []:
            trial = [None if j in partial and j != keep else v for j, v in enumerate(values)]
            try:
                answers.append(rule(node.params, trial[: len(ins)], trial[len(ins) :], where(node)))
            except Exception:
                continue
            if keep is None and _determines_all(answers[0]):
                break  # merged answers keep the first where it is complete: the others cannot add anything
        if not answers:
            raise first
        return _merge_answers(answers, len(ins), len(outs))
    except (ShapeError, TypeError, ValueError):
        raise
    except Exception as exc:  # a rule crashing on odd input is still the op's error
        raise ShapeError(f"{where(node)}: {kind} inference failed: {exc}") from exc


def _determines_all(answer) -> bool:
    """Every slot of a rule's ``(ins, outs)`` answer is a shape without an unknown (0) dimension."""
    return all(v is not None and 0 not in tuple(v) for part in answer for v in part)


def _merge_answers(answers, n_in, n_out):
    """Slot by slot, the merge of the rule's answers (a slot two answers disagree on keeps the first)."""
    merged = [None] * (n_in + n_out)
    for new_ins, new_outs in answers:
        for j, v in enumerate(list(new_ins) + list(new_outs)):
            if v is None:
                continue
            v = tuple(int(d) for d in v)
            if merged[j] is None:
                merged[j] = v
            else:
                m = _merge(merged[j], v, "shape", True)
                if m is not None:
                    merged[j] = m
    return merged[:n_in], merged[n_in:]


def _partial(shape) -> bool:
    """A shape with an unknown dimension (a 0, in MXNet's legacy shape semantics)."""
    return shape is not None and 0 in tuple(shape)


def _merge(old, new, kind, unknown_dims):
    """``new`` checked against the known ``old``: the value to keep, or None on a conflict. With unknown
    dimensions two shapes of one rank whose dimensions agree wherever both are known merge into one."""
    if not _differs(old, new, kind):
        return tuple(old) if kind == "shape" else old
    if (
        kind == "shape"
        and unknown_dims
        and len(old) == len(new)
        and all(a == b or 0 in (a, b) for a, b in zip(old, new))
    ):
        return tuple(a or b for a, b in zip(old, new))
    return None


def _run(nodes: Sequence[Node], known: dict, kind: str, unknown_dims: bool = False) -> dict:
    """Fill ``known`` ((node id, output index) -> value) in place and return it.

    ``unknown_dims`` (shapes only): a 0 in a shape is an unknown dimension (MXNet's legacy shape mode, used by
    ``infer_shape``/``infer_shape_partial``/``simple_bind``); otherwise it is a zero-size dimension (``bind``).
    """
    done: set[int] = set()
    ops = [n for n in nodes if n.op is not None]
    unknown_dims = unknown_dims and kind == "shape"
    shape = kind == "shape"
    get = known.get
    for pass_no in range(len(ops) + 2):
        changed = False
        seq = ops if pass_no % 2 == 0 else reversed(ops)
        for node in seq:
            if node.id in done:
                continue
            in_keys = node.input_keys
            ins = [get(key) for key in in_keys]
            if node.num_outputs == 1:  # most nodes: no list comprehensions for the outputs
                out_keys = [(node.id, 0)]
                outs = [get(out_keys[0])]
            else:
                out_keys = [(node.id, k) for k in range(node.num_outputs)]
                outs = [get(key) for key in out_keys]
            op = node.op
            rule = op.infer_shape if shape else (op.infer_type or same_type)
            try:  # the rule gets copies: what it returns is compared with what was known
                new_ins, new_outs = rule(node.params, ins[:], outs[:], where(node))
            except Exception as first:
                new_ins, new_outs = _retry(node, rule, ins, outs, kind, unknown_dims, first)
            if len(new_ins) < len(ins) or len(new_outs) < len(outs):  # a short answer says nothing of the rest
                new_ins = [*new_ins, *[None] * (len(ins) - len(new_ins))]
                new_outs = [*new_outs, *[None] * (len(outs) - len(new_outs))]
            in_changed, in_complete = _store(node, in_keys, ins, new_ins, True, known, kind, unknown_dims)
            out_changed, out_complete = _store(node, out_keys, outs, new_outs, False, known, kind, unknown_dims)
            changed = changed or in_changed or out_changed
            if in_complete and out_complete:
                done.add(node.id)
        if not changed or len(done) == len(ops):
            break
    return known


def _store(node, keys, olds, news, is_input, known, kind, unknown_dims):
    """Store a rule's answers ``news`` for the inputs (or outputs) of ``node``, known so far as ``olds``:
    returns (anything changed, every value known).

    Most answers repeat a known value (the same object, or an equal shape tuple): nothing to check or store.
    Known shapes are tuples of ints (``opdef.as_shape``, array shapes, ``_settle``), so an equal tuple answer is
    exactly one ``_settle`` would find unchanged; anything else goes through it.
    """
    shape = kind == "shape"
    changed = False
    complete = True
    for j, old in enumerate(olds):
        new = news[j]
        if old is None and new is not None:  # a first answer: nothing to check it against
            known[keys[j]] = old = tuple(map(int, new)) if shape else new
            changed = True
        elif not (new is None or new is old or (shape and type(new) is tuple and new == old)):
            new = _settle(node, old, new, kind, unknown_dims, j, is_input)
            if new is not _SAME:
                known[keys[j]] = old = new
                changed = True
        if old is None or (unknown_dims and 0 in old):
            complete = False
    return changed, complete


#: what ``_settle`` returns when a slot's value stays as it is
_SAME = object()


def _settle(node, old, new, kind, unknown_dims, index, is_input):
    """The value to store for one slot of ``node`` (input ``index`` or output ``index``) given the rule's
    ``new`` answer and the ``old`` known value, or ``_SAME`` when nothing changes; a conflict raises. The
    conflict's description (names of the input and its producer) is only built when one is raised."""
    if kind == "shape":
        new = tuple(map(int, new))
    if old is None:
        return new
    merged = _merge(old, new, kind, unknown_dims)
    if merged is None:
        raise _conflict(node, _slot_what(node, index, is_input), old, new, kind)
    if kind == "shape" and merged != tuple(old):
        return merged
    return _SAME


def _slot_what(node, index, is_input):
    """How a conflict names a slot: ``input 'weight' (from 'w')`` or ``output 0``."""
    if not is_input:
        return f"output {index}"
    names = node.input_names()
    what = names[index] if index < len(names) else f"input {index}"
    src, idx = node.inputs[index]
    return f"input {what!r} (from {src.output_name(idx)!r})"


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


def infer_shapes(nodes: Sequence[Node], known: dict, unknown_dims: bool = False) -> dict:
    """Shape inference; ``unknown_dims=True``: a 0 dimension is unknown (MXNet's legacy mode), else zero-size."""
    return _run(nodes, known, "shape", unknown_dims)


def infer_types(nodes: Sequence[Node], known: dict) -> dict:
    return _run(nodes, known, "dtype")
