"""The ``symgrad`` command: check a model's gradients, summarise it, draw it.

    symgrad check MODEL.json [--params FILE] [--shape NAME=D1,D2,...]... [--dtype float32] [--mode sample]
                  [--workers N | --scheduler ADDRESS]
    symgrad check --example lenet
    symgrad info MODEL.json [--shape NAME=D1,D2,...]...
    symgrad plot MODEL.json -o FILE.(svg|png|pdf|dot) [--shape NAME=D1,D2,...]...

``python -m symgrad`` is the same command; without arguments it runs ``symgrad check --example lenet``.
Exit codes: 0 every gradient passes (or info/plot succeeded), 1 some gradient fails, 2 an error (bad
arguments, unreadable files, shapes that do not infer), reported in one line on stderr (``--debug``: with
the traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import time

import numpy as np

__all__ = ["main", "check_model", "ArgResult", "CLIError", "MODES", "DEFAULT_SAMPLES"]

#: ``--mode`` values: directional checks, sampled elements, every element
MODES = ("fast", "sample", "full")
#: elements per argument checked in sample mode (smaller arguments are checked whole)
DEFAULT_SAMPLES = 256
DTYPES = ("float16", "float32", "float64")
GRAD_REQS = ("write", "add", "null")
#: op input slots that hold learned parameters (for the random values: scaled by fan-in)
PARAM_SLOTS = ("weight", "bias", "gamma", "beta", "parameters", "alpha")
WHO = "symgrad check"


class CLIError(Exception):
    """A user error: one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line on stderr (exit 2) instead of the usage and a line."""

    def error(self, message):
        raise CLIError(f"{message} (see '{self.prog} --help')")


# == the model: load, shapes, values ==========================================================================


def load_model(path=None, example=None):
    """``(symbol, label)`` of a JSON file or a shipped example."""
    from . import model_zoo
    from .serialization import load

    if example is not None:
        if example not in model_zoo.EXAMPLES:
            raise CLIError(f"unknown example {example!r}; the shipped examples are {', '.join(model_zoo.EXAMPLES)}")
        path = model_zoo.example_path(example)
        return load(path), f"example {example!r} ({path})"
    if path is None:
        raise CLIError("give a MODEL.json file or --example NAME")
    if not os.path.exists(path):
        raise CLIError(f"{path}: no such file")
    if os.path.isdir(path):
        raise CLIError(f"{path}: is a directory, not a symbol JSON file")
    return load(path), path


def parse_shapes(items) -> dict:
    """``["data=2,3,4", ...]`` -> ``{"data": (2, 3, 4)}``."""
    shapes = {}
    for item in items or ():
        name, sep, dims = item.partition("=")
        name, dims = name.strip(), dims.strip().strip("()[]")
        parts = [d.strip() for d in re.split(r"[,x]", dims)] if dims else []
        try:
            shape = tuple(int(d) for d in parts)
        except ValueError:
            shape = None
        if not sep or not name or shape is None or any(d < 0 for d in shape):
            raise CLIError(f"--shape {item!r}: expected NAME=D1,D2,... with non-negative integer dimensions "
                           "(e.g. --shape data=2,3,32,32)")
        shapes[name] = shape
    return shapes


def parse_grad_req(items, arg_names) -> dict:
    """``["write", "fc1_bias=null"]`` -> ``{argument: req}`` for every argument."""
    default, per_arg = "write", {}
    for item in items or ():
        name, sep, req = item.partition("=")
        if not sep:
            name, req = None, item
        req = req.strip()
        if req not in GRAD_REQS:
            raise CLIError(f"--grad-req {item!r}: the request must be one of {', '.join(GRAD_REQS)}")
        if name is None:
            default = req
        elif name.strip() not in arg_names:
            raise CLIError(f"--grad-req {item!r}: {name.strip()!r} is not an argument of the model "
                           f"(arguments: {_few(arg_names)})")
        else:
            per_arg[name.strip()] = req
    return {n: per_arg.get(n, default) for n in arg_names}


def _few(names, k=8) -> str:
    names = list(names)
    return ", ".join(names[:k]) + (f", ... ({len(names)} in all)" if len(names) > k else "")


def infer_shapes(sym, shapes: dict, known: dict | None = None):
    """``(arg_shapes, out_shapes, aux_shapes)`` as dicts/list from ``--shape`` values (over ``known`` ones,
    e.g. from a params file) and the ``__shape__`` attributes; CLIError naming what stays unknown."""
    from .base import SymgradError

    inputs = sym.list_inputs()
    for name in shapes:
        if name not in inputs:
            raise CLIError(f"--shape {name}=...: {name!r} is not an input of the model (inputs: {_few(inputs)})")
    given = {**(known or {}), **shapes}
    try:
        arg_shapes, out_shapes, aux_shapes = sym.infer_shape_partial(**given)
    except (SymgradError, ValueError) as exc:
        raise CLIError(f"the shapes do not infer: {_one_line(exc)}") from None
    args, aux = sym.list_arguments(), sym.list_auxiliary_states()
    unknown = [n for n, s in zip(args + aux, list(arg_shapes) + list(aux_shapes)) if s is None or 0 in s]
    if unknown or any(s is None for s in out_shapes):
        missing = unknown or ["an output"]
        raise CLIError(f"the shapes do not infer: the shape of {_few(missing, 4)} is unknown; give the input shapes "
                       "with --shape NAME=D1,D2,... (e.g. --shape data=1,3,224,224)")
    return dict(zip(args, arg_shapes)), list(out_shapes), dict(zip(aux, aux_shapes))


def _one_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


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
    for node in sym._nodes():
        if node.op is None:
            continue
        slots = node.input_names()
        in_shapes = {slot: every.get(src.name if src.op is None else src.output_name(idx))
                     for (src, idx), slot in zip(node.inputs, slots)}
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
    """A value from the --params file, refused (CLIError) unless it has the shape the model needs."""
    value = np.asarray(value)
    if tuple(value.shape) != tuple(shape):
        raise CLIError(f"--params: {what}{name!r} has shape {tuple(value.shape)} in the file but the model needs "
                       f"{tuple(shape)}")
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
    from .serialization import load_json

    doc = json.loads(sym.tojson())
    names = []
    for node in doc["nodes"]:
        if node.get("op") == "Dropout":
            node.setdefault("attrs", {})["p"] = "0"
            names.append(node["name"])
    if not names:
        return sym, []
    return load_json(json.dumps(doc)), names


# == the check ==================================================================================================


class ArgResult(dict):
    """One row of the report: ``name``, ``shape``, ``role``, ``grad_req``, ``checked`` (elements compared),
    ``size``, ``method``, ``max_error`` (largest |analytic - numeric|), ``worst_ratio`` (largest error /
    allowed error, < 1 passes), ``verdict`` ("pass", "FAIL", "skip") and ``diagnosis`` (a line or None)."""

    __getattr__ = dict.get


def _row(name, shape, role, req, **kw):
    r = ArgResult(name=name, shape=list(map(int, shape)), size=int(np.prod(shape)) if len(shape) else 1, role=role,
                  grad_req=req, checked=0, method=None, max_error=None, worst_ratio=None, verdict="pass",
                  diagnosis=None, notes=[])
    r.update(kw)
    return r


def check_model(sym, args: dict, aux: dict, *, reqs: dict, roles: dict, dtype="float32", mode="sample",
                samples=DEFAULT_SAMPLES, seed=0, ctx=None, progress=False, executor=None) -> list:
    """Check the gradient of every argument of ``sym`` at ``args``/``aux`` numerically; one ``ArgResult`` each.

    The scalar differentiated is ``check_numeric_gradient``'s: ``sum_k sum(w_k * out_k)`` with random weights,
    a loss head (SoftmaxOutput, MakeLoss) contributing its implied loss. ``mode``:

    - ``"full"``: every element, one ``check_numeric_gradient`` call per argument;
    - ``"sample"``: ``samples`` random elements per argument (all of a smaller one), each by central differences
      of a float64 copy of the graph (``differencer.sweep`` over ``ElementProbe``s on a ``Harness``), compared
      with the analytic gradient in ``dtype`` under the checkers' tolerance model (rtol of ``dtype``, atol
      ``rtol x`` the largest numeric entry, plus the rounding noise of both sides); mismatches at kinks
      (relu at 0) whose analytic value is a subgradient are left out, as ``check_numeric_gradient`` does;
    - ``"fast"``: one directional derivative per argument (``differencer.directional`` along a random unit
      direction) against ``analytic . r``; an argument whose direction fails is then checked element by
      element as in sample mode, which locates and diagnoses the error.

    Index inputs (labels, Embedding indices) are not differentiable and are skipped. ``executor`` (a
    ``concurrent.futures.Executor``): the element differences are spread over its workers (in sample and fast
    mode, the elements of every argument in one ``differencer.Spread`` sweep; in full mode, each
    ``check_numeric_gradient`` call's), with the same results as without it.
    """
    from . import test_utils as tu
    from .context import cpu

    ctx = cpu() if ctx is None else ctx
    dt = np.dtype(dtype)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    names = list(args)
    rows = {n: _row(n, np.shape(args[n]), roles[n][0], reqs[n]) for n in names}
    for n in names:
        if roles[n][0] == "index":
            rows[n].update(verdict="skip", grad_req="null",
                           diagnosis="index input (labels/indices): not differentiable")
    checked = [n for n in names if rows[n]["verdict"] != "skip"]
    np.random.seed(seed)  # the checkers' own draws (projection weights, dirty buffers) come from numpy's global RNG
    if mode == "full":
        _full(sym, args, aux, rows, checked, dt, ctx, progress, tu, executor)
    else:
        _SampledCheck(sym, args, aux, rows, checked, dt, ctx, samples, seed, progress, executor).run(mode)
    return [rows[n] for n in names]


def _full(sym, args, aux, rows, checked, dt, ctx, progress, tu, executor=None):
    values = {k: (v.astype(dt) if v.dtype.kind == "f" else v) for k, v in args.items()}
    aux_v = {k: v.astype(dt) for k, v in aux.items()}
    for n in checked:
        row = rows[n]
        row.update(method="every element (check_numeric_gradient)", checked=row["size"])
        try:
            res = tu.check_numeric_gradient(sym, values, aux_states=aux_v or None, grad_nodes={n: row["grad_req"]},
                                            dtype=dt.type, ctx=ctx, progress=progress, executor=executor)
        except tu.GradientCheckError as err:
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


class _SampledCheck:
    """Sample and fast modes: one analytic pass in the dtype under test, one float64 reference harness."""

    def __init__(self, sym, args, aux, rows, checked, dt, ctx, samples, seed, progress, executor=None):
        from .test_utils.differencer import Recipe, Spread
        from .test_utils.harness import Harness, analytic_noise, assert_deterministic
        from .test_utils.numeric import projected_objective
        from .test_utils.tolerance import get_rtol

        self.sym, self.rows, self.checked, self.dt, self.ctx = sym, rows, checked, dt, ctx
        self.samples, self.progress = int(samples), progress
        self.rng = np.random.default_rng(seed + 1)
        self.rtol = float(get_rtol(None, dt))
        self.point = {k: (v.astype(dt) if v.dtype.kind == "f" else v.copy()) for k, v in args.items()}
        self.aux = {k: v.astype(dt) for k, v in aux.items()}
        out_shapes = sym.infer_shape(**{k: v.shape for k, v in self.point.items()})[1]
        weights = [(np.random.rand(*s) + 0.1).astype(dt) for s in out_shapes]
        weights64 = [w.astype(np.float64) for w in weights]
        ref_sym, loss_heads, make_objective = projected_objective(sym, weights64, WHO)
        heads = [None if loss else w for w, loss in zip(weights, loss_heads)]
        self.heads, self.out_shapes = heads, out_shapes
        # the analytic side: forward(is_train=True) + backward in dtype, into dirty buffers
        initial = {k: np.random.normal(0, 0.01, size=self.point[k].shape).astype(dt) for k in checked}
        bufs = {k: _on(ctx, v.copy()) for k, v in initial.items()}
        exe = sym.bind(ctx, {k: _on(ctx, v.copy()) for k, v in self.point.items()}, args_grad=bufs,
                       grad_req={k: (rows[k]["grad_req"] if k in bufs else "null") for k in self.point},
                       aux_states={k: _on(ctx, v.copy()) for k, v in self.aux.items()})
        assert_deterministic(exe, True, self.aux, WHO, "the forward with is_train=True")
        exe.forward(is_train=True)
        exe.backward([None if h is None else _on(ctx, h) for h in heads])
        self.analytic, self.written = {}, {}
        for k in checked:
            got = np.array(_host(bufs[k]), np.float64)
            req = rows[k]["grad_req"]
            self.analytic[k] = got - initial[k].astype(np.float64) if req == "add" else got
            if req == "null":
                self.written[k] = not np.array_equal(_host(bufs[k]), initial[k])
        live = [k for k in checked if rows[k]["grad_req"] != "null"]
        _, self.a_noise = analytic_noise(sym, self.point, self.aux, heads, live, dt,
                                         actual={k: self.analytic[k] for k in live})
        # the numeric side: a float64 copy of the graph, re-running only what depends on the moved argument
        self.ref = Harness.bind(ref_sym, self.point, self.aux, ctx=ctx, dtype=np.float64, is_train=True)
        objective = make_objective([np.asarray(b, np.float64) for b in self.ref.base()])
        self.scalar = lambda outs: objective(outs)[0]
        self.f_noise = self.ref.evaluation_noise(objective, np.float64)
        # the base of every partial re-run, taken at the point now: left to the first evaluation of a sweep, it
        # would be taken with that sweep's first element already moved, and later arguments would see it
        self.ref.base()
        # with an executor: the workers rebind the reference from the symbol's JSON; _spread_elements fills `done`
        self.spread = None if executor is None else Spread(executor, self.ref, Recipe(sym, weights64, WHO), WHO)
        self.done = {}

    def run(self, mode):
        from .test_utils.differencer import Progress

        live = [k for k in self.checked if self.rows[k]["grad_req"] != "null"]
        for k in self.checked:
            if self.rows[k]["grad_req"] == "null":
                self._null(k)
        if mode == "fast":
            retry = [k for k in live if not self._directional(k)]
        else:
            retry = live
        total = sum(len(self._indices(k)[0]) for k in retry)
        with Progress(total, self.progress, "symgrad check") as bar:
            if self.spread is not None:
                self._spread_elements(retry, bar)
            for k in retry:
                self._elements(k, bar, after_direction=(mode == "fast"))

    def _null(self, k):
        row = self.rows[k]
        row.update(method="buffer unchanged (grad_req null)", checked=row["size"])
        if self.written[k]:
            row.update(verdict="FAIL", diagnosis="the gradient buffer was written although grad_req is 'null'")

    def _indices(self, k):
        """Element indices to check (all of a small argument, else ``samples`` distinct random ones)."""
        shape = self.point[k].shape
        size = int(np.prod(shape)) if shape else 1
        if size <= self.samples:
            return [tuple(int(i) for i in ix) for ix in np.ndindex(*shape)], True
        flat = np.sort(self.rng.choice(size, self.samples, replace=False))
        return [tuple(int(i) for i in np.unravel_index(f, shape)) for f in flat], False

    def _directional(self, k) -> bool:
        from .test_utils.differencer import default_steps, directional
        from .test_utils.tolerance import scaled_atol

        row = self.rows[k]
        shape = self.point[k].shape
        r = self.rng.uniform(0.5, 1.5, size=shape) * np.where(self.rng.random(size=shape) < 0.5, -1.0, 1.0)
        r = r / float(np.sqrt(np.sum(r * r)))
        x = self.point[k].astype(np.float64)
        h = float(default_steps(float(np.max(np.abs(x), initial=0.0)), np.float64, "central"))
        numeric, width = directional(self.ref, {k: r}, h, self.scalar)
        analytic = float(np.sum(self.analytic[k] * r))
        noise = self.f_noise / width + float(np.sum(self.a_noise[k] * np.abs(r)))
        atol = scaled_atol(self.rtol, np.sum(np.abs(self.analytic[k] * r)))
        allowed = atol + self.rtol * abs(numeric) + noise
        err = abs(analytic - numeric)
        row.update(method="directional (1 random direction)", checked=row["size"], max_error=err,
                   worst_ratio=err / allowed if allowed > 0 else (0.0 if err == 0 else math.inf))
        return bool(err <= allowed)

    def _spread_elements(self, names, bar):
        """The element differences of every argument of ``names`` in one sweep over the executor's workers, into
        ``self.done`` (indices drawn in ``_elements``'s order, so the same elements as without an executor)."""
        from .test_utils.differencer import ElementProbe, default_steps, derivative, sweep

        probes, steps, spans = [], [], {}
        for k in names:
            indices, whole = self._indices(k)
            h = default_steps(self.point[k].astype(np.float64), np.float64, "central")
            spans[k] = (len(probes), indices, whole)
            probes += [ElementProbe(self.ref.array(k), ix, k) for ix in indices]
            steps += [h[ix] for ix in indices]
        numeric, widths = np.zeros(len(probes)), np.ones(len(probes))
        for j, (probe, deltas, samples) in enumerate(sweep(probes, steps, None, "central", bar, self.spread)):
            (d,), widths[j] = derivative("central", deltas, samples, probe.label)
            numeric[j] = float(np.real(d))
        for k, (start, indices, whole) in spans.items():
            stop = start + len(indices)
            self.done[k] = (indices, whole, numeric[start:stop], widths[start:stop])

    def _elements(self, k, bar, after_direction=False):
        from .test_utils.compare import compare
        from .test_utils.differencer import ElementProbe, default_steps, derivative, sweep
        from .test_utils.mxnet_checks import diagnosis_context
        from .test_utils.numeric import element_kinks
        from .test_utils.report import GradientCheckError
        from .test_utils.tolerance import scaled_atol

        row = self.rows[k]
        steps = default_steps(self.point[k].astype(np.float64), np.float64, "central")
        if k in self.done:  # spread over the executor already
            indices, whole, numeric, widths = self.done.pop(k)
        else:
            indices, whole = self._indices(k)
            arr = self.ref.array(k)
            probes = [ElementProbe(arr, ix, k) for ix in indices]
            evaluate = lambda: [self.scalar(self.ref.outputs([k]))]
            numeric, widths = np.zeros(len(indices)), np.ones(len(indices))
            for j, (probe, deltas, samples) in enumerate(sweep(probes, (steps[ix] for ix in indices), evaluate,
                                                               "central", bar)):
                (d,), widths[j] = derivative("central", deltas, samples, probe.label)
                numeric[j] = float(np.real(d))
            self.ref.reset_aux()
        pick = tuple(np.array(indices).T) if indices and len(indices[0]) else ()
        analytic = self.analytic[k][pick] if pick else self.analytic[k].reshape(-1)
        a_noise = np.asarray(self.a_noise[k], np.float64)[pick] if pick else np.asarray(self.a_noise[k]).reshape(-1)
        n_noise = self.f_noise / widths
        atol = scaled_atol(self.rtol, numeric)
        err = np.abs(analytic - numeric)
        allowed = atol + self.rtol * np.abs(numeric) + n_noise + a_noise
        bad = ~(err <= allowed)
        exclude = np.zeros(len(indices), bool)
        if bad.any():  # kinks (relu at 0, max ties) whose analytic value is a subgradient are not errors
            tol = np.zeros(self.point[k].shape)
            for ix, a in zip(indices, allowed):
                tol[ix] = a
            kinks = element_kinks(self.ref, k, self.scalar, [indices[j] for j in np.flatnonzero(bad)], steps,
                                  self.analytic[k], tol, f_noise=self.f_noise)
            at_kink = {kk.index for kk in kinks if kk.subgradient}
            exclude = np.array([ix in at_kink for ix in indices], bool)
            if exclude.any():
                row["notes"].append(f"{int(exclude.sum())} element(s) at non-differentiable points left out")
        kept = ~exclude
        method = "all elements" if whole else f"{len(indices)} sampled elements"
        row.update(method=(f"directional failed; {method}" if after_direction else method), checked=len(indices),
                   max_error=float(np.max(err[kept], initial=0.0)),
                   worst_ratio=float(np.max(np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1.0),
                                                     np.where(err > 0, np.inf, 0.0))[kept], initial=0.0)))
        shape = self.point[k].shape
        a_c, n_c, an_c, nn_c, ex_c = analytic, numeric, a_noise, n_noise, exclude
        context = None
        if whole and shape:  # the argument's own layout: structural diagnoses (transposed, broadcast) apply
            a_c, n_c, an_c, nn_c, ex_c = (v.reshape(shape) for v in (analytic, numeric, a_noise, n_noise, exclude))

            def context(k=k, noise=an_c):
                return diagnosis_context(self.sym, self.ctx, self.point, self.aux, self.heads, k, self.out_shapes,
                                         (), noise=noise)
        try:
            compare(a_c, n_c, self.rtol, atol, check=WHO, arg_name=k, names=("analytic", "numeric"),
                    noise=nn_c, analytic_noise=an_c, noise_dtype=self.dt, exclude=ex_c, context=context,
                    what=f"analytic gradient of {k!r} does not match the numeric gradient")
        except GradientCheckError as failure:
            row.update(verdict="FAIL", diagnosis=failure.diagnosis or f"{failure.n_mismatch} of {failure.size} "
                       "elements differ", mismatches=failure.n_mismatch)
            return
        if after_direction:
            row["notes"].append("the random direction failed but every element checked passes (a kink crossed "
                                "along the direction)")


def _on(ctx, host):
    from .test_utils.context import to_device

    return to_device(host, ctx)


def _host(v):
    from .test_utils.context import to_numpy

    return np.asarray(to_numpy(v))


# == output ======================================================================================================


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
        checked = "-" if r["verdict"] == "skip" else (f"dir/{r['size']}" if (r["method"] or "").startswith(
            "directional (") else f"{r['checked']}/{r['size']}")
        notes = "; ".join(([r["diagnosis"]] if r["diagnosis"] else []) + r["notes"])
        body.append((r["name"], shape, r["grad_req"], checked, _fmt_err(r["max_error"]),
                     "-" if r["worst_ratio"] is None else f"{r['worst_ratio']:.2g}", r["verdict"], notes))
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head) - 1)]
    line = lambda cells: "  ".join(f"{c:<{w}}" if i != 4 else f"{c:>{w}}"
                                   for i, (c, w) in enumerate(zip(cells, widths))) + "  " + cells[-1]
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


# == commands ====================================================================================================


def _context(text):
    from .context import cpu, gpu

    t = text.strip().lower()
    if t == "cpu":
        return cpu()
    if t.startswith("gpu"):
        _, _, idx = t.partition(":")
        try:
            return gpu(int(idx or 0))
        except ValueError:
            pass
    raise CLIError(f"--ctx {text!r}: expected cpu or gpu:N")


def _load_params(path):
    from .serialization import load_params

    if not os.path.exists(path):
        raise CLIError(f"--params {path}: no such file")
    return load_params(path)


def _open_executor(args, stack):
    """``(executor, description)`` of ``--workers N`` (N local processes) or ``--scheduler ADDRESS`` (a Dask
    cluster), closed with ``stack``; ``(None, None)``: serial."""
    if args.scheduler is not None:
        try:
            from distributed import Client
        except ImportError:
            raise CLIError("--scheduler needs Dask's distributed package: pip install 'dask[distributed]'") from None
        client = stack.enter_context(Client(args.scheduler))
        return client.get_executor(), f"Dask scheduler {args.scheduler}"
    if args.workers is None or args.workers == 1:
        return None, None
    if args.workers < 1:
        raise CLIError(f"--workers {args.workers}: must be at least 1")
    import concurrent.futures
    import multiprocessing

    _share_threads(args.workers, stack)
    # fresh interpreters: nothing but the pickled symbol JSON and arrays is shared with the workers
    pool = concurrent.futures.ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn"))
    from .test_utils.differencer import preload

    for _ in range(args.workers):  # the workers start (and import numpy, symgrad) during the analytic pass
        pool.submit(preload)
    return stack.enter_context(pool), f"{args.workers} worker processes"


#: the thread counts of the BLAS / OpenMP libraries numpy may use, read when a process loads them
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _share_threads(workers, stack):
    """Give each worker process its share of the cores for BLAS (unless the variables are set already).

    Every worker's BLAS would otherwise start a thread per core: with 2 workers on 2 cores, 4 spinning threads
    made the spread check 1.5-2x *slower* than one process, against ~2-4x faster with one thread each
    (benchmarks/bench_scale_out.py). The variables are read when a worker loads numpy, so they are set in this
    process's environment, which the workers inherit (this process's BLAS is loaded already), and restored
    when the pool closes."""
    share = str(max(1, (os.cpu_count() or 1) // workers))
    for name in THREAD_VARIABLES:
        if name not in os.environ:
            os.environ[name] = share
            stack.callback(os.environ.pop, name, None)


def cmd_check(args) -> int:
    with contextlib.ExitStack() as stack:
        return _check(args, stack)


def _check(args, stack) -> int:
    from . import model_zoo

    if args.model is not None and args.example is not None:
        raise CLIError("give either MODEL.json or --example NAME, not both")
    if args.model is None and args.example is None:
        args.example = model_zoo.DEFAULT_EXAMPLE
    ctx = _context(args.ctx)
    if args.samples is None:
        args.samples = model_zoo.EXAMPLE_SAMPLES.get(args.example, DEFAULT_SAMPLES)
    if args.samples < 1:
        raise CLIError(f"--samples {args.samples}: must be at least 1")
    sym, label = load_model(args.model, args.example)
    given_args, given_aux = _load_params(args.params) if args.params else ({}, {})
    known = {k: v.shape for k, v in {**given_args, **given_aux}.items() if k in sym.list_inputs()}
    ignored = sorted(k for k in {**given_args, **given_aux} if k not in sym.list_inputs())
    arg_shapes, out_shapes, aux_shapes = infer_shapes(sym, parse_shapes(args.shape), known)
    reqs = parse_grad_req(args.grad_req, list(arg_shapes))
    sym, dropouts = deterministic_dropout(sym)
    values, aux, roles = random_values(sym, arg_shapes, aux_shapes, given_args, given_aux, args.seed)
    executor, spread_text = _open_executor(args, stack)
    mode_text = {"fast": "fast (one directional derivative per argument)",
                 "sample": f"sample (up to {args.samples} random elements per argument, smaller arguments whole)",
                 "full": "full (every element)"}[args.mode]
    header = {"model": label, "dtype": args.dtype, "mode": args.mode, "seed": args.seed, "ctx": str(ctx),
              "samples": args.samples if args.mode == "sample" else None,
              "given": sorted(k for k in {**given_args, **given_aux} if k in sym.list_inputs()),
              "ignored_params": ignored, "dropout_as_identity": dropouts, "executor": spread_text}
    if not args.json:
        n_aux = len(aux_shapes)
        print(f"symgrad check: {label}")
        print(f"  {len(arg_shapes)} arguments, {n_aux} auxiliary states, outputs "
              f"{', '.join('x'.join(map(str, s)) for s in out_shapes)}; dtype {args.dtype}; mode {mode_text}; "
              f"seed {args.seed}; {ctx}")
        random_names = [k for k in arg_shapes if k not in given_args] + [k for k in aux_shapes if k not in given_aux]
        if random_names:
            print(f"  random values (seed {args.seed}) for {len(random_names)} of {len(arg_shapes) + n_aux} inputs"
                  + (f" ({len(given_args) + len(given_aux) - len(ignored)} from {args.params})" if args.params else ""))
        if ignored:
            print(f"  note: {len(ignored)} entries of {args.params} are not inputs of the model: {_few(ignored, 4)}")
        if dropouts:
            print(f"  note: Dropout checked as identity (p=0) for a deterministic forward: {_few(dropouts, 4)}")
        if spread_text:
            print(f"  differences spread over {spread_text}")
        sys.stdout.flush()
    progress = (sys.stderr.isatty() and not args.json) if args.progress is None else args.progress
    t0 = time.perf_counter()
    rows = check_model(sym, values, aux, reqs=reqs, roles=roles, dtype=args.dtype, mode=args.mode,
                       samples=args.samples, seed=args.seed, ctx=ctx, progress=progress, executor=executor)
    seconds = time.perf_counter() - t0
    n_fail = sum(r["verdict"] == "FAIL" for r in rows)
    n_pass = sum(r["verdict"] == "pass" for r in rows)
    n_skip = sum(r["verdict"] == "skip" for r in rows)
    ok = n_fail == 0
    if args.json:
        doc = {**header, "arguments": rows, "passed": n_pass, "failed": n_fail, "skipped": n_skip, "ok": ok,
               "seconds": round(seconds, 3)}
        print(json.dumps(_json_safe(doc), indent=2))
    else:
        print()
        for line in render_table(rows):
            print(line)
        print()
        skipped = f", {n_skip} skipped (not differentiable)" if n_skip else ""
        verdict = "every gradient passes" if ok else f"{n_fail} gradient{'s' if n_fail != 1 else ''} FAIL"
        print(f"{verdict}: {n_pass} passed, {n_fail} failed{skipped} in {seconds:.1f} s")
    return 0 if ok else 1


def cmd_info(args) -> int:
    from . import viz

    sym, _ = load_model(args.model, args.example)
    shape = _shape_dict(sym, parse_shapes(args.shape))
    if args.line_length < 40:
        raise CLIError(f"--line-length {args.line_length}: must be at least 40")
    viz.print_summary(sym, shape=shape, line_length=args.line_length)
    if shape is None:
        print("(shapes unknown: give the input shapes with --shape NAME=D1,D2,... for output shapes and every "
              "parameter count)")
    return 0


def _shape_dict(sym, shapes):
    """The input shapes for info/plot: the ``--shape`` values (which must make every shape infer), ``{}``
    when the file's ``__shape__`` attributes alone do, None when no shape is given and they do not (the
    table/drawing then goes without shapes)."""
    try:
        infer_shapes(sym, shapes)  # CLIError: an unknown input, or shapes that do not infer
    except CLIError:
        if shapes:
            raise
        return None
    return dict(shapes)


def cmd_plot(args) -> int:
    from . import viz

    out = args.output
    base, ext = os.path.splitext(out)
    fmt = ext.lower().lstrip(".")
    if fmt not in viz.FORMATS:
        raise CLIError(f"-o {out}: the file name must end in one of {', '.join('.' + f for f in viz.FORMATS)}")
    sym, _ = load_model(args.model, args.example)
    shape = _shape_dict(sym, parse_shapes(args.shape))
    title = args.title or os.path.basename(base)
    try:
        dot = viz.plot_network(sym, shape=shape, title=title, save_format=fmt, hide_weights=not args.show_weights)
    except ImportError as exc:
        raise CLIError(str(exc)) from None
    try:
        viz.render(dot, out)
    except (RuntimeError, OSError) as exc:
        raise CLIError(_one_line(exc)) from None
    print(f"wrote {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__, model_zoo

    parser = _Parser(prog="symgrad", description="Check a model's gradients numerically, summarise it, draw it.",
                     epilog="Without a command, runs 'symgrad check --example "
                            f"{model_zoo.DEFAULT_EXAMPLE}'. Exit codes: 0 ok, 1 a gradient fails, 2 an error.")
    parser.add_argument("--version", action="version", version=f"symgrad {__version__}",
                        help="print the version and exit")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def common(p, what):
        p.add_argument("model", nargs="?", metavar="MODEL.json", help=f"the symbol JSON file to {what}")
        p.add_argument("--example", metavar="NAME", choices=list(model_zoo.EXAMPLES),
                       help=f"a model shipped with symgrad instead of a file: {', '.join(model_zoo.EXAMPLES)}")
        p.add_argument("--shape", action="append", metavar="NAME=D1,D2,...",
                       help="the shape of an input (repeatable); default: the file's __shape__ attributes")
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show the traceback of an error")

    check = sub.add_parser("check", help="check every argument's gradient against finite differences",
                           description="Load the model, fill missing arguments with seeded random values (labels "
                                       "and indices as valid integers), run forward/backward and check every "
                                       "argument's gradient numerically. Exit code 0 only when every gradient "
                                       "passes.")
    common(check, "check")
    check.add_argument("--params", metavar="FILE", help="an MXNet .params (or .npz) file with argument "
                       "('arg:NAME') and auxiliary ('aux:NAME') values; the others are random")
    check.add_argument("--dtype", choices=DTYPES, default="float32", help="the dtype under test (default float32); "
                       "the numeric reference is always float64")
    check.add_argument("--grad-req", action="append", metavar="REQ|NAME=REQ",
                       help="write (default), add or null, for every argument or for NAME (repeatable)")
    check.add_argument("--mode", choices=MODES, default="sample", help="fast: one directional derivative per "
                       "argument; sample (default): --samples random elements per argument, small arguments "
                       "whole; full: every element")
    check.add_argument("--samples", type=int, default=None, metavar="N",
                       help=f"elements per argument in sample mode (default {DEFAULT_SAMPLES}; "
                       f"{', '.join(f'{k}: {v}' for k, v in model_zoo.EXAMPLE_SAMPLES.items())})")
    check.add_argument("--seed", type=int, default=0, help="seed of the random values and draws (default 0)")
    check.add_argument("--ctx", default="cpu", metavar="cpu|gpu:N", help="device (default cpu)")
    check.add_argument("--json", action="store_true", help="print the report as JSON (for CI)")
    check.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="a progress bar on long work (default: when stderr is a terminal)")
    spread = check.add_mutually_exclusive_group()
    spread.add_argument("--workers", type=int, default=None, metavar="N",
                        help="spread the finite differences over N local worker processes (default 1: none); "
                        "the results are those of one process")
    spread.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="spread the finite differences over a Dask cluster (e.g. tcp://host:8786; needs "
                        "dask[distributed] here and on the workers, with symgrad installed there)")
    check.set_defaults(func=cmd_check)

    info = sub.add_parser("info", help="a layer table: op, output shape, parameter count, totals",
                          description="Print an MXNet print_summary-style table of the model.")
    common(info, "summarise")
    info.add_argument("--line-length", type=int, default=120, metavar="N", help="width of the table (default 120)")
    info.set_defaults(func=cmd_info)

    plot = sub.add_parser("plot", help="draw the graph with graphviz (svg, png, pdf or dot)",
                          description="Draw the graph (MXNet plot_network look). '.dot' needs only the graphviz "
                                      "Python package; the other formats need graphviz's 'dot' program.")
    common(plot, "draw")
    plot.add_argument("-o", "--output", required=True, metavar="FILE", help="FILE.svg, .png, .pdf or .dot")
    plot.add_argument("--title", help="the graph's title (default: the output file's name)")
    plot.add_argument("--show-weights", action="store_true", help="draw weight/bias/BatchNorm parameter inputs")
    plot.set_defaults(func=cmd_plot)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        parser = build_parser()
        if not [a for a in argv if a != "--debug"]:
            argv = argv + ["check"]  # the default: check the default example
        args = parser.parse_args(argv)
        if args.command is None:
            raise CLIError("a command is needed: check, info or plot (see 'symgrad --help')")
        if getattr(args, "model", None) is None and getattr(args, "example", None) is None \
                and args.command != "check":
            raise CLIError(f"{args.command}: give a MODEL.json file or --example NAME")
        return args.func(args)
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0)
    except KeyboardInterrupt:
        print("symgrad: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        print(f"symgrad: error: {_error_text(exc)}", file=sys.stderr)
        return 2


def _error_text(exc) -> str:
    if isinstance(exc, CLIError):
        return str(exc)
    text = _one_line(exc)
    clean = (OSError, ValueError, KeyError, NotImplementedError, ImportError)
    if isinstance(exc, clean) or type(exc).__module__.startswith("symgrad"):
        return text
    return f"{type(exc).__name__}: {text} (run with --debug for the traceback)"
