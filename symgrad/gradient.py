"""The symbolic gradient pass: gradients are Symbols built from the forward graph.

Only nodes on a path from a requested input to an output are differentiated;
each op's ``gradient`` rule returns Symbols, contributions to one entry are
summed with a single ``add_n``. Because the result is an ordinary graph,
``grad`` of a gradient gives second derivatives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .base import NameManager, Prefix, SymgradError
from .graph import Entry, Node, topo_order
from .symbol import F, Symbol, Variable

__all__ = ["grad", "build_gradients", "expansion_gradients", "GradNode"]


class GradNode:
    """What a gradient rule sees of the node being differentiated.

    ``inputs`` and ``outputs`` are single-output Symbols (hidden outputs included; made on first use, as
    many rules read only one of them), ``params`` the parsed parameters, ``needs[i]`` whether input i
    needs a gradient.
    """

    __slots__ = ("params", "name", "needs", "node", "_inputs", "_outputs")
    _inputs: list[Symbol] | None
    _outputs: list[Symbol] | None

    def __init__(self, node: Node, needs: Sequence[bool]) -> None:
        self.node = node
        self.name = node.name
        self.params = node.params
        self.needs = needs
        self._inputs = self._outputs = None

    @property
    def inputs(self) -> list[Symbol]:
        if self._inputs is None:
            self._inputs = [Symbol([e]) for e in self.node.inputs]
        return self._inputs

    @property
    def outputs(self) -> list[Symbol]:
        if self._outputs is None:
            node = self.node
            self._outputs = [Symbol([(node, k)]) for k in range(node.num_outputs)]
        return self._outputs

    def expansion_gradients(self, expand: Callable[..., Symbol], head: Symbol) -> list[Symbol | None]:
        """The gradients of this node's inputs through ``expand(*inputs)``, the graph a fused node computes in
        one instruction (``expansion_gradients`` below): the second-order rule of a ``_backward_X`` node."""
        return expansion_gradients(expand, self.inputs, head)


def _sum(entries):
    if len(entries) == 1:
        return entries[0]
    return F.add_n(*[Symbol([e]) for e in entries]).output_entries()[0]


def _depends(node, dep) -> bool:
    """Whether an op ``node`` reads a value in ``dep`` through an input it differentiates (its input names
    are only looked up when the op has inputs it never differentiates)."""
    no_grad = node.op.no_grad_inputs
    if not no_grad:
        return any(src.id in dep for src, _ in node.inputs)
    names = node.input_names()
    return any(src.id in dep and names[slot] not in no_grad for slot, (src, _) in enumerate(node.inputs))


def build_gradients(
    heads: Sequence[Entry],
    head_grads: Sequence[Entry | None],
    wrt: Sequence[Node],
    loss_scale: float | None = None,
    order: Sequence[Node] | None = None,
) -> list[Entry | None]:
    """Gradient entries of ``heads`` w.r.t. the variable nodes ``wrt``.

    ``heads`` are ``(node, index)`` entries, ``head_grads`` one entry (or None,
    meaning "no gradient flows from this head") per head. Returns one entry or
    None (not connected) per ``wrt`` node. Nodes it creates are named in a
    private scope (``<node>_backward_<op><k>``), so binding never shifts the
    automatic names of the user's later symbols.

    ``loss_scale`` (the caller has already scaled ``head_grads`` by it) also
    multiplies the gradients that loss operators (MakeLoss, SoftmaxOutput...)
    emit, since those ignore the head gradient they receive.

    ``order``: ``topo_order(heads)``, when the caller already has it (the executor does).
    """
    with NameManager():
        return _build(heads, head_grads, wrt, loss_scale, order)


def _build(
    heads: Sequence[Entry],
    head_grads: Sequence[Entry | None],
    wrt: Sequence[Node],
    loss_scale: float | None = None,
    order: Sequence[Node] | None = None,
) -> list[Entry | None]:
    if order is None:
        order = topo_order(heads)
    dep = _dependents(order, {n.id for n in wrt})
    acc: dict[tuple, list] = {}
    for (node, i), hg in zip(heads, head_grads):
        if node.id in dep and (hg is not None or (node.op is not None and node.op.loss_head(node.params))):
            if hg is not None:
                acc.setdefault((node.id, i), []).append(hg)
            else:
                acc.setdefault((node.id, i), [])
    scope = _NodeScope()
    with scope:
        for node in reversed(order):
            if node.op is not None and node.id in dep:
                _differentiate(node, acc, dep, scope, loss_scale, F)
    result = []
    for n in wrt:
        entries = acc.get((n.id, 0))
        result.append(_sum(entries) if entries else None)
    return result


def _dependents(order, wrt_ids) -> set:
    """Ids of the nodes that depend on some requested input (on a path from it); an input an op never
    differentiates (BlockGrad's data, an index, a label) carries no dependency: ops behind a BlockGrad need
    no gradient rule."""
    dep = set(wrt_ids)
    for node in order:
        if node.op is not None and _depends(node, dep):
            dep.add(node.id)
    return dep


class _NodeScope(Prefix):
    """The naming scope of gradient rules: ``<node>_backward_<op><k>``, counters fresh for every node
    (one scope entered once per gradient pass; ``enter`` moves it to the next node)."""

    def __init__(self):
        super().__init__("")

    def enter(self, node) -> None:
        self._prefix = f"{node.name}_backward_"
        self._counter.clear()


def _differentiate(node, acc, dep, scope, loss_scale, F) -> None:
    """Run ``node``'s gradient rule on the head gradients accumulated for its outputs (summed with one
    ``add_n`` each) and add what it returns to the entries of its inputs."""
    nid = node.id
    if node.num_outputs == 1:
        got = [acc.pop((nid, 0), None)]
        if got[0] is None:
            return  # no gradient reaches this node
    else:
        got = [acc.pop((nid, k), None) for k in range(node.num_outputs)]
        if all(v is None for v in got):
            return
    op = node.op
    inputs = node.inputs
    needs = _needs(node, op, dep)
    if not any(needs):
        return
    if op.gradient is None:
        reason = op.grad_undefined_reason or f"operator {op.name} has no gradient rule"
        raise SymgradError(f"gradient of {op.name} {node.name!r} is not defined: {reason}")
    scope.enter(node)  # every node made for this one (sums, zeros, the rule's) is named <node>_backward_...
    loss = op.loss_head(node.params)
    out_grads: list[Symbol | None] = []
    for k, entries in enumerate(got):
        if entries:
            out_grads.append(Symbol([_sum(entries)]))
        elif loss:
            out_grads.append(None)
        else:
            out_grads.append(F.zeros_like(Symbol([(node, k)])))
    in_grads = op.gradient(F, GradNode(node, needs), out_grads)
    if loss and loss_scale is not None:
        # a loss op ignores its head gradient, so the scale must be applied to what it emits
        in_grads = [g * float(loss_scale) if isinstance(g, Symbol) else g for g in in_grads]
    if len(in_grads) != len(inputs):
        raise SymgradError(f"gradient rule of {op.name} returned {len(in_grads)} gradients for {len(inputs)} inputs")
    for slot, g in enumerate(in_grads):
        if g is None or not needs[slot]:
            continue
        if not isinstance(g, Symbol) or len(g.output_entries()) != 1:
            raise SymgradError(f"gradient rule of {op.name} returned {g!r} for input {node.input_names()[slot]!r}")
        src, idx = inputs[slot]
        key = (src.id, idx)
        entries = acc.get(key)
        if entries is None:
            acc[key] = [g.output_entries()[0]]
        else:
            entries.append(g.output_entries()[0])


def _needs(node, op, dep) -> list:
    """Whether each input of ``node`` needs a gradient: an argument (not an auxiliary state) that depends on a
    requested input, through an input the op differentiates."""
    inputs = node.inputs
    no_grad = op.no_grad_inputs
    if not op.aux and not no_grad:
        return [src.id in dep for src, _ in inputs]
    n_args = node.num_args()
    names = node.input_names() if no_grad else None
    return [
        slot < n_args and src.id in dep and not (no_grad and names[slot] in no_grad)  # type: ignore[index]  # (names is set when no_grad is)
        for slot, (src, _) in enumerate(inputs)
    ]


def expansion_gradients(expand: Callable[..., Symbol], inputs: Sequence[Symbol], head: Symbol) -> list[Symbol | None]:
    """Gradients of a fused node through its expansion: the second-order rule of a node that computes in one
    instruction what ``expand(*inputs)`` builds from several (``_backward_tanh`` and ``ograd * (1 - y^2)``).

    Returns ``d <head, expand(inputs)> / d inputs[k]``, a Symbol or None (no path) per input. The expansion is
    built on placeholder variables, differentiated by the usual pass and then composed onto the real inputs,
    so each input slot is differentiated on its own even where two slots hold the same value. Nodes are
    named in the caller's scope (a gradient rule runs under ``<node>_backward_``).
    """
    holes = [Variable(f"__expand_in{k}__") for k in range(len(inputs))]
    head_var = Variable("__expand_head__")
    expr = expand(*holes)
    entries = _build(expr.output_entries(), [head_var.output_entries()[0]], [h.output_entries()[0][0] for h in holes])
    subs = {f"__expand_in{k}__": s for k, s in enumerate(inputs)}
    subs["__expand_head__"] = head
    result = []
    for e in entries:
        g = None if e is None else Symbol([e])
        # (the names are the placeholders' ``__expand_*__``: never ``name``, Symbol.__call__'s own keyword)
        result.append(
            g
            if g is None
            else g(
                **{
                    name: subs[name]  # type: ignore[arg-type]
                    for name in g.list_arguments()
                }
            )
        )
    return result


def _entries(symbols: Symbol | Iterable[Symbol], what: str) -> list[Entry]:
    if isinstance(symbols, Symbol):
        symbols = [symbols]
    out: list[Entry] = []
    for s in symbols:
        if not isinstance(s, Symbol):
            raise TypeError(f"grad: {what} must be Symbols, got {type(s).__name__}")
        out.extend(s.output_entries())
    return out


def grad(
    outputs: Symbol | Iterable[Symbol],
    inputs: Symbol | Iterable[Symbol],
    grad_outputs: Iterable[Symbol | None] | None = None,
    grad_inputs: Iterable[Symbol | None] | None = None,
    loss_scale: float | None = None,
) -> list[Symbol | None]:
    """Gradient Symbols of ``outputs`` w.r.t. the variables ``inputs`` (``chainer.grad`` semantics).

    Args:
        outputs: a Symbol or a list of Symbols to differentiate.
        inputs: Variables (single-output Symbols whose head is a variable).
        grad_outputs: one head gradient Symbol per output (None: ones).
        grad_inputs: Symbols added to the corresponding result (None: nothing).
        loss_scale: multiplies the head gradients (and the gradients loss operators emit, as
            they ignore theirs), so small gradients survive low precision; each result is
            divided by it again before ``grad_inputs`` are added.

    Returns:
        A list with one Symbol per input, or None where no path connects it.

    >>> import symgrad as sg
    >>> x = sg.sym.Variable("x")
    >>> (gx,) = sg.grad(sg.sym.sum(x * x), [x])
    >>> gx.list_arguments()
    ['x']
    """
    heads = _entries(outputs, "outputs")
    in_syms = [inputs] if isinstance(inputs, Symbol) else list(inputs)
    wrt = []
    for s in in_syms:
        if not isinstance(s, Symbol) or len(s) != 1 or s._outputs[0][0].op is not None:
            raise TypeError(f"grad: inputs must be Variables, got {s!r}")
        wrt.append(s._outputs[0][0])
    if grad_outputs is None:
        grad_outputs = [None] * len(heads)
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(heads):
        raise SymgradError(f"grad: {len(grad_outputs)} grad_outputs for {len(heads)} outputs")
    with NameManager():
        hgs = []
        for (node, i), go in zip(heads, grad_outputs):
            if go is None:
                go = F.ones_like(Symbol([(node, i)]), name=f"{node.name}_head_grad{i}")
            elif not isinstance(go, Symbol):
                raise TypeError(f"grad: grad_outputs must be Symbols or None, got {type(go).__name__}")
            if loss_scale is not None:
                go = go * float(loss_scale)
            hgs.append(go._outputs[0])
        entries = build_gradients(heads, hgs, wrt, loss_scale=loss_scale)
        if grad_inputs is None:
            grad_inputs = [None] * len(wrt)
        grad_inputs = list(grad_inputs)
        if len(grad_inputs) != len(wrt):
            raise SymgradError(f"grad: {len(grad_inputs)} grad_inputs for {len(wrt)} inputs")
        result = []
        for e, gi in zip(entries, grad_inputs):
            g = None if e is None else Symbol([e])
            if g is not None and loss_scale is not None:
                g = g / float(loss_scale)
            if gi is not None:
                g = gi if g is None else g + gi
            result.append(g)
    return result
