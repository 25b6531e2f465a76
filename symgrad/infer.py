"""Shape and dtype inference over a topologically ordered node list.

Each operator rule sees the shapes (or dtypes) known so far for its inputs and
outputs, ``None`` meaning unknown, and returns both lists with whatever it can
fill in, so knowledge flows forwards (data -> output) and backwards (output ->
input, ``a + b`` given ``a`` infers ``b``, FullyConnected fills its weight).
Passes repeat, alternating direction, until nothing changes: a chain settles
in one O(n) pass.

Unknown dimensions (MXNet's partial shapes). Inside the engine a negative dimension (-1) is unknown and
0 a real size, as in MXNet's NumPy shape semantics; callers convert MXNet's legacy reading (0 unknown)
at the edge (``Symbol.infer_shape``). Shape rules are written in the legacy convention: at a node where
some shape holds an unknown dimension the rule is handed 0 in its place (``_call``), and a 0 dimension of its
answer is taken as unknown again unless it is a copy of a real 0 the node knew (``_real_zero_marks``): a known
``(0, 3)`` output fills its partial input ``(-1, 3)`` to ``(0, 3)``, as MXNet's NumPy shape mode does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import util
from .base import ShapeError
from .graph import Node
from .opdef import parse_dtype_attr, same_type

__all__ = ["infer_shapes", "infer_partial_shapes", "infer_types", "where"]


def where(node: Node) -> str:
    """How errors name an operator instance: ``FullyConnected 'fc'``."""
    return f"{node.op_name} {node.name!r}"


def _describe(value, kind):
    if value is None:
        return "unknown"
    return str(tuple(value)) if kind == "shape" else str(np.dtype(value))


def _unknown(shape) -> bool:
    """A shape with an unknown (negative) dimension."""
    return shape is not None and min(shape, default=0) < 0


#: what a real 0 dimension is handed to a rule as in ``_real_zero_marks``'s second call: a size no shape has, so
#: an answer dimension equal to it was copied from a real 0 (a prime: no divisibility check a rule makes passes
#: by chance more often than with a real size)
_ZERO_MARK = 1_000_003


def _to_legacy(shape, zero=0):
    """``shape`` in the legacy reading the rules are written in: an unknown dimension is 0 (a real 0 is
    ``zero``: 0 as well, or ``_ZERO_MARK``)."""
    return None if shape is None else tuple(0 if d < 0 else zero if d == 0 else int(d) for d in shape)


def _from_legacy(shape, marks=None):
    """A rule's answer at a node with unknown dimensions: each 0 dimension unknown again (-1), but where
    ``marks`` (the same slot's answer with real zeros marked) holds ``_ZERO_MARK``: that one is a real 0."""
    if shape is None:
        return None
    if marks is None or len(marks) != len(shape):
        return tuple(-1 if d == 0 else int(d) for d in shape)
    return tuple(-1 if d == 0 and m != _ZERO_MARK else int(d) for d, m in zip(shape, marks))


def _legacy_call(rule, node, ins, outs, zero=0):
    """``rule``'s answer with the shapes in the legacy reading (``util.unknown_zeros()`` true while it runs)."""
    with util.unknown_zeros():
        return rule(node.params, [_to_legacy(v, zero) for v in ins], [_to_legacy(v, zero) for v in outs], where(node))


def _real_zero_marks(rule, node, ins, outs) -> tuple[list, list]:
    """The rule's ``(ins, outs)`` answer with every real 0 dimension handed to it as ``_ZERO_MARK``; two empty
    lists when no known shape has a real 0 (or the marked calls fail).

    The legacy reading cannot tell a real 0 from an unknown dimension, so an answer's 0 is ambiguous; marked,
    a dimension the rule copied from a real 0 comes back as the mark (``(0, 3) + (-1, 3)``: the input's
    ``(-1, 3)`` is ``(0, 3)``). A dimension computed from a real 0 (a sum, a product) comes back as some other
    number: it stays unknown, as the legacy reading leaves it. A rule that refuses the mark beside a 0 it takes
    for unknown (``elemwise_add`` of ``(mark, 3)`` and ``(0, 3)``) is asked again with the partial shapes left
    out, as ``_retry`` does.
    """
    if not any(v is not None and 0 in v for v in (*ins, *outs)):
        return [], []
    partial = [None if _unknown(v) else v for v in ins], [None if _unknown(v) else v for v in outs]
    for trial_ins, trial_outs in ((ins, outs), partial):
        try:
            marked_ins, marked_outs = _legacy_call(rule, node, trial_ins, trial_outs, _ZERO_MARK)
        except Exception:  # a rule that refuses the marked sizes
            continue
        return list(marked_ins), list(marked_outs)
    return [], []


def _nth(values: list, j: int):
    """``values[j]``, or None past its end (a rule's answer may be short)."""
    return values[j] if j < len(values) else None


def _call(rule, node, ins, outs, kind):
    """``rule``'s ``(ins, outs)`` answer for ``node``. Where a shape holds an unknown dimension the rule sees it
    as 0 (MXNet's legacy reading) and a 0 in its answer is read back as unknown, unless it is a real 0 carried
    over from a known shape (``_real_zero_marks``)."""
    if kind != "shape" or not (any(map(_unknown, ins)) or any(map(_unknown, outs))):
        return rule(node.params, ins, outs, where(node))
    new_ins, new_outs = _legacy_call(rule, node, ins, outs)
    in_marks, out_marks = _real_zero_marks(rule, node, ins, outs)
    return (
        [_from_legacy(v, _nth(in_marks, j)) for j, v in enumerate(new_ins)],
        [_from_legacy(v, _nth(out_marks, j)) for j, v in enumerate(new_outs)],
    )


def _retry(node, rule, ins, outs, kind, first):
    """``rule``'s answer for ``node`` after it raised ``first`` on the values known.

    A rule that fails on shapes with unknown dimensions (``(0, 3) + (2, 0)`` read as legacy shapes, a Reshape
    of an unknown size) is asked again with those shapes unknown altogether, and once more with each of them
    alone kept; the answers that do not fail are merged (dimension by dimension), so the rule still fills in
    what the known parts determine. If every retry fails, the first error stands (a rule crashing with
    anything but a ShapeError/TypeError/ValueError is reported as the op's inference failure).
    """
    try:
        values = list(ins) + list(outs)
        partial = [j for j, v in enumerate(values) if _unknown(v)] if kind == "shape" else []
        answers = []
        for keep in [None, *partial] if len(partial) > 1 else [None] if partial else []:
            trial = [None if j in partial and j != keep else v for j, v in enumerate(values)]
            try:
                answers.append(_call(rule, node, trial[: len(ins)], trial[len(ins) :], kind))
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
    """Every slot of a rule's ``(ins, outs)`` answer is a shape without an unknown dimension."""
    return all(v is not None and not _unknown(v) for part in answer for v in part)


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
                m = _merge(merged[j], v, "shape")
                if m is not None:
                    merged[j] = m
    return merged[:n_in], merged[n_in:]


def _merge(old, new, kind):
    """``new`` checked against the known ``old``: the value to keep, or None on a conflict. Two shapes of one
    rank whose dimensions agree wherever both are known (not negative) merge into one."""
    if not _differs(old, new, kind):
        return tuple(old) if kind == "shape" else old
    if kind == "shape" and len(old) == len(new) and all(a == b or a < 0 or b < 0 for a, b in zip(old, new)):
        return tuple(b if a < 0 else a for a, b in zip(old, new))
    return None


def _run(nodes: Sequence[Node], known: dict, kind: str, pins: bool = False) -> dict:
    """Fill ``known`` ((node id, output index) -> value) in place and return it; a negative dimension in a shape
    is unknown. ``pins``: a dtype conflict names the ``__dtype__`` attributes behind it (``infer_types``)."""
    done: set[int] = set()
    ops = [n for n in nodes if n.op is not None]
    node = None
    try:
        for pass_no in range(len(ops) + 2):
            changed = False
            for node in ops if pass_no % 2 == 0 else reversed(ops):
                if node.id not in done and _visit(node, known, kind, done):
                    changed = True
            if not changed or len(done) == len(ops):
                break
    except TypeError as exc:
        if pins and node is not None:
            _note_pins(exc, node, nodes, known)
        raise
    return known


def _visit(node: Node, known: dict, kind: str, done: set[int]) -> bool:
    """Apply ``node``'s rule to what ``known`` holds and store its answers (``node`` joins ``done`` once all its
    values are known); whether anything changed."""
    get = known.get
    in_keys = node.input_keys
    ins = [get(key) for key in in_keys]
    if node.num_outputs == 1:  # most nodes: no list comprehensions for the outputs
        out_keys = [(node.id, 0)]
        outs = [get(out_keys[0])]
    else:
        out_keys = [(node.id, k) for k in range(node.num_outputs)]
        outs = [get(key) for key in out_keys]
    op = node.op
    rule = op.infer_shape if kind == "shape" else (op.infer_type or same_type)
    try:  # the rule gets copies: what it returns is compared with what was known
        new_ins, new_outs = _call(rule, node, ins[:], outs[:], kind)
    except Exception as first:
        new_ins, new_outs = _retry(node, rule, ins, outs, kind, first)
    if len(new_ins) < len(ins) or len(new_outs) < len(outs):  # a short answer says nothing of the rest
        new_ins = [*new_ins, *[None] * (len(ins) - len(new_ins))]
        new_outs = [*new_outs, *[None] * (len(outs) - len(new_outs))]
    in_changed, in_complete = _store(node, in_keys, ins, new_ins, True, known, kind)
    out_changed, out_complete = _store(node, out_keys, outs, new_outs, False, known, kind)
    if in_complete and out_complete:
        done.add(node.id)
    return in_changed or out_changed


def _store(node, keys, olds, news, is_input, known, kind):
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
            new = _settle(node, old, new, kind, j, is_input)
            if new is not _SAME:
                known[keys[j]] = old = new
                changed = True
        if old is None or (shape and _unknown(old)):
            complete = False
    return changed, complete


#: what ``_settle`` returns when a slot's value stays as it is
_SAME = object()


def _settle(node, old, new, kind, index, is_input):
    """The value to store for one slot of ``node`` (input ``index`` or output ``index``) given the rule's
    ``new`` answer and the ``old`` known value, or ``_SAME`` when nothing changes; a conflict raises. The
    conflict's description (names of the input and its producer) is only built when one is raised."""
    if kind == "shape":
        new = tuple(map(int, new))
    if old is None:
        return new
    merged = _merge(old, new, kind)
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


def infer_partial_shapes(nodes: Sequence[Node], known: dict) -> dict:
    """Shape inference in MXNet's NumPy reading: a negative dimension (-1) is unknown, 0 a real size; what
    stays unknown stays so in ``known`` (-1 dimensions, missing shapes)."""
    return _run(nodes, known, "shape")


def infer_shapes(nodes: Sequence[Node], known: dict, unknown_dims: bool = False) -> dict:
    """Shape inference; ``unknown_dims=True``: a 0 dimension is unknown (MXNet's legacy mode) and stays 0 where
    nothing determines it; else 0 is a zero size and a shape with a dimension nothing determines (a creation
    op's ``shape=(-1, 3)`` no consumer fills) is left out of ``known``: it cannot be bound."""
    if unknown_dims:
        for key, v in known.items():
            if v is not None and 0 in v:
                known[key] = _from_legacy(v)
    _run(nodes, known, "shape")
    for key, v in list(known.items()):
        if _unknown(v):
            if unknown_dims:
                known[key] = _to_legacy(v)
            else:
                del known[key]
    return known


def infer_types(nodes: Sequence[Node], known: dict, pins: bool = False) -> dict:
    """Dtype inference. ``pins``: the variables' ``__dtype__`` attributes seeded ``known`` (``simple_bind``,
    ``infer_type``): a conflict then names the variables whose attributes pin the dtype that disagrees, and the
    fix (a Gluon export pins float32 on every parameter)."""
    return _run(nodes, known, "dtype", pins)


# -- dtype conflicts caused by __dtype__ attributes ----------------------------------------------------------


def _note_pins(exc: TypeError, node: Node, nodes: Sequence[Node], known: dict) -> None:
    """Append to ``exc``'s message which ``__dtype__`` attributes behind ``node`` pin a dtype that disagrees
    with the others, and how to recast them; nothing when no pin is involved."""
    if len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return
    pinned, free = _pinned_and_free(node, known)
    targets = {dt for dt in free.values() if dt.kind == "f"}
    target = next(iter(targets)) if len(targets) == 1 else None
    off = {name: dt for name, dt in pinned.items() if dt != target}
    # pins disagree with the one float dtype given, or (none given) with each other
    if not off or len(targets) > 1 or (target is None and len(set(off.values())) < 2):
        return
    exc.args = (f"{exc.args[0]}. {_pins_text(off, free, target, nodes)}",)


def _pinned_and_free(node: Node, known: dict) -> tuple[dict, dict]:
    """The variables ``node`` depends on with their known dtypes, as ``(pinned, free)``: pinned where the
    variable's ``__dtype__`` attribute says that dtype, free where something else decided it (``type_dict``,
    inference)."""
    pinned: dict[str, np.dtype] = {}
    free: dict[str, np.dtype] = {}
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n.id in seen:
            continue
        seen.add(n.id)
        stack.extend(src for src, _ in n.inputs)
        value = known.get((n.id, 0)) if n.op is None else None
        if value is not None:
            dt, pin = np.dtype(value), _pin(n)
            (pinned if pin is not None and pin == dt else free)[n.name] = dt  # (dtype == None: float64)
    return pinned, free


def _pin(node: Node) -> np.dtype | None:
    """The dtype a variable's ``__dtype__`` attribute pins, or None."""
    raw = node.attrs.get("__dtype__")
    try:
        return None if raw is None else parse_dtype_attr(raw)
    except TypeError:
        return None


def _few(names: list[str], limit: int = 4) -> str:
    """``'a'``, ``'a' and 'b'``, ``'a', 'b' and 3 more``."""
    quoted = [repr(n) for n in names[:limit]]
    rest = [f"{len(names) - limit} more"] if len(names) > limit else []
    items = quoted + rest
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _pins_text(off: dict, free: dict, target: np.dtype | None, nodes: Sequence[Node]) -> str:
    """The sentence naming the pinning variables (grouped by dtype) and the fix."""
    text = "; ".join(_pin_group(off, dt, nodes) for dt in sorted({d.name for d in off.values()}))
    if target is not None:
        given = sorted(n for n, d in free.items() if d == target)
        text += f", while {_few(given, 2)} {'is' if len(given) == 1 else 'are'} {target.name}"
    want = target.name if target is not None else "float64"
    goal = want if target is not None else "one dtype (here float64)"
    return (
        f"{text[0].upper()}{text[1:]}. To use {goal} throughout, recast the pinned dtypes: "
        f"symgrad.sym.load(fname, dtype='{want}') (or symgrad.serialization.cast_pinned_dtypes(sym, '{want}') for a "
        "Symbol at hand), or give every pinned input its dtype, e.g. simple_bind(..., "
        f"type_dict={{name: np.{want} for name in sym.list_inputs()}})"
    )


def _pin_group(off: dict, dt: str, nodes: Sequence[Node]) -> str:
    """``the __dtype__ attributes of 'a' and 'b' pin float32 (... N variables of this graph pin float32)``."""
    names = sorted(n for n, d in off.items() if d.name == dt)
    total = sum(1 for v in nodes if v.op is None and str(_pin(v)) == dt)
    many, all_many = len(names) > 1, total != 1
    return (
        f"the __dtype__ attribute{'s' if many else ''} of {_few(names)} pin{'' if many else 's'} {dt} (Gluon's "
        f"export writes one on every parameter: {total} variable{'s' if all_many else ''} of this graph "
        f"pin{'' if all_many else 's'} {dt})"
    )
