"""Look at a model: ``print_summary`` (a layer table) and ``plot_network`` (a graphviz drawing).

Same signatures and look as MXNet 1.9's ``mx.viz``; the graph is drawn with the ``graphviz`` Python package
(the optional extra ``symgrad[viz]``, imported only by ``plot_network``), whose ``dot`` program renders it.

Differences from MXNet: parameter counts come from the inferred shapes of each op's parameter inputs (weight,
bias, gamma, beta, ...), so they are right for any op and input layout; without ``shape``, the shapes the
symbol's ``__shape__`` attributes determine are used when they make every shape known; an edge carries the
shape of the output it really comes from (MXNet labels every edge out of a multi-output op with its last
output); with ``hide_weights=False`` parameter inputs are drawn (as small ovals). Graphs of more than
``LARGE_GRAPH`` ops are wrapped into columns with a frame per Gluon block (``plot_network``'s keyword-only
``wrap``, ``cluster`` and ``collapse``), where MXNet draws one column tens of thousands of pixels tall.

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
from .control_flow import input_readers
from .graph import Node

if TYPE_CHECKING:
    import graphviz
    import numpy.typing as npt

    from .symbol import ShapeLike, Symbol

__all__ = ["print_summary", "plot_network", "render", "png_size", "FORMATS", "PARAM_SLOTS", "LARGE_GRAPH"]

#: formats ``render`` writes; all but "dot" need graphviz's ``dot`` program
FORMATS = ("svg", "png", "pdf", "dot")
#: above this many drawn ops ``plot_network`` wraps long chains into columns and frames the blocks (by default)
LARGE_GRAPH = 80
#: ops that share a name prefix to make it a block (``cluster``/``collapse``)
BLOCK_MIN_OPS = 3
#: wrapped columns (automatic): at least this many rows, more to make the drawing about as wide as tall
WRAP_MIN_ROWS = 20
_ROW_INCHES, _COLUMN_MARGIN, _CHAR_INCHES = 1.6, 2.3, 0.11  # a drawn row's height, a column's edges, a letter
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
    nodes = symbol.topo_nodes()
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
    outputs = [(new[n.id], i) for n, i in symbol.output_entries()]
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
    keys = [(original[n.id].id, i) for n, i in internals.output_entries()]
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
    nodes = symbol.topo_nodes()
    params, aux = set(), set()
    uses: dict = {}
    for node in nodes:
        if node.op is None:
            continue
        # who reads each input: the node itself, or for a control-flow node the ops of its subgraphs (a weight
        # only a loop body reads is a parameter of the loop, counted once on its row)
        for (src, _), readers in zip(node.inputs, input_readers(node)):
            if src.op is None:
                for reader, k in readers:
                    slot = reader.input_names()[k]
                    if slot in PARAM_SLOTS:
                        params.add(src.id)
                    if k >= reader.num_args():
                        aux.add(src.id)
                    uses.setdefault(src.id, []).append(slot in tuple(reader.op.no_grad_inputs))
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


def _blocks(names: Sequence[str]) -> dict[str, str]:
    """``{op name: its block}`` for Gluon-style names (``densenet0_stage1_conv0_fwd``): an op's block is the
    longest ``_``-separated prefix of its name that at least ``BLOCK_MIN_OPS`` op names share, kept when no other
    block extends it (``densenet0_stage1``, not ``densenet0``). Empty when fewer than two such blocks exist (a
    graph without that structure)."""
    counts: dict[str, int] = {}
    prefixes = {}
    for name in names:
        parts = name.split("_")
        own = ["_".join(parts[:i]).rstrip("_") for i in range(len(parts) - 1, 0, -1)]
        prefixes[name] = [p for p in own if p]
        for p in set(prefixes[name]):
            counts[p] = counts.get(p, 0) + 1
    found = {name: next((p for p in own if counts[p] >= BLOCK_MIN_OPS), None) for name, own in prefixes.items()}
    used = {b for b in found.values() if b}
    leaves = {b for b in used if not any(o.startswith(b + "_") for o in used)}
    owned = {name: b for name, b in found.items() if b in leaves}
    return owned if len(leaves) >= 2 else {}


def _levels(ops: Sequence[str], edges: Sequence[tuple[str, str, str]]) -> dict[str, int]:
    """``{op: length of the longest chain of ops that ends at it}`` (0 for the first ops), over the drawn ops."""
    preds: dict[str, set[str]] = {n: set() for n in ops}
    succs: dict[str, list[str]] = {n: [] for n in ops}
    for consumer, producer, _ in edges:
        if consumer in preds and producer in preds and consumer != producer and producer not in preds[consumer]:
            preds[consumer].add(producer)
            succs[producer].append(consumer)
    waiting = {n: len(p) for n, p in preds.items()}
    ready = [n for n in reversed(ops) if not waiting[n]]
    level: dict[str, int] = {}
    while len(level) < len(ops):
        if not ready:  # a cycle (a collapsed block that is not contiguous): go on from its first op
            ready = [next(n for n in ops if n not in level)]
        n = ready.pop()
        if n in level:
            continue
        level[n] = 1 + max((level[p] for p in preds[n] if p in level), default=-1)
        for m in succs[n]:
            waiting[m] -= 1
            if not waiting[m]:
                ready.append(m)
    return level


def _auto_rows(d: _Drawing, levels: Mapping[str, int]) -> int:
    """Rows per column that make the wrapped drawing about as wide as tall: a row is about ``_ROW_INCHES`` tall,
    a column as wide as its wide rows (their boxes and the inputs drawn beside them, from the labels' lengths)
    and ``_COLUMN_MARGIN`` inches of edges and their labels."""
    depth = 1 + max(levels.values(), default=0)
    row = dict(levels)
    for consumer, producer, _ in d.edges:
        row.setdefault(producer, levels[consumer])
    widths = np.zeros(depth)
    for name, attr in d.items.items():
        if name in row:
            chars = max(len(line) for line in attr["label"].split("\n"))
            widths[row[name]] += max(float(attr.get("width", 1.3)), _CHAR_INCHES * chars) + 0.25
    column = _COLUMN_MARGIN + float(np.percentile(widths, 90))
    return max(WRAP_MIN_ROWS, int(np.ceil(np.sqrt(depth * column / _ROW_INCHES))))


class _Drawing:
    """The drawn graph before it becomes DOT: ``items`` (name -> graphviz attributes, label included, in drawing
    order), ``ops`` (the op items, drawn as boxes), ``kinds`` (op item -> op name) and ``edges`` (consumer,
    producer, label)."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, str]] = {}
        self.ops: list[str] = []
        self.kinds: dict[str, str] = {}
        self.edges: list[tuple[str, str, str]] = []


def _drawing(nodes, hidden, hide_weights, node_attr, shapes, dtypes) -> _Drawing:
    """MXNet's boxes, ovals and shape-labelled edges of ``nodes``."""
    d = _Drawing()
    for node in nodes:
        attr = dict(node_attr)
        if node.op is None:
            if node.name in hidden:
                if hide_weights:
                    continue
                attr.update(shape="oval", width="0.9", height="0.5", fixedsize="false", fillcolor="#eeeeee")
            else:
                attr.update(shape="oval", fillcolor=_COLORS[0])
            attr["label"] = node.name
        else:
            attr.update(label=_label(node), fillcolor=_color(node.op_name), tooltip=f"{node.name} ({node.op_name})")
            if node.name not in d.kinds:
                d.ops.append(node.name)
            d.kinds[node.name] = node.op_name
        d.items[node.name] = attr
    for node in nodes:
        if node.op is None:
            continue
        for src, k in node.inputs:
            if src.name not in d.items:
                continue
            label = ""
            s = None if shapes is None else shapes.get((src.id, k))
            if s is not None:
                label = _fmt_shape(s[1:])
            t = None if dtypes is None else dtypes.get((src.id, k))
            if t is not None:  # MXNet: "3x6x6(float32)"
                label += f"({np.dtype(t).name})"
            d.edges.append((node.name, src.name, label))
    return d


def _collapse(d: _Drawing, blocks: Mapping[str, str]) -> _Drawing:
    """``d`` with each block drawn as one 3-D box (its name, op count and commonest ops; the inputs named with
    its prefix that only it reads go inside it)."""
    rep = dict(blocks)
    readers: dict[str, set[str]] = {}
    for consumer, producer, _ in d.edges:
        if producer not in d.kinds:
            readers.setdefault(producer, set()).add(rep.get(consumer, consumer))
    for var, by in readers.items():  # a block's own parameters (its prefix, read by it alone) go inside it
        block = next(iter(by))
        if len(by) == 1 and block in set(blocks.values()) and var.startswith(block + "_"):
            rep[var] = block
    names = {b: b if b not in d.items else f"{b} (block)" for b in set(blocks.values())}
    out = _Drawing()
    for name, attr in d.items.items():
        if name not in rep:
            out.items[name] = attr
            if name in d.kinds:
                out.ops.append(name)
                out.kinds[name] = d.kinds[name]
        elif names[rep[name]] not in out.items:
            out.items[names[rep[name]]] = _block_attr(d, rep[name], [n for n in d.ops if blocks.get(n) == rep[name]])
            out.ops.append(names[rep[name]])
            out.kinds[names[rep[name]]] = "block"
    seen = set()
    for consumer, producer, label in d.edges:
        tail, head = (names[rep[n]] if n in rep else n for n in (consumer, producer))
        if tail != head and (tail, head) not in seen:
            seen.add((tail, head))
            out.edges.append((tail, head, label))
    return out


def _block_attr(d: _Drawing, block: str, members: Sequence[str]) -> dict[str, str]:
    kinds: dict[str, int] = {}
    for n in members:
        kinds[d.kinds[n]] = kinds.get(d.kinds[n], 0) + 1
    common = sorted(kinds.items(), key=lambda kv: -kv[1])
    attr = dict(d.items[members[0]])
    attr.update(
        shape="box3d",
        label=f"{block}\n{len(members)} ops: " + ", ".join(f"{c} {k}" for k, c in common[:3]),
        fillcolor=_color(common[0][0]),
        tooltip=f"{block}: " + ", ".join(f"{c} {k}" for k, c in common),
    )
    return attr


def _layout(
    d: _Drawing, blocks: Mapping[str, str], cluster: bool | None, wrap: int | None, hide_weights: bool
) -> tuple[bool, int, dict[str, int]]:
    """Whether to frame the blocks, the rows per column (0: one column) and the levels of the ops, for the
    ``cluster`` and ``wrap`` of plot_network (None: automatic). Frames around wrapped columns with the weights
    drawn make graphviz's ``dot`` (2.43) fail ("trouble in init_rank"): frames are then left out by default,
    ``cluster=True`` draws one column, and with ``wrap`` too it is refused."""
    if wrap is not None and (isinstance(wrap, bool) or not isinstance(wrap, (int, np.integer)) or wrap < 0):
        raise ValueError(f"plot_network: wrap must be an int >= 0 (ops per column; 0: no wrapping), got {wrap!r}")
    if cluster is not None and not isinstance(cluster, bool):
        raise TypeError(f"plot_network: cluster must be True, False or None, got {type(cluster).__name__}")
    large = len(d.ops) > LARGE_GRAPH
    levels = _levels(d.ops, d.edges)
    framed_weights = bool(cluster) and not hide_weights  # frames with weights: one column (see above)
    rows = (_auto_rows(d, levels) if large and not framed_weights else 0) if wrap is None else int(wrap)
    if rows and 1 + max(levels.values(), default=0) <= rows:
        rows = 0  # short enough for one column
    if rows and framed_weights:
        raise ValueError(
            "plot_network: cluster=True with hide_weights=False takes no wrap: graphviz cannot lay out frames "
            "around wrapped columns with the weights drawn"
        )
    if cluster is None:
        cluster = large and not (rows and not hide_weights)
    return cluster and bool(blocks), rows, levels


def plot_network(
    symbol: Symbol,
    title: str = "plot",
    save_format: str = "pdf",
    shape: dict[str, ShapeLike] | None = None,
    dtype: dict[str, npt.DTypeLike] | None = None,
    node_attrs: Mapping[str, str] = {},  # noqa: B006 (MXNet's)
    hide_weights: bool = True,
    *,
    cluster: bool | None = None,
    wrap: int | None = None,
    collapse: bool = False,
) -> graphviz.Digraph:
    """The graph of ``symbol`` as a ``graphviz.Digraph`` (MXNet's ``plot_network`` look).

    Ops are boxes coloured by kind (convolution/dense, activation, normalisation, pooling, shape ops, softmax,
    the rest), inputs are ovals; an edge carries the shape (batch axis left out) of the value it carries when
    the shapes are known.

    Two variables (or nodes) of one name are drawn as one node, with MXNet's RuntimeWarning naming them.

    Large graphs (more than ``LARGE_GRAPH`` = 80 drawn ops, e.g. DenseNet-121's 427) stay readable: MXNet's single
    column of boxes would be tens of thousands of pixels tall (graphviz then shrinks a bitmap to at most 32 767
    pixels a side). By default such a graph is wrapped into side-by-side columns, read as a snake (the first
    column upwards from the data, as MXNet draws, the next downwards, ...), and the ops of each block of a
    Gluon export (the name prefix shared by its ops: ``densenet0_stage1`` for ``densenet0_stage1_conv0_fwd``)
    sit in a labelled frame (a graphviz cluster; not with ``hide_weights=False``, which graphviz's ``dot``
    cannot lay out framed and wrapped). ``collapse=True`` draws each such block as one box instead. Graphs up
    to ``LARGE_GRAPH`` ops keep MXNet's look unless asked.

    The positional arguments are MXNet's, in its order; the keyword-only ones (``cluster``, ``wrap``,
    ``collapse``) are symgrad's, for large graphs.

    Args:
        symbol: the Symbol.
        title: the graph's name.
        save_format: the Digraph's format (``render``/``pipe`` use it): "pdf", "svg", "png", ...
        shape: ``{input name: shape tuple}``; None: the ``__shape__`` attributes when they determine every
            shape, else no shapes on the edges. Shapes that do not infer: ValueError.
        dtype: ``{input name: dtype}``: each edge also carries its dtype (``3x6x6(float32)``); dtypes that do
            not infer: ValueError.
        node_attrs: graphviz node attributes over the defaults (box, 1.3 x 0.8034, filled).
        hide_weights: leave parameter inputs (weights, biases, BatchNorm's gamma/beta and moving statistics) out.
        cluster: (keyword-only) frame the ops of each name-prefix block (a ``cluster_*`` subgraph labelled with
            the prefix); None: when the graph has more than ``LARGE_GRAPH`` ops and such blocks (and the weights are
            hidden). With ``hide_weights=False``: one column (``wrap`` > 0 too: ValueError).
        wrap: (keyword-only) at most this many ops along a chain per column (0: one column, MXNet's layout);
            None: for a graph of more than ``LARGE_GRAPH`` ops, about the rows that make the drawing as wide as tall.
        collapse: (keyword-only) draw each name-prefix block as one 3-D box (name, op count, commonest ops; edges
            between blocks carry the shapes) instead of its ops: a one-page overview.

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
    repeated = _repeated(symbol.topo_nodes())
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
    d = _drawing(nodes, hidden, hide_weights, node_attr, shapes, dtypes)
    blocks = _blocks(d.ops)
    if collapse:
        d, blocks = _collapse(d, blocks), {}
    cluster, rows, levels = _layout(d, blocks, cluster, wrap, hide_weights)
    dot = Digraph(name=title, format=save_format)
    _emit(dot, d, blocks if cluster else {}, rows, levels)
    return dot


def _emit(dot, d: _Drawing, blocks: Mapping[str, str], rows: int, levels: Mapping[str, int]) -> None:
    """Write ``d`` into ``dot``: frames for ``blocks`` (one per block and column) and, with ``rows``, the
    columns of the snake (rows aligned across columns: ``newrank`` and ``rank=same`` groups)."""

    def col(name):
        return levels[name] // rows if rows else 0

    owner, levels = dict(blocks), dict(levels)
    for consumer, producer, _ in d.edges:  # an input drawn with the block that reads it, when it has its prefix
        if producer not in d.kinds and consumer in blocks and producer.startswith(blocks[consumer] + "_"):
            owner.setdefault(producer, blocks[consumer])
            levels.setdefault(producer, levels[consumer])
    frames: dict[tuple[str, int], list[str]] = {}
    for name, attr in d.items.items():
        if name in owner:
            frames.setdefault((owner[name], col(name)), []).append(name)
        else:
            dot.node(name=name, **attr)
    parts: dict[str, list[int]] = {}
    for b, c in frames:
        parts.setdefault(b, []).append(c)
    for i, ((b, c), members) in enumerate(frames.items()):
        with dot.subgraph(name=f"cluster_{i}") as sub:
            part = f" ({parts[b].index(c) + 1}/{len(parts[b])})" if len(parts[b]) > 1 else ""
            sub.attr(label=b + part, style="rounded,dashed", color="#888888", fontcolor="#555555")
            for name in members:
                sub.node(name=name, **d.items[name])
    if rows:
        _snake(dot, d, rows, levels)
    else:
        for consumer, producer, label in d.edges:
            dot.edge(tail_name=consumer, head_name=producer, dir="back", arrowtail="open", label=label)


def _snake(dot, d: _Drawing, rows: int, levels: Mapping[str, int]) -> None:
    """The ops in columns of ``rows`` levels, alternately upwards (MXNet's direction) and downwards; an edge
    that crosses into the next column does not rank its ends."""
    dot.attr(newrank="true")
    col = {n: levels[n] // rows for n in d.ops}
    beside: dict[str, str] = {}  # an input drawn: beside its first reader (graphviz fails to rank free nodes in frames)
    for consumer, producer, _ in d.edges:
        if producer not in col:
            beside.setdefault(producer, consumer)
    by_rank: dict[int, list[str]] = {}
    for n in d.items:
        op = beside.get(n, n)
        if op in col:
            r = levels[op] % rows
            by_rank.setdefault(rows - 1 - r if col[op] % 2 == 0 else r, []).append(n)
    for rank in sorted(by_rank):
        with dot.subgraph() as sub:
            sub.attr(rank="same")
            for n in by_rank[rank]:
                sub.node(n)
    for consumer, producer, label in d.edges:
        c = col[consumer]
        if producer in col and col[producer] != c:
            dot.edge(consumer, producer, dir="back", arrowtail="open", label=label, constraint="false")
        elif c % 2 == 0:
            dot.edge(consumer, producer, dir="back", arrowtail="open", label=label)
        else:  # a downward column: the producer ranks above its consumer
            dot.edge(producer, consumer, dir="forward", arrowhead="open", label=label)
    _headers(dot, d, rows, levels)


def _headers(dot, d: _Drawing, rows: int, levels: Mapping[str, int]) -> None:
    """An invisible node above each column, the headers chained left to right, each tied to its column's top
    op: graphviz keeps the columns (frames included) in reading order."""
    first: dict[int, str] = {}
    for n in d.ops:
        first.setdefault(levels[n], n)
    last = max(first)
    names = []
    for c in range(last // rows + 1):
        top = first[min(c * rows + rows - 1, last)] if c % 2 == 0 else first[c * rows]
        name = f"__column{c}__"
        while name in d.items:
            name = f"_{name}_"
        names.append(name)
        dot.node(name, label="", shape="point", width="0", height="0", style="invis")
        dot.edge(name, top, style="invis", weight="10")
    with dot.subgraph() as sub:
        sub.attr(rank="same")
        for a, b in zip(names, names[1:]):
            sub.edge(a, b, style="invis")


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


def png_size(path: StrPath) -> tuple[int, int]:
    """``(width, height)`` in pixels of the PNG file at ``path`` (from its header); ValueError when it is not
    a PNG file."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"png_size: {path} is not a PNG file")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
