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

import importlib
import numbers
import sys
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeAlias

import numpy as np

from . import graph as _graph
from . import opdef, util
from .base import (
    HIDDEN_KEYS,
    AttrScope,
    NameManager,
    NotImplementedForSymbol,
    ParamError,
    ShapeError,
    StrPath,
    SymgradError,
)
from .context import Array, Context
from .graph import Entry, Node, topo_order
from .infer import infer_partial_shapes, infer_types
from .opdef import DTYPE_TO_MX, OpDef, as_shape, param_to_str, parse_dtype_attr

if TYPE_CHECKING:
    import networkx as nx
    import numpy.typing as npt

__all__ = ["Symbol", "Variable", "var", "Group", "Head"]

#: A shape as symgrad returns it.
Shape: TypeAlias = "tuple[int, ...]"
#: A shape as symgrad takes it: an int or a tuple/list of ints (``opdef.as_shape``).
ShapeLike: TypeAlias = "int | np.integer[Any] | Sequence[int | np.integer[Any]]"
#: ``infer_shape``'s answer: ``(arg_shapes, out_shapes, aux_shapes)``, or three Nones when some shape stays unknown.
InferredShapes: TypeAlias = "tuple[list[Shape], list[Shape], list[Shape]] | tuple[None, None, None]"
#: ``infer_shape_partial``'s answer: None for a shape nothing determines.
PartialShapes: TypeAlias = "tuple[list[Shape | None], list[Shape | None], list[Shape | None]]"
#: ``infer_type``'s answer: numpy scalar types (``np.float32``), or three Nones when some type stays unknown.
InferredTypes: TypeAlias = (
    "tuple[list[type[np.generic]], list[type[np.generic]], list[type[np.generic]]] | tuple[None, None, None]"
)
#: ``infer_type_partial``'s answer: None for a type nothing determines.
PartialTypes: TypeAlias = (
    "tuple[list[type[np.generic] | None], list[type[np.generic] | None], list[type[np.generic] | None]]"
)
#: Arrays handed to ``bind``: a list in ``list_arguments()`` (``list_auxiliary_states()``) order, or a dict by
#: name. For ``args_grad`` a None entry (or a name left out) means no gradient array for that argument.
BindArrays: TypeAlias = "list[Array] | tuple[Array, ...] | dict[str, Array]"
#: ``grad_req``: one of ``'write'``, ``'add'``, ``'null'``, ``'inplace'`` for every argument, a list of them in
#: ``list_arguments()`` order, or a dict by name (names left out get ``'null'``).
GradReq: TypeAlias = "str | list[str] | tuple[str, ...] | dict[str, str]"
#: ``Executor.backward``'s head gradients: one array (a symbol with one output), a list in ``list_outputs()``
#: order or a dict by output name; None (or a None entry) for a loss output, whose op ignores its head gradient.
OutGrads: TypeAlias = "Array | list[Array | None] | tuple[Array | None, ...] | dict[str, Array | None] | None"
#: A number a Symbol combines with (``x * 2``, ``1 - x``).
Scalar: TypeAlias = "int | float | np.integer[Any] | np.floating[Any]"


class BoundExecutor(Protocol):
    """What ``Symbol.bind`` and ``Symbol.simple_bind`` return: a ``symgrad.executor.Executor``.

    The executor layer sits above this module (``pyproject.toml``'s layer contract: ``symbol`` cannot import
    ``executor``, not even for type checking), so its public interface is spelled out here; mypy checks that
    ``Executor`` has it (``symgrad/executor/executor.py``).
    """

    arg_arrays: list[Array]
    grad_arrays: list[Array | None]
    aux_arrays: list[Array]
    outputs: list[Array]

    @property
    def arg_dict(self) -> dict[str, Array]: ...
    @property
    def grad_dict(self) -> dict[str, Array | None]: ...
    @property
    def aux_dict(self) -> dict[str, Array]: ...
    @property
    def output_dict(self) -> dict[str, Array]: ...
    @property
    def plan(self) -> Any: ...  # a ``symgrad.executor.Plan`` (the executor layer, like Executor itself)
    def debug_str(self) -> str: ...
    def get_optimized_symbol(self) -> Symbol: ...
    @property
    def arg_contexts(self) -> list[Context]: ...
    @property
    def aux_contexts(self) -> list[Context]: ...
    @property
    def output_contexts(self) -> list[Context]: ...
    def forward(self, is_train: bool = False, **kwargs: npt.ArrayLike) -> list[Array]: ...
    def backward(self, out_grads: OutGrads = None, is_train: bool = True) -> None: ...
    def forward_all(self, is_train: bool = False) -> list[Array]: ...
    def rerun_downstream(self, names: Iterable[str]) -> list[Array]: ...
    def forward_with_hook(
        self, hook: Callable[[Node, list[Array]], Sequence[Array | None] | None], is_train: bool = False
    ) -> list[Array]: ...
    def set_monitor_callback(
        self, callback: Callable[[str, Array], object] | None, monitor_all: bool = False
    ) -> None: ...
    def set_value_hook(self, hook: Callable[[Node, int, Array, str], Array] | None) -> None: ...
    def copy_params_from(
        self,
        arg_params: Mapping[str, npt.ArrayLike],
        aux_params: Mapping[str, npt.ArrayLike] | None = None,
        allow_extra_params: bool = False,
    ) -> None: ...
    def reshape(
        self, partial_shaping: bool = False, allow_up_sizing: bool = False, **kwargs: ShapeLike
    ) -> BoundExecutor: ...


class Head(types.SimpleNamespace):
    """What produces one output of a Symbol (``Symbol.heads()``).

    Attributes:
        name: the node's name; ``op_name``: its operator's MXNet name (None for a variable);
        index: which output of the node; ``params``: the parsed operator parameters;
        loss_head: True when the op's backward ignores its head gradient (SoftmaxOutput, MakeLoss, ...);
        inputs: the node's inputs as one Symbol (None for a variable).
    """


class Symbol:
    """A tuple of DAG output entries ``(node, index)``. Immutable."""

    __slots__ = ("_outputs", "_walk")
    _outputs: tuple[Entry, ...]
    _walk: tuple[tuple[Node, ...], tuple[Node, ...], tuple[Node, ...]] | None

    def __init__(self, outputs: Iterable[Entry]) -> None:
        object.__setattr__(self, "_outputs", tuple(outputs))
        object.__setattr__(self, "_walk", None)  # arg_and_aux_nodes, once asked for (the graph never changes)

    def __setattr__(self, key: str, value: object) -> NoReturn:
        raise AttributeError("Symbols are immutable")

    __hash__ = object.__hash__
    # ``np.float32(2) * sym`` and ``array + sym``: numpy hands the operation back to Symbol
    # (which takes the scalar / refuses the array) instead of building an object array.
    __array_ufunc__ = None

    # -- identity -------------------------------------------------------------
    @property
    def name(self) -> str | None:
        """The head node's name, or None for a group of several outputs."""
        if len(self._outputs) != 1:
            return None
        return self._outputs[0][0].name

    def __repr__(self) -> str:
        if len(self._outputs) == 1:
            return f"<Symbol {self.name}>"
        return f"<Symbol group [{', '.join(self.list_outputs())}]>"

    def __copy__(self) -> Symbol:
        return self

    def __deepcopy__(self, memo: object) -> Symbol:
        return self

    def __bool__(self) -> NoReturn:
        # MXNet's error (also a TypeError): a Symbol has no value to test; compare values after forward()
        raise NotImplementedForSymbol(Symbol.__bool__, "bool")

    # -- serialization (symgrad.serialization) -----------------------------------
    def tojson(self, remove_amp_cast: bool = True) -> str:
        """MXNet 1.x symbol JSON (``mx.sym.Symbol.tojson``); MXNet 1.9.1 and ``sg.sym.load_json`` read it.

        ``remove_amp_cast`` is MXNet's keyword; symgrad graphs hold no ``amp_cast`` nodes, so both values
        give the same text.
        """
        return _above("serialization").tojson(self)

    def save(self, fname: StrPath, remove_amp_cast: bool = True) -> None:
        """Write ``tojson()`` to ``fname`` (``mx.sym.Symbol.save``); ``sg.sym.load(fname)`` reads it back."""
        _above("serialization").save(self, fname)

    def __reduce__(self) -> tuple[Callable[[str], Symbol], tuple[str]]:
        # pickled through the JSON, as MXNet does: ``pickle``/``multiprocessing`` send symbols to workers
        return (_above("serialization").load_json, (_above("serialization").tojson(self, warn=False),))

    # -- outputs --------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._outputs)

    def __iter__(self) -> Iterator[Symbol]:
        return (Symbol([e]) for e in self._outputs)

    def __getitem__(self, index: int | np.integer[Any] | str | slice) -> Symbol:
        if isinstance(index, str):
            names = self.list_outputs()
            if index not in names:
                raise OutputNameError(f"no output named {index!r}; outputs are {names}")
            if names.count(index) > 1:
                raise OutputNameError(f"more than one output is named {index!r}")
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
        """The output names, MXNet's way: ``x`` for a variable, ``fc_output``, ``split0_output1``."""
        return [node.output_name(i) for node, i in self._outputs]

    def output_entries(self) -> tuple[Entry, ...]:
        """The DAG entries ``(node, output index)`` behind this symbol's outputs, in ``list_outputs()`` order.

        A symgrad extension (MXNet's Symbol has no such method) for the graph passes above this module (control
        flow, the executor, serialization, viz): a tuple, so the Symbol cannot be changed through it.
        """
        return self._outputs

    def topo_nodes(self) -> list[Node]:
        """Every node this symbol's outputs depend on, inputs before their users: a fresh list.

        A symgrad extension (MXNet's Symbol has no such method); the graph layer's ``topo_order`` walk.
        """
        return topo_order(self._outputs)

    def arg_and_aux_nodes(self) -> tuple[list[Node], list[Node], list[Node]]:
        """``(nodes in topological order, argument variables, auxiliary-state variables)``: fresh lists of a
        walk made once per Symbol (``list_arguments``, ``infer_shape`` and ``simple_bind`` all ask).

        A symgrad extension (MXNet's Symbol has no such method).
        """
        walk = self._walk
        if walk is None:
            nodes = self.topo_nodes()
            _graph.check_unique_names(nodes)
            aux_ids = _graph.aux_variable_ids(nodes)
            args = [n for n in nodes if n.op is None and n.id not in aux_ids]
            aux = [n for n in nodes if n.op is None and n.id in aux_ids]
            walk = (tuple(nodes), tuple(args), tuple(aux))
            object.__setattr__(self, "_walk", walk)
        return list(walk[0]), list(walk[1]), list(walk[2])

    def list_arguments(self) -> list[str]:
        """Argument names in MXNet's DFS order (auxiliary states excluded)."""
        return [n.name for n in self.arg_and_aux_nodes()[1]]

    def list_auxiliary_states(self) -> list[str]:
        """Auxiliary-state names (BatchNorm's ``bn_moving_mean``, ``bn_moving_var``) in MXNet's DFS order."""
        return [n.name for n in self.arg_and_aux_nodes()[2]]

    def list_inputs(self) -> list[str]:
        """All variables, arguments and auxiliary states, in DFS order."""
        nodes = self.topo_nodes()
        _graph.check_unique_names(nodes)
        return [n.name for n in nodes if n.op is None]

    def get_internals(self) -> Symbol:
        """Every visible output of every node, in topological order (``sym.get_internals()['fc_output']``).

        Hidden outputs (BatchNorm's mean/var, L2Normalization's norm) are left out, as in MXNet (NNVM's
        ``FNumVisibleOutputs``).
        """
        return Symbol(
            [(n, i) for n in self.topo_nodes() for i in range(n.op.n_visible(n.params) if n.op is not None else 1)]
        )

    def replace_ops(self, replace: Callable[[str, OpDef, dict[str, Any]], OpDef | None]) -> Symbol:
        """A copy of this graph in which ``replace(name, op, params)`` may swap the operator of each op node.

        ``replace`` returns an ``OpDef`` to run instead (same inputs, parameters, outputs and name) or None to
        keep the node. Variables and the shape of the graph are unchanged; nodes downstream of a swapped one are
        rebuilt, the rest shared. The numeric checkers evaluate a network on the pieces its forward chose this
        way (``test_utils.decisions.pinned_symbol``).
        """
        new: dict[int, Node] = {}
        for node in self.topo_nodes():
            op = replace(node.name, node.op, node.params) if node.op is not None else None
            inputs = [(new.get(src.id, src), i) for src, i in node.inputs]
            if op is None and all(a[0] is b[0] for a, b in zip(inputs, node.inputs)):
                continue
            new[node.id] = Node(
                op if op is not None else node.op, node.name, node.params, node.attrs, inputs, node.num_outputs
            )
        return Symbol([(new.get(n.id, n), i) for n, i in self._outputs])

    def isolate(self, name: str) -> Symbol:
        """The op node ``name`` alone: its operator, parameters and attributes applied to fresh Variables named
        after its input slots (``data``, ``weight``, ...; auxiliary states stay auxiliary), with its visible
        outputs. A whole-model check names a faulty node by checking each node this way at its recorded inputs.
        """
        for node in self.topo_nodes():
            if node.op is not None and node.name == name:
                break
        else:
            raise KeyError(f"isolate: no operator node named {name!r} in this graph")
        return _alone(node)

    def get_children(self) -> Symbol | None:
        """The inputs of the head node(s), or None when there are none (a variable).

        For a group, the inputs of each distinct head node in turn (NNVM's ``GetChildren``).
        """
        entries: list[Entry]
        seen: set[int]
        entries, seen = [], set()
        for node, _ in self._outputs:
            if node.id not in seen:
                seen.add(node.id)
                entries.extend(node.inputs)
        return Symbol(entries) if entries else None

    def heads(self) -> list[Head]:
        """One ``Head`` per output: the node behind it, as the checkers need it (no graph internals)."""
        out = []
        for node, index in self._outputs:
            op = node.op
            out.append(
                Head(
                    name=node.name,
                    op_name=None if op is None else op.name,
                    index=index,
                    params=dict(node.params or {}) if op is not None else {},
                    loss_head=op is not None and bool(op.loss_head(node.params)),
                    inputs=Symbol(list(node.inputs)) if node.inputs else None,
                )
            )
        return out

    # -- attributes ---------------------------------------------------------------
    def attr(self, key: str) -> str | None:
        """A string attribute of the head node; None if it is not set or this groups several nodes.

        ``lr_mult`` & co. (``base.HIDDEN_KEYS``) are stored as ``__lr_mult__``; either spelling finds them.
        """
        if len({n.id for n, _ in self._outputs}) != 1:
            return None
        attrs = self._outputs[0][0].attrs
        value = attrs.get(key)
        if value is None and key in HIDDEN_KEYS:
            value = attrs.get(f"__{key}__")
        return value

    def list_attr(self, recursive: bool = False) -> dict:
        """The attributes of the (first) head node: operator parameters and ``AttrScope`` values; each
        ``__lr_mult__`` & co. is listed under its plain name too (``lr_mult``), as MXNet lists it."""
        if recursive:
            raise SymgradError("list_attr(recursive=True) is removed in MXNet 1.x; use attr_dict()")
        return _listed_attrs(self._outputs[0][0].attrs)

    def attr_dict(self) -> dict:
        """``{node name: {key: value}}`` for every node that has attributes (listed as ``list_attr`` does)."""
        return {n.name: _listed_attrs(n.attrs) for n in self.topo_nodes() if n.attrs}

    def _head_node(self, what: str) -> Node:
        """The one node behind every output; an error naming ``what`` for a group of several nodes."""
        node = self._outputs[0][0]
        if any(n is not node for n, _ in self._outputs):
            raise SymgradError(f"{what}: works on the outputs of one node; this symbol groups {self.list_outputs()}")
        return node

    def _set_attr(self, **kwargs: str) -> None:
        """Set string attributes of the head node in place (MXNet's ``_set_attr``): every Symbol sharing the
        node sees them; ``name=`` renames the node. ``lr_mult`` & co. are stored as ``__lr_mult__``. An
        operator's parameters cannot change here (they were parsed when the node was made: create a new
        symbol); all values are checked before any is set."""
        node = self._head_node("_set_attr")
        for k, v in kwargs.items():
            if not isinstance(v, str):
                raise ParamError(f"_set_attr: attribute values must be strings; {k}={v!r} is {type(v).__name__}")
        name = kwargs.pop("name", None)
        if name == "":
            raise ParamError("_set_attr: name must be a non-empty string")
        where = f"_set_attr on {node.name!r}"
        if node.op is not None:
            fixed = [k for k in kwargs if k in node.op.params or (node.op.extra_params and not _is_dunder(k))]
            if fixed:
                raise ParamError(f"{where}: {fixed[0]!r} is a parameter of {node.op.name}; create a new symbol")
        stored = _stored_attrs(kwargs, where)
        if name is not None:
            node.name = name
        node.attrs.update(stored)

    def _gen_atomic_symbol(self) -> Symbol:
        """The head node's operator with its parameters and attributes, applied to fresh Variables named after
        its input slots (MXNet's ``_gen_atomic_symbol``, whose functor symbol has no inputs yet): calling it
        with inputs (``atomic(x, w, b)``, composed in ``list_arguments`` order) applies the op to them."""
        node = self._head_node("_gen_atomic_symbol")
        if node.op is None:
            raise SymgradError(f"_gen_atomic_symbol: {node.name!r} is a Variable; only an operator has one")
        return _alone(node)

    # -- graph view ---------------------------------------------------------------
    def to_networkx(self) -> nx.MultiDiGraph:
        """The DAG as a ``networkx.MultiDiGraph`` (see ``symgrad.graph.to_networkx``).

        The graph attribute ``heads`` lists this symbol's outputs as (node id, index).
        """
        g = _graph.to_networkx(self.topo_nodes())
        g.graph["heads"] = [(n.id, i) for n, i in self._outputs]
        return g

    # -- inference --------------------------------------------------------------
    def _known(self, args, kwargs, what, attr_key, parse):
        nodes, arg_nodes, aux_nodes = self.arg_and_aux_nodes()
        known = {}
        for node in arg_nodes + aux_nodes:
            raw = node.attrs.get(attr_key)
            if raw is not None:
                # MXNet 1.x: a 0 in ``__shape__`` is an unknown dimension (Gluon export writes (64, 0, 3, 3)
                # for deferred-init weights): shape inference fills it in
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

    def infer_shape_partial(self, *args: ShapeLike | None, **kwargs: ShapeLike | None) -> PartialShapes:
        """Like ``infer_shape`` but what stays unknown comes back as such instead of failing. In MXNet's legacy
        reading (the default) an unknown shape is ``()`` and an unknown dimension 0; with
        ``symgrad.util.np_shape()`` on they are None and -1.

        >>> import symgrad as sg
        >>> fc = sg.sym.FullyConnected(sg.sym.Variable("data"), num_hidden=5, name="fc")
        >>> fc.infer_shape_partial(data=(0, 3))
        ([(0, 3), (5, 3), (5,)], [(0, 5)], [])
        >>> fc.infer_shape_partial()
        ([(), (), (5,)], [()], [])
        """
        return self._infer_shape(args, kwargs, partial=True)

    def infer_shape(self, *args: ShapeLike | None, **kwargs: ShapeLike | None) -> InferredShapes:
        """Infer ``(arg_shapes, out_shapes, aux_shapes)`` from some argument shapes.

        Shapes are read as MXNet reads them (``symgrad.util``): by default a 0 dimension (or -1) is unknown and
        ``()`` an unknown shape; under ``util.np_shape()`` -1 is unknown, 0 a zero size and ``()`` a scalar.
        Inference fills unknown dimensions in where the rest of the graph determines them, backwards through
        the ops too (a known output fills FullyConnected's batch size). Returns ``(None, None, None)``, with
        MXNet's warning naming the undetermined arguments, when some shape or dimension stays unknown.
        """
        res = self._infer_shape(args, kwargs, partial=False)
        if res[0] is None:
            np_mode = util.is_np_shape()
            partial = self.partial_shape_map(args, kwargs)[0][0]
            unknown = [
                f"{n}: {_shown_shape(s, np_mode)}"
                for n, s in zip(self.list_arguments(), partial)
                if s is None or min(s, default=0) < 0
            ]
            warnings.warn(
                "Cannot decide shape for the following arguments (0s in shape means unknown dimensions). "
                "Consider providing them as input:\n\t" + "\n\t".join(unknown[:10]),
                stacklevel=2,
            )
        return res

    def _infer_shape(self, args, kwargs, partial):
        res, _ = self.partial_shape_map(args, kwargs)
        if not partial and any(v is None or min(v, default=0) < 0 for part in res for v in part):
            return None, None, None
        np_mode = util.is_np_shape()
        return tuple([_shown_shape(v, np_mode) for v in part] for part in res)

    def partial_shape_map(
        self, args: Sequence[ShapeLike | None], kwargs: Mapping[str, ShapeLike | None]
    ) -> tuple[PartialShapes, dict[tuple[int, int], Shape]]:
        """``(arg_shapes, out_shapes, aux_shapes)`` and the map ``(node id, output) -> shape`` they come from, with
        -1 for an unknown dimension and None for an unknown shape (given shapes read in the current mode).

        ``args`` and ``kwargs`` are ``infer_shape``'s positional and keyword shapes. A symgrad extension (MXNet's
        Symbol has no such method).
        """
        args = tuple(_read_shape(a, "infer_shape") for a in args)
        kwargs = {k: _read_shape(v, f"infer_shape {k!r}") for k, v in kwargs.items()}
        nodes, arg_nodes, aux_nodes, known = self._known(args, kwargs, "infer_shape", "__shape__", _read_shape_attr)
        known = {k: v for k, v in known.items() if v is not None}
        infer_partial_shapes(nodes, known)
        return _collect(known, arg_nodes, self._outputs, aux_nodes), known

    def shape_map(
        self, args: Sequence[ShapeLike | None], kwargs: Mapping[str, ShapeLike | None]
    ) -> tuple[PartialShapes, dict[tuple[int, int], Shape | None]]:
        """``infer_shape_partial``'s lists and the map ``(node id, output) -> shape`` they come from, an unknown
        dimension 0 and an unknown shape None (``simple_bind`` hands the map to the executor, which then need
        not infer the shapes again).

        Like ``partial_shape_map`` in MXNet's legacy reading of unknowns. A symgrad extension (MXNet's Symbol
        has no such method).
        """
        res, known = self.partial_shape_map(args, kwargs)
        arg_shapes, out_shapes, aux_shapes = ([_legacy_shape(v) for v in part] for part in res)
        return (arg_shapes, out_shapes, aux_shapes), {k: _legacy_shape(v) for k, v in known.items()}

    def infer_type(self, *args: npt.DTypeLike | None, **kwargs: npt.DTypeLike | None) -> InferredTypes:
        """Infer ``(arg_types, out_types, aux_types)`` as numpy scalar types.

        Returns ``(None, None, None)`` when some type stays unknown (as MXNet does).
        """
        return self._infer_type(args, kwargs, partial=False)

    def infer_type_partial(self, *args: npt.DTypeLike | None, **kwargs: npt.DTypeLike | None) -> PartialTypes:
        """Like ``infer_type`` but unknown types come back as None instead of failing."""
        return self._infer_type(args, kwargs, partial=True)

    def _infer_type(self, args, kwargs, partial):
        args = tuple(None if a is None else np.dtype(a) for a in args)
        kwargs = {k: None if v is None else np.dtype(v) for k, v in kwargs.items()}
        nodes, arg_nodes, aux_nodes, known = self._known(args, kwargs, "infer_type", "__dtype__", parse_dtype_attr)
        infer_types(nodes, known, pins=True)
        res = _collect(known, arg_nodes, self._outputs, aux_nodes)
        if not partial and any(v is None for part in res for v in part):
            return None, None, None
        return tuple([None if v is None else np.dtype(v).type for v in part] for part in res)

    # -- composition ------------------------------------------------------------
    def __call__(self, *args: Symbol, name: str | None = None, **kwargs: Symbol) -> Symbol:
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
        mapping: dict[int, Node | Entry] = {}
        for node in self.topo_nodes():
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
    def bind(
        self,
        ctx: Context | None,
        args: BindArrays,
        args_grad: BindArrays | None = None,
        grad_req: GradReq = "write",
        aux_states: BindArrays | None = None,
        group2ctx: Mapping[str, Context] | None = None,
        shared_exec: BoundExecutor | None = None,
    ) -> BoundExecutor:
        """Bind arrays to the arguments (used by reference); see ``symgrad.executor.Executor``.

        ``args`` / ``args_grad`` / ``aux_states`` are lists in ``list_arguments()`` /
        ``list_auxiliary_states()`` order or dicts by name; ``args_grad`` may leave arguments out
        (no gradient for them). ``shared_exec`` (MXNet's memory-pool sharing) is accepted and
        has no effect. ``group2ctx`` maps ``AttrScope(ctx_group=...)`` groups to contexts (model parallelism on
        cpu contexts; see ``symgrad.executor.placement``).
        """
        return _above("executor").Executor(self, ctx, args, args_grad, grad_req, aux_states, group2ctx)

    def simple_bind(
        self,
        ctx: Context | None,
        grad_req: GradReq = "write",
        type_dict: Mapping[str, npt.DTypeLike] | None = None,
        stype_dict: Mapping[str, str] | None = None,
        group2ctx: Mapping[str, Context] | None = None,
        shared_arg_names: Sequence[str] | None = None,
        shared_exec: BoundExecutor | None = None,
        shared_buffer: Mapping[str, Array] | None = None,
        **shapes: ShapeLike | None,
    ) -> BoundExecutor:
        """Infer shapes from ``shapes``, allocate zeroed arrays on ``ctx`` and bind.

        ``grad_req`` is a string, a list or a dict (arguments missing from it get ``'null'``);
        ``type_dict`` gives dtypes by name (others are inferred, else float32). MXNet's other
        keywords are accepted when they ask for nothing symgrad lacks: dense ``stype_dict``,
        no ``shared_arg_names`` / ``shared_buffer``; ``shared_exec`` has no effect. ``group2ctx`` maps
        ``AttrScope(ctx_group=...)`` groups to contexts, as in ``bind``.
        """
        if stype_dict and any(v != "default" for v in stype_dict.values()):
            raise NotImplementedError(f"simple_bind: sparse storage types are not supported (stype_dict={stype_dict})")
        if shared_arg_names or shared_buffer:
            raise NotImplementedError(
                "simple_bind: shared_arg_names / shared_buffer are not supported; "
                "bind the arrays you want to share with bind(args=...)"
            )
        return _above("executor").simple_bind(
            self, ctx, grad_req=grad_req, type_dict=type_dict, shapes=shapes, group2ctx=group2ctx
        )

    def grad(self, wrt: object) -> NoReturn:
        """Always raises ``SymgradError`` (deprecated in MXNet): use ``symgrad.grad(outputs, inputs)``."""
        raise SymgradError("Symbol.grad is deprecated in MXNet; use symgrad.grad(outputs, inputs)")

    # -- operator overloads -----------------------------------------------------
    # As MXNet 1.x: Symbol-Symbol goes through ``_internal._Plus`` & co. and Symbol-number through
    # ``_internal._PlusScalar`` & co., so automatic names are ``_plus0``, ``_mulscalar0`` ...;
    # comparisons use ``_equal`` / ``_equal_scalar`` ... and get ``_equal0``, ``_equal_scalar0``.
    def _binary(self, other, sym_op, scalar_op, what=None, reverse=False, strict=True):
        if isinstance(other, Symbol):
            a, b = (other, self) if reverse else (self, other)
            return creator(sym_op)(a, b)
        if type(other) is float or type(other) is int:  # the common scalars, without the ABC check below
            return creator(scalar_op)(self, scalar=other)
        if isinstance(other, numbers.Number) and not isinstance(other, bool):
            # ints stay ints in the attribute (``scalar="2"``, as MXNet writes it)
            scalar = other if isinstance(other, (int, float, np.integer, np.floating)) else float(other)
            return creator(scalar_op)(self, scalar=scalar)
        if not strict:  # comparisons: let Python fall back (``sym == None`` is False)
            return NotImplemented
        raise TypeError(
            f"unsupported operand for {what!s}: a Symbol combines with a Symbol or a number, "
            f"got {type(other).__name__}"
            " (wrap arrays in a Variable and pass them to bind/forward)"
        )

    def __add__(self, o: Symbol | Scalar) -> Symbol:
        return self._binary(o, "_Plus", "_PlusScalar", what="+")

    __radd__ = __add__

    def __sub__(self, o: Symbol | Scalar) -> Symbol:
        return self._binary(o, "_Minus", "_MinusScalar", what="-")

    def __rsub__(self, o: Symbol | Scalar) -> Symbol:
        return self._binary(o, "_Minus", "_RMinusScalar", what="-", reverse=True)

    def __mul__(self, o: Symbol | Scalar) -> Symbol:
        return self._binary(o, "_Mul", "_MulScalar", what="*")

    __rmul__ = __mul__

    def __truediv__(self, o: Symbol | Scalar) -> Symbol:
        return self._binary(o, "_Div", "_DivScalar", what="/")

    def __rtruediv__(self, o: Symbol | Scalar) -> Symbol:
        return self._binary(o, "_Div", "_RDivScalar", what="/", reverse=True)

    def __mod__(self, o: Symbol | Scalar) -> Symbol:
        return self._binary(o, "_Mod", "_ModScalar", what="%")

    def __rmod__(self, o: Symbol | Scalar) -> Symbol:
        return self._binary(o, "_Mod", "_RModScalar", what="%", reverse=True)

    def __pow__(self, o: Symbol | Scalar) -> Symbol:
        return self._binary(o, "_Power", "_PowerScalar", what="**")

    def __rpow__(self, o: Symbol | Scalar) -> Symbol:
        return self._binary(o, "_Power", "_RPowerScalar", what="**", reverse=True)

    def __neg__(self) -> Symbol:
        # MXNet 1.x: ``-x`` is ``x.__mul__(-1.0)`` (a ``_mul_scalar`` node named ``_mulscalar<i>``)
        return self.__mul__(-1.0)

    def __abs__(self) -> Symbol:
        return creator("abs")(self)

    def __eq__(self, o):
        return self._binary(o, "_equal", "_equal_scalar", strict=False)

    def __ne__(self, o):
        return self._binary(o, "_not_equal", "_not_equal_scalar", strict=False)

    def __gt__(self, o):
        return self._binary(o, "_greater", "_greater_scalar", strict=False)

    def __ge__(self, o):
        return self._binary(o, "_greater_equal", "_greater_equal_scalar", strict=False)

    def __lt__(self, o):
        return self._binary(o, "_lesser", "_lesser_scalar", strict=False)

    def __le__(self, o):
        return self._binary(o, "_lesser_equal", "_lesser_equal_scalar", strict=False)


# -- fluent methods ------------------------------------------------------------------
# MXNet 1.9.1's fluent methods on Symbol (python/mxnet/symbol/symbol.py): ``x.sum(axis=1)`` is
# ``sym.sum(x, axis=1)``. Method name -> the name looked up in ``symgrad.sym`` when it is called, so a
# method works as soon as its operator (or Python-level function, ``split_v2``) exists.
_FLUENT = {
    name: name
    for name in (
        "reshape",
        "reshape_like",
        "zeros_like",
        "ones_like",
        "broadcast_axes",
        "repeat",
        "pad",
        "swapaxes",
        "split",
        "split_v2",
        "slice",
        "slice_axis",
        "slice_like",
        "take",
        "one_hot",
        "pick",
        "sort",
        "topk",
        "argsort",
        "argmax",
        "argmax_channel",
        "argmin",
        "clip",
        "abs",
        "sign",
        "shape_array",
        "size_array",
        "broadcast_to",
        "broadcast_like",
        "tile",
        "transpose",
        "flip",
        "depth_to_space",
        "space_to_depth",
        "sum",
        "nansum",
        "prod",
        "nanprod",
        "mean",
        "max",
        "min",
        "norm",
        "round",
        "rint",
        "fix",
        "floor",
        "ceil",
        "trunc",
        "sin",
        "cos",
        "tan",
        "arcsin",
        "arccos",
        "arctan",
        "degrees",
        "radians",
        "sinh",
        "cosh",
        "tanh",
        "arcsinh",
        "arccosh",
        "arctanh",
        "exp",
        "expm1",
        "log",
        "log10",
        "log2",
        "log1p",
        "sqrt",
        "rsqrt",
        "cbrt",
        "rcbrt",
        "square",
        "reciprocal",
        "relu",
        "sigmoid",
        "softmax",
        "log_softmax",
        "softmin",
    )
}
_FLUENT["astype"] = "cast"


def _fluent_target(method, opname):
    try:
        return creator(opname)
    except ParamError:
        raise NotImplementedError(
            f"Symbol.{method}: the operator {opname!r} it calls is not available in symgrad"
        ) from None


def _make_fluent(method, opname):
    def fluent(self, *args: Any, **kwargs: Any) -> Symbol:  # the op's own inputs and parameters, passed on
        return _fluent_target(method, opname)(self, *args, **kwargs)

    fluent.__name__ = fluent.__qualname__ = method
    fluent.__doc__ = f"Fluent form of ``sym.{opname}`` with this symbol as data (MXNet's ``Symbol.{method}``)."
    return fluent


def _fluent_flatten(self: Symbol, inplace: bool = False, **kwargs: Any) -> Symbol:
    """Fluent form of ``sym.flatten`` (MXNet's ``Symbol.flatten``; ``inplace`` is ignored, as there)."""
    return _fluent_target("flatten", "flatten")(self, **kwargs)


def _fluent_expand_dims(self: Symbol, axis: int, inplace: bool = False, **kwargs: Any) -> Symbol:
    """Fluent form of ``sym.expand_dims`` (MXNet's ``Symbol.expand_dims``; ``inplace`` is ignored)."""
    return _fluent_target("expand_dims", "expand_dims")(self, axis=axis, **kwargs)


def _fluent_squeeze(
    self: Symbol, axis: int | Sequence[int] | None = None, inplace: bool = False, **kwargs: Any
) -> Symbol:
    """Fluent form of ``sym.squeeze`` (MXNet's ``Symbol.squeeze``; ``inplace`` is ignored)."""
    return _fluent_target("squeeze", "squeeze")(self, axis=axis, **kwargs)


def _fluent_diag(self: Symbol, k: int = 0, **kwargs: Any) -> Symbol:
    """Fluent form of ``sym.diag`` (MXNet's ``Symbol.diag``)."""
    return _fluent_target("diag", "diag")(self, k, **kwargs)


def _eval(self: Symbol, ctx: Context | None = None, **kwargs: Array) -> list[Array]:
    """Bind ``kwargs`` (every argument, by name) on ``ctx`` and run one forward (MXNet's ``Symbol.eval``).

    Returns the list of outputs. Binding each time is slow: bind once and call ``forward`` to repeat.

    >>> import numpy as np, symgrad as sg
    >>> a, b = sg.sym.Variable("a"), sg.sym.Variable("b")
    >>> (a + b).eval(a=np.ones(2), b=np.ones(2))[0].tolist()
    [2.0, 2.0]
    """
    from .context import current_context

    return self.bind(current_context() if ctx is None else ctx, kwargs).forward()


for _method, _opname in _FLUENT.items():
    setattr(Symbol, _method, _make_fluent(_method, _opname))
for _method, _fn in (
    ("flatten", _fluent_flatten),
    ("expand_dims", _fluent_expand_dims),
    ("squeeze", _fluent_squeeze),
    ("diag", _fluent_diag),
    ("eval", _eval),
):
    _fn.__name__ = _fn.__qualname__ = _method
    setattr(Symbol, _method, _fn)
del _method, _opname, _fn

FLUENT_METHODS = tuple(sorted([*_FLUENT, "flatten", "expand_dims", "squeeze", "diag"]))


class OutputNameError(KeyError, ValueError):
    """``sym["name"]`` names no output (a ``KeyError``, and a ``ValueError`` as in MXNet)."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


def _read_shape(value, what, keep_zeros=False):
    """A shape given to shape inference as the engine holds it, read in the current mode (``symgrad.util``):
    -1 is an unknown dimension in both; in the legacy reading 0 is one too and ``()`` an unknown shape (None).
    ``keep_zeros``: only -1 is read (a Variable's ``shape``, written as given)."""
    if value is None:
        return None
    items = list(value) if isinstance(value, (tuple, list)) else [value]
    minus = [i for i, d in enumerate(items) if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d == -1]
    shape = list(as_shape([0 if i in minus else d for i, d in enumerate(items)] if minus else value, what))
    if not (keep_zeros or util.is_np_shape()):
        if not shape:
            return None
        minus = [i for i, d in enumerate(shape) if d <= 0]
    for i in minus:
        shape[i] = -1
    return tuple(shape)


def _read_shape_attr(text):
    """A ``__shape__`` attribute read as ``_read_shape`` reads a given shape."""
    value = opdef.literal(text.strip()) if isinstance(text, str) else text
    return _read_shape(value, "__shape__ attribute")


def _shown_shape(shape, np_mode):
    """An inferred shape as MXNet reports it: NumPy mode keeps None and -1, legacy shows ``()`` and 0."""
    if np_mode:
        return shape
    return () if shape is None else _legacy_shape(shape)


def _legacy_shape(shape):
    return None if shape is None else tuple(0 if d < 0 else d for d in shape)


def _collect(known, arg_nodes, outputs, aux_nodes):
    return (
        [known.get((n.id, 0)) for n in arg_nodes],
        [known.get((n.id, i)) for n, i in outputs],
        [known.get((n.id, 0)) for n in aux_nodes],
    )


# -- construction ---------------------------------------------------------------


def Variable(
    name: str,
    attr: Mapping[str, object] | None = None,
    shape: ShapeLike | None = None,
    lr_mult: float | None = None,
    wd_mult: float | None = None,
    dtype: npt.DTypeLike | None = None,
    init: object = None,
    stype: str | None = None,
    **kwargs: object,
) -> Symbol:
    """A named placeholder (``mx.sym.Variable``, same parameters in the same order).

    Args:
        name: the variable's name.
        attr: extra string attributes (merged over the current ``AttrScope``).
        shape: written to ``__shape__`` (used by shape inference and ``simple_bind``).
        lr_mult, wd_mult: written to ``__lr_mult__`` / ``__wd_mult__``.
        dtype: written to ``__dtype__`` as MXNet's dtype code (used by type inference).
        init: an initializer (its ``dumps()``) or a string, written to ``__init__``.
        stype: only ``"default"`` (dense) storage is supported.
        **kwargs: further attributes, which must be ``__dunder__`` names.

    >>> v = Variable("v", shape=(2, 3), lr_mult=2.0, dtype="float64")
    >>> v.list_attr() == {"__shape__": "(2, 3)", "__lr_mult__": "2.0", "lr_mult": "2.0", "__dtype__": "1"}
    True
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"Variable: name must be a non-empty string, got {name!r}")
    attrs = AttrScope.current_attrs()
    if attr:
        attrs.update({k: str(v) for k, v in attr.items()})
    if shape is not None:
        # -1: an unknown dimension (MXNet accepts it in both shape modes; see symgrad.util)
        attrs["__shape__"] = param_to_str(_read_shape(shape, f"Variable {name!r} shape", keep_zeros=True))
    if lr_mult is not None:
        attrs["__lr_mult__"] = str(lr_mult)
    if wd_mult is not None:
        attrs["__wd_mult__"] = str(wd_mult)
    if dtype is not None:
        dt = np.dtype(dtype)
        if dt.name not in DTYPE_TO_MX:
            raise TypeError(f"Variable {name!r}: dtype {dt} is not one of MXNet's {sorted(DTYPE_TO_MX)}")
        attrs["__dtype__"] = str(DTYPE_TO_MX[dt.name])
    if init is not None:
        attrs["__init__"] = init if isinstance(init, str) else getattr(init, "dumps", lambda: str(init))()
    if stype is not None and stype != "default":
        raise NotImplementedError(f"Variable {name!r}: sparse storage type {stype!r} is not supported")
    for k, v in kwargs.items():
        if not (k.startswith("__") and k.endswith("__")):
            raise ParamError(
                f"Variable {name!r}: attribute {k!r} is not supported; "
                "additional attributes must start and end with double underscores"
            )
        attrs[k] = str(v)
    return Symbol([(Node(None, name, {}, _stored_attrs(attrs, f"Variable {name!r}"), (), 1), 0)])


def _is_dunder(key: str) -> bool:
    return len(key) > 4 and key.startswith("__") and key.endswith("__")


def _stored_attrs(attrs: Mapping[str, object], where: str) -> dict[str, str]:
    """``attrs`` as MXNet stores them (``MXSymbolSetAttr``): values as strings, ``lr_mult`` & co. as
    ``__lr_mult__``. A key that merely ends in one of those (MXNet 0.x's ``weight_lr_mult``, meaning the
    ``weight`` input's) is refused, as MXNet 1.x refuses it."""
    out = {}
    for key, value in attrs.items():
        if key in HIDDEN_KEYS:
            key = f"__{key}__"
        elif key.endswith(HIDDEN_KEYS):
            hidden = next(h for h in HIDDEN_KEYS if key.endswith(h))
            raise ParamError(
                f"{where}: attribute {key!r} (an input's {hidden}, MXNet 0.x) is refused since MXNet 1.0; give "
                f"that input its own Variable(..., {hidden}={value!r}) instead"
            )
        out[key] = value if isinstance(value, str) else str(value)
    return out


def _listed_attrs(attrs: Mapping[str, str]) -> dict[str, str]:
    """``attrs`` as MXNet lists them (``MXSymbolListAttrShallow``): ``__lr_mult__`` & co. twice, also plainly."""
    out = {}
    for key, value in attrs.items():
        out[key] = value
        if _is_dunder(key) and key[2:-2] in HIDDEN_KEYS:
            out[key[2:-2]] = value
    return out


#: what marks a creator keyword as a possible attribute rather than a parameter (``_attribute_keywords``)
_ATTR_KEY_ENDS = (*HIDDEN_KEYS, "__")


def _attribute_keywords(op, param_kwargs: dict, attr, where: str) -> dict[str, str]:
    """Pop the attribute keywords of an op creator out of ``param_kwargs`` -- ``lr_mult``/``wd_mult``/
    ``ctx_group``/... and ``__dunder__`` keys that are not parameters of ``op`` -- and return the node's
    attributes: those keywords, then the current AttrScope's, then ``attr`` (MXNet's creators merge them in
    this order), stored as MXNet stores them. The op's automatic inputs (``fc_weight``) get them too."""
    keywords = {k: param_kwargs.pop(k) for k in list(param_kwargs) if k.endswith(_ATTR_KEY_ENDS) and k not in op.params}
    merged = {**keywords, **AttrScope.current_attrs(), **(attr or {})}
    return _stored_attrs(merged, where) if merged else {}


def _alone(node: Node) -> Symbol:
    """The op ``node`` alone: its operator, parameters and (a copy of its) attributes applied to fresh Variables
    named after its input slots (auxiliary states stay auxiliary), with its visible outputs."""
    inputs = [(Node(None, slot, {}, {}, [], 1), 0) for slot in node.input_names()]
    alone = Node(node.op, node.name, node.params, dict(node.attrs), inputs, node.num_outputs)
    return Symbol([(alone, i) for i in range(node.op.n_visible(node.params))])


var = Variable


def Group(symbols: Iterable[Symbol]) -> Symbol:
    """One symbol whose outputs are the outputs of ``symbols``, in order."""
    outs: list[Entry] = []
    for s in symbols:
        if not isinstance(s, Symbol):
            raise TypeError(f"Group: expected Symbols, got {type(s).__name__}")
        outs.extend(s._outputs)
    if not outs:
        raise TypeError("Group: expected a non-empty list of Symbols, got none")
    return Symbol(outs)


def _create(op, args, kwargs, name=None, attr=None, hint=None):
    hint = (hint or op.name).lower()
    node_name = NameManager.current.get(name, hint)
    where = f"{op.name} {node_name!r}"
    simple = _simple_call(op, args, kwargs, attr)
    if simple is not None:
        return _create_simple(op, simple, kwargs, node_name, where)
    sym_kwargs, param_kwargs = _split_kwargs(kwargs)
    attr = _attribute_keywords(op, param_kwargs, attr, where)
    for k in [k for k, v in param_kwargs.items() if v is None and k not in op.params and not op.extra_params]:
        del param_kwargs[k]  # ``sequence_length=None``: an absent input, as MXNet's creators read it
    args, positional_params = _split_positional(op, args, param_kwargs, where)
    if positional_params:
        param_kwargs.update(positional_params)
    if op.variadic and op.variadic not in param_kwargs and op.variadic in op.params:
        param_kwargs[op.variadic] = len(args)
    params, strings = op.parse_params_and_strings(param_kwargs, where)
    if op.prepare is not None:
        params = op.prepare(params, node_name)
    names = op.list_inputs(params) + op.list_aux(params)
    if len(args) > len(names) and all(a is None for a in args[len(names) :]):
        args = args[: len(names)]  # ``Convolution(x, w, None, no_bias=True)``: an absent trailing input
    if len(args) > len(names):
        raise ParamError(f"{where}: got {len(args)} inputs, {op.name} takes {len(names)} {names}")
    given = {n: a for n, a in zip(names, args) if a is not None}
    for k, v in sym_kwargs.items():
        if k not in names:
            raise ParamError(f"{where}: {k!r} is not an input of {op.name}; inputs are {names}")
        if k in given:
            raise ParamError(f"{where}: input {k!r} given twice")
        given[k] = v
    inputs = []
    for iname in names:
        s = given.get(iname)
        if s is None:  # an automatic input (``fc_weight``) gets the op's attributes, as in MXNet
            s = Symbol([(Node(None, f"{node_name}_{iname}", {}, dict(attr), (), 1), 0)])
        if len(s._outputs) != 1:
            raise ShapeError(f"{where}: input {iname!r} must be a single output, got a group of {len(s)}")
        inputs.append(s._outputs[0])
    return _node_symbol(op, node_name, params, strings, inputs, attr)


def _simple_call(op, args, kwargs, attr):
    """The input entries of the most common call -- every input given positionally as a single-output Symbol,
    parameters (no Symbols) by keyword, an op whose input names are fixed, no ``attr`` -- or None for any
    other call (which ``_create``'s general path handles)."""
    names = op.fixed_input_names()
    if names is None or attr or len(args) != len(names) or op.prepare is not None:
        return None
    entries = []
    for a in args:
        if type(a) is not Symbol or len(a._outputs) != 1:
            return None
        entries.append(a._outputs[0])
    for k, v in kwargs.items():
        if isinstance(v, Symbol) or k.endswith(_ATTR_KEY_ENDS):  # an input, or maybe an attribute keyword
            return None
    return entries


def _create_simple(op, inputs, param_kwargs, node_name, where):
    """``_create``'s result for a ``_simple_call``: the same parse, attributes and node."""
    if param_kwargs:
        params, strings = op.parse_params_and_strings(param_kwargs, where)
    else:  # defaults only (the parse still reports a missing required parameter)
        params, strings = (op.parse_params({}, where) if op.params else {}), {}
    return _node_symbol(op, node_name, params, strings, inputs, None)


def _node_symbol(op, node_name, params, strings, inputs, attr):
    """The node (attributes: the current AttrScope's, then ``attr``, then the parameters as given, as
    strings) and the Symbol of its visible outputs."""
    attrs = AttrScope.current_attrs()
    if attr:
        attrs.update(attr)
    if attrs:  # ``lr_mult`` & co. stored as ``__lr_mult__``
        attrs = _stored_attrs(attrs, f"{op.name} {node_name!r}")
    attrs.update(strings)
    n_out = op.n_outputs(params)
    node = Node(op, node_name, params, attrs, inputs, n_out)
    n_visible = n_out if op.num_visible is None else op.n_visible(params)
    return Symbol([(node, 0)] if n_visible == 1 else [(node, i) for i in range(n_visible)])


def _split_kwargs(kwargs):
    """Keyword arguments -> (``{input: Symbol}``, ``{parameter: value}``), both fresh dicts."""
    if not kwargs:  # most calls (every operator overload, most gradient nodes)
        return {}, {}
    sym_kwargs = {k: v for k, v in kwargs.items() if isinstance(v, Symbol)}
    param_kwargs = {k: v for k, v in kwargs.items() if not isinstance(v, Symbol)}
    return sym_kwargs, param_kwargs


def positional_params(op) -> list[str]:
    """The parameters ``op`` takes positionally after its inputs, in MXNet's order (its
    ``get_operator_arguments`` order): every public parameter but a variadic op's input count.
    Variadic ops (``add_n``, ``Concat``, ``Custom``) take no positional parameters, as in MXNet."""
    if op.variadic or op.extra_params:
        return []
    return [p for p in op.params if not p.startswith("_")]


def _split_positional(op, args, param_kwargs, where):
    """Positional values -> (inputs, {param: value}), as MXNet's generated ``op(in1, ..., p1, p2, ...)``.

    Symbols (and ``None``, meaning an absent input) fill the inputs; the first other value starts the
    parameters, which follow in ``positional_params(op)`` order. A Symbol after a parameter, more values
    than parameters, or a parameter also given by keyword is an error naming the op.
    """
    k = 0
    while k < len(args) and (args[k] is None or isinstance(args[k], Symbol)):
        k += 1
    inputs, rest = list(args[:k]), args[k:]
    if op.variadic and any(a is None for a in inputs):
        raise ParamError(f"{where}: positional input {inputs.index(None)} must be a Symbol, got None")
    if not rest:
        return inputs, {}
    names = positional_params(op)
    for j, value in enumerate(rest):
        if isinstance(value, Symbol):
            raise ParamError(
                f"{where}: positional argument {k + j} is a Symbol after the parameter values "
                f"{list(rest[:j])!r}; inputs come first"
            )
    if len(rest) > len(names):
        what = f"parameters {names}" if names else "no parameters"
        raise ParamError(
            f"{where}: positional input {k + len(names)} must be a Symbol, got "
            f"{type(rest[len(names)]).__name__} ({op.name} takes {what} after its inputs)"
        )
    given = dict(zip(names, rest))
    twice = [n for n in given if n in param_kwargs]
    if twice:
        raise ParamError(f"{where}: parameter {twice[0]!r} given both positionally and by keyword")
    return inputs, given


def _makecreator(op, func_name=None):
    """The creator ``sg.sym.<func_name>``; automatic names are ``<func_name lowercase><i>`` (MXNet)."""
    func_name = func_name or op.name

    def creator(*args, name=None, attr=None, **kwargs):
        return _create(op, args, kwargs, name=name, attr=attr, hint=func_name)

    creator.__name__ = func_name
    creator.__qualname__ = func_name
    creator.__doc__ = op.doc or f"The {op.name} operator."
    return creator


_FUNCS: dict = {}


def creator(opname: str):
    """The creator function of the registered op ``opname`` (made once per registration)."""
    op = opdef.get_op(opname)
    func = _FUNCS.get(opname)
    if func is None or func._op is not op:
        func = _FUNCS[opname] = _makecreator(op, opname)
        func._op = op
    return func


class _Creators:
    """The registered ops as attributes (``F.add_n(a, b)``): the ``F`` that gradient rules receive, as Gluon's
    ``hybrid_forward`` receives ``mx.sym``. ``sg.sym`` holds the same creators."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return creator(name)
        except ParamError:
            raise AttributeError(f"F has no operator {name!r}") from None


F = _Creators()


def _above(module: str):
    """A module of a layer above this one, imported by name when a Symbol method needs it: ``bind`` needs
    ``executor`` (which builds gradients, themselves Symbols), ``tojson``/``save``/pickling need
    ``serialization``. Symbol keeps MXNet's methods while the modules import only downwards, as pandas'
    ``DataFrame.plot`` opens its plotting backend by name."""
    return importlib.import_module(f"{__package__}.{module}")


def __getattr__(name: str) -> Any:
    """MXNet's ``mx.symbol`` and ``mx.sym`` are one namespace: ``sg.symbol.FullyConnected``, ``sg.symbol.load``,
    ``sg.symbol.contrib.foreach`` are ``sym``'s names (PEP 562: asked only for names this module lacks)."""
    if not name.startswith("__"):
        found = getattr(_above("sym"), name, None)
        if found is not None:
            return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r} (nor has symgrad.sym, MXNet's mx.sym)")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(dir(_above("sym"))))


#: MXNet's op-name prefixes and the ``sym`` submodule each goes to (``_init_op_module``):
#: ``_linalg_potrf`` is ``sym.linalg.potrf``; ``_random_*`` and ``_sample_*`` are ``sym.random.*``.
NAMESPACE_PREFIXES = {
    "_contrib_": "contrib",
    "_linalg_": "linalg",
    "_image_": "image",
    "_random_": "random",
    "_sample_": "random",
}
_NS_FUNCS: dict = {}


def _namespace_module(qualname: str, doc: str) -> types.ModuleType:
    module = sys.modules.get(qualname)
    if module is None:
        module = types.ModuleType(qualname, doc)
        module.__all__ = []  # type: ignore[attr-defined]  # (ModuleType declares no __all__)
        sys.modules[qualname] = module
    return module


def _namespace_entries() -> dict:
    """``{submodule: {function name: creator}}`` from the registered op names (``_linalg_gemm2`` ->
    ``linalg.gemm2``). A ``_random_X`` wins over a ``_sample_X`` of the same name. A creator's automatic
    names use the short name (``gemm20``), as MXNet's do."""
    entries: dict = {}
    ops = opdef.list_ops()
    for opname in sorted(ops, key=lambda n: (n.startswith("_sample_"), n)):
        prefix = next((p for p in NAMESPACE_PREFIXES if opname.startswith(p)), None)
        if prefix is None or len(opname) == len(prefix):
            continue
        short = opname[len(prefix) :]
        funcs = entries.setdefault(NAMESPACE_PREFIXES[prefix], {})
        if short in funcs:
            continue
        op = ops[opname]
        func = _NS_FUNCS.get(opname)
        if func is None or func._op is not op:
            func = _NS_FUNCS[opname] = _makecreator(op, short)
            func._op = op
        funcs[short] = func
    return entries


def _random_wrappers() -> dict:
    """The public functions of ``symgrad.sym_random`` (MXNet's ``mx.sym.random.uniform`` & co., which pick
    ``_random_uniform`` or ``_sample_uniform``), or nothing while that module does not exist."""
    try:
        module = importlib.import_module(f"{__package__}.sym_random")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.sym_random":
            raise
        return {}
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and callable(v) and getattr(v, "__module__", None) == module.__name__
        ]
    return {n: getattr(module, n) for n in names}


class _LazyRandom(types.ModuleType):
    """``sym.random``: filled on first use, so that ``symgrad.sym_random`` (which builds on ``sym``) is
    imported only once ``sym`` itself is complete."""

    def _fill(self):
        funcs = dict(object.__getattribute__(self, "_pending"))
        funcs.update(_random_wrappers())  # MXNet's Python wrappers override the raw creators
        for k, v in funcs.items():
            setattr(self, k, v)
        self.__all__ = sorted(funcs)
        self._pending = None

    def __getattr__(self, name):
        if name.startswith("__") or self.__dict__.get("_pending") is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        self._fill()
        return getattr(self, name)

    def __dir__(self):
        if self.__dict__.get("_pending") is not None:
            self._fill()
        return sorted(self.__dict__)


def populate(namespace: dict, internal_name: str = "symgrad.sym._internal") -> dict:
    """Put one creator function per registered operator into ``namespace``.

    Also fills a ``_internal`` module (MXNet keeps ``_plus_scalar`` & co. there) and the submodules
    ``contrib``, ``linalg``, ``image`` and ``random`` (``sym.linalg.gemm2`` is ``_linalg_gemm2``), registered
    in ``sys.modules`` under ``<package of internal_name>.<submodule>``.
    """
    internal = sys.modules.get(internal_name) or types.ModuleType(internal_name)
    for opname, op in opdef.list_ops().items():
        func = _FUNCS.get(opname)
        if func is None or func._op is not op:
            func = _FUNCS[opname] = _makecreator(op, opname)
            func._op = op
        setattr(internal, opname, func)
        namespace[opname] = func
    namespace["_internal"] = internal
    sys.modules[internal_name] = internal
    base = internal_name.rsplit(".", 1)[0]
    entries = _namespace_entries()
    for sub in sorted(set(NAMESPACE_PREFIXES.values())):
        qualname = f"{base}.{sub}"
        funcs = entries.get(sub, {})
        doc = f"MXNet's ``mx.sym.{sub}``: the operators registered as ``_{sub}_*``."
        if sub == "random":
            module = sys.modules.get(qualname)
            if not isinstance(module, _LazyRandom):
                module = sys.modules[qualname] = _LazyRandom(qualname, doc)
            module._pending = funcs
        else:
            module = _namespace_module(qualname, doc)
            for k, v in funcs.items():
                setattr(module, k, v)
            module.__all__ = sorted(funcs)  # type: ignore[attr-defined]
        namespace[sub] = module
    return namespace
