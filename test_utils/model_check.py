"""Whole-model gradient checks: ``check_model``, the engine behind ``symgrad check``.

A network is piecewise smooth: its ReLU masks, max-pool windows and clip bounds pick a piece at the point
checked, and backprop differentiates that piece. The numeric side here differentiates the same piece: the
analytic run records every decision (``decisions.record_decisions``) and the float64 reference evaluates the
graph with those decisions pinned (``decisions.pinned_symbol``), so a finite difference never crosses a kink
the forward did not choose, however many ReLUs a weight moves. Only opaque ``Custom`` ops keep kinks; the
elements they affect are judged by the kink test, and the report says which elements were judged how.

The cost model (``mode="fast"``, the default) fits a network:

1. **detect**: per argument, ``DIRECTIONS`` directional derivatives ``d/dt f(x + t r)`` along random ``r``
   (2 partial forward passes each) against ``analytic . r``. On the pinned piece the difference is exact up to
   float64 rounding and the step's curvature, so the tolerance is the checkers' own model (rtol of the dtype,
   plus both sides' rounding noise) applied to the projection, and a passing argument costs a few passes
   however large it is;
2. **localise**, only where a direction fails: bisect its support (the half whose projection fails worse),
   down to ``LEAF`` elements, then per-element differences on those and on ``samples`` random others, so the
   report still names the worst elements and diagnoses the pattern;
3. **attribute**, only when some argument fails: every op node is checked alone at its recorded inputs (its
   own VJP against its own pinned forward, one direction over all its inputs), and the nodes whose backward
   is wrong are named (``NodeFault``).

``mode="sample"`` (``samples`` random elements per argument) and ``mode="full"`` (every element, through
``check_numeric_gradient``) stay for whoever asks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from symgrad.serialization import tojson

from .context import to_device, to_numpy
from .differencer import Progress
from .frames import hide_from_pytest as _hide_from_pytest
from .report import few
from .ties import MOVE_OFF_TIES, moved_note, moved_off_ties, tie_faults, tied_nodes, unpinned

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from numpy.typing import ArrayLike, DTypeLike

    from symgrad.context import Context
    from symgrad.symbol import Symbol

    from .decisions import Pinning

__tracebackhide__ = _hide_from_pytest  # a failed check shows its report, not these frames

__all__ = [
    "check_model",
    "ModelCheckResult",
    "ArgResult",
    "NodeFault",
    "ModelInputError",
    "CheckInterrupted",
    "WorkerDied",
    "MODES",
    "DEFAULT_SAMPLES",
    "DIRECTIONS",
    "prepare_model",
    "infer_shapes",
    "variable_roles",
    "random_values",
    "deterministic_dropout",
    "render_table",
]

#: ``mode`` values: directional detection with localisation, sampled elements, every element
MODES = ("fast", "sample", "full")
#: elements per argument checked in sample mode, and sampled beside the bisection's leaf when localising
DEFAULT_SAMPLES = 256
#: random directions per argument in fast mode
DIRECTIONS = 2
#: the bisection stops at this many elements
LEAF = 8
#: elements sampled beside the bisection's leaf when localising a failing argument
LOCALISE_SAMPLES = 16
#: failing arguments localised element by element (the worst by ratio; the faulty node names the cause of all:
#: a wrong op fails every argument upstream of it, 7 of them in the planted ResNet-18, each localisation ~70
#: partial forwards)
LOCALISE_MAX = 3
#: mismatching elements kink-tested (4 partial forwards each, only where unpinned ops remain) before concluding
#: that the mismatches are an error, not kinks
KINK_PROBE = 8
#: a float32 element mismatch up to this multiple of its tolerance is left out where the rule holds in float64 on
#: float64's own decisions (``_float64_second_opinion``); beyond it there the argument gets no verdict ("imprecise")
ROUNDING_EXPLAINS = 4.0
#: random-sign projections allow K x the l2 norm of the elements' tolerances (false alarm < 2 exp(-K^2/2))
HOEFFDING_K = 6.0
#: the step of the one-sided first try, relative to the argument's scale (truncation ~1e-6 of the curvature term)
FORWARD_STEP = 1e-6
#: emulated runs of the float64 objective's rounding (``Harness.objective_noise``): 3 instead of 6 (the estimate is
#: 12 x their RMS: 3 runs fall below a third of the true RMS with probability 0.05); each is a full forward,
#: 17% of a DenseNet-121 check at 224 with 6
NOISE_RUNS = 3
#: at most this many step refinements (each a quarter of the last) of a difference that fails at the default step
MAX_REFINE = 8
#: op input slots that hold learned parameters (for the random values: scaled by fan-in)
PARAM_SLOTS = ("weight", "bias", "gamma", "beta", "parameters", "alpha")
WHO = "check_model"


class ModelInputError(ValueError):
    """A model, its shapes or its parameter values cannot be checked as given (the message says which)."""


# == the model's inputs =========================================================================================


def _one_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def infer_shapes(sym, shapes: dict, known: dict | None = None):
    """``(arg_shapes, out_shapes, aux_shapes)`` as dicts/list from ``shapes`` (over ``known`` ones, e.g. from a
    params file) and the ``__shape__`` attributes; ``ModelInputError`` naming what stays unknown."""
    from symgrad.base import SymgradError

    inputs = sym.list_inputs()
    for name in shapes:
        if name not in inputs:
            raise ModelInputError(f"--shape {name}=...: {name!r} is not an input of the model (inputs: {few(inputs)})")
    given = {**(known or {}), **shapes}
    try:
        arg_shapes, out_shapes, aux_shapes = sym.infer_shape_partial(**given)
    except (SymgradError, ValueError) as exc:
        raise ModelInputError(f"the shapes do not infer: {_one_line(exc)}") from None
    args, aux = sym.list_arguments(), sym.list_auxiliary_states()
    # MXNet's legacy reading: () is an unknown shape, 0 an unknown dimension
    unknown = [n for n, s in zip(args + aux, list(arg_shapes) + list(aux_shapes)) if not s or 0 in s]
    if unknown or any(not s for s in out_shapes):
        missing = unknown or ["an output"]
        raise ModelInputError(
            f"the shapes do not infer: the shape of {few(missing, 4)} is unknown; give the input "
            "shapes (--shape NAME=D1,D2,..., e.g. --shape data=1,3,224,224)"
        )
    return dict(zip(args, arg_shapes)), list(out_shapes), dict(zip(aux, aux_shapes))


def variable_roles(sym, arg_shapes: dict) -> dict:
    """``{argument: (role, upper bound or None)}``: ``"index"`` for an argument that only feeds inputs its op
    never differentiates (labels, indices; the bound is the number of valid values), ``"param"`` for a learned
    parameter slot (weight, bias, gamma, ...), else ``"data"``."""
    internals = sym.get_internals()
    try:
        every = dict(zip(internals.list_outputs(), internals.infer_shape_partial(**arg_shapes)[1]))
    except Exception:  # the bounds are a courtesy: without them labels are 0/1
        every = dict(arg_shapes)
    uses: dict = {}
    for node in sym.to_networkx().nodes.values():
        node = node["node"]
        if node.op is None:
            continue
        slots = node.input_names()
        in_shapes = {
            slot: every.get(src.name if src.op is None else src.output_name(idx))
            for (src, idx), slot in zip(node.inputs, slots)
        }
        for (src, _), slot in zip(node.inputs, slots):
            if src.op is not None or src.name not in arg_shapes:
                continue
            index = slot in tuple(node.op.no_grad_inputs)
            bound = _index_bound(node.op.name, slot, node.params, in_shapes, arg_shapes[src.name]) if index else None
            uses.setdefault(src.name, []).append((slot, index, bound))
    roles = {}
    for name in arg_shapes:
        u = uses.get(name, [])
        if u and all(index for _, index, _ in u):
            bounds = [b for _, _, b in u if b is not None]
            roles[name] = ("index", min(bounds) if bounds else None)
        elif any(slot in PARAM_SLOTS for slot, _, _ in u):
            roles[name] = ("param", None)
        else:
            roles[name] = ("data", None)
    return roles


def _index_bound(op, slot, params, in_shapes, own_shape):
    """How many valid values an index input of ``op`` has (None: 0/1 labels or unknown)."""

    def dim(shape, axis):
        if shape is None or not len(shape):
            return None
        return int(shape[int(axis) % len(shape)])

    data = in_shapes.get("data")
    if slot == "label":
        if data is None or tuple(data) == tuple(own_shape):
            return None  # a probability / regression label of the data's shape
        if params.get("multi_output"):
            return dim(data, 1)
        if params.get("preserve_shape"):
            return dim(data, -1)
        return int(np.prod(data[1:])) if len(data) > 1 else None
    if op == "Embedding":
        return int(params.get("input_dim", 0)) or None
    if op == "one_hot":
        return int(params.get("depth", 0)) or None
    if op in ("take", "_contrib_take"):
        return dim(in_shapes.get("a"), params.get("axis", 0))
    if op == "pick":
        return dim(data, params.get("axis", -1) if params.get("axis") is not None else -1)
    if slot in ("sequence_length", "length"):
        return dim(data, params.get("axis", 0))
    if data is not None and len(data):
        return int(min(data))
    return None


def _given(value, name, shape, what):
    """A value from the params file, refused unless it has the shape the model needs."""
    value = np.asarray(value)
    if tuple(value.shape) != tuple(shape):
        raise ModelInputError(
            f"--params: {what}{name!r} has shape {tuple(value.shape)} in the file but the model needs {tuple(shape)}"
        )
    return value


def random_values(sym, arg_shapes: dict, aux_shapes: dict, given_args: dict, given_aux: dict, seed: int):
    """Seeded values for every argument and auxiliary state not given: indices/labels as valid integers, weights
    uniform with a fan-in scale (so deep networks neither explode nor vanish), the rest uniform in [-1, 1]."""
    rng = np.random.default_rng(seed)
    roles = variable_roles(sym, arg_shapes)
    args, aux = {}, {}
    for name, shape in arg_shapes.items():
        if name in given_args:
            value = _given(given_args[name], name, shape, "")
            args[name] = value.astype(np.float64) if value.dtype.kind == "f" else value
            continue
        role, bound = roles[name]
        if role == "index":
            low = 1 if name.endswith("length") else 0
            high = bound + (1 if low else 0) if bound else 2
            args[name] = rng.integers(low, max(high, low + 1), size=shape).astype(np.float64)
        elif role == "param" and len(shape) >= 2:
            fan_in = int(np.prod(shape[1:])) or 1
            args[name] = rng.uniform(-1.0, 1.0, size=shape) * math.sqrt(3.0 / fan_in)
        elif role == "param" and name.endswith("gamma"):
            args[name] = rng.uniform(0.5, 1.5, size=shape)
        elif role == "param":
            args[name] = rng.uniform(-0.5, 0.5, size=shape)
        else:
            args[name] = rng.uniform(-1.0, 1.0, size=shape)
    for name, shape in aux_shapes.items():
        if name in given_aux:
            aux[name] = _given(given_aux[name], name, shape, "auxiliary state ").astype(np.float64)
        elif name.endswith("var"):
            aux[name] = rng.uniform(0.5, 1.5, size=shape)
        else:
            aux[name] = rng.uniform(-0.5, 0.5, size=shape)
    return args, aux, roles


def deterministic_dropout(sym):
    """``(symbol, names)``: Dropout ops rewritten to p=0 (identity), since finite differences need a
    deterministic forward; the names of the ops rewritten."""
    from symgrad.serialization import load_json

    doc = json.loads(tojson(sym, warn=False))
    names = []
    for node in doc["nodes"]:
        if node.get("op") == "Dropout":
            node.setdefault("attrs", {})["p"] = "0"
            names.append(node["name"])
    if not names:
        return sym, []
    return load_json(json.dumps(doc)), names


@dataclass
class PreparedModel:
    """A model ready to check: the symbol (Dropout as identity), every argument's and auxiliary state's value
    (float64 or integer), each argument's role, and what came from where."""

    sym: object
    label: str
    args: dict
    aux: dict
    roles: dict
    out_shapes: list
    given: list = field(default_factory=list)
    ignored: list = field(default_factory=list)
    dropouts: list = field(default_factory=list)


def _load_symbol(model):
    from symgrad.symbol import Symbol

    if isinstance(model, Symbol):
        return model, model.name or "symbol"
    if isinstance(model, (str, os.PathLike)):
        from symgrad.serialization import load

        path = os.fspath(model)
        if not os.path.exists(path):
            raise ModelInputError(f"model {path}: no such file")
        return load(path), os.path.basename(path)
    raise TypeError(f"{WHO}: model must be a Symbol or the path of a symbol JSON file, got {type(model).__name__}")


def _load_params(params) -> tuple[dict, dict]:
    if params is None:
        return {}, {}
    if isinstance(params, (str, os.PathLike)):
        from symgrad.serialization import load_params

        path = os.fspath(params)
        if not os.path.exists(path):
            raise ModelInputError(f"params {path}: no such file")
        return load_params(path)
    if isinstance(params, tuple) and len(params) == 2:
        return dict(params[0]), dict(params[1])
    if isinstance(params, dict):  # MXNet's save_checkpoint layout ('arg:NAME' / 'aux:NAME') or plain names
        args: dict[str, np.ndarray]
        aux: dict[str, np.ndarray]
        args, aux = {}, {}
        for k, v in params.items():
            kind, _, name = k.partition(":") if ":" in k else ("arg", "", k)
            (aux if kind == "aux" else args)[name] = np.asarray(to_numpy(v))
        return args, aux
    raise TypeError(
        f"{WHO}: params must be a .params/.npz path, a dict or an (args, aux) pair, got {type(params).__name__}"
    )


def prepare_model(model, params=None, shapes=None, seed=0) -> PreparedModel:
    """Load ``model`` (a Symbol or a symbol JSON path) and ``params`` (a path, a dict, or ``(args, aux)``), infer
    every shape from ``shapes`` (``{input: shape}``) and the parameter values, and fill what is not given with
    seeded random values (``random_values``)."""
    sym, label = _load_symbol(model)
    given_args, given_aux = _load_params(params)
    inputs = sym.list_inputs()
    known = {k: np.shape(v) for k, v in {**given_args, **given_aux}.items() if k in inputs}
    ignored = sorted(k for k in {**given_args, **given_aux} if k not in inputs)
    shapes = {k: tuple(int(d) for d in v) for k, v in dict(shapes or {}).items()}
    arg_shapes, out_shapes, aux_shapes = infer_shapes(sym, shapes, known)
    sym, dropouts = deterministic_dropout(sym)
    args, aux, roles = random_values(sym, arg_shapes, aux_shapes, given_args, given_aux, seed)
    given = sorted(k for k in {**given_args, **given_aux} if k in inputs)
    return PreparedModel(sym, label, args, aux, roles, out_shapes, given, ignored, dropouts)


# == results ====================================================================================================


class ArgResult(dict):
    """One row of the report: ``name``, ``shape``, ``role``, ``grad_req``, ``checked`` (elements compared),
    ``size``, ``method``, ``max_error`` (largest ``|analytic - numeric|``), ``worst_ratio`` (largest error /
    allowed error, < 1 passes), ``verdict`` ("pass", "FAIL", "skip", "not checked"), ``diagnosis`` (a line or
    None), ``worst`` (the worst elements: ``(index, analytic, numeric)``) and ``notes``."""

    __getattr__ = dict.get


def _row(name, shape, role, req, **kw):
    r = ArgResult(
        name=name,
        shape=list(map(int, shape)),
        size=int(np.prod(shape)) if len(shape) else 1,
        role=role,
        grad_req=req,
        checked=0,
        method=None,
        max_error=None,
        worst_ratio=None,
        verdict="not checked",
        diagnosis=None,
        worst=[],
        notes=[],
    )
    r.update(kw)
    return r


@dataclass
class NodeFault:
    """An op node whose own backward disagrees with its own (pinned) forward at its recorded inputs.

    Attributes:
        position: the node's place among the graph's op nodes in topological order (0-based).
        name, op: the node's name and operator (``Custom`` nodes: ``op_type`` too).
        inputs: the inputs whose gradient is wrong.
        worst_ratio: error / allowed error of the node's directional check.
        diagnosis: what the per-element comparison of its worst input looks like (or None).
    """

    position: int
    name: str
    op: str
    op_type: str | None
    inputs: list
    worst_ratio: float
    diagnosis: str | None = None

    def describe(self) -> str:
        kind = f"Custom op_type {self.op_type!r}" if self.op_type else self.op
        what = self.diagnosis or f"backward disagrees with its forward (error {self.worst_ratio:.3g} x tolerance)"
        return f"node {self.position} {self.name!r} ({kind}): gradient of {', '.join(self.inputs)} wrong: {what}"


@dataclass
class ModelCheckResult:
    """What ``check_model`` found. ``rows``: one ``ArgResult`` per argument; ``faults``: the op nodes named as
    wrong (``NodeFault``, empty when every argument passes); ``partial``: the check was interrupted and the rows
    not yet checked say so; ``pinning``: which decision nodes the numeric side pinned (``decisions.Pinning``)."""

    label: str
    dtype: str
    mode: str
    seed: int
    rows: list
    faults: list = field(default_factory=list)
    pinning: Pinning | None = None
    seconds: float = 0.0
    partial: bool = False
    interrupted: str | None = None
    header: dict = field(default_factory=dict)
    #: the model's graph as plain data for the HTML report (``to_html``), not in ``to_dict``: ``{"nodes": [{"name",
    #: "op" (None for an input), "op_type" (Custom ops), "inputs": [positions of the nodes it reads]}]}`` in
    #: topological order; None when not recorded
    graph: dict | None = None

    @property
    def ok(self) -> bool:
        """No argument FAILs and the check ran to the end ("unsettled" and "imprecise" rows are no failure)."""
        return not self.partial and all(r["verdict"] != "FAIL" for r in self.rows)

    @property
    def failed(self) -> list:
        """The rows whose verdict is "FAIL"."""
        return [r for r in self.rows if r["verdict"] == "FAIL"]

    def counts(self) -> dict:
        """``{verdict: number of rows}`` for "pass", "FAIL", "unsettled", "imprecise", "skip", "not checked"."""
        out = {"pass": 0, "FAIL": 0, "unsettled": 0, "imprecise": 0, "skip": 0, "not checked": 0}
        for r in self.rows:
            out[r["verdict"]] = out.get(r["verdict"], 0) + 1
        return out

    def table(self) -> list[str]:
        """The rows as the text table ``symgrad check`` prints, one line each."""
        return render_table(self.rows)

    def summary(self) -> str:
        """The closing line: the verdict and the counts, as ``every gradient passes: N passed, 0 failed in T s``
        (``no gradient fails: ...`` where some argument got no verdict, unsettled or imprecise)."""
        c = self.counts()
        skipped = f", {c['skip']} skipped (not differentiable)" if c["skip"] else ""
        left = f", {c['not checked']} not checked" if c["not checked"] else ""
        left += f", {c['unsettled']} unsettled (no verdict)" if c["unsettled"] else ""
        left += (
            f", {c['imprecise']} imprecise in {self.dtype} (no verdict: the rule holds in float64)"
            if c["imprecise"]
            else ""
        )
        if self.partial:
            verdict = f"PARTIAL ({self.interrupted or 'interrupted'})"
        else:
            plural = "s" if c["FAIL"] != 1 else ""
            verdict = (
                ("no gradient fails" if c["imprecise"] or c["unsettled"] else "every gradient passes")
                if self.ok
                else f"{c['FAIL']} gradient{plural} FAIL"
            )
        return f"{verdict}: {c['pass']} passed, {c['FAIL']} failed{skipped}{left} in {self.seconds:.1f} s"

    def lines(self) -> list[str]:
        """The whole text report (``str(result)``): the table, the pinning, the faulty nodes and the summary."""
        out = self.table() + [""]
        moved = self.header.get("moved_off_ties")
        if moved:
            out.append(moved_note(moved["nodes"], few(moved["failed_at_given_point"])))
        if self.header.get("wrong_at_ties"):
            out.append(
                f"wrong at ties: node(s) {few(self.header['wrong_at_ties'], 4)} disagree with their own forward "
                "along a direction that moves each group of their equal input values together (a backward that "
                "hands every tied element the whole gradient, or none)"
            )
        if self.pinning is not None:
            out.append(_pinning_line(self.pinning))
        for fault in self.faults:
            out.append("faulty " + fault.describe())
        if self.failed and not self.faults and not self.partial:
            out.append(
                "no single node's backward disagrees with its own forward at its recorded inputs: the error "
                "comes from how the nodes are connected or from an input the local checks cannot move"
            )
        out.append(self.summary())
        return out

    def __str__(self):
        return "\n".join(self.lines())

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        """The report as one self-contained HTML page (inline CSS and SVG: it opens offline): the verdict and the
        command that reproduces the check, each argument's error against its tolerance (log scale), analytic
        against numeric for the failing arguments' worst elements, the faulty nodes on the model's graph, what was
        pinned and what the kink test judged, and the table of every argument (``symgrad check --html``).

        Args:
            path: where to write the page (UTF-8); None: only return it.

        Returns:
            The page.
        """
        from .html_report import render

        page = render(self)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(page)
        return page

    @staticmethod
    def _graph(sym) -> dict:
        """``graph`` of ``sym``: its nodes' names, ops and inputs, as plain data."""
        import networkx as nx

        g = sym.to_networkx()
        order = list(nx.topological_sort(g))
        at = {key: k for k, key in enumerate(order)}
        nodes = []
        for key in order:
            entry = g.nodes[key]
            op = None if entry["node"].op is None else entry["op"]
            op_type = entry["params"].get("op_type") if op == "Custom" else None
            inputs = [at[src.id] for src, _ in entry["node"].inputs]
            nodes.append({"name": entry["name"], "op": op, "op_type": op_type, "inputs": inputs})
        return {"nodes": nodes}

    def to_dict(self) -> dict:
        """The result as JSON-ready data (``symgrad check --json``): the rows, faulty nodes and counts."""
        c = self.counts()
        doc = {
            **self.header,
            "model": self.label,
            "dtype": self.dtype,
            "mode": self.mode,
            "seed": self.seed,
            "arguments": [dict(r) for r in self.rows],
            "faulty_nodes": [vars(f) for f in self.faults],
            "pinned_decision_nodes": len(self.pinning.pinned) if self.pinning is not None else 0,
            "opaque_nodes": list(self.pinning.opaque) if self.pinning is not None else [],
            "passed": c["pass"],
            "failed": c["FAIL"],
            "unsettled": c["unsettled"],
            "imprecise": c["imprecise"],
            "skipped": c["skip"],
            "not_checked": c["not checked"],
            "ok": self.ok,
            "partial": self.partial,
            "interrupted": self.interrupted,
            "seconds": round(self.seconds, 3),
        }
        return _json_safe(doc)


def _pinning_line(p) -> str:
    text = f"numeric side pinned to the forward's pieces at {len(p.pinned)} decision node(s)"
    if p.opaque:
        text += f"; opaque Custom node(s) judged by the kink test: {few(p.opaque, 4)}"
    if p.unpinnable:
        text += f"; not pinned (kink test): {few(p.unpinnable, 4)}"
    return text


def _fmt_err(v) -> str:
    if v is None:
        return "-"
    if not math.isfinite(v):
        return str(v)
    return f"{v:.2e}"


def render_table(rows) -> list[str]:
    head = ("argument", "shape", "req", "checked", "max |error|", "err/tol", "verdict", "diagnosis")
    body = []
    for r in rows:
        shape = "x".join(map(str, r["shape"])) or "scalar"
        method = r["method"] or ""
        checked = (
            "-"
            if r["verdict"] in ("skip", "not checked")
            else (f"dir/{r['size']}" if method.startswith("direction") else f"{r['checked']}/{r['size']}")
        )
        notes = "; ".join(([r["diagnosis"]] if r["diagnosis"] else []) + r["notes"])
        body.append(
            (
                r["name"],
                shape,
                r["grad_req"],
                checked,
                _fmt_err(r["max_error"]),
                "-" if r["worst_ratio"] is None else f"{r['worst_ratio']:.2g}",
                r["verdict"],
                notes,
            )
        )
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head) - 1)]
    line = lambda cells: (
        "  ".join(f"{c:<{w}}" if i != 4 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(cells, widths)))
        + "  "
        + cells[-1]
    )
    out = [line(head).rstrip(), "  ".join("-" * w for w in widths) + "  " + "-" * 9]
    out += [line(b).rstrip() for b in body]
    return out


def _json_safe(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


# == the engine =================================================================================================


@dataclass
class _Projection:
    """One directional comparison: ``analytic . r`` against the numeric derivative along ``r``."""

    analytic: float
    numeric: float
    allowed: float
    #: False: the difference did not settle as the step shrank (``_Point.settle``): no verdict either way
    settled: bool = True
    step: float = 0.0
    #: the rounding part of ``allowed``
    noise: float = 0.0

    @property
    def error(self) -> float:
        return abs(self.analytic - self.numeric)

    @property
    def ratio(self) -> float:
        if not math.isfinite(self.error):
            return math.inf
        return self.error / self.allowed if self.allowed > 0 else (0.0 if self.error == 0 else math.inf)

    @property
    def ok(self) -> bool:
        return bool(self.error <= self.allowed)


class _Point:
    """One symbol at one point: the analytic gradients in the dtype under test (from dirty buffers, with their
    rounding noise) and the float64 numeric reference pinned to the analytic forward's decisions.

    Args:
        sym: the symbol; ``values``/``aux``: float64 (or integer) arrays; ``live``: arguments to differentiate;
        ``reqs``: grad_req per argument; ``dtype``: under test; ``rng``: the draws (weights, buffers, directions);
        ``emulate``: estimate the analytic rounding noise by emulation (whole models) or only by measurement
        against the float64 backward (single nodes: cheap, and the same code rounds differently only).
    """

    def __init__(self, sym, values, aux, live, reqs, dtype, ctx, seed, *, pin=True, emulate=True):
        from .decisions import pinned_symbol
        from .harness import Harness
        from .objectives import projected_objective
        from .tolerance import get_rtol

        self.sym, self.dt, self.ctx, self.seed, self.live = sym, np.dtype(dtype), ctx, int(seed), list(live)
        rng = np.random.default_rng(self.seed)
        self.rtol = float(get_rtol(None, self.dt))
        # nothing writes the point: the executors bind it as it is, the reference binds float64 copies (a
        # whole-model check holds each such dict as one more copy of every parameter)
        self.point = {k: (v.astype(self.dt, copy=False) if v.dtype.kind == "f" else v) for k, v in values.items()}
        self.aux = {k: v.astype(self.dt) for k, v in aux.items()}
        self.out_shapes = sym.infer_shape(**{k: v.shape for k, v in self.point.items()})[1]
        weights = [(rng.random(s) + 0.1).astype(self.dt) for s in self.out_shapes]
        self.weights64 = [w.astype(np.float64) for w in weights]
        ref_sym, loss_heads, make_objective = projected_objective(sym, self.weights64, WHO)
        self.heads = [None if loss else w for w, loss in zip(weights, loss_heads)]
        self._analytic_pass(sym, reqs, ctx, rng)
        self.pinning = None
        if pin:
            ref_sym, self.pinning = pinned_symbol(ref_sym, self.record)
        self._rounding_noise(sym, reqs, emulate)
        self._confirmed = emulate or self.dt.itemsize >= 8
        self._rescaled: set = set()  # float64 arguments whose rounding ``measure_rounding`` has measured
        # -- the numeric side: float64, pinned, re-running only what depends on the moved argument
        self.ref = Harness.bind(ref_sym, self.point, self.aux, ctx=ctx, dtype=np.float64, is_train=True)
        base = self.ref.base()
        self.objective = make_objective([np.asarray(b, np.float64) for b in base])
        self.scalar = lambda outs: self.objective(outs)[0]
        self.f_noise = self.ref.evaluation_noise(self.objective, np.float64, runs=NOISE_RUNS, base=base)
        self.f0 = self.scalar(self.ref.base())  # the noise runs overwrote the values partial forwards start from
        self._natural = None  # float64_agrees' plain float64 backward and unpinned reference, built on first use

    def _analytic_pass(self, sym, reqs, ctx, rng):
        """The analytic side: forward(is_train=True) recording every decision, backward into dirty buffers."""
        from .decisions import record_decisions
        from .harness import assert_deterministic

        initial = {k: rng.normal(0, 0.01, size=self.point[k].shape).astype(self.dt) for k in self.live}
        bufs = {k: to_device(v.copy() if reqs[k] == "add" else v, ctx) for k, v in initial.items()}
        exe = sym.bind(
            ctx,
            {k: to_device(v, ctx) for k, v in self.point.items()},
            args_grad=bufs,
            grad_req={k: (reqs[k] if k in bufs else "null") for k in self.point},
            aux_states={k: to_device(v.copy(), ctx) for k, v in self.aux.items()},
        )
        assert_deterministic(exe, True, self.aux, WHO, "the forward with is_train=True")
        self.exe = exe
        self.record = record_decisions(exe, is_train=True)
        exe.backward([None if h is None else to_device(h, ctx) for h in self.heads])
        self.analytic = {}
        for k in self.live:
            got = np.array(to_numpy(bufs[k]), np.float64)
            self.analytic[k] = got - initial[k].astype(np.float64) if reqs[k] == "add" else got

    def _rounding_noise(self, sym, reqs, emulate):
        """The analytic side's rounding noise (``a_noise``), and the measured difference from float64 that
        ``confirm_noise`` may excuse (``_measured``)."""
        from .harness import analytic_noise, with_measured
        from .tolerance import NOISE_FACTOR

        if emulate:
            _, self.a_noise = analytic_noise(
                sym, self.point, self.aux, self.heads, self.live, self.dt, actual=self.analytic
            )
        elif self.dt.itemsize >= 8:  # float64 under test: the floor alone (with_measured adds nothing)
            eps = float(np.finfo(self.dt).eps)
            self.a_noise = {k: NOISE_FACTOR * eps * np.abs(self.analytic[k]) for k in self.live}
            self._measured = {}
        else:  # one float64 backward deciding as this run did: what this run differs from it by is its rounding
            exact = self._float64_gradients(sym, reqs)
            eps = float(np.finfo(self.dt).eps)
            floor = {k: NOISE_FACTOR * eps * np.abs(exact[k]) for k in self.live}
            self.a_noise = with_measured(floor, exact, self.analytic, self.dt)
            # kept for confirm_noise in float32: an estimate of rounding needs no more digits, and every such
            # dict of a whole-model check holds one copy of every parameter (VGG-11: 133M, 1 GB in float64)
            self._measured = {k: _f32(2.0 * np.abs(self.analytic[k] - exact[k])) for k in self.live}

    def float64_agrees(self, k, indices) -> np.ndarray:
        """Per element of ``k`` at ``indices``: whether symgrad's rule run in float64 on float64's own decisions (a
        plain float64 backward at the point) matches the float64 central difference of the unpinned function,
        taken at a hundredth of the default step so that it crosses no kink near the point. A wrong rule is wrong
        in float64 too; where the rule holds there, a float32 mismatch on the float32 piece comes from the point:
        on a deep net (ResNet-50 at 64x64: BatchNorm over 2x2 maps) float32 and float64 decide some ReLUs near 0
        differently, and the gradient is that sensitive to those values (measured: one gamma element -73.06 in
        float32 against -73.18 on the pinned float64 reference, while float32 and float64 backwards differ by
        0.012: the measured noise cannot see it). Cost: one float64 forward and backward, 2 partial forwards
        per element."""
        from symgrad.context import cpu

        from .differencer import ElementProbe, default_steps, derivative, sweep
        from .harness import Harness
        from .objectives import projected_objective

        if self._natural is None:
            host = lambda v: np.asarray(v, np.float64) if np.asarray(v).dtype.kind == "f" else v
            bufs = {n: np.zeros(self.point[n].shape) for n in self.live}
            exe = self.sym.bind(
                cpu(),
                {n: host(v) for n, v in self.point.items()},
                args_grad=bufs,
                grad_req={n: ("write" if n in bufs else "null") for n in self.point},
                aux_states={n: host(v) for n, v in self.aux.items()},
            )
            exe.forward(is_train=True)
            exe.backward([None if h is None else np.asarray(h, np.float64) for h in self.heads])
            ref_sym, _, make_objective = projected_objective(self.sym, self.weights64, WHO)
            harness = Harness.bind(ref_sym, self.point, self.aux, ctx=cpu(), dtype=np.float64, is_train=True)
            self._natural = (bufs, harness, make_objective([np.asarray(b, np.float64) for b in harness.base()]))
        bufs, harness, objective = self._natural
        steps = default_steps(np.asarray(self.point[k], np.float64), np.float64, "central") * 1e-2
        probes = [ElementProbe(harness.array(k), ix, k) for ix in indices]
        evaluate = lambda: [objective(harness.outputs([k]))[0]]
        agrees = np.zeros(len(indices), bool)
        for j, (probe, deltas, samples) in enumerate(sweep(probes, (steps[ix] for ix in indices), evaluate, "central")):
            (d,), width = derivative("central", deltas, samples, probe.label)
            g = float(bufs[k][indices[j]])
            agrees[j] = (
                abs(g - float(np.real(d))) <= 1e-6 * max(abs(g), abs(float(np.real(d)))) + 4.0 * self.f_noise / width
            )
        harness.reset_aux()
        return agrees

    def rounding_could_explain(self, k, proj: _Projection, r, random_signs) -> bool:
        """Whether ``proj`` (a failed projection of ``k`` along ``r``) would pass with the measured difference
        from float64 taken uncapped as the noise: only then can emulating the rounding (``confirm_noise``)
        change the verdict. A wrong rule has no measured difference to speak of (measured: a planted 1% bug in
        ResNet-18 at 64x64 spent 17% of its check emulating for nothing)."""
        if self._confirmed:
            return False
        loose = self.bound({k: r}, random_signs, noise={k: np.maximum(self.a_noise[k], self._measured[k])})
        return proj.error <= proj.allowed - self.bound({k: r}, random_signs) + loose

    def confirm_noise(self) -> bool:
        """Excuse measured rounding beyond ``with_measured``'s cap where emulation shows rounding reaches that far.

        The measured noise (twice ``|g_dtype - g_float64|``, the same graph deciding alike) is capped at
        ``MEASURED_CAP`` of the largest gradient of the model, so that a precision bug is never taken for noise.
        Real float32 rounding can exceed the cap where a small gradient comes out of cancelling large terms
        (measured: a depthwise conv weight of MobileNetV2 behind a BatchNorm, 1.2% between float32 and float64
        at one element, 2x the cap). Only when something fails is the rounding emulated
        (``harness.analytic_noise``, ``EMULATION_RUNS`` float64 passes); the measured difference is then
        excused up to the emulated envelope. A wrong rule computes the same wrong value in both dtypes, so it
        has no measured difference to excuse. Returns True when the noise grew (tolerances are retaken)."""
        if self._confirmed:
            return False
        from .harness import analytic_noise

        self._confirmed = True
        _, emulated = analytic_noise(self.sym, self.point, self.aux, self.heads, self.live, self.dt)
        grew = False
        for k in self.live:
            raised = np.maximum(self.a_noise[k], np.minimum(self._measured[k], emulated[k]))
            grew = grew or bool(np.any(raised > self.a_noise[k]))
            self.a_noise[k] = raised
        return grew

    def measure_rounding(self, k) -> bool:
        """float64 under test: the analytic rounding of ``k`` measured (``harness.rescaled_rounding``), where the
        model (``4 eps |g|``) may allow too little. Where the exact gradient is 0 and the objective exactly
        constant in ``k``, the numeric side is exactly 0, and the backward's own rounding fails a correct model.
        Measured: a convolution with zero weights and bias before a BatchNorm whose output is checked (each
        channel constant): the bias gradient 5.4e-15 against a tolerance of 1.3e-17, FAIL in every data kind,
        fast and sample mode. Returns True when the noise grew. Cost: ``EMULATION_RUNS + 1`` float64 forwards and
        backwards, on the failure path of a float64 check only."""
        from .harness import rescaled_rounding

        if self.dt.itemsize < 8 or k in self._rescaled:
            return False
        self._rescaled.add(k)
        measured = rescaled_rounding(lambda c: {k: self._rescaled_gradient(k, c)}, {k: self.analytic[k]})
        if measured is None:
            return False
        raised = np.maximum(self.a_noise[k], measured[k])
        grew = bool(np.any(raised > self.a_noise[k]))
        self.a_noise[k] = raised
        return grew

    def _rescaled_gradient(self, k, c) -> np.ndarray:
        """The gradient of ``k`` by a fresh float64 backward at the point, every head gradient times ``c``."""
        exe = self.sym.bind(
            self.ctx,
            {n: to_device(v, self.ctx) for n, v in self.point.items()},
            args_grad={k: to_device(np.zeros(self.point[k].shape), self.ctx)},
            grad_req={n: ("write" if n == k else "null") for n in self.point},
            aux_states={n: to_device(v.copy(), self.ctx) for n, v in self.aux.items()},
        )
        exe.forward(is_train=True)
        exe.backward([None if h is None else to_device(h * c, self.ctx) for h in self.heads])
        return np.array(to_numpy(exe.grad_dict[k]), np.float64)

    def _float64_gradients(self, sym, reqs) -> dict:
        """The gradients of the same point in float64 with every decision pinned by value to this run's
        (``decisions.pin_decisions``: a ReLU input within rounding of 0 decides as in the dtype under test), so
        they differ from ``analytic`` by the dtype's rounding alone, never by a flipped mask."""
        from symgrad.context import cpu

        from .decisions import pin_decisions

        host = lambda v: v.astype(np.float64) if v.dtype.kind == "f" else v.copy()
        bufs = {k: np.zeros(self.point[k].shape) for k in self.live}
        exe = sym.bind(
            cpu(),
            {k: host(v) for k, v in self.point.items()},
            args_grad=bufs,
            grad_req={k: ("write" if k in bufs else "null") for k in self.point},
            aux_states={k: host(v) for k, v in self.aux.items()},
        )
        pin_decisions(exe, self.record, is_train=True)
        exe.backward([None if h is None else h.astype(np.float64) for h in self.heads])
        return {k: bufs[k] for k in self.live}

    def direction(self, k, j=0):
        """Direction ``j`` of argument ``k``: magnitudes in [0.5, 1.5) (each element moves by about the per-element
        step), signs those of the analytic gradient for ``j == 0`` (*aligned*: an error that follows the gradient,
        a scaled or partly sign-flipped rule, adds up without cancelling) and random otherwise (an error
        unrelated to the gradient). Drawn from a generator of its own (seed, argument, j), so a worker that checks
        some arguments draws the same directions as one process checking all. Returns ``(r, random_signs)``."""
        shape = self.point[k].shape
        rng = np.random.default_rng([self.seed, self.live.index(k) if k in self.live else 0, j])
        flip = rng.random(size=shape) < 0.5
        if j == 0:
            g = self.analytic[k]
            flip = np.where(g != 0, g < 0, flip)
        r = rng.uniform(0.5, 1.5, size=shape)
        np.negative(r, out=r, where=flip)
        return r, j != 0

    def tolerance(self, k, noise=None) -> np.ndarray:
        """The error each element of ``k``'s gradient may have: the checkers' model, ``rtol x (max |g| + |g_i|)``
        (atol scaled to the argument's largest entry, as ``check_numeric_gradient``'s) plus the analytic side's
        rounding noise (``noise``: another noise array instead). Not cached: three elementwise passes cost far
        less than the partial forward each direction takes, and a cache is one more copy of every parameter."""
        tol = np.abs(self.analytic[k])
        top = float(np.max(tol, initial=0.0))
        tol += top
        tol *= self.rtol
        tol += self.a_noise[k] if noise is None else noise
        return tol

    def bound(self, r: dict, random_signs=True, noise=None) -> float:
        """What the elements' own tolerances add up to along ``r`` (see ``project``; ``noise``: ``{name: noise
        array}`` instead of the analytic side's rounding noise)."""
        weighted = [self.tolerance(k, None if noise is None else noise[k]) * np.abs(v) for k, v in r.items()]
        bound = float(sum(np.sum(w) for w in weighted))
        if random_signs:
            bound = min(bound, HOEFFDING_K * math.sqrt(sum(float(np.sum(w * w)) for w in weighted)))
        return bound

    def analytic_along(self, r: dict) -> float:
        return float(sum(np.sum(self.analytic[k] * v) for k, v in r.items()))

    def project(self, r: dict, random_signs=True, refine=True, one_sided=True) -> _Projection:
        """``analytic . r`` against the central difference along ``r`` (arguments of ``r`` move together).

        Allowed: the rounding noise of the difference, ``rtol |numeric|``, and what the elements' own tolerances
        ``t_i`` (``tolerance``) add up to along ``r``: at most ``sum t_i |r_i|`` (any signs); with random signs
        drawn independently of the errors, a sum of ``e_i r_i`` with ``|e_i| <= t_i`` exceeds
        ``HOEFFDING_K sqrt(sum (t_i r_i)^2)`` with probability below ``2 exp(-K^2 / 2)`` (Hoeffding), so the
        smaller of the two bounds is used there. A correct gradient's errors are rounding, far below ``t_i``.
        """
        from .differencer import default_steps, directional

        # the per-element step divided by |r|: all elements move at once, and along the gradient (the aligned
        # direction) they move the objective coherently, so the curvature term of the difference grows with the
        # length of the whole displacement (measured on a BatchNorm net: 4e-4 relative at the per-element step,
        # 1e-7 at this one), while the rounding noise stays far below the projection's tolerance
        scale = max(float(np.max(np.abs(self.point[k]), initial=0.0)) for k in r) if r else 0.0
        length = math.sqrt(sum(float(np.sum(v * v)) for v in r.values()))
        analytic, bound = self.analytic_along(r), self.bound(r, random_signs)
        if one_sided:
            # first a forward difference from the base point's objective (one pass instead of two; DenseNet-121
            # at 224: 215 -> 111 s) at FORWARD_STEP x the scale. It counts only as a pass, and only where its
            # rounding (f_noise / h, 12x the central difference's) is below a tenth of the tolerance, so that no
            # pass leans on the noise allowance; anything else is retaken centrally
            h = FORWARD_STEP * max(scale, 1.0) / max(length, 1.0)
            numeric, width = directional(self.ref, r, h, self.scalar, at_base=self.f0)
            noise = self.f_noise / width
            quick = _Projection(analytic, numeric, bound + self.rtol * abs(numeric) + noise, step=h, noise=noise)
            if quick.ok and noise <= 0.1 * bound:
                return quick
        h = float(default_steps(scale, np.float64, "central")) / max(length, 1.0)
        numeric, width = directional(self.ref, r, h, self.scalar)
        noise = self.f_noise / width
        first = _Projection(analytic, numeric, bound + self.rtol * abs(numeric) + noise, step=h, noise=noise)
        return first if first.ok or not refine else self.settle(r, h, numeric, analytic, bound)

    def rest(self, whole: _Projection, part: _Projection, r_rest: dict, random_signs=True) -> _Projection:
        """The projection along ``r - r_part`` without evaluating anything: both sides are linear in the
        direction, so its numeric value is ``whole.numeric - part.numeric`` (with both differences' rounding).
        Used by the bisection, which only ranks halves: the verdict is the whole direction's."""
        numeric, noise = whole.numeric - part.numeric, whole.noise + part.noise
        return _Projection(
            self.analytic_along(r_rest),
            numeric,
            self.bound(r_rest, random_signs) + self.rtol * abs(numeric) + noise,
            noise=noise,
        )

    def settle(self, r: dict, h: float, first: float, analytic: float, bound: float) -> _Projection:
        """Retake a difference along ``r`` that failed at step ``h`` at ``h/4, h/16, ...`` until it settles
        (``differencer.settle``). On most nets the default step makes truncation negligible, but where a layer
        amplifies enormously (a BatchNorm normalising 2 values per channel: batch 2 at 1x1 spatial size, where
        ``x_hat = d / sqrt(d^2 + 4 eps)`` turns on a scale of ``sqrt(eps)``) the truncation at the default step
        can exceed the gradient itself (measured: 3.0e7 against 2.4e8 on a ResNet-18 conv weight, converging
        to the analytic value as the step shrinks). A projection that does not settle has ``settled=False``:
        the caller reports "unsettled", never FAIL."""
        from .differencer import directional, settle

        got = settle(
            lambda step: directional(self.ref, r, step, self.scalar),
            h,
            first,
            analytic,
            bound,
            self.f_noise,
            self.rtol,
            MAX_REFINE,
        )
        return _Projection(analytic, got.value, got.allowed, settled=got.settled, step=got.step, noise=got.noise)

    def elements(self, k, indices):
        """``(numeric, widths)`` of ``k``'s elements ``indices`` by central differences on the reference."""
        from .differencer import ElementProbe, default_steps, derivative, sweep

        steps = default_steps(self.point[k].astype(np.float64), np.float64, "central")
        arr = self.ref.array(k)
        probes = [ElementProbe(arr, ix, k) for ix in indices]
        evaluate = lambda: [self.scalar(self.ref.outputs([k]))]
        numeric, widths = np.zeros(len(indices)), np.ones(len(indices))
        for j, (probe, deltas, samples) in enumerate(sweep(probes, (steps[ix] for ix in indices), evaluate, "central")):
            (d,), widths[j] = derivative("central", deltas, samples, probe.label)
            numeric[j] = float(np.real(d))
        self.ref.reset_aux()
        return numeric, widths, steps


# == the check ==================================================================================================


class CheckInterrupted(KeyboardInterrupt):
    """SIGTERM while checking (``symgrad check`` turns the signal into this; Ctrl-C is a plain KeyboardInterrupt)."""


class _ModelCheck:
    """The three phases over one ``_Point`` of the whole model (see the module docstring)."""

    def __init__(
        self,
        prep: PreparedModel,
        rows: dict,
        dtype,
        ctx,
        mode,
        samples,
        seed,
        directions,
        progress,
        executor,
        pin,
        locate=True,
    ):
        self.prep, self.rows, self.ctx, self.mode = prep, rows, ctx, mode
        self.samples, self.seed, self.directions = int(samples), int(seed), int(directions)
        self.progress, self.executor, self.pin, self.locate = progress, executor, pin, locate
        self.workers = 1  # local processes (``check_model``'s ``workers``)
        self.dt = np.dtype(dtype)
        self.checked = [n for n, r in rows.items() if r["verdict"] != "skip"]
        self.live = [n for n in self.checked if rows[n]["grad_req"] != "null"]
        self.point: _Point | None = None
        #: the failing direction (its index j) of each failing argument, for ``localise_worst``
        self.failed: dict = {}

    # -- phase 0: the analytic pass and the pinned reference
    def start(self):
        reqs = {n: r["grad_req"] for n, r in self.rows.items()}
        self.point = _Point(
            self.prep.sym,
            self.prep.args,
            self.prep.aux,
            self.live,
            reqs,
            self.dt,
            self.ctx,
            self.seed,
            pin=self.pin,
            emulate=False,
        )
        for k in self.checked:
            if self.rows[k]["grad_req"] == "null":
                self._null(k)

    def _null(self, k):
        row = self.rows[k]
        buf = self.point.exe.grad_dict.get(k)
        written = buf is not None and np.any(np.asarray(to_numpy(buf)) != 0)
        row.update(method="buffer unchanged (grad_req null)", checked=row["size"], verdict="pass")
        if written:
            row.update(verdict="FAIL", diagnosis="the gradient buffer was written although grad_req is 'null'")

    # -- phase 1 (fast): directions; phase 2: localisation
    def _judged_again(self, k, taken):
        """``(taken, failing)``: the directions of ``k`` taken, projected again with the point's current noise."""
        taken = [(self.point.project({k: r}, rs), r, rs, j) for _, r, rs, j in taken]
        return taken, _settled_failures(taken)

    def fast(self, k, bar):
        row = self.rows[k]
        taken = []
        for j in range(self.directions):
            r, random_signs = self.point.direction(k, j)
            taken.append((self.point.project({k: r}, random_signs), r, random_signs, j))
            if taken[-1][0].settled and not taken[-1][0].ok:  # failed: the other directions cannot undo it
                bar.update(self.directions - j)
                break
            bar.update()
        failing = _settled_failures(taken)
        if (
            failing
            and any(self.point.rounding_could_explain(k, *t[:3]) for t in failing)
            and self.point.confirm_noise()
        ):  # the rounding was under-estimated: judge again
            taken, failing = self._judged_again(k, taken)
        if failing and self.point.measure_rounding(k):  # float64: the rounding measured, judge again
            taken, failing = self._judged_again(k, taken)
        unsettled = [t for t in taken if not t[0].settled]
        proj, r, random_signs, j = max(failing or unsettled or taken, key=lambda t: t[0].ratio)
        verdict = "FAIL" if failing else "unsettled" if unsettled else "pass"
        row.update(
            method=f"directional ({self.directions} directions)",
            checked=row["size"],
            max_error=proj.error,
            worst_ratio=proj.ratio,
            verdict=verdict,
        )
        if verdict == "unsettled":
            row["diagnosis"] = unsettled_diagnosis(proj.step)
        if failing:
            self.failed[k] = j

    def localise_worst(self):
        """Phase 2: localise the ``LOCALISE_MAX`` failing arguments with the largest error ratio (ties in
        argument order); the others keep their directional verdict with a note. Chosen from the rows alone, so
        a spread check localises the same arguments as a serial one."""
        ratio = lambda k: self.rows[k]["worst_ratio"] if math.isfinite(self.rows[k]["worst_ratio"]) else math.inf
        order = sorted(self.failed, key=lambda k: (-ratio(k), self.live.index(k)))
        for n, k in enumerate(order):
            if n < LOCALISE_MAX:
                self._localise(k, *self.point.direction(k, self.failed[k]))
            else:
                self.rows[k]["notes"].append(
                    f"not localised element by element (only the {LOCALISE_MAX} worst of the "
                    f"{len(order)} failing arguments are)"
                )

    def _localise(self, k, r, random_signs):
        """Bisect the failing direction's support to ``LEAF`` elements, then compare those and a random sample
        element by element (the report's worst elements and diagnosis)."""
        row = self.rows[k]
        shape = self.point.point[k].shape
        support = np.arange(int(np.prod(shape)) if shape else 1)
        whole = self.point.project({k: r}, random_signs, refine=False, one_sided=False)
        while len(support) > LEAF:
            halves = (support[: len(support) // 2], support[len(support) // 2 :])
            first = self.point.project(
                {k: _restricted(r, halves[0], shape)}, random_signs, refine=False, one_sided=False
            )
            tests = [first, self.point.rest(whole, first, {k: _restricted(r, halves[1], shape)}, random_signs)]
            # the worse half, also when neither fails alone (an error spread thinly): the leaf holds the worst
            # elements either way, and the element comparison below says which case it is
            pick = int(np.argmax([t.ratio for t in tests]))
            support, whole = halves[pick], tests[pick]
        size = int(np.prod(shape)) if shape else 1
        rng = np.random.default_rng([self.seed, self.live.index(k), 99])
        others = np.setdiff1d(rng.choice(size, min(size, self.samples, LOCALISE_SAMPLES), replace=False), support)
        flat = np.sort(np.concatenate([support, others]))
        indices = [tuple(int(i) for i in np.unravel_index(f, shape)) for f in flat]
        failed_direction = row["verdict"] == "FAIL"
        _compare(
            self.point,
            self.prep.sym,
            self.ctx,
            self.rows[k],
            k,
            indices,
            len(indices) == size,
            localised=failed_direction,
        )
        row["verdict"] = "FAIL"  # the direction failed on the pinned (exact) reference, whatever the sample shows

    # -- sample mode
    def sample(self, k, bar):
        shape = self.point.point[k].shape
        size = int(np.prod(shape)) if shape else 1
        if size <= self.samples:
            indices = [tuple(int(i) for i in ix) for ix in np.ndindex(*shape)]
        else:
            rng = np.random.default_rng([self.seed, self.live.index(k), 98])
            flat = np.sort(rng.choice(size, self.samples, replace=False))
            indices = [tuple(int(i) for i in np.unravel_index(f, shape)) for f in flat]
        _compare(self.point, self.prep.sym, self.ctx, self.rows[k], k, indices, len(indices) == size)
        bar.update()

    # -- phase 3: the faulty node
    def locate_needed(self) -> bool:
        return self.locate and any(r["verdict"] == "FAIL" for r in self.rows.values())

    def attribute(self, share=None) -> list:
        """Check every op node alone at the inputs the analytic forward gave it (its own VJP against its own
        pinned forward, one random direction over all its differentiable inputs); the nodes that fail.
        ``share = (i, n)``: only the nodes at positions ``i, i + n, i + 2n, ...`` (a worker's part)."""
        order, seen = [], {}

        def hook(node, inputs):
            order.append(node)
            seen[node.name] = [np.array(to_numpy(a), copy=True) for a in inputs]
            return None

        assert self.point is not None  # phase 0 (``start``) ran
        self.point.exe.forward_with_hook(hook, is_train=True)
        faults = []
        for position, node in enumerate(order):
            if share is not None and position % share[1] != share[0]:
                continue
            fault = self._check_node(position, node, seen[node.name])
            if fault is not None:
                faults.append(fault)
        return faults

    def _check_node(self, position, node, inputs):
        sym = self.prep.sym.isolate(node.name)
        values = dict(zip(node.input_names(), inputs))
        args = {n: _as64(values[n]) for n in sym.list_arguments()}
        aux = {n: _as64(values[n]) for n in sym.list_auxiliary_states()}
        frozen = set(node.op.no_grad_inputs)
        live = [n for n in args if args[n].dtype.kind == "f" and n not in frozen]
        if not live or getattr(node.op, "is_random", False):
            return None
        point = _Point(
            sym,
            args,
            aux,
            live,
            {n: "write" for n in args},
            self.dt,
            self.ctx,
            self.seed + position,
            pin=self.pin,
            emulate=False,
        )
        whole, bad = None, []
        for j in range(self.directions):
            r = {n: point.direction(n, j)[0] for n in live}
            proj = point.project(r, j != 0)
            if proj.ok:
                continue
            whole = proj if whole is None or proj.ratio > whole.ratio else whole
            bad += [n for n in live if n not in bad and not point.project({n: r[n]}, j != 0).ok]
        if whole is None:
            return None
        bad = bad or live
        row = _row(bad[0], args[bad[0]].shape, "data", "write")
        size = row["size"]
        rng = np.random.default_rng([self.seed, position])
        flat = np.sort(rng.choice(size, min(size, 64), replace=False))
        shape = args[bad[0]].shape
        indices = [tuple(int(i) for i in np.unravel_index(f, shape)) for f in flat]
        _compare(
            point,
            sym,
            self.ctx,
            row,
            bad[0],
            indices,
            len(indices) == size,
            sample_context=lambda: _at_output_context(sym, point, values, aux, bad[0], indices, self),
        )
        return NodeFault(
            position,
            node.name,
            node.op.name,
            node.params.get("op_type") if node.op.name == "Custom" else None,
            bad,
            whole.ratio,
            row["diagnosis"],
        )


def _at_output_context(sym, point, values, aux, k, indices, check) -> dict:
    """``diagnose``'s ``at_output`` for a node's sampled elements: the node's numeric gradient at ``indices`` with
    input ``k`` replaced by the node's output of the same shape (a backward evaluating f'(y) for f'(x))."""
    outs = point.exe.outputs
    names = sym.list_outputs()
    same = [(n, o) for n, o in zip(names, outs) if tuple(o.shape) == tuple(point.point[k].shape)]
    if not same:
        return {}
    name, out = same[0]
    moved = {n: _as64(v) for n, v in values.items() if n in point.point}
    moved[k] = np.asarray(to_numpy(out), np.float64)
    at = _Point(
        sym,
        moved,
        {n: _as64(v) for n, v in aux.items()},
        [k],
        {n: "write" for n in moved},
        check.dt,
        check.ctx,
        point.seed,
        pin=check.pin,
        emulate=False,
    )
    numeric, _, _ = at.elements(k, indices)
    return {"at_output": (name, numeric)}


def _f32(a):
    """``a`` (non-negative) in float32, beyond float32's range as its largest value (a noise estimate only)."""
    return np.minimum(a, float(np.finfo(np.float32).max)).astype(np.float32)


def _as64(v):
    v = np.asarray(v)
    return v.astype(np.float64) if v.dtype.kind == "f" else v


def _compare(p, sym, ctx, row, k, indices, whole, localised=False, sample_context=None):
    """Per-element differences of ``indices`` against the analytic gradient, under the checkers' tolerance
    model; mismatches at kinks of unpinned (opaque) ops whose analytic value is a subgradient are left out.
    ``sample_context``: a callable giving ``diagnose``'s context for a sample (``indices`` not the whole
    argument), called on failure only."""
    e = _Elements.measure(p, k, indices)
    # each failing difference is retaken at shorter steps (``_Point.settle``); after a failed direction the
    # verdict is taken (on the pinned reference) and the elements only show where and how, so neither the step
    # refinement nor the kink test is spent on them
    if not localised:
        _confirm_rounding(p, k, e)
        _settle_failing(p, k, indices, e)
    _leave_out(p, row, k, indices, e, localised)
    _record(row, indices, e, whole, localised)
    if _judge(p, sym, ctx, row, k, e, whole, sample_context):
        _no_verdict(p, row, e, localised)


@dataclass
class _Elements:
    """``_compare``'s elements, as flat arrays in the order of its ``indices``, refined phase by phase."""

    pick: tuple
    analytic: np.ndarray
    numeric: np.ndarray
    #: the per-element steps over the whole argument (``default_steps``)
    steps: np.ndarray
    a_noise: np.ndarray | None
    n_noise: np.ndarray
    atol: float
    rtol: float
    err: np.ndarray | None = None
    allowed: np.ndarray | None = None
    bad: np.ndarray | None = None
    #: left out: the difference did not settle (``unsettled``), or no verdict in the dtype under test
    #: (``imprecise``); ``exclude``: every element left out, the kinks included
    unsettled: np.ndarray | None = None
    imprecise: np.ndarray | None = None
    exclude: np.ndarray | None = None

    @classmethod
    def measure(cls, p, k, indices) -> _Elements:
        """The central differences of ``indices`` on the reference and their first judgement."""
        from .tolerance import scaled_atol

        numeric, widths, steps = p.elements(k, indices)
        pick = tuple(np.array(indices).T) if indices and len(indices[0]) else ()
        analytic = p.analytic[k][pick] if pick else p.analytic[k].reshape(-1)
        e = cls(
            pick,
            analytic,
            numeric,
            steps,
            None,
            np.asarray(p.f_noise / widths, np.float64).copy(),
            scaled_atol(p.rtol, numeric),
            p.rtol,
        )
        e.a_noise = e.picked(p.a_noise[k])
        e.err = np.abs(analytic - numeric)
        e.judge()
        e.unsettled = np.zeros(len(indices), bool)
        return e

    def picked(self, v) -> np.ndarray:
        return np.asarray(v, np.float64)[self.pick] if self.pick else np.asarray(v, np.float64).reshape(-1)

    def judge(self):
        self.allowed = self.atol + self.rtol * np.abs(self.numeric) + self.n_noise + self.a_noise
        self.bad = ~(self.err <= self.allowed)


def _settled_failures(taken):
    """The directions whose projection settled on a failure."""
    return [t for t in taken if t[0].settled and not t[0].ok]


def _confirm_rounding(p, k, e):
    """Judge again where the measured rounding, uncapped, would excuse a mismatch and emulation shows that
    rounding reaches that far (``_Point.confirm_noise``: the rounding was under-estimated)."""
    if not e.bad.any():
        return
    measured = e.picked(p._measured[k]) if not p._confirmed else e.a_noise
    if np.any(e.err[e.bad] <= (e.allowed - e.a_noise + np.maximum(e.a_noise, measured))[e.bad]) and p.confirm_noise():
        e.a_noise = e.picked(p.a_noise[k])
        e.judge()
    if e.bad.any() and p.measure_rounding(k):  # float64: the rounding measured
        e.a_noise = e.picked(p.a_noise[k])
        e.judge()


def _settle_failing(p, k, indices, e):
    """Retake each failing difference at shorter steps until it settles; ``unsettled`` where it does not."""
    for j in np.flatnonzero(e.bad):
        onehot = np.zeros(p.point[k].shape)
        onehot[indices[j]] = 1.0
        proj = p.settle(
            {k: onehot},
            float(e.steps[indices[j]]),
            float(e.numeric[j]),
            float(e.analytic[j]),
            e.atol + float(e.a_noise[j]),
        )
        e.numeric[j], e.allowed[j], e.unsettled[j] = proj.numeric, proj.allowed, not proj.settled
        # rounding + truncation
        e.n_noise[j] = proj.allowed - (e.atol + float(e.a_noise[j]) + p.rtol * abs(proj.numeric))


def _leave_out(p, row, k, indices, e, localised):
    """The mismatches that get no verdict, each kind with a note: unsettled differences, float32 rounding across
    decisions (``_float64_second_opinion``), kinks of unpinned ops (``_at_kinks``). Sets ``err`` and
    ``exclude``."""
    e.err = np.abs(e.analytic - e.numeric)
    bad = ~(e.err <= e.allowed) & ~e.unsettled
    crossed, e.imprecise = (
        (np.zeros_like(bad), np.zeros_like(bad))
        if localised
        else _float64_second_opinion(p, k, indices, bad, e.err, e.allowed)
    )
    bad &= ~e.imprecise
    if crossed.any():
        bad &= ~crossed
        row["notes"].append(
            f"{int(crossed.sum())} element(s) within {ROUNDING_EXPLAINS:g}x the {p.dt.name} tolerance "
            "where the rule agrees with the float64 function on float64's own decisions: "
            f"{p.dt.name} rounding across decisions the two dtypes take differently (left out)"
        )
    if e.unsettled.any():
        row["notes"].append(
            f"{int(e.unsettled.sum())} element(s) unsettled (the difference did not settle as the step shrank) left out"
        )
    e.exclude = e.unsettled | crossed | e.imprecise
    if bad.any() and not localised and (p.pinning is None or not p.pinning.complete):
        e.exclude |= _at_kinks(p, row, k, indices, e, bad)


def _at_kinks(p, row, k, indices, e, bad) -> np.ndarray:
    """The elements of ``bad`` at kinks of unpinned ops whose analytic value is a subgradient (the kink test)."""
    from .numeric import element_kinks

    tol = np.zeros(p.point[k].shape)
    for ix, a in zip(indices, e.allowed):
        tol[ix] = a
    kinks = element_kinks(
        p.ref,
        k,
        p.scalar,
        [indices[j] for j in np.flatnonzero(bad)],
        e.steps,
        p.analytic[k],
        tol,
        f_noise=p.f_noise,
        probe=KINK_PROBE,
    )
    at_kink = np.array([ix in {kk.index for kk in kinks if kk.subgradient} for ix in indices], bool)
    if at_kink.any():
        row["notes"].append(f"{int(at_kink.sum())} element(s) at kinks of unpinned ops left out (kink test)")
    return at_kink


def _record(row, indices, e, whole, localised):
    """The row's method and worst elements kept, its errors unless a failed direction gave them; "pass" until
    ``_judge`` says otherwise."""
    kept = ~e.exclude
    err, allowed = e.err, e.allowed
    ratio = np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1.0), np.where(err > 0, np.inf, 0.0))
    order = np.argsort(-np.where(kept, np.nan_to_num(ratio, nan=np.inf), -1.0))[:5]
    method = "all elements" if whole else f"{len(indices)} elements"
    row.update(
        method=(f"direction failed; bisected, {method} compared" if localised else method),
        checked=len(indices),
        verdict="pass",
        worst=[(list(indices[j]), float(e.analytic[j]), float(e.numeric[j])) for j in order if kept[j]],
    )
    if not localised:
        row.update(max_error=float(np.max(err[kept], initial=0.0)), worst_ratio=float(np.max(ratio[kept], initial=0.0)))


def _judge(p, sym, ctx, row, k, e, whole, sample_context) -> bool:
    """``compare`` on the elements kept; a mismatch FAILs the row with its diagnosis (returns False)."""
    from .compare import compare
    from .mxnet_checks import diagnosis_context
    from .report import GradientCheckError

    shape = p.point[k].shape
    a_c, n_c, an_c, nn_c, ex_c = e.analytic, e.numeric, e.a_noise, e.n_noise, e.exclude
    context = None if whole else sample_context
    if whole and shape:  # the argument's own layout: structural diagnoses (transposed, broadcast) apply
        a_c, n_c, an_c, nn_c, ex_c = (
            v.reshape(shape) for v in (e.analytic, e.numeric, e.a_noise, e.n_noise, e.exclude)
        )

        def context(k=k, noise=an_c):
            return diagnosis_context(sym, ctx, p.point, p.aux, p.heads, k, p.out_shapes, (), noise=noise)

    try:
        compare(
            a_c,
            n_c,
            p.rtol,
            e.atol,
            check=WHO,
            arg_name=k,
            names=("analytic", "numeric"),
            noise=nn_c,
            analytic_noise=an_c,
            noise_dtype=p.dt,
            exclude=ex_c,
            context=context,
            what=f"analytic gradient of {k!r} does not match the numeric gradient",
        )
    except GradientCheckError as failure:
        row.update(
            verdict="FAIL",
            diagnosis=failure.diagnosis or f"{failure.n_mismatch} of {failure.size} compared elements differ",
            mismatches=failure.n_mismatch,
        )
        return False
    return True


def _no_verdict(p, row, e, localised):
    """A passing comparison's caveats: every element unsettled, some imprecise, or (localised) a direction that
    fails though no element does alone."""
    if e.unsettled.all() and not localised:
        row.update(verdict="unsettled", diagnosis=unsettled_diagnosis(float(np.min(e.steps)) / 4.0**MAX_REFINE))
    elif e.imprecise.any():
        imprecise, numeric = e.imprecise, e.numeric
        worst = float(np.max(e.err[imprecise] / np.maximum(np.abs(numeric[imprecise]), 1e-300)))
        row.update(
            verdict="imprecise",
            diagnosis=(
                f"imprecise in {p.dt.name}: {int(imprecise.sum())} element(s) off by up to {100 * worst:.2g}% of their "
                f"value, beyond {ROUNDING_EXPLAINS:g}x the tolerance, where the rule holds in float64 on float64's own "
                f"decisions: {p.dt.name} arithmetic cannot resolve this gradient at this point (rounding amplified, "
                "e.g. by a BatchNorm over a few values); no verdict -- check in float64 to prove it"
            ),
        )
    if localised:
        row["diagnosis"] = (
            "the random directions fail but no compared element does alone: many small errors "
            "add up along the direction"
        )


def _float64_second_opinion(p, k, indices, bad, err, allowed):
    """``(crossed, imprecise)`` masks over the failing elements of a float32 (or float16) check where the rule
    holds in float64 on float64's own decisions (``_Point.float64_agrees``): within ``ROUNDING_EXPLAINS`` x their
    tolerance, float32's rounding across decisions (left out); beyond it, a gradient float32 cannot resolve at this
    point (no verdict: measured on ResNet-50 at 64x64, BatchNorm over 2x2 maps, up to 5% off in float32 at a seed).
    A wrong rule is wrong in float64 too and keeps its FAIL; a float64 check never asks."""
    crossed, imprecise = np.zeros_like(bad), np.zeros_like(bad)
    if p.dt.itemsize >= 8 or not bad.any():
        return crossed, imprecise
    failing = np.flatnonzero(bad)
    holds = failing[p.float64_agrees(k, [indices[j] for j in failing])]
    near = err[holds] <= ROUNDING_EXPLAINS * allowed[holds]
    crossed[holds[near]] = True
    imprecise[holds[~near]] = True
    return crossed, imprecise


def unsettled_diagnosis(step) -> str:
    return (
        f"unsettled: the numeric derivative did not settle as the step shrank (down to {step:.1e}): the model "
        "is too curved along this argument at this point (e.g. a BatchNorm normalising 2 values per channel) "
        "for a difference to judge it; no verdict either way. Check at a larger batch or input size"
    )


def _restricted(r, flat_support, shape):
    out = np.zeros(int(np.prod(shape)) if shape else 1)
    out[flat_support] = r.reshape(-1)[flat_support]
    return out.reshape(shape)


# == the entry point ============================================================================================


def _rows(prep, grad_req) -> dict:
    names = list(prep.args)
    if isinstance(grad_req, str):
        reqs = dict.fromkeys(names, grad_req)
    elif isinstance(grad_req, dict):
        unknown = [k for k in grad_req if k not in names]
        if unknown:
            raise ModelInputError(f"grad_req: {unknown[0]!r} is not an argument of the model (arguments: {few(names)})")
        reqs = {k: grad_req.get(k, "write") for k in names}
    else:
        raise TypeError(f"{WHO}: grad_req must be a string or a dict, got {type(grad_req).__name__}")
    for k, v in reqs.items():
        if v not in ("write", "add", "null"):
            raise ModelInputError(f"grad_req {v!r} for {k!r}: must be write, add or null")
    rows = {n: _row(n, np.shape(prep.args[n]), prep.roles[n][0], reqs[n]) for n in names}
    for n in names:
        if prep.roles[n][0] == "index":
            rows[n].update(
                verdict="skip", grad_req="null", diagnosis="index input (labels/indices): not differentiable"
            )
    return rows


def check_model(
    model: Symbol | str | os.PathLike[str] | PreparedModel,
    params: str
    | os.PathLike[str]
    | Mapping[str, ArrayLike]
    | tuple[Mapping[str, ArrayLike], Mapping[str, ArrayLike]]
    | None = None,
    *,
    shapes: Mapping[str, Sequence[int]] | None = None,
    dtype: DTypeLike = "float32",
    mode: Literal["fast", "sample", "full"] = "fast",
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    grad_req: str | dict[str, str] = "write",
    ctx: Context | None = None,
    executor: Executor | None = None,
    workers: int = 1,
    progress: bool = False,
    directions: int = DIRECTIONS,
    pin: bool = True,
    locate: bool = True,
    raise_on_failure: bool = True,
    keep_partial: bool = False,
) -> ModelCheckResult:
    """Check the gradient of every argument of a whole model numerically, and name the faulty node.

    Method:
        The analytic side: one ``forward(is_train=True)`` in ``dtype`` recording every elementwise decision,
        and one backward with random head weights (uniform in [0.1, 1.1)) into dirty buffers. The numeric side:
        a float64 copy of the graph with those decisions pinned (``pin``), so a difference never crosses a kink
        the forward did not choose; only opaque ``Custom`` ops keep kinks, judged by the kink test.
        ``mode="fast"``: per argument ``directions`` directional derivatives along random ``r`` (the first with
        the signs of the analytic gradient, the others random), each first a one-sided difference, then a
        central one, then shorter steps until it settles; the worst failing arguments (at most 3) are localised
        (bisection of the direction's support down to 8 elements, then per-element differences on those and
        up to 16 random others) and, with ``locate``, every op node is checked alone at its recorded inputs to
        name the faulty ones (``NodeFault``). ``"sample"``: central differences of ``samples`` random elements
        per argument; ``"full"``: ``check_numeric_gradient`` per argument. A check that fails where an unpinned
        node (opaque, or any with ``pin=False``) reads exactly equal values -- several units on a kink at once,
        which no difference can judge from outside the node -- runs again at a point with every float argument
        moved by up to ``MOVE_OFF_TIES`` (1e-3) of its RMS, and says so (``header["moved_off_ties"]``).

    Cost:
        Fast mode, every gradient right: one analytic forward and backward, about ten float64 forwards for
        the noise estimates and one float64 forward and backward measuring the dtype's rounding, then at most 2 x
        ``directions`` partial forwards per argument (1 per direction when the one-sided try passes), however
        large the argument. A localised argument adds 2 partial forwards per bisection level and 2 per element
        compared; ``locate`` adds one small check per op node. Sample mode: 2 partial forwards per sampled
        element; full mode: ``check_numeric_gradient``'s cost per argument. ``workers``/``executor`` share the
        arguments between processes. A failure at exact ties of an unpinned node costs one float64 forward of
        every node output and then the whole check again.

    Tolerance:
        Each element may err by ``t_i = rtol * (max|g| + |g_i|) + analytic noise_i``: ``rtol`` from ``dtype``'s
        table (1e-4 for float32), the ``max|g|`` term being ``check_numeric_gradient``'s scaled atol, the noise
        the measured difference from a float64 backward on the same decisions (capped at 1e-3 of the largest
        gradient; emulated only when something fails). A projection along ``r`` is allowed ``min(sum t_i
        |r_i|, 6 sqrt(sum (t_i r_i)^2)) + rtol * |numeric| + numeric noise`` (the Hoeffding bound only for
        random signs: a false alarm below ``2 exp(-18)``); the one-sided try counts only as a pass, and only
        where its rounding is below a tenth of that. A difference that does not settle as the step shrinks is
        "unsettled", a float32 mismatch where the rule holds in float64 on float64's own decisions is left out
        (up to 4 times its tolerance) or "imprecise" (beyond): neither is FAIL.

    Args:
        model: a ``Symbol``, the path of an MXNet ``*-symbol.json``, or a ``PreparedModel``.
        params: the values: a ``.params``/``.npz`` path, a dict (``arg:NAME``/``aux:NAME`` or plain names) or
            ``(args, aux)``; every input not given gets seeded random values (``random_values``).
        shapes: ``{input: shape}`` for what the params and the file's ``__shape__`` attributes do not give.
        dtype: the dtype under test (the numeric reference is float64).
        mode: ``"fast"`` (default: directions, localisation where one fails), ``"sample"`` (``samples`` random
            elements per argument) or ``"full"`` (every element, ``check_numeric_gradient`` per argument).
        seed: the random values, weights, buffers and directions.
        grad_req: ``"write"``/``"add"``/``"null"`` or a dict per argument (others ``write``).
        ctx: the device of the analytic run (default cpu).
        executor: a ``concurrent.futures.Executor``: the arguments are shared between its workers (each rebuilds
            the same point from the model's JSON), with the same results as without it.
        workers: local processes sharing the arguments (default 1: this one). On Linux they are forked from
            this process once phase 0 is done, so each starts with the analytic pass and the pinned reference
            already built (``symgrad check`` uses every core this way); elsewhere they are fresh interpreters
            that rebuild the point, as with ``executor``. Same results as one process.
        progress: show progress (a bar on a terminal, a line every few seconds otherwise).
        directions: random directions per argument in fast mode.
        pin: evaluate the numeric side on the forward's pieces (``decisions.pinned_symbol``); False: unpinned,
            kinks judged by the kink test alone.
        locate: when an argument fails, check every op node alone and name the faulty ones.
        raise_on_failure: raise ``GradientCheckError`` (its ``result`` attribute holds the result) when a gradient
            fails; False: return the result.
        keep_partial: on Ctrl-C (or ``symgrad check``'s SIGTERM), return the rows checked so far marked partial
            instead of raising ``KeyboardInterrupt``.

    Returns:
        A ``ModelCheckResult``: ``rows`` (one ``ArgResult`` per argument), ``faults`` (``NodeFault``), ``ok``.
    """
    from symgrad.context import cpu

    if mode not in MODES:
        raise ValueError(f"{WHO}: mode must be one of {MODES}, got {mode!r}")
    if samples < 1:
        raise ValueError(f"{WHO}: samples must be at least 1, got {samples}")
    ctx = cpu() if ctx is None else ctx
    workers = _check_workers(workers, executor, ctx)
    prep = model if isinstance(model, PreparedModel) else prepare_model(model, params, shapes, seed)
    settings = (grad_req, dtype, ctx, mode, samples, seed, directions, progress, executor, workers, pin, locate)
    result = _attempt(prep, settings, keep_partial)
    tied = [] if result.ok or result.partial else _tied_unpinned_nodes(prep, result.pinning)
    wrong_at_ties = tie_faults(prep.sym, tied, prep.args, prep.aux, seed) if tied else []
    if wrong_at_ties:  # the failure stands: a tied node is wrong at its ties, which moving off them would hide
        result.header["wrong_at_ties"] = wrong_at_ties
    elif tied:  # the given point cannot be judged from outside those nodes: judge one off the ties (test_utils.ties)
        first = result
        keep = {name for name, (role, _) in prep.roles.items() if role == "index"}
        result = _attempt(dataclasses.replace(prep, args=moved_off_ties(prep.args, keep, seed)), settings, keep_partial)
        result.seconds += first.seconds
        result.header["moved_off_ties"] = {
            "nodes": tied,
            "failed_at_given_point": [r["name"] for r in first.failed],
            "share_of_rms": MOVE_OFF_TIES,
        }
    for verdict, why in (
        (
            "imprecise",
            f"imprecise in {result.dtype}, no verdict (off beyond the tolerance where the rule holds in "
            "float64; check in float64)",
        ),
        ("unsettled", "unsettled, no verdict (the numeric derivative did not settle as the step shrank)"),
    ):
        names = [r["name"] for r in result.rows if r["verdict"] == verdict]
        if names:
            warnings.warn(f"{WHO}: {len(names)} argument(s) {why}: {few(names)}", RuntimeWarning, stacklevel=2)
    if raise_on_failure and not result.ok and not result.partial:
        from .report import GradientCheckError

        first = result.failed[0]
        raise GradientCheckError(
            f"{WHO}: {prep.label}\n" + "\n".join(result.lines()),
            check=WHO,
            arg_name=first["name"],
            diagnosis=first["diagnosis"],
            result=result,
            faults=result.faults,
            # the values and directions are drawn from ``seed``: the report says so (not "no random seed")
            seed=result.seed,
        )
    return result


def _attempt(prep, settings, keep_partial) -> ModelCheckResult:
    """One whole check of ``prep`` (``settings``: ``check_model``'s options, in ``_attempt``'s order)."""
    grad_req, dtype, ctx, mode, samples, seed, directions, progress, executor, workers, pin, locate = settings
    rows = _rows(prep, grad_req)
    check = _ModelCheck(prep, rows, dtype, ctx, mode, samples, seed, directions, progress, executor, pin, locate)
    check.workers = workers
    result = ModelCheckResult(prep.label, np.dtype(dtype).name, mode, int(seed), [rows[n] for n in prep.args])
    result.graph = ModelCheckResult._graph(prep.sym)
    result.header = {"given": prep.given, "ignored_params": prep.ignored, "dropout_as_identity": prep.dropouts}
    np.random.seed(seed)  # the checkers' own draws (full mode's projection weights, dirty buffers)
    t0 = time.perf_counter()
    try:
        _run(check, result)
    except KeyboardInterrupt as stop:
        result.partial = True
        result.interrupted = "SIGTERM" if isinstance(stop, CheckInterrupted) else "SIGINT"
        if not keep_partial:
            raise
    finally:
        result.seconds = time.perf_counter() - t0
        # the executors, plans and harnesses of the check hold reference cycles (generated runners, closures):
        # without a collection here they outlive the call until a full gc, with every parameter copy they hold
        # (measured: +560 MB per ResNet-18 check in a loop; VGG-11's 8.5 GB each was OOM-killed on the third)
        del check
        gc.collect()
    return result


def _tied_unpinned_nodes(prep, pinning) -> list[str]:
    """The unpinned decision nodes (``pinning``'s opaque and unpinnable ones; with ``pin=False``, no pinning,
    every decision node and every ``Custom`` one) reading exactly equal values at ``prep``'s point."""
    if pinning is None:
        wanted = unpinned()
    else:
        names = set(pinning.opaque) | set(pinning.unpinnable)
        wanted = lambda node: node.name in names
    return tied_nodes(prep.sym, prep.args, prep.aux, wanted)


def _run(check, result):
    with contextlib.ExitStack() as stack:
        if check.workers > 1 and (check.mode == "full" or not FORKS):  # fresh workers that rebuild the point
            check.executor = stack.enter_context(process_pool(check.workers, "fork" if FORKS else "spawn"))
        if check.mode == "full":
            _full(check)
            return
        units = len(check.live) * (check.directions if check.mode == "fast" else 1)
        bar = stack.enter_context(
            Progress(units, check.progress, "symgrad check", delay=0.0, lines=True, unit="direction")
        )
        bar.note(f"analytic pass, noise estimates and the pinned reference ({len(check.live)} arguments)")
        # the workers take their phase 0 while this process takes its own (the pinning summary, null rows)
        shares = _spread(check) if check.executor is not None else None
        check.start()
        result.pinning = check.point.pinning
        spread = shares is None and min(check.workers, len(check.live)) > 1
        forked = stack.enter_context(_Forked(check)) if spread else None
        if shares is not None:
            _gather(check, shares, bar)
        elif forked is not None:
            forked.rows(bar)
        else:
            for k in check.live:
                (check.fast if check.mode == "fast" else check.sample)(k, bar)
        if check.failed:
            bar.note(f"{len(check.failed)} argument(s) fail: localising the worst")
            check.localise_worst()
        if check.locate_needed():
            bar.note("an argument fails: checking each node alone")
            result.faults = (
                check.attribute()
                if check.executor is None and forked is None
                else forked.faults()
                if forked is not None
                else _spread_attribution(check)
            )


def _full(check):
    from .mxnet_checks import check_numeric_gradient
    from .report import GradientCheckError

    dt = check.dt
    values = {k: (v.astype(dt) if v.dtype.kind == "f" else v) for k, v in check.prep.args.items()}
    aux_v = {k: v.astype(dt) for k, v in check.prep.aux.items()}
    for n in check.checked:
        row = check.rows[n]
        row.update(method="every element (check_numeric_gradient)", checked=row["size"], verdict="pass")
        try:
            res = check_numeric_gradient(
                check.prep.sym,
                values,
                aux_states=aux_v or None,
                grad_nodes={n: row["grad_req"]},
                dtype=dt.type,
                ctx=check.ctx,
                progress=check.progress,
                executor=check.executor,
            )
        except GradientCheckError as err:
            worst = err.worst[0] if err.worst else None
            row.update(verdict="FAIL", diagnosis=err.diagnosis or _one_line(err), mismatches=err.n_mismatch)
            if worst is not None:
                row.update(max_error=worst[3], worst_ratio=(worst[3] / worst[4]) if worst[4] > 0 else math.inf)
            continue
        if n in res:
            a, num = res[n]
            row["max_error"] = float(np.max(np.abs(a - num), initial=0.0))
        excluded = len(getattr(res, "excluded", {}).get(n, ()))
        if excluded:
            row["notes"].append(f"{excluded} element(s) at non-differentiable points left out")


# == spread over an executor ====================================================================================


def _blob(check) -> bytes:
    import pickle

    text = tojson(check.prep.sym, warn=False)
    return pickle.dumps(
        (
            _custom_sources(text),
            text,
            check.prep.args,
            check.prep.aux,
            check.prep.roles,
            {n: r["grad_req"] for n, r in check.rows.items()},
            check.dt.name,
            check.mode,
            check.samples,
            check.seed,
            check.directions,
            check.pin,
        )
    )


def _custom_sources(text) -> list:
    """``[(module name, file)]`` of the modules that registered the model's ``Custom`` op types: a worker process
    imports them before loading the model (``symgrad check --import ... --workers N``)."""
    from symgrad.operator import get_registered

    types = {n.get("attrs", {}).get("op_type") for n in json.loads(text)["nodes"] if n.get("op") == "Custom"}
    sources = []
    for op_type in sorted(t for t in types if t):
        module = sys.modules.get(get_registered(op_type).__module__)
        entry = (module.__name__, getattr(module, "__file__", None)) if module is not None else None
        if entry is not None and entry not in sources:
            sources.append(entry)
    return sources


def load_module_file(path, name=None):
    """Run the ``.py`` file ``path`` as the module ``name`` (default: the file's name) and return it: the way
    ``symgrad check --import FILE`` and ``check_model``'s workers make a file's ``Custom`` ops known. The file's
    folder is on ``sys.path`` while it runs (its own imports of its neighbours); a file that raises leaves no
    module behind."""
    import importlib.util

    path = os.path.abspath(path)
    name = name or os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path.remove(folder)
    return module


def _import_sources(sources):
    import importlib

    for name, path in sources:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except ImportError:
            if not path:
                raise
            load_module_file(path, name)


#: the checks this worker process rebuilt, by the digest of their blob: phase 0 (the analytic pass, the float64
#: gradients, the pinned reference) costs as much as ~100 partial forwards on DenseNet-121, so a worker takes it
#: once for all its tasks, not once per task (measured: 8 tasks on 2 workers rebuilt it 8 times, 96 s of 12 s)
_REBUILT: dict = {}


def _remote_check(blob):
    """The ``_ModelCheck`` a worker rebuilds from ``_blob``, its phase 0 done (the same point: every draw is
    seeded); built once per worker process and blob (``_REBUILT``: the last one only)."""
    import hashlib

    digest = hashlib.sha256(blob).digest()
    check = _REBUILT.get(digest)
    if check is None:
        _REBUILT.clear()
        check = _REBUILT[digest] = _rebuild(blob)
    return check


def _rebuild(blob):
    import pickle

    from symgrad.context import cpu
    from symgrad.serialization import load_json

    sources, text, args, aux, roles, reqs, dtype, mode, samples, seed, directions, pin = pickle.loads(blob)
    _import_sources(sources)
    prep = PreparedModel(load_json(text), "", args, aux, roles, [])
    check = _ModelCheck(prep, _rows(prep, reqs), dtype, cpu(), mode, samples, seed, directions, False, None, pin)
    check.start()
    return check


def _spread(check) -> list:
    """Share the arguments between the executor's workers: each rebuilds the same ``_Point`` from the model's
    JSON and values (every draw is seeded per argument) and returns its rows, localised where they fail.
    Returns the futures (``_gather`` collects them)."""
    blob = _blob(check)
    n_tasks = min(len(check.live), 8)
    shares = [check.live[i::n_tasks] for i in range(n_tasks)]
    return [check.executor.submit(_remote_rows, blob, share) for share in shares if share]


def _gather(check, futures, bar):
    for future in futures:
        for name, row, j in future.result():
            check.rows[name].update(row)
            if j is not None:
                check.failed[name] = j
            bar.update(check.directions if check.mode == "fast" else 1)


def _remote_rows(blob, names):
    """A worker's share of ``_spread``: the rows of ``names``."""
    check = _remote_check(blob)
    quiet = Progress(0, False)
    for k in names:
        (check.fast if check.mode == "fast" else check.sample)(k, quiet)
    return [(k, dict(check.rows[k]), check.failed.get(k)) for k in names]


def _spread_attribution(check) -> list:
    """``attribute`` with the op nodes shared between the executor's workers (node checks are seeded by their
    position: the faults are the serial run's)."""
    blob = _blob(check)
    n_tasks = 8
    futures = [check.executor.submit(_remote_faults, blob, (i, n_tasks)) for i in range(n_tasks)]
    faults = [f for future in futures for f in future.result()]
    return sorted(faults, key=lambda f: f.position)


def _remote_faults(blob, share):
    return _remote_check(blob).attribute(share)


# == local worker processes =====================================================================================

#: whether ``workers`` are forked after phase 0 (Linux; fork is unsafe with macOS's system libraries and absent on
#: Windows, where the workers are fresh interpreters that rebuild the point, as with an ``executor``)
FORKS = sys.platform.startswith("linux")
#: the thread counts of the BLAS / OpenMP libraries numpy may use, read when a process loads them
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform says, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _check_workers(workers, executor, ctx) -> int:
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"{WHO}: workers must be a whole number of processes, at least 1; got {workers!r}")
    if workers > 1 and executor is not None:
        raise ValueError(f"{WHO}: give workers (local processes) or executor (a pool of your own), not both")
    if workers > 1 and getattr(ctx, "device_type", "cpu") != "cpu":
        raise ValueError(
            f"{WHO}: workers={workers} share the numeric side between processes on the CPU; with "
            f"ctx {ctx} check in one process (workers=1)"
        )
    return int(workers)


def _blas_threads(workers) -> int:
    """Each of ``workers`` processes' share of the cores for BLAS: every worker's BLAS would otherwise start a
    thread per core, and with 2 workers on 2 cores 4 spinning threads made a spread check 1.5-2x *slower* than
    one process, against ~2x faster with one thread each (benchmarks/bench_scale_out.py)."""
    return max(1, usable_cores() // workers)


@contextlib.contextmanager
def process_pool(workers, method="spawn"):
    """A ``ProcessPoolExecutor`` of ``workers`` processes started by ``method``, each with its share of the cores
    for BLAS. A spawned interpreter reads the thread variables when it loads numpy, so they are set in this
    process's environment (unless set already: this process's BLAS is loaded, its threads stay) while the
    workers start; a forked one has numpy loaded and limits its BLAS through threadpoolctl."""
    import concurrent.futures
    import multiprocessing

    share = _blas_threads(workers)
    added = [name for name in THREAD_VARIABLES if name not in os.environ]
    for name in added:
        os.environ[name] = str(share)
    try:
        pool = concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context(method), initializer=_worker_setup, initargs=(share,)
        )
        with _quiet_fork_warning():
            futures = [pool.submit(_ready) for _ in range(workers)]  # start them now, while phase 0 runs here
        with pool:
            yield pool
            for f in futures:
                f.result()
    finally:
        for name in added:
            os.environ.pop(name, None)


def _ready() -> bool:
    return True


def _worker_setup(blas_threads):
    """A worker's start: Ctrl-C is the parent's to handle (it shuts the pool down), and BLAS gets the
    worker's share of the cores (a forked worker inherits the parent's thread pool of every core)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # threadpoolctl is a dependency; a spawned worker has its share from the environment
        return
    threadpool_limits(blas_threads)


@contextlib.contextmanager
def _quiet_fork_warning():
    """Python 3.12+ warns that forking a process with threads may deadlock: here the other threads are the BLAS
    pool, idle between calls, and OpenBLAS quiesces it around a fork (``pthread_atfork``)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*multi-threaded.*fork", category=DeprecationWarning)
        yield


#: the check the forked workers share with the process that forked them (set for the fork, cleared after)
_FORKED_CHECK = None


class _Forked:
    """``check.workers`` processes forked from this one after phase 0: each holds the check as it stands (the
    analytic pass, the float64 gradients, the noise estimates, the pinned reference), so the arguments' partial
    forwards are shared out with nothing rebuilt, pickled or sent but the rows coming back. Phase 0 of the point
    costs as much as ~40 partial forwards on DenseNet-121 (11 s); workers that rebuild it from the JSON (the
    ``executor`` path) spent it again in each process, on cores the parent needs for its own (measured on 2 cores:
    DenseNet-121 99.7 s serial, 76.2 s with 2 spawned workers, 58.8 s forked).

    Arguments are handed out one at a time (a ResNet's first convolution recomputes the whole net, its last
    bias one layer), so a worker that drew cheap ones takes more."""

    def __init__(self, check):
        self.check = check

    def __enter__(self):
        global _FORKED_CHECK
        _FORKED_CHECK = self.check
        try:
            self._pool = process_pool(min(self.check.workers, len(self.check.live)), "fork")
            self.pool = self._pool.__enter__()
        finally:
            _FORKED_CHECK = None  # the children have their copy; this process keeps no second reference
        return self

    def __exit__(self, *exc):
        if exc[0] is not None:  # interrupted or failed: drop what has not started (each running task is one arg)
            self.pool.shutdown(wait=True, cancel_futures=True)
        return self._pool.__exit__(*exc)

    def rows(self, bar):
        import concurrent.futures

        check = self.check
        futures = [self.pool.submit(_forked_row, k) for k in check.live]
        for future in concurrent.futures.as_completed(futures):
            name, row, j = _result(future, check.workers)
            check.rows[name].update(row)
            if j is not None:
                check.failed[name] = j
            bar.update(check.directions if check.mode == "fast" else 1)

    def faults(self) -> list:
        n = 4 * self.check.workers
        futures = [self.pool.submit(_forked_faults, (i, n)) for i in range(n)]
        return sorted((f for future in futures for f in _result(future, self.check.workers)), key=lambda f: f.position)


class WorkerDied(RuntimeError):
    """A worker process of ``check_model(..., workers=N)`` ended without its result (killed: out of memory, a
    signal, a crash inside a custom op's native code)."""


def _result(future, workers):
    from concurrent.futures.process import BrokenProcessPool

    try:
        return future.result()
    except BrokenProcessPool as exc:
        raise WorkerDied(
            f"{WHO}: a worker process ended without its result (killed: out of memory or a signal?) "
            f"while {workers} shared the arguments; each holds a copy of what it changes, so fewer "
            "workers need less memory: workers=1 (symgrad check --workers 1) checks in this process "
            "alone"
        ) from exc


def _forked_row(k):
    check = _FORKED_CHECK
    (check.fast if check.mode == "fast" else check.sample)(k, Progress(0, False))
    return k, dict(check.rows[k]), check.failed.get(k)


def _forked_faults(share):
    return _FORKED_CHECK.attribute(share)
