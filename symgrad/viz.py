"""Look at a model: ``print_summary`` (a layer table) and ``plot_network`` (a graphviz drawing).

Same signatures and look as MXNet 1.9's ``mx.viz``; the graph is drawn with the ``graphviz`` Python package
(the optional extra ``symgrad[viz]``, imported only by ``plot_network``), whose ``dot`` program renders it.

Differences from MXNet: parameter counts come from the inferred shapes of each op's parameter inputs (weight,
bias, gamma, beta, ...), so they are right for any op and input layout; without ``shape``, the shapes the
symbol's ``__shape__`` attributes determine are used when they make every shape known; an edge carries the
shape of the output it really comes from (MXNet labels every edge out of a multi-output op with its last
output); with ``hide_weights=False`` parameter inputs are drawn (as small ovals).

>>> import symgrad as sg
>>> net = sg.sym.FullyConnected(sg.sym.Variable("data"), num_hidden=4, name="fc")
>>> sg.viz.print_summary(net, shape={"data": (2, 3)}, line_length=80)
________________________________________________________________________________
Layer (type)                       Output Shape    Param # Previous Layer
================================================================================
data(null)                         3               0
________________________________________________________________________________
fc(FullyConnected)                 4               16      data
================================================================================
Total params: 16
________________________________________________________________________________
>>> dot = sg.viz.plot_network(net, shape={"data": (2, 3)})  # doctest: +SKIP
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import util
from .base import StrPath
from .graph import Node, aux_variable_ids

if TYPE_CHECKING:
    import graphviz
    import numpy.typing as npt

    from .symbol import ShapeLike, Symbol

__all__ = ["print_summary", "plot_network", "render", "FORMATS", "PARAM_SLOTS"]

#: formats ``render`` writes; all but "dot" need graphviz's ``dot`` program
FORMATS = ("svg", "png", "pdf", "dot")
#: op input slots holding learned parameters (counted, hidden with ``hide_weights``)
PARAM_SLOTS = ("weight", "bias", "gamma", "beta", "parameters", "alpha")
_WEIGHT_LIKE = ("_weight", "_bias", "_beta", "_gamma", "_moving_var", "_moving_mean", "_running_var", "_running_mean")
# MXNet's colour map: inputs, conv/dense, activations, BatchNorm, pooling, shape ops, softmax, the rest
_COLORS = ("#8dd3c7", "#fb8072", "#ffffb3", "#bebada", "#80b1d3", "#fdb462", "#b3de69", "#fccde5")
_SOFTMAX = ("Softmax", "SoftmaxOutput", "softmax", "log_softmax", "SoftmaxActivation")
_SHAPE_OPS = ("Concat", "Flatten", "Reshape", "concat", "flatten", "reshape", "transpose", "expand_dims", "stack")
_INSTALL = (
    "install graphviz: the Python package with 'pip install graphviz' (or pip install 'symgrad[viz]') and "
    "the 'dot' program with 'apt-get install graphviz' (macOS: 'brew install graphviz', conda: "
    "'conda install graphviz')"
)


def _check_symbol(symbol, who):
    from .symbol import Symbol

    if not isinstance(symbol, Symbol):
        raise TypeError(f"{who}: symbol must be a Symbol, got {type(symbol).__name__}")


def _dims(text) -> list[str]:
    return re.findall(r"\d+", str(text))


def _repeated(nodes) -> list[str]:
    """The names that several nodes have, in order of first appearance."""
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.name] = counts.get(n.name, 0) + 1
    return [name for name, c in counts.items() if c > 1]


def _distinct(symbol):
    """``symbol`` with distinct variable names (inference refuses two Variables of one name; MXNet draws such a
    graph), ``{new node id: original node}`` and ``{name: the names its variables now have}``."""
    nodes = symbol._nodes()
    repeated = set(_repeated(nodes))
    if not repeated:
        return symbol, {n.id: n for n in nodes}, {}
    new: dict[int, Node] = {}
    twins: dict[str, list[str]] = {}
    for n in nodes:  # inputs first: each node is rebuilt on its rebuilt inputs
        name = n.name
        if n.op is None and name in repeated:
            twins.setdefault(name, []).append(name if not twins.get(name) else f"{name}#{len(twins[name])}")
            name = twins[name][-1]
        inputs = [(new[src.id], i) for src, i in n.inputs]
        new[n.id] = Node(n.op, name, n.params, n.attrs, inputs, n.num_outputs)
    outputs = [(new[n.id], i) for n, i in symbol._outputs]
    return type(symbol)(outputs), {new[n.id].id: n for n in nodes}, twins


def _unknown_shape(s) -> bool:
    # MXNet's legacy reading (the default) reports an unknown shape as (); NumPy-shape mode as None
    return s is None or (s == () and not util.is_np_shape())


def _infer(symbol, given, what, who):
    """``{(original node id, output): shape or dtype}`` of every internal output, or None when not given and not
    determined by the ``__shape__``/``__dtype__`` attributes; ``given`` that leaves some unknown: ValueError."""
    if given is not None and not isinstance(given, dict):
        raise TypeError(f"{who}: {what} must be a dict name -> {what}, got {type(given).__name__}")
    distinct, original, twins = _distinct(symbol)
    internals = distinct.get_internals()
    keys = [(original[n.id].id, i) for n, i in internals._outputs]
    infer = internals.infer_shape_partial if what == "shape" else internals.infer_type_partial
    given = {new: v for name, v in (given or {}).items() for new in twins.get(name, [name])}
    try:
        _, found, _ = infer(**given)
    except Exception:
        if given:
            raise
        return None  # attributes that contradict each other: draw without them
    missing = [name for name, v in zip(internals.list_outputs(), found) if v is None or _unknown_shape(v)]
    if missing and not given:
        return None
    if missing:
        raise ValueError(
            f"{who}: input {what} is incomplete: the {what} of {', '.join(missing[:4])}"
            f"{', ...' if len(missing) > 4 else ''} is unknown; give the {what}s of the inputs"
        )
    return dict(zip(keys, found))


def _graph(symbol):
    """The nodes in topological order and the ids of the variables fed into parameter slots, of the auxiliary
    states and of the index inputs (labels, indices: variables that only feed inputs their op never
    differentiates)."""
    nodes = symbol._nodes()
    params, aux = set(), aux_variable_ids(nodes)
    uses: dict = {}
    for node in nodes:
        if node.op is None:
            continue
        for (src, _), slot in zip(node.inputs, node.input_names()):
            if src.op is None:
                if slot in PARAM_SLOTS:
                    params.add(src.id)
                uses.setdefault(src.id, []).append(slot in tuple(node.op.no_grad_inputs))
    labels = {v for v, index in uses.items() if all(index) and v not in aux}
    return nodes, params, aux, labels


def _fmt_shape(shape) -> str:
    return "x".join(str(int(d)) for d in shape)


def print_summary(
    symbol: Symbol,
    shape: dict[str, ShapeLike] | None = None,
    line_length: int = 120,
    positions: Sequence[float] = [0.44, 0.64, 0.74, 1.0],
) -> None:  # noqa: B006 (MXNet's)
    """Print a table of the layers of ``symbol``: name (op), output shape (batch axis left out, as MXNet),
    parameter count and the layers it reads; then the total parameter count.

    Args:
        symbol: the Symbol.
        shape: ``{input name: shape tuple}`` (None: the ``__shape__`` attributes when they determine every
            shape, else no shapes and only the counts that need none).
        line_length: width of the table.
        positions: where each column ends, as fractions of ``line_length`` (or absolute when the last is > 1).

    Returns:
        None (the table is printed), as MXNet.
    """
    _check_symbol(symbol, "print_summary")
    shapes = _infer(symbol, shape, "shape", "print_summary")
    nodes, params, aux, labels = _graph(symbol)
    line_length = int(line_length)
    # fractions of the line, or absolute columns (ints or floats: a column is an int)
    scale = line_length if positions[-1] <= 1 else 1
    positions = [int(p * scale) for p in positions]
    hidden = params | aux | labels  # as MXNet: the rows are the data inputs and the ops

    def print_row(fields):
        line = ""
        for field, end in zip(fields, positions):
            line += str(field)
            line = line[:end]
            line += " " * (end - len(line))
        print(line.rstrip())

    def out_shape(node, k=0):
        return None if shapes is None else shapes.get((node.id, k))

    print("_" * line_length)
    print_row(["Layer (type)", "Output Shape", "Param #", "Previous Layer"])
    print("=" * line_length)
    rows = [n for n in nodes if not (n.op is None and n.id in hidden)]
    total, unknown, n_aux = 0, False, 0
    for i, node in enumerate(rows):
        count, prev = 0, []
        if node.op is not None:
            for src, _ in node.inputs:
                if src.op is None and src.id in params:
                    s = out_shape(src)
                    if s is None:
                        unknown = True
                    else:
                        count += int(np.prod(s))
                elif src.op is None and src.id in aux:
                    s = out_shape(src)
                    n_aux += int(np.prod(s)) if s is not None else 0
                elif src.id not in labels:
                    prev.append(src.name)
        s = out_shape(node)
        fields = [
            f"{node.name}({node.op_name})",
            _fmt_shape(s[1:]) if s is not None else "",
            count if (node.op is None or shapes is not None or count) else "?",
            prev[0] if prev else "",
        ]
        print_row(fields)
        for p in prev[1:]:
            print_row(["", "", "", p])
        total += count
        print(("=" if i == len(rows) - 1 else "_") * line_length)
    print(f"Total params: {total}{' (shapes unknown: give shape= to count every parameter)' if unknown else ''}")
    if n_aux:
        print(f"Auxiliary states: {n_aux} (not in the total)")
    print("_" * line_length)


def _label(node) -> str:
    p, op = node.params, node.op_name
    if op == "Convolution" or op == "Deconvolution":
        stride = "x".join(_dims(p.get("stride"))) if p.get("stride") else "1"
        return f"{op}\n{'x'.join(_dims(p.get('kernel')))}/{stride or '1'}, {p.get('num_filter')}"
    if op == "FullyConnected":
        return f"FullyConnected\n{p.get('num_hidden')}"
    if op == "Activation":
        return f"Activation\n{p.get('act_type')}"
    if op == "LeakyReLU":
        return f"LeakyReLU\n{p.get('act_type', 'leaky')}"
    if op == "Pooling":
        kernel = "x".join(_dims(p.get("kernel"))) if p.get("kernel") and not p.get("global_pool") else "global"
        stride = "x".join(_dims(p.get("stride"))) if p.get("stride") else "1"
        return f"Pooling\n{p.get('pool_type')}, {kernel}/{stride or '1'}"
    if op == "Custom":
        return str(p.get("op_type", "Custom"))
    return op


def _color(op) -> str:
    if op in ("Convolution", "Deconvolution", "FullyConnected"):
        return _COLORS[1]
    if op in ("Activation", "LeakyReLU", "relu", "sigmoid", "tanh"):
        return _COLORS[2]
    if op in ("BatchNorm", "LayerNorm", "InstanceNorm", "GroupNorm"):
        return _COLORS[3]
    if op == "Pooling":
        return _COLORS[4]
    if op in _SHAPE_OPS:
        return _COLORS[5]
    if op in _SOFTMAX:
        return _COLORS[6]
    return _COLORS[7]


def plot_network(
    symbol: Symbol,
    title: str = "plot",
    save_format: str = "pdf",
    shape: dict[str, ShapeLike] | None = None,
    dtype: dict[str, npt.DTypeLike] | None = None,
    node_attrs: Mapping[str, str] = {},  # noqa: B006 (MXNet's)
    hide_weights: bool = True,
) -> graphviz.Digraph:
    """The graph of ``symbol`` as a ``graphviz.Digraph`` (MXNet's ``plot_network`` look).

    Ops are boxes coloured by kind (convolution/dense, activation, normalisation, pooling, shape ops, softmax,
    the rest), inputs are ovals; an edge carries the shape (batch axis left out) of the value it carries when
    the shapes are known.

    Two variables (or nodes) of one name are drawn as one node, with MXNet's RuntimeWarning naming them.

    Args (MXNet's, in its order):
        symbol: the Symbol.
        title: the graph's name.
        save_format: the Digraph's format (``render``/``pipe`` use it): "pdf", "svg", "png", ...
        shape: ``{input name: shape tuple}``; None: the ``__shape__`` attributes when they determine every
            shape, else no shapes on the edges. Shapes that do not infer: ValueError.
        dtype: ``{input name: dtype}``: each edge also carries its dtype (``3x6x6(float32)``); dtypes that do
            not infer: ValueError.
        node_attrs: graphviz node attributes over the defaults (box, 1.3 x 0.8034, filled).
        hide_weights: leave parameter inputs (weights, biases, BatchNorm's gamma/beta and moving statistics) out.

    Returns:
        A ``graphviz.Digraph``; ``.source`` is the DOT text, ``render``/``pipe`` need graphviz's ``dot`` program.

    Raises:
        ImportError: the graphviz Python package is missing (the message says how to install it).
    """
    try:
        from graphviz import Digraph
    except ImportError:
        raise ImportError(f"plot_network needs the graphviz Python package: {_INSTALL}") from None
    _check_symbol(symbol, "plot_network")
    repeated = _repeated(symbol._nodes())
    if repeated:  # MXNet's warning (graphviz draws the namesakes as one node)
        warnings.warn(
            "There are multiple variables with the same name in your graph, this may result in cyclic graph. "
            f"Repeated names: {','.join(repeated)}",
            RuntimeWarning,
            stacklevel=2,
        )
    shapes = _infer(symbol, shape, "shape", "plot_network")
    dtypes = None if dtype is None else _infer(symbol, dtype, "dtype", "plot_network")
    nodes, params, aux, _ = _graph(symbol)
    hidden = {
        n.name for n in nodes if n.op is None and (n.id in params or n.id in aux or n.name.endswith(_WEIGHT_LIKE))
    }
    node_attr = {"shape": "box", "fixedsize": "false", "width": "1.3", "height": "0.8034", "style": "filled"}
    node_attr.update(node_attrs)
    dot = Digraph(name=title, format=save_format)
    drawn = set()
    for node in nodes:
        attr = dict(node_attr)
        if node.op is None:
            if node.name in hidden:
                if hide_weights:
                    continue
                attr.update(shape="oval", width="0.9", height="0.5", fixedsize="false", fillcolor="#eeeeee")
            else:
                attr.update(shape="oval", fillcolor=_COLORS[0])
            label = node.name
        else:
            label = _label(node)
            attr["fillcolor"] = _color(node.op_name)
            attr["tooltip"] = f"{node.name} ({node.op_name})"
        drawn.add(node.name)
        dot.node(name=node.name, label=label, **attr)
    for node in nodes:
        if node.op is None:
            continue
        for src, k in node.inputs:
            if src.name not in drawn:
                continue
            attr = {"dir": "back", "arrowtail": "open", "label": ""}
            s = None if shapes is None else shapes.get((src.id, k))
            if s is not None:
                attr["label"] = _fmt_shape(s[1:])
            t = None if dtypes is None else dtypes.get((src.id, k))
            if t is not None:  # MXNet: "3x6x6(float32)"
                attr["label"] += f"({np.dtype(t).name})"
            dot.edge(tail_name=node.name, head_name=src.name, **attr)
    return dot


def render(dot: graphviz.Digraph, path: StrPath) -> None:
    """Write ``dot`` (a Digraph) to ``path``; the format is the extension (``FORMATS``). ``.dot`` writes the
    DOT text and needs no ``dot`` program; the others raise RuntimeError saying how to install graphviz when
    it is missing."""
    import os

    fmt = os.path.splitext(str(path))[1].lower().lstrip(".")
    if fmt not in FORMATS:
        raise ValueError(f"render: {path}: the extension must be one of {', '.join('.' + f for f in FORMATS)}")
    if fmt == "dot":
        data = dot.source.encode("utf-8")
    else:
        import graphviz

        try:
            data = dot.pipe(format=fmt)
        except graphviz.ExecutableNotFound:
            raise RuntimeError(
                f"writing {path} needs graphviz's 'dot' program, which is not installed: {_INSTALL}; "
                "or write a .dot file, which needs neither"
            ) from None
    with open(path, "wb") as f:
        f.write(data)
