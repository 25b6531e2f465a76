"""MXNet's control flow: ``sym.contrib.foreach``, ``while_loop`` and ``cond`` (ops ``_foreach``, ``_while_loop``,
``_cond``), with their subgraphs held as node parameters (``graph.SUBGRAPHS``).

Building (MXNet 1.9.1's ``python/mxnet/symbol/contrib.py``): the user's function runs on placeholder Variables
inside ``AttrScope(__subgraph_name__=<unique name>)``; every node it makes carries that attribute. The subgraph is
cut where a node of the scope reads a node outside it: that entry becomes a variable named after it (``w``,
``fc_output``) and an input of the control-flow node. The node's ``*_locs`` parameters say which subgraph variable
(in the subgraph's ``list_inputs()`` order) each input feeds, exactly as MXNet writes them into JSON.

Running: each op forward evaluates its subgraphs with a small interpreter over the subgraph's nodes (``_Program``),
so nesting works and the executor's plan calls the node like any other op.

Gradients are Symbols made of the same control-flow ops, not a fused ``_backward_X`` kernel, so that every order
of ``sg.grad`` works (a fused node would refuse a second order) and the gradient of a loop stays a loop whose
length is only known at run time (an unrolled expansion would need the trip count when the gradient is built):

- ``foreach``: a second foreach records the states each iteration starts from; a reverse foreach over
  (data, recorded states, head gradients) runs the body's vector-Jacobian product (a subgraph built by
  ``gradient.build_gradients``), carrying the state gradients and summing the gradients of the free inputs.
- ``while_loop``: a recording while_loop also counts the steps taken; a backward while_loop runs the step
  counter down from that count, ``take``-ing the recorded loop variables and head gradients of its step.
  Padded steps past the trip count are never differentiated.
- ``cond``: a cond on the same predicate whose branches are the branches' vector-Jacobian products.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from .base import AttrScope, NameManager, ParamError, ShapeError
from .gradient import build_gradients
from .graph import SUBGRAPHS, Entry, Node, subgraphs, topo_order
from .infer import infer_shapes, infer_types
from .opdef import Param, get_op, register
from .symbol import F, Group, Symbol, Variable

__all__ = ["foreach", "while_loop", "cond", "input_readers"]

_SUBGRAPH_ATTR = "__subgraph_name__"


# -- running a subgraph ----------------------------------------------------------------------------------------


class _Program:
    """A subgraph ready to run: its variables (``list_inputs()`` order), op nodes in order and output entries;
    ``where`` (the control-flow op running it) names it in warnings."""

    __slots__ = ("variables", "ops", "heads", "where", "warned")

    def __init__(self, sub: Symbol, where: str = "subgraph") -> None:
        nodes = topo_order(sub.output_entries())
        self.variables = [n for n in nodes if n.op is None]
        self.ops = [n for n in nodes if n.op is not None]
        self.heads = list(sub.output_entries())
        self.where = where
        self.warned: set[int] = set()

    def __call__(self, xp, inputs: Sequence, is_train: bool) -> list:
        vals = {(v.id, 0): a for v, a in zip(self.variables, inputs)}
        for node in self.ops:
            op = node.op
            args = [vals[k] for k in node.input_keys]
            res = (
                op.forward(xp, *args, is_train=is_train, **node.params)
                if op.needs_is_train
                else op.forward(xp, *args, **node.params)
            )
            if op.mutates_aux:
                res, updates = res  # (outputs, auxiliary updates): a subgraph keeps no auxiliary state
                if any(u is not None for u in updates):
                    self._warn_dropped(node)
            outs = res if callable(op.num_outputs) or node.num_outputs > 1 else (res,)
            for k, r in enumerate(outs):
                vals[(node.id, k)] = r
        return [vals[(n.id, i)] for n, i in self.heads]

    def _warn_dropped(self, node: Node) -> None:
        """Warn (once per run of the control-flow node) that ``node`` updated auxiliary states that are dropped.

        MXNet 1.9.1 does the same: a subgraph's auxiliary states (a BatchNorm's moving statistics in a foreach
        body) become plain inputs of the control-flow node (``list_arguments()``, not
        ``list_auxiliary_states()``), and a forward in training never writes them back (measured: the moving
        mean and variance stay as bound, under ``autograd.train_mode()`` too).
        """
        if node.id in self.warned:
            return
        self.warned.add(node.id)
        names = ", ".join(repr(src.name) for src, _ in node.inputs[node.num_args() :])
        warnings.warn(
            f"{self.where}: {node.op_name} {node.name!r} in a control-flow subgraph computed new values of its "
            f"auxiliary states ({names}) in training, and they are dropped: a subgraph's auxiliary states are "
            "plain inputs of the control-flow node and are never written back (MXNet 1.9.1 drops them too). "
            "Apply it outside the loop or branch, or freeze its statistics (use_global_stats=True).",
            UserWarning,
            stacklevel=2,
        )


def _programs(params, where: str) -> list[_Program]:
    return [_Program(s, where) for s in params[SUBGRAPHS]]


def _own(xp, outs: list, inputs: Sequence) -> list:
    """``outs`` with every array that is one of ``inputs`` copied: a node's outputs never alias its inputs."""
    ids = {id(a) for a in inputs}
    return [xp.array(o, copy=True) if id(o) in ids else o for o in outs]


def _as_bool(xp, value, what: str) -> bool:
    """MXNet's ``as_bool_scalar``: a one-element array's truth."""
    if int(np.prod(value.shape)) != 1:
        raise ShapeError(f"{what}: the condition must hold one element, got shape {tuple(value.shape)}")
    return bool(value.reshape(-1)[0])


def _meta(sub: Symbol, in_shapes, in_types) -> tuple[list, list]:
    """Output shapes and dtypes of ``sub`` for inputs of these shapes and dtypes (by inference)."""
    prog = _Program(sub)
    shapes = infer_shapes(prog.ops, {(v.id, 0): s for v, s in zip(prog.variables, in_shapes)})
    types = infer_types(prog.ops, {(v.id, 0): t for v, t in zip(prog.variables, in_types)})
    keys = [(n.id, i) for n, i in prog.heads]
    return [shapes.get(k) for k in keys], [types.get(k) for k in keys]


# -- who reads a control-flow node's inputs ---------------------------------------------------------------------


_COND_LOCS = ("cond_input_locs", "then_input_locs", "else_input_locs")


def _feeds(node: Node) -> list[list[int]]:
    """For each subgraph of the control-flow ``node``, the node input that feeds each of its variables."""
    p = node.params
    if node.op_name == "_foreach":  # the input positions, placed where the *_locs put the inputs' values
        n = len(p["in_data_locs"]) + len(p["in_state_locs"]) + len(p["remain_locs"])
        return [_foreach_sub_values(p, list(range(n)), n)]
    keys = ("cond_input_locs", "func_input_locs") if node.op_name == "_while_loop" else _COND_LOCS
    return [list(p[k]) for k in keys]  # for each variable, the input it reads


def input_readers(node: Node) -> list[list[tuple[Node, int]]]:
    """For each input of ``node``, the operator nodes that really read it, as ``(node, input position)``.

    An ordinary op reads its own inputs: ``[[(node, 0)], [(node, 1)], ...]``. A control-flow node only passes
    its inputs on to its subgraphs: its readers are the ops of the subgraphs that read the variable an input
    feeds, looking through nested control-flow nodes (a ``fc_weight`` fed to a foreach is read as the weight
    of the body's FullyConnected). A symgrad extension for tools: ``viz.print_summary`` counts what a loop
    body reads as a weight as a parameter.

    >>> import symgrad as sg
    >>> S = sg.sym
    >>> out, _ = S.contrib.foreach(lambda x, st: (S.FullyConnected(x, num_hidden=2, name="fc"), st),
    ...                            S.var("data"), [S.var("h")])
    >>> loop = out.output_entries()[0][0]  # the _foreach node
    >>> [[n.input_names()[k] for n, k in r] for r in input_readers(loop)]  # data, h, fc_weight, fc_bias
    [['data'], ['data'], ['weight'], ['bias']]
    """
    if not subgraphs(node) or node.op_name not in ("_foreach", "_while_loop", "_cond"):
        return [[(node, k)] for k in range(len(node.inputs))]
    readers: list[list[tuple[Node, int]]] = [[] for _ in node.inputs]
    for sub, feeds in zip(subgraphs(node), _feeds(node)):
        prog = _Program(sub)
        fed = {v.id: feeds[k] for k, v in enumerate(prog.variables)}
        for op in prog.ops:
            inner = input_readers(op)
            for k, (src, _) in enumerate(op.inputs):
                if src.id in fed:
                    readers[fed[src.id]].extend(inner[k])
    return readers


# -- inference through a subgraph ------------------------------------------------------------------------------


def _infer_sub(node_where: str, sub: Symbol, ins: list, outs: list, kind: str) -> tuple[list, list]:
    """Run shape (or dtype) inference over ``sub`` with these variable and output values known; returns both
    lists filled in. Errors name the control-flow node around the subgraph's own message."""
    prog = _Program(sub)
    known: dict = {}
    for v, value in zip(prog.variables, ins):
        if value is not None:
            known[(v.id, 0)] = tuple(value) if kind == "shape" else value
    for (n, i), value in zip(prog.heads, outs):
        if value is not None:
            known[(n.id, i)] = tuple(value) if kind == "shape" else value
    try:
        if kind == "shape":
            infer_shapes(prog.ops, known, unknown_dims=True)
        else:
            infer_types(prog.ops, known)
    except (ShapeError, TypeError, ValueError) as exc:
        raise type(exc)(f"{node_where}: in its subgraph: {exc}") from exc
    return [known.get((v.id, 0)) for v in prog.variables], [known.get((n.id, i)) for n, i in prog.heads]


def _pick(values, locs):
    return [values[k] for k in locs]


def _fill(target: list, index: int, value) -> None:
    if value is not None and target[index] is None:
        target[index] = value


# -- _foreach --------------------------------------------------------------------------------------------------

_LOCS = "tuple of <long>"


def _foreach_inputs(params):
    return [f"data{i}" for i in range(params["num_args"] - 1)]


def _foreach_split(params, values):
    """The node's inputs as (data, states, remaining), in that order (MXNet's layout)."""
    nd, ns = len(params["in_data_locs"]), len(params["in_state_locs"])
    return values[:nd], values[nd : nd + ns], values[nd + ns :]


def _foreach_sub_values(params, values, n_sub):
    """The subgraph's variable values from the node's inputs (by the ``*_locs``)."""
    data, states, rest = _foreach_split(params, values)
    sub = [None] * n_sub
    for locs, vals in (
        (params["in_data_locs"], data),
        (params["in_state_locs"], states),
        (params["remain_locs"], rest),
    ):
        for loc, v in zip(locs, vals):
            sub[loc] = v
    return sub


def _check_foreach(params, n_inputs, where_):
    locs = (*params["in_data_locs"], *params["in_state_locs"], *params["remain_locs"])
    if len(params[SUBGRAPHS]) != 1:
        raise ParamError(f"{where_}: _foreach holds one subgraph, got {len(params[SUBGRAPHS])}")
    if sorted(locs) != list(range(len(locs))) or len(locs) != n_inputs:
        raise ParamError(f"{where_}: in_data_locs, in_state_locs and remain_locs must number the {n_inputs} inputs")
    if not params["in_data_locs"]:
        raise ParamError(f"{where_}: _foreach needs at least one data input to iterate over")
    n_states = params["num_outputs"] - params["num_out_data"]
    if n_states != len(params["in_state_locs"]):
        raise ParamError(f"{where_}: {n_states} output states for {len(params['in_state_locs'])} input states")


def _foreach_forward(xp, *inputs, is_train=False, **params):
    _check_foreach(params, len(inputs), "_foreach")
    (prog,) = _programs(params, "_foreach")
    data, states, _ = _foreach_split(params, list(inputs))
    n = data[0].shape[0]
    for d in data:
        if d.shape[0] != n:
            raise ShapeError(f"_foreach: data inputs of lengths {n} and {d.shape[0]} along axis 0")
    nod = params["num_out_data"]
    if n == 0:
        return _foreach_empty(xp, prog, params, inputs)
    collected: list[list] = [[] for _ in range(nod)]
    values = list(inputs)
    for t in range(n):
        k = 0
        for k, d in enumerate(data):
            values[k] = d[t] if d.ndim > 1 else d[t : t + 1]  # MXNet's NDArray::At: a 1-d array gives (1,)
        outs = prog(xp, _foreach_sub_values(params, values, len(prog.variables)), is_train)
        for j in range(nod):
            collected[j].append(outs[j])
        values[len(data) : len(data) + len(states)] = outs[nod:]
    result = [xp.stack(c) for c in collected] + list(values[len(data) : len(data) + len(states)])
    return tuple(_own(xp, result, inputs))


def _foreach_empty(xp, prog, params, inputs):
    """A loop over zero steps: empty stacked outputs of the inferred per-step shape, the initial states."""
    data, states, _ = _foreach_split(params, list(inputs))
    sliced = [tuple(d.shape[1:]) if d.ndim > 1 else (1,) for d in data]
    values = list(inputs)
    shapes = [tuple(v.shape) for v in values]
    shapes[: len(data)] = sliced
    sub_shapes = _foreach_sub_values(params, shapes, len(prog.variables))
    sub_types = _foreach_sub_values(params, [v.dtype for v in values], len(prog.variables))
    sub = Symbol(prog.heads)
    out_shapes, out_types = _meta(sub, sub_shapes, sub_types)
    nod = params["num_out_data"]
    empty = [xp.zeros((0, *out_shapes[j]), dtype=out_types[j]) for j in range(nod)]
    return tuple(empty + [xp.array(s, copy=True) for s in states])


def _foreach_shape(params, in_shapes, out_shapes, where_):
    _check_foreach(params, len(in_shapes), where_)
    (sub,) = params[SUBGRAPHS]
    nd, nod = len(params["in_data_locs"]), params["num_out_data"]
    ins = list(in_shapes)
    sliced = [None if s is None else (tuple(s[1:]) if len(s) > 1 else (1,)) for s in ins[:nd]]
    n_sub = len(_Program(sub).variables)
    sub_in = _foreach_sub_values(params, sliced + ins[nd:], n_sub)
    sub_out = [None if s is None else tuple(s[1:]) for s in out_shapes[:nod]] + list(out_shapes[nod:])
    sub_in, sub_out = _infer_sub(where_, sub, sub_in, sub_out, "shape")
    length = next((s[0] for s in (*in_shapes[:nd], *out_shapes[:nod]) if s is not None and len(s) > 0), None)
    outs = list(out_shapes)
    for j in range(nod):
        if sub_out[j] is not None and length is not None:
            _fill(outs, j, (length, *sub_out[j]))
    for j in range(nod, len(outs)):
        _fill(outs, j, sub_out[j])
    for i, loc in enumerate(params["in_data_locs"]):
        s = sub_in[loc]
        if s is not None and length is not None:
            _fill(ins, i, (length,) if in_shapes[i] is not None and len(in_shapes[i]) == 1 else (length, *s))
    for i, loc in enumerate((*params["in_state_locs"], *params["remain_locs"])):
        _fill(ins, nd + i, sub_in[loc])
    # a state's shape is the same going in and coming out
    for k in range(len(params["in_state_locs"])):
        _fill(outs, nod + k, ins[nd + k])
        _fill(ins, nd + k, outs[nod + k])
    return ins, outs


def _foreach_type(params, in_types, out_types, where_):
    (sub,) = params[SUBGRAPHS]
    nd, nod = len(params["in_data_locs"]), params["num_out_data"]
    n_sub = len(_Program(sub).variables)
    sub_in, sub_out = _infer_sub(
        where_, sub, _foreach_sub_values(params, list(in_types), n_sub), list(out_types), "dtype"
    )
    ins, outs = list(in_types), list(out_types)
    for j, t in enumerate(sub_out):
        _fill(outs, j, t)
    locs = (*params["in_data_locs"], *params["in_state_locs"], *params["remain_locs"])
    for i, loc in enumerate(locs):
        _fill(ins, i, sub_in[loc])
    for k in range(len(params["in_state_locs"])):
        _fill(outs, nod + k, ins[nd + k])
    return ins, outs


def _check_locs(params, keys, n_inputs, where_):
    """Every input position listed by the ``*_locs`` parameters ``keys`` (a subgraph's inputs in the op's) is
    one of the op's ``n_inputs`` inputs (_while_loop's and _cond's check)."""
    for key in keys:
        if any(not 0 <= k < n_inputs for k in params[key]):
            raise ParamError(f"{where_}: {key} {params[key]} points outside the {n_inputs} inputs")


# -- _while_loop -----------------------------------------------------------------------------------------------


def _while_inputs(params):
    return [f"data{i}" for i in range(params["num_args"] - 2)]


def _check_while(params, n_inputs, where_):
    if len(params[SUBGRAPHS]) != 2:
        raise ParamError(f"{where_}: _while_loop holds two subgraphs (cond, func), got {len(params[SUBGRAPHS])}")
    _check_locs(params, ("cond_input_locs", "func_input_locs"), n_inputs, where_)
    n_vars = params["num_outputs"] - params["num_out_data"]
    if len(params["func_var_locs"]) != n_vars:
        raise ParamError(
            f"{where_}: func_var_locs names {len(params['func_var_locs'])} loop variables, {n_vars} expected"
        )


def _while_forward(xp, *inputs, is_train=False, **params):
    _check_while(params, len(inputs), "_while_loop")
    cond_prog, func_prog = _programs(params, "_while_loop")
    values = list(inputs)
    cond_locs, func_locs, var_locs = params["cond_input_locs"], params["func_input_locs"], params["func_var_locs"]
    nod, m = params["num_out_data"], params["max_iterations"]
    steps: list[list] = [[] for _ in range(nod)]
    for _ in range(m):
        (c,) = cond_prog(xp, _pick(values, cond_locs), is_train)
        if not _as_bool(xp, c, "_while_loop"):
            break
        outs = func_prog(xp, _pick(values, func_locs), is_train)
        for j in range(nod):
            steps[j].append(outs[j])
        for k, loc in enumerate(var_locs):
            values[func_locs[loc]] = outs[nod + k]
    padded = [_pad(xp, s, m) for s in steps] if steps and steps[0] else _while_empty(xp, func_prog, params, inputs)
    final = [values[func_locs[loc]] for loc in var_locs]
    return tuple(_own(xp, padded + final, inputs))


def _pad(xp, steps: list, m: int):
    """The step outputs stacked along a new axis 0 of length ``max_iterations``; the steps not taken are zeros."""
    first = steps[0]
    out = xp.zeros((m, *first.shape), dtype=first.dtype)
    out[: len(steps)] = xp.stack(steps)
    return out


def _while_empty(xp, func_prog, params, inputs):
    """Zero step outputs of the inferred per-step shape when the body never ran."""
    nod = params["num_out_data"]
    if nod == 0:
        return []
    func_in = _pick(list(inputs), params["func_input_locs"])
    shapes, types = _meta(Symbol(func_prog.heads), [tuple(a.shape) for a in func_in], [a.dtype for a in func_in])
    return [xp.zeros((params["max_iterations"], *shapes[j]), dtype=types[j]) for j in range(nod)]


def _while_sync(params, ins, outs):
    """A loop variable has one shape (dtype) going in and coming out."""
    nod = params["num_out_data"]
    for k, loc in enumerate(params["func_var_locs"]):
        i = params["func_input_locs"][loc]
        _fill(outs, nod + k, ins[i])
        _fill(ins, i, outs[nod + k])


def _while_shape(params, in_shapes, out_shapes, where_):
    _check_while(params, len(in_shapes), where_)
    cond_sub, func_sub = params[SUBGRAPHS]
    nod, m = params["num_out_data"], params["max_iterations"]
    ins, outs = list(in_shapes), list(out_shapes)
    _while_sync(params, ins, outs)
    sub_out = [None if s is None else tuple(s[1:]) for s in outs[:nod]] + outs[nod:]
    func_in, sub_out = _infer_sub(where_, func_sub, _pick(ins, params["func_input_locs"]), sub_out, "shape")
    cond_in, _ = _infer_sub(where_, cond_sub, _pick(ins, params["cond_input_locs"]), [None], "shape")
    for locs, got in ((params["func_input_locs"], func_in), (params["cond_input_locs"], cond_in)):
        for loc, s in zip(locs, got):
            _fill(ins, loc, s)
    for j in range(nod):
        if sub_out[j] is not None:
            _fill(outs, j, (m, *sub_out[j]))
    for j in range(nod, len(outs)):
        _fill(outs, j, sub_out[j])
    _while_sync(params, ins, outs)
    return ins, outs


def _while_type(params, in_types, out_types, where_):
    cond_sub, func_sub = params[SUBGRAPHS]
    ins, outs = list(in_types), list(out_types)
    _while_sync(params, ins, outs)
    func_in, sub_out = _infer_sub(where_, func_sub, _pick(ins, params["func_input_locs"]), outs, "dtype")
    cond_in, _ = _infer_sub(where_, cond_sub, _pick(ins, params["cond_input_locs"]), [None], "dtype")
    for locs, got in ((params["func_input_locs"], func_in), (params["cond_input_locs"], cond_in)):
        for loc, t in zip(locs, got):
            _fill(ins, loc, t)
    for j, t in enumerate(sub_out):
        _fill(outs, j, t)
    _while_sync(params, ins, outs)
    return ins, outs


# -- _cond -----------------------------------------------------------------------------------------------------


def _cond_inputs(params):
    return [f"data{i}" for i in range(params["num_args"] - 3)]


def _check_cond(params, n_inputs, where_):
    if len(params[SUBGRAPHS]) != 3:
        raise ParamError(f"{where_}: _cond holds three subgraphs (cond, then, else), got {len(params[SUBGRAPHS])}")
    _check_locs(params, ("cond_input_locs", "then_input_locs", "else_input_locs"), n_inputs, where_)


def _cond_forward(xp, *inputs, is_train=False, **params):
    _check_cond(params, len(inputs), "_cond")
    pred, then_prog, else_prog = _programs(params, "_cond")
    (c,) = pred(xp, _pick(inputs, params["cond_input_locs"]), is_train)
    if _as_bool(xp, c, "_cond"):
        prog, locs = then_prog, params["then_input_locs"]
    else:
        prog, locs = else_prog, params["else_input_locs"]
    return tuple(_own(xp, prog(xp, _pick(inputs, locs), is_train), inputs))


def _cond_rule(kind):
    def rule(params, in_types, out_types, where_):
        _check_cond(params, len(in_types), where_)
        ins, outs = list(in_types), list(out_types)
        for sub, key in zip(params[SUBGRAPHS], _COND_LOCS):
            sub_outs = [None] if key == "cond_input_locs" else outs
            got_in, got_out = _infer_sub(where_, sub, _pick(ins, params[key]), sub_outs, kind)
            for loc, v in zip(params[key], got_in):
                _fill(ins, loc, v)
            if key != "cond_input_locs":
                for j, v in enumerate(got_out):
                    _fill(outs, j, v)
        return ins, outs

    return rule


# -- building control-flow nodes -------------------------------------------------------------------------------


def _mx_locs(locs) -> str:
    """How MXNet writes a ``Tuple<dim_t>`` into JSON: ``[0, 2]``."""
    return "[" + ", ".join(str(int(k)) for k in locs) + "]"


def _node(opname: str, subs: Sequence[Symbol], inputs: Sequence[Entry], params: dict, name: str | None) -> Symbol:
    """A control-flow node of ``subs`` reading ``inputs``: its parameters parsed, its attributes MXNet's strings
    (the current AttrScope's first), its outputs a Symbol."""
    op = get_op(opname)
    params = {**params, "num_args": len(inputs) + len(subs)}
    strings = {k: _mx_locs(v) if isinstance(v, (list, tuple)) else str(v) for k, v in params.items()}
    node_name = _names().get(name, opname)
    parsed = op.parse_params(strings, f"{opname} {node_name!r}")
    parsed[SUBGRAPHS] = tuple(subs)
    attrs = {**AttrScope.current_attrs(), **strings}
    node = Node(op, node_name, parsed, attrs, inputs, parsed["num_outputs"])
    return Symbol([(node, i) for i in range(node.num_outputs)])


def _names() -> NameManager:
    """This thread's NameManager (``NameManager.current``: a class property, once a method)."""
    current = NameManager.current
    return current() if callable(current) else current


class _Inputs:
    """The union of the outer entries several subgraphs read, in first-use order (MXNet's ``_union_inputs``).

    A variable in ``private`` gets an input of its own even where another subgraph reads the same entry: MXNet
    unites its subgraphs' inputs by Python object, and the symbols it cuts a subgraph at are new objects for
    each subgraph (a while_loop's free inputs, a cond's operator outputs), so each keeps its own slot.
    """

    def __init__(self, private: frozenset[int] = frozenset()) -> None:
        self.entries: list[Entry] = []
        self._index: dict[tuple, int] = {}
        self._private = private

    def locs(self, sub: Symbol, bound: dict[int, Entry]) -> list[int]:
        """Where each variable of ``sub`` (``list_inputs()`` order) finds its outer entry (``bound``: variable
        node id -> entry) among the union, added on first use."""
        out = []
        for v in _Program(sub).variables:
            entry = bound[v.id]
            key = ("own", v.id) if v.id in self._private else (entry[0].id, entry[1])
            if key not in self._index:
                self._index[key] = len(self.entries)
                self.entries.append(entry)
            out.append(self._index[key])
        return out


def _group(outs: Sequence[Symbol]) -> Symbol:
    return Group(list(outs))


def make_foreach(sub: Symbol, bound: dict[int, Entry], data_vars, state_vars, num_out_data: int, name=None):
    """A ``_foreach`` node of the subgraph ``sub``: ``bound`` maps each of its variable node ids to the outer entry
    it reads; ``data_vars``/``state_vars`` are the variable nodes iterated over / carried. Unused data or state
    variables are an error (MXNet's)."""
    order = _Program(sub).variables
    pos = {v.id: k for k, v in enumerate(order)}
    for what, vs in (("data", data_vars), ("state", state_vars)):
        for v in vs:
            if v.id not in pos:
                raise ValueError(f"foreach: the {what} input {v.name!r} is not used by the loop body")
    special = {v.id for v in (*data_vars, *state_vars)}
    remain = [v for v in order if v.id not in special]
    inputs = [bound[v.id] for v in (*data_vars, *state_vars, *remain)]
    params = {
        "num_outputs": len(sub.output_entries()),
        "num_out_data": num_out_data,
        "in_state_locs": [pos[v.id] for v in state_vars],
        "in_data_locs": [pos[v.id] for v in data_vars],
        "remain_locs": [pos[v.id] for v in remain],
    }
    return _node("_foreach", [sub], inputs, params, name)


def make_while_loop(cond_sub, func_sub, bound, var_nodes, num_out_data, max_iterations, name=None, private=frozenset()):
    """A ``_while_loop`` node; ``var_nodes[k]`` is the variable node standing for loop variable k in ``func_sub``
    (and ``cond_sub``, where it reads it); variables in ``private`` get inputs of their own (``_Inputs``)."""
    union = _Inputs(private)
    cond_locs = union.locs(cond_sub, bound)
    func_locs = union.locs(func_sub, bound)
    order = [v.id for v in _Program(func_sub).variables]
    var_locs = []
    for k, v in enumerate(var_nodes):
        if v.id not in order:
            raise ValueError(f"while_loop: loop variable {k} ({v.name!r}) is not used by the loop body")
        var_locs.append(order.index(v.id))
    params = {
        "num_outputs": len(func_sub.output_entries()),
        "num_out_data": num_out_data,
        "max_iterations": int(max_iterations),
        "cond_input_locs": cond_locs,
        "func_input_locs": func_locs,
        "func_var_locs": var_locs,
    }
    return _node("_while_loop", [cond_sub, func_sub], union.entries, params, name)


def make_cond(pred_sub, then_sub, else_sub, bound, name=None, private=frozenset()):
    """A ``_cond`` node of three subgraphs whose variables ``bound`` maps to outer entries; variables in
    ``private`` get inputs of their own (``_Inputs``)."""
    union = _Inputs(private)
    locs = [union.locs(s, bound) for s in (pred_sub, then_sub, else_sub)]
    if len(then_sub.output_entries()) != len(else_sub.output_entries()):
        raise ValueError("cond: the then and else branches have different numbers of outputs")
    params = {
        "num_outputs": len(then_sub.output_entries()),
        "cond_input_locs": locs[0],
        "then_input_locs": locs[1],
        "else_input_locs": locs[2],
    }
    return _node("_cond", [pred_sub, then_sub, else_sub], union.entries, params, name)


# -- the user-facing API (mx.sym.contrib) ----------------------------------------------------------------------


def _unique_subgraph_name(name: str) -> str:
    """``name`` numbered by how many subgraphs of that name were made, counted where MXNet counts them
    (``AttrScope._subgraph_names``, which a user may replace: test_scope); nested in another subgraph, the name
    is prefixed with the enclosing one's (``outer$name``)."""
    outer = AttrScope.current_attrs().get(_SUBGRAPH_ATTR, "")
    if outer:
        name = f"{outer}${name}"
    counts = AttrScope._subgraph_names
    counts[name] = counts.get(name, 0) + 1
    return f"{name}{counts[name] - 1}"


def _flatten(args, what: str):
    """MXNet's ``_flatten``: a Symbol or nested lists of Symbols as a flat list and its format."""
    if isinstance(args, Symbol):
        n = len(args)
        return [args], (n if n > 1 else 0)
    if not isinstance(args, (list, tuple)):
        raise TypeError(f"{what} must be a Symbol or (nested) lists of Symbols, got {type(args).__name__}")
    flat, fmts = [], []
    for a in args:
        f, fmt = _flatten(a, what)
        flat.extend(f)
        fmts.append(fmt)
    return flat, fmts


def _regroup(args, fmt):
    if isinstance(fmt, int):
        if fmt == 0:
            return args[0], args[1:]
        return args[:fmt], args[fmt:]
    ret = []
    for f in fmt:
        res, args = _regroup(args, f)
        ret.append(res)
    return ret, args


def _uniq_name(sym: Symbol) -> str:
    """MXNet's ``_get_sym_uniq_name``: ``<name>-<value index>``, the index of the output ``sym`` is of its node
    (``_foreach0-1`` for a loop's second output), so two outputs of one node give two names (test_uniq_name)."""
    return f"{sym.name}-{sym.output_entries()[0][1]}"


def _single(sym: Symbol, what: str) -> Symbol:
    if not isinstance(sym, Symbol) or len(sym) != 1:
        raise TypeError(f"{what} must be single-output Symbols, got {sym!r}")
    return sym


def _inside(node: Node, name: str) -> bool:
    return node.attrs.get(_SUBGRAPH_ATTR) == name


def _subgraph_outputs(outs: Sequence[Symbol], name: str, n_out: int | None = None) -> list[Symbol]:
    """MXNet's ``_construct_subgraph``: an output that is a variable of the subgraph, or a node made outside it,
    goes through an ``identity`` made inside it (a subgraph's inputs and outputs never overlap). For foreach
    (``n_out``: how many of ``outs`` are step outputs, the rest states) a state named like a step output gets
    one too; while_loop and cond let an output repeat."""
    input_names = set(_group(outs).list_inputs()) if outs else set()
    out_names = {o.name for o in outs[:n_out]} if n_out is not None else set()
    result = []
    for k, o in enumerate(outs):
        node = o.output_entries()[0][0]
        repeated = n_out is not None and k >= n_out and o.name in out_names
        if o.name in input_names or repeated or not _inside(node, name):
            with AttrScope(**{_SUBGRAPH_ATTR: name}):
                o = F.identity(o)
        result.append(o)
    return result


def _cut(outs: Sequence[Symbol], name: str) -> tuple[Symbol, dict[int, Entry]]:
    """The subgraph of the nodes made in scope ``name`` that ``outs`` reach, cut at every entry they read from
    outside it (MXNet's ``MXSymbolCutSubgraph``): such an entry becomes a new variable named after it. Returns the
    subgraph and ``{variable node id: outer entry}`` for its variables (a variable made in the scope is bound
    to a fresh copy of itself, MXNet's ``copy.deepcopy``); ``_cut_ids`` tells the cut variables."""
    heads = [o.output_entries()[0] for o in outs]
    new: dict[int, Node] = {}
    cut: dict[tuple, Node] = {}
    bound: dict[int, Entry] = {}
    for node in topo_order(heads):
        if not _inside(node, name):
            continue
        if node.op is None:
            copy = Node(None, node.name, {}, dict(node.attrs), (), 1)
            bound[node.id] = (copy, 0)
            continue
        inputs = []
        for src, i in node.inputs:
            if _inside(src, name):
                inputs.append((new.get(src.id, src), i))
                continue
            var = cut.get((src.id, i))
            if var is None:
                var = cut[(src.id, i)] = Node(None, src.output_name(i), {}, {}, (), 1)
                bound[var.id] = (src, i)
            inputs.append((var, 0))
        new[node.id] = Node(node.op, node.name, node.params, node.attrs, inputs, node.num_outputs)
    sub = Symbol([(new.get(n.id, n), i) for n, i in heads])
    return sub, bound


def _cut_ids(bound: dict[int, Entry], scope: str) -> set[int]:
    """The variables of ``_cut``'s answer for ``scope`` that stand for entries read from outside it (not the
    scope's own variables, bound to copies of themselves made inside it)."""
    return {k for k, (node, _) in bound.items() if not (node.op is None and _inside(node, scope))}


def _build_subgraph(name: str, fn: Callable, placeholders_for: Sequence[Symbol], foreach: bool = False):
    """Run ``fn`` on placeholder variables (``<name>-<index>`` of each of ``placeholders_for``) in the scope of a
    new subgraph. ``fn`` returns ``(flat outputs, *more)`` (for ``foreach``: ``more[0]`` the number of step
    outputs); returns (scope name, placeholders, the outputs as ``_subgraph_outputs`` makes them, ``*more``), in
    MXNet's order of node creation."""
    scope = _unique_subgraph_name(name)
    with AttrScope(**{_SUBGRAPH_ATTR: scope}):
        holders = [Variable(_uniq_name(s)) for s in placeholders_for]
        outs, *more = fn(holders)
        outs = _subgraph_outputs(outs, scope, more[0] if foreach else None)
    return (scope, holders, outs, *more)


def foreach(body: Callable, data, init_states, name: str = "foreach"):
    """Run ``body`` over axis 0 of ``data`` (``mx.sym.contrib.foreach``): ``out, states = body(data_t, states)``;
    returns the step outputs stacked along axis 0 and the final states, in the formats ``body`` returned.

    >>> import numpy as np, symgrad as sg
    >>> step = lambda x, s: (x + s[0], [s[0] * 2])
    >>> outs, states = sg.sym.contrib.foreach(step, sg.sym.var("data"), [sg.sym.var("s")])
    >>> [a.tolist() for a in sg.sym.Group([outs, states[0]]).eval(data=np.ones((3, 1)), s=np.ones(1))]
    [[[2.0], [3.0], [5.0]], [8.0]]
    """
    flat_data, data_fmt = _flatten(data, "foreach input")
    flat_states, state_fmt = _flatten(init_states, "foreach states")
    flat_data = [_single(s, "foreach data") for s in flat_data]
    flat_states = [_single(s, "foreach states") for s in flat_states]
    n_data = len(flat_data)

    def run(holders):
        d, _ = _regroup(holders[:n_data], data_fmt)
        s, _ = _regroup(holders[n_data:], state_fmt)
        out, new_states = body(d, s)
        flat_out, out_fmt = _flatten(out, "foreach output")
        flat_new, new_fmt = _flatten(new_states, "foreach loop_vars")
        if new_fmt != state_fmt:
            raise ValueError("foreach: the body returned its states in another format than init_states")
        return flat_out + flat_new, len(flat_out), len(flat_new), out_fmt

    scope, holders, sub_outs, n_out, n_new, out_fmt = _build_subgraph(name, run, flat_data + flat_states, foreach=True)
    sub, bound = _cut(sub_outs, scope)
    for h, outer in zip(holders, flat_data + flat_states):
        bound[h.output_entries()[0][0].id] = outer.output_entries()[0]
    holder_nodes = [h.output_entries()[0][0] for h in holders]
    node = make_foreach(sub, bound, holder_nodes[:n_data], holder_nodes[n_data:], n_out)
    outs, _ = _regroup([node[i] for i in range(n_out)], out_fmt)
    states, _ = _regroup([node[n_out + k] for k in range(n_new)], state_fmt)
    return outs, states


def while_loop(cond: Callable, func: Callable, loop_vars, max_iterations=None, name: str = "while_loop"):
    """Run ``func`` while ``cond`` holds, at most ``max_iterations`` times (``mx.sym.contrib.while_loop``):
    ``cond(*loop_vars)`` gives a one-element Symbol, ``func(*loop_vars)`` gives ``(step_output, new_loop_vars)``.
    Returns the step outputs stacked along axis 0 and padded with zeros to ``max_iterations`` rows, and the final
    loop variables.
    """
    if max_iterations is None:
        raise ValueError("while_loop: max_iterations should be specified")
    try:
        max_iterations = int(max_iterations)
    except (TypeError, ValueError):
        raise ValueError(f"while_loop: cannot convert max_iterations {max_iterations!r} to an int") from None
    if max_iterations < 1:
        raise ValueError(f"while_loop: max_iterations must be at least 1, got {max_iterations}")
    flat_vars, var_fmt = _flatten(loop_vars, "while loop_vars")
    flat_vars = [_single(s, "while_loop loop_vars") for s in flat_vars]
    if not flat_vars:
        raise ValueError("while_loop: loop_vars should contain at least one element")

    def run_cond(holders):
        vs, _ = _regroup(holders, var_fmt)
        result = cond(*vs) if isinstance(vs, list) else cond(vs)
        if not isinstance(result, Symbol):
            raise ValueError("while_loop: cond must return a Symbol")
        return ([result],)

    def run_func(holders):
        vs, _ = _regroup(holders, var_fmt)
        step, new_vars = func(*vs) if isinstance(vs, list) else func(vs)
        step = [] if step is None else list(step) if isinstance(step, tuple) else step
        new_vars = [] if new_vars is None else list(new_vars) if isinstance(new_vars, tuple) else new_vars
        flat_step, out_fmt = _flatten(step, "while output")
        flat_new, _ = _flatten(new_vars, "while loop_vars")
        if len(flat_new) != len(flat_vars):
            raise ValueError("while_loop: the number of loop_vars should be consistent during the loop")
        return flat_step + flat_new, len(flat_step), out_fmt

    cscope, cholders, cond_outs = _build_subgraph(name + "_cond", run_cond, flat_vars)
    fscope, fholders, func_outs, n_step, out_fmt = _build_subgraph(name + "_func", run_func, flat_vars)
    cond_sub, bound = _cut(cond_outs, cscope)
    func_sub, fbound = _cut(func_outs, fscope)
    private = _cut_ids(bound, cscope) | _cut_ids(
        fbound, fscope
    )  # MXNet: a free input read by cond and func takes two slots
    bound.update(fbound)
    for holders in (cholders, fholders):
        for h, outer in zip(holders, flat_vars):
            bound[h.output_entries()[0][0].id] = outer.output_entries()[0]
    _share_free_copies(bound)
    var_nodes = [h.output_entries()[0][0] for h in fholders]
    node = make_while_loop(cond_sub, func_sub, bound, var_nodes, n_step, max_iterations, private=frozenset(private))
    outs, _ = _regroup([node[i] for i in range(n_step)], out_fmt)
    final, _ = _regroup([node[n_step + k] for k in range(len(flat_vars))], var_fmt)
    return outs, final


def _share_free_copies(bound: dict[int, Entry]) -> None:
    """Variables made inside two subgraphs under one name become one outer variable (MXNet's union by name)."""
    by_name: dict[str, Entry] = {}
    for key, entry in bound.items():
        node = entry[0]
        if node.op is None and _SUBGRAPH_ATTR in node.attrs:
            bound[key] = by_name.setdefault(node.name, entry)


def cond(pred: Symbol, then_func: Callable, else_func: Callable, name: str = "cond"):
    """``then_func()`` where the one-element Symbol ``pred`` is true, else ``else_func()``
    (``mx.sym.contrib.cond``); both branches return Symbols of the same number, shapes and dtypes."""
    _single(pred, "cond pred")
    fmts: list = []

    def branch(func):
        def run(_):
            flat, fmt = _flatten(func(), "cond outputs")
            fmts.append(fmt)
            return (flat,)

        return run

    bound: dict[int, Entry] = {}
    subs = []
    private: set[int] = set()
    for suffix, func in (("_pred", lambda: pred), ("_then", then_func), ("_else", else_func)):
        scope, _, outs = _build_subgraph(name + suffix, branch(func), [])
        sub, b = _cut(outs, scope)
        # MXNet unites a cond's inputs by name: an outer variable is one input, an operator's output read by
        # two subgraphs two
        private |= {k for k in _cut_ids(b, scope) if b[k][0].op is not None}
        bound.update(b)
        subs.append(sub)
    if len(subs[0].output_entries()) != 1:
        raise ValueError("cond: pred should always be a single output")
    if len(subs[1].output_entries()) != len(subs[2].output_entries()):
        raise ValueError("cond: number of outputs differs between then-branch and else-branch")
    then_fmt = fmts[1]
    flat_then = subs[1].output_entries()
    _share_free_copies(bound)
    node = make_cond(subs[0], subs[1], subs[2], bound, private=frozenset(private))
    outs, _ = _regroup([node[i] for i in range(len(flat_then))], then_fmt)
    return outs


# -- gradients -------------------------------------------------------------------------------------------------

_hole_ids = itertools.count()


def _holes(prefix: str, like) -> list[Symbol]:
    """Fresh variables ``<prefix><uid>_<k>``, one per element of ``like``: placeholders inside a gradient
    subgraph (unique names: a second-order gradient's subgraph also holds the first order's)."""
    uid = next(_hole_ids)
    return [Variable(f"{prefix}{uid}_{k}") for k in range(len(like))]


def _hole(prefix: str) -> Symbol:
    return _holes(prefix, [None])[0]


def _vjp(sub: Symbol, head_grads: Sequence[Symbol | None], wrt: Sequence[Node]) -> list[Symbol]:
    """``d <head_grads, sub(...)> / d wrt`` as Symbols over the variables of ``sub`` and ``head_grads``; an input
    that no output depends on gets ``zeros_like`` of itself (so every gradient is a Symbol of the right shape)."""
    heads = [e for e, g in zip(sub.output_entries(), head_grads) if g is not None]
    hgs = [g.output_entries()[0] for g in head_grads if g is not None]
    entries = build_gradients(heads, hgs, list(wrt)) if heads else [None] * len(wrt)
    return [F.zeros_like(Symbol([(v, 0)])) if e is None else Symbol([e]) for e, v in zip(entries, wrt)]


def _foreach_gradient(F_, gnode, out_grads):
    """The gradient of ``_foreach`` as two more foreach loops (see the module docstring)."""
    params = gnode.params
    (sub,) = params[SUBGRAPHS]
    prog = _Program(sub)
    nd, ns, nod = len(params["in_data_locs"]), len(params["in_state_locs"]), params["num_out_data"]
    inputs = gnode.inputs
    data, states, remains = inputs[:nd], inputs[nd : nd + ns], inputs[nd + ns :]
    var = prog.variables
    d_vars = [var[k] for k in params["in_data_locs"]]
    s_vars = [var[k] for k in params["in_state_locs"]]
    r_vars = [var[k] for k in params["remain_locs"]]
    seq = _recorded_states(sub, d_vars, s_vars, nod, data, states, remains, r_vars) if ns else []
    # the backward body: the vector-Jacobian product of one step
    go = _holes("__cf_ograd", range(nod))
    gs = _holes("__cf_sgrad", range(ns))
    acc = _holes("__cf_acc", range(len(r_vars)))
    vjp = _vjp(sub, [*go, *gs], [*d_vars, *s_vars, *r_vars])
    step_d, step_s, step_r = vjp[:nd], vjp[nd : nd + ns], vjp[nd + ns :]
    new_acc = [a + g for a, g in zip(acc, step_r)]
    body = _group([*step_d, *step_s, *new_acc])
    bound: dict[int, Entry] = {}
    rev = [F.reverse(x, axis=0) for x in (*data, *seq, *out_grads[:nod])]
    for v, x in zip([*d_vars, *s_vars, *[h.output_entries()[0][0] for h in go]], rev):
        bound[v.id] = x.output_entries()[0]
    init = [*out_grads[nod:], *[F.zeros_like(r) for r in remains]]
    for v, x in zip([h.output_entries()[0][0] for h in (*gs, *acc)], init):
        bound[v.id] = x.output_entries()[0]
    for v, x in zip(r_vars, remains):
        bound[v.id] = x.output_entries()[0]
    body_vars = {v.id for v in _Program(body).variables}
    if d_vars[0].id not in body_vars:  # the loop's length comes from a data input: keep one in the body
        step_d[0] = step_d[0] + F.zeros_like(Symbol([(d_vars[0], 0)]))
        body = _group([*step_d, *step_s, *new_acc])
        body_vars = {v.id for v in _Program(body).variables}
    data_nodes = [v for v in (*d_vars, *s_vars, *[h.output_entries()[0][0] for h in go]) if v.id in body_vars]
    state_nodes = [h.output_entries()[0][0] for h in (*gs, *acc)]
    back = make_foreach(body, bound, data_nodes, state_nodes, nd)
    grads = [F.reshape_like(F.reverse(back[j], axis=0), data[j]) for j in range(nd)]
    grads += [back[nd + k] for k in range(ns + len(remains))]
    return [g if need else None for g, need in zip(grads, gnode.needs)]


def _recorded_states(sub, d_vars, s_vars, nod, data, states, remains, r_vars):
    """The states each step of the loop starts from, stacked (a foreach whose body also outputs its states)."""
    heads = [Symbol([e]) for e in sub.output_entries()]
    record = _group([*heads[:nod], *[F.identity(Symbol([(v, 0)])) for v in s_vars], *heads[nod:]])
    bound = {v.id: x.output_entries()[0] for v, x in zip([*d_vars, *s_vars, *r_vars], [*data, *states, *remains])}
    node = make_foreach(record, bound, d_vars, s_vars, nod + len(s_vars))
    return [node[nod + k] for k in range(len(s_vars))]


def _cond_gradient(F_, gnode, out_grads):
    """The gradient of ``_cond``: a cond on the same predicate whose branches are the branches' VJPs."""
    params = gnode.params
    pred_sub, then_sub, else_sub = params[SUBGRAPHS]
    inputs = gnode.inputs
    n = len(inputs)
    bound: dict[int, Entry] = {}
    for v, loc in zip(_Program(pred_sub).variables, params["cond_input_locs"]):
        bound[v.id] = inputs[loc].output_entries()[0]
    heads = _holes("__cf_ograd", out_grads)
    for h, g in zip(heads, out_grads):
        bound[h.output_entries()[0][0].id] = g.output_entries()[0]
    branches = []
    for sub, key in ((then_sub, "then_input_locs"), (else_sub, "else_input_locs")):
        svars = _Program(sub).variables
        grads = _vjp(sub, heads, svars)
        by_input: dict[int, Symbol] = {}
        for v, loc, g in zip(svars, params[key], grads):
            bound[v.id] = inputs[loc].output_entries()[0]
            by_input[loc] = by_input[loc] + g if loc in by_input else g
        outs = []
        for i in range(n):
            if i in by_input:
                outs.append(by_input[i])
            else:  # an input this branch never reads: a zero gradient shaped by a variable bound to the input
                hole = _hole(f"__cf_in{i}_")
                bound[hole.output_entries()[0][0].id] = inputs[i].output_entries()[0]
                outs.append(F.zeros_like(hole))
        branches.append(_group([F.identity(o) for o in outs]))
    node = make_cond(pred_sub, branches[0], branches[1], bound)
    return [node[i] if need else None for i, need in enumerate(gnode.needs)]


def _while_gradient(F_, gnode, out_grads):
    """The gradient of ``_while_loop`` as a recording while_loop and a backward one (see the module docstring)."""
    params = gnode.params
    cond_sub, func_sub = params[SUBGRAPHS]
    inputs = gnode.inputs
    nod, m = params["num_out_data"], params["max_iterations"]
    func_locs, var_locs = params["func_input_locs"], params["func_var_locs"]
    fvars = _Program(func_sub).variables
    loop_vars = [fvars[k] for k in var_locs]
    loop_ids = {v.id for v in loop_vars}
    free = [(v, loc) for v, loc in zip(fvars, func_locs) if v.id not in loop_ids]
    seq, count = _recorded_loop(gnode, cond_sub, func_sub, loop_vars)
    # backward loop variables: the step index k (counting down), the loop variables' gradients, the free sums
    k = _hole("__cf_step")
    gs = _holes("__cf_sgrad", loop_vars)
    acc = _holes("__cf_acc", free)
    seqs = _holes("__cf_seq", loop_vars)
    ogs = _holes("__cf_ograd", range(nod))
    frees = _holes("__cf_free", free)
    at = [F.squeeze(F.take(s, k), axis=0) for s in seqs]
    step_go = [F.squeeze(F.take(g, k), axis=0) for g in ogs]
    # the body evaluated at the recorded loop variables of step k and the free inputs
    subs = {v.name: x for v, x in zip(loop_vars, at)}
    subs.update({v.name: x for (v, _), x in zip(free, frees)})
    vjp = _vjp(func_sub, [*step_go, *gs], [*loop_vars, *[v for v, _ in free]])
    vjp = [_substitute(g, subs) for g in vjp]
    new_vars = [k - 1, *vjp[: len(loop_vars)], *[a + g for a, g in zip(acc, vjp[len(loop_vars) :])]]
    func_back = _group([F.identity(v) for v in new_vars])
    cond_back = _group([k >= 0])
    bound: dict[int, Entry] = {}
    outer = [count - 1, *out_grads[nod:], *[F.zeros_like(inputs[loc]) for _, loc in free]]
    for h, x in zip([k, *gs, *acc], outer):
        bound[h.output_entries()[0][0].id] = x.output_entries()[0]
    for h, x in zip([*seqs, *ogs, *frees], [*seq, *out_grads[:nod], *[inputs[loc] for _, loc in free]]):
        bound[h.output_entries()[0][0].id] = x.output_entries()[0]
    var_nodes = [h.output_entries()[0][0] for h in (k, *gs, *acc)]
    back = make_while_loop(cond_back, func_back, bound, var_nodes, 0, m)
    grads: list = [None] * len(inputs)
    for j, loc in enumerate(var_locs):
        _add(grads, func_locs[loc], back[1 + j])
    for j, (_, loc) in enumerate(free):
        _add(grads, loc, back[1 + len(loop_vars) + j])
    return [g if need else None for g, need in zip(grads, gnode.needs)]


def _add(grads: list, i: int, g: Symbol) -> None:
    grads[i] = g if grads[i] is None else grads[i] + g


def _substitute(sym: Symbol, subs: dict[str, Symbol]) -> Symbol:
    names = set(sym.list_arguments())
    return sym(**{n: s for n, s in subs.items() if n in names})  # type: ignore[arg-type]  # (variable names)


def _recorded_loop(gnode, cond_sub, func_sub, loop_vars):
    """Rerun the loop also stacking the loop variables each step starts from, and counting the steps."""
    params = gnode.params
    nod = params["num_out_data"]
    heads = [Symbol([e]) for e in func_sub.output_entries()]
    counter = _hole("__cf_count")
    record = _group([*[F.identity(Symbol([(v, 0)])) for v in loop_vars], *heads[nod:], F.identity(counter + 1)])
    cvars = _Program(cond_sub).variables
    fvars = _Program(func_sub).variables
    bound: dict[int, Entry] = {}
    for v, loc in zip(cvars, params["cond_input_locs"]):
        bound[v.id] = gnode.inputs[loc].output_entries()[0]
    for v, loc in zip(fvars, params["func_input_locs"]):
        bound[v.id] = gnode.inputs[loc].output_entries()[0]
    zero = F._zeros(shape=(1,), dtype="float32")
    bound[counter.output_entries()[0][0].id] = zero.output_entries()[0]
    node = make_while_loop(
        cond_sub, record, bound, [*loop_vars, counter.output_entries()[0][0]], len(loop_vars), params["max_iterations"]
    )
    n = len(loop_vars)
    return [node[j] for j in range(n)], node[n + n]


# -- registration ----------------------------------------------------------------------------------------------


def _locs_param(doc: str) -> Param:
    return Param("shape", doc=doc)


def _register(name: str, rules: tuple, inputs: Callable, sizes: tuple[str, str], params: dict[str, Param], doc: str):
    """Register one control-flow op: ``rules`` are its (forward, shape rule, dtype rule, gradient); the parameters
    every control-flow op has (``num_args``: the inputs, ``sizes[0]`` how its subgraphs count, ``num_outputs``:
    the outputs of ``sizes[1]``) come before its own ``params``; its subgraphs run in training mode when the
    executor does."""
    forward, infer_shape, infer_type, gradient = rules
    return register(
        name,
        forward=forward,
        infer_shape=infer_shape,
        infer_type=infer_type,
        gradient=gradient,
        inputs=inputs,
        params={
            "num_args": Param("int", doc=f"number of inputs, {sizes[0]}"),
            "num_outputs": Param("int", doc=f"number of outputs of {sizes[1]}"),
            **params,
        },
        num_outputs=lambda p: p["num_outputs"],
        needs_is_train=True,
        doc=doc,
    )


_foreach_op = _register(
    "_foreach",
    (_foreach_forward, _foreach_shape, _foreach_type, _foreach_gradient),
    _foreach_inputs,
    ("the subgraph counted as one", "the subgraph"),
    {
        "num_out_data": Param("int", doc="how many of them are per-step data outputs (the rest are states)"),
        "in_state_locs": _locs_param("the subgraph inputs the loop states feed"),
        "in_data_locs": _locs_param("the subgraph inputs the data slices feed"),
        "remain_locs": _locs_param("the subgraph inputs the other inputs feed"),
    },
    "Run a for loop over axis 0 of the data inputs with a subgraph (sym.contrib.foreach).",
)
_while_op = _register(
    "_while_loop",
    (_while_forward, _while_shape, _while_type, _while_gradient),
    _while_inputs,
    ("the two subgraphs counted", "the body"),
    {
        "num_out_data": Param("int", doc="how many of them are per-step outputs (the rest are loop variables)"),
        "max_iterations": Param("int", doc="maximum number of iterations"),
        "cond_input_locs": _locs_param("the inputs the condition reads"),
        "func_input_locs": _locs_param("the inputs the body reads"),
        "func_var_locs": _locs_param("the body inputs that are loop variables"),
    },
    "Run a while loop with a condition subgraph and a body subgraph (sym.contrib.while_loop).",
)
_cond_op = _register(
    "_cond",
    (_cond_forward, _cond_rule("shape"), _cond_rule("dtype"), _cond_gradient),
    _cond_inputs,
    ("the three subgraphs counted", "each branch"),
    {
        "cond_input_locs": _locs_param("the inputs the condition reads"),
        "then_input_locs": _locs_param("the inputs the then branch reads"),
        "else_input_locs": _locs_param("the inputs the else branch reads"),
    },
    "Run one of two subgraphs as a condition subgraph decides (sym.contrib.cond).",
)
for _op, _n in ((_foreach_op, 1), (_while_op, 2), (_cond_op, 3)):
    _op.num_subgraphs = _n  # type: ignore[attr-defined]  # (read by serialization through getattr)
