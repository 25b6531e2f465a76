"""Decision flips: why a float32 run and a float64 run of one network can differ by more than rounding.

A ReLU input within ~1e-7 of 0, or a max-pool window whose two largest values differ by ~1e-11, can be
decided one way in float32 and the other in float64. The difference that follows is not rounding: a
flipped relu mask zeroes (or passes) a whole gradient row. Each op with such choices declares them in
its registration (``OpDef.decisions``, a list of ``symgrad.opdef.Decision``); this module

1. records the decision ops' inputs of one executor's forward (``record_decisions``), and
2. re-runs another executor's forward with every differing decision *pinned by value*
   (``pin_decisions``): the inputs a flipped site reads are set to the recorded run's values (cast to
   this run's dtype), so this run decides as the recorded one did. The pinned values are stored back
   into the executor's value slots (``Executor.forward_with_hook``), so the ``backward`` that follows
   reads them too.

What differs then between the two runs is rounding alone, unless something else is wrong.
``check_consistency`` uses both when a comparison between entries of different dtypes or devices fails.

The same record pins *pieces* for the numeric checkers (``pinned_symbol``): a copy of the graph in which
every decision op evaluates the piece its recorded choices select (``OpDef.pinned``), so finite differences
taken around the recorded point differentiate exactly the function the backward differentiates there. Pinning
by value (above) changes inputs so that a second run *decides* like the first; pinning pieces keeps every input
and fixes the *function*.

Cost: one instruction-by-instruction forward per call; the recorded inputs are host copies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from symgrad.context import array_context

from .context import to_numpy
from .frames import hide_from_pytest as _hide_from_pytest
from .report import format_index

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

__all__ = [
    "DecisionFlipWarning",
    "Flip",
    "DecisionRecord",
    "record_decisions",
    "pin_decisions",
    "format_flips",
    "Pinning",
    "pinned_symbol",
]

_MAX_ROUNDS = 4  # pinning one window can move a neighbouring (overlapping) window's near tie: re-decide


class DecisionFlipWarning(UserWarning):
    """Two runs differed only because some elementwise decisions (relu masks, max-pool choices) flipped.

    Attributes:
        flips: the ``Flip`` list (empty when built from a message alone).
    """

    def __init__(self, message: str, flips: Iterable[Flip] = ()) -> None:
        super().__init__(message)
        self.flips = list(flips)


@dataclass(frozen=True)
class Flip:
    """One decision site decided differently by two runs.

    Attributes:
        op, node: the operator (``relu``, ``Pooling``) and the node's name.
        inputs: the input positions the decision reads (``(0,)`` for relu, ``(0, 1)`` for maximum).
        index: the site (an index tuple of the op's choice array: the element for elementwise ops, the
            output window for pooling).
        value_precise, value_other: the decided-on value in each run (relu's input, ``a - b`` for maximum,
            the gap between a max-pool window's two largest values).
        choice_precise, choice_other: the two choices (``True``/``False`` for relu, the window tap for pooling).
        is_train: the forward pass it happened in.
        pinned: False when pinning by value could not make the runs agree (the choice is computed from the
            inputs in a way rounding still splits, e.g. ``alpha x + beta`` of hard_sigmoid).
    """

    op: str
    node: str
    inputs: tuple
    index: tuple
    value_precise: float
    value_other: float
    choice_precise: object
    choice_other: object
    is_train: bool = False
    pinned: bool = True

    def describe(self) -> str:
        where = f"{self.op} {self.node!r}[{format_index(self.index)}]"
        tail = "" if self.pinned else " (could not be pinned)"
        return (
            f"{where}: {_num(self.choice_precise)} -> {_num(self.choice_other)}, decided on "
            f"{self.value_precise:.6g} vs {self.value_other:.6g}{tail}"
        )

    def __str__(self):
        return self.describe()


def _num(v):
    """A choice for the report: a bool, an int (taps, rounded values) or a float."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    f = float(v)
    return int(f) if f.is_integer() else f


@dataclass
class _Seen:
    """A decision op as one run met it: its input arrays and decisions (host copies)."""

    op: str
    inputs: list
    choices: list
    values: list


@dataclass
class DecisionRecord:
    """The decision ops one forward met, by node name (and by op name and ordinal, for renamed nodes).

    Attributes:
        is_train: the forward pass recorded.
        nodes: ``{node name: what it saw}``.
        unmatched: names of the pinning run's decision nodes absent here or differently shaped (filled in by
            ``pin_decisions``).
    """

    is_train: bool
    nodes: dict = field(default_factory=dict)
    by_ordinal: dict = field(default_factory=dict)
    unmatched: list = field(default_factory=list)

    def lookup(self, node, ordinal):
        seen = self.nodes.get(node.name)
        if seen is None or seen.op != node.op.name:
            seen = self.by_ordinal.get((node.op.name, ordinal))
        return seen


def _decide(node, inputs):
    """The node's decisions on ``inputs`` (device arrays): a list of ``registry.Decision``."""
    ctx = array_context(inputs[0])
    xp = np if ctx is None else ctx.xp
    return list(node.op.decisions(xp, *inputs, **node.params))


class _Ordinals:
    """Counts decision nodes per op name in forward order (the fallback key when node names differ)."""

    def __init__(self):
        self.counts = {}

    def next(self, op_name):
        k = self.counts.get(op_name, 0)
        self.counts[op_name] = k + 1
        return k


def _decides(node) -> bool:
    return node.op is not None and node.op.decisions is not None


def record_decisions(exe, is_train=False) -> DecisionRecord:
    """Run ``exe``'s forward and record what every decision op saw (nothing is changed).

    Args:
        exe: a bound ``Executor`` (its arguments and auxiliary states set).
        is_train: the forward pass to run (``exe.outputs`` holds its outputs afterwards).

    Returns:
        A ``DecisionRecord`` to pin another executor of the same network with (``pin_decisions``).

    >>> import numpy as np, symgrad as sg
    >>> exe = sg.sym.relu(sg.sym.Variable("x"), name="r").bind(sg.cpu(), {"x": np.array([-1.0, 2.0])})
    >>> record_decisions(exe).nodes["r"].choices[0].tolist()
    [False, True]
    """
    record = DecisionRecord(bool(is_train))
    order = _Ordinals()

    def hook(node, inputs):
        if not _decides(node):
            return None
        decisions = _decide(node, inputs)
        seen = _Seen(
            node.op.name,
            [np.array(to_numpy(a), copy=True) for a in inputs],
            [np.asarray(to_numpy(d.choice)) for d in decisions],
            [np.asarray(to_numpy(d.value)) for d in decisions],
        )
        record.nodes[node.name] = seen
        record.by_ordinal[(node.op.name, order.next(node.op.name))] = seen
        return None

    exe.forward_with_hook(hook, is_train=is_train)
    return record


def pin_decisions(exe, record: DecisionRecord, is_train=None, max_rounds=_MAX_ROUNDS) -> list:
    """Run ``exe``'s forward with every decision that differs from ``record``'s pinned by value.

    At each decision op, the op's choices on this run's inputs are compared with the recorded ones; at
    every differing site the input elements the site reads (``Decision.support``) are set to the
    recorded run's values, cast to this run's dtype, and the op decides again (pinning one max-pool window
    can move an overlapping window's near tie), at most ``max_rounds`` times. The pinned inputs are stored
    in ``exe``'s value slots, so a ``exe.backward()`` that follows reads them too; ``exe.outputs`` holds
    the pinned outputs. Decision nodes of ``exe`` absent from ``record`` (or shaped differently) are left
    alone and listed in ``record.unmatched``.

    Args:
        exe: a bound ``Executor`` of the same network (matched by node name, then by op name and order).
        record: from ``record_decisions`` on the other executor.
        is_train: the forward pass to run; None: the recorded one.
        max_rounds: how often one op may re-decide after pinning.

    Returns:
        The ``Flip`` of every site that was decided differently (``[]``: the run is the plain forward).

    >>> import numpy as np, symgrad as sg
    >>> r = sg.sym.relu(sg.sym.Variable("x"), name="r")
    >>> f32 = r.bind(sg.cpu(), {"x": np.array([-2e-8, 1.0], np.float32)})
    >>> f64 = r.bind(sg.cpu(), {"x": np.array([3e-8, 1.0])})
    >>> [f.index for f in pin_decisions(f64, record_decisions(f32))], f64.outputs[0].tolist()
    ([(0,)], [0.0, 1.0])
    """
    is_train = record.is_train if is_train is None else bool(is_train)
    flips: list = []
    order = _Ordinals()

    def hook(node, inputs):
        if not _decides(node):
            return None
        seen = record.lookup(node, order.next(node.op.name))
        pinned = _pin_node(node, inputs, seen, record, flips, is_train, max_rounds)
        return pinned

    exe.forward_with_hook(hook, is_train=is_train)
    return flips


def _pin_node(node, inputs, seen, record, flips, is_train, max_rounds):
    """Pin one decision node's inputs to ``seen``'s where its choices differ; the new inputs or None."""
    decisions = _decide(node, inputs)
    if seen is None or not _comparable(decisions, inputs, seen):
        if decisions:
            record.unmatched.append(node.name)
        return None
    current, copied, met = list(inputs), set(), {}
    for _ in range(max_rounds):
        differing = [(k, d, _differing_sites(d.choice, seen.choices[k])) for k, d in enumerate(decisions)]
        differing = [(k, d, sites) for k, d, sites in differing if len(sites)]
        if not differing:
            break
        for k, d, sites in differing:
            _note_flips(node, k, d, sites, seen, met, is_train)
            _overwrite(current, copied, d, sites, seen, [tuple(a.shape) for a in inputs])
        decisions = _decide(node, current)
    else:  # still differing after max_rounds: report those sites as not pinned
        for k, d in enumerate(decisions):
            for site in _differing_sites(d.choice, seen.choices[k]):
                key = (k, tuple(int(i) for i in site))
                if key in met:
                    met[key] = _unpinned(met[key])
    flips.extend(met.values())
    return current if copied else None


def _comparable(decisions, inputs, seen) -> bool:
    """Whether two runs' decisions of a node can be compared site by site (same inputs and choice shapes)."""
    if len(decisions) != len(seen.choices) or len(inputs) != len(seen.inputs):
        return False
    if any(tuple(a.shape) != b.shape for a, b in zip(inputs, seen.inputs)):
        return False
    return all(tuple(d.choice.shape) == c.shape for d, c in zip(decisions, seen.choices))


def _differing_sites(choice, other) -> np.ndarray:
    """Index rows of the sites where two choice arrays differ (NaN equals NaN: rounding ops on NaN)."""
    mine = np.asarray(to_numpy(choice))
    same = mine == other
    if mine.dtype.kind in "fc":
        same |= np.isnan(mine) & np.isnan(other)
    return np.argwhere(~same)


def _note_flips(node, k, decision, sites, seen, met, is_train):
    """One ``Flip`` per newly differing site (the first round's values: before this run was pinned there)."""
    values = np.asarray(to_numpy(decision.value))
    choices = np.asarray(to_numpy(decision.choice))
    for site in sites:
        site = tuple(int(i) for i in site)
        if (k, site) in met:
            continue
        met[(k, site)] = Flip(
            node.op.name,
            node.name,
            tuple(decision.inputs),
            site,
            float(values[site]),
            float(seen.values[k][site]),
            choices[site].item(),
            seen.choices[k][site].item(),
            is_train,
        )


def _unpinned(flip: Flip) -> Flip:
    return Flip(
        flip.op,
        flip.node,
        flip.inputs,
        flip.index,
        flip.value_precise,
        flip.value_other,
        flip.choice_precise,
        flip.choice_other,
        flip.is_train,
        pinned=False,
    )


def _overwrite(current, copied, decision, sites, seen, shapes):
    """Set the input elements every site in ``sites`` reads to the recorded run's values (copy on first write)."""
    for j in decision.inputs:
        if j not in copied:
            current[j] = current[j].copy()
            copied.add(j)
    choice_shape = tuple(decision.choice.shape)
    if decision.support is None and all(shapes[j] == choice_shape for j in decision.inputs):
        # elementwise without broadcasting: one masked assignment per input
        mask = np.zeros(choice_shape, dtype=bool)
        mask[tuple(sites.T)] = True
        for j in decision.inputs:
            _put(current[j], mask, seen.inputs[j][mask])
        return
    support = decision.sites_of(shapes)
    for site in sites:
        for j, idx in zip(decision.inputs, support(tuple(int(i) for i in site))):
            _put(current[j], idx, seen.inputs[j][idx])


def _put(arr, index, host_values):
    """``arr[index] = host_values`` cast to ``arr``'s dtype, on ``arr``'s device."""
    values = np.asarray(host_values).astype(arr.dtype)
    if not isinstance(arr, np.ndarray):
        ctx = array_context(arr)
        index = ctx.xp.asarray(index) if isinstance(index, np.ndarray) else index
        values = ctx.xp.asarray(values)
    arr[index] = values


def format_flips(flips, limit=10) -> list:
    """Report lines for ``flips``: how many per node and pass, then one per flip (the first ``limit``)."""
    counts: dict = {}
    for f in flips:
        key = (f.op, f.node, f.is_train)
        counts[key] = counts.get(key, 0) + 1
    per_node = ", ".join(
        f"{op} {node!r} {n} ({'training' if train else 'inference'})" for (op, node, train), n in counts.items()
    )
    lines = [f"  flips per node: {per_node}"]
    lines += [f"  {f.describe()}" + (" [training pass]" if f.is_train else " [inference pass]") for f in flips[:limit]]
    if len(flips) > limit:
        lines.append(f"  ... and {len(flips) - limit} more")
    return lines


# == pinned pieces (the numeric checkers' reference) ============================================================


@dataclass
class Pinning:
    """What ``pinned_symbol`` did to a graph.

    Attributes:
        pinned: names of the decision nodes now evaluated on their recorded piece.
        unpinnable: decision nodes left as they are (an op without a ``pinned`` rule, or not in the record):
            finite differences may cross their kinks, which the kink test then judges.
        opaque: ``Custom`` nodes: Python operators whose discrete choices, if any, symgrad cannot see.
    """

    pinned: list = field(default_factory=list)
    unpinnable: list = field(default_factory=list)
    opaque: list = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every discrete choice of the graph is pinned (nothing left for the kink test)."""
        return not self.unpinnable and not self.opaque


def pinned_symbol(sym, record: DecisionRecord):
    """``(sym evaluated on the pieces ``record`` chose, Pinning)``.

    Each decision node that ``record`` saw (by name) runs ``op.pinned`` with the recorded choices instead of
    its forward: a relu keeps its recorded mask, a max pooling reads the recorded tap of every window, however
    the inputs move. Only forward values of the copy are meaningful (it has no gradients); bind it like ``sym``.

    >>> import numpy as np, symgrad as sg
    >>> r = sg.sym.relu(sg.sym.Variable("x"), name="r")
    >>> rec = record_decisions(r.bind(sg.cpu(), {"x": np.array([-1.0, 2.0])}))
    >>> pinned, how = pinned_symbol(r, rec)
    >>> pinned.bind(sg.cpu(), {"x": np.array([3.0, -4.0])}).forward()[0].tolist(), how.pinned
    ([0.0, -4.0], ['r'])
    """
    how = Pinning()

    def replace(name, op, params):
        if op.name == "Custom":
            how.opaque.append(name)
            return None
        if op.decisions is None:
            return None
        seen = record.nodes.get(name)
        if op.pinned is None or seen is None or seen.op != op.name:
            how.unpinnable.append(name)
            return None
        how.pinned.append(name)
        return _pinned_op(op, seen.choices)

    return sym.replace_ops(replace), how


def _pinned_op(op, choices):
    """``op`` with its forward replaced by ``op.pinned`` at ``choices`` (host arrays, moved to the device once)."""
    on_device = {}

    def forward(xp, *inputs, **params):
        fixed = on_device.get(xp)
        if fixed is None:
            fixed = on_device[xp] = [c if xp is np else xp.asarray(c) for c in choices]
        return op.pinned(xp, fixed, *inputs, **params)

    # (specialize=None: the op's kernels are equivalents of its own forward, not of the pinned one)
    return dataclasses.replace(
        op, forward=forward, specialize=None, gradient=None, decisions=None, pinned=None, accepts_out=False
    )
