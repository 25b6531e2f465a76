"""Symbols: immutable handles on output entries of the DAG (MXNet 1.x ``mx.sym``).

>>> import symgrad as sg
>>> x = sg.sym.Variable("x")
>>> y = sg.sym.FullyConnected(x, num_hidden=4, name="fc")
>>> y.list_arguments()
['x', 'fc_weight', 'fc_bias']
>>> y.infer_shape(x=(8, 3))[0]
[(8, 3), (4, 3), (4,)]
"""

from __future__ import annotations

import numbers
import sys
import types

import numpy as np

from . import graph as _graph
from .base import AttrScope, NameManager, ParamError, ShapeError, SymgradError
from .graph import Node, topo_order
from .infer import infer_shapes, infer_types
from .ops import registry as _registry
from .ops.registry import param_to_str

__all__ = ["Symbol", "Variable", "var", "Group"]


class Symbol:
    """A tuple of DAG output entries ``(node, index)``. Immutable."""

    __slots__ = ("_outputs",)

    def __init__(self, outputs):
        object.__setattr__(self, "_outputs", tuple(outputs))

    def __setattr__(self, key, value):
        raise AttributeError("Symbols are immutable")

    __hash__ = object.__hash__

    # -- identity -------------------------------------------------------------
    @property
    def name(self):
        """The head node's name, or None for a group of several outputs."""
        if len(self._outputs) != 1:
            return None
        return self._outputs[0][0].name

    def __repr__(self):
        if len(self._outputs) == 1:
            return f"<Symbol {self.name}>"
        return f"<Symbol group [{', '.join(self.list_outputs())}]>"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __bool__(self):
        raise TypeError("a Symbol has no truth value; compare values after forward()")

    # -- outputs --------------------------------------------------------------
    def __len__(self):
        return len(self._outputs)

    def __iter__(self):
        return (Symbol([e]) for e in self._outputs)

    def __getitem__(self, index):
        if isinstance(index, str):
            names = self.list_outputs()
            if index not in names:
                raise KeyError(f"no output named {index!r}; outputs are {names}")
            if names.count(index) > 1:
                raise KeyError(f"more than one output is named {index!r}")
            return Symbol([self._outputs[names.index(index)]])
        if isinstance(index, slice):
            return Symbol(self._outputs[index])
        if isinstance(index, (int, np.integer)):
            n = len(self._outputs)
            if not -n <= index < n:
                raise IndexError(f"output index {index} out of range for a symbol with {n} outputs")
            return Symbol([self._outputs[index]])
        raise TypeError(f"Symbol indices must be int, str or slice, got {type(index).__name__}")

    def list_outputs(self) -> list[str]:
        return [node.output_name(i) for node, i in self._outputs]

    def _nodes(self) -> list[Node]:
        return topo_order(self._outputs)

    def _arg_and_aux_nodes(self):
        nodes = self._nodes()
        _graph.check_unique_names(nodes)
        aux_ids = _graph.aux_variable_ids(nodes)
        args = [n for n in nodes if n.op is None and n.id not in aux_ids]
        aux = [n for n in nodes if n.op is None and n.id in aux_ids]
        return nodes, args, aux

    def list_arguments(self) -> list[str]:
        """Argument names in MXNet's DFS order (auxiliary states excluded)."""
        return [n.name for n in self._arg_and_aux_nodes()[1]]

    def list_auxiliary_states(self) -> list[str]:
        return [n.name for n in self._arg_and_aux_nodes()[2]]

    def list_inputs(self) -> list[str]:
        """All variables, arguments and auxiliary states, in DFS order."""
        nodes = self._nodes()
        _graph.check_unique_names(nodes)
        return [n.name for n in nodes if n.op is None]

    def get_internals(self) -> Symbol:
        """Every output of every node, in topological order (``sym.get_internals()['fc_output']``)."""
        return Symbol([(n, i) for n in self._nodes() for i in range(n.num_outputs)])

    def get_children(self) -> Symbol | None:
        """The inputs of the head node, or None for a variable."""
        node = self._single("get_children")
        if node.op is None:
            return None
        return Symbol(node.inputs)

    def _single(self, what: str) -> Node:
        """The head node, when every output comes from one node (a multi-output op is fine)."""
        if len({n.id for n, _ in self._outputs}) != 1:
            raise SymgradError(f"{what} needs the outputs of one node, this group has {len(self._outputs)} outputs")
        return self._outputs[0][0]

    # -- attributes ---------------------------------------------------------------
    def attr(self, key: str):
        """A string attribute of the head node, or None."""
        return self._single("attr").attrs.get(key)

    def list_attr(self, recursive: bool = False) -> dict:
        if recursive:
            raise SymgradError("list_attr(recursive=True) is removed in MXNet 1.x; use attr_dict()")
        return dict(self._single("list_attr").attrs)

    def attr_dict(self) -> dict:
        """``{node name: {key: value}}`` for every node that has attributes."""
        return {n.name: dict(n.attrs) for n in self._nodes() if n.attrs}

    # -- graph view ---------------------------------------------------------------
    def to_networkx(self):
        """The DAG as a ``networkx.MultiDiGraph`` (see ``symgrad.graph.to_networkx``).

        The graph attribute ``heads`` lists this symbol's outputs as (node id, index).
        """
        g = _graph.to_networkx(self._nodes())
        g.graph["heads"] = [(n.id, i) for n, i in self._outputs]
        return g

    # -- inference --------------------------------------------------------------
    def _known(self, args, kwargs, what, attr_key, parse):
        nodes, arg_nodes, aux_nodes = self._arg_and_aux_nodes()
        known = {}
        for node in arg_nodes + aux_nodes:
            raw = node.attrs.get(attr_key)
            if raw is not None:
                known[(node.id, 0)] = parse(raw)
        arg_names = [n.name for n in arg_nodes]
        if len(args) > len(arg_names):
            raise SymgradError(f"{what}: got {len(args)} positional values for {len(arg_names)} arguments {arg_names}")
        given = dict(zip(arg_names, args))
        by_name = {n.name: n for n in arg_nodes + aux_nodes}
        for key, value in kwargs.items():
            if key not in by_name:
                raise SymgradError(f"{what}: {key!r} is not an input of this symbol; inputs are {list(by_name)}")
            given[key] = value
        for key, value in given.items():
            if value is not None:
                known[(by_name[key].id, 0)] = value
        return nodes, arg_nodes, aux_nodes, known

    def infer_shape_partial(self, *args, **kwargs):
        """Like ``infer_shape`` but unknown shapes come back as None instead of failing."""
        return self._infer_shape(args, kwargs, partial=True)

    def infer_shape(self, *args, **kwargs):
        """Infer ``(arg_shapes, out_shapes, aux_shapes)`` from some argument shapes.

        Returns ``(None, None, None)`` when some shape stays unknown (as MXNet does).
        """
        return self._infer_shape(args, kwargs, partial=False)

    def _infer_shape(self, args, kwargs, partial):
        args = tuple(None if a is None else _as_shape(a, "infer_shape") for a in args)
        kwargs = {k: None if v is None else _as_shape(v, f"infer_shape {k}") for k, v in kwargs.items()}
        nodes, arg_nodes, aux_nodes, known = self._known(args, kwargs, "infer_shape", "__shape__", _parse_shape)
        infer_shapes(nodes, known)
        res = _collect(known, arg_nodes, self._outputs, aux_nodes)
        if not partial and any(v is None for part in res for v in part):
            return None, None, None
        return res

    def infer_type(self, *args, **kwargs):
        """Infer ``(arg_types, out_types, aux_types)`` as numpy dtypes."""
        args = tuple(None if a is None else np.dtype(a) for a in args)
        kwargs = {k: None if v is None else np.dtype(v) for k, v in kwargs.items()}
        nodes, arg_nodes, aux_nodes, known = self._known(args, kwargs, "infer_type", "__dtype__", np.dtype)
        infer_types(nodes, known)
        res = _collect(known, arg_nodes, self._outputs, aux_nodes)
        if any(v is None for part in res for v in part):
            return None, None, None
        return tuple([np.dtype(v).type for v in part] for part in res)

    # -- composition ------------------------------------------------------------
    def __call__(self, *args, name=None, **kwargs):
        """A copy with variables replaced: ``net2(data=net1)`` or positionally."""
        arg_names = self.list_arguments()
        subs = {}
        if len(args) > len(arg_names):
            raise SymgradError(f"compose: {len(args)} positional symbols for {len(arg_names)} arguments {arg_names}")
        for key, value in list(zip(arg_names, args)) + list(kwargs.items()):
            if key not in arg_names:
                raise SymgradError(f"compose: {key!r} is not an argument of this symbol; arguments are {arg_names}")
            if not isinstance(value, Symbol) or len(value) != 1:
                raise TypeError(f"compose: value for {key!r} must be a single-output Symbol, got {value!r}")
            subs[key] = value._outputs[0]
        mapping: dict[int, Node] = {}
        for node in self._nodes():
            if node.op is None:
                if node.name in subs:
                    mapping[node.id] = subs[node.name]
                continue
            new_inputs = []
            for src, i in node.inputs:
                rep = mapping.get(src.id)
                if rep is None:
                    new_inputs.append((src, i))
                elif isinstance(rep, tuple):  # a substituted variable
                    new_inputs.append(rep)
                else:
                    new_inputs.append((rep, i))
            if new_inputs != list(node.inputs):
                mapping[node.id] = Node(node.op, node.name, node.params, node.attrs, new_inputs, node.num_outputs)
        outs = []
        for node, i in self._outputs:
            rep = mapping.get(node.id)
            outs.append(rep if isinstance(rep, tuple) else ((rep, i) if rep is not None else (node, i)))
        if name is not None and len(outs) == 1 and outs[0][0].op is not None:
            n, i = outs[0]
            outs = [(Node(n.op, name, n.params, n.attrs, n.inputs, n.num_outputs), i)]
        return Symbol(outs)

    # -- binding ----------------------------------------------------------------
    def bind(self, ctx, args, args_grad=None, grad_req="write", aux_states=None, **kwargs):
        """Bind arrays to the arguments; see ``symgrad.executor.Executor``."""
        from .executor import Executor

        if kwargs:
            raise TypeError(f"bind: unsupported keyword arguments {sorted(kwargs)}")
        return Executor(self, ctx, args, args_grad, grad_req, aux_states)

    def simple_bind(self, ctx, grad_req="write", type_dict=None, **shapes):
        """Infer shapes from ``shapes``, allocate zeroed arrays on ``ctx`` and bind."""
        from .executor import simple_bind

        return simple_bind(self, ctx, grad_req=grad_req, type_dict=type_dict, shapes=shapes)

    def grad(self, wrt):
        raise SymgradError("Symbol.grad is deprecated in MXNet; use symgrad.grad(outputs, inputs)")

    # -- operator overloads -----------------------------------------------------
    def _binary(self, other, sym_op, scalar_op, reverse=False):
        if isinstance(other, Symbol):
            a, b = (other, self) if reverse else (self, other)
            return _op_func(sym_op)(a, b)
        if isinstance(other, numbers.Number) and not isinstance(other, bool):
            return _op_func(scalar_op)(self, scalar=float(other))
        return NotImplemented

    def __add__(self, o):
        return self._binary(o, "elemwise_add", "_plus_scalar")

    __radd__ = __add__

    def __sub__(self, o):
        return self._binary(o, "elemwise_sub", "_minus_scalar")

    def __rsub__(self, o):
        return self._binary(o, "elemwise_sub", "_rminus_scalar", reverse=True)

    def __mul__(self, o):
        return self._binary(o, "elemwise_mul", "_mul_scalar")

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self._binary(o, "elemwise_div", "_div_scalar")

    def __rtruediv__(self, o):
        return self._binary(o, "elemwise_div", "_rdiv_scalar", reverse=True)

    def __mod__(self, o):
        return self._binary(o, "_mod", "_mod_scalar")

    def __rmod__(self, o):
        return self._binary(o, "_mod", "_rmod_scalar", reverse=True)

    def __pow__(self, o):
        return self._binary(o, "_power", "_power_scalar")

    def __rpow__(self, o):
        return self._binary(o, "_power", "_rpower_scalar", reverse=True)

    def __neg__(self):
        return _op_func("negative")(self)

    def __abs__(self):
        return _op_func("abs")(self)

    def __eq__(self, o):
        return self._binary(o, "_equal", "_equal_scalar")

    def __ne__(self, o):
        return self._binary(o, "_not_equal", "_not_equal_scalar")

    def __gt__(self, o):
        return self._binary(o, "_greater", "_greater_scalar")

    def __ge__(self, o):
        return self._binary(o, "_greater_equal", "_greater_equal_scalar")

    def __lt__(self, o):
        return self._binary(o, "_lesser", "_lesser_scalar")

    def __le__(self, o):
        return self._binary(o, "_lesser_equal", "_lesser_equal_scalar")


def _as_shape(value, what):
    if isinstance(value, (int, np.integer)):
        return (int(value),)
    try:
        shape = tuple(int(d) for d in value)
    except TypeError:
        raise TypeError(f"{what}: a shape must be a tuple of ints, got {value!r}") from None
    if any(d < 0 for d in shape):
        raise ShapeError(f"{what}: shape {shape} has a negative dimension")
    return shape


def _parse_shape(text):
    from .ops.registry import _literal

    value = _literal(text) if isinstance(text, str) else text
    return _as_shape(value, "__shape__ attribute")


def _collect(known, arg_nodes, outputs, aux_nodes):
    return (
        [known.get((n.id, 0)) for n in arg_nodes],
        [known.get((n.id, i)) for n, i in outputs],
        [known.get((n.id, 0)) for n in aux_nodes],
    )


# -- construction ---------------------------------------------------------------


def Variable(name, attr=None, shape=None, dtype=None, init=None, lr_mult=None, wd_mult=None, stype=None, **kwargs):
    """A named placeholder (``mx.sym.Variable``). Extra attributes must be ``__dunder__``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"Variable: name must be a non-empty string, got {name!r}")
    attrs = AttrScope.current_attrs()
    if attr:
        attrs.update({k: str(v) for k, v in attr.items()})
    if shape is not None:
        attrs["__shape__"] = param_to_str(_as_shape(shape, f"Variable {name!r} shape"))
    if dtype is not None:
        attrs["__dtype__"] = np.dtype(dtype).name
    if init is not None:
        attrs["__init__"] = init if isinstance(init, str) else getattr(init, "dumps", lambda: str(init))()
    if lr_mult is not None:
        attrs["__lr_mult__"] = str(lr_mult)
    if wd_mult is not None:
        attrs["__wd_mult__"] = str(wd_mult)
    if stype is not None and stype != "default":
        raise NotImplementedError(f"Variable {name!r}: sparse storage type {stype!r} is not supported")
    for k, v in kwargs.items():
        if not (k.startswith("__") and k.endswith("__")):
            raise ParamError(
                f"Variable {name!r}: attribute {k!r} is not supported; "
                "additional attributes must start and end with double underscores"
            )
        attrs[k] = str(v)
    return Symbol([(Node(None, name, {}, attrs, (), 1), 0)])


var = Variable


def Group(symbols):
    """One symbol whose outputs are the outputs of ``symbols``, in order."""
    outs = []
    for s in symbols:
        if not isinstance(s, Symbol):
            raise TypeError(f"Group: expected Symbols, got {type(s).__name__}")
        outs.extend(s._outputs)
    if not outs:
        raise SymgradError("Group: needs at least one symbol")
    return Symbol(outs)


def _create(op, args, kwargs, name=None, attr=None):
    hint = op.name.lower()
    node_name = NameManager.current().get(name, hint)
    where = f"{op.name} {node_name!r}"
    sym_kwargs = {k: v for k, v in kwargs.items() if isinstance(v, Symbol)}
    param_kwargs = {k: v for k, v in kwargs.items() if not isinstance(v, Symbol)}
    for i, a in enumerate(args):
        if not isinstance(a, Symbol):
            raise TypeError(f"{where}: positional input {i} must be a Symbol, got {type(a).__name__}")
    if op.variadic and op.variadic not in param_kwargs and op.variadic in op.params:
        param_kwargs[op.variadic] = len(args)
    params = op.parse_params(param_kwargs, where)
    if op.prepare is not None:
        params = op.prepare(params, node_name)
    names = op.list_inputs(params) + op.list_aux(params)
    if len(args) > len(names):
        raise ParamError(f"{where}: got {len(args)} inputs, {op.name} takes {len(names)} {names}")
    given = dict(zip(names, args))
    for k, v in sym_kwargs.items():
        if k not in names:
            raise ParamError(f"{where}: {k!r} is not an input of {op.name}; inputs are {names}")
        if k in given:
            raise ParamError(f"{where}: input {k!r} given twice")
        given[k] = v
    inputs = []
    for iname in names:
        s = given.get(iname)
        if s is None:
            s = Variable(f"{node_name}_{iname}")
        if len(s._outputs) != 1:
            raise ShapeError(f"{where}: input {iname!r} must be a single output, got a group of {len(s)}")
        inputs.append(s._outputs[0])
    attrs = AttrScope.current_attrs()
    if attr:
        attrs.update({k: str(v) for k, v in attr.items()})
    for k, v in param_kwargs.items():
        attrs[k] = v if isinstance(v, str) else param_to_str(v)
    n_out = op.n_outputs(params)
    node = Node(op, node_name, params, attrs, inputs, n_out)
    return Symbol([(node, i) for i in range(op.n_visible(params))])


def _make_op_func(op):
    def creator(*args, name=None, attr=None, **kwargs):
        return _create(op, args, kwargs, name=name, attr=attr)

    creator.__name__ = op.name
    creator.__qualname__ = op.name
    creator.__doc__ = op.doc or f"The {op.name} operator."
    return creator


_FUNCS: dict = {}


def _op_func(name):
    if not _FUNCS:
        populate({})
    return _FUNCS[name]


def populate(namespace: dict, internal_name: str = "symgrad.sym._internal") -> dict:
    """Put one creator function per registered operator into ``namespace``.

    Also fills a ``_internal`` module (MXNet keeps ``_plus_scalar`` & co. there).
    """
    from . import operator, ops  # noqa: F401  (importing them registers every operator)

    internal = sys.modules.get(internal_name) or types.ModuleType(internal_name)
    for opname, op in _registry.list_ops().items():
        func = _FUNCS.get(op.name)
        if func is None:
            func = _FUNCS[op.name] = _make_op_func(op)
        _FUNCS[opname] = func
        setattr(internal, opname, func)
        namespace[opname] = func
    namespace["_internal"] = internal
    sys.modules[internal_name] = internal
    return namespace
