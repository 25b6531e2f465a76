"""MXNet model files both ways: symbol JSON, ``.params`` (MXNet's binary NDArray list) and ``.npz``.

Symbol JSON is MXNet 1.x's (NNVM) layout::

    {"nodes": [{"op": "null", "name": "data", "inputs": []},
               {"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "4"},
                "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}, ...],
     "arg_nodes": [0, 1, 2], "node_row_ptr": [0, 1, 2, 3, 4], "heads": [[3, 0, 0]],
     "attrs": {"mxnet_version": ["int", 10901]}}

Older files (MXNet 0.x) spell ``attrs`` as ``param``/``attr``, have two-element input entries and
may leave auxiliary-state inputs out; they are upgraded as MXNet does. Auxiliary states are plain
variables whose role comes from the input slot they feed. Symbols pickle through their JSON.

Loading is data only: attribute strings go through the op registry's typed parsers (never eval),
nothing is unpickled, and every size a file declares is checked against the bytes it holds before
anything is allocated. Every problem is one ``SerializationError`` (a ``ValueError``) naming the
node or the byte offset.

>>> import symgrad as sg
>>> net = sg.sym.FullyConnected(sg.sym.Variable("data"), num_hidden=4, name="fc")
>>> again = sg.sym.load_json(net.tojson())
>>> again.list_arguments(), again.attr("num_hidden")
(['data', 'fc_weight', 'fc_bias'], '4')
"""

from __future__ import annotations

import io
import json
import math
import os
import struct
import warnings
import zipfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from . import opdef, util
from .base import ParamError, SerializationError, ShapeError, StrPath, SymgradError
from .context import Array
from .graph import SUBGRAPHS, Node, check_unique_names, subgraphs, topo_order
from .opdef import param_to_str, parse_dtype_attr
from .symbol import Symbol

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "MXNET_VERSION",
    "tojson",
    "save",
    "load",
    "load_json",
    "fromjson",
    "cast_pinned_dtypes",
    "nd_save",
    "nd_load",
    "nd_load_frombuffer",
    "save_params",
    "load_params",
]

#: the version symgrad writes into ``attrs.mxnet_version`` (MXNet 1.9.1)
MXNET_VERSION = 10901
_LEGACY_VERSION = 800  # files without a version are MXNet 0.8
_HIDDEN_KEYS = ("ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage")
#: longest operator-parameter string parsed (``ast.literal_eval`` work stays bounded)
MAX_PARAM_CHARS = 1 << 16
_MAX_SHAPE_CHARS = 1024
# initializers MXNet 0.9.4+ attaches to input variables (FSetInputVarAttrOnCompose), added to older files
_INPUT_INITS = {
    "BatchNorm": {3: '["zero", {}]', 4: '["one", {}]'},
    "LeakyReLU": {1: '["Constant", {"value": 0.25}]'},
    "UpSampling": {1: '["bilinear", {}]'},
}
_MAX_NDIM = 32


def _open_error(fname, exc):
    return SerializationError(f"cannot read {os.fspath(fname)!r}: {exc.strerror or exc}")


# -- symbol JSON: writing -------------------------------------------------------------------------


def _negative_axis(axis) -> bool:
    return any(a < 0 for a in ((axis,) if isinstance(axis, int) else tuple(axis or ())))


def _mxnet_axes(sym: Symbol, nodes, unresolved: list[str]) -> dict[int, str]:
    """The ``axis`` attribute to write for each ``reverse``/``flip`` node of ``nodes`` given a negative axis.

    MXNet 1.9.1 accepts such a symbol but refuses to bind it (its ReverseShape wants 0 <= axis < ndim), so the
    axis is written as ``axis mod ndim`` wherever shape inference from the variables' ``__shape__`` attributes
    knows the input's rank; the names of the nodes where it does not are appended to ``unresolved`` (their
    axis stays as given).
    """
    todo = [n for n in nodes if n.op_name == "reverse" and _negative_axis(n.params.get("axis"))]
    if not todo:
        return {}
    try:
        shapes = sym.partial_shape_map((), {})[1]
    except SymgradError:  # inconsistent __shape__ attributes: no rank is trusted
        shapes = {}
    fixed = {}
    for node in todo:
        src, j = node.inputs[0]
        shape = shapes.get((src.id, j))
        if shape is None:
            unresolved.append(node.name)
            continue
        # inference ran reverse's rule on this rank, so every axis is in [-ndim, ndim): a % ndim is its index
        axis, ndim = node.params["axis"], len(shape)
        fixed[node.id] = param_to_str(axis % ndim if isinstance(axis, int) else tuple(a % ndim for a in axis))
    return fixed


def _warn_negative_axes(unresolved: list[str]) -> None:
    if unresolved:
        warnings.warn(
            f"tojson: reverse/flip node(s) {unresolved} keep a negative axis, which MXNet 1.9.1 refuses to bind: "
            "the input's rank is unknown when saving. Give the input variables their shapes "
            "(Variable(..., shape=...)) or pass a non-negative axis to write a file MXNet binds.",
            stacklevel=5,  # the caller of Symbol.tojson
        )


def _to_doc(sym: Symbol, unresolved: list[str] | None = None, warn: bool = True) -> dict[str, Any]:
    """``sym``'s JSON document; names of reverse nodes whose negative axis stays negative go to ``unresolved``
    (a warning when the caller gives none and ``warn``)."""
    own = unresolved is None and warn
    unresolved = [] if unresolved is None else unresolved
    nodes = topo_order(sym.output_entries())
    check_unique_names(nodes)
    mx_axes = _mxnet_axes(sym, nodes, unresolved)
    index = {n.id: i for i, n in enumerate(nodes)}
    out_nodes, arg_nodes, row_ptr = [], [], [0]
    for i, node in enumerate(nodes):
        entry: dict[str, Any] = {"op": node.op_name, "name": node.name}
        attrs = {}
        for key in sorted(node.attrs):
            value = node.attrs[key]
            # MXNet stores AttrScope(ctx_group=...) & co. as __ctx_group__ and refuses the plain key
            value = value if isinstance(value, str) else param_to_str(value)
            attrs[f"__{key}__" if key in _HIDDEN_KEYS else key] = value
        if node.id in mx_axes:
            attrs["axis"] = mx_axes[node.id]
        if attrs:
            entry["attrs"] = attrs
        k = node.num_args()
        # MXNet marks inputs its op mutates (auxiliary states) with version 1
        entry["inputs"] = [
            [index[src.id], j, int(slot >= k and src.op is None)] for slot, (src, j) in enumerate(node.inputs)
        ]
        if subgraphs(node):  # a control-flow node's subgraphs, each a symbol document without graph attrs
            entry["subgraphs"] = [
                {k: v for k, v in _to_doc(g, unresolved).items() if k != "attrs"} for g in subgraphs(node)
            ]
        out_nodes.append(entry)
        if node.op is None:
            arg_nodes.append(i)
        row_ptr.append(row_ptr[-1] + node.num_outputs)
    heads = [[index[n.id], j, 0] for n, j in sym.output_entries()]
    if own:
        _warn_negative_axes(unresolved)
    return {
        "nodes": out_nodes,
        "arg_nodes": arg_nodes,
        "node_row_ptr": row_ptr,
        "heads": heads,
        "attrs": _graph_attrs(),
    }


def _graph_attrs() -> dict:
    """The document's graph attributes: MXNet's version, and ``is_np_shape`` when the symbol is saved with
    NumPy shape semantics on (``symgrad.util``): then a 0 in a ``__shape__`` is a zero size, not unknown."""
    np_mark = {"is_np_shape": ["int", 1]} if util.is_np_shape() else {}
    return {**np_mark, "mxnet_version": ["int", MXNET_VERSION]}


def _legacy_shapes_as_np(doc, built) -> None:
    """Loading a file saved without the ``is_np_shape`` marker while NumPy shape semantics are on: its
    variables' ``__shape__`` 0 dimensions meant unknown, which now reads -1 (as MXNet converts them)."""
    attrs = doc.get("attrs")
    if not util.is_np_shape() or (isinstance(attrs, dict) and "is_np_shape" in attrs):
        return
    for node in built.values():
        raw = node.attrs.get("__shape__") if node.op is None else None
        if raw is not None:
            value = opdef.literal(raw.strip())
            dims = (value,) if isinstance(value, int) else tuple(value)
            node.attrs["__shape__"] = param_to_str(tuple(-1 if d == 0 else d for d in dims))


def _dump_str(s: str, where: str) -> str:
    # MXNet's JSON reader (dmlc) knows only the escapes \" \\ \n \r \t and reads other text verbatim
    bad = next((c for c in s if ord(c) < 0x20 and c not in "\n\r\t"), None)
    if bad is not None:
        raise SerializationError(f"{where}: {s!r} holds control character {bad!r}, which MXNet's JSON cannot store")
    return json.dumps(s, ensure_ascii=False)


def tojson(sym: Symbol, warn: bool = True) -> str:
    """``sym`` as MXNet 1.x symbol JSON text (``Symbol.tojson()``); MXNet 1.9.1 loads it. ``warn=False``: no
    warning about what MXNet would refuse to bind (symgrad's own round trips: pickling, the checkers)."""
    doc = _to_doc(sym, warn=warn)
    lines = ["{", '  "nodes": [']
    for i, entry in enumerate(doc["nodes"]):
        where = f"node {i} {entry['name']!r}"
        parts = [f'      "op": {_dump_str(entry["op"], where)}', f'      "name": {_dump_str(entry["name"], where)}']
        if "attrs" in entry:
            items = [f"        {_dump_str(k, where)}: {_dump_str(v, where)}" for k, v in entry["attrs"].items()]
            parts.append('      "attrs": {\n' + ",\n".join(items) + "\n      }")
        parts.append(f'      "inputs": {json.dumps(entry["inputs"])}')
        if "subgraphs" in entry:
            parts.append(f'      "subgraphs": {json.dumps(entry["subgraphs"], ensure_ascii=False)}')
        sep = "," if i + 1 < len(doc["nodes"]) else ""
        lines.append("    {\n" + ",\n".join(parts) + "\n    }" + sep)
    lines.append("  ],")
    for key in ("arg_nodes", "node_row_ptr", "heads", "attrs"):
        lines.append(f'  "{key}": {json.dumps(doc[key])}' + ("," if key != "attrs" else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def save(sym: Symbol, fname: StrPath) -> None:
    """Write ``sym``'s JSON to ``fname`` (``Symbol.save``)."""
    text = tojson(sym)
    with open(fname, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


# -- symbol JSON: reading -------------------------------------------------------------------------


class _Err:
    """Builds errors that say where in the file the problem is."""

    def __init__(self, source: str):
        self.source = source

    def __call__(self, msg: str) -> SerializationError:
        return SerializationError(f"{self.source}: {msg}")


def _check_type(value, kind, what, err):
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = {dict: "an object", list: "a list", str: "a string", int: "an integer"}
        raise err(f"{what} must be {names.get(kind, kind.__name__)}, got {type(value).__name__} {_short(value)}")
    return value


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _entry(raw, n_nodes, what, err) -> tuple[int, int]:
    if not isinstance(raw, list) or len(raw) not in (2, 3):
        raise err(f"{what} must be a list [node, output] or [node, output, version], got {_short(raw)}")
    for v in raw:
        if type(v) is not int:  # the message (a repr of the entry) only when there is one to raise
            _check_type(v, int, f"{what} entry {_short(raw)}", err)
    node, out = raw[0], raw[1]
    if not 0 <= node < n_nodes:
        raise err(f"{what} refers to node {node}, but the file has nodes 0..{n_nodes - 1}")
    if out < 0:
        raise err(f"{what} asks for output {out} of node {node}")
    return node, out


def _str_dict(raw, what, err) -> dict:
    _check_type(raw, dict, what, err)
    for k, v in raw.items():
        if not isinstance(v, str):
            raise err(f"{what}[{k!r}] must be a string, got {type(v).__name__} {_short(v)}")
    return raw


def _version(doc, err) -> int:
    attrs = doc.get("attrs", {})
    _check_type(attrs, dict, "graph 'attrs'", err)
    if "is_np_shape" in attrs:
        flag = attrs["is_np_shape"]
        if not (isinstance(flag, list) and len(flag) == 2 and flag[1] in (0, False)):
            raise err(
                "the symbol was saved with NumPy shape semantics (is_np_shape); "
                "only MXNet's classic (mx.sym) symbols are supported"
            )
    if "mxnet_version" not in attrs:
        return _LEGACY_VERSION
    v = attrs["mxnet_version"]
    if not (
        isinstance(v, list) and len(v) == 2 and v[0] == "int" and isinstance(v[1], int) and not isinstance(v[1], bool)
    ):
        raise err(f"graph attribute 'mxnet_version' must be [\"int\", N], got {_short(v)}")
    return v[1]


def _node_attrs(raw, where, err) -> dict:
    # NNVM's reader (MXNet 1.9.1, checked): "attr" (0.x) and "attrs" fill one field, so the one later in the
    # file wins whole; "param" (0.x) is read apart and merged under it
    attrs = _str_dict(raw["param"], f"{where} 'param'", err) if "param" in raw else {}
    spelled = [key for key in raw if key in ("attr", "attrs")]
    if spelled:
        attrs.update(_str_dict(raw[spelled[-1]], f"{where} {spelled[-1]!r}", err))
    return attrs


def _upgrade_hidden(attrs: dict) -> tuple[dict, dict]:
    """MXNet 0.x wrote ``ctx_group``/``lr_mult``... as plain keys, and ``weight_lr_mult`` on the op
    for its ``weight`` input; MXNet 1.x (``UpgradeJSON_FixParsing``) makes them ``__lr_mult__``.
    Returns the node's attributes and ``{input name: {key: value}}`` for its input variables."""
    out: dict[str, str]
    for_inputs: dict[str, dict[str, str]]
    out, for_inputs = {}, {}
    for key, value in attrs.items():
        for hk in _HIDDEN_KEYS:
            if key == hk:
                out[f"__{hk}__"] = value
                break
            if key.endswith("_" + hk) and len(key) > len(hk) + 1:
                for_inputs.setdefault(key[: -len(hk) - 1], {})[f"__{hk}__"] = value
                break
        else:
            out[key] = value
    return out, for_inputs


def _check_var_attrs(attrs: dict, where: str, err) -> None:
    raw = attrs.get("__shape__")
    if raw is not None:
        if len(raw) > _MAX_SHAPE_CHARS:
            raise err(f"{where}: __shape__ attribute of {len(raw)} characters is not a shape")
        value = opdef.literal(raw.strip())
        if isinstance(value, int) and not isinstance(value, bool):
            value = (value,)
        if (
            not isinstance(value, (tuple, list))
            or len(value) > _MAX_NDIM
            or not all(isinstance(d, int) and not isinstance(d, bool) and -1 <= d < 2**63 for d in value)
        ):
            raise err(
                f"{where}: __shape__ attribute {_short(raw)} is not a tuple of at most {_MAX_NDIM} "
                "dimensions, each non-negative or -1 (unknown)"
            )
    raw = attrs.get("__dtype__")
    if raw is not None:
        try:
            parse_dtype_attr(raw)
        except TypeError as exc:
            raise err(f"{where}: {exc}") from None


def _topo_indices(doc_nodes, inputs_of, heads, err) -> list[int]:
    """Node indices reachable from the heads, inputs first; a cycle is an error naming it."""
    state = [0] * len(doc_nodes)  # 0 new, 1 on the DFS stack, 2 done
    order = []
    for h, _ in heads:
        if state[h]:
            continue
        state[h] = 1
        stack = [(h, iter(inputs_of[h]))]
        while stack:
            cur, it = stack[-1]
            for src, _ in it:
                if state[src] == 1:
                    path = [i for i, _ in stack]
                    cycle = path[path.index(src) :] + [src]
                    names = " -> ".join(f"{i} {doc_nodes[i].get('name')!r}" for i in cycle)
                    raise err(f"the graph has a cycle: node {names}")
                if state[src] == 0:
                    state[src] = 1
                    stack.append((src, iter(inputs_of[src])))
                    break
            else:
                stack.pop()
                state[cur] = 2
                order.append(cur)
    return order


def _build_op_node(op, name, attrs, inputs, version, where, err):
    """The node of one operator entry."""
    attrs, params_kw, hidden_for_inputs = _split_attrs(op, attrs, version, where, err)
    params, names, n_out = _parse_node(op, name, params_kw, len(inputs), where, err)
    inputs = _node_inputs(op, name, attrs, inputs, names, version, where, err)
    for iname, extra in hidden_for_inputs.items():
        if iname in names:
            src = inputs[names.index(iname)][0]
            if src.op is None:
                src.attrs.update(extra)
                continue
        attrs.update({f"{iname}_{k.strip('_')}": v for k, v in extra.items()})
    return Node(op, name, params, attrs, inputs, n_out)


def _is_hidden(key) -> bool:
    return key.startswith("__") and key.endswith("__")


def _split_attrs(op, attrs, version, where, err):
    """``(attrs, parameter strings, hidden attributes of inputs)`` of an operator entry; an older file's plain
    hidden keys (``lr_mult``) are upgraded first, a current file's are never parameters."""
    params_kw, hidden_for_inputs = {}, {}
    if version < MXNET_VERSION:
        attrs, hidden_for_inputs = _upgrade_hidden(attrs)
    else:
        attrs = {f"__{k}__" if k in _HIDDEN_KEYS else k: v for k, v in attrs.items()}
    for key, value in attrs.items():
        if key in op.params or (op.extra_params and not _is_hidden(key)):
            if len(value) > MAX_PARAM_CHARS:
                raise err(f"{where}: parameter {key!r} is {len(value)} characters long (limit {MAX_PARAM_CHARS})")
            params_kw[key] = value
        elif not _is_hidden(key):
            raise err(f"{where}: {key!r} is not a parameter of {op.name}; parameters: {sorted(op.params) or 'none'}")
    return attrs, params_kw, hidden_for_inputs


def _parse_node(op, name, params_kw, n_inputs, where, err):
    """``(params, input and aux names, number of outputs)`` of an operator entry; the op's errors name the entry."""
    try:
        if op.variadic and op.variadic in op.params and op.variadic not in params_kw:
            params_kw[op.variadic] = str(n_inputs)
        # (parsed once per distinct parameter set: a model repeats a few, DenseNet-121's 120 BatchNorms share one)
        params = op.parse_params_and_strings(params_kw, where)[0]
        if op.prepare is not None:
            params = op.prepare(params, name)
        names = op.list_inputs(params) + op.list_aux(params)
        n_out = op.n_outputs(params)
    except (ParamError, ShapeError, TypeError, ValueError, KeyError, IndexError) as exc:
        text = str(exc)  # the parameter parser names the entry itself
        raise err(text if text.startswith(where) else f"{where}: {text}") from exc
    if not isinstance(n_out, int) or n_out < 1:
        raise err(f"{where}: operator {op.name} reports {n_out!r} outputs")
    return params, names, n_out


def _node_inputs(op, name, attrs, inputs, names, version, where, err) -> list:
    """The entry's inputs, checked against ``names``; an MXNet 0.8 file's missing auxiliary states are added and
    an MXNet < 0.9.4 file's inputs get the ``__init__`` MXNet's upgrader gives them."""
    inputs = list(inputs)
    if len(inputs) < len(names) and version < 900:
        for iname in names[len(inputs) :]:
            inputs.append((Node(None, f"{name}_{iname}", {}, dict(attrs), (), 1), 0))
    if len(inputs) != len(names):
        raise err(f"{where}: has {len(inputs)} inputs, {op.name} takes {len(names)} {names}")
    for slot, (src, j) in enumerate(inputs):
        if j >= src.num_outputs:
            raise err(
                f"{where}: input {slot} ({names[slot]!r}) asks for output {j} of {src.op_name} "
                f"{src.name!r}, which has {src.num_outputs}"
            )
    if version < 904:
        for slot, init in _INPUT_INITS.get(op.name, {}).items():
            if slot < len(inputs) and inputs[slot][0].op is None:
                inputs[slot][0].attrs.setdefault("__init__", init)
    return inputs


def _from_doc(doc, err, version=None):
    """The Symbol of a symbol document; ``version``: the enclosing file's, for a subgraph (which has none)."""
    file_version, doc_nodes, heads = _check_doc(doc, err)
    version = file_version if version is None else version
    entries = [_read_node(i, raw, len(doc_nodes), err) for i, raw in enumerate(doc_nodes)]
    built = _build_nodes(doc_nodes, entries, heads, version, err)
    _legacy_shapes_as_np(doc, built)
    outputs = []
    for k, (h, j) in enumerate(heads):
        node = built[h]
        if j >= node.num_outputs:
            raise err(f"head {k} asks for output {j} of node {h} {node.name!r}, which has {node.num_outputs}")
        outputs.append((node, j))
    _check_variables(built, outputs, err)
    return Symbol(outputs)


def _check_doc(doc, err):
    """``(version, nodes, heads)`` of a symbol document, its top level checked."""
    _check_type(doc, dict, "the top level", err)
    for key in ("nodes", "heads"):
        if key not in doc:
            raise err(f"missing {key!r}; this is not an MXNet symbol file")
    version = _version(doc, err)
    doc_nodes = _check_type(doc["nodes"], list, "'nodes'", err)
    n = len(doc_nodes)
    if n == 0:
        raise err("'nodes' is empty")
    for key in ("arg_nodes", "node_row_ptr"):
        if key in doc:
            for v in _check_type(doc[key], list, repr(key), err):
                _check_type(v, int, f"an entry of {key!r}", err)
    heads = [_entry(h, n, f"head {k}", err) for k, h in enumerate(_check_type(doc["heads"], list, "'heads'", err))]
    if not heads:
        raise err("'heads' is empty: the symbol has no outputs")
    return version, doc_nodes, heads


def _read_node(i, raw, n, err):
    """``(op or None for a variable, input entries, name, attributes)`` of node ``i``, checked."""
    _check_type(raw, dict, f"node {i}", err)
    for key in ("op", "name", "inputs"):
        if key not in raw:
            raise err(f"node {i} has no {key!r}")
    opname = _check_type(raw["op"], str, f"node {i} 'op'", err)
    name = _check_type(raw["name"], str, f"node {i} 'name'", err)
    where = f"node {i} ({opname} {name!r})"
    ins = [
        _entry(e, n, f"{where} input {k}", err)
        for k, e in enumerate(_check_type(raw["inputs"], list, f"{where} 'inputs'", err))
    ]
    if opname == "null":
        op = None
        if ins:
            raise err(f"{where}: a variable has no inputs, got {len(ins)}")
        if not name:
            raise err(f"{where}: a variable needs a non-empty name")
    else:
        try:
            op = opdef.get_op(opname)
        except ParamError:
            raise err(f"{where}: {_unknown_op_text(opname)}") from None
    wanted = getattr(op, "num_subgraphs", 0) if op is not None else 0
    given = _check_type(raw["subgraphs"], list, f"{where} 'subgraphs'", err) if "subgraphs" in raw else []
    if len(given) != wanted:
        raise err(f"{where}: {opname} holds {wanted} subgraphs, the file gives {len(given)}")
    return op, ins, name, _node_attrs(raw, where, err)


def _unknown_op_text(opname) -> str:
    """Why ``opname`` does not load: unknown, or an op of MXNet 2's NumPy front end that symgrad has no alias for."""
    text = f"unknown operator {opname!r}"
    if not opname.startswith(("_np_", "_npx_", "_npi_")):
        return text
    return (
        f"{text}: it is an op of MXNet 2's NumPy front end (mx.np / mx.npx), which symgrad does not support "
        "(it knows only a few of its names, as aliases); symgrad reads MXNet 1.x symbol files: export the model "
        "from MXNet 1.x, or build it with the legacy mx.sym API"
    )


def _build_nodes(doc_nodes, entries, heads, version, err) -> dict:
    """``{node index: Node}``, built inputs first."""
    inputs_of = [ins for _, ins, _, _ in entries]
    built: dict[int, Node] = {}
    for i in _topo_indices(doc_nodes, inputs_of, heads, err):
        op, ins, name, attrs = entries[i]
        where = f"node {i} ({doc_nodes[i]['op']} {name!r})"
        if op is None:
            if version < MXNET_VERSION:
                attrs = _upgrade_hidden(attrs)[0]
            _check_var_attrs(attrs, where, err)
            built[i] = Node(None, name, {}, dict(attrs), (), 1)
        else:
            inputs = [(built[s], j) for s, j in ins]
            built[i] = _with_subgraphs(
                _build_op_node(op, name, dict(attrs), inputs, version, where, err), doc_nodes[i], version, where, err
            )
    return built


def _with_subgraphs(node: Node, raw: dict, version: int, where: str, err) -> Node:
    """``node`` holding the subgraphs of its entry (``"subgraphs"``: symbol documents), read recursively."""
    if "subgraphs" not in raw:
        return node
    sub_err = _Err(f"{err.source}: {where} subgraph")
    subs = tuple(_from_doc(_check_type(g, dict, f"{where} subgraph", err), sub_err, version) for g in raw["subgraphs"])
    params = {**node.params, SUBGRAPHS: subs}
    return Node(node.op, node.name, params, node.attrs, node.inputs, node.num_outputs)


def _check_variables(built, outputs, err) -> None:
    """Variable names are unique, also against the auxiliary states an MXNet 0.8 file's upgrade added."""
    variables: dict[str, int] = {}
    for i, node in built.items():
        if node.op is None:
            if node.name in variables:
                raise err(f"nodes {variables[node.name]} and {i} are two variables named {node.name!r}")
            variables[node.name] = i
    for node in topo_order(outputs):
        if node.op is None and node.name in variables and built[variables[node.name]] is not node:
            raise err(f"the auxiliary state added for an MXNet 0.8 file clashes with variable {node.name!r}")


def load_json(
    text: str | bytes | bytearray | memoryview, source: str = "symbol JSON", *, dtype: npt.DTypeLike | None = None
) -> Symbol:
    """A Symbol from MXNet symbol JSON text (``mx.sym.load_json``); ``bytes`` must be UTF-8.

    ``dtype`` (symgrad's keyword): recast the file's pinned dtypes, every floating ``__dtype__`` attribute of its
    variables, to this float dtype (``cast_pinned_dtypes``).
    """
    code = None if dtype is None else _pin_code(dtype, "load_json")
    err = _Err(source)
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise err(f"not UTF-8 text (byte offset {exc.start})") from None
    if not isinstance(text, str):
        raise TypeError(f"load_json: expected JSON text (str or bytes), got {type(text).__name__}")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise err(
            f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} (character offset {exc.pos})"
        ) from None
    except RecursionError:
        raise err("not a symbol file: JSON nested too deeply") from None
    try:
        sym = _from_doc(doc, err)
    except RecursionError:  # an operator's parameter parser on a pathological value
        raise err("a value is nested too deeply") from None
    return sym if code is None else _repin(sym, code)


fromjson = load_json


def load(fname: StrPath, *, dtype: npt.DTypeLike | None = None) -> Symbol:
    """A Symbol from an MXNet symbol JSON file (``mx.sym.load``), e.g. ``NAME-symbol.json``.

    ``dtype`` (symgrad's keyword): recast the file's pinned dtypes to this float dtype (``cast_pinned_dtypes``).
    A Gluon export pins float32 on every parameter, so ``load(fname, dtype="float64")`` is what binds it in
    float64: ``simple_bind(ctx, data=shape)`` then infers float64 for the data too.
    """
    code = None if dtype is None else _pin_code(dtype, "load")
    try:
        with open(fname, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise _open_error(fname, exc) from None
    sym = load_json(data, source=os.fspath(fname))
    return sym if code is None else _repin(sym, code)


# -- pinned dtypes (``__dtype__``) ---------------------------------------------------------------------------

#: the dtypes a pinned floating dtype can be recast to
_PIN_DTYPES = ("float16", "float32", "float64")


def cast_pinned_dtypes(sym: Symbol, dtype: npt.DTypeLike) -> Symbol:
    """A copy of ``sym`` whose variables' floating ``__dtype__`` attributes pin ``dtype`` instead (float16,
    float32 or float64); integer pins (labels, indices) and ``sym`` itself are left as they are.

    MXNet pins a variable's dtype through this attribute (``Variable(dtype=...)``; Gluon's ``export`` writes
    float32 on every parameter), and ``simple_bind``'s ``type_dict`` cannot override it for the variables it does
    not name, so ``type_dict={'data': np.float64}`` alone meets float32 weights. In Gluon the fix is
    ``net.cast('float64')`` before ``export``; this is that cast for a file already written (as
    ``sg.sym.load(fname, dtype=...)``): bound with ``simple_bind(ctx, data=shape)``, every value takes ``dtype``.

    >>> import numpy as np, symgrad as sg
    >>> w = sg.sym.Variable("w", dtype="float32")
    >>> net = sg.sym.FullyConnected(sg.sym.Variable("data"), w, num_hidden=2, no_bias=True, name="fc")
    >>> net.infer_type(data=np.float64)
    Traceback (most recent call last):
    ...
    TypeError: FullyConnected 'fc': ... The __dtype__ attribute of 'w' pins float32 ...
    >>> cast_pinned_dtypes(net, np.float64).infer_type(data=np.float64)[0]
    [<class 'numpy.float64'>, <class 'numpy.float64'>]
    """
    if not isinstance(sym, Symbol):
        raise TypeError(f"cast_pinned_dtypes: expected a Symbol, got {type(sym).__name__}")
    code = _pin_code(dtype, "cast_pinned_dtypes")
    return _repin(load_json(tojson(sym, warn=False), source="cast_pinned_dtypes"), code)


def _pin_code(dtype, who: str) -> str:
    """MXNet's ``__dtype__`` code of ``dtype``, which must be one a floating pin can be recast to."""
    try:
        name = None if dtype is None else np.dtype(dtype).name  # (np.dtype(None) is float64)
    except (TypeError, ValueError):
        name = None
    if name not in _PIN_DTYPES:
        raise ParamError(
            f"{who}: dtype={dtype!r} cannot recast the pinned dtypes; give one of {', '.join(_PIN_DTYPES)}"
        )
    return str(opdef.DTYPE_TO_MX[name])


def _repin(sym: Symbol, code: str) -> Symbol:
    """``sym``, just built and held by no one else, with each floating ``__dtype__`` attribute of its variables
    (those of control-flow subgraphs too) set to ``code``."""
    stack = [sym]
    while stack:
        for node in stack.pop().topo_nodes():
            stack.extend(subgraphs(node))
            raw = node.attrs.get("__dtype__") if node.op is None else None
            if raw is not None and parse_dtype_attr(raw).kind == "f":
                node.attrs = {**node.attrs, "__dtype__": code}
    return sym


# -- NDArray lists (.params) ----------------------------------------------------------------------

_LIST_MAGIC = 0x112
_V1_MAGIC = 0xF993FAC8
_V2_MAGIC = 0xF993FAC9
_V3_MAGIC = 0xF993FACA
# mshadow type flags
_FLAG_TO_DTYPE = {
    0: "<f4",
    1: "<f8",
    2: "<f2",
    3: "u1",
    4: "<i4",
    5: "i1",
    6: "<i8",
    7: "?",
    8: "<i2",
    9: "<u2",
    10: "<u4",
    11: "<u8",
}
_DTYPE_TO_FLAG = {"float32": 0, "float64": 1, "float16": 2, "uint8": 3, "int32": 4, "int8": 5, "int64": 6, "bool": 7}
_STYPES = {1: "row_sparse", 2: "csr"}


class _Reader:
    def __init__(self, data: bytes, source: str):
        self.data = memoryview(data)
        self.pos = 0
        self.source = source

    def error(self, msg, at=None) -> SerializationError:
        return SerializationError(f"{self.source}: {msg} (byte offset {self.pos if at is None else at})")

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, what: str):
        if n > self.remaining():
            raise self.error(f"truncated: {what} needs {n} bytes, {self.remaining()} remain")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))


def _read_array(r: _Reader, k: int):
    start = r.pos
    (magic,) = r.unpack("<I", f"array {k} header")
    np_shape = magic == _V3_MAGIC
    if magic in (_V2_MAGIC, _V3_MAGIC):
        (stype,) = r.unpack("<i", f"array {k} storage type")
        if stype != 0:
            kind = _STYPES.get(stype, f"storage type {stype}")
            raise r.error(f"array {k} is a sparse {kind} array; only dense arrays are supported", at=start)
    if magic in (_V1_MAGIC, _V2_MAGIC, _V3_MAGIC):
        (ndim,) = r.unpack("<i", f"array {k} ndim")
        if ndim == -1 and np_shape or ndim == 0 and not np_shape:
            return None  # MXNet's "none" array: no context, type or data follow
        if not 0 <= ndim <= _MAX_NDIM:
            raise r.error(f"array {k} declares {ndim} dimensions", at=r.pos - 4)
        dims = r.unpack(f"<{ndim}q", f"array {k} shape")
    elif magic <= _MAX_NDIM:  # before V1 the header was the ndim and dimensions were uint32
        ndim = magic
        if ndim == 0:
            return None
        dims = r.unpack(f"<{ndim}I", f"array {k} shape")
    else:
        raise r.error(f"array {k}: unknown NDArray header 0x{magic:08x}", at=start)
    if any(d < 0 for d in dims):
        if np_shape:
            return None
        raise r.error(f"array {k} has shape {dims} with a negative dimension", at=start)
    r.unpack("<ii", f"array {k} context")
    flag_at = r.pos
    (flag,) = r.unpack("<i", f"array {k} type flag")
    if flag not in _FLAG_TO_DTYPE:
        what = "bfloat16, which numpy cannot hold," if flag == 12 else f"unknown type flag {flag}"
        raise r.error(f"array {k} has {what}", at=flag_at)
    dtype = np.dtype(_FLAG_TO_DTYPE[flag])
    size = math.prod(dims)
    if math.prod(max(d, 1) for d in dims) * dtype.itemsize >= 2**62:  # numpy's limit, even for empty arrays
        raise r.error(f"array {k} has shape {tuple(dims)}, too large for any array", at=start)
    nbytes = size * dtype.itemsize
    if nbytes > r.remaining():
        raise r.error(
            f"array {k} declares shape {tuple(dims)} ({dtype.name}, {nbytes} bytes) but only "
            f"{r.remaining()} bytes remain in the file"
        )
    raw = r.take(nbytes, f"array {k} data")
    if dtype == np.bool_:
        arr = np.frombuffer(raw, np.uint8) != 0
    else:
        arr = np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="), copy=True)
    return arr.reshape(dims)


def _parse_nd_list(data: bytes, source: str) -> dict[str, np.ndarray] | list[np.ndarray]:
    r = _Reader(data, source)
    header, _reserved = r.unpack("<QQ", "file header")
    if header != _LIST_MAGIC:
        raise r.error(f"not an MXNet NDArray file: header 0x{header:x}, expected 0x{_LIST_MAGIC:x}", at=0)
    (count,) = r.unpack("<Q", "array count")
    if count * 8 > r.remaining():  # each array takes at least 8 bytes
        raise r.error(f"declares {count} arrays, more than the {r.remaining()} remaining bytes can hold", at=16)
    arrays = [_read_array(r, k) for k in range(count)]
    at = r.pos
    (n_names,) = r.unpack("<Q", "name count")
    if n_names not in (0, count):
        raise r.error(f"has {n_names} names for {count} arrays", at=at)
    names = []
    for k in range(n_names):
        (length,) = r.unpack("<Q", f"name {k} length")
        raw = r.take(length, f"name {k}")
        try:
            names.append(bytes(raw).decode("utf-8"))
        except UnicodeDecodeError:
            raise r.error(f"name {k} is not UTF-8", at=r.pos - length) from None
    if r.remaining():
        raise r.error(f"{r.remaining()} unexpected bytes after the names")
    for k, a in enumerate(arrays):
        if a is None:
            label = f"array {k}" + (f" ({names[k]!r})" if names else "")
            raise SerializationError(f"{source}: {label} is an empty (none) NDArray, which holds no values")
    if not names:
        return arrays
    out = {}
    for name, a in zip(names, arrays):
        if name in out:
            raise SerializationError(f"{source}: the name {name!r} appears twice")
        out[name] = a
    return out


def _to_numpy(value, name):
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "asnumpy"):
        return value.asnumpy()
    if type(value).__module__.split(".")[0] == "cupy":
        return value.get()
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"array {name!r}: cannot convert {type(value).__name__} to a numpy array ({exc})") from None


def _nd_bytes(arrays, names) -> bytes:
    parts = [struct.pack("<QQQ", _LIST_MAGIC, 0, len(arrays))]
    for name, value in zip(names or [None] * len(arrays), arrays):
        label = f"array {name!r}" if name is not None else "an array"
        a = _to_numpy(value, name)
        flag = _DTYPE_TO_FLAG.get(a.dtype.name)
        if flag is None:
            raise SerializationError(
                f"{label}: dtype {a.dtype} cannot be stored in an MXNet file; use one of {sorted(_DTYPE_TO_FLAG)}"
            )
        if a.ndim == 0:
            raise SerializationError(f"{label} is 0-d; MXNet's format cannot store scalars, reshape it to (1,)")
        parts.append(struct.pack(f"<Iii{a.ndim}q", _V2_MAGIC, 0, a.ndim, *a.shape))
        parts.append(struct.pack("<iii", 1, 0, flag))  # context cpu(0), type flag
        parts.append(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes())
    parts.append(struct.pack("<Q", len(names or ())))
    for name in names or ():
        raw = name.encode("utf-8")
        parts.append(struct.pack("<Q", len(raw)) + raw)
    return b"".join(parts)


def nd_save(fname: StrPath, data: dict[str, Array] | list[Array] | tuple[Array, ...]) -> None:
    """Write arrays in MXNet's binary NDArray-list format (``mx.nd.save``).

    ``data`` is a dict ``{name: array}`` or a list of arrays (stored without names). Arrays are
    numpy arrays or anything ``numpy.asarray`` takes (CuPy arrays are copied to the host).
    """
    if isinstance(data, dict):
        for k in data:
            if not isinstance(k, str):
                raise TypeError(f"nd_save: names must be strings, got {type(k).__name__} {k!r}")
        blob = _nd_bytes(list(data.values()), list(data))
    elif isinstance(data, (list, tuple)):
        blob = _nd_bytes(list(data), None)
    else:
        raise TypeError(f"nd_save: expected a dict or a list of arrays, got {type(data).__name__}")
    with open(fname, "wb") as f:
        f.write(blob)


def _read_file(fname: StrPath) -> bytes:
    try:
        with open(fname, "rb") as f:
            return f.read()
    except OSError as exc:
        raise _open_error(fname, exc) from None


def nd_load(fname: StrPath) -> dict[str, np.ndarray] | list[np.ndarray]:
    """Arrays from an MXNet NDArray file (``mx.nd.load``) as numpy arrays.

    Returns a dict ``{name: array}`` when the file stores names, else a list. Reads the V2 (MXNet 1.x),
    V3 (NumPy shapes), V1 and pre-V1 layouts; a sparse or bfloat16 array is a ``SerializationError``.
    """
    return _parse_nd_list(_read_file(fname), os.fspath(fname))


def nd_load_frombuffer(data: bytes | bytearray | memoryview) -> dict[str, np.ndarray] | list[np.ndarray]:
    """``nd_load`` of the bytes of an NDArray file already in memory (``mx.nd.load_frombuffer``)."""
    return _parse_nd_list(bytes(data), "buffer")


# -- .npz, read with the same care ----------------------------------------------------------------

_MAX_DEFLATE_RATIO = 1100  # deflate cannot expand more than ~1032:1


def _load_npz(blob: bytes, source: str) -> dict[str, np.ndarray]:
    try:
        zf = zipfile.ZipFile(io.BytesIO(blob))
    except (zipfile.BadZipFile, ValueError, EOFError, OSError, NotImplementedError) as exc:
        raise SerializationError(f"{source}: not a valid .npz (zip) file: {exc}") from None
    out = {}
    with zf:
        for info in zf.infolist():
            where = f"{source}: member {info.filename!r} (byte offset {info.header_offset})"
            if not info.filename.endswith(".npy"):
                raise SerializationError(f"{where} is not a .npy array")
            if info.file_size > info.compress_size * _MAX_DEFLATE_RATIO + 4096:
                raise SerializationError(
                    f"{where} claims {info.file_size} bytes from {info.compress_size} "
                    "compressed bytes, more than compression can produce"
                )
            try:
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                    elif version == (2, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                    else:
                        raise ValueError(f"unsupported .npy format version {version}")
                    header_len = f.tell()
                    if dtype.hasobject:
                        raise ValueError("holds Python objects; only plain numeric arrays are read")
                    if dtype.name not in _DTYPE_TO_FLAG and dtype.kind not in "iuf":
                        raise ValueError(f"dtype {dtype} is not a numeric type")
                    if len(shape) > _MAX_NDIM:
                        raise ValueError(f"declares {len(shape)} dimensions")
                    nbytes = math.prod(shape) * dtype.itemsize
                    if nbytes > info.file_size - header_len:
                        raise ValueError(
                            f"declares shape {shape} ({nbytes} bytes) but holds {info.file_size - header_len} bytes"
                        )
                    raw = f.read(nbytes)
            except (
                ValueError,
                OSError,
                EOFError,
                zipfile.BadZipFile,
                SyntaxError,
                TypeError,
                NotImplementedError,
                RuntimeError,
            ) as exc:  # RuntimeError: an encrypted member
                raise SerializationError(f"{where}: {exc}") from None
            if len(raw) != nbytes:
                raise SerializationError(f"{where}: truncated, {len(raw)} of {nbytes} data bytes")
            arr = np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="), copy=True)
            out[info.filename[:-4]] = arr.reshape(shape, order="F" if fortran else "C")
    return out


# -- checkpoints: arg:/aux: ------------------------------------------------------------------------


def save_params(
    fname: StrPath, arg_params: Mapping[str, npt.ArrayLike], aux_params: Mapping[str, npt.ArrayLike] | None = None
) -> None:
    """Write ``arg_params``/``aux_params`` as MXNet writes ``NAME-0000.params`` (``arg:``/``aux:`` names).

    A file name ending in ``.npz`` writes an uncompressed numpy archive with the same keys instead.
    """
    data = {}
    for prefix, params in (("arg", arg_params), ("aux", aux_params)):
        for name, value in (params or {}).items():
            data[f"{prefix}:{name}"] = _to_numpy(value, name)
    if os.fspath(fname).endswith(".npz"):
        with open(fname, "wb") as f:
            np.savez(f, **data)
    else:
        nd_save(fname, data)


def load_params(fname: StrPath) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(arg_params, aux_params)`` dicts of numpy arrays from an MXNet ``.params`` file or an ``.npz``
    (``mx.model.load_checkpoint`` without the symbol). Names must carry ``arg:``/``aux:`` prefixes."""
    source = os.fspath(fname)
    blob = _read_file(fname)
    data = _load_npz(blob, source) if blob.startswith(b"PK") else _parse_nd_list(blob, source)
    if isinstance(data, list):
        if not data:
            return {}, {}
        raise SerializationError(
            f"{source}: the arrays have no names; a checkpoint names them 'arg:NAME'/"
            "'aux:NAME' (use symgrad.nd_load for unnamed arrays)"
        )
    arg_params: dict[str, np.ndarray]
    aux_params: dict[str, np.ndarray]
    arg_params, aux_params = {}, {}
    for key, value in data.items():
        prefix, sep, name = key.partition(":")
        if not sep or prefix not in ("arg", "aux") or not name:
            raise SerializationError(
                f"{source}: entry {key!r} has no 'arg:'/'aux:' prefix; this is not a "
                "checkpoint (Gluon save_parameters files load with symgrad.nd_load)"
            )
        (arg_params if prefix == "arg" else aux_params)[name] = value
    return arg_params, aux_params
